//! The errors of connecting and calling, and the persona's error class of each.
//!
//! The crate doc's table says which failure maps to which class and why; [`CallError::class`]
//! is that table in code.

use std::time::Duration;

use mindfleet_core::record::ErrorClass;
use rmcp::model::ErrorCode;
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

use crate::state::ServerState;
use mindfleet_core::tools::SpecError;

/// Why a call did not return a result. Every variant names the server and the tool.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    #[error("{server}.{tool}: no such tool")]
    UnknownTool { server: String, tool: String },
    /// Refused before sending: the arguments do not fit the tool's input schema.
    #[error("{server}.{tool}: argument `{field}` refused: {reason}")]
    Refused { server: String, tool: String, field: String, reason: String },
    /// No answer by the deadline. `cancelled`: `notifications/cancelled` went out for it.
    #[error("{server}.{tool}: no answer within {after:?}{}", if *cancelled { ", cancelled" } else { "" })]
    Timeout { server: String, tool: String, after: Duration, cancelled: bool },
    /// The server answered with a JSON-RPC error.
    #[error("{server}.{tool}: error {code} from the server: {message}")]
    Rpc { server: String, tool: String, code: i32, message: String },
    /// The tool ran and reported failure (`isError: true`). `text` is what it said, capped: the
    /// caller shows it to the model once, so it can correct its arguments.
    #[error("{server}.{tool}: the tool failed: {text}")]
    Failed { server: String, tool: String, class: ErrorClass, text: String },
    /// The connection ended under the call: the child died, the socket closed.
    #[error("{server}.{tool}: transport lost: {detail}")]
    TransportLost { server: String, tool: String, detail: String },
    /// The server is not connected (lost and not reconnected yet, or never connected).
    #[error("{server}.{tool}: not connected: {state}")]
    NotReady { server: String, tool: String, state: ServerState },
    /// The transport refused the request (an HTTP status, a send that failed).
    #[error("{server}.{tool}: {detail}")]
    Transport { server: String, tool: String, status: Option<u16>, detail: String },
    /// An answer this client does not handle (a task, a request for input).
    #[error("{server}.{tool}: unexpected answer: {detail}")]
    Unexpected { server: String, tool: String, detail: String },
}

impl CallError {
    /// The persona's class of this failure, which picks its contingency.
    pub fn class(&self) -> ErrorClass {
        match self {
            CallError::UnknownTool { .. } => ErrorClass::MissingResource,
            CallError::Refused { .. } => ErrorClass::Unknown,
            CallError::Timeout { .. } => ErrorClass::Timeout,
            CallError::Rpc { code, message, .. } => rpc_class(*code, message),
            CallError::Failed { class, .. } => *class,
            CallError::TransportLost { .. } | CallError::NotReady { .. } => ErrorClass::Unknown,
            CallError::Transport { status, detail, .. } => match status {
                Some(429) => ErrorClass::RateLimit,
                Some(401 | 403) => ErrorClass::AccessDenied,
                Some(404 | 410) => ErrorClass::MissingResource,
                Some(408 | 504) => ErrorClass::Timeout,
                _ => text_class(detail),
            },
            CallError::Unexpected { .. } => ErrorClass::Unknown,
        }
    }

    /// The text to show the model once: what an `isError` result said, or the refusal.
    pub fn model_text(&self) -> Option<&str> {
        match self {
            CallError::Failed { text, .. } => Some(text),
            CallError::Refused { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// JSON-RPC codes first (the spec's and MCP's), the message where the code is generic.
fn rpc_class(code: i32, message: &str) -> ErrorClass {
    match ErrorCode(code) {
        ErrorCode::METHOD_NOT_FOUND | ErrorCode::RESOURCE_NOT_FOUND => ErrorClass::MissingResource,
        // The spec answers an unknown tool with -32602 too, and names it in the message.
        ErrorCode::INVALID_PARAMS => match text_class(message) {
            ErrorClass::MissingResource => ErrorClass::MissingResource,
            _ if message.to_lowercase().contains("unknown tool") => ErrorClass::MissingResource,
            _ => ErrorClass::Unknown,
        },
        // The TypeScript SDK's RequestTimeout.
        ErrorCode(-32001) => ErrorClass::Timeout,
        ErrorCode::PARSE_ERROR | ErrorCode::INVALID_REQUEST => ErrorClass::Unknown,
        _ => text_class(message),
    }
}

/// The class a tool's own words give. An `isError` result has no code, and servers word their
/// failures in the words of the system under them (`EACCES`, "Access denied", "No such file"),
/// so the words are all there is. Access is tested before absence: "access denied - path
/// outside allowed directories" must not read as a missing path.
pub fn text_class(text: &str) -> ErrorClass {
    let t = text.to_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| t.contains(w));
    if any(&["rate limit", "ratelimit", "too many requests", "quota exceeded", "http 429"]) {
        ErrorClass::RateLimit
    } else if any(&[
        "access denied",
        "permission denied",
        "not permitted",
        "forbidden",
        "unauthorized",
        "unauthorised",
        "eacces",
        "eperm",
        "outside allowed",
        "outside the allowed",
        "outside the repository",
        "not allowed",
    ]) {
        ErrorClass::AccessDenied
    } else if any(&[
        "not found",
        "no such file",
        "enoent",
        "does not exist",
        "doesn't exist",
        "unknown tool",
        "did not resolve",
        "no such",
    ]) {
        ErrorClass::MissingResource
    } else if any(&["timed out", "timeout", "etimedout", "deadline exceeded"]) {
        ErrorClass::Timeout
    } else {
        ErrorClass::Unknown
    }
}

/// The HTTP status under a failed send of the streamable HTTP transport, if there was one.
pub(crate) fn http_status(dynamic: &DynamicTransportError) -> Option<u16> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(dynamic.error.as_ref());
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return match http {
                StreamableHttpError::HttpStatus(s) => Some(s.status),
                StreamableHttpError::AuthRequired(_) => Some(401),
                StreamableHttpError::InsufficientScope(_) => Some(403),
                StreamableHttpError::SessionExpired => Some(404),
                StreamableHttpError::Client(c) => c.status().map(|s| s.as_u16()),
                _ => None,
            };
        }
        source = e.source();
    }
    None
}

/// Why a server could not be connected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("tool server `{server}`: cannot start `{command}`: {source}")]
    Spawn {
        server: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The MCP handshake (`server/discover`, or `initialize` for older servers) failed.
    /// `detail` ends with the last line the server wrote to stderr, when it wrote one.
    #[error("tool server `{server}`: handshake failed: {detail}")]
    Handshake { server: String, detail: String },
    #[error("tool server `{server}`: listing its tools failed: {detail}")]
    List { server: String, detail: String },
    #[error("tool server `{server}`: no answer within {after:?} while {during}")]
    Timeout { server: String, after: Duration, during: &'static str },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_of_real_servers_map_to_their_class() {
        let cases = [
            // server-filesystem 2026.8.31, a path outside its root.
            ("Access denied - path outside allowed directories: /etc/passwd not in /tmp/x", ErrorClass::AccessDenied),
            ("ENOENT: no such file or directory, open '/tmp/x/nope.txt'", ErrorClass::MissingResource),
            ("Parent directory does not exist: /tmp/x/a", ErrorClass::MissingResource),
            // mcp-server-git 2026.10.19.
            ("Repository path '/etc' is outside the allowed repository '/tmp/r'", ErrorClass::AccessDenied),
            ("Ref 'nope' did not resolve to an object", ErrorClass::MissingResource),
            ("GitHub API rate limit exceeded", ErrorClass::RateLimit),
            ("operation timed out", ErrorClass::Timeout),
            ("Cannot specify both head and tail parameters simultaneously", ErrorClass::Unknown),
        ];
        for (text, class) in cases {
            assert_eq!(text_class(text), class, "{text}");
        }
    }

    #[test]
    fn json_rpc_codes_map_to_their_class() {
        assert_eq!(rpc_class(-32601, "Method not found"), ErrorClass::MissingResource);
        assert_eq!(rpc_class(-32602, "Unknown tool: git_nope"), ErrorClass::MissingResource);
        assert_eq!(rpc_class(-32602, "Tool nope not found"), ErrorClass::MissingResource);
        assert_eq!(rpc_class(-32602, "Invalid arguments: a: expected number"), ErrorClass::Unknown);
        assert_eq!(rpc_class(-32002, "Resource not found"), ErrorClass::MissingResource);
        assert_eq!(rpc_class(-32001, "Request timed out"), ErrorClass::Timeout);
        assert_eq!(rpc_class(-32603, "Internal error"), ErrorClass::Unknown);
        assert_eq!(rpc_class(-32000, "Too many requests"), ErrorClass::RateLimit);
    }

    #[test]
    fn http_statuses_map_to_their_class() {
        let e = |status| CallError::Transport {
            server: "s".into(),
            tool: "t".into(),
            status: Some(status),
            detail: format!("HTTP {status}"),
        };
        assert_eq!(e(429).class(), ErrorClass::RateLimit);
        assert_eq!(e(403).class(), ErrorClass::AccessDenied);
        assert_eq!(e(404).class(), ErrorClass::MissingResource);
        assert_eq!(e(502).class(), ErrorClass::Unknown);
    }
}
