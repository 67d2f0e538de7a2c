//! One module per command of the `mindfleet` binary (as mini-redis' `src/cmd/`): each holds its
//! clap arguments and the function that runs it. `main` hands each command to its module in one
//! exhaustive `match`.
//!
//! The flags several commands share are declared here once and flattened into theirs:
//! [`Remote`] and [`MaybeRemote`] (`--admin`, `--token`), [`Json`] (`--json`) and [`Format`]
//! (`--format`).

use std::process::ExitCode;

use clap::ValueEnum;

pub mod ai;
pub mod bench;
pub mod check;
pub mod cluster;
pub mod dump;
pub mod embed;
pub mod generate;
pub mod inject;
pub mod models;
pub mod rag;
pub mod refs;
pub mod run;

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

// `--format F` with the values of `F` (`json` by default). Global, so a command with
// subcommands (`ai`) takes it after them too.
#[derive(clap::Args)]
pub struct Format<F: ValueEnum + Clone + Send + Sync + 'static> {
    #[arg(long, value_enum, default_value = "json", global = true)]
    pub format: F,
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
