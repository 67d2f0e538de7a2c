//! The reasoning loop: plans, adjustments driven by injected action failures, evaluation,
//! learnings.

use mindfleet_core::messages::{Fault, FaultTarget, FaultWhen};
use mindfleet_core::record::{Action, Adjustment, ErrorClass, PlanRecord, StepState, Verdict};
use mindfleet_core::sched::{SchedulerMsg, SchedulerStats};

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
async fn continue_past_a_knowledge_search_that_finds_nothing() {
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

const TWO: &str = r#"
[[persona]]
name = "coder"
role = "code reviewer"
domains = ["code"]
rooms = ["dev"]

[[persona]]
name = "pager"
role = "on call"
rooms = ["ops"]
"#;

/// One cheap slot for the whole fleet: every step of every persona waits for it.
async fn one_slot() -> (mindfleet::Fleet, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &fleet_toml(TWO));
    cfg.scheduler.cheap_slots = 1;
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    (fleet, dir)
}

fn to_coder(text: &str) -> mindfleet_core::event::EventInput {
    let mut e = chat("dev", "alice", text);
    e.domain = "code".into();
    e.persona = Some("coder".into());
    e
}

async fn scheduler_stats(fleet: &mindfleet::Fleet) -> SchedulerStats {
    ractor::call_t!(fleet.scheduler.actor(), SchedulerMsg::Stats, 5000).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_urgent_plan_runs_between_two_steps_of_a_work_plan() {
    let (fleet, _dir) = one_slot().await;
    // Slow enough that the urgent event is stored, delivered and gated while it runs, even on a
    // machine busy with other tests (at 500 ms it once was not, and the work plan replied first).
    let slow = FaultWhen::SlowAction { action: Action::RecallMemory, ms: 2000, times: 1 };
    fleet.fault("coder", Fault { target: FaultTarget::Persona, when: slow }).await.unwrap();
    let work = fleet.inject(to_coder("please review the retry logic in the client")).await.unwrap();
    // The coder's first task, the slow recall (a directed event needs no gate task), holds the
    // only slot.
    poll("the coder's first step running", || async {
        let s = scheduler_stats(&fleet).await;
        (s.done == 0 && s.work.running == 1).then_some(())
    })
    .await;
    let urgent = fleet.inject(chat("ops", "bob", "@pager the api is down")).await.unwrap();
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    let reply_at = |id: &str| {
        let reply = d.outbox.iter().find(|o| o.in_reply_to == id).map(|o| o.at_us);
        // Which event went unanswered, and why, when one did (it has, on a loaded machine).
        let why: Vec<_> = d.personas.iter().flat_map(|p| p.decisions.iter().filter(|x| x.event_id == id)).collect();
        reply.unwrap_or_else(|| panic!("a reply to {id}: decisions {why:#?}"))
    };
    // Run to completion, the work plan would have replied first: its plan started before
    // the urgent event arrived. Split into steps, the urgent plan overtook it between steps.
    assert!(reply_at(&urgent.event_id) < reply_at(&work.event_id));
    let storage = fleet.storage.clone();
    let plan = tokio::task::spawn_blocking(move || storage.recent_plans("coder", 1)).await.unwrap().unwrap().remove(0);
    assert!(plan.evaluation.as_ref().unwrap().success);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_work_plan_waits_for_the_cadence_and_the_dump_shows_it() {
    let (fleet, _dir) = one_slot().await;
    let d = dump(&fleet).await;
    assert_eq!(persona(&d, "coder").cadence_ms, 3000, "an idle persona starts work at most every 3 s");
    assert_eq!(persona(&d, "coder").budget_left, 1.0);
    let first = fleet.inject(to_coder("review the parser change")).await.unwrap();
    let second = fleet.inject(to_coder("and the lexer change")).await.unwrap();
    // The second plan's first step is set aside until the coder's cadence allows it.
    poll("the second plan set aside by the cadence", || async {
        (scheduler_stats(&fleet).await.work.deferred == 1).then_some(())
    })
    .await;
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    for id in [&first.event_id, &second.event_id] {
        let decisions = &persona(&d, "coder").decisions;
        assert!(d.outbox.iter().any(|o| o.in_reply_to == *id), "{id} answered: {decisions:#?}");
    }
    fleet.shutdown(DEADLINE).await;
}
