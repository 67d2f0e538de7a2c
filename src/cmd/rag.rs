//! `mindfleet rag ...`: the codebase index from the command line.
//!
//! Low level: `create` stores one entry, `query` ranks entries by their vectors, and `open`,
//! `fetch`, `close` page through a search's results by handle. Mid level: `index-file`,
//! `index-dir`, `search`. High level: `index` (the design's index-codebase) and `ask`.
//!
//! Every command is a request of the `Index` actor ([`mindfleet_core::knowledge`]). With
//! `--admin` it goes to the running fleet's (`POST /rag/{command}`); without, this process
//! locks the data dir and runs the actor itself, with an embedding worker (and, for `ask`, the
//! LLM of `[llm]`) of its own. The index lives in `<data>/index/`, the handles of open cursors
//! in `<data>/index/cursors.json`, so paging works across invocations.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Subcommand, ValueEnum};
use mindfleet_actors::llm_worker::{BackendArgs, LlmArgs};
use mindfleet_core::cursor::Direction;
use mindfleet_core::knowledge::{
    AskRequest, CloseRequest, CreateRequest, FetchRequest, IndexMsg, IndexRequest, PathKind, RagError, RagRequest,
    SearchMode, SearchRequest,
};
use mindfleet_index::Hit;
use mindfleet_models::fetch;
use serde_json::{Value, json};

use mindfleet::client::Client;

use super::{Json, MaybeRemote, block_on, fail};

/// `mindfleet rag [OPTIONS] COMMAND`: the options (where the index is, `--admin`, `--json`) go
/// before or after the command.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: RagCmd,
    #[command(flatten)]
    common: Common,
}

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
    },
    /// Index one file.
    IndexFile { path: PathBuf },
    /// Index a directory's files (its subdirectories too with --recursive).
    IndexDir {
        path: PathBuf,
        #[arg(long)]
        recursive: bool,
    },
    /// Search the index: keyword (BM25) and vector rankings fused.
    Search {
        #[arg(required_unless_present = "batch", conflicts_with = "batch")]
        query: Option<String>,
        /// Answer many queries: a JSONL file of `{"id", "query"}` (`-`: standard input); prints
        /// one line `{"id", "results"}` per query (`{"id", "error"}` for one that failed).
        #[arg(long)]
        batch: Option<PathBuf>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[command(flatten)]
        filters: Filters,
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
        /// A GGUF file (default: the LLM of `[llm]`, else the pulled SmolLM2 as Q8_0).
        #[arg(long, conflicts_with = "admin")]
        llm: Option<PathBuf>,
        #[command(flatten)]
        filters: Filters,
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
    },
    /// The entries nearest the query by their vectors, with their relevance scores.
    Query {
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// Search, and keep the ranking under a handle to page through: the first page.
    Open {
        query: String,
        #[arg(long, default_value_t = 10)]
        page_size: usize,
        #[command(flatten)]
        filters: Filters,
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
    },
    /// Close a handle.
    Close { handle: String },
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
    mode: Mode,
}

impl Filters {
    fn search(self, query: String, limit: usize) -> SearchRequest {
        SearchRequest {
            query,
            limit,
            lang: self.lang,
            path_prefix: self.path_prefix,
            threshold: self.threshold,
            mode: self.mode.into(),
            embed_wait_ms: None,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum FetchDirection {
    Forward,
    Backward,
}

#[derive(clap::Args)]
#[command(mut_arg("admin", |a| a.help("Ask the index of the fleet running at this admin address instead of opening the data dir")))]
pub struct Common {
    /// Data dir (default: `[storage] data_dir` of the fleet file, else ./data).
    #[arg(long, conflicts_with = "admin", global = true)]
    data: Option<PathBuf>,
    /// Fleet file for the data dir, `[index]`, `[models]` and `[llm]` (default:
    /// config/fleet.toml when present, else the embedded default fleet).
    #[arg(long, conflicts_with = "admin", global = true)]
    fleet: Option<PathBuf>,
    /// A HuggingFace-layout BERT directory (default: `[models] embedding`, else the pulled
    /// all-MiniLM-L6-v2).
    #[arg(long, conflicts_with = "admin", global = true)]
    model: Option<PathBuf>,
    #[command(flatten)]
    remote: MaybeRemote,
    #[command(flatten)]
    out: Json,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Mode {
    Hybrid,
    Keyword,
    Vector,
}

impl From<Mode> for SearchMode {
    fn from(m: Mode) -> SearchMode {
        match m {
            Mode::Hybrid => SearchMode::Hybrid,
            Mode::Keyword => SearchMode::Keyword,
            Mode::Vector => SearchMode::Vector,
        }
    }
}

pub fn run(args: Args) -> ExitCode {
    block_on(async move {
        match execute(args.cmd, args.common).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(exit_code(&e), format!("{e:#}")),
        }
    })
}

/// The exit code of a failed command (README, "Exit codes"): 4 for a data dir another process
/// holds, 2 for a request the index refused as bad input (a path that is not a file, an unknown
/// type, a closed handle), the admin API's code when one answered (or did not), else 1.
fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(mindfleet_store::StorageError::InUse { .. }) = e.downcast_ref() {
        return 4;
    }
    if let Some(c) = e.downcast_ref::<mindfleet::client::ClientError>() {
        return c.exit_code() as u8;
    }
    match e.downcast_ref::<RagError>() {
        Some(RagError::Invalid(_) | RagError::NotFound(_) | RagError::Forbidden(_)) => 2,
        _ => 1,
    }
}

/// The command as a request.
fn request(cmd: RagCmd) -> anyhow::Result<RagRequest> {
    let abs = |p: &Path| -> anyhow::Result<String> {
        Ok(std::path::absolute(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?.display().to_string())
    };
    Ok(match cmd {
        RagCmd::Index { paths, types } => {
            let paths = paths.iter().map(|p| abs(p)).collect::<anyhow::Result<_>>()?;
            RagRequest::Index(IndexRequest { paths, types, recursive: true, expect: None })
        }
        RagCmd::IndexFile { path } => {
            let r =
                IndexRequest { paths: vec![abs(&path)?], types: None, recursive: false, expect: Some(PathKind::File) };
            RagRequest::Index(r)
        }
        RagCmd::IndexDir { path, recursive } => {
            let r = IndexRequest { paths: vec![abs(&path)?], types: None, recursive, expect: Some(PathKind::Dir) };
            RagRequest::Index(r)
        }
        RagCmd::Search { query, batch: _, limit, filters } => {
            RagRequest::Search(filters.search(query.unwrap_or_default(), limit))
        }
        RagCmd::Ask { question, limit, max_tokens, llm: _, filters } => {
            let Filters { lang, path_prefix, threshold: _, mode } = filters;
            let r = AskRequest { question, limit, max_tokens, lang, path_prefix, mode: mode.into() };
            RagRequest::Ask(r)
        }
        RagCmd::Create { file_path, content, embedding } => {
            let embedding = embedding
                .map(|e| serde_json::from_str::<Vec<f32>>(&e))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--embedding: not a JSON array of numbers: {e}"))?;
            RagRequest::Create(CreateRequest { file_path, content, embedding })
        }
        RagCmd::Query { query, limit } => RagRequest::Query(SearchRequest::new(query, limit)),
        RagCmd::Open { query, page_size, filters } => RagRequest::Open(filters.search(query, page_size)),
        RagCmd::Fetch { handle, direction, offset, limit } => {
            let direction = match direction {
                FetchDirection::Forward => Direction::Forward,
                FetchDirection::Backward => Direction::Backward,
            };
            RagRequest::Fetch(FetchRequest { handle, direction, offset, limit })
        }
        RagCmd::Close { handle } => RagRequest::Close(CloseRequest { handle }),
    })
}

async fn execute(cmd: RagCmd, common: Common) -> anyhow::Result<()> {
    let (batch, llm) = match &cmd {
        RagCmd::Search { batch, .. } => (batch.clone(), None),
        RagCmd::Ask { llm, .. } => (None, llm.clone()),
        _ => (None, None),
    };
    let req = request(cmd)?;
    let needs_llm = matches!(req, RagRequest::Ask(_));
    let index = Target::new(&common, needs_llm, llm, matches!(req, RagRequest::Index(_))).await?;
    if let (Some(file), RagRequest::Search(template)) = (batch, &req) {
        let failed = search_batch(&index, &file, template).await?;
        index.stop().await;
        anyhow::ensure!(failed == 0, "{failed} queries of the batch failed");
        return Ok(());
    }
    let answer = index.call(req.clone()).await;
    index.stop().await;
    let answer = answer?;
    if common.out.json {
        println!("{answer}");
        return Ok(());
    }
    print_human(&req, &answer);
    Ok(())
}

/// `rag search --batch`: one line of results per query line; a bad line is reported on its own
/// line and the others still run. How many failed.
async fn search_batch(index: &Target, file: &Path, template: &SearchRequest) -> anyhow::Result<usize> {
    let reader: Box<dyn BufRead> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?,
        ))
    };
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line {
        id: Value,
        query: String,
    }
    let mut failed = 0;
    for (n, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| anyhow::anyhow!("{}:{}: {e}", file.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = match serde_json::from_str(&line) {
            Ok(l) => l,
            Err(e) => {
                failed += 1;
                let error = format!("{}:{}: {e}", file.display(), n + 1);
                eprintln!("mindfleet: {error}");
                println!("{}", json!({ "id": null, "line": n + 1, "error": error }));
                continue;
            }
        };
        let req = RagRequest::Search(SearchRequest { query: parsed.query, ..template.clone() });
        match index.call(req).await {
            Ok(mut v) => println!("{}", json!({ "id": parsed.id, "results": v["hits"].take(), "mode": v["mode"] })),
            Err(e) => {
                failed += 1;
                println!("{}", json!({ "id": parsed.id, "error": format!("{e:#}") }));
            }
        }
    }
    Ok(failed)
}

/// Where the requests go: the running fleet's index, or one this process runs on the data dir.
enum Target {
    Remote(Client),
    Local { index: ractor::ActorRef<IndexMsg>, others: Vec<ractor::ActorCell>, _lock: mindfleet_store::DataDirLock },
}

impl Target {
    async fn new(common: &Common, needs_llm: bool, llm: Option<PathBuf>, progress: bool) -> anyhow::Result<Target> {
        if let Some(addr) = &common.remote.admin {
            return Ok(Target::Remote(Client::new(addr, common.remote.token.clone())));
        }
        let mut config = mindfleet::fleet_config(common.fleet.as_deref())?;
        if let Some(d) = &common.data {
            config.storage.data_dir = d.clone();
        }
        if let Some(m) = &common.model {
            config.models.embedding = Some(m.clone());
        }
        let data = config.storage.data_dir.clone();
        let lock = mindfleet_store::lock_data_dir(&data).map_err(|e| {
            let held = matches!(e, mindfleet_store::StorageError::InUse { .. });
            let e = anyhow::Error::new(e);
            if held { e.context("while a fleet runs on it, ask through its admin API: --admin ADDR") } else { e }
        })?;
        let mut args = mindfleet::fleet::embed_args(&config);
        if config.models.embedding.is_none() {
            args.model_dir = fetch::ensure(&config.models.dir, &fetch::MINILM, |l| eprintln!("mindfleet: {l}"))?;
        }
        let embedding = mindfleet_actors::embed::worker::spawn(args, None).await?;
        let mut others = vec![embedding.get_cell()];
        let llm = if needs_llm {
            // A local model is pulled (and made runnable) as `mindfleet generate` does.
            let backend = match (llm, mindfleet::fleet::llm_backend(&config)) {
                (Some(file), BackendArgs::Local { kv_bytes, prefix_reuse, .. }) => BackendArgs::Local {
                    model: mindfleet::llm_file(Some(file)).map_err(anyhow::Error::msg)?,
                    config: Default::default(),
                    kv_bytes,
                    prefix_reuse,
                },
                (Some(file), BackendArgs::OpenAi(_)) => {
                    let model = mindfleet::llm_file(Some(file)).map_err(anyhow::Error::msg)?;
                    LlmArgs::local(model, 1).backend
                }
                (None, BackendArgs::Local { config: tuning, kv_bytes, prefix_reuse, .. }) => BackendArgs::Local {
                    model: mindfleet::llm_file(config.models.llm.clone()).map_err(anyhow::Error::msg)?,
                    config: tuning,
                    kv_bytes,
                    prefix_reuse,
                },
                (_, b) => b,
            };
            let worker = mindfleet_actors::llm_worker::spawn(LlmArgs { backend, slots: 1 }, None).await?;
            others.push(worker.get_cell());
            Some(worker)
        } else {
            None
        };
        let mut args = mindfleet::fleet::index_args(&config, embedding, llm);
        // This process is the only client: any readable path may be indexed.
        args.restrict_paths = false;
        args.cursor_file = Some(data.join("index").join("cursors.json"));
        if progress && !common.out.json {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} files, {elapsed}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            args.progress = Some(Arc::new(move |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
                if done == total {
                    bar.finish_and_clear();
                }
            }));
        }
        let index = mindfleet_actors::index::spawn(args, None).await?;
        Ok(Target::Local { index, others, _lock: lock })
    }

    async fn call(&self, req: RagRequest) -> anyhow::Result<Value> {
        match self {
            Target::Remote(client) => {
                let (command, body) = req.to_body();
                Ok(client.rag(command, &body).await?)
            }
            Target::Local { index, .. } => {
                let answer = ractor::call!(index, IndexMsg::Request, Box::new(req))
                    .map_err(|e| anyhow::anyhow!("index actor: {e}"))?;
                Ok(answer?)
            }
        }
    }

    async fn stop(self) {
        if let Target::Local { index, others, _lock } = self {
            // The index first: its thread finishes the request it serves with the workers up.
            let _ = index.stop_and_wait(None, None).await;
            for cell in others {
                let _ = cell.stop_and_wait(None, None).await;
            }
        }
    }
}

fn print_human(req: &RagRequest, answer: &Value) {
    if let Some(note) = answer["note"].as_str() {
        eprintln!("mindfleet: {note}");
    }
    match req {
        RagRequest::Index(_) => {
            for r in answer["indexed"].as_array().into_iter().flatten() {
                let n = |k: &str| r[k].as_u64().unwrap_or(0);
                println!(
                    "{}: {} files indexed ({} chunks, {} texts embedded), {} unchanged, {} removed, skipped {} binary, {} too large, {} of other types, in {:.2} s",
                    r["root"].as_str().unwrap_or(""),
                    n("files_indexed"),
                    n("chunks_added"),
                    n("texts_embedded"),
                    n("files_unchanged"),
                    n("files_removed"),
                    n("skipped_binary"),
                    n("skipped_large"),
                    n("skipped_type"),
                    r["seconds"].as_f64().unwrap_or(0.0)
                );
                for e in r["errors"].as_array().into_iter().flatten() {
                    eprintln!("mindfleet: {}", e.as_str().unwrap_or(""));
                }
            }
        }
        RagRequest::Search(_) => print_hits(&answer["hits"], false),
        // Nearest by vectors: their cosine, not the rank fusion's score.
        RagRequest::Query(_) => print_hits(&answer["entries"], true),
        RagRequest::Open(_) | RagRequest::Fetch(_) => {
            let flag = |k: &str| answer[k].as_bool().unwrap_or(false);
            println!(
                "handle {}: {} of {} from offset {}{}{}",
                answer["handle"].as_str().unwrap_or("-"),
                answer["entries"].as_array().map_or(0, Vec::len),
                answer["total_count"],
                answer["offset"],
                if flag("has_previous") { ", more before" } else { "" },
                if flag("has_more") { ", more after" } else { "" }
            );
            print_hits(&answer["entries"], false);
        }
        RagRequest::Ask(_) => {
            println!("{}", answer["answer"].as_str().unwrap_or(""));
            if let Some(sources) = answer["sources"].as_array().filter(|s| !s.is_empty()) {
                println!("\nsources:");
                for s in sources {
                    println!("  [{}] {}", s["n"], s["cite"].as_str().unwrap_or(""));
                }
            }
        }
        RagRequest::Create(_) | RagRequest::CreateMany(_) | RagRequest::Close(_) => println!("{answer}"),
    }
}

/// One line per hit: its score (`cosine`: its cosine similarity instead), where it is, what it is.
fn print_hits(hits: &Value, cosine: bool) {
    let hits: Vec<Hit> = serde_json::from_value(hits.clone()).unwrap_or_default();
    if hits.is_empty() {
        println!("nothing found");
    }
    for h in hits {
        let symbol = h.symbol.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
        let score = if cosine { h.similarity.unwrap_or(0.0) } else { h.score };
        println!("{score:.3}  {}:{}-{}  {}{symbol}", h.path, h.start_line, h.end_line, h.kind);
    }
}
