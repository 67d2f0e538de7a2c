//! `mindfleet bench replies`: what the personas post, read as the person in the room would. One
//! fleet with a `helper` and a `reviewer` on each brain (`rules`, and `local` on the pulled
//! SmolLM2), all dormant (they answer only who names them) and in the same rooms. A
//! conversation (bench/replies/conversation.jsonl) is said in #general first, and Werkzeug
//! 3.0.6 (fetched as `bench rag-eval` does) is indexed. Then every prompt of
//! bench/replies/prompts.jsonl is asked of each brain's persona in turn, one at a time, and its
//! reply read: questions about the conversation (each with the facts its answer must carry),
//! summaries (the same), code questions about Werkzeug (each with the files that answer it) and
//! general questions. Per brain: echo rate (the reply repeats half or more of the question's
//! words in a row), loop rate (a sentence twice, or four words three times), unanswered (no
//! reply), the share of conversation and summary answers carrying all their facts, the share
//! of code answers naming a file that answers them, and the median reply length and time.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mindfleet_core::config::FleetConfig;
use mindfleet_core::event::EventInput;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{median, round, words};
use mindfleet::client::Client;
use mindfleet::fleet::Fleet;

/// The conversation said in #general before the questions.
pub const CONVERSATION: &str = include_str!("../../bench/replies/conversation.jsonl");
/// The prompts, one JSON object a line.
pub const PROMPTS: &str = include_str!("../../bench/replies/prompts.jsonl");

const BRAINS: [&str; 2] = ["rules", "local"];
/// Longest one reply may take.
const REPLY_WAIT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    pub id: String,
    /// `conversation`, `summary`, `code` or `general`.
    pub kind: String,
    /// `helper` or `reviewer`: the role asked (each brain has its own).
    pub to: String,
    pub text: String,
    /// What an answer about the conversation must carry (case-insensitive).
    #[serde(default)]
    pub facts: Vec<String>,
    /// Files that answer a code question (paths in the indexed tree).
    #[serde(default)]
    pub answers: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    from: String,
    text: String,
}

pub fn parse_prompts(text: &str) -> anyhow::Result<Vec<Prompt>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let p: Prompt = serde_json::from_str(line).map_err(|e| anyhow::anyhow!("prompts line {}: {e}", i + 1))?;
        anyhow::ensure!(
            matches!(p.kind.as_str(), "conversation" | "summary" | "code" | "general"),
            "prompts line {}: kind `{}` is not conversation, summary, code or general",
            i + 1,
            p.kind
        );
        out.push(p);
    }
    Ok(out)
}

fn fail(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// The persona of `role` on `brain`.
fn persona(role: &str, brain: &str) -> String {
    format!("{role}-{brain}")
}

/// Whether `reply` echoes the question: it repeats 80% or more of the question's words (of four
/// or more) in a row, or has fewer than three words of its own (not in the question, the address
/// aside). An answer that quotes a line sharing the question's words is not an echo.
pub fn echoes(reply: &str, question: &str) -> bool {
    let (r, q) = (words(reply), words(question));
    let mut best = 0;
    for i in 0..r.len() {
        for j in 0..q.len() {
            let n = r[i..].iter().zip(&q[j..]).take_while(|(a, b)| a == b).count();
            best = best.max(n);
        }
    }
    let own = r.iter().skip(1).filter(|w| !q.contains(w)).count();
    (q.len() >= 4 && best * 5 >= q.len() * 4) || own < 3
}

/// Whether `reply` says a sentence (of four words or more) twice, or eight words in a row twice
/// (a list's repeated citations, `(bob, #general, 28 Nov 14:01)`, are not a loop).
pub fn loops(reply: &str) -> bool {
    let mut seen = std::collections::HashSet::new();
    for s in reply.split(['.', '!', '?', '\n']) {
        let w = words(s);
        if w.len() >= 4 && !seen.insert(w) {
            return true;
        }
    }
    let w = words(reply);
    let mut grams: HashMap<&[String], usize> = HashMap::new();
    w.windows(8).any(|g| {
        let n = grams.entry(g).or_default();
        *n += 1;
        *n >= 2
    })
}

/// What one reply was.
struct Read {
    prompt: Prompt,
    reply: Option<String>,
    /// The brain that wrote it: the model's draft (`local`), or the grounded reply (`rules`).
    brain: String,
    seconds: f64,
}

impl Read {
    fn carries_facts(&self) -> bool {
        let r = self.reply.as_deref().unwrap_or("").to_lowercase();
        !self.prompt.facts.is_empty() && self.prompt.facts.iter().all(|f| r.contains(&f.to_lowercase()))
    }

    fn names_a_file(&self) -> bool {
        let r = self.reply.as_deref().unwrap_or("");
        self.prompt.answers.iter().any(|a| r.contains(a.as_str()))
    }
}

/// The figures of one brain's replies.
fn figures(reads: &[Read]) -> Value {
    let n = reads.len().max(1) as f64;
    let answered: Vec<&Read> = reads.iter().filter(|r| r.reply.is_some()).collect();
    let of = |kind: &[&str]| reads.iter().filter(|r| kind.contains(&r.prompt.kind.as_str())).collect::<Vec<_>>();
    let share = |v: &[&Read], ok: fn(&Read) -> bool| {
        if v.is_empty() { 0.0 } else { v.iter().filter(|r| ok(r)).count() as f64 / v.len() as f64 }
    };
    let echo = answered.iter().filter(|r| echoes(r.reply.as_deref().unwrap_or(""), &r.prompt.text)).count();
    let looped = answered.iter().filter(|r| loops(r.reply.as_deref().unwrap_or(""))).count();
    json!({
        "prompts": reads.len(),
        "echo_rate": round(echo as f64 / n, 3),
        "loop_rate": round(looped as f64 / n, 3),
        "unanswered": reads.len() - answered.len(),
        "conversation_with_facts": round(share(&of(&["conversation"]), Read::carries_facts), 3),
        "summaries_with_facts": round(share(&of(&["summary"]), Read::carries_facts), 3),
        "code_with_file": round(share(&of(&["code"]), Read::names_a_file), 3),
        "median_reply_chars": median(answered.iter().map(|r| r.reply.as_deref().unwrap_or("").chars().count() as f64).collect()),
        "median_reply_s": round(median(answered.iter().map(|r| r.seconds).collect()), 2),
        "model_replies": answered.iter().filter(|r| r.brain == "local").count(),
    })
}

/// The bench on `tree` (Werkzeug), with the models in `models` (the local brain's on `llm`
/// when given, a GGUF file or a packaged model's name); `details`: every reply too, with the
/// model's draft when the draft check replaced it.
pub async fn replies(
    tree: &Path,
    source: &str,
    models: &Path,
    llm: Option<&Path>,
    details: bool,
) -> anyhow::Result<Value> {
    let prompts = parse_prompts(PROMPTS)?;
    let dir = tempfile::tempdir()?;
    let mut toml = String::from("[fleet]\nname = \"bench-replies\"\n[admin]\naddr = \"127.0.0.1:0\"\n");
    for brain in BRAINS {
        for (role, domains) in [("helper", "[\"chat\"]"), ("reviewer", "[\"code\", \"chat\"]")] {
            toml.push_str(&format!(
                "[[persona]]\nname = \"{}\"\nrole = \"{role}\"\nbrain = \"{brain}\"\ndomains = {domains}\n\
                 rooms = [\"general\", \"code-review\"]\ndormant = true\n\
                 inferences_per_hour = 100000\ntokens_per_hour = 100000000\n",
                persona(role, brain)
            ));
        }
    }
    let mut cfg = FleetConfig::from_toml(Path::new("bench-replies.toml"), &toml).map_err(fail)?;
    cfg.storage.data_dir = dir.path().to_path_buf();
    cfg.models.dir = models.to_path_buf();
    cfg.models.llm = llm.map(Path::to_path_buf);
    let fleet = Fleet::start(cfg).await?;
    let api = Client::new(&fleet.addr.to_string(), None);
    let indexing = Instant::now();
    api.rag("index", &json!({ "paths": [tree] })).await.map_err(fail)?;
    let index_s = indexing.elapsed().as_secs_f64();
    // The conversation, a second apart, then quiet: every persona has taken it in.
    let start_us = mindfleet_core::time::now_us() - 3_600_000_000;
    for (i, l) in CONVERSATION.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let line: Line = serde_json::from_str(l).map_err(|e| anyhow::anyhow!("conversation line {}: {e}", i + 1))?;
        let input = EventInput {
            domain: "chat".into(),
            room: "general".into(),
            from: line.from,
            text: line.text,
            ts: Some(mindfleet_core::time::rfc3339(start_us + i as i64 * 60_000_000)),
            ..Default::default()
        };
        fleet.inject(input).await.map_err(fail)?;
    }
    anyhow::ensure!(fleet.wait_idle(REPLY_WAIT).await, "the fleet did not settle after the conversation");
    let mut out = serde_json::Map::new();
    let mut shown = Vec::new();
    // Each reply shown: its persona and event, to find the model's draft the check replaced.
    let mut asked_as: Vec<(usize, String, String)> = Vec::new();
    for brain in BRAINS {
        let mut reads = Vec::new();
        for p in &prompts {
            let name = persona(&p.to, brain);
            let (domain, room) = if p.kind == "code" { ("code", "code-review") } else { ("chat", "general") };
            let input = EventInput {
                domain: domain.into(),
                room: room.into(),
                from: "dana".into(),
                text: format!("@{name} {}", p.text),
                ..Default::default()
            };
            let asked = Instant::now();
            let id = fleet.inject(input).await.map_err(fail)?.event_id;
            let find = || -> anyhow::Result<Option<(String, String)>> {
                let posted = fleet.storage.outbox_after(0, 100_000).map_err(fail)?;
                Ok(posted
                    .into_iter()
                    .find(|(_, o)| o.in_reply_to == id && o.persona == name)
                    .map(|(_, o)| (o.text, o.brain)))
            };
            let reply = loop {
                let got = find()?;
                if got.is_some() || asked.elapsed() > REPLY_WAIT {
                    break got;
                }
                // A reply that is not coming shows as a fleet idle without it.
                if asked.elapsed() > Duration::from_secs(5) && fleet.wait_idle(Duration::from_millis(200)).await {
                    break find()?;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let seconds = asked.elapsed().as_secs_f64();
            let (reply, by) = reply.map_or((None, String::new()), |(t, b)| (Some(t), b));
            if details {
                shown.push(json!({ "brain": brain, "id": p.id, "asked": p.text, "reply": reply, "by": by, "s": round(seconds, 2) }));
                asked_as.push((shown.len() - 1, name.clone(), id.clone()));
            }
            reads.push(Read { prompt: p.clone(), reply, brain: by, seconds });
        }
        let mut f = figures(&reads);
        // The model's drafts the draft check replaced, by flaw, for the local brain's personas.
        let dump = fleet.dump(None).await.map_err(fail)?;
        let mut replaced: std::collections::BTreeMap<String, u64> = Default::default();
        for p in dump.personas.iter().filter(|p| p.name.ends_with(&format!("-{brain}"))) {
            for (flaw, n) in &p.drafts_replaced {
                *replaced.entry(flaw.clone()).or_default() += n;
            }
        }
        f["drafts_replaced"] = json!(replaced);
        out.insert(brain.into(), f);
    }
    if details {
        // The model's drafts that the draft check replaced by the grounded reply, as written.
        for (at, name, event) in &asked_as {
            let storage = fleet.storage.clone();
            let persona = name.clone();
            let plans =
                tokio::task::spawn_blocking(move || storage.recent_plans(&persona, 1000)).await?.map_err(fail)?;
            if let Some(c) = plans.iter().find(|p| &p.event_id == event).and_then(|p| p.draft_check.as_ref()) {
                shown[*at]["replaced_draft"] = json!({ "flaw": c.flaw, "draft": c.draft });
            }
        }
    }
    fleet.shutdown(Duration::from_secs(10)).await;
    let mut v = json!({
        "bench": "replies",
        "source": source,
        "index_s": round(index_s, 1),
        "by_brain": Value::Object(out),
    });
    if details {
        v["replies"] = Value::Array(shown);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_prompts_parse_and_cover_the_four_kinds() {
        let p = parse_prompts(PROMPTS).unwrap();
        assert!(p.len() >= 40);
        for kind in ["conversation", "summary", "code", "general"] {
            assert!(p.iter().filter(|x| x.kind == kind).count() >= 8, "{kind}");
        }
        assert!(p.iter().filter(|x| x.kind == "code").all(|x| !x.answers.is_empty()));
        assert!(
            p.iter().filter(|x| matches!(x.kind.as_str(), "conversation" | "summary")).all(|x| !x.facts.is_empty())
        );
    }

    #[test]
    fn echoes_and_loops_are_read_as_a_person_would() {
        let q = "The deploy to staging failed with a timeout on the database migration. Any idea what to check first?";
        assert!(echoes(&format!("@alice {q}"), q));
        assert!(echoes(
            "@alice bob: @reviewer can you look at the retry logic",
            "@reviewer can you look at the retry logic?"
        ));
        assert!(!echoes("@alice bob added a statement_timeout of 30s to the migration runner", q));
        let asked = "when is the design review for the search service?";
        let quoted = "@dana \"The design review for the search service is on Monday at 10:00 in room Orion\" (dave)";
        assert!(!echoes(quoted, asked), "an answer quoting a line with the question's words");
        assert!(loops("I'm glad to hear you're on the team. I'm glad to hear you're on the team."));
        assert!(!loops("The lock is on the orders table. Batching fixed it."));
    }
}
