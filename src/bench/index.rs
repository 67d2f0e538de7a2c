//! `mindfleet bench index`: the codebase index's speed and size.
//!
//! - Indexing a real tree (default: the current directory) with the real embedding model:
//!   files/s and chunks/s, a re-index of the unchanged tree, bytes stored per chunk, and query
//!   latency with the query embedded.
//! - Search latency at 10k and 100k entries: synthetic unit vectors (384-d) and texts of
//!   identifier-like words stand in for that many embedded chunks (embedding 100k real chunks
//!   would take hours on two cores); the query's vector is given, so this is the search alone.

use std::path::Path;
use std::time::Instant;

use mindfleet_actors::embed::IndexModel;
use mindfleet_index::{Embed, Entry, Index, Mode, SearchOptions, UpdateOptions};
use serde_json::{Value, json};

use super::round;

/// Questions asked of the real tree, each timed with its embedding.
const QUESTIONS: [&str; 8] = [
    "how is a prompt trimmed when the context is too small",
    "where are files skipped when they are binary",
    "retry with a delay after a failure",
    "parse the fleet configuration file",
    "how are decisions stored in the database",
    "which threads run model inference",
    "turn a chat message into an event",
    "how are search results paged",
];

fn percentile(xs: &mut [f64], p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// A deterministic stream of numbers, for the synthetic entries.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self, dims: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dims).map(|_| (self.next() % 20_001) as f32 / 10_000.0 - 1.0).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn words(&mut self, n: usize) -> String {
        const PARTS: [&str; 24] = [
            "parse", "config", "load", "store", "cache", "event", "persona", "index", "search", "query", "token",
            "model", "reply", "plan", "memory", "state", "error", "retry", "stream", "batch", "file", "path", "chunk",
            "vector",
        ];
        (0..n)
            .map(|_| {
                let a = PARTS[(self.next() % 24) as usize];
                let b = PARTS[(self.next() % 24) as usize];
                if self.next().is_multiple_of(2) { format!("{a}_{b}") } else { a.to_string() }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A stand-in model that gives each query a vector made in advance (the search alone).
struct Given(Vec<f32>, String);

impl Embed for Given {
    fn model(&self) -> String {
        self.1.clone()
    }
    fn window(&self) -> usize {
        usize::MAX
    }
    fn count_tokens(&self, _: &str) -> usize {
        0
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|_| self.0.clone()).collect())
    }
}

fn synthetic(n: usize, rng: &mut Rng) -> anyhow::Result<Value> {
    let data = tempfile::tempdir()?;
    let mut index = Index::open(data.path())?;
    let stand_in = Given(Vec::new(), "synthetic".into());
    let t = Instant::now();
    for start in (0..n).step_by(10_000) {
        let entries = (start..(start + 10_000).min(n))
            .map(|i| Entry {
                path: format!("synthetic/{i}.rs"),
                content: rng.words(40),
                embedding: Some(rng.unit(384)),
            })
            .collect();
        index.create_many(entries, Some(&stand_in as &dyn Embed))?;
    }
    let build_s = t.elapsed().as_secs_f64();
    // Hybrid, and each ranking alone.
    let mut ms = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..200 {
        let model = Given(rng.unit(384), "synthetic".into());
        let query = rng.words(4);
        for (mode, ms) in [Mode::Hybrid, Mode::Keyword, Mode::Vector].into_iter().zip(&mut ms) {
            let opts = SearchOptions { limit: 10, mode, ..SearchOptions::default() };
            let t = Instant::now();
            let found = index.search(&query, Some(&model as &dyn Embed), &opts)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            anyhow::ensure!(
                found.hits.len() == 10 && found.note.is_none(),
                "{} hits, {:?}",
                found.hits.len(),
                found.note
            );
        }
    }
    let [hybrid, keyword, vector] = &mut ms;
    Ok(json!({
        "chunks": n,
        "build_s": round(build_s, 2),
        "search_p50_ms": round(percentile(hybrid, 0.5), 3),
        "search_p99_ms": round(percentile(hybrid, 0.99), 3),
        "keyword_p50_ms": round(percentile(keyword, 0.5), 3),
        "vector_p50_ms": round(percentile(vector, 0.5), 3),
        "bytes_per_chunk": dir_bytes(data.path()) / n as u64,
    }))
}

pub fn index(root: &Path, model_dir: &Path) -> anyhow::Result<Value> {
    let model = IndexModel::load(model_dir)?;
    let data = tempfile::tempdir()?;
    let mut index = Index::open(data.path())?;
    let first = index.update(root, &model, &UpdateOptions::default())?;
    let again = index.update(root, &model, &UpdateOptions::default())?;
    let (files, chunks, texts) = index.counts()?;
    let (mut embed_ms, mut search_ms) = (Vec::new(), Vec::new());
    for q in QUESTIONS.iter().cycle().take(40) {
        let t = Instant::now();
        let v = model.embed(&[q]).map_err(anyhow::Error::msg)?.remove(0);
        embed_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let given = Given(v, model.model());
        let t = Instant::now();
        index.search(q, Some(&given as &dyn Embed), &SearchOptions::default())?;
        search_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut with_embedding: Vec<f64> = embed_ms.iter().zip(&search_ms).map(|(a, b)| a + b).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    Ok(json!({
        "bench": "index",
        "tree": {
            "root": root.display().to_string(),
            "files": files,
            "chunks": chunks,
            "distinct_texts": texts,
            "index_s": round(first.seconds, 2),
            "files_per_s": round(first.files_indexed as f64 / first.seconds, 1),
            "chunks_per_s": round(first.chunks_added as f64 / first.seconds, 1),
            "reindex_unchanged_s": round(again.seconds, 3),
            "bytes_per_chunk": dir_bytes(data.path()) / chunks.max(1),
            "query_p50_ms": round(percentile(&mut with_embedding, 0.5), 2),
            "query_p99_ms": round(percentile(&mut with_embedding, 0.99), 2),
            "search_p50_ms": round(percentile(&mut search_ms, 0.5), 3),
            "embed_query_p50_ms": round(percentile(&mut embed_ms, 0.5), 2),
        },
        "synthetic_10k": synthetic(10_000, &mut rng)?,
        "synthetic_100k": synthetic(100_000, &mut rng)?,
    }))
}
