//! `mindfleet bench tools`: what calling a tool costs a persona (issue 53), on server-everything's
//! `echo` (the pinned npm package `scripts/install-tool-servers.sh` installs, run on first use).
//!
//! One fleet of one persona (`relay`, rules brain) and two tool servers, each a child of the
//! fleet running the same program: `everything` (`approval = "never"`) and `gated`
//! (`approval = "always"`). The persona's procedures turn a message that says "say back" into a
//! call of `everything.echo`, and one that says "with approval" into a call of `gated.echo`;
//! other mentions get a reply drafted by the rules, with no call. Four parts; the second runs
//! first, while the servers have served nothing else:
//!
//! 1. **throughput**: first `events / 4` "say back" mentions one at a time (each injected once
//!    the reply to the one before is in the outbox), each followed by a plain mention, for the
//!    reply latency of one event alone with its call and without; then `events` "say back"
//!    mentions injected at once (the persona takes them one after the other): echo calls per
//!    second, from the first injection to the last reply, and each reply's latency.
//! 2. **overhead**: the same echo call through the fleet's tool host (`ToolsMsg::Call`, the path a
//!    plan's step takes) and through a bare [`ToolClient`] connected to a server-everything child
//!    of its own, in alternate rounds of `calls / 20`, one call at a time, after 500 calls on each
//!    to warm both servers alike: p50 and p99 of each, their difference and their ratio.
//! 3. **approval**: `approvals` rounds of one "with approval" mention: from its injection to the
//!    call being listed by `GET /ai/approvals` (polled every millisecond; and to the time the
//!    tool host journaled it, `requested_us`), then from `POST /ai/approvals/{id}` (approve) to
//!    the POST's answer (the approval journaled) and to the reply.
//! 4. **parked**: `rounds` rounds, alternately with none of the persona's plans waiting and with
//!    one parked on its approval (a "with approval" mention, listed, not answered until the round
//!    ends): ten plain mentions each, one at a time; their decision latency (to the decision's
//!    `at_us`, which for a mention the rules answer is the moment the reply is written) and reply
//!    latency both ways, and the ratios. The first mention of each round is not counted: in a
//!    parked round it is the one that shows the plan parked (the persona takes it only once it
//!    let the plan go).
//!
//! A latency to a reply or a decision is from just before the injection (or the POST) to the time
//! the fleet journals: the reply's `at_us` (when the persona writes it, before its commit, as in
//! `bench webhook`) or the decision's; a thread reads the outbox every millisecond to know when a
//! reply is there. The approval's listing and the POST's answer are timed as the client sees them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mindfleet_core::config::FleetConfig;
use mindfleet_core::event::EventInput;
use mindfleet_core::record::OutboxEntry;
use mindfleet_core::time::now_us;
use mindfleet_core::tools::{ToolAnswer, ToolCall, ToolServerSpec, ToolsMsg};
use mindfleet_store::Storage;
use mindfleet_tools::{Backoff, ToolClient, installed};
use ractor::{ActorRef, call_t};
use serde_json::{Value, json};

use super::{percentile, round};
use mindfleet::fleet::Fleet;

const PERSONA: &str = "relay";
const ROOM: &str = "bench";
/// The longest one reply, approval or call may take before the bench gives up.
const WAIT: Duration = Duration::from_secs(60);
/// Rounds of the overhead comparison (each path runs `calls / ROUNDS` calls in each).
const ROUNDS: usize = 20;
/// Echo calls on each path before the overhead's are counted.
const WARM_UP: usize = 500;
/// Plain mentions per round of the parked comparison (the first not counted).
const PER_ROUND: usize = 11;

/// How much of each part runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Echo mentions injected at once (part 1).
    pub events: usize,
    /// Echo calls on each path (part 2).
    pub calls: usize,
    /// Approval round trips (part 3).
    pub approvals: usize,
    /// Rounds of the parked comparison, half of them with a plan parked (part 4).
    pub rounds: usize,
}

/// server-everything's program, installed by the project's script when it is missing.
fn everything() -> anyhow::Result<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-tool-servers.sh");
    let program = installed::server(installed::EVERYTHING, &script).map_err(anyhow::Error::msg)?;
    Ok(program.display().to_string())
}

fn fleet_config(program: &str, data_dir: &Path) -> anyhow::Result<FleetConfig> {
    let toml = format!(
        r#"
[fleet]
name = "bench-tools"
brain = "rules"
[admin]
addr = "127.0.0.1:0"
[conversation]
enabled = false
[models]
pull = false

[[tool_server]]
name = "everything"
command = "{program}"
env = ["PATH"]
approval = "never"

[[tool_server]]
name = "gated"
command = "{program}"
env = ["PATH"]
approval = "always"

[[persona]]
name = "{PERSONA}"
role = "relay"
rooms = ["{ROOM}"]
tools = ["everything.echo", "gated.echo"]
# Each call is one of the budget's: room for every call the bench makes.
inferences_per_hour = 1000000

[[persona.procedure]]
name = "echo"
when = ["say back"]
calls = [{{ tool = "everything.echo", arguments = {{ message = "{{text}}" }} }}]

[[persona.procedure]]
name = "gated-echo"
when = ["with approval"]
calls = [{{ tool = "gated.echo", arguments = {{ message = "{{text}}" }} }}]
"#
    );
    let mut cfg = FleetConfig::from_toml(Path::new("bench-tools.toml"), &toml).map_err(|e| anyhow::anyhow!("{e}"))?;
    cfg.storage.data_dir = data_dir.to_path_buf();
    Ok(cfg)
}

fn mention(text: String) -> EventInput {
    EventInput {
        domain: "chat".into(),
        room: ROOM.into(),
        from: "alice".into(),
        text: format!("@{PERSONA} {text}"),
        ..Default::default()
    }
}

/// The replies the fleet commits, by the event they answer: a thread reads the outbox every
/// millisecond and wakes whoever waits.
struct Outbox {
    seen: Arc<Mutex<HashMap<String, OutboxEntry>>>,
    new: Arc<tokio::sync::Notify>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Outbox {
    fn watch(storage: Storage) -> anyhow::Result<Outbox> {
        let mut after = storage.outbox_last()?;
        let seen: Arc<Mutex<HashMap<String, OutboxEntry>>> = Arc::default();
        let new = Arc::new(tokio::sync::Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, new, stop) = (seen.clone(), new.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match storage.outbox_after(after, 1024) {
                        Ok(got) if !got.is_empty() => {
                            after = got.last().map_or(after, |(s, _)| *s);
                            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                            seen.extend(got.into_iter().map(|(_, o)| (o.in_reply_to.clone(), o)));
                            new.notify_waiters();
                        }
                        _ => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            })
        };
        Ok(Outbox { seen, new, stop, thread: Some(thread) })
    }

    /// The reply to `event_id`, once it is in the outbox.
    async fn reply(&self, event_id: &str) -> anyhow::Result<OutboxEntry> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.new.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(o) = self.seen.lock().unwrap_or_else(|e| e.into_inner()).remove(event_id) {
                return Ok(o);
            }
            tokio::time::timeout_at(deadline, notified)
                .await
                .map_err(|_| anyhow::anyhow!("no reply to {event_id} within {WAIT:?}"))?;
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Milliseconds from `since_us` to `at_us`.
fn ms(since_us: i64, at_us: i64) -> f64 {
    (at_us - since_us) as f64 / 1e3
}

/// p50 and p99 of `xs`, in ms, rounded.
fn p50_p99(xs: &mut [f64], digits: i32) -> (f64, f64) {
    (round(percentile(xs, 0.5), digits), round(percentile(xs, 0.99), digits))
}

fn fail(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Injects `input` and waits for its reply: (event id, when the injection started, the reply).
async fn ask(fleet: &Fleet, outbox: &Outbox, input: EventInput) -> anyhow::Result<(String, i64, OutboxEntry)> {
    let t = now_us();
    let ack = fleet.inject(input).await.map_err(fail)?;
    let reply = outbox.reply(&ack.event_id).await?;
    Ok((ack.event_id, t, reply))
}

/// A reply to an echo mention quotes what the call returned; anything else means the call did not
/// run, and the figures would not be of calls.
fn check_echo(reply: &OutboxEntry, tool: &str) -> anyhow::Result<()> {
    let called = format!("I called {tool}, which returned");
    anyhow::ensure!(
        reply.text.contains(&called) && reply.text.contains("Echo: "),
        "the reply to {} does not quote {tool}'s answer: {}",
        reply.in_reply_to,
        reply.text
    );
    Ok(())
}

async fn dump(host: &ActorRef<ToolsMsg>) -> anyhow::Result<mindfleet_core::tools::ToolsDump> {
    call_t!(host, ToolsMsg::Dump, 10_000).map_err(fail)
}

/// Calls `everything.echo` counted by the tool host so far.
async fn echo_calls(host: &ActorRef<ToolsMsg>) -> anyhow::Result<u64> {
    let d = dump(host).await?;
    Ok(d.servers.iter().flat_map(|s| &s.tools).find(|t| t.name == "everything.echo").map_or(0, |t| t.calls))
}

/// Part 1: `n / 4` echo mentions one at a time, each followed by a plain one (the same path
/// without the call); then `n` echo mentions at once.
async fn throughput(fleet: &Fleet, outbox: &Outbox, host: &ActorRef<ToolsMsg>, n: usize) -> anyhow::Result<Value> {
    let alone_n = (n / 4).max(1);
    let (mut echo, mut plain) = (Vec::with_capacity(alone_n), Vec::with_capacity(alone_n));
    for i in 0..alone_n {
        let (_, t, reply) = ask(fleet, outbox, mention(format!("say back alone {i}"))).await?;
        check_echo(&reply, "everything.echo")?;
        echo.push(ms(t, reply.at_us));
        let (_, t, reply) = ask(fleet, outbox, mention(format!("what is new with task {i}?"))).await?;
        anyhow::ensure!(!reply.text.contains("I called"), "a plain mention made a call: {}", reply.text);
        plain.push(ms(t, reply.at_us));
    }
    let (echo_p50, echo_p99) = p50_p99(&mut echo, 2);
    let (plain_p50, plain_p99) = p50_p99(&mut plain, 2);

    let calls_before = echo_calls(host).await?;
    let t0 = now_us();
    let acks = futures::future::join_all((0..n).map(|i| fleet.inject(mention(format!("say back burst {i}")))))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)?;
    let injected_ms = ms(t0, now_us());
    let mut latency = Vec::with_capacity(n);
    let mut last = t0;
    for ack in &acks {
        let reply = outbox.reply(&ack.event_id).await?;
        check_echo(&reply, "everything.echo")?;
        latency.push(ms(t0, reply.at_us));
        last = last.max(reply.at_us);
    }
    let calls = echo_calls(host).await? - calls_before;
    anyhow::ensure!(calls == n as u64, "{n} echo mentions made {calls} calls");
    let span_s = (last - t0) as f64 / 1e6;
    let (burst_p50, burst_p99) = p50_p99(&mut latency, 1);
    Ok(json!({
        "events": n,
        "calls": calls,
        "injected_ms": round(injected_ms, 1),
        "seconds": round(span_s, 3),
        "calls_per_s": round(n as f64 / span_s, 1),
        "reply_p50_ms": burst_p50,
        "reply_p99_ms": burst_p99,
        "one_at_a_time": {
            "events": alone_n,
            "reply_p50_ms": echo_p50,
            "reply_p99_ms": echo_p99,
            "plain_reply_p50_ms": plain_p50,
            "plain_reply_p99_ms": plain_p99,
            "call_step_p50_ms": round(echo_p50 - plain_p50, 2),
        },
    }))
}

/// One echo call through the tool host, as a plan's step makes it: its duration in ms.
async fn host_call(host: &ActorRef<ToolsMsg>, n: usize) -> anyhow::Result<f64> {
    let call = ToolCall {
        persona: PERSONA.into(),
        tool: "everything.echo".into(),
        arguments: json!({ "message": format!("overhead {n}") }),
        timeout_ms: WAIT.as_millis() as u64,
        id: format!("bench-{n}"),
        event_id: format!("bench-{n}"),
        room: ROOM.into(),
        why: "bench tools".into(),
    };
    let t = Instant::now();
    let answer = call_t!(host, ToolsMsg::Call, WAIT.as_millis() as u64, Box::new(call)).map_err(fail)?;
    let took = t.elapsed().as_secs_f64() * 1e3;
    match answer {
        ToolAnswer::Ran { result: Ok(r), .. } if r.text.starts_with("Echo: ") => Ok(took),
        other => anyhow::bail!("everything.echo through the tool host: {other:?}"),
    }
}

/// One echo call on the bare client: its duration in ms.
async fn bare_call(client: &ToolClient, n: usize) -> anyhow::Result<f64> {
    let t = Instant::now();
    let out = client.call("echo", json!({ "message": format!("overhead {n}") }), t + WAIT).await?;
    let took = t.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(out.text.starts_with("Echo: "), "echo on the bare client: {}", out.text);
    Ok(took)
}

/// Part 2: the tool host against a bare client, alternate rounds.
async fn overhead(host: &ActorRef<ToolsMsg>, program: &str, calls: usize) -> anyhow::Result<Value> {
    let mut spec = ToolServerSpec::stdio("bare", program, &[]);
    spec.env = vec!["PATH".into()];
    let client = ToolClient::new(spec, Backoff::default())?;
    client.connect().await?;
    let per_round = (calls / ROUNDS).max(1);
    // Both servers warmed alike (node compiles what runs often) before anything is counted.
    for n in 0..WARM_UP {
        host_call(host, n).await?;
        bare_call(&client, n).await?;
    }
    let (mut via_host, mut bare) = (Vec::new(), Vec::new());
    let mut n = WARM_UP;
    for r in 0..ROUNDS {
        for side in [r % 2, 1 - r % 2] {
            for _ in 0..per_round {
                n += 1;
                match side {
                    0 => via_host.push(host_call(host, n).await?),
                    _ => bare.push(bare_call(&client, n).await?),
                }
            }
        }
    }
    client.shutdown();
    let (host_p50, host_p99) = (percentile(&mut via_host, 0.5), percentile(&mut via_host, 0.99));
    let (bare_p50, bare_p99) = (percentile(&mut bare, 0.5), percentile(&mut bare, 0.99));
    Ok(json!({
        "calls_each": via_host.len(),
        "rounds": ROUNDS,
        "host_p50_ms": round(host_p50, 3),
        "host_p99_ms": round(host_p99, 3),
        "bare_p50_ms": round(bare_p50, 3),
        "bare_p99_ms": round(bare_p99, 3),
        "overhead_p50_ms": round(host_p50 - bare_p50, 3),
        "overhead_p99_ms": round(host_p99 - bare_p99, 3),
        "ratio_p50": round(host_p50 / bare_p50.max(1e-9), 2),
        "ratio_p99": round(host_p99 / bare_p99.max(1e-9), 2),
    }))
}

/// The admin API, as a person's client reaches it.
struct Admin {
    http: reqwest::Client,
    base: String,
}

impl Admin {
    /// The approval `GET /ai/approvals` lists for `event_id`, once it lists one: its id, and
    /// when the tool host journaled it (`requested_us`).
    async fn listed(&self, event_id: &str) -> anyhow::Result<(String, i64)> {
        let deadline = Instant::now() + WAIT;
        loop {
            let v: Value = self.http.get(format!("{}/ai/approvals", self.base)).send().await?.json().await?;
            let found = v["approvals"].as_array().and_then(|list| {
                let a = list.iter().find(|a| a["event_id"] == event_id)?;
                Some((a["id"].as_str()?.to_string(), a["requested_us"].as_i64()?))
            });
            if let Some(found) = found {
                return Ok(found);
            }
            anyhow::ensure!(Instant::now() < deadline, "no approval listed for {event_id} within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Approves the call `id`.
    async fn approve(&self, id: &str) -> anyhow::Result<()> {
        let url = format!("{}/ai/approvals/{id}", self.base);
        let r = self.http.post(url).json(&json!({ "decision": "approve" })).send().await?;
        anyhow::ensure!(r.status().is_success(), "approving {id}: {} {}", r.status(), r.text().await?);
        Ok(())
    }
}

/// Part 3: `n` approval round trips, nothing else in flight.
async fn approvals(fleet: &Fleet, outbox: &Outbox, admin: &Admin, n: usize) -> anyhow::Result<Value> {
    let (mut listed, mut requested, mut answered, mut posted) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let t = now_us();
        let ack = fleet.inject(mention(format!("say it with approval {i}"))).await.map_err(fail)?;
        let (id, requested_us) = admin.listed(&ack.event_id).await?;
        listed.push(ms(t, now_us()));
        requested.push(ms(t, requested_us));
        let t = now_us();
        admin.approve(&id).await?;
        posted.push(ms(t, now_us()));
        let reply = outbox.reply(&ack.event_id).await?;
        check_echo(&reply, "gated.echo")?;
        answered.push(ms(t, reply.at_us));
    }
    let (listed_p50, listed_p99) = p50_p99(&mut listed, 2);
    let (answered_p50, answered_p99) = p50_p99(&mut answered, 2);
    Ok(json!({
        "rounds": n,
        "listed_p50_ms": listed_p50,
        "listed_p99_ms": listed_p99,
        "requested_p50_ms": round(percentile(&mut requested, 0.5), 2),
        "post_p50_ms": round(percentile(&mut posted, 0.5), 2),
        "approved_to_reply_p50_ms": answered_p50,
        "approved_to_reply_p99_ms": answered_p99,
    }))
}

/// Part 4: decision and reply latency of plain mentions, alternately with a plan parked and
/// without.
async fn parked(fleet: &Fleet, outbox: &Outbox, admin: &Admin, rounds: usize) -> anyhow::Result<Value> {
    let rounds = rounds.max(2);
    let mut decision: [Vec<f64>; 2] = Default::default();
    let mut reply: [Vec<f64>; 2] = Default::default();
    let mut asked = 0;
    for r in 0..rounds {
        // Rounds alternate, the pair's order swapped every other pair.
        let with_parked = (r % 2 == 1) ^ (r / 2 % 2 == 1);
        let waiting = match with_parked {
            true => {
                let ack = fleet.inject(mention(format!("park this with approval {r}"))).await.map_err(fail)?;
                let (id, _) = admin.listed(&ack.event_id).await?;
                Some((ack.event_id, id))
            }
            false => None,
        };
        let mut started = Vec::new();
        for i in 0..PER_ROUND {
            asked += 1;
            let (event_id, t, o) = ask(fleet, outbox, mention(format!("how is item {asked} going?"))).await?;
            anyhow::ensure!(!o.text.contains("I called"), "a plain mention made a call: {}", o.text);
            if i > 0 {
                reply[usize::from(with_parked)].push(ms(t, o.at_us));
                started.push((event_id, t));
            }
        }
        if let Some((event_id, id)) = waiting {
            admin.approve(&id).await?;
            check_echo(&outbox.reply(&event_id).await?, "gated.echo")?;
        }
        let storage = fleet.storage.clone();
        let decided = tokio::task::spawn_blocking(move || storage.recent_decisions(PERSONA, 64)).await??;
        for (event_id, t) in started {
            let d = decided
                .iter()
                .filter(|d| d.event_id == event_id)
                .min_by_key(|d| d.at_us)
                .ok_or_else(|| anyhow::anyhow!("no decision of {PERSONA} on {event_id}"))?;
            decision[usize::from(with_parked)].push(ms(t, d.at_us));
        }
    }
    let [mut d_none, mut d_parked] = decision;
    let [mut r_none, mut r_parked] = reply;
    let (dn50, dn99) = p50_p99(&mut d_none, 3);
    let (dp50, dp99) = p50_p99(&mut d_parked, 3);
    let (rn50, rn99) = p50_p99(&mut r_none, 3);
    let (rp50, rp99) = p50_p99(&mut r_parked, 3);
    let ratio = |a: f64, b: f64| round(a / b.max(1e-9), 2);
    Ok(json!({
        "rounds": rounds,
        "events_each": d_none.len(),
        "decision_p50_none_ms": dn50,
        "decision_p50_parked_ms": dp50,
        "decision_p50_parked_over_none": ratio(dp50, dn50),
        "decision_p99_none_ms": dn99,
        "decision_p99_parked_ms": dp99,
        "reply_p50_none_ms": rn50,
        "reply_p50_parked_ms": rp50,
        "reply_p50_parked_over_none": ratio(rp50, rn50),
        "reply_p99_none_ms": rn99,
        "reply_p99_parked_ms": rp99,
    }))
}

pub async fn tools(opts: Options) -> anyhow::Result<Value> {
    let program = everything()?;
    let dir = tempfile::tempdir()?;
    let fleet = Fleet::start(fleet_config(&program, dir.path())?).await?;
    let host = fleet.tools.clone().ok_or_else(|| anyhow::anyhow!("the fleet started no tool host"))?;
    let started = Instant::now();
    loop {
        let d = dump(&host).await?;
        if d.servers.iter().all(|s| s.state == "ready") {
            break;
        }
        anyhow::ensure!(started.elapsed() < WAIT, "the tool servers were not ready within {WAIT:?}: {d:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let outbox = Outbox::watch(fleet.storage.clone())?;
    let admin = Admin { http: reqwest::Client::new(), base: format!("http://{}", fleet.addr) };
    let t = Instant::now();
    let figures = async {
        // The overhead first, while both servers have served only its calls (node compiles what
        // runs often: a server that served more would be faster).
        let overhead = overhead(&host, &program, opts.calls.max(ROUNDS)).await?;
        let throughput = throughput(&fleet, &outbox, &host, opts.events.max(1)).await?;
        let approval = approvals(&fleet, &outbox, &admin, opts.approvals.max(1)).await?;
        let parked = parked(&fleet, &outbox, &admin, opts.rounds).await?;
        anyhow::Ok((throughput, overhead, approval, parked))
    }
    .await;
    let wall_s = t.elapsed().as_secs_f64();
    drop(outbox);
    fleet.shutdown(Duration::from_secs(5)).await;
    let (throughput, overhead, approval, parked) = figures?;
    // The calls, the approvals and the plans parked on them, fed to the lifecycles again.
    let replay = super::replayed(dir.path())?;
    Ok(json!({
        "bench": "tools",
        "tool": "server-everything echo (stdio)",
        "throughput": throughput,
        "overhead": overhead,
        "approval": approval,
        "parked": parked,
        "replay": replay,
        "wall_s": round(wall_s, 1),
    }))
}
