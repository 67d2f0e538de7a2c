//! The interface of the shared `EmbeddingWorker` (crate `mindfleet-actors`): its messages,
//! what it answers, and the figures it reports in dumps.
//!
//! One worker serves the whole fleet. Requests from many callers are coalesced into batches
//! on a dedicated inference thread, and an embedding cache keyed by content hash answers
//! unchanged text without running the model.

#[cfg(feature = "actors")]
use ractor::RpcReplyPort;
#[cfg(feature = "actors")]
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

/// What happens to a text longer than the model's token window. Nothing is ever cut
/// silently: the caller picks one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LongText {
    /// Embed the first window of tokens and report how many the whole text had.
    #[default]
    Truncate,
    /// Embed every window-sized piece; each piece says which bytes of the text it covers.
    Split,
}

impl LongText {
    pub fn as_str(self) -> &'static str {
        match self {
            LongText::Truncate => "truncate",
            LongText::Split => "split",
        }
    }
}

/// The embedding of a text, or of one piece of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Piece {
    /// Unit length.
    pub vector: Vec<f32>,
    /// Tokens the model saw, its special tokens included.
    pub tokens: u32,
    /// Tokens of the whole text, when it was cut to the window (`LongText::Truncate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_from: Option<u32>,
    /// Byte range of the text this piece covers.
    pub start: u32,
    pub end: u32,
}

/// One text's answer: one piece, or several when it was split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedded {
    pub pieces: Vec<Piece>,
    /// Answered from the cache, without running the model.
    pub cached: bool,
}

impl Embedded {
    /// The vector of a text embedded whole (the first piece).
    pub fn vector(&self) -> &[f32] {
        &self.pieces[0].vector
    }

    /// The answer of `mindfleet embed --json` and `POST /ai/embedding/generate`:
    /// `{"embedding", "model", "dimensions", "tokens"}`, `truncated_from` when the text was cut,
    /// and every piece when it was split.
    pub fn to_json(&self, model: &str) -> serde_json::Value {
        let first = &self.pieces[0];
        let mut out = serde_json::json!({
            "embedding": first.vector,
            "model": model,
            "dimensions": first.vector.len(),
            "tokens": first.tokens,
        });
        if let Some(n) = first.truncated_from {
            out["truncated_from"] = n.into();
        }
        if self.pieces.len() > 1 {
            out["pieces"] = self
                .pieces
                .iter()
                .map(|p| serde_json::json!({ "embedding": p.vector, "start": p.start, "end": p.end, "tokens": p.tokens }))
                .collect();
        }
        out
    }
}

/// Why the worker could not embed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EmbedFailure {
    /// The model could not be loaded; semantic features run degraded.
    #[error("embedding model unavailable: {0}")]
    Degraded(String),
    /// The model failed on this batch.
    #[error("embedding failed: {0}")]
    Failed(String),
    /// The worker is stopping or gone.
    #[error("embedding worker stopped")]
    Stopped,
    /// The model had not taken the request up by its deadline ([`Urgency::Before`]).
    #[error("the embedding model was busy past the request's deadline")]
    Late,
}

/// How a request waits its turn at the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// In turn with the other requests.
    Normal,
    /// In turn, and worth nothing after this instant (a query someone waits for): the worker
    /// answers [`EmbedFailure::Late`] instead of running the model on it after then, so an
    /// overloaded model does not spend itself on answers nobody waits for any more.
    Before(std::time::Instant),
    /// Background work (a backlog of conversation memory): the model takes it only when no
    /// other request waits, so a query is never queued behind it.
    Bulk,
}

/// One answer of the worker: a result per text, in order.
pub type EmbedReply = Result<Vec<Embedded>, EmbedFailure>;

#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum EmbedMsg {
    Embed {
        texts: Vec<String>,
        long: LongText,
        urgency: Urgency,
        reply: RpcReplyPort<EmbedReply>,
    },
    Stats(RpcReplyPort<EmbedStats>),
    /// From the worker's inference thread (its files checked, its model loaded, a batch
    /// done): a type private to the worker, which drops anything else sent here.
    Own(crate::private::Private),
    /// Make every cached embedding durable (also done periodically and at stop).
    Sync(RpcReplyPort<()>),
}

/// The loaded model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ModelInfo {
    /// The model's name (its directory name) and where it was loaded from.
    pub model: String,
    pub path: String,
    pub dimensions: usize,
    /// Most tokens one input can have.
    pub window: usize,
    pub load_s: f64,
}

/// The worker's figures (in `mindfleet dump` under `embedding`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EmbedStats {
    /// `loading` (checking the files), `idle` (sound; the weights load with the first request),
    /// `ready`, or `degraded` (the model is missing or broken; see `error`).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub model: ModelInfo,
    pub max_batch: usize,
    pub max_wait_ms: f64,
    /// Requests answered, texts in them, and model calls (batches) made for them.
    pub requests: u64,
    pub texts: u64,
    pub batches: u64,
    /// Inputs (texts or pieces) per model call.
    pub mean_batch: f64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Entries in the cache file (absent when the cache is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_entries: Option<u64>,
    /// Why the cache was turned off, when it failed (the worker goes on without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_error: Option<String>,
    /// Request latency (receipt to answer) over the last 4096 requests.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Requests waiting for the model now.
    pub in_flight: usize,
    /// Requests answered `Late`: past their deadline, or refused at once because the queue
    /// ahead would have kept them past it.
    #[serde(default)]
    pub late: u64,
    /// The model's recent pace, inputs a second while it runs (what admission is judged by).
    #[serde(default)]
    pub inputs_per_s: f64,
    /// The node whose worker this is, when it is another node's (`[cluster] embedding`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}
/// The similarity of two embeddings of the embedding worker: their dot product, which is their
/// cosine, its vectors being of unit length (summed in `f32`, in order: the figure the enrichment
/// pipeline and long-term memory's recall rank by, and `mindfleet refs` shows).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The cosine of two vectors of any length, summed in `f64`; 0 when either is zero (the
/// redundancy check of drafts, and the tests that compare a model's outputs with a reference).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na.sqrt() * nb.sqrt()) }
}
