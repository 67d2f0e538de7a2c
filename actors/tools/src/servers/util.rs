//! Where the tool servers are, how to start them, and polling with a deadline.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Backoff, ToolClient, ToolServerSpec, installed};

/// The installed server program at `relative`, installed by scripts/install-tool-servers.sh
/// when it is missing ([`installed::server`]).
pub fn tool_server(relative: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-tool-servers.sh");
    installed::server(relative, &script).unwrap_or_else(|why| panic!("{why}")).to_string_lossy().into_owned()
}

pub use installed::{EVERYTHING, FILESYSTEM, GIT};

/// A stdio server passed `PATH` only: the node servers start through `#!/usr/bin/env node`, and
/// git is wherever `PATH` says.
pub fn stdio(name: &str, program: &str, args: &[&str]) -> ToolServerSpec {
    let mut spec = ToolServerSpec::stdio(name, &tool_server(program), args);
    spec.env = vec!["PATH".into()];
    spec
}

pub async fn connect(spec: ToolServerSpec) -> ToolClient {
    let backoff = Backoff { initial: Duration::from_millis(50), max: Duration::from_secs(1) };
    let client = ToolClient::new(spec, backoff).expect("a valid spec");
    client.connect().await.expect("connects");
    client
}

pub fn in_secs(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

/// Polls `cond` every 10 ms until it holds; fails after `limit`.
pub async fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// server-everything in its streamable HTTP mode on a free loopback port, killed when dropped.
/// (It listens on every interface: its CLI has a port, not an address.)
pub struct HttpEverything {
    _child: tokio::process::Child,
    pub port: u16,
    pub url: String,
}

impl HttpEverything {
    pub async fn start() -> HttpEverything {
        // A port the system just gave out and took back; the server binds it right after.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        HttpEverything::start_on(port).await
    }

    pub async fn start_on(port: u16) -> HttpEverything {
        let child = tokio::process::Command::new(tool_server(EVERYTHING))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("server-everything starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < deadline, "server-everything not listening on {port} within 20 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        HttpEverything { _child: child, port, url: format!("http://127.0.0.1:{port}/mcp") }
    }
}
