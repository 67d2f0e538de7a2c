//! Where the event in hand is: one [`Phase`], each carrying what it needs, so that an event
//! judged, waiting for its turn and worked on at once cannot be written down.
//!
//! ```text
//!  Idle --next--> Enriching --enriched--> (gate) --fast path / thermal--> decided
//!    ^                                       \--brain's judgement--> Judging --judged--> decided
//!    |    decided: Waiting (a shared room's turn) --turn--> engage or finish
//!    |             engage: Recalling (long-term memory) --recalled--> Working (plan, steps,
//!    |                     evaluation) --complete--> finish
//!    +------------------------------------------------------------------- finish
//! ```
//!
//! The functions here are pure, as all of the lifecycle is.

use std::collections::HashMap;

use mindfleet_core::conversation::{Recalled, Said};
use mindfleet_core::event::Event;
use mindfleet_core::knowledge::Source;
use mindfleet_core::llm::ToolRound;
use mindfleet_core::messages::{Claim, Delivery, Turn};
use mindfleet_core::record::{Action, OutboxEntry, PlanRecord, Verdict, WmEntry};
use mindfleet_core::sched::{Class, TaskId};

use crate::brain::{PlanChoice, Recollection};
use crate::gate::{GateDecision, GateState};

/// An event as the gate chain saw it: the delivery, the inbox's backlog behind it, its
/// priority and the persona's state then.
pub(crate) struct Seen {
    pub delivery: Delivery,
    pub backlog: usize,
    pub priority: f64,
    pub state: GateState,
}

/// An event the gate chain decided: what it saw and its decision. These travel together to the
/// turn, the plan and the journal.
pub(crate) struct Gated {
    pub seen: Seen,
    pub gate: GateDecision,
}

/// The event in hand.
#[derive(Default)]
pub(crate) enum Phase {
    /// None: the next one is asked of the inbox.
    #[default]
    Idle,
    /// In the enrichment pipeline, before the gate.
    Enriching { delivery: Delivery, backlog: usize },
    /// The fast path and the thermal stage passed it on: waiting for its `gate` task (the
    /// brain's judgement is cognitive work and runs as a scheduler task like any other), or for
    /// the model's answer to it.
    Judging { seen: Seen, task: TaskId },
    /// Decided; a shared room's coordinator has not granted its turn yet.
    Waiting {
        gated: Gated,
        /// The claim, to send again while its answer is overdue (boxed: the largest phase
        /// otherwise).
        claim: Box<Claim>,
    },
    /// Engaged: recalling long-term memory (off the persona's loop) before the plan.
    Recalling { gated: Gated },
    /// Engaged: its plan runs.
    Working(Box<Work>),
}

/// The work on an engaged event: its plan and what the steps gathered.
pub(crate) struct Work {
    pub gated: Gated,
    pub class: Class,
    /// The scheduler task of the step being run (or of the plan's choice, or the evaluation).
    pub task: TaskId,
    pub record: PlanRecord,
    /// Index of the step being run (or next to run).
    pub cursor: usize,
    pub recalled: Vec<WmEntry>,
    /// What conversation memory recalled.
    pub conversation: Vec<Recalled>,
    /// The room's latest messages, oldest first (read by the recall step).
    pub room: Vec<Said>,
    /// What the knowledge search found.
    pub found: Vec<Source>,
    pub draft: Option<String>,
    /// The model's words of the draft as it wrote them (the draft adds the mention): the
    /// lesson's question goes on from them.
    pub answer: Option<String>,
    pub reply: Option<(OutboxEntry, Event)>,
    /// Actions that failed in replaced plans.
    pub avoid: Vec<Action>,
    /// What the decision's reason must say besides the gate's (steps run without a model).
    pub notes: Vec<String>,
    /// The brain that wrote the draft (the rules brain when the model failed).
    pub drafted_by: &'static str,
    /// Model tokens used by the step being run.
    pub tokens: u32,
    /// Candidate plans the model is to choose from before the first step (`record.plan` is the
    /// rules brain's meanwhile).
    pub choosing: Option<PlanChoice>,
    /// What was recalled of long-term memory before the plan.
    pub memory: Recollection,
    /// Why the loop breaker stopped the step in hand, if it did: the plan makes no more calls.
    pub breaker: Option<String>,
    /// The step in hand made a tool call (its task counts as one call of the budget).
    pub called: bool,
    /// The tool the model chose for the step in hand, and by what margin.
    pub chosen: Option<(String, f32)>,
    /// What a tool said of the model's arguments, shown to the model once when it fills them
    /// again (then `corrected`).
    pub refused: Option<String>,
    pub corrected: bool,
    /// The step in hand is to be made again with arguments the model fills anew (`refused`).
    pub refill: Option<String>,
    /// The rounds of the model's own tool calling for this event: the calls it asked for and
    /// what each returned, shown to it at its next turn.
    pub rounds: Vec<ToolRound>,
    /// What a tool said of the model's own call is to be shown at its next turn: the plan goes
    /// on to it (once per event, see `corrected`).
    pub shown: Option<String>,
}

/// How a plan ended, for the journal: its record, whether it failed, the notes its reason
/// carries, and the reply it posts.
pub(crate) struct PlanEnd {
    pub record: PlanRecord,
    pub failed: bool,
    pub notes: Vec<String>,
    pub reply: Option<(OutboxEntry, Event)>,
}

/// What a task of the lifecycle was submitted for, until its grant comes (a task is granted
/// once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskFor {
    /// The event in hand: its judgement, the choice of its plan, a step or the evaluation (its
    /// phase says which).
    Event,
    /// Taking a deferred event up.
    TakeUp,
}

/// What a grant is to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Job {
    /// The brain's judgement of the event being judged.
    Judge,
    /// The model's choice of plan for the event worked on.
    ChoosePlan,
    /// A step of the plan.
    Step(Action),
    /// The evaluation of the plan, all its steps over.
    Evaluate,
    TakeUp,
}

impl Job {
    /// Its label in the `task` span.
    pub fn label(self) -> &'static str {
        match self {
            Job::Judge => "gate",
            Job::ChoosePlan => "plan",
            Job::Step(action) => action.as_str(),
            Job::Evaluate => "evaluate",
            Job::TakeUp => "take_up",
        }
    }
}

/// What the grant of `task` runs, taking the task off the book; `None` for a task nothing
/// waits for any more (a task of an event that is over, or one from before a restart).
pub(crate) fn job_of(tasks: &mut HashMap<TaskId, TaskFor>, phase: &Phase, task: TaskId) -> Option<Job> {
    match tasks.remove(&task)? {
        TaskFor::Event => phase.job(task),
        TaskFor::TakeUp => Some(Job::TakeUp),
    }
}

impl Seen {
    pub fn decided(self, gate: GateDecision) -> Gated {
        Gated { seen: self, gate }
    }
}

impl Gated {
    pub fn wants(&self) -> bool {
        self.gate.verdict == Verdict::Engage
    }

    /// What the coordinator's answer makes of it: `true` to engage (with the gate's decision,
    /// or the coordinator's when it assigned the event), `false` to finish (silent, the
    /// coordinator's "redundant" when the persona wanted it).
    pub fn turn(mut self, t: &Turn) -> (Gated, bool) {
        // A turn the coordinator gave (nobody claimed it, or it passed on) says why.
        let wants = self.wants() && !t.assigned;
        let coordinated = |gate: &GateDecision, verdict, rule| GateDecision {
            verdict,
            stage: "coordinator",
            rule,
            threshold: gate.threshold,
            score: gate.score,
            note: t.reason.clone(),
        };
        match (t.granted, wants) {
            (true, true) => (self, true),
            (true, false) => {
                self.gate = coordinated(&self.gate, Verdict::Engage, "assigned");
                (self, true)
            }
            (false, true) => {
                self.gate = coordinated(&self.gate, Verdict::Ignore, "redundant");
                (self, false)
            }
            (false, false) => (self, false),
        }
    }
}

impl Work {
    pub fn new(gated: Gated, class: Class, record: PlanRecord, choosing: Option<PlanChoice>) -> Self {
        Work {
            gated,
            class,
            task: 0,
            record,
            cursor: 0,
            recalled: Vec::new(),
            conversation: Vec::new(),
            room: Vec::new(),
            found: Vec::new(),
            draft: None,
            reply: None,
            avoid: Vec::new(),
            notes: Vec::new(),
            drafted_by: "rules",
            answer: None,
            tokens: 0,
            choosing,
            memory: Recollection::default(),
            breaker: None,
            called: false,
            chosen: None,
            refused: None,
            corrected: false,
            refill: None,
            rounds: Vec::new(),
            shown: None,
        }
    }

    pub fn event(&self) -> &Event {
        &self.gated.seen.delivery.event
    }

    /// What its current task runs.
    pub fn job(&self) -> Job {
        if self.choosing.is_some() {
            return Job::ChoosePlan;
        }
        self.record.plan.steps.get(self.cursor).map_or(Job::Evaluate, |s| Job::Step(s.action))
    }
}

impl Phase {
    /// The delivery in hand, in whatever phase.
    pub fn delivery(&self) -> Option<&Delivery> {
        match self {
            Phase::Idle => None,
            Phase::Enriching { delivery, .. } => Some(delivery),
            Phase::Judging { seen, .. } => Some(&seen.delivery),
            Phase::Waiting { gated, .. } => Some(&gated.seen.delivery),
            Phase::Recalling { gated } => Some(&gated.seen.delivery),
            Phase::Working(w) => Some(&w.gated.seen.delivery),
        }
    }

    /// What a grant of `task` runs for the event in hand, if the task is its current one.
    pub fn job(&self, task: TaskId) -> Option<Job> {
        match self {
            Phase::Judging { task: t, .. } if *t == task => Some(Job::Judge),
            Phase::Working(w) if w.task == task => Some(w.job()),
            _ => None,
        }
    }

    /// The event out of the enrichment pipeline of delivery `seq` (the phase is then idle).
    pub fn take_enriched(&mut self, seq: u64) -> Option<(Delivery, usize)> {
        match std::mem::take(self) {
            Phase::Enriching { delivery, backlog } if delivery.seq == seq => Some((delivery, backlog)),
            other => {
                *self = other;
                None
            }
        }
    }

    /// The event being judged by `task`.
    pub fn judging(&self, task: TaskId) -> Option<&Seen> {
        match self {
            Phase::Judging { seen, task: t } if *t == task => Some(seen),
            _ => None,
        }
    }

    /// The event judged by `task`, taken out to be decided (the phase is then idle).
    pub fn take_judged(&mut self, task: TaskId) -> Option<Seen> {
        match std::mem::take(self) {
            Phase::Judging { seen, task: t } if t == task => Some(seen),
            other => {
                *self = other;
                None
            }
        }
    }

    /// The event `event_id` waiting for its turn, and its claim.
    pub fn waiting_mut(&mut self, event_id: &str) -> Option<(&Gated, &mut Claim)> {
        match self {
            Phase::Waiting { gated, claim } if gated.seen.delivery.event.id == event_id => Some((gated, &mut **claim)),
            _ => None,
        }
    }

    /// The event `event_id` that waited for its turn, taken out (the phase is then idle).
    pub fn take_waiting(&mut self, event_id: &str) -> Option<Gated> {
        match std::mem::take(self) {
            Phase::Waiting { gated, .. } if gated.seen.delivery.event.id == event_id => Some(gated),
            other => {
                *self = other;
                None
            }
        }
    }

    /// The event `event_id` engaged and recalling long-term memory, taken out to be planned
    /// (the phase is then idle).
    pub fn take_recalling(&mut self, event_id: &str) -> Option<Gated> {
        match std::mem::take(self) {
            Phase::Recalling { gated } if gated.seen.delivery.event.id == event_id => Some(gated),
            other => {
                *self = other;
                None
            }
        }
    }

    /// The work on the event in hand, whatever its task.
    pub fn working(&self) -> Option<&Work> {
        match self {
            Phase::Working(w) => Some(w),
            _ => None,
        }
    }

    pub fn working_mut(&mut self) -> Option<&mut Work> {
        match self {
            Phase::Working(w) => Some(w),
            _ => None,
        }
    }

    /// The work whose current task is `task`.
    pub fn work_mut(&mut self, task: TaskId) -> Option<&mut Work> {
        self.working_mut().filter(|w| w.task == task)
    }

    /// The work whose current task is `task`, taken out while the persona runs a step on it
    /// with the rest of its state (the phase is idle until it is put back with
    /// [`Phase::Working`]; `None` leaves the phase as it was).
    pub fn take_work(&mut self, task: TaskId) -> Option<Box<Work>> {
        match std::mem::take(self) {
            Phase::Working(w) if w.task == task => Some(w),
            other => {
                *self = other;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
