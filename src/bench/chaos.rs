//! `mindfleet bench chaos`: rounds of `kill -9` at a random moment of a real `mindfleet run`
//! child under concurrent injection over HTTP (every other round also while it indexes a
//! generated source tree), each checked after a restart against the decision journal; and,
//! with `--disk-full` as root, a round on a small tmpfs that fills up and is given space again.
//!
//! A round: start the fleet on the round's data dir (the same for every round), inject from
//! several clients, `kill -9` it a random time (seeded) after the first acknowledgement, start
//! it again (every third round: kill it once more a random moment after it answers `/health`,
//! while it works off what the first kill left pending, and start it again), wait until
//! nothing is pending, stop it with SIGTERM and read every decision from
//! its storage (the complete journal: the fleet keeps up to `decisions_per_persona`, set here
//! far above what a run decides). Each event acknowledged (200, `accepted`) was delivered to the
//! personas its answer names; each of those deliveries must end with exactly one final decision (a deferral is not one)
//! (docs/RUNTIME-SEMANTICS.md, "Delivery"): none is **lost**, two or more are **decided twice**.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use mindfleet_core::config::StorageConfig;
use mindfleet_store::{Storage, lock_data_dir};
use serde_json::{Value, json};

use super::{percentile, round};

/// The options of `bench chaos`.
#[derive(Debug, Clone)]
pub struct Options {
    pub rounds: usize,
    /// Seeds the moments of the kills.
    pub seed: u64,
    /// Concurrent injecting clients.
    pub clients: usize,
    /// Also the disk-full round (needs root: it mounts a tmpfs).
    pub disk_full: bool,
}

/// Longest wait for a fleet to report its address, answer `/health`, or finish what is pending.
const DEADLINE: Duration = Duration::from_secs(120);
/// The kill comes up to this long after the first acknowledgement of a round.
const KILL_WINDOW_MS: u64 = 800;
/// A recovery kill comes up to this long after the restarted fleet answers `/health`.
const RECOVERY_KILL_WINDOW_MS: u64 = 150;
/// Files of the tree an indexing round indexes (fresh ones each such round).
const TREE_FILES: usize = 300;
/// Size of an event's text in the disk-full round.
const BIG_EVENT_BYTES: usize = 20_000;
/// The disk-full round's filesystem, and what it grows to when space is given back.
const TMPFS_SIZE: &str = "24m";
const TMPFS_FREED: &str = "64m";
/// How long the fleet may take to heal once space is back (its writer retries with a backoff
/// capped at 10 s).
const HEAL_DEADLINE: Duration = Duration::from_secs(60);

/// Five rules-brain personas in two rooms; the decision journal never trimmed within a run.
const FLEET: &str = r#"[fleet]
name = "bench-chaos"
brain = "rules"
[admin]
addr = "127.0.0.1:0"
[storage]
decisions_per_persona = 10000000
[coordination]
window_ms = 20
[conversation]
enabled = false
[models]
pull = false

[[persona]]
name = "helper"
role = "assistant"
rooms = ["general"]
expertise = ["docs"]

[[persona]]
name = "reviewer"
role = "code reviewer"
rooms = ["general"]
expertise = ["review", "rust"]

[[persona]]
name = "scribe"
role = "note taker"
rooms = ["general", "ops"]

[[persona]]
name = "oncall"
role = "on-call engineer"
rooms = ["ops"]
expertise = ["deploy", "latency"]

[[persona]]
name = "planner"
role = "project planner"
rooms = ["ops"]
"#;

/// splitmix64: the kill moments, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A seed from the clock, for a run that names none.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
}

/// What a child printed on stderr: its last lines, and how much in all.
#[derive(Default)]
struct Log {
    tail: std::collections::VecDeque<String>,
    bytes: u64,
}

impl Log {
    /// The last lines, without terminal colours.
    fn tail(&self) -> String {
        let lines: Vec<String> = self.tail.iter().map(|l| strip_ansi(l)).collect();
        lines.join("\n")
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, ended by a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A `mindfleet run` child; killed (and reaped) when dropped.
struct Fleet {
    child: Child,
    addr: String,
    log: Arc<Mutex<Log>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Fleet {
    /// Starts `mindfleet run fleet --data data` and waits for the admin address it reports.
    async fn start(fleet: &Path, data: &Path) -> anyhow::Result<Fleet> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("run")
            .arg(fleet)
            .arg("--data")
            .arg(data)
            .env("MINDFLEET_LOG", "warn,mindfleet=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("mindfleet run")?;
        let stderr = child.stderr.take().ok_or_else(|| anyhow::anyhow!("the fleet's stderr"))?;
        let log: Arc<Mutex<Log>> = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(addr) = line.split("admin API on http://").nth(1)
                        && let Some(tx) = tx.take()
                    {
                        let _ = tx.send(addr.trim().to_string());
                    }
                    let mut l = lock(&log);
                    l.bytes += line.len() as u64 + 1;
                    if l.tail.len() == 8 {
                        l.tail.pop_front();
                    }
                    l.tail.push_back(line);
                }
            });
        }
        let mut fleet = Fleet { child, addr: String::new(), log };
        match tokio::time::timeout(DEADLINE, rx).await {
            Ok(Ok(addr)) => {
                fleet.addr = addr;
                Ok(fleet)
            }
            _ => {
                let _ = fleet.child.kill();
                let status = fleet.child.wait()?;
                anyhow::bail!(
                    "the fleet exited ({status}) before reporting its admin address:\n{}",
                    lock(&fleet.log).tail()
                )
            }
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn stderr_bytes(&self) -> u64 {
        lock(&self.log).bytes
    }

    /// Polls `/health` until it answers 200.
    async fn healthy(&self, http: &reqwest::Client, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(r) = http.get(self.url("/health")).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "/health did not answer 200 within {within:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Polls the dump until no delivery is pending in storage; the seconds it took.
    async fn idle(&self, http: &reqwest::Client, within: Duration) -> anyhow::Result<f64> {
        let started = Instant::now();
        loop {
            if let Ok(r) = http.get(self.url("/dump")).send().await
                && let Ok(d) = r.json::<Value>().await
                && d["storage"]["pending"] == 0
            {
                return Ok(started.elapsed().as_secs_f64());
            }
            anyhow::ensure!(
                started.elapsed() < within,
                "deliveries still pending after {within:?}:\n{}",
                lock(&self.log).tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, and its exit code once it exits (None: it did not within 15 s and was killed).
    fn stop(&mut self) -> anyhow::Result<Option<i32>> {
        // SAFETY: kill sends a signal to our own child, which has not been reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(s.code());
            }
            if Instant::now() > deadline {
                self.child.kill()?;
                self.child.wait()?;
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Every final decision in the stored journal of the (stopped) fleet on `data`: how many each
/// (persona, event id) has. A deferral is not one: the persona decides the delivery again when
/// it takes it up.
async fn stored_decisions(data: &Path) -> anyhow::Result<HashMap<(String, String), u32>> {
    let data = data.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let _lock = lock_data_dir(&data)?;
        let storage =
            Storage::open(&StorageConfig { data_dir: data.clone(), ..mindfleet::defaults::default_fleet().storage })?;
        let mut n: HashMap<(String, String), u32> = HashMap::new();
        for (persona, d) in storage.all_decisions()? {
            if d.verdict != mindfleet_core::record::Verdict::Defer {
                *n.entry((persona, d.event_id)).or_default() += 1;
            }
        }
        drop(storage);
        // The database closes when its writer thread ends, after the handle is gone; the next
        // round's fleet opens it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while writer_running() {
            anyhow::ensure!(Instant::now() < deadline, "the storage writer of the check did not stop within 10 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        anyhow::Ok(n)
    })
    .await?
}

/// Whether a thread of this process is a storage writer (Linux: by the thread names).
fn writer_running() -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return false };
    tasks
        .filter_map(Result::ok)
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|name| name.trim() == "storage-writer"))
}

/// Acknowledged events: (event id, personas it was delivered to).
type Acked = Vec<(String, Vec<String>)>;

/// The acknowledged deliveries against the journal.
struct Tally {
    deliveries: usize,
    decided: usize,
    lost: Vec<String>,
    twice: Vec<String>,
}

fn tally(acked: &Acked, decisions: &HashMap<(String, String), u32>) -> Tally {
    let mut t = Tally { deliveries: 0, decided: 0, lost: Vec::new(), twice: Vec::new() };
    for (id, personas) in acked {
        for p in personas {
            t.deliveries += 1;
            match decisions.get(&(p.clone(), id.clone())).copied().unwrap_or(0) {
                0 => t.lost.push(format!("{p}:{id}")),
                1 => t.decided += 1,
                n => {
                    t.decided += 1;
                    t.twice.push(format!("{p}:{id} x{n}"));
                }
            }
        }
    }
    t
}

/// The first few of `ids`, for the report.
fn sample(ids: &[String]) -> Value {
    json!(ids.iter().take(10).collect::<Vec<_>>())
}

/// Writes `n` small Rust files under `dir`, in ten modules, each a little different.
fn write_tree(dir: &Path, n: usize, salt: usize) -> anyhow::Result<()> {
    for k in 0..n {
        let module = dir.join(format!("mod{}", k % 10));
        std::fs::create_dir_all(&module)?;
        let body = format!(
            "//! Module {k} of the chaos tree ({salt}).\n\n\
             /// Adds the {k}th offset to `x` and clamps it below {limit}.\n\
             pub fn step_{k}(x: u64) -> u64 {{\n    (x + {k}).min({limit})\n}}\n\n\
             /// Parses a record of kind {kind} from `line`, or says why not.\n\
             pub fn parse_{kind}_{k}(line: &str) -> Result<(String, u64), String> {{\n    \
             let (name, n) = line.split_once('=').ok_or_else(|| format!(\"no `=` in {{line}}\"))?;\n    \
             Ok((name.trim().to_string(), n.trim().parse().map_err(|e| format!(\"{{e}}\"))?))\n}}\n",
            limit = 1000 + 7 * k,
            kind = ["config", "event", "metric", "ticket"][k % 4],
        );
        std::fs::write(module.join(format!("file{k}.rs")), body)?;
    }
    Ok(())
}

/// The context shared by the rounds.
struct Ctx {
    fleet: PathBuf,
    data: PathBuf,
    tree: PathBuf,
    seed: u64,
    clients: usize,
    http: reqwest::Client,
}

/// What the injecting clients of a round saw.
#[derive(Default)]
struct Injection {
    acked: Mutex<Acked>,
    /// Requests sent before the kill and never answered.
    in_flight_at_kill: AtomicUsize,
    /// Requests sent after the kill, while the process was dying or gone.
    sent_after_kill: AtomicUsize,
    /// Answers other than 200 `accepted`, and transport errors while nothing was killed.
    refused: AtomicUsize,
    /// The first answer other than 200: status and body.
    first_refusal: OnceLock<Value>,
    kill_at: OnceLock<Instant>,
}

/// `clients` tasks injecting into `fleet` until it stops answering (or `stop` is set); event
/// ids `{prefix}-c{client}-{n}`, texts of `text_bytes` at least.
fn inject(
    http: &reqwest::Client,
    url: String,
    clients: usize,
    prefix: String,
    text_bytes: usize,
    state: Arc<Injection>,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|c| {
            let (http, url, prefix, state, stop) =
                (http.clone(), url.clone(), prefix.clone(), state.clone(), stop.clone());
            tokio::spawn(async move {
                for i in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let id = format!("{prefix}-c{c}-{i}");
                    let (room, mention) = if i % 2 == 0 { ("general", "@reviewer") } else { ("ops", "@oncall") };
                    let mut text = if i % 3 == 0 {
                        format!("{mention} please look at item {c}-{i}")
                    } else {
                        format!("status note {c}-{i}: the deploy of build {i} is done")
                    };
                    while text.len() < text_bytes {
                        text.push_str(&format!(" filler {c}-{i}-{}", text.len()));
                    }
                    let body =
                        json!({"id": id, "domain": "chat", "room": room, "from": format!("user{c}"), "text": text});
                    let sent = Instant::now();
                    match http.post(&url).json(&body).send().await {
                        Ok(r) if r.status().is_success() => {
                            let Ok(v) = r.json::<Value>().await else {
                                // The answer was cut: not acknowledged.
                                state.in_flight_at_kill.fetch_add(1, Ordering::Relaxed);
                                break;
                            };
                            if v["accepted"] == true && v["duplicate"] != true {
                                let personas = v["personas"].as_array().map(|a| personas_of(a)).unwrap_or_default();
                                lock(&state.acked).push((id, personas));
                            } else {
                                state.refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Ok(r) => {
                            state.refused.fetch_add(1, Ordering::Relaxed);
                            let (status, body) = answer(Ok(r)).await;
                            let _ = state.first_refusal.set(json!({"status": status, "body": body}));
                            break;
                        }
                        Err(_) => {
                            match state.kill_at.get() {
                                Some(k) if sent < *k => state.in_flight_at_kill.fetch_add(1, Ordering::Relaxed),
                                Some(_) => state.sent_after_kill.fetch_add(1, Ordering::Relaxed),
                                None => state.refused.fetch_add(1, Ordering::Relaxed),
                            };
                            break;
                        }
                    }
                }
            })
        })
        .collect()
}

/// One kill round: figures and the acknowledged deliveries' fate.
async fn kill_round(ctx: &Ctx, r: usize, rng: &mut Rng) -> anyhow::Result<Value> {
    let indexing = r % 2 == 1;
    let kill_after_ms = rng.below(KILL_WINDOW_MS);
    // Every third round is killed again while the restarted fleet works off what the first
    // kill left pending.
    let recovery_kill_after_ms = rng.below(RECOVERY_KILL_WINDOW_MS);
    let recovery_kill = r % 3 == 2;
    let mut fleet = Fleet::start(&ctx.fleet, &ctx.data).await?;
    fleet.healthy(&ctx.http, DEADLINE).await?;

    // An indexing round indexes a fresh part of the tree meanwhile.
    let index_done = Arc::new(AtomicBool::new(false));
    let index = indexing.then(|| index_part(ctx, fleet.url("/rag/index"), r, index_done.clone())).transpose()?;

    let state = Arc::new(Injection::default());
    let stop = Arc::new(AtomicBool::new(false));
    let prefix = format!("chaos-{:x}-r{r}", ctx.seed);
    let clients = inject(&ctx.http, fleet.url("/events"), ctx.clients, prefix, 0, state.clone(), stop.clone());
    let deadline = Instant::now() + DEADLINE;
    while lock(&state.acked).is_empty() {
        if Instant::now() > deadline || clients.iter().all(|c| c.is_finished()) {
            stop.store(true, Ordering::Relaxed);
            anyhow::bail!(
                "round {r}: no event acknowledged ({} refused):\n{}",
                state.refused.load(Ordering::Relaxed),
                lock(&fleet.log).tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
    let killed = Instant::now();
    let _ = state.kill_at.set(killed);
    fleet.child.kill()?; // SIGKILL
    fleet.child.wait()?;
    let indexing_at_kill = indexing && !index_done.load(Ordering::Acquire);
    for c in clients {
        c.await?;
    }
    let index_answer = match index {
        Some(t) => match t.await? {
            Ok((status, body)) => json!({"status": status, "body": body.chars().take(200).collect::<String>()}),
            Err(e) => json!({"error": format!("{e:#}")}),
        },
        None => Value::Null,
    };
    let acked = std::mem::take(&mut *lock(&state.acked));
    drop(fleet);

    let mut fleet = Fleet::start(&ctx.fleet, &ctx.data).await?;
    fleet.healthy(&ctx.http, DEADLINE).await?;
    let restart_s = killed.elapsed().as_secs_f64();
    let recovery = match recovery_kill {
        true => {
            let (restarted, figures) = kill_in_recovery(ctx, fleet, recovery_kill_after_ms).await?;
            fleet = restarted;
            figures
        }
        false => Value::Null,
    };
    let idle_s = fleet.idle(&ctx.http, DEADLINE).await.with_context(|| format!("round {r}"))?;
    // The index, cut mid-write, still answers.
    let search_status = match indexing {
        true => {
            let r = ctx
                .http
                .post(fleet.url("/rag/search"))
                .json(&json!({"query": "parse a record", "mode": "keyword"}))
                .send()
                .await?;
            json!(r.status().as_u16())
        }
        false => Value::Null,
    };
    let exit = fleet.stop()?;
    drop(fleet);
    let t = tally(&acked, &stored_decisions(&ctx.data).await?);
    Ok(json!({
        "round": r,
        "indexing": indexing,
        "kill_after_ms": kill_after_ms,
        "acknowledged": acked.len(),
        "deliveries": t.deliveries,
        "decided": t.decided,
        "lost": t.lost.len(),
        "decided_twice": t.twice.len(),
        // Each client injects until the kill cuts it: these two add up to the clients.
        "in_flight_at_kill": state.in_flight_at_kill.load(Ordering::Relaxed),
        "sent_after_kill": state.sent_after_kill.load(Ordering::Relaxed),
        "refused": state.refused.load(Ordering::Relaxed),
        "first_refusal": state.first_refusal.get(),
        "indexing_at_kill": indexing_at_kill,
        "index_answer": index_answer,
        "search_after_restart": search_status,
        "restart_s": round(restart_s, 3),
        "recovery_kill": recovery,
        "idle_s": round(idle_s, 3),
        "sigterm_exit": exit,
        "lost_ids": sample(&t.lost),
        "decided_twice_ids": sample(&t.twice),
    }))
}

/// Kills the restarted fleet `after_ms` into its recovery and starts it again; the new fleet and
/// the figures of the kill.
async fn kill_in_recovery(ctx: &Ctx, mut fleet: Fleet, after_ms: u64) -> anyhow::Result<(Fleet, Value)> {
    tokio::time::sleep(Duration::from_millis(after_ms)).await;
    let pending = match ctx.http.get(fleet.url("/dump")).send().await {
        Ok(r) => r.json::<Value>().await.map(|d| d["storage"]["pending"].clone()).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    let killed = Instant::now();
    fleet.child.kill()?;
    fleet.child.wait()?;
    drop(fleet);
    let fleet = Fleet::start(&ctx.fleet, &ctx.data).await?;
    fleet.healthy(&ctx.http, DEADLINE).await?;
    let figures = json!({
        "kill_after_ms": after_ms,
        "pending_at_kill": pending,
        "restart_s": round(killed.elapsed().as_secs_f64(), 3),
    });
    Ok((fleet, figures))
}

/// Indexes a fresh part `r` of the bench's tree through the admin API at `url`; `done` is set
/// once it answered.
fn index_part(
    ctx: &Ctx,
    url: String,
    r: usize,
    done: Arc<AtomicBool>,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<(u16, String)>>> {
    let part = ctx.tree.join(format!("r{r}"));
    write_tree(&part, TREE_FILES, r)?;
    let http = ctx.http.clone();
    Ok(tokio::spawn(async move {
        let r = http.post(url).json(&json!({"paths": [part]})).send().await?;
        let status = r.status().as_u16();
        let body = r.text().await?;
        done.store(true, Ordering::Release);
        anyhow::Ok((status, body))
    }))
}

fn personas_of(a: &[Value]) -> Vec<String> {
    a.iter().filter_map(|p| p.as_str().map(String::from)).collect()
}

/// Status and JSON body (or text) of an answer.
async fn answer(r: reqwest::Result<reqwest::Response>) -> (u16, Value) {
    match r {
        Ok(r) => {
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
        }
        Err(e) => (0, json!(format!("{e}"))),
    }
}

mod disk;

pub async fn chaos(opts: Options) -> anyhow::Result<Value> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    anyhow::ensure!(!opts.disk_full || root, "--disk-full needs root (euid 0) to mount a tmpfs");
    let dir = tempfile::tempdir()?;
    let ctx = Ctx {
        fleet: dir.path().join("fleet.toml"),
        data: dir.path().join("data"),
        tree: dir.path().join("tree"),
        seed: opts.seed,
        clients: opts.clients.max(1),
        http: reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?,
    };
    std::fs::write(&ctx.fleet, FLEET)?;
    let mut rng = Rng(opts.seed);
    let mut rounds = Vec::new();
    let started = Instant::now();
    for r in 0..opts.rounds {
        rounds.push(kill_round(&ctx, r, &mut rng).await.with_context(|| format!("round {r} (seed {})", opts.seed))?);
    }
    let kill_s = started.elapsed().as_secs_f64();
    // Every run of every round, kills and restarts included, fed to the lifecycles again.
    let replay = super::replayed(&ctx.data)?;
    let disk = match opts.disk_full {
        true => disk::disk_full(&ctx, dir.path()).await.context("disk-full round")?,
        false => Value::Null,
    };
    let sum = |k: &str| rounds.iter().filter_map(|r| r[k].as_u64()).sum::<u64>();
    let mut restart: Vec<f64> = rounds.iter().filter_map(|r| r["restart_s"].as_f64()).collect();
    restart.sort_by(f64::total_cmp);
    let (lost, twice) = (sum("lost"), sum("decided_twice"));
    let disk_ok = disk.is_null() || disk["ok"] == true;
    Ok(json!({
        "bench": "chaos",
        "ok": lost == 0 && twice == 0 && disk_ok && replay["outcome"] == "identical",
        "seed": opts.seed,
        "rounds": rounds.len(),
        "clients": ctx.clients,
        "personas": 5,
        "acknowledged": sum("acknowledged"),
        "deliveries": sum("deliveries"),
        "decided": sum("decided"),
        "lost": lost,
        "decided_twice": twice,
        "indexing_rounds": rounds.iter().filter(|r| r["indexing"] == true).count(),
        "killed_while_indexing": rounds.iter().filter(|r| r["indexing_at_kill"] == true).count(),
        "killed_while_recovering": rounds.iter().filter(|r| r["recovery_kill"]["pending_at_kill"].as_u64() > Some(0)).count(),
        "restart_s": {"p50": round(percentile(&mut restart, 0.5), 3), "max": round(restart.last().copied().unwrap_or(0.0), 3)},
        "kill_rounds_s": round(kill_s, 1),
        "replay": replay,
        "per_round": rounds,
        "disk_full": disk,
    }))
}
