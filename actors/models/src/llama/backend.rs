//! The two ways an [`super::Llm`] runs its model, as the batch engine, the label scoring and the
//! fill see them: a cache per request, and passes that read tokens after it.
//!
//! - fast: our llama forward pass on the Q8_0 kernels ([`super::forward`]), which batches;
//! - general: candle-transformers' model of the file's architecture ([`super::general`]), one
//!   request at a time.

use super::adapter::Adapter;
use super::forward::{self, Llama};
use super::general::{self, General};

pub(crate) enum Model {
    Fast(Box<Llama>),
    General(Box<General>),
}

impl Model {
    /// Which path runs, for the worker's dump.
    pub(crate) fn path(&self) -> String {
        match self {
            Model::Fast(_) => "fast llama (q8 kernels)".into(),
            Model::General(g) => format!("candle {}", g.architecture()),
        }
    }

    /// Whether several requests can be read in one pass.
    pub(crate) fn batches(&self) -> bool {
        matches!(self, Model::Fast(_))
    }

    /// Whether a LoRA adapter can be trained on it (our own llama forward pass only).
    pub(crate) fn trains(&self) -> bool {
        matches!(self, Model::Fast(_))
    }

    pub(crate) fn kv_bytes_per_token(&self) -> usize {
        match self {
            Model::Fast(m) => m.kv_bytes_per_token(),
            Model::General(g) => g.kv_bytes_per_token(),
        }
    }

    /// Bytes a request's keys and values take for `tokens` tokens.
    pub(crate) fn kv_bytes(&self, tokens: usize) -> usize {
        match self {
            Model::Fast(m) => m.kv_bytes(tokens),
            Model::General(g) => g.kv_bytes_per_token() * tokens,
        }
    }

    pub(crate) fn cache(&self) -> KvCache {
        match self {
            Model::Fast(m) => KvCache::Fast(m.cache()),
            Model::General(_) => KvCache::General(Vec::new()),
        }
    }
}

/// One request's keys and values so far, on its model's path.
pub enum KvCache {
    Fast(forward::KvCache),
    /// The ids read: the general path's model keeps the keys and values.
    General(general::Cache),
}

impl KvCache {
    /// Forgets every token from `len` on (a prompt read once, continued several ways).
    pub fn truncate(&mut self, len: usize) {
        match self {
            KvCache::Fast(c) => c.truncate(len),
            KvCache::General(ids) => ids.truncate(len),
        }
    }

    /// Tokens read.
    pub fn len(&self) -> usize {
        match self {
            KvCache::Fast(c) => c.len(),
            KvCache::General(ids) => ids.len(),
        }
    }

    /// A cache of the first `len` tokens of this one, with room for `room` tokens in all.
    pub fn prefix(&self, len: usize, room: usize) -> KvCache {
        match self {
            KvCache::Fast(c) => KvCache::Fast(c.prefix(len, room)),
            KvCache::General(ids) => KvCache::General(ids[..len.min(ids.len())].to_vec()),
        }
    }

    /// Makes room for `tokens` tokens in all.
    pub fn reserve(&mut self, tokens: usize) {
        match self {
            KvCache::Fast(c) => c.reserve(tokens),
            KvCache::General(ids) => ids.reserve(tokens.saturating_sub(ids.len())),
        }
    }

    /// Bytes the cache holds.
    pub fn bytes(&self) -> usize {
        match self {
            KvCache::Fast(c) => c.bytes(),
            KvCache::General(ids) => ids.capacity() * std::mem::size_of::<u32>(),
        }
    }
}

/// One part of a pass: tokens to read after those in its cache ([`forward::Part`]).
pub struct Part<'a> {
    pub cache: &'a mut KvCache,
    pub ids: &'a [u32],
    pub prompt: bool,
    pub adapter: Option<&'a Adapter>,
}
