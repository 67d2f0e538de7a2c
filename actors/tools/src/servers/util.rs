//! Where the tool servers are, how to start them, and polling with a deadline.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{Backoff, ToolClient, ToolServerSpec};

/// Where scripts/install-tool-servers.sh installs the servers, by the same rule:
/// `$MINDFLEET_TOOL_SERVERS`, else `$XDG_CACHE_HOME/mindfleet/tool-servers`, else
/// `~/.cache/mindfleet/tool-servers`, else `./.mindfleet-tool-servers`.
fn tool_servers_dir() -> PathBuf {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("MINDFLEET_TOOL_SERVERS") {
        return dir;
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return dir.join("mindfleet").join("tool-servers");
    }
    match var("HOME") {
        Some(home) => home.join(".cache").join("mindfleet").join("tool-servers"),
        None => PathBuf::from(".mindfleet-tool-servers"),
    }
}

/// The installed server program at `relative`. When it is missing, the first test to ask runs
/// scripts/install-tool-servers.sh (pinned versions from npm and the Python package index; the
/// others wait for it), as the tests that need the local models pull them on first use; fails,
/// naming the script and what it said, when that does not install it.
pub fn tool_server(relative: &str) -> String {
    static INSTALL: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let path = tool_servers_dir().join(relative);
    if !path.is_file() {
        let mut installed = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        let outcome = installed.get_or_insert_with(install).clone();
        if let Err(why) = outcome {
            panic!("{} is missing, and scripts/install-tool-servers.sh failed: {why}", path.display());
        }
    }
    assert!(path.is_file(), "{} is missing after scripts/install-tool-servers.sh ran", path.display());
    path.to_string_lossy().into_owned()
}

/// Runs scripts/install-tool-servers.sh; its output goes to the test's.
fn install() -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-tool-servers.sh");
    let out = std::process::Command::new("bash").arg(&script).output().map_err(|e| e.to_string())?;
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{} ({})", String::from_utf8_lossy(&out.stderr).trim(), out.status))
    }
}

pub const EVERYTHING: &str = "npm/node_modules/.bin/mcp-server-everything";
pub const FILESYSTEM: &str = "npm/node_modules/.bin/mcp-server-filesystem";
pub const GIT: &str = "venv/bin/mcp-server-git";

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
