//! `mindfleet rag ...`: the codebase index from the command line, in process on a data dir.
//!
//! Low level: `create` stores one entry, `query` ranks entries by their vectors, and `open`,
//! `fetch`, `close` page through a search's results by handle. Mid level: `index-file`,
//! `index-dir`, `search`. High level: `index` (the design's index-codebase). The index lives
//! in `<data>/index/`; the handles of open cursors in `<data>/index/cursors.json`, so paging
//! works across invocations.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use mindfleet_actors::embed::IndexModel;
use mindfleet_index::{Embed, Hit, Index, MAX_LIMIT, Mode, SearchOptions, UpdateOptions, UpdateReport};
use mindfleet_runtime::cursor::{Cursors, Direction, Page};
use mindfleet_runtime::models;
use serde_json::json;

/// How long an open cursor lives after its last use, and how many may be open at once.
const CURSOR_TTL_MS: u64 = 10 * 60 * 1000;
const MAX_CURSORS: usize = 64;

#[derive(Subcommand)]
pub enum RagCmd {
    /// Index files and directories (recursively, following .gitignore): new and changed files
    /// are chunked and embedded, unchanged ones kept, deleted ones removed.
    Index {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Only these languages, comma-separated (rust, typescript, javascript, python, go,
        /// markdown, text).
        #[arg(long, value_delimiter = ',')]
        types: Option<Vec<String>>,
        #[command(flatten)]
        common: Common,
    },
    /// Index one file.
    IndexFile {
        path: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Index a directory's files (its subdirectories too with --recursive).
    IndexDir {
        path: PathBuf,
        #[arg(long)]
        recursive: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Search the index: keyword (BM25) and vector rankings fused.
    Search {
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[command(flatten)]
        filters: Filters,
        #[command(flatten)]
        common: Common,
    },
    /// Answer a question from the index: search, then the LLM answers from the chunks found,
    /// citing `path:start-end`; says so when the index has nothing relevant.
    Ask {
        question: String,
        /// Chunks given to the model.
        #[arg(long, default_value_t = 4)]
        limit: usize,
        #[arg(long, default_value_t = 160)]
        max_tokens: usize,
        /// A GGUF file (default: the pulled SmolLM2, as Q8_0).
        #[arg(long)]
        llm: Option<PathBuf>,
        #[command(flatten)]
        filters: Filters,
        #[command(flatten)]
        common: Common,
    },
    /// Store one entry: a text under a path of your choosing (not read from disk).
    Create {
        #[arg(long)]
        file_path: String,
        #[arg(long)]
        content: String,
        /// Its vector as a JSON array (default: the model embeds the content).
        #[arg(long)]
        embedding: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// The entries nearest the query by their vectors, with their relevance scores.
    Query {
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[command(flatten)]
        common: Common,
    },
    /// Search, and keep the ranking under a handle to page through: the first page.
    Open {
        query: String,
        #[arg(long, default_value_t = 10)]
        page_size: usize,
        #[command(flatten)]
        filters: Filters,
        #[command(flatten)]
        common: Common,
    },
    /// A page of an open handle: the next (forward) or previous (backward) one, or at --offset.
    Fetch {
        handle: String,
        #[arg(long, value_enum, default_value = "forward")]
        direction: FetchDirection,
        #[arg(long)]
        offset: Option<usize>,
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        common: Common,
    },
    /// Close a handle.
    Close {
        handle: String,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(clap::Args)]
pub struct Filters {
    /// Only chunks of this language.
    #[arg(long)]
    lang: Option<String>,
    /// Only chunks whose path (relative to its root) starts with this.
    #[arg(long)]
    path_prefix: Option<String>,
    /// Only results scoring at least this (0..=1).
    #[arg(long)]
    threshold: Option<f32>,
    #[arg(long, value_enum, default_value = "hybrid")]
    mode: SearchMode,
}

impl Filters {
    fn options(self, limit: usize) -> SearchOptions {
        let mode = match self.mode {
            SearchMode::Hybrid => Mode::Hybrid,
            SearchMode::Keyword => Mode::Keyword,
            SearchMode::Vector => Mode::Vector,
        };
        SearchOptions {
            limit,
            lang: self.lang,
            path_prefix: self.path_prefix,
            threshold: self.threshold,
            mode,
            ..SearchOptions::default()
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum FetchDirection {
    Forward,
    Backward,
}

#[derive(clap::Args)]
pub struct Common {
    /// Data dir (default: `[storage] data_dir` of config/fleet.toml, else ./data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// A HuggingFace-layout BERT directory (default: the pulled all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum SearchMode {
    Hybrid,
    Keyword,
    Vector,
}

pub fn run(cmd: RagCmd) -> ExitCode {
    match execute(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mindfleet: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn execute(cmd: RagCmd) -> anyhow::Result<()> {
    match cmd {
        RagCmd::Index { paths, types, common } => {
            let opts = UpdateOptions { types, ..UpdateOptions::default() };
            index(&paths, &opts, &common)
        }
        RagCmd::IndexFile { path, common } => index(&[path], &UpdateOptions::default(), &common),
        RagCmd::IndexDir { path, recursive, common } => {
            anyhow::ensure!(path.is_dir(), "{}: not a directory", path.display());
            index(&[path], &UpdateOptions { recursive, ..UpdateOptions::default() }, &common)
        }
        RagCmd::Search { query, limit, filters, common } => {
            let found = search(&query, filters.options(limit), &common)?;
            if common.json {
                println!("{}", serde_json::to_string(&found)?);
                return Ok(());
            }
            if let Some(note) = &found.note {
                eprintln!("mindfleet: {note}");
            }
            print_hits(&found.hits);
            Ok(())
        }
        RagCmd::Ask { question, limit, max_tokens, llm, filters, common } => {
            anyhow::ensure!((1..=16).contains(&limit), "--limit: {limit} is not within 1..=16");
            let found = search(&question, filters.options(limit), &common)?;
            let answer = ask(&question, &found, max_tokens, llm)?;
            if common.json {
                println!("{answer}");
            } else {
                println!("{}", answer["answer"].as_str().unwrap_or(""));
                if let Some(sources) = answer["sources"].as_array().filter(|s| !s.is_empty()) {
                    println!("\nsources:");
                    for s in sources {
                        println!("  [{}] {}", s["n"], s["cite"].as_str().unwrap_or(""));
                    }
                }
            }
            Ok(())
        }
        RagCmd::Create { file_path, content, embedding, common } => {
            let embedding = embedding
                .map(|e| serde_json::from_str::<Vec<f32>>(&e))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--embedding: not a JSON array of numbers: {e}"))?;
            let model = if embedding.is_none() { Some(model(&common)?) } else { None };
            let mut index = open(&common)?;
            let id = index.create(&file_path, &content, embedding, model.as_ref().map(|m| m as &dyn Embed))?;
            println!("{}", json!({ "entry_id": id.to_string(), "indexed": true }));
            Ok(())
        }
        RagCmd::Query { query, limit, common } => {
            let opts = SearchOptions { limit, mode: Mode::Vector, ..SearchOptions::default() };
            let found = search(&query, opts, &common)?;
            anyhow::ensure!(found.mode == Mode::Vector, "{}", found.note.unwrap_or_default());
            let scores: Vec<f32> = found.hits.iter().map(|h| h.similarity.unwrap_or(0.0)).collect();
            println!("{}", json!({ "entries": found.hits, "relevance_scores": scores }));
            Ok(())
        }
        RagCmd::Open { query, page_size, filters, common } => {
            anyhow::ensure!(
                (1..=MAX_LIMIT).contains(&page_size),
                "--page-size: {page_size} is not within 1..={MAX_LIMIT}"
            );
            let found = search(&query, filters.options(MAX_LIMIT), &common)?;
            let (handle, page) = with_cursors(&common, |cs, now| Ok(cs.open(found.hits, page_size, now)?))?;
            print_page(Some(&handle), &page, found.note.as_deref(), &common);
            Ok(())
        }
        RagCmd::Fetch { handle, direction, offset, limit, common } => {
            if let Some(l) = limit {
                anyhow::ensure!((1..=MAX_LIMIT).contains(&l), "--limit: {l} is not within 1..={MAX_LIMIT}");
            }
            let direction = match direction {
                FetchDirection::Forward => Direction::Forward,
                FetchDirection::Backward => Direction::Backward,
            };
            let page = with_cursors(&common, |cs, now| Ok(cs.fetch(&handle, direction, offset, limit, now)?))?;
            print_page(Some(&handle), &page, None, &common);
            Ok(())
        }
        RagCmd::Close { handle, common } => {
            with_cursors(&common, |cs, now| Ok(cs.close(&handle, now)?))?;
            println!("{}", json!({ "handle": handle, "closed": true }));
            Ok(())
        }
    }
}

fn search(query: &str, opts: SearchOptions, common: &Common) -> anyhow::Result<mindfleet_index::SearchResults> {
    let index = open(common)?;
    // Keyword search needs no model; the others fall back to keywords, saying why, without one.
    let model = match opts.mode {
        Mode::Keyword => None,
        _ => model(common).map_err(|e| eprintln!("mindfleet: {e:#}")).ok(),
    };
    Ok(index.search(query, model.as_ref().map(|m| m as &dyn Embed), &opts)?)
}

/// Below this cosine similarity a chunk found only by its vector is not taken as relevant
/// (all-MiniLM-L6-v2 gives unrelated texts about 0 to 0.2).
const RELEVANT_SIMILARITY: f32 = 0.3;

/// The answer to `question` from the chunks of `found`: `{"answer", "relevant", "sources",
/// "citations"}`, each source `{"n", "cite": "path:start-end", "chunk_id"}`; the model's `[n]`
/// marks are rewritten as `[path:start-end]`.
fn ask(
    question: &str,
    found: &mindfleet_index::SearchResults,
    max_tokens: usize,
    llm: Option<PathBuf>,
) -> anyhow::Result<serde_json::Value> {
    use mindfleet_actors::llm::{ChatMessage, GenerateRequest, Llm};
    let relevant: Vec<&Hit> = found
        .hits
        .iter()
        .filter(|h| match h.similarity {
            Some(s) => s >= RELEVANT_SIMILARITY,
            // Keyword search only: a keyword match is all there is to go on.
            None => h.keyword_rank.is_some(),
        })
        .collect();
    if relevant.is_empty() {
        return Ok(json!({
            "answer": format!("The index has nothing relevant to this question: {question}"),
            "relevant": false,
            "sources": [],
            "citations": [],
            "note": found.note,
        }));
    }
    let cite = |h: &Hit| format!("{}:{}-{}", h.path, h.start_line, h.end_line);
    let mut sources = String::new();
    for (n, h) in relevant.iter().enumerate() {
        sources.push_str(&format!("[{}] {}\n```\n{}\n```\n\n", n + 1, cite(h), h.text.trim_end()));
    }
    let messages = vec![
        ChatMessage::system(
            "You answer questions about a codebase in at most three sentences of plain prose, using only the \
             numbered sources given. After each claim, cite the source it comes from as [1], [2], ... If the \
             sources do not answer the question, say so.",
        ),
        ChatMessage::user(format!("Sources:\n\n{sources}Question: {question}")),
    ];
    let llm = Llm::load(&crate::llm_file(llm).map_err(anyhow::Error::msg)?)?;
    // Prose only: a small model that starts quoting code tends to repeat itself.
    let req =
        GenerateRequest { stop: vec!["```".into(), "\n\n\n".into()], ..GenerateRequest::new(messages, max_tokens) };
    let g = llm.generate(&req, |_| std::ops::ControlFlow::Continue(()))?;
    let mut answer = g.text.trim().to_string();
    for (n, h) in relevant.iter().enumerate() {
        answer = answer.replace(&format!("[{}]", n + 1), &format!("[{}]", cite(h)));
    }
    let (answer, citations) = attribute(&answer, &relevant, &cite);
    let sources: Vec<serde_json::Value> = relevant
        .iter()
        .enumerate()
        .map(|(n, h)| json!({ "n": n + 1, "cite": cite(h), "chunk_id": h.chunk_id, "score": h.score }))
        .collect();
    Ok(json!({
        "answer": answer,
        "relevant": true,
        "sources": sources,
        "citations": citations,
        "tokens_in": g.tokens_in,
        "tokens_out": g.tokens_out,
        "note": found.note,
    }))
}

/// Every sentence of `answer` with its citation: the model's own (`[path:start-end]`), else
/// the source that shares the most words with it (small models rarely cite), else none. The
/// answer with the added citations, and one `{"sentence", "cite", "by"}` per citation.
fn attribute(answer: &str, sources: &[&Hit], cite: &dyn Fn(&Hit) -> String) -> (String, Vec<serde_json::Value>) {
    fn words(text: &str) -> std::collections::HashSet<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() >= 4)
            .map(str::to_lowercase)
            .filter(|w| {
                !["that", "this", "with", "from", "when", "then", "which", "code", "function"].contains(&w.as_str())
            })
            .collect()
    }
    let source_words: Vec<_> =
        sources.iter().map(|h| words(&format!("{} {}", h.symbol.as_deref().unwrap_or(""), h.text))).collect();
    let mut out = String::new();
    let mut citations = Vec::new();
    let mut rest = answer;
    let mut index = 0;
    while !rest.is_empty() {
        // A sentence ends at `.`, `!` or `?` followed by a space or the end, or at a line break.
        let end = rest
            .char_indices()
            .find(|(i, c)| *c == '\n' || (matches!(c, '.' | '!' | '?') && rest[i + 1..].starts_with([' ', '\n'])))
            .map_or(rest.len(), |(i, c)| i + c.len_utf8());
        let sentence = &rest[..end];
        rest = &rest[end..];
        out.push_str(sentence);
        if sentence.trim().len() < 3 {
            continue;
        }
        index += 1;
        let own: Vec<String> =
            sources.iter().map(|h| cite(h)).filter(|c| sentence.contains(&format!("[{c}]"))).collect();
        if !own.is_empty() {
            citations.extend(own.into_iter().map(|c| json!({ "sentence": index, "cite": c, "by": "model" })));
            continue;
        }
        let mine = words(sentence);
        let best = source_words
            .iter()
            .enumerate()
            .map(|(k, w)| (k, mine.intersection(w).count()))
            .max_by_key(|(k, n)| (*n, std::cmp::Reverse(*k)));
        if let Some((k, n)) = best.filter(|(_, n)| *n > 0) {
            let c = cite(sources[k]);
            // Before the sentence's closing punctuation.
            let body = out.trim_end().trim_end_matches(['.', '!', '?']).len();
            let tail = out[body..].to_string();
            out.truncate(body);
            out.push_str(&format!(" [{c}]{tail}"));
            citations.push(json!({ "sentence": index, "cite": c, "by": "overlap", "shared_words": n }));
        }
    }
    (out, citations)
}

fn print_hits(hits: &[Hit]) {
    if hits.is_empty() {
        println!("nothing found");
    }
    for h in hits {
        let symbol = h.symbol.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
        println!("{:.3}  {}:{}-{}  {}{symbol}", h.score, h.path, h.start_line, h.end_line, h.kind);
    }
}

fn print_page(handle: Option<&str>, page: &Page<Hit>, note: Option<&str>, common: &Common) {
    if common.json {
        let mut v = json!(page);
        v["handle"] = json!(handle);
        println!("{v}");
        return;
    }
    if let Some(note) = note {
        eprintln!("mindfleet: {note}");
    }
    println!(
        "handle {}: {} of {} from offset {}{}{}",
        handle.unwrap_or("-"),
        page.entries.len(),
        page.total_count,
        page.offset,
        if page.has_previous { ", more before" } else { "" },
        if page.has_more { ", more after" } else { "" }
    );
    print_hits(&page.entries);
}

/// Runs `f` on the cursors kept in the data dir, and writes them back (atomically).
fn with_cursors<T>(common: &Common, f: impl FnOnce(&mut Cursors<Hit>, u64) -> anyhow::Result<T>) -> anyhow::Result<T> {
    let dir = data_dir(common).join("index");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("cursors.json");
    let mut cursors = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            eprintln!("mindfleet: {}: unreadable ({e}); open handles are lost", path.display());
            Cursors::new(CURSOR_TTL_MS, MAX_CURSORS)
        }),
        Err(_) => Cursors::new(CURSOR_TTL_MS, MAX_CURSORS),
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let out = f(&mut cursors, now)?;
    let tmp = dir.join("cursors.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&cursors)?)?;
    std::fs::rename(&tmp, &path)?;
    Ok(out)
}

fn data_dir(common: &Common) -> PathBuf {
    if let Some(d) = &common.data {
        return d.clone();
    }
    let fleet = Path::new("config/fleet.toml");
    let cfg = if fleet.exists() { mindfleet_runtime::config::FleetConfig::load(fleet).ok() } else { None };
    cfg.unwrap_or_else(mindfleet_runtime::config::FleetConfig::embedded_default).storage.data_dir
}

fn open(common: &Common) -> anyhow::Result<Index> {
    let index = Index::open(&data_dir(common).join("index"))?;
    for r in index.repairs() {
        eprintln!("mindfleet: index: {r}");
    }
    Ok(index)
}

fn model(common: &Common) -> anyhow::Result<IndexModel> {
    let dir = match &common.model {
        Some(d) => d.clone(),
        None => models::ensure(&models::default_dir(), &models::MINILM, |l| eprintln!("mindfleet: {l}"))?,
    };
    Ok(IndexModel::load(&dir)?)
}

fn index(paths: &[PathBuf], opts: &UpdateOptions, common: &Common) -> anyhow::Result<()> {
    let model = model(common)?;
    let mut index = open(common)?;
    let mut reports: Vec<UpdateReport> = Vec::new();
    for path in paths {
        // A progress bar on a terminal (indicatif draws nothing elsewhere), none with --json.
        let bar = if common.json { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(0) };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} files, {elapsed}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let r = index.update_with(path, &model, opts, &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        });
        bar.finish_and_clear();
        let r = r?;
        if !common.json {
            println!(
                "{}: {} files indexed ({} chunks, {} texts embedded), {} unchanged, {} removed, skipped {} binary, {} too large, {} of other types, in {:.2} s",
                r.root,
                r.files_indexed,
                r.chunks_added,
                r.texts_embedded,
                r.files_unchanged,
                r.files_removed,
                r.skipped_binary,
                r.skipped_large,
                r.skipped_type,
                r.seconds
            );
            for e in &r.errors {
                eprintln!("mindfleet: {e}");
            }
        }
        reports.push(r);
    }
    if common.json {
        let (files, chunks, texts) = index.counts()?;
        let out = serde_json::json!({ "indexed": reports, "files": files, "chunks": chunks, "texts": texts });
        println!("{out}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(path: &str, text: &str) -> Hit {
        Hit {
            chunk_id: 0,
            path: path.into(),
            root: String::new(),
            lang: "rust".into(),
            kind: "function".into(),
            symbol: None,
            start_line: 1,
            end_line: 3,
            score: 1.0,
            keyword_rank: None,
            vector_rank: None,
            similarity: None,
            text: text.into(),
        }
    }

    #[test]
    fn each_sentence_keeps_its_own_citation_or_gets_the_source_it_shares_most_words_with() {
        let (a, b) = (
            hit("cache.rs", "fn invalidate cache entry when written"),
            hit("deploy.rs", "fn switch traffic to green servers"),
        );
        let cite = |h: &Hit| format!("{}:{}-{}", h.path, h.start_line, h.end_line);
        let answer = "Traffic moves to the green servers. The cache entry is dropped [cache.rs:1-3]! Nothing else.";
        let (out, citations) = attribute(answer, &[&a, &b], &cite);
        assert_eq!(
            out,
            "Traffic moves to the green servers [deploy.rs:1-3]. The cache entry is dropped [cache.rs:1-3]! Nothing else."
        );
        let by: Vec<(u64, &str, &str)> = citations
            .iter()
            .map(|c| (c["sentence"].as_u64().unwrap(), c["cite"].as_str().unwrap(), c["by"].as_str().unwrap()))
            .collect();
        assert_eq!(by, [(1, "deploy.rs:1-3", "overlap"), (2, "cache.rs:1-3", "model")]);
    }
}
