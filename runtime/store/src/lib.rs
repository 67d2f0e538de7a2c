//! Durable state in one redb database, written by one dedicated thread.
//!
//! Every write goes through [`Storage`]'s channel to the writer thread, which folds all
//! requests waiting in the channel into one write transaction and one fsync (group
//! commit), then answers the requests that wait for durability and hands the committed
//! events to their personas. Reads that restore an actor's state go through the same
//! channel, so they see every write sent before them (a restarted child never reads a
//! state older than the one it last persisted). Read-only views for dumps use their own
//! read transactions. The on-disk layout is in `docs/STORAGE.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use ractor::{ActorRef, RpcReplyPort};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::de::DeserializeOwned;

pub mod conversation;
mod disk;
mod handoff;
mod recover;
use disk::{DbSlot, Kind};
pub use disk::{Disk, Failure, Health, disk_of};
pub use mindfleet_core::stored::{HandOff, PersonaSnapshot, Rows, StorageStats};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use mindfleet_core::config::StorageConfig;
use mindfleet_core::conversation::{Said, SaidMarks};
use mindfleet_core::event::Event;
use mindfleet_core::messages::{Delivery, InjectAck, InjectError, PersonaCommit, PersonaMsg};
use mindfleet_core::model::{
    Consolidation, ConsolidationReport, DeadLetter, Decision, Eviction, Experience, Knowledge, Learning, OutboxEntry,
    PlanRecord, Procedure, SelfStateData, StudySession, UserProfile, Verdict, WmEntry,
};
use mindfleet_core::refs::RefMatch;
use mindfleet_core::time::now_us;

/// Version of the layout below. Older files are migrated on open, newer ones refused.
/// 1: the first layout. 2: adds `rooms` (memberships made by directed events).
/// 3: adds `plans` and `learnings` (the reasoning loop's journal) and long-term memory:
/// `experiences`, `procedures`, `knowledge`, `profiles`, `consolidations`. 4: pending
/// deliveries keyed by sequence number first. 5: decisions carry the references their event
/// called for; adds `references` (what each persona selected), `conversation` (the chat
/// messages each persona took in) and `studies` (self-directed study sessions).
pub const SCHEMA_VERSION: u64 = 5;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const EVENT_IDS: TableDefinition<&str, u64> = TableDefinition::new("event_ids");
/// Before version 4: pending deliveries keyed by persona first.
const DELIVERIES_V3: TableDefinition<(&str, u64), u32> = TableDefinition::new("deliveries");
const PENDING: TableDefinition<(u64, &str), u32> = TableDefinition::new("pending");
const PENDING_BY_SEQ: TableDefinition<u64, u32> = TableDefinition::new("pending_by_seq");
const DECISIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("decisions");
/// Decisions not yet copied into `decisions`, by decision number: (persona, decision).
const DECISION_LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("decision_log");
const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");
const SELF_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("self_state");
const MEMORY: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("memory");
const EVICTIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("evictions");
const DEAD_LETTERS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("dead_letters");
const COUNTERS: TableDefinition<(&str, &str), u64> = TableDefinition::new("counters");
const ROOMS: TableDefinition<(&str, &str), ()> = TableDefinition::new("rooms");
const PLANS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("plans");
const LEARNINGS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("learnings");
const EXPERIENCES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("experiences");
const PROCEDURES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("procedures");
const KNOWLEDGE: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("knowledge");
const PROFILES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("profiles");
const CONSOLIDATIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("consolidations");
/// The references each persona selected: (persona, reference id) -> how it was found.
const REFERENCES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("references");
/// The chat messages each persona took in: (persona, delivery seq) -> `Said`.
const CONVERSATION: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("conversation");
/// Each persona's study sessions: (persona, start time in µs) -> `StudySession`.
const STUDIES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("studies");
/// Replies for personas of other nodes, until their node has stored them: (node, the reply's
/// seq) -> the request to send (opaque here).
const FORWARDS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("forwards");
/// A fleet across nodes: where each persona that moved runs, persona -> (node, version).
const PLACEMENT: TableDefinition<&str, &[u8]> = TableDefinition::new("placement");

/// Upgrades from each older schema version to the next; index 0 upgrades version 1.
type Migration = fn(&WriteTransaction) -> Result<(), redb::Error>;
const MIGRATIONS: &[Migration] = &[migrate_1_to_2, migrate_2_to_3, migrate_3_to_4, migrate_4_to_5];

/// Version 1 kept room memberships made by directed events in memory only: rebuild them
/// from the stored events that were addressed to a persona.
fn migrate_1_to_2(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let events = txn.open_table(EVENTS)?;
    let mut rooms = txn.open_table(ROOMS)?;
    for r in events.iter()? {
        let event: Event = dec(r?.1.value())?;
        if let Some(p) = &event.persona {
            rooms.insert((event.room.as_str(), p.as_str()), ())?;
        }
    }
    Ok(())
}

/// Evictions kept per persona.
const EVICTIONS_KEPT: u64 = 1000;
/// Finished plans kept per persona.
const PLANS_KEPT: u64 = 200;

/// Long-term memory limits, per persona.
pub const EXPERIENCES_KEPT: u64 = 1000;
pub const PROCEDURES_PER_DOMAIN: usize = 50;
pub const KNOWLEDGE_KEPT: u64 = 500;
/// Study sessions kept per persona.
pub const STUDIES_KEPT: u64 = 200;
const CONSOLIDATIONS_KEPT: u64 = 100;
/// Chat messages kept per persona for conversation memory.
pub const CONVERSATION_KEPT: u64 = 10_000;

/// Version 3 adds tables that start empty.
fn migrate_2_to_3(txn: &WriteTransaction) -> Result<(), redb::Error> {
    Tables::open(txn).map(drop)
}

/// Version 4 keys pending deliveries by sequence number first, so that the deliveries of one
/// event, and of events accepted together, share B-tree pages (keyed by persona first, each
/// insert and each finish wrote a page of its own persona).
fn migrate_3_to_4(txn: &WriteTransaction) -> Result<(), redb::Error> {
    {
        let old = txn.open_table(DELIVERIES_V3)?;
        let mut new = txn.open_table(PENDING)?;
        for r in old.iter()? {
            let (k, crashes) = r?;
            let (persona, seq) = k.value();
            new.insert((seq, persona), crashes.value())?;
        }
    }
    txn.delete_table(DELIVERIES_V3)?;
    Ok(())
}

/// A decision as version 4 stored it: without the references.
#[derive(Deserialize)]
struct DecisionV4 {
    event_id: String,
    verdict: Verdict,
    reason: String,
    by: String,
    priority: f64,
    numbers: Vec<(String, f64)>,
    at_us: i64,
}

impl From<DecisionV4> for Decision {
    fn from(d: DecisionV4) -> Decision {
        let DecisionV4 { event_id, verdict, reason, by, priority, numbers, at_us } = d;
        Decision { event_id, verdict, reason, by, priority, numbers, at_us, references: Vec::new() }
    }
}

/// Version 5 adds the references to decisions (rewritten without any), and the `references`
/// and `conversation` tables (empty).
fn migrate_4_to_5(txn: &WriteTransaction) -> Result<(), redb::Error> {
    {
        let mut t = txn.open_table(DECISIONS)?;
        let old: Vec<((String, u64), DecisionV4)> = t
            .iter()?
            .map(|r| {
                let (k, v) = r?;
                let (p, n) = k.value();
                Ok(((p.to_string(), n), dec(v.value())?))
            })
            .collect::<Result<_, redb::Error>>()?;
        for ((p, n), d) in old {
            t.insert((p.as_str(), n), enc(&Decision::from(d)).as_slice())?;
        }
        let mut log = txn.open_table(DECISION_LOG)?;
        let old: Vec<(u64, (String, DecisionV4))> = log
            .iter()?
            .map(|r| {
                let (k, v) = r?;
                Ok((k.value(), dec(v.value())?))
            })
            .collect::<Result<_, redb::Error>>()?;
        for (k, (p, d)) in old {
            log.insert(k, enc(&(p, Decision::from(d))).as_slice())?;
        }
    }
    Tables::open(txn).map(drop)
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error("data dir {path} in use by pid {pid}")]
    InUse { path: PathBuf, pid: String },
    #[error(
        "{path}: schema version {found} is not one this mindfleet can open (it supports 1..={supported}); use a newer mindfleet"
    )]
    NewerSchema { path: PathBuf, found: u64, supported: u64 },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Db { path: PathBuf, message: String },
    /// Refused at start: the data dir's disk has less free space than `[storage] min_free_mb`.
    #[error(
        "data dir {path} is on {disk}, which has {free_mb} MiB free; at least {min_mb} MiB are needed ([storage] min_free_mb)"
    )]
    NoSpace { path: PathBuf, disk: String, free_mb: u64, min_mb: u64 },
    /// Readers wait while the writer reopens the database after a failed write.
    #[error("{path}: {reason}")]
    Unavailable { path: PathBuf, reason: String },
    #[error("storage writer has stopped")]
    Closed,
}

/// A persona and how to reach it (`None` while it is down: the delivery waits in storage).
pub type Target = (Arc<str>, Option<ActorRef<PersonaMsg>>);

/// A persona's long-term memory, as read back.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LongTerm {
    pub experiences: Vec<Experience>,
    pub knowledge: Vec<Knowledge>,
    pub procedures: Vec<Procedure>,
    pub profiles: Vec<UserProfile>,
    /// Newest consolidation reports first.
    pub reports: Vec<ConsolidationReport>,
    pub experience_count: u64,
    /// Working-memory entries up to this id are consolidated.
    pub watermark: u64,
}

/// What the inbox restores from storage.
#[derive(Debug, Default)]
pub struct InboxRestore {
    pub deliveries: Vec<Delivery>,
    pub shed: u64,
    pub duplicates: u64,
}

/// The first byte of a kept request that carries a persona's snapshot ([`Storage::release`]);
/// any other is a stored event (JSON).
pub const FORWARD_ADOPT: u8 = 0;

/// A reply for personas of another node: kept with the reply until that node stored it, and
/// handed to `to` (with the reply's seq) once committed.
#[derive(Clone)]
pub struct Forward {
    pub node: Arc<str>,
    pub request: Vec<u8>,
    pub to: ForwardQueue,
}

/// The queue of what is kept for one other node, each request with its key in `forwards`.
pub type ForwardQueue = tokio::sync::mpsc::UnboundedSender<(u64, Vec<u8>)>;

enum Op {
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
    Release {
        persona: Arc<str>,
        version: u64,
        node: Arc<str>,
        to: ForwardQueue,
        reply: oneshot::Sender<Result<HandOff, String>>,
    },
    /// Stores a persona's rows from another node.
    Adopt(Box<PersonaSnapshot>, oneshot::Sender<Result<HandOff, String>>),
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
    /// A persona selected a reference.
    SelectReference(Arc<str>, Box<RefMatch>),
    /// Marks on a persona's messages: embedded, recalled.
    SaidMarks(Arc<str>, SaidMarks),
    Consolidate(Arc<str>, Box<Consolidation>),
    /// A finished study session, with the knowledge it left.
    Study(Arc<str>, Box<StudySession>, Option<Box<Knowledge>>),
    LoadSelfState(Arc<str>, oneshot::Sender<Option<SelfStateData>>),
    LoadMemory(Arc<str>, oneshot::Sender<Vec<WmEntry>>),
    LoadInbox(Arc<str>, oneshot::Sender<InboxRestore>),
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
    fn retry_copy(&self) -> Option<Op> {
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
            Op::SelectReference(p, m) => Op::SelectReference(p.clone(), m.clone()),
            Op::SaidMarks(p, m) => Op::SaidMarks(p.clone(), m.clone()),
            Op::Consolidate(p, c) => Op::Consolidate(p.clone(), c.clone()),
            Op::Study(p, s, k) => Op::Study(p.clone(), s.clone(), k.clone()),
            Op::Inject { .. }
            | Op::Release { .. }
            | Op::Adopt(..)
            | Op::LoadSelfState(..)
            | Op::LoadMemory(..)
            | Op::LoadInbox(..)
            | Op::Stats(_)
            | Op::Flush(_)
            | Op::Close(_) => return None,
        })
    }
}

/// Handle to the database and its writer thread. Cloning is cheap.
#[derive(Clone)]
pub struct Storage {
    tx: Sender<Op>,
    db: DbSlot,
    path: Arc<Path>,
    health: Health,
}

/// Keeps the data dir locked to this process; dropping it (or exiting) releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Locks `dir` for this process (creating it), or names the process holding it.
pub fn lock_data_dir(dir: &Path) -> Result<DataDirLock, StorageError> {
    std::fs::create_dir_all(dir).map_err(|source| StorageError::Io { path: dir.to_path_buf(), source })?;
    let path = dir.join("mindfleet.lock");
    let io = |source| StorageError::Io { path: path.clone(), source };
    let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(StorageError::InUse {
                path: dir.to_path_buf(),
                pid: if pid.is_empty() { "unknown".into() } else { pid.to_string() },
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(DataDirLock { _file: file })
}

use mindfleet_core::stored::encode as enc;

fn dec<T: DeserializeOwned>(b: &[u8]) -> Result<T, redb::Error> {
    mindfleet_core::stored::decode(b).map_err(|e| redb::Error::Corrupted(format!("undecodable record: {e}")))
}

impl Storage {
    /// Opens (or creates) `data_dir/fleet.redb`, checks its schema and starts the writer.
    /// The caller holds the [`DataDirLock`] first.
    pub fn open(cfg: &StorageConfig) -> Result<Storage, StorageError> {
        let path: Arc<Path> = cfg.data_dir.join("fleet.redb").into();
        let dberr = |e: &dyn std::fmt::Display| StorageError::Db { path: path.to_path_buf(), message: e.to_string() };
        check_free_space(cfg)?;
        let db = open_db(cfg, &path).map_err(|e| dberr(&e))?;
        let txn = db.begin_write().map_err(|e| dberr(&e))?;
        let mut found = {
            let mut meta = txn.open_table(META).map_err(|e| dberr(&e))?;
            let v = meta.get("schema_version").map_err(|e| dberr(&e))?.map(|g| g.value());
            if v.is_none() {
                meta.insert("schema_version", SCHEMA_VERSION).map_err(|e| dberr(&e))?;
            }
            v.unwrap_or(SCHEMA_VERSION)
        };
        if found == 0 || found > SCHEMA_VERSION {
            return Err(StorageError::NewerSchema { path: path.to_path_buf(), found, supported: SCHEMA_VERSION });
        }
        while found < SCHEMA_VERSION {
            MIGRATIONS[(found - 1) as usize](&txn).map_err(|e| dberr(&e))?;
            found += 1;
            tracing::info!(path = %path.display(), version = found, "migrated storage schema");
        }
        {
            let mut meta = txn.open_table(META).map_err(|e| dberr(&e))?;
            meta.insert("schema_version", SCHEMA_VERSION).map_err(|e| dberr(&e))?;
        }
        open_all(&txn).map_err(|e| dberr(&e))?;
        txn.commit().map_err(|e| dberr(&e))?;

        let db = DbSlot::new(db);
        let health = Health::default();
        let (tx, rx) = crossbeam_channel::unbounded();
        let writer = Writer::new(db.clone(), health.clone(), cfg.clone(), path.to_path_buf()).map_err(|e| dberr(&e))?;
        std::thread::Builder::new()
            .name("storage-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| StorageError::Io { path: path.to_path_buf(), source })?;
        Ok(Storage { tx, db, path, health })
    }

    /// Whether the writer can write now, and why not (a full disk).
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The data dir the database lives in.
    pub fn data_dir(&self) -> &Path {
        data_dir_of(&self.path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn send(&self, op: Op) {
        // The writer only stops when every handle is dropped.
        let _ = self.tx.send(op);
    }

    /// Stores an event for `targets`; `reply` is answered after the fsync, then the event
    /// is delivered to each target.
    pub fn inject(&self, event: Box<Event>, targets: Vec<Target>, reply: RpcReplyPort<Result<InjectAck, InjectError>>) {
        self.inject_among(event, targets, 0, reply);
    }

    /// As [`Storage::inject`], for an event that also went to `elsewhere` personas of other
    /// nodes (each delivery's audience counts them).
    pub fn inject_among(
        &self,
        event: Box<Event>,
        targets: Vec<Target>,
        elsewhere: u32,
        reply: RpcReplyPort<Result<InjectAck, InjectError>>,
    ) {
        self.send(Op::Inject { event, targets, elsewhere, reply });
    }

    /// Finishes a delivery: decision, optional reply (outbox + room event) in one transaction.
    /// The reply also goes to `elsewhere` personas of other nodes, through `forwards` (kept in
    /// the same transaction until [`Storage::forwarded`]).
    pub fn commit(
        &self,
        commit: Box<PersonaCommit>,
        reply_targets: Vec<Target>,
        elsewhere: u32,
        forwards: Vec<Forward>,
    ) {
        self.send(Op::Commit { commit, reply_targets, elsewhere, forwards });
    }

    /// The node `node` stored the reply kept under `seq`: it is no longer kept.
    pub fn forwarded(&self, node: Arc<str>, seq: u64) {
        self.send(Op::Forwarded(node, seq));
    }

    /// The replies kept for other nodes, oldest first per node: (node, seq, request) (blocking
    /// read).
    pub fn pending_forwards(&self) -> Result<Vec<(String, u64, Vec<u8>)>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(FORWARDS)?;
            t.iter()?
                .map(|r| {
                    let (k, v) = r?;
                    let (node, seq) = k.value();
                    Ok((node.to_string(), seq, v.value().to_vec()))
                })
                .collect()
        })
    }

    /// Takes every row of `persona` out of this node's database, in one transaction that also
    /// places it on `node` at `version` and keeps the snapshot in `forwards` for that node
    /// (handed to `to` with its key once committed). The persona must be stopped first.
    pub async fn release(
        &self,
        persona: Arc<str>,
        version: u64,
        node: Arc<str>,
        to: ForwardQueue,
    ) -> Result<HandOff, String> {
        self.ask(|reply| Op::Release { persona, version, node, to, reply }).await.map_err(|e| e.to_string())?
    }

    /// Stores a persona's rows from another node and places it here, in one transaction.
    pub async fn adopt(&self, snapshot: PersonaSnapshot) -> Result<HandOff, String> {
        self.ask(|reply| Op::Adopt(Box::new(snapshot), reply)).await.map_err(|e| e.to_string())?
    }

    /// Keeps that `persona` runs on `node` since placement `version` (a move between other nodes).
    pub fn place(&self, persona: Arc<str>, node: String, version: u64) {
        self.send(Op::Place(persona, node, version));
    }

    /// The personas that moved, with their node and placement version (blocking read).
    pub fn placements(&self) -> Result<Vec<(String, String, u64)>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(PLACEMENT)?;
            t.iter()?
                .map(|r| {
                    let (k, v) = r?;
                    let (node, version) = handoff::placement_of(v.value())?;
                    Ok((k.value().to_string(), node, version))
                })
                .collect()
        })
    }

    /// Writes one consolidation pass into long-term memory, enforcing the limits.
    pub fn consolidate(&self, persona: Arc<str>, c: Consolidation) {
        self.send(Op::Consolidate(persona, Box::new(c)));
    }

    pub fn join_room(&self, room: String, persona: Arc<str>) {
        self.send(Op::JoinRoom(room, persona));
    }

    /// Room memberships made by directed events, room -> personas (blocking read).
    pub fn rooms(&self) -> Result<BTreeMap<String, Vec<String>>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(ROOMS)?;
            let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for r in t.iter()? {
                let (k, _) = r?;
                let (room, persona) = k.value();
                out.entry(room.to_string()).or_default().push(persona.to_string());
            }
            Ok(out)
        })
    }

    /// Keeps a persona's selection of a reference (and why) across restarts.
    pub fn select_reference(&self, persona: Arc<str>, m: RefMatch) {
        self.send(Op::SelectReference(persona, Box::new(m)));
    }

    /// The references a persona selected, by id (blocking read).
    pub fn selected_references(&self, persona: &str) -> Result<Vec<RefMatch>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(REFERENCES)?;
            t.range((persona, "")..)?
                .map_while(|r| match r {
                    Ok((k, v)) if k.value().0 == persona => Some(dec(v.value())),
                    Ok(_) => None,
                    Err(e) => Some(Err(e.into())),
                })
                .collect::<Result<_, _>>()
        })
    }

    /// Keeps a finished study session with its learning and the knowledge it left.
    pub fn study(&self, persona: Arc<str>, session: StudySession, knowledge: Option<Knowledge>) {
        self.send(Op::Study(persona, Box::new(session), knowledge.map(Box::new)));
    }

    /// A persona's newest `n` study sessions, newest first (blocking read).
    pub fn studies(&self, persona: &str, n: usize) -> Result<Vec<StudySession>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(STUDIES)?;
            t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    /// Marks messages of a persona embedded or recalled: each message is rewritten once,
    /// whatever the marks on it.
    pub fn conversation_marks(&self, persona: Arc<str>, marks: SaidMarks) {
        if !marks.is_empty() {
            self.send(Op::SaidMarks(persona, marks));
        }
    }

    /// The messages `seqs` of a persona that are kept, in the order asked (blocking read).
    pub fn conversation(&self, persona: &str, seqs: &[u64]) -> Result<Vec<Said>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(CONVERSATION)?;
            let mut out = Vec::with_capacity(seqs.len());
            for &seq in seqs {
                if let Some(v) = t.get((persona, seq))? {
                    out.push(dec(v.value())?);
                }
            }
            Ok(out)
        })
    }

    /// A persona's messages not yet in the conversation index, oldest first, and how many are
    /// kept in all (blocking read).
    pub fn unembedded(&self, persona: &str) -> Result<(Vec<Said>, u64), StorageError> {
        self.read(|txn| {
            let t = txn.open_table(CONVERSATION)?;
            let mut out = Vec::new();
            let mut n = 0;
            for r in t.range((persona, 0)..=(persona, u64::MAX))? {
                let said: Said = dec(r?.1.value())?;
                n += 1;
                if !said.embedded {
                    out.push(said);
                }
            }
            Ok((out, n))
        })
    }

    pub fn put_self_state(&self, persona: Arc<str>, s: SelfStateData) {
        self.send(Op::PutSelfState(persona, Box::new(s)));
    }

    pub fn put_memory(&self, persona: Arc<str>, e: WmEntry) {
        self.send(Op::PutMemory(persona, Box::new(e)));
    }

    pub fn delete_memory(&self, persona: Arc<str>, id: u64, eviction: Option<Eviction>) {
        self.send(Op::DeleteMemory(persona, id, eviction));
    }

    /// Counts a crash of `persona` while it handled delivery `seq`; dead-letters it at the limit.
    pub fn crash(&self, persona: Arc<str>, seq: u64, reason: String) {
        self.send(Op::Crash { persona, seq, reason });
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Op) -> Result<T, StorageError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).map_err(|_| StorageError::Closed)?;
        rx.await.map_err(|_| StorageError::Closed)
    }

    pub async fn load_self_state(&self, persona: Arc<str>) -> Result<Option<SelfStateData>, StorageError> {
        self.ask(|tx| Op::LoadSelfState(persona, tx)).await
    }

    pub async fn load_memory(&self, persona: Arc<str>) -> Result<Vec<WmEntry>, StorageError> {
        self.ask(|tx| Op::LoadMemory(persona, tx)).await
    }

    pub async fn load_inbox(&self, persona: Arc<str>) -> Result<InboxRestore, StorageError> {
        self.ask(|tx| Op::LoadInbox(persona, tx)).await
    }

    pub async fn stats(&self) -> Result<StorageStats, StorageError> {
        let queued = self.tx.len() as u64;
        let mut s: StorageStats = self.ask(Op::Stats).await?;
        s.queued_ops = queued;
        Ok(s)
    }

    /// Waits until everything sent before is committed.
    pub async fn flush(&self) -> Result<(), StorageError> {
        self.ask(Op::Flush).await
    }

    /// Commits everything sent before, stops the writer and drops this handle. The
    /// database file is closed once no other clone of the handle is left.
    pub async fn close(self) -> Result<(), StorageError> {
        self.ask(Op::Close).await
    }

    fn read<T>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<T, redb::Error>) -> Result<T, StorageError> {
        let Some(db) = self.db.get() else {
            let reason = self.health.failure().map_or_else(|| "reopening the database".into(), |f| f.reason);
            return Err(StorageError::Unavailable { path: self.path.to_path_buf(), reason });
        };
        let txn = db.begin_read().map_err(|e| self.db_err(e))?;
        f(&txn).map_err(|e| self.db_err(e))
    }

    fn db_err(&self, e: impl std::fmt::Display) -> StorageError {
        StorageError::Db { path: self.path.to_path_buf(), message: e.to_string() }
    }

    /// Newest decisions of a persona, newest first (blocking read).
    pub fn recent_decisions(&self, persona: &str, n: usize) -> Result<Vec<Decision>, StorageError> {
        Ok(self.recent_decisions_of(&[persona.to_string()], n)?.pop().unwrap_or_default())
    }

    /// The newest `n` decisions of each of `personas`, newest first, in one read: the persona's
    /// `decisions` rows and the ones in `decision_log`. The log can still hold decisions already
    /// copied (it is trimmed only up to the oldest one another group of personas holds), so the
    /// two are merged by decision number.
    pub fn recent_decisions_of(&self, personas: &[String], n: usize) -> Result<Vec<Vec<Decision>>, StorageError> {
        self.read(|txn| {
            let mut logged: HashMap<&str, BTreeMap<u64, Decision>> =
                personas.iter().map(|p| (p.as_str(), BTreeMap::new())).collect();
            for r in txn.open_table(DECISION_LOG)?.iter()? {
                let (k, v) = r?;
                let (persona, d): (String, Decision) = dec(v.value())?;
                if let Some(m) = logged.get_mut(persona.as_str()) {
                    m.insert(k.value(), d);
                }
            }
            let t = txn.open_table(DECISIONS)?;
            personas
                .iter()
                .map(|p| {
                    let mut m = logged.remove(p.as_str()).unwrap_or_default();
                    let extra = m.len();
                    for r in t.range((p.as_str(), 0)..=(p.as_str(), u64::MAX))?.rev().take(n + extra) {
                        let (k, v) = r?;
                        if let std::collections::btree_map::Entry::Vacant(e) = m.entry(k.value().1) {
                            e.insert(dec(v.value())?);
                        }
                    }
                    Ok(m.into_values().rev().take(n).collect())
                })
                .collect()
        })
    }

    /// Newest evictions of a persona, newest first (blocking read).
    pub fn recent_evictions(&self, persona: &str, n: usize) -> Result<Vec<Eviction>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(EVICTIONS)?;
            t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    /// Newest finished plans of a persona, newest first (blocking read).
    pub fn recent_plans(&self, persona: &str, n: usize) -> Result<Vec<PlanRecord>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(PLANS)?;
            t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    /// A persona's long-term memory (blocking read): the newest `n` experiences, knowledge
    /// entries and consolidation reports, every procedure and user profile.
    pub fn long_term(&self, persona: &str, n: usize) -> Result<LongTerm, StorageError> {
        self.read(|txn| {
            fn newest<T: DeserializeOwned>(
                txn: &redb::ReadTransaction,
                def: TableDefinition<(&str, u64), &[u8]>,
                persona: &str,
                n: usize,
            ) -> Result<Vec<T>, redb::Error> {
                let t = txn.open_table(def)?;
                t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(n).map(|r| dec(r?.1.value())).collect()
            }
            fn keyed<T: DeserializeOwned>(
                txn: &redb::ReadTransaction,
                def: TableDefinition<(&str, &str), &[u8]>,
                persona: &str,
            ) -> Result<Vec<T>, redb::Error> {
                let t = txn.open_table(def)?;
                let mut out = Vec::new();
                for r in t.range((persona, "")..)? {
                    let (k, v) = r?;
                    if k.value().0 != persona {
                        break;
                    }
                    out.push(dec(v.value())?);
                }
                Ok(out)
            }
            let counters = txn.open_table(COUNTERS)?;
            Ok(LongTerm {
                experiences: newest(txn, EXPERIENCES, persona, n)?,
                knowledge: newest(txn, KNOWLEDGE, persona, n)?,
                reports: newest(txn, CONSOLIDATIONS, persona, n)?,
                procedures: keyed(txn, PROCEDURES, persona)?,
                profiles: keyed(txn, PROFILES, persona)?,
                experience_count: counters.get((persona, "experiences"))?.map_or(0, |g| g.value()),
                watermark: counters.get((persona, "consolidated"))?.map_or(0, |g| g.value()),
            })
        })
    }

    /// A persona's learnings, most used first (blocking read).
    pub fn learnings(&self, persona: &str) -> Result<Vec<Learning>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(LEARNINGS)?;
            let mut v: Vec<Learning> = t
                .range((persona, "")..)?
                .map_while(|r| match r {
                    Ok((k, v)) if k.value().0 == persona => Some(dec(v.value())),
                    Ok(_) => None,
                    Err(e) => Some(Err(e.into())),
                })
                .collect::<Result<_, _>>()?;
            v.sort_by(|a, b| {
                (b.successes + b.failures).cmp(&(a.successes + a.failures)).then(a.pattern.cmp(&b.pattern))
            });
            Ok(v)
        })
    }

    /// Newest outbox entries, newest first (blocking read).
    pub fn recent_outbox(&self, n: usize) -> Result<Vec<OutboxEntry>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(OUTBOX)?;
            t.iter()?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    /// The `n` events accepted last, newest first: what was said in the rooms, by people and
    /// by personas.
    pub fn recent_events(&self, n: usize) -> Result<Vec<Event>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(EVENTS)?;
            t.iter()?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(DEAD_LETTERS)?;
            t.iter()?.map(|r| dec(r?.1.value())).collect()
        })
    }

    /// Deliveries not finished yet, per persona (blocking read).
    pub fn pending_by_persona(&self) -> Result<BTreeMap<String, Vec<String>>, StorageError> {
        self.read(|txn| {
            let d = txn.open_table(PENDING)?;
            let ev = txn.open_table(EVENTS)?;
            let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for r in d.iter()? {
                let (k, _) = r?;
                let (seq, persona) = k.value();
                let id = match ev.get(seq)? {
                    Some(b) => dec::<Event>(b.value())?.id,
                    None => format!("seq {seq}"),
                };
                out.entry(persona.to_string()).or_default().push(id);
            }
            Ok(out)
        })
    }

    /// Every decision of every persona, by persona and decision number (blocking read; tests and
    /// exports).
    pub fn all_decisions(&self) -> Result<Vec<(String, Decision)>, StorageError> {
        self.read(|txn| {
            let mut all: BTreeMap<(String, u64), Decision> = BTreeMap::new();
            for r in txn.open_table(DECISIONS)?.iter()? {
                let (k, v) = r?;
                let (persona, n) = k.value();
                all.insert((persona.to_string(), n), dec(v.value())?);
            }
            for r in txn.open_table(DECISION_LOG)?.iter()? {
                let (k, v) = r?;
                let (persona, d): (String, Decision) = dec(v.value())?;
                all.entry((persona, k.value())).or_insert(d);
            }
            Ok(all.into_iter().map(|((p, _), d)| (p, d)).collect())
        })
    }
}

/// The decisions of `decision_log`, oldest first.
fn load_decision_log(db: &Database) -> Result<Vec<(Arc<str>, u64, Decision)>, redb::Error> {
    let txn = db.begin_read()?;
    let log = txn.open_table(DECISION_LOG)?;
    log.iter()?
        .map(|r| {
            let (k, v) = r?;
            let (persona, d): (String, Decision) = dec(v.value())?;
            Ok((persona.into(), k.value(), d))
        })
        .collect()
}

fn load_pending_of(db: &Database) -> Result<HashMap<Arc<str>, BTreeSet<u64>>, redb::Error> {
    let txn = db.begin_read()?;
    let mut out: HashMap<Arc<str>, BTreeSet<u64>> = HashMap::new();
    for r in txn.open_table(PENDING)?.iter()? {
        let (k, _) = r?;
        let (seq, persona) = k.value();
        match out.get_mut(persona) {
            Some(seqs) => seqs.insert(seq),
            None => out.entry(persona.into()).or_default().insert(seq),
        };
    }
    Ok(out)
}

/// The data dir a database file is in.
fn data_dir_of(db_file: &Path) -> &Path {
    db_file.parent().unwrap_or(Path::new("."))
}

/// Opens (or creates, or repairs) the database file.
fn open_db(cfg: &StorageConfig, path: &Path) -> Result<Database, redb::DatabaseError> {
    redb::Builder::new().set_cache_size(cfg.cache_mb.saturating_mul(1 << 20)).create(path)
}

/// Refuses a data dir whose disk has less free space than `min_free_mb`.
fn check_free_space(cfg: &StorageConfig) -> Result<(), StorageError> {
    let dir = &cfg.data_dir;
    std::fs::create_dir_all(dir).map_err(|source| StorageError::Io { path: dir.clone(), source })?;
    let disk = disk_of(dir).map_err(|source| StorageError::Io { path: dir.clone(), source })?;
    if disk.free_mb() < cfg.min_free_mb {
        return Err(StorageError::NoSpace {
            path: dir.clone(),
            free_mb: disk.free_mb(),
            disk: disk.name,
            min_mb: cfg.min_free_mb,
        });
    }
    Ok(())
}

fn open_all(txn: &WriteTransaction) -> Result<(), redb::Error> {
    Tables::open(txn).map(drop)
}

/// Every table, opened once per batch (opening costs more than most single writes).
struct Tables<'t> {
    meta: redb::Table<'t, &'static str, u64>,
    events: redb::Table<'t, u64, &'static [u8]>,
    event_ids: redb::Table<'t, &'static str, u64>,
    pending: redb::Table<'t, (u64, &'static str), u32>,
    pending_by_seq: redb::Table<'t, u64, u32>,
    decisions: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    decision_log: redb::Table<'t, u64, &'static [u8]>,
    outbox: redb::Table<'t, u64, &'static [u8]>,
    self_state: redb::Table<'t, &'static str, &'static [u8]>,
    memory: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    evictions: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    dead_letters: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    counters: redb::Table<'t, (&'static str, &'static str), u64>,
    rooms: redb::Table<'t, (&'static str, &'static str), ()>,
    plans: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    learnings: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    experiences: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    procedures: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    knowledge: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    profiles: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    consolidations: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    references: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    conversation: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    studies: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    forwards: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    placement: redb::Table<'t, &'static str, &'static [u8]>,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Tables {
            meta: txn.open_table(META)?,
            events: txn.open_table(EVENTS)?,
            event_ids: txn.open_table(EVENT_IDS)?,
            pending: txn.open_table(PENDING)?,
            pending_by_seq: txn.open_table(PENDING_BY_SEQ)?,
            decisions: txn.open_table(DECISIONS)?,
            decision_log: txn.open_table(DECISION_LOG)?,
            outbox: txn.open_table(OUTBOX)?,
            self_state: txn.open_table(SELF_STATE)?,
            memory: txn.open_table(MEMORY)?,
            evictions: txn.open_table(EVICTIONS)?,
            dead_letters: txn.open_table(DEAD_LETTERS)?,
            counters: txn.open_table(COUNTERS)?,
            rooms: txn.open_table(ROOMS)?,
            plans: txn.open_table(PLANS)?,
            learnings: txn.open_table(LEARNINGS)?,
            experiences: txn.open_table(EXPERIENCES)?,
            procedures: txn.open_table(PROCEDURES)?,
            knowledge: txn.open_table(KNOWLEDGE)?,
            profiles: txn.open_table(PROFILES)?,
            consolidations: txn.open_table(CONSOLIDATIONS)?,
            references: txn.open_table(REFERENCES)?,
            conversation: txn.open_table(CONVERSATION)?,
            studies: txn.open_table(STUDIES)?,
            forwards: txn.open_table(FORWARDS)?,
            placement: txn.open_table(PLACEMENT)?,
        })
    }
}

/// Counters kept in `meta`, cached by the writer.
#[derive(Debug, Clone, Default)]
struct Meta {
    next_seq: u64,
    next_decision: u64,
    next_outbox: u64,
    next_eviction: u64,
    next_dead: u64,
    next_plan: u64,
    next_memory: u64,
    pending: u64,
    outbox_count: u64,
    events_count: u64,
}

const META_KEYS: [&str; 10] = [
    "next_seq",
    "next_decision",
    "next_outbox",
    "next_eviction",
    "next_dead",
    "next_plan",
    "next_memory",
    "pending",
    "outbox_count",
    "events_count",
];

impl Meta {
    fn fields(&mut self) -> [&mut u64; 10] {
        [
            &mut self.next_seq,
            &mut self.next_decision,
            &mut self.next_outbox,
            &mut self.next_eviction,
            &mut self.next_dead,
            &mut self.next_plan,
            &mut self.next_memory,
            &mut self.pending,
            &mut self.outbox_count,
            &mut self.events_count,
        ]
    }

    fn load(db: &Database) -> Result<Meta, redb::Error> {
        let txn = db.begin_read()?;
        let t = txn.open_table(META)?;
        let mut m = Meta::default();
        for (k, f) in META_KEYS.iter().zip(m.fields()) {
            *f = t.get(*k)?.map_or(0, |g| g.value());
        }
        m.next_seq = m.next_seq.max(1);
        Ok(m)
    }

    fn save(&mut self, t: &mut redb::Table<&str, u64>) -> Result<(), redb::Error> {
        for (k, f) in META_KEYS.iter().zip(self.fields()) {
            t.insert(*k, *f)?;
        }
        Ok(())
    }
}

/// The writes of one group of personas that the writer holds back (`write_behind`): however
/// often a persona's state or memory changes, or it decides, in that time, each of its rows is
/// written once. Loads and readers read through them, so they see every write sent before them.
#[derive(Default)]
struct Held {
    states: HashMap<Arc<str>, Box<SelfStateData>>,
    /// `None` deletes the row.
    memory: BTreeMap<(Arc<str>, u64), Option<Box<WmEntry>>>,
    evictions: Vec<(Arc<str>, Eviction)>,
    /// Decisions in `decision_log` not yet copied into `decisions`, in number order.
    decisions: Vec<(Arc<str>, u64, Decision)>,
}

impl Held {
    fn len(&self) -> usize {
        self.states.len() + self.memory.len() + self.evictions.len() + self.decisions.len()
    }

    fn memory_of(&self, persona: &Arc<str>) -> impl Iterator<Item = (&u64, &Option<Box<WmEntry>>)> {
        self.memory.range((persona.clone(), 0)..=(persona.clone(), u64::MAX)).map(|((_, id), e)| (id, e))
    }
}

/// The held writes in groups of personas (by a hash of the name). Each `write_behind / GROUPS`
/// the next group is committed, so each persona's rows are written about once per
/// `write_behind`, and that work is spread over the interval instead of stalling one commit.
struct Behind {
    groups: Vec<Held>,
    /// The group committed next, and when (`None` while nothing is held).
    next: usize,
    next_at: Option<Instant>,
}

impl Behind {
    const GROUPS: usize = 64;
    /// Most writes held before all are committed regardless of their age.
    const MAX: usize = 100_000;

    fn new() -> Behind {
        Behind { groups: (0..Self::GROUPS).map(|_| Held::default()).collect(), next: 0, next_at: None }
    }

    fn group(persona: &str) -> usize {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(persona, &mut h);
        std::hash::Hasher::finish(&h) as usize % Self::GROUPS
    }

    /// The held writes of `persona`, to add to (starting the clock if nothing was held).
    fn of(&mut self, persona: &str, write_behind: Duration) -> &mut Held {
        if self.next_at.is_none() {
            self.next_at = Some(Instant::now() + write_behind / Self::GROUPS as u32);
        }
        &mut self.groups[Self::group(persona)]
    }

    fn get(&self, persona: &str) -> &Held {
        &self.groups[Self::group(persona)]
    }

    fn len(&self) -> usize {
        self.groups.iter().map(Held::len).sum()
    }

    /// How long until the next group is due; `None` when nothing is held.
    fn due_in(&self) -> Option<Duration> {
        self.next_at.map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// The groups to write in this batch: all of them, the next one when it is due, or none.
    fn to_write(&self, all: bool) -> Vec<usize> {
        if all || self.len() >= Self::MAX {
            (0..Self::GROUPS).filter(|g| self.groups[*g].len() > 0).collect()
        } else if self.due_in().is_some_and(|d| d.is_zero()) {
            vec![self.next]
        } else {
            Vec::new()
        }
    }

    /// After a commit that wrote `groups` (in the order `to_write` gave them).
    fn written(&mut self, groups: &[usize], write_behind: Duration) {
        for g in groups {
            self.groups[*g] = Held::default();
        }
        if groups.len() == 1 {
            self.next = (self.next + 1) % Self::GROUPS;
        }
        self.next_at = (self.len() > 0).then(|| Instant::now() + write_behind / Self::GROUPS as u32);
    }

    /// Puts the decisions of `decision_log` (oldest first) back in their groups.
    fn set_decisions(&mut self, logged: Vec<(Arc<str>, u64, Decision)>, write_behind: Duration) {
        for g in &mut self.groups {
            g.decisions.clear();
        }
        for (p, key, d) in logged {
            self.of(&p.clone(), write_behind).decisions.push((p, key, d));
        }
    }
}

/// Every sample since start, in buckets 5% apart: percentiles within 5% in constant memory.
#[derive(Debug)]
struct LogHistogram {
    /// Bucket `i` holds values up to `MIN_MS * GROWTH^i` (the first also everything below).
    counts: Vec<u64>,
    total: u64,
    max: f64,
}

impl LogHistogram {
    const MIN_MS: f64 = 0.01;
    const GROWTH: f64 = 1.05;
    /// Up to 0.01 ms x 1.05^400, about 3,000 s; the last bucket also holds anything longer.
    const BUCKETS: usize = 401;

    fn push(&mut self, ms: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; Self::BUCKETS];
        }
        let i = if ms <= Self::MIN_MS { 0.0 } else { ((ms / Self::MIN_MS).ln() / Self::GROWTH.ln()).ceil() };
        self.counts[(i as usize).min(Self::BUCKETS - 1)] += 1;
        self.total += 1;
        self.max = self.max.max(ms);
    }

    /// The upper bound of the bucket holding the `p` quantile (never above the maximum seen).
    fn percentile(&self, p: f64) -> f64 {
        let rank = ((self.total as f64 * p).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return (Self::MIN_MS * Self::GROWTH.powi(i as i32)).min(self.max);
            }
        }
        0.0
    }
}

/// A bounded window of recent samples for percentiles.
#[derive(Debug, Default)]
struct Samples {
    buf: Vec<f64>,
    next: usize,
}

impl Samples {
    const CAP: usize = 8192;

    fn push(&mut self, v: f64) {
        if self.buf.len() < Self::CAP {
            self.buf.push(v);
        } else {
            self.buf[self.next] = v;
        }
        self.next = (self.next + 1) % Self::CAP;
    }

    fn percentile(&self, p: f64) -> f64 {
        if self.buf.is_empty() {
            return 0.0;
        }
        let mut v = self.buf.clone();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
}

/// Why a batch was not committed, as each of its requests is answered.
struct NotCommitted {
    message: String,
    kind: Kind,
}

impl NotCommitted {
    /// The disk failed it: the writer retries once the disk heals.
    fn retried(&self) -> bool {
        self.kind != Kind::Other
    }

    /// The answer to an injection in the batch: refused, not acknowledged.
    fn refusal(&self) -> InjectError {
        match self.kind {
            Kind::NoSpace => InjectError::NoSpace(self.message.clone()),
            Kind::Io => InjectError::Unavailable(self.message.clone()),
            Kind::Other => InjectError::Storage(self.message.clone()),
        }
    }
}

/// Run once the batch's transaction committed or failed. A request that waits for an answer
/// and can wait longer (a flush, a load) hands itself back when the disk failed the batch, to
/// be answered once it heals.
type AfterCommit = Box<dyn FnOnce(Result<(), &NotCommitted>) -> Option<Op> + Send>;

/// What became of an injection in the batch's transaction, answered once it commits.
enum Injected {
    Duplicate(InjectAck),
    /// Refused: this many deliveries were pending (each target journals the refusal).
    QueueFull(u64),
    Stored {
        ack: InjectAck,
        seq: u64,
        event: Arc<Event>,
    },
}

/// The writer while it cannot write (see `recover.rs`).
struct Failed {
    kind: Kind,
    reason: String,
    since: Instant,
    backoff: disk::Backoff,
    log: disk::RateLimited,
    /// Events refused meanwhile.
    refused: u64,
}

struct Writer {
    db: DbSlot,
    health: Health,
    /// Set while the disk fails the writes; requests wait in `parked` meanwhile.
    failed: Option<Failed>,
    /// Requests to apply before any new one, in order: held while the disk failed.
    parked: VecDeque<Op>,
    cfg: StorageConfig,
    path: PathBuf,
    meta: Meta,
    stats: StorageStats,
    commit_ms: Samples,
    /// The `commit()` call alone (the fsync and page writes), without applying the batch.
    fsync_ms: Samples,
    decision_ms: Samples,
    decision_all: LogHistogram,
    held: Behind,
    /// Each persona's hot journals (see `trim_journal`).
    journal_counts: HashMap<String, [JournalCount; 3]>,
    /// The sequence numbers of each persona's pending deliveries: the `pending` table by
    /// persona, for restores (kept in step with the table, reloaded if a commit fails).
    pending_of: HashMap<Arc<str>, BTreeSet<u64>>,
}

impl Writer {
    fn new(db: DbSlot, health: Health, cfg: StorageConfig, path: PathBuf) -> Result<Writer, redb::Error> {
        let handle = db.get().ok_or(redb::Error::DatabaseClosed)?;
        let meta = Meta::load(&handle)?;
        let pending_of = load_pending_of(&handle)?;
        let mut held = Behind::new();
        held.set_decisions(load_decision_log(&handle)?, cfg.write_behind);
        let stats = StorageStats {
            path: path.display().to_string(),
            schema_version: SCHEMA_VERSION,
            pending: meta.pending,
            ..Default::default()
        };
        Ok(Writer {
            db,
            health,
            failed: None,
            parked: VecDeque::new(),
            cfg,
            path,
            meta,
            stats,
            commit_ms: Samples::default(),
            fsync_ms: Samples::default(),
            decision_ms: Samples::default(),
            decision_all: LogHistogram { counts: Vec::new(), total: 0, max: 0.0 },
            held,
            journal_counts: HashMap::new(),
            pending_of,
        })
    }

    fn run(mut self, rx: Receiver<Op>) {
        let mut batch = Vec::with_capacity(self.cfg.max_batch);
        let mut closing = None;
        loop {
            if let Some(wait) = self.failed.as_ref().map(|f| f.backoff.wait()) {
                // The disk failed a write: hold what comes until it heals (`recover.rs`).
                match rx.recv_timeout(wait) {
                    Ok(Op::Close(tx)) => {
                        closing = Some(tx);
                        break;
                    }
                    Ok(op) => self.while_failed(op),
                    Err(RecvTimeoutError::Timeout) => self.recover(),
                    Err(RecvTimeoutError::Disconnected) => break,
                }
                continue;
            }
            let first = match self.held.due_in() {
                _ if !self.parked.is_empty() => self.parked.pop_front(),
                None => rx.recv().ok(),
                Some(wait) => match rx.recv_timeout(wait) {
                    Ok(op) => Some(op),
                    Err(RecvTimeoutError::Timeout) => {
                        let _ = self.apply_batch(&mut batch, false);
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => None,
                },
            };
            let Some(op) = first else { break };
            batch.push(op);
            while batch.len() < self.cfg.max_batch {
                match self.parked.pop_front().map_or_else(|| rx.try_recv().ok(), Some) {
                    Some(op) => batch.push(op),
                    None => break,
                }
            }
            // Nothing after a close in this batch is applied: the close is last.
            if let Some(i) = batch.iter().position(|op| matches!(op, Op::Close(_))) {
                if let Op::Close(tx) = batch.remove(i) {
                    closing = Some(tx);
                }
                batch.truncate(i);
            }
            let _ = self.apply_batch(&mut batch, closing.is_some());
            if closing.is_some() {
                break;
            }
        }
        if self.failed.is_some() {
            // One last try; what stays unwritten is logged (pending deliveries resume on the
            // next start, as after a crash).
            self.recover();
        }
        if self.failed.is_none() && (self.held.len() > 0 || !self.parked.is_empty()) {
            // Every handle dropped without a close: still commit what is held.
            batch.extend(self.parked.drain(..));
            let _ = self.apply_batch(&mut batch, true);
        }
        if let Some(f) = &self.failed {
            tracing::error!(
                path = %self.path.display(), reason = %f.reason, unwritten = self.parked.len() + self.held.len(),
                "storage writer stops with writes it could not store; unfinished deliveries resume on the next start"
            );
        }
        drop(self.db.take());
        if let Some(tx) = closing {
            let _ = tx.send(());
        }
        tracing::debug!(path = %self.path.display(), "storage writer stopped");
    }

    /// Applies a batch in one transaction and commits it; `flush` also commits the held
    /// writes, as does a `Flush` request or their age. When the disk failed it, the writer
    /// is [`Writer::failed`] and the batch's writes wait in `parked`.
    fn apply_batch(&mut self, batch: &mut Vec<Op>, flush: bool) -> Result<(), Kind> {
        let started = Instant::now();
        let n = batch.len();
        let flush = flush || batch.iter().any(|op| matches!(op, Op::Flush(_)));
        // Copies of the writes, for a disk that fails the commit (see `Op::retry_copy`).
        let mut copies: Vec<Option<Op>> = batch.iter().map(Op::retry_copy).collect();
        let mut ops = std::mem::take(batch).into_iter();
        let mut applied = 0;
        let mut wrote_held = Vec::new();
        let mut after: Vec<AfterCommit> = Vec::with_capacity(n);
        let result = (|| -> Result<bool, redb::Error> {
            let db = self.db.get().ok_or(redb::Error::DatabaseClosed)?;
            let mut txn = db.begin_write()?;
            txn.set_durability(Durability::Immediate).map_err(|e| redb::Error::Corrupted(e.to_string()))?;
            let mut dirty = false;
            {
                let mut t = Tables::open(&txn)?;
                for op in ops.by_ref() {
                    applied += 1;
                    dirty |= self.apply(&mut t, op, &mut after)?;
                }
                wrote_held = self.held.to_write(flush);
                if wrote_held.iter().any(|g| self.held.groups[*g].len() > 0) {
                    self.write_held(&mut t, &wrote_held)?;
                    dirty = true;
                }
                if dirty {
                    self.trim_events(&mut t)?;
                    self.meta.save(&mut t.meta)?;
                }
            }
            if dirty {
                let sync = Instant::now();
                txn.commit()?;
                self.fsync_ms.push(sync.elapsed().as_secs_f64() * 1e3);
            } else {
                txn.abort()?;
            }
            Ok(dirty)
        })();
        self.stats.requests += n as u64;
        self.stats.busy_s += started.elapsed().as_secs_f64();
        match result {
            Ok(dirty) => {
                if !wrote_held.is_empty() {
                    self.held.written(&wrote_held, self.cfg.write_behind);
                }
                if dirty {
                    self.stats.commits += 1;
                    self.commit_ms.push(started.elapsed().as_secs_f64() * 1e3);
                }
                self.stats.pending = self.meta.pending;
                for a in after {
                    a(Ok(()));
                }
                Ok(())
            }
            Err(e) => {
                self.stats.errors += 1;
                let kind = disk::kind(&e);
                let not = NotCommitted {
                    message: match kind {
                        Kind::Other => e.to_string(),
                        _ => disk::describe(self.data_dir(), &e, kind),
                    },
                    kind,
                };
                // The transaction is gone: reload the counters and the index it may have changed.
                self.reload();
                let mut again: Vec<Op> = Vec::new();
                if not.retried() {
                    again.extend(copies.drain(..applied).flatten());
                }
                again.extend(after.into_iter().filter_map(|a| a(Err(&not))));
                // What the failure did not reach goes in the next batch, in order.
                again.extend(ops);
                for op in again.into_iter().rev() {
                    self.parked.push_front(op);
                }
                if not.retried() {
                    self.fail(kind, not.message);
                } else {
                    tracing::error!(path = %self.path.display(), error = %e, "storage commit failed");
                }
                Err(kind)
            }
        }
    }

    /// Reloads what a failed transaction may have changed in memory.
    fn reload(&mut self) {
        let Some(db) = self.db.get() else { return };
        if let Ok(m) = Meta::load(&db) {
            self.meta = m;
        }
        if let Ok(p) = load_pending_of(&db) {
            self.pending_of = p;
        }
        if let Ok(d) = load_decision_log(&db) {
            self.held.set_decisions(d, self.cfg.write_behind);
        }
        self.journal_counts.clear();
    }

    fn data_dir(&self) -> &Path {
        data_dir_of(&self.path)
    }

    /// Applies one request inside the batch's transaction; true when it wrote anything.
    fn apply(&mut self, t: &mut Tables<'_>, op: Op, after: &mut Vec<AfterCommit>) -> Result<bool, redb::Error> {
        match op {
            Op::Inject { event, targets, elsewhere, reply } => match self.inject(t, event, &targets) {
                Ok(injected) => {
                    let wrote = !matches!(injected, Injected::Duplicate(_));
                    after.push(Box::new(move |r| {
                        let answer = match (r, injected) {
                            (Err(not), _) => Err(not.refusal()),
                            (Ok(()), Injected::Duplicate(ack)) => Ok(ack),
                            (Ok(()), Injected::QueueFull(pending)) => Err(InjectError::QueueFull { pending }),
                            (Ok(()), Injected::Stored { ack, seq, event }) => {
                                let _ = reply.send(Ok(ack));
                                deliver(&targets, elsewhere, seq, &event);
                                return None;
                            }
                        };
                        let _ = reply.send(answer);
                        None
                    }));
                    Ok(wrote)
                }
                Err(e) => {
                    // Refused with the batch's failure, which this error makes.
                    after.push(Box::new(move |r| {
                        let _ = reply.send(Err(r.err().map_or_else(
                            || InjectError::Storage("not stored: the batch failed".into()),
                            NotCommitted::refusal,
                        )));
                        None
                    }));
                    Err(e)
                }
            },
            Op::Commit { commit, reply_targets, elsewhere, forwards } => {
                let PersonaCommit { persona, seq, accepted_us, decision, reply, plan, said } = *commit;
                if !self.finish_delivery(t, &persona, seq)? {
                    self.stats.stale_finishes += 1;
                    return Ok(false);
                }
                if matches!(decision.verdict, Verdict::Shed | Verdict::Duplicate) {
                    let name = decision.verdict.as_str();
                    let n = t.counters.get((&*persona, name))?.map_or(0, |g| g.value());
                    t.counters.insert((&*persona, name), n + 1)?;
                }
                self.put_decision(t, &persona, decision)?;
                self.stats.decisions += 1;
                if let Some(said) = said {
                    put_said(t, &persona, &said)?;
                }
                if let Some(plan) = plan {
                    self.put_plan(t, &persona, &plan)?;
                }
                let latency_ms = (now_us() - accepted_us).max(0) as f64 / 1e3;
                self.decision_ms.push(latency_ms);
                self.decision_all.push(latency_ms);
                if let Some((entry, event)) = reply {
                    self.put_outbox(t, &entry)?;
                    let (rseq, event) = self.put_event(t, event, &reply_targets)?;
                    for f in &forwards {
                        t.forwards.insert((&*f.node, rseq), f.request.as_slice())?;
                    }
                    after.push(Box::new(move |r| {
                        if r.is_ok() {
                            deliver(&reply_targets, elsewhere, rseq, &event);
                            for f in forwards {
                                let _ = f.to.send((rseq, f.request));
                            }
                        }
                        None
                    }));
                }
                Ok(true)
            }
            Op::Consolidate(persona, c) => {
                self.put_consolidation(t, &persona, *c)?;
                Ok(true)
            }
            Op::Forwarded(node, seq) => {
                t.forwards.remove((&*node, seq))?;
                Ok(true)
            }
            Op::Release { persona, version, node, to, reply } => {
                let snapshot = self.release(t, &persona, &node, version)?;
                let done = HandOff {
                    persona: persona.to_string(),
                    node: node.to_string(),
                    version,
                    rows: snapshot.rows(),
                    pending: snapshot.pending.len(),
                    duplicate: false,
                };
                // Kept under a seq, so it goes out in order with the replies around it.
                let key = self.meta.next_seq;
                self.meta.next_seq += 1;
                let mut request = vec![FORWARD_ADOPT];
                request.extend(snapshot.encode());
                t.forwards.insert((&*node, key), request.as_slice())?;
                after.push(Box::new(move |r| {
                    if r.is_ok() {
                        let _ = to.send((key, request));
                    }
                    let _ = reply.send(r.map(|_| done).map_err(|n| n.message.clone()));
                    None
                }));
                Ok(true)
            }
            Op::Adopt(snapshot, reply) => {
                let done = self.adopt(t, *snapshot)?;
                after.push(Box::new(move |r| {
                    let _ = reply.send(r.map(|_| done).map_err(|n| n.message.clone()));
                    None
                }));
                Ok(true)
            }
            Op::Place(persona, node, version) => {
                let newer = match t.placement.get(&*persona)? {
                    Some(row) => handoff::placement_of(row.value())?.1 < version,
                    None => true,
                };
                if newer {
                    t.placement.insert(&*persona, handoff::placement_row(&node, version).as_slice())?;
                }
                Ok(newer)
            }
            Op::JoinRoom(room, persona) => {
                t.rooms.insert((room.as_str(), &*persona), ())?;
                Ok(true)
            }
            Op::SelectReference(persona, m) => {
                t.references.insert((&*persona, m.id.as_str()), enc(&*m).as_slice())?;
                Ok(true)
            }
            Op::Study(persona, session, knowledge) => {
                self.put_study(t, &persona, &session, knowledge.as_deref())?;
                Ok(true)
            }
            Op::SaidMarks(persona, marks) => {
                mark_said(&mut t.conversation, &persona, marks)?;
                Ok(true)
            }
            Op::PutSelfState(persona, state) => {
                self.held.of(&persona, self.cfg.write_behind).states.insert(persona, state);
                Ok(false)
            }
            Op::PutMemory(persona, entry) => {
                self.held.of(&persona, self.cfg.write_behind).memory.insert((persona, entry.id), Some(entry));
                Ok(false)
            }
            Op::DeleteMemory(persona, id, eviction) => {
                let held = self.held.of(&persona, self.cfg.write_behind);
                if let Some(ev) = eviction {
                    held.evictions.push((persona.clone(), ev));
                }
                held.memory.insert((persona, id), None);
                Ok(false)
            }
            Op::Crash { persona, seq, reason } => {
                let Some(crashes) = t.pending.get((seq, &*persona))?.map(|g| g.value() + 1) else {
                    return Ok(false);
                };
                if crashes < self.cfg.max_crashes_per_event {
                    t.pending.insert((seq, &*persona), crashes)?;
                    return Ok(true);
                }
                let event: Option<Event> = match t.events.get(seq)? {
                    Some(b) => Some(dec(b.value())?),
                    None => None,
                };
                let event_id = event.map_or_else(|| format!("seq {seq}"), |e| e.id);
                self.finish_delivery(t, &persona, seq)?;
                let now = now_us();
                let dl = DeadLetter {
                    persona: persona.to_string(),
                    event_id: event_id.clone(),
                    crashes,
                    reason: reason.clone(),
                    at_us: now,
                };
                let key = self.meta.next_dead;
                self.meta.next_dead += 1;
                t.dead_letters.insert((&*persona, key), enc(&dl).as_slice())?;
                let decision = Decision {
                    event_id,
                    verdict: Verdict::DeadLetter,
                    reason: format!("crashed the persona {crashes} times (last: {reason}); moved to the dead letters"),
                    by: "supervisor".into(),
                    priority: 0.0,
                    numbers: vec![("crashes".into(), crashes as f64)],
                    at_us: now,
                    references: Vec::new(),
                };
                self.put_decision(t, &persona, decision)?;
                self.stats.dead_letters += 1;
                Ok(true)
            }
            Op::LoadSelfState(persona, tx) => {
                let v = match (self.held.get(&persona).states.get(&persona), t.self_state.get(&*persona)?) {
                    (Some(held), _) => Some((**held).clone()),
                    (None, Some(b)) => Some(dec(b.value())?),
                    (None, None) => None,
                };
                after.push(Box::new(move |r| match r {
                    Err(n) if n.retried() => Some(Op::LoadSelfState(persona, tx)),
                    _ => {
                        let _ = tx.send(v);
                        None
                    }
                }));
                Ok(false)
            }
            Op::LoadMemory(persona, tx) => {
                let mut rows = BTreeMap::new();
                for r in t.memory.range((&*persona, 0)..=(&*persona, u64::MAX))? {
                    let (k, v) = r?;
                    rows.insert(k.value().1, dec::<WmEntry>(v.value())?);
                }
                for (id, e) in self.held.get(&persona).memory_of(&persona) {
                    match e {
                        Some(e) => rows.insert(*id, (**e).clone()),
                        None => rows.remove(id),
                    };
                }
                let v: Vec<WmEntry> = rows.into_values().collect();
                after.push(Box::new(move |r| match r {
                    Err(n) if n.retried() => Some(Op::LoadMemory(persona, tx)),
                    _ => {
                        let _ = tx.send(v);
                        None
                    }
                }));
                Ok(false)
            }
            Op::LoadInbox(persona, tx) => {
                let mut out = InboxRestore::default();
                for &seq in self.pending_of.get(&*persona).into_iter().flatten() {
                    let Some(crashes) = t.pending.get((seq, &*persona))? else { continue };
                    if let Some(b) = t.events.get(seq)? {
                        out.deliveries.push(Delivery {
                            seq,
                            event: Arc::new(dec(b.value())?),
                            crashes: crashes.value(),
                            audience: 0,
                        });
                    }
                }
                out.shed = t.counters.get((&*persona, Verdict::Shed.as_str()))?.map_or(0, |g| g.value());
                out.duplicates = t.counters.get((&*persona, Verdict::Duplicate.as_str()))?.map_or(0, |g| g.value());
                after.push(Box::new(move |r| match r {
                    Err(n) if n.retried() => Some(Op::LoadInbox(persona, tx)),
                    _ => {
                        let _ = tx.send(out);
                        None
                    }
                }));
                Ok(false)
            }
            Op::Stats(tx) => {
                let _ = tx.send(self.stats());
                Ok(false)
            }
            Op::Flush(tx) => {
                after.push(Box::new(move |r| match r {
                    Err(n) if n.retried() => Some(Op::Flush(tx)),
                    _ => {
                        let _ = tx.send(());
                        None
                    }
                }));
                Ok(false)
            }
            Op::Close(_) => unreachable!("taken out of the batch by the writer loop"),
        }
    }

    fn stats(&self) -> StorageStats {
        let mut s = self.stats.clone();
        s.pending = self.meta.pending;
        s.held_writes = self.held.len() as u64;
        s.mean_batch = if s.commits == 0 { 0.0 } else { s.requests as f64 / s.commits as f64 };
        s.commit_p50_ms = self.commit_ms.percentile(0.5);
        s.commit_p99_ms = self.commit_ms.percentile(0.99);
        s.fsync_p50_ms = self.fsync_ms.percentile(0.5);
        s.decision_p50_ms = self.decision_ms.percentile(0.5);
        s.decision_p99_ms = self.decision_ms.percentile(0.99);
        s.decision_p99_all_ms = self.decision_all.percentile(0.99);
        s.decision_max_ms = self.decision_all.max;
        s.failure = self.failed.as_ref().map(|f| f.reason.clone());
        s.parked = self.parked.len() as u64;
        s
    }

    /// Stores an event for its targets, unless it is known or the durable queue is full.
    fn inject(&mut self, t: &mut Tables<'_>, event: Box<Event>, targets: &[Target]) -> Result<Injected, redb::Error> {
        if t.event_ids.get(event.id.as_str())?.is_some() {
            self.stats.duplicates += 1;
            return Ok(Injected::Duplicate(InjectAck {
                event_id: event.id,
                accepted: true,
                duplicate: true,
                personas: Vec::new(),
            }));
        }
        if self.meta.pending + targets.len() as u64 > self.cfg.max_pending {
            let pending = self.meta.pending;
            let reason = format!("durable queue full: {pending} deliveries pending (limit {})", self.cfg.max_pending);
            for (persona, _) in targets {
                self.put_decision(t, persona, skipped(&event, &reason))?;
            }
            return Ok(Injected::QueueFull(pending));
        }
        let (seq, event) = self.put_event(t, *event, targets)?;
        self.stats.accepted += 1;
        let ack = InjectAck {
            event_id: event.id.clone(),
            accepted: true,
            duplicate: false,
            personas: targets.iter().map(|(p, _)| p.to_string()).collect(),
        };
        Ok(Injected::Stored { ack, seq, event })
    }

    /// Writes the held writes of `groups` into the batch's transaction (the caller clears
    /// them once it commits), and drops from `decision_log` what no other group still holds.
    fn write_held(&mut self, t: &mut Tables<'_>, groups: &[usize]) -> Result<(), redb::Error> {
        let limit = self.cfg.decisions_per_persona;
        for &g in groups {
            let held = &self.held.groups[g];
            for (persona, state) in &held.states {
                t.self_state.insert(&**persona, enc(&**state).as_slice())?;
            }
            for ((persona, id), e) in &held.memory {
                match e {
                    Some(e) => t.memory.insert((&**persona, *id), enc(&**e).as_slice())?,
                    None => t.memory.remove((&**persona, *id))?,
                };
            }
            for (persona, ev) in &held.evictions {
                let key = self.meta.next_eviction;
                self.meta.next_eviction += 1;
                t.evictions.insert((&**persona, key), enc(ev).as_slice())?;
                trim_journal(&mut self.journal_counts, &mut t.evictions, persona, Journal::Evictions, EVICTIONS_KEPT)?;
            }
            for (persona, key, d) in &held.decisions {
                t.decisions.insert((&**persona, *key), enc(d).as_slice())?;
                trim_journal(&mut self.journal_counts, &mut t.decisions, persona, Journal::Decisions, limit)?;
            }
        }
        // The log keeps every decision from the oldest one still held on.
        let kept = (0..Behind::GROUPS)
            .filter(|g| !groups.contains(g))
            .filter_map(|g| self.held.groups[g].decisions.first().map(|(_, key, _)| *key))
            .min()
            .unwrap_or(u64::MAX);
        while t.decision_log.first()?.is_some_and(|(k, _)| k.value() < kept) {
            t.decision_log.pop_first()?;
        }
        Ok(())
    }

    /// Stores a new event and one delivery per target; returns its sequence number.
    fn put_event(
        &mut self,
        t: &mut Tables<'_>,
        event: Event,
        targets: &[Target],
    ) -> Result<(u64, Arc<Event>), redb::Error> {
        let seq = self.meta.next_seq;
        self.meta.next_seq += 1;
        t.events.insert(seq, enc(&event).as_slice())?;
        t.event_ids.insert(event.id.as_str(), seq)?;
        self.meta.events_count += 1;
        if !targets.is_empty() {
            for (persona, _) in targets {
                t.pending.insert((seq, &**persona), 0u32)?;
                self.pending_of.entry(persona.clone()).or_default().insert(seq);
            }
            t.pending_by_seq.insert(seq, targets.len() as u32)?;
            self.meta.pending += targets.len() as u64;
        }
        Ok((seq, Arc::new(event)))
    }

    /// Removes a delivery; false when it was not pending (already finished).
    fn finish_delivery(&mut self, t: &mut Tables<'_>, persona: &str, seq: u64) -> Result<bool, redb::Error> {
        if t.pending.remove((seq, persona))?.is_none() {
            return Ok(false);
        }
        if let Some(seqs) = self.pending_of.get_mut(persona) {
            seqs.remove(&seq);
            if seqs.is_empty() {
                self.pending_of.remove(persona);
            }
        }
        self.meta.pending = self.meta.pending.saturating_sub(1);
        let left = t.pending_by_seq.get(seq)?.map_or(0, |g| g.value()).saturating_sub(1);
        if left == 0 {
            t.pending_by_seq.remove(seq)?;
        } else {
            t.pending_by_seq.insert(seq, left)?;
        }
        Ok(true)
    }

    /// Journals a decision: appended to `decision_log` in this transaction (one page for the
    /// whole batch), and copied into the persona's `decisions` rows with the held writes.
    fn put_decision(&mut self, t: &mut Tables<'_>, persona: &Arc<str>, d: Decision) -> Result<(), redb::Error> {
        let key = self.meta.next_decision;
        self.meta.next_decision += 1;
        t.decision_log.insert(key, enc(&(&**persona, &d)).as_slice())?;
        self.held.of(persona, self.cfg.write_behind).decisions.push((persona.clone(), key, d));
        Ok(())
    }

    fn put_consolidation(&mut self, t: &mut Tables<'_>, persona: &str, c: Consolidation) -> Result<(), redb::Error> {
        let mut report = c.report;
        for e in &c.experiences {
            let key = self.meta.next_memory;
            self.meta.next_memory += 1;
            t.experiences.insert((persona, key), enc(e).as_slice())?;
            let gone = bounded(&mut t.experiences, &mut t.counters, persona, "experiences", EXPERIENCES_KEPT)?;
            if gone > 0 {
                report.dropped.push(format!("{gone} oldest experience: limit {EXPERIENCES_KEPT}"));
            }
        }
        for k in &c.knowledge {
            let key = self.meta.next_memory;
            self.meta.next_memory += 1;
            t.knowledge.insert((persona, key), enc(k).as_slice())?;
            let gone = bounded(&mut t.knowledge, &mut t.counters, persona, "knowledge", KNOWLEDGE_KEPT)?;
            if gone > 0 {
                report.dropped.push(format!("{gone} oldest knowledge entry: limit {KNOWLEDGE_KEPT}"));
            }
        }
        for p in &c.procedures {
            t.procedures.insert((persona, p.name.as_str()), enc(p).as_slice())?;
        }
        // At most PROCEDURES_PER_DOMAIN per domain: the least proven go.
        let mut by_domain: BTreeMap<String, Vec<Procedure>> = BTreeMap::new();
        for r in t.procedures.range((persona, "")..)? {
            let (k, v) = r?;
            if k.value().0 != persona {
                break;
            }
            let p: Procedure = dec(v.value())?;
            by_domain.entry(p.domain.clone()).or_default().push(p);
        }
        for (domain, mut ps) in by_domain {
            if ps.len() <= PROCEDURES_PER_DOMAIN {
                continue;
            }
            ps.sort_by(|a, b| {
                (b.success_rate * b.times_used as f64).total_cmp(&(a.success_rate * a.times_used as f64))
            });
            for p in &ps[PROCEDURES_PER_DOMAIN..] {
                t.procedures.remove((persona, p.name.as_str()))?;
                report.dropped.push(format!(
                    "procedure {:?} ({domain}): limit {PROCEDURES_PER_DOMAIN} per domain, least proven",
                    p.name
                ));
            }
        }
        for p in &c.profiles {
            t.profiles.insert((persona, p.user.as_str()), enc(p).as_slice())?;
        }
        t.counters.insert((persona, "consolidated"), c.watermark)?;
        let key = self.meta.next_memory;
        self.meta.next_memory += 1;
        t.consolidations.insert((persona, key), enc(&report).as_slice())?;
        bounded(&mut t.consolidations, &mut t.counters, persona, "consolidations", CONSOLIDATIONS_KEPT)?;
        Ok(())
    }

    /// Keeps a study session, counts its answers in the learning `study: TOPIC` (passed ones
    /// as successes) and keeps the knowledge it left.
    fn put_study(
        &mut self,
        t: &mut Tables<'_>,
        persona: &str,
        s: &StudySession,
        knowledge: Option<&Knowledge>,
    ) -> Result<(), redb::Error> {
        t.studies.insert((persona, s.started_us.max(0) as u64), enc(s).as_slice())?;
        bounded(&mut t.studies, &mut t.counters, persona, "studies", STUDIES_KEPT)?;
        if !s.answers.is_empty() {
            let pattern = format!("study: {}", s.topic);
            let mut l = match t.learnings.get((persona, pattern.as_str()))? {
                Some(b) => dec(b.value())?,
                None => {
                    Learning { pattern: pattern.clone(), domain: "study".into(), successes: 0, failures: 0, last_us: 0 }
                }
            };
            let passed = s.answers.iter().filter(|a| a.passed()).count() as u32;
            l.successes += passed;
            l.failures += s.answers.len() as u32 - passed;
            l.last_us = s.finished_us;
            t.learnings.insert((persona, pattern.as_str()), enc(&l).as_slice())?;
        }
        if let Some(k) = knowledge {
            let key = self.meta.next_memory;
            self.meta.next_memory += 1;
            t.knowledge.insert((persona, key), enc(k).as_slice())?;
            bounded(&mut t.knowledge, &mut t.counters, persona, "knowledge", KNOWLEDGE_KEPT)?;
        }
        Ok(())
    }

    /// Journals a finished plan and counts its pattern as a success or a failure.
    fn put_plan(&mut self, t: &mut Tables<'_>, persona: &str, p: &PlanRecord) -> Result<(), redb::Error> {
        let key = self.meta.next_plan;
        self.meta.next_plan += 1;
        t.plans.insert((persona, key), enc(p).as_slice())?;
        trim_journal(&mut self.journal_counts, &mut t.plans, persona, Journal::Plans, PLANS_KEPT)?;
        if let Some(e) = &p.evaluation {
            let mut l = match t.learnings.get((persona, e.pattern.as_str()))? {
                Some(b) => dec(b.value())?,
                None => Learning {
                    pattern: e.pattern.clone(),
                    domain: p.domain.clone(),
                    successes: 0,
                    failures: 0,
                    last_us: 0,
                },
            };
            if e.success {
                l.successes += 1;
            } else {
                l.failures += 1;
            }
            l.last_us = p.finished_us.unwrap_or_else(now_us);
            t.learnings.insert((persona, e.pattern.as_str()), enc(&l).as_slice())?;
        }
        Ok(())
    }

    fn put_outbox(&mut self, t: &mut Tables<'_>, e: &OutboxEntry) -> Result<(), redb::Error> {
        let key = self.meta.next_outbox;
        self.meta.next_outbox += 1;
        t.outbox.insert(key, enc(e).as_slice())?;
        self.meta.outbox_count += 1;
        while self.meta.outbox_count > self.cfg.outbox_limit {
            if t.outbox.pop_first()?.is_none() {
                break;
            }
            self.meta.outbox_count -= 1;
        }
        Ok(())
    }

    /// Forgets the oldest finished events beyond the retention limit (a bounded amount per
    /// commit, so one commit never stalls on a large backlog).
    fn trim_events(&mut self, t: &mut Tables<'_>) -> Result<(), redb::Error> {
        if self.meta.events_count <= self.cfg.events_retained {
            return Ok(());
        }
        let excess = (self.meta.events_count - self.cfg.events_retained).min(1024) as usize;
        let mut victims = Vec::with_capacity(excess);
        for r in t.events.iter()? {
            if victims.len() == excess {
                break;
            }
            let (k, v) = r?;
            let seq = k.value();
            if t.pending_by_seq.get(seq)?.is_none() {
                victims.push((seq, dec::<Event>(v.value())?.id));
            }
        }
        for (seq, id) in victims {
            t.events.remove(seq)?;
            t.event_ids.remove(id.as_str())?;
            self.meta.events_count -= 1;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Journal {
    Decisions = 0,
    Plans = 1,
    Evictions = 2,
}

/// What the writer knows of one persona's hot journal: inserts since its last sweep, and its
/// number of rows once counted (`None` after opening, and after a failed commit, until the next
/// sweep counts them).
#[derive(Debug, Default, Clone, Copy)]
struct JournalCount {
    since_sweep: u64,
    rows: Option<u64>,
}

/// Keeps a hot journal of `persona` (a table keyed by (persona, n), written with most events) at
/// `limit` rows plus a slack of `limit / 16`: the oldest rows go in one sweep once every slack
/// inserts. The count is kept in memory, not in a counter row, which spares each insert a second
/// B-tree page; a sweep reads only the rows it removes, except the first after opening, which
/// counts them all.
fn trim_journal(
    counts: &mut HashMap<String, [JournalCount; 3]>,
    t: &mut redb::Table<(&str, u64), &[u8]>,
    persona: &str,
    journal: Journal,
    limit: u64,
) -> Result<(), redb::Error> {
    let slack = (limit / 16).max(1);
    let c = match counts.get_mut(persona) {
        Some(c) => &mut c[journal as usize],
        None => &mut counts.entry(persona.to_string()).or_default()[journal as usize],
    };
    c.since_sweep += 1;
    if let Some(rows) = &mut c.rows {
        *rows += 1;
    }
    if c.since_sweep < slack {
        return Ok(());
    }
    c.since_sweep = 0;
    let rows = match c.rows {
        Some(rows) => rows,
        None => {
            let mut n = 0;
            for r in t.range((persona, 0)..=(persona, u64::MAX))? {
                r?;
                n += 1;
            }
            n
        }
    };
    let excess = rows.saturating_sub(limit);
    if excess > 0 {
        let oldest = t
            .range((persona, 0)..=(persona, u64::MAX))?
            .take(excess as usize)
            .map(|r| r.map(|(k, _)| k.value().1))
            .collect::<Result<Vec<u64>, _>>()?;
        for k in oldest {
            t.remove((persona, k))?;
        }
    }
    c.rows = Some(rows - excess);
    Ok(())
}

/// Keeps at most `limit` rows of `persona` in a journal table keyed by (persona, n), counted in
/// `counters` (the long-term tables, whose counts are shown).
/// Keeps a chat message a persona took in (the oldest go past [`CONVERSATION_KEPT`]).
fn put_said(t: &mut Tables<'_>, persona: &str, said: &Said) -> Result<(), redb::Error> {
    t.conversation.insert((persona, said.seq), enc(said).as_slice())?;
    bounded(&mut t.conversation, &mut t.counters, persona, "conversation", CONVERSATION_KEPT)?;
    Ok(())
}

/// Applies `marks` to the kept messages of `persona`, rewriting each once.
fn mark_said(t: &mut redb::Table<(&str, u64), &[u8]>, persona: &str, marks: SaidMarks) -> Result<(), redb::Error> {
    let mut by_seq: BTreeMap<u64, (bool, u32, i64)> = BTreeMap::new();
    for seq in marks.embedded {
        by_seq.entry(seq).or_default().0 = true;
    }
    for (seq, (times, at_us)) in marks.recalled {
        let m = by_seq.entry(seq).or_default();
        (m.1, m.2) = (times, at_us);
    }
    for (seq, (embedded, times, at_us)) in by_seq {
        let Some(mut said) = t.get((persona, seq))?.map(|v| dec::<Said>(v.value())).transpose()? else { continue };
        said.embedded |= embedded;
        said.recalled += times;
        said.last_recalled_us = said.last_recalled_us.max(at_us);
        t.insert((persona, seq), enc(&said).as_slice())?;
    }
    Ok(())
}

fn bounded(
    t: &mut redb::Table<(&str, u64), &[u8]>,
    counters: &mut redb::Table<(&str, &str), u64>,
    persona: &str,
    name: &str,
    limit: u64,
) -> Result<u64, redb::Error> {
    let mut n = counters.get((persona, name))?.map_or(0, |g| g.value()) + 1;
    let mut removed = 0;
    while n > limit {
        let first = t.range((persona, 0)..=(persona, u64::MAX))?.next().transpose()?.map(|(k, _)| k.value().1);
        match first {
            Some(k) => {
                t.remove((persona, k))?;
                n -= 1;
                removed += 1;
            }
            None => break,
        }
    }
    counters.insert((persona, name), n)?;
    Ok(removed)
}

fn skipped(event: &Event, reason: &str) -> Decision {
    Decision {
        event_id: event.id.clone(),
        verdict: Verdict::Skipped,
        reason: reason.to_string(),
        by: "admin".into(),
        priority: event.priority.unwrap_or(0.0),
        numbers: Vec::new(),
        at_us: now_us(),
        references: Vec::new(),
    }
}

/// Hands a stored event to its targets here; it went to `elsewhere` personas of other nodes too.
fn deliver(targets: &[Target], elsewhere: u32, seq: u64, event: &Arc<Event>) {
    let audience = targets.len() as u32 + elsewhere;
    for (persona, actor) in targets {
        let sent = actor.as_ref().is_some_and(|a| {
            a.cast(PersonaMsg::Deliver(Delivery { seq, event: event.clone(), crashes: 0, audience })).is_ok()
        });
        if !sent {
            // Stored: the persona's inbox restores it when the persona comes back.
            tracing::debug!(%persona, seq, "persona down; delivery stays queued in storage");
        }
    }
}

#[cfg(test)]
mod tests;
