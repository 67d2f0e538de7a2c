//! Why a fleet could not start: the one error both the fleet and its cluster node return.

use std::net::SocketAddr;

use mindfleet_server::http;
use mindfleet_store::StorageError;

/// Why a fleet could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("admin API on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("admin API on {addr} is not loopback: set `[admin] token` or MINDFLEET_ADMIN_TOKEN")]
    TokenRequired { addr: SocketAddr },
    #[error(
        "admin API on {addr} is not loopback: `[admin] token` / MINDFLEET_ADMIN_TOKEN is {chars} characters (without \
         surrounding blanks); at least {} are needed off loopback",
        http::MIN_TOKEN_CHARS
    )]
    TokenTooShort { addr: SocketAddr, chars: usize },
    #[error("fleet supervisor failed to start: {0}")]
    Spawn(String),
    #[error(
        "the cluster needs a shared cookie: set {env} (it would listen on {listen}; no node joins or is joined \
         without it)"
    )]
    CookieRequired { env: String, listen: SocketAddr },
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("the cluster refused this node: {0}")]
    JoinRefused(String),
    #[error("cannot join the cluster: {0}")]
    Unreachable(String),
}
