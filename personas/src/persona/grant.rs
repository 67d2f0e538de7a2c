//! Grants: the scheduler's go for a task of the persona, looked up in its book of tasks and run
//! as what the task was submitted for.

use std::time::Instant;

use mindfleet_core::event::{Event, SenderKind};
use mindfleet_core::llm::{Classification, GenerateJob, LabelScore, LlmFailure, LlmMsg};
use mindfleet_core::model::{Action, Adjustment, AdjustmentRecord, ErrorClass, StepState};
use mindfleet_core::sched::{Grant, Outcome, OverBudget, SkipReason, TaskId};
use mindfleet_core::time::now_us;
use ractor::{ActorRef, RpcReplyPort};
use tracing::Instrument;

use crate::brain::{LessonContext, RespondContext};
use crate::gate::{GateDecision, score};

use super::Own;
use super::phase::{Job, Phase, job_of};
use super::{PersonaState, StepRun};

impl PersonaState {
    /// Runs the granted task: a gate judgement, a consolidation pass, a plan step (adjusting the
    /// plan if it fails) or the plan's evaluation. Each is a `debug` span with the persona, the
    /// task's label and class, its wait and its run time.
    pub(super) async fn on_grant(&mut self, g: Grant) {
        if (self.budget_left - g.budget_left).abs() > f64::EPSILON {
            self.budget_left = g.budget_left;
            self.retune();
        }
        let job = job_of(&mut self.tasks, &self.phase, g.task).filter(|job| self.still_waits(*job, g.task));
        let Some(job) = job else {
            // A task of an event that is over (the persona restarted meanwhile).
            self.release(&g);
            return;
        };
        let span = tracing::debug_span!("task", persona = %self.name, label = job.label(), class = g.class.as_str(), waited_us = g.waited_us, outcome = ?g.outcome);
        let started = Instant::now();
        self.run_grant(job, g).instrument(span.clone()).await;
        tracing::debug!(parent: &span, run_us = started.elapsed().as_micros() as u64, "task done");
    }

    /// Whether what the task was for still waits for it: conversation memory and study keep
    /// the tasks they asked for until their answers come.
    fn still_waits(&self, job: Job, task: TaskId) -> bool {
        match job {
            Job::Remember => {
                self.convo.as_ref().is_some_and(|c| c.asked.contains(&task)) && self.args.conversation.is_some()
            }
            Job::Observe => self.convo.as_ref().is_some_and(|c| c.observe_asked == Some(task)),
            Job::Study => self.study.run.as_ref().is_some_and(|r| r.task == Some(task)),
            _ => true,
        }
    }

    /// Gives back the slot of a grant nothing runs on.
    pub(super) fn release(&self, g: &Grant) {
        if g.outcome.holds_slot() {
            self.args.scheduler.done(g.task);
        }
    }

    async fn run_grant(&mut self, job: Job, g: Grant) {
        match job {
            Job::Judge => self.run_judge(g),
            Job::Remember => self.run_remember(g),
            Job::Observe => self.run_observe(g),
            Job::Study => self.run_study(g),
            Job::TakeUp => self.run_take_up(g),
            Job::Consolidate => {
                if g.outcome.holds_slot() {
                    self.consolidate().await;
                    self.args.scheduler.done(g.task);
                }
            }
            Job::ChoosePlan => self.run_choose_plan(g),
            Job::Evaluate => self.run_evaluate(g),
            Job::Step(_) => self.run_plan_step(g).await,
        }
    }

    /// The gate's task: the brain judges (the model, asked off the loop, when it has a
    /// question), or the deterministic scorer when the budget has no room for it.
    fn run_judge(&mut self, g: Grant) {
        // `job_of` found the phase judging with this task; the guards below keep the slot from
        // leaking all the same.
        let Some(seen) = self.phase.judging(g.task) else { return self.release(&g) };
        let gate = match g.outcome {
            Outcome::Run => {
                let job = self.brain.judge_request(&self.name, &self.args.config.role, &seen.delivery.event);
                if let (Some(job), Some(llm)) = (job, self.args.llm.clone()) {
                    let judged = |task, answer| Own::Judged { task, answer };
                    self.ask_llm(llm, g.task, |reply| LlmMsg::Classify { job, reply }, judged);
                    // The grant is held until the model answers (`Own::Judged`).
                    return;
                }
                self.brain.judge(&seen.delivery.event, seen.priority, &seen.state)
            }
            // No budget for the brain's judgement: the deterministic scorer decides.
            Outcome::RulesOnly(reason) | Outcome::Skipped(reason) => GateDecision {
                note: format!("{BUDGET_SPENT} ({}): judged by rules", reason.as_str()),
                ..score(seen.priority, &seen.state)
            },
        };
        self.release(&g);
        if let Some(seen) = self.phase.take_judged(g.task) {
            self.decided(seen.decided(gate));
        }
    }

    /// Conversation memory's task: embed the next batch off the persona's loop.
    fn run_remember(&mut self, g: Grant) {
        let ran = g.outcome.holds_slot();
        let Some(convo) = self.args.conversation.clone() else { return self.release(&g) };
        if ran {
            self.refill_conversation();
        }
        let Some(c) = self.convo.as_mut() else { return self.release(&g) };
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
            let _ = me.cast(Own::Remembered { task, result }.into());
        });
        // The slot is free again at once: the embedding runs on the worker and the index's
        // thread, and holding the slot would keep the persona's own next steps waiting.
        self.args.scheduler.done(g.task);
    }

    /// The plan's choice: the model is asked the orders of the candidates off the loop, one
    /// after another until the answers settle the plan (the grant held until `Own::Planned`), or
    /// without a model the rules plan runs.
    fn run_choose_plan(&mut self, g: Grant) {
        let llm = self.args.llm.clone().filter(|_| g.outcome == Outcome::Run);
        let Some(f) = self.phase.work_mut(g.task) else { return self.release(&g) };
        let Some(llm) = llm else {
            f.choosing = None;
            let why = spent(g.outcome).unwrap_or_else(|| "no model to choose the plan".into());
            f.notes.push(format!("{why}: rules plan"));
            self.release(&g);
            self.next_step();
            return;
        };
        let Some(choice) = f.choosing.clone() else { return self.release(&g) };
        let (task, me) = (g.task, self.myself.clone());
        tokio::spawn(async move {
            let (mut answers, mut scores): (Vec<Classification>, Vec<Vec<LabelScore>>) = (Vec::new(), Vec::new());
            // In turn, not together: an order is asked only when its answer could change the
            // plan (a small model's pick of the first listed, the rules plan, settles it).
            for (_, job) in &choice.orders {
                let job = job.clone();
                let answer = ractor::call!(llm, |reply| LlmMsg::Classify { job, reply })
                    .unwrap_or_else(|e| Err(LlmFailure::Failed(e.to_string())));
                match answer {
                    Ok(c) => {
                        scores.push(c.scores.clone());
                        answers.push(c);
                    }
                    Err(e) => return me.cast(Own::Planned { task, answer: Err(e) }.into()),
                }
                if choice.settled(&scores) {
                    break;
                }
            }
            me.cast(Own::Planned { task, answer: Ok(answers) }.into())
        });
    }

    /// The evaluation's task: the plan completes at once (its decision and reply journaled and
    /// the next event taken), and the model writes its lesson meanwhile, the grant held until
    /// `Own::Evaluated` remembers the reflection with it; else the reflection goes without one.
    fn run_evaluate(&mut self, g: Grant) {
        let llm = self.args.llm.clone().filter(|_| g.outcome == Outcome::Run);
        if let (Some(llm), Some(f)) = (llm, self.phase.work_mut(g.task)) {
            let evaluation = self.brain.evaluate_outcome(&f.record);
            let ctx = LessonContext {
                respond: RespondContext {
                    persona: &self.name,
                    role: &self.args.config.role,
                    event: &f.gated.seen.delivery.event,
                    recalled: &f.recalled,
                    conversation: &f.conversation,
                    room: &f.room,
                    personas: &self.args.personas,
                    found: &f.found,
                    hints: &self.refs.hint(self.args.enricher.as_deref()),
                    state: &f.gated.seen.state,
                    memory: &f.memory,
                },
                record: &f.record,
                evaluation: &evaluation,
                reply: f.reply.as_ref().map(|(o, _)| f.answer.as_deref().unwrap_or(&o.text)),
            };
            if let Some(req) = self.brain.lesson_request(&ctx) {
                let persona = Some(self.name.to_string());
                let job = GenerateJob { req, purpose: "evaluate".into(), persona, stream: None };
                let evaluated = |task, answer| Own::Evaluated { task, answer };
                self.ask_llm(llm, g.task, |reply| LlmMsg::Generate { job, reply }, evaluated);
                // The grant is held until the model answers (`Own::Evaluated`); nobody waits for
                // the lesson, so the reply is posted and the next event taken up now.
                if let Some(f) = self.phase.take_work(g.task) {
                    self.complete(f, Some(g.task));
                }
                return;
            }
        }
        self.release(&g);
        if let Some(f) = self.phase.take_work(g.task) {
            self.complete(f, None);
        }
    }

    /// A step's task: the step runs, on the rules brain when the budget has no room for the
    /// model. Only a plan no human waits on stops for budget (the scheduler skips its step).
    async fn run_plan_step(&mut self, g: Grant) {
        let Some(mut f) = self.phase.take_work(g.task) else { return self.release(&g) };
        let human = f.event().sender_kind == SenderKind::Human;
        let rules_only = match g.outcome {
            Outcome::Skipped(reason) if !human => {
                abort_skipped(&mut f.record, f.cursor, reason);
                f.notes.push(format!("skipped: {BUDGET_SPENT} ({}) and no human waits on it", reason.as_str()));
                f.cursor = f.record.plan.steps.len();
                self.phase = Phase::Working(f);
                self.next_step();
                return;
            }
            // A skip a human waits on (the scheduler gives such calls `RulesOnly`; this holds
            // whatever submitted the task): the rules brain, never silence. No slot is held; the
            // `done` the step ends with is ignored.
            Outcome::Skipped(reason) | Outcome::RulesOnly(reason) => {
                let action = f.record.plan.steps[f.cursor].action.as_str();
                let waited = match g.waited_us {
                    // Queued for budget (or waiting for a slot) long enough to say so.
                    us if us >= 1_000_000 => format!(" after {:.1} s waiting", us as f64 / 1e6),
                    _ => String::new(),
                };
                f.notes.push(format!("{BUDGET_SPENT} ({}){waited}: {action} ran on the rules brain", reason.as_str()));
                true
            }
            Outcome::Run => false,
        };
        let run = self.run_step(&mut f, rules_only).await;
        self.phase = Phase::Working(f);
        match run {
            // The grant is held until the answer comes (`Own::Drafted`, `Searched`).
            Ok(StepRun::Waiting) => {}
            Ok(StepRun::Done(text)) => self.step_result(g.task, Ok(text)),
            Err(e) => self.step_result(g.task, Err(e)),
        }
    }

    /// Sends the LLM a request from a task of its own and casts its answer back as
    /// `answered(task, answer)`, so the persona handles other messages meanwhile.
    pub(super) fn ask_llm<T: Send + 'static>(
        &self,
        llm: ActorRef<LlmMsg>,
        task: TaskId,
        request: impl FnOnce(RpcReplyPort<Result<T, LlmFailure>>) -> LlmMsg + Send + 'static,
        answered: fn(TaskId, Result<T, LlmFailure>) -> Own,
    ) {
        let me = self.myself.clone();
        tokio::spawn(async move {
            let answer = ractor::call!(llm, request).unwrap_or_else(|e| Err(LlmFailure::Failed(e.to_string())));
            let _ = me.cast(answered(task, answer).into());
        });
    }
}

/// What a decision says when the budget had no room for the model.
const BUDGET_SPENT: &str = "model budget spent";

/// Why the model was not asked, when the budget said so.
fn spent(outcome: Outcome) -> Option<String> {
    match outcome {
        Outcome::Run => None,
        Outcome::RulesOnly(r) | Outcome::Skipped(r) => Some(format!("{BUDGET_SPENT} ({})", r.as_str())),
    }
}

/// What becomes of the model call of an event's task `label` when the budget has no room for
/// it: a human waits on everything done for a human's message, so its calls run on the rules
/// brain, and its reply's draft first waits for budget (`Queue`, above priority 0.6); a
/// persona's or the system's message waits on nobody, so its calls are skipped.
pub(super) fn over_budget(e: &Event, label: &str) -> OverBudget {
    match e.sender_kind {
        SenderKind::Human if label == Action::DraftReply.as_str() => OverBudget::Queue,
        SenderKind::Human => OverBudget::Rules,
        SenderKind::Persona | SenderKind::System => OverBudget::Skip,
    }
}

/// The scheduler skipped the step at `cursor` for budget: the plan stops there, its steps from
/// there on skipped.
fn abort_skipped(record: &mut mindfleet_core::model::PlanRecord, cursor: usize, reason: SkipReason) {
    let action = record.plan.steps[cursor].action;
    record.adjustments.push(AdjustmentRecord {
        step: cursor,
        action,
        class: ErrorClass::RateLimit,
        error: format!("skipped by the scheduler: {reason:?}"),
        adjustment: Adjustment::Abort,
        reason: "over budget: the plan stops here".into(),
        at_us: now_us(),
    });
    for s in &mut record.plan.steps[cursor..] {
        s.state = StepState::Skipped;
    }
}
