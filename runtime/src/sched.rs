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
}

/// Permission to run one task now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub task: TaskId,
    pub slot: Slot,
    pub class: Class,
    /// Time the task waited, microseconds.
    pub waited_us: u64,
}

/// Messages of the scheduler actor.
#[derive(Debug, RactorMessage)]
pub enum SchedulerMsg {
    /// New submissions are in the queues (coalesced: at most one in flight).
    Wake,
    /// A granted task finished; its slot is free.
    Done(TaskId),
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

    pub fn done(&self, task: TaskId) {
        let _ = self.actor.cast(SchedulerMsg::Done(task));
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
