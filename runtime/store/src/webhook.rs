//! Webhook deliveries through the handle: the queue a sender reads, what it reports back, the
//! dead letters and `webhooks retry`. The writer's side is in `writer/hooks.rs`.

use std::sync::Arc;

use tokio::sync::Notify;

use mindfleet_core::webhook::{HookDeadLetter, HookDelivery, HookRoute};

use crate::op::Op;
use crate::schema::{HOOK_DEAD, HOOK_QUEUE};
use crate::{Storage, StorageError, dec};

impl Storage {
    /// Sets the fleet's webhooks: from now on each reply (decision, dead letter) a route wants
    /// is queued for it in the transaction that stores it, and `wake` is notified once that
    /// commits. Call once, before the personas start; what earlier runs queued is kept (a
    /// sender reads its queue as it starts, so that is sent first).
    pub fn route_webhooks(&self, routes: Vec<(HookRoute, Arc<Notify>)>) {
        self.send(Op::HookRoutes(routes));
    }

    /// Up to `limit` deliveries queued for webhook `name` after key `after`, oldest first, with
    /// their keys (blocking read).
    pub fn hook_queue(&self, name: &str, after: u64, limit: usize) -> Result<Vec<(u64, HookDelivery)>, StorageError> {
        if after == u64::MAX {
            return Ok(Vec::new());
        }
        self.read(|txn| {
            let t = txn.open_table(HOOK_QUEUE)?;
            t.range((name, after + 1)..=(name, u64::MAX))?
                .take(limit)
                .map(|r| {
                    let (k, v) = r?;
                    Ok((k.value().1, dec(v.value())?))
                })
                .collect()
        })
    }

    /// The receiver acknowledged delivery `key` of webhook `name`: it is no longer kept.
    pub fn hook_acked(&self, name: Arc<str>, key: u64) {
        self.send(Op::HookAcked(name, key));
    }

    /// An attempt at delivery `key` failed with `error`.
    pub fn hook_failed(&self, name: Arc<str>, key: u64, error: String) {
        self.send(Op::HookFailed(name, key, error));
    }

    /// Delivery `key` gave up (`why`): it moves to the webhook's dead letters.
    pub fn hook_dead(&self, name: Arc<str>, key: u64, why: String) {
        self.send(Op::HookDead(name, key, why));
    }

    /// Queues the dead letters of webhook `name` (of every webhook: `None`) again, behind what
    /// is queued; answers how many, once stored.
    pub async fn hook_retry(&self, name: Option<String>) -> Result<u64, StorageError> {
        self.ask(|tx| Op::HookRetry(name, tx)).await?
    }

    /// The newest `limit` dead letters of webhook `name`, newest first (blocking read).
    pub fn hook_dead_letters(&self, name: &str, limit: usize) -> Result<Vec<HookDeadLetter>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(HOOK_DEAD)?;
            t.range((name, 0)..=(name, u64::MAX))?
                .rev()
                .take(limit)
                .map(|r| {
                    let d: HookDelivery = dec(r?.1.value())?;
                    Ok(HookDeadLetter {
                        webhook: name.to_string(),
                        id: d.id,
                        kind: d.kind,
                        attempts: d.attempts,
                        error: d.last_error,
                        created_us: d.created_us,
                    })
                })
                .collect()
        })
    }
}
