//! The client on real third-party MCP servers, installed at pinned versions by
//! scripts/install-tool-servers.sh (run by the first test that needs them, when they are
//! missing): server-everything (stdio and streamable HTTP), server-filesystem and mcp-server-git.

mod everything;
mod failures;
mod filesystem;
mod git;
mod util;
