//! `mindfleet bench cluster`: the same fleet and the same events twice, on one node and across
//! two (this process as node a, a `mindfleet run --node b` child as node b), with every event
//! injected at a for a persona placed on b. The figures of both runs, and their ratios.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::config::FleetConfig;
use mindfleet_core::event::EventInput;
use mindfleet_core::messages::PersonaStatus;
use serde_json::{Value, json};

use super::{percentile, round};
use mindfleet::cluster::ClusterOptions;
use mindfleet::fleet::Fleet;

/// How many injections are in flight at once.
const CONCURRENCY: usize = 16;

/// The fleet: `personas` in rooms of four, every other one pinned to node b.
fn fleet_toml(personas: usize) -> String {
    let mut t = String::from(
        "[fleet]\nname = \"bench-cluster\"\n[admin]\naddr = \"127.0.0.1:0\"\n[cluster]\nnodes = [\"a\", \"b\"]\n\
         [conversation]\nenabled = false\n[models]\npull = false\n",
    );
    for i in 0..personas {
        let node = if i % 2 == 0 { "a" } else { "b" };
        t.push_str(&format!(
            "[[persona]]\nname = \"p{i}\"\nrole = \"engineer\"\nrooms = [\"room{}\"]\nnode = \"{node}\"\n",
            i / 4
        ));
    }
    t
}

/// The events: each for a persona of node b, in its room.
fn events(personas: usize, n: usize) -> Vec<EventInput> {
    (0..n)
        .map(|k| {
            let p = (2 * k + 1) % personas.max(2);
            EventInput {
                domain: "chat".into(),
                room: format!("room{}", p / 4),
                from: format!("user{}", k % 31),
                persona: Some(format!("p{p}")),
                text: format!("status of item {k}?"),
                ..Default::default()
            }
        })
        .collect()
}

/// Injects `events` at `fleet`, `CONCURRENCY` at a time: acknowledgement latencies (ms) and
/// the seconds it took.
async fn drive(fleet: &Arc<Fleet>, events: Vec<EventInput>) -> anyhow::Result<(Vec<f64>, f64)> {
    let queue = Arc::new(std::sync::Mutex::new(events));
    let started = Instant::now();
    let workers = (0..CONCURRENCY).map(|_| {
        let (fleet, queue) = (fleet.clone(), queue.clone());
        tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let Some(e) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else { return anyhow::Ok(lat) };
                let t = Instant::now();
                fleet.inject(e).await.map_err(|e| anyhow::anyhow!("inject: {e}"))?;
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        })
    });
    let mut lat = Vec::new();
    for w in futures::future::join_all(workers).await {
        lat.extend(w??);
    }
    lat.sort_by(f64::total_cmp);
    Ok((lat, started.elapsed().as_secs_f64()))
}

/// The figures of one run: acknowledgements, throughput, and the inject-to-decision latency
/// of the node that decided (`storage` of its dump).
fn figures(lat: &mut [f64], secs: f64, storage: &Value) -> Value {
    json!({
        "events": lat.len(),
        "ack_p50_ms": round(percentile(lat, 0.50), 2),
        "ack_p99_ms": round(percentile(lat, 0.99), 2),
        "acked_per_s": round(lat.len() as f64 / secs, 1),
        "decision_p50_ms": storage["decision_p50_ms"],
        "decision_p99_ms": storage["decision_p99_ms"],
    })
}

/// Starts `mindfleet run --node b` joining `listen`; returns it with its admin address.
fn spawn_b(dir: &Path, listen: &str, cookie: &str) -> anyhow::Result<(Child, String)> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg("run")
        .arg(dir.join("fleet.toml"))
        .arg("--data")
        .arg(dir.join("b"))
        .args(["--node", "b", "--cluster-join", listen, "--cookie-env", "MINDFLEET_BENCH_COOKIE"])
        .env("MINDFLEET_BENCH_COOKIE", cookie)
        .env("MINDFLEET_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow::anyhow!("node b's stderr"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            match line.split("admin API on http://").nth(1) {
                Some(addr) => {
                    let _ = tx.send(addr.trim().to_string());
                }
                // Its warnings and errors, with ours.
                None => eprintln!("node b: {line}"),
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(addr) => Ok((child, addr)),
        Err(_) => {
            let _ = child.kill();
            anyhow::bail!("node b did not start")
        }
    }
}

async fn dump_json(admin: &str) -> anyhow::Result<Value> {
    Ok(reqwest::get(format!("http://{admin}/dump")).await?.error_for_status()?.json().await?)
}

pub async fn cluster(personas: usize, n: usize) -> anyhow::Result<Value> {
    let personas = personas.max(2);
    let dir = tempfile::tempdir()?;
    let text = fleet_toml(personas);
    std::fs::write(dir.path().join("fleet.toml"), &text)?;
    let config = |data: &str| -> anyhow::Result<FleetConfig> {
        let mut c = FleetConfig::from_toml(&dir.path().join("fleet.toml"), &text)?;
        c.storage.data_dir = dir.path().join(data);
        Ok(c)
    };

    // One node: the whole fleet in this process.
    let one = Arc::new(Fleet::start(config("single")?).await?);
    let (mut lat, secs) = drive(&one, events(personas, n)).await?;
    one.wait_idle(Duration::from_secs(120)).await;
    let storage = serde_json::to_value(one.storage.stats().await?)?;
    let single = figures(&mut lat, secs, &storage);
    Arc::into_inner(one).ok_or_else(|| anyhow::anyhow!("fleet still shared"))?.shutdown(Duration::from_secs(5)).await;

    // Two nodes: a here, b in a child process; every event crosses from a to b.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let cookie = format!("bench-{}", std::process::id());
    let opts = ClusterOptions {
        node: "a".into(),
        listen: listen.parse()?,
        join: Vec::new(),
        cookie: cookie.clone(),
        cookie_env: "-".into(),
    };
    let a = Arc::new(Fleet::start_node(config("a")?, Some(opts)).await?);
    let (mut b, b_admin) = spawn_b(dir.path(), &listen, &cookie)?;
    let result = async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let d = a.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            if d.nodes.iter().any(|n| n.name == "b" && n.status == "up") {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "node b did not link within 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (mut lat, secs) = drive(&a, events(personas, n)).await?;
        // Idle on b: nothing pending in its storage.
        let deadline = Instant::now() + Duration::from_secs(120);
        let on_b = loop {
            let d = dump_json(&b_admin).await?;
            if d["storage"]["pending"] == 0 || Instant::now() > deadline {
                break d;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let cross = figures(&mut lat, secs, &on_b["storage"]);
        let drain = drain(&a, &b_admin, personas).await?;
        anyhow::Ok((cross, drain))
    }
    .await;
    let _ = b.kill();
    let _ = b.wait();
    if let Some(a) = Arc::into_inner(a) {
        a.shutdown(Duration::from_secs(5)).await;
    }
    let (cross, drain) = result?;
    let ratio = |k: &str| match (cross[k].as_f64(), single[k].as_f64()) {
        (Some(c), Some(s)) if s > 0.0 => json!(round(c / s, 2)),
        _ => Value::Null,
    };
    Ok(json!({
        "bench": "cluster",
        "personas": personas,
        "events": n,
        "concurrency": CONCURRENCY,
        "single_node": single,
        "across_nodes": cross,
        "ack_p50_ratio": ratio("ack_p50_ms"),
        "ack_p99_ratio": ratio("ack_p99_ms"),
        "throughput_ratio": ratio("acked_per_s"),
        "decision_p50_ratio": ratio("decision_p50_ms"),
        "decision_p99_ratio": ratio("decision_p99_ms"),
        "drain": drain,
    }))
}

/// Drains node b (`POST /cluster/drain`): every persona of b, with all it stored during the
/// run, moves to a, one after the other; timed until they all run on a.
async fn drain(a: &Fleet, b_admin: &str, personas: usize) -> anyhow::Result<Value> {
    let started = Instant::now();
    let report: Value = reqwest::Client::new()
        .post(format!("http://{b_admin}/cluster/drain"))
        .json(&json!({}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let answered_s = started.elapsed().as_secs_f64();
    let moved = report["moved"].as_array().cloned().unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let d = a.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let here = d.personas.iter().filter(|p| p.node.as_deref() == Some("a") && p.status == PersonaStatus::Running);
        if here.count() == personas {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the drained personas did not all run on a within 120 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let rows: u64 = moved.iter().filter_map(|m| m["rows"].as_u64()).sum();
    Ok(json!({
        "moved": moved.len(),
        "rows": rows,
        "answered_s": round(answered_s, 3),
        "running_s": round(secs, 3),
        "ms_per_persona": round(secs * 1000.0 / moved.len().max(1) as f64, 1),
        "rows_per_s": round(rows as f64 / secs, 0),
    }))
}
