//! The reasoning loop: plans, adjustments driven by injected action failures, evaluation,
//! learnings.

use mindfleet_runtime::messages::{Fault, FaultTarget, FaultWhen};
use mindfleet_runtime::model::{Action, Adjustment, ErrorClass, PlanRecord, StepState, Verdict};

use crate::util::*;

const CODER: &str = r#"
[[persona]]
name = "coder"
role = "code reviewer"
domains = ["code", "chat"]
rooms = ["dev"]
"#;

/// Runs one mention of the coder with an optional injected failure; returns the fleet (and
/// its data dir, which lives as long as the fleet), the plan journaled, and the event id.
async fn run_with(
    fault: Option<(Action, ErrorClass)>,
    domain: &str,
    text: &str,
) -> (mindfleet::Fleet, tempfile::TempDir, PlanRecord, String) {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(CODER)).await;
    if let Some((action, class)) = fault {
        let when = FaultWhen::FailAction { action, class, times: 1 };
        fleet.fault("coder", Fault { target: FaultTarget::Persona, when }).await.unwrap();
    }
    let mut e = chat("dev", "alice", text);
    e.domain = domain.into();
    let ack = fleet.inject(e).await.unwrap();
    let d = decision(&fleet, "coder", &ack.event_id).await;
    assert_eq!(d.verdict, Verdict::Engage);
    let storage = fleet.storage.clone();
    let plan = tokio::task::spawn_blocking(move || storage.recent_plans("coder", 1)).await.unwrap().unwrap().remove(0);
    assert_eq!(plan.event_id, ack.event_id);
    (fleet, dir, plan, ack.event_id)
}

fn kinds(p: &PlanRecord) -> Vec<&'static str> {
    p.adjustments.iter().map(|a| a.adjustment.kind()).collect()
}

async fn replied(fleet: &mindfleet::Fleet, event_id: &str) -> bool {
    dump(fleet).await.outbox.iter().any(|o| o.in_reply_to == event_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_past_a_missing_knowledge_index() {
    let (fleet, _dir, plan, id) = run_with(None, "code", "@coder please review the auth module").await;
    assert_eq!(kinds(&plan), ["continue"]);
    assert_eq!(plan.adjustments[0].action, Action::SearchKnowledge);
    assert_eq!(plan.adjustments[0].class, ErrorClass::MissingResource);
    let ev = plan.evaluation.as_ref().unwrap();
    assert!(ev.success, "{ev:?}");
    assert!(replied(&fleet, &id).await);
    // The evaluation became a learning and a reflection.
    let storage = fleet.storage.clone();
    let learnings = tokio::task::spawn_blocking(move || storage.learnings("coder")).await.unwrap().unwrap();
    assert!(learnings.iter().any(|l| l.pattern == ev.pattern && l.successes == 1), "{learnings:?}");
    let d = dump(&fleet).await;
    assert!(persona(&d, "coder").working_memory.recent.iter().any(|e| e.text.starts_with("reflection:")));
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contingency_retries_a_step_that_timed_out() {
    let (fleet, _dir, plan, id) =
        run_with(Some((Action::DraftReply, ErrorClass::Timeout)), "chat", "@coder got a minute for a quick question")
            .await;
    assert_eq!(kinds(&plan), ["contingency"]);
    let drafts: Vec<_> = plan.plan.steps.iter().filter(|s| s.action == Action::DraftReply).collect();
    assert_eq!(drafts.len(), 2);
    assert!(matches!(drafts[0].state, StepState::Failed { class: ErrorClass::Timeout, .. }));
    assert!(drafts[1].contingency && drafts[1].state == StepState::Done);
    assert!(plan.evaluation.as_ref().unwrap().success);
    assert!(replied(&fleet, &id).await);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replan_after_an_unknown_failure() {
    let (fleet, _dir, plan, id) =
        run_with(Some((Action::RecallMemory, ErrorClass::Unknown)), "chat", "@coder what changed in the release").await;
    assert_eq!(kinds(&plan), ["replan"]);
    assert_eq!(plan.replaced.len(), 1);
    assert_eq!(plan.plan.attempt, 1);
    assert!(plan.plan.steps.iter().all(|s| s.action != Action::RecallMemory), "the new plan avoids the failed step");
    assert!(plan.evaluation.as_ref().unwrap().success);
    assert!(replied(&fleet, &id).await);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_when_access_is_denied() {
    let (fleet, _dir, plan, id) =
        run_with(Some((Action::PostReply, ErrorClass::AccessDenied)), "chat", "@coder post the numbers please").await;
    assert_eq!(kinds(&plan), ["abort"]);
    assert_eq!(plan.adjustments[0].adjustment, Adjustment::Abort);
    let ev = plan.evaluation.as_ref().unwrap();
    assert!(!ev.success && ev.pattern.contains("post_reply failed (access_denied)"), "{ev:?}");
    assert!(!replied(&fleet, &id).await, "an aborted plan posts nothing");
    let d = decision(&fleet, "coder", &id).await;
    assert!(d.reason.contains("plan failed"), "{}", d.reason);
    fleet.shutdown(DEADLINE).await;
}
