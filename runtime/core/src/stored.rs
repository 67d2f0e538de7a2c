//! Records the store hands to other crates: a persona's snapshot as it moves between nodes, what
//! a hand-off says of itself, and the writer's figures in the dump. The database that keeps them
//! is `mindfleet-store`'s.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Figures of the writer, shown in the dump.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StorageStats {
    pub path: String,
    pub schema_version: u64,
    /// Operations waiting for the writer when the stats were asked for.
    #[serde(default)]
    pub queued_ops: u64,
    /// Why the writer cannot write now (a full disk), while it cannot; it retries by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Writes held in memory until the disk heals.
    #[serde(default)]
    pub parked: u64,
    /// Deliveries accepted and not finished yet.
    pub pending: u64,
    pub accepted: u64,
    /// Injections answered `duplicate` (an id already stored).
    pub duplicates: u64,
    pub commits: u64,
    pub requests: u64,
    /// Seconds the writer spent applying and committing batches (its utilisation over time).
    pub busy_s: f64,
    /// Self-state and working-memory writes held back for the next write-behind commit.
    pub held_writes: u64,
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
    /// `decisions` by verdict (`engage`, `ignore`, ...), since the storage opened.
    #[serde(default)]
    pub decisions_by_verdict: std::collections::BTreeMap<String, u64>,
    pub dead_letters: u64,
    pub stale_finishes: u64,
    pub errors: u64,
    /// Each webhook's deliveries, by name.
    #[serde(default)]
    pub webhooks: std::collections::BTreeMap<String, crate::webhook::HookStats>,
    /// From acceptance to the commit of the decision, every decision since the storage opened.
    #[serde(default)]
    pub decision_latency: LatencyBuckets,
    /// Each commit (apply and fsync), every commit since the storage opened.
    #[serde(default)]
    pub commit_latency: LatencyBuckets,
}

/// A latency histogram of every sample since the storage opened, in fixed buckets: what
/// `/metrics` exposes as a Prometheus histogram.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyBuckets {
    /// How many samples fell in each bucket of [`LatencyBuckets::BOUNDS_MS`], then above the last.
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum_ms: f64,
}

impl LatencyBuckets {
    /// Upper bounds of the buckets, in milliseconds.
    pub const BOUNDS_MS: [f64; 16] = [
        0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10_000.0, 30_000.0, 60_000.0,
    ];

    pub fn observe(&mut self, ms: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; Self::BOUNDS_MS.len() + 1];
        }
        let i = Self::BOUNDS_MS.iter().position(|b| ms <= *b).unwrap_or(Self::BOUNDS_MS.len());
        self.counts[i] += 1;
        self.count += 1;
        self.sum_ms += ms;
    }

    /// Each bucket's upper bound in seconds (the last `f64::MAX`: +Inf) with its own count.
    pub fn buckets_s(&self) -> Vec<(f64, u64)> {
        Self::BOUNDS_MS
            .iter()
            .map(|b| b / 1e3)
            .chain(std::iter::once(f64::MAX))
            .enumerate()
            .map(|(i, le)| (le, self.counts.get(i).copied().unwrap_or(0)))
            .collect()
    }
}

/// A table's rows of one persona: the key after the persona's name, and the value as stored.
pub type Rows<K> = Vec<(K, Vec<u8>)>;

/// Everything stored for one persona, as it leaves its node.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct PersonaSnapshot {
    pub persona: String,
    /// The node it moves to, and the placement's version there (one more than the last).
    pub node: String,
    pub version: u64,
    /// Rows of the tables keyed by (persona, number), by table.
    pub numbered: Vec<(String, Rows<u64>)>,
    /// Rows of the tables keyed by (persona, name), by table.
    pub named: Vec<(String, Rows<String>)>,
    pub self_state: Option<Vec<u8>>,
    pub counters: Vec<(String, u64)>,
    /// Rooms it joined by directed events.
    pub rooms: Vec<String>,
    /// Its unfinished deliveries: the event (as stored) and how often it crashed the persona.
    pub pending: Vec<(Vec<u8>, u32)>,
}

impl PersonaSnapshot {
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_as(bytes, "persona snapshot")
    }

    /// How many rows it carries.
    pub fn rows(&self) -> usize {
        self.numbered.iter().map(|(_, r)| r.len()).sum::<usize>()
            + self.named.iter().map(|(_, r)| r.len()).sum::<usize>()
            + self.counters.len()
            + self.rooms.len()
            + self.pending.len()
            + usize::from(self.self_state.is_some())
    }
}

/// What a hand-off says of itself once committed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HandOff {
    pub persona: String,
    pub node: String,
    pub version: u64,
    pub rows: usize,
    pub pending: usize,
    /// The node already held this version (a snapshot sent again): nothing was written.
    #[serde(default)]
    pub duplicate: bool,
}

/// A record as stored (bincode, standard configuration).
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, bincode::config::standard()).expect("in-memory encoding cannot fail")
}

/// `v` encoded as [`encode`] does, written to `w` (a buffer grown in place, a hasher).
pub fn encode_to<T: Serialize>(v: &T, w: &mut impl std::io::Write) {
    bincode::serde::encode_into_std_write(v, w, bincode::config::standard()).expect("in-memory encoding cannot fail");
}

/// A stored record, or why it cannot be read.
pub fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, DecodeError> {
    decode_as(b, "record")
}

fn decode_as<T: DeserializeOwned>(b: &[u8], what: &'static str) -> Result<T, DecodeError> {
    bincode::serde::decode_from_slice(b, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(|source| DecodeError { what, source })
}

/// Stored bytes that are not the record they should be.
#[derive(Debug, thiserror::Error)]
#[error("undecodable {what}: {source}")]
pub struct DecodeError {
    /// What the bytes should have been.
    pub what: &'static str,
    pub source: bincode::error::DecodeError,
}
