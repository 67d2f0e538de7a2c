//! `mindfleet bench NAME --json`: each benchmark prints one JSON object of its figures.
//! The figures and the commands that reproduce them are in `docs/BENCHMARKS.md`.

pub mod chaos;
pub mod cluster;
pub mod cognition;
pub mod conversation;
pub mod dashboard;
pub mod decoding;
pub mod embed;
pub mod index;
pub mod llm;
pub mod lora;
pub mod memory_eval;
pub mod models;
pub mod peak;
pub mod rag_eval;
pub mod record;
pub mod redundancy;
pub mod refs_eval;
pub mod replay;
pub mod replies;
pub mod study;
pub mod tools;
pub mod turns;
pub mod webhook;

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mindfleet_core::event::{Event, EventInput, SenderKind};
use mindfleet_core::record::Mood;
use mindfleet_personas::gate::{GateState, PriorityInput, gate_chain, priority};
use serde_json::{Value, json};

use mindfleet::fleet::Fleet;

/// Resident set size of this process, in KiB (Linux).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time this process used so far (user and system, every thread), in seconds.
pub fn cpu_s() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given and reads nothing else.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// Bytes this process has had written to storage so far (Linux's `/proc/self/io`; 0 where it
/// cannot be read).
pub fn written_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines().find_map(|l| l.strip_prefix("write_bytes: ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// The `p`-quantile of `xs` (nearest rank; sorts them); 0 for none: the fleet's one percentile.
pub use mindfleet_core::quantile::percentile;

/// The words of a text as the reply benchmarks read it, lower-cased: runs of letters, digits and
/// `_` (apart from the personas' own reading, which they measure).
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// The median of `xs` as [`percentile`] takes it (the lower one of an even count).
pub fn median(mut xs: Vec<f64>) -> f64 {
    percentile(&mut xs, 0.5)
}

/// Runs a peer benchmark: `python -c script` with `input` as JSON on stdin, one JSON object of
/// figures on stdout; or why it could not run (`what` names the peer).
pub(crate) fn run_peer(python: &str, script: &str, input: &Value, what: &str) -> Result<Value, String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{python}: {e}"))?;
    child.stdin.take().expect("piped").write_all(input.to_string().as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        return Err(format!("{python} ({what}) failed: {last}"));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{what} output: {e}"))
}

pub(crate) fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// Launch time and idle RSS of a fleet of `n` personas (each with its three children).
pub async fn launch(n: usize) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    let cfg = mindfleet::defaults::synthetic_fleet(n, dir.path().to_path_buf());
    let rss_before = rss_kib();
    let t = Instant::now();
    let fleet = Fleet::start(cfg).await?;
    let launch_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(fleet.wait_idle(Duration::from_secs(30)).await, "fleet did not settle");
    // Idle RSS, before the dump below allocates a JSON-sized picture of the whole fleet.
    let rss = rss_kib();
    let dump = fleet.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let running = dump.personas.iter().filter(|p| p.actors.inbox.status == "running").count();
    anyhow::ensure!(running == n, "only {running} of {n} personas running");
    let t = Instant::now();
    fleet.shutdown(Duration::from_secs(5)).await;
    Ok(json!({
        "bench": "launch",
        "personas": n,
        "actors": 4 * n + 3,
        "launch_s": round(launch_s, 3),
        "rss_mb": round(rss as f64 / 1024.0, 1),
        "rss_growth_mb": round(rss.saturating_sub(rss_before) as f64 / 1024.0, 1),
        "kib_per_persona": round(rss.saturating_sub(rss_before) as f64 / n as f64, 2),
        "shutdown_s": round(t.elapsed().as_secs_f64(), 3),
    }))
}

fn sample_events() -> Vec<Event> {
    let texts = [
        "@helper can you review auth.rs?",
        "the deploy is failing again, latency is up",
        "happy birthday!",
        "anyone seen the incident report?",
        "I agree with that",
        "please summarise the standup",
        "refactor the database layer",
        "lunch?",
    ];
    let kinds = [SenderKind::Human, SenderKind::Persona, SenderKind::Human, SenderKind::System];
    (0..64)
        .map(|i| {
            EventInput {
                domain: "chat".into(),
                room: "general".into(),
                from: if i % 5 == 0 { "helper".into() } else { format!("user{i}") },
                sender_kind: kinds[i % kinds.len()],
                text: texts[i % texts.len()].into(),
                priority: (i % 7 == 0).then_some(0.9),
                ..Default::default()
            }
            .validate()
            .expect("valid sample")
        })
        .collect()
}

/// Decisions per second of the pure gate chain (fast path, thermal, deterministic scorer) on
/// one core, and with the inbox priority computed too.
pub fn gate(seconds: f64) -> Value {
    let events = sample_events();
    let expertise: Vec<String> = ["review", "auth", "deploy", "latency"].iter().map(|s| s.to_string()).collect();
    let moods = [Mood::Idle, Mood::Active, Mood::Tired, Mood::Overwhelmed];
    let states: Vec<GateState> = (0..16)
        .map(|i| GateState {
            mood: moods[i % 4],
            dormant: i % 7 == 0,
            load: 0.1 * (i % 10) as f64,
            capacity: 1.0 - 0.1 * (i % 10) as f64,
            focus_intensity: 0.3 * (i % 4) as f64,
            same_domain: i % 2 == 0,
            recent_persona_msgs: i % 3,
            keyword_hits: i % 4,
        })
        .collect();
    let now = events[0].ts_us;
    let run = |with_priority: bool| {
        let budget = Duration::from_secs_f64(seconds);
        let t = Instant::now();
        let mut n: u64 = 0;
        while t.elapsed() < budget {
            for _ in 0..1024 {
                let e = &events[(n % 64) as usize];
                let s = &states[(n % 16) as usize];
                let p = if with_priority {
                    priority(&PriorityInput {
                        event: e,
                        persona: "helper",
                        expertise: &expertise,
                        now_us: now,
                        spoke_recently: n.is_multiple_of(2),
                    })
                } else {
                    0.05 * (n % 20) as f64
                };
                black_box(gate_chain(black_box(e), "helper", p, s));
                n += 1;
            }
        }
        n as f64 / t.elapsed().as_secs_f64()
    };
    let gate_only = run(false);
    let with_priority = run(true);
    json!({
        "bench": "gate",
        "decisions_per_s": gate_only.round(),
        "ns_per_decision": round(1e9 / gate_only, 1),
        "with_priority_per_s": with_priority.round(),
        "threads": 1,
    })
}

/// Durable injection over HTTP with `clients` concurrent keep-alive clients.
pub async fn inject(clients: usize, events: usize, personas: usize) -> anyhow::Result<Value> {
    inject_with(clients, events, personas, true).await.map(|(v, _)| v)
}

/// [`inject`], recording the personas' histories or not (`[storage] record`); with its data dir.
pub async fn inject_with(
    clients: usize,
    events: usize,
    personas: usize,
    record: bool,
) -> anyhow::Result<(Value, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let mut cfg = mindfleet::defaults::synthetic_fleet(personas, dir.path().to_path_buf());
    cfg.storage.record = record;
    for (i, p) in cfg.personas.iter_mut().enumerate() {
        p.rooms = vec![format!("room{i}")];
    }
    let fleet = Fleet::start(cfg).await?;
    let url = format!("http://{}/events", fleet.addr);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = Instant::now();
    let cpu = cpu_s();
    let written = written_bytes();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let url = url.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let http = reqwest::Client::builder().pool_max_idle_per_host(1).build().expect("client");
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= events {
                        break;
                    }
                    let body = json!({
                        "id": format!("bench-{i}"),
                        "domain": "chat",
                        "room": format!("room{}", i % personas),
                        "from": "bench",
                        "text": format!("load test message {i}"),
                    });
                    let s = Instant::now();
                    let r = http.post(&url).json(&body).send().await;
                    match r {
                        Ok(r) if r.status().is_success() => lat.push(s.elapsed().as_secs_f64() * 1e3),
                        Ok(r) => anyhow::bail!("event {i} refused: {}", r.status()),
                        Err(e) => anyhow::bail!("event {i}: {e}"),
                    }
                }
                Ok(lat)
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(events);
    for task in tasks {
        lat.extend(task.await??);
    }
    let elapsed = t.elapsed().as_secs_f64();
    anyhow::ensure!(fleet.wait_idle(Duration::from_secs(120)).await, "fleet did not finish the events");
    // What the events cost the process (the clients included) until every one was decided.
    let cpu_us_per_event = (cpu_s() - cpu) * 1e6 / events.max(1) as f64;
    let written_per_event = written_bytes().saturating_sub(written) as f64 / events.max(1) as f64;
    let stats = fleet.storage.stats().await?;
    fleet.shutdown(Duration::from_secs(5)).await;
    lat.sort_by(f64::total_cmp);
    let per_s = lat.len() as f64 / elapsed;
    let ceiling = clients as f64 / (stats.commit_p50_ms / 1e3);
    let figures = json!({
        "bench": "inject",
        "clients": clients,
        "events": lat.len(),
        "personas": personas,
        "acked_per_s": per_s.round(),
        "ack_p50_ms": round(percentile(&mut lat, 0.5), 2),
        "ack_p99_ms": round(percentile(&mut lat, 0.99), 2),
        "commit_p50_ms": round(stats.commit_p50_ms, 3),
        "fsync_p50_ms": round(stats.fsync_p50_ms, 3),
        "mean_batch": round(stats.mean_batch, 1),
        "ceiling_per_s": ceiling.round(),
        "fraction_of_ceiling": round(per_s / ceiling, 3),
        "decision_p50_ms": round(stats.decision_p50_ms, 2),
        "decision_p99_ms": round(stats.decision_p99_ms, 2),
        "cpu_us_per_event": round(cpu_us_per_event, 1),
        "written_bytes_per_event": written_per_event.round(),
        // What the personas made of the events, and the writer's work for them.
        "decisions_by_verdict": stats.decisions_by_verdict,
        "writer_requests": stats.requests,
        "writer_commits": stats.commits,
        "record": record,
    });
    Ok((figures, dir))
}

/// A steady open-loop load: `rate` undirected events per second into rooms of `room_size`
/// personas, for `seconds`, sampled every `every` seconds.
#[derive(Debug, Clone, Copy)]
pub struct SoakLoad {
    pub personas: usize,
    pub rate: usize,
    pub seconds: u64,
    pub every: u64,
    pub room_size: usize,
    /// Conversation memory on (and the embedding model).
    pub conversation: bool,
    /// Every persona on the local brain instead of the rules brain.
    pub local: bool,
}

/// The soak's open-loop load: every 10 ms the events due go out, each injection a task of its
/// own, so a slow acknowledgement never holds back the next events. If the fleet falls too far
/// behind (a second's worth of injections unanswered), the events due are counted in `behind`
/// instead of piling up.
struct Pacer {
    sent: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    in_flight: Arc<AtomicU64>,
    behind: Arc<AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Pacer {
    /// Sends `rate` events a second to the fleet's `rooms` rooms, until stopped.
    fn start(fleet: Arc<Fleet>, rate: usize, rooms: usize) -> Pacer {
        let sent = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let in_flight = Arc::new(AtomicU64::new(0));
        let behind = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let (sent, errors, stop) = (sent.clone(), errors.clone(), stop.clone());
            let (in_flight, behind) = (in_flight.clone(), behind.clone());
            tokio::spawn(async move {
                let per_tick = rate as f64 / 100.0;
                let mut owed = 0.0;
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut n: u64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    owed += per_tick;
                    let batch = owed.floor() as usize;
                    owed -= batch as f64;
                    for _ in 0..batch {
                        n += 1;
                        if in_flight.load(Ordering::Relaxed) >= rate as u64 {
                            behind.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        let e = EventInput {
                            domain: "chat".into(),
                            room: format!("room{}", n as usize % rooms),
                            from: format!("user{}", n % 97),
                            text: format!("update {n}: how is the work on item {} going", n % 13),
                            ..Default::default()
                        };
                        in_flight.fetch_add(1, Ordering::Relaxed);
                        let (fleet, sent, errors, in_flight) =
                            (fleet.clone(), sent.clone(), errors.clone(), in_flight.clone());
                        tokio::spawn(async move {
                            let r = fleet.inject(e).await;
                            drop(fleet); // before the count: the bench takes the fleet back at zero
                            match r {
                                Ok(_) => sent.fetch_add(1, Ordering::Relaxed),
                                Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                            };
                            in_flight.fetch_sub(1, Ordering::Relaxed);
                        });
                    }
                }
            })
        };
        Pacer { sent, errors, in_flight, behind, stop, task }
    }

    /// Stops sending and waits for every injection in flight to be answered; what was sent
    /// (acknowledged), refused, and left unsent because the fleet was behind.
    async fn stop(self) -> anyhow::Result<(u64, u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await?;
        while self.in_flight.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let count = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Ok((count(&self.sent), count(&self.errors), count(&self.behind)))
    }
}

/// Runs `load` on a new fleet, sampling RSS, queue lengths and the inject-to-decision latency;
/// flat RSS and queues mean the fleet keeps up. With `pages` > 0, that many dashboard pages are
/// open on it meanwhile ([`dashboard::Pages`]), and what they saw is under `pages`.
pub async fn soak(load: SoakLoad, pages: usize) -> anyhow::Result<Value> {
    soak_with(load, pages, |_| {}).await
}

/// [`soak`] on a fleet that `edit` changed first (its data dir, its webhooks).
pub async fn soak_with(
    load: SoakLoad,
    pages: usize,
    edit: impl FnOnce(&mut mindfleet_core::config::FleetConfig),
) -> anyhow::Result<Value> {
    let SoakLoad { personas, rate, seconds, every, room_size, conversation, local } = load;
    let dir = tempfile::tempdir()?;
    let mut cfg = mindfleet::defaults::synthetic_fleet(personas, dir.path().to_path_buf());
    cfg.conversation.enabled = conversation;
    let rooms = personas.div_ceil(room_size).max(1);
    for (i, p) in cfg.personas.iter_mut().enumerate() {
        p.rooms = vec![format!("room{}", i % rooms)];
        if local {
            p.brain = mindfleet_core::config::BrainKind::Local;
        }
    }
    edit(&mut cfg);
    let fleet = Arc::new(Fleet::start(cfg).await?);
    let rss_start = rss_kib();
    let cpu_start = cpu_s();
    let pages = (pages > 0).then(|| dashboard::Pages::open(fleet.addr, pages, "p0"));
    let pacer = Pacer::start(fleet.clone(), rate, rooms);
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut writer_busy = Vec::new();
    let (mut busy_before, mut at_before) = (0.0, Instant::now());
    let (mut rss_max, mut pending_max, mut queued_max, mut p99_max) = (0u64, 0u64, 0usize, 0f64);
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(every)).await;
        let stats = fleet.storage.stats().await?;
        let sched = ractor::call_t!(fleet.scheduler.actor(), mindfleet_core::sched::SchedulerMsg::Stats, 5000)
            .map_err(|e| anyhow::anyhow!("scheduler: {e}"))?;
        let rss = rss_kib();
        rss_max = rss_max.max(rss);
        pending_max = pending_max.max(stats.pending);
        queued_max = queued_max.max(sched.queued());
        p99_max = p99_max.max(stats.decision_p99_ms);
        writer_busy.push((stats.busy_s - busy_before) / at_before.elapsed().as_secs_f64());
        samples.push(json!({
            "t_s": started.elapsed().as_secs(),
            "sent": pacer.sent.load(Ordering::Relaxed),
            "rss_mb": round(rss as f64 / 1024.0, 1),
            "pending": stats.pending,
            "writer_queue": stats.queued_ops,
            "queued": sched.queued(),
            // urgent, interactive, work, background
            "queued_by_class": [sched.urgent.queued, sched.interactive.queued, sched.work.queued, sched.background.queued],
            "running_by_class": [sched.urgent.running, sched.interactive.running, sched.work.running, sched.background.running],
            "decision_p99_ms": round(stats.decision_p99_ms, 1),
            "writer_busy": round(writer_busy.last().copied().unwrap_or(0.0), 3),
            "mean_batch": round(stats.mean_batch, 1),
            "commit_p50_ms": round(stats.commit_p50_ms, 2),
        }));
        (busy_before, at_before) = (stats.busy_s, Instant::now());
    }
    let (sent, errors, behind) = pacer.stop().await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_s() - cpu_start;
    let pages = match pages {
        Some(p) => p.finish().await,
        None => Value::Null,
    };
    let idle = fleet.wait_idle(Duration::from_secs(60)).await;
    let stats = fleet.storage.stats().await?;
    let d = fleet.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let fleet = Arc::into_inner(fleet).ok_or_else(|| anyhow::anyhow!("fleet still shared"))?;
    fleet.shutdown(Duration::from_secs(5)).await;
    let convo = |f: fn(&mindfleet_core::dump::ConversationDump) -> u64| {
        d.personas.iter().filter_map(|p| p.conversation.as_ref()).map(f).sum::<u64>()
    };
    let llm = &d.llm;
    let batching = llm.batching.clone().unwrap_or_default();
    let mb = |b: u64| round(b as f64 / (1024.0 * 1024.0), 1);
    Ok(json!({
        "bench": "soak",
        "personas": personas,
        "brain": if local { "local" } else { "rules" },
        "llm": local.then(|| json!({
            "status": llm.status,
            "model_calls": llm.requests,
            "model_tokens_in": llm.tokens_in,
            "model_tokens_out": llm.tokens_out,
            "mean_batch": round(batching.mean_batch, 2),
            "prefix_hit_rate": round(batching.prefix_hit_rate, 3),
            "waiting_at_end": batching.waiting,
            "kv_peak_mb": mb(batching.kv_peak_bytes),
            "kv_bound_mb": mb(batching.kv_bound_bytes),
        })),
        "rate_per_s": rate,
        "room_size": room_size,
        "conversation": conversation,
        "conversation_pending": convo(|c| c.pending),
        "conversation_stored": convo(|c| c.stored),
        "recalls": convo(|c| c.recalls),
        "recalls_by_words": convo(|c| c.recalls_by_words),
        "seconds": seconds,
        "sent": sent,
        "achieved_per_s": round(sent as f64 / elapsed, 1),
        "errors": errors,
        "behind": behind,
        "rss_start_mb": round(rss_start as f64 / 1024.0, 1),
        "rss_max_mb": round(rss_max as f64 / 1024.0, 1),
        "pending_max": pending_max,
        "queued_max": queued_max,
        "decision_p50_ms": round(stats.decision_p50_ms, 2),
        "decision_p99_ms": round(stats.decision_p99_ms, 2),
        "decision_p99_max_ms": round(p99_max, 2),
        "decision_p99_all_ms": round(stats.decision_p99_all_ms, 2),
        "decision_max_ms": round(stats.decision_max_ms, 1),
        "cpu_s": round(cpu, 1),
        "writer_busy_mean": round(writer_busy.iter().sum::<f64>() / writer_busy.len().max(1) as f64, 3),
        "mean_batch": round(stats.mean_batch, 1),
        "commit_p50_ms": round(stats.commit_p50_ms, 2),
        "commit_p99_ms": round(stats.commit_p99_ms, 2),
        "fsync_p50_ms": round(stats.fsync_p50_ms, 2),
        "drained": idle,
        "coordination_efficiency": round(d.coordination.efficiency, 3),
        "coordination": d.coordination,
        "decisions_by_verdict": stats.decisions_by_verdict,
        "webhooks": d.webhooks,
        "pages": pages,
        "samples": samples,
    }))
}

/// The exact replay of a stopped fleet's data dir (`mindfleet replay`): the outcome, what was
/// checked, and how much faster than recorded it ran. A fleet just shut down may hold its
/// database a moment longer: the read waits for it (or reads a copy).
pub fn replayed(data_dir: &std::path::Path) -> anyhow::Result<Value> {
    let waited = Instant::now();
    let reader = loop {
        let reader = mindfleet_replay::HistoryReader::open(data_dir)?;
        if reader.copied.is_none() || waited.elapsed() > Duration::from_secs(5) {
            break reader;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let report = mindfleet_replay::replay(&reader, &mindfleet_replay::Options::default())?;
    let sum = |f: fn(&mindfleet_replay::PersonaReport) -> u64| report.personas.iter().map(f).sum::<u64>();
    let recorded_s = report.personas.iter().map(|p| p.recorded_ms).sum::<f64>() / 1e3;
    let replay_s = report.personas.iter().map(|p| p.replay_ms).sum::<f64>() / 1e3;
    let mut v = json!({
        "outcome": serde_json::to_value(&report.outcome)?["outcome"],
        "personas": report.personas.len(),
        "runs": sum(|p| p.runs),
        "inputs": sum(|p| p.inputs),
        "commits": sum(|p| p.commits),
        "commits_checked": sum(|p| p.commits_checked),
        "self_state_changes": sum(|p| p.self_state_changes),
        "recorded_s": round(recorded_s, 3),
        "replay_s": round(replay_s, 4),
        "times_faster": round(recorded_s / replay_s.max(1e-9), 1),
    });
    if !report.identical() {
        v["divergence"] = serde_json::to_value(&report.outcome)?;
    }
    Ok(v)
}
