//! Working memory: eviction by retention score, recorded with its reason.

use crate::util::*;

const SMALL: &str = r#"
[[persona]]
name = "solo"
role = "assistant"
rooms = ["desk"]
wm_capacity = 2
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_capacity_the_lowest_retention_entry_is_evicted_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(SMALL)).await;
    // One at a time, so each engaged event stores its observation (importance = priority).
    for (text, p) in [("alpha important", 0.9), ("bravo trivial", 0.1), ("charlie medium", 0.5)] {
        let mut e = chat("desk", "alice", &format!("@solo {text}"));
        e.priority = Some(p);
        let ack = fleet.inject(e).await.unwrap();
        decision(&fleet, "solo", &ack.event_id).await;
        assert!(fleet.wait_idle(DEADLINE).await);
    }
    let d = poll("an eviction", || async {
        let d = dump(&fleet).await;
        (!persona(&d, "solo").working_memory.evictions.is_empty()).then_some(d)
    })
    .await;
    let wm = &persona(&d, "solo").working_memory;
    // Each engaged event leaves an observation (importance = its priority) and a reflection
    // on its plan (importance 0.8), all in the chat domain, which holds two.
    assert_eq!(wm.len, 2, "{wm:#?}");
    assert!(wm.evictions.iter().all(|e| e.reason.starts_with("capacity")), "{:#?}", wm.evictions);
    let bravo = wm.evictions.iter().find(|e| e.text.contains("bravo trivial")).expect("the trivial observation went");
    let kept_min = wm.recent.iter().map(|e| e.importance).fold(f64::MAX, f64::min);
    assert!(bravo.retention < 0.9 + 0.3 + 0.2, "{bravo:?}");
    assert!(kept_min >= 0.8, "only the important entries stay: {:#?}", wm.recent);
    assert!(wm.recent.iter().any(|e| e.text.contains("alpha important")), "{:#?}", wm.recent);
    fleet.shutdown(DEADLINE).await;
}

const STUDIOUS: &str = r#"
[[persona]]
name = "solo"
role = "assistant"
rooms = ["desk"]
consolidate_every_secs = 0.1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_promotes_working_memory_into_long_term_memory() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(STUDIOUS)).await;
    for text in [
        "@solo the deploy pipeline latency regression is back",
        "@solo deploy pipeline latency is worse after the schema change",
        "@solo I prefer short answers with the numbers",
    ] {
        let ack = fleet.inject(chat("desk", "alice", text)).await.unwrap();
        decision(&fleet, "solo", &ack.event_id).await;
    }
    assert!(fleet.wait_idle(DEADLINE).await);
    let lt = poll("a consolidation pass over all three events", || async {
        let storage = fleet.storage.clone();
        let lt = tokio::task::spawn_blocking(move || storage.long_term("solo", 50)).await.unwrap().unwrap();
        (lt.experiences.len() >= 3 && lt.profiles.iter().any(|p| p.messages >= 3)).then_some(lt)
    })
    .await;
    // Reflections on the three plans became experiences with their trajectories.
    assert!(
        lt.experiences.iter().all(|e| e.success && e.trajectory.contains(&"post_reply".to_string())),
        "{:#?}",
        lt.experiences
    );
    let alice = lt.profiles.iter().find(|p| p.user == "alice").unwrap();
    assert_eq!(alice.preferences.len(), 1, "{alice:?}");
    assert!(alice.topics.iter().any(|(t, n)| t == "deploy" && *n >= 2), "{alice:?}");
    assert!(alice.confidence > 0.0 && alice.confidence < 1.0);
    // The same sequence ran three times: a procedure with its record.
    assert!(lt.procedures.iter().any(|p| p.times_used >= 2 && p.success_rate == 1.0), "{:#?}", lt.procedures);
    assert!(!lt.reports.is_empty() && lt.watermark > 0);
    fleet.shutdown(DEADLINE).await;
}
