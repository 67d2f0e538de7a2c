//! The third-party tool servers `scripts/install-tool-servers.sh` installs at pinned versions
//! (server-everything and server-filesystem from npm, mcp-server-git from the Python package
//! index): where they are, and installing them when they are missing. The tests run on them;
//! the example fleet names them.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// server-everything's program, under [`dir`].
pub const EVERYTHING: &str = "npm/node_modules/.bin/mcp-server-everything";
/// server-filesystem's program, under [`dir`].
pub const FILESYSTEM: &str = "npm/node_modules/.bin/mcp-server-filesystem";
/// mcp-server-git's program, under [`dir`].
pub const GIT: &str = "venv/bin/mcp-server-git";

/// Where the script installs them ([`mindfleet_core::tools::servers_dir`]).
pub fn dir() -> PathBuf {
    mindfleet_core::tools::servers_dir()
}

/// The installed program `relative` (one of the constants above). When it is missing, the
/// first caller of this process runs `script` (the others wait for it), as the models are pulled
/// on first use; an error says what the script said when it does not install it.
pub fn server(relative: &str, script: &Path) -> Result<PathBuf, String> {
    static INSTALL: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let path = dir().join(relative);
    if !path.is_file() {
        let mut installed = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        installed
            .get_or_insert_with(|| install(script))
            .clone()
            .map_err(|why| format!("{} is missing, and {} failed: {why}", path.display(), script.display()))?;
    }
    match path.is_file() {
        true => Ok(path),
        false => Err(format!("{} is missing after {} ran", path.display(), script.display())),
    }
}

/// Runs the install script; what it says goes to stderr.
fn install(script: &Path) -> Result<(), String> {
    let out = std::process::Command::new("bash").arg(script).output().map_err(|e| e.to_string())?;
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("{} ({})", String::from_utf8_lossy(&out.stderr).trim(), out.status)),
    }
}
