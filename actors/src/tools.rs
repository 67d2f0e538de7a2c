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

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mindfleet_core::config::FleetConfig;
use mindfleet_core::quantile::percentile;
use mindfleet_core::record::ErrorClass;
use mindfleet_core::tools::{
    Endpoint, ToolCall, ToolDump, ToolFailure, ToolResult, ToolServerDump, ToolsDump, ToolsMsg, allowed,
};
use mindfleet_tools::{Backoff, CallError, Pins, ServerState, ToolClient, needs_approval};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};

/// What the tool host starts from.
pub struct ToolHostArgs {
    pub servers: Vec<mindfleet_core::tools::ToolServerSpec>,
    /// Each persona's allowlist.
    pub allowlists: BTreeMap<String, Vec<String>>,
    /// Where the pins are kept.
    pub pins_file: PathBuf,
}

impl ToolHostArgs {
    pub fn of(config: &FleetConfig) -> ToolHostArgs {
        ToolHostArgs {
            servers: config.tool_servers.clone(),
            allowlists: config.personas.iter().map(|p| (p.name.clone(), p.tools.clone())).collect(),
            pins_file: config.storage.data_dir.join("tools").join("pins.json"),
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
    stats: Arc<Mutex<BTreeMap<String, ToolStats>>>,
}

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
}

/// The longest a reconnection waits after a failure (the backoff doubles up to it).
const BACKOFF: Backoff = Backoff { initial: Duration::from_millis(250), max: Duration::from_secs(30) };

pub async fn spawn(args: ToolHostArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<ToolsMsg>, SpawnErr> {
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(Some("tools".into()), ToolHost, args, s).await?,
        None => Actor::spawn(Some("tools".into()), ToolHost, args).await?,
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
        Ok(ToolHostState { servers, allowlists: args.allowlists, pins_file: args.pins_file, pins })
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
            ToolsMsg::Call(call, reply) => match st.admit(&call) {
                Ok(server) => {
                    let (client, stats) = (server.client.clone(), server.stats.clone());
                    tokio::spawn(async move {
                        let r = run(&client, &call).await;
                        let (took_ms, failure) = match &r {
                            Ok(ok) => (ok.took_ms, None),
                            Err(f) => (f.took_ms, Some(f.class)),
                        };
                        let tool = call.tool.split_once('.').map_or("", |(_, t)| t).to_string();
                        stats
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .entry(tool)
                            .or_default()
                            .record(took_ms, failure);
                        let _ = reply.send(r);
                    });
                }
                Err(refused) => {
                    let _ = reply.send(Err(refused));
                }
            },
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
                let (me, client, name) = (myself.clone(), s.client.clone(), name.to_string());
                tokio::spawn(async move {
                    client.closed().await;
                    let _ = me.cast(ToolsMsg::Lost(name));
                });
                // Only a server seen for the first time adds pins; a reconnection changes none.
                if first_sight && let Err(e) = write_pins(&self.pins_file, &self.pins) {
                    tracing::warn!(%e, "the tool pins could not be written");
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
        ToolsDump { servers }
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
