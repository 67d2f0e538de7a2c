//! The `Brain` trait (what a persona thinks with) and the deterministic `rules` brain; the
//! `local` brain, which asks the fleet's LLM, is in `brain/local.rs`.
//!
//! A brain judges engagement (the model stage of the gate chain), formulates a plan from
//! the action registry, adjusts it when a step fails, evaluates the outcome, and writes the
//! reply. The persona runs the loop (plan, act, adjust, evaluate); the brain only decides.
//! Model-backed brains plug in behind the same trait.

use mindfleet_core::conversation::{Recalled, Said};
use mindfleet_core::event::Event;
use mindfleet_core::knowledge::Source;
use mindfleet_core::llm::{ClassifyJob, GenerateRequest, LabelScore, margin};
use mindfleet_core::record::{
    Action, Adjustment, Criterion, ErrorClass, Evaluation, Learning, Plan, PlanRecord, Step, StepState, Verdict,
    WmEntry,
};

use mindfleet_core::tools::ToolProcedure;

use crate::gate::{GateDecision, GateState, score};
use crate::reply;

mod local;
pub mod recall;
pub mod tools;

pub use local::{
    GATE_CALIBRATION, GATE_CASES, GATE_LABELS, GateCalibration, LESSON_MAX_TOKENS, LocalBrain, PLAN_CASES, PlanKind,
    REPLY_MAX_TOKENS, gate_margin, gate_question, plan_question,
};
pub use recall::{NOTHING_RECALLED, Recollection, memory_used};

/// How many times a plan may be replaced before the brain gives up.
pub const MAX_REPLANS: u32 = 2;

/// What a brain plans for.
pub struct PlanContext<'a> {
    pub persona: &'a str,
    pub role: &'a str,
    pub event: &'a Event,
    /// Actions that failed in earlier plans for this event (a replan avoids them).
    pub avoid: &'a [Action],
    /// What the persona learned so far (patterns with their counts).
    pub learnings: &'a [Learning],
    pub attempt: u32,
    /// The event calls for references (named, or matched by tag or meaning).
    pub references: bool,
    /// What the persona recalled of its long-term memory for the event.
    pub memory: &'a Recollection,
    /// The fleet file's procedures of tool calls for the persona.
    pub procedures: &'a [ToolProcedure],
}

/// What a brain writes a reply from.
pub struct RespondContext<'a> {
    pub persona: &'a str,
    pub role: &'a str,
    pub event: &'a Event,
    pub recalled: &'a [WmEntry],
    /// What conversation memory recalled of what was said before.
    pub conversation: &'a [Recalled],
    /// The room's latest messages the persona took in, oldest first (what was said there, for
    /// questions about the conversation: who said what, and when).
    pub room: &'a [Said],
    /// The fleet's personas: what they said is a reply, not material.
    pub personas: &'a [String],
    /// What the knowledge search found (cited as `[path:start-end]`).
    pub found: &'a [Source],
    /// The hint block of the references the event called for (empty: none).
    pub hints: &'a str,
    /// The persona's self-state when it decided to answer.
    pub state: &'a GateState,
    /// What the persona recalled of its long-term memory for the event (the sender's profile
    /// and knowledge shape the reply).
    pub memory: &'a Recollection,
    /// What the event asks: see [`RespondContext::ask`] (empty when made).
    pub ask: std::cell::OnceCell<reply::Ask>,
}

impl RespondContext<'_> {
    /// What the event asks ([`reply::Ask::of`]), worked out the first time it is asked for.
    pub fn ask(&self) -> &reply::Ask {
        self.ask.get_or_init(|| reply::Ask::of(&self.event.text, &self.event.domain, self.persona))
    }

    /// What the reply is built from ([`crate::reply`]).
    pub fn reply(&self) -> reply::Input<'_> {
        reply::Input {
            persona: self.persona,
            event: self.event,
            recalled: self.recalled,
            conversation: self.conversation,
            room: self.room,
            personas: self.personas,
            found: self.found,
            knowledge: self.memory.knowledge.iter().map(|k| (k.item.topic.as_str(), k.item.summary.as_str())).collect(),
            ask: std::borrow::Cow::Borrowed(self.ask()),
        }
    }
}

/// What a brain writes the lesson of a finished plan from.
pub struct LessonContext<'a> {
    pub respond: RespondContext<'a>,
    pub record: &'a PlanRecord,
    pub evaluation: &'a Evaluation,
    /// The reply posted, if any: the model's words as it wrote them when it drafted it.
    pub reply: Option<&'a str>,
}

pub trait Brain: Send + Sync {
    /// Its name, as recorded in outbox entries (`rules`, `local`, `openai`).
    fn name(&self) -> &'static str;

    /// The gate chain's model stage: decides what the fast path and the thermal stage left.
    fn judge(&self, event: &Event, priority: f64, state: &GateState) -> GateDecision;

    fn formulate_plan(&self, ctx: &PlanContext) -> Plan;

    /// How to go on after step `failed` of `record.plan` failed with `class`.
    fn adjust_plan(&self, record: &PlanRecord, failed: usize, class: ErrorClass) -> (Adjustment, String);

    fn evaluate_outcome(&self, record: &PlanRecord) -> Evaluation;

    fn respond(&self, ctx: &RespondContext) -> String;

    /// The request for the LLM that drafts the reply, for a model-backed brain; `None`: the
    /// brain writes it itself with [`Brain::respond`].
    fn reply_request(&self, _ctx: &RespondContext) -> Option<GenerateRequest> {
        None
    }

    /// The question for the LLM that judges engagement, for a model-backed brain; `None`: the
    /// brain judges itself with [`Brain::judge`].
    fn judge_request(&self, _persona: &str, _role: &str, _event: &Event) -> Option<ClassifyJob> {
        None
    }

    /// The judgement from the model's label scores for [`Brain::judge_request`].
    fn judge_answer(&self, _scores: &[LabelScore], priority: f64, state: &GateState) -> GateDecision {
        score(priority, state)
    }

    /// For a model-backed brain: the request for the LLM that writes the lesson of a finished
    /// plan (what to keep or change next time), from the rules' evaluation of it; `None`: the
    /// evaluation is the rules' alone.
    fn lesson_request(&self, _ctx: &LessonContext) -> Option<GenerateRequest> {
        None
    }

    /// For a model-backed brain: plans to choose from for `ctx` (the first is the rules brain's)
    /// and the question that asks the model to choose; `None`: [`Brain::formulate_plan`] decides.
    fn plan_request(&self, _ctx: &PlanContext) -> Option<PlanChoice> {
        None
    }
}

/// A constrained choice of plan: every candidate is made of actions of the registry, so any
/// answer is a valid plan, and the model answers with one label, never free text. The question
/// is asked once per order of the candidates in `orders`: small models tend to pick whatever is
/// listed first, so a pick counts only when it is the same plan in every order. The orders are
/// asked one after another, and the next only while the answers so far could still change the
/// plan ([`PlanChoice::settled`]): a pick of the rules plan, or an unsure one, runs the rules
/// plan whatever the other orders say.
#[derive(Debug, Clone)]
pub struct PlanChoice {
    /// The first is the rules brain's plan: what runs when the model is unsure or fails.
    pub candidates: Vec<Plan>,
    /// Each order the candidates are listed in (indices into `candidates`), and its question
    /// (labels `A`, `B`, ... in that order).
    pub orders: Vec<(Vec<usize>, ClassifyJob)>,
}

impl PlanChoice {
    /// The candidates in the order they were listed for the `k`-th question.
    pub fn listed(&self, k: usize) -> Vec<Plan> {
        self.orders[k].0.iter().map(|&i| self.candidates[i].clone()).collect()
    }

    /// The plan each answer picked and by how much its best label leads the second; `None` for
    /// an answer without scores or with a label not asked.
    fn picks(&self, answers: &[Vec<LabelScore>]) -> Vec<Option<(usize, f32)>> {
        (self.orders.iter().zip(answers))
            .map(|((order, job), scores)| {
                let best = scores.first()?;
                let at = job.labels.iter().position(|l| *l == best.label)?;
                Some((order[at], margin(scores).unwrap_or(0.0)))
            })
            .collect()
    }

    /// Whether `answers` (to the first orders, in turn) decide the plan: every order answered,
    /// or the last answer already runs the rules plan whatever the next would be: no scores, a
    /// pick of the rules plan, an unsure one, or one that differs from the first.
    pub fn settled(&self, answers: &[Vec<LabelScore>]) -> bool {
        let picks = self.picks(answers);
        let Some(last) = picks.last() else { return self.orders.is_empty() };
        answers.len() >= self.orders.len()
            || match (picks[0], last) {
                (Some((first, _)), Some((pick, margin))) => *pick == 0 || *pick != first || *margin <= PLAN_CLEAR,
                _ => true,
            }
    }

    /// The chosen plan and a note of why: the model's pick when it is the same plan in every
    /// order and its best label leads the second by more than [`PLAN_CLEAR`] each time, else the
    /// rules brain's. `answers` are the label scores of the questions of `orders`, in turn: all
    /// of them, or those asked until [`PlanChoice::settled`].
    pub fn choose(mut self, answers: &[Vec<LabelScore>]) -> (Plan, String) {
        let picks: Vec<(usize, f32)> = self.picks(answers).into_iter().map_while(|p| p).collect();
        let rules = |c: &mut Vec<Plan>, note: String| (c.swap_remove(0), note);
        if picks.len() < answers.len() || picks.is_empty() {
            return rules(&mut self.candidates, "model gave no plan scores: rules plan".into());
        }
        let first = picks[0].0;
        let least = picks.iter().map(|p| p.1).fold(f32::INFINITY, f32::min);
        if picks.iter().any(|p| p.0 != first) {
            return rules(&mut self.candidates, "model's pick changed with the order of the plans: rules plan".into());
        }
        if least <= PLAN_CLEAR {
            return rules(&mut self.candidates, format!("model unsure of the plan (margin {least:.2}): rules plan"));
        }
        if picks.len() < self.orders.len() {
            let note = if first == 0 {
                format!(
                    "model picked the rules plan (margin {least:.2}), which no other order could change: rules plan"
                )
            } else {
                "model's pick not asked in every order: rules plan".into()
            };
            return rules(&mut self.candidates, note);
        }
        let mut plan = self.candidates.swap_remove(first);
        if first > 0 {
            plan.source = format!("model:{}", plan.source);
        }
        (plan, format!("plan chosen by the model in every order (margin {least:.2})"))
    }
}

/// How a plan goes on after its `call_tool` step `failed` failed with `class`: a transient
/// failure is retried once; a tool that found nothing leaves the answer to what the plan has;
/// a refusal or an unknown failure plans again without the call (up to [`MAX_REPLANS`]), then
/// answers without it. The person asking always gets an answer that says what failed.
fn call_adjustment(plan: &Plan, failed: usize, class: ErrorClass, retried: bool) -> (Adjustment, String) {
    let tool = plan.steps[failed].call.as_ref().map_or("the tool", |c| c.tool.as_str());
    match class {
        ErrorClass::Timeout | ErrorClass::RateLimit if !retried => (
            Adjustment::Contingency(vec![Action::CallTool]),
            format!("{} is transient: call {tool} once more", class.as_str()),
        ),
        ErrorClass::Timeout | ErrorClass::RateLimit => {
            (Adjustment::Continue, format!("{} again: answer without {tool}", class.as_str()))
        }
        ErrorClass::MissingResource => {
            (Adjustment::Continue, format!("{tool} found nothing: answer with what the plan has"))
        }
        ErrorClass::AccessDenied | ErrorClass::Unknown if plan.attempt < MAX_REPLANS => {
            (Adjustment::Replan, format!("{tool} failed ({}): plan again without the call", class.as_str()))
        }
        ErrorClass::AccessDenied | ErrorClass::Unknown => {
            (Adjustment::Continue, format!("{tool} failed ({}) again: answer without it", class.as_str()))
        }
    }
}

/// How far the model's best plan must lead the second, in log-probability, to be taken.
pub const PLAN_CLEAR: f32 = 1.0;

/// The deterministic brain: plans from per-domain templates, adjusts by error class.
#[derive(Debug, Default, Clone, Copy)]
pub struct RulesBrain;

fn step(action: Action) -> Step {
    Step::pending(action)
}

/// A short question that is too vague to answer without asking back.
fn too_vague(text: &str) -> bool {
    let words = text.split_whitespace().filter(|w| !w.starts_with('@')).count();
    text.trim_end().ends_with('?') && words <= 2
}

impl RulesBrain {
    fn template(domain: &str, event: &Event) -> (Vec<Action>, Vec<Criterion>) {
        if too_vague(&event.text) {
            return (vec![Action::AskClarifyingQuestion, Action::PostReply], vec![Criterion::ReplyPosted]);
        }
        match domain {
            "code" | "docs" => (
                vec![Action::RecallMemory, Action::SearchKnowledge, Action::DraftReply, Action::PostReply],
                vec![Criterion::ContextGathered, Criterion::ReplyPosted],
            ),
            _ => (vec![Action::RecallMemory, Action::DraftReply, Action::PostReply], vec![Criterion::ReplyPosted]),
        }
    }
}

impl RulesBrain {
    /// The domain's template, ordered by a proven procedure, without what failed for this event
    /// or for a similar task that failed, and with the references first when the event calls
    /// for them.
    fn plan_of(ctx: &PlanContext) -> Plan {
        if !ctx.avoid.contains(&Action::CallTool)
            && let Some((p, calls)) = tools::procedure_steps(ctx.procedures, ctx.event)
        {
            return Self::tool_plan(ctx, &p.name, calls);
        }
        let domain = ctx.event.domain.as_str();
        let (template, mut criteria) = Self::template(domain, ctx.event);
        let mut actions = template.clone();
        let mut source = format!("template:{domain}");
        // A procedure of the domain that keeps succeeding orders the plan.
        if let Some(p) = ctx.memory.procedure_for(&template) {
            let steps = recall::steps_of(p);
            if steps != actions {
                actions = steps;
                source.push_str("+procedure");
            }
        }
        // A step that failed before is left out when the plan still makes sense without it.
        actions.retain(|a| !ctx.avoid.contains(a) || matches!(a, Action::PostReply | Action::DraftReply));
        // So is a step that failed in a similar task that failed; a step every answer needs
        // gets a recall before it instead, as a check.
        let failed = ctx.memory.failed_steps();
        let before = actions.len();
        actions.retain(|a| !recall::optional(*a) || !failed.iter().any(|(f, _, _)| f == a));
        let mut steered = actions.len() < before;
        let needed_failed = failed.iter().any(|(f, _, _)| !recall::optional(*f) && actions.contains(f));
        let gathers = |v: &[Action]| v.contains(&Action::RecallMemory) || v.contains(&Action::SearchKnowledge);
        if (steered || needed_failed)
            && actions.contains(&Action::DraftReply)
            && !actions.contains(&Action::RecallMemory)
            && !ctx.avoid.contains(&Action::RecallMemory)
            && !failed.iter().any(|(f, _, _)| *f == Action::RecallMemory)
        {
            actions.insert(0, Action::RecallMemory);
            steered = true;
        }
        if steered {
            source.push_str("+experience");
        }
        if !gathers(&actions) {
            criteria.retain(|c| *c != Criterion::ContextGathered);
        }
        // A learned failure of knowledge search in this domain: do not plan it first.
        let search_fails = ctx.learnings.iter().any(|l| {
            l.domain == domain && l.pattern.contains("search_knowledge failed") && l.failures + l.successes >= 3
        });
        if search_fails {
            actions.retain(|a| *a != Action::SearchKnowledge);
            source.push_str("+learned");
        }
        // References the event calls for are opened first, for a plan that writes an answer.
        actions.retain(|a| *a != Action::SelectReference || ctx.references);
        if ctx.references
            && actions.contains(&Action::DraftReply)
            && !actions.contains(&Action::SelectReference)
            && !ctx.avoid.contains(&Action::SelectReference)
        {
            actions.insert(0, Action::SelectReference);
        }
        Plan {
            goal: format!("answer {} in #{} ({})", ctx.event.from, ctx.event.room, ctx.role),
            steps: actions.into_iter().map(step).collect(),
            contingencies: vec![
                (ErrorClass::Timeout, vec![]),
                (ErrorClass::RateLimit, vec![]),
                (ErrorClass::MissingResource, vec![Action::RecallMemory]),
            ],
            criteria,
            source,
            attempt: ctx.attempt,
        }
    }
}

impl RulesBrain {
    /// A procedure's plan: its calls first, then the answer drafted from what they returned.
    fn tool_plan(ctx: &PlanContext, procedure: &str, calls: Vec<Step>) -> Plan {
        let mut steps = calls;
        steps.extend([Action::DraftReply, Action::PostReply].map(step));
        Plan {
            goal: format!("answer {} in #{} ({}) with what the tools return", ctx.event.from, ctx.event.room, ctx.role),
            steps,
            contingencies: vec![(ErrorClass::Timeout, vec![]), (ErrorClass::RateLimit, vec![])],
            criteria: vec![Criterion::ContextGathered, Criterion::ReplyPosted],
            source: format!("procedure:{procedure}"),
            attempt: ctx.attempt,
        }
    }
}

impl Brain for RulesBrain {
    fn name(&self) -> &'static str {
        "rules"
    }

    fn judge(&self, _event: &Event, priority: f64, state: &GateState) -> GateDecision {
        score(priority, state)
    }

    fn formulate_plan(&self, ctx: &PlanContext) -> Plan {
        RulesBrain::plan_of(ctx)
    }

    fn adjust_plan(&self, record: &PlanRecord, failed: usize, class: ErrorClass) -> (Adjustment, String) {
        let plan = &record.plan;
        let action = plan.steps[failed].action;
        let retried = plan.steps[..failed].iter().any(|s| s.contingency && s.action == action)
            || plan.steps.get(failed).is_some_and(|s| s.contingency);
        if action == Action::CallTool {
            return call_adjustment(plan, failed, class, retried);
        }
        match class {
            // Transient: the contingency is the same step again, once.
            ErrorClass::Timeout | ErrorClass::RateLimit if !retried => (
                Adjustment::Contingency(vec![action]),
                format!("{} is transient: retry {} once", class.as_str(), action.as_str()),
            ),
            ErrorClass::Timeout | ErrorClass::RateLimit => {
                if matches!(action, Action::PostReply | Action::DraftReply) {
                    (
                        Adjustment::Abort,
                        format!("{} again after a retry of {}: give up", class.as_str(), action.as_str()),
                    )
                } else {
                    (Adjustment::Continue, format!("{} again: go on without {}", class.as_str(), action.as_str()))
                }
            }
            // Context that is not there: fall back to the contingency, or go on without it.
            ErrorClass::MissingResource => match action {
                Action::SearchKnowledge | Action::StudyTopic => {
                    let fallback = plan
                        .contingencies
                        .iter()
                        .find(|(c, _)| *c == class)
                        .map(|(_, a)| a.clone())
                        .unwrap_or_default();
                    let recalled = plan.steps[..failed]
                        .iter()
                        .any(|s| s.action == Action::RecallMemory && s.state == StepState::Done);
                    if recalled || fallback.is_empty() {
                        (
                            Adjustment::Continue,
                            format!("{} found nothing: answer from what I recalled", action.as_str()),
                        )
                    } else {
                        (
                            Adjustment::Contingency(fallback),
                            format!("{} found nothing: recall memory instead", action.as_str()),
                        )
                    }
                }
                Action::RecallMemory => (Adjustment::Continue, "nothing to recall: answer without it".into()),
                Action::SelectReference => {
                    (Adjustment::Continue, "nothing to read in the references: answer without them".into())
                }
                _ => (Adjustment::Abort, format!("{} needs what is missing", action.as_str())),
            },
            ErrorClass::AccessDenied if action == Action::SelectReference => {
                (Adjustment::Continue, "not allowed to read the references: answer without them".into())
            }
            ErrorClass::AccessDenied => (Adjustment::Abort, format!("not allowed to {}", action.as_str())),
            ErrorClass::Unknown if plan.attempt < MAX_REPLANS => {
                (Adjustment::Replan, format!("{} failed for an unknown reason: plan again without it", action.as_str()))
            }
            ErrorClass::Unknown => (Adjustment::Abort, format!("{} replans did not help", MAX_REPLANS)),
        }
    }

    fn evaluate_outcome(&self, record: &PlanRecord) -> Evaluation {
        let plan = &record.plan;
        let done = |a: Action| plan.steps.iter().any(|s| s.action == a && s.state == StepState::Done);
        let (mut met, mut missed) = (Vec::new(), Vec::new());
        for c in &plan.criteria {
            let ok = match c {
                Criterion::ReplyPosted => done(Action::PostReply),
                Criterion::ContextGathered => {
                    done(Action::RecallMemory) || done(Action::SearchKnowledge) || done(Action::CallTool)
                }
            };
            if ok { met.push(*c) } else { missed.push(*c) }
        }
        let success = done(Action::PostReply) || (missed.is_empty() && !plan.criteria.is_empty());
        let what_worked: Vec<String> =
            plan.steps.iter().filter(|s| s.state == StepState::Done).map(|s| s.action.as_str().to_string()).collect();
        let mistakes: Vec<String> = record
            .adjustments
            .iter()
            .map(|a| format!("{} failed ({}): {}", a.action.as_str(), a.class.as_str(), a.adjustment.kind()))
            .collect();
        let pattern = match record.adjustments.first() {
            None => format!("{}: {} worked", record.domain, what_worked.join(" -> ")),
            Some(a) => format!(
                "{}: {} failed ({}), {} {}",
                record.domain,
                a.action.as_str(),
                a.class.as_str(),
                a.adjustment.kind(),
                if success { "and recovered" } else { "and failed" }
            ),
        };
        Evaluation { success, criteria_met: met, criteria_missed: missed, what_worked, mistakes, pattern }
    }

    /// The grounded reply: the material that bears on the question, quoted and cited.
    fn respond(&self, ctx: &RespondContext) -> String {
        let input = ctx.reply();
        let pieces = reply::ground(&input);
        reply::grounded(&input, &input.ask, &pieces) + &recall::rules_additions(ctx.memory)
    }
}

#[cfg(test)]
mod tests;
