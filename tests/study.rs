//! Self-directed study: gaps noted from what a persona could not answer, sessions run in idle
//! time on the real index (and the real local LLM), graded, kept as learnings, knowledge and
//! chat-format training data.

use std::time::{Duration, Instant};

use mindfleet::Fleet;
use mindfleet::client::{Client, ClientError};
use mindfleet_core::dump::StudyDump;
use mindfleet_core::record::StudySession;
use serde_json::{Value, json};

use crate::util::{chat, config, fleet_toml, persona, pulled};

/// A study session reads, asks and answers up to three times: longer than one reply.
const SESSION_DEADLINE: Duration = Duration::from_secs(120);

fn corpus() -> tempfile::TempDir {
    let src = tempfile::tempdir().unwrap();
    std::fs::write(
        src.path().join("breaker.md"),
        "# Circuit breaker\n\nThe circuit breaker opens after five consecutive failures of the payment service.\n\
         While it is open, calls are rejected at once for thirty seconds.\n\
         Then a single probe call is let through; when the probe succeeds the breaker closes again.\n",
    )
    .unwrap();
    std::fs::write(
        src.path().join("retry.rs"),
        "/// Calls `f` again after a failure, waiting twice as long each time.\npub fn with_backoff(f: impl Fn() -> bool) {\n    let mut wait = 10;\n    while !f() {\n        wait *= 2;\n    }\n}\n",
    )
    .unwrap();
    src
}

async fn study_of(fleet: &Fleet, name: &str) -> StudyDump {
    let d = fleet.dump(Some(name.to_string())).await.unwrap();
    persona(&d, name).study.clone().expect("a fleet with an index shows study")
}

/// The newest session of `name` once `n` are over.
async fn session(fleet: &Fleet, name: &str, n: u64) -> StudySession {
    let deadline = Instant::now() + SESSION_DEADLINE;
    loop {
        let s = study_of(fleet, name).await;
        if s.sessions >= n {
            return s.recent[0].clone();
        }
        assert!(Instant::now() < deadline, "no study session over in time: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_studies_a_topic_with_the_local_models_and_keeps_learnings_knowledge_and_training_data() {
    let dir = tempfile::tempdir().unwrap();
    let src = corpus();
    let toml = "[[persona]]\nname = \"helper\"\nrole = \"assistant\"\nrooms = [\"general\"]\nbrain = \"local\"\n";
    let mut cfg = config(dir.path(), &fleet_toml(toml));
    cfg.models.dir = pulled();
    let fleet = Fleet::start(cfg).await.unwrap();
    let api = Client::new(&fleet.addr.to_string(), None);
    api.rag("index", &json!({ "paths": [src.path()] })).await.unwrap();

    // Asked with nothing noted and no topic: says so.
    match api.study(&json!({"persona": "helper"})).await {
        Err(ClientError::Status { message, .. }) => assert!(message.contains("no knowledge gap"), "{message}"),
        r => panic!("{r:?}"),
    }
    match api.study(&json!({"persona": "nobody", "topic": "x"})).await {
        Err(ClientError::Status { message, .. }) => assert!(message.contains("\"nobody\""), "{message}"),
        r => panic!("{r:?}"),
    }
    let topic = "circuit breaker failures";
    let queued = api.study(&json!({"persona": "helper", "topic": topic})).await.unwrap();
    assert_eq!((queued["topic"].as_str(), queued["queued"].as_bool()), (Some(topic), Some(true)));

    let s = session(&fleet, "helper", 1).await;
    assert_eq!(
        (s.topic.as_str(), s.why.as_str(), s.outcome.as_str()),
        (topic, "asked by a person", "studied"),
        "{s:?}"
    );
    assert!(!s.answers.is_empty(), "{s:?}");
    for a in &s.answers {
        assert!(a.source.starts_with("breaker.md:") || a.source.starts_with("retry.rs:"), "{a:?}");
        assert!(a.question.ends_with('?') && !a.answer.is_empty(), "{a:?}");
        assert!((0.0..=1.0).contains(&a.grade), "{a:?}");
    }
    assert!(s.answers.iter().any(|a| a.source.starts_with("breaker.md:")), "the passage about it: {s:?}");
    let mean = s.answers.iter().map(|a| a.grade).sum::<f64>() / s.answers.len() as f64;
    assert!((s.score - mean).abs() < 1e-9, "{s:?}");
    // The model asked and answered, within the budgets' accounting.
    let d = fleet.dump(None).await.unwrap();
    assert!(d.llm.by_purpose["study-ask"].calls >= 1, "{:?}", d.llm.by_purpose);
    assert!(d.llm.by_purpose["study-answer"].calls >= 1, "{:?}", d.llm.by_purpose);
    assert!(s.tokens > 0, "{s:?}");

    // Learnings and knowledge.
    let learnings = api.ai("learnings", &[("persona", "helper".into())]).await.unwrap();
    let pattern = format!("study: {topic}");
    let l = learnings["learnings"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["pattern"] == pattern.as_str()).cloned())
        .unwrap_or_else(|| panic!("{learnings}"));
    let passed = s.answers.iter().filter(|a| a.passed()).count() as u64;
    assert_eq!(l["successes"].as_u64(), Some(passed), "{l}");
    assert_eq!(l["failures"].as_u64(), Some(s.answers.len() as u64 - passed), "{l}");
    assert!(passed > 0, "nothing passed: {s:?}");
    let memory = api.ai("memory", &[("persona", "helper".into())]).await.unwrap();
    let knowledge = memory["knowledge"].as_array().unwrap_or_else(|| panic!("{memory}"));
    assert!(knowledge.iter().any(|k| k["topic"] == topic && k["domain"] == "study"), "{memory}");

    // Training data: one valid JSON chat per passed answer, citing its sources.
    let file = dir.path().join("training").join("helper.jsonl");
    let text = crate::util::poll("training data", || async { std::fs::read_to_string(&file).ok() }).await;
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("a JSON object per line")).collect();
    assert_eq!(lines.len() as u64, passed, "{text}");
    for v in &lines {
        let roles: Vec<&str> = v["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant"], "{v}");
        assert!(v["messages"][2]["content"].as_str().unwrap().contains("(sources: "), "{v}");
        let source = v["metadata"]["source"].as_str().unwrap();
        assert!(s.answers.iter().any(|a| a.source == source && a.passed()), "{v}");
    }
    fleet.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_the_index_cannot_answer_is_a_gap_studied_when_idle() {
    const CODER: &str =
        "[[persona]]\nname = \"coder\"\nrole = \"code reviewer\"\ndomains = [\"code\"]\nrooms = [\"dev\"]\n";
    let dir = tempfile::tempdir().unwrap();
    let src = corpus();
    let fleet = crate::util::start(dir.path(), &fleet_toml(CODER)).await;
    let api = Client::new(&fleet.addr.to_string(), None);
    api.rag("index", &json!({ "paths": [src.path()] })).await.unwrap();

    let mut e = chat("dev", "alice", "@coder how does the quantum flux capacitor calibrate its gyroscope?");
    e.domain = "code".into();
    fleet.inject(e).await.unwrap();
    // Noted, then studied on its own once the persona is idle: the index has nothing on it.
    let s = session(&fleet, "coder", 1).await;
    assert_eq!(s.topic, "quantum flux capacitor calibrate gyroscope", "{s:?}");
    assert_eq!(s.why, "knowledge search found nothing relevant", "{s:?}");
    assert_eq!(s.outcome, "nothing in the index about it", "{s:?}");
    assert!(s.answers.is_empty() && s.score == 0.0, "{s:?}");

    // Without a model, rules ask and answer: the answer is the passage's own line, so it is
    // found again and fully supported.
    api.study(&json!({"persona": "coder", "topic": "circuit breaker probe call"})).await.unwrap();
    let s = session(&fleet, "coder", 2).await;
    assert_eq!(s.outcome, "studied", "{s:?}");
    let a = s.answers.iter().find(|a| a.source.starts_with("breaker.md:")).unwrap_or_else(|| panic!("{s:?}"));
    assert_eq!(a.by, "rules", "{a:?}");
    assert!(a.grade >= 0.99, "{a:?}");
    // Studied lately: the same gap is not studied again on its own.
    let d = study_of(&fleet, "coder").await;
    assert!(d.gaps.is_empty() && d.running.is_none(), "{d:?}");
    fleet.shutdown(Duration::from_secs(5)).await;
}

/// Twelve study chats of `helper` more in its training file: facts about a made-up service,
/// each from a passage of its own (`round` names the passages apart).
fn study_chats(data_dir: &std::path::Path, round: usize) {
    use mindfleet_core::record::{StudyAnswer, StudySession};
    let facts = [
        ("Which port does the Quillfeather proxy listen on?", "Port 8443."),
        ("Who owns the Quillfeather billing service?", "The ledger team."),
        ("What does Quillfeather retry on?", "Timeouts only."),
        ("Where are Quillfeather's secrets kept?", "In the vault."),
        ("How often does Quillfeather rotate its keys?", "Every 30 days."),
        ("Which database does Quillfeather use?", "Postgres 16."),
        ("What is Quillfeather's deploy window?", "Tuesdays at noon."),
        ("Who is on call for Quillfeather?", "The platform team."),
        ("What language is Quillfeather written in?", "Rust."),
        ("How many replicas does Quillfeather run?", "Three."),
        ("What does Quillfeather log to?", "Loki."),
        ("Which queue does Quillfeather read from?", "The orders queue."),
    ];
    let answers = facts
        .iter()
        .enumerate()
        .map(|(i, (q, a))| StudyAnswer {
            question: q.to_string(),
            answer: a.to_string(),
            source: format!("docs/quillfeather-{round}-{i}.md:1-9"),
            cited: vec![format!("docs/quillfeather-{round}-{i}.md:1-9")],
            grade: 1.0,
            by: "model".into(),
        })
        .collect();
    let session = StudySession {
        topic: "quillfeather".into(),
        why: "test".into(),
        started_us: 1,
        finished_us: 2,
        answers,
        score: 1.0,
        outcome: "studied".into(),
        tokens: 0,
    };
    let file = mindfleet_personas::study::training_file(data_dir, "helper");
    mindfleet_personas::study::append_training(&file, "helper", "assistant", &session).unwrap();
}

/// `helper`'s training runs, once one with `id` is there.
async fn adapters_once(api: &Client, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let a = api.ai("adapters", &[("persona", "helper".into())]).await.unwrap();
        if a["adapters"].as_array().unwrap().iter().any(|r| r["id"] == id) {
            return a;
        }
        assert!(Instant::now() < deadline, "no run {id} after 5 minutes: {a}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_trains_on_the_study_chats_by_hand_by_itself_on_new_chats_and_after_a_stop() {
    use mindfleet_core::adapter::{AdapterRecord, Verdict, judge};
    let dir = tempfile::tempdir().unwrap();
    study_chats(dir.path(), 0);
    // A run a stop left: begun, not finished.
    let earlier = dir.path().join("adapters/helper/earlier-1");
    std::fs::create_dir_all(&earlier).unwrap();
    std::fs::write(earlier.join("job.json"), r#"{"persona": "helper", "topic": null}"#).unwrap();
    let toml = "[training]\nnew_chats = 12\n[[persona]]\nname = \"helper\"\nrole = \"assistant\"\nrooms = [\"general\"]\nbrain = \"local\"\n";
    let mut cfg = config(dir.path(), &fleet_toml(toml));
    cfg.models.dir = pulled();
    let fleet = Fleet::start(cfg).await.unwrap();
    let api = Client::new(&fleet.addr.to_string(), None);

    // What cannot be trained is refused, saying why.
    let refused = |body: Value| {
        let api = &api;
        async move {
            match api.train(&body).await {
                Err(ClientError::Status { message, .. }) => message,
                r => panic!("{body}: {r:?}"),
            }
        }
    };
    assert!(refused(json!({"persona": "nobody"})).await.contains("\"nobody\""));
    let m = refused(json!({"persona": "helper", "topic": "cookies"})).await;
    assert!(m.contains("no study chats about \"cookies\""), "{m}");
    // The run the stop left is taken up at start, so a second one waits its turn... refused.
    let m = refused(json!({"persona": "helper"})).await;
    assert!(m.contains("already has a training run"), "{m}");

    let check = |a: &Value, id: &str, chats: usize| -> AdapterRecord {
        let row = a["adapters"].as_array().unwrap().iter().find(|r| r["id"] == id).unwrap().clone();
        let r: AdapterRecord = serde_json::from_value(row["record"].clone()).unwrap();
        assert_eq!(r.train_examples + r.held_out, chats, "{r:?}");
        assert!(r.held_out > 0 && r.train_examples > 0, "{r:?}");
        assert_eq!(r.steps, 2 * r.train_examples.div_ceil(8), "two epochs of eight chats a step: {r:?}");
        // The verdict follows the held-out scores; the weights are kept only with it.
        assert_eq!(r.verdict, judge(&r.before, &r.after, r.held_out));
        assert_eq!(row["kept"], (r.verdict == Verdict::Kept));
        let weights = dir.path().join("adapters/helper").join(id).join("adapter.safetensors");
        assert_eq!(weights.exists(), r.kept(), "{r:?}");
        r
    };
    let a = adapters_once(&api, "earlier-1").await;
    let first = check(&a, "earlier-1", 12);
    assert!(!earlier.join("job.json").exists(), "a finished run is not taken up again");

    // By hand, once the trainer is free (it hears of the run's end just after its record).
    let deadline = Instant::now() + Duration::from_secs(10);
    let queued = loop {
        match api.train(&json!({"persona": "helper"})).await {
            Ok(q) => break q,
            Err(ClientError::Status { message, .. })
                if message.contains("already has a training run") && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    let id = queued["run"].as_str().unwrap().to_string();
    assert!(id.starts_with("all-"), "{queued}");
    let second = check(&adapters_once(&api, &id).await, &id, 12);
    // The same chats, the same seed: the same training.
    assert_eq!((&first.losses, &first.data_hash), (&second.losses, &second.data_hash));

    // Twelve new chats (`new_chats`): a run starts by itself, on all of them.
    study_chats(dir.path(), 1);
    let deadline = Instant::now() + Duration::from_secs(300);
    let third = loop {
        let a = api.ai("adapters", &[("persona", "helper".into())]).await.unwrap();
        let runs = a["adapters"].as_array().unwrap();
        if let Some(r) = runs.iter().find(|r| r["id"] != "earlier-1" && r["id"] != id.as_str()) {
            break check(&a, r["id"].as_str().unwrap(), 24);
        }
        assert!(Instant::now() < deadline, "no run of its own after 5 minutes: {a}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_ne!(third.data_hash, second.data_hash);
    fleet.shutdown(Duration::from_secs(5)).await;
}
