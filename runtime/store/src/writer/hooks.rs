//! Webhook deliveries in the writer: each reply, decision or dead letter a route wants is
//! queued in `hook_queue` in the transaction that stores it, and its webhook's sender is woken
//! once that transaction commits; the sender's outcomes (acknowledged, failed, given up) and
//! `webhooks retry` are requests like any other.

use std::collections::BTreeMap;
use std::sync::Arc;

use redb::ReadableTable;
use tokio::sync::{Notify, oneshot};

use mindfleet_core::time::now_us;
use mindfleet_core::webhook::{HookDelivery, HookKind, HookRoute, HookStats};

use super::{AfterCommit, NotCommitted, Writer};
use crate::schema::Tables;
use crate::{StorageError, dec, enc};

/// `hook_queue` or `hook_dead`, in a write or a read transaction.
pub(crate) trait Rows: ReadableTable<(&'static str, u64), &'static [u8]> {}
impl<T: ReadableTable<(&'static str, u64), &'static [u8]>> Rows for T {}

/// A webhook as the writer knows it: what it wants, and how to wake its sender.
pub(crate) struct Route {
    pub(crate) route: HookRoute,
    pub(crate) wake: Arc<Notify>,
    /// Something was queued for it in the batch being applied.
    queued: bool,
}

impl Route {
    pub(crate) fn new(route: HookRoute, wake: Arc<Notify>) -> Route {
        Route { route, wake, queued: false }
    }
}

impl Writer {
    /// Queues what each route wants of a reply, decision or dead letter of `persona` in `room`
    /// (`make` builds the delivery, once, only if a route wants it).
    pub(crate) fn queue_hooks(
        &mut self,
        t: &mut Tables<'_>,
        kind: HookKind,
        persona: &str,
        room: &str,
        make: impl FnOnce() -> HookDelivery,
    ) -> Result<(), redb::Error> {
        if !self.routes.iter().any(|r| r.route.wants(kind, persona, room)) {
            return Ok(());
        }
        let row = enc(&make());
        for r in self.routes.iter_mut().filter(|r| r.route.wants(kind, persona, room)) {
            let key = self.meta.next_hook;
            self.meta.next_hook += 1;
            t.hook_queue.insert((&*r.route.name, key), row.as_slice())?;
            self.stats.webhooks.entry(r.route.name.to_string()).or_default().pending += 1;
            r.queued = true;
        }
        Ok(())
    }

    /// Wakes the senders of the webhooks the committed batch queued deliveries for.
    pub(crate) fn wake_hooks(&mut self, committed: bool) {
        for r in &mut self.routes {
            if std::mem::take(&mut r.queued) && committed {
                r.wake.notify_one();
            }
        }
    }

    /// Sets the webhooks (once, at start) and counts what each has queued and dead. (Each
    /// sender reads its queue as it starts: what a previous run left is sent first.)
    pub(crate) fn on_routes(&mut self, t: &mut Tables<'_>, routes: Vec<Route>) -> Result<bool, redb::Error> {
        self.routes = routes;
        self.count_hooks(&t.hook_queue, &t.hook_dead)?;
        Ok(false)
    }

    /// Counts the queued and dead deliveries of each webhook (at start, and after a failed commit).
    pub(crate) fn count_hooks(&mut self, queue: &impl Rows, dead: &impl Rows) -> Result<(), redb::Error> {
        let old = std::mem::take(&mut self.stats.webhooks);
        let mut counts: BTreeMap<String, HookStats> = BTreeMap::new();
        for r in &self.routes {
            let name = &*r.route.name;
            let prev = old.get(name).cloned().unwrap_or_default();
            let range = (name, 0)..=(name, u64::MAX);
            counts.insert(
                name.to_string(),
                HookStats {
                    pending: queue.range(range.clone())?.count() as u64,
                    dead: dead.range(range)?.count() as u64,
                    ..prev
                },
            );
        }
        self.stats.webhooks = counts;
        Ok(())
    }

    /// A receiver acknowledged delivery `key`.
    pub(crate) fn on_hook_acked(&mut self, t: &mut Tables<'_>, name: &str, key: u64) -> Result<bool, redb::Error> {
        let gone = t.hook_queue.remove((name, key))?.is_some();
        if gone {
            let s = self.stats.webhooks.entry(name.to_string()).or_default();
            s.pending = s.pending.saturating_sub(1);
            s.delivered += 1;
        }
        Ok(gone)
    }

    /// An attempt at delivery `key` failed: it keeps how many did, and why the last one.
    pub(crate) fn on_hook_failed(
        &mut self,
        t: &mut Tables<'_>,
        name: &str,
        key: u64,
        error: String,
    ) -> Result<bool, redb::Error> {
        let Some(mut d) = t.hook_queue.get((name, key))?.map(|r| dec::<HookDelivery>(r.value())).transpose()? else {
            return Ok(false);
        };
        d.attempts += 1;
        d.last_error = error;
        t.hook_queue.insert((name, key), enc(&d).as_slice())?;
        self.stats.webhooks.entry(name.to_string()).or_default().failures += 1;
        Ok(true)
    }

    /// Delivery `key` gave up (too many attempts, or too old): it moves to the dead letters.
    pub(crate) fn on_hook_dead(
        &mut self,
        t: &mut Tables<'_>,
        name: &str,
        key: u64,
        why: String,
    ) -> Result<bool, redb::Error> {
        let Some(mut d) = t.hook_queue.remove((name, key))?.map(|r| dec::<HookDelivery>(r.value())).transpose()? else {
            return Ok(false);
        };
        d.last_error = why;
        t.hook_dead.insert((name, key), enc(&d).as_slice())?;
        let s = self.stats.webhooks.entry(name.to_string()).or_default();
        s.pending = s.pending.saturating_sub(1);
        s.dead += 1;
        Ok(true)
    }

    /// Queues the dead letters of `name` (or of every webhook) again, after what is queued, as
    /// new deliveries (no attempt made, their age from now); answers how many once committed.
    pub(crate) fn on_hook_retry(
        &mut self,
        t: &mut Tables<'_>,
        name: Option<String>,
        tx: oneshot::Sender<Result<u64, StorageError>>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        let mut dead = Vec::new();
        for r in t.hook_dead.iter()? {
            let (k, v) = r?;
            let (hook, key) = k.value();
            if name.as_deref().is_none_or(|n| n == hook) {
                dead.push((hook.to_string(), key, dec::<HookDelivery>(v.value())?));
            }
        }
        let now = now_us();
        for (hook, key, mut d) in dead.iter().cloned() {
            t.hook_dead.remove((hook.as_str(), key))?;
            (d.attempts, d.created_us) = (0, now);
            let new = self.meta.next_hook;
            self.meta.next_hook += 1;
            t.hook_queue.insert((hook.as_str(), new), enc(&d).as_slice())?;
            let s = self.stats.webhooks.entry(hook.clone()).or_default();
            s.dead = s.dead.saturating_sub(1);
            s.pending += 1;
            if let Some(r) = self.routes.iter_mut().find(|r| *r.route.name == *hook) {
                r.queued = true;
            }
        }
        let n = dead.len() as u64;
        after.push(Box::new(move |r| {
            let _ = tx.send(r.map(|_| n).map_err(NotCommitted::error));
            None
        }));
        Ok(n > 0)
    }
}
