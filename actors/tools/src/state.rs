//! Where a server's connection is: what the client reports and a call refused as not ready
//! carries.

use serde::Serialize;

/// Where a server's connection is, for dumps and `mindfleet tools list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// The first connection is being made.
    Connecting,
    Ready,
    /// Reconnect attempt `attempt` (from 1) is waiting out its backoff or connecting.
    Restarting {
        attempt: u32,
    },
    /// Not connected: the first connection or the last attempt failed, or the connection was
    /// lost (`reason` then starts with "transport lost"). The caller may reconnect.
    Failed {
        reason: String,
    },
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::Connecting => f.write_str("connecting"),
            ServerState::Ready => f.write_str("ready"),
            ServerState::Restarting { attempt } => write!(f, "restarting (attempt {attempt})"),
            ServerState::Failed { reason } => write!(f, "failed: {reason}"),
        }
    }
}
