//! Deferred work comes back: a focused persona defers a message, keeps it in mind, and takes it
//! up when its focus ends (cleared by a person, or held past `focus_max_secs`), answering it;
//! one that waits past `preoccupation_ttl_secs` is dropped with a journaled decision; a
//! deferral survives `kill -9`.

use std::path::Path;
use std::process::Command;

use mindfleet::Fleet;
use mindfleet_core::messages::{AdminMsg, StateChange};
use mindfleet_core::record::{Decision, Verdict};
use ractor::call_t;
use serde_json::{Value, json};

use crate::util::*;

/// One persona alone in its room (so a deferred human message waits on it alone).
fn solo(extra: &str) -> String {
    fleet_toml(&format!("[[persona]]\nname = \"solo\"\nrole = \"assistant\"\nrooms = [\"general\"]\n{extra}\n"))
}

async fn set_state(fleet: &Fleet, change: StateChange) {
    let r = call_t!(fleet.admin, |reply| AdminMsg::SetState { persona: "solo".into(), change, reply }, 5_000);
    r.expect("admin answers").expect("state changed");
}

/// Every decision `solo` journaled on `event_id`, oldest first.
fn decisions_on(fleet: &Fleet, event_id: &str) -> Vec<Decision> {
    let mut v: Vec<Decision> = fleet
        .storage
        .all_decisions()
        .unwrap()
        .into_iter()
        .filter(|(p, d)| p == "solo" && d.event_id == event_id)
        .map(|(_, d)| d)
        .collect();
    v.sort_by_key(|d| d.at_us);
    v
}

/// Focuses `solo` hard and injects a plain message, which it defers; returns the event id.
async fn deferred_message(fleet: &Fleet) -> String {
    set_state(fleet, StateChange::Focus { objective: "the release".into(), intensity: 0.9 }).await;
    poll("the focus to hold", || async {
        (persona(&dump(fleet).await, "solo").self_state.as_ref()?.focus.intensity > 0.8).then_some(())
    })
    .await;
    let id =
        fleet.inject(chat("general", "alice", "anyone around to look at the flaky build?")).await.unwrap().event_id;
    let first = decision(fleet, "solo", &id).await;
    assert_eq!(first.verdict, Verdict::Defer, "{first:?}");
    assert!(first.reason.contains("deferred as a preoccupation"), "{}", first.reason);
    // It stays on its mind, with its event.
    let d = dump(fleet).await;
    let s = persona(&d, "solo").self_state.clone().unwrap();
    assert!(s.preoccupations.iter().any(|p| p.event_id == id), "{:?}", s.preoccupations);
    assert!(!d.outbox.iter().any(|o| o.in_reply_to == id), "not answered while deferred");
    id
}

#[tokio::test]
async fn a_deferred_message_is_taken_up_and_answered_once_a_person_clears_the_focus() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &solo("")).await;
    let id = deferred_message(&fleet).await;

    set_state(&fleet, StateChange::ClearFocus).await;
    let reply = reply_to(&fleet, &id).await;
    assert_eq!(reply.persona, "solo");
    let all = decisions_on(&fleet, &id);
    assert_eq!(all.iter().map(|d| d.verdict).collect::<Vec<_>>(), [Verdict::Defer, Verdict::Engage], "{all:?}");
    assert!(all[1].reason.starts_with("taking up deferred"), "{}", all[1].reason);
    let d = dump(&fleet).await;
    let s = persona(&d, "solo").self_state.clone().unwrap();
    assert!(s.preoccupations.is_empty(), "taken up: no longer on its mind: {:?}", s.preoccupations);
    assert!(s.recent_thoughts.iter().any(|t| t.text == "focus cleared by a person"), "{:?}", s.recent_thoughts);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test]
async fn a_focus_held_past_focus_max_ends_by_itself_and_the_deferred_message_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &solo("focus_max_secs = 1.5")).await;
    let id = deferred_message(&fleet).await;
    let reply = reply_to(&fleet, &id).await;
    assert_eq!(reply.persona, "solo");
    let all = decisions_on(&fleet, &id);
    assert_eq!(all.last().map(|d| d.verdict), Some(Verdict::Engage), "{all:?}");
    let s = persona(&dump(&fleet).await, "solo").self_state.clone().unwrap();
    assert!(s.recent_thoughts.iter().any(|t| t.text.contains("ended after 2 s")), "{:?}", s.recent_thoughts);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test]
async fn a_deferred_message_that_goes_stale_is_dropped_with_a_journaled_decision() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &solo("preoccupation_ttl_secs = 1")).await;
    let id = deferred_message(&fleet).await;
    let dropped = poll("the stale deferral's drop", || async {
        decisions_on(&fleet, &id).into_iter().find(|d| d.reason.starts_with("dropped: stale after"))
    })
    .await;
    assert_eq!((dropped.verdict, dropped.by.as_str()), (Verdict::Ignore, "deferral/dropped"));
    poll("the preoccupation to go", || async {
        persona(&dump(&fleet).await, "solo").self_state.as_ref()?.preoccupations.is_empty().then_some(())
    })
    .await;
    // Dropped is dropped: clearing the focus now answers nothing.
    set_state(&fleet, StateChange::ClearFocus).await;
    let stats = fleet.storage.stats().await.unwrap();
    assert_eq!(stats.pending, 0, "the dropped delivery is finished");
    assert!(!dump(&fleet).await.outbox.iter().any(|o| o.in_reply_to == id));
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test]
async fn a_deferral_taken_up_in_a_shared_room_adds_no_second_reply_to_a_message_answered_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let pair = "[[persona]]\nname = \"solo\"\nrole = \"assistant\"\nrooms = [\"general\"]\n\
                [[persona]]\nname = \"other\"\nrole = \"assistant\"\nrooms = [\"general\"]\n";
    let fleet = start(dir.path(), &fleet_toml(pair)).await;
    let id = deferred_message(&fleet).await;
    // `other` answered it; `solo` takes its deferral up once its focus is cleared.
    let reply = reply_to(&fleet, &id).await;
    assert_eq!(reply.persona, "other");
    set_state(&fleet, StateChange::ClearFocus).await;
    let again = poll("solo's decision on taking the deferral up", || async {
        decisions_on(&fleet, &id).into_iter().find(|d| d.reason.starts_with("taking up deferred"))
    })
    .await;
    assert_ne!(again.verdict, Verdict::Defer, "{again:?}");
    assert!(again.reason.contains("other answered it"), "{}", again.reason);
    poll("the preoccupation to go", || async {
        persona(&dump(&fleet).await, "solo").self_state.as_ref()?.preoccupations.is_empty().then_some(())
    })
    .await;
    let replies: Vec<_> = dump(&fleet).await.outbox.into_iter().filter(|o| o.in_reply_to == id).collect();
    assert_eq!(replies.len(), 1, "one primary reply: {replies:?}");
    fleet.shutdown(DEADLINE).await;
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> Value {
    let r = http.post(url).json(&body).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    r.json().await.unwrap()
}

async fn get(http: &reqwest::Client, url: String) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

/// The binary, on `fleet` and `data`; its admin address.
fn run(fleet: &Path, data: &Path) -> (std::process::Child, String) {
    spawn_run(Command::new(env!("CARGO_BIN_EXE_mindfleet")).arg("run").arg(fleet).arg("--data").arg(data))
        .unwrap_or_else(|(code, log)| panic!("the fleet did not start ({code:?}):\n{log}"))
}

#[tokio::test]
async fn a_deferral_survives_kill_9_and_is_answered_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fleet.toml");
    // A long write-behind: the kill loses the self-state's writes, not the deferral.
    std::fs::write(&file, format!("{}\n[storage]\nwrite_behind_ms = 60000\n", solo(""))).unwrap();
    let data = dir.path().join("data");
    let http = reqwest::Client::new();

    let (mut child, addr) = run(&file, &data);
    let focus = json!({"persona": "solo", "change": {"focus": {"objective": "the release", "intensity": 0.9}}});
    post(&http, format!("http://{addr}/ai/state"), focus).await;
    let event = json!({"domain": "chat", "room": "general", "from": "alice", "text": "anyone around to look at the flaky build?"});
    let id = post(&http, format!("http://{addr}/events"), event).await["event_id"].as_str().unwrap().to_string();
    poll("the deferral", || async {
        let d = get(&http, format!("http://{addr}/ai/decisions?persona=solo")).await;
        let found = d["decisions"].as_array()?.iter().any(|d| d["event_id"] == id.as_str() && d["verdict"] == "defer");
        found.then_some(())
    })
    .await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let (mut child, addr) = run(&file, &data);
    // The kill may have lost the self-state's focus (then the persona takes the deferral up at
    // once); if the focus came back, a person clears it.
    post(&http, format!("http://{addr}/ai/state"), json!({"persona": "solo", "change": "clear_focus"})).await;
    poll("the reply after the restart", || async {
        let d = get(&http, format!("http://{addr}/dump")).await;
        d["outbox"].as_array()?.iter().any(|o| o["in_reply_to"] == id.as_str()).then_some(())
    })
    .await;
    let d = get(&http, format!("http://{addr}/ai/decisions?persona=solo")).await;
    let taken =
        d["decisions"].as_array().unwrap().iter().find(|d| d["event_id"] == id.as_str() && d["verdict"] == "engage");
    let reason = taken.map(|d| d["reason"].as_str().unwrap_or_default().to_string()).unwrap_or_default();
    assert!(reason.starts_with("taking up deferred"), "{d}");
    child.kill().unwrap();
    child.wait().unwrap();
}
