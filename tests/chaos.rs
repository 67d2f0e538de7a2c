//! `mindfleet bench chaos`: `kill -9` at random moments under concurrent injection (and while
//! indexing), with the real binary; every acknowledged delivery decided exactly once.

use std::process::Command;

use serde_json::Value;

use crate::util::*;

#[test]
fn kill_9_rounds_under_injection_and_indexing_lose_nothing_and_decide_nothing_twice() {
    // The indexing round indexes with the embedding model, as a fleet does.
    pulled();
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["bench", "chaos", "--rounds", "3", "--seed", "23", "--clients", "6", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench chaos failed: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(v["seed"], 23);
    let rounds = v["per_round"].as_array().unwrap();
    assert_eq!(rounds.len(), 3);
    for r in rounds {
        let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
        assert!(n("acknowledged") > 0, "nothing acknowledged before the kill: {r}");
        // Every client injected until the kill cut it off.
        assert_eq!(n("in_flight_at_kill") + n("sent_after_kill"), 6, "{r}");
        assert_eq!(n("refused"), 0, "an injection refused or failed before the kill: {r}");
        assert_eq!(n("lost"), 0, "acknowledged deliveries lost: {r}");
        assert_eq!(n("decided_twice"), 0, "deliveries decided twice: {r}");
        assert_eq!(n("decided"), n("deliveries"), "{r}");
        assert!(n("deliveries") >= n("acknowledged"), "each event reaches a persona of its room: {r}");
        assert_eq!(r["sigterm_exit"], 0, "{r}");
        assert!(r["restart_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Round 1 indexed a generated tree when it was killed (or was done first); the index
    // still answers after the restart.
    assert_eq!(rounds[1]["indexing"], true);
    assert_eq!(rounds[1]["search_after_restart"], 200, "{}", rounds[1]);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["lost"], 0);
    assert_eq!(v["decided_twice"], 0);
}
