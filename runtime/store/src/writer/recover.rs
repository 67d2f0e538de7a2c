//! The writer after the disk failed a write (a full disk, an I/O error), as PostgreSQL and
//! SQLite do it: fail clearly, recover by itself, lose nothing accepted.
//!
//! - The batch's requests are answered or kept: its injections are refused (507 on a full
//!   disk, so their clients retry; nothing unacknowledged was stored), copies of its other
//!   writes and every request that comes meanwhile wait in `parked`, in order. Flushes and
//!   loads wait there too and are answered once their writes are stored.
//! - New events are refused at once with the reason, which names the disk and the data dir;
//!   [`crate::Health`] carries it to `/health` (503) and the dump.
//! - The failure is logged once, then at most once a minute while it lasts.
//! - Every backoff step (100 ms doubling to 10 s) the writer checks the disk's free space
//!   against `[storage] min_free_mb`; with enough, it drops redb's handle (which refuses
//!   everything after an I/O error), opens the file again (redb repairs it if it must),
//!   reloads its counters and writes what waited. A write that fails again goes back to
//!   waiting, with a longer backoff.

use std::time::{Duration, Instant};

use crate::disk::{self, Backoff, Failure, Kind, RateLimited, disk_of};
use crate::op::Op;
use crate::open_db;
use crate::writer::{Failed, Writer};

/// How often a failure that lasts is logged again.
const LOG_EVERY: Duration = Duration::from_secs(60);

impl Writer {
    /// The disk failed a write: wait and retry (or, already waiting, wait longer).
    pub(super) fn fail(&mut self, kind: Kind, reason: String) {
        match &mut self.failed {
            Some(f) => {
                f.backoff.failed();
                f.kind = kind;
                f.reason = reason;
                if let Some(left_out) = f.log.due() {
                    tracing::error!(
                        path = %self.path.display(), reason = %f.reason, waiting_s = f.since.elapsed().as_secs(),
                        parked = self.parked.len(), refused = f.refused, retries_not_logged = left_out,
                        "storage still cannot write; retrying"
                    );
                }
            }
            None => {
                let mut log = RateLimited::new(LOG_EVERY);
                log.due();
                tracing::error!(
                    path = %self.path.display(), reason = %reason,
                    "storage cannot write: new events are refused until it can; retrying by itself"
                );
                self.failed =
                    Some(Failed { kind, reason, since: Instant::now(), backoff: Backoff::new(), log, refused: 0 });
            }
        }
        if let Some(f) = &self.failed {
            self.health.set(Some(Failure { reason: f.reason.clone(), no_space: f.kind == Kind::NoSpace }));
        }
    }

    /// A request that comes while the disk fails: events are refused, the figures answered,
    /// everything else waits.
    pub(super) fn while_failed(&mut self, op: Op) {
        let Some(f) = &mut self.failed else { return self.parked.push_back(op) };
        match op {
            Op::Inject { reply, .. } => {
                f.refused += 1;
                let not = super::NotCommitted { message: f.reason.clone(), kind: f.kind };
                let _ = reply.send(Err(not.refusal()));
            }
            Op::Stats(tx) => {
                let _ = tx.send(self.stats());
            }
            op => self.parked.push_back(op),
        }
    }

    /// One try to write again: with enough free space, reopen the database and write what
    /// waited. The writer is healthy again when all of it is stored.
    pub(super) fn recover(&mut self) {
        let Some(f) = &self.failed else { return };
        let need = self.cfg.min_free_mb.max(1);
        if f.kind == Kind::NoSpace
            && let Ok(d) = disk_of(self.data_dir())
            && d.free_mb() < need
        {
            return self.fail(Kind::NoSpace, disk::still_full(self.data_dir(), &d, need));
        }
        if let Err(e) = self.reopen() {
            let kind = disk::kind(&e);
            let kind = if kind == Kind::Other { Kind::Io } else { kind };
            return self.fail(kind, disk::describe(self.data_dir(), &e, kind));
        }
        let waited = self.parked.len();
        while !self.parked.is_empty() {
            let n = self.parked.len().min(self.cfg.max_batch);
            let mut batch: Vec<Op> = self.parked.drain(..n).collect();
            if let Err(Kind::NoSpace | Kind::Io) = self.apply_batch(&mut batch, false) {
                return;
            }
        }
        if let Err(Kind::NoSpace | Kind::Io) = self.apply_batch(&mut Vec::new(), true) {
            return;
        }
        if let Some(f) = self.failed.take() {
            self.health.set(None);
            tracing::warn!(
                path = %self.path.display(), after_s = f.since.elapsed().as_secs_f64(), stored = waited,
                refused = f.refused, "storage writes again: what waited is stored"
            );
        }
    }

    /// Drops redb's handle once no reader holds it, and opens the file again.
    fn reopen(&mut self) -> Result<(), redb::Error> {
        if let Some(old) = self.db.take() {
            // Readers hold it for one read transaction at most.
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::sync::Arc::strong_count(&old) > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(old);
        }
        let db = open_db(&self.cfg, &self.path)?;
        self.db.put(std::sync::Arc::new(db));
        self.reload();
        Ok(())
    }
}
