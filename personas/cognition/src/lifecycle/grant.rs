//! Grants: the scheduler's go for a task of the event in hand (or of a deferral's take-up),
//! looked up in the book of tasks and run as what the task was submitted for.

use mindfleet_core::event::{Event, SenderKind};
use mindfleet_core::llm::GenerateJob;
use mindfleet_core::record::{Action, Adjustment, AdjustmentRecord, ErrorClass, StepState};
use mindfleet_core::sched::{Grant, Outcome, OverBudget, SkipReason, TaskId};

use crate::brain::LessonContext;
use crate::gate::{GateDecision, score};

use super::phase::{Job, Phase, job_of};
use super::steps::StepRun;
use super::{Ask, Effect, Lifecycle};

impl Lifecycle {
    /// Runs the granted task: a gate judgement, the choice of a plan, a plan step (adjusting
    /// the plan if it fails, or failing with `failure` when a fault was injected), the plan's
    /// evaluation, or a deferral's take-up.
    pub(super) fn on_grant(&mut self, g: Grant, failure: Option<ErrorClass>) {
        let Some(job) = job_of(&mut self.tasks, &self.phase, g.task) else {
            // A task of an event that is over (the persona restarted meanwhile).
            self.release(&g);
            return;
        };
        match job {
            Job::Judge => self.run_judge(g),
            Job::TakeUp => self.run_take_up(g),
            Job::ChoosePlan => self.run_choose_plan(g),
            Job::Evaluate => self.run_evaluate(g),
            Job::Step(_) => self.run_plan_step(g, failure),
        }
    }

    /// The label of what the grant of `task` runs (for the `task` span), if it is the
    /// lifecycle's.
    pub fn label_of(&self, task: TaskId) -> Option<&'static str> {
        match self.tasks.get(&task)? {
            super::TaskFor::TakeUp => Some(Job::TakeUp.label()),
            super::TaskFor::Event => self.phase.job(task).map(Job::label),
        }
    }

    /// The action the grant `g` runs, when it runs a step of the plan (a step skipped for
    /// budget does not run): a fault injected on the action applies to it.
    pub fn step_run_by(&self, g: &Grant) -> Option<Action> {
        if !self.tasks.contains_key(&g.task) {
            return None;
        }
        let f = self.phase.working().filter(|w| w.task == g.task)?;
        let Job::Step(action) = f.job() else { return None };
        let human = f.event().sender_kind == SenderKind::Human;
        (!matches!(g.outcome, Outcome::Skipped(_)) || human).then_some(action)
    }

    /// Gives back the slot of a grant nothing runs on.
    pub(super) fn release(&mut self, g: &Grant) {
        if g.outcome.holds_slot() {
            self.done_task(g.task);
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
                let job = self.brain.judge_request(&self.name, &self.setup.config.role, &seen.delivery.event);
                if let Some(job) = job.filter(|_| self.setup.llm) {
                    // The grant is held until the model answers (`Judged`).
                    self.emit(Effect::Llm { task: g.task, ask: Ask::Judge(job) });
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

    /// The plan's choice: the model is asked the orders of the candidates off the loop, one
    /// after another until the answers settle the plan (the grant held until `Planned`), or
    /// without a model the rules plan runs.
    fn run_choose_plan(&mut self, g: Grant) {
        let llm = self.setup.llm && g.outcome == Outcome::Run;
        let Some(f) = self.phase.work_mut(g.task) else { return self.release(&g) };
        if !llm {
            f.choosing = None;
            let why = spent(g.outcome).unwrap_or_else(|| "no model to choose the plan".into());
            f.notes.push(format!("{why}: rules plan"));
            self.release(&g);
            self.next_step();
            return;
        }
        let Some(choice) = f.choosing.clone() else { return self.release(&g) };
        self.emit(Effect::Llm { task: g.task, ask: Ask::ChoosePlan(choice) });
    }

    /// The evaluation's task: the plan completes at once (its decision and reply journaled and
    /// the next event taken), and the model writes its lesson meanwhile, the grant held until
    /// `Evaluated` remembers the reflection with it; else the reflection goes without one.
    fn run_evaluate(&mut self, g: Grant) {
        let llm = self.setup.llm && g.outcome == Outcome::Run;
        if let (true, Some(f)) = (llm, self.phase.working().filter(|w| w.task == g.task)) {
            let evaluation = self.brain.evaluate_outcome(&f.record);
            let hints = self.hints();
            let ctx = LessonContext {
                respond: self.respond_context(f, &hints),
                record: &f.record,
                evaluation: &evaluation,
                reply: f.reply.as_ref().map(|(o, _)| f.answer.as_deref().unwrap_or(&o.text)),
            };
            if let Some(req) = self.brain.lesson_request(&ctx) {
                let persona = Some(self.name.to_string());
                let job = GenerateJob::new(req, "evaluate", persona);
                self.emit(Effect::Llm { task: g.task, ask: Ask::Lesson(job) });
                // The grant is held until the model answers (`Evaluated`); nobody waits for the
                // lesson, so the reply is posted and the next event taken up now.
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
    fn run_plan_step(&mut self, g: Grant, failure: Option<ErrorClass>) {
        let Some(mut f) = self.phase.take_work(g.task) else { return self.release(&g) };
        let human = f.event().sender_kind == SenderKind::Human;
        let rules_only = match g.outcome {
            Outcome::Skipped(reason) if !human => {
                abort_skipped(&mut f.record, f.cursor, reason, self.now);
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
        let run = match failure {
            Some(class) => Err((class, format!("injected {} failure", class.as_str()))),
            None => self.run_step(&mut f, rules_only),
        };
        self.phase = Phase::Working(f);
        match run {
            // The grant is held until the answer comes (`Drafted`, `Searched`, ...).
            Ok(StepRun::Waiting) => {}
            Ok(StepRun::Done(text)) => self.step_result(g.task, Ok(text)),
            Err(e) => self.step_result(g.task, Err(e)),
        }
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
fn abort_skipped(record: &mut mindfleet_core::record::PlanRecord, cursor: usize, reason: SkipReason, now: i64) {
    let action = record.plan.steps[cursor].action;
    record.adjustments.push(AdjustmentRecord {
        step: cursor,
        action,
        class: ErrorClass::RateLimit,
        error: format!("skipped by the scheduler: {reason:?}"),
        adjustment: Adjustment::Abort,
        reason: "over budget: the plan stops here".into(),
        at_us: now,
    });
    for s in &mut record.plan.steps[cursor..] {
        s.state = StepState::Skipped;
    }
}
