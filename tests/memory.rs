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
    assert_eq!(wm.len, 2);
    assert_eq!(wm.evictions.len(), 1);
    assert!(wm.evictions[0].text.contains("bravo trivial"), "{:?}", wm.evictions[0]);
    assert!(wm.evictions[0].reason.starts_with("capacity"), "{}", wm.evictions[0].reason);
    let kept: Vec<&str> = wm.recent.iter().map(|e| e.text.as_str()).collect();
    assert!(kept.iter().any(|t| t.contains("alpha")) && kept.iter().any(|t| t.contains("charlie")), "{kept:?}");
    fleet.shutdown(DEADLINE).await;
}
