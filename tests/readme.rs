//! The README's examples run as written: every `mindfleet ...` line of its code blocks (read at
//! test time) against a live fleet on the README's admin address, each expected to exit 0, and
//! where it matters to print what the README says. The lines that cannot run here are listed in
//! [`SKIPPED`] with the reason.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The admin address the README's examples ask (the CLI's default, and `--admin` where they
/// name it): the live fleet runs on it.
const README_ADMIN: &str = "127.0.0.1:7878";

/// Lines that are not run, by how they start (after `mindfleet`), and why.
const SKIPPED: &[(&str, &str)] = &[
    ("tail", "follows the outbox until interrupted (tests/api.rs runs it against a live fleet)"),
    ("bench rag-eval", "fetches Werkzeug from the Python package index (the network)"),
    (
        "bench replies",
        "fetches Werkzeug and asks 43 questions of two brains, minutes (docs/BENCHMARKS.md has its figures)",
    ),
    ("bench conversation", "a benchmark of 30 s of messages and more (docs/BENCHMARKS.md has its figures and command)"),
    (
        "bench cluster",
        "a benchmark of half a minute or more that starts two fleets (docs/BENCHMARKS.md has its figures)",
    ),
    ("bench chaos", "a benchmark of minutes that kills fleets 20 times (docs/BENCHMARKS.md has its figures)"),
    ("bench webhook", "a benchmark of minutes: three fleets of 1,000 personas (docs/BENCHMARKS.md has its figures)"),
    (
        "bench tools",
        "a benchmark of a minute on three server-everything children (tests/tools.rs runs it with small numbers)",
    ),
    ("bench turns", "a benchmark of two fleets of seven personas, one on the local model (tests/budget.rs runs it)"),
    (
        "bench cognition",
        "a benchmark of minutes: two fleets of eight personas on the local model (docs/BENCHMARKS.md has its figures)",
    ),
    (
        "ai train",
        "needs the persona's study chats, which the README's fleet has none of (tests/study.rs trains with it)",
    ),
    ("bench lora-step", "a benchmark of a minute of training steps (docs/BENCHMARKS.md has its figures)"),
    (
        "bench record",
        "a benchmark of minutes: eight injection runs and four on the local model (docs/BENCHMARKS.md has its figures)",
    ),
    (
        "bench lora",
        "a benchmark of tens of minutes: study sessions, then training (docs/BENCHMARKS.md has its figures)",
    ),
    (
        "ai approve ",
        "needs a tool call waiting for approval (tests/tools/acting.rs approves and denies through the CLI)",
    ),
    (
        "bench memory-eval",
        "needs LoCoMo conversations, which are not in the repository (its own test runs it on one it writes)",
    ),
];

/// What the output of a line must hold, by how the line starts (after `mindfleet`).
const SAYS: &[(&str, &str)] = &[
    ("models list", "all-minilm-l6-v2"),
    ("embed \"some text\" --json", "\"dimensions\":384"),
    ("embed \"some text\" --admin", "384"),
    ("rag index", "chunks"),
    ("rag search \"how is the prompt trimmed\"", "prompt.rs"),
    ("rag open", "handle"),
    ("rag close", "closed"),
    ("check config/fleet.toml", "ok: fleet \"default\" with 4 personas"),
    ("check examples/tools.toml", "ok: fleet \"tools\" with 1 personas"),
    ("ai approvals", "\"approvals\""),
    ("inject", "event_id"),
    ("dump --persona helper --format tree", "helper"),
    ("ai health --format table", "recommendation"),
    ("ai why", "\"decisions\""),
    ("ai history", "\"messages\""),
    ("ai adapters", "\"adapters\""),
    ("ai availability --format table", "condition"),
    ("ai activity-map --format table", "general"),
    ("ai select-for-task", "\"best\": \"reviewer\""),
    ("refs match", "["),
    ("bench gate --json", "{"),
    ("bench scheduler", "tasks_per_s"),
    ("bench refs-eval", "at_default"),
    ("move helper --to b", "\"node\":\"b\""),
    ("drain", "moved"),
    ("webhooks list", "no webhooks"),
    ("webhooks retry", "0 dead letters queued again"),
    ("replay ./scratch", "identical"),
    ("history export", "history.jsonl: "),
];

/// The fleet across nodes the README's `run fleet.toml --node a|b` lines start: node a's admin on
/// 127.0.0.1:7700, as its `move` and `drain` lines ask, with `helper` on it.
const ACROSS: &str = r#"
[fleet]
name = "across"
brain = "rules"
[admin]
addr = "127.0.0.1:7700"
[storage]
data_dir = "./a"
[cluster]
nodes = ["a", "b"]
[conversation]
enabled = false
[[persona]]
name = "helper"
role = "assistant"
rooms = ["general"]
node = "a"
[[persona]]
name = "ops"
role = "site reliability engineer"
rooms = ["general"]
node = "a"
[[persona]]
name = "reviewer"
role = "code reviewer"
rooms = ["general"]
"#;

/// The OpenAI-compatible endpoint the README's `generate --openai http://127.0.0.1:8080/v1` line
/// asks: a fleet with the local LLM serves one on its admin address (`POST /v1/chat/completions`),
/// as llama.cpp's server would.
const ENDPOINT: &str = r#"
[fleet]
name = "endpoint"
brain = "local"
[admin]
addr = "127.0.0.1:8080"
[storage]
data_dir = "./endpoint"
[conversation]
enabled = false
[[persona]]
name = "quiet"
role = "assistant"
rooms = ["general"]
dormant = true
"#;

/// A command line of the README: the line, its environment assignments, and its words from
/// `mindfleet` on, each marked whether it is inside `[...]`.
use crate::readme_lines::{CommandLine as Example, command_lines as examples};

impl Example {
    /// The words after `mindfleet` as one string, to match the prefixes of [`SKIPPED`] and
    /// [`SAYS`] against (quotes kept as written).
    fn rest(&self) -> &str {
        let start = self.line.find("mindfleet ").map_or(self.line.len(), |i| i + "mindfleet ".len());
        &self.line[start..]
    }

    fn has(&self, word: &str) -> bool {
        self.words.iter().any(|(w, _)| w == word)
    }

    /// A fleet run until idle: run before the live fleet starts, as it serves the README's admin
    /// address too.
    fn runs_to_idle(&self) -> bool {
        self.rest().starts_with("run ") && self.has("--until-idle")
    }

    /// A node of a fleet across nodes: it runs until stopped, so it is started in the background
    /// for the lines after it (`move`, `drain`).
    fn starts_node(&self) -> bool {
        self.rest().starts_with("run ") && self.has("--node")
    }

    /// Its arguments: the required words, or all of them (a placeholder `N` read as 1). `None`
    /// for all of them when an optional word is a placeholder that cannot run (`'[...]'`).
    fn args(&self, optional: bool) -> Option<Vec<String>> {
        let words = self.words.iter().skip(1).filter(|(_, o)| optional || !o);
        let args: Vec<String> = words.map(|(w, _)| if w == "N" { "1".to_string() } else { w.clone() }).collect();
        let placeholder = self.words.iter().any(|(w, o)| *o && w.contains("[...]"));
        (!(optional && placeholder)).then_some(args)
    }
}

/// Runs `mindfleet args` in `dir` within [`DEADLINE`]: its exit code (`None`: killed at the
/// deadline), standard output and standard error.
fn run(dir: &Path, env: &[(String, String)], args: &[String]) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(args)
        .current_dir(dir)
        .env_remove("MINDFLEET_ADMIN_TOKEN")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = read(child.stdout.take().map(|r| Box::new(r) as _));
    let err = read(child.stderr.take().map(|r| Box::new(r) as _));
    let code = wait_exit(&mut child, DEADLINE);
    (code, out.join().unwrap(), err.join().unwrap())
}

/// Copies a file, or a directory with everything in it.
fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    if from.is_dir() {
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
}

/// Starts a `mindfleet run` in `dir`, with `env`, and waits for its admin API; stopped when the
/// test ends. With the address of its admin API.
fn start_run(dir: &Path, env: &[(String, String)], args: &[String]) -> (KillOnDrop, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mindfleet"));
    cmd.args(args).current_dir(dir).env_remove("MINDFLEET_ADMIN_TOKEN").envs(env.iter().map(|(k, v)| (k, v)));
    match spawn_run(&mut cmd) {
        Ok((child, admin)) => (KillOnDrop(child), admin),
        Err((code, log)) => panic!("mindfleet {} did not start (exit {code:?}):\n{log}", args.join(" ")),
    }
}

/// The working directory of the examples, with the files they name: the default fleet's file
/// with the rules brain (the examples need no model's judgement, and it answers at once), a
/// fleet across nodes ([`ACROSS`]), the events and the labelled set of the repository, a small
/// tree for `rag index .`, the batch file `rag search --batch` reads, and an OpenAI-compatible
/// endpoint's fleet ([`ENDPOINT`]).
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fleet = std::fs::read_to_string(repo.join("config/fleet.toml")).unwrap();
    assert!(fleet.contains("brain = \"local\""), "config/fleet.toml names its brain");
    write("config/fleet.toml", &fleet.replace("brain = \"local\"", "brain = \"rules\""));
    write(
        "src/prompt.rs",
        "/// Trims the prompt to the model's context: the oldest turns go first, the system prompt stays.\npub fn trim_prompt(turns: &mut Vec<String>, max_chars: usize) {\n    while turns.iter().map(String::len).sum::<usize>() > max_chars && turns.len() > 1 {\n        turns.remove(1);\n    }\n}\n",
    );
    write(
        "src/retry.rs",
        "/// Calls `f` again after a failure, waiting twice as long each time (exponential back-off).\npub fn with_backoff<T>(mut f: impl FnMut() -> Option<T>, tries: u32) -> Option<T> {\n    let mut wait = 10;\n    for _ in 0..tries {\n        if let Some(v) = f() {\n            return Some(v);\n        }\n        std::thread::sleep(std::time::Duration::from_millis(wait));\n        wait *= 2;\n    }\n    None\n}\n",
    );
    write("docs/deploy.md", "# Deploys\n\nA failed deploy is rolled back by the circuit breaker once it trips.\n");
    write("fleet.toml", ACROSS);
    write("endpoint.toml", ENDPOINT);
    // The example fleet's tool servers, installed by the project's script when missing.
    for server in [mindfleet_tools::installed::GIT, mindfleet_tools::installed::FILESYSTEM] {
        crate::tools::acting::program(server);
    }
    for rel in ["examples/events/standup.jsonl", "examples/tools.toml", "bench/refs-eval"] {
        copy(&repo.join(rel), &dir.path().join(rel));
    }
    write(
        "queries.jsonl",
        "{\"id\": \"q1\", \"query\": \"trim the prompt\"}\n{\"id\": \"q2\", \"query\": \"retry with back-off\"}\n",
    );
    dir
}

#[test]
fn every_example_of_the_readme_runs_as_written_against_a_live_fleet() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let examples = examples(&readme);
    assert!(examples.len() > 30, "README.md: {} `mindfleet` examples found", examples.len());
    for (start, _) in SKIPPED.iter().chain(SAYS) {
        assert!(examples.iter().any(|e| e.rest().starts_with(start)), "README.md: no example starts with {start:?}");
    }
    pulled();
    let dir = workdir();
    let mut failures = Vec::new();
    let mut ran = 0;
    for e in examples.iter().filter(|e| e.runs_to_idle()) {
        let args = e.args(false).unwrap();
        let (code, _, err) = run(dir.path(), &e.env, &args);
        ran += 1;
        eprintln!("ran first: mindfleet {}: exit {code:?}", args.join(" "));
        if code != Some(0) {
            failures.push(format!("{:?} exited {code:?}:\n{err}", args.join(" ")));
        }
        let out = args.iter().skip_while(|a| *a != "--dump-out").nth(1).expect("--dump-out FILE");
        let dumped = std::fs::read_to_string(dir.path().join(out)).unwrap_or_default();
        if !dumped.contains("\"personas\"") {
            failures.push(format!("{:?} should write its final dump to {out}:\n{dumped}", args.join(" ")));
        }
    }
    let (live, admin) =
        start_run(dir.path(), &[], &["run", "config/fleet.toml", "--data", "fleet-data"].map(String::from));
    assert_eq!(admin, README_ADMIN, "the live fleet serves the README's admin address");

    let (mut nodes, mut endpoint) = (Vec::new(), None);
    let mut handle = None::<String>;
    for e in &examples {
        if let Some((_, why)) = SKIPPED.iter().find(|(start, _)| e.rest().starts_with(start)) {
            eprintln!("skipped: {}: {why}", e.line);
            continue;
        }
        if e.runs_to_idle() {
            continue;
        }
        if e.rest().starts_with("generate") && e.has("--openai") && endpoint.is_none() {
            endpoint = Some(start_run(dir.path(), &[], &["run", "endpoint.toml"].map(String::from)).0);
        }
        if e.starts_node() {
            nodes.push(start_run(dir.path(), &e.env, &e.args(false).unwrap()).0);
            ran += 1;
            if nodes.len() == 2 {
                linked(dir.path(), "127.0.0.1:7700", "b");
            }
            continue;
        }
        for optional in [false, true] {
            let Some(mut args) = e.args(optional) else { continue };
            if optional && args.len() == e.args(false).unwrap().len() {
                continue;
            }
            // `rag fetch HANDLE`, `rag close HANDLE`: the handle `rag open` printed.
            if args.iter().any(|a| a == "HANDLE") {
                let Some(h) = &handle else {
                    failures.push(format!("{}: no handle from `rag open` before it", e.line));
                    continue;
                };
                args.iter_mut().filter(|a| *a == "HANDLE").for_each(|a| *a = h.clone());
            }
            let (code, out, err) = run(dir.path(), &e.env, &args);
            ran += 1;
            eprintln!("ran: mindfleet {}: exit {code:?}", args.join(" "));
            if code != Some(0) {
                failures.push(format!("{:?} exited {code:?}:\n{err}", args.join(" ")));
                continue;
            }
            if let Some((_, says)) = SAYS.iter().find(|(start, _)| e.rest().starts_with(start))
                && !out.contains(says)
            {
                failures.push(format!("{:?} should print {says:?}:\n{out}", args.join(" ")));
            }
            if e.rest().starts_with("rag open") {
                // `handle H: ...` as text, `"handle": "H"` as JSON.
                handle = out
                    .split("handle")
                    .nth(1)
                    .map(|s| s.trim_start_matches(['"', ':', ' ']))
                    .and_then(|s| s.split([':', '"', ' ']).next())
                    .map(str::to_string);
            }
        }
    }
    drop((live, nodes, endpoint));
    assert!(failures.is_empty(), "{} of {ran} README examples failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// Waits until the node at `admin` reports `node` up (linked), as a person would before moving
/// personas to it.
fn linked(dir: &Path, admin: &str, node: &str) {
    let args = ["dump", "--admin", admin].map(String::from);
    let until = Instant::now() + DEADLINE;
    loop {
        let (_, out, _) = run(dir, &[], &args);
        let d: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let nodes = d["nodes"].as_array().cloned().unwrap_or_default();
        if nodes.iter().any(|n| n["name"] == node && n["status"] == "up") {
            return;
        }
        assert!(Instant::now() < until, "node {node} never reported up at {admin}: {}", d["nodes"]);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The README's exchange ("An exchange"): its two `inject` lines as written, against the default
/// fleet as `cargo run --release -- run` starts it (`config/fleet.toml`, the local brain), and
/// what `helper` posts is the reply the README shows (the date and time it was said aside).
#[test]
fn the_readme_exchange_is_what_the_default_fleet_posts() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let section = readme.split("## An exchange").nth(1).expect("README.md has \"An exchange\"");
    let mut blocks = section.split("```").skip(1).step_by(2);
    let commands = examples(&format!("```\n{}```", blocks.next().expect("the exchange's commands")));
    let shown = blocks.next().expect("the exchange's reply").trim_start_matches("text").trim();
    assert_eq!(commands.len(), 2, "{section}");
    let (persona, reply) = shown.split_once(": ").expect("`persona: reply`");
    pulled();
    let dir = tempfile::tempdir().unwrap();
    copy(&repo.join("config/fleet.toml"), &dir.path().join("fleet.toml"));
    let args = ["run", "fleet.toml", "--data", "data", "--admin", "127.0.0.1:0"].map(String::from);
    let (_fleet, admin) = start_run(dir.path(), &[], &args);
    let mut asked = String::new();
    for c in &commands {
        let mut a = c.args(true).unwrap();
        a.extend(["--admin".to_string(), admin.clone()]);
        let (code, out, err) = run(dir.path(), &c.env, &a);
        assert_eq!(code, Some(0), "{}: {err}", c.line);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
        asked = v["event_id"].as_str().unwrap().to_string();
    }
    // Its reply, once posted (the model loads first on a fresh fleet).
    let deadline = Instant::now() + Duration::from_secs(300);
    let posted = loop {
        let why = ["ai", "why", "--event", &asked, "--admin", &admin].map(String::from);
        let (code, out, err) = run(dir.path(), &[], &why);
        assert_eq!(code, Some(0), "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let mine = v["replies"].as_array().and_then(|r| r.iter().find(|r| r["persona"] == persona).cloned());
        if let Some(r) = mine {
            break r["text"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no reply from {persona} to {asked}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // The time it was said is the run's own: `(bob, #general, 28 Nov 14:01)`.
    let when = |s: &str| match s.rfind(", ") {
        Some(i) if s.ends_with(')') => format!("{}, <when>)", &s[..i]),
        _ => s.to_string(),
    };
    assert_eq!(when(&posted), when(reply), "README.md shows another reply than the default fleet posts");
}
