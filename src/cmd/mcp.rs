//! `mindfleet mcp`: the fleet as an MCP server on standard input and output, for a coding agent
//! or a desktop client that starts its servers as commands. Its tools (`inject`, `ask`, `why`,
//! `recall`, `rag_search`) are those of the admin API's `/mcp`, asked of the running fleet at
//! `--admin` with its token. It serves until the client closes standard input; a fleet that is
//! not running makes each call an error result that says so, not the server fail.

use std::process::ExitCode;

use mindfleet::mcp::Remote;
use mindfleet_server::mcp::FleetTools;
use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;

use super::{Remote as RemoteArgs, fail};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: RemoteArgs,
}

pub async fn run(Args { remote }: Args) -> ExitCode {
    let admin = remote.admin.clone();
    let client = remote.client();
    // Standard output is the protocol's: what people should know goes to standard error.
    if !client.health().await {
        tracing::warn!("the fleet at {admin} does not answer `/health` yet: tool calls fail until it does");
    }
    let tools = FleetTools::new(Remote::new(client));
    match tools.serve(rmcp::transport::stdio()).await {
        Ok(server) => match server.waiting().await {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => fail(1, format!("the MCP server stopped: {e}")),
        },
        // The client went before it asked anything.
        Err(ServerInitializeError::ConnectionClosed(_)) => ExitCode::SUCCESS,
        Err(e) => fail(1, format!("MCP handshake on standard input: {e}")),
    }
}
