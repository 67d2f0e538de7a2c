//! `mindfleet rag ...`: the codebase index from the command line, in process on a data dir.
//!
//! `index` (the design's index-codebase), `index-file` and `index-dir` chunk, embed and store;
//! `search` answers with the hybrid ranking. The index lives in `<data>/index/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use mindfleet_actors::embed::IndexModel;
use mindfleet_index::{Index, Mode, SearchOptions, UpdateOptions, UpdateReport};
use mindfleet_runtime::models;

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
        #[command(flatten)]
        common: Common,
    },
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
        RagCmd::Search { query, limit, lang, path_prefix, threshold, mode, common } => {
            let mode = match mode {
                SearchMode::Hybrid => Mode::Hybrid,
                SearchMode::Keyword => Mode::Keyword,
                SearchMode::Vector => Mode::Vector,
            };
            let opts = SearchOptions { limit, lang, path_prefix, threshold, mode, ..SearchOptions::default() };
            let index = open(&common)?;
            // Keyword search needs no model; the others say so when it is missing.
            let model = if mode == Mode::Keyword {
                None
            } else {
                model(&common).map_err(|e| eprintln!("mindfleet: {e:#}")).ok()
            };
            let found = index.search(&query, model.as_ref().map(|m| m as &dyn mindfleet_index::Embed), &opts)?;
            if common.json {
                println!("{}", serde_json::to_string(&found)?);
                return Ok(());
            }
            if let Some(note) = &found.note {
                eprintln!("mindfleet: {note}");
            }
            if found.hits.is_empty() {
                println!("nothing found");
            }
            for h in &found.hits {
                let symbol = h.symbol.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
                println!("{:.3}  {}:{}-{}  {}{symbol}", h.score, h.path, h.start_line, h.end_line, h.kind);
            }
            Ok(())
        }
    }
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
        let r = index.update(path, &model, opts)?;
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
