//! The vocabulary of tools: a tool server as the fleet file declares it (the `[[tool_server]]`
//! table), and the names of its tools in a persona's allowlist.
//!
//! ```toml
//! [[tool_server]]
//! name = "git"                      # its tools are named git.<tool>
//! command = "python3"               # a stdio child; or url = "http://127.0.0.1:3001/mcp"
//! args = ["-m", "mcp_server_git", "--repository", "."]
//! env = ["HOME"]                    # variables passed through; nothing else of the fleet's
//! timeout_secs = 30
//! max_output_kb = 64
//! approval = "never"                # "never" | "always" | "writes"
//! ```
//!
//! [`ToolServerSpec`] is the table (serde, unknown keys refused); [`ToolServerSpec::endpoint`]
//! validates it into the [`Endpoint`] the client (`mindfleet-tools`) connects to. The fleet
//! file's parser (`config`) reads the table with the place of each key, builds this type, and
//! names the place of the key an error here is about.

use std::time::Duration;

#[cfg(feature = "actors")]
use ractor::RpcReplyPort;
#[cfg(feature = "actors")]
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::ErrorClass;

/// How long a call may take when the table does not say.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// How much of a result reaches the caller when the table does not say.
pub const DEFAULT_MAX_OUTPUT_KB: usize = 64;

/// One `[[tool_server]]` table of the fleet file, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolServerSpec {
    /// Its tools are named `<name>.<tool>` in persona allowlists, so no dots.
    pub name: String,
    /// A program started as a child speaking MCP on its stdin/stdout. Either this or `url`.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Names of the fleet's environment variables the child gets. Nothing else of the fleet's
    /// environment reaches it, not even `PATH`: `command` itself is found on the fleet's `PATH`,
    /// but a server started through `#!/usr/bin/env node` then finds `node` only in the system's
    /// default directories unless `PATH` is listed here.
    #[serde(default)]
    pub env: Vec<String>,
    /// A streamable HTTP endpoint (`http://` or `https://`). Either this or `command`.
    #[serde(default)]
    pub url: Option<String>,
    /// The longest a call may run before it is cancelled; a call's own deadline may be shorter.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Results longer than this are cut (at a character boundary) and marked as cut.
    #[serde(default = "default_max_output_kb")]
    pub max_output_kb: usize,
    #[serde(default)]
    pub approval: Approval,
}

fn default_timeout_secs() -> u64 {
    DEFAULT_TIMEOUT_SECS
}

fn default_max_output_kb() -> usize {
    DEFAULT_MAX_OUTPUT_KB
}

/// Which calls of a server wait for a person's approval before they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// No call waits.
    Never,
    /// Every call waits.
    Always,
    /// Every call of a tool the server does not annotate `readOnlyHint: true` waits. The default:
    /// an operator who forgot the key still gets to stop anything that may write.
    #[default]
    Writes,
}

/// Where a validated spec connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Stdio { command: String, args: Vec<String>, env: Vec<String> },
    Http { url: String },
}

/// What is wrong with a `[[tool_server]]` table. The fleet file's parser adds where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    #[error("tool server `{name}`: bad name (lowercase letters, digits, `-` and `_`; up to 64)")]
    BadName { name: String },
    #[error("tool server `{name}`: give `command` or `url`, not both")]
    BothEndpoints { name: String },
    #[error("tool server `{name}`: give `command` (a stdio child) or `url` (streamable HTTP)")]
    NoEndpoint { name: String },
    #[error("tool server `{name}`: `url` must start with http:// or https://: {url}")]
    BadUrl { name: String, url: String },
    #[error("tool server `{name}`: `command` is empty")]
    EmptyCommand { name: String },
    #[error("tool server `{name}`: `env` names a bad variable: {var:?}")]
    BadEnvName { name: String, var: String },
    #[error("tool server `{name}`: `args` and `env` are for a `command`, not a `url`")]
    ArgsWithUrl { name: String },
    #[error("tool server `{name}`: `{key}` must be at least 1")]
    Zero { name: String, key: &'static str },
}

impl ToolServerSpec {
    /// A stdio server with the defaults of the table.
    pub fn stdio(name: &str, command: &str, args: &[&str]) -> Self {
        ToolServerSpec {
            name: name.to_owned(),
            command: Some(command.to_owned()),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
            url: None,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            max_output_kb: DEFAULT_MAX_OUTPUT_KB,
            approval: Approval::default(),
        }
    }

    /// A streamable HTTP server with the defaults of the table.
    pub fn http(name: &str, url: &str) -> Self {
        ToolServerSpec { command: None, url: Some(url.to_owned()), ..ToolServerSpec::stdio(name, "", &[]) }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    /// The most bytes of a result that reach the caller.
    pub fn max_output_bytes(&self) -> usize {
        self.max_output_kb.saturating_mul(1024)
    }

    /// Checks the table and says where to connect.
    pub fn endpoint(&self) -> Result<Endpoint, SpecError> {
        let name = || self.name.clone();
        if !valid_server_name(&self.name) {
            return Err(SpecError::BadName { name: name() });
        }
        if self.timeout_secs == 0 {
            return Err(SpecError::Zero { name: name(), key: "timeout_secs" });
        }
        if self.max_output_kb == 0 {
            return Err(SpecError::Zero { name: name(), key: "max_output_kb" });
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => Err(SpecError::BothEndpoints { name: name() }),
            (None, None) => Err(SpecError::NoEndpoint { name: name() }),
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(SpecError::EmptyCommand { name: name() });
                }
                if let Some(var) = self.env.iter().find(|v| !valid_env_name(v)) {
                    return Err(SpecError::BadEnvName { name: name(), var: var.clone() });
                }
                Ok(Endpoint::Stdio { command: command.clone(), args: self.args.clone(), env: self.env.clone() })
            }
            (None, Some(url)) => {
                if !self.args.is_empty() || !self.env.is_empty() {
                    return Err(SpecError::ArgsWithUrl { name: name() });
                }
                let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
                match rest {
                    Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !url.contains(char::is_whitespace) => {
                        Ok(Endpoint::Http { url: url.clone() })
                    }
                    _ => Err(SpecError::BadUrl { name: name(), url: url.clone() }),
                }
            }
        }
    }
}

/// Server names are the first half of `server.tool`, and appear in URLs and dumps.
pub(crate) fn valid_server_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// POSIX portable names: a shell could not set anything else either.
pub(crate) fn valid_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A call of a tool a persona asks the fleet's tool host for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub persona: String,
    /// `server.tool`.
    pub tool: String,
    pub arguments: Value,
    /// The longest the caller waits; the server's `timeout_secs` caps it too.
    pub timeout_ms: u64,
}

/// What a call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// Its text content, cut to the server's `max_output_kb`.
    pub text: String,
    /// Its structured content, when the tool gave one.
    pub structured: Option<Value>,
    /// The text was cut (and says so at its end).
    pub cut: bool,
    /// Bytes of text before any cut.
    pub bytes: usize,
    pub took_ms: u64,
}

/// Why a call failed, as the plan's adjustment reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFailure {
    pub class: ErrorClass,
    pub message: String,
    /// What the model is shown once so it can correct its arguments (an `isError` result's
    /// text, or the field the tool's schema refused).
    pub for_model: Option<String>,
    pub took_ms: u64,
}

/// The fleet's tool servers, their tools and their states (`GET /tools`, the dump).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolsDump {
    pub servers: Vec<ToolServerDump>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolServerDump {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// `connecting`, `ready`, `restarting (attempt N)` or `failed: why`.
    pub state: String,
    /// Times its connection was lost and made again.
    pub restarts: u32,
    /// The MCP revision it speaks, once connected.
    pub protocol: Option<String>,
    /// Its process, when it is a child of the fleet (`command`) and running.
    pub pid: Option<u32>,
    pub approval: Approval,
    pub calls: u64,
    pub failures: u64,
    pub tools: Vec<ToolDump>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDump {
    /// `server.tool`.
    pub name: String,
    pub description: String,
    pub read_only: bool,
    /// A call waits for a person's approval (the server's `approval`, and the tool's
    /// annotations).
    pub needs_approval: bool,
    /// Why it cannot be called now (its description changed since it was pinned), if so.
    pub disabled: Option<String>,
    /// Calls admitted (allowed to the persona, the tool enabled) since the fleet started, and
    /// those that failed, by class (a refusal of the tool's schema among them).
    #[serde(default)]
    pub calls: u64,
    #[serde(default)]
    pub failures: std::collections::BTreeMap<String, u64>,
    /// Its calls' durations over the last 1,024 (nearest rank), in milliseconds.
    #[serde(default)]
    pub latency_p50_ms: f64,
    #[serde(default)]
    pub latency_p99_ms: f64,
}

/// The tool host's messages.
#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum ToolsMsg {
    /// Calls a tool for a persona (refused unless its allowlist has it).
    Call(Box<ToolCall>, RpcReplyPort<Result<ToolResult, ToolFailure>>),
    Dump(RpcReplyPort<ToolsDump>),
    /// Pins the current descriptions of one server's tools (all servers': `None`), enabling the
    /// tools disabled because theirs changed; answers the tools enabled.
    Approve(Option<String>, RpcReplyPort<Result<Vec<String>, String>>),
    /// A server's connection was made (`Ok`) or could not be (`Err`, why).
    Connected(String, Result<(), String>),
    /// A server's connection was lost.
    Lost(String),
    /// Time to connect a server again.
    Retry(String),
}

/// Whether a persona's allowlist (`git.*`, `fs.read_text_file`) lets it call `tool`
/// (`server.tool`). Nothing is allowed by default.
pub fn allowed(allowlist: &[String], tool: &str) -> bool {
    let Some((server, name)) = tool.split_once('.') else { return false };
    allowlist.iter().any(|p| match p.split_once('.') {
        Some((s, "*")) => s == server,
        Some((s, t)) => s == server && t == name,
        None => false,
    })
}

#[cfg(test)]
mod tests;
