//! The requests the handle sends the writer thread, and the copy of a write the writer keeps
//! when the disk fails its batch.

use std::sync::Arc;

use ractor::RpcReplyPort;
use tokio::sync::{Notify, oneshot};

use mindfleet_core::conversation::SaidMarks;
use mindfleet_core::event::Event;
use mindfleet_core::history::RecordBatch;
use mindfleet_core::messages::{Deferral, Delivery, InjectAck, InjectError, PersonaCommit};
use mindfleet_core::record::{Consolidation, Eviction, Knowledge, SelfStateData, StudySession, WmEntry};
use mindfleet_core::refs::RefMatch;
use mindfleet_core::stored::{HandOff, PersonaSnapshot, StorageStats};
use mindfleet_core::tools::CallJournal;
use mindfleet_core::webhook::HookRoute;

use crate::{Forward, ForwardQueue, InboxRestore, Reopened, StorageError, Target};

pub(crate) enum Op {
    Inject {
        event: Box<Event>,
        targets: Vec<Target>,
        elsewhere: u32,
        reply: RpcReplyPort<Result<InjectAck, InjectError>>,
    },
    Commit {
        commit: Box<PersonaCommit>,
        reply_targets: Vec<Target>,
        elsewhere: u32,
        forwards: Vec<Forward>,
    },
    Forwarded(Arc<str>, u64),
    /// Takes a persona's rows out, to be kept in `forwards` for its new node.
    Release(Release),
    /// Stores a persona's rows from another node.
    Adopt(Box<PersonaSnapshot>, oneshot::Sender<Result<HandOff, StorageError>>),
    /// A persona now runs on another node (known from that node).
    Place(Arc<str>, String, u64),
    PutSelfState(Arc<str>, Box<SelfStateData>),
    PutMemory(Arc<str>, Box<WmEntry>),
    DeleteMemory(Arc<str>, u64, Option<Eviction>),
    Crash {
        persona: Arc<str>,
        seq: u64,
        reason: String,
    },
    /// A persona joined a room it was not configured in (a directed event).
    JoinRoom(String, Arc<str>),
    /// Entries of a persona's recorded history, in its order (those up to a commit ride in it).
    Record(Arc<str>, RecordBatch),
    /// A persona selected a reference.
    SelectReference(Arc<str>, Box<RefMatch>),
    /// Marks on a persona's messages: embedded, recalled.
    SaidMarks(Arc<str>, SaidMarks),
    Consolidate(Arc<str>, Box<Consolidation>),
    /// Journals a tool call (answered once it is on disk, when asked).
    ToolCall(Box<CallJournal>, Option<oneshot::Sender<Result<(), StorageError>>>),
    /// A finished study session, with the knowledge it left.
    Study(Arc<str>, Box<StudySession>, Option<Box<Knowledge>>),
    LoadSelfState(Arc<str>, oneshot::Sender<Option<SelfStateData>>),
    LoadMemory(Arc<str>, oneshot::Sender<Vec<WmEntry>>),
    LoadInbox(Arc<str>, oneshot::Sender<InboxRestore>),
    /// The deliveries a persona deferred, with their preoccupations.
    LoadDeferred(Arc<str>, oneshot::Sender<Vec<(Delivery, Deferral)>>),
    /// Makes a finished delivery pending again (a room's turn passed to its persona).
    Reopen(Arc<str>, u64, oneshot::Sender<Result<Reopened, StorageError>>),
    /// The webhooks, set once at start: what each is sent, and how to wake its sender.
    HookRoutes(Vec<(HookRoute, Arc<Notify>)>),
    /// A webhook's receiver acknowledged a delivery: (webhook, key).
    HookAcked(Arc<str>, u64),
    /// An attempt at a delivery failed: (webhook, key, why).
    HookFailed(Arc<str>, u64, String),
    /// A delivery gave up: (webhook, key, why); it moves to the dead letters.
    HookDead(Arc<str>, u64, String),
    /// Queues the dead letters of a webhook (or of all) again; answers how many.
    HookRetry(Option<String>, oneshot::Sender<Result<u64, StorageError>>),
    Stats(oneshot::Sender<StorageStats>),
    Flush(oneshot::Sender<()>),
    /// Commit what came before, then stop the writer (it drops its database handle).
    Close(oneshot::Sender<()>),
}

impl Op {
    /// A copy of a write that the fleet already counts as done (a persona moved on after
    /// sending it), kept while its batch commits: if the disk fails the commit, the copy is
    /// written once the disk heals. Injections are refused instead (their clients were not
    /// acknowledged), hand-offs answer the error, and the requests that wait for an answer
    /// are kept themselves (see [`AfterCommit`]).
    pub(crate) fn retry_copy(&self) -> Option<Op> {
        Some(match self {
            Op::Commit { commit, reply_targets, elsewhere, forwards } => Op::Commit {
                commit: commit.clone(),
                reply_targets: reply_targets.clone(),
                elsewhere: *elsewhere,
                forwards: forwards.clone(),
            },
            Op::Forwarded(node, seq) => Op::Forwarded(node.clone(), *seq),
            Op::Place(persona, node, version) => Op::Place(persona.clone(), node.clone(), *version),
            Op::PutSelfState(p, s) => Op::PutSelfState(p.clone(), s.clone()),
            Op::PutMemory(p, e) => Op::PutMemory(p.clone(), e.clone()),
            Op::DeleteMemory(p, id, ev) => Op::DeleteMemory(p.clone(), *id, ev.clone()),
            Op::Crash { persona, seq, reason } => {
                Op::Crash { persona: persona.clone(), seq: *seq, reason: reason.clone() }
            }
            Op::JoinRoom(room, p) => Op::JoinRoom(room.clone(), p.clone()),
            Op::Record(p, batch) => Op::Record(p.clone(), batch.clone()),
            Op::SelectReference(p, m) => Op::SelectReference(p.clone(), m.clone()),
            Op::SaidMarks(p, m) => Op::SaidMarks(p.clone(), m.clone()),
            Op::Consolidate(p, c) => Op::Consolidate(p.clone(), c.clone()),
            Op::Study(p, s, k) => Op::Study(p.clone(), s.clone(), k.clone()),
            Op::ToolCall(j, None) => Op::ToolCall(j.clone(), None),
            Op::HookRoutes(r) => Op::HookRoutes(r.clone()),
            Op::HookAcked(h, k) => Op::HookAcked(h.clone(), *k),
            Op::HookFailed(h, k, e) => Op::HookFailed(h.clone(), *k, e.clone()),
            Op::HookDead(h, k, e) => Op::HookDead(h.clone(), *k, e.clone()),
            Op::Inject { .. }
            | Op::ToolCall(_, Some(_))
            | Op::Release(_)
            | Op::Adopt(..)
            | Op::LoadSelfState(..)
            | Op::LoadMemory(..)
            | Op::LoadInbox(..)
            | Op::LoadDeferred(..)
            | Op::Reopen(..)
            | Op::HookRetry(..)
            | Op::Stats(_)
            | Op::Flush(_)
            | Op::Close(_) => return None,
        })
    }
}

/// A persona leaving this node: its rows go to `node` (placement `version`) through `to`.
pub(crate) struct Release {
    pub(crate) persona: Arc<str>,
    pub(crate) version: u64,
    pub(crate) node: Arc<str>,
    pub(crate) to: ForwardQueue,
    pub(crate) reply: oneshot::Sender<Result<HandOff, StorageError>>,
}
