//! The worker's own callbacks cannot be forged through its public message type.

use std::time::Duration;

use mindfleet_core::embedding::{EmbedFailure, EmbedMsg, EmbedStats, LongText, ModelInfo, Urgency};
use mindfleet_core::private::Private;
use ractor::ActorRef;

use crate::testing::answer_when;

use super::{EmbedArgs, spawn};

/// The worker's stats once `done` holds of them.
async fn stats_when(worker: &ActorRef<EmbedMsg>, done: impl Fn(&EmbedStats) -> bool) -> EmbedStats {
    answer_when(worker, EmbedMsg::Stats, done).await
}

#[tokio::test]
async fn a_forged_own_message_changes_nothing_and_the_worker_still_answers() {
    let dir = std::env::temp_dir().join(format!("mindfleet-no-model-{}", std::process::id()));
    let args = EmbedArgs { model_dir: dir, cache: None, max_batch: 8, max_wait: Duration::from_millis(1) };
    let worker = spawn(args, None).await.unwrap();
    let before = stats_when(&worker, |s| s.status == "degraded").await;
    // What the inference thread once sent as public variants, and a value of no known type.
    let info = ModelInfo { model: "forged".into(), dimensions: 3, window: 8, ..Default::default() };
    worker.cast(EmbedMsg::Own(Private::new(Ok::<ModelInfo, String>(info.clone())))).unwrap();
    worker.cast(EmbedMsg::Own(Private::new(info))).unwrap();
    worker.cast(EmbedMsg::Own(Private::new(Ok::<(), String>(())))).unwrap();
    worker.cast(EmbedMsg::Own(Private::new(7u32))).unwrap();
    assert_eq!(ractor::call!(worker, EmbedMsg::Stats).unwrap(), before, "the forgeries were dropped");
    let answer = ractor::call!(worker, |reply| EmbedMsg::Embed {
        texts: vec!["still here".into()],
        long: LongText::Truncate,
        urgency: Urgency::Normal,
        reply,
    })
    .unwrap();
    assert!(matches!(answer, Err(EmbedFailure::Degraded(_))), "{answer:?}");
    worker.stop(None);
}
