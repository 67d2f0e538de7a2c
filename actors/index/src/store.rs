//! What the index keeps, in one redb database (`index.redb`): the source of truth that the
//! keyword index and the in-memory vectors are rebuilt from.
//!
//! - `files`: absolute path -> the file's root, relative path, content hash and chunk ids;
//! - `chunks`: chunk id -> where the chunk is (path, lines, kind, symbol) and its text's hash;
//! - `texts`: text hash -> the text, its vector (int8 with one scale) and how many chunks share
//!   it, so identical chunks are stored and embedded once;
//! - `meta`: the embedding model the vectors come from, the next chunk id, and a generation
//!   counter that the keyword index records, to tell when it is behind.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::IndexError;
use crate::chunk::Lang;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const FILES: TableDefinition<&str, &[u8]> = TableDefinition::new("files");
const CHUNKS: TableDefinition<u64, &[u8]> = TableDefinition::new("chunks");
const TEXTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("texts");

pub type Hash = [u8; 32];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileRecord {
    pub root: String,
    pub rel: String,
    pub hash: Hash,
    pub lang: Lang,
    pub chunks: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChunkRecord {
    /// Relative to the root it was indexed under.
    pub path: String,
    pub lang: Lang,
    pub kind: String,
    pub symbol: Option<String>,
    pub start_line: usize,
    pub end_line: usize,
    pub text: Hash,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TextRecord {
    pub text: String,
    pub refs: u32,
    pub vector: Option<Quantized>,
}

/// A unit vector as int8: value `i` is `q[i] * scale`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Quantized {
    pub q: Vec<i8>,
    pub scale: f32,
}

impl Quantized {
    pub fn new(v: &[f32]) -> Quantized {
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let scale = if max == 0.0 { 1.0 } else { max / 127.0 };
        Quantized { q: v.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8).collect(), scale }
    }
}

pub(crate) fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, bincode::config::standard()).expect("in-memory encoding cannot fail")
}

fn dec<T: DeserializeOwned>(what: &str, b: &[u8]) -> Result<T, IndexError> {
    bincode::serde::decode_from_slice(b, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(|e| IndexError::Corrupt(format!("{what}: undecodable record: {e}")))
}

pub struct Store {
    db: Database,
}

fn db_err(e: impl Into<redb::Error>) -> IndexError {
    IndexError::Storage(e.into().to_string())
}

/// The pieces of one file's update, written in one transaction: the file's record and, per
/// chunk, its id, record, text and vector (`Index` gives the ids and fills `record.chunks`).
pub struct FileUpdate {
    pub abs: String,
    pub record: FileRecord,
    pub chunks: Vec<(u64, ChunkRecord, String, Option<Quantized>)>,
}

/// redb's page cache for the index's file.
const CACHE_BYTES: usize = 128 << 20;

impl Store {
    pub fn open(path: &Path) -> Result<Store, IndexError> {
        // redb's own default is 1 GiB, which an index written all the time (conversation
        // memory) fills; search reads chunks' texts only for the hits it returns.
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| IndexError::Storage(format!("{}: {e}", path.display())))?;
        let txn = db.begin_write().map_err(db_err)?;
        for t in [META, FILES] {
            txn.open_table(t).map_err(db_err)?;
        }
        txn.open_table(CHUNKS).map_err(db_err)?;
        txn.open_table(TEXTS).map_err(db_err)?;
        txn.commit().map_err(db_err)?;
        Ok(Store { db })
    }

    pub fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, IndexError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(META).map_err(db_err)?;
        Ok(t.get(key).map_err(db_err)?.map(|v| v.value().to_vec()))
    }

    pub fn meta_u64(&self, key: &str) -> Result<u64, IndexError> {
        Ok(self.meta(key)?.and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes))
    }

    pub fn set_meta(&self, key: &str, value: &[u8]) -> Result<(), IndexError> {
        let txn = self.db.begin_write().map_err(db_err)?;
        txn.open_table(META).map_err(db_err)?.insert(key, value).map_err(db_err)?;
        txn.commit().map_err(db_err)
    }

    pub fn file(&self, abs: &str) -> Result<Option<FileRecord>, IndexError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(FILES).map_err(db_err)?;
        t.get(abs).map_err(db_err)?.map(|v| dec(abs, v.value())).transpose()
    }

    /// Every file: absolute path and record.
    pub fn files(&self) -> Result<Vec<(String, FileRecord)>, IndexError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(FILES).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            out.push((k.value().to_string(), dec(k.value(), v.value())?));
        }
        Ok(out)
    }

    /// Every file of `root` (absolute paths).
    /// The files stored (absolute paths) in directory `dir`: anywhere below it when
    /// `recursive`, else directly in it.
    pub fn files_in(&self, dir: &Path, recursive: bool) -> Result<Vec<String>, IndexError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(FILES).map_err(db_err)?;
        let prefix = dir.join("").to_string_lossy().into_owned();
        let mut out = Vec::new();
        for row in t.range(prefix.as_str()..).map_err(db_err)? {
            let (k, _) = row.map_err(db_err)?;
            let Some(below) = k.value().strip_prefix(&prefix) else { break };
            if recursive || !below.contains(std::path::MAIN_SEPARATOR) {
                out.push(k.value().to_string());
            }
        }
        Ok(out)
    }

    pub fn chunk(&self, id: u64) -> Result<Option<(ChunkRecord, TextRecord)>, IndexError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let chunks = txn.open_table(CHUNKS).map_err(db_err)?;
        let texts = txn.open_table(TEXTS).map_err(db_err)?;
        let Some(c) = chunks.get(id).map_err(db_err)? else { return Ok(None) };
        let c: ChunkRecord = dec(&format!("chunk {id}"), c.value())?;
        let t = texts
            .get(c.text.as_slice())
            .map_err(db_err)?
            .ok_or_else(|| IndexError::Corrupt(format!("chunk {id} ({}): its text is missing", c.path)))?;
        let t = dec(&format!("text of chunk {id}"), t.value())?;
        Ok(Some((c, t)))
    }

    /// The vector of a text already stored, to reuse for an identical chunk.
    pub fn text_vector(&self, hash: &Hash) -> Result<Option<Quantized>, IndexError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let texts = txn.open_table(TEXTS).map_err(db_err)?;
        let Some(t) = texts.get(hash.as_slice()).map_err(db_err)? else { return Ok(None) };
        Ok(dec::<TextRecord>("text", t.value())?.vector)
    }

    /// Every chunk with its record and text record, for rebuilding what derives from them.
    pub fn for_each_chunk(&self, mut f: impl FnMut(u64, &ChunkRecord, &TextRecord)) -> Result<(), IndexError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let chunks = txn.open_table(CHUNKS).map_err(db_err)?;
        let texts = txn.open_table(TEXTS).map_err(db_err)?;
        for row in chunks.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            let id = k.value();
            let c: ChunkRecord = dec(&format!("chunk {id}"), v.value())?;
            let t = texts
                .get(c.text.as_slice())
                .map_err(db_err)?
                .ok_or_else(|| IndexError::Corrupt(format!("chunk {id} ({}): its text is missing", c.path)))?;
            f(id, &c, &dec(&format!("text of chunk {id}"), t.value())?);
        }
        Ok(())
    }

    /// Replaces what is stored for the files of `updates` and removes the files of `removed`,
    /// in one transaction; returns the ids of the chunks that went away (new chunks always have
    /// new ids, from [`Store::allocate`]). Bumps the generation.
    pub fn apply(&self, updates: &[FileUpdate], removed: &[String]) -> Result<Vec<u64>, IndexError> {
        let txn = self.db.begin_write().map_err(db_err)?;
        let mut gone = Vec::new();
        for abs in removed.iter().chain(updates.iter().map(|u| &u.abs)) {
            gone.extend(remove_file(&txn, abs)?);
        }
        {
            let mut files = txn.open_table(FILES).map_err(db_err)?;
            let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
            let mut texts = txn.open_table(TEXTS).map_err(db_err)?;
            for u in updates {
                files.insert(u.abs.as_str(), enc(&u.record).as_slice()).map_err(db_err)?;
                for (id, rec, text, vector) in &u.chunks {
                    chunks.insert(*id, enc(rec).as_slice()).map_err(db_err)?;
                    let existing = texts.get(rec.text.as_slice()).map_err(db_err)?.map(|v| v.value().to_vec());
                    let t = match existing {
                        Some(bytes) => {
                            let mut t: TextRecord = dec("text", &bytes)?;
                            t.refs += 1;
                            if t.vector.is_none() {
                                t.vector = vector.clone();
                            }
                            t
                        }
                        None => TextRecord { text: text.clone(), refs: 1, vector: vector.clone() },
                    };
                    texts.insert(rec.text.as_slice(), enc(&t).as_slice()).map_err(db_err)?;
                }
            }
            let mut meta = txn.open_table(META).map_err(db_err)?;
            let generation = meta.get("generation").map_err(db_err)?.and_then(|v| v.value().try_into().ok());
            let next = generation.map_or(0, u64::from_le_bytes) + 1;
            meta.insert("generation", next.to_le_bytes().as_slice()).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)?;
        Ok(gone)
    }

    /// Hands out `n` new chunk ids.
    pub fn allocate(&self, n: usize) -> Result<u64, IndexError> {
        let txn = self.db.begin_write().map_err(db_err)?;
        let first = {
            let mut meta = txn.open_table(META).map_err(db_err)?;
            let first = meta
                .get("next_chunk")
                .map_err(db_err)?
                .and_then(|v| v.value().try_into().ok())
                .map_or(0, u64::from_le_bytes);
            meta.insert("next_chunk", (first + n as u64).to_le_bytes().as_slice()).map_err(db_err)?;
            first
        };
        txn.commit().map_err(db_err)?;
        Ok(first)
    }

    pub fn counts(&self) -> Result<(u64, u64, u64), IndexError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let n = |len: Result<u64, redb::StorageError>| len.map_err(db_err);
        Ok((
            n(txn.open_table(FILES).map_err(db_err)?.len())?,
            n(txn.open_table(CHUNKS).map_err(db_err)?.len())?,
            n(txn.open_table(TEXTS).map_err(db_err)?.len())?,
        ))
    }
}

/// Removes a file's record and its chunks, dropping texts no other chunk shares.
fn remove_file(txn: &WriteTransaction, abs: &str) -> Result<Vec<u64>, IndexError> {
    let mut files = txn.open_table(FILES).map_err(db_err)?;
    let Some(rec) = files.remove(abs).map_err(db_err)?.map(|v| v.value().to_vec()) else { return Ok(Vec::new()) };
    let rec: FileRecord = dec(abs, &rec)?;
    let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
    let mut texts = txn.open_table(TEXTS).map_err(db_err)?;
    for id in &rec.chunks {
        let Some(c) = chunks.remove(*id).map_err(db_err)?.map(|v| v.value().to_vec()) else { continue };
        let c: ChunkRecord = dec(&format!("chunk {id}"), &c)?;
        let t = texts.get(c.text.as_slice()).map_err(db_err)?.map(|v| v.value().to_vec());
        if let Some(bytes) = t {
            let mut t: TextRecord = dec("text", &bytes)?;
            t.refs = t.refs.saturating_sub(1);
            if t.refs == 0 {
                texts.remove(c.text.as_slice()).map_err(db_err)?;
            } else {
                texts.insert(c.text.as_slice(), enc(&t).as_slice()).map_err(db_err)?;
            }
        }
    }
    Ok(rec.chunks)
}
