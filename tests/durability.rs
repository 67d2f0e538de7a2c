//! Durability across `kill -9`, graceful SIGTERM, and the data-dir lock, with the real binary.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mindfleet_core::config::StorageConfig;
use mindfleet_store::{Storage, lock_data_dir};
use serde_json::{Value, json};

use crate::util::*;

fn write_fleet(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("fleet.toml");
    // Events re-queued by a restore have no known audience: turn-taking waits one claim window
    // for each. A short window keeps the hundreds a kill leaves pending on a loaded machine
    // within the deadline; durability is what these tests are about.
    std::fs::write(&path, fleet_toml(&format!("[coordination]\nwindow_ms = 20\n{TRIO}"))).unwrap();
    path
}

/// The storage of a stopped fleet (whose data dir the caller locked), and every (persona, event
/// id) it journaled a decision for.
fn stored_decisions(data: &Path) -> (Storage, std::collections::HashSet<(String, String)>) {
    let storage =
        Storage::open(&StorageConfig { data_dir: data.to_path_buf(), ..mindfleet::defaults::default_fleet().storage })
            .unwrap();
    let decided = storage.all_decisions().unwrap().into_iter().map(|(p, d)| (p, d.event_id)).collect();
    (storage, decided)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_injection_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = write_fleet(dir.path());
    let data = dir.path().join("data");
    let (mut a, addr) = spawn_fleet(&fleet, &data);

    // (event id, personas it was delivered to) for every acknowledged injection.
    type Acked = Vec<(String, Vec<String>)>;
    let acked: Arc<Mutex<Acked>> = Arc::default();
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let (addr, acked) = (addr.clone(), acked.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for i in 0.. {
                    let text = if i % 3 == 0 { format!("@helper task {c}-{i}") } else { format!("note {c}-{i}") };
                    let body = json!({"id": format!("k-{c}-{i}"), "domain": "chat", "room": "general", "from": "alice", "text": text});
                    let Ok(r) = http.post(format!("http://{addr}/events")).json(&body).send().await else { break };
                    if !r.status().is_success() {
                        break;
                    }
                    let Ok(v) = r.json::<Value>().await else { break };
                    let personas = v["personas"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect();
                    acked.lock().unwrap().push((v["event_id"].as_str().unwrap().to_string(), personas));
                }
            })
        })
        .collect();
    poll("300 acknowledged events", || async { (acked.lock().unwrap().len() >= 300).then_some(()) }).await;
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    for c in clients {
        c.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    let (mut b, addr) = spawn_fleet(&fleet, &data);
    let http = reqwest::Client::new();
    let d: Value = poll("every re-queued event finished", || async {
        let d: Value = http.get(format!("http://{addr}/dump")).send().await.ok()?.json().await.ok()?;
        (d["storage"]["pending"] == 0).then_some(d)
    })
    .await;
    let helper = d["personas"].as_array().unwrap().iter().find(|p| p["name"] == "helper").unwrap();
    assert!(helper["self_state"]["activities"].as_u64().unwrap() > 0, "self-state restored");
    assert!(helper["working_memory"]["len"].as_u64().unwrap() > 0, "working memory restored");
    sigterm(&b);
    assert_eq!(wait_exit(&mut b, Duration::from_secs(5)), Some(0), "SIGTERM exits 0 within 5 s");

    let _lock = lock_data_dir(&data).unwrap();
    let (storage, decided) = stored_decisions(&data);
    assert!(storage.pending_by_persona().unwrap().is_empty());
    let mut missing = Vec::new();
    for (id, personas) in &acked {
        for p in personas {
            if !decided.contains(&(p.clone(), id.clone())) {
                missing.push(format!("{p}:{id}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} acknowledged deliveries lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

#[test]
fn a_second_process_on_the_same_data_dir_is_refused_with_the_pid() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = write_fleet(dir.path());
    let data = dir.path().join("data");
    let (mut a, _) = spawn_fleet(&fleet, &data);
    let out =
        Command::new(env!("CARGO_BIN_EXE_mindfleet")).arg("run").arg(&fleet).arg("--data").arg(&data).output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains(&format!("in use by pid {}", a.id())), "{msg}");
    sigterm(&a);
    assert_eq!(wait_exit(&mut a, Duration::from_secs(5)), Some(0));
}

#[test]
fn run_with_an_events_file_until_idle_writes_the_final_dump() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = write_fleet(dir.path());
    let events = dir.path().join("events.jsonl");
    std::fs::write(
        &events,
        concat!(
            r#"{"id":"e1","domain":"chat","room":"general","from":"alice","text":"@reviewer look at auth.rs"}"#,
            "\n",
            r#"{"id":"e2","domain":"chat","room":"general","from":"bob","text":"morning all"}"#,
            "\n",
            r#"{"id":"e3","domain":"chat","room":"general","from":"bob","text":"bad","priority":7}"#,
            "\n",
        ),
    )
    .unwrap();
    let out_path = dir.path().join("final.json");
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .arg("run")
        .arg(&fleet)
        .arg("--data")
        .arg(dir.path().join("data"))
        .arg("--events")
        .arg(&events)
        .arg("--until-idle")
        .arg("--dump-out")
        .arg(&out_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("events.jsonl:3: field `priority`"), "{stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(d["storage"]["pending"], 0);
    let replies: Vec<&Value> = d["outbox"].as_array().unwrap().iter().filter(|o| o["in_reply_to"] == "e1").collect();
    assert!(replies.iter().any(|o| o["persona"] == "reviewer"), "{replies:?}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A small filesystem of its own for a data dir, unmounted when dropped; ballast files take
/// its space and give it back.
struct SmallDisk {
    dir: tempfile::TempDir,
    ballast: Vec<std::path::PathBuf>,
}

impl SmallDisk {
    fn mount(mb: u64) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(ok.success(), "mount a {mb} MiB tmpfs");
        SmallDisk { dir, ballast: Vec::new() }
    }

    fn free_mb(&self) -> u64 {
        mindfleet_store::disk_of(self.dir.path()).unwrap().free_mb()
    }

    /// Takes space until `leave_mb` MiB are left (0: until the disk is full).
    fn fill(&mut self, leave_mb: u64) {
        use std::io::Write;
        let path = self.dir.path().join(format!("ballast{}", self.ballast.len()));
        let mut f = std::fs::File::create(&path).unwrap();
        self.ballast.push(path);
        let chunk = vec![0u8; 64 << 10];
        while self.free_mb() > leave_mb || leave_mb == 0 {
            if f.write_all(&chunk).and_then(|()| f.flush()).is_err() {
                break;
            }
        }
    }

    /// Gives back the ballast's space.
    fn free(&mut self) {
        for p in self.ballast.drain(..) {
            std::fs::remove_file(p).unwrap();
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Posts one event; its status and body.
async fn post_event(http: &reqwest::Client, addr: &str, body: Value) -> (u16, Value) {
    let r = http.post(format!("http://{addr}/events")).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Regression: a full disk left every request answered 503 "channel is closed", `/health` 200,
/// the writer logging in a tight loop, and only a restart helped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_with_507_heals_by_itself_and_loses_no_acknowledged_event() {
    if !is_root() {
        eprintln!("needs root to mount a small tmpfs: not run");
        return;
    }
    let mut disk = SmallDisk::mount(64);
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.toml");
    std::fs::write(&fleet, fleet_toml(&format!("[conversation]\nenabled = false\n{TRIO}"))).unwrap();
    let data = disk.dir.path().join("data");
    let (mut child, addr) = spawn_fleet(&fleet, &data);
    let http = reqwest::Client::new();

    // 30 KB events until the disk is full, a few hundred from 12 MiB free.
    disk.fill(12);
    let big = "x".repeat(30_000);
    let mut acked = Vec::new();
    let refusal = loop {
        assert!(acked.len() < 5000, "20 MiB never filled");
        let id = format!("e{}", acked.len());
        let (status, body) = post_event(
            &http,
            &addr,
            json!({"id": id, "domain": "chat", "room": "general", "from": "alice", "text": big}),
        )
        .await;
        match status {
            200 => acked.push(id),
            507 => break body,
            other => panic!("event {id}: {other} {body}"),
        }
    };
    // The writer retries as soon as 8 MiB are free again, and a growing database can fail with
    // more than that free: take the rest, so the disk stays full while the test looks at it.
    disk.fill(0);
    eprintln!("{} events acknowledged before the disk filled", acked.len());
    let msg = refusal["error"].as_str().unwrap();
    assert!(msg.contains("disk is full") && msg.contains(&data.display().to_string()), "{msg}");
    assert!(msg.contains(&disk.dir.path().display().to_string()), "names the disk: {msg}");
    let health = http.get(format!("http://{addr}/health")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 503);
    let why: Value = health.json().await.unwrap();
    assert!(why["error"].as_str().unwrap().contains("disk is full"), "{why}");
    // Still full: refused again, quickly, and nothing else breaks.
    let (status, _) =
        post_event(&http, &addr, json!({"domain": "chat", "room": "general", "from": "a", "text": "hi"})).await;
    assert_eq!(status, 507);
    assert_eq!(http.get(format!("http://{addr}/dump")).send().await.unwrap().status().as_u16(), 200);

    // Space returns: the fleet heals without a restart.
    disk.free();
    poll("/health 200 after space returned", || async {
        let r = http.get(format!("http://{addr}/health")).send().await.ok()?;
        (r.status().as_u16() == 200).then_some(())
    })
    .await;
    let (status, body) = post_event(
        &http,
        &addr,
        json!({"id": "after", "domain": "chat", "room": "general", "from": "bob", "text": "back?"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    acked.push("after".into());
    let deadline = Instant::now() + DEADLINE;
    loop {
        let d: Value = http.get(format!("http://{addr}/dump")).send().await.unwrap().json().await.unwrap();
        if d["storage"]["pending"] == 0 && d["storage"]["parked"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "not every delivery finished: {}", d["storage"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sigterm(&child);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), Some(0));

    let _lock = lock_data_dir(&data).unwrap();
    let (storage, decided) = stored_decisions(&data);
    for id in &acked {
        for p in ["helper", "reviewer", "scribe"] {
            assert!(decided.contains(&(p.to_string(), id.clone())), "{p} never decided acknowledged {id}");
        }
    }
    storage.close().await.unwrap();
}

#[test]
fn a_data_dir_with_less_free_space_than_min_free_mb_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.toml");
    // 1 TiB: more than the disks here have.
    std::fs::write(&fleet, fleet_toml(&format!("[storage]\nmin_free_mb = 1048576\n{TRIO}"))).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .arg("run")
        .arg(&fleet)
        .arg("--data")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    let msg = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(msg.contains("MiB free; at least 1048576 MiB are needed ([storage] min_free_mb)"), "{msg}");
    assert!(!dir.path().join("data").join("fleet.redb").exists());
}

/// Regression: a port in use exited 1 only after creating the data dir.
#[test]
fn a_port_in_use_exits_1_naming_the_address_before_touching_the_data_dir() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.toml");
    let toml = fleet_toml(TRIO).replace("127.0.0.1:0", &addr.to_string());
    std::fs::write(&fleet, toml).unwrap();
    let data = dir.path().join("data");
    let out =
        Command::new(env!("CARGO_BIN_EXE_mindfleet")).arg("run").arg(&fleet).arg("--data").arg(&data).output().unwrap();
    let msg = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(msg.contains(&format!("admin API on {addr}")) && msg.contains("in use"), "{msg}");
    assert!(!data.exists(), "the data dir was created");
}

/// Regression: SIGHUP, SIGQUIT and SIGUSR1 ended the process without draining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_sigquit_drain_like_sigterm_and_sigusr1_is_ignored() {
    let http = reqwest::Client::new();
    for signal in ["HUP", "QUIT"] {
        let dir = tempfile::tempdir().unwrap();
        let fleet = write_fleet(dir.path());
        let (mut child, addr) = spawn_fleet(&fleet, &dir.path().join("data"));
        let (status, body) = post_event(
            &http,
            &addr,
            json!({"id": "e1", "domain": "chat", "room": "general", "from": "a", "text": "hi"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        if signal == "HUP" {
            // SIGUSR1 first: logged, and the fleet keeps serving.
            assert!(Command::new("kill").args(["-USR1", &child.id().to_string()]).status().unwrap().success());
            poll("the fleet still answers after SIGUSR1", || async {
                let r = http.get(format!("http://{addr}/health")).send().await.ok()?;
                (r.status().as_u16() == 200).then_some(())
            })
            .await;
            assert!(child.try_wait().unwrap().is_none(), "SIGUSR1 ended the process");
        }
        assert!(
            Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap().success()
        );
        assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), Some(0), "SIG{signal} exits 0 after draining");
    }
}
