//! The plan: engaging, a task per step, the grants that run them, adjusting a failed step's
//! plan, and the evaluation at the end.

use std::time::Instant;

use mindfleet_runtime::config::BrainKind;
use mindfleet_runtime::llm::{Classification, ClassifyJob, GenerateJob, Generation, LabelScore, LlmFailure, LlmMsg};
use mindfleet_runtime::messages::{Delivery, PersonaMsg};
use mindfleet_runtime::model::{
    Action, Adjustment, AdjustmentRecord, EntryKind, ErrorClass, Learning, PlanRecord, Step, StepState,
};
use mindfleet_runtime::refs::Enrichment;
use mindfleet_runtime::sched::{Class, Grant, Outcome, Slot, TaskId};
use mindfleet_runtime::time::now_us;
use ractor::{ActorRef, RpcReplyPort};
use tracing::Instrument;

use crate::brain::{LessonContext, PlanContext, RespondContext};
use crate::gate::{GateDecision, GateState, score};
use crate::mind::{Activity, Update};
use crate::self_state::SelfStateMsg;

use super::{DRAFT_TOKENS_RESERVED, InFlight, LESSON_TOKENS_RESERVED, PLAN_TOKENS_RESERVED, PersonaState, StepRun};

impl PersonaState {
    /// Engaged: the brain plans, and the first step goes to the scheduler.
    pub(super) fn engage(&mut self, d: Delivery, backlog: usize, p: f64, gate: GateDecision, state: GateState) {
        let now = now_us();
        let e = &d.event;
        let class = self.class_of(e);
        let ctx = PlanContext {
            persona: &self.name,
            role: &self.args.config.role,
            event: e,
            avoid: &[],
            learnings: &self.learnings,
            attempt: 0,
            references: !self.refs.current.is_empty(),
        };
        let plan = self.brain.formulate_plan(&ctx);
        let choosing = self.args.llm.as_ref().and_then(|_| self.brain.plan_request(&ctx));
        let focus = Activity {
            event_id: e.id.clone(),
            verdict: "engage".into(),
            reason: format!("working on: {}", plan.goal),
            engaged: Some((e.domain.clone(), plan.goal.clone(), p.max(0.3))),
            backlog,
            ..Default::default()
        };
        let _ = self.self_state.actor.cast(SelfStateMsg::Apply(Update::Focus(Box::new(focus))));
        let record = PlanRecord {
            event_id: e.id.clone(),
            domain: e.domain.clone(),
            plan,
            replaced: Vec::new(),
            adjustments: Vec::new(),
            evaluation: None,
            started_us: now,
            finished_us: None,
        };
        self.in_flight = Some(InFlight {
            delivery: d,
            backlog,
            priority: p,
            class,
            gate,
            state,
            task: 0,
            record,
            cursor: 0,
            recalled: Vec::new(),
            conversation: Vec::new(),
            found: Vec::new(),
            draft: None,
            reply: None,
            avoid: Vec::new(),
            notes: Vec::new(),
            drafted_by: "rules",
            tokens: 0,
            choosing,
        });
        self.next_step();
    }

    /// Submits the next pending step as a scheduler task; after the last one, the evaluation.
    ///
    /// The first step of a `work` plan starts a new piece of self-paced work, so it waits for
    /// the persona's cadence; the steps after it, and interactive and urgent work, do not.
    pub(super) fn next_step(&mut self) {
        let Some(f) = self.in_flight.as_ref() else { return };
        if f.choosing.is_some() {
            // The model chooses the plan first: an inference slot, like the first step's.
            let mut t = self.task_for(&f.delivery.event, f.class, f.priority, "plan");
            t.slot = Slot::Inference;
            t = t.with_max_tokens(PLAN_TOKENS_RESERVED);
            if f.class == Class::Work {
                t = t.paced();
            }
            let f = self.in_flight.as_mut().expect("checked above");
            f.task = t.id;
            self.args.scheduler.submit(t);
            return;
        }
        let action = f.record.plan.steps.get(f.cursor).map(|s| s.action);
        let label = action.map_or("evaluate", Action::as_str);
        let mut t = self.task_for(&f.delivery.event, f.class, f.priority, label);
        if matches!(action, Some(Action::DraftReply) | None) && self.args.config.brain == BrainKind::Local {
            // The model drafts the reply, or writes the lesson: an inference slot, reserving
            // the most tokens the request can take.
            t.slot = Slot::Inference;
            t = t.with_max_tokens(if action.is_some() { DRAFT_TOKENS_RESERVED } else { LESSON_TOKENS_RESERVED });
        }
        let starts = f.cursor == 0 && f.record.adjustments.is_empty();
        if starts && f.class == Class::Work {
            t = t.paced();
        }
        let f = self.in_flight.as_mut().expect("checked above");
        if let Some(step) = f.record.plan.steps.get_mut(f.cursor) {
            step.state = StepState::Running;
        }
        f.task = t.id;
        self.args.scheduler.submit(t);
    }

    /// Runs the granted task: a gate judgement, a consolidation pass, a plan step (adjusting the
    /// plan if it fails) or the plan's evaluation. Each is a `debug` span with the persona, the
    /// task's label and class, its wait and its run time.
    pub(super) async fn on_grant(&mut self, g: Grant) {
        if (self.budget_left - g.budget_left).abs() > f64::EPSILON {
            self.budget_left = g.budget_left;
            self.retune();
        }
        let ran = g.outcome.holds_slot();
        let label = if self.judging.as_ref().is_some_and(|j| j.task == g.task) {
            "gate"
        } else if self.consolidating == Some(g.task) {
            "consolidate"
        } else if self.convo.as_ref().is_some_and(|c| c.asked.contains(&g.task)) {
            "remember"
        } else if self.study.run.as_ref().is_some_and(|r| r.task == Some(g.task)) {
            "study"
        } else if let Some(f) = self.in_flight.as_ref().filter(|f| f.task == g.task) {
            if f.choosing.is_some() {
                "plan"
            } else {
                f.record.plan.steps.get(f.cursor).map_or("evaluate", |s| s.action.as_str())
            }
        } else {
            // A task of an event that is over (the persona restarted meanwhile).
            if ran {
                self.args.scheduler.done(g.task);
            }
            return;
        };
        let span = tracing::debug_span!("task", persona = %self.name, label, class = g.class.as_str(), waited_us = g.waited_us, outcome = ?g.outcome);
        let started = Instant::now();
        self.run_grant(g).instrument(span.clone()).await;
        tracing::debug!(parent: &span, run_us = started.elapsed().as_micros() as u64, "task done");
    }

    pub(super) async fn run_grant(&mut self, g: Grant) {
        let ran = g.outcome.holds_slot();
        if let Some(j) = self.judging.take_if(|j| j.task == g.task) {
            let gate = match g.outcome {
                Outcome::Run => {
                    let job = self.brain.judge_request(&self.name, &self.args.config.role, &j.delivery.event);
                    if let (Some(job), Some(llm)) = (job, self.args.llm.clone()) {
                        let judged = |task, answer| PersonaMsg::Judged { task, answer };
                        self.ask_llm(llm, g.task, |reply| LlmMsg::Classify { job, reply }, judged);
                        // The grant is held until the model answers (`PersonaMsg::Judged`).
                        self.judging = Some(j);
                        return;
                    }
                    self.brain.judge(&j.delivery.event, j.priority, &j.state)
                }
                // No budget for the brain's judgement: the deterministic scorer decides.
                Outcome::RulesOnly(_) | Outcome::Skipped(_) => {
                    GateDecision { note: "over budget: judged by rules".into(), ..score(j.priority, &j.state) }
                }
            };
            if ran {
                self.args.scheduler.done(g.task);
            }
            self.decided(j.delivery, j.backlog, j.priority, gate, j.state);
            return;
        }
        if self.convo.as_ref().is_some_and(|c| c.asked.contains(&g.task))
            && let Some(convo) = self.args.conversation.clone()
        {
            if ran {
                self.refill_conversation();
            }
            let c = self.convo.as_mut().expect("checked above");
            let batch = if ran { c.take_batch(&self.name) } else { Vec::new() };
            if batch.is_empty() {
                // The other request took the batch, or no slot was given (or what waits in
                // storage is not committed yet): done with this one.
                c.asked.retain(|t| *t != g.task);
                if ran {
                    self.args.scheduler.done(g.task);
                }
                if c.embedding.is_empty() {
                    self.gather();
                }
                return;
            }
            let (me, task, worker) = (self.myself.clone(), g.task, convo.embedding.clone());
            tokio::spawn(async move {
                let result = crate::conversation::remember(&worker, &convo.index, batch).await;
                let _ = me.cast(PersonaMsg::Remembered { task, result });
            });
            // The slot is free again at once: the embedding runs on the worker and the index's
            // thread, and holding the slot would keep the persona's own next steps waiting.
            self.args.scheduler.done(g.task);
            return;
        }
        if self.study.run.as_ref().is_some_and(|r| r.task == Some(g.task)) {
            self.run_study(g);
            return;
        }
        if self.consolidating == Some(g.task) {
            self.consolidating = None;
            if ran {
                self.consolidate().await;
                self.args.scheduler.done(g.task);
            }
            return;
        }
        let f = self.in_flight.as_mut().expect("on_grant checked the task");
        if let Some(choice) = f.choosing.take() {
            if let (Outcome::Run, Some(llm)) = (&g.outcome, self.args.llm.clone()) {
                let jobs: Vec<ClassifyJob> = choice.orders.iter().map(|(_, job)| job.clone()).collect();
                let (task, me) = (g.task, self.myself.clone());
                tokio::spawn(async move {
                    let mut answers = Vec::with_capacity(jobs.len());
                    for job in jobs {
                        match ractor::call!(llm, |reply| LlmMsg::Classify { job, reply }) {
                            Ok(Ok(c)) => answers.push(c),
                            Ok(Err(e)) => return me.cast(PersonaMsg::Planned { task, answer: Err(e) }),
                            Err(e) => {
                                let answer = Err(LlmFailure::Failed(e.to_string()));
                                return me.cast(PersonaMsg::Planned { task, answer });
                            }
                        }
                    }
                    me.cast(PersonaMsg::Planned { task, answer: Ok(answers) })
                });
                // The grant is held until the model answers (`PersonaMsg::Planned`).
                f.choosing = Some(choice);
                return;
            }
            f.notes.push("no budget for the model to choose the plan: rules plan".into());
            if ran {
                self.args.scheduler.done(g.task);
            }
            self.next_step();
            return;
        }
        if f.cursor >= f.record.plan.steps.len() {
            if let (Outcome::Run, Some(llm)) = (&g.outcome, self.args.llm.clone()) {
                let evaluation = self.brain.evaluate_outcome(&f.record);
                let ctx = LessonContext {
                    respond: RespondContext {
                        persona: &self.name,
                        role: &self.args.config.role,
                        event: &f.delivery.event,
                        recalled: &f.recalled,
                        conversation: &f.conversation,
                        found: &f.found,
                        hints: &self.refs.hint(self.args.enricher.as_deref()),
                        state: &f.state,
                    },
                    record: &f.record,
                    evaluation: &evaluation,
                    reply: f.reply.as_ref().map(|(o, _)| o.text.as_str()),
                };
                if let Some(req) = self.brain.lesson_request(&ctx) {
                    let job = GenerateJob {
                        req,
                        purpose: "evaluate".into(),
                        persona: Some(self.name.to_string()),
                        stream: None,
                    };
                    let evaluated = |task, answer| PersonaMsg::Evaluated { task, answer };
                    self.ask_llm(llm, g.task, |reply| LlmMsg::Generate { job, reply }, evaluated);
                    // The grant is held until the model answers (`PersonaMsg::Evaluated`).
                    return;
                }
            }
            if ran {
                self.args.scheduler.done(g.task);
            }
            self.complete(None);
            return;
        }
        if let Outcome::Skipped(reason) = g.outcome {
            let f = self.in_flight.as_mut().expect("checked above");
            let action = f.record.plan.steps[f.cursor].action;
            f.record.adjustments.push(AdjustmentRecord {
                step: f.cursor,
                action,
                class: ErrorClass::RateLimit,
                error: format!("skipped by the scheduler: {reason:?}"),
                adjustment: Adjustment::Abort,
                reason: "over budget: the plan stops here".into(),
                at_us: now_us(),
            });
            for s in &mut f.record.plan.steps[f.cursor..] {
                s.state = StepState::Skipped;
            }
            f.cursor = f.record.plan.steps.len();
            self.next_step();
            return;
        }
        let rules_only = match g.outcome {
            Outcome::RulesOnly(reason) => {
                let f = self.in_flight.as_mut().expect("checked above");
                let action = f.record.plan.steps[f.cursor].action.as_str();
                f.notes.push(format!("{action} ran on the rules brain ({})", reason.as_str()));
                true
            }
            _ => false,
        };
        match self.run_step(rules_only).await {
            // The grant is held until the answer comes (`PersonaMsg::Drafted`, `Searched`).
            Ok(StepRun::Waiting) => {}
            Ok(StepRun::Done(text)) => self.step_result(g.task, Ok(text)),
            Err(e) => self.step_result(g.task, Err(e)),
        }
    }

    /// The step of `task` ended: its result's text goes through the enrichment pipeline (the
    /// grant held meanwhile) before the plan goes on.
    pub(super) fn step_result(&mut self, task: TaskId, result: Result<Option<String>, (ErrorClass, String)>) {
        match (result, self.args.enricher.clone()) {
            (Ok(Some(text)), Some(enricher)) if !text.trim().is_empty() => {
                let me = self.myself.clone();
                tokio::spawn(async move {
                    let enrichment = enricher.enrich(&text).await;
                    let _ = me.cast(PersonaMsg::StepEnriched { task, enrichment });
                });
            }
            (result, _) => self.step_done(task, result.map(drop)),
        }
    }

    /// What the result of the step of `task` calls for. References it names are selected at
    /// once; new candidates get a `select_reference` step before the answer is drafted.
    pub(super) fn on_step_enriched(&mut self, task: TaskId, enrichment: Enrichment) {
        let Some(f) = self.in_flight.as_ref().filter(|f| f.task == task) else {
            self.args.scheduler.done(task);
            return;
        };
        let event_id = f.delivery.event.id.clone();
        let stage = format!("step:{}", f.record.plan.steps[f.cursor].action.as_str());
        let fresh = self.take_matches(&event_id, &stage, enrichment);
        let f = self.in_flight.as_mut().expect("checked above");
        let ahead = &f.record.plan.steps[f.cursor + 1..];
        let drafts_later = ahead.iter().any(|s| s.action == Action::DraftReply);
        let selects_later = ahead.iter().any(|s| s.action == Action::SelectReference);
        if !fresh.is_empty() && drafts_later && !selects_later {
            let step = Step { action: Action::SelectReference, state: StepState::Pending, contingency: false };
            f.record.plan.steps.insert(f.cursor + 1, step);
        }
        self.step_done(task, Ok(()));
    }

    /// The step of `task` is over: release its grant, then go on with the plan as its outcome
    /// says.
    pub(super) fn step_done(&mut self, task: TaskId, result: Result<(), (ErrorClass, String)>) {
        let tokens = self.in_flight.as_mut().map_or(0, |f| std::mem::take(&mut f.tokens));
        if tokens > 0 {
            self.args.scheduler.done_with_tokens(task, tokens);
        } else {
            self.args.scheduler.done(task);
        }
        let Some(f) = self.in_flight.as_mut() else { return };
        let i = f.cursor;
        match result {
            Ok(()) => {
                f.record.plan.steps[i].state = StepState::Done;
                f.cursor += 1;
            }
            Err((class, message)) => {
                let action = f.record.plan.steps[i].action;
                f.record.plan.steps[i].state = StepState::Failed { class, message: message.clone() };
                let (adjustment, reason) = self.brain.adjust_plan(&f.record, i, class);
                tracing::debug!(persona = %self.name, action = action.as_str(), class = class.as_str(), adjustment = adjustment.kind(), "step failed");
                f.record.adjustments.push(AdjustmentRecord {
                    step: i,
                    action,
                    class,
                    error: message,
                    adjustment: adjustment.clone(),
                    reason,
                    at_us: now_us(),
                });
                match adjustment {
                    Adjustment::Continue => f.cursor += 1,
                    Adjustment::Contingency(actions) => {
                        let at = i + 1;
                        for (k, a) in actions.into_iter().enumerate() {
                            f.record
                                .plan
                                .steps
                                .insert(at + k, Step { action: a, state: StepState::Pending, contingency: true });
                        }
                        f.cursor = at;
                    }
                    Adjustment::Replan => {
                        f.avoid.push(action);
                        let attempt = f.record.plan.attempt + 1;
                        let plan = self.brain.formulate_plan(&PlanContext {
                            persona: &self.name,
                            role: &self.args.config.role,
                            event: &f.delivery.event,
                            avoid: &f.avoid,
                            learnings: &self.learnings,
                            attempt,
                            references: !self.refs.current.is_empty(),
                        });
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
        let Some(f) = self.in_flight.as_mut().filter(|f| f.task == task && f.choosing.is_some()) else {
            self.args.scheduler.done(task);
            return;
        };
        let choice = f.choosing.take().expect("checked above");
        match answer {
            Ok(answers) => {
                let tokens: usize =
                    answers.iter().map(|c| c.tokens_in + c.scores.iter().map(|s| s.tokens).sum::<usize>()).sum();
                self.args.scheduler.done_with_tokens(task, tokens as u32);
                let scores: Vec<Vec<LabelScore>> = answers.into_iter().map(|c| c.scores).collect();
                let (plan, note) = choice.choose(&scores);
                f.record.plan = plan;
                f.notes.push(note);
            }
            Err(e) => {
                self.args.scheduler.done(task);
                f.notes.push(format!("model failed to choose the plan ({e}): rules plan"));
            }
        }
        self.next_step();
    }

    /// The model's lesson of the plan in flight: the plan is complete.
    pub(super) fn on_evaluated(&mut self, task: TaskId, answer: Result<Generation, LlmFailure>) {
        let over = self.in_flight.as_ref().is_none_or(|f| f.task != task || f.cursor < f.record.plan.steps.len());
        if over {
            self.args.scheduler.done(task);
            return;
        }
        let lesson = match answer {
            Ok(g) => {
                self.args.scheduler.done_with_tokens(task, (g.tokens_in + g.tokens_out) as u32);
                let text = g.text.trim().to_string();
                if text.is_empty() { Err(format!("the model answered nothing ({:?})", g.stop)) } else { Ok(text) }
            }
            Err(e) => {
                self.args.scheduler.done(task);
                Err(e.to_string())
            }
        };
        match lesson {
            Ok(text) => self.complete(Some(text)),
            Err(why) => {
                self.in_flight.as_mut().expect("checked above").notes.push(format!("no lesson from the model: {why}"));
                self.complete(None);
            }
        }
    }

    /// The plan is over: evaluate it, learn from it (with the model's `lesson`, when it wrote
    /// one), and finish the event.
    pub(super) fn complete(&mut self, lesson: Option<String>) {
        let Some(mut f) = self.in_flight.take() else { return };
        let evaluation = self.brain.evaluate_outcome(&f.record);
        let now = now_us();
        f.record.finished_us = Some(now);
        let reflection = match &lesson {
            Some(l) => {
                f.notes.push(format!("lesson: {l}"));
                format!("reflection: {}; lesson: {l}", evaluation.pattern)
            }
            None => format!("reflection: {}", evaluation.pattern),
        };
        self.remember(&f.delivery.event, EntryKind::Reflection, reflection, if evaluation.success { 0.8 } else { 0.9 });
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
        self.finish(f.delivery, f.backlog, f.priority, f.gate, f.state, f.reply, Some((f.record, failed, f.notes)));
    }

    /// Sends the LLM a request from a task of its own and casts its answer back as
    /// `answered(task, answer)`, so the persona handles other messages meanwhile.
    pub(super) fn ask_llm<T: Send + 'static>(
        &self,
        llm: ActorRef<LlmMsg>,
        task: TaskId,
        request: impl FnOnce(RpcReplyPort<Result<T, LlmFailure>>) -> LlmMsg + Send + 'static,
        answered: fn(TaskId, Result<T, LlmFailure>) -> PersonaMsg,
    ) {
        let me = self.myself.clone();
        tokio::spawn(async move {
            let answer = ractor::call!(llm, request).unwrap_or_else(|e| Err(LlmFailure::Failed(e.to_string())));
            let _ = me.cast(answered(task, answer));
        });
    }
}
