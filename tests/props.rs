//! Property tests through the real surfaces: generated fleet files through `mindfleet check`,
//! generated event bodies through `POST /events` of a running fleet. Whatever the input, the
//! answer is a value or a clear error that names what is wrong, never a crash.

use std::process::Command;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;

use crate::util::*;

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

/// A line of a fleet file: a known key with a value of any type, an unknown key, a
/// repeated table.
fn fleet_line() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}").replace("NaN", "nan")),
        any::<bool>().prop_map(|b| b.to_string()),
        "[a-z0-9 ./:-]{0,10}".prop_map(|s| format!("{s:?}")),
        Just("[1, \"x\"]".to_string()),
        Just("{ a = 1 }".to_string()),
    ];
    let key = prop::sample::select(vec![
        "[storage]\nmax_pending",
        "[admin]\nmax_body_bytes",
        "[admin]\naddr",
        "[scheduler]\nbudget_soft_limit",
        "[index]\nallowed_roots",
        "[cluster]\nnodes",
        "[defaults]\nwm_ttl_secs",
        "[[persona]]\nname = \"b\"\nrole = \"r\"\ninbox_capacity",
        "[[persona]]\nname = \"c\"\nrole = \"r\"\nrooms",
        "[storage]\nspeed",
    ]);
    (key, value).prop_map(|(k, v)| format!("{k} = {v}\n"))
}

#[test]
fn check_of_generated_fleet_files_exits_0_or_2_with_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.toml");
    let base = "[[persona]]\nname = \"a\"\nrole = \"r\"\n";
    runner(24)
        .run(&prop::collection::vec(fleet_line(), 1..4), |lines| {
            let text = format!("{base}{}", lines.concat());
            std::fs::write(&path, &text).unwrap();
            let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).arg("check").arg(&path).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            match out.status.code() {
                Some(0) => prop_assert!(!stderr.contains("panicked"), "{text}\n{stderr}"),
                Some(2) => {
                    let place = format!("{}:", path.display());
                    prop_assert!(stderr.contains(&place) && !stderr.contains("panicked"), "{text}\n{stderr}");
                }
                code => prop_assert!(false, "exit {code:?}\n{text}\n{stderr}"),
            }
            Ok(())
        })
        .unwrap();
}

/// A JSON value of any type, at the edges.
fn json_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>().prop_map(|f| Value::from(f).to_string()),
        Just("1e400".to_string()),
        Just("18446744073709551616".to_string()),
        "\\PC{0,20}".prop_map(|s| Value::String(s).to_string()),
        Just(Value::String("\u{0}\u{1b}[2J".into()).to_string()),
        (1usize..80_000).prop_map(|n| Value::String("y".repeat(n)).to_string()),
        Just("[\"ops\", {\"a\": [[]]}]".to_string()),
        Just("{\"nested\": {\"deeper\": [1, 2, 3]}}".to_string()),
    ]
}

const FIELDS: [&str; 12] = [
    "id",
    "ts",
    "domain",
    "room",
    "from",
    "sender_kind",
    "text",
    "persona",
    "mentions",
    "priority",
    "urgent",
    "in_reply_to",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_events_with_one_field_set_to_anything_is_accepted_or_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let url = format!("http://{}/events", fleet.addr);
    let client = reqwest::Client::new();
    let handle = tokio::runtime::Handle::current();
    let post = |body: String| -> (u16, Value) {
        tokio::task::block_in_place(|| {
            handle.block_on(async {
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("the fleet answers");
                (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
            })
        })
    };
    runner(64)
        .run(&(0..FIELDS.len(), json_value()), |(which, value)| {
            let field = FIELDS[which];
            let mut fields = vec![
                ("domain", "\"chat\"".to_string()),
                ("room", "\"general\"".to_string()),
                ("from", "\"alice\"".to_string()),
                ("text", "\"hello\"".to_string()),
            ];
            fields.retain(|(k, _)| *k != field);
            fields.push((field, value));
            let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
            let body = format!("{{{}}}", body.join(","));
            let (status, answer) = post(body.clone());
            let error = answer["error"].as_str().unwrap_or_default();
            match status {
                200 => prop_assert!(answer["event_id"].is_string(), "{body}: {answer}"),
                413 => prop_assert!(body.len() > 64 * 1024, "{body}: {answer}"),
                // A room or persona the fleet does not have: named by its value.
                404 => prop_assert!(matches!(field, "room" | "persona") && !error.is_empty(), "{body}: {answer}"),
                400 => {
                    prop_assert!(answer["field"] == field || error.contains(&format!("`{field}")), "{body}: {answer}")
                }
                _ => prop_assert!(false, "status {status} for {body}: {answer}"),
            }
            Ok(())
        })
        .unwrap();
    // Still serving.
    let (status, answer) = post(r#"{"domain":"chat","room":"general","from":"a","text":"still here"}"#.into());
    assert_eq!(status, 200, "{answer}");
    fleet.shutdown(DEADLINE).await;
}
