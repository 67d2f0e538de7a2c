//! The reference catalog from a fleet file, matched on texts through `mindfleet refs match`,
//! with the real embedding model for the semantic side.

use std::process::Command;

use serde_json::Value;

use crate::util::pulled;

fn refs_match(fleet: &std::path::Path, text: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["refs", "match", text, "--json", "--fleet"])
        .arg(fleet)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn refs_match_names_tags_meaning_and_links_best_first_and_goes_on_without_the_model() {
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
    write("refs/deploy/README.md", "Canary first, then the rest.");
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
