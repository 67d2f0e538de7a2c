//! `mindfleet move` and `mindfleet drain`: personas, with all their state, from the node of
//! `--admin` to other nodes of the fleet.

use std::process::ExitCode;

use super::{Remote, fail};

#[derive(clap::Args)]
pub struct MoveArgs {
    #[command(flatten)]
    remote: Remote,
    persona: String,
    /// The node to move it to (default: the node with the fewest personas that is up).
    #[arg(long)]
    to: Option<String>,
}

#[derive(clap::Args)]
pub struct DrainArgs {
    #[command(flatten)]
    remote: Remote,
    /// The node to move them to (default: each to the node with the fewest personas).
    #[arg(long)]
    to: Option<String>,
}

pub async fn move_persona(MoveArgs { remote, persona, to }: MoveArgs) -> ExitCode {
    ask(remote, "move", serde_json::json!({ "persona": persona, "to": to })).await
}

pub async fn drain(DrainArgs { remote, to }: DrainArgs) -> ExitCode {
    ask(remote, "drain", serde_json::json!({ "to": to })).await
}

/// Prints what moved.
async fn ask(remote: Remote, command: &str, body: serde_json::Value) -> ExitCode {
    match remote.client().cluster(command, &body).await {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}
