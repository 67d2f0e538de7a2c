//! Personas with the local model as their brain, in a fleet: their model calls decoded together,
//! the replies and lessons the model writes, the messages the rules leave undecided, and the
//! rules brain when the model cannot load.

use mindfleet::tree::RenderTree;
use mindfleet_core::config::LocalLlm;

use super::local_config;
use crate::util::{chat, decision, dump, poll};

async fn reply_to(fleet: &mindfleet::Fleet, event_id: &str) -> mindfleet_core::record::OutboxEntry {
    // A model's reply: a loaded machine slows it most.
    crate::util::poll_within("the reply", 5 * crate::util::DEADLINE, || async {
        dump(fleet).await.outbox.into_iter().find(|o| o.in_reply_to == event_id)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn personas_asked_at_once_have_their_model_calls_decoded_together_and_each_answers_with_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let names = ["ada", "bob", "cyd", "dee"];
    let toml: String = names
        .iter()
        .map(|n| format!("[[persona]]\nname = \"{n}\"\nrole = \"engineer\"\nrooms = [\"team\"]\nbrain = \"local\"\n"))
        .collect();
    let mut cfg = crate::util::config(tmp.path(), &crate::util::fleet_toml(&toml));
    cfg.models.dir = super::pulled();
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    let mut asked = Vec::new();
    for (n, who) in names.iter().zip(["ann", "ben", "cat", "dan"]) {
        let ack = fleet.inject(chat("team", who, &format!("@{n} is the deploy done?"))).await.unwrap();
        asked.push((*n, ack.event_id));
    }
    // Each drafts with the model: its draft is posted, or (nothing was found to ground
    // it) the draft check posts the grounded reply instead and says so.
    for (n, id) in &asked {
        let reply = reply_to(&fleet, id).await;
        assert_eq!(reply.persona, *n, "{reply:?}");
        let reason = decision(&fleet, n, id).await.reason;
        assert!(reply.brain == "local" || reason.contains(": grounded reply"), "{reply:?}: {reason}");
    }
    let llm = dump(&fleet).await.llm;
    let b = llm.batching.expect("a local model batches");
    // Four grants at once (the inference slots follow max_batch): their calls shared passes.
    assert_eq!((llm.slots, b.max_batch), (LocalLlm::DEFAULT_MAX_BATCH, LocalLlm::DEFAULT_MAX_BATCH));
    assert!(b.mean_batch > 1.0 && b.passes > 0, "{b:?}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_persona_drafts_its_reply_with_the_llm_and_the_dump_counts_the_cost() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = mindfleet::Fleet::start(local_config(tmp.path())).await.unwrap();
    let ack = fleet.inject(chat("general", "ann", "@helper what is the capital of France?")).await.unwrap();
    decision(&fleet, "helper", &ack.event_id).await;
    let reply = reply_to(&fleet, &ack.event_id).await;
    // The model drafts; nothing the steps found grounds an answer to it, so the persona
    // says what it would need instead of what a small model makes up, and says why.
    assert!(reply.text.starts_with("@ann I have nothing on capital france"), "{reply:?}");
    assert_eq!(reply.brain, "rules", "{reply:?}");
    let d = dump(&fleet).await;
    assert_eq!(d.llm.status, "ready", "{:?}", d.llm);
    // The model was asked to choose the plan among the registry's candidates, and what came
    // of it (its pick, or the rules plan when it was unsure) is in the decision.
    // SmolLM2-135M picks the first listed, the rules plan, which no other order of the
    // candidates could change: asked once, the rules plan stands, saying why.
    assert_eq!(d.llm.by_purpose["plan"].calls, 1, "{:?}", d.llm);
    let decided = decision(&fleet, "helper", &ack.event_id).await;
    let reason = &decided.reason;
    assert!(["model picked the rules plan", "model unsure of the plan"].iter().any(|r| reason.contains(r)), "{reason}");
    assert!(reason.contains(": rules plan"), "{reason}");
    assert!(
        reason.contains("draft used nothing the plan found (nothing was found to ground it): grounded reply"),
        "{reason}"
    );
    // The plan's lesson is the model's, in the reflection the persona remembers; nobody
    // waits for it, so the decision and its reply were journaled before it came.
    assert!(reason.contains("lesson asked of the model"), "{reason}");
    let reflection = poll("the reflection with the model's lesson", || async {
        let d = dump(&fleet).await;
        let wm = crate::util::persona(&d, "helper").working_memory.clone();
        wm.recent.into_iter().find(|e| e.text.contains("; lesson: "))
    })
    .await;
    let lesson = reflection.text.split("; lesson: ").nth(1).unwrap_or_default();
    assert!(!lesson.trim().is_empty(), "{reflection:?}");
    assert!(reflection.created_us > decided.at_us, "remembered {reflection:?} before the decision {decided:?}");
    let d = dump(&fleet).await;
    assert_eq!(d.llm.by_purpose["evaluate"].calls, 1, "{:?}", d.llm);
    let cost = &d.llm.by_purpose["reply"];
    assert!(cost.calls >= 1 && cost.tokens_in > 0 && cost.tokens_out > 0, "{:?}", d.llm);
    assert!(d.render_tree().contains("LlmWorker [ready]"), "{}", d.render_tree());
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_is_asked_about_an_undecided_message_and_the_rules_decide_when_it_is_unsure() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = mindfleet::Fleet::start(local_config(tmp.path())).await.unwrap();
    let ack = fleet.inject(chat("general", "ann", "the deploy is failing again, can anyone help?")).await.unwrap();
    let d = decision(&fleet, "helper", &ack.event_id).await;
    // SmolLM2-135M's margins are never clear (GATE_CALIBRATION): the scorer decides, saying so.
    assert_eq!(d.by, "model/score", "{d:?}");
    assert!(d.reason.contains("model unsure (margin"), "{}", d.reason);
    let llm = dump(&fleet).await.llm;
    assert_eq!(llm.by_purpose["gate"].calls, 1, "{llm:?}");
    // A message that names somebody else is its to answer: no model question, the scorer
    // decides and the decision says why.
    let ack = fleet.inject(chat("general", "ann", "@sam the deploy is failing again, can you help?")).await.unwrap();
    let d = decision(&fleet, "helper", &ack.event_id).await;
    assert_eq!(d.by, "model/score", "{d:?}");
    assert!(d.reason.contains("names someone else: judged by rules, no model question"), "{}", d.reason);
    assert_eq!(dump(&fleet).await.llm.by_purpose["gate"].calls, 1);
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_model_a_local_persona_replies_by_rules_and_the_decision_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = local_config(tmp.path());
    cfg.models.llm = Some(tmp.path().join("missing.gguf"));
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    let ack = fleet.inject(chat("general", "ann", "@helper are you there?")).await.unwrap();
    let d = decision(&fleet, "helper", &ack.event_id).await;
    assert!(d.reason.contains("fell back to the rules brain") && d.reason.contains("missing.gguf"), "{}", d.reason);
    assert_eq!(reply_to(&fleet, &ack.event_id).await.brain, "rules");
    let d = dump(&fleet).await;
    assert_eq!(d.llm.status, "degraded");
    assert!(d.render_tree().contains("LlmWorker [degraded]"), "{}", d.render_tree());
    let helper = crate::util::persona(&d, "helper");
    let why = helper.brain_degraded.as_deref().unwrap_or_default();
    assert!(why.starts_with("LLM unavailable: ") && why.contains("missing.gguf"), "{why:?}");
    assert!(d.render_tree().contains("brain local (degraded: rules)"), "{}", d.render_tree());
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}
