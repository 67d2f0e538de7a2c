//! The reference catalog from a fleet file, matched on texts through `mindfleet refs match`,
//! with the real embedding model for the semantic side.

use std::process::Command;

use serde_json::Value;

use mindfleet_core::refs::RefMatch;

use crate::util::{chat, decision, fleet_toml, persona, poll, pulled};

const PERSONA: &str = "[[persona]]\nname = \"helper\"\nrole = \"assistant\"\nrooms = [\"general\"]\n";

fn refs_match(fleet: &std::path::Path, text: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["refs", "match", text, "--json", "--fleet"])
        .arg(fleet)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Four references in a temp dir (files and a catalog whose paths are relative to it): the
/// resilience guide links to the timeouts guide.
fn catalog() -> (tempfile::TempDir, &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "refs/resilience/README.md",
        "Breakers, bulkheads. Timeouts are in [the timeouts guide](../timeouts/README.md).",
    );
    write("refs/timeouts/README.md", "Every call has a deadline.");
    write("refs/deploy/README.md", "# Releases\n\nCanary first, then the rest.\n\nShip on weekdays only.");
    write("refs/style/README.md", "Names say what, not how.");
    let catalog = r#"
[[reference]]
id = "resilience"
name = "Resilience patterns"
description = "Circuit breakers and bulkheads for calls to other services"
tags = ["circuit-breaker", "resilience4j"]
path = "refs/resilience"

[[reference]]
id = "timeouts"
name = "Timeouts"
description = "Deadlines for remote calls"
tags = ["deadline"]
path = "refs/timeouts"

[[reference]]
id = "deploy"
name = "Release process"
description = "How to roll out a new version of a service to production: canary, then everyone"
tags = ["canary"]
path = "refs/deploy"

[[reference]]
id = "style"
name = "Code style"
description = "Naming and formatting rules"
tags = ["naming"]
path = "refs/style"
"#;
    (dir, catalog)
}

#[test]
fn refs_match_names_tags_meaning_and_links_best_first_and_goes_on_without_the_model() {
    let (dir, catalog) = catalog();
    pulled();
    let fleet = dir.path().join("fleet.toml");
    std::fs::write(&fleet, format!("{catalog}\n[[persona]]\nname = \"a\"\nrole = \"helper\"\n")).unwrap();
    let v = refs_match(&fleet, "@style check: our resilience4j circuit breaker config");
    assert_eq!(v["semantic"], "on", "{v}");
    let via = |v: &Value| -> Vec<(String, String)> {
        v["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["id"].as_str().unwrap().to_string(), m["via"].as_str().unwrap().to_string()))
            .collect()
    };
    let expected = [("style", "id"), ("resilience", "tag"), ("timeouts", "linked")];
    assert_eq!(via(&v), expected.map(|(a, b)| (a.to_string(), b.to_string())), "{v}");
    assert_eq!(v["matches"][1]["matched"], serde_json::json!(["circuit-breaker", "resilience4j"]));
    let hint = v["hint"].as_str().unwrap();
    assert!(hint.contains("- resilience (Resilience patterns): matched: circuit-breaker, resilience4j"), "{hint}");
    // By meaning alone: none of the words of the catalog.
    let v = refs_match(&fleet, "how do we ship the new version to production?");
    assert_eq!(via(&v), [("deploy".to_string(), "semantic".to_string())], "{v}");
    assert!(v["hint"].as_str().unwrap().contains("- deploy (Release process): semantic: 0."), "{v}");
    assert!(v["similarity"]["style"].as_f64().unwrap() < v["threshold"].as_f64().unwrap(), "{v}");

    // Without the model, names and tags still match, and the answer says meaning is off.
    std::fs::write(
        &fleet,
        format!("[models]\nembedding = \"no-model-here\"\n{catalog}\n[[persona]]\nname = \"a\"\nrole = \"helper\"\n"),
    )
    .unwrap();
    let v = refs_match(&fleet, "our circuit breaker and the canary");
    assert_eq!(v["semantic"], "off", "{v}");
    assert!(v["semantic_off"].as_str().unwrap().contains("no-model-here"), "{v}");
    let ids: Vec<&str> = v["matches"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["deploy", "resilience", "timeouts"], "{v}");
}

/// `(id, via)` of each match.
fn ids_via(matches: &[RefMatch]) -> Vec<(&str, &str)> {
    matches.iter().map(|m| (m.id.as_str(), m.via.as_str())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_selects_what_its_events_call_for_reads_it_cites_it_and_keeps_the_selection() {
    use mindfleet_core::record::{Action, StepState};

    pulled();
    let (dir, catalog) = catalog();
    let file = dir.path().join("fleet.toml");
    std::fs::write(&file, format!("{}\n{catalog}", fleet_toml(PERSONA))).unwrap();
    let mut cfg = mindfleet::fleet_config(Some(&file)).unwrap();
    cfg.storage.data_dir = dir.path().join("data");
    let fleet = mindfleet::Fleet::start(cfg.clone()).await.unwrap();
    let reply_to = |id: String| {
        let fleet = &fleet;
        async move {
            poll("the reply", || async {
                fleet.dump(None).await.unwrap().outbox.into_iter().find(|o| o.in_reply_to == id)
            })
            .await
        }
    };

    // A tag: offered, selected by the plan's first step, read and cited; the timeouts guide it
    // links to comes with it.
    let ack = fleet.inject(chat("general", "alice", "@helper is resilience4j worth adopting?")).await.unwrap();
    let reply = reply_to(ack.event_id.clone()).await;
    assert!(reply.text.contains("Resilience patterns [ref:resilience/README.md:1-1]"), "{}", reply.text);
    let d = decision(&fleet, "helper", &ack.event_id).await;
    assert_eq!(ids_via(&d.references), [("resilience", "tag"), ("timeouts", "linked")], "{d:?}");
    assert_eq!(d.references[0].matched, ["resilience4j"]);
    let storage = fleet.storage.clone();
    let plan = tokio::task::spawn_blocking(move || storage.recent_plans("helper", 1)).await.unwrap().unwrap().remove(0);
    assert_eq!(plan.plan.steps[0].action, Action::SelectReference, "{plan:?}");
    assert_eq!(plan.plan.steps[0].state, StepState::Done, "{plan:?}");

    // By meaning alone; the passage read is the one that shares the question's words. (What
    // the steps bring up, such as memories of the last answer, is matched after the event.)
    let ack =
        fleet.inject(chat("general", "alice", "@helper how do we ship the new version to production?")).await.unwrap();
    let reply = reply_to(ack.event_id.clone()).await;
    let d = decision(&fleet, "helper", &ack.event_id).await;
    assert_eq!(ids_via(&d.references)[0], ("deploy", "semantic"), "{d:?}");
    assert!(d.references[0].score >= cfg.references.semantic_threshold, "{d:?}");
    assert!(reply.text.contains("[ref:deploy/README.md:5-5]"), "the passage on shipping: {}", reply.text);

    // Named: selected at once.
    let ack = fleet.inject(chat("general", "alice", "@helper please follow @style here")).await.unwrap();
    let d = decision(&fleet, "helper", &ack.event_id).await;
    assert_eq!(ids_via(&d.references)[0], ("style", "id"), "{d:?}");
    let dump = fleet.dump(None).await.unwrap();
    let refs = persona(&dump, "helper").references.clone().expect("a catalog: references in the dump");
    assert_eq!(refs.semantic, "on");
    assert_eq!(refs.last_event.as_deref(), Some(ack.event_id.as_str()));
    let selected = ids_via(&refs.selected);
    let expected = [("deploy", "semantic"), ("resilience", "tag"), ("style", "id"), ("timeouts", "linked")];
    assert_eq!(selected, expected, "{refs:?}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;

    // A restart keeps what was selected, and why; the catalog's embeddings, made at start,
    // come from the embedding cache (keyed by content hash), not the model. (The old fleet's
    // database closes once its last actor lets go of it: start again until it has.)
    let deadline = std::time::Instant::now() + crate::util::DEADLINE;
    let fleet = loop {
        match mindfleet::Fleet::start(cfg.clone()).await {
            Ok(f) => break f,
            Err(e) => assert!(std::time::Instant::now() < deadline, "restart: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let dump = fleet.dump(None).await.unwrap();
    let refs = persona(&dump, "helper").references.clone().unwrap();
    assert_eq!(ids_via(&refs.selected), expected, "{refs:?}");
    poll("the catalog's four embeddings from the cache", || async {
        (fleet.dump(None).await.unwrap().embedding.cache_hits >= 4).then_some(())
    })
    .await;
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_embedding_model_a_persona_matches_names_and_tags_and_says_meaning_is_off() {
    let (dir, catalog) = catalog();
    let file = dir.path().join("fleet.toml");
    let models = "[models]\nembedding = \"no-model-here\"\npull = false\n";
    std::fs::write(&file, format!("{}\n{models}{catalog}", fleet_toml(PERSONA))).unwrap();
    let mut cfg = mindfleet::fleet_config(Some(&file)).unwrap();
    cfg.storage.data_dir = dir.path().join("data");
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    let ack =
        fleet.inject(chat("general", "alice", "@helper is resilience4j worth adopting? see @style")).await.unwrap();
    let d = decision(&fleet, "helper", &ack.event_id).await;
    assert_eq!(ids_via(&d.references)[..3], [("style", "id"), ("resilience", "tag"), ("timeouts", "linked")], "{d:?}");
    let dump = fleet.dump(None).await.unwrap();
    let semantic = persona(&dump, "helper").references.clone().unwrap().semantic;
    assert!(semantic.starts_with("off: ") && semantic.contains("no-model-here"), "{semantic}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}
