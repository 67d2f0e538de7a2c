//! Messages that cross crate boundaries: what the admin, the storage writer and the
//! fleet supervisor send to personas, and what personas send back.
//!
//! Every message type derives `RactorMessage`: ractor's `cluster` feature is on, which
//! removes the blanket `Message` impl (the fleet spans nodes in a later step).

use std::sync::Arc;

use ractor::{ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

use crate::dump::{FleetDump, PersonaDump};
use crate::event::Event;
use crate::model::{Action, Decision, ErrorClass, OutboxEntry, PlanRecord, SelfStateData};
use crate::sched::Grant;

/// One accepted event for one persona, as stored in the durable queue.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The event's sequence number in storage (key of the delivery with the persona).
    pub seq: u64,
    pub event: Arc<Event>,
    /// How often this delivery crashed its persona so far.
    pub crashes: u32,
}

/// Where a fault is injected (tests and chaos drills; needs `[admin] faults = true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultTarget {
    Persona,
    Inbox,
    SelfState,
    WorkingMemory,
}

/// When the fault fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultWhen {
    /// Panic once, now.
    Now,
    /// Panic in `pre_start` on the next `n` (re)starts of the target.
    OnStart(u32),
    /// Panic whenever an event whose text contains this string is handled (persona only).
    OnText(String),
    /// The next `times` runs of a plan action fail with this error class (persona only).
    FailAction { action: Action, class: ErrorClass, times: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub target: FaultTarget,
    pub when: FaultWhen,
}

/// The persona actor's messages. Variants marked *internal* come from its own children.
#[derive(Debug, RactorMessage)]
pub enum PersonaMsg {
    /// A durably stored event (sent by the storage writer after the commit).
    Deliver(Delivery),
    /// Internal: the inbox hands over its highest-priority event and how many remain.
    Next(Delivery, usize),
    /// Internal: the self-state child pushes its new snapshot.
    SelfState(Box<SelfStateData>),
    /// The scheduler granted a submitted task.
    Granted(Grant),
    Dump(RpcReplyPort<PersonaDump>),
    Fault(Fault),
    /// From the admin once it routes to this actor: deliveries stored while the persona
    /// was unreachable are in storage only, so the inbox reloads them.
    Resync,
}

/// Answer to an accepted injection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectAck {
    pub event_id: String,
    pub accepted: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// Personas the event was delivered to.
    #[serde(default)]
    pub personas: Vec<String>,
}

/// Why an injection was refused; each maps to one HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("durable queue is full ({pending} deliveries pending); retry later")]
    QueueFull { pending: u64 },
    #[error("storage failed: {0}")]
    Storage(String),
    #[error("the fleet is shutting down")]
    ShuttingDown,
}

/// A persona's finished event: its decision, and the reply it posts, written in one transaction.
#[derive(Debug, Clone)]
pub struct PersonaCommit {
    pub persona: Arc<str>,
    pub seq: u64,
    /// When the event was accepted (for the inject-to-decision latency).
    pub accepted_us: i64,
    pub decision: Decision,
    pub reply: Option<(OutboxEntry, Event)>,
    /// The plan the persona ran for the event, with its adjustments and evaluation.
    pub plan: Option<PlanRecord>,
}

/// What the fleet supervisor reports about a persona.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PersonaStatus {
    Starting,
    Running,
    Restarting,
    /// Failed more than the restart policy allows; stopped, the fleet runs on.
    Failed,
    Stopped,
}

/// The admin actor's messages.
#[derive(Debug, RactorMessage)]
pub enum AdminMsg {
    Inject(Box<Event>, RpcReplyPort<Result<InjectAck, InjectError>>),
    /// A persona finished an event (routed on to storage with the room's reply targets).
    Commit(Box<PersonaCommit>),
    /// From the fleet supervisor: a persona's actor, status and restart count.
    PersonaUp {
        name: String,
        actor: ActorRef<PersonaMsg>,
    },
    PersonaStatus {
        name: String,
        status: PersonaStatus,
        restarts: u32,
        error: Option<String>,
    },
    Dump {
        persona: Option<String>,
        reply: RpcReplyPort<Result<FleetDump, InjectError>>,
    },
    Fault {
        persona: String,
        fault: Fault,
        reply: RpcReplyPort<Result<(), InjectError>>,
    },
    /// Stop accepting events (shutdown).
    Close(RpcReplyPort<()>),
}
