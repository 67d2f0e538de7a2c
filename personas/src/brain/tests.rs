use super::*;
use mindfleet_core::event::EventInput;

fn scores(yes: f32, no: f32) -> Vec<LabelScore> {
    [("Yes", yes), ("No", no)].map(|(l, lp)| LabelScore { label: l.into(), logprob: lp, tokens: 1 }).to_vec()
}

#[test]
fn the_model_gate_decides_only_beyond_its_calibrated_band() {
    let state = GateState::default();
    let c = GATE_CALIBRATION;
    let engage = LocalBrain.judge_answer(&scores(-0.1, -0.2 - c.clear - c.bias), 0.5, &state);
    assert_eq!((engage.verdict, engage.by().as_str()), (Verdict::Engage, "model/llm"));
    let ignore = LocalBrain.judge_answer(&scores(-0.2 - c.clear + c.bias, -0.1), 0.5, &state);
    assert_eq!((ignore.verdict, ignore.by().as_str()), (Verdict::Ignore, "model/llm"));
    let unsure = LocalBrain.judge_answer(&scores(-0.5, -0.5 - c.bias), 0.5, &state);
    assert_eq!(unsure.by(), "model/score");
    assert_eq!(unsure.verdict, score(0.5, &state).verdict);
    assert!(unsure.note.starts_with("model unsure (margin 0.00)"), "{}", unsure.note);
    let missing = LocalBrain.judge_answer(&scores(-0.5, -0.5)[..1], 0.5, &state);
    assert!(missing.note.contains("no label scores"), "{}", missing.note);
}

fn ev(domain: &str, text: &str) -> Event {
    EventInput {
        domain: domain.into(),
        room: "r".into(),
        from: "alice".into(),
        text: text.into(),
        ..Default::default()
    }
    .validate()
    .unwrap()
}

#[test]
fn the_local_brain_reads_the_hint_block_of_the_references_an_event_called_for() {
    let e = ev("chat", "how does the breaker recover?");
    let state = GateState::default();
    let hints = "References that may help:\n- resilience (Resilience guide): matched: circuit-breaker";
    let ctx = |hints| RespondContext {
        persona: "p",
        role: "r",
        event: &e,
        recalled: &[],
        conversation: &[],
        found: &[],
        hints,
        state: &state,
    };
    let with = LocalBrain.reply_request(&ctx(hints)).unwrap();
    assert!(with.messages[0].content.contains(hints), "{}", with.messages[0].content);
    let without = LocalBrain.reply_request(&ctx("")).unwrap();
    assert!(!without.messages[0].content.contains("References"), "{}", without.messages[0].content);
}

fn plan_for(e: &Event, learnings: &[Learning]) -> Plan {
    RulesBrain.formulate_plan(&PlanContext {
        persona: "p",
        role: "r",
        event: e,
        avoid: &[],
        learnings,
        attempt: 0,
        references: false,
    })
}

fn record(plan: Plan) -> PlanRecord {
    PlanRecord {
        event_id: "e".into(),
        domain: "code".into(),
        plan,
        replaced: vec![],
        adjustments: vec![],
        evaluation: None,
        started_us: 0,
        finished_us: None,
    }
}

#[test]
fn the_model_chooses_among_registry_plans_only_when_its_pick_survives_reordering() {
    let e = ev("chat", "how do I rotate the admin token?");
    let ctx =
        PlanContext { persona: "p", role: "r", event: &e, avoid: &[], learnings: &[], attempt: 0, references: false };
    let choice = LocalBrain.plan_request(&ctx).unwrap();
    let actions = |p: &Plan| p.steps.iter().map(|s| s.action).collect::<Vec<_>>();
    assert_eq!(choice.candidates[0], RulesBrain.formulate_plan(&ctx), "the first is the rules plan");
    let all: Vec<_> = choice.candidates.iter().map(actions).collect();
    assert!(all.iter().enumerate().all(|(i, a)| !all[..i].contains(a)), "distinct: {all:?}");
    assert_eq!(choice.orders.len(), 2);
    assert_eq!(choice.orders[0].0, [0, 1, 2]);
    assert_eq!(choice.orders[1].0, [1, 2, 0], "the rules plan listed last the second time");
    assert_eq!(choice.orders[1].1.labels, ["A", "B", "C"]);
    let question = &choice.orders[0].1.messages[0].content;
    assert!(question.contains("B: recall what I know, then search the team's knowledge"), "{question}");
    assert_eq!(choice.listed(1)[2], choice.candidates[0]);

    let scores = |best: &str, m: f32| {
        let others = ["A", "B", "C"].into_iter().filter(|l| *l != best);
        std::iter::once(LabelScore { label: best.into(), logprob: -0.1, tokens: 1 })
            .chain(others.enumerate().map(|(i, l)| LabelScore {
                label: l.into(),
                logprob: -0.1 - m - i as f32,
                tokens: 1,
            }))
            .collect::<Vec<_>>()
    };
    // Candidate 2 (ask back) is C the first time and B the second: the same plan, picked.
    let (plan, note) = choice.clone().choose(&[scores("C", 1.8), scores("B", 2.5)]);
    assert_eq!(actions(&plan), [Action::AskClarifyingQuestion, Action::PostReply]);
    assert_eq!(plan.source, "model:registry");
    assert!(note.starts_with("plan chosen by the model in every order (margin 1.80)"), "{note}");
    // Always the first listed: position, not judgement; the rules plan stands.
    let (plan, note) = choice.clone().choose(&[scores("A", 3.0), scores("A", 3.0)]);
    assert_eq!(plan, choice.candidates[0]);
    assert!(note.contains("changed with the order"), "{note}");
    let (plan, note) = choice.clone().choose(&[scores("C", 0.5), scores("B", 2.5)]);
    assert_eq!(plan, choice.candidates[0]);
    assert!(note.starts_with("model unsure of the plan (margin 0.50)"), "{note}");

    // A step that failed for this event stays out of every candidate.
    let avoid = [Action::SearchKnowledge];
    let e = ev("code", "please review the auth module");
    let ctx = PlanContext { avoid: &avoid, event: &e, ..ctx };
    let choice = LocalBrain.plan_request(&ctx).unwrap();
    assert!(choice.candidates.iter().all(|p| !actions(p).contains(&Action::SearchKnowledge)), "{choice:?}");
}

#[test]
fn templates_follow_the_domain_and_vagueness() {
    let actions = |p: Plan| p.steps.into_iter().map(|s| s.action).collect::<Vec<_>>();
    assert_eq!(
        actions(plan_for(&ev("code", "please review the auth module"), &[])),
        [Action::RecallMemory, Action::SearchKnowledge, Action::DraftReply, Action::PostReply]
    );
    assert_eq!(actions(plan_for(&ev("chat", "@p what?"), &[])), [Action::AskClarifyingQuestion, Action::PostReply]);
}

#[test]
fn each_error_class_maps_to_its_adjustment() {
    let p = plan_for(&ev("code", "please review the auth module"), &[]);
    let r = record(p);
    let kind = |i, c| RulesBrain.adjust_plan(&r, i, c).0.kind();
    assert_eq!(kind(1, ErrorClass::Timeout), "contingency");
    assert_eq!(kind(1, ErrorClass::MissingResource), "contingency", "search failed before any recall");
    assert_eq!(kind(0, ErrorClass::MissingResource), "continue");
    assert_eq!(kind(3, ErrorClass::AccessDenied), "abort");
    assert_eq!(kind(2, ErrorClass::Unknown), "replan");
    let mut late = r.clone();
    late.plan.attempt = MAX_REPLANS;
    assert_eq!(RulesBrain.adjust_plan(&late, 2, ErrorClass::Unknown).0.kind(), "abort");
}

#[test]
fn references_an_event_calls_for_are_opened_first_and_a_plan_goes_on_without_them() {
    let actions = |p: &Plan| p.steps.iter().map(|s| s.action).collect::<Vec<_>>();
    let e = ev("chat", "how do we ship the new version?");
    let ctx =
        PlanContext { persona: "p", role: "r", event: &e, avoid: &[], learnings: &[], attempt: 0, references: true };
    let plan = RulesBrain.formulate_plan(&ctx);
    assert_eq!(actions(&plan), [Action::SelectReference, Action::RecallMemory, Action::DraftReply, Action::PostReply]);
    // Not for a question asked back, nor once it failed for this event.
    let vague = ev("chat", "why?");
    assert!(
        !actions(&RulesBrain.formulate_plan(&PlanContext { event: &vague, ..ctx })).contains(&Action::SelectReference)
    );
    let avoid = [Action::SelectReference];
    assert!(
        !actions(&RulesBrain.formulate_plan(&PlanContext { avoid: &avoid, ..ctx })).contains(&Action::SelectReference)
    );
    // Nothing to read, or not allowed to: answer without them.
    let r = record(plan);
    for class in [ErrorClass::MissingResource, ErrorClass::AccessDenied] {
        let (adjustment, reason) = RulesBrain.adjust_plan(&r, 0, class);
        assert_eq!(adjustment.kind(), "continue", "{class:?}: {reason}");
    }
}

#[test]
fn a_learned_search_failure_changes_the_next_plan() {
    let l = Learning {
        pattern: "code: search_knowledge failed (missing_resource), continue and recovered".into(),
        domain: "code".into(),
        successes: 3,
        failures: 0,
        last_us: 0,
    };
    let p = plan_for(&ev("code", "please review the auth module"), &[l]);
    assert!(p.steps.iter().all(|s| s.action != Action::SearchKnowledge));
    assert!(p.source.ends_with("+learned"));
}
