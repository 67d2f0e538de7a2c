//! Messages that cross crate boundaries: what the admin, the storage writer and the
//! fleet supervisor send to personas, and what personas send back.
//!
//! Every message type derives `RactorMessage`: ractor's `cluster` feature is on, which
//! removes the blanket `Message` impl, and the fleet spans nodes (`NodeMsg` is what crosses).

use std::sync::Arc;

#[cfg(feature = "actors")]
use ractor::{ActorRef, RpcReplyPort};
#[cfg(feature = "actors")]
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

#[cfg(feature = "actors")]
use crate::dump::{FleetDump, PersonaDump};
// Dump data that messages carry; named here too, where they were first defined.
pub use crate::dump::{CoordinationStats, PersonaStatus};
use crate::event::Event;
use crate::record::{Action, Decision, ErrorClass, OutboxEntry, PlanRecord};
#[cfg(feature = "actors")]
use crate::stored::{HandOff, PersonaSnapshot};
#[cfg(feature = "actors")]
use crate::task::{Grant, TaskId};

/// A persona's actor, as a claim names it to its coordinator on the same node.
#[cfg(feature = "actors")]
pub type PersonaRef = ActorRef<PersonaMsg>;
/// Without actors (the vocabulary alone, as the lifecycle builds on it) there is no actor to
/// name: a claim's `actor` is always `None`.
#[cfg(not(feature = "actors"))]
pub type PersonaRef = std::convert::Infallible;

/// One accepted event for one persona, as stored in the durable queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    /// The event's sequence number in storage (key of the delivery with the persona).
    pub seq: u64,
    pub event: Arc<Event>,
    /// How often this delivery crashed its persona so far.
    pub crashes: u32,
    /// How many personas the event was delivered to (0: not known, after a restore).
    pub audience: u32,
}

/// A persona's answer to an undirected human message in a shared room: it wants the turn,
/// or it passes. The room's coordinator grants the turn to at most `responders` of them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claim {
    pub event_id: String,
    pub room: String,
    pub persona: Arc<str>,
    /// The persona, when it runs on the coordinator's node.
    #[serde(skip)]
    pub actor: Option<PersonaRef>,
    /// The persona's node, when the claim came from another node (its turn goes back there).
    #[serde(default)]
    pub node: Option<String>,
    /// The gate engaged: it wants to answer.
    pub wants: bool,
    /// The persona is mentioned: it always gets the turn.
    pub mentioned: bool,
    /// The message names somebody (a mention, or sent to one persona): a claim of another
    /// persona does not take its turn while the one named may still claim it.
    #[serde(default)]
    pub named: bool,
    /// How sure it is that it should answer (orders the claims).
    pub confidence: f64,
    /// How suited it is (the select-for-task score; picks who answers an unclaimed message).
    pub suitability: f64,
    /// How many personas the event was delivered to (0: not known; the window decides).
    pub audience: u32,
    /// Sent by a human: then somebody must answer, and the figures count it.
    pub from_human: bool,
    /// The same claim sent again because its answer was overdue (not counted again).
    pub retry: u32,
    /// The delivery's sequence number (the persona takes it up again if the turn passes to it
    /// after it finished the event).
    #[serde(default)]
    pub seq: u64,
}

/// The coordinator's answer to a claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub event_id: String,
    pub granted: bool,
    /// Given by the coordinator rather than won by the claim: the persona passed and nobody
    /// claimed the message, or the turn passed to it from a holder that could not answer.
    pub assigned: bool,
    pub reason: String,
    /// The turn passed to this persona after its holder could not answer: the delivery to take
    /// up again when the persona finished the event meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retake: Option<Retake>,
}

/// A delivery a persona takes up again because the turn passed to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retake {
    pub seq: u64,
    /// The event's audience (it claims again, and the coordinator answers that it holds the turn).
    pub audience: u32,
}

/// What the holder of a turn reports when it finishes the event: it posted a reply or it did
/// not (the plan failed, it ignored the event after all). A turn not posted passes on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnReport {
    pub event_id: String,
    pub persona: Arc<str>,
    pub posted: bool,
    /// Why it did not post (the decision's reason).
    pub why: String,
    /// It did not post because its draft repeats a reply already posted to the thread: the turn
    /// does not pass on (the next claimant would repeat it too).
    #[serde(default)]
    pub redundant: bool,
}

/// The coordinator's messages.
#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum CoordinatorMsg {
    Claim(Box<Claim>),
    /// The claim window of an event is over.
    Decide(String),
    Stats(RpcReplyPort<CoordinationStats>),
    /// A persona finished an event it held the turn of (or went ahead on alone).
    Report(TurnReport),
    /// Time to look at the holders of an event's turn: one whose actor stopped, or that has
    /// not reported within the hold deadline, loses it.
    Check(String),
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
    /// The next `times` runs of a plan action take `ms` milliseconds longer (persona only).
    SlowAction { action: Action, ms: u64, times: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub target: FaultTarget,
    pub when: FaultWhen,
}

/// A change of self-state made by a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateChange {
    Dormant,
    Wake,
    Focus {
        objective: String,
        intensity: f64,
    },
    /// The focus ends now: the persona takes up what it deferred.
    ClearFocus,
}

/// The persona actor's messages.
#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum PersonaMsg {
    /// A durably stored event (sent by the storage writer after the commit).
    Deliver(Delivery),
    /// The scheduler granted a submitted task.
    Granted(Grant),
    /// Its dump; at [`DumpDepth::Cards`] without working memory's entries nor the references,
    /// conversation and study parts.
    Dump(DumpDepth, RpcReplyPort<PersonaDump>),
    Fault(Fault),
    /// From the admin once it routes to this actor: deliveries stored while the persona
    /// was unreachable are in storage only, so the inbox reloads them.
    Resync,
    /// The room coordinator's answer to a claim (or, when the coordinator is gone, the
    /// persona's own decision to go on).
    Turn(Turn),
    /// The scheduler asks for the slot of this preemptible background task back: higher-class
    /// work waits for it.
    Preempt(TaskId),
    /// Study `topic` (else the gap noted first) in idle time; answers with the topic.
    Study {
        topic: Option<String>,
        reply: RpcReplyPort<Result<String, String>>,
    },
    /// A person changes the self-state.
    SetState(StateChange),
    /// The persona's own continuations (its timers, the answers to what it asked off its loop,
    /// its children's reports), of a type private to the personas crate: only it makes and
    /// opens them.
    Own(crate::private::Private),
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum InjectError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("durable queue is full ({pending} deliveries pending); retry later")]
    QueueFull { pending: u64 },
    #[error("storage failed: {0}")]
    Storage(String),
    /// The data dir's disk is full: nothing is stored until space is freed (the message names
    /// the disk and the data dir); the fleet resumes by itself.
    #[error("{0}")]
    NoSpace(String),
    #[error("the fleet is shutting down")]
    ShuttingDown,
    /// A service the request needs is down or degraded (a model that could not be loaded).
    #[error("{0}")]
    Unavailable(String),
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
    /// The chat message as conversation memory keeps it (written with the decision, so taking
    /// it in costs no commit of its own; until then the event is pending, so not lost).
    pub said: Option<crate::conversation::Said>,
    /// A deferral (the decision's verdict is `defer`): the delivery stays pending, kept aside
    /// as this preoccupation until the persona takes it up or drops it with a later commit of
    /// the same `seq`.
    pub defer: Option<Deferral>,
    /// The rows of the persona's recorded history up to this commit (`[storage] record`),
    /// written in its transaction, so that a decision in the journal always has the inputs
    /// that made it; then a note of the rows the commit wrote. `None`: not a commit of a
    /// lifecycle that records (the inbox's, or recording is off).
    pub recorded: Option<Recorded>,
}

/// The recorded history a commit carries.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The entries up to the input that made the commit.
    pub rows: crate::history::RecordBatch,
    /// The digest of what the commit says (`mindfleet_cognition::history::digest`).
    pub digest: u64,
}

impl PersonaCommit {
    /// The end of delivery `d` by a decision alone (no plan, no reply): what the inbox sheds,
    /// and a deferral dropped.
    pub fn decision_only(persona: Arc<str>, d: &Delivery, decision: Decision) -> PersonaCommit {
        PersonaCommit {
            persona,
            seq: d.seq,
            accepted_us: d.event.accepted_us,
            decision,
            reply: None,
            plan: None,
            said: None,
            defer: None,
            recorded: None,
        }
    }
}

/// A delivery a persona deferred, as kept in storage until it is taken up or dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deferral {
    pub preoccupation: crate::record::Preoccupation,
    /// How many personas the event went to (a shared room's turn is claimed again on taking
    /// it up).
    pub audience: u32,
}

/// How much of each persona's journals a dump reads from storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DumpDepth {
    /// Its 50 latest decisions and 20 latest evictions (`mindfleet dump`).
    Full,
    /// Its latest decision only, no evictions: what the dashboard's cards show, taken each
    /// second while a page is open.
    Cards,
}

/// The admin actor's messages.
#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum AdminMsg {
    Inject(Box<Event>, RpcReplyPort<Result<InjectAck, InjectError>>),
    /// From another node: store an event it accepted for personas of this node.
    StoreHere(Box<StoreRequest>, RpcReplyPort<Result<InjectAck, InjectError>>),
    /// A persona finished an event (routed on to storage with the room's reply targets).
    Commit(Box<PersonaCommit>),
    /// Entries of a persona's recorded history (routed on to storage after its commits before).
    Record(Arc<str>, crate::history::RecordBatch),
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
        depth: DumpDepth,
        reply: RpcReplyPort<Result<FleetDump, InjectError>>,
    },
    /// This node's own part of a cluster dump: its personas, journals and links.
    NodeDump {
        depth: DumpDepth,
        reply: RpcReplyPort<Result<FleetDump, InjectError>>,
    },
    Fault {
        persona: String,
        fault: Fault,
        reply: RpcReplyPort<Result<(), InjectError>>,
    },
    /// An introspection query (`mindfleet ai ...`), about the whole fleet on every node.
    Ai(crate::ai::AiQuery, RpcReplyPort<Result<serde_json::Value, InjectError>>),
    /// The same, answered from this node's personas alone (another node's part of it).
    NodeAi(crate::ai::AiQuery, RpcReplyPort<Result<serde_json::Value, InjectError>>),
    /// Embeds a text with the fleet's embedding worker (`POST /ai/embedding/generate`).
    Embed {
        text: String,
        long: crate::embedding::LongText,
        reply: RpcReplyPort<Result<serde_json::Value, InjectError>>,
    },
    /// Have a persona study a topic (`mindfleet ai study`); answers with the topic.
    Study {
        persona: String,
        topic: Option<String>,
        reply: RpcReplyPort<Result<String, InjectError>>,
    },
    /// Train an adapter on a persona's study chats (about `topic`, else all) in idle time
    /// (`mindfleet ai train`); answers with the run's id once it is queued.
    Train {
        persona: String,
        topic: Option<String>,
        reply: RpcReplyPort<Result<String, InjectError>>,
    },
    /// Change a persona's self-state by hand (`mindfleet ai state update`).
    SetState {
        persona: String,
        change: StateChange,
        reply: RpcReplyPort<Result<(), InjectError>>,
    },
    /// From another node: a claim for a room whose turn-taking this node decides.
    RemoteClaim(Box<Claim>),
    /// From another node's coordinator: the turn of a persona of this node.
    Turn {
        persona: String,
        turn: Turn,
    },
    /// Move a persona of this node to another node (`to`, else the least loaded one that is
    /// up) with all its state; answers once that node has stored it.
    Move {
        persona: String,
        to: Option<String>,
        reply: RpcReplyPort<Result<HandOff, InjectError>>,
    },
    /// This node is stopping: tell the others, take no persona, and move every persona of this
    /// node to the others (as `Drain`).
    Leave(RpcReplyPort<Result<Vec<HandOff>, InjectError>>),
    /// Another node is stopping: move no persona there.
    NodeLeaving(String),
    /// Move every persona of this node to other nodes, one after the other.
    Drain {
        to: Option<String>,
        reply: RpcReplyPort<Result<Vec<HandOff>, InjectError>>,
    },
    /// The persona being moved has stopped: its rows can leave.
    Stopped(String),
    /// From another node: a persona moving here, with all its rows.
    Adopt(Box<PersonaSnapshot>, RpcReplyPort<Result<HandOff, InjectError>>),
    /// The node a persona moved to has stored it.
    Adopted(HandOff),
    /// A persona's rows could not leave this node: it runs here again, at placement `version`.
    Stayed {
        persona: String,
        version: u64,
        error: String,
    },
    /// From another node: where personas that moved run, `(persona, node, version)`.
    Placed(Vec<(String, String, u64)>),
    /// The link to a node came up: it is told where the personas that moved run, and the
    /// rooms personas joined by directed events.
    NodeLinked(String),
    /// From another node: rooms personas joined by directed events, `(room, persona)`.
    Joined(Vec<(String, String)>),
    /// Stop accepting events (shutdown).
    Close(RpcReplyPort<()>),
}

/// An event another node accepted, to be stored here for the named personas (placed here).
#[derive(Debug, Serialize, Deserialize)]
pub struct StoreRequest {
    pub event: Event,
    pub personas: Vec<String>,
    /// How many personas the event went to on every node (the turn-taking audience).
    pub audience: u32,
    /// How often it was passed on by a node its sender took for the personas' (a persona that
    /// moved): a node passes it on once at most.
    #[serde(default)]
    pub hops: u32,
}
