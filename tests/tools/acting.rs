//! Personas that act (issue 53): a question in chat becomes a plan whose `call_tool` steps run on
//! real MCP servers (mcp-server-git, server-filesystem), and the reply quotes what they returned;
//! their failures, a person's approval and the loop breaker drive the plan.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mindfleet_core::record::{Action, CallOutcome, PlanRecord, StepState};
use mindfleet_tools::installed;

use crate::util::{chat, decision, fleet_toml, poll, reply_to, start};

/// An installed tool server's program (installed on first use).
pub fn program(relative: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-tool-servers.sh");
    installed::server(relative, &script).unwrap_or_else(|why| panic!("{why}")).display().to_string()
}

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

/// A repository whose last commit has `subject`, under `dir`.
pub fn repository(dir: &Path, subject: &str) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let repo = repo.canonicalize().unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("retry.rs"), "fn retry() {}\n").unwrap();
    git(&repo, &["add", "retry.rs"]);
    git(&repo, &["commit", "-q", "-m", "Add the retry loop"]);
    std::fs::write(repo.join("retry.rs"), "fn retry() { /* capped */ }\n").unwrap();
    git(&repo, &["commit", "-q", "-am", subject]);
    repo
}

/// The git server on `repo` and a reviewer whose procedure asks it for the last commit.
fn git_fleet(repo: &Path, brain: &str) -> String {
    let (git, repo) = (program(installed::GIT), repo.display());
    fleet_toml(&format!(
        r#"
[[tool_server]]
name = "git"
command = "{git}"
args = ["--repository", "{repo}"]
env = ["PATH", "HOME"]
approval = "never"

[[persona]]
name = "reviewer"
role = "code reviewer"
rooms = ["general"]
brain = "{brain}"
tools = ["git.git_log"]

[[persona.procedure]]
name = "last-commit"
when = ["last commit", "latest commit"]
calls = [{{ tool = "git.git_log", arguments = {{ repo_path = "{repo}", max_count = 1 }} }}]
"#
    ))
}

/// The plans `persona` journaled for `event_id`, once there is one.
pub async fn plan_of(fleet: &mindfleet::Fleet, persona: &str, event_id: &str) -> PlanRecord {
    poll(&format!("{persona}'s plan for {event_id}"), || async {
        let (storage, p) = (fleet.storage.clone(), persona.to_string());
        let plans = tokio::task::spawn_blocking(move || storage.recent_plans(&p, 50)).await.unwrap().unwrap();
        plans.into_iter().find(|r| r.event_id == event_id)
    })
    .await
}

/// The journal of each call the plan (and the plans it replaced) made.
pub fn calls(record: &PlanRecord) -> Vec<(String, CallOutcome)> {
    record
        .replaced
        .iter()
        .chain(std::iter::once(&record.plan))
        .flat_map(|p| p.steps.iter())
        .filter_map(|s| s.call.as_ref().and_then(|c| Some((c.tool.clone(), c.outcome.clone()?))))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asked_about_the_last_commit_the_reviewer_calls_git_and_answers_with_its_subject() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repository(dir.path(), "Cap the retry backoff at thirty seconds");
    let fleet = start(&dir.path().join("data"), &git_fleet(&repo, "rules")).await;

    let ack = fleet.inject(chat("general", "alice", "@reviewer what is the last commit?")).await.unwrap();
    let reply = reply_to(&fleet, &ack.event_id).await;
    assert!(reply.text.starts_with("@alice "), "{}", reply.text);
    assert!(
        reply.text.contains("Cap the retry backoff at thirty seconds"),
        "the reply quotes the subject: {}",
        reply.text
    );
    assert!(reply.text.contains("git.git_log"), "and says where it comes from: {}", reply.text);

    let record = plan_of(&fleet, "reviewer", &ack.event_id).await;
    assert_eq!(record.plan.source, "procedure:last-commit");
    let step = &record.plan.steps[0];
    assert_eq!((step.action, &step.state), (Action::CallTool, &StepState::Done));
    let [(tool, call)] = calls(&record).try_into().expect("one call");
    assert_eq!(tool, "git.git_log");
    assert_eq!((call.error, call.approval.as_str(), call.replayed), (None, "not needed", false));
    assert!(call.bytes > 0 && call.summary.contains("Cap the retry"), "{call:?}");
    let d = decision(&fleet, "reviewer", &ack.event_id).await;
    assert_eq!(d.verdict, mindfleet_core::record::Verdict::Engage);
    fleet.shutdown(Duration::from_secs(5)).await;
}
