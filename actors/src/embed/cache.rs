//! The embedding cache: a redb file mapping a content hash (model, long-text mode, text) to
//! the embedded pieces, so unchanged text is never embedded twice.
//!
//! Writes are committed without fsync and made durable at most every [`SYNC_EVERY`], on
//! `Sync`, and when the worker stops: a crash can lose the last few seconds of entries, which
//! are then computed again. Nothing else depends on them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mindfleet_core::embedding::{LongText, Piece};
use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata, TableDefinition};
use sha2::{Digest, Sha256};

const ENTRIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("embeddings");

/// The longest time a cached entry stays in a non-durable commit.
pub const SYNC_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
#[error("embedding cache {path}: {message}")]
pub struct CacheError {
    pub path: PathBuf,
    pub message: String,
}

pub type Key = [u8; 32];

pub struct Cache {
    db: Database,
    path: PathBuf,
    synced: Instant,
    dirty: bool,
}

/// redb's page cache for the file: recent entries are read again (a room's copies of a
/// message), old ones rarely.
const CACHE_BYTES: usize = 64 << 20;

impl Cache {
    pub fn open(path: &Path) -> Result<Cache, CacheError> {
        let err = |e: &dyn std::fmt::Display| CacheError { path: path.to_path_buf(), message: e.to_string() };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(&e))?;
        }
        // redb's own default is 1 GiB, which a cache written with every new text fills.
        let db = Database::builder().set_cache_size(CACHE_BYTES).create(path).map_err(|e| err(&e))?;
        let txn = db.begin_write().map_err(|e| err(&e))?;
        txn.open_table(ENTRIES).map_err(|e| err(&e))?;
        txn.commit().map_err(|e| err(&e))?;
        Ok(Cache { db, path: path.to_path_buf(), synced: Instant::now(), dirty: false })
    }

    fn err(&self, e: &dyn std::fmt::Display) -> CacheError {
        CacheError { path: self.path.clone(), message: e.to_string() }
    }

    /// The key of `text` embedded by the model with this fingerprint.
    pub fn key(model: &Key, long: LongText, text: &str) -> Key {
        let mut h = Sha256::new();
        h.update(model);
        h.update([long as u8]);
        h.update(text.as_bytes());
        h.finalize().into()
    }

    /// The cached pieces of each key (`None` for a miss).
    pub fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Vec<Piece>>>, CacheError> {
        let txn = self.db.begin_read().map_err(|e| self.err(&e))?;
        let table = txn.open_table(ENTRIES).map_err(|e| self.err(&e))?;
        keys.iter()
            .map(|k| {
                let Some(v) = table.get(k.as_slice()).map_err(|e| self.err(&e))? else { return Ok(None) };
                decode(v.value()).map(Some).ok_or_else(|| self.err(&"undecodable entry"))
            })
            .collect()
    }

    /// Stores entries in one commit, durable when the last durable one is older than
    /// [`SYNC_EVERY`].
    pub fn put_many<'a>(&mut self, entries: impl IntoIterator<Item = (Key, &'a [Piece])>) -> Result<(), CacheError> {
        let mut txn = self.db.begin_write().map_err(|e| self.err(&e))?;
        let durable = self.synced.elapsed() >= SYNC_EVERY;
        txn.set_durability(if durable { Durability::Immediate } else { Durability::None }).map_err(|e| self.err(&e))?;
        {
            let mut table = txn.open_table(ENTRIES).map_err(|e| self.err(&e))?;
            for (key, pieces) in entries {
                table.insert(key.as_slice(), encode(pieces).as_slice()).map_err(|e| self.err(&e))?;
            }
        }
        txn.commit().map_err(|e| self.err(&e))?;
        if durable {
            self.synced = Instant::now();
            self.dirty = false;
        } else {
            self.dirty = true;
        }
        Ok(())
    }

    /// Makes every earlier commit durable.
    pub fn sync(&mut self) -> Result<(), CacheError> {
        if !self.dirty {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(|e| self.err(&e))?;
        txn.commit().map_err(|e| self.err(&e))?;
        self.synced = Instant::now();
        self.dirty = false;
        Ok(())
    }

    pub fn len(&self) -> Result<u64, CacheError> {
        let txn = self.db.begin_read().map_err(|e| self.err(&e))?;
        let table = txn.open_table(ENTRIES).map_err(|e| self.err(&e))?;
        table.len().map_err(|e| self.err(&e))
    }

    pub fn is_empty(&self) -> Result<bool, CacheError> {
        Ok(self.len()? == 0)
    }
}

/// An entry: per piece, `tokens`, `truncated_from` (0: not cut), `start`, `end` and the number
/// of dimensions as little-endian u32, then the vector as little-endian f32.
fn encode(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pieces.iter().map(|p| 20 + 4 * p.vector.len()).sum());
    for p in pieces {
        let head = [p.tokens, p.truncated_from.unwrap_or(0), p.start, p.end, p.vector.len() as u32];
        out.extend(head.iter().flat_map(|x| x.to_le_bytes()));
        out.extend(p.vector.iter().flat_map(|x| x.to_le_bytes()));
    }
    out
}

fn decode(mut bytes: &[u8]) -> Option<Vec<Piece>> {
    fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
        let (head, rest) = bytes.split_first_chunk::<N>()?;
        *bytes = rest;
        Some(*head)
    }
    let mut pieces = Vec::new();
    while !bytes.is_empty() {
        let mut head = [0u32; 5];
        for h in &mut head {
            *h = u32::from_le_bytes(take(&mut bytes)?);
        }
        let [tokens, cut, start, end, dims] = head;
        let vector = (0..dims).map(|_| take(&mut bytes).map(f32::from_le_bytes)).collect::<Option<Vec<f32>>>()?;
        pieces.push(Piece { vector, tokens, truncated_from: (cut > 0).then_some(cut), start, end });
    }
    Some(pieces)
}
