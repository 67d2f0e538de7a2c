//! The scheduler's interface: submit, grant, done.
//!
//! Personas submit tasks through a [`SchedulerHandle`]: the task goes into a lock-free
//! queue of its class and at most one `Wake` message is in the scheduler's mailbox at a
//! time, so a flood of submissions never queues in front of anything in the mailbox.
//! The scheduler actor (crate `mindfleet-actors`) alone drains the queues, orders the
//! tasks and sends `PersonaMsg::Granted` to the owner; the owner answers with
//! [`SchedulerHandle::done`] when the step is over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crossbeam_queue::SegQueue;
use ractor::{ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

use crate::messages::PersonaMsg;

/// Priority classes, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Urgent = 0,
    Interactive = 1,
    Work = 2,
    Background = 3,
}

impl Class {
    pub const ALL: [Class; 4] = [Class::Urgent, Class::Interactive, Class::Work, Class::Background];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Urgent => "urgent",
            Class::Interactive => "interactive",
            Class::Work => "work",
            Class::Background => "background",
        }
    }
}

/// Which pool of concurrency a task draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Slot {
    /// Model inference: the scarce resource.
    Inference,
    /// Everything cheap (rules, memory, storage requests).
    Cheap,
}

pub type TaskId = u64;

/// Who is told when a task is granted.
#[derive(Debug, Clone)]
pub enum Owner {
    Persona(ActorRef<PersonaMsg>),
    /// A plain channel (benchmarks, tests of the scheduler itself).
    Channel(crossbeam_channel::Sender<Grant>),
}

impl Owner {
    /// Delivers the grant; false when the owner is gone.
    pub fn grant(&self, grant: Grant) -> bool {
        match self {
            Owner::Persona(a) => a.cast(PersonaMsg::Granted(grant)).is_ok(),
            Owner::Channel(tx) => tx.send(grant).is_ok(),
        }
    }
}

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
    pub submitted: Instant,
    /// Latest time the task is still useful to start; granting it later is a counted miss.
    pub deadline: Option<Instant>,
    /// Model tokens the task may use, reserved against the budgets until `done` (0: no model).
    pub max_tokens: u32,
}

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
            submitted: Instant::now(),
            deadline: None,
            max_tokens: 0,
        }
    }
}

/// Why a task was not run as submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Above the soft limit of the token budget and priority <= 0.8.
    SoftTokenBudget,
    /// Above the soft limit of the call budget and priority <= 0.6.
    SoftCallBudget,
    /// The hard limit would be crossed.
    HardBudget,
}

/// What the owner may do with a granted task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Run it as submitted; call `done` after.
    Run,
    /// Run it without a model (the `rules` brain); call `done` after.
    RulesOnly(SkipReason),
    /// Do not run it; no slot is held, so no `done`.
    Skipped(SkipReason),
}

/// The scheduler's answer to one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub task: TaskId,
    pub slot: Slot,
    pub class: Class,
    /// Time the task waited, microseconds.
    pub waited_us: u64,
    pub outcome: Outcome,
    /// Granted after its deadline.
    pub deadline_missed: bool,
}

/// Messages of the scheduler actor.
#[derive(Debug, RactorMessage)]
pub enum SchedulerMsg {
    /// New submissions are in the queues (coalesced: at most one in flight).
    Wake,
    /// A granted task finished; its slot is free and the tokens it did not use are refunded.
    Done {
        task: TaskId,
        tokens_used: u32,
    },
    /// How often a persona's non-urgent work may be granted (its cadence, from mood and budget).
    Cadence {
        persona: Arc<str>,
        interval: std::time::Duration,
    },
    /// Free every slot and drop every queued task of a persona (it restarted or stopped).
    Release(Arc<str>),
    Stats(RpcReplyPort<SchedulerStats>),
}

/// The shared half of the scheduler: one queue per class and the wake-up flag.
#[derive(Debug)]
pub struct SubmitQueues {
    pub queues: [SegQueue<Task>; 4],
    pub wake_pending: AtomicBool,
}

/// What a persona holds to submit work.
#[derive(Debug, Clone)]
pub struct SchedulerHandle {
    shared: Arc<SubmitQueues>,
    actor: ActorRef<SchedulerMsg>,
}

impl SchedulerHandle {
    pub fn new(shared: Arc<SubmitQueues>, actor: ActorRef<SchedulerMsg>) -> Self {
        SchedulerHandle { shared, actor }
    }

    pub fn queues() -> Arc<SubmitQueues> {
        Arc::new(SubmitQueues { queues: Default::default(), wake_pending: AtomicBool::new(false) })
    }

    /// Queues a task; at most one wake-up message is ever pending.
    pub fn submit(&self, task: Task) {
        self.shared.queues[task.class as usize].push(task);
        if !self.shared.wake_pending.swap(true, Ordering::AcqRel) {
            let _ = self.actor.cast(SchedulerMsg::Wake);
        }
    }

    /// The task is over; it used no model tokens.
    pub fn done(&self, task: TaskId) {
        self.done_with_tokens(task, 0);
    }

    pub fn done_with_tokens(&self, task: TaskId, tokens_used: u32) {
        let _ = self.actor.cast(SchedulerMsg::Done { task, tokens_used });
    }

    pub fn set_cadence(&self, persona: Arc<str>, interval: std::time::Duration) {
        let _ = self.actor.cast(SchedulerMsg::Cadence { persona, interval });
    }

    pub fn release(&self, persona: Arc<str>) {
        let _ = self.actor.cast(SchedulerMsg::Release(persona));
    }

    pub fn actor(&self) -> &ActorRef<SchedulerMsg> {
        &self.actor
    }

    /// A process-unique task id.
    pub fn next_id() -> TaskId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassStats {
    pub queued: usize,
    pub granted: u64,
    /// Longest current wait in this class, milliseconds.
    pub oldest_wait_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SchedulerStats {
    pub urgent: ClassStats,
    pub interactive: ClassStats,
    pub work: ClassStats,
    pub background: ClassStats,
    pub running_inference: usize,
    pub running_cheap: usize,
    pub inference_slots: usize,
    pub cheap_slots: usize,
    pub granted: u64,
    pub done: u64,
    /// Grants whose owner was gone, and tasks dropped by `Release`.
    pub released: u64,
    /// Tasks finished per second since start.
    pub throughput_per_s: f64,
    pub aging_per_30s: f64,
}

impl SchedulerStats {
    pub fn class_mut(&mut self, c: Class) -> &mut ClassStats {
        match c {
            Class::Urgent => &mut self.urgent,
            Class::Interactive => &mut self.interactive,
            Class::Work => &mut self.work,
            Class::Background => &mut self.background,
        }
    }

    pub fn queued(&self) -> usize {
        self.urgent.queued + self.interactive.queued + self.work.queued + self.background.queued
    }
}
