//! Codebase knowledge for mindfleet: files cut into chunks where their structure is
//! ([`chunk`]), kept in redb with their int8 embeddings, and searched by a hybrid of BM25 over
//! words and identifiers (tantivy) and vector similarity (an exact scan, or from 20k vectors an
//! HNSW graph built in the background), fused by reciprocal rank.
//!
//! [`Index`] is synchronous: the index actor of a fleet and the in-process CLI own one each and
//! run it off the async threads. It needs an embedding model only through [`Embed`]; without
//! one, or with vectors from another model, search falls back to keywords and says so.
//!
//! ```text
//! <data>/index.redb   files, chunks, texts (+ int8 vectors): the source of truth
//! <data>/keyword/     tantivy's BM25 index, rebuilt from redb when missing or behind
//! ```
//!
//! The vectors' HNSW graph has no file: it is built again from redb after each open.

mod ann;
pub mod chunk;
mod exact;
mod keyword;
mod store;
mod vectors;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use chunk::{Chunker, Lang};
use keyword::Keyword;
use store::{ChunkRecord, FileRecord, FileUpdate, Hash, Quantized, Store};
pub use vectors::VectorStatus;
use vectors::Vectors;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    #[error("{path}: {message}")]
    Path { path: PathBuf, message: String },
    #[error("storage: {0}")]
    Storage(String),
    #[error("index corrupt: {0}")]
    Corrupt(String),
    #[error("keyword index: {0}")]
    Keyword(String),
    #[error("embedding: {0}")]
    Embed(String),
    #[error("{0}")]
    Request(String),
}

/// The embedding model, as the index needs it.
pub trait Embed {
    /// Names the model and its weights: vectors of different models are not comparable.
    fn model(&self) -> String;
    /// The most tokens a text may have, as [`Embed::count_tokens`] counts them.
    fn window(&self) -> usize;
    fn count_tokens(&self, text: &str) -> usize;
    /// Unit vectors, one per text.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String>;
    /// Most texts the index gives [`Embed::embed`] in one call. A model that batches on its
    /// own (a worker behind a queue) takes more, so it is never idle between calls.
    fn batch(&self) -> usize {
        EMBED_BATCH
    }
}

/// One entry of [`Index::create_many`].
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: String,
    pub content: String,
    pub embedding: Option<Vec<f32>>,
}

/// What [`Index::update`] takes in.
#[derive(Debug, Clone)]
pub struct UpdateOptions {
    /// Only these languages ([`Lang::name`]); all when `None`.
    pub types: Option<Vec<String>>,
    /// Into subdirectories (else the directory's own files only).
    pub recursive: bool,
    /// Larger files are skipped and counted.
    pub max_file_bytes: u64,
    /// Cut every file into fixed windows of this many lines ([`chunk::line_windows`]) instead
    /// of chunking it by its structure: the baseline a retrieval evaluation compares with, not
    /// for use. An index holds chunks of one kind: updating it with another chunking than its
    /// chunks were made with starts it again.
    pub windows: Option<usize>,
}

impl Default for UpdateOptions {
    fn default() -> UpdateOptions {
        UpdateOptions { types: None, recursive: true, max_file_bytes: 1 << 20, windows: None }
    }
}

/// What an update did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct UpdateReport {
    pub root: String,
    pub files_seen: usize,
    pub files_indexed: usize,
    pub files_unchanged: usize,
    pub files_removed: usize,
    pub chunks_added: usize,
    pub chunks_removed: usize,
    /// Texts embedded now; identical chunks and texts kept from before are not.
    pub texts_embedded: usize,
    pub skipped_binary: usize,
    pub skipped_large: usize,
    pub skipped_type: usize,
    /// Files that could not be indexed, each with why (`path: reason`).
    pub errors: Vec<String>,
    pub seconds: f64,
}

/// How results are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Hybrid,
    Keyword,
    Vector,
}

#[derive(Debug, Clone)]
pub struct SearchOptions {
    pub limit: usize,
    /// Only chunks of this language ([`Lang::name`]).
    pub lang: Option<String>,
    /// Only chunks whose path (relative to its root) starts with this.
    pub path_prefix: Option<String>,
    /// Only results scoring at least this (scores are in 0..=1).
    pub threshold: Option<f32>,
    pub mode: Mode,
    /// Weights of the keyword and the vector ranking in the fusion.
    pub keyword_weight: f32,
    pub vector_weight: f32,
    /// Reciprocal rank fusion's constant: a result at rank r counts weight / (rrf_k + r).
    pub rrf_k: f32,
}

impl Default for SearchOptions {
    fn default() -> SearchOptions {
        SearchOptions {
            limit: 10,
            lang: None,
            path_prefix: None,
            threshold: None,
            mode: Mode::Hybrid,
            keyword_weight: 1.0,
            vector_weight: 1.0,
            rrf_k: RRF_K,
        }
    }
}

/// The most results one search returns.
pub const MAX_LIMIT: usize = 1000;
/// Reciprocal rank fusion's constant by default: a result at rank r counts weight / (RRF_K + r).
pub const RRF_K: f32 = 60.0;
/// How [`Chunker`] cuts, as the index records it.
const CODE_CHUNKING: &str = "code, neighbours merged";
/// Texts embedded per call of the model, unless [`Embed::batch`] says otherwise.
const EMBED_BATCH: usize = 32;

/// One result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hit {
    pub chunk_id: u64,
    /// Relative to the root it was indexed under (for an entry of `rag create`, its path).
    pub path: String,
    pub root: String,
    pub lang: String,
    pub kind: String,
    pub symbol: Option<String>,
    pub start_line: usize,
    pub end_line: usize,
    /// The fused score, 1 for a result first in every ranking used.
    pub score: f32,
    /// Ranks (from 1) in the keyword and the vector ranking, where it was in them.
    pub keyword_rank: Option<usize>,
    pub vector_rank: Option<usize>,
    /// Cosine similarity to the query, when vectors were used.
    pub similarity: Option<f32>,
    pub text: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SearchResults {
    pub hits: Vec<Hit>,
    /// The ranking used: the one asked for, or keywords when vectors could not be.
    pub mode: Mode,
    /// Why the mode differs from the one asked for.
    pub note: Option<String>,
}

/// Where a chunk is, for filters and results: its root, path and language.
struct Place {
    root: String,
    path: String,
    lang: Lang,
}

pub struct Index {
    store: Store,
    keyword: Keyword,
    vectors: Vectors,
    places: HashMap<u64, Place>,
    /// What opening had to repair, for the caller to report.
    repairs: Vec<String>,
}

impl Index {
    /// Opens (or creates) the index in `dir`. A keyword index that is missing, unreadable or
    /// behind redb is rebuilt from it, and [`Index::repairs`] says so.
    pub fn open(dir: &Path) -> Result<Index, IndexError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| IndexError::Path { path: dir.to_path_buf(), message: e.to_string() })?;
        let store = Store::open(&dir.join("index.redb"))?;
        let (keyword, fresh) = Keyword::open(&dir.join("keyword"))?;
        let mut index =
            Index { store, keyword, vectors: Vectors::default(), places: HashMap::new(), repairs: Vec::new() };
        let generation = index.store.meta_u64("generation")?;
        let behind = index.keyword.generation() != generation;
        if behind {
            index.keyword.clear()?;
        }
        let mut bad = Vec::new();
        let (store, keyword, vectors, places) = (&index.store, &index.keyword, &mut index.vectors, &mut index.places);
        let mut failed = None;
        store.for_each_chunk(|id, c, t| {
            places.insert(id, Place { root: String::new(), path: c.path.clone(), lang: c.lang });
            if let Some(v) = &t.vector
                && let Err(e) = vectors.insert(id, v)
            {
                bad.push(e);
            }
            if behind && failed.is_none() {
                failed = keyword.add(id, &c.path, &keyword_text(c, &t.text)).err();
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        for (_, rec) in index.store.files()? {
            for id in &rec.chunks {
                if let Some(p) = index.places.get_mut(id) {
                    p.root.clone_from(&rec.root);
                }
            }
        }
        if behind {
            index.keyword.commit(generation)?;
            if generation > 0 {
                index.repairs.push(format!(
                    "the keyword index was {} and has been rebuilt from index.redb ({} chunks)",
                    if fresh { "missing or unreadable" } else { "behind" },
                    index.places.len()
                ));
            }
        }
        if !bad.is_empty() {
            index.repairs.push(format!("{} vectors of another length were left out: {}", bad.len(), bad[0]));
        }
        Ok(index)
    }

    /// What opening had to repair.
    pub fn repairs(&self) -> &[String] {
        &self.repairs
    }

    /// Where the vector side is: how many vectors, and whether a graph answers (a finished
    /// build swaps in, and a build that is due starts, as at a search).
    pub fn vector_status(&self) -> VectorStatus {
        self.vectors.status()
    }

    /// The vector ranking alone, for measurements: the `k` chunks most similar to `query` (a
    /// unit vector of the stored vectors' length) with their cosine similarity, by the graph
    /// when there is one, or by the exact scan when `exact`.
    pub fn search_vectors(&self, query: &[f32], k: usize, exact: bool) -> Vec<(u64, f32)> {
        if exact { self.vectors.search_exact(query, k, |_| true) } else { self.vectors.search(query, k, |_| true) }
    }

    /// The model the stored vectors come from.
    pub fn model(&self) -> Result<Option<String>, IndexError> {
        Ok(self.store.meta("model")?.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Files, chunks and distinct texts stored.
    pub fn counts(&self) -> Result<(u64, u64, u64), IndexError> {
        self.store.counts()
    }

    /// Indexes `path` (a directory, or one file) with `embed`: new and changed files are
    /// chunked and embedded, unchanged ones (same content hash) kept, and files of the root
    /// that are gone removed. `.gitignore` rules are followed; binary, oversized and
    /// unreadable files are counted and skipped.
    pub fn update(&mut self, path: &Path, embed: &dyn Embed, opts: &UpdateOptions) -> Result<UpdateReport, IndexError> {
        self.update_with(path, embed, opts, &mut |_, _| {})
    }

    /// [`Index::update`], telling `progress` how many of how many files are done as it goes.
    pub fn update_with(
        &mut self,
        path: &Path,
        embed: &dyn Embed,
        opts: &UpdateOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<UpdateReport, IndexError> {
        let start = Instant::now();
        let (dir, single) = self.begin_update(path, embed, opts)?;
        // Paths are relative to the tree's root, whatever part of it is indexed: the same file
        // always has the same path.
        let root = tree_root(&dir);
        let root_str = root.to_string_lossy().into_owned();
        let mut report = UpdateReport { root: root_str.clone(), ..Default::default() };
        let files = match &single {
            Some(file) => vec![file.clone()],
            None => walk(&dir, opts.recursive),
        };
        let count = |text: &str| embed.count_tokens(text);
        let chunker = Chunker::new(embed.window(), &count);
        let mut seen = std::collections::HashSet::new();
        let mut batch: Vec<FileUpdate> = Vec::new();
        let total = files.len();
        for (done, file) in files.into_iter().enumerate() {
            progress(done, total);
            report.files_seen += 1;
            let abs = file.to_string_lossy().into_owned();
            seen.insert(abs.clone());
            let rel = file.strip_prefix(&root).unwrap_or(&file).to_string_lossy().into_owned();
            let lang = Lang::of(&file);
            if opts.types.as_ref().is_some_and(|t| !t.iter().any(|t| t == lang.name())) {
                report.skipped_type += 1;
                continue;
            }
            match std::fs::metadata(&file) {
                Ok(m) if m.len() > opts.max_file_bytes => {
                    report.skipped_large += 1;
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    report.errors.push(format!("{rel}: {e}"));
                    continue;
                }
            }
            let bytes = match std::fs::read(&file) {
                Ok(b) => b,
                Err(e) => {
                    report.errors.push(format!("{rel}: {e}"));
                    continue;
                }
            };
            if bytes[..bytes.len().min(8192)].contains(&0) {
                report.skipped_binary += 1;
                continue;
            }
            let text = match String::from_utf8(bytes) {
                Ok(t) => t,
                Err(e) => {
                    report
                        .errors
                        .push(format!("{rel}: not UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to()));
                    continue;
                }
            };
            let hash: Hash = Sha256::digest(text.as_bytes()).into();
            if self.store.file(&abs)?.is_some_and(|f| f.hash == hash && f.root == root_str) {
                report.files_unchanged += 1;
                continue;
            }
            let chunks = match opts.windows {
                Some(n) => chunk::line_windows(&text, n),
                None => chunker.chunk(lang, &text),
            };
            let record = FileRecord { root: root_str.clone(), rel, hash, lang, chunks: Vec::new() };
            let update = file_update(abs, record, &chunks);
            report.files_indexed += 1;
            report.chunks_added += update.chunks.len();
            batch.push(update);
            if batch.len() >= 64 {
                self.flush(std::mem::take(&mut batch), Some(embed), &mut report)?;
            }
        }
        self.flush(batch, Some(embed), &mut report)?;
        progress(total, total);
        // Files of the directory walked that are no longer there (or no longer wanted) disappear now.
        if single.is_none() {
            let gone: Vec<String> =
                self.store.files_in(&dir, opts.recursive)?.into_iter().filter(|f| !seen.contains(f)).collect();
            report.files_removed = gone.len();
            let removed = self.store.apply(&[], &gone)?;
            report.chunks_removed += removed.len();
            self.forget(&removed);
            self.keyword.commit(self.store.meta_u64("generation")?)?;
        }
        report.seconds = start.elapsed().as_secs_f64();
        Ok(report)
    }

    /// What [`Index::update_with`] checks and settles first: the request is sound, and an
    /// index of another model or another chunking starts again. The root, and the file when
    /// `path` is one.
    fn begin_update(
        &mut self,
        path: &Path,
        embed: &dyn Embed,
        opts: &UpdateOptions,
    ) -> Result<(PathBuf, Option<PathBuf>), IndexError> {
        let path_err = |message: String| IndexError::Path { path: path.to_path_buf(), message };
        let abs = path.canonicalize().map_err(|e| path_err(e.to_string()))?;
        let (root, single) = if abs.is_file() {
            (abs.parent().map(Path::to_path_buf).unwrap_or_else(|| abs.clone()), Some(abs.clone()))
        } else if abs.is_dir() {
            (abs.clone(), None)
        } else {
            return Err(path_err("neither a file nor a directory".into()));
        };
        if let Some(types) = &opts.types
            && let Some(bad) = types.iter().find(|t| !Lang::NAMES.contains(&t.as_str()))
        {
            return Err(IndexError::Request(format!("types: unknown {bad:?} (known: {})", Lang::NAMES.join(", "))));
        }
        if opts.windows == Some(0) {
            return Err(IndexError::Request("windows: 0 lines".into()));
        }
        let model = embed.model();
        if self.model()?.is_some_and(|m| m != model) {
            // Vectors of another model cannot be compared with this one's: start again.
            self.clear()?;
            self.repairs.push(format!("the vectors came from another model; re-embedding with {model}"));
        }
        self.store.set_meta("model", model.as_bytes())?;
        // Unchanged files keep their chunks, so a change of chunking must start again too. (An
        // index without this record was cut by the structure alone, before neighbours merged.)
        // Only files indexed from a root were cut: entries of their own (`create`, which records
        // no chunking) are one chunk each, and an index of entries alone is not cut otherwise.
        let chunking = opts.windows.map_or_else(|| CODE_CHUNKING.to_string(), |n| format!("windows of {n} lines"));
        let stored = self.store.meta("chunking")?.map(|b| String::from_utf8_lossy(&b).into_owned());
        if stored.as_deref().unwrap_or("code") != chunking
            && self.store.files()?.iter().any(|(_, f)| !f.root.is_empty())
        {
            self.clear()?;
            self.repairs.push(format!("the chunks were cut otherwise; cutting them again as {chunking}"));
        }
        self.store.set_meta("chunking", chunking.as_bytes())?;
        Ok((root, single))
    }

    /// Gives the chunks of `batch` their ids, embeds what they need, stores them and makes them
    /// searchable. Returns the ids, in the batch's order.
    fn flush(
        &mut self,
        mut batch: Vec<FileUpdate>,
        embed: Option<&dyn Embed>,
        report: &mut UpdateReport,
    ) -> Result<Vec<u64>, IndexError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // Ids for the whole batch in one transaction (new chunks never reuse an id).
        let mut next = self.store.allocate(batch.iter().map(|u| u.chunks.len()).sum())?;
        let mut ids = Vec::new();
        for u in &mut batch {
            for chunk in &mut u.chunks {
                chunk.0 = next;
                ids.push(next);
                next += 1;
            }
            u.record.chunks = u.chunks.iter().map(|c| c.0).collect();
        }
        // Each distinct text once: reuse the vector of a text already stored.
        let mut wanted: HashMap<Hash, Option<Quantized>> = HashMap::new();
        let mut order: Vec<(Hash, String)> = Vec::new();
        for u in &batch {
            for (_, rec, text, given) in &u.chunks {
                if given.is_some() {
                    wanted.insert(rec.text, given.clone());
                }
                if wanted.contains_key(&rec.text) {
                    continue;
                }
                let stored = self.store.text_vector(&rec.text)?;
                if stored.is_none() {
                    order.push((rec.text, text.clone()));
                }
                wanted.insert(rec.text, stored);
            }
        }
        if let Some(embed) = embed {
            for group in order.chunks(embed.batch().max(1)) {
                let texts: Vec<&str> = group.iter().map(|(_, t)| t.as_str()).collect();
                let vectors = embed.embed(&texts).map_err(IndexError::Embed)?;
                if vectors.len() != texts.len() {
                    return Err(IndexError::Embed(format!("{} vectors for {} texts", vectors.len(), texts.len())));
                }
                for ((hash, _), v) in group.iter().zip(vectors) {
                    wanted.insert(*hash, Some(Quantized::new(&v)));
                }
                report.texts_embedded += texts.len();
            }
        }
        for u in &mut batch {
            for (_, rec, _, vector) in &mut u.chunks {
                *vector = wanted.get(&rec.text).cloned().flatten();
            }
        }
        let updates = batch;
        let removed = self.store.apply(&updates, &[])?;
        report.chunks_removed += removed.len();
        self.forget(&removed);
        for u in &updates {
            for (id, rec, text, vector) in &u.chunks {
                self.places.insert(*id, Place { root: u.record.root.clone(), path: rec.path.clone(), lang: rec.lang });
                if let Some(v) = vector {
                    self.vectors.insert(*id, v).map_err(IndexError::Corrupt)?;
                }
                self.keyword.add(*id, &rec.path, &keyword_text(rec, text))?;
            }
        }
        self.keyword.commit(self.store.meta_u64("generation")?)?;
        Ok(ids)
    }

    fn forget(&mut self, ids: &[u64]) {
        for id in ids {
            self.places.remove(id);
            self.vectors.remove(*id);
            self.keyword.remove(*id);
        }
    }

    /// Stores one text as an entry of its own (`rag create`): one chunk at `path` (a name; it is
    /// not read from disk), replacing an entry of the same path. Its vector is `embedding` when
    /// given (the length of the others, made unit), else the model's; without either it is
    /// found by keywords only. Returns its chunk id.
    pub fn create(
        &mut self,
        path: &str,
        content: &str,
        embedding: Option<Vec<f32>>,
        embed: Option<&dyn Embed>,
    ) -> Result<u64, IndexError> {
        let entry = Entry { path: path.to_string(), content: content.to_string(), embedding };
        Ok(self.create_many(vec![entry], embed)?[0])
    }

    /// [`Index::create`] for many entries, in one transaction; nothing is stored when one is
    /// refused. Returns their chunk ids, in order.
    pub fn create_many(&mut self, entries: Vec<Entry>, embed: Option<&dyn Embed>) -> Result<Vec<u64>, IndexError> {
        let mut dims = self.vectors.dims();
        let mut prepared = Vec::with_capacity(entries.len());
        for Entry { path, content, embedding } in entries {
            let refuse = |m: String| IndexError::Request(if path.is_empty() { m } else { format!("{path}: {m}") });
            if path.trim().is_empty() {
                return Err(IndexError::Request("file_path: empty".into()));
            }
            if content.trim().is_empty() {
                return Err(refuse("content: empty".into()));
            }
            let vector = match embedding {
                Some(v) => {
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    if v.is_empty() || !norm.is_finite() || norm == 0.0 {
                        return Err(refuse("embedding: not a vector of finite numbers, not all zero".into()));
                    }
                    if let Some(d) = dims.filter(|d| *d != v.len()) {
                        return Err(refuse(format!(
                            "embedding: {} values where the index's vectors have {d}",
                            v.len()
                        )));
                    }
                    dims = Some(v.len());
                    Some(Quantized::new(&v.iter().map(|x| x / norm).collect::<Vec<f32>>()))
                }
                None => {
                    if let Some(e) = embed
                        && e.count_tokens(&content) > e.window()
                    {
                        return Err(refuse(format!(
                            "content: {} tokens, more than the model's window of {}; index it as a file to have it cut into chunks",
                            e.count_tokens(&content),
                            e.window()
                        )));
                    }
                    None
                }
            };
            prepared.push((path, content, vector));
        }
        if let Some(e) = embed {
            self.store.set_meta("model", e.model().as_bytes())?;
        }
        let mut updates = Vec::with_capacity(prepared.len());
        for (path, content, vector) in prepared {
            let lang = Lang::of(Path::new(&path));
            let record = ChunkRecord {
                path: path.clone(),
                lang,
                kind: "entry".into(),
                symbol: None,
                start_line: 1,
                end_line: content.lines().count().max(1),
                text: Sha256::digest(content.as_bytes()).into(),
            };
            updates.push(FileUpdate {
                abs: format!("entry:{path}"),
                record: FileRecord { root: String::new(), rel: path, hash: record.text, lang, chunks: Vec::new() },
                chunks: vec![(0, record, content, vector)],
            });
        }
        self.flush(updates, embed, &mut UpdateReport::default())
    }

    /// Removes everything (the files stay where they are).
    fn clear(&mut self) -> Result<(), IndexError> {
        let all: Vec<String> = self.store.files()?.into_iter().map(|(abs, _)| abs).collect();
        let removed = self.store.apply(&[], &all)?;
        self.forget(&removed);
        self.keyword.commit(self.store.meta_u64("generation")?)
    }

    /// The chunks that best answer `query`. With [`Mode::Hybrid`] or [`Mode::Vector`] the
    /// query is embedded with `embed`; when that cannot be (no model, another model than the
    /// stored vectors', no vectors), the keyword ranking answers and `note` says why.
    pub fn search(
        &self,
        query: &str,
        embed: Option<&dyn Embed>,
        opts: &SearchOptions,
    ) -> Result<SearchResults, IndexError> {
        if query.trim().is_empty() {
            return Err(IndexError::Request("query: empty".into()));
        }
        if opts.limit == 0 || opts.limit > MAX_LIMIT {
            return Err(IndexError::Request(format!("limit: {} is not within 1..={MAX_LIMIT}", opts.limit)));
        }
        if let Some(lang) = &opts.lang
            && !Lang::NAMES.contains(&lang.as_str())
        {
            return Err(IndexError::Request(format!("lang: unknown {lang:?} (known: {})", Lang::NAMES.join(", "))));
        }
        let keep = |id: u64| {
            self.places.get(&id).is_some_and(|p| {
                opts.lang.as_ref().is_none_or(|l| p.lang.name() == l)
                    && opts.path_prefix.as_ref().is_none_or(|pre| p.path.starts_with(pre.as_str()))
            })
        };
        let depth = (opts.limit * 5).max(50);
        let (mut mode, mut note) = (opts.mode, None);
        let mut query_vector = None;
        if mode != Mode::Keyword {
            let stored = self.model()?;
            let why_not = match (embed, stored) {
                (None, _) => Some("no embedding model".to_string()),
                (_, None) => Some("the index has no vectors".to_string()),
                (Some(e), Some(m)) if e.model() != m => {
                    Some(format!("the index's vectors come from {m}, the query's model is {}", e.model()))
                }
                (Some(e), Some(_)) => match e.embed(&[query]) {
                    Ok(mut v) if v.len() == 1 => {
                        query_vector = v.pop();
                        None
                    }
                    Ok(v) => Some(format!("the model gave {} vectors for the query", v.len())),
                    Err(e) => Some(format!("embedding the query: {e}")),
                },
            };
            if let Some(why) = why_not {
                note = Some(format!("{why}: keyword search only"));
                mode = Mode::Keyword;
            }
        }
        let keyword: Vec<(u64, f32)> = if mode == Mode::Vector {
            Vec::new()
        } else {
            // The prefix is applied by the keyword index itself; the language after it.
            let n = if opts.lang.is_some() { depth * 4 } else { depth };
            let found = self.keyword.search(query, n, opts.path_prefix.as_deref())?;
            found.into_iter().filter(|(id, _)| keep(*id)).take(depth).collect()
        };
        let vector: Vec<(u64, f32)> = match &query_vector {
            Some(q) => self.vectors.search(q, depth, keep),
            None => Vec::new(),
        };
        let (wk, wv) = match mode {
            Mode::Hybrid => (opts.keyword_weight, opts.vector_weight),
            Mode::Keyword => (1.0, 0.0),
            Mode::Vector => (0.0, 1.0),
        };
        let k = opts.rrf_k;
        let best = (wk + wv) / (k + 1.0);
        let mut fused: HashMap<u64, Fused> = HashMap::new();
        for (rank, (id, _)) in keyword.iter().enumerate() {
            let e = fused.entry(*id).or_default();
            e.score += wk / (k + rank as f32 + 1.0);
            e.keyword_rank = Some(rank + 1);
        }
        for (rank, (id, sim)) in vector.iter().enumerate() {
            let e = fused.entry(*id).or_default();
            e.score += wv / (k + rank as f32 + 1.0);
            e.vector_rank = Some(rank + 1);
            e.similarity = Some(*sim);
        }
        let mut ranked: Vec<(u64, Fused)> = fused.into_iter().collect();
        ranked.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
        let mut hits = Vec::new();
        for (id, Fused { score, keyword_rank, vector_rank, similarity }) in ranked {
            let score = if best > 0.0 { score / best } else { 0.0 };
            if opts.threshold.is_some_and(|t| score < t) || hits.len() == opts.limit {
                break;
            }
            let Some((c, t)) = self.store.chunk(id)? else { continue };
            hits.push(Hit {
                chunk_id: id,
                root: self.places.get(&id).map(|p| p.root.clone()).unwrap_or_default(),
                path: c.path,
                lang: c.lang.name().to_string(),
                kind: c.kind,
                symbol: c.symbol,
                start_line: c.start_line,
                end_line: c.end_line,
                score,
                keyword_rank,
                vector_rank,
                similarity,
                text: t.text,
            });
        }
        Ok(SearchResults { hits, mode, note })
    }
}

/// A result's place in each ranking, and its fused score.
#[derive(Default)]
struct Fused {
    score: f32,
    keyword_rank: Option<usize>,
    vector_rank: Option<usize>,
    similarity: Option<f32>,
}

/// The update of file `abs` to `chunks` (ids and vectors are given when it is flushed).
fn file_update(abs: String, record: FileRecord, chunks: &[chunk::Chunk]) -> FileUpdate {
    let chunks = chunks
        .iter()
        .map(|c| {
            let chunk = ChunkRecord {
                path: record.rel.clone(),
                lang: record.lang,
                kind: c.kind.to_string(),
                symbol: c.symbol.clone(),
                start_line: c.start_line,
                end_line: c.end_line,
                text: Sha256::digest(c.text.as_bytes()).into(),
            };
            (0, chunk, c.text.clone(), None)
        })
        .collect();
    FileUpdate { abs, record, chunks }
}

/// What the keyword index reads of a chunk: its path and symbol as well as its text.
fn keyword_text(c: &ChunkRecord, text: &str) -> String {
    format!("{} {}\n{text}", c.path, c.symbol.as_deref().unwrap_or(""))
}

/// The files under `root`, in a stable order, following `.gitignore` (in or out of a git
/// repository) and skipping hidden files.
/// The root a directory's files are named from: the nearest directory at or above it that holds a
/// repository (`.git`, `.hg`, `.jj`, `.svn`), else the directory itself.
pub fn tree_root(dir: &Path) -> PathBuf {
    dir.ancestors()
        .find(|d| [".git", ".hg", ".jj", ".svn"].iter().any(|m| d.join(m).exists()))
        .unwrap_or(dir)
        .to_path_buf()
}

fn walk(root: &Path, recursive: bool) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ignore::WalkBuilder::new(root)
        .max_depth(if recursive { None } else { Some(1) })
        .require_git(false)
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(ignore::DirEntry::into_path)
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests;
