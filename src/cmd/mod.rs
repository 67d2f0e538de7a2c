//! One module per command of the `mindfleet` binary (as mini-redis' `src/cmd/`): each holds its
//! clap arguments and the function that runs it. `main` hands each command to its module in one
//! exhaustive `match`.
//!
//! The flags several commands share are declared here once and flattened into theirs:
//! [`Remote`] and [`MaybeRemote`] (`--admin`, `--token`), [`Json`] (`--json`) and [`Format`]
//! (`--format`). Each is global, so it goes before or after a command's subcommand, and
//! [`Anywhere`] puts them on the top level too, so they go before the command's name.

use std::process::ExitCode;

use clap::ValueEnum;

pub mod ai;
pub mod bench;
pub mod check;
pub mod cluster;
pub mod dump;
pub mod embed;
pub mod generate;
pub mod history;
pub mod inject;
pub mod mcp;
pub mod models;
pub mod rag;
pub mod refs;
pub mod replay;
pub mod run;
pub mod tail;
pub mod tools;
pub mod webhooks;

/// The admin address a command that talks to a running fleet asks by default.
const DEFAULT_ADMIN: &str = "127.0.0.1:7878";

// `--admin ADDR --token TOKEN` of a command that always talks to a running fleet. Global, so a
// command with subcommands (`ai`) takes them before or after its subcommand.
#[derive(clap::Args)]
pub struct Remote {
    /// Admin API address of the running fleet.
    #[arg(long, default_value = DEFAULT_ADMIN, global = true)]
    pub admin: String,
    /// Bearer token (default: MINDFLEET_ADMIN_TOKEN).
    #[arg(long, env = "MINDFLEET_ADMIN_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

impl Remote {
    pub fn client(self) -> mindfleet::client::Client {
        mindfleet::client::Client::new(&self.admin, self.token)
    }
}

// `--admin ADDR --token TOKEN` of a command that runs in this process unless given `--admin`.
// The command says what `--admin` asks for with `mut_arg("admin", ...)`. Global, so a command
// with subcommands (`rag`) takes them before or after its subcommand.
#[derive(clap::Args)]
pub struct MaybeRemote {
    /// Ask the fleet running at this admin address instead.
    #[arg(long, global = true)]
    pub admin: Option<String>,
    /// Bearer token for --admin (default: MINDFLEET_ADMIN_TOKEN).
    #[arg(long, env = "MINDFLEET_ADMIN_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

impl MaybeRemote {
    /// The client of the running fleet, when `--admin` names one.
    pub fn client(self) -> Option<mindfleet::client::Client> {
        let token = self.token;
        self.admin.map(|a| mindfleet::client::Client::new(&a, token))
    }
}

// `--json`: one JSON value on standard output instead of text for people. Global, as above.
#[derive(clap::Args, Clone, Copy)]
pub struct Json {
    #[arg(long, global = true)]
    pub json: bool,
}

/// What `--format` can ask for: one set for every command, so the flag can be given before the
/// command's name too ([`Anywhere`]); each command prints some of them ([`Format::only`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Json,
    Table,
    Tree,
}

// `--format F` (`json` by default). Global, so a command with subcommands (`ai`) takes it after
// them too.
#[derive(clap::Args)]
pub struct Format {
    #[arg(long, value_enum, default_value = "json", global = true)]
    pub format: OutputFormat,
}

impl Format {
    /// The format asked for when `command` prints it, else what it prints.
    pub fn only(&self, command: &str, prints: &[OutputFormat]) -> Result<OutputFormat, String> {
        let name = |f: &OutputFormat| f.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default();
        if prints.contains(&self.format) {
            Ok(self.format)
        } else {
            let prints: Vec<String> = prints.iter().map(name).collect();
            Err(format!("--format {}: {command} prints {}", name(&self.format), prints.join(" or ")))
        }
    }
}

/// The shared flags on the top level, so they go before the command's name too
/// (`mindfleet --admin ADDR dump`): global, and hidden, as each command that takes them declares
/// them itself (clap hands a value given here to the command's flag of the same name). A flag
/// given to a command that does not take it is refused ([`refuse_misplaced`]), not ignored.
#[derive(clap::Args)]
pub struct Anywhere {
    #[arg(long, global = true, hide = true)]
    admin: Option<String>,
    #[arg(long, global = true, hide = true)]
    token: Option<String>,
    #[arg(long, global = true, hide = true)]
    json: bool,
    #[arg(long, value_enum, global = true, hide = true)]
    format: Option<OutputFormat>,
}

/// The flags of [`Anywhere`].
const ANYWHERE: [&str; 4] = ["admin", "token", "json", "format"];

/// Refuses a shared flag given to a command none of whose (sub)commands on the line declares it:
/// clap accepts a global flag anywhere, so `mindfleet check --admin ADDR FILE` would otherwise
/// run and ignore it. `cli` is the command line's definition before clap built it (each command
/// with its own flags only), `m` what was parsed.
pub fn refuse_misplaced(cli: &clap::Command, m: &clap::ArgMatches) -> Result<(), String> {
    let mut path = Vec::new();
    let (mut c, mut at) = (cli, m);
    while let Some((name, sub)) = at.subcommand() {
        let Some(next) = c.find_subcommand(name) else { break };
        path.push(next);
        (c, at) = (next, sub);
    }
    if path.is_empty() {
        return Ok(());
    }
    for id in ANYWHERE {
        let given = matches!(m.value_source(id), Some(clap::parser::ValueSource::CommandLine));
        if given && !path.iter().any(|c| c.get_arguments().any(|a| a.get_id() == id)) {
            let line: Vec<&str> = path.iter().map(|c| c.get_name()).collect();
            return Err(format!("--{id}: `mindfleet {}` does not take it", line.join(" ")));
        }
    }
    Ok(())
}

/// Runs `f` on a multi-thread tokio runtime: the commands that need one get it here, the others
/// (blocking HTTP, rayon work, model pulls) run without.
pub fn block_on(f: impl Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(f),
        Err(e) => fail(1, format!("cannot start the async runtime: {e}")),
    }
}

/// Reports `e` on standard error and returns the exit code `code` (README, "Exit codes").
pub fn fail(code: u8, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("mindfleet: {e:#}");
    ExitCode::from(code)
}

/// A benchmark's figures: one JSON line with `json`, else pretty-printed.
pub fn print_figures(r: anyhow::Result<serde_json::Value>, json: bool) -> ExitCode {
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
