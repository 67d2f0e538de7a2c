//! The scheduler's interface: submit, grant, done.
//!
//! Personas submit tasks through a [`SchedulerHandle`]: the task goes into a lock-free
//! queue of its class and at most one `Wake` message is in the scheduler's mailbox at a
//! time, so a flood of submissions never queues in front of anything in the mailbox.
//! The scheduler actor (crate `mindfleet-actors`, whose module doc states the policy)
//! alone drains the queues, orders the tasks and sends `PersonaMsg::Granted` to the owner.
//!
//! What the owner does with a [`Grant`] depends on its [`Outcome`]:
//!
//! - `Run`: run the task as submitted, then call [`SchedulerHandle::done`] (or
//!   [`SchedulerHandle::done_with_tokens`] with the model tokens it used, which refunds the
//!   rest of its reservation).
//! - `RulesOnly(reason)`: the budget has no room for a model call; run the step with the
//!   rules brain (the grant holds a cheap slot), then call `done`.
//! - `Skipped(reason)`: do not run it and do not call `done`: no slot is held.
//!
//! `done` goes through a lock-free queue too, behind the same coalesced `Wake`.

#[cfg(feature = "actors")]
use std::sync::Arc;
#[cfg(feature = "actors")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "actors")]
use std::time::{Duration, Instant};

#[cfg(feature = "actors")]
use crossbeam_queue::SegQueue;
#[cfg(feature = "actors")]
use ractor::{ActorRef, RpcReplyPort};
#[cfg(feature = "actors")]
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

pub mod stats;

#[cfg(feature = "actors")]
use crate::adapter::TrainerMsg;
use crate::config::PersonaConfig;
#[cfg(feature = "actors")]
use crate::messages::PersonaMsg;
#[cfg(feature = "actors")]
pub use crate::task::now;
pub use crate::task::{Class, Grant, Outcome, SkipReason, Slot, TaskId};
pub use stats::{
    BudgetStats, ClassStats, CostReport, CostRow, CostSeries, MAX_COST_BUCKETS, SchedulerStats, SkipCounts,
};

#[cfg(feature = "actors")]
/// Who is told when a task is granted.
#[derive(Debug, Clone)]
pub enum Owner {
    Persona(ActorRef<PersonaMsg>),
    /// The fleet's trainer: a training run is background work like a persona's.
    Trainer(ActorRef<TrainerMsg>),
    /// A plain channel (benchmarks, tests of the scheduler itself).
    Channel(crossbeam_channel::Sender<Grant>),
}

#[cfg(feature = "actors")]
impl Owner {
    /// Delivers the grant; false when the owner is gone.
    pub fn grant(&self, grant: Grant) -> bool {
        match self {
            Owner::Persona(a) => a.cast(PersonaMsg::Granted(grant)).is_ok(),
            Owner::Trainer(a) => a.cast(TrainerMsg::Granted(grant)).is_ok(),
            Owner::Channel(tx) => tx.send(grant).is_ok(),
        }
    }

    /// Asks for the slot of `task` back; false when the owner cannot be asked (or is gone).
    pub fn preempt(&self, task: TaskId) -> bool {
        match self {
            Owner::Persona(a) => a.cast(PersonaMsg::Preempt(task)).is_ok(),
            Owner::Trainer(a) => a.cast(TrainerMsg::Preempt(task)).is_ok(),
            Owner::Channel(_) => false,
        }
    }
}

#[cfg(feature = "actors")]
/// A unit of cognitive work waiting for a grant.
#[derive(Debug, Clone)]
pub struct Task {
    pub id: TaskId,
    pub persona: Arc<str>,
    pub class: Class,
    /// 0..=1 within the class.
    pub priority: f64,
    pub slot: Slot,
    /// What it is, for stats and traces (`gate`, `respond`, ...).
    pub label: &'static str,
    pub owner: Owner,
    /// When it was submitted, on the scheduler's clock ([`now`]); aging and promotion count from it.
    pub submitted: Instant,
    /// Latest time the task is still useful to start; granting it later is a counted miss.
    pub deadline: Option<Instant>,
    /// Model tokens the task may use, reserved against the budgets until `done` (0: no model).
    /// Only tasks with `max_tokens > 0` count against the budgets: one inference each.
    pub max_tokens: u32,
    /// Subject to its persona's cadence: it starts a new piece of self-paced work (a `Work`
    /// plan, a `Background` pass). Never applies to `Urgent` tasks.
    pub paced: bool,
    /// The room the work is for, for cost accounting.
    pub room: Option<Arc<str>>,
    /// A `Background` task whose slot the owner gives back when asked (`PersonaMsg::Preempt`)
    /// because higher-class work waits for it.
    pub preemptible: bool,
    /// What becomes of this model call when the budget has no room for it.
    pub over_budget: OverBudget,
    /// A tool call (`server.tool`): one call of the budget's `inferences_per_hour`, no tokens,
    /// counted by tool in the cost report.
    pub tool: Option<Arc<str>>,
}

/// What becomes of a model call the budget has no room for, by who waits on it. `Urgent` calls
/// run on the rules brain whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OverBudget {
    /// Nobody waits on it (a persona's message, self-paced work): it is skipped.
    #[default]
    Skip,
    /// A human waits on the work it is part of: it runs on the rules brain instead.
    Rules,
    /// A human waits on its answer (the reply): above priority 0.6 it waits for budget up to the
    /// scheduler's `queue_deadline` from its submission, then runs on the rules brain; at or
    /// below 0.6 it runs on the rules brain at once.
    Queue,
}

#[cfg(feature = "actors")]
impl Task {
    /// A task with no deadline and no model call.
    pub fn new(persona: Arc<str>, class: Class, priority: f64, slot: Slot, label: &'static str, owner: Owner) -> Task {
        Task {
            id: SchedulerHandle::next_id(),
            persona,
            class,
            priority,
            slot,
            label,
            owner,
            submitted: now(),
            deadline: None,
            max_tokens: 0,
            paced: false,
            room: None,
            preemptible: false,
            over_budget: OverBudget::Skip,
            tool: None,
        }
    }

    /// The same task under the id `id` (one of a block from [`SchedulerHandle::id_block`]).
    pub fn with_id(mut self, id: TaskId) -> Task {
        self.id = id;
        self
    }

    /// The same task, `over_budget` when the budget has no room for it.
    pub fn over_budget(mut self, over_budget: OverBudget) -> Task {
        self.over_budget = over_budget;
        self
    }

    /// The same task, its slot given back when higher-class work waits for one.
    pub fn preemptible(mut self) -> Task {
        self.preemptible = true;
        self
    }

    /// The same task, paced by its persona's cadence.
    pub fn paced(mut self) -> Task {
        self.paced = true;
        self
    }

    /// The same task, accounted to `room`.
    pub fn in_room(mut self, room: &str) -> Task {
        self.room = Some(Arc::from(room));
        self
    }

    /// The same task with a deadline `within` after its submission.
    pub fn within(mut self, within: Duration) -> Task {
        self.deadline = Some(self.submitted + within);
        self
    }

    /// The same task as a model call of at most `max_tokens` tokens (counted against the budgets).
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Task {
        self.max_tokens = max_tokens;
        self
    }
}

/// A persona's model budget over any sliding hour (from its `PersonaConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersonaBudget {
    pub inferences_per_hour: u64,
    pub tokens_per_hour: u64,
}

impl From<&PersonaConfig> for PersonaBudget {
    fn from(p: &PersonaConfig) -> Self {
        PersonaBudget { inferences_per_hour: p.inferences_per_hour, tokens_per_hour: p.tokens_per_hour }
    }
}

/// Messages of the scheduler actor.
#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum SchedulerMsg {
    /// New submissions or `done`s are in the queues (coalesced: at most one in flight).
    Wake,
    /// A granted task finished; its slot is free and the tokens it did not use are refunded.
    /// ([`SchedulerHandle::done`] sends it through the `done` queue instead; both are handled.)
    Done {
        task: TaskId,
        tokens_used: u32,
    },
    /// How often a persona's non-urgent work may be granted (its cadence, from mood and budget).
    /// `Duration::ZERO` removes the limit.
    Cadence {
        persona: Arc<str>,
        interval: std::time::Duration,
    },
    /// Free every slot and drop every queued task of a persona (it restarted or stopped).
    Release(Arc<str>),
    Stats(RpcReplyPort<SchedulerStats>),
    /// Sets (or with `None` removes) a persona's budget; without one only the fleet's applies.
    Budget {
        persona: Arc<str>,
        budget: Option<PersonaBudget>,
    },
    /// Model use over the last `since` (at most an hour, the budget window); with `buckets`
    /// above 0 (at most [`MAX_COST_BUCKETS`]), each persona's tokens over time too.
    Cost {
        since: Duration,
        buckets: u32,
        reply: RpcReplyPort<CostReport>,
    },
    /// Internal: the scheduler's own timer (a cadence or a promotion is due at this instant).
    Tick(Instant),
}

#[cfg(feature = "actors")]
/// The shared half of the scheduler: one queue per class, the finished tasks and the
/// wake-up flag.
#[derive(Debug)]
pub struct SubmitQueues {
    pub queues: [SegQueue<Task>; 4],
    /// `(task, tokens_used)` of finished tasks.
    pub done: SegQueue<(TaskId, u32)>,
    pub wake_pending: AtomicBool,
}

#[cfg(feature = "actors")]
impl SubmitQueues {
    /// Sends a `Wake` unless one is already pending.
    fn wake(&self, actor: &ActorRef<SchedulerMsg>) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            let _ = actor.cast(SchedulerMsg::Wake);
        }
    }
}

#[cfg(feature = "actors")]
/// What a persona holds to submit work.
#[derive(Debug, Clone)]
pub struct SchedulerHandle {
    shared: Arc<SubmitQueues>,
    actor: ActorRef<SchedulerMsg>,
}

#[cfg(feature = "actors")]
/// The next task id anybody is given.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
/// How many task ids [`SchedulerHandle::id_block`] sets aside.
pub const ID_BLOCK: TaskId = 1 << 32;

#[cfg(feature = "actors")]
impl SchedulerHandle {
    pub fn new(shared: Arc<SubmitQueues>, actor: ActorRef<SchedulerMsg>) -> Self {
        SchedulerHandle { shared, actor }
    }

    pub fn queues() -> Arc<SubmitQueues> {
        Arc::new(SubmitQueues {
            queues: Default::default(),
            done: SegQueue::new(),
            wake_pending: AtomicBool::new(false),
        })
    }

    /// Queues a task; at most one wake-up message is ever pending.
    pub fn submit(&self, task: Task) {
        self.shared.queues[task.class as usize].push(task);
        self.shared.wake(&self.actor);
    }

    /// The task is over; it used no model tokens.
    pub fn done(&self, task: TaskId) {
        self.done_with_tokens(task, 0);
    }

    /// The task is over and used `tokens_used` model tokens; the rest of its reservation is
    /// refunded. Only for `Run` and `RulesOnly` grants (a skipped task holds nothing).
    pub fn done_with_tokens(&self, task: TaskId, tokens_used: u32) {
        self.shared.done.push((task, tokens_used));
        self.shared.wake(&self.actor);
    }

    /// From now on the persona's non-urgent tasks are granted at most once per `interval`
    /// (`Duration::ZERO`: no limit).
    pub fn set_cadence(&self, persona: Arc<str>, interval: std::time::Duration) {
        let _ = self.actor.cast(SchedulerMsg::Cadence { persona, interval });
    }

    /// Sets or removes a persona's budget.
    pub fn set_budget(&self, persona: Arc<str>, budget: Option<PersonaBudget>) {
        let _ = self.actor.cast(SchedulerMsg::Budget { persona, budget });
    }

    pub fn release(&self, persona: Arc<str>) {
        let _ = self.actor.cast(SchedulerMsg::Release(persona));
    }

    pub fn actor(&self) -> &ActorRef<SchedulerMsg> {
        &self.actor
    }

    /// A process-unique task id.
    pub fn next_id() -> TaskId {
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    }

    /// The first of [`ID_BLOCK`] task ids nobody else is given: an owner that numbers its own
    /// tasks (a persona's lifecycle, which reads no shared counter) takes them from it.
    pub fn id_block() -> TaskId {
        NEXT_ID.fetch_add(ID_BLOCK, Ordering::Relaxed)
    }
}
