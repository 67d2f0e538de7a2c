//! Long-term memory in the plan: what consolidation learned (experiences, procedures, user
//! profiles, knowledge) is recalled before planning, shapes the plan and the reply, and the
//! plan says what each piece changed (`memory_used`, shown by `ai plan`).

use std::process::Command;

use mindfleet::Fleet;
use mindfleet_core::record::{Action, Consolidation, Experience, Procedure, UserProfile};
use serde_json::{Value, json};

use crate::util::*;

/// The persona's plan for `event_id` as `mindfleet ai plan --json` prints it, once finished.
async fn ai_plan(fleet: &Fleet, persona: &str, event_id: &str) -> Value {
    let admin = fleet.addr.to_string();
    poll(&format!("{persona}'s finished plan for {event_id}"), || {
        let (admin, persona) = (admin.clone(), persona.to_string());
        async move {
            let out = tokio::task::spawn_blocking(move || {
                Command::new(env!("CARGO_BIN_EXE_mindfleet"))
                    .args(["ai", "plan", "--persona", &persona, "--admin", &admin, "--format", "json"])
                    .output()
                    .unwrap()
            })
            .await
            .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            let plan = &v["plan"];
            (plan["event_id"] == event_id && plan["finished_us"].is_number()).then(|| plan.clone())
        }
    })
    .await
}

/// `(kind, id, effect)` of each piece of memory a plan used.
fn memory_used(plan: &Value) -> Vec<(String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    plan["memory_used"].as_array().unwrap().iter().map(|u| (s(&u["kind"]), s(&u["id"]), s(&u["effect"]))).collect()
}

fn of_kind<'a>(used: &'a [(String, String, String)], kind: &str) -> Vec<&'a (String, String, String)> {
    used.iter().filter(|u| u.0 == kind).collect()
}

const SOLO: &str = r#"
[[persona]]
name = "solo"
role = "assistant"
rooms = ["desk"]
consolidate_every_secs = 0.1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_recalls_what_consolidation_learned_and_ai_plan_shows_it() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(SOLO)).await;
    let mut asked = Vec::new();
    for text in [
        "@solo the deploy pipeline latency regression is back",
        "@solo deploy pipeline latency is worse after the schema change",
        "@solo how do I profile the deploy pipeline latency?",
    ] {
        let ack = fleet.inject(chat("desk", "alice", text)).await.unwrap();
        decision(&fleet, "solo", &ack.event_id).await;
        assert!(fleet.wait_idle(DEADLINE).await);
        asked.push(ack.event_id);
    }
    // Real consolidation: the three plans became experiences, a procedure, alice's profile.
    let lt = poll("a consolidation pass over all three events", || async {
        let storage = fleet.storage.clone();
        let lt = tokio::task::spawn_blocking(move || storage.long_term("solo", 50)).await.unwrap().unwrap();
        (lt.experiences.len() >= 3 && lt.profiles.iter().any(|p| p.messages >= 3) && !lt.procedures.is_empty())
            .then_some(lt)
    })
    .await;
    let alice = lt.profiles.iter().find(|p| p.user == "alice").unwrap();
    assert_eq!(alice.technical_level, "expert", "{alice:?}");
    let procedure = &lt.procedures[0];
    assert_eq!(procedure.name, "chat: recall_memory -> draft_reply -> post_reply");

    let ack =
        fleet.inject(chat("desk", "alice", "@solo is the deploy pipeline latency regression fixed?")).await.unwrap();
    let plan = ai_plan(&fleet, "solo", &ack.event_id).await;
    let used = memory_used(&plan);
    // By meaning: the embedding worker answered (the decision would say "by words" otherwise).
    let d = decision(&fleet, "solo", &ack.event_id).await;
    assert!(!d.reason.contains("recalled by words"), "{}", d.reason);
    // The profile of the sender shaped the reply, and the reply says it at her level.
    let profile = of_kind(&used, "user_profile");
    assert_eq!(profile.len(), 1, "{used:?}");
    assert_eq!(profile[0].1, "alice");
    assert!(profile[0].2.starts_with("reply for an expert user"), "{used:?}");
    let reply = reply_to(&fleet, &ack.event_id).await;
    assert!(reply.text.contains("In brief, as you know this area well."), "{}", reply.text);
    // The procedure is the template's own steps: recalled, and said to change nothing.
    let p = of_kind(&used, "procedure");
    assert_eq!(p.len(), 1, "{used:?}");
    assert_eq!(p[0].1, procedure.name);
    assert!(p[0].2.starts_with("no effect: the template takes its steps already"), "{used:?}");
    // The similar tasks are the earlier messages, by the events they came from.
    let experiences = of_kind(&used, "experience");
    assert!(!experiences.is_empty(), "{used:?}");
    assert!(experiences.iter().all(|e| asked.contains(&e.1)), "{used:?} not in {asked:?}");
    assert!(experiences[0].2.starts_with("no effect: a similar task went well"), "{used:?}");
    // What the observations of the deploy pipeline taught is told in the reply.
    let knowledge = of_kind(&used, "knowledge");
    assert!(knowledge.iter().any(|k| k.1.contains("deploy") && k.2.starts_with("told in the reply")), "{used:?}");
    assert!(reply.text.contains("what I know of "), "{}", reply.text);
    fleet.shutdown(DEADLINE).await;
}

const CODER: &str = r#"
[[persona]]
name = "coder"
role = "code reviewer"
domains = ["code", "chat"]
rooms = ["dev"]
"#;

/// Long-term memory for `coder`, stored the way a consolidation pass stores it: a chat
/// procedure that skips the recall, a code review that failed at its knowledge search, and
/// bob's profile (a beginner who likes examples).
fn learned() -> Consolidation {
    Consolidation {
        experiences: vec![Experience {
            domain: "code".into(),
            task: "please review the auth module for token leaks".into(),
            trajectory: vec![
                "recall_memory".into(),
                "search_knowledge failed (timeout)".into(),
                "draft_reply skipped".into(),
                "post_reply skipped".into(),
            ],
            success: false,
            learnings: vec!["code: search_knowledge failed (timeout), abort and failed".into()],
            event_id: Some("old-review".into()),
            at_us: 1,
        }],
        procedures: vec![Procedure {
            name: "chat: draft_reply -> post_reply".into(),
            domain: "chat".into(),
            steps: vec![Action::DraftReply, Action::PostReply],
            success_rate: 0.9,
            times_used: 10,
            updated_us: 1,
        }],
        profiles: vec![UserProfile {
            user: "bob".into(),
            topics: vec![("auth".into(), 2)],
            preferences: vec!["I like examples".into()],
            technical_level: "beginner".into(),
            confidence: 0.6,
            messages: 8,
            updated_us: 1,
        }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_procedure_orders_the_plan_and_a_failed_review_steers_the_next_one_away_from_its_search() {
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(CODER)).await;
    fleet.storage.consolidate("coder".into(), learned());
    poll("the stored memory", || async {
        let storage = fleet.storage.clone();
        let lt = tokio::task::spawn_blocking(move || storage.long_term("coder", 5)).await.unwrap().unwrap();
        (!lt.profiles.is_empty()).then_some(())
    })
    .await;

    // Chat: the procedure's steps, and a reply for a beginner.
    let ack = fleet.inject(chat("dev", "bob", "@coder good morning, how are you today?")).await.unwrap();
    let plan = ai_plan(&fleet, "coder", &ack.event_id).await;
    let steps: Vec<&str> =
        plan["plan"]["steps"].as_array().unwrap().iter().map(|s| s["action"].as_str().unwrap()).collect();
    assert_eq!(steps, ["draft_reply", "post_reply"], "{plan}");
    assert_eq!(plan["plan"]["source"], "template:chat+procedure");
    let used = memory_used(&plan);
    let p = of_kind(&used, "procedure");
    assert_eq!(p.len(), 1, "{used:?}");
    assert_eq!(p[0].1, "chat: draft_reply -> post_reply");
    assert!(
        p[0].2.starts_with("ordered the steps as procedure 'chat: draft_reply -> post_reply' (success 0.90"),
        "{used:?}"
    );
    let profile = of_kind(&used, "user_profile");
    assert_eq!(profile[0].1, "bob");
    assert_eq!(profile[0].2, "reply for a beginner user (confidence 0.60), who said: \"I like examples\"");
    assert!(of_kind(&used, "experience").is_empty(), "a greeting is nothing like a review: {used:?}");
    let reply = reply_to(&fleet, &ack.event_id).await;
    assert!(reply.text.contains("Step by step, since this may be new to you"), "{}", reply.text);
    assert!(fleet.wait_idle(DEADLINE).await);

    // Code: a similar review failed at its knowledge search, so this one does not search.
    let mut e = chat("dev", "bob", "@coder could you review the auth module for token leaks?");
    e.domain = "code".into();
    let ack = fleet.inject(e).await.unwrap();
    let plan = ai_plan(&fleet, "coder", &ack.event_id).await;
    let steps: Vec<&str> =
        plan["plan"]["steps"].as_array().unwrap().iter().map(|s| s["action"].as_str().unwrap()).collect();
    assert_eq!(steps, ["recall_memory", "draft_reply", "post_reply"], "{plan}");
    let used = memory_used(&plan);
    let x = of_kind(&used, "experience");
    assert_eq!(x.len(), 1, "{used:?}");
    assert_eq!(x[0].1, "old-review");
    assert_eq!(
        x[0].2,
        "avoided search_knowledge: it failed (timeout) for 'please review the auth module for token leaks'"
    );
    assert!(plan["evaluation"]["success"].as_bool().unwrap(), "{plan}");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_persona_replies_at_the_level_of_the_profile_it_recalled() {
    let dir = tempfile::tempdir().unwrap();
    let toml = "[[persona]]\nname = \"helper\"\nrole = \"assistant\"\nrooms = [\"general\"]\nbrain = \"local\"\n";
    let mut cfg = config(dir.path(), &fleet_toml(toml));
    cfg.models.dir = pulled();
    let fleet = Fleet::start(cfg).await.unwrap();
    let profile = |user: &str, level: &str| UserProfile {
        user: user.into(),
        topics: vec![("cache".into(), 3)],
        preferences: vec![],
        technical_level: level.into(),
        confidence: 0.7,
        messages: 9,
        updated_us: 1,
    };
    let memory =
        Consolidation { profiles: vec![profile("ann", "expert"), profile("ben", "beginner")], ..Default::default() };
    fleet.storage.consolidate("helper".into(), memory);
    poll("the stored profiles", || async {
        let storage = fleet.storage.clone();
        let lt = tokio::task::spawn_blocking(move || storage.long_term("helper", 5)).await.unwrap().unwrap();
        (lt.profiles.len() == 2).then_some(())
    })
    .await;
    let mut replies = Vec::new();
    for (user, level) in [("ann", "an expert"), ("ben", "a beginner")] {
        let ack = fleet.inject(chat("general", user, "@helper how do I clear the build cache?")).await.unwrap();
        let plan = ai_plan(&fleet, "helper", &ack.event_id).await;
        let used = memory_used(&plan);
        let profile = of_kind(&used, "user_profile");
        assert_eq!(profile.len(), 1, "{used:?}");
        assert_eq!(profile[0].1, user);
        assert!(profile[0].2.starts_with(&format!("reply for {level} user")), "{used:?}");
        let reply = reply_to(&fleet, &ack.event_id).await;
        // The model drafts at the user's level. Nothing was found to ground its draft, so the
        // draft check posts what the persona would need instead, and the plan keeps the draft.
        let drafted = match plan["draft_check"]["draft"].as_str() {
            Some(draft) => {
                assert_eq!((reply.brain.as_str(), &plan["draft_check"]["flaw"]), ("rules", &json!("ungrounded")));
                assert!(reply.text.contains("I have nothing on clear build cache"), "{reply:?}");
                draft.to_string()
            }
            None => {
                assert_eq!(reply.brain, "local", "{reply:?}");
                reply.text.clone()
            }
        };
        replies.push(drafted.trim_start_matches(&format!("@{user}")).trim().to_string());
        assert!(fleet.wait_idle(DEADLINE).await);
    }
    // The same question, greedy decoding: only the line about the user differs in the prompt,
    // so a different answer is the level's doing.
    assert_ne!(replies[0], replies[1], "the level changed nothing in the model's reply");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_embedding_model_a_plan_recalls_by_words_and_the_decision_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &fleet_toml(CODER));
    cfg.models.embedding = Some(dir.path().join("no-such-model"));
    let fleet = Fleet::start(cfg).await.unwrap();
    fleet.storage.consolidate("coder".into(), learned());
    poll("the stored memory", || async {
        let storage = fleet.storage.clone();
        let lt = tokio::task::spawn_blocking(move || storage.long_term("coder", 5)).await.unwrap().unwrap();
        (!lt.experiences.is_empty()).then_some(())
    })
    .await;
    let mut e = chat("dev", "bob", "@coder please review the auth module for token leaks again");
    e.domain = "code".into();
    let ack = fleet.inject(e).await.unwrap();
    let plan = ai_plan(&fleet, "coder", &ack.event_id).await;
    let used = memory_used(&plan);
    let x = of_kind(&used, "experience");
    assert_eq!(x.len(), 1, "the same words: still recalled, {used:?}");
    assert!(x[0].2.starts_with("avoided search_knowledge"), "{used:?}");
    let d = decision(&fleet, "coder", &ack.event_id).await;
    assert!(
        d.reason.contains("long-term memory recalled by words, not meaning: embedding model unavailable"),
        "{}",
        d.reason
    );
    fleet.shutdown(DEADLINE).await;
}

/// Adapters are memory too: a persona with an adapter kept for a topic (trained here on one
/// answer, a few steps) drafts the reply to a question about it with the adapter, and the plan
/// says so; a question about something else is answered without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_about_a_studied_topic_is_drafted_with_its_adapter_and_the_plan_says_so() {
    use mindfleet_core::adapter::{AdapterRecord, Scores, Verdict};
    use mindfleet_core::llm::ChatMessage;
    use mindfleet_models::fetch::SMOLLM2;
    use mindfleet_models::llama::lora::{Example, LoraConfig, Trainer};
    use mindfleet_store::adapters::{AdapterDir, WEIGHTS};
    let models = pulled();
    let dir = tempfile::tempdir().unwrap();
    let served = mindfleet_models::llama::runnable(&models.join(SMOLLM2.name).join(SMOLLM2.files[0].name)).unwrap();
    let llm = mindfleet_models::llama::Llm::load(&served).unwrap();
    let config = LoraConfig { rank: 4, learning_rate: 4e-3, ..Default::default() };
    let mut trainer = Trainer::open(&served, config.clone(), 128, 7).unwrap();
    let studied = [
        ChatMessage::system("You are solo, the team's assistant, in a group chat."),
        ChatMessage::user("alice: Which port does the Quillfeather proxy listen on?"),
        ChatMessage::assistant("Port 8443, behind the VPN."),
    ];
    let example = Example::from_chat(llm.tokenizer(), &studied).unwrap();
    let losses: Vec<f32> = (0..10).map(|_| trainer.step(std::slice::from_ref(&example)).unwrap()).collect();
    assert!(losses[9] < 0.05 * losses[0], "{losses:?}");
    let adapters = AdapterDir::new(dir.path());
    let weights = adapters.run("solo", "quill-1").join(WEIGHTS);
    std::fs::create_dir_all(weights.parent().unwrap()).unwrap();
    trainer.save(&weights).unwrap();
    let record = AdapterRecord {
        id: "quill-1".into(),
        persona: "solo".into(),
        topic: Some("quillfeather proxy".into()),
        base_model: SMOLLM2.files[0].name.into(),
        data_hash: "0".into(),
        train_examples: 1,
        held_out: 1,
        rank: config.rank,
        alpha: config.alpha,
        targets: config.targets.iter().map(|t| t.short().to_string()).collect(),
        learning_rate: config.learning_rate,
        steps: trainer.steps(),
        losses,
        before: Scores { perplexity: 9.0, grade: 0.2 },
        after: Scores { perplexity: 3.0, grade: 0.6 },
        verdict: Verdict::Kept,
        train_s: 1.0,
        started_us: 1,
        finished_us: 2,
    };
    adapters.write(&record).unwrap();

    let fleet = start(dir.path(), &fleet_toml(&format!("{SOLO}brain = \"local\"\n"))).await;
    let ack =
        fleet.inject(chat("desk", "alice", "@solo which port does the Quillfeather proxy listen on?")).await.unwrap();
    let plan = ai_plan(&fleet, "solo", &ack.event_id).await;
    let used = memory_used(&plan);
    let adapter = of_kind(&used, "adapter");
    assert_eq!(adapter.len(), 1, "{used:?}");
    assert_eq!(adapter[0].1, "quill-1");
    assert!(
        adapter[0].2.starts_with("the reply is drafted with it (trained on 'quillfeather proxy'; held-out perplexity 9.000 without it, 3.000 with it)"),
        "{used:?}"
    );
    let reply = reply_to(&fleet, &ack.event_id).await;
    assert_eq!(reply.brain, "local", "{reply:?}");
    assert!(reply.text.contains("8443"), "the adapter answers what it learned: {}", reply.text);
    assert!(fleet.wait_idle(DEADLINE).await);

    // Another topic: no adapter fits.
    let ack =
        fleet.inject(chat("desk", "alice", "@solo which port does the billing service listen on?")).await.unwrap();
    let plan = ai_plan(&fleet, "solo", &ack.event_id).await;
    assert!(of_kind(&memory_used(&plan), "adapter").is_empty(), "{plan}");
    fleet.shutdown(DEADLINE).await;
}
