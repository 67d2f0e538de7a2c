//! Budgets never silence a human: a persona whose model budget is spent answers a human on the
//! rules brain (the reply marked `brain: rules`, the decision saying "model budget spent"); only
//! work no human waits on is skipped, and the skip is journaled with its reason.

use mindfleet_core::dump::FleetDump;
use mindfleet_core::event::{EventInput, SenderKind};
use mindfleet_core::record::Decision;

use crate::util::{DEADLINE, chat, decision, dump, fleet_toml, poll, pulled, reply_to};

const SEVEN: [&str; 7] = ["ada", "bob", "cyd", "dee", "eve", "fay", "gus"];

/// Seven generalists in `team`, each with a budget of `budget` model calls an hour, on `brain`.
fn seven_on_a_budget(brain: &str, budget: u32) -> String {
    let mut t = String::new();
    for name in SEVEN {
        t.push_str(&format!(
            "[[persona]]\nname = \"{name}\"\nrole = \"{name} the generalist\"\nrooms = [\"team\"]\n\
             brain = \"{brain}\"\ninferences_per_hour = {budget}\n\n"
        ));
    }
    fleet_toml(&t)
}

/// What each message got: (event id, replies to it, replies by the rules brain).
fn replies(d: &FleetDump, ids: &[String]) -> Vec<(String, usize, usize)> {
    ids.iter()
        .map(|id| {
            let to: Vec<_> = d.outbox.iter().filter(|o| o.in_reply_to == *id).collect();
            (id.clone(), to.len(), to.iter().filter(|o| o.brain == "rules").count())
        })
        .collect()
}

/// Every persona's journaled decisions.
async fn decisions(fleet: &mindfleet::Fleet) -> Vec<(String, Decision)> {
    let storage = fleet.storage.clone();
    tokio::task::spawn_blocking(move || storage.all_decisions()).await.unwrap().unwrap()
}

/// Why each message was decided as it was, by every persona (for a failing assertion).
fn why(all: &[(String, Decision)], id: &str) -> String {
    let by: Vec<String> = all
        .iter()
        .filter(|(_, x)| x.event_id == id)
        .map(|(p, x)| format!("{p} {} by {}: {}", x.verdict.as_str(), x.by, x.reason))
        .collect();
    format!("{id}:\n  {}", by.join("\n  "))
}

/// One `helper` in `general` on the local brain with no model budget at all, replies queued for
/// budget at most `queue_deadline_secs`.
fn helper_without_budget(dir: &std::path::Path, queue_deadline_secs: f64) -> mindfleet_core::config::FleetConfig {
    let toml = format!(
        "[scheduler]\nqueue_deadline_secs = {queue_deadline_secs:?}\n[[persona]]\nname = \"helper\"\n\
         role = \"assistant\"\nrooms = [\"general\"]\nbrain = \"local\"\ninferences_per_hour = 0\n"
    );
    let mut cfg = crate::util::config(dir, &fleet_toml(&toml));
    cfg.models.dir = pulled();
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_local_personas_with_a_budget_of_4_answer_every_undirected_human_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::util::config(dir.path(), &seven_on_a_budget("local", 4));
    cfg.models.dir = pulled();
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    // Turn-taking on a budget, not a cold start: the messages go to a fleet with its model loaded.
    poll("the model", || async { (dump(&fleet).await.llm.status == "ready").then_some(()) }).await;
    let mut ids = Vec::new();
    for i in 0..12 {
        let text = format!("status question number {i}: how is the rollout going");
        ids.push(fleet.inject(chat("team", "alice", &text)).await.unwrap().event_id);
    }
    assert!(fleet.wait_idle(DEADLINE * 4).await, "the fleet settles");
    let (d, all) = (dump(&fleet).await, decisions(&fleet).await);
    let got = replies(&d, &ids);
    let unanswered: Vec<String> = got.iter().filter(|(_, n, _)| *n == 0).map(|(id, ..)| why(&all, id)).collect();
    assert!(unanswered.is_empty(), "{} of {} unanswered:\n{}", unanswered.len(), ids.len(), unanswered.join("\n"));
    let total: usize = got.iter().map(|(_, n, _)| n).sum();
    let per_message = total as f64 / ids.len() as f64;
    let many: Vec<String> = got.iter().filter(|(_, n, _)| *n > 1).map(|(id, ..)| why(&all, id)).collect();
    assert!((0.9..=1.2).contains(&per_message), "{total} replies to {} messages\n{}", ids.len(), many.join("\n"));
    // The budget of 4 calls an hour is spent within the first messages: the rules brain
    // answers the rest, the reply marked so and the decision saying why (or the model drafted
    // it and the draft check posted the grounded reply instead, saying so).
    let by_rules = got.iter().map(|(_, _, r)| r).sum::<usize>();
    assert!(by_rules >= ids.len() - 2, "{by_rules} of {total} replies by rules");
    for o in d.outbox.iter().filter(|o| ids.contains(&o.in_reply_to) && o.brain == "rules") {
        let (_, x) = all.iter().find(|(p, x)| *p == o.persona && x.event_id == o.in_reply_to).expect("its decision");
        assert!(
            x.reason.contains("model budget spent") || x.reason.contains(": grounded reply"),
            "{}: {}",
            o.persona,
            x.reason
        );
    }
    // A mention on a spent budget is answered by the persona named, and by it alone.
    let ack = fleet.inject(chat("team", "alice", "@fay can you take this one")).await.unwrap();
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    let who: Vec<&str> =
        d.outbox.iter().filter(|o| o.in_reply_to == ack.event_id).map(|o| o.persona.as_str()).collect();
    assert_eq!(who, ["fay"]);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_queued_for_budget_past_its_deadline_is_drafted_by_rules() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = mindfleet::Fleet::start(helper_without_budget(dir.path(), 1.0)).await.unwrap();
    // Above priority 0.6 a reply waits for budget, here at most 1 s; none comes.
    let input = EventInput { priority: Some(0.9), ..chat("general", "ann", "the release checklist needs a review") };
    let ack = fleet.inject(input).await.unwrap();
    let reply = reply_to(&fleet, &ack.event_id).await;
    assert_eq!(reply.brain, "rules", "{reply:?}");
    let x = decision(&fleet, "helper", &ack.event_id).await;
    assert!(x.reason.contains("model budget spent (hard_budget) after"), "{}", x.reason);
    assert!(x.reason.contains("draft_reply ran on the rules brain"), "{}", x.reason);
    // It waited out its deadline first (the decision says how long).
    let waited: f64 =
        x.reason.split("(hard_budget) after ").nth(1).and_then(|r| r.split(' ').next()?.parse().ok()).unwrap();
    assert!(waited >= 1.0, "{}", x.reason);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_message_over_budget_is_skipped_and_the_decision_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = mindfleet::Fleet::start(helper_without_budget(dir.path(), 30.0)).await.unwrap();
    let input = EventInput {
        sender_kind: SenderKind::Persona,
        persona: Some("helper".into()),
        ..chat("general", "builder", "the nightly build is green again")
    };
    let ack = fleet.inject(input).await.unwrap();
    let x = decision(&fleet, "helper", &ack.event_id).await;
    assert!(x.reason.contains("skipped: model budget spent (hard_budget) and no human waits on it"), "{}", x.reason);
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    assert!(d.outbox.iter().all(|o| o.in_reply_to != ack.event_id), "no reply: {:?}", d.outbox);
    let plan = crate::util::persona(&d, "helper").plan.clone().expect("the plan");
    let stop = plan.adjustments.last().expect("the budget's stop");
    assert_eq!(stop.reason, "over budget: the plan stops here", "{plan:?}");
    fleet.shutdown(DEADLINE).await;
}

#[test]
fn bench_turns_prints_for_both_brains_that_nobody_is_left_unanswered() {
    pulled();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["bench", "turns", "--budget", "4", "--messages", "10", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench turns failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(
        (v["bench"].as_str(), v["personas"].as_u64(), v["inferences_per_hour"].as_u64()),
        (Some("turns"), Some(7), Some(4))
    );
    for brain in ["rules", "local"] {
        let b = &v[brain];
        let n = |k: &str| b[k].as_u64().unwrap_or_else(|| panic!("{brain}.{k} in {v}"));
        assert_eq!((n("undirected"), n("mentions")), (10, 2), "{v}");
        assert_eq!(n("unanswered_undirected"), 0, "{brain}: {v}");
        assert_eq!(n("mentions_answered_by_named"), 2, "{brain}: {v}");
        assert_eq!(n("mentions_answered_by_others"), 0, "a mention is its named persona's: {brain}: {v}");
        let per = b["replies_per_undirected"].as_f64().unwrap();
        assert!((0.9..=1.2).contains(&per), "{brain}: {v}");
        let replies = n("replies_by_rules") + n("replies_by_model");
        let asked = (per * 10.0).round() as u64 + 2;
        assert_eq!(replies, asked, "{brain}: {replies} replies to {asked} messages: {v}");
        assert_eq!(n("skipped_grants"), 0, "nothing a human waits on is skipped: {v}");
    }
    assert_eq!(v["rules"]["replies_by_model"], 0, "{v}");
    assert!(v["local"]["budgeted_calls"].as_u64().unwrap() <= 7 * 4, "the budgets hold: {v}");
    assert!(v["local"]["replies_by_rules"].as_u64().unwrap() > 0, "the budget ran out: {v}");
}
