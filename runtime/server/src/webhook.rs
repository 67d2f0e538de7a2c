//! Webhook senders: one task per `[[webhook]]`, posting what storage queued for it, in the
//! order it was stored. Each delivery is one POST of its JSON body, signed
//! (`X-Mindfleet-Signature: sha256=<hex HMAC-SHA256 of the body>`) and named
//! (`X-Mindfleet-Delivery`); a 2xx answer acknowledges it. Anything else (another status, a
//! refused connection, no answer within `timeout_secs`) is retried after a backoff, the
//! deliveries behind it waiting, until it is acknowledged or gives up (`max_attempts`,
//! `max_age_secs`) into the dead letters. A sender only reads storage and sends it small
//! requests: a slow or dead receiver holds back its own webhook, never a decision.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use mindfleet_core::time::now_us;
use mindfleet_core::webhook::{HookDelivery, WebhookConfig};
use mindfleet_store::Storage;

/// Deliveries read from storage at a time.
const READ_AT_ONCE: usize = 256;
/// A sender with nothing queued looks again this often even unwoken (storage unavailable, say).
const IDLE_LOOK: Duration = Duration::from_secs(5);

/// `sha256=<hex>`: the HMAC-SHA256 of `body` under `secret`, as `X-Mindfleet-Signature` carries it.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in tag {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The fleet's webhook senders; dropping it stops them (what they had not sent stays queued).
#[derive(Default)]
pub struct Senders {
    tasks: Vec<JoinHandle<()>>,
}

impl Senders {
    /// Routes the fleet's webhooks in `storage` and starts a sender for each.
    pub fn start(storage: &Storage, hooks: &[WebhookConfig]) -> Senders {
        if hooks.is_empty() {
            return Senders::default();
        }
        let wakes: Vec<Arc<Notify>> = hooks.iter().map(|_| Arc::new(Notify::new())).collect();
        storage.route_webhooks(hooks.iter().zip(&wakes).map(|(h, w)| (h.route.clone(), w.clone())).collect());
        let tasks = hooks
            .iter()
            .zip(wakes)
            .map(|(h, wake)| {
                let sender = Sender::new(storage.clone(), h.clone(), wake);
                tokio::spawn(sender.run())
            })
            .collect();
        Senders { tasks }
    }

    /// Stops the senders; a POST in flight is abandoned (sent again on the next start).
    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Senders {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Sender {
    storage: Storage,
    hook: WebhookConfig,
    name: Arc<str>,
    wake: Arc<Notify>,
    client: reqwest::Client,
}

/// What became of one delivery.
enum Outcome {
    Acked,
    Dead(String),
}

impl Sender {
    fn new(storage: Storage, hook: WebhookConfig, wake: Arc<Notify>) -> Sender {
        let client = reqwest::Client::builder()
            .timeout(hook.timeout)
            .user_agent(concat!("mindfleet/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Sender { storage, name: hook.route.name.clone(), hook, wake, client }
    }

    async fn run(self) {
        // The key of the last delivery this sender finished: the next are after it (their
        // acknowledgements may not be stored yet).
        let mut done = 0;
        loop {
            let (storage, name) = (self.storage.clone(), self.name.clone());
            let read = tokio::task::spawn_blocking(move || storage.hook_queue(&name, done, READ_AT_ONCE)).await;
            let queued = match read {
                Ok(Ok(q)) => q,
                Ok(Err(e)) => {
                    tracing::warn!(webhook = %self.name, error = %e, "cannot read the webhook's queue; trying again");
                    Vec::new()
                }
                Err(_) => return,
            };
            if queued.is_empty() {
                let _ = tokio::time::timeout(IDLE_LOOK, self.wake.notified()).await;
                continue;
            }
            for (key, d) in queued {
                match self.deliver(key, d).await {
                    Outcome::Acked => self.storage.hook_acked(self.name.clone(), key),
                    Outcome::Dead(why) => {
                        tracing::warn!(webhook = %self.name, key, %why, "webhook delivery moved to the dead letters");
                        self.storage.hook_dead(self.name.clone(), key, why);
                    }
                }
                done = key;
            }
        }
    }

    /// Posts `d` until it is acknowledged or gives up, waiting the backoff between attempts.
    async fn deliver(&self, key: u64, mut d: HookDelivery) -> Outcome {
        let signature = signature(self.hook.secret.as_bytes(), d.body.as_bytes());
        loop {
            let age = Duration::from_micros((now_us() - d.created_us).max(0) as u64);
            if age > self.hook.max_age {
                return Outcome::Dead(format!(
                    "not acknowledged within max_age_secs = {} ({} attempts; last: {})",
                    self.hook.max_age.as_secs_f64(),
                    d.attempts,
                    d.last_error
                ));
            }
            let error = match self.post(&d, &signature).await {
                Ok(()) => return Outcome::Acked,
                Err(e) => e,
            };
            d.attempts += 1;
            self.storage.hook_failed(self.name.clone(), key, error.clone());
            if d.attempts >= self.hook.max_attempts {
                return Outcome::Dead(format!("{} attempts failed (max_attempts); last: {error}", d.attempts));
            }
            tracing::debug!(webhook = %self.name, key, attempts = d.attempts, %error, "webhook delivery failed; retrying");
            d.last_error = error;
            tokio::time::sleep(self.hook.backoff(d.attempts, 0.5 + fastrand::f64() / 2.0)).await;
        }
    }

    /// One attempt: Ok on a 2xx answer, else why not.
    async fn post(&self, d: &HookDelivery, signature: &str) -> Result<(), String> {
        let sent = self
            .client
            .post(&self.hook.url)
            .header("content-type", "application/json")
            .header("x-mindfleet-signature", signature)
            .header("x-mindfleet-delivery", &d.id)
            .header("x-mindfleet-kind", d.kind.as_str())
            .body(d.body.clone())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("HTTP {}", r.status())),
            Err(e) if e.is_timeout() => {
                Err(format!("no answer within timeout_secs = {}", self.hook.timeout.as_secs_f64()))
            }
            Err(e) if e.is_connect() => Err(format!("cannot connect: {}", root_cause(&e))),
            Err(e) => Err(root_cause(&e)),
        }
    }
}

/// The innermost cause of an error (reqwest's own message only says "error sending request").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_rfc_4231_hmac_sha256_in_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
