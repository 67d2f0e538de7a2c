//! The worker's own callbacks cannot be forged through its public message type.

use mindfleet_core::llm::{ClassifyJob, LlmFailure, LlmInfo, LlmMsg, LlmStats};
use mindfleet_core::private::Private;
use ractor::ActorRef;

use crate::testing::answer_when;

use super::{LlmArgs, spawn};

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
    let after = ractor::call!(worker, LlmMsg::Stats).unwrap();
    assert_eq!((after.requests, after.failures), (before.requests + 1, before.failures + 1));
    worker.stop(None);
}
