//! The phase of an event, as pure functions: which grant runs what in each phase, and the
//! transitions that take an event out of one.

use std::sync::Arc;

use mindfleet_core::event::SenderKind;
use mindfleet_core::record::Plan;
use mindfleet_core::sched::Class;

use super::*;

fn delivery(seq: u64, id: &str) -> Delivery {
    let event = Event {
        id: id.into(),
        ts_us: 1,
        accepted_us: 1,
        domain: "chat".into(),
        room: "general".into(),
        from: "ada".into(),
        sender_kind: SenderKind::Human,
        text: "how do we deploy?".into(),
        persona: None,
        mentions: Vec::new(),
        priority: None,
        urgent: false,
        in_reply_to: None,
    };
    Delivery { seq, event: Arc::new(event), crashes: 0, audience: 2 }
}

fn seen(seq: u64, id: &str) -> Seen {
    Seen { delivery: delivery(seq, id), backlog: 3, priority: 0.6, state: GateState::default() }
}

fn gate(verdict: Verdict) -> GateDecision {
    GateDecision { verdict, stage: "model", rule: "score", threshold: 0.5, score: 0.7, note: String::new() }
}

fn claim(id: &str) -> Claim {
    Claim {
        event_id: id.into(),
        room: "general".into(),
        persona: "bob".into(),
        actor: None,
        node: None,
        wants: true,
        mentioned: false,
        named: false,
        confidence: 0.7,
        suitability: 0.5,
        audience: 2,
        from_human: true,
        retry: 0,
        seq: 1,
    }
}

/// Work on event `e1` at step `cursor` of a plan of recall, draft, post, its task `task`.
fn working(task: TaskId, cursor: usize, choosing: bool) -> Phase {
    let steps = [Action::RecallMemory, Action::DraftReply, Action::PostReply]
        .into_iter()
        .map(mindfleet_core::record::Step::pending)
        .collect();
    let plan = Plan {
        goal: "answer".into(),
        steps,
        contingencies: Vec::new(),
        criteria: Vec::new(),
        source: "template:chat".into(),
        attempt: 0,
    };
    let record = PlanRecord {
        event_id: "e1".into(),
        domain: "chat".into(),
        plan: plan.clone(),
        replaced: Vec::new(),
        adjustments: Vec::new(),
        evaluation: None,
        started_us: 1,
        finished_us: None,
        memory_used: vec![],
        draft_check: None,
    };
    let choice = choosing.then(|| PlanChoice { candidates: vec![plan], orders: Vec::new() });
    let mut work = Work::new(seen(1, "e1").decided(gate(Verdict::Engage)), Class::Interactive, record, choice);
    work.task = task;
    work.cursor = cursor;
    Phase::Working(Box::new(work))
}

fn phases() -> Vec<(&'static str, Phase)> {
    vec![
        ("idle", Phase::Idle),
        ("enriching", Phase::Enriching { delivery: delivery(1, "e1"), backlog: 0 }),
        ("judging", Phase::Judging { seen: seen(1, "e1"), task: 7 }),
        (
            "waiting",
            Phase::Waiting { gated: seen(1, "e1").decided(gate(Verdict::Engage)), claim: Box::new(claim("e1")) },
        ),
        ("recalling", Phase::Recalling { gated: seen(1, "e1").decided(gate(Verdict::Engage)) }),
        ("working", working(7, 0, false)),
    ]
}

fn event_task(task: TaskId) -> HashMap<TaskId, TaskFor> {
    HashMap::from([(task, TaskFor::Event)])
}

#[test]
fn an_event_grant_runs_what_the_phase_waits_for() {
    let cases = [
        ("idle", None),
        ("enriching", None),
        ("judging", Some(Job::Judge)),
        ("waiting", None),
        ("recalling", None),
        ("working", Some(Job::Step(Action::RecallMemory))),
    ];
    for ((name, phase), (expected_name, expected)) in phases().into_iter().zip(cases) {
        assert_eq!(name, expected_name);
        let mut tasks = event_task(7);
        assert_eq!(job_of(&mut tasks, &phase, 7), expected, "a grant of the event's task while {name}");
        assert!(tasks.is_empty(), "the grant of task 7 leaves it on the book while {name}");
    }
}

#[test]
fn a_work_grant_runs_the_plan_choice_the_step_at_the_cursor_or_the_evaluation() {
    assert_eq!(working(7, 0, true).job(7), Some(Job::ChoosePlan));
    assert_eq!(working(7, 1, false).job(7), Some(Job::Step(Action::DraftReply)));
    assert_eq!(working(7, 2, false).job(7), Some(Job::Step(Action::PostReply)));
    assert_eq!(working(7, 3, false).job(7), Some(Job::Evaluate));
    assert_eq!(Job::Evaluate.label(), "evaluate");
    assert_eq!(Job::ChoosePlan.label(), "plan");
    assert_eq!(Job::Judge.label(), "gate");
    assert_eq!(Job::Step(Action::DraftReply).label(), "draft_reply");
}

#[test]
fn a_stale_grant_runs_nothing_in_any_phase() {
    for (name, phase) in phases() {
        // A task of an event that is over: its phase has moved on to another task.
        let mut tasks = event_task(8);
        assert_eq!(job_of(&mut tasks, &phase, 8), None, "a stale event task ran while {name}");
        // A task nothing was submitted for (from before a restart).
        assert_eq!(job_of(&mut HashMap::new(), &phase, 7), None, "an unknown task ran while {name}");
    }
}

#[test]
fn a_task_runs_once() {
    let phase = Phase::Judging { seen: seen(1, "e1"), task: 7 };
    let mut tasks = event_task(7);
    assert_eq!(job_of(&mut tasks, &phase, 7), Some(Job::Judge));
    assert_eq!(job_of(&mut tasks, &phase, 7), None);
}

#[test]
fn a_deferral_s_take_up_runs_in_any_phase() {
    // (Consolidation, conversation memory and study keep their tasks in the actor's book.)
    for (name, phase) in phases() {
        let mut tasks = HashMap::from([(7, TaskFor::TakeUp), (9, TaskFor::Event)]);
        assert_eq!(job_of(&mut tasks, &phase, 7), Some(Job::TakeUp), "take-up while {name}");
        assert_eq!(tasks.len(), 1, "only the granted task leaves the book");
    }
}

#[test]
fn the_delivery_in_hand_is_that_of_every_phase_but_idle() {
    for (name, phase) in phases() {
        let seq = phase.delivery().map(|d| d.seq);
        assert_eq!(seq, (name != "idle").then_some(1), "{name}");
    }
}

#[test]
fn taking_an_event_out_of_its_phase_needs_its_key_and_leaves_the_phase_idle() {
    let mut p = Phase::Enriching { delivery: delivery(4, "e4"), backlog: 2 };
    assert!(p.take_enriched(5).is_none());
    assert_eq!(p.delivery().map(|d| d.seq), Some(4), "another seq leaves it enriching");
    assert_eq!(p.take_enriched(4).map(|(d, backlog)| (d.seq, backlog)), Some((4, 2)));
    assert!(matches!(p, Phase::Idle));

    let mut p = Phase::Judging { seen: seen(1, "e1"), task: 7 };
    assert!(p.take_judged(8).is_none());
    assert!(p.judging(7).is_some() && p.judging(8).is_none());
    assert_eq!(p.take_judged(7).map(|s| s.backlog), Some(3));
    assert!(matches!(p, Phase::Idle));

    let mut p = Phase::Waiting { gated: seen(1, "e1").decided(gate(Verdict::Ignore)), claim: Box::new(claim("e1")) };
    assert!(p.waiting_mut("e2").is_none());
    assert!(p.take_waiting("e2").is_none());
    let (_, claim) = p.waiting_mut("e1").expect("waiting for e1");
    claim.retry += 1;
    assert!(matches!(&p, Phase::Waiting { claim, .. } if claim.retry == 1), "the claim's retries are counted in place");
    assert_eq!(p.take_waiting("e1").map(|g| g.gate.verdict), Some(Verdict::Ignore));
    assert!(matches!(p, Phase::Idle));

    let mut p = Phase::Recalling { gated: seen(1, "e1").decided(gate(Verdict::Engage)) };
    assert!(p.take_recalling("e2").is_none());
    assert!(p.take_waiting("e1").is_none(), "recalling is not waiting");
    assert_eq!(p.take_recalling("e1").map(|g| g.seen.delivery.seq), Some(1));
    assert!(matches!(p, Phase::Idle));

    let mut p = working(7, 1, false);
    assert!(p.take_work(8).is_none());
    assert!(p.work_mut(8).is_none() && p.work_mut(7).is_some());
    assert!(p.working().is_some(), "another task leaves the work in place");
    assert_eq!(p.take_work(7).map(|w| w.cursor), Some(1));
    assert!(matches!(p, Phase::Idle));
}

#[test]
fn the_wrong_phase_gives_nothing_up() {
    let mut p = Phase::Judging { seen: seen(1, "e1"), task: 7 };
    assert!(p.take_enriched(1).is_none());
    assert!(p.take_waiting("e1").is_none());
    assert!(p.take_work(7).is_none());
    assert!(p.working().is_none());
    assert_eq!(p.job(7), Some(Job::Judge), "still judging");
}

#[test]
fn past_the_last_step_the_evaluation_runs() {
    let Phase::Working(w) = working(7, 2, false) else { unreachable!() };
    assert!(matches!(w.job(), Job::Step(_)), "{:?}", w.job());
    let Phase::Working(w) = working(7, 3, false) else { unreachable!() };
    assert_eq!(w.job(), Job::Evaluate);
}

#[test]
fn the_coordinator_s_turn_engages_or_finishes_and_says_who_decided() {
    let turn = |granted| Turn { event_id: "e1".into(), granted, assigned: false, reason: "why".into(), retake: None };
    let gated = |verdict| seen(1, "e1").decided(gate(verdict));

    // Wanted and granted: the gate's own decision goes on.
    let (g, engage) = gated(Verdict::Engage).turn(&turn(true));
    assert!(engage);
    assert_eq!((g.gate.stage, g.gate.rule, g.gate.verdict), ("model", "score", Verdict::Engage));

    // Passed, but nobody claimed it: assigned.
    let (g, engage) = gated(Verdict::Ignore).turn(&turn(true));
    assert!(engage);
    assert_eq!((g.gate.stage, g.gate.rule, g.gate.verdict), ("coordinator", "assigned", Verdict::Engage));
    assert_eq!((g.gate.threshold, g.gate.score, g.gate.note.as_str()), (0.5, 0.7, "why"));

    // Wanted, but somebody else answers: redundant, silent.
    let (g, engage) = gated(Verdict::Engage).turn(&turn(false));
    assert!(!engage);
    assert_eq!((g.gate.stage, g.gate.rule, g.gate.verdict), ("coordinator", "redundant", Verdict::Ignore));

    // Passed and not granted: the gate's own decision stands.
    let (g, engage) = gated(Verdict::Defer).turn(&turn(false));
    assert!(!engage);
    assert_eq!((g.gate.stage, g.gate.verdict), ("model", Verdict::Defer));
    assert_eq!(g.seen.backlog, 3, "what the gate saw travels with the decision");
}

#[test]
fn knowledge_a_grounded_reply_left_out_is_not_said_to_be_told() {
    use crate::brain::recall::Similar;
    use mindfleet_core::record::{Knowledge, MemoryKind, MemoryUse};
    let Phase::Working(mut f) = working(1, 2, false) else { unreachable!() };
    let known = |topic: &str, summary: &str| Similar {
        item: Knowledge {
            domain: "chat".into(),
            topic: topic.into(),
            summary: summary.into(),
            sources: vec![],
            at_us: 0,
        },
        score: 0.7,
    };
    f.memory.knowledge =
        vec![known("admin token", "the admin token rotates monthly"), known("cache", "the cache is warmed at start")];
    let told = |id: &str| MemoryUse {
        kind: MemoryKind::Knowledge,
        id: id.into(),
        effect: "told in the reply (similarity 0.70)".into(),
    };
    f.record.memory_used = vec![told("admin token"), told("cache")];
    let reply = "@ann what I have on admin token: what I know of admin token: the admin token rotates monthly";
    let effects = |f: &Work| f.record.memory_used.iter().map(|u| u.effect.clone()).collect::<Vec<_>>();
    f.drafted_by = "local";
    super::super::steps::untold_knowledge(&mut f, reply);
    assert!(effects(&f).iter().all(|e| e.starts_with("told")), "a model's draft had it in its prompt");
    f.drafted_by = "rules";
    super::super::steps::untold_knowledge(&mut f, reply);
    assert_eq!(
        effects(&f),
        ["told in the reply (similarity 0.70)", "no effect: other material bore more on the question"]
    );
}
