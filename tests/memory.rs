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
