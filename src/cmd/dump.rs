//! `mindfleet dump`: the supervision tree and every persona's state, from a running fleet.

use std::io::Write;
use std::process::ExitCode;

use clap::ValueEnum;

use super::{Format, Remote, fail};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: Remote,
    #[arg(long)]
    persona: Option<String>,
    #[command(flatten)]
    format: Format<DumpFormat>,
}

#[derive(Clone, Copy, ValueEnum)]
enum DumpFormat {
    Json,
    Tree,
}

pub async fn run(a: Args) -> ExitCode {
    match a.remote.client().dump(a.persona.as_deref()).await {
        Ok(d) => {
            let out = match a.format.format {
                DumpFormat::Json => serde_json::to_string_pretty(&d).unwrap_or_default() + "\n",
                DumpFormat::Tree => d.render_tree(),
            };
            let _ = std::io::stdout().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}
