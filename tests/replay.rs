//! Exact replay (`mindfleet replay`, `mindfleet history`): a fleet's recorded history fed to its
//! personas' lifecycles again, with the real binary on real data dirs; every commit checked
//! against the journal, a history edited, cut or missing rows refused at its row, a journal that
//! says otherwise shown as a divergence with its diff, and the data dir left as it was.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use mindfleet_core::config::StorageConfig;
use mindfleet_core::history::RecordBatch;
use mindfleet_store::Storage;
use mindfleet_store::history::RecordRow;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::Value;

use crate::util::*;

const RECORDED: TableDefinition<u64, &[u8]> = TableDefinition::new("recorded");
type RecordTable<'t> = redb::Table<'t, u64, &'static [u8]>;

/// The rows of `persona`'s history in `t`: each row's place, and the row (its bytes).
fn rows_of(t: &impl ReadableTable<u64, &'static [u8]>, persona: &str) -> Vec<(u64, Vec<u8>)> {
    t.iter()
        .unwrap()
        .map(|r| r.map(|(k, v)| (k.value(), v.value().to_vec())).unwrap())
        .filter(|(_, v)| RecordRow::of(v, persona))
        .collect()
}

fn mindfleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(args).output().unwrap()
}

fn replay(data: &Path, more: &[&str]) -> (Option<i32>, Value, String) {
    let mut args = vec!["replay", data.to_str().unwrap(), "--json"];
    args.extend_from_slice(more);
    let out = mindfleet(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let report = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code(), report, String::from_utf8_lossy(&out.stderr).to_string())
}

/// A rules fleet's history: chat with mentions, questions for nobody in particular, a directed
/// event to the dormant scribe, urgent work; the fleet drained and stopped. Returns the data dir
/// and the number of decisions each persona's lifecycle journaled.
async fn recorded(dir: &Path) -> (PathBuf, Vec<(String, usize)>) {
    let data = dir.join("data");
    let fleet = start(&data, &fleet_toml(TRIO)).await;
    for i in 0..40 {
        let text = match i % 4 {
            0 => format!("@helper where are the docs for release {i}?"),
            1 => format!("@reviewer please review the rust change number {i}"),
            2 => format!("does anyone know how lifetimes work, case {i}?"),
            _ => format!("note {i}: the build is green"),
        };
        let mut e = chat("general", "bob", &text);
        e.urgent = i % 10 == 3;
        fleet.inject(e).await.unwrap();
    }
    let mut to_scribe = chat("general", "carol", "@scribe write this down please");
    to_scribe.mentions = vec!["scribe".into()];
    fleet.inject(to_scribe).await.unwrap();
    fleet.shutdown(Duration::from_secs(60)).await;
    let storage =
        Storage::open(&StorageConfig { data_dir: data.clone(), ..mindfleet::defaults::default_fleet().storage })
            .unwrap();
    let all = storage.all_decisions().unwrap();
    // The inbox's own decisions (a duplicate dropped, an event shed) are not the lifecycle's.
    let count = |p: &str| all.iter().filter(|(q, d)| q == p && d.by != "inbox").count();
    assert!(all.iter().any(|(_, d)| d.by == "inbox"), "the inbox dropped the repeats");
    let counts = ["helper", "reviewer", "scribe"].map(|p| (p.to_string(), count(p))).to_vec();
    storage.close().await.unwrap();
    (data, counts)
}

fn file_bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_fleet_s_history_replays_identically_with_every_commit_checked_against_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let (data, counts) = recorded(dir.path()).await;
    let before = file_bytes(&data.join("fleet.redb"));

    let (code, report, stderr) = replay(&data, &[]);
    assert_eq!(code, Some(0), "{report}\n{stderr}");
    assert_eq!(report["outcome"], "identical");
    for (persona, decided) in &counts {
        let p = report["personas"].as_array().unwrap().iter().find(|p| p["persona"] == persona.as_str()).unwrap();
        // Every decision in the journal was made by the lifecycle from the history, and checked.
        assert_eq!(p["commits"].as_u64().unwrap() as usize, *decided, "{persona}: {p}");
        assert_eq!(p["commits_checked"], p["commits"], "{persona}: {p}");
        assert_eq!(p["runs"], 1);
        assert!(p["inputs"].as_u64().unwrap() > p["commits"].as_u64().unwrap(), "{p}");
        assert!(p["self_state_changes"].as_u64().unwrap() > 0, "{p}");
    }
    assert!(counts.iter().all(|(_, n)| *n > 0), "{counts:?}");

    // Part of it, and one persona's.
    let (code, report, _) = replay(&data, &["--until", "20", "--persona", "helper"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["personas"].as_array().unwrap().len(), 1);
    assert_eq!(report["personas"][0]["entries"], 21);
    let (code, _, stderr) = replay(&data, &["--persona", "nobody"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("no recorded history of persona \"nobody\""), "{stderr}");

    // A replay changes nothing in the data dir.
    assert!(file_bytes(&data.join("fleet.redb")) == before, "the replay wrote to the data dir");

    // The text report reads as a table and ends with the outcome.
    let out = mindfleet(&["replay", data.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().last().unwrap().ends_with(": identical"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("reviewer")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifecycle_that_decides_otherwise_diverges_at_that_event_with_its_input_and_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _) = recorded(dir.path()).await;
    // The reviewer is handed a message that names it as if it named nobody, the history chained
    // again from there: what another lifecycle, on the same history, would have done.
    let wanted = "@reviewer please review the rust change number 5";
    let db = redb::Database::open(data.join("fleet.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    let event = {
        let mut t = txn.open_table(RECORDED).unwrap();
        let rows = rows_of(&t, "reviewer");
        let mut chain = 0;
        let mut event = None;
        for (i, (at, value)) in rows.iter().enumerate() {
            let row = RecordRow::parse(value).unwrap();
            let mut entries = RecordBatch::unpack(row.stored).unwrap();
            for bytes in &mut entries {
                let mut entry: Value = serde_json::from_slice(&mindfleet_replay::to_json(bytes).unwrap()).unwrap();
                // Where it was delivered, and where the inbox handed it over when that names
                // more than its seq.
                for at in ["/Fed/input/Deliver/event", "/Fed/input/Next/0/event"] {
                    if let Some(e) = entry.pointer_mut(at)
                        && e["text"] == wanted
                    {
                        e["text"] = "please review the rust change number 5".into();
                        e["mentions"] = serde_json::json!([]);
                        event = Some(e["id"].as_str().unwrap().to_string());
                        *bytes = serde_json::to_vec(&entry).unwrap();
                    }
                }
            }
            let stored = if event.is_some() { RecordBatch::pack(&entries).stored } else { row.stored.to_vec() };
            chain = if i == 0 { row.chain } else { mindfleet_store::history::chain(chain, &stored) };
            t.insert(*at, RecordRow { chain, stored: &stored, ..row }.value().as_slice()).unwrap();
        }
        event.expect("the reviewer was handed the message")
    };
    txn.commit().unwrap();
    drop(db);

    let (code, report, stderr) = replay(&data, &["--persona", "reviewer"]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(report["outcome"], "diverged", "{report}");
    assert_eq!(report["event"], event.as_str(), "{report}");
    assert!(!report["what"].as_str().unwrap().is_empty() && !report["input"].as_str().unwrap().is_empty(), "{report}");
    let out = mindfleet(&["replay", data.to_str().unwrap(), "--persona", "reviewer"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("diverged: persona reviewer") && text.contains(&format!("event {event}")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_with_a_row_edited_or_missing_is_refused_at_that_row() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _) = recorded(dir.path()).await;
    let edit = |copy: &str, f: &dyn Fn(&mut RecordTable)| {
        let to = dir.path().join(copy);
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(data.join("fleet.redb"), to.join("fleet.redb")).unwrap();
        let db = redb::Database::open(to.join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        f(&mut txn.open_table(RECORDED).unwrap());
        txn.commit().unwrap();
        to
    };
    // The helper's rows (each a batch of entries): their places, and their first entries'
    // numbers (a report names a row by its number).
    let (places, keys): (Vec<u64>, Vec<u64>) = {
        let db = redb::Database::open(data.join("fleet.redb")).unwrap();
        let txn = db.begin_read().unwrap();
        let t = txn.open_table(RECORDED).unwrap();
        rows_of(&t, "helper").iter().map(|(at, v)| (*at, RecordRow::parse(v).unwrap().n)).unzip()
    };
    assert!(keys.len() > 8, "{keys:?}");
    // A row changed (a byte more), its chain kept: the chain no longer covers it.
    let edited = edit("edited", &|t| {
        let mut row = t.get(places[3]).unwrap().unwrap().value().to_vec();
        row.push(b' ');
        t.insert(places[3], row.as_slice()).unwrap();
    });
    let (code, report, _) = replay(&edited, &["--persona", "helper"]);
    assert_eq!((code, report["outcome"].as_str()), (Some(2), Some("refused")), "{report}");
    assert_eq!(report["row"], keys[3], "{report}");
    let reason = format!("row {} does not follow row {}", keys[3], keys[2]);
    assert!(report["reason"].as_str().unwrap().contains(&reason), "{report}");

    let missing = edit("missing", &|t| {
        t.remove(places[5]).unwrap();
    });
    let (code, report, _) = replay(&missing, &["--persona", "helper"]);
    assert_eq!(code, Some(2), "{report}");
    assert_eq!(report["row"], keys[6], "{report}");
    let reason = format!("entries {} to {} are missing", keys[5], keys[6] - 1);
    assert!(report["reason"].as_str().unwrap().contains(&reason), "{report}");

    let cut = edit("cut", &|t| {
        let row = t.get(places[1]).unwrap().unwrap().value().to_vec();
        t.insert(places[1], &row[..row.len() / 2]).unwrap();
    });
    let (code, report, _) = replay(&cut, &["--persona", "helper"]);
    assert_eq!(code, Some(2), "{report}");
    assert_eq!(report["row"], keys[1], "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_history_imports_elsewhere_and_replays_there_and_a_line_lost_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (data, counts) = recorded(dir.path()).await;
    let file = dir.path().join("history.jsonl");
    let out = mindfleet(&["history", "export", data.to_str().unwrap(), "--out", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.lines().next().unwrap().starts_with("{\"mindfleet history\":"), "{}", &text[..200]);

    let elsewhere = dir.path().join("elsewhere");
    let out = mindfleet(&["history", "import", file.to_str().unwrap(), "--data", elsewhere.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, report, stderr) = replay(&elsewhere, &[]);
    assert_eq!(code, Some(0), "{report}\n{stderr}");
    for (persona, decided) in &counts {
        let p = report["personas"].as_array().unwrap().iter().find(|p| p["persona"] == persona.as_str()).unwrap();
        assert_eq!(p["commits_checked"].as_u64().unwrap() as usize, *decided, "{p}");
    }
    // Not over a history already there.
    let out = mindfleet(&["history", "import", file.to_str().unwrap(), "--data", elsewhere.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));

    // A line lost in the file: refused at the line after it, and nothing imported.
    let lines: Vec<&str> = text.lines().collect();
    let lost = dir.path().join("lost.jsonl");
    std::fs::write(&lost, [&lines[..30], &lines[31..]].concat().join("\n")).unwrap();
    let target = dir.path().join("not-imported");
    let out = mindfleet(&["history", "import", lost.to_str().unwrap(), "--data", target.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("line 31: does not follow the line before it"), "{stderr}");
    assert!(!target.join("fleet.redb").exists());
    // A file cut short.
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, &text[..text.len() - 40]).unwrap();
    let out = mindfleet(&["history", "import", cut.to_str().unwrap(), "--data", target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A fleet of one persona on the local brain in the role given, its model behind `endpoint`
/// (another fleet's OpenAI-compatible `/v1`, the real SmolLM2): a model there drafts the
/// replies themselves, not only from what the steps found.
fn endpoint_fleet(role: &str, endpoint: &str) -> String {
    format!(
        "[fleet]\nname = \"test\"\nbrain = \"local\"\n[admin]\naddr = \"127.0.0.1:0\"\n[conversation]\nenabled = false\n\
         [llm]\nbackend = \"openai\"\nurl = \"http://{endpoint}/v1\"\nmodel = \"smollm2\"\n\
         [[persona]]\nname = \"helper\"\nrole = \"{role}\"\nrooms = [\"general\"]\ninferences_per_hour = 100000\n"
    )
}

/// The replies each event got, by event id, in a stopped fleet's outbox.
async fn replies(data: &Path) -> std::collections::BTreeMap<String, String> {
    let storage =
        Storage::open(&StorageConfig { data_dir: data.to_path_buf(), ..mindfleet::defaults::default_fleet().storage })
            .unwrap();
    let out = storage.outbox_after(0, 100_000).unwrap().into_iter().map(|(_, o)| (o.in_reply_to, o.text)).collect();
    storage.close().await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_replay_with_another_prompt_names_the_events_whose_replies_changed() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = config(
        &dir.path().join("served"),
        &fleet_toml(
            "[[persona]]\nname = \"quiet\"\nrole = \"assistant\"\nrooms = [\"elsewhere\"]\nbrain = \"local\"\n",
        ),
    );
    served.models.dir = pulled();
    let endpoint = mindfleet::Fleet::start(served).await.unwrap();
    let addr = endpoint.addr.to_string();
    let data = dir.path().join("data");
    let fleet = start(&data, &endpoint_fleet("assistant", &addr)).await;
    let questions = [
        "@helper what should we name the new build server?",
        "@helper how do I make the deploy script retry on failure?",
        "@helper can you summarise what a code review is for?",
    ];
    for q in questions {
        fleet.inject(chat("general", "bob", q)).await.unwrap();
        assert!(fleet.wait_idle(DEADLINE).await, "the fleet settles after {q:?}");
    }
    fleet.shutdown(DEADLINE).await;
    let then = replies(&data).await;
    assert_eq!(then.len(), questions.len(), "{then:?}");

    // The same events to a fleet whose persona is told it is someone else: its prompts change.
    let other = dir.path().join("other.toml");
    std::fs::write(&other, endpoint_fleet("pirate captain who answers every question with a sea shanty", &addr))
        .unwrap();
    let live = dir.path().join("live");
    let out = mindfleet(&[
        "replay",
        data.to_str().unwrap(),
        "--live",
        "--config",
        other.to_str().unwrap(),
        "--live-data",
        live.to_str().unwrap(),
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["events"], questions.len(), "{report}");
    assert_eq!(report["compared"], questions.len(), "{report}");

    // The events it names are exactly those whose reply differs between the two outboxes.
    let now = replies(&live).await;
    let changed: std::collections::BTreeSet<&str> =
        then.iter().filter(|(event, text)| now.get(*event) != Some(text)).map(|(event, _)| event.as_str()).collect();
    let named: std::collections::BTreeSet<&str> = report["differences"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["changed"].as_array().unwrap().iter().any(|c| c == "reply"))
        .map(|d| d["event"].as_str().unwrap())
        .collect();
    assert!(!changed.is_empty(), "another role changed no reply: {then:?} {now:?}");
    assert_eq!(named, changed, "{report}");
    assert_eq!(report["changed"]["reply"], changed.len(), "{report}");
    for d in report["differences"].as_array().unwrap() {
        let event = d["event"].as_str().unwrap();
        assert_eq!(d["recorded"]["reply"].as_str(), then.get(event).map(String::as_str), "{d}");
        assert_eq!(d["live"]["reply"].as_str(), now.get(event).map(String::as_str), "{d}");
    }
}

/// The committed example history: the default fleet with tools, an approval and a small model
/// budget, recorded by `scripts/record-example-history.sh` (run it again after a deliberate change
/// of behaviour or of the history's format, and commit the file it writes).
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/history/default-fleet.jsonl");
const REGENERATE: &str = "after a deliberate change, record it again: scripts/record-example-history.sh";

/// Every JSON value in `v`, `v` first.
fn walk(v: &Value) -> Vec<&Value> {
    let mut out = vec![v];
    let mut i = 0;
    while i < out.len() {
        match out[i] {
            Value::Object(m) => out.extend(m.values()),
            Value::Array(a) => out.extend(a.iter()),
            _ => {}
        }
        i += 1;
    }
    out
}

/// The values under `key` among `values` (of [`walk`]): found by name, not by where the history's
/// format keeps them today.
fn under<'v>(values: &[&'v Value], key: &str) -> Vec<&'v Value> {
    values.iter().filter_map(|v| v.get(key)).collect()
}

/// `file`'s lines after its header, as JSON.
fn history_lines(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.lines().skip(1).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `file` imported into a new data dir under `dir`.
fn imported(file: &Path, dir: &Path) -> PathBuf {
    let data = dir.join("imported");
    let out = mindfleet(&["history", "import", file.to_str().unwrap(), "--data", data.to_str().unwrap()]);
    assert!(out.status.success(), "{}\n{REGENERATE}", String::from_utf8_lossy(&out.stderr));
    data
}

#[test]
fn the_example_history_replays_identically_and_holds_every_feature_it_was_recorded_for() {
    let dir = tempfile::tempdir().unwrap();
    let data = imported(Path::new(EXAMPLE), dir.path());
    let (code, report, stderr) = replay(&data, &[]);
    assert_eq!((code, report["outcome"].as_str()), (Some(0), Some("identical")), "{report}\n{stderr}\n{REGENERATE}");
    let personas = report["personas"].as_array().unwrap();
    for p in personas {
        assert_eq!(p["commits_checked"], p["commits"], "{p}");
    }
    // The kill -9 in the middle: the personas' lifecycles ran twice, a start and a restart.
    assert!(personas.iter().any(|p| p["runs"].as_u64().unwrap() >= 2), "{report}");

    let lines = history_lines(Path::new(EXAMPLE));
    let all: Vec<&Value> = lines.iter().flat_map(walk).collect();
    // A few hundred events, delivered (or restored after the kill -9 and taken from the inbox):
    // people's messages, and the personas' replies that came back.
    let events: std::collections::BTreeSet<&str> = [under(&all, "Deliver"), under(&all, "Next")]
        .concat()
        .into_iter()
        .flat_map(walk)
        .filter_map(|v| v.get("event")?.get("id")?.as_str())
        .collect();
    assert!(events.len() >= 200, "{} events", events.len());
    // Both brains, as each run's beginning says.
    let brains: std::collections::BTreeSet<&str> =
        under(&all, "Begin").into_iter().flat_map(walk).filter_map(|v| v.get("brain")?.as_str()).collect();
    assert_eq!(brains, ["local", "rules"].into(), "the brains of the runs");
    // The model's own answers are in it (the local brain drafted, chose plans, wrote lessons).
    assert!(!under(&all, "Drafted").is_empty() && !under(&all, "Planned").is_empty());
    // A tool's answer, and a call a person approved from the command line.
    assert!(under(&all, "ToolAnswered").iter().any(|a| a.to_string().contains("Commit history")));
    assert!(!under(&all, "ApprovalAnswered").is_empty());
    assert!(all.iter().any(|v| v.as_str() == Some("approved by cli")));
    // A grant the spent budget turned to the rules brain, and a decision that says so.
    let spent = under(&all, "grant")
        .into_iter()
        .filter(|g| g["outcome"].to_string().to_lowercase().replace('_', "").contains("hardbudget"))
        .count();
    assert!(spent > 0, "no grant says the budget was spent");
    let decisions: Vec<&Value> = all
        .iter()
        .copied()
        .filter(|v| v.get("verdict").is_some() && v.get("reason").is_some() && v.get("event_id").is_some())
        .collect();
    let reason = |d: &Value| d["reason"].as_str().unwrap_or_default().to_string();
    assert!(decisions.iter().any(|d| reason(d).contains("model budget spent (hard_budget)")));
    // A deferral, taken up.
    let taken_up: Vec<&str> = decisions
        .iter()
        .filter(|d| reason(d).starts_with("taking up deferred"))
        .filter_map(|d| d["event_id"].as_str())
        .collect();
    assert!(
        taken_up.iter().any(|id| decisions.iter().any(|d| d["event_id"] == *id && d["verdict"] == "defer")),
        "no deferred event was taken up: {taken_up:?}"
    );
}

#[test]
fn the_example_history_with_a_tool_s_answer_edited_diverges_at_the_event_that_quoted_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // git's answer to the reviewer, with another subject in it.
    let answer =
        |l: &str| l.contains("\"persona\":\"reviewer\"") && l.contains("ToolAnswered") && l.contains("Cap the retry");
    let at = lines.iter().position(|l| answer(l)).expect("git's answer to the reviewer");
    lines[at] = lines[at].replace("Cap the retry backoff", "Drop the retry backoff");
    // The event in hand: the one the reviewer took from its inbox last, which asked for a commit.
    // (Handed over by its seq alone when it was delivered earlier in the run.)
    let reviewer: Vec<Value> = lines[1..at]
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["persona"] == "reviewer")
        .collect();
    let delivered = |seq: &Value| {
        reviewer.iter().rev().find_map(|v| {
            walk(v).into_iter().find_map(|x| x.get("Deliver")).filter(|d| d["seq"] == *seq).map(|d| d["event"].clone())
        })
    };
    let next = reviewer
        .iter()
        .rev()
        .find_map(|v| {
            walk(v).into_iter().find_map(|x| {
                x.get("Next")
                    .map(|n| n[0]["event"].clone())
                    .or_else(|| x.get("Handed").and_then(|h| delivered(&h["seq"])))
            })
        })
        .expect("the event in hand");
    assert!(next["text"].as_str().unwrap().contains("commit"), "{next}");
    // Chained again from there, as a history edited with care would be: each line's chain (the
    // first field) covers the rest of the line and the chain before.
    let mut prev = mindfleet_store::history::chain(0, lines[0].as_bytes());
    for line in &mut lines[1..] {
        let rest = line[line.find("\",").unwrap() + 2..].to_string();
        prev = mindfleet_store::history::chain(prev, rest.as_bytes());
        *line = format!("{{\"chain\":\"{prev:016x}\",{rest}");
    }
    let edited = dir.path().join("edited.jsonl");
    std::fs::write(&edited, lines.join("\n") + "\n").unwrap();

    let data = imported(&edited, dir.path());
    let (code, report, stderr) = replay(&data, &["--persona", "reviewer"]);
    assert_eq!((code, report["outcome"].as_str()), (Some(1), Some("diverged")), "{report}\n{stderr}");
    assert_eq!(report["event"], next["id"], "{report}");
    assert!(report["diff"].to_string().contains("Drop the retry backoff"), "the diff shows the edit: {report}");
}
