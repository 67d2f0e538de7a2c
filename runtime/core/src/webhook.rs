//! Webhooks: what a `[[webhook]]` is sent (its route), the body of each delivery, and a
//! delivery as storage keeps it until its receiver acknowledges it. The writer stores a
//! delivery in the transaction of what it reports; `mindfleet-server` posts them.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::record::{DeadLetter, Decision, OutboxEntry};
use crate::time::rfc3339;

/// What a webhook can be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookKind {
    /// A persona's reply (the outbox's entries).
    Reply,
    /// A persona's decision on an event, whatever its verdict.
    Decision,
    /// An event that crashed its persona too often.
    DeadLetter,
    /// A tool call that waits for a person's approval.
    Approval,
}

impl HookKind {
    pub const ALL: [HookKind; 4] = [HookKind::Reply, HookKind::Decision, HookKind::DeadLetter, HookKind::Approval];

    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Reply => "reply",
            HookKind::Decision => "decision",
            HookKind::DeadLetter => "dead_letter",
            HookKind::Approval => "approval",
        }
    }

    pub fn parse(s: &str) -> Option<HookKind> {
        HookKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A `[[webhook]]` table, validated; the secret read from its variable.
#[derive(Clone)]
pub struct WebhookConfig {
    /// Names its queue in storage, its metrics and its dead letters (default: the URL).
    pub name: String,
    pub url: String,
    /// The HMAC-SHA256 key of `X-Mindfleet-Signature`.
    pub secret: String,
    /// Where the secret came from (`secret_env`), for messages.
    pub secret_env: String,
    pub route: HookRoute,
    /// Failed attempts after which a delivery is a dead letter.
    pub max_attempts: u32,
    /// Age (since its reply was stored) after which a delivery that still fails is a dead letter.
    pub max_age: Duration,
    /// The wait after the first failure; each further failure doubles it, up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Longest one POST may take, answer included.
    pub timeout: Duration,
}

impl WebhookConfig {
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 100;
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(86_400);
    pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(500);
    pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(10);
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// The wait before attempt `failures + 1`: `backoff_initial` doubled per failure after the
    /// first, capped at `backoff_max`, then scaled by `jitter` (in 0.5..=1: full waits
    /// spread so that receivers that come back are not hit by every sender at once).
    pub fn backoff(&self, failures: u32, jitter: f64) -> Duration {
        let doubled = self.backoff_initial.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        doubled.min(self.backoff_max).mul_f64(jitter.clamp(0.5, 1.0))
    }
}

impl std::fmt::Debug for WebhookConfig {
    /// Without the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("secret_env", &self.secret_env)
            .field("route", &self.route)
            .field("max_attempts", &self.max_attempts)
            .field("max_age", &self.max_age)
            .field("backoff_initial", &self.backoff_initial)
            .field("backoff_max", &self.backoff_max)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Which of the fleet's replies, decisions and dead letters go to one webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRoute {
    pub name: Arc<str>,
    /// Empty: every room.
    pub rooms: Vec<String>,
    /// Empty: every persona.
    pub personas: Vec<String>,
    pub kinds: Vec<HookKind>,
}

impl HookRoute {
    pub fn wants(&self, kind: HookKind, persona: &str, room: &str) -> bool {
        self.kinds.contains(&kind)
            && (self.rooms.is_empty() || self.rooms.iter().any(|r| r == room))
            && (self.personas.is_empty() || self.personas.iter().any(|p| p == persona))
    }
}

/// One delivery as storage keeps it until acknowledged: its body is fixed when it is stored,
/// so every attempt posts (and signs) the same bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookDelivery {
    /// `X-Mindfleet-Delivery`: the reply's event id; for a decision or a dead letter, its kind and
    /// number (`decision-17`). The same on every attempt: receivers de-duplicate by it.
    pub id: String,
    pub kind: HookKind,
    /// The JSON body.
    pub body: String,
    /// When what it reports was stored (µs): `max_age_secs` counts from here.
    pub created_us: i64,
    /// Attempts that failed so far.
    pub attempts: u32,
    /// Why the last attempt failed.
    pub last_error: String,
}

impl HookDelivery {
    fn new(id: String, kind: HookKind, body: Value, created_us: i64) -> HookDelivery {
        HookDelivery { id, kind, body: body.to_string(), created_us, attempts: 0, last_error: String::new() }
    }

    /// A reply, as outbox entry `seq` (the body is the entry as `GET /outbox` gives it).
    pub fn reply(seq: u64, o: &OutboxEntry) -> HookDelivery {
        HookDelivery::new(o.event_id.clone(), HookKind::Reply, reply_json(seq, o), o.at_us)
    }

    /// Decision number `seq` of `persona`.
    pub fn decision(seq: u64, persona: &str, d: &Decision) -> HookDelivery {
        let body = json!({
            "seq": seq,
            "kind": "decision",
            "event_id": d.event_id,
            "persona": persona,
            "room": d.room,
            "in_reply_to": null,
            "text": d.reason,
            "brain": null,
            "at": rfc3339(d.at_us),
            "verdict": d.verdict,
            "by": d.by,
            "numbers": d.numbers.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<String, Value>>(),
        });
        HookDelivery::new(format!("decision-{seq}"), HookKind::Decision, body, d.at_us)
    }

    /// Dead letter number `seq`, from an event of `room`.
    pub fn dead_letter(seq: u64, room: &str, dl: &DeadLetter) -> HookDelivery {
        let body = json!({
            "seq": seq,
            "kind": "dead_letter",
            "event_id": dl.event_id,
            "persona": dl.persona,
            "room": room,
            "in_reply_to": null,
            "text": dl.reason,
            "brain": null,
            "at": rfc3339(dl.at_us),
            "crashes": dl.crashes,
        });
        HookDelivery::new(format!("dead-letter-{seq}"), HookKind::DeadLetter, body, dl.at_us)
    }

    /// A tool call that waits for approval (`POST /ai/approvals/{id}` answers it).
    pub fn approval(a: &crate::tools::ApprovalView) -> HookDelivery {
        let arguments: Value = serde_json::from_str(&a.arguments).unwrap_or(Value::String(a.arguments.clone()));
        let body = json!({
            "kind": "approval",
            "id": a.id,
            "event_id": a.event_id,
            "persona": a.persona,
            "room": a.room,
            "in_reply_to": a.event_id,
            "text": format!("{} wants to call {}: {}", a.persona, a.tool, a.why),
            "brain": null,
            "at": rfc3339(a.requested_us),
            "tool": a.tool,
            "arguments": arguments,
            "why": a.why,
            "deadline": rfc3339(a.deadline_us),
        });
        HookDelivery::new(format!("approval-{}", a.id), HookKind::Approval, body, a.requested_us)
    }
}

/// A reply as feeds and webhooks give it: outbox entry `seq` (from 1).
pub fn reply_json(seq: u64, o: &OutboxEntry) -> Value {
    json!({
        "seq": seq,
        "kind": "reply",
        "event_id": o.event_id,
        "persona": o.persona,
        "room": o.room,
        "in_reply_to": o.in_reply_to,
        "text": o.text,
        "brain": o.brain,
        "at": rfc3339(o.at_us),
    })
}

/// A webhook's deliveries as the dump shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HookStats {
    /// Stored and not acknowledged yet (dead letters apart).
    pub pending: u64,
    /// Acknowledged since the fleet started.
    pub delivered: u64,
    /// Attempts that failed since the fleet started (each is retried, or dead-lettered).
    pub failures: u64,
    /// Dead letters kept now (`mindfleet webhooks retry` sends them again).
    pub dead: u64,
}

/// A delivery that gave up, as the dump and `GET /webhooks` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookDeadLetter {
    pub webhook: String,
    pub id: String,
    pub kind: HookKind,
    pub attempts: u32,
    pub error: String,
    pub created_us: i64,
}

/// A webhook in the dump: where it posts, what it is sent, how its deliveries went, and its
/// newest dead letters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookDump {
    pub name: String,
    pub url: String,
    pub kinds: Vec<String>,
    pub pending: u64,
    pub delivered: u64,
    pub failures: u64,
    pub dead: u64,
    /// The newest dead letters (at most [`WebhookDump::DEAD_SHOWN`]).
    pub dead_letters: Vec<HookDeadLetter>,
}

impl WebhookDump {
    pub const DEAD_SHOWN: usize = 20;

    pub fn new(hook: &WebhookConfig, stats: HookStats, dead_letters: Vec<HookDeadLetter>) -> WebhookDump {
        let HookStats { pending, delivered, failures, dead } = stats;
        WebhookDump {
            name: hook.name.clone(),
            url: hook.url.clone(),
            kinds: hook.route.kinds.iter().map(|k| k.as_str().to_string()).collect(),
            pending,
            delivered,
            failures,
            dead,
            dead_letters,
        }
    }

    /// Adds another node's figures for the same webhook.
    pub fn add(&mut self, other: WebhookDump) {
        self.pending += other.pending;
        self.delivered += other.delivered;
        self.failures += other.failures;
        self.dead += other.dead;
        self.dead_letters.extend(other.dead_letters);
        self.dead_letters.sort_by_key(|d| std::cmp::Reverse(d.created_us));
        self.dead_letters.truncate(Self::DEAD_SHOWN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(initial_ms: u64, max_ms: u64) -> WebhookConfig {
        WebhookConfig {
            name: "h".into(),
            url: "http://127.0.0.1:1/".into(),
            secret: "s".into(),
            secret_env: "S".into(),
            route: HookRoute { name: "h".into(), rooms: vec![], personas: vec![], kinds: vec![HookKind::Reply] },
            max_attempts: 3,
            max_age: Duration::from_secs(60),
            backoff_initial: Duration::from_millis(initial_ms),
            backoff_max: Duration::from_millis(max_ms),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn backoff_doubles_per_failure_up_to_its_cap_and_jitter_takes_at_most_half() {
        let h = hook(500, 10_000);
        let full: Vec<u64> = (1..=7).map(|n| h.backoff(n, 1.0).as_millis() as u64).collect();
        assert_eq!(full, [500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        assert_eq!(h.backoff(3, 0.5), Duration::from_millis(1000));
        assert_eq!(h.backoff(3, 0.0), Duration::from_millis(1000), "jitter never below half");
        assert_eq!(h.backoff(u32::MAX, 1.0), Duration::from_secs(10), "no overflow");
    }

    #[test]
    fn a_route_takes_its_kinds_rooms_and_personas_and_empty_lists_take_all() {
        let mut r = HookRoute { name: "h".into(), rooms: vec![], personas: vec![], kinds: vec![HookKind::Reply] };
        assert!(r.wants(HookKind::Reply, "p", "general"));
        assert!(!r.wants(HookKind::Decision, "p", "general"));
        r.rooms = vec!["ops".into()];
        r.personas = vec!["helper".into()];
        assert!(r.wants(HookKind::Reply, "helper", "ops"));
        assert!(!r.wants(HookKind::Reply, "helper", "general"));
        assert!(!r.wants(HookKind::Reply, "scribe", "ops"));
    }

    #[test]
    fn a_reply_delivery_is_the_outbox_entry_under_the_reply_s_id() {
        let o = OutboxEntry {
            persona: "helper".into(),
            room: "general".into(),
            in_reply_to: "e1".into(),
            event_id: "r1".into(),
            text: "hello".into(),
            brain: "rules".into(),
            at_us: 0,
        };
        let d = HookDelivery::reply(7, &o);
        assert_eq!((d.id.as_str(), d.kind), ("r1", HookKind::Reply));
        let body: Value = serde_json::from_str(&d.body).unwrap();
        assert_eq!(body, reply_json(7, &o));
        assert_eq!(body["seq"], 7);
        assert_eq!(body["at"], "1970-01-01T00:00:00Z");
    }
}
