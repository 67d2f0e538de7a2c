use std::collections::HashMap;
use std::path::Path;

use super::*;

fn us(rfc3339: &str) -> i64 {
    rfc3339.parse::<jiff::Timestamp>().unwrap().as_microsecond()
}

#[test]
fn session_times_are_read_as_the_set_writes_them() {
    assert_eq!(parse_session_time("1:56 pm on 8 May, 2023").unwrap(), us("2023-05-08T13:56:00Z"));
    assert_eq!(parse_session_time("12:48 am on 1 February, 2023").unwrap(), us("2023-02-01T00:48:00Z"));
    assert_eq!(parse_session_time("12:05 pm on 17 December, 2022").unwrap(), us("2022-12-17T12:05:00Z"));
    for bad in ["yesterday", "13:10 pm on 8 May, 2023", "1:56 pm on 8 Mai, 2023", "1:56 pm on 31 June, 2023"] {
        let e = parse_session_time(bad).unwrap_err();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
    }
}

/// Two sessions out of order (10 before 2 by name), a photo, a duplicate and a malformed
/// evidence, an adversarial question and one without evidence.
const SMALL: &str = r#"{
  "speaker_a": "Ann Lee", "speaker_b": "Bob",
  "session_10_date_time": "9:00 am on 3 June, 2023",
  "session_10": [{"speaker": "Bob", "dia_id": "D10:1", "text": "Late news."}],
  "session_2_date_time": "1:56 pm on 8 May, 2023",
  "session_2": [
    {"speaker": "Ann Lee", "dia_id": "D2:1", "text": "Hi Bob!"},
    {"speaker": "Bob", "dia_id": "D2:2", "text": "Look.", "blip_caption": "a photo of a dog"}
  ],
  "session_2_summary": "not a session",
  "qa": [
    {"question": "Who has a dog?", "answer": "Bob", "evidence": ["D2:2"], "category": 4},
    {"question": "Trick?", "answer": "none", "evidence": ["D2:1"], "category": 5},
    {"question": "When?", "answer": "May", "evidence": ["D2:1; D10:1"], "category": 2},
    {"question": "What news?", "answer": "late", "evidence": [" D10:1", "D10:1", "D2:1"], "category": 1},
    {"question": "Nothing?", "answer": "", "evidence": [], "category": 3}
  ]
}"#;

#[test]
fn a_conversation_becomes_turns_in_session_order_and_its_answerable_questions() {
    let c = parse_conversation("7", SMALL).unwrap();
    let keys: Vec<&str> = c.turns.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, ["7-D2-1", "7-D2-2", "7-D10-1"]);
    assert_eq!(c.turns[0].from(), "ann-lee");
    assert_eq!(c.turns[0].document(), "Ann Lee: Hi Bob!");
    assert_eq!(c.turns[1].text, "Look. [shares a photo: a photo of a dog]");
    assert_eq!(c.turns[0].at_us, us("2023-05-08T13:56:00Z"));
    assert_eq!(c.turns[1].at_us, us("2023-05-08T13:56:30Z"));
    assert_eq!(c.turns[2].at_us, us("2023-06-03T09:00:00Z"));
    let qs: Vec<(&str, u64, Vec<&str>)> = c
        .questions
        .iter()
        .map(|q| (q.id.as_str(), q.category, q.evidence.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(qs, [("7-q0", 4, vec!["7-D2-2"]), ("7-q3", 1, vec!["7-D10-1", "7-D2-1"])]);
}

#[test]
fn a_bad_conversation_file_is_refused_naming_what_is_wrong() {
    let no_date = SMALL.replace("\"session_2_date_time\"", "\"session_2_when\"");
    assert_eq!(parse_conversation("7", &no_date).unwrap_err(), "no `session_2_date_time`");
    let twice = SMALL.replace("\"D2:2\", \"text\"", "\"D2:1\", \"text\"");
    assert_eq!(parse_conversation("7", &twice).unwrap_err(), "`session_2`[1].dia_id: \"D2:1\" is given twice");
    let odd = SMALL.replace("\"D10:1\", \"text\"", "\"10:1\", \"text\"");
    assert_eq!(parse_conversation("7", &odd).unwrap_err(), "`session_10`[0].dia_id: \"10:1\" is not like D3:1");
    let no_category = SMALL.replace("\"category\": 4", "\"kind\": 4");
    assert_eq!(parse_conversation("7", &no_category).unwrap_err(), "`qa`[0]: no `category`");
    let no_question = SMALL.replace("\"Who has a dog?\"", "\" \"");
    assert_eq!(parse_conversation("7", &no_question).unwrap_err(), "`qa`[0]: no `question` (a string, not empty)");
    assert!(parse_conversation("Seven!", SMALL).unwrap_err().contains("\"Seven!\""));
}

#[test]
fn reading_a_directory_names_the_file_that_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    assert!(read_set(dir.path()).unwrap_err().to_string().ends_with("no conversation files (*.json)"));
    std::fs::write(dir.path().join("conv-1.json"), SMALL).unwrap();
    std::fs::write(dir.path().join("conv-2.json"), "{").unwrap();
    let e = read_set(dir.path()).unwrap_err().to_string();
    assert!(e.contains("conv-2.json: EOF"), "{e}");
    std::fs::write(dir.path().join("conv-2.json"), SMALL).unwrap();
    let set = read_set(dir.path()).unwrap();
    assert_eq!(set.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["1", "2"]);
    // `2.json` would be a second conversation 2, its persona and turns those of `conv-2.json`.
    std::fs::write(dir.path().join("2.json"), SMALL).unwrap();
    let e = read_set(dir.path()).unwrap_err().to_string();
    assert!(e.contains("conv-2.json: names the same conversation as") && e.ends_with("2.json"), "{e}");
}

/// A set of questions whose figures are worked out by hand below, and checked against the dev
/// set's `score.py` when it and python3 are there (`../shared/memory-dev`, beside the checkout).
const SCORED: &str = r#"{
  "speaker_a": "A", "speaker_b": "B",
  "session_1_date_time": "1:00 pm on 1 May, 2023",
  "session_1": [
    {"speaker": "A", "dia_id": "D1:1", "text": "one"},
    {"speaker": "B", "dia_id": "D1:2", "text": "two"},
    {"speaker": "A", "dia_id": "D1:3", "text": "three"}
  ],
  "session_2_date_time": "1:00 pm on 2 May, 2023",
  "session_2": [
    {"speaker": "A", "dia_id": "D2:1", "text": "four"},
    {"speaker": "B", "dia_id": "D2:2", "text": "five"},
    {"speaker": "A", "dia_id": "D2:3", "text": "six"}
  ],
  "qa": [
    {"question": "q0", "evidence": ["D1:1"], "category": 4},
    {"question": "q1", "evidence": ["D1:2", "D2:1"], "category": 1},
    {"question": "q2", "evidence": ["D2:2"], "category": 2},
    {"question": "q3", "evidence": ["D1:3"], "category": 4},
    {"question": "q4", "evidence": ["D1:1"], "category": 5},
    {"question": "q5", "evidence": ["D1:1; D2:1"], "category": 1},
    {"question": "q6", "evidence": ["D1:1", "D1:1", "D2:3"], "category": 2}
  ]
}"#;

fn scored_results() -> HashMap<String, Vec<String>> {
    let r = |ids: &[&str]| ids.iter().map(|i| format!("x-{i}")).collect::<Vec<_>>();
    HashMap::from([
        ("x-q0".into(), r(&["D1-1", "D2-3"])),
        // Half in the first five, all in ten.
        ("x-q1".into(), r(&["D2-3", "D1-1", "D1-2", "D1-3", "D2-2", "D2-3", "D2-1"])),
        // Sixth: in ten, not in five.
        ("x-q2".into(), r(&["D1-1", "D1-2", "D1-3", "D2-1", "D2-3", "D2-2"])),
        // q3 has no line: nothing found.
        // One of two, twice.
        ("x-q6".into(), r(&["D1-1", "D1-1"])),
        // Left out of the scores: adversarial.
        ("x-q4".into(), r(&["D1-1"])),
    ])
}

#[test]
fn the_scorer_agrees_with_score_py() {
    let c = parse_conversation("x", SCORED).unwrap();
    let s = score(&c.questions, &scored_results());
    let f = |n, r5, r10, h5| Figures { n, recall_at_5: r5, recall_at_10: r10, hit_at_5: h5 };
    let close = |a: &Figures, b: &Figures| {
        a.n == b.n
            && (a.recall_at_5 - b.recall_at_5).abs() < 1e-9
            && (a.recall_at_10 - b.recall_at_10).abs() < 1e-9
            && (a.hit_at_5 - b.hit_at_5).abs() < 1e-9
    };
    // By hand: q0 (1, 1, 1), q1 (0.5, 1, 1), q2 (0, 1, 0), q3 (0, 0, 0), q6 (0.5, 0.5, 1).
    let want = [
        (None, f(5, 0.4, 0.7, 0.6)),
        (Some(1), f(1, 0.5, 1.0, 1.0)),
        (Some(2), f(2, 0.25, 0.75, 0.5)),
        (Some(4), f(2, 0.5, 0.5, 0.5)),
    ];
    for (key, w) in &want {
        let got = match key {
            None => &s.all,
            Some(c) => &s.by_category[c],
        };
        assert!(close(got, w), "{key:?}: {got:?}, by hand {w:?}");
    }
    assert_eq!(s.by_category.len(), 3);

    // The same with score.py, when it can run.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/memory-dev/score.py");
    if !script.is_file() || std::process::Command::new("python3").arg("--version").output().is_err() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("conv-x.json"), SCORED).unwrap();
    let questions: Vec<&Question> = c.questions.iter().collect();
    let results = dir.path().join("results.jsonl");
    let mut lines = results_lines(&questions, &scored_results());
    // An adversarial question's line is read and left out, as by score.py.
    lines.push_str("{\"id\": \"x-q4\", \"ranked\": [\"x-D1-1\"]}\n");
    std::fs::write(&results, lines).unwrap();
    let out = std::process::Command::new("python3").arg(&script).arg(&results).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    for (key, w) in &want {
        let label = key.map_or("all".to_string(), |c| format!("category {c}"));
        let line = format!(
            "{label}: n={} recall@5={:.3} recall@10={:.3} hit@5={:.3}",
            w.n, w.recall_at_5, w.recall_at_10, w.hit_at_5
        );
        assert!(printed.lines().any(|l| l == line), "score.py printed:\n{printed}\nnot {line}");
    }
}

#[test]
fn bm25_is_rank_bm25s_okapi_with_its_idf_floor() {
    let docs = [vec!["a", "b"], vec!["a", "c"], vec!["a", "a", "d"]];
    let bm = Bm25::new(docs.iter().map(|d| d.iter().map(|t| t.to_string()).collect()).collect());
    let q = |t: &[&str]| bm.scores(&t.iter().map(|t| t.to_string()).collect::<Vec<_>>());
    // Worked out with rank_bm25's formula: "a" is in every document, so its idf (negative) is
    // floored at 0.25 times the mean idf, itself negative here.
    let want = [0.5183056957775721, -0.027614818170814775, -0.033808796078287254];
    for (got, want) in q(&["b", "a"]).iter().zip(want) {
        assert!((got - want).abs() < 1e-12, "{got} != {want}");
    }
    // A query token counts as often as it is in the query; an unknown one adds nothing.
    let twice = q(&["b", "b", "zebra"]);
    assert!((twice[0] - 2.0 * (0.5183056957775721 + 0.027614818170814775)).abs() < 1e-12, "{twice:?}");
    assert_eq!(&twice[1..], [0.0, 0.0]);
}

#[test]
fn tokens_are_lower_cased_alphanumeric_runs() {
    assert_eq!(
        tokens("Caroline: I'm at the LGBTQ+ group, 2023!"),
        ["caroline", "i", "m", "at", "the", "lgbtq", "group", "2023"]
    );
}

#[test]
fn reciprocal_rank_fusion_adds_one_over_k_plus_rank_of_the_first_depth() {
    // 0 and 2: 1/61 + 1/63 = 0.032266; 1: 2/62 = 0.032258.
    assert_eq!(rrf(&[&[0, 1, 2], &[2, 1, 0]], 50), [0, 2, 1]);
    // Whole: 1 (1/62 + 1/61) before 0 (1/61 + 1/63) before 2. The first of each only: 0 and 1
    // tie at 1/61 and keep their order; 2 is in neither.
    assert_eq!(rrf(&[&[0, 1, 2], &[1, 2, 0]], 3), [1, 0, 2]);
    assert_eq!(rrf(&[&[0, 1, 2], &[1, 2, 0]], 1), [0, 1, 2]);
    assert_eq!(rank_by(&[0.5, 0.9, 0.5]), [1, 0, 2]);
}
