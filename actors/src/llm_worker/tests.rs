//! The worker's own callbacks cannot be forged through its public message type; a fleet's
//! worker decodes the personas' replies and lessons as `[llm]` says, on the real model.

use mindfleet_core::config::Decoding;
use mindfleet_core::llm::{
    ChatMessage, ClassifyJob, FillJob, GenerateJob, GenerateRequest, LlmFailure, LlmInfo, LlmMsg, LlmStats, Repetition,
    Stop,
};
use mindfleet_core::private::Private;
use mindfleet_models::fetch::{PACKAGES, SMOLLM2, default_dir, pull};
use ractor::ActorRef;
use serde_json::json;

use crate::testing::answer_when;

use super::{LlmArgs, decode_as_configured, spawn, spawn_for};

/// The worker's stats once `done` holds of them.
async fn stats_when(worker: &ActorRef<LlmMsg>, done: impl Fn(&LlmStats) -> bool) -> LlmStats {
    answer_when(worker, LlmMsg::Stats, done).await
}

#[tokio::test]
async fn a_forged_own_message_changes_nothing_and_the_worker_still_answers() {
    let file = std::env::temp_dir().join(format!("mindfleet-no-model-{}.gguf", std::process::id()));
    let worker = spawn(LlmArgs::local(file, 1), None).await.unwrap();
    let before = stats_when(&worker, |s| s.status == "degraded").await;
    // What the loader thread once sent as a public variant, and values of no known type.
    let info = LlmInfo { model: "forged".into(), threads: 1, context: 8, ..Default::default() };
    worker.cast(LlmMsg::Own(Private::new(Ok::<LlmInfo, String>(info.clone())))).unwrap();
    worker.cast(LlmMsg::Own(Private::new(info))).unwrap();
    worker.cast(LlmMsg::Own(Private::new(7u32))).unwrap();
    assert_eq!(ractor::call!(worker, LlmMsg::Stats).unwrap(), before, "the forgeries were dropped");
    let job = ClassifyJob { messages: Vec::new(), labels: vec!["yes".into()], purpose: "test".into(), persona: None };
    let answer = ractor::call!(worker, |reply| LlmMsg::Classify { job, reply }).unwrap();
    assert!(matches!(answer, Err(LlmFailure::Degraded(_))), "{answer:?}");
    let job = FillJob {
        messages: Vec::new(),
        schema: json!({ "type": "boolean" }),
        purpose: "tool".into(),
        persona: None,
        max_tokens: 4,
    };
    let answer = ractor::call!(worker, |reply| LlmMsg::Fill { job, reply }).unwrap();
    assert!(matches!(answer, Err(LlmFailure::Degraded(_))), "{answer:?}");
    let after = ractor::call!(worker, LlmMsg::Stats).unwrap();
    assert_eq!((after.requests, after.failures), (before.requests + 2, before.failures + 2));
    worker.stop(None);
}

fn decoding() -> Decoding {
    let repetition = Repetition { penalty: 1.2, no_repeat_ngram: 3, no_copy_ngram: 4, stop_repeated_sentence: true };
    Decoding { repetition, reply_max_tokens: 6, lesson_max_tokens: 3 }
}

fn question(max_tokens: usize) -> GenerateRequest {
    GenerateRequest::new(vec![ChatMessage::user("Explain what a KV cache is in a language model.")], max_tokens)
}

#[test]
fn replies_and_lessons_take_the_configured_decoding_and_other_purposes_are_left_as_asked() {
    let d = decoding();
    let asked = question(64);
    let off = Repetition::default();
    for (purpose, max_tokens, repetition) in [
        ("reply", 6, d.repetition),
        ("evaluate", 3, d.repetition),
        ("observe", 64, Repetition { stop_repeated_sentence: true, ..off }),
        ("generate", 64, off),
        ("api", 64, off),
        ("ask", 64, off),
        ("gate", 64, off),
    ] {
        let mut req = asked.clone();
        decode_as_configured(&d, purpose, &mut req);
        assert_eq!((req.max_tokens, req.repetition), (max_tokens, repetition), "{purpose}");
        assert_eq!(req.messages, asked.messages);
    }
    // A request that set its own repetition settings keeps them; its length is the fleet's.
    let own = Repetition { penalty: 1.05, ..Repetition::default() };
    let mut req = GenerateRequest { repetition: own, ..asked.clone() };
    decode_as_configured(&d, "reply", &mut req);
    assert_eq!((req.max_tokens, req.repetition), (6, own));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_s_worker_decodes_replies_as_configured_and_a_plain_one_as_asked() {
    let dir = default_dir();
    pull(&dir, &PACKAGES, |_| {}).expect("models pull");
    let model = dir.join(SMOLLM2.name).join(SMOLLM2.files[0].name);
    let ask = |w: ActorRef<LlmMsg>, purpose: &str| {
        let job = GenerateJob { req: question(24), purpose: purpose.into(), persona: None, stream: None };
        async move { ractor::call!(w, |reply| LlmMsg::Generate { job, reply }).unwrap().unwrap() }
    };
    let fleet = spawn_for(LlmArgs::local(model.clone(), 2), decoding(), None).await.unwrap();
    let reply = ask(fleet.clone(), "reply").await;
    assert!(reply.tokens_out <= 6, "{reply:?}");
    let generated = ask(fleet.clone(), "generate").await;
    assert_eq!((generated.tokens_out, generated.stop), (24, Stop::MaxTokens), "as asked: {generated:?}");
    fleet.stop(None);
    let plain = spawn(LlmArgs::local(model, 1), None).await.unwrap();
    let reply = ask(plain.clone(), "reply").await;
    assert_eq!((reply.text, reply.tokens_out, reply.stop), (generated.text, generated.tokens_out, generated.stop));
    plain.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_is_answered_valid_and_counted_by_purpose_and_an_unsupported_schema_is_refused() {
    let dir = default_dir();
    pull(&dir, &PACKAGES, |_| {}).expect("models pull");
    let model = dir.join(SMOLLM2.name).join(SMOLLM2.files[0].name);
    let worker = spawn(LlmArgs::local(model, 2), None).await.unwrap();
    let schema = json!({
        "type": "object",
        "properties": { "repo_path": { "type": "string" }, "max_count": { "type": "integer", "default": 10 } },
        "required": ["repo_path"]
    });
    let messages = vec![
        ChatMessage::system("You call the tool git_log. Write its arguments as JSON."),
        ChatMessage::user("Show me the last commit of the git repository.\nrepo_path: \"/srv/git/payments-api\""),
    ];
    let job = FillJob { messages, schema, purpose: "tool".into(), persona: Some("ada".into()), max_tokens: 64 };
    let ask = |job: FillJob| {
        let w = worker.clone();
        async move { ractor::call!(w, |reply| LlmMsg::Fill { job, reply }).unwrap() }
    };
    let f = ask(job.clone()).await.unwrap();
    assert_eq!(f.value["repo_path"], "/srv/git/payments-api", "{}", f.text);
    assert!(f.value["max_count"].is_i64(), "{}", f.text);
    let mut unsupported = job.clone();
    unsupported.schema["properties"]["repo_path"]["pattern"] = json!("^/");
    let refused = ask(unsupported).await.unwrap_err();
    assert_eq!(refused, LlmFailure::Schema("field `repo_path`: `pattern` is not supported".into()));
    let s = ractor::call!(worker, LlmMsg::Stats).unwrap();
    assert_eq!((s.requests, s.failures), (2, 1), "{s:?}");
    let tool = &s.by_purpose["tool"];
    assert_eq!((tool.calls, tool.tokens_in, tool.tokens_out), (1, f.tokens_in as u64, f.tokens_out as u64));
    worker.stop(None);
}
