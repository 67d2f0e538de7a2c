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
/// How long a call waits for approval when the table does not say: an hour.
pub const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 3600;

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
    /// How long a call waits for a person's approval; unanswered, it is denied (access_denied).
    #[serde(default = "default_approval_timeout_secs")]
    pub approval_timeout_secs: u64,
}

fn default_approval_timeout_secs() -> u64 {
    DEFAULT_APPROVAL_TIMEOUT_SECS
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
            approval_timeout_secs: DEFAULT_APPROVAL_TIMEOUT_SECS,
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
    /// The call's id ([`call_id`]): the same call of the same step of the same event has the
    /// same one, across restarts, so its approval and its journal are found again.
    pub id: String,
    /// The event the plan that makes it works on, and its room.
    pub event_id: String,
    pub room: String,
    /// Why the plan calls it (shown to whoever approves it).
    pub why: String,
}

/// What the tool host answers a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToolAnswer {
    /// It ran (or was refused, or answered from the journal of a run before a restart).
    Ran {
        result: Result<ToolResult, ToolFailure>,
        /// What approval it had: `not needed`, `approved by ...`, `denied by ...: why`.
        approval: String,
        /// Answered from the journal of a call made before a restart, not made again.
        replayed: bool,
    },
    /// It waits for a person's approval: ask again once [`ToolsMsg::Await`] answers.
    Parked(ApprovalView),
}

/// A call that needs (or needed) a person's approval, as `mindfleet ai approvals` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalView {
    /// The call's id ([`call_id`]).
    pub id: String,
    pub persona: String,
    pub tool: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
    pub why: String,
    pub event_id: String,
    pub room: String,
    pub requested_us: i64,
    /// When it counts as denied if nobody answers.
    pub deadline_us: i64,
    pub state: ApprovalState,
}

/// What the tool host journals of a call that needs a person's approval or may not run twice
/// (kept in storage, so that neither is lost nor repeated across a crash).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallJournal {
    /// The call, and its approval (`state` approved by `not needed` when it needs none).
    pub call: ApprovalView,
    pub needs_approval: bool,
    pub run: CallRun,
}

/// Whether a journaled call ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallRun {
    NotRun,
    /// Sent to its server at this time, with no answer journaled: after a crash, it is not sent
    /// again (it may have had its effect).
    InFlight {
        since_us: i64,
    },
    /// Answered: a call asked again (the plan replayed after a restart) gets this answer.
    Done {
        result: Result<ToolResult, ToolFailure>,
        at_us: i64,
    },
}

/// What the journal's approval says of a call that needs none.
pub const NOT_NEEDED: &str = "not needed";

/// Where an approval stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum ApprovalState {
    Pending,
    Approved {
        by: String,
    },
    Denied {
        by: String,
        reason: String,
    },
    /// Nobody answered within the server's `approval_timeout_secs`: denied.
    Expired {
        after_secs: u64,
    },
}

impl ApprovalState {
    pub fn is_pending(&self) -> bool {
        matches!(self, ApprovalState::Pending)
    }

    /// How the plan's journal says it: `approved by cli`, `denied by http: not now`.
    pub fn describe(&self) -> String {
        match self {
            ApprovalState::Pending => "pending".into(),
            ApprovalState::Approved { by } => format!("approved by {by}"),
            ApprovalState::Denied { by, reason } if reason.is_empty() => format!("denied by {by}"),
            ApprovalState::Denied { by, reason } => format!("denied by {by}: {reason}"),
            ApprovalState::Expired { after_secs } => format!("no answer within {after_secs} s: denied"),
        }
    }
}

/// The id of the `occurrence`-th call (0 the first) of `tool` with `arguments` (JSON text) in
/// the plans of `persona` for the event `event_id`: 16 hex digits of FNV-1a, the same on every
/// machine and after a restart.
pub fn call_id(persona: &str, event_id: &str, tool: &str, arguments: &str, occurrence: usize) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let occurrence = occurrence.to_string();
    for part in [persona, event_id, tool, arguments, &occurrence] {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
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
    /// The calls that wait for a person's approval, oldest first.
    #[serde(default)]
    pub approvals: Vec<ApprovalView>,
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

/// A tool a persona may call now (allowed to it, enabled, its server connected), as a model is
/// told of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// `server.tool`.
    pub name: String,
    pub description: String,
    /// Its input's JSON Schema.
    pub input_schema: Value,
    pub read_only: bool,
}

/// The tool host's messages.
#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum ToolsMsg {
    /// Calls a tool for a persona (refused unless its allowlist has it; parked when a person
    /// must approve it first).
    Call(Box<ToolCall>, RpcReplyPort<ToolAnswer>),
    /// Answers once the approval of this call id is decided (at once if it is).
    Await(String, RpcReplyPort<ApprovalState>),
    /// The approvals that wait, oldest first.
    Approvals(RpcReplyPort<Vec<ApprovalView>>),
    /// A person's answer to an approval: approve (`true`) or deny, by whom, and why.
    Decide {
        id: String,
        approve: bool,
        by: String,
        reason: String,
        reply: RpcReplyPort<Result<ApprovalView, String>>,
    },
    /// An approval's time is up.
    Expire(String),
    /// A call that waited for its server to be connected waited long enough: (server, call id).
    Unheld(String, String),
    /// A call ran: its journal, with its answer.
    Journaled(Box<CallJournal>),
    Dump(RpcReplyPort<ToolsDump>),
    /// The tools a persona may call now.
    Catalog(String, RpcReplyPort<Vec<ToolSpec>>),
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

/// A procedure of the fleet file that plans tool calls for the rules brain: an event of one of
/// its `domains` (any, when none) whose text has one of the phrases of `when` gets a plan that
/// makes its `calls` first, then answers from what they returned.
///
/// ```toml
/// [[persona.procedure]]
/// name = "last-commit"
/// when = ["last commit", "latest commit"]
/// calls = [{ tool = "git.git_log", arguments = { repo_path = ".", max_count = 1 } }]
/// ```
///
/// A string of `arguments` may hold placeholders the event fills: `{path}` (the first path it
/// names), `{quoted}` (the first text it quotes), `{id}` (the first `#number` or commit hash) and
/// `{text}` (its words, without mentions). A procedure whose placeholders the event cannot fill
/// does not apply to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolProcedure {
    pub name: String,
    pub domains: Vec<String>,
    /// Phrases (lowercase); one of them in the event's text makes the procedure apply.
    pub when: Vec<String>,
    pub calls: Vec<ProcedureCall>,
}

/// One call of a [`ToolProcedure`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcedureCall {
    /// `server.tool`.
    pub tool: String,
    /// A JSON object, its strings with placeholders still in.
    pub arguments: String,
}

/// The placeholders a procedure's arguments may hold.
pub const PLACEHOLDERS: &[&str] = &["{path}", "{quoted}", "{id}", "{text}"];

/// Most `call_tool` steps a plan runs (its replans counted) when the persona does not say.
pub const DEFAULT_MAX_TOOL_STEPS: u32 = 8;
/// Most times a plan makes one call (the same tool with the same arguments) when the persona does
/// not say; the loop breaker ends a plan that would make it again.
pub const DEFAULT_MAX_IDENTICAL_CALLS: u32 = 2;

/// Where `scripts/install-tool-servers.sh` installs the pinned MCP servers:
/// `$MINDFLEET_TOOL_SERVERS`, else `$XDG_CACHE_HOME/mindfleet/tool-servers`, else
/// `~/.cache/mindfleet/tool-servers`, else `./.mindfleet-tool-servers` (the script follows the
/// same rule). Its `bin/` holds a link to each server's program.
pub fn servers_dir() -> std::path::PathBuf {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    if let Some(dir) = var("MINDFLEET_TOOL_SERVERS") {
        return dir;
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return dir.join("mindfleet").join("tool-servers");
    }
    match var("HOME") {
        Some(home) => home.join(".cache").join("mindfleet").join("tool-servers"),
        None => std::path::PathBuf::from(".mindfleet-tool-servers"),
    }
}

/// The program a `[[tool_server]]`'s `command` names: a path when it has a `/`, else the first
/// of that name in a directory of `PATH`, else in [`servers_dir`]`/bin` (the servers the
/// project's script installs). `None` when there is none.
pub fn resolve_command(command: &str) -> Option<std::path::PathBuf> {
    if command.contains('/') {
        let path = std::path::PathBuf::from(command);
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(std::iter::once(servers_dir().join("bin")))
        .map(|dir| dir.join(command))
        .find(|p| p.is_file())
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
