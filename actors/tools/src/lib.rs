//! Tool servers for mindfleet: a client of the Model Context Protocol (MCP), on the official
//! Rust SDK (`rmcp`), for the servers a fleet file declares in `[[tool_server]]`.
//!
//! It knows nothing of personas. A [`ToolClient`] connects to one server (a child over stdio,
//! or a URL over streamable HTTP), lists and pins its tools, checks a call's arguments against
//! the tool's schema, calls with a deadline (cancelling on the server when it passes), caps what
//! comes back, and maps every failure to the persona's [`ErrorClass`]. A server that dies is
//! noticed; reconnecting, with a capped exponential backoff, is the caller's to drive.
//!
//! Where it sits (the fleet's actors use it in a later step; see docs/ARCHITECTURE.md):
//!
//! ```text
//! persona actor ── plan step `call_tool` ──> ToolClient (one per [[tool_server]])
//!                                              │  rmcp client: discover / initialize,
//!                                              │  tools/list, tools/call, notifications/cancelled
//!                                              ├──> child process (stdio)      e.g. mcp-server-git
//!                                              └──> streamable HTTP endpoint   e.g. server-everything
//! ```
//!
//! # Failures and their classes
//!
//! [`CallError::class`] gives each failure the class its contingency is keyed by:
//!
//! | Failure | Class | Why |
//! |---|---|---|
//! | tool not in the listing ([`CallError::UnknownTool`]) | missing_resource | what was asked for is not there; a replan can pick another tool |
//! | JSON-RPC -32601 method not found, -32002 resource not found | missing_resource | the same, said by the server |
//! | JSON-RPC -32602 naming an unknown tool | missing_resource | the spec answers an unknown tool with -32602 |
//! | JSON-RPC -32602 otherwise (invalid params) | unknown, with the text | the arguments were wrong; the model reads the text and corrects them |
//! | JSON-RPC -32001 (request timeout) | timeout | the server gave up waiting on something |
//! | other JSON-RPC codes | by their text (below), else unknown | codes past the spec's are the server's own |
//! | `isError: true` result ([`CallError::Failed`]) | by its text: "access denied", "permission denied", EACCES, "outside allowed" -> access_denied; "not found", ENOENT, "does not exist" -> missing_resource; "rate limit", "too many requests" -> rate_limit; "timed out" -> timeout; else unknown | a tool's failure carries no code, only the words of the system under it; the text is kept, capped, for the model to see once |
//! | no answer by the deadline ([`CallError::Timeout`]) | timeout | `notifications/cancelled` is sent first, so the server can stop |
//! | arguments refused by the schema ([`CallError::Refused`]) | unknown, naming the field | nothing was sent; the model can correct the field |
//! | transport lost ([`CallError::TransportLost`]): the child died or stopped reading; an HTTP call's response stream broke and could not be resumed (three tries), or the server cannot be reached | unknown, "transport lost" | whether the call ran is not known; the state shows the loss until a reconnect |
//! | server not connected ([`CallError::NotReady`]) | unknown | a loss noticed earlier, or a reconnect under way |
//! | HTTP 429 / 401, 403 / 404, 410 / 408, 504 | rate_limit / access_denied / missing_resource / timeout | the status says it |
//! | an answer not offered for (a task, a request for input) | unknown | this client declares neither |
//!
//! Order matters in the words: access is tested before absence, so "Access denied - path
//! outside allowed directories" is access_denied, not a missing path.

mod client;
mod error;
pub mod installed;
mod output;
pub mod schema;
mod state;
mod stderr;
mod tool;
mod wire;

#[cfg(test)]
mod servers;

pub use client::{Backoff, ToolClient};
pub use error::{CallError, ConnectError, text_class};
pub use mindfleet_core::record::ErrorClass;
pub use mindfleet_core::tools::{
    Approval, DEFAULT_MAX_OUTPUT_KB, DEFAULT_TIMEOUT_SECS, Endpoint, SpecError, ToolServerSpec,
};
pub use output::{ToolOutput, cap};
pub use state::ServerState;
pub use tool::{PinChanges, Pins, ToolInfo, needs_approval};
