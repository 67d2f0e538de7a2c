//! One connection to one tool server: connect, call, notice its loss, reconnect.
//!
//! [`ToolClient`] is cheap to clone and every method takes `&self`, so a persona's actor can
//! hand a call to a task and go on serving events while it runs. Calls share one connection;
//! [`ToolClient::reconnect`] replaces it, and a call in flight on the old one ends as lost.
//!
//! Nothing here restarts anything by itself: the state says what happened, [`ToolClient::closed`]
//! wakes whoever waits for a loss, and the caller decides when to [`ToolClient::reconnect`] and
//! when to give up (as the fleet's restart policy does for actors).

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
    ProtocolVersion, ServerResult,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;

use crate::error::{CallError, ConnectError, http_status, text_class};
use crate::output::{ToolOutput, cap, render};
use crate::schema::validate;
use crate::state::ServerState;
use crate::stderr::{StderrTail, with_last_line};
use crate::tool::{Pins, ToolInfo, needs_approval};
use crate::wire::{Tapped, Wire};
use mindfleet_core::tools::{Endpoint, SpecError, ToolServerSpec};

/// Times a broken HTTP response stream is resumed (after 250 ms, 500 ms, 1 s) before the call on
/// it ends as lost.
const HTTP_RESUME_TRIES: usize = 3;

/// How long past its deadline a call may take to get its cancellation written.
const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// The wait before each reconnect attempt: `initial`, doubling per failed attempt, at most
/// `max`. No jitter: each server has its own client, so there is no herd to spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(250), max: Duration::from_secs(30) }
    }
}

impl Backoff {
    /// The wait before attempt `attempt` (from 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32 << (attempt - 1).min(20);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// The protocol revisions offered, newest first. 2026-07-28 has no `initialize`: the client
/// asks `server/discover` and sends its identity with every request. A server that does not
/// know `server/discover` (it answers with a JSON-RPC error, as every 2025 server does) gets the
/// `initialize` handshake of 2025-11-25 on the same connection, and whatever revision it answers
/// with (2025-06-18, 2025-03-26, ...) is accepted: rmcp speaks them all. A server that does not
/// answer `server/discover` at all gets the same fallback after rmcp's 10 s probe, within the
/// spec's timeout. With the pinned test servers: mcp-server-git negotiates 2026-07-28, the two
/// npm servers 2025-11-25.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// Who we are to servers. No capabilities: no roots, sampling or elicitation are offered, so a
/// server cannot ask a persona's fleet for anything.
fn client_config() -> ClientConfig {
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("mindfleet", env!("CARGO_PKG_VERSION")))
}

/// An open connection.
struct Conn {
    service: RunningService<RoleClient, ClientConfig>,
    wire: Arc<Wire>,
    pid: Option<u32>,
    protocol: String,
    stderr: Option<Arc<StderrTail>>,
}

impl Conn {
    fn lost_reason(&self) -> String {
        let what = match self.wire.lost_reason() {
            Some(reason) => reason,
            None if self.pid.is_some() => "the server process ended".into(),
            None => "the connection closed".into(),
        };
        with_last_line(format!("transport lost: {what}"), self.stderr.as_deref())
    }
}

/// The tools of the last listing.
#[derive(Default)]
struct Catalog {
    tools: Vec<ToolInfo>,
    pins: Pins,
}

impl Catalog {
    fn new(tools: Vec<ToolInfo>) -> Catalog {
        let pins = Pins::of(&tools);
        Catalog { tools, pins }
    }

    fn get(&self, name: &str) -> Option<&ToolInfo> {
        self.tools.iter().find(|t| t.name == name)
    }
}

struct Cell {
    state: ServerState,
    conn: Option<Arc<Conn>>,
    catalog: Arc<Catalog>,
    /// Reconnect attempts since the last success.
    attempts: u32,
}

struct Shared {
    spec: ToolServerSpec,
    endpoint: Endpoint,
    backoff: Backoff,
    cell: Mutex<Cell>,
    /// One connect or reconnect at a time.
    connecting: tokio::sync::Mutex<()>,
    /// Calls sent and not answered yet.
    in_flight: AtomicUsize,
}

/// Counts a call in flight while it lives.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A client of one tool server.
#[derive(Clone)]
pub struct ToolClient {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ToolClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolClient").field("server", &self.shared.spec.name).field("state", &self.state()).finish()
    }
}

impl ToolClient {
    /// A client for `spec`, not connected yet ([`ServerState::Connecting`]).
    pub fn new(spec: ToolServerSpec, backoff: Backoff) -> Result<ToolClient, SpecError> {
        let endpoint = spec.endpoint()?;
        let cell = Cell { state: ServerState::Connecting, conn: None, catalog: Arc::default(), attempts: 0 };
        Ok(ToolClient {
            shared: Arc::new(Shared {
                spec,
                endpoint,
                backoff,
                cell: Mutex::new(cell),
                connecting: tokio::sync::Mutex::new(()),
                in_flight: AtomicUsize::new(0),
            }),
        })
    }

    /// Connects: starts the child or reaches the URL, agrees on a protocol revision, lists
    /// every tool (following pagination) and pins them. Bounded by the spec's timeout.
    pub async fn connect(&self) -> Result<(), ConnectError> {
        let _one = self.shared.connecting.lock().await;
        self.cell().state = ServerState::Connecting;
        self.open_and_install().await
    }

    /// Drops the connection (if any) and connects again after the backoff of this attempt.
    /// On failure the state is `Failed` and the next call waits longer; success resets it.
    pub async fn reconnect(&self) -> Result<(), ConnectError> {
        let _one = self.shared.connecting.lock().await;
        let (attempt, old) = {
            let mut cell = self.cell();
            cell.attempts += 1;
            cell.state = ServerState::Restarting { attempt: cell.attempts };
            (cell.attempts, cell.conn.take())
        };
        if let Some(old) = old {
            old.service.cancellation_token().cancel();
        }
        tokio::time::sleep(self.shared.backoff.delay(attempt)).await;
        self.open_and_install().await
    }

    /// Closes the connection; the state says so. A later `reconnect` opens it again.
    pub fn shutdown(&self) {
        let mut cell = self.cell();
        if let Some(conn) = cell.conn.take() {
            conn.service.cancellation_token().cancel();
        }
        cell.state = ServerState::Failed { reason: "shut down".into() };
    }

    async fn open_and_install(&self) -> Result<(), ConnectError> {
        match self.open().await {
            Ok((conn, catalog)) => {
                let mut cell = self.cell();
                cell.conn = Some(Arc::new(conn));
                cell.catalog = Arc::new(catalog);
                cell.state = ServerState::Ready;
                cell.attempts = 0;
                Ok(())
            }
            Err(e) => {
                self.cell().state = ServerState::Failed { reason: e.to_string() };
                Err(e)
            }
        }
    }

    async fn open(&self) -> Result<(Conn, Catalog), ConnectError> {
        let spec = &self.shared.spec;
        let server = || spec.name.clone();
        let started = Instant::now();
        let wire = Wire::new();
        let (handshake, pid, stderr) = match &self.shared.endpoint {
            Endpoint::Stdio { command, args, env } => {
                // As the fleet file was checked: on PATH, else among the installed servers.
                let program = mindfleet_core::tools::resolve_command(command).unwrap_or_else(|| command.into());
                let mut cmd = tokio::process::Command::new(program);
                // Killed when dropped, even where no runtime is left to shut it down gracefully:
                // a fleet that stops leaves no server behind.
                cmd.args(args).env_clear().kill_on_drop(true);
                for var in env {
                    if let Some(value) = std::env::var_os(var) {
                        cmd.env(var, value);
                    }
                }
                let mut cmd = CommandWrap::from(cmd);
                cmd.wrap(ProcessGroup::leader());
                let (child, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|source| ConnectError::Spawn { server: server(), command: command.clone(), source })?;
                let pid = child.id();
                let stderr = stderr.map(|s| StderrTail::drain(s, server()));
                let transport = Tapped { inner: child, wire: wire.clone() };
                let handshake =
                    tokio::time::timeout(spec.timeout(), client_config().serve_with_lifecycle(transport, lifecycle()));
                (handshake.await, pid, stderr)
            }
            Endpoint::Http { url } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                // rmcp resumes a broken response stream forever by default, so a call on a dead
                // server would wait out its deadline. A few tries cover a blip; after them the
                // call ends as lost and the connection is judged lost.
                let mut resume = ExponentialBackoff::default();
                resume.max_times = Some(HTTP_RESUME_TRIES);
                resume.base_duration = Duration::from_millis(250);
                config.retry_config = Arc::new(resume);
                let inner = StreamableHttpClientTransport::from_config(config);
                let transport = Tapped { inner, wire: wire.clone() };
                let handshake =
                    tokio::time::timeout(spec.timeout(), client_config().serve_with_lifecycle(transport, lifecycle()));
                (handshake.await, None, None)
            }
        };
        let service = match handshake {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                if let Some(tail) = &stderr {
                    tail.settle(Duration::from_millis(500)).await;
                }
                return Err(ConnectError::Handshake {
                    server: server(),
                    detail: with_last_line(e.to_string(), stderr.as_deref()),
                });
            }
            Err(_) => {
                return Err(ConnectError::Timeout { server: server(), after: spec.timeout(), during: "the handshake" });
            }
        };
        let protocol = service.peer().peer_info().map(|i| i.protocol_version.to_string()).unwrap_or_default();
        let remaining = spec.timeout().saturating_sub(started.elapsed());
        let tools = match tokio::time::timeout(remaining, service.peer().list_all_tools()).await {
            Ok(Ok(tools)) => tools.into_iter().map(ToolInfo::from_rmcp).collect(),
            Ok(Err(e)) => return Err(ConnectError::List { server: server(), detail: e.to_string() }),
            Err(_) => {
                return Err(ConnectError::Timeout { server: server(), after: spec.timeout(), during: "listing tools" });
            }
        };
        tracing::info!(server = spec.name, protocol, pid, "tool server connected");
        Ok((Conn { service, wire, pid, protocol, stderr }, Catalog::new(tools)))
    }

    fn cell(&self) -> MutexGuard<'_, Cell> {
        let mut cell = self.shared.cell.lock().unwrap_or_else(|e| e.into_inner());
        // A loss is noticed by whoever looks first: a call, a dump, a state query.
        if let (ServerState::Ready, Some(conn)) = (&cell.state, &cell.conn)
            && conn.wire.is_closed()
        {
            let reason = conn.lost_reason();
            tracing::warn!(server = self.shared.spec.name, "{reason}");
            cell.state = ServerState::Failed { reason };
            cell.conn = None;
        }
        cell
    }

    pub fn spec(&self) -> &ToolServerSpec {
        &self.shared.spec
    }

    pub fn state(&self) -> ServerState {
        self.cell().state.clone()
    }

    /// The tools of the last listing (empty before the first connection).
    pub fn tools(&self) -> Vec<ToolInfo> {
        self.cell().catalog.tools.clone()
    }

    pub fn tool(&self, name: &str) -> Option<ToolInfo> {
        self.cell().catalog.get(name).cloned()
    }

    /// The pins of the last listing.
    pub fn pins(&self) -> Pins {
        self.cell().catalog.pins.clone()
    }

    /// Whether a call of `tool` waits for approval under the spec's policy; `None` for a tool
    /// the server did not list.
    pub fn needs_approval(&self, tool: &str) -> Option<bool> {
        self.cell().catalog.get(tool).map(|t| needs_approval(t, self.shared.spec.approval))
    }

    /// The protocol revision agreed with the server, while connected.
    pub fn protocol_version(&self) -> Option<String> {
        self.cell().conn.as_ref().map(|c| c.protocol.clone())
    }

    /// The child's process id, for a connected stdio server.
    pub fn pid(&self) -> Option<u32> {
        self.cell().conn.as_ref().and_then(|c| c.pid)
    }

    /// `notifications/cancelled` sent on the current connection.
    pub fn cancellations_sent(&self) -> u64 {
        self.cell().conn.as_ref().map_or(0, |c| c.wire.cancellations())
    }

    /// Calls sent and not answered yet, on any connection.
    pub fn calls_in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Relaxed)
    }

    /// Resolves when the current connection is lost or closed (at once if there is none).
    pub async fn closed(&self) {
        let conn = self.cell().conn.clone();
        if let Some(conn) = conn {
            conn.wire.closed().await;
        }
    }

    /// Lists the tools again and makes that listing the one calls are checked against. Returns
    /// its pins, for the caller to compare with those it approved ([`Pins::compare`]).
    pub async fn relist(&self) -> Result<Pins, CallError> {
        let conn = self.ready("tools/list")?;
        let listed = tokio::time::timeout(self.shared.spec.timeout(), conn.service.peer().list_all_tools()).await;
        let tools = match listed {
            Ok(Ok(tools)) => tools.into_iter().map(ToolInfo::from_rmcp).collect(),
            Ok(Err(e)) => return Err(self.service_error(e, &conn, "tools/list", None)),
            Err(_) => {
                let after = self.shared.spec.timeout();
                return Err(CallError::Timeout {
                    server: self.name(),
                    tool: "tools/list".into(),
                    after,
                    cancelled: false,
                });
            }
        };
        let catalog = Catalog::new(tools);
        let pins = catalog.pins.clone();
        self.cell().catalog = Arc::new(catalog);
        Ok(pins)
    }

    /// Calls `tool` with `arguments` (an object, or null for none), giving up at `deadline` or
    /// after the spec's timeout, whichever is first. The arguments are checked against the
    /// tool's input schema first; a call past its deadline is cancelled on the server.
    pub async fn call(&self, tool: &str, arguments: Value, deadline: Instant) -> Result<ToolOutput, CallError> {
        let conn = self.ready(tool)?;
        let info = self.cell().catalog.get(tool).cloned();
        let Some(info) = info else {
            return Err(CallError::UnknownTool { server: self.name(), tool: tool.to_owned() });
        };
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                let reason = format!("must be an object, not {other}");
                return Err(CallError::Refused {
                    server: self.name(),
                    tool: tool.into(),
                    field: "(arguments)".into(),
                    reason,
                });
            }
        };
        let as_value = Value::Object(arguments);
        if let Err(refusal) = validate(&info.input_schema, &as_value) {
            return Err(CallError::Refused {
                server: self.name(),
                tool: tool.into(),
                field: refusal.field,
                reason: refusal.reason,
            });
        }
        let Value::Object(arguments) = as_value else { unreachable!("built as an object above") };

        let now = Instant::now();
        let deadline = deadline.min(now + self.shared.spec.timeout());
        let budget = deadline.saturating_duration_since(now);
        if budget.is_zero() {
            return Err(CallError::Timeout { server: self.name(), tool: tool.into(), after: budget, cancelled: false });
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments),
        ));
        // rmcp's own timeout sends `notifications/cancelled` before it returns, so a Timeout
        // below has had its cancellation written (the wire records it).
        let handle =
            match conn.service.peer().send_request_with_option(request, PeerRequestOptions::with_timeout(budget)).await
            {
                Ok(handle) => handle,
                Err(e) => return Err(self.service_error(e, &conn, tool, None)),
            };
        let id = handle.id.clone();
        let _counted = InFlight::new(&self.shared.in_flight);
        let answer = tokio::select! {
            biased;
            answer = handle.await_response() => answer,
            () = conn.wire.closed() => Err(ServiceError::TransportClosed),
            // rmcp's timeout waits for the cancellation to be written; a server that stopped
            // reading its stdin would hold that write, and the call, forever.
            () = tokio::time::sleep_until((deadline + CANCEL_GRACE).into()) => {
                Err(ServiceError::Timeout { timeout: budget })
            }
        };
        let max = self.shared.spec.max_output_bytes();
        match answer {
            Ok(ServerResult::CallToolResult(result)) if result.is_error == Some(true) => {
                let (text, _) = cap(&render(&result.content), max);
                Err(CallError::Failed { server: self.name(), tool: tool.into(), class: text_class(&text), text })
            }
            Ok(ServerResult::CallToolResult(result)) => {
                Ok(ToolOutput::from_result(&result.content, result.structured_content, max))
            }
            // A result with neither content nor structured content decodes as the empty result.
            Ok(ServerResult::EmptyResult(_)) => Ok(ToolOutput::from_result(&[], None, max)),
            Ok(other) => {
                let detail = match other {
                    ServerResult::InputRequiredResult(_) => "the server asked for input, which is not offered".into(),
                    ServerResult::CreateTaskResult(_) => "the server made the call a task, which is not offered".into(),
                    other => format!("{other:?}").chars().take(200).collect(),
                };
                Err(CallError::Unexpected { server: self.name(), tool: tool.into(), detail })
            }
            Err(e) => Err(self.service_error(e, &conn, tool, Some(&id))),
        }
    }

    /// The connection, if the server is ready.
    fn ready(&self, tool: &str) -> Result<Arc<Conn>, CallError> {
        let cell = self.cell();
        match (&cell.state, &cell.conn) {
            (ServerState::Ready, Some(conn)) => Ok(conn.clone()),
            (state, _) => Err(CallError::NotReady { server: self.name(), tool: tool.into(), state: state.clone() }),
        }
    }

    fn service_error(
        &self,
        e: ServiceError,
        conn: &Conn,
        tool: &str,
        id: Option<&rmcp::model::RequestId>,
    ) -> CallError {
        let (server, tool) = (self.name(), tool.to_owned());
        match e {
            ServiceError::McpError(data) => {
                CallError::Rpc { server, tool, code: data.code.0, message: data.message.into() }
            }
            ServiceError::Timeout { timeout } => {
                let cancelled = id.is_some_and(|id| conn.wire.was_cancelled(id));
                CallError::Timeout { server, tool, after: timeout, cancelled }
            }
            // The service loop ended, the child's pipe broke, or rmcp's HTTP worker gave up on
            // the call's response stream: the connection is lost, even if the transport task
            // (an HTTP worker) lives on, and the state says so until a reconnect.
            ServiceError::TransportClosed => {
                conn.wire.lose(match conn.pid {
                    Some(_) => "the server process ended".into(),
                    None => "the call's response stream broke and could not be resumed".into(),
                });
                CallError::TransportLost { server, tool, detail: strip_lost(conn.lost_reason()) }
            }
            ServiceError::TransportSend(_) if conn.wire.is_closed() || conn.pid.is_some() => {
                conn.wire.lose("the server process stopped reading".into());
                CallError::TransportLost { server, tool, detail: strip_lost(conn.lost_reason()) }
            }
            ServiceError::TransportSend(send) => match unreachable(&send) {
                Some(why) => {
                    conn.wire.lose(format!("the server cannot be reached: {why}"));
                    CallError::TransportLost { server, tool, detail: strip_lost(conn.lost_reason()) }
                }
                // The transport's own words, without rmcp's wrapping (which names our types).
                None => CallError::Transport {
                    server,
                    tool,
                    status: http_status(&send),
                    detail: format!("sending failed: {}", send.error),
                },
            },
            ServiceError::UnexpectedResponse => {
                CallError::Unexpected { server, tool, detail: "an answer of another kind than asked".into() }
            }
            other => CallError::Transport { server, tool, status: None, detail: other.to_string() },
        }
    }

    fn name(&self) -> String {
        self.shared.spec.name.clone()
    }
}

/// Why a failed HTTP send got no answer (refused, reset, closed before the answer), or `None`
/// when the server answered with an error. A reset can be a stale pooled connection to a live
/// server too; judging it lost costs that server a reconnect, while judging a dead one alive
/// would let every call fail the same way.
fn unreachable(error: &rmcp::transport::DynamicTransportError) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error.error.as_ref());
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<reqwest::Error>() {
            if !(http.is_connect() || http.is_request()) {
                return None;
            }
            // The innermost cause says it best ("Connection refused", "connection closed
            // before message completed").
            let mut cause: &dyn std::error::Error = http;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            return Some(cause.to_string());
        }
        source = match e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            // rmcp's `Client` variant does not give its error as a source.
            Some(StreamableHttpError::Client(http)) => Some(http),
            _ => e.source(),
        };
    }
    None
}

/// The lost reason without its "transport lost: " (the error's Display says it).
fn strip_lost(reason: String) -> String {
    reason.strip_prefix("transport lost: ").map(str::to_owned).unwrap_or(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_initial_and_stops_at_max() {
        let b = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(1) };
        let delays: Vec<u64> = (0..7).map(|a| b.delay(a).as_millis() as u64).collect();
        assert_eq!(delays, [0, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
    }
}
