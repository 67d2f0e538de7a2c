//! Inbox bounds: shedding order and repeats.

use std::time::Duration;

use mindfleet_core::record::Verdict;
use mindfleet_core::sched::{Class, Owner, Slot, Task};

use crate::util::*;

const ONE: &str = r#"
[[persona]]
name = "solo"
role = "assistant"
rooms = ["desk"]
inbox_capacity = 3
"#;

/// Takes the only cheap slot, so the persona waits for its grant and its inbox fills up.
fn hold_the_slot(fleet: &mindfleet::Fleet) {
    let (tx, rx) = crossbeam_channel::unbounded();
    fleet.scheduler.submit(Task {
        id: u64::MAX,
        ..Task::new("blocker".into(), Class::Urgent, 1.0, Slot::Cheap, "blocker", Owner::Channel(tx))
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("blocker granted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_durable_queue_answers_429_and_journals_the_skip() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &fleet_toml(ONE));
    cfg.scheduler.cheap_slots = 1;
    cfg.storage.max_pending = 3;
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    hold_the_slot(&fleet);
    let url = format!("http://{}/events", fleet.addr);
    let http = reqwest::Client::new();
    let mut statuses = Vec::new();
    for i in 0..5 {
        let body = serde_json::json!({"id": format!("q{i}"), "domain": "chat", "room": "desk", "from": "alice", "text": format!("work item {i}")});
        statuses.push(http.post(&url).json(&body).send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let skipped = decision(&fleet, "solo", "q3").await;
    assert_eq!(skipped.verdict, Verdict::Skipped);
    assert!(skipped.reason.contains("durable queue full"), "{}", skipped.reason);
    fleet.scheduler.done(u64::MAX);
    assert!(fleet.wait_idle(DEADLINE).await);
    // Once drained, the queue accepts again.
    let ok = http
        .post(&url)
        .json(&serde_json::json!({"domain": "chat", "room": "desk", "from": "alice", "text": "later"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_inbox_sheds_the_lowest_priority_and_journals_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &fleet_toml(ONE));
    cfg.scheduler.cheap_slots = 1;
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    hold_the_slot(&fleet);
    let mut first = chat("desk", "alice", "first, waits for the slot");
    first.priority = Some(0.5);
    fleet.inject(first).await.unwrap();
    poll("the first event in flight", || async {
        let d = dump(&fleet).await;
        persona(&d, "solo").in_flight.is_some().then_some(())
    })
    .await;
    // Capacity 3, five more: the two lowest go.
    let mut ids = Vec::new();
    for (i, p) in [0.6, 0.2, 0.9, 0.1, 0.7].into_iter().enumerate() {
        let mut e = chat("desk", "alice", &format!("event {i}"));
        e.id = Some(format!("p{p}"));
        e.priority = Some(p);
        ids.push(fleet.inject(e).await.unwrap().event_id);
    }
    let d = poll("two sheds", || async {
        let d = dump(&fleet).await;
        (persona(&d, "solo").inbox.shed == 2).then_some(d)
    })
    .await;
    let solo = persona(&d, "solo");
    assert_eq!(solo.inbox.len, 3);
    let kept: Vec<&str> = solo.inbox.top.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(kept, ["p0.9", "p0.7", "p0.6"]);
    for id in ["p0.2", "p0.1"] {
        let x = decision(&fleet, "solo", id).await;
        assert_eq!(x.verdict, Verdict::Shed);
        assert!(x.reason.contains("inbox full"), "{}", x.reason);
    }
    fleet.scheduler.done(u64::MAX);
    assert!(fleet.wait_idle(DEADLINE).await);
    for id in ["p0.9", "p0.7", "p0.6"] {
        assert_eq!(decision(&fleet, "solo", id).await.verdict, Verdict::Engage);
    }
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_room_sender_and_text_within_3s_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(ONE)).await;
    let a = fleet.inject(chat("desk", "alice", "deploy now?")).await.unwrap();
    let b = fleet.inject(chat("desk", "alice", "deploy now?")).await.unwrap();
    assert_ne!(a.event_id, b.event_id);
    assert!(fleet.wait_idle(DEADLINE).await);
    let verdicts =
        [decision(&fleet, "solo", &a.event_id).await.verdict, decision(&fleet, "solo", &b.event_id).await.verdict];
    assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Duplicate).count(), 1, "{verdicts:?}");
    assert_eq!(persona(&dump(&fleet).await, "solo").inbox.duplicates, 1);
    fleet.shutdown(DEADLINE).await;
}
