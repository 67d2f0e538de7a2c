//! Durable state in one redb database, written by one dedicated thread.
//!
//! Every write goes through [`Storage`]'s channel to the writer thread, which folds all
//! requests waiting in the channel into one write transaction and one fsync (group
//! commit), then answers the requests that wait for durability and hands the committed
//! events to their personas. Reads that restore an actor's state go through the same
//! channel, so they see every write sent before them (a restarted child never reads a
//! state older than the one it last persisted). Read-only views for dumps use their own
//! read transactions. The on-disk layout is in `docs/STORAGE.md`.

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use ractor::{ActorRef, RpcReplyPort};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::config::StorageConfig;
use crate::event::Event;
use crate::messages::{Delivery, InjectAck, InjectError, PersonaCommit, PersonaMsg};
use crate::model::{
    Consolidation, ConsolidationReport, DeadLetter, Decision, Eviction, Experience, Knowledge, Learning, OutboxEntry,
    PlanRecord, Procedure, SelfStateData, UserProfile, Verdict, WmEntry,
};
use crate::time::now_us;

/// Version of the layout below. Older files are migrated on open, newer ones refused.
/// 1: the first layout. 2: adds `rooms` (memberships made by directed events).
/// 3: adds `plans` and `learnings` (the reasoning loop's journal) and long-term memory:
/// `experiences`, `procedures`, `knowledge`, `profiles`, `consolidations`.
pub const SCHEMA_VERSION: u64 = 3;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const EVENT_IDS: TableDefinition<&str, u64> = TableDefinition::new("event_ids");
const DELIVERIES: TableDefinition<(&str, u64), u32> = TableDefinition::new("deliveries");
const PENDING_BY_SEQ: TableDefinition<u64, u32> = TableDefinition::new("pending_by_seq");
const DECISIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("decisions");
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

/// Upgrades from each older schema version to the next; index 0 upgrades version 1.
type Migration = fn(&WriteTransaction) -> Result<(), redb::Error>;
const MIGRATIONS: &[Migration] = &[migrate_1_to_2, migrate_2_to_3];

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
const CONSOLIDATIONS_KEPT: u64 = 100;

/// Version 3 adds tables that start empty.
fn migrate_2_to_3(txn: &WriteTransaction) -> Result<(), redb::Error> {
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

/// Figures of the writer, shown in the dump.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StorageStats {
    pub path: String,
    pub schema_version: u64,
    /// Deliveries accepted and not finished yet.
    pub pending: u64,
    pub accepted: u64,
    /// Injections answered `duplicate` (an id already stored).
    pub duplicates: u64,
    pub commits: u64,
    pub requests: u64,
    pub mean_batch: f64,
    pub commit_p50_ms: f64,
    pub commit_p99_ms: f64,
    /// The durable `commit()` alone, without applying the batch's requests.
    pub fsync_p50_ms: f64,
    /// From acceptance to the commit of the decision, over the last 8,192 decisions.
    pub decision_p50_ms: f64,
    pub decision_p99_ms: f64,
    /// The same over every decision since the storage opened (a log histogram, within 5%).
    pub decision_p99_all_ms: f64,
    pub decision_max_ms: f64,
    pub decisions: u64,
    pub dead_letters: u64,
    pub stale_finishes: u64,
    pub errors: u64,
}

enum Op {
    Inject {
        event: Box<Event>,
        targets: Vec<Target>,
        reply: RpcReplyPort<Result<InjectAck, InjectError>>,
    },
    Commit {
        commit: Box<PersonaCommit>,
        reply_targets: Vec<Target>,
    },
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
    Consolidate(Arc<str>, Box<Consolidation>),
    LoadSelfState(Arc<str>, oneshot::Sender<Option<SelfStateData>>),
    LoadMemory(Arc<str>, oneshot::Sender<Vec<WmEntry>>),
    LoadInbox(Arc<str>, oneshot::Sender<InboxRestore>),
    Stats(oneshot::Sender<StorageStats>),
    Flush(oneshot::Sender<()>),
    /// Commit what came before, then stop the writer (it drops its database handle).
    Close(oneshot::Sender<()>),
}

/// Handle to the database and its writer thread. Cloning is cheap.
#[derive(Clone)]
pub struct Storage {
    tx: Sender<Op>,
    db: Arc<Database>,
    path: Arc<Path>,
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

fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, bincode::config::standard()).expect("in-memory encoding cannot fail")
}

fn dec<T: DeserializeOwned>(b: &[u8]) -> Result<T, redb::Error> {
    bincode::serde::decode_from_slice(b, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(|e| redb::Error::Corrupted(format!("undecodable record: {e}")))
}

impl Storage {
    /// Opens (or creates) `data_dir/fleet.redb`, checks its schema and starts the writer.
    /// The caller holds the [`DataDirLock`] first.
    pub fn open(cfg: &StorageConfig) -> Result<Storage, StorageError> {
        let path: Arc<Path> = cfg.data_dir.join("fleet.redb").into();
        let dberr = |e: &dyn std::fmt::Display| StorageError::Db { path: path.to_path_buf(), message: e.to_string() };
        let db = redb::Builder::new()
            .set_cache_size(cfg.cache_mb.saturating_mul(1 << 20))
            .create(&*path)
            .map_err(|e| dberr(&e))?;
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

        let db = Arc::new(db);
        let (tx, rx) = crossbeam_channel::unbounded();
        let writer = Writer::new(db.clone(), cfg.clone(), path.to_path_buf()).map_err(|e| dberr(&e))?;
        std::thread::Builder::new()
            .name("storage-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| StorageError::Io { path: path.to_path_buf(), source })?;
        Ok(Storage { tx, db, path })
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
        self.send(Op::Inject { event, targets, reply });
    }

    /// Finishes a delivery: decision, optional reply (outbox + room event) in one transaction.
    pub fn commit(&self, commit: Box<PersonaCommit>, reply_targets: Vec<Target>) {
        self.send(Op::Commit { commit, reply_targets });
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
        self.ask(Op::Stats).await
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
        let txn = self.db.begin_read().map_err(|e| self.db_err(e))?;
        f(&txn).map_err(|e| self.db_err(e))
    }

    fn db_err(&self, e: impl std::fmt::Display) -> StorageError {
        StorageError::Db { path: self.path.to_path_buf(), message: e.to_string() }
    }

    /// Newest decisions of a persona, newest first (blocking read).
    pub fn recent_decisions(&self, persona: &str, n: usize) -> Result<Vec<Decision>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(DECISIONS)?;
            t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(n).map(|r| dec(r?.1.value())).collect()
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

    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(DEAD_LETTERS)?;
            t.iter()?.map(|r| dec(r?.1.value())).collect()
        })
    }

    /// Deliveries not finished yet, per persona (blocking read).
    pub fn pending_by_persona(&self) -> Result<BTreeMap<String, Vec<String>>, StorageError> {
        self.read(|txn| {
            let d = txn.open_table(DELIVERIES)?;
            let ev = txn.open_table(EVENTS)?;
            let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for r in d.iter()? {
                let (k, _) = r?;
                let (persona, seq) = k.value();
                let id = match ev.get(seq)? {
                    Some(b) => dec::<Event>(b.value())?.id,
                    None => format!("seq {seq}"),
                };
                out.entry(persona.to_string()).or_default().push(id);
            }
            Ok(out)
        })
    }

    /// Every decision of every persona, oldest first (blocking read; tests and exports).
    pub fn all_decisions(&self) -> Result<Vec<(String, Decision)>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(DECISIONS)?;
            t.iter()?
                .map(|r| {
                    let (k, v) = r?;
                    Ok((k.value().0.to_string(), dec(v.value())?))
                })
                .collect()
        })
    }
}

fn open_all(txn: &WriteTransaction) -> Result<(), redb::Error> {
    Tables::open(txn).map(drop)
}

/// Every table, opened once per batch (opening costs more than most single writes).
struct Tables<'t> {
    meta: redb::Table<'t, &'static str, u64>,
    events: redb::Table<'t, u64, &'static [u8]>,
    event_ids: redb::Table<'t, &'static str, u64>,
    deliveries: redb::Table<'t, (&'static str, u64), u32>,
    pending_by_seq: redb::Table<'t, u64, u32>,
    decisions: redb::Table<'t, (&'static str, u64), &'static [u8]>,
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
}

impl<'t> Tables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Tables {
            meta: txn.open_table(META)?,
            events: txn.open_table(EVENTS)?,
            event_ids: txn.open_table(EVENT_IDS)?,
            deliveries: txn.open_table(DELIVERIES)?,
            pending_by_seq: txn.open_table(PENDING_BY_SEQ)?,
            decisions: txn.open_table(DECISIONS)?,
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

/// Drops the self-state writes of a batch that a later write of the same persona's row
/// replaces: a persona's state changes several times per event, and only the row's last value
/// needs committing. A restore of that persona in between keeps the writes before it, so the
/// restore still reads every state sent before it.
fn coalesce_self_states(batch: &mut Vec<Op>) {
    let mut later: HashSet<Arc<str>> = HashSet::new();
    let mut keep = vec![true; batch.len()];
    for (i, op) in batch.iter().enumerate().rev() {
        match op {
            Op::PutSelfState(p, _) if !later.insert(p.clone()) => keep[i] = false,
            Op::LoadSelfState(p, _) => {
                later.remove(p);
            }
            _ => {}
        }
    }
    let mut keep = keep.into_iter();
    batch.retain(|_| keep.next().unwrap_or(true));
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

type AfterCommit = Box<dyn FnOnce(Result<(), &str>) + Send>;

struct Writer {
    db: Arc<Database>,
    cfg: StorageConfig,
    path: PathBuf,
    meta: Meta,
    stats: StorageStats,
    commit_ms: Samples,
    /// The `commit()` call alone (the fsync and page writes), without applying the batch.
    fsync_ms: Samples,
    decision_ms: Samples,
    decision_all: LogHistogram,
}

impl Writer {
    fn new(db: Arc<Database>, cfg: StorageConfig, path: PathBuf) -> Result<Writer, redb::Error> {
        let meta = Meta::load(&db)?;
        let stats = StorageStats {
            path: path.display().to_string(),
            schema_version: SCHEMA_VERSION,
            pending: meta.pending,
            ..Default::default()
        };
        Ok(Writer {
            db,
            cfg,
            path,
            meta,
            stats,
            commit_ms: Samples::default(),
            fsync_ms: Samples::default(),
            decision_ms: Samples::default(),
            decision_all: LogHistogram { counts: Vec::new(), total: 0, max: 0.0 },
        })
    }

    fn run(mut self, rx: Receiver<Op>) {
        let mut batch = Vec::with_capacity(self.cfg.max_batch);
        let mut closing = None;
        while let Ok(op) = rx.recv() {
            batch.push(op);
            while batch.len() < self.cfg.max_batch {
                match rx.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            // Nothing after a close in this batch is applied: the close is last.
            if let Some(i) = batch.iter().position(|op| matches!(op, Op::Close(_))) {
                if let Op::Close(tx) = batch.remove(i) {
                    closing = Some(tx);
                }
                batch.truncate(i);
            }
            self.apply_batch(&mut batch);
            if closing.is_some() {
                break;
            }
        }
        drop(self.db);
        if let Some(tx) = closing {
            let _ = tx.send(());
        }
        tracing::debug!(path = %self.path.display(), "storage writer stopped");
    }

    fn apply_batch(&mut self, batch: &mut Vec<Op>) {
        let started = Instant::now();
        let n = batch.len();
        coalesce_self_states(batch);
        let mut after: Vec<AfterCommit> = Vec::with_capacity(n);
        let result = (|| -> Result<bool, redb::Error> {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(Durability::Immediate).map_err(|e| redb::Error::Corrupted(e.to_string()))?;
            let mut dirty = false;
            {
                let mut t = Tables::open(&txn)?;
                for op in batch.drain(..) {
                    dirty |= self.apply(&mut t, op, &mut after)?;
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
        batch.clear();
        self.stats.requests += n as u64;
        match result {
            Ok(dirty) => {
                if dirty {
                    self.stats.commits += 1;
                    self.commit_ms.push(started.elapsed().as_secs_f64() * 1e3);
                }
                self.stats.pending = self.meta.pending;
                for a in after {
                    a(Ok(()));
                }
            }
            Err(e) => {
                self.stats.errors += 1;
                tracing::error!(path = %self.path.display(), error = %e, "storage commit failed");
                // The transaction is gone: reload the counters it may have advanced.
                if let Ok(m) = Meta::load(&self.db) {
                    self.meta = m;
                }
                let msg = e.to_string();
                for a in after {
                    a(Err(&msg));
                }
            }
        }
    }

    /// Applies one request inside the batch's transaction; true when it wrote anything.
    fn apply(&mut self, t: &mut Tables<'_>, op: Op, after: &mut Vec<AfterCommit>) -> Result<bool, redb::Error> {
        match op {
            Op::Inject { event, targets, reply } => {
                if t.event_ids.get(event.id.as_str())?.is_some() {
                    self.stats.duplicates += 1;
                    let ack = InjectAck { event_id: event.id, accepted: true, duplicate: true, personas: Vec::new() };
                    after.push(Box::new(move |r| {
                        let _ = reply.send(r.map(|_| ack).map_err(|e| InjectError::Storage(e.to_string())));
                    }));
                    return Ok(false);
                }
                if self.meta.pending + targets.len() as u64 > self.cfg.max_pending {
                    let pending = self.meta.pending;
                    let reason =
                        format!("durable queue full: {pending} deliveries pending (limit {})", self.cfg.max_pending);
                    for (persona, _) in &targets {
                        self.put_decision(t, persona, &skipped(&event, &reason))?;
                    }
                    after.push(Box::new(move |_| {
                        let _ = reply.send(Err(InjectError::QueueFull { pending }));
                    }));
                    return Ok(true);
                }
                let (seq, event) = self.put_event(t, *event, &targets)?;
                self.stats.accepted += 1;
                let ack = InjectAck {
                    event_id: event.id.clone(),
                    accepted: true,
                    duplicate: false,
                    personas: targets.iter().map(|(p, _)| p.to_string()).collect(),
                };
                after.push(Box::new(move |r| match r {
                    Ok(()) => {
                        let _ = reply.send(Ok(ack));
                        deliver(&targets, seq, &event);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(InjectError::Storage(e.to_string())));
                    }
                }));
                Ok(true)
            }
            Op::Commit { commit, reply_targets } => {
                let PersonaCommit { persona, seq, accepted_us, decision, reply, plan } = *commit;
                if !self.finish_delivery(t, &persona, seq)? {
                    self.stats.stale_finishes += 1;
                    return Ok(false);
                }
                if matches!(decision.verdict, Verdict::Shed | Verdict::Duplicate) {
                    let name = decision.verdict.as_str();
                    let n = t.counters.get((&*persona, name))?.map_or(0, |g| g.value());
                    t.counters.insert((&*persona, name), n + 1)?;
                }
                self.put_decision(t, &persona, &decision)?;
                self.stats.decisions += 1;
                if let Some(plan) = plan {
                    self.put_plan(t, &persona, &plan)?;
                }
                let latency_ms = (now_us() - accepted_us).max(0) as f64 / 1e3;
                self.decision_ms.push(latency_ms);
                self.decision_all.push(latency_ms);
                if let Some((entry, event)) = reply {
                    self.put_outbox(t, &entry)?;
                    let (rseq, event) = self.put_event(t, event, &reply_targets)?;
                    after.push(Box::new(move |r| {
                        if r.is_ok() {
                            deliver(&reply_targets, rseq, &event);
                        }
                    }));
                }
                Ok(true)
            }
            Op::Consolidate(persona, c) => {
                self.put_consolidation(t, &persona, *c)?;
                Ok(true)
            }
            Op::JoinRoom(room, persona) => {
                t.rooms.insert((room.as_str(), &*persona), ())?;
                Ok(true)
            }
            Op::PutSelfState(persona, state) => {
                t.self_state.insert(&*persona, enc(&*state).as_slice())?;
                Ok(true)
            }
            Op::PutMemory(persona, entry) => {
                t.memory.insert((&*persona, entry.id), enc(&*entry).as_slice())?;
                Ok(true)
            }
            Op::DeleteMemory(persona, id, eviction) => {
                t.memory.remove((&*persona, id))?;
                if let Some(ev) = eviction {
                    let key = self.meta.next_eviction;
                    self.meta.next_eviction += 1;
                    t.evictions.insert((&*persona, key), enc(&ev).as_slice())?;
                    bounded(&mut t.evictions, &mut t.counters, &persona, "evictions", EVICTIONS_KEPT)?;
                }
                Ok(true)
            }
            Op::Crash { persona, seq, reason } => {
                let Some(crashes) = t.deliveries.get((&*persona, seq))?.map(|g| g.value() + 1) else {
                    return Ok(false);
                };
                if crashes < self.cfg.max_crashes_per_event {
                    t.deliveries.insert((&*persona, seq), crashes)?;
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
                };
                self.put_decision(t, &persona, &decision)?;
                self.stats.dead_letters += 1;
                Ok(true)
            }
            Op::LoadSelfState(persona, tx) => {
                let v = match t.self_state.get(&*persona)? {
                    Some(b) => Some(dec(b.value())?),
                    None => None,
                };
                after.push(Box::new(move |_| {
                    let _ = tx.send(v);
                }));
                Ok(false)
            }
            Op::LoadMemory(persona, tx) => {
                let v = t
                    .memory
                    .range((&*persona, 0)..=(&*persona, u64::MAX))?
                    .map(|r| dec(r?.1.value()))
                    .collect::<Result<Vec<WmEntry>, _>>()?;
                after.push(Box::new(move |_| {
                    let _ = tx.send(v);
                }));
                Ok(false)
            }
            Op::LoadInbox(persona, tx) => {
                let mut out = InboxRestore::default();
                for r in t.deliveries.range((&*persona, 0)..=(&*persona, u64::MAX))? {
                    let (k, crashes) = r?;
                    let seq = k.value().1;
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
                after.push(Box::new(move |_| {
                    let _ = tx.send(out);
                }));
                Ok(false)
            }
            Op::Stats(tx) => {
                let mut s = self.stats.clone();
                s.pending = self.meta.pending;
                s.mean_batch = if s.commits == 0 { 0.0 } else { s.requests as f64 / s.commits as f64 };
                s.commit_p50_ms = self.commit_ms.percentile(0.5);
                s.commit_p99_ms = self.commit_ms.percentile(0.99);
                s.fsync_p50_ms = self.fsync_ms.percentile(0.5);
                s.decision_p50_ms = self.decision_ms.percentile(0.5);
                s.decision_p99_ms = self.decision_ms.percentile(0.99);
                s.decision_p99_all_ms = self.decision_all.percentile(0.99);
                s.decision_max_ms = self.decision_all.max;
                let _ = tx.send(s);
                Ok(false)
            }
            Op::Flush(tx) => {
                after.push(Box::new(move |_| {
                    let _ = tx.send(());
                }));
                Ok(false)
            }
            Op::Close(_) => unreachable!("taken out of the batch by the writer loop"),
        }
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
                t.deliveries.insert((&**persona, seq), 0u32)?;
            }
            t.pending_by_seq.insert(seq, targets.len() as u32)?;
            self.meta.pending += targets.len() as u64;
        }
        Ok((seq, Arc::new(event)))
    }

    /// Removes a delivery; false when it was not pending (already finished).
    fn finish_delivery(&mut self, t: &mut Tables<'_>, persona: &str, seq: u64) -> Result<bool, redb::Error> {
        if t.deliveries.remove((persona, seq))?.is_none() {
            return Ok(false);
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

    fn put_decision(&mut self, t: &mut Tables<'_>, persona: &str, d: &Decision) -> Result<(), redb::Error> {
        let key = self.meta.next_decision;
        self.meta.next_decision += 1;
        t.decisions.insert((persona, key), enc(d).as_slice())?;
        bounded(&mut t.decisions, &mut t.counters, persona, "decisions", self.cfg.decisions_per_persona).map(drop)
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

    /// Journals a finished plan and counts its pattern as a success or a failure.
    fn put_plan(&mut self, t: &mut Tables<'_>, persona: &str, p: &PlanRecord) -> Result<(), redb::Error> {
        let key = self.meta.next_plan;
        self.meta.next_plan += 1;
        t.plans.insert((persona, key), enc(p).as_slice())?;
        bounded(&mut t.plans, &mut t.counters, persona, "plans", PLANS_KEPT)?;
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

/// Keeps at most `limit` rows of `persona` in a journal table keyed by (persona, n).
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
    }
}

fn deliver(targets: &[Target], seq: u64, event: &Arc<Event>) {
    let audience = targets.len() as u32;
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
mod tests {
    use super::*;

    #[test]
    fn a_batch_commits_only_the_last_self_state_of_a_persona_unless_a_restore_reads_between() {
        let put = |p: &str, energy: f64| {
            Op::PutSelfState(p.into(), Box::new(SelfStateData { energy, ..SelfStateData::default() }))
        };
        let (tx, _rx) = oneshot::channel();
        let mut batch =
            vec![put("a", 0.1), put("b", 0.1), put("a", 0.2), Op::LoadSelfState("a".into(), tx), put("a", 0.3)];
        coalesce_self_states(&mut batch);
        let left: Vec<String> = batch
            .iter()
            .map(|op| match op {
                Op::PutSelfState(p, s) => format!("{p}={}", s.energy),
                Op::LoadSelfState(p, _) => format!("load {p}"),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(left, ["b=0.1", "a=0.2", "load a", "a=0.3"]);
    }

    #[test]
    fn the_log_histogram_is_within_five_percent() {
        let mut h = LogHistogram { counts: Vec::new(), total: 0, max: 0.0 };
        for i in 1..=1000 {
            h.push(i as f64 / 10.0); // 0.1 .. 100 ms
        }
        for (p, exact) in [(0.5, 50.0), (0.99, 99.0)] {
            let got = h.percentile(p);
            assert!(got >= exact && got <= exact * 1.05, "p{p}: {got} vs {exact}");
        }
        assert_eq!(h.percentile(1.0), 100.0, "never above the maximum");
        h.push(1e9);
        assert_eq!(h.max, 1e9);
    }
    use crate::config::FleetConfig;
    use crate::event::EventInput;

    fn cfg(dir: &Path) -> StorageConfig {
        StorageConfig { data_dir: dir.to_path_buf(), ..FleetConfig::embedded_default().storage }
    }

    fn event(id: &str) -> Event {
        EventInput {
            id: Some(id.into()),
            domain: "chat".into(),
            room: "r".into(),
            from: "a".into(),
            text: "t".into(),
            ..Default::default()
        }
        .validate()
        .unwrap()
    }

    async fn inject(s: &Storage, id: &str, persona: &str) -> Result<InjectAck, InjectError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        s.inject(Box::new(event(id)), vec![(Arc::from(persona), None)], tx.into());
        rx.await.unwrap()
    }

    fn decision(id: &str) -> Decision {
        Decision {
            event_id: id.into(),
            verdict: Verdict::Ignore,
            reason: "test".into(),
            by: "test".into(),
            priority: 0.0,
            numbers: Vec::new(),
            at_us: 0,
        }
    }

    #[tokio::test]
    async fn decisions_are_kept_per_persona_up_to_the_limit_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(&StorageConfig { decisions_per_persona: 2, ..cfg(dir.path()) }).unwrap();
        for i in 1..=3u64 {
            let id = format!("e{i}");
            inject(&s, &id, "p").await.unwrap();
            let commit = PersonaCommit {
                persona: "p".into(),
                seq: i,
                accepted_us: 0,
                decision: decision(&id),
                reply: None,
                plan: None,
            };
            s.commit(Box::new(commit), Vec::new());
        }
        s.flush().await.unwrap();
        let ids: Vec<String> = s.recent_decisions("p", 10).unwrap().into_iter().map(|d| d.event_id).collect();
        assert_eq!(ids, ["e3", "e2"]);
        assert_eq!(s.stats().await.unwrap().pending, 0);
    }

    #[tokio::test]
    async fn a_finish_of_a_finished_delivery_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(&cfg(dir.path())).unwrap();
        inject(&s, "e1", "p").await.unwrap();
        for _ in 0..2 {
            let commit = PersonaCommit {
                persona: "p".into(),
                seq: 1,
                accepted_us: 0,
                decision: decision("e1"),
                reply: None,
                plan: None,
            };
            s.commit(Box::new(commit), Vec::new());
        }
        s.flush().await.unwrap();
        assert_eq!(s.recent_decisions("p", 10).unwrap().len(), 1);
        assert_eq!(s.stats().await.unwrap().stale_finishes, 1);
    }

    #[tokio::test]
    async fn pending_deliveries_survive_a_reopen_and_ids_stay_known() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Storage::open(&cfg(dir.path())).unwrap();
            assert!(!inject(&s, "e1", "p").await.unwrap().duplicate);
            s.close().await.unwrap();
        }
        let s = Storage::open(&cfg(dir.path())).unwrap();
        let restored = s.load_inbox("p".into()).await.unwrap();
        assert_eq!(restored.deliveries.len(), 1);
        assert_eq!(restored.deliveries[0].event.id, "e1");
        assert!(inject(&s, "e1", "p").await.unwrap().duplicate);
    }

    #[tokio::test]
    async fn long_term_limits_drop_the_oldest_and_least_proven_with_reasons() {
        use crate::model::{Action, Consolidation, Experience, Procedure};
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(&cfg(dir.path())).unwrap();
        let exp = |i: usize| Experience {
            domain: "chat".into(),
            task: format!("task {i}"),
            trajectory: vec![],
            success: true,
            learnings: vec![],
            event_id: None,
            at_us: i as i64,
        };
        let proc_ = |i: usize| Procedure {
            name: format!("chat: p{i:03}"),
            domain: "chat".into(),
            steps: vec![Action::DraftReply],
            success_rate: 1.0,
            times_used: i as u32 + 1,
            updated_us: 0,
        };
        let n = EXPERIENCES_KEPT as usize + 5;
        let c = Consolidation {
            experiences: (0..n).map(exp).collect(),
            procedures: (0..PROCEDURES_PER_DOMAIN + 2).map(proc_).collect(),
            watermark: 7,
            ..Default::default()
        };
        s.consolidate("p".into(), c);
        s.flush().await.unwrap();
        let lt = s.long_term("p", 5).unwrap();
        assert_eq!(lt.experience_count, EXPERIENCES_KEPT);
        assert_eq!(lt.experiences[0].task, format!("task {}", n - 1), "newest first");
        assert_eq!(lt.procedures.len(), PROCEDURES_PER_DOMAIN);
        assert!(lt.procedures.iter().all(|p| p.name != "chat: p000" && p.name != "chat: p001"), "least used go");
        let dropped = &lt.reports[0].dropped;
        assert_eq!(dropped.iter().filter(|d| d.contains("oldest experience: limit 1000")).count(), 5, "{dropped:?}");
        assert_eq!(dropped.iter().filter(|d| d.contains("limit 50 per domain")).count(), 2, "{dropped:?}");
        assert_eq!(lt.watermark, 7);
    }

    #[tokio::test]
    async fn a_version_1_database_is_migrated_and_keeps_directed_rooms() {
        let dir = tempfile::tempdir().unwrap();
        // What version 1 wrote: no `rooms` table, memberships only implied by directed events.
        {
            let db = Database::create(dir.path().join("fleet.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert("schema_version", 1).unwrap();
            let mut directed = event("d1");
            directed.persona = Some("helper".into());
            directed.room = "war-room".into();
            let mut events = txn.open_table(EVENTS).unwrap();
            events.insert(1, enc(&directed).as_slice()).unwrap();
            events.insert(2, enc(&event("u1")).as_slice()).unwrap();
            drop(events);
            txn.commit().unwrap();
        }
        let s = Storage::open(&cfg(dir.path())).unwrap();
        let rooms = s.rooms().unwrap();
        assert_eq!(rooms.len(), 1);
        assert_eq!(rooms["war-room"], ["helper"]);
        s.close().await.unwrap();
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let v = db.begin_read().unwrap().open_table(META).unwrap().get("schema_version").unwrap().unwrap().value();
        assert_eq!(v, SCHEMA_VERSION);
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused_with_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        Storage::open(&cfg(dir.path())).unwrap().close().await.unwrap();
        {
            let db = Database::create(dir.path().join("fleet.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert("schema_version", SCHEMA_VERSION + 1).unwrap();
            txn.commit().unwrap();
        }
        let err = Storage::open(&cfg(dir.path())).err().expect("refused").to_string();
        assert!(err.contains(&format!("schema version {} is not one", SCHEMA_VERSION + 1)), "{err}");
    }

    #[test]
    fn a_locked_data_dir_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let _held = lock_data_dir(dir.path()).unwrap();
        let err = lock_data_dir(dir.path()).unwrap_err().to_string();
        assert!(err.ends_with(&format!("in use by pid {}", std::process::id())), "{err}");
    }
}
