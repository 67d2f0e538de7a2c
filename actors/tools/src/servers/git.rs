//! mcp-server-git 2026.10.19: a 2026-07-28 server (no `initialize`), on a temporary repository.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use super::util::{GIT, connect, in_secs, stdio};

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

#[tokio::test]
async fn git_log_returns_the_commit_subject() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().canonicalize().unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("retry.rs"), "fn retry() {}\n").unwrap();
    git(&repo, &["add", "retry.rs"]);
    git(&repo, &["commit", "-q", "-m", "Cap the retry backoff at thirty seconds"]);

    let repo = repo.to_str().unwrap();
    let client = connect(stdio("git", GIT, &["--repository", repo])).await;
    assert_eq!(client.protocol_version().as_deref(), Some("2026-07-28"));
    let log = client.call("git_log", json!({ "repo_path": repo, "max_count": 1 }), in_secs(20)).await.unwrap();
    assert!(log.text.contains("Cap the retry backoff at thirty seconds"), "{}", log.text);
}
