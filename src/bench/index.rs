//! `mindfleet bench index`: the codebase index's speed and size.
//!
//! - Indexing a real tree (default: the current directory) with the real embedding model:
//!   files/s and chunks/s, a re-index of the unchanged tree, bytes stored per chunk, and query
//!   latency with the query embedded.
//! - The recall loss of int8 storage: on the real tree's MiniLM vectors, recall@10 of the exact
//!   int8 scan against an exact f32 search.
//! - Search latency at 10k and 100k entries: synthetic unit vectors (384-d, clustered around
//!   random centres, as embeddings of related texts are) and texts of identifier-like words
//!   stand in for that many embedded chunks (embedding 100k real chunks would take hours on two
//!   cores); the query's vector is given, so this is the search alone. Where the index builds
//!   an HNSW graph (100k), also its build time, its recall@10 against the exact scan and the
//!   vector side's latency by each.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mindfleet_actors::embed::IndexModel;
use mindfleet_core::embedding::dot;
use mindfleet_index::{Embed, Entry, Index, Mode, SearchOptions, UpdateOptions};
use serde_json::{Value, json};

use super::{percentile, round};

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
        unit((0..dims).map(|_| (self.next() % 20_001) as f32 / 10_000.0 - 1.0).collect())
    }

    /// A unit vector near one of `centres`: the centre plus a random unit vector, normalised
    /// (its cosine to the centre is about 0.7, to another of its cluster about 0.5).
    fn near(&mut self, centres: &[Vec<f32>]) -> Vec<f32> {
        let c = &centres[(self.next() % centres.len() as u64) as usize];
        let noise = self.unit(c.len());
        unit(c.iter().zip(noise).map(|(c, e)| c + e).collect())
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

fn unit(v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

/// The share of `truth` found in `found`.
fn recall(found: &[u64], truth: &[u64]) -> f64 {
    truth.iter().filter(|id| found.contains(id)).count() as f64 / truth.len().max(1) as f64
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

/// The model as the index sees it, keeping each text's f32 vector as it embeds.
struct Recording<'a> {
    model: &'a IndexModel,
    vectors: RefCell<HashMap<String, Vec<f32>>>,
}

impl Embed for Recording<'_> {
    fn model(&self) -> String {
        self.model.model()
    }
    fn window(&self) -> usize {
        self.model.window()
    }
    fn count_tokens(&self, text: &str) -> usize {
        self.model.count_tokens(text)
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let vectors = self.model.embed(texts)?;
        let mut kept = self.vectors.borrow_mut();
        for (text, v) in texts.iter().zip(&vectors) {
            kept.insert(text.to_string(), v.clone());
        }
        Ok(vectors)
    }
}

/// Recall@10 of the exact int8 scan against an exact f32 search, on `vectors` (one per distinct
/// text): 200 of them are the queries, each left out of both rankings.
fn int8_recall(vectors: Vec<Vec<f32>>) -> anyhow::Result<Value> {
    let data = tempfile::tempdir()?;
    let mut index = Index::open(data.path())?;
    let vectors: Vec<Vec<f32>> = vectors.into_iter().map(unit).collect();
    let entries = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| Entry { path: format!("text/{i}"), content: format!("text {i}"), embedding: Some(v.clone()) })
        .collect();
    let ids = index.create_many(entries, None)?;
    let step = (vectors.len() / 200).max(1);
    let mut sum = 0.0;
    let mut queries = 0;
    for (i, q) in vectors.iter().enumerate().step_by(step).take(200) {
        let mut exact: Vec<(u64, f32)> =
            ids.iter().zip(&vectors).filter(|(id, _)| **id != ids[i]).map(|(id, v)| (*id, dot(q, v))).collect();
        exact.sort_by(|a, b| b.1.total_cmp(&a.1));
        let truth: Vec<u64> = exact.iter().take(10).map(|h| h.0).collect();
        let int8: Vec<u64> =
            index.search_vectors(q, 11, true).into_iter().map(|h| h.0).filter(|id| *id != ids[i]).take(10).collect();
        sum += recall(&int8, &truth);
        queries += 1;
    }
    Ok(json!({
        "vectors": vectors.len(),
        "queries": queries,
        "recall_at_10": round(sum / queries.max(1) as f64, 4),
    }))
}

/// The vector side of `index` alone, by the graph and by the exact scan: once the graph is
/// built (waited for), its build time, recall@10 against the scan, and the latency of each.
fn vector_side(index: &Index, queries: &[Vec<f32>]) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(900);
    let status = loop {
        let status = index.vector_status();
        if let Some(e) = &status.error {
            anyhow::bail!("the vector graph: {e}");
        }
        if status.graph.is_some() || status.vectors < status.exact_below {
            break status;
        }
        anyhow::ensure!(Instant::now() < deadline, "the vector graph is not built after 15 minutes: {status:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // A search of 10 asks each ranking for 50.
    let (mut graph_ms, mut exact_ms, mut found) = (Vec::new(), Vec::new(), 0.0);
    for q in queries {
        let t = Instant::now();
        let approx = index.search_vectors(q, 50, false);
        graph_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let exact = index.search_vectors(q, 50, true);
        exact_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let top = |hits: &[(u64, f32)]| hits.iter().take(10).map(|h| h.0).collect::<Vec<_>>();
        found += recall(&top(&approx), &top(&exact));
    }
    let graph = status.graph.is_some();
    Ok(json!({
        "answered_by": if graph { "graph" } else { "exact scan" },
        "exact_below": status.exact_below,
        "graph_build_s": status.last_build_s.map(|s| round(s, 1)),
        "recall_at_10": graph.then(|| round(found / queries.len() as f64, 4)),
        "graph_p50_ms": graph.then(|| round(percentile(&mut graph_ms, 0.5), 3)),
        "graph_p99_ms": graph.then(|| round(percentile(&mut graph_ms, 0.99), 3)),
        "exact_p50_ms": round(percentile(&mut exact_ms, 0.5), 3),
        "exact_p99_ms": round(percentile(&mut exact_ms, 0.99), 3),
    }))
}

fn synthetic(n: usize, rng: &mut Rng) -> anyhow::Result<Value> {
    let data = tempfile::tempdir()?;
    let mut index = Index::open(data.path())?;
    let stand_in = Given(Vec::new(), "synthetic".into());
    let centres: Vec<Vec<f32>> = (0..n / 250).map(|_| rng.unit(384)).collect();
    let t = Instant::now();
    for start in (0..n).step_by(10_000) {
        let entries = (start..(start + 10_000).min(n))
            .map(|i| Entry {
                path: format!("synthetic/{i}.rs"),
                content: rng.words(40),
                embedding: Some(rng.near(&centres)),
            })
            .collect();
        index.create_many(entries, Some(&stand_in as &dyn Embed))?;
    }
    let build_s = t.elapsed().as_secs_f64();
    let queries: Vec<Vec<f32>> = (0..200).map(|_| rng.near(&centres)).collect();
    let vector_side = vector_side(&index, &queries)?;
    // Hybrid, and each ranking alone.
    let mut ms = [Vec::new(), Vec::new(), Vec::new()];
    for q in queries {
        let model = Given(q, "synthetic".into());
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
        "clusters": centres.len(),
        "build_s": round(build_s, 2),
        "search_p50_ms": round(percentile(hybrid, 0.5), 3),
        "search_p99_ms": round(percentile(hybrid, 0.99), 3),
        "keyword_p50_ms": round(percentile(keyword, 0.5), 3),
        "vector_p50_ms": round(percentile(vector, 0.5), 3),
        "bytes_per_chunk": dir_bytes(data.path()) / n as u64,
        "vector_side": vector_side,
    }))
}

pub fn index(root: &Path, model_dir: &Path) -> anyhow::Result<Value> {
    let model = IndexModel::load(model_dir)?;
    let data = tempfile::tempdir()?;
    let mut index = Index::open(data.path())?;
    let recording = Recording { model: &model, vectors: RefCell::default() };
    let first = index.update(root, &recording, &UpdateOptions::default())?;
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
    let mut embedded: Vec<(String, Vec<f32>)> = recording.vectors.into_inner().into_iter().collect();
    embedded.sort_by(|a, b| a.0.cmp(&b.0));
    let int8 = int8_recall(embedded.into_iter().map(|(_, v)| v).collect())?;
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
        "int8_against_f32": int8,
        "synthetic_10k": synthetic(10_000, &mut rng)?,
        "synthetic_100k": synthetic(100_000, &mut rng)?,
    }))
}
