//! The plan: engaging, a task per step, the grants that run them, adjusting a failed step's
//! plan, and the evaluation at the end.

use mindfleet_core::config::BrainKind;
use mindfleet_core::event::Event;
use mindfleet_core::llm::{Classification, Generation, LabelScore, LlmFailure};
use mindfleet_core::record::{
    Action, Adjustment, AdjustmentRecord, EntryKind, ErrorClass, Learning, PlanRecord, Step, StepState,
};
use mindfleet_core::refs::Enrichment;
use mindfleet_core::sched::{Class, TaskId};

use crate::brain::recall::no_reply_drafted;
use crate::brain::{PlanContext, Recollection, memory_used};
use crate::mind::{Activity, Update};
use crate::study;

use super::phase::{Gated, Phase, PlanEnd, TaskFor, Work};
use super::{
    CHOOSE_TOOL_TOKENS_RESERVED, DRAFT_TOKENS_RESERVED, Effect, Enrich, LESSON_TOKENS_RESERVED, Lifecycle,
    PLAN_TOKENS_RESERVED,
};

impl Lifecycle {
    /// Engaged: long-term memory is recalled first, off the persona's loop
    /// (`LongTermRecalled`), then the brain plans.
    pub(super) fn engage(&mut self, gated: Gated) {
        let event = gated.seen.delivery.event.clone();
        self.phase = Phase::Recalling { gated };
        self.emit(Effect::RecallLongTerm(event));
    }

    /// What long-term memory recalled for the engaged event `event_id`: the brain plans with it.
    pub(super) fn on_long_term_recalled(&mut self, event_id: &str, memory: Recollection, note: Option<String>) {
        let Some(gated) = self.phase.take_recalling(event_id) else { return };
        self.plan(gated, memory, note);
    }

    /// The brain plans with what was recalled, and the first step goes to the scheduler.
    fn plan(&mut self, gated: Gated, memory: Recollection, note: Option<String>) {
        let now = self.now;
        let (e, p) = (&gated.seen.delivery.event, gated.seen.priority);
        let class = self.class_of(e);
        let ctx = PlanContext {
            persona: &self.name,
            role: &self.setup.config.role,
            event: e,
            avoid: &[],
            learnings: &self.learnings,
            attempt: 0,
            references: !self.refs.current.is_empty(),
            memory: &memory,
            procedures: &self.setup.config.procedures,
        };
        let mut plan = self.brain.formulate_plan(&ctx);
        let memory_used = memory_used(&ctx, &plan);
        let choosing = if self.setup.llm { self.brain.plan_request(&ctx) } else { None };
        if choosing.is_none() {
            offer_tools(&self.setup, &self.catalog, &mut plan);
        }
        let focus = Activity {
            event_id: e.id.clone(),
            verdict: "engage".into(),
            reason: format!("working on: {}", plan.goal),
            engaged: Some((e.domain.clone(), plan.goal.clone(), p.max(0.3))),
            backlog: gated.seen.backlog,
            ..Default::default()
        };
        self.emit(Effect::SelfState(Update::Focus(Box::new(focus))));
        let record = PlanRecord {
            event_id: e.id.clone(),
            domain: e.domain.clone(),
            plan,
            replaced: Vec::new(),
            adjustments: Vec::new(),
            evaluation: None,
            started_us: now,
            finished_us: None,
            memory_used,
            draft_check: None,
        };
        let mut work = Work::new(gated, class, record, choosing);
        work.memory = memory;
        work.notes.extend(note);
        self.phase = Phase::Working(Box::new(work));
        self.next_step();
    }

    /// Submits the next pending step as a scheduler task; after the last one, the evaluation.
    ///
    /// The first step of a `work` plan starts a new piece of self-paced work, so it waits for
    /// the persona's cadence; the steps after it, and interactive and urgent work, do not.
    pub(super) fn next_step(&mut self) {
        let Some(f) = self.phase.working() else { return };
        let (class, priority, event, label) = (f.class, f.gated.seen.priority, f.event().clone(), f.job().label());
        let choosing = f.choosing.is_some();
        let action = f.record.plan.steps.get(f.cursor).map(|s| s.action);
        let tool: Option<std::sync::Arc<str>> =
            f.record.plan.steps.get(f.cursor).and_then(|s| s.call.as_ref()).map(|c| c.tool.as_str().into());
        let starts = f.cursor == 0 && f.record.adjustments.is_empty();
        let mut t = self.task_for(&event, class, priority, label);
        if choosing {
            // The model chooses the plan first: an inference slot, like the first step's.
            t = t.inference(PLAN_TOKENS_RESERVED);
            if class == Class::Work {
                t = t.paced();
            }
        } else {
            if matches!(action, Some(Action::DraftReply) | None) && self.setup.config.brain == BrainKind::Local {
                // The model drafts the reply, or writes the lesson: an inference slot, reserving
                // the most tokens the request can take.
                t = t.inference(if action.is_some() { DRAFT_TOKENS_RESERVED } else { LESSON_TOKENS_RESERVED });
            }
            if starts && class == Class::Work {
                t = t.paced();
            }
            // A tool call is one call of the budget (no tokens), counted by tool.
            if action == Some(Action::CallTool) && tool.is_some() {
                t.max_tokens = 1;
                t.tool = tool;
            } else if action == Some(Action::CallTool) && self.setup.config.brain == BrainKind::Local {
                // The model chooses the tool and fills its arguments: an inference slot.
                t = t.inference(CHOOSE_TOOL_TOKENS_RESERVED);
            }
        }
        let Some(f) = self.phase.working_mut() else { return };
        if f.choosing.is_none()
            && let Some(step) = f.record.plan.steps.get_mut(f.cursor)
        {
            step.state = StepState::Running;
        }
        f.task = t.id;
        self.submit(t, TaskFor::Event);
    }

    /// The step of `task` ended: its result's text goes through the enrichment pipeline (the
    /// grant held meanwhile) before the plan goes on.
    pub(super) fn step_result(&mut self, task: TaskId, result: Result<Option<String>, (ErrorClass, String)>) {
        match (result, self.setup.references.is_some()) {
            (Ok(Some(text)), true) if !text.trim().is_empty() => {
                self.emit(Effect::Enrich { of: Enrich::Step(task), text });
            }
            (result, _) => self.step_done(task, result.map(drop)),
        }
    }

    /// What the result of the step of `task` calls for. References it names are selected at
    /// once; new candidates get a `select_reference` step before the answer is drafted.
    pub(super) fn on_step_enriched(&mut self, task: TaskId, enrichment: Enrichment) {
        let Some(mut f) = self.phase.take_work(task) else {
            self.done_task(task);
            return;
        };
        let event_id = f.event().id.clone();
        let stage = format!("step:{}", f.record.plan.steps[f.cursor].action.as_str());
        let fresh = self.take_matches(&event_id, &stage, enrichment);
        let ahead = &f.record.plan.steps[f.cursor + 1..];
        let drafts_later = ahead.iter().any(|s| s.action == Action::DraftReply);
        let selects_later = ahead.iter().any(|s| s.action == Action::SelectReference);
        if !fresh.is_empty() && drafts_later && !selects_later {
            let step = Step::pending(Action::SelectReference);
            f.record.plan.steps.insert(f.cursor + 1, step);
        }
        self.phase = Phase::Working(f);
        self.step_done(task, Ok(()));
    }

    /// The step of `task` is over: release its grant, then go on with the plan as its outcome
    /// says.
    pub(super) fn step_done(&mut self, task: TaskId, result: Result<(), (ErrorClass, String)>) {
        let (tokens, called) = self
            .phase
            .working_mut()
            .map_or((0, false), |f| (std::mem::take(&mut f.tokens), std::mem::take(&mut f.called)));
        if tokens > 0 || called {
            // A tool call made is one call of the budget, with no tokens.
            self.done_with_tokens(task, tokens);
        } else {
            self.done_task(task);
        }
        let Some(f) = self.phase.working_mut() else { return };
        let i = f.cursor;
        match result {
            Ok(()) => {
                f.record.plan.steps[i].state = StepState::Done;
                f.cursor += 1;
            }
            Err((class, message)) => {
                let action = f.record.plan.steps[i].action;
                f.record.plan.steps[i].state = StepState::Failed { class, message: message.clone() };
                // The loop breaker ends the plan's calls; the plan goes on to answer.
                let broken = f.breaker.take().map(|why| {
                    for s in f.record.plan.steps[i + 1..].iter_mut().filter(|s| s.action == Action::CallTool) {
                        s.state = StepState::Skipped;
                    }
                    f.notes.push(why.clone());
                    (Adjustment::Continue, format!("{why}: no more tool calls in this plan"))
                });
                // The model's arguments refused: it fills them again, once, told what the tool said.
                let refill = f.refill.take().map(|why| (Adjustment::Contingency(vec![Action::CallTool]), why));
                let fresh = refill.is_some();
                // The model's own call refused: what the tool said is shown at its next turn.
                let shown = f.shown.take().map(|why| (Adjustment::Continue, why));
                let (adjustment, reason) = match broken.or(refill).or(shown) {
                    Some(b) => b,
                    None => self.brain.adjust_plan(&f.record, i, class),
                };
                tracing::debug!(persona = %self.name, action = action.as_str(), class = class.as_str(), adjustment = adjustment.kind(), "step failed");
                f.record.adjustments.push(AdjustmentRecord {
                    step: i,
                    action,
                    class,
                    error: message,
                    adjustment: adjustment.clone(),
                    reason,
                    at_us: self.now,
                });
                match adjustment {
                    Adjustment::Continue => {
                        f.cursor += 1;
                        // Steps the loop breaker skipped are passed over.
                        while f.record.plan.steps.get(f.cursor).is_some_and(|s| s.state == StepState::Skipped) {
                            f.cursor += 1;
                        }
                    }
                    Adjustment::Contingency(actions) => {
                        let at = i + 1;
                        for (k, a) in actions.into_iter().enumerate() {
                            // A call made again is the same call (unless the model fills it anew).
                            let call = (a == Action::CallTool && !fresh)
                                .then(|| f.record.plan.steps[i].call.clone())
                                .flatten()
                                .map(|c| mindfleet_core::record::ToolStep { outcome: None, ..c });
                            let step = Step { action: a, state: StepState::Pending, contingency: true, call };
                            f.record.plan.steps.insert(at + k, step);
                        }
                        f.cursor = at;
                    }
                    Adjustment::Replan => {
                        f.avoid.push(action);
                        let attempt = f.record.plan.attempt + 1;
                        let ctx = PlanContext {
                            persona: &self.name,
                            role: &self.setup.config.role,
                            event: &f.gated.seen.delivery.event,
                            avoid: &f.avoid,
                            learnings: &self.learnings,
                            attempt,
                            references: !self.refs.current.is_empty(),
                            memory: &f.memory,
                            procedures: &self.setup.config.procedures,
                        };
                        let plan = self.brain.formulate_plan(&ctx);
                        f.record.memory_used = memory_used(&ctx, &plan);
                        let old = std::mem::replace(&mut f.record.plan, plan);
                        f.record.replaced.push(old);
                        f.cursor = 0;
                    }
                    Adjustment::Abort => {
                        for s in &mut f.record.plan.steps[i + 1..] {
                            s.state = StepState::Skipped;
                        }
                        f.cursor = f.record.plan.steps.len();
                    }
                }
            }
        }
        self.next_step();
    }

    /// The model's choice of plan for the event in flight: the plan it picked with a clear
    /// margin, else the rules plan; then the first step.
    pub(super) fn on_planned(&mut self, task: TaskId, answer: Result<Vec<Classification>, LlmFailure>) {
        let Some(choice) = self.phase.work_mut(task).and_then(|f| f.choosing.take()) else {
            self.done_task(task);
            return;
        };
        let tokens = answer.as_ref().map_or(None, |answers| {
            Some(answers.iter().map(|c| c.tokens_in + c.scores.iter().map(|s| s.tokens).sum::<usize>()).sum::<usize>())
        });
        match tokens {
            Some(tokens) => self.done_with_tokens(task, tokens as u32),
            None => self.done_task(task),
        }
        let Some(f) = self.phase.work_mut(task) else { return };
        match answer {
            Ok(answers) => {
                let scores: Vec<Vec<LabelScore>> = answers.into_iter().map(|c| c.scores).collect();
                let (plan, note) = choice.choose(&scores);
                // What memory changed is said of the plan chosen.
                f.record.memory_used = memory_used(
                    &PlanContext {
                        persona: &self.name,
                        role: &self.setup.config.role,
                        event: &f.gated.seen.delivery.event,
                        avoid: &f.avoid,
                        learnings: &self.learnings,
                        attempt: plan.attempt,
                        references: !self.refs.current.is_empty(),
                        memory: &f.memory,
                        procedures: &self.setup.config.procedures,
                    },
                    &plan,
                );
                f.record.plan = plan;
                f.notes.push(note);
            }
            Err(e) => f.notes.push(format!("model failed to choose the plan ({e}): rules plan")),
        }
        offer_tools(&self.setup, &self.catalog, &mut f.record.plan);
        self.next_step();
    }

    /// The model's lesson of a completed plan: the reflection it remembers, with the lesson
    /// when the model wrote one.
    pub(super) fn on_evaluated(&mut self, task: TaskId, answer: Result<Generation, LlmFailure>) {
        let Some(r) = self.reflecting.remove(&task) else {
            // Asked before a restart: nothing waits for it.
            self.done_task(task);
            return;
        };
        let lesson = match answer {
            Ok(g) => {
                self.done_with_tokens(task, (g.tokens_in + g.tokens_out) as u32);
                let text = g.text.trim().to_string();
                if text.is_empty() { Err(format!("the model answered nothing ({:?})", g.stop)) } else { Ok(text) }
            }
            Err(e) => {
                self.done_task(task);
                Err(e.to_string())
            }
        };
        let reflection = match lesson {
            Ok(l) => format!("{}; lesson: {l}", r.reflection),
            Err(why) => {
                tracing::info!(persona = %self.name, event = %r.event.id, %why, "no lesson from the model");
                r.reflection
            }
        };
        self.remember(&r.event, EntryKind::Reflection, reflection, r.importance);
    }

    /// The plan is over: evaluate it, learn from it, and finish the event (its decision and
    /// reply journaled). When the model was asked its lesson under `lesson`, the reflection is
    /// remembered with it when it answers ([`Self::on_evaluated`]); else now, without one.
    pub(super) fn complete(&mut self, mut f: Box<Work>, lesson: Option<TaskId>) {
        let evaluation = self.brain.evaluate_outcome(&f.record);
        let now = self.now;
        f.record.finished_us = Some(now);
        no_reply_drafted(&f.record.plan, &mut f.record.memory_used);
        let reflection = Reflecting {
            event: f.event().clone(),
            reflection: format!("reflection: {}", evaluation.pattern),
            importance: if evaluation.success { 0.8 } else { 0.9 },
        };
        match lesson {
            Some(task) => {
                f.notes.push("lesson asked of the model".into());
                self.reflecting.insert(task, reflection);
            }
            None => {
                self.remember(&reflection.event, EntryKind::Reflection, reflection.reflection, reflection.importance)
            }
        }
        match self.learnings.iter_mut().find(|l| l.pattern == evaluation.pattern) {
            Some(l) => {
                if evaluation.success {
                    l.successes += 1;
                } else {
                    l.failures += 1;
                }
                l.last_us = now;
            }
            None => self.learnings.push(Learning {
                pattern: evaluation.pattern.clone(),
                domain: f.record.domain.clone(),
                successes: u32::from(evaluation.success),
                failures: u32::from(!evaluation.success),
                last_us: now,
            }),
        }
        let failed = !evaluation.success;
        self.note_gap(&f, failed);
        f.record.evaluation = Some(evaluation);
        self.last_plan = Some(f.record.clone());
        let Work { gated, record, notes, reply, .. } = *f;
        self.finish(gated, Some(PlanEnd { record, failed, notes, reply }));
    }
}

impl Lifecycle {
    /// Notes a gap in what the persona knows when the event showed one: its knowledge search
    /// found nothing relevant, its reply says it does not know, or its plan failed. The topic
    /// is the question's content words; a topic that comes up again while it waits counts up.
    fn note_gap(&mut self, f: &Work, failed: bool) {
        if !self.setup.index {
            return;
        }
        let searched = f.record.plan.steps.iter().any(|s| s.action == Action::SearchKnowledge);
        let why = if searched && f.found.is_empty() {
            "knowledge search found nothing relevant"
        } else if f.draft.as_deref().is_some_and(study::says_unsure) {
            "its reply said it does not know"
        } else if failed {
            "its plan failed"
        } else {
            return;
        };
        let topic = study::topic_of(&f.event().text);
        self.emit(Effect::NoteStudy { task: None, topic, why: why.into(), event_id: f.event().id.clone() });
    }
}

/// A model brain with tools to call may use one before it answers: a `call_tool` step it fills
/// (the tool chosen among those the persona may call now, `catalog`, or none) goes first in a
/// plan that drafts an answer and calls none yet.
fn offer_tools(
    setup: &super::Setup,
    catalog: &[mindfleet_core::tools::ToolSpec],
    plan: &mut mindfleet_core::record::Plan,
) {
    let offers = setup.config.brain == BrainKind::Local
        && setup.llm
        && !catalog.is_empty()
        && plan.steps.iter().any(|s| s.action == Action::DraftReply)
        && !plan.steps.iter().any(|s| matches!(s.action, Action::CallTool | Action::AskClarifyingQuestion));
    if offers {
        plan.steps.insert(0, Step::pending(Action::CallTool));
        plan.source.push_str("+tools");
    }
}

/// A completed plan's reflection, waiting for the model's lesson to be remembered with it.
pub(super) struct Reflecting {
    pub event: Event,
    /// The rules' pattern (`reflection: ...`).
    pub reflection: String,
    pub importance: f64,
}
