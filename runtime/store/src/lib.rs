//! Durable state in one redb database, written by one dedicated thread.
//!
//! Every write goes through [`Storage`]'s channel to the writer thread, which folds all
//! requests waiting in the channel into one write transaction and one fsync (group
//! commit), then answers the requests that wait for durability and hands the committed
//! events to their personas. Reads that restore an actor's state go through the same
//! channel, so they see every write sent before them (a restarted child never reads a
//! state older than the one it last persisted). Read-only views for dumps use their own
//! read transactions. The on-disk layout is in `docs/STORAGE.md`.
//!
//! ```text
//! lib.rs        the Storage handle: open, the requests it sends, the data dir's lock
//! read          reads for dumps and introspection, through the writes still held back
//! op            the requests to the writer
//! writer        the group-commit loop; apply (one function per request), journal writes,
//!               trim (retention), handoff (a persona between nodes), recover (after a disk error)
//! behind        write-behind of self-states, memory and decisions
//! schema        tables, retention limits, the counters in `meta`; legacy: older layouts
//! disk          free space, the disk's name, health; histogram: the writer's latencies
//! conversation  recall from the conversation index, read back and ranked
//! webhook       webhook deliveries: the queue a sender reads, its outcomes, dead letters
//! adapters      the LoRA training runs' files under the data dir: records written and listed
//! ```
//!
//! Invariant: only this crate opens `fleet.redb`, and only the writer thread writes it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::Sender;
use ractor::{ActorRef, RpcReplyPort};
use redb::{Database, ReadableTable};
use serde::de::DeserializeOwned;

pub mod adapters;
mod behind;
pub mod conversation;
mod disk;
mod histogram;
pub mod history;
mod legacy;
mod op;
mod read;
mod schema;
mod webhook;
mod writer;
use disk::DbSlot;
pub use disk::{Disk, Failure, Health, disk_of};
use legacy::MIGRATIONS;
pub use mindfleet_core::stored::{HandOff, PersonaSnapshot, Rows, StorageStats};
use op::{Op, Release};
pub use read::{RoomHistory, Why};
use schema::{CONVERSATION, FORWARDS, META, OBSERVATIONS, PLACEMENT, REFERENCES, ROOMS, STUDIES, TOOL_CALLS, open_all};
pub use schema::{
    CONVERSATION_KEPT, EXPERIENCES_KEPT, KNOWLEDGE_KEPT, OBSERVATIONS_KEPT, PROCEDURES_PER_DOMAIN, SCHEMA_VERSION,
    STUDIES_KEPT,
};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use writer::Writer;

use mindfleet_core::config::StorageConfig;
use mindfleet_core::conversation::{Observation, Said, SaidMarks};
use mindfleet_core::event::Event;
use mindfleet_core::history::RecordBatch;
use mindfleet_core::messages::{Deferral, Delivery, InjectAck, InjectError, PersonaCommit, PersonaMsg};
use mindfleet_core::record::{
    Consolidation, ConsolidationReport, Eviction, Experience, Knowledge, Procedure, SelfStateData, StudySession,
    UserProfile, WmEntry,
};
use mindfleet_core::refs::RefMatch;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error("data dir {path} in use by pid {pid}")]
    InUse { path: PathBuf, pid: String },
    #[error(
        "{path}: schema version {found} is not one this mindfleet can open (it supports 1..={supported}); use a newer mindfleet"
    )]
    NewerSchema { path: PathBuf, found: u64, supported: u64 },
    /// A replay refused: the data dir's history is of a schema this build does not read.
    #[error(
        "{path}: its recorded history is of schema version {found}, which this mindfleet cannot replay (it reads histories of schema {since} and later, and forgets older ones when it opens a data dir); replay it with the mindfleet that recorded it"
    )]
    OlderHistory { path: PathBuf, found: u64, since: u64 },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The database refused an operation; redb's error is the source.
    #[error("{path}: {source}")]
    Db { path: PathBuf, source: redb::Error },
    /// Refused at start: the data dir's disk has less free space than `[storage] min_free_mb`.
    #[error(
        "data dir {path} is on {disk}, which has {free_mb} MiB free; at least {min_mb} MiB are needed ([storage] min_free_mb)"
    )]
    NoSpace { path: PathBuf, disk: String, free_mb: u64, min_mb: u64 },
    /// The batch the request was written in did not commit (the disk failed it): nothing of
    /// the request was stored.
    #[error("{reason}")]
    NotCommitted { reason: String },
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

/// What [`Storage::reopen`] did.
#[derive(Debug)]
pub enum Reopened {
    /// Pending again: the delivery to queue.
    Delivery(Delivery),
    /// Still pending: its finish is not committed yet (or it was never finished).
    StillPending,
    /// The event is no longer stored.
    Gone,
}

/// The first byte of a kept request that carries a persona's snapshot ([`Storage::release`]);
/// any other is a stored event (JSON).
pub const FORWARD_ADOPT: u8 = 0;

/// Most of a persona's newest messages [`Storage::conversation_in_room`] reads to find a room's.
pub const ROOM_SCAN: usize = 5000;

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
use mindfleet_core::tools::CallJournal;

fn dec<T: DeserializeOwned>(b: &[u8]) -> Result<T, redb::Error> {
    mindfleet_core::stored::decode(b).map_err(|e| redb::Error::Corrupted(e.to_string()))
}

/// A persona's conversation memory as storage keeps it: its messages not yet in the index
/// (oldest first), those in it not yet consolidated (their sequence numbers, oldest first),
/// and how many are kept in all.
#[derive(Debug, Default)]
pub struct Backlog {
    pub unembedded: Vec<Said>,
    pub unobserved: Vec<u64>,
    pub kept: u64,
}

/// The answer to a write that waits until it is on disk.
pub type Receipt = tokio::sync::oneshot::Receiver<Result<(), StorageError>>;

impl Storage {
    /// Opens (or creates) `data_dir/fleet.redb`, checks its schema and starts the writer.
    /// The caller holds the [`DataDirLock`] first.
    pub fn open(cfg: &StorageConfig) -> Result<Storage, StorageError> {
        let path: Arc<Path> = cfg.data_dir.join("fleet.redb").into();
        let dberr = |e: redb::Error| StorageError::Db { path: path.to_path_buf(), source: e };
        check_free_space(cfg)?;
        let db = open_db(cfg, &path).map_err(|e| dberr(e.into()))?;
        upgrade(&db, &path)?;
        let db = DbSlot::new(db);
        let health = Health::watching(&cfg.data_dir, cfg.min_free_mb);
        let (tx, rx) = crossbeam_channel::unbounded();
        let writer = Writer::new(db.clone(), health.clone(), cfg.clone(), path.to_path_buf()).map_err(dberr)?;
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
    ) -> Result<HandOff, StorageError> {
        self.ask(|reply| Op::Release(Release { persona, version, node, to, reply })).await?
    }

    /// Stores a persona's rows from another node and places it here, in one transaction.
    pub async fn adopt(&self, snapshot: PersonaSnapshot) -> Result<HandOff, StorageError> {
        self.ask(|reply| Op::Adopt(Box::new(snapshot), reply)).await?
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
                    let (node, version) = writer::handoff::placement_of(v.value())?;
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
    /// Appends rows to the recorded history of `persona`, after those sent before (and after
    /// those of its commits sent before, which carry theirs).
    pub fn record(&self, persona: Arc<str>, batch: RecordBatch) {
        self.send(Op::Record(persona, batch));
    }

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

    /// Journals a tool call; with `durable`, answers once it is on disk (a call that may not run
    /// twice is journaled in flight before it is sent).
    pub fn journal_call(&self, journal: CallJournal, durable: bool) -> Option<Receipt> {
        let (tx, rx) = if durable {
            let (tx, rx) = tokio::sync::oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.send(Op::ToolCall(Box::new(journal), tx));
        rx
    }

    /// Every journaled tool call (blocking read; the tool host reads them at start).
    pub fn tool_calls(&self) -> Result<Vec<CallJournal>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(TOOL_CALLS)?;
            t.iter()?
                .map(|r| {
                    let (k, v) = r?;
                    serde_json::from_slice(v.value()).map_err(|e| {
                        let (p, id) = k.value();
                        redb::Error::Corrupted(format!("tool call {p}/{id}: {e}"))
                    })
                })
                .collect()
        })
    }

    /// The journal of `persona`'s call `id`, if it has one (blocking read).
    pub fn tool_call(&self, persona: &str, id: &str) -> Result<Option<CallJournal>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(TOOL_CALLS)?;
            let Some(v) = t.get((persona, id))? else { return Ok(None) };
            serde_json::from_slice(v.value())
                .map(Some)
                .map_err(|e| redb::Error::Corrupted(format!("tool call {persona}/{id}: {e}")))
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

    /// Marks messages of a persona embedded, observed or recalled, and keeps the observations
    /// made of them: each message is rewritten once, whatever the marks on it.
    pub fn conversation_marks(&self, persona: Arc<str>, marks: SaidMarks) {
        if !marks.is_empty() {
            self.send(Op::SaidMarks(persona, marks));
        }
    }

    /// The messages `seqs` of a persona that are kept, in the order asked (blocking read).
    pub fn conversation(&self, persona: &str, seqs: &[u64]) -> Result<Vec<Said>, StorageError> {
        self.rows_of(CONVERSATION, persona, seqs)
    }

    /// A persona's latest `n` messages said in `room`, oldest first (blocking read of at most
    /// [`ROOM_SCAN`] of its newest messages in all rooms).
    pub fn conversation_in_room(&self, persona: &str, room: &str, n: usize) -> Result<Vec<Said>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(CONVERSATION)?;
            let mut out = Vec::new();
            for r in t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(ROOM_SCAN) {
                let said: Said = dec(r?.1.value())?;
                if said.room == room {
                    out.push(said);
                    if out.len() == n {
                        break;
                    }
                }
            }
            out.sort_by_key(|s| (s.at_us, s.seq));
            Ok(out)
        })
    }

    /// The observations `ids` of a persona that are kept, in the order asked (blocking read).
    pub fn observations(&self, persona: &str, ids: &[u64]) -> Result<Vec<Observation>, StorageError> {
        self.rows_of(OBSERVATIONS, persona, ids)
    }

    /// The rows `keys` of `persona` in `table` that are kept, in the order asked (blocking read).
    fn rows_of<T: DeserializeOwned>(
        &self,
        table: redb::TableDefinition<(&str, u64), &[u8]>,
        persona: &str,
        keys: &[u64],
    ) -> Result<Vec<T>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(table)?;
            let mut out = Vec::with_capacity(keys.len());
            for &k in keys {
                if let Some(v) = t.get((persona, k))? {
                    out.push(dec(v.value())?);
                }
            }
            Ok(out)
        })
    }

    /// What a persona's conversation memory still has to do, from what is kept (blocking read).
    pub fn conversation_backlog(&self, persona: &str) -> Result<Backlog, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(CONVERSATION)?;
            let mut b = Backlog::default();
            for r in t.range((persona, 0)..=(persona, u64::MAX))? {
                let said: Said = dec(r?.1.value())?;
                b.kept += 1;
                if !said.embedded {
                    b.unembedded.push(said);
                } else if !said.observed {
                    b.unobserved.push(said.seq);
                }
            }
            Ok(b)
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

    /// The deliveries `persona` deferred and has not taken up or dropped yet, with the
    /// preoccupation each one keeps.
    pub async fn load_deferred(&self, persona: Arc<str>) -> Result<Vec<(Delivery, Deferral)>, StorageError> {
        self.ask(|tx| Op::LoadDeferred(persona, tx)).await
    }

    /// Makes `persona`'s finished delivery `seq` pending again, durably (a room's turn passed
    /// to it after it finished the event): answers the delivery once committed.
    pub async fn reopen(&self, persona: Arc<str>, seq: u64) -> Result<Reopened, StorageError> {
        self.ask(|tx| Op::Reopen(persona, seq, tx)).await?
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
}

/// The data dir a database file is in.
fn data_dir_of(db_file: &Path) -> &Path {
    db_file.parent().unwrap_or(Path::new("."))
}

/// Opens (or creates, or repairs) the database file.
/// Checks the schema version of the database at `path`, migrates an older one and creates the
/// tables it lacks; a newer one is refused.
pub(crate) fn upgrade(db: &Database, path: &Path) -> Result<(), StorageError> {
    let dberr = |e: redb::Error| StorageError::Db { path: path.to_path_buf(), source: e };
    let txn = db.begin_write().map_err(|e| dberr(e.into()))?;
    let mut found = {
        let mut meta = txn.open_table(META).map_err(|e| dberr(e.into()))?;
        let v = meta.get("schema_version").map_err(|e| dberr(e.into()))?.map(|g| g.value());
        if v.is_none() {
            meta.insert("schema_version", SCHEMA_VERSION).map_err(|e| dberr(e.into()))?;
        }
        v.unwrap_or(SCHEMA_VERSION)
    };
    if found == 0 || found > SCHEMA_VERSION {
        return Err(StorageError::NewerSchema { path: path.to_path_buf(), found, supported: SCHEMA_VERSION });
    }
    while found < SCHEMA_VERSION {
        MIGRATIONS[(found - 1) as usize](&txn).map_err(dberr)?;
        found += 1;
        tracing::info!(path = %path.display(), version = found, "migrated storage schema");
    }
    {
        let mut meta = txn.open_table(META).map_err(|e| dberr(e.into()))?;
        meta.insert("schema_version", SCHEMA_VERSION).map_err(|e| dberr(e.into()))?;
    }
    open_all(&txn).map_err(dberr)?;
    txn.commit().map_err(|e| dberr(e.into()))
}

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

#[cfg(test)]
mod tests;
