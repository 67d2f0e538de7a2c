//! `mindfleet tools list|approve`: a running fleet's tool servers and their tools, and the
//! approval of tools whose descriptions changed since they were pinned.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::{Json, Remote, fail};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: Remote,
    #[command(flatten)]
    out: Json,
    #[command(subcommand)]
    cmd: ToolsCmd,
}

#[derive(Subcommand)]
enum ToolsCmd {
    /// Each tool server: its state, restarts and calls; each of its tools: whether it waits for
    /// approval, and why it is disabled if it is.
    List,
    /// Pin the tools' current descriptions (of one server, or of every server that is
    /// connected): the tools disabled because theirs changed can be called again.
    Approve {
        /// The server's `name`; every connected server when left out.
        server: Option<String>,
    },
}

pub async fn run(Args { remote, out: Json { json }, cmd }: Args) -> ExitCode {
    let client = remote.client();
    match cmd {
        ToolsCmd::List => match client.tools().await {
            Ok(d) if json => {
                println!("{}", json!(d));
                ExitCode::SUCCESS
            }
            Ok(d) => {
                if d.servers.is_empty() {
                    println!("no tool servers ([[tool_server]] in the fleet file)");
                }
                for s in &d.servers {
                    let protocol = s.protocol.as_deref().unwrap_or("-");
                    println!(
                        "{}  {}  {}  protocol {protocol}  restarts {}  calls {}  failures {}",
                        s.name, s.transport, s.state, s.restarts, s.calls, s.failures
                    );
                    for t in &s.tools {
                        let approval = if t.needs_approval { "approval" } else { "no approval" };
                        let access = if t.read_only { "read-only" } else { "may write" };
                        match &t.disabled {
                            Some(why) => println!("  {}  {access}, {approval}  DISABLED: {why}", t.name),
                            None => println!("  {}  {access}, {approval}", t.name),
                        }
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(e.exit_code() as u8, e),
        },
        ToolsCmd::Approve { server } => match client.tools_approve(server.as_deref()).await {
            Ok(v) if json => {
                println!("{v}");
                ExitCode::SUCCESS
            }
            Ok(v) => {
                let enabled: Vec<&str> =
                    v["enabled"].as_array().into_iter().flatten().filter_map(|t| t.as_str()).collect();
                match enabled.is_empty() {
                    true => println!("pinned; no tool was disabled"),
                    false => println!("pinned; enabled again: {}", enabled.join(", ")),
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(e.exit_code() as u8, e),
        },
    }
}
