//! `mindfleet bench memory-eval --dir DIR`: conversation memory on long conversations in the
//! LoCoMo format (hundreds of turns over months, questions annotated with the turns that answer
//! them), by the protocol of the dev set's README (issue 26):
//!
//! - one dormant persona per conversation, in a room of its own; every turn a chat event in that
//!   room, `from` the speaker lower-cased with spaces as `-`, `ts` the session's date and time
//!   plus 30 s per turn, the text with ` [shares a photo: CAPTION]` when the turn has one;
//! - once every message is in the persona's conversation memory (the dump's
//!   `conversation.stored`) and consolidated (`conversation.observations_pending` 0, which takes
//!   the `observe_after_secs` of quiet after the last turn), each answerable question
//!   (categories 1-4 with evidence) asked as
//!   `GET /ai/recall?persona=P&room=R&limit=10&text=QUESTION`, the path `ai recall` takes;
//! - scored as the dev set's `score.py` does: turn-level recall@5, recall@10 and hit@5, overall
//!   and per category; beside them, who consolidated (`observed_by`, as `ai cost` says) and its
//!   model calls (`observe_cost`, the purpose `observe` of `ai cost`).
//!
//! With `--baseline`, BM25 (rank_bm25's `BM25Okapi` with its defaults), dense (the fleet's
//! MiniLM, cosine) and their reciprocal-rank fusion (k = 60, the first 50 of each) over the same
//! turns, text `Speaker: turn`, in the same run, and the ratios of ours to each.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mindfleet_core::embedding::cosine;
use mindfleet_core::embedding::{EmbedMsg, LongText, Urgency};
use mindfleet_core::event::EventInput;
use serde_json::{Value, json};

use super::{percentile, round};
use mindfleet::client::Client;
use mindfleet::fleet::Fleet;

/// Largest conversation file read, in bytes (the dev set's largest is under 300 KB).
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Seconds between the turns of a session, as the protocol says.
const TURN_SPACING_US: i64 = 30_000_000;
/// What each question recalls, as the protocol says (`--limit 10`).
const LIMIT: usize = 10;
/// Longest the fleet may take to put every message in conversation memory.
const EMBED_DEADLINE: Duration = Duration::from_secs(1800);
/// The names of the answerable categories (the dev set's README).
const CATEGORIES: [(u64, &str); 4] = [(1, "multi-hop"), (2, "temporal"), (3, "open-domain"), (4, "single-hop")];
/// The category that is left out (adversarial: no answer in the conversation).
const UNANSWERABLE: u64 = 5;
/// Reciprocal-rank fusion's constant.
const RRF_K: f64 = 60.0;
/// How many of each ranking the hybrid baseline fuses: the depth that reproduces the dev set's
/// README (recall@10 0.556 against its 0.557; fusing the whole rankings gives 0.581).
const RRF_DEPTH: usize = 50;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The directory of LoCoMo-format files (`*.json`).
    pub dir: PathBuf,
    /// Also the BM25, dense and hybrid baselines.
    pub baseline: bool,
    /// Where to write ours per question, one `{"id", "ranked"}` line each (`score.py`'s input).
    pub results: Option<PathBuf>,
    /// `[conversation]` keys for the fleet (`context_messages = 0`), as a fleet file has them.
    pub conversation: Vec<String>,
}

/// A conversation of the set.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// From the file's name: `conv-26.json` is `26`, as `score.py` names it.
    pub id: String,
    /// In order: sessions by number, turns as given.
    pub turns: Vec<Turn>,
    /// Its answerable questions (see [`Question`]).
    pub questions: Vec<Question>,
}

/// A turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// `<conversation>-D<session>-<turn>`, as `score.py` names turns (`26-D3-1`): also its event id.
    pub key: String,
    /// As given (`Caroline`).
    pub speaker: String,
    /// The turn, with ` [shares a photo: CAPTION]` when it has one.
    pub text: String,
    /// The session's date and time plus 30 s per turn before it in the session, µs since the epoch.
    pub at_us: i64,
}

impl Turn {
    /// The event's `from`: the speaker lower-cased, spaces as `-`.
    pub fn from(&self) -> String {
        self.speaker.to_lowercase().replace(' ', "-")
    }

    /// What the baselines index: `Speaker: turn`.
    pub fn document(&self) -> String {
        format!("{}: {}", self.speaker, self.text)
    }
}

/// An answerable question: its category is not 5 and it has evidence of the form `D3:1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// `<conversation>-q<index in qa>`.
    pub id: String,
    pub text: String,
    pub category: u64,
    /// The keys of the turns that answer it.
    pub evidence: BTreeSet<String>,
}

/// Why the set could not be read; names the file and, where there is one, the key.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct SetError {
    pub file: String,
    pub message: String,
}

/// Reads every `*.json` of `dir`, by name.
pub fn read_set(dir: &Path) -> Result<Vec<Conversation>, SetError> {
    let bad = |file: &Path, message: String| SetError { file: file.display().to_string(), message };
    let entries = std::fs::read_dir(dir).map_err(|e| bad(dir, e.to_string()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| bad(dir, e.to_string()))?.path();
        if path.extension().is_some_and(|e| e == "json") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(bad(dir, "no conversation files (*.json)".into()));
    }
    let mut set: Vec<Conversation> = Vec::with_capacity(files.len());
    let mut names: HashMap<String, PathBuf> = HashMap::new();
    for file in files {
        let size = std::fs::metadata(&file).map_err(|e| bad(&file, e.to_string()))?.len();
        if size > MAX_FILE_BYTES {
            return Err(bad(&file, format!("{size} bytes, more than {MAX_FILE_BYTES}")));
        }
        let text = std::fs::read_to_string(&file).map_err(|e| bad(&file, e.to_string()))?;
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let id = stem.strip_prefix("conv-").unwrap_or(stem);
        let c = parse_conversation(id, &text).map_err(|m| bad(&file, m))?;
        if let Some(first) = names.insert(persona_name(&c.id), file.clone()) {
            return Err(bad(&file, format!("names the same conversation as {}", first.display())));
        }
        set.push(c);
    }
    Ok(set)
}

/// One conversation from its file's text; `id` names it (and its turns and questions).
pub fn parse_conversation(id: &str, text: &str) -> Result<Conversation, String> {
    if !mindfleet_core::config::valid_name(&persona_name(id)) {
        return Err(format!("{id:?} does not make a persona name (a-z, 0-9, '-' or '_')"));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    // The flat layout of the dev set, or the original's `conversation` object beside `qa`.
    let conv = v.get("conversation").unwrap_or(&v);
    let obj = conv.as_object().ok_or("not a JSON object")?;
    let mut sessions: Vec<(u64, &Vec<Value>)> = Vec::new();
    for (k, turns) in obj {
        let Some(n) = k.strip_prefix("session_").and_then(|n| n.parse().ok()) else { continue };
        let turns = turns.as_array().ok_or_else(|| format!("`{k}` is not a list of turns"))?;
        sessions.push((n, turns));
    }
    if sessions.is_empty() {
        return Err("no sessions (`session_1`, ...)".into());
    }
    sessions.sort_by_key(|(n, _)| *n);
    let mut turns = Vec::new();
    let mut keys = BTreeSet::new();
    for (n, list) in sessions {
        let when_key = format!("session_{n}_date_time");
        let when = obj.get(&when_key).and_then(Value::as_str).ok_or_else(|| format!("no `{when_key}`"))?;
        let start = parse_session_time(when).map_err(|e| format!("`{when_key}`: {e}"))?;
        for (i, t) in list.iter().enumerate() {
            let field = |f: &str| {
                t.get(f).and_then(Value::as_str).ok_or_else(|| format!("`session_{n}`[{i}]: no `{f}` (a string)"))
            };
            let dia = field("dia_id")?.trim();
            let key =
                turn_key(id, dia).ok_or_else(|| format!("`session_{n}`[{i}].dia_id: {dia:?} is not like D3:1"))?;
            if !keys.insert(key.clone()) {
                return Err(format!("`session_{n}`[{i}].dia_id: {dia:?} is given twice"));
            }
            let speaker = field("speaker")?.to_string();
            if speaker.trim().is_empty() {
                return Err(format!("`session_{n}`[{i}].speaker: empty"));
            }
            let mut text = field("text")?.to_string();
            if let Some(caption) = t.get("blip_caption").and_then(Value::as_str) {
                text.push_str(&format!(" [shares a photo: {caption}]"));
            }
            turns.push(Turn { key, speaker, text, at_us: start + i as i64 * TURN_SPACING_US });
        }
    }
    let qa = v.get("qa").and_then(Value::as_array).ok_or("no `qa` (a list of questions)")?;
    let mut questions = Vec::new();
    for (i, q) in qa.iter().enumerate() {
        let category = q.get("category").and_then(Value::as_u64).ok_or_else(|| format!("`qa`[{i}]: no `category`"))?;
        let evidence: BTreeSet<String> = q
            .get("evidence")
            .and_then(Value::as_array)
            .map(|e| e.iter().filter_map(Value::as_str).filter_map(|e| turn_key(id, e.trim())).collect())
            .unwrap_or_default();
        if category == UNANSWERABLE || evidence.is_empty() {
            continue;
        }
        let text = q.get("question").and_then(Value::as_str).unwrap_or_default();
        if text.trim().is_empty() {
            return Err(format!("`qa`[{i}]: no `question` (a string, not empty)"));
        }
        questions.push(Question { id: format!("{id}-q{i}"), text: text.to_string(), category, evidence });
    }
    Ok(Conversation { id: id.to_string(), turns, questions })
}

/// `26-D3-1` for turn `D3:1` of conversation `26`; none unless `dia` is `D<digits>:<digits>`.
fn turn_key(conversation: &str, dia: &str) -> Option<String> {
    let (session, turn) = dia.strip_prefix('D')?.split_once(':')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(session) && digits(turn)).then(|| format!("{conversation}-D{session}-{turn}"))
}

/// The persona (and room) of conversation `id`.
pub fn persona_name(id: &str) -> String {
    format!("conv-{}", id.to_lowercase())
}

/// `1:56 pm on 8 May, 2023` (taken as UTC), in µs since the epoch.
pub fn parse_session_time(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?} is not a time like \"1:56 pm on 8 May, 2023\"");
    let (time, date) = s.trim().split_once(" on ").ok_or_else(bad)?;
    let (clock, half) = time.trim().split_once(' ').ok_or_else(bad)?;
    let (h, m) = clock.split_once(':').ok_or_else(bad)?;
    let (h, m): (i8, i8) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if !(1..=12).contains(&h) {
        return Err(bad());
    }
    let hour = match half.to_ascii_lowercase().as_str() {
        "am" => h % 12,
        "pm" => h % 12 + 12,
        _ => return Err(bad()),
    };
    let mut parts = date.split([' ', ',']).filter(|p| !p.is_empty());
    let (Some(day), Some(month), Some(year), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let month = MONTHS.iter().position(|n| n.eq_ignore_ascii_case(month)).ok_or_else(bad)? as i8 + 1;
    let (day, year): (i8, i16) = (day.parse().map_err(|_| bad())?, year.parse().map_err(|_| bad())?);
    let at = jiff::civil::DateTime::new(year, month, day, hour, m, 0, 0).map_err(|e| format!("{}: {e}", bad()))?;
    let ts = at.to_zoned(jiff::tz::TimeZone::UTC).map_err(|e| e.to_string())?.timestamp();
    Ok(ts.as_microsecond())
}

/// Turn-level figures of a set of questions, as `score.py` computes them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Figures {
    pub n: usize,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
    pub hit_at_5: f64,
}

/// Overall and per category.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scores {
    pub all: Figures,
    pub by_category: BTreeMap<u64, Figures>,
}

/// Scores `ranked` (question id to the turn keys recalled, best first) on `questions`, as
/// `score.py` does: a question with no answer counts as nothing found.
pub fn score<'a>(questions: impl IntoIterator<Item = &'a Question>, ranked: &HashMap<String, Vec<String>>) -> Scores {
    let mut sums: BTreeMap<Option<u64>, (usize, f64, f64, usize)> = BTreeMap::new();
    for q in questions {
        let got = ranked.get(&q.id).map(Vec::as_slice).unwrap_or_default();
        let found = |k: usize| {
            let top: BTreeSet<&String> = got.iter().take(k).collect();
            q.evidence.iter().filter(|e| top.contains(e)).count()
        };
        let (f5, f10, ev) = (found(5), found(10), q.evidence.len() as f64);
        for key in [None, Some(q.category)] {
            let s = sums.entry(key).or_default();
            s.0 += 1;
            s.1 += f5 as f64 / ev;
            s.2 += f10 as f64 / ev;
            s.3 += usize::from(f5 > 0);
        }
    }
    let figures = |(n, r5, r10, h5): (usize, f64, f64, usize)| {
        let d = n.max(1) as f64;
        Figures { n, recall_at_5: r5 / d, recall_at_10: r10 / d, hit_at_5: h5 as f64 / d }
    };
    let mut scores = Scores::default();
    for (key, s) in sums {
        match key {
            None => scores.all = figures(s),
            Some(c) => {
                scores.by_category.insert(c, figures(s));
            }
        }
    }
    scores
}

fn figures_json(f: &Figures) -> Value {
    json!({
        "n": f.n,
        "recall_at_5": round(f.recall_at_5, 3),
        "recall_at_10": round(f.recall_at_10, 3),
        "hit_at_5": round(f.hit_at_5, 3),
    })
}

/// A method's figures: overall, per category (keyed by its number, with its name), and its
/// query latency.
fn method_json(s: &Scores, latencies_ms: &mut [f64]) -> Value {
    let mut v = figures_json(&s.all);
    let by: serde_json::Map<String, Value> = s
        .by_category
        .iter()
        .map(|(c, f)| {
            let mut v = figures_json(f);
            let name = CATEGORIES.iter().find(|(n, _)| n == c).map_or("other", |(_, name)| name);
            v["name"] = name.into();
            (c.to_string(), v)
        })
        .collect();
    v["by_category"] = Value::Object(by);
    v["query_p50_ms"] = round(percentile(latencies_ms, 0.5), 2).into();
    v["query_p99_ms"] = round(percentile(latencies_ms, 0.99), 2).into();
    v
}

/// Ours over theirs, for each overall figure.
fn ratios(ours: &Figures, theirs: &Figures) -> Value {
    let r = |a: f64, b: f64| if b > 0.0 { round(a / b, 3) } else { f64::NAN };
    json!({
        "recall_at_5": r(ours.recall_at_5, theirs.recall_at_5),
        "recall_at_10": r(ours.recall_at_10, theirs.recall_at_10),
        "hit_at_5": r(ours.hit_at_5, theirs.hit_at_5),
    })
}

/// `score.py`'s input: one `{"id", "ranked"}` line per question.
pub fn results_lines(questions: &[&Question], ranked: &HashMap<String, Vec<String>>) -> String {
    let mut out = String::new();
    for q in questions {
        let r = ranked.get(&q.id).cloned().unwrap_or_default();
        out.push_str(&json!({ "id": q.id, "ranked": r }).to_string());
        out.push('\n');
    }
    out
}

/// Runs the protocol on the set in `opts.dir` with a fleet of this process (conversation memory
/// on, the embedding model fetched by the caller).
pub async fn memory_eval(opts: &Options) -> anyhow::Result<Value> {
    let set = read_set(&opts.dir)?;
    let questions: Vec<&Question> = set.iter().flat_map(|c| &c.questions).collect();
    let turns: usize = set.iter().map(|c| c.turns.len()).sum();
    let dir = tempfile::tempdir()?;
    let mut cfg = mindfleet::defaults::synthetic_fleet(set.len(), dir.path().to_path_buf());
    cfg.conversation = conversation_config(&opts.conversation)?;
    cfg.conversation.enabled = true;
    for (p, c) in cfg.personas.iter_mut().zip(&set) {
        p.name = persona_name(&c.id);
        p.rooms = vec![persona_name(&c.id)];
        p.dormant = true;
    }
    let fleet = Fleet::start(cfg).await?;
    let r = run(&fleet, &set, &questions, opts).await;
    fleet.shutdown(Duration::from_secs(5)).await;
    let (mut v, ranked) = r?;
    if let Some(path) = &opts.results {
        std::fs::write(path, results_lines(&questions, &ranked))
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    v["conversations"] = set.len().into();
    v["turns"] = turns.into();
    v["questions"] = questions.len().into();
    Ok(v)
}

/// `[conversation]` with `keys` (each `key = value`, as in a fleet file), checked as a fleet
/// file's are.
fn conversation_config(keys: &[String]) -> anyhow::Result<mindfleet_core::config::ConversationConfig> {
    let toml = format!("[[persona]]\nname = \"p\"\nrole = \"r\"\n\n[conversation]\n{}\n", keys.join("\n"));
    let cfg = mindfleet_core::config::FleetConfig::from_toml(Path::new("--conversation"), &toml)?;
    Ok(cfg.conversation)
}

/// Ingests, waits for memory, asks; the figures and ours per question.
async fn run(
    fleet: &Fleet,
    set: &[Conversation],
    questions: &[&Question],
    opts: &Options,
) -> anyhow::Result<(Value, HashMap<String, Vec<String>>)> {
    // Ingest: the conversations side by side, each turn after the one before.
    let started = Instant::now();
    let ingest = set.iter().map(|c| async move {
        let room = persona_name(&c.id);
        for t in &c.turns {
            let e = EventInput {
                id: Some(t.key.clone()),
                ts: Some(jiff::Timestamp::from_microsecond(t.at_us)?.to_string()),
                domain: "chat".into(),
                room: room.clone(),
                from: t.from(),
                text: t.text.clone(),
                ..Default::default()
            };
            fleet.inject(e).await.map_err(|e| anyhow::anyhow!("turn {}: {e}", t.key))?;
        }
        anyhow::Ok(())
    });
    futures::future::try_join_all(ingest).await?;
    let ingest_s = started.elapsed().as_secs_f64();
    // Every message in conversation memory (embedded and stored in the index), then
    // consolidated (once the conversation is quiet for `observe_after_secs`).
    let expected: HashMap<String, u64> = set.iter().map(|c| (persona_name(&c.id), c.turns.len() as u64)).collect();
    let mut embed_s = None;
    let observations = loop {
        let d = fleet.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut behind = Vec::new();
        let (mut unobserved, mut observations) = (0, 0);
        for p in &d.personas {
            let c = p.conversation.clone().unwrap_or_default();
            let want = expected.get(&p.name).copied().unwrap_or(0);
            if c.stored < want {
                behind.push(format!("{} has {} of {want}", p.name, c.stored));
            }
            (unobserved, observations) = (unobserved + c.observations_pending, observations + c.observations);
        }
        if behind.is_empty() {
            embed_s.get_or_insert(started.elapsed().as_secs_f64());
            if unobserved == 0 {
                break observations;
            }
        }
        anyhow::ensure!(
            started.elapsed() < EMBED_DEADLINE,
            "conversation memory not complete after {} s: {} ({unobserved} messages not consolidated)",
            EMBED_DEADLINE.as_secs(),
            behind.join(", ")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let embed_s = embed_s.unwrap_or_default();
    let observe_s = started.elapsed().as_secs_f64();
    // Ours: each question as `ai recall`, through the admin API.
    let api = Client::new(&fleet.addr.to_string(), None);
    // What consolidation cost: its model calls, as `ai cost` shows them.
    let cost = api.ai("cost", &[]).await.map_err(|e| anyhow::anyhow!("ai cost: {e}"))?;
    let observe_cost =
        cost["by_purpose"].as_array().and_then(|rows| rows.iter().find(|r| r["key"] == "observe")).map_or_else(
            || json!({ "inferences": 0, "tokens": 0 }),
            |r| json!({ "inferences": r["inferences"], "tokens": r["tokens"] }),
        );
    let mut ours: HashMap<String, Vec<String>> = HashMap::new();
    let (mut took, mut by_words) = (Vec::with_capacity(questions.len()), 0usize);
    for c in set {
        let persona = persona_name(&c.id);
        for q in &c.questions {
            let params = [
                ("persona", persona.clone()),
                ("room", persona.clone()),
                ("limit", LIMIT.to_string()),
                ("text", q.text.clone()),
            ];
            let t = Instant::now();
            let v = api.ai("recall", &params).await.map_err(|e| anyhow::anyhow!("recall for {}: {e}", q.id))?;
            took.push(t.elapsed().as_secs_f64() * 1e3);
            by_words += usize::from(!v["recall"]["degraded"].is_null());
            let items = v["recall"]["items"].as_array().cloned().unwrap_or_default();
            let ranked = items.iter().filter_map(|i| i["event_id"].as_str().map(str::to_string)).collect();
            ours.insert(q.id.clone(), ranked);
        }
    }
    let ours_scores = score(questions.iter().copied(), &ours);
    let mut v = json!({
        "bench": "memory-eval",
        "model": mindfleet_models::fetch::MINILM.name,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "limit": LIMIT,
        "ingest_s": round(ingest_s, 2),
        "embed_s": round(embed_s, 2),
        "embedded_per_s": round(set.iter().map(|c| c.turns.len()).sum::<usize>() as f64 / embed_s, 1),
        "observed_s": round(observe_s, 2),
        "observations": observations,
        "observed_by": cost["observations"],
        "observe_cost": observe_cost,
        "observe_after_s": fleet.config.conversation.observe_after.as_secs_f64(),
        "conversation": opts.conversation,
        "ours": method_json(&ours_scores, &mut took),
    });
    v["ours"]["recalls_by_words"] = by_words.into();
    if opts.baseline {
        let base = baselines(fleet, set).await?;
        let mut all = serde_json::Map::new();
        let mut rs = serde_json::Map::new();
        for (name, ranked, mut lat) in base {
            let s = score(questions.iter().copied(), &ranked);
            rs.insert(name.to_string(), ratios(&ours_scores.all, &s.all));
            all.insert(name.to_string(), method_json(&s, &mut lat));
        }
        v["baselines"] = Value::Object(all);
        v["ratios"] = Value::Object(rs);
    }
    Ok((v, ours))
}

/// A baseline's name, its ranking per question and its query latencies (ms).
type Baseline = (&'static str, HashMap<String, Vec<String>>, Vec<f64>);

/// BM25, dense and hybrid over each conversation's turns (`Speaker: turn`), ranking all of them.
async fn baselines(fleet: &Fleet, set: &[Conversation]) -> anyhow::Result<Vec<Baseline>> {
    let mut out: Vec<Baseline> = ["bm25", "dense", "hybrid"].map(|n| (n, HashMap::new(), Vec::new())).into();
    for c in set {
        let docs: Vec<String> = c.turns.iter().map(Turn::document).collect();
        let bm25 = Bm25::new(docs.iter().map(|d| tokens(d)).collect());
        let mut vectors = Vec::with_capacity(docs.len());
        for chunk in docs.chunks(32) {
            vectors.extend(embed(fleet, chunk.to_vec()).await?);
        }
        let keys = |order: &[usize]| order.iter().take(LIMIT).map(|&i| c.turns[i].key.clone()).collect::<Vec<_>>();
        for q in &c.questions {
            let t = Instant::now();
            let by_words = rank_by(&bm25.scores(&tokens(&q.text)));
            let words_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let query = embed(fleet, vec![q.text.clone()]).await?.pop().unwrap_or_default();
            let by_meaning = rank_by(&vectors.iter().map(|v| cosine(&query, v)).collect::<Vec<_>>());
            let meaning_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let fused = rrf(&[&by_words, &by_meaning], RRF_DEPTH);
            let fuse_ms = t.elapsed().as_secs_f64() * 1e3;
            for (i, (order, ms)) in
                [(by_words, words_ms), (by_meaning, meaning_ms), (fused, words_ms + meaning_ms + fuse_ms)]
                    .into_iter()
                    .enumerate()
            {
                out[i].1.insert(q.id.clone(), keys(&order));
                out[i].2.push(ms);
            }
        }
    }
    Ok(out)
}

/// The fleet's embeddings of `texts` (its MiniLM), in order.
async fn embed(fleet: &Fleet, texts: Vec<String>) -> anyhow::Result<Vec<Vec<f32>>> {
    let n = texts.len();
    let r = ractor::call_t!(
        fleet.embedding,
        |reply| EmbedMsg::Embed { texts, long: LongText::Truncate, urgency: Urgency::Normal, reply },
        120_000
    )
    .map_err(|e| anyhow::anyhow!("the embedding worker did not answer: {e}"))?
    .map_err(|e| anyhow::anyhow!("the dense baseline needs the embedding model: {e}"))?;
    anyhow::ensure!(r.len() == n, "the embedding worker answered {} of {n} texts", r.len());
    Ok(r.iter().map(|e| e.vector().to_vec()).collect())
}

/// Indices by score, best first; equal scores in their order.
fn rank_by(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order
}

/// Reciprocal-rank fusion of the first `depth` of each ranking (of the same items): an item
/// scores the sum of 1 / (k + rank), rank from 1; equal scores keep the items' order, and items
/// in no ranking's first `depth` come last.
fn rrf(rankings: &[&[usize]], depth: usize) -> Vec<usize> {
    let n = rankings.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut scores = vec![0.0; n];
    for ranking in rankings {
        for (rank, &i) in ranking.iter().take(depth).enumerate() {
            scores[i] += 1.0 / (RRF_K + rank as f64 + 1.0);
        }
    }
    rank_by(&scores)
}

/// Lower-cased alphanumeric tokens (`[a-z0-9]+` of the lower-cased text).
pub fn tokens(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// rank_bm25's `BM25Okapi` with its defaults (k1 = 1.5, b = 0.75, epsilon = 0.25): idf =
/// ln(N - n + 0.5) - ln(n + 0.5), a negative idf floored at epsilon times the mean idf of the
/// vocabulary; a query token counts as often as it occurs in the query.
pub struct Bm25 {
    docs: Vec<HashMap<String, u32>>,
    lengths: Vec<f64>,
    average: f64,
    idf: HashMap<String, f64>,
}

impl Bm25 {
    pub const K1: f64 = 1.5;
    pub const B: f64 = 0.75;
    pub const EPSILON: f64 = 0.25;

    pub fn new(corpus: Vec<Vec<String>>) -> Bm25 {
        let mut df: HashMap<String, u32> = HashMap::new();
        let mut docs = Vec::with_capacity(corpus.len());
        let mut lengths = Vec::with_capacity(corpus.len());
        for doc in corpus {
            lengths.push(doc.len() as f64);
            let mut tf: HashMap<String, u32> = HashMap::new();
            for t in doc {
                *tf.entry(t).or_default() += 1;
            }
            for t in tf.keys() {
                *df.entry(t.clone()).or_default() += 1;
            }
            docs.push(tf);
        }
        let n = docs.len() as f64;
        let average = lengths.iter().sum::<f64>() / n.max(1.0);
        let mut idf: HashMap<String, f64> =
            df.into_iter().map(|(t, f)| (t, (n - f64::from(f) + 0.5).ln() - (f64::from(f) + 0.5).ln())).collect();
        let mean = idf.values().sum::<f64>() / idf.len().max(1) as f64;
        for v in idf.values_mut() {
            if *v < 0.0 {
                *v = Self::EPSILON * mean;
            }
        }
        Bm25 { docs, lengths, average, idf }
    }

    /// Each document's score for `query`.
    pub fn scores(&self, query: &[String]) -> Vec<f64> {
        let mut out = vec![0.0; self.docs.len()];
        for t in query {
            let Some(idf) = self.idf.get(t) else { continue };
            for (i, doc) in self.docs.iter().enumerate() {
                let f = f64::from(doc.get(t).copied().unwrap_or(0));
                let norm = Self::K1 * (1.0 - Self::B + Self::B * self.lengths[i] / self.average);
                out[i] += idf * f * (Self::K1 + 1.0) / (f + norm);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
