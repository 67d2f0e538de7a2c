//! `mindfleet bench memory-eval`: the real binary on a small LoCoMo-format conversation written
//! here, with the real MiniLM: the figures' shape, and an exact-keyword question found.

use std::process::Command;

use serde_json::Value;

use crate::util::*;

/// Two sessions, fourteen turns (more than the ten recalled), a speaker with a space in the name
/// and a photo; a single-hop question on one exact keyword, a temporal one, and an adversarial
/// one that is left out.
const CONVERSATION: &str = r#"{
  "speaker_a": "Ann Lee",
  "speaker_b": "Bob",
  "session_1_date_time": "10:15 am on 3 March, 2023",
  "session_1": [
    {"speaker": "Ann Lee", "dia_id": "D1:1", "text": "Morning Bob! How was your week?"},
    {"speaker": "Bob", "dia_id": "D1:2", "text": "Busy, work has been hectic with the quarterly reports."},
    {"speaker": "Ann Lee", "dia_id": "D1:3", "text": "My tortoise is called Zephyrine, she turned forty this spring."},
    {"speaker": "Bob", "dia_id": "D1:4", "text": "That is a long life for a pet!"},
    {"speaker": "Ann Lee", "dia_id": "D1:5", "text": "I baked sourdough bread yesterday.", "blip_caption": "a photo of a loaf of bread"},
    {"speaker": "Bob", "dia_id": "D1:6", "text": "Looks delicious, I should learn to bake."},
    {"speaker": "Ann Lee", "dia_id": "D1:7", "text": "We could watch a movie on Friday."}
  ],
  "session_2_date_time": "7:40 pm on 20 March, 2023",
  "session_2": [
    {"speaker": "Bob", "dia_id": "D2:1", "text": "Guess what, I have news."},
    {"speaker": "Bob", "dia_id": "D2:2", "text": "I finished the Lisbon marathon last Sunday in under four hours!"},
    {"speaker": "Ann Lee", "dia_id": "D2:3", "text": "Congratulations, that is amazing."},
    {"speaker": "Bob", "dia_id": "D2:4", "text": "My legs still hurt a bit."},
    {"speaker": "Ann Lee", "dia_id": "D2:5", "text": "The garden is full of tulips now."},
    {"speaker": "Bob", "dia_id": "D2:6", "text": "My sister is visiting next month."},
    {"speaker": "Ann Lee", "dia_id": "D2:7", "text": "Say hi to her from me."}
  ],
  "qa": [
    {"question": "What is the name of Ann's tortoise?", "answer": "Zephyrine", "evidence": ["D1:3"], "category": 4},
    {"question": "When did Bob run the Lisbon marathon?", "answer": "19 March 2023", "evidence": ["D2:2"], "category": 2},
    {"question": "What is the name of Bob's tortoise?", "answer": "none", "evidence": ["D1:3"], "category": 5}
  ]
}"#;

#[test]
fn memory_eval_prints_the_figures_and_finds_an_exact_keyword() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("conv-t1.json"), CONVERSATION).unwrap();
    let results = dir.path().join("results.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["bench", "memory-eval", "--baseline", "--json", "--dir"])
        .arg(dir.path())
        .arg("--results")
        .arg(&results)
        // Consolidated after a second of quiet, not the default minute.
        .args(["--conversation", "observe_after_secs = 1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench memory-eval failed: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(v["bench"], "memory-eval");
    assert_eq!((&v["conversations"], &v["turns"], &v["questions"]), (&1.into(), &14.into(), &2.into()), "{v}");
    let (ingest, embed) = (v["ingest_s"].as_f64().unwrap(), v["embed_s"].as_f64().unwrap());
    assert!(ingest > 0.0 && embed >= ingest, "{v}");
    // The turns were consolidated before any question: facts and the two sessions' summaries.
    assert!(v["observed_s"].as_f64().unwrap() >= embed && v["observations"].as_u64().unwrap() > 2, "{v}");
    assert_eq!(v["observe_after_s"], 1.0, "{v}");
    // The temporal question is answered among the first five.
    assert_eq!(v["ours"]["by_category"]["2"]["hit_at_5"], 1.0, "{v}");

    // A bad `[conversation]` key is named, as a fleet file's is.
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["bench", "memory-eval", "--json", "--dir"])
        .arg(dir.path())
        .args(["--conversation", "rrf_k = -1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("`rrf_k` = -1 is out of range"), "{stderr}");

    // Every method with the same figures, overall and per category (the adversarial question
    // is in none).
    let methods = [&v["ours"], &v["baselines"]["bm25"], &v["baselines"]["dense"], &v["baselines"]["hybrid"]];
    for m in methods {
        assert_eq!(m["n"], 2, "{m}");
        for k in ["recall_at_5", "recall_at_10", "hit_at_5"] {
            let x = m[k].as_f64().unwrap_or_else(|| panic!("{k} in {m}"));
            assert!((0.0..=1.0).contains(&x), "{k} in {m}");
        }
        let by = m["by_category"].as_object().unwrap();
        assert_eq!(by.keys().collect::<Vec<_>>(), ["2", "4"], "{m}");
        assert_eq!((&by["2"]["name"], &by["2"]["n"]), (&"temporal".into(), &1.into()));
        assert_eq!((&by["4"]["name"], &by["4"]["n"]), (&"single-hop".into(), &1.into()));
        assert!(m["query_p99_ms"].as_f64().unwrap() >= m["query_p50_ms"].as_f64().unwrap(), "{m}");
    }
    // The exact keyword ("tortoise") is found by ours, and by the keyword baseline.
    assert_eq!(v["ours"]["by_category"]["4"]["recall_at_10"], 1.0, "{v}");
    assert_eq!(v["baselines"]["bm25"]["by_category"]["4"]["recall_at_10"], 1.0, "{v}");
    assert_eq!(v["ours"]["recalls_by_words"], 0, "recall used the vectors: {v}");
    assert!(v["ours"]["query_p50_ms"].as_f64().unwrap() > 0.0, "{v}");
    for b in ["bm25", "dense", "hybrid"] {
        assert!(v["ratios"][b]["recall_at_10"].is_number(), "{v}");
    }

    // Ours per question, in score.py's format: the answerable questions only, each at most ten
    // turns named as score.py names them.
    let lines: Vec<Value> =
        std::fs::read_to_string(&results).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.iter().map(|l| l["id"].as_str().unwrap()).collect::<Vec<_>>(), ["t1-q0", "t1-q1"]);
    for l in &lines {
        let ranked = l["ranked"].as_array().unwrap();
        assert!(!ranked.is_empty() && ranked.len() <= 10, "{l}");
        assert!(ranked.iter().all(|t| t.as_str().unwrap().starts_with("t1-D")), "{l}");
    }
    assert!(lines[0]["ranked"].as_array().unwrap().contains(&"t1-D1-3".into()), "{}", lines[0]);
}
