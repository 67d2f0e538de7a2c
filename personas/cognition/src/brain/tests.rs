use super::*;
use mindfleet_core::conversation::Said;
use mindfleet_core::event::EventInput;
use mindfleet_core::llm::ChatMessage;
use mindfleet_core::record::EntryKind;

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

/// A reply's context with nothing gathered: persona `p`, role `r`, the event, the state, what
/// was recalled and the hint block.
fn respond<'a>(e: &'a Event, state: &'a GateState, memory: &'a Recollection, hints: &'a str) -> RespondContext<'a> {
    RespondContext {
        persona: "p",
        role: "r",
        event: e,
        recalled: &[],
        conversation: &[],
        room: &[],
        personas: &[],
        found: &[],
        hints,
        state,
        memory,
        ask: Default::default(),
    }
}

#[test]
fn the_local_brain_reads_the_hint_block_of_the_references_an_event_called_for() {
    let e = ev("chat", "how does the breaker recover?");
    let state = GateState::default();
    let hints = "References that may help:\n- resilience (Resilience guide): matched: circuit-breaker";
    let ctx = |hints| respond(&e, &state, &NOTHING_RECALLED, hints);
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
        memory: &NOTHING_RECALLED,
        procedures: &[],
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
        memory_used: vec![],
        draft_check: None,
    }
}

#[test]
fn the_model_chooses_among_registry_plans_only_when_its_pick_survives_reordering() {
    let e = ev("chat", "how do I rotate the admin token?");
    let ctx = PlanContext {
        persona: "p",
        role: "r",
        event: &e,
        avoid: &[],
        learnings: &[],
        attempt: 0,
        references: false,
        memory: &NOTHING_RECALLED,
        procedures: &[],
    };
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

    // Asked in turn: the next order only while it could change the plan.
    assert!(!choice.settled(&[]), "nothing asked yet");
    assert!(!choice.settled(&[scores("C", 1.8)]), "a clear pick of another plan is asked again, reordered");
    assert!(choice.settled(&[scores("C", 1.8), scores("B", 2.5)]), "every order answered");
    assert!(choice.settled(&[scores("C", 0.5)]), "unsure: the rules plan whatever comes next");
    assert!(choice.settled(&[Vec::new()]), "no scores");
    // The rules plan picked (listed first, as SmolLM2-135M always does): no order can change it.
    assert!(choice.settled(&[scores("A", 3.0)]));
    let (plan, note) = choice.clone().choose(&[scores("A", 3.0)]);
    assert_eq!(plan, choice.candidates[0]);
    assert!(note.starts_with("model picked the rules plan (margin 3.00)"), "{note}");
    let (plan, note) = choice.clone().choose(&[scores("C", 0.5)]);
    assert_eq!(plan, choice.candidates[0]);
    assert!(note.starts_with("model unsure of the plan (margin 0.50)"), "{note}");
    // A pick not yet confirmed by the other order does not run.
    let (plan, note) = choice.clone().choose(&[scores("C", 1.8)]);
    assert_eq!(plan, choice.candidates[0]);
    assert!(note.contains("not asked in every order"), "{note}");

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
    let ctx = PlanContext {
        persona: "p",
        role: "r",
        event: &e,
        avoid: &[],
        learnings: &[],
        attempt: 0,
        references: true,
        memory: &NOTHING_RECALLED,
        procedures: &[],
    };
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

mod memory {
    use super::*;
    use mindfleet_core::record::{Experience, Knowledge, MemoryKind, Procedure, UserProfile};

    use crate::brain::recall::{Read, Similar, recollect};

    fn actions(p: &Plan) -> Vec<Action> {
        p.steps.iter().map(|s| s.action).collect()
    }

    fn ctx<'a>(e: &'a Event, memory: &'a Recollection) -> PlanContext<'a> {
        PlanContext {
            persona: "p",
            role: "r",
            event: e,
            avoid: &[],
            learnings: &[],
            attempt: 0,
            references: false,
            memory,
            procedures: &[],
        }
    }

    fn procedure(domain: &str, steps: &[Action], success_rate: f64) -> Procedure {
        Procedure {
            name: format!("{domain}: {}", steps.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(" -> ")),
            domain: domain.into(),
            steps: steps.to_vec(),
            success_rate,
            times_used: 5,
            updated_us: 0,
        }
    }

    fn experience(task: &str, trajectory: &[&str], success: bool) -> Experience {
        Experience {
            domain: "code".into(),
            task: task.into(),
            trajectory: trajectory.iter().map(|t| t.to_string()).collect(),
            success,
            learnings: vec![],
            event_id: Some(format!("ev-{task}")),
            at_us: 0,
        }
    }

    fn profile(user: &str, level: &str) -> UserProfile {
        UserProfile {
            user: user.into(),
            topics: vec![("deploy".into(), 3), ("latency".into(), 2)],
            preferences: vec![],
            technical_level: level.into(),
            confidence: 0.5,
            messages: 5,
            updated_us: 0,
        }
    }

    fn used(ctx: &PlanContext, plan: &Plan, kind: MemoryKind) -> Vec<(String, String)> {
        memory_used(ctx, plan).into_iter().filter(|u| u.kind == kind).map(|u| (u.id, u.effect)).collect()
    }

    #[test]
    fn a_proven_procedure_of_the_domain_orders_the_plan() {
        let e = ev("code", "please review the auth module");
        let searched_first = [Action::SearchKnowledge, Action::RecallMemory, Action::DraftReply, Action::PostReply];
        let m = Recollection { procedures: vec![procedure("code", &searched_first, 0.82)], ..Default::default() };
        let plan = RulesBrain.formulate_plan(&ctx(&e, &m));
        assert_eq!(actions(&plan), searched_first);
        assert_eq!(plan.source, "template:code+procedure");
        let effect = used(&ctx(&e, &m), &plan, MemoryKind::Procedure);
        assert_eq!(effect.len(), 1);
        assert_eq!(effect[0].0, "code: search_knowledge -> recall_memory -> draft_reply -> post_reply");
        assert!(effect[0].1.starts_with("ordered the steps as procedure 'code: search_knowledge"), "{effect:?}");
        assert!(effect[0].1.contains("success 0.82"), "{effect:?}");
        // The model choosing another plan: the procedure changed nothing, and says so.
        let other = Plan { source: "model:registry".into(), ..plan_for(&e, &[]) };
        let effect = used(&ctx(&e, &m), &other, MemoryKind::Procedure);
        assert!(effect[0].1.starts_with("no effect: the model chose another plan"), "{effect:?}");
    }

    #[test]
    fn a_procedure_below_the_success_bar_or_of_another_kind_is_not_followed() {
        let e = ev("code", "please review the auth module");
        let template = actions(&plan_for(&e, &[]));
        let weak = procedure("code", &[Action::SearchKnowledge, Action::DraftReply, Action::PostReply], 0.6);
        let read = Read { procedures: vec![weak], ..Default::default() };
        let m = recollect(&e, read, Ok(vec![vec![]]));
        assert!(m.procedures.is_empty(), "success 0.6 is under 0.7");
        // Asking back is no way to answer a question that can be answered.
        let ask = procedure("code", &[Action::AskClarifyingQuestion, Action::PostReply], 1.0);
        let m = Recollection { procedures: vec![ask], ..Default::default() };
        let plan = RulesBrain.formulate_plan(&ctx(&e, &m));
        assert_eq!(actions(&plan), template);
        let effect = used(&ctx(&e, &m), &plan, MemoryKind::Procedure);
        assert!(effect[0].1.starts_with("no effect: its steps do not fit this event"), "{effect:?}");
        // The template's own steps: followed, and said to change nothing.
        let same = procedure("code", &template, 0.9);
        let m = Recollection { procedures: vec![same], ..Default::default() };
        let plan = RulesBrain.formulate_plan(&ctx(&e, &m));
        assert_eq!((actions(&plan), plan.source.as_str()), (template, "template:code"));
        let effect = used(&ctx(&e, &m), &plan, MemoryKind::Procedure);
        assert!(effect[0].1.starts_with("no effect: the template takes its steps already"), "{effect:?}");
    }

    #[test]
    fn a_step_that_failed_in_a_similar_task_that_failed_is_avoided() {
        let e = ev("code", "please review the auth module");
        let failed = experience(
            "review the auth module",
            &["recall_memory", "search_knowledge failed (timeout)", "draft_reply skipped"],
            false,
        );
        let m = Recollection { experiences: vec![Similar { item: failed, score: 0.8 }], ..Default::default() };
        let plan = RulesBrain.formulate_plan(&ctx(&e, &m));
        assert_eq!(actions(&plan), [Action::RecallMemory, Action::DraftReply, Action::PostReply]);
        assert_eq!(plan.source, "template:code+experience");
        let effect = used(&ctx(&e, &m), &plan, MemoryKind::Experience);
        assert_eq!(effect[0].0, "ev-review the auth module");
        assert_eq!(effect[0].1, "avoided search_knowledge: it failed (timeout) for 'review the auth module'");
        // The local brain offers no candidate that takes it either.
        let choice = LocalBrain.plan_request(&ctx(&e, &m)).unwrap();
        assert!(choice.candidates.iter().all(|p| !actions(p).contains(&Action::SearchKnowledge)), "{choice:?}");
    }

    #[test]
    fn a_failed_step_every_answer_needs_gets_a_recall_before_it_and_a_success_changes_nothing() {
        let e = ev("code", "please review the auth module");
        // A procedure without recall, and a similar task whose draft failed.
        let bare = procedure("code", &[Action::SearchKnowledge, Action::DraftReply, Action::PostReply], 0.9);
        let failed = experience("review auth", &["search_knowledge", "draft_reply failed (unknown)"], false);
        let went_well = experience("review the auth module again", &["recall_memory", "post_reply"], true);
        let m = Recollection {
            procedures: vec![bare],
            experiences: vec![Similar { item: failed, score: 0.7 }, Similar { item: went_well, score: 0.6 }],
            ..Default::default()
        };
        let plan = RulesBrain.formulate_plan(&ctx(&e, &m));
        assert_eq!(
            actions(&plan),
            [Action::RecallMemory, Action::SearchKnowledge, Action::DraftReply, Action::PostReply]
        );
        let effects = used(&ctx(&e, &m), &plan, MemoryKind::Experience);
        assert_eq!(plan.source, "template:code+procedure+experience");
        assert_eq!(
            effects[0].1,
            "added recall_memory as a check before draft_reply: it failed (unknown) for 'review auth'"
        );
        assert!(effects[1].1.starts_with("no effect: a similar task went well"), "{effects:?}");
        // When the plan recalls anyway, the failure changes nothing, and the effect says so.
        let m = Recollection { procedures: vec![], ..m };
        let plan = RulesBrain.formulate_plan(&ctx(&e, &m));
        assert_eq!(plan.source, "template:code");
        let effects = used(&ctx(&e, &m), &plan, MemoryKind::Experience);
        assert_eq!(
            effects[0].1,
            "no effect: failed: draft_reply failed (unknown) for 'review auth', and this plan needs it"
        );
    }

    #[test]
    fn the_profile_shapes_the_rules_reply_by_level_and_the_model_prompt_names_it() {
        let e = ev("chat", "how do I deploy the cache?");
        let state = GateState::default();
        let reply = |m: &Recollection| RulesBrain.respond(&respond(&e, &state, m, ""));
        let beginner = Recollection { profile: Some(profile("alice", "beginner")), ..Default::default() };
        let mut expert = Recollection { profile: Some(profile("alice", "expert")), ..Default::default() };
        let (b, x, none) = (reply(&beginner), reply(&expert), reply(&NOTHING_RECALLED));
        assert!(b.contains("Step by step, since this may be new to you"), "{b}");
        assert!(x.contains("In brief, as you know this area well"), "{x}");
        assert!(b.starts_with(&none) && x.starts_with(&none) && b != x, "{b} / {x}");
        expert.profile.as_mut().unwrap().preferences.push("I prefer short answers".into());
        assert!(reply(&expert).contains("As you asked: \"I prefer short answers\""));
        // The plan says what the profile does to the reply.
        let plan = RulesBrain.formulate_plan(&ctx(&e, &expert));
        let effect = used(&ctx(&e, &expert), &plan, MemoryKind::UserProfile);
        assert_eq!(effect[0].0, "alice");
        assert_eq!(effect[0].1, "reply for an expert user (confidence 0.50), who said: \"I prefer short answers\"");
        // Asked back, no reply is drafted: no effect.
        let vague = ev("chat", "why?");
        let plan = RulesBrain.formulate_plan(&ctx(&vague, &expert));
        assert_eq!(
            used(&ctx(&vague, &expert), &plan, MemoryKind::UserProfile)[0].1,
            "no effect: the plan drafts no reply"
        );
        // The model's prompt gets a line about the user, at their level.
        let req = LocalBrain.reply_request(&respond(&e, &state, &beginner, "")).unwrap();
        let system = &req.messages[0].content;
        assert!(system.contains("About alice: beginner user who talks about deploy, latency"), "{system}");
        assert!(system.contains("use simple words"), "{system}");
    }

    #[test]
    fn recall_ranks_by_meaning_and_falls_back_to_words_with_the_reason() {
        let e = ev("code", "@p how do I rotate the admin token?");
        let read = || Read {
            experiences: vec![experience("rotate the admin token", &[], true), experience("lunch plans", &[], false)],
            knowledge: vec![Knowledge {
                domain: "code".into(),
                topic: "admin token".into(),
                summary: "alice in #dev: the admin token rotates monthly".into(),
                sources: vec![],
                at_us: 0,
            }],
            procedures: vec![procedure("chat", &[Action::DraftReply, Action::PostReply], 1.0)],
            profiles: vec![profile("bob", "expert"), profile("alice", "beginner")],
        };
        // Unit vectors: the query, the two tasks, the knowledge entry.
        let v = vec![vec![1.0, 0.0], vec![0.8, 0.6], vec![0.0, 1.0], vec![0.6, 0.8]];
        let m = recollect(&e, read(), Ok(v));
        let tasks: Vec<&str> = m.experiences.iter().map(|s| s.item.task.as_str()).collect();
        assert_eq!(tasks, ["rotate the admin token"], "the unrelated one is under the bar");
        assert_eq!(m.knowledge.len(), 1);
        assert!(m.procedures.is_empty(), "another domain's procedure");
        assert_eq!(m.profile.as_ref().map(|p| p.user.as_str()), Some("alice"), "the sender's profile");
        assert!(m.by_words.is_none());
        let m = recollect(&e, read(), Err("embedding model unavailable: gone".into()));
        assert_eq!(m.by_words.as_deref(), Some("embedding model unavailable: gone"));
        assert_eq!(m.experiences.len(), 1, "{m:?}");
        assert_eq!(m.experiences[0].item.task, "rotate the admin token");
    }

    #[test]
    fn knowledge_recalled_is_told_in_the_reply() {
        let e = ev("chat", "when does the admin token rotate?");
        let k = Knowledge {
            domain: "chat".into(),
            topic: "admin token".into(),
            summary: "the admin token rotates monthly".into(),
            sources: vec![],
            at_us: 0,
        };
        let m = Recollection { knowledge: vec![Similar { item: k, score: 0.7 }], ..Default::default() };
        let state = GateState::default();
        let r = RulesBrain.respond(&respond(&e, &state, &m, ""));
        assert!(r.contains("what I know of admin token: the admin token rotates monthly"), "{r}");
        let plan = RulesBrain.formulate_plan(&ctx(&e, &m));
        let effect = used(&ctx(&e, &m), &plan, MemoryKind::Knowledge);
        assert_eq!(effect, [("admin token".to_string(), "told in the reply (similarity 0.70)".to_string())]);
        // A plan whose draft never ran: nothing was told.
        let mut u = memory_used(&ctx(&e, &m), &plan);
        crate::brain::recall::no_reply_drafted(&plan, &mut u);
        assert_eq!(u[0].effect, "no effect: no reply was drafted");
    }
}

#[test]
fn a_lesson_continues_its_replys_conversation_so_the_model_reads_only_the_new_turns() {
    let e = ev("chat", "can you review the retry logic?");
    let state = GateState::default();
    let ctx = || respond(&e, &state, &NOTHING_RECALLED, "");
    let reply = LocalBrain.reply_request(&ctx()).unwrap();
    let mut record = record(plan_for(&e, &[]));
    for s in &mut record.plan.steps {
        s.state = StepState::Done;
    }
    let evaluation = RulesBrain.evaluate_outcome(&record);
    let lesson = |said: Option<&str>| {
        let lesson = LessonContext { respond: ctx(), record: &record, evaluation: &evaluation, reply: said };
        LocalBrain.lesson_request(&lesson).unwrap()
    };
    let after = lesson(Some("Sure, I will look at it."));
    // The reply's prompt word for word (what the model kept), then its answer, then the question.
    assert_eq!(after.messages[..reply.messages.len()], reply.messages[..]);
    let rest = &after.messages[reply.messages.len()..];
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert_eq!(rest[0], ChatMessage::assistant("Sure, I will look at it."));
    // The steps that simply ran are named alone, and the outcome in two words.
    assert_eq!(
        rest[1].content,
        "You did: recall what I know, write an answer, post it. It worked.\n\
         In one short sentence, what will you do the same or differently next time?"
    );
    assert_eq!((after.max_tokens, after.stop.clone()), (LESSON_MAX_TOKENS, vec!["\n".to_string()]));
    // Without a reply the turn says so.
    assert_eq!(lesson(None).messages[reply.messages.len()], ChatMessage::assistant("(no reply)"));
    // A step that failed is marked with its class, one left out as such, and the outcome is the
    // evaluation's.
    let mut failed = record.clone();
    failed.plan.steps[0].state = StepState::Failed { class: ErrorClass::Timeout, message: "slow".into() };
    failed.plan.steps[1].state = StepState::Skipped;
    let evaluation = Evaluation { success: false, ..evaluation.clone() };
    let asked = LessonContext { respond: ctx(), record: &failed, evaluation: &evaluation, reply: None };
    let question = LocalBrain.lesson_request(&asked).unwrap().messages.pop().unwrap().content;
    assert!(
        question.starts_with(
            "You did: recall what I know (failed: timeout), write an answer (skipped), post it. It failed."
        ),
        "{question}"
    );
}

#[test]
fn a_reply_prompt_lists_only_what_bears_on_the_question_never_notes_and_its_state_last() {
    let e = ev("chat", "@p is the migration safe?");
    let said = |seq: u64, from: &str, text: &str| Recalled {
        said: Said {
            seq,
            event_id: format!("e{seq}"),
            room: "r".into(),
            from: from.into(),
            text: text.into(),
            at_us: 1_000 * seq as i64,
            ..Default::default()
        },
        at: String::new(),
        relevance: 0.5,
        similarity: None,
        via: None,
        score: 0.5,
    };
    let entry = |id: u64, text: &str| WmEntry {
        id,
        domain: "chat".into(),
        kind: EntryKind::Reflection,
        text: text.into(),
        importance: 0.9,
        event_id: None,
        relevance: 0.5,
        created_us: 100 * id as i64,
        last_access_us: 0,
        access_count: 0,
        expires_us: i64::MAX,
    };
    let conversation =
        [said(9, "bob", "the migration is safe to run after noon"), said(3, "alice", "the tests are green")];
    let recalled = [entry(3, "reflection: ask before a migration")];
    let system = |state: &GateState| {
        let ctx = RespondContext {
            recalled: &recalled,
            conversation: &conversation,
            ..respond(&e, state, &NOTHING_RECALLED, "")
        };
        LocalBrain.reply_request(&ctx).unwrap().messages[0].content.clone()
    };
    let calm = system(&GateState::default());
    assert_eq!(
        calm,
        "You are p, the team's r, in a group chat.\nWhat you found:\n- bob in #r said: the migration is safe to run after noon\n\
         Answer the last message in one or two short sentences, using only what you found. Do not repeat the question.\n\
         Your state: idle, cognitive load 0%, capacity left 100%."
    );
    // Another state changes only the prompt's end.
    let busy = system(&GateState { load: 0.8, capacity: 0.2, ..GateState::default() });
    let common = calm.chars().zip(busy.chars()).take_while(|(a, b)| a == b).count();
    assert_eq!(&calm[..common], &calm[..calm.find("Your state").unwrap() + "Your state: idle, cognitive load ".len()]);
}

#[test]
fn a_reply_stops_before_a_line_of_the_rooms_speakers() {
    let e = ev("chat", "@p is the migration safe?");
    let said = |seq: u64, from: &str| Said {
        seq,
        event_id: format!("e{seq}"),
        room: "r".into(),
        from: from.into(),
        text: "the migration is safe".into(),
        at_us: seq as i64,
        ..Default::default()
    };
    let room = [said(1, "bob"), said(2, "carol"), said(3, "bob")];
    let state = GateState::default();
    let ctx = RespondContext { room: &room, ..respond(&e, &state, &NOTHING_RECALLED, "") };
    let req = LocalBrain.reply_request(&ctx).unwrap();
    let from = format!("\n{}:", e.from);
    assert_eq!(req.stop, ["\n\n", from.as_str(), "\nbob:", "\ncarol:"]);
}
