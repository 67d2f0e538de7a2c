use std::path::Path;

use super::*;

fn reference(id: &str, tags: &[&str], path: &Path) -> Reference {
    Reference {
        id: id.into(),
        name: format!("{id} guide"),
        description: format!("how to use {id}"),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        path: path.to_path_buf(),
        contents: BTreeMap::new(),
        mode: RefMode::Selectable,
    }
}

#[test]
fn tags_match_across_separators_and_case_but_not_inside_names_paths_or_identifiers() {
    for text in [
        "we need a circuit breaker here",
        "Circuit-Breaker config",
        "see circuit_breaker.",
        "(circuit breaker)",
        "circuit-breaker, then retry",
        "CIRCUIT BREAKER",
    ] {
        assert!(tag_matches("circuit-breaker", text), "{text}");
    }
    for text in [
        "circuitbreaker",
        "my_circuit_breaker_impl",
        "io.circuit-breaker.Config",
        "circuit-breaker.config",
        "/opt/circuit-breaker/bin",
        "circuit  breaker",
        "circuit-breakers",
    ] {
        assert!(!tag_matches("circuit-breaker", text), "{text}");
    }
    assert!(tag_matches("java", "Written in Java."));
    assert!(!tag_matches("java", "import java.util.List;"));
    assert!(!tag_matches("java", "/usr/lib/java/"));
    assert!(!tag_matches("java", "javascript"));
    assert!(!tag_matches("", "anything"));
}

#[test]
fn named_references_come_first_then_tags_then_semantic_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog {
        refs: vec![
            reference("resilience", &["circuit-breaker", "resilience4j"], dir.path()),
            reference("style", &["naming"], dir.path()),
            reference("deploy", &["rollout"], dir.path()),
            Reference { mode: RefMode::Auto, ..reference("always", &["naming"], dir.path()) },
        ],
    };
    let text = "@style please: our resilience4j circuit breaker trips; NAMING too";
    let named = catalog.explicit(text);
    assert_eq!(named.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["style"]);
    let skip: BTreeSet<String> = named.iter().map(|m| m.id.clone()).collect();
    let tags = catalog.by_tags(text, &skip);
    assert_eq!(tags.len(), 1, "auto and named references are not offered again: {tags:?}");
    assert_eq!((tags[0].id.as_str(), tags[0].score), ("resilience", 2.0));
    assert_eq!(tags[0].matched, ["circuit-breaker", "resilience4j"]);
    let sims = BTreeMap::from([("deploy".to_string(), 0.71), ("resilience".to_string(), 0.9), ("style".into(), 0.2)]);
    let sem = semantic(&catalog, &sims, 0.5, &skip);
    assert_eq!(sem.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["resilience", "deploy"]);
    let all = merge([sem, tags, named]);
    let order: Vec<(&str, Via)> = all.iter().map(|m| (m.id.as_str(), m.via)).collect();
    assert_eq!(order, [("style", Via::Id), ("resilience", Via::Tag), ("deploy", Via::Semantic)]);
    let hint = hint_block(&catalog, &all);
    assert_eq!(
        hint,
        "References that may help:\n- style (style guide): named: @style\n- resilience (resilience guide): matched: circuit-breaker, resilience4j\n- deploy (deploy guide): semantic: 0.71"
    );
}

#[test]
fn candidates_are_the_pipeline_in_one_call_with_semantic_off_when_there_is_no_similarity() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog {
        refs: vec![
            reference("resilience", &["circuit-breaker"], dir.path()),
            reference("style", &["naming"], dir.path()),
            reference("deploy", &["rollout"], dir.path()),
        ],
    };
    let text = "@style: the circuit breaker";
    let sims = BTreeMap::from([("deploy".to_string(), 0.4), ("resilience".to_string(), 0.9), ("style".into(), 0.9)]);
    let got = candidates(&catalog, text, Some(&sims), 0.3, &BTreeSet::new());
    let order: Vec<(&str, Via)> = got.iter().map(|m| (m.id.as_str(), m.via)).collect();
    assert_eq!(order, [("style", Via::Id), ("resilience", Via::Tag), ("deploy", Via::Semantic)]);
    // Below the threshold: not offered.
    let got = candidates(&catalog, text, Some(&sims), 0.5, &BTreeSet::new());
    assert_eq!(got.len(), 2, "{got:?}");
    // Skipped references are still named by @id, never offered by tag or meaning.
    let skip = BTreeSet::from(["style".to_string(), "resilience".to_string()]);
    let got = candidates(&catalog, text, None, 0.3, &skip);
    assert_eq!(got.iter().map(|m| (m.id.as_str(), m.via)).collect::<Vec<_>>(), [("style", Via::Id)]);
}
