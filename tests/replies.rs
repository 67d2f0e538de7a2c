//! Replies worth reading, on real fleets: what a person in the room reads after asking about an
//! earlier conversation or about code, on the rules brain and on the local model.

use mindfleet::Fleet;
use mindfleet::client::Client;
use mindfleet_core::event::EventInput;
use serde_json::json;

use crate::util::{DEADLINE, chat, decision, fleet_toml, metric, pulled, reply_to, start};

/// 28 Nov 2026 14:00 UTC, in µs.
const T0: i64 = 1_795_874_400_000_000;

/// What was said in #general: a staging deploy that failed and was fixed, and lines around it.
const SAID: [(&str, &str); 7] = [
    ("alice", "The deploy to staging failed with a timeout on the database migration."),
    ("bob", "The migration locks the orders table; I'll add a statement_timeout of 30s to the runner."),
    ("carol", "lunch at noon anyone?"),
    ("bob", "Also, the cache warmup script is flaky on cold starts."),
    ("dave", "I moved the release notes to the wiki."),
    ("carol", "Staging is green again after the batched migration."),
    ("erin", "The new office plants arrived."),
];

/// Says [`SAID`] in #general a minute apart from [`T0`], and waits until the fleet is idle.
async fn said(fleet: &Fleet) {
    for (i, (from, text)) in SAID.iter().enumerate() {
        let ts = mindfleet_core::time::rfc3339(T0 + i as i64 * 60_000_000);
        fleet.inject(EventInput { ts: Some(ts), ..chat("general", from, text) }).await.unwrap();
    }
    assert!(fleet.wait_idle(DEADLINE).await);
}

async fn ask(fleet: &Fleet, room: &str, from: &str, text: &str) -> String {
    let input = EventInput { domain: if room == "code" { "code" } else { "chat" }.into(), ..chat(room, from, text) };
    let ack = fleet.inject(input).await.unwrap();
    let reply = reply_to(fleet, &ack.event_id).await.text;
    assert!(fleet.wait_idle(DEADLINE).await);
    reply
}

const RULES_HELPER: &str =
    "[[persona]]\nname = \"helper\"\nrole = \"assistant\"\nrooms = [\"general\"]\ndormant = true\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_about_the_conversation_are_answered_from_what_was_said_with_who_and_when() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(RULES_HELPER)).await;
    said(&fleet).await;

    // A summary quotes the messages on its topic, oldest first, each with its author and time.
    let r = ask(&fleet, "general", "dave", "@helper please summarize what we discussed about the staging deploy").await;
    let lines: Vec<&str> = r.lines().collect();
    assert!(lines[0].starts_with("@dave 2 messages on staging deploy in #general:"), "{r}");
    assert!(lines.contains(&"- alice, #general, 28 Nov 14:00: \"The deploy to staging failed with a timeout on the database migration\""), "{r}");
    assert!(
        lines.contains(&"- carol, #general, 28 Nov 14:05: \"Staging is green again after the batched migration\""),
        "{r}"
    );
    assert!(!r.contains("lunch") && !r.contains("plants"), "only what bears on the deploy: {r}");

    // What one person said is answered with that person's line on the topic, not the latest.
    let r = ask(&fleet, "general", "erin", "@helper what did bob say about the migration?").await;
    assert!(
        r.contains("\"The migration locks the orders table; I'll add a statement_timeout of 30s to the runner\""),
        "{r}"
    );
    assert!(r.contains("bob, #general, 28 Nov 14:01"), "{r}");
    assert!(!r.contains("cache warmup") && !r.contains("plants") && !r.contains("Staging is green"), "{r}");

    // A question that nothing bears on: what the persona would need, not filler and not an
    // unrelated line.
    let r = ask(&fleet, "general", "alice", "@helper What is a circuit breaker in distributed systems?").await;
    assert!(r.starts_with("@alice I have nothing on circuit breaker distributed systems"), "{r}");
    assert!(r.ends_with('?'), "it asks for what it needs: {r}");

    // After these plans the persona's working memory holds its reflections: no reply carries
    // them, nor a plan's trace.
    for text in ["@helper any news on the staging deploy?", "@helper what was the timeout on the migration?"] {
        let r = ask(&fleet, "general", "frank", text).await;
        for note in ["reflection", "recall_memory", "draft_reply", "->", "lesson", "I'll take it from here"] {
            assert!(!r.contains(note), "the persona's own notes in a reply ({note}): {r}");
        }
        assert!(r.contains("statement_timeout") || r.contains("The deploy to staging failed"), "{r}");
    }
    fleet.shutdown(DEADLINE).await;
}

const CODE_REVIEWER: &str = "[[persona]]\nname = \"reviewer\"\nrole = \"code reviewer\"\nrooms = [\"code\"]\ndomains = [\"code\"]\ndormant = true\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_question_cites_lines_that_exist_and_hold_its_terms() {
    pulled();
    let repo = tempfile::tempdir().unwrap();
    let src = repo.path().join("src/net");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("retry.rs"),
        "//! Retries of requests to the upstream.\n\nuse std::time::Duration;\n\n\
         /// How long to wait before the next attempt: exponential backoff, capped at 6.4 s.\n\
         pub fn next_delay(attempt: u32) -> Duration {\n    let backoff_ms = 100u64 << attempt.min(6);\n    \
         Duration::from_millis(backoff_ms)\n}\n\n\
         /// Whether an answer is worth another attempt: 401 is not (the token is wrong).\n\
         pub fn retryable(status: u16) -> bool {\n    status >= 500 || status == 429\n}\n",
    )
    .unwrap();
    std::fs::write(
        repo.path().join("src/auth.rs"),
        "/// Checks the bearer token of a request against the admin token.\npub fn check_token(given: &str, admin: &str) -> bool {\n    \
         given.len() == admin.len() && given.bytes().zip(admin.bytes()).all(|(a, b)| a == b)\n}\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(CODE_REVIEWER)).await;
    let api = Client::new(&fleet.addr.to_string(), None);
    api.rag("index", &json!({ "paths": [repo.path()] })).await.unwrap();

    let r = ask(&fleet, "code", "bob", "@reviewer where is the retry backoff computed?").await;
    // `path:start-end` of a chunk, then the lines that bear on the question, by number.
    let cite = r.split_whitespace().find(|w| w.starts_with("[src/net/retry.rs:")).unwrap_or_else(|| panic!("{r}"));
    let cite = cite.trim_matches(['[', ']']);
    let (path, range) = cite.split_once(':').unwrap();
    let (start, end) = range.split_once('-').unwrap();
    let (start, end): (usize, usize) = (start.parse().unwrap(), end.parse().unwrap());
    let file: Vec<String> =
        std::fs::read_to_string(repo.path().join(path)).unwrap().lines().map(String::from).collect();
    assert!(start >= 1 && end <= file.len() && start <= end, "{cite} in a file of {} lines", file.len());
    assert!(file[start - 1..end].iter().any(|l| l.contains("backoff")), "{cite} holds the question's terms: {r}");
    let shown: Vec<usize> = r.split("line ").skip(1).filter_map(|s| s.split(':').next()?.parse().ok()).collect();
    assert!(!shown.is_empty(), "{r}");
    for n in shown {
        let line = &file[n - 1];
        assert!(r.contains(&format!("line {n}: `{}`", line.trim())), "line {n} quoted as it is: {r}");
    }
    assert!(!r.contains("where is the retry backoff computed"), "no echo: {r}");
    fleet.shutdown(DEADLINE).await;
}

/// SmolLM2-135M decoded as it was before `[llm]` guarded it: greedy, with nothing against
/// repetition. On a fresh fleet it echoes the first message below and loops on the second.
const UNGUARDED: &str = "[[persona]]\nname = \"helper\"\nrole = \"generalist assistant\"\nrooms = [\"general\"]\n\
     brain = \"local\"\ndormant = true\n\n[llm]\nrepetition_penalty = 1.0\nno_repeat_ngram = 0\nno_copy_ngram = 0\n\
     stop_repeated_sentence = false\n";

/// A fleet of [`UNGUARDED`] asked `text` by ivan: the reply posted, the decision's reason, the
/// plan's draft check (as `ai plan` shows it), and the `/metrics` count of drafts replaced for
/// `flaw`.
async fn unguarded(text: &str, flaw: &str) -> (String, String, serde_json::Value, Option<f64>) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = crate::util::config(dir.path(), &fleet_toml(UNGUARDED));
    cfg.models.dir = pulled();
    let fleet = Fleet::start(cfg).await.unwrap();
    let ack = fleet.inject(chat("general", "ivan", text)).await.unwrap();
    let reply = reply_to(&fleet, &ack.event_id).await;
    assert_eq!(reply.brain, "rules", "the grounded reply is posted: {reply:?}");
    let reason = decision(&fleet, "helper", &ack.event_id).await.reason;
    let http = reqwest::Client::new();
    let base = format!("http://{}", fleet.addr);
    let plan: serde_json::Value =
        http.get(format!("{base}/ai/plan?persona=helper")).send().await.unwrap().json().await.unwrap();
    let why: serde_json::Value =
        http.get(format!("{base}/ai/why?event={}", ack.event_id)).send().await.unwrap().json().await.unwrap();
    assert_eq!(why["decisions"][0]["reason"].as_str(), Some(reason.as_str()), "ai why says it: {why}");
    assert_eq!(plan["plan"]["event_id"].as_str(), Some(ack.event_id.as_str()), "{plan}");
    let body = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    let count = metric(&scrape, "mindfleet_drafts_replaced_total", Some(("flaw", flaw)));
    fleet.shutdown(DEADLINE).await;
    (reply.text, reason, plan["plan"]["draft_check"].clone(), count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_that_repeats_the_message_is_replaced_by_the_grounded_reply_and_journaled() {
    let asked =
        "@helper The deploy to staging failed with a timeout on the database migration. Any idea what to check first?";
    let (reply, reason, check, count) = unguarded(asked, "echo").await;
    assert_eq!(check["flaw"], "echo", "{check}");
    let draft = check["draft"].as_str().unwrap();
    assert!(draft.contains("The deploy to staging failed with a timeout on the database migration"), "{draft}");
    assert!(reason.contains("draft repeated the message (") && reason.contains("): grounded reply"), "{reason}");
    assert!(!reply.contains("failed with a timeout on the database migration"), "posted as written: {reply}");
    assert!(reply.starts_with("@ivan I have nothing on deploy staging"), "{reply}");
    assert_eq!(count, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_draft_is_never_posted() {
    let asked = "@helper can you look at the retry logic? It retries forever on 401.";
    let (reply, reason, check, count) = unguarded(asked, "loop").await;
    assert_eq!(check["flaw"], "loop", "{check}");
    assert!(reason.contains("draft looped (") && reason.contains("): grounded reply"), "{reason}");
    let sentences: Vec<&str> = reply.split(['.', '?', '!']).map(str::trim).filter(|s| !s.is_empty()).collect();
    let once: std::collections::HashSet<&str> = sentences.iter().copied().collect();
    assert_eq!(once.len(), sentences.len(), "a sentence twice: {reply}");
    assert!(!reply.contains("glad"), "{reply}");
    assert_eq!(count, Some(1.0));
}
