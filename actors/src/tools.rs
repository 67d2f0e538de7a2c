//! The `ToolHost`: the fleet's one actor that holds its MCP tool servers (`[[tool_server]]`).
//!
//! At start it connects to each server (off its loop), lists its tools and compares their
//! descriptions with the pins kept in `<data_dir>/tools/pins.json`: a server seen for the first
//! time is pinned as it is; a tool whose description, schema or annotations changed since (or a
//! tool that is new) is disabled until a person approves it (`mindfleet tools approve`,
//! [`ToolsMsg::Approve`]), since a description is what a model reads before it calls. A server
//! whose connection is lost (its child died, its HTTP endpoint went away) is connected again
//! with a backoff that doubles up to 30 s; the dump says so.
//!
//! A call is refused unless the persona's allowlist has the tool and the tool is enabled; it runs
//! off the loop, its deadline the shorter of the caller's and the server's `timeout_secs`.
//!
//! Calls that need a person's approval (the server's `approval`, the tool's annotations) and
//! calls that may not run twice (a tool not annotated read-only or idempotent) are journaled in
//! storage (`tool_calls`), by the call's id, which the persona derives from its event and plan:
//! - a call that needs approval is journaled pending (on disk before the persona hears it is
//!   parked), goes to the `approval` webhooks, and runs once a person approves it; unanswered
//!   after the server's `approval_timeout_secs`, it is denied;
//! - a call that may not run twice is journaled in flight (on disk before it is sent) and then
//!   with its answer: asked again after a crash, it gets the journaled answer, or, when the crash
//!   came before the answer, an `unknown` failure instead of a second run (at most once).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mindfleet_core::config::FleetConfig;
use mindfleet_core::quantile::percentile;
use mindfleet_core::record::ErrorClass;
use mindfleet_core::time::now_us;
use mindfleet_core::tools::{
    ApprovalState, ApprovalView, CallJournal, CallRun, Endpoint, NOT_NEEDED, ToolAnswer, ToolCall, ToolDump,
    ToolFailure, ToolResult, ToolServerDump, ToolSpec, ToolsDump, ToolsMsg, allowed,
};
use mindfleet_store::{Receipt, Storage};
use mindfleet_tools::{Backoff, CallError, Pins, ServerState, ToolClient, needs_approval};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};

/// What the tool host starts from.
pub struct ToolHostArgs {
    pub servers: Vec<mindfleet_core::tools::ToolServerSpec>,
    /// Each persona's allowlist.
    pub allowlists: BTreeMap<String, Vec<String>>,
    /// Where the pins are kept.
    pub pins_file: PathBuf,
    /// Where calls waiting for approval, and calls that may not run twice, are journaled.
    pub storage: Storage,
}

impl ToolHostArgs {
    pub fn of(config: &FleetConfig, storage: Storage) -> ToolHostArgs {
        ToolHostArgs {
            servers: config.tool_servers.clone(),
            allowlists: config.personas.iter().map(|p| (p.name.clone(), p.tools.clone())).collect(),
            pins_file: config.storage.data_dir.join("tools").join("pins.json"),
            storage,
        }
    }
}

pub struct ToolHost;

struct Server {
    client: ToolClient,
    /// Failed connections in a row (0: connected, or connecting for the first time).
    attempt: u32,
    restarts: u32,
    /// Tools that cannot be called, and why.
    disabled: BTreeMap<String, String>,
    /// Each tool's calls, written by the calls as they end.
    stats: Stats,
}

/// Each tool's calls (by tool), written by the calls as they end.
type Stats = Arc<Mutex<BTreeMap<String, ToolStats>>>;

/// The calls of one tool that reached its server.
#[derive(Default)]
struct ToolStats {
    calls: u64,
    failures: BTreeMap<String, u64>,
    /// The latest durations, in milliseconds (at most [`LATENCIES_KEPT`]).
    latencies: VecDeque<f64>,
}

/// How many of a tool's latest call durations its percentiles are taken over.
const LATENCIES_KEPT: usize = 1024;

impl ToolStats {
    fn record(&mut self, took_ms: u64, failure: Option<ErrorClass>) {
        self.calls += 1;
        if let Some(class) = failure {
            *self.failures.entry(class.as_str().to_string()).or_default() += 1;
        }
        if self.latencies.len() == LATENCIES_KEPT {
            self.latencies.pop_front();
        }
        self.latencies.push_back(took_ms as f64);
    }
}

pub struct ToolHostState {
    servers: BTreeMap<String, Server>,
    allowlists: BTreeMap<String, Vec<String>>,
    pins_file: PathBuf,
    /// The descriptions people accepted, by server.
    pins: BTreeMap<String, Pins>,
    storage: Storage,
    /// The journaled calls, by id (as in storage).
    journal: HashMap<String, CallJournal>,
    /// Who waits for the approval of each call, by id.
    waiting: HashMap<String, Vec<RpcReplyPort<ApprovalState>>>,
    /// Calls waiting for their server to be connected, by server.
    held: HashMap<String, Vec<(ToolCall, RpcReplyPort<ToolAnswer>)>>,
}

/// The longest a reconnection waits after a failure (the backoff doubles up to it).
const BACKOFF: Backoff = Backoff { initial: Duration::from_millis(250), max: Duration::from_secs(30) };

pub async fn spawn(args: ToolHostArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<ToolsMsg>, SpawnErr> {
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, ToolHost, args, s).await?,
        None => Actor::spawn(None, ToolHost, args).await?,
    };
    Ok(actor)
}

impl Actor for ToolHost {
    type Msg = ToolsMsg;
    type State = ToolHostState;
    type Arguments = ToolHostArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ToolsMsg>,
        args: ToolHostArgs,
    ) -> Result<ToolHostState, ActorProcessingErr> {
        let pins = read_pins(&args.pins_file)?;
        let mut servers = BTreeMap::new();
        for spec in args.servers {
            let name = spec.name.clone();
            let client = ToolClient::new(spec, BACKOFF).map_err(|e| format!("tool server {name:?}: {e}"))?;
            connect(&myself, &name, client.clone(), false);
            let server = Server { client, attempt: 0, restarts: 0, disabled: BTreeMap::new(), stats: Arc::default() };
            servers.insert(name, server);
        }
        let journal: HashMap<String, CallJournal> =
            args.storage.tool_calls()?.into_iter().map(|j| (j.call.id.clone(), j)).collect();
        for j in journal.values().filter(|j| j.call.state.is_pending()) {
            expire_when_due(&myself, &j.call);
        }
        Ok(ToolHostState {
            servers,
            allowlists: args.allowlists,
            pins_file: args.pins_file,
            pins,
            storage: args.storage,
            journal,
            waiting: HashMap::new(),
            held: HashMap::new(),
        })
    }

    async fn post_stop(&self, _: ActorRef<ToolsMsg>, st: &mut ToolHostState) -> Result<(), ActorProcessingErr> {
        for s in st.servers.values() {
            s.client.shutdown();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ToolsMsg>,
        msg: ToolsMsg,
        st: &mut ToolHostState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolsMsg::Call(call, reply) => st.call(&myself, *call, reply),
            ToolsMsg::Await(id, reply) => match st.journal.get(&id).map(|j| &j.call.state) {
                Some(ApprovalState::Pending) => st.waiting.entry(id).or_default().push(reply),
                Some(decided) => {
                    let _ = reply.send(decided.clone());
                }
                None => {
                    let reason = format!("no call {id} waits for approval");
                    let _ = reply.send(ApprovalState::Denied { by: "tools".into(), reason });
                }
            },
            ToolsMsg::Approvals(reply) => {
                let _ = reply.send(st.pending());
            }
            ToolsMsg::Decide { id, approve, by, reason, reply } => {
                let state = if approve { ApprovalState::Approved { by } } else { ApprovalState::Denied { by, reason } };
                match st.decide(&id, state) {
                    Ok((view, written)) => {
                        tokio::spawn(async move {
                            let r = match written {
                                Some(rx) => match rx.await {
                                    Ok(Ok(())) => Ok(view),
                                    Ok(Err(e)) => Err(format!("the answer could not be journaled: {e}")),
                                    Err(_) => Err("storage stopped before the answer was journaled".into()),
                                },
                                None => Ok(view),
                            };
                            let _ = reply.send(r);
                        });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            ToolsMsg::Expire(id) => {
                let due = st.journal.get(&id).filter(|j| j.call.state.is_pending() && j.call.deadline_us <= now_us());
                if let Some(j) = due {
                    let after_secs = ((j.call.deadline_us - j.call.requested_us).max(0) / 1_000_000) as u64;
                    tracing::info!(call = %id, tool = %j.call.tool, after_secs, "approval not answered in time: denied");
                    let _ = st.decide(&id, ApprovalState::Expired { after_secs });
                }
            }
            ToolsMsg::Unheld(server, id) => {
                let calls = st.held.entry(server.clone()).or_default();
                if let Some(i) = calls.iter().position(|(c, _)| c.id == id) {
                    let (call, reply) = calls.remove(i);
                    let message = format!("{}: tool server {server:?} was not connected in time", call.tool);
                    let failure = ToolFailure { class: ErrorClass::Timeout, message, for_model: None, took_ms: 0 };
                    let answer = ToolAnswer::Ran { result: Err(failure), approval: NOT_NEEDED.into(), replayed: false };
                    let _ = reply.send(answer);
                }
            }
            ToolsMsg::Journaled(j) => {
                st.storage.journal_call((*j).clone(), false);
                st.journal.insert(j.call.id.clone(), *j);
            }
            ToolsMsg::Catalog(persona, reply) => {
                let _ = reply.send(st.catalog(&persona));
            }
            ToolsMsg::Dump(reply) => {
                let _ = reply.send(st.dump());
            }
            ToolsMsg::Approve(server, reply) => {
                let _ = reply.send(st.approve(server.as_deref()));
            }
            ToolsMsg::Connected(name, outcome) => st.connected(&myself, &name, outcome),
            ToolsMsg::Lost(name) => {
                if let Some(s) = st.servers.get_mut(&name) {
                    s.restarts += 1;
                    s.attempt = 1;
                    tracing::warn!(server = %name, state = %s.client.state(), "tool server lost: connecting again");
                    myself.send_after(BACKOFF.delay(0), move || ToolsMsg::Retry(name));
                }
            }
            ToolsMsg::Retry(name) => {
                if let Some(s) = st.servers.get(&name) {
                    connect(&myself, &name, s.client.clone(), true);
                }
            }
        }
        Ok(())
    }
}

/// Connects `client` off the loop (again, with `again`) and reports how it went.
fn connect(myself: &ActorRef<ToolsMsg>, name: &str, client: ToolClient, again: bool) {
    let (me, name) = (myself.clone(), name.to_string());
    tokio::spawn(async move {
        let r = if again { client.reconnect().await } else { client.connect().await };
        let _ = me.cast(ToolsMsg::Connected(name, r.map_err(|e| e.to_string())));
    });
}

impl ToolHostState {
    /// A persona's call: refused, answered from the journal, parked for approval, or run.
    fn call(&mut self, myself: &ActorRef<ToolsMsg>, call: ToolCall, reply: RpcReplyPort<ToolAnswer>) {
        let ran = |result, approval: &str, replayed| ToolAnswer::Ran { result, approval: approval.into(), replayed };
        let server = match self.admit(&call) {
            Ok(s) => s,
            Err(refused) => {
                let _ = reply.send(ran(Err(refused), NOT_NEEDED, false));
                return;
            }
        };
        let tool = call.tool.split_once('.').map_or("", |(_, t)| t);
        if server.client.state() != ServerState::Ready {
            // Not connected yet (the fleet just started) or again: the call waits for it, up to
            // the server's timeout.
            let (name, wait) = (server.client.spec().name.clone(), server.client.spec().timeout());
            let id = call.id.clone();
            self.held.entry(name.clone()).or_default().push((call, reply));
            myself.send_after(wait, move || ToolsMsg::Unheld(name, id));
            return;
        }
        let Some(info) = server.client.tool(tool) else {
            let message = format!("tool server {:?} has no tool {tool:?}", server.client.spec().name);
            let failure = ToolFailure { class: ErrorClass::MissingResource, message, for_model: None, took_ms: 0 };
            let _ = reply.send(ran(Err(failure), NOT_NEEDED, false));
            return;
        };
        let approval = server.client.spec().approval;
        let timeout_secs = server.client.spec().approval_timeout_secs;
        let to = (server.client.clone(), server.stats.clone());
        let needs = needs_approval(&info, approval);
        let repeatable = info.read_only() || info.idempotent();
        let journaled = match self.journal.get(&call.id) {
            Some(j) => Some(j.clone()),
            // A call that is never journaled (no approval, may run again): nothing to read.
            None if !needs && repeatable => None,
            // Journaled on another node before the persona moved here, or not at all.
            None => match self.adopted(&call, myself) {
                Ok(j) => j,
                Err(message) => {
                    let failure = ToolFailure { class: ErrorClass::Unknown, message, for_model: None, took_ms: 0 };
                    let _ = reply.send(ran(Err(failure), NOT_NEEDED, false));
                    return;
                }
            },
        };
        let j = match journaled {
            Some(j) => j,
            None if needs => {
                // A new call that waits for a person: on disk before the persona parks its plan.
                let view = view_of(&call, timeout_secs, ApprovalState::Pending);
                let j = CallJournal { call: view.clone(), needs_approval: true, run: CallRun::NotRun };
                let written = self.storage.journal_call(j.clone(), true);
                self.journal.insert(call.id.clone(), j);
                let id = call.id.clone();
                myself.send_after(Duration::from_secs(timeout_secs), move || ToolsMsg::Expire(id));
                tracing::info!(persona = %call.persona, tool = %call.tool, call = %call.id, "tool call waits for approval");
                tokio::spawn(async move {
                    if let Some(rx) = written {
                        let _ = rx.await;
                    }
                    let _ = reply.send(ToolAnswer::Parked(view));
                });
                return;
            }
            None => {
                let state = ApprovalState::Approved { by: NOT_NEEDED.into() };
                let j = CallJournal { call: view_of(&call, 0, state), needs_approval: false, run: CallRun::NotRun };
                return self.run(myself, to, call, j, repeatable, reply);
            }
        };
        let approval = if j.needs_approval { j.call.state.describe() } else { NOT_NEEDED.to_string() };
        match (&j.call.state, &j.run) {
            (_, CallRun::Done { result, .. }) => {
                let _ = reply.send(ran(result.clone(), &approval, true));
            }
            (_, CallRun::InFlight { .. }) if !repeatable => {
                let message = format!(
                    "{} was sent before the fleet stopped and its answer is unknown: not sent again (at most once)",
                    call.tool
                );
                let failure = ToolFailure { class: ErrorClass::Unknown, message, for_model: None, took_ms: 0 };
                let _ = reply.send(ran(Err(failure), &approval, true));
            }
            (ApprovalState::Pending, _) => {
                let _ = reply.send(ToolAnswer::Parked(j.call.clone()));
            }
            (ApprovalState::Denied { .. } | ApprovalState::Expired { .. }, _) => {
                let message = format!("{}: {}", call.tool, approval);
                let failure = ToolFailure { class: ErrorClass::AccessDenied, message, for_model: None, took_ms: 0 };
                let _ = reply.send(ran(Err(failure), &approval, false));
            }
            (ApprovalState::Approved { .. }, _) => self.run(myself, to, call, j, repeatable, reply),
        }
    }

    /// Runs an admitted (and approved) call off the loop, `to` its server's client (and the
    /// stats its calls write); one that may not run twice is journaled in flight first (on disk
    /// before it is sent), and with its answer after.
    fn run(
        &mut self,
        myself: &ActorRef<ToolsMsg>,
        (client, stats): (ToolClient, Stats),
        call: ToolCall,
        mut j: CallJournal,
        repeatable: bool,
        reply: RpcReplyPort<ToolAnswer>,
    ) {
        let journaled = !repeatable || j.needs_approval;
        let written = if journaled {
            j.run = CallRun::InFlight { since_us: now_us() };
            self.journal.insert(j.call.id.clone(), j.clone());
            self.storage.journal_call(j.clone(), !repeatable)
        } else {
            None
        };
        let approval = if j.needs_approval { j.call.state.describe() } else { NOT_NEEDED.to_string() };
        let me = myself.clone();
        tokio::spawn(async move {
            if let Some(rx) = written
                && !matches!(rx.await, Ok(Ok(())))
            {
                let message = format!("{}: the call could not be journaled before it was sent: not sent", call.tool);
                let failure = ToolFailure { class: ErrorClass::Unknown, message, for_model: None, took_ms: 0 };
                let _ = reply.send(ToolAnswer::Ran { result: Err(failure), approval, replayed: false });
                return;
            }
            let r = run(&client, &call).await;
            let (took_ms, failure) = match &r {
                Ok(ok) => (ok.took_ms, None),
                Err(f) => (f.took_ms, Some(f.class)),
            };
            let tool = call.tool.split_once('.').map_or("", |(_, t)| t).to_string();
            stats.lock().unwrap_or_else(|e| e.into_inner()).entry(tool).or_default().record(took_ms, failure);
            if journaled {
                j.run = CallRun::Done { result: r.clone(), at_us: now_us() };
                let _ = me.cast(ToolsMsg::Journaled(Box::new(j)));
            }
            let _ = reply.send(ToolAnswer::Ran { result: r, approval, replayed: false });
        });
    }

    /// A person's (or the clock's) answer to the approval of call `id`: journaled, and told to
    /// whoever waits for it. Answers the approval as it now stands and, when it was written, the
    /// receipt of its write.
    /// The journal of a call not in memory, read from storage (a persona that moved here
    /// brings its calls' journal): kept, and a pending approval's expiry set. Unreadable, the
    /// call is not made (it may have run).
    fn adopted(&mut self, call: &ToolCall, myself: &ActorRef<ToolsMsg>) -> Result<Option<CallJournal>, String> {
        let Some(j) = self
            .storage
            .tool_call(&call.persona, &call.id)
            .map_err(|e| format!("{}: its journal cannot be read: {e}", call.tool))?
        else {
            return Ok(None);
        };
        if j.call.state.is_pending() {
            expire_when_due(myself, &j.call);
        }
        self.journal.insert(j.call.id.clone(), j.clone());
        Ok(Some(j))
    }

    fn decide(&mut self, id: &str, state: ApprovalState) -> Result<(ApprovalView, Option<Receipt>), String> {
        let Some(j) = self.journal.get_mut(id) else {
            return Err(format!(
                "no tool call {id:?} waits for approval (`mindfleet ai approvals` lists those that do)"
            ));
        };
        if !j.call.state.is_pending() {
            return Err(format!("tool call {id} is not waiting: {}", j.call.state.describe()));
        }
        j.call.state = state.clone();
        let written = self.storage.journal_call(j.clone(), true);
        tracing::info!(call = %id, tool = %j.call.tool, persona = %j.call.persona, approval = %state.describe(), "approval answered");
        let view = j.call.clone();
        for w in self.waiting.remove(id).unwrap_or_default() {
            let _ = w.send(state.clone());
        }
        Ok((view, written))
    }

    /// The tools `persona` may call now: allowed, enabled, on a connected server.
    fn catalog(&self, persona: &str) -> Vec<ToolSpec> {
        let list = self.allowlists.get(persona).map_or(&[][..], Vec::as_slice);
        self.servers
            .iter()
            .filter(|(_, s)| s.client.state() == ServerState::Ready)
            .flat_map(|(name, s)| {
                s.client.tools().into_iter().filter(|t| !s.disabled.contains_key(&t.name)).map(move |t| ToolSpec {
                    name: format!("{name}.{}", t.name),
                    description: t.description.clone().unwrap_or_default(),
                    read_only: t.read_only(),
                    input_schema: t.input_schema,
                })
            })
            .filter(|t| allowed(list, &t.name))
            .collect()
    }

    /// The calls that wait for approval, oldest first.
    fn pending(&self) -> Vec<ApprovalView> {
        let mut pending: Vec<ApprovalView> =
            self.journal.values().filter(|j| j.call.state.is_pending()).map(|j| j.call.clone()).collect();
        pending.sort_by(|a, b| a.requested_us.cmp(&b.requested_us).then(a.id.cmp(&b.id)));
        pending
    }

    /// The server that runs `call`'s tool, if the persona may call it and the tool is enabled.
    fn admit(&self, call: &ToolCall) -> Result<&Server, ToolFailure> {
        let refuse = |class, message: String| ToolFailure { class, message, for_model: None, took_ms: 0 };
        let list = self.allowlists.get(&call.persona).map_or(&[][..], Vec::as_slice);
        if !allowed(list, &call.tool) {
            return Err(refuse(
                ErrorClass::AccessDenied,
                format!("persona {:?} may not call {:?}: its `tools` do not allow it", call.persona, call.tool),
            ));
        }
        let (server, tool) = call.tool.split_once('.').unwrap_or((&call.tool, ""));
        let Some(s) = self.servers.get(server) else {
            return Err(refuse(ErrorClass::MissingResource, format!("no tool server {server:?}")));
        };
        if let Some(why) = s.disabled.get(tool) {
            return Err(refuse(ErrorClass::AccessDenied, format!("{} is disabled: {why}", call.tool)));
        }
        Ok(s)
    }

    fn connected(&mut self, myself: &ActorRef<ToolsMsg>, name: &str, outcome: Result<(), String>) {
        let Some(s) = self.servers.get_mut(name) else { return };
        match outcome {
            Ok(()) => {
                s.attempt = 0;
                let now = s.client.pins();
                let first_sight = !self.pins.contains_key(name);
                let pinned = self.pins.entry(name.to_string()).or_insert_with(|| now.clone());
                let changes = pinned.compare(&now);
                s.disabled = changes
                    .changed
                    .iter()
                    .map(|t| {
                        (
                            t.clone(),
                            format!("its description changed since it was pinned: `mindfleet tools approve {name}`"),
                        )
                    })
                    .chain(changes.added.iter().map(|t| {
                        (t.clone(), format!("it is new since the server was pinned: `mindfleet tools approve {name}`"))
                    }))
                    .collect();
                if !s.disabled.is_empty() {
                    tracing::warn!(server = %name, tools = ?s.disabled.keys().collect::<Vec<_>>(), "tools disabled until approved");
                }
                tracing::info!(server = %name, tools = now.len(), "tool server ready");
                let (me, client, lost) = (myself.clone(), s.client.clone(), name.to_string());
                tokio::spawn(async move {
                    client.closed().await;
                    let _ = me.cast(ToolsMsg::Lost(lost));
                });
                // Only a server seen for the first time adds pins; a reconnection changes none.
                if first_sight && let Err(e) = write_pins(&self.pins_file, &self.pins) {
                    tracing::warn!(%e, "the tool pins could not be written");
                }
                for (call, reply) in self.held.remove(name).unwrap_or_default() {
                    self.call(myself, call, reply);
                }
            }
            Err(why) => {
                s.attempt += 1;
                let wait = BACKOFF.delay(s.attempt - 1);
                tracing::warn!(server = %name, %why, attempt = s.attempt, ?wait, "tool server not connected: trying again");
                let name = name.to_string();
                myself.send_after(wait, move || ToolsMsg::Retry(name));
            }
        }
    }

    fn approve(&mut self, only: Option<&str>) -> Result<Vec<String>, String> {
        if let Some(name) = only
            && !self.servers.contains_key(name)
        {
            let known: Vec<&str> = self.servers.keys().map(String::as_str).collect();
            return Err(format!("no tool server {name:?} (known: {})", known.join(", ")));
        }
        let mut enabled = Vec::new();
        for (name, s) in self.servers.iter_mut().filter(|(n, _)| only.is_none_or(|o| o == n.as_str())) {
            if s.client.state() != ServerState::Ready {
                if only.is_some() {
                    return Err(format!(
                        "tool server {name:?} is not connected ({}): nothing to approve",
                        s.client.state()
                    ));
                }
                continue;
            }
            self.pins.insert(name.clone(), s.client.pins());
            enabled.extend(std::mem::take(&mut s.disabled).into_keys().map(|t| format!("{name}.{t}")));
        }
        write_pins(&self.pins_file, &self.pins).map_err(|e| format!("the pins could not be written: {e}"))?;
        Ok(enabled)
    }

    fn dump(&self) -> ToolsDump {
        let servers = self
            .servers
            .iter()
            .map(|(name, s)| {
                let spec = s.client.spec();
                let stats = s.stats.lock().unwrap_or_else(|e| e.into_inner());
                let tools: Vec<ToolDump> = s
                    .client
                    .tools()
                    .iter()
                    .map(|t| {
                        let st = stats.get(&t.name);
                        let mut lat: Vec<f64> = st.map(|x| x.latencies.iter().copied().collect()).unwrap_or_default();
                        ToolDump {
                            name: format!("{name}.{}", t.name),
                            description: t.description.clone().unwrap_or_default(),
                            read_only: t.read_only(),
                            needs_approval: needs_approval(t, spec.approval),
                            disabled: s.disabled.get(&t.name).cloned(),
                            calls: st.map_or(0, |x| x.calls),
                            failures: st.map(|x| x.failures.clone()).unwrap_or_default(),
                            latency_p50_ms: percentile(&mut lat, 0.5),
                            latency_p99_ms: percentile(&mut lat, 0.99),
                        }
                    })
                    .collect();
                ToolServerDump {
                    name: name.clone(),
                    transport: match spec.endpoint() {
                        Ok(Endpoint::Http { .. }) => "http".into(),
                        _ => "stdio".into(),
                    },
                    state: s.client.state().to_string(),
                    restarts: s.restarts,
                    protocol: s.client.protocol_version(),
                    pid: s.client.pid(),
                    approval: spec.approval,
                    calls: stats.values().map(|x| x.calls).sum(),
                    failures: stats.values().map(|x| x.failures.values().sum::<u64>()).sum(),
                    tools,
                }
            })
            .collect();
        ToolsDump { servers, approvals: self.pending() }
    }
}

/// The journal's view of `call`, asked now, its approval `state`, answered within `timeout_secs`
/// (0: it needs no approval).
/// Tells the host to expire the pending approval of `call` at its deadline.
fn expire_when_due(myself: &ActorRef<ToolsMsg>, call: &ApprovalView) {
    let id = call.id.clone();
    let wait = Duration::from_micros((call.deadline_us - now_us()).max(0) as u64);
    myself.send_after(wait, move || ToolsMsg::Expire(id));
}

fn view_of(call: &ToolCall, timeout_secs: u64, state: ApprovalState) -> ApprovalView {
    let now = now_us();
    ApprovalView {
        id: call.id.clone(),
        persona: call.persona.clone(),
        tool: call.tool.clone(),
        arguments: call.arguments.to_string(),
        why: call.why.clone(),
        event_id: call.event_id.clone(),
        room: call.room.clone(),
        requested_us: now,
        deadline_us: now + timeout_secs as i64 * 1_000_000,
        state,
    }
}

/// Runs an admitted call.
async fn run(client: &ToolClient, call: &ToolCall) -> Result<ToolResult, ToolFailure> {
    let started = Instant::now();
    let tool = call.tool.split_once('.').map_or(call.tool.as_str(), |(_, t)| t);
    let limit = Duration::from_millis(call.timeout_ms).min(client.spec().timeout());
    let r = client.call(tool, call.arguments.clone(), started + limit).await;
    let took_ms = started.elapsed().as_millis() as u64;
    match r {
        Ok(out) => {
            Ok(ToolResult { text: out.text, structured: out.structured, cut: out.cut, bytes: out.bytes, took_ms })
        }
        Err(e) => Err(failure(&e, took_ms)),
    }
}

fn failure(e: &CallError, took_ms: u64) -> ToolFailure {
    ToolFailure { class: e.class(), message: e.to_string(), for_model: e.model_text().map(str::to_string), took_ms }
}

/// The pins kept, by server (none before the first start).
fn read_pins(file: &std::path::Path) -> Result<BTreeMap<String, Pins>, String> {
    match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!("{}: {e}", file.display())),
    }
}

/// Writes the pins whole: to a file beside, then renamed over the old one.
fn write_pins(file: &std::path::Path, pins: &BTreeMap<String, Pins>) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(pins)?)?;
    std::fs::rename(tmp, file)
}
