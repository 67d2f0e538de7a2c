//! The writer thread: folds the requests waiting in the channel into one write transaction and
//! one fsync (group commit), answers them once committed, and hands committed events to their
//! personas. Each kind of request is one function ([`Writer::apply`] dispatches); the journal
//! writes are in `journal.rs`, trimming in `trim.rs`, hand-off in `handoff.rs`, and the failed
//! state after a disk error in `recover.rs`.

mod apply;
mod calls;
pub(crate) mod handoff;
mod hooks;
mod journal;
mod record;
mod recover;
mod trim;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use redb::{Durability, ReadableDatabase};

use mindfleet_core::config::StorageConfig;
use mindfleet_core::event::Event;
use mindfleet_core::messages::{InjectAck, InjectError};
use mindfleet_core::stored::StorageStats;

use crate::behind::{Behind, Unheld};
use crate::disk::{self, DbSlot, Health, Kind};
use crate::histogram::{LogHistogram, Samples};
use crate::op::Op;
use crate::read::{load_decision_log, load_pending_of};
use crate::schema::{HOOK_DEAD, HOOK_QUEUE, Meta, SCHEMA_VERSION, Tables};
use crate::writer::trim::JournalCount;
use crate::{StorageError, data_dir_of};

/// Why a batch was not committed, as each of its requests is answered.
pub(crate) struct NotCommitted {
    pub(crate) message: String,
    pub(crate) kind: Kind,
}

impl NotCommitted {
    /// The disk failed it: the writer retries once the disk heals.
    pub(crate) fn retried(&self) -> bool {
        self.kind != Kind::Other
    }

    /// The answer to an injection in the batch: refused, not acknowledged.
    pub(crate) fn refusal(&self) -> InjectError {
        match self.kind {
            Kind::NoSpace => InjectError::NoSpace(self.message.clone()),
            Kind::Io => InjectError::Unavailable(self.message.clone()),
            Kind::Other => InjectError::Storage(self.message.clone()),
        }
    }

    /// The answer to another request that waited for the commit.
    pub(crate) fn error(&self) -> StorageError {
        StorageError::NotCommitted { reason: self.message.clone() }
    }
}

/// Run once the batch's transaction committed or failed. A request that waits for an answer
/// and can wait longer (a flush, a load) hands itself back when the disk failed the batch, to
/// be answered once it heals.
pub(crate) type AfterCommit = Box<dyn FnOnce(Result<(), &NotCommitted>) -> Option<Op> + Send>;

/// What became of an injection in the batch's transaction, answered once it commits.
pub(crate) enum Injected {
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
pub(crate) struct Failed {
    pub(crate) kind: Kind,
    pub(crate) reason: String,
    pub(crate) since: Instant,
    pub(crate) backoff: disk::Backoff,
    pub(crate) log: disk::RateLimited,
    /// Events refused meanwhile.
    pub(crate) refused: u64,
}

pub(crate) struct Writer {
    pub(crate) db: DbSlot,
    pub(crate) health: Health,
    /// Set while the disk fails the writes; requests wait in `parked` meanwhile.
    pub(crate) failed: Option<Failed>,
    /// Requests to apply before any new one, in order: held while the disk failed.
    pub(crate) parked: VecDeque<Op>,
    pub(crate) cfg: StorageConfig,
    pub(crate) path: PathBuf,
    pub(crate) meta: Meta,
    pub(crate) stats: StorageStats,
    pub(crate) commit_ms: Samples,
    /// The `commit()` call alone (the fsync and page writes), without applying the batch.
    pub(crate) fsync_ms: Samples,
    pub(crate) decision_ms: Samples,
    pub(crate) decision_all: LogHistogram,
    pub(crate) held: Behind,
    /// Held writes a hand-off took out in the transaction being applied (see [`Unheld`]).
    pub(crate) unheld: Vec<Unheld>,
    /// Each persona's hot journals (see `trim_journal`).
    pub(crate) journal_counts: HashMap<String, [JournalCount; 3]>,
    /// The recorded histories, once read (see `record.rs`).
    pub(crate) records: Option<record::Recorded>,
    /// The sequence numbers of each persona's pending deliveries: the `pending` table by
    /// persona, for restores (kept in step with the table, reloaded if a commit fails).
    pub(crate) pending_of: HashMap<Arc<str>, BTreeSet<u64>>,
    /// The webhooks: what each is sent (see `hooks.rs`).
    pub(crate) routes: Vec<hooks::Route>,
}

impl Writer {
    pub(crate) fn new(db: DbSlot, health: Health, cfg: StorageConfig, path: PathBuf) -> Result<Writer, redb::Error> {
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
            unheld: Vec::new(),
            journal_counts: HashMap::new(),
            records: None,
            pending_of,
            routes: Vec::new(),
        })
    }

    pub(crate) fn run(mut self, rx: Receiver<Op>) {
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
    pub(crate) fn apply_batch(&mut self, batch: &mut Vec<Op>, flush: bool) -> Result<(), Kind> {
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
                self.unheld.clear();
                if !wrote_held.is_empty() {
                    self.held.written(&wrote_held, self.cfg.write_behind);
                }
                if dirty {
                    self.stats.commits += 1;
                    let ms = started.elapsed().as_secs_f64() * 1e3;
                    self.commit_ms.push(ms);
                    self.stats.commit_latency.observe(ms);
                }
                self.stats.pending = self.meta.pending;
                for a in after {
                    a(Ok(()));
                }
                self.wake_hooks(true);
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
                // The transaction is gone: reload the counters and the index it may have changed,
                // and hold again what a hand-off in it took out to write.
                self.wake_hooks(false);
                for u in std::mem::take(&mut self.unheld) {
                    self.held.put_back(u, self.cfg.write_behind);
                }
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
    pub(crate) fn reload(&mut self) {
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
        if let Ok(txn) = db.begin_read()
            && let (Ok(queue), Ok(dead)) = (txn.open_table(HOOK_QUEUE), txn.open_table(HOOK_DEAD))
        {
            let _ = self.count_hooks(&queue, &dead);
        }
        self.journal_counts.clear();
        self.records = None;
    }

    pub(crate) fn data_dir(&self) -> &Path {
        data_dir_of(&self.path)
    }

    pub(crate) fn stats(&self) -> StorageStats {
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
}
