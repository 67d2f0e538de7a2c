//! `mindfleet dump`: the supervision tree and every persona's state, from a running fleet.

use std::io::Write;
use std::process::ExitCode;

use mindfleet::tree::RenderTree;

use super::{Format, OutputFormat, Remote, fail};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: Remote,
    #[arg(long)]
    persona: Option<String>,
    #[command(flatten)]
    format: Format,
}

pub async fn run(a: Args) -> ExitCode {
    let format = match a.format.only("dump", &[OutputFormat::Json, OutputFormat::Tree]) {
        Ok(f) => f,
        Err(e) => return fail(2, e),
    };
    match a.remote.client().dump(a.persona.as_deref()).await {
        Ok(d) => {
            let out = match format {
                OutputFormat::Tree => d.render_tree(),
                _ => serde_json::to_string_pretty(&d).unwrap_or_default() + "\n",
            };
            let _ = std::io::stdout().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}
