//! Self-directed study: a persona that notices a gap in what it knows studies the topic in
//! idle time.
//!
//! A gap is noted when the persona could not answer well: its knowledge search found nothing
//! relevant, its plan failed, or its reply says it does not know. The topic (the question's
//! content words) waits in the [`StudyBook`]; when the persona is idle a session runs as a
//! chain of `Background` tasks, one stage each, so interactive work goes first between any two
//! of them and every model call is reserved against the budgets:
//!
//! 1. [`Stage::Search`]: the index is searched for the topic; its relevant passages (up to
//!    [`PASSAGES`]) are what is studied.
//! 2. [`Stage::Ask`]: a question is asked of each passage (by the model, else by rules).
//! 3. [`Stage::Answer`]: the question is answered with retrieval: the index is searched for the
//!    question and the answer is written from what it finds, citing it.
//! 4. The answer is graded against the passage the question came from ([`grade`]).
//!
//! The finished session is kept in storage with a learning (`study: TOPIC`, one success per
//! passed answer) and a knowledge entry; the passed question/answer pairs are appended, with
//! their sources, to `<data>/training/<persona>.jsonl` as chat-format fine-tuning data
//! ([`training_record`]).

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

use mindfleet_core::dump::StudyDump;
use mindfleet_core::knowledge::{IndexMsg, RagRequest, SearchRequest, Source};
use mindfleet_core::llm::{ChatMessage, GenerateRequest, LlmFailure, LlmMsg};
use mindfleet_core::record::{Knowledge, StudyAnswer, StudyGap, StudySession};
use mindfleet_core::sched::TaskId;
use ractor::{ActorRef, call_t};
use serde_json::json;

pub use mindfleet_cognition::study::{content_words, says_unsure, topic_of};

/// What one stage of a study session produced.
#[derive(Debug)]
pub enum StudyStep {
    /// The search for the topic: the passages to study.
    Found(Result<Vec<Source>, String>),
    /// A question asked of the next passage (by the model, else by the rules).
    Asked { question: String, tokens: u32 },
    /// The question answered with retrieval, and graded.
    Answered { answer: StudyAnswer, tokens: u32 },
}

/// Most passages one session studies (one question each).
pub const PASSAGES: usize = 3;
/// Tokens a question or an answer reserves from the budgets: its prompt and its answer.
pub const STAGE_TOKENS_RESERVED: u32 = 640;
/// Finished sessions the dump shows.
pub const RECENT_KEPT: usize = 5;
/// Most gaps waiting; the oldest goes first when more come.
const GAPS_KEPT: usize = 8;
/// A topic studied this recently is not studied again on its own (a person can still ask).
const RESTUDY_AFTER_US: i64 = 3_600_000_000;
/// Longest a study search waits for the index.
const SEARCH_CALL_MS: u64 = 20_000;
/// Most characters of a passage a prompt carries.
const PASSAGE_CHARS: usize = 1_200;
const QUESTION_TOKENS: usize = 48;
const ANSWER_TOKENS: usize = 96;

/// Where a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Search,
    /// Asking a question of passage `i`.
    Ask(usize),
    /// Answering the question of passage `i`.
    Answer(usize),
}

impl Stage {
    /// Whether the stage asks the model (and so reserves tokens).
    pub fn uses_model(self) -> bool {
        !matches!(self, Stage::Search)
    }
}

/// A session under way.
#[derive(Debug, Clone)]
pub struct Run {
    pub session: StudySession,
    pub passages: Vec<Source>,
    /// The question asked of passage `i`, once asked.
    pub questions: Vec<String>,
    pub stage: Stage,
    /// The scheduler task of the stage, while it is asked for or running.
    pub task: Option<TaskId>,
}

impl Run {
    pub fn new(gap: &StudyGap, now_us: i64) -> Run {
        Run {
            session: StudySession {
                topic: gap.topic.clone(),
                why: gap.why.clone(),
                started_us: now_us,
                finished_us: 0,
                answers: Vec::new(),
                score: 0.0,
                outcome: String::new(),
                tokens: 0,
            },
            passages: Vec::new(),
            questions: Vec::new(),
            stage: Stage::Search,
            task: None,
        }
    }

    /// Takes what a stage produced; `true` when the session is over (its outcome set).
    pub fn apply(&mut self, done: StudyStep) -> bool {
        self.task = None;
        match done {
            StudyStep::Found(Ok(passages)) if passages.is_empty() => {
                return self.end("nothing in the index about it");
            }
            StudyStep::Found(Ok(passages)) => {
                self.passages = passages.into_iter().take(PASSAGES).collect();
                self.stage = Stage::Ask(0);
            }
            StudyStep::Found(Err(e)) => return self.end(&format!("the index did not answer: {e}")),
            StudyStep::Asked { question, tokens } => {
                self.session.tokens += tokens;
                self.questions.push(question);
                self.stage = Stage::Answer(self.questions.len() - 1);
            }
            StudyStep::Answered { answer, tokens } => {
                self.session.tokens += tokens;
                self.session.answers.push(answer);
                let next = self.session.answers.len();
                if next >= self.passages.len() {
                    return self.end("studied");
                }
                self.stage = Stage::Ask(next);
            }
        }
        false
    }

    /// Ends the session with `outcome` (also early: why it stopped); `true`.
    pub fn end(&mut self, outcome: &str) -> bool {
        self.session.outcome = outcome.to_string();
        let n = self.session.answers.len();
        self.session.score =
            if n == 0 { 0.0 } else { self.session.answers.iter().map(|a| a.grade).sum::<f64>() / n as f64 };
        true
    }
}

/// The gaps a persona noted and the session it runs.
#[derive(Debug, Default)]
pub struct StudyBook {
    pub gaps: VecDeque<StudyGap>,
    /// When each topic was last studied.
    studied: HashMap<String, i64>,
    pub run: Option<Run>,
    /// The stage under way, off the persona's loop (aborted when its slot is asked back).
    pub stage: Option<tokio::task::JoinHandle<()>>,
    /// Sessions finished since the start.
    pub sessions: u64,
    /// The newest finished sessions, newest first.
    pub recent: VecDeque<StudySession>,
}

impl StudyBook {
    /// Notes a gap on `topic`; `false` when there is nothing to study (no topic, or studied
    /// lately and not asked for).
    pub fn note(&mut self, topic: &str, why: &str, now_us: i64, asked: bool) -> bool {
        if topic.is_empty() {
            return false;
        }
        if !asked && self.studied.get(topic).is_some_and(|at| now_us - at < RESTUDY_AFTER_US) {
            return false;
        }
        if self.run.as_ref().is_some_and(|r| r.session.topic == topic) {
            return true;
        }
        if let Some(i) = self.gaps.iter().position(|g| g.topic == topic) {
            let mut g = self.gaps.remove(i).expect("found above");
            g.mentions += 1;
            if asked {
                g.why = why.to_string();
                self.gaps.push_front(g);
            } else {
                self.gaps.push_back(g);
            }
            return true;
        }
        let g = StudyGap { topic: topic.to_string(), why: why.to_string(), noted_us: now_us, mentions: 1 };
        if asked {
            self.gaps.push_front(g);
        } else {
            self.gaps.push_back(g);
        }
        if self.gaps.len() > GAPS_KEPT {
            self.gaps.pop_back();
        }
        true
    }

    /// Starts the next session when none runs and a gap waits.
    pub fn start(&mut self, now_us: i64) -> Option<&mut Run> {
        if self.run.is_none() {
            let gap = self.gaps.pop_front()?;
            self.run = Some(Run::new(&gap, now_us));
        }
        self.run.as_mut()
    }

    /// The finished session, taken out; the topic counts as studied.
    pub fn finish(&mut self, now_us: i64) -> Option<StudySession> {
        let mut run = self.run.take()?;
        run.session.finished_us = now_us;
        self.studied.insert(run.session.topic.clone(), now_us);
        self.sessions += 1;
        self.recent.push_front(run.session.clone());
        self.recent.truncate(RECENT_KEPT);
        Some(run.session)
    }

    pub fn dump(&self) -> StudyDump {
        let running = self.run.as_ref().map(|r| {
            let n = r.passages.len();
            let stage = match r.stage {
                Stage::Search => "search".to_string(),
                Stage::Ask(i) => format!("ask {}/{n}", i + 1),
                Stage::Answer(i) => format!("answer {}/{n}", i + 1),
            };
            (r.session.topic.clone(), stage)
        });
        StudyDump {
            gaps: self.gaps.iter().cloned().collect(),
            running,
            sessions: self.sessions,
            recent: self.recent.iter().cloned().collect(),
        }
    }
}

/// What a stage needs of the fleet.
#[derive(Clone)]
pub struct Services {
    pub index: ActorRef<IndexMsg>,
    pub llm: Option<ActorRef<LlmMsg>>,
    pub persona: String,
}

/// Runs one stage of `run` (a copy: the persona keeps the original).
pub async fn run_stage(run: Run, svc: Services) -> StudyStep {
    match run.stage {
        Stage::Search => StudyStep::Found(search(&svc.index, &run.session.topic).await),
        Stage::Ask(i) => {
            let passage = &run.passages[i];
            let asked = match &svc.llm {
                Some(llm) => {
                    crate::llm::generate(llm, &svc.persona, "study-ask", question_request(&run.session.topic, passage))
                        .await
                }
                None => Err(LlmFailure::Failed("no LLM in this fleet".into())),
            };
            // The rules ask when the model cannot, or writes no question.
            let (question, tokens) = match asked {
                Ok((text, tokens)) => (parse_question(&text), tokens),
                Err(_) => (None, 0),
            };
            let question = question.unwrap_or_else(|| rules_question(&run.session.topic, passage));
            StudyStep::Asked { question, tokens }
        }
        Stage::Answer(i) => {
            let question = run.questions[i].clone();
            let source = &run.passages[i];
            let found = search(&svc.index, &question).await.unwrap_or_default();
            let context: Vec<&Source> = found.iter().take(2).collect();
            let cited: Vec<String> = context.iter().map(|s| s.cite.clone()).collect();
            let (text, by, tokens) = match (&svc.llm, context.is_empty()) {
                (Some(llm), false) => {
                    match crate::llm::generate(llm, &svc.persona, "study-answer", answer_request(&question, &context))
                        .await
                    {
                        Ok((text, tokens)) if !text.trim().is_empty() => (text.trim().to_string(), "model", tokens),
                        Ok((_, tokens)) => (rules_answer(&question, &context), "rules", tokens),
                        Err(_) => (rules_answer(&question, &context), "rules", 0),
                    }
                }
                _ => (rules_answer(&question, &context), "rules", 0),
            };
            let grade = grade(&text, source, &cited);
            let answer =
                StudyAnswer { question, answer: text, source: source.cite.clone(), cited, grade, by: by.into() };
            StudyStep::Answered { answer, tokens }
        }
    }
}

async fn search(index: &ActorRef<IndexMsg>, query: &str) -> Result<Vec<Source>, String> {
    let req = RagRequest::Search(SearchRequest::new(query, PASSAGES));
    match call_t!(index, IndexMsg::Request, SEARCH_CALL_MS, Box::new(req)) {
        Ok(Ok(v)) => Ok(Source::relevant_hits(&v)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("the index did not answer: {e}")),
    }
}

fn clip(text: &str) -> String {
    text.chars().take(PASSAGE_CHARS).collect()
}

/// The model is asked for one question that the passage answers.
pub fn question_request(topic: &str, passage: &Source) -> GenerateRequest {
    let system = "You write one quiz question that the given passage answers. Reply with the question only.";
    let user = format!("Topic: {topic}\nPassage ({}):\n{}\n\nQuestion:", passage.cite, clip(&passage.text));
    let mut req = GenerateRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)], QUESTION_TOKENS);
    req.stop = vec!["\n".into()];
    req
}

/// The question in the model's answer: its first line that asks something, tidied.
pub fn parse_question(text: &str) -> Option<String> {
    text.lines()
        .map(|l| l.trim().trim_start_matches(|c: char| c.is_ascii_digit() || matches!(c, '.' | ')' | '-' | '*' | ' ')))
        .map(|l| l.strip_prefix("Question:").unwrap_or(l).trim())
        .find(|l| l.ends_with('?') && content_words(l).len() >= 2)
        .map(str::to_string)
}

/// A question by rules, when the model gives none.
pub fn rules_question(topic: &str, passage: &Source) -> String {
    match &passage.symbol {
        Some(s) => format!("What does {s} in {} do, as to {topic}?", passage.cite),
        None => format!("What does {} say about {topic}?", passage.cite),
    }
}

/// The model answers the question from what the search found, and is told to stay with it.
pub fn answer_request(question: &str, context: &[&Source]) -> GenerateRequest {
    let system = "Answer the question in one or two sentences, using only the passages given.";
    let passages: Vec<String> = context.iter().map(|s| format!("[{}]\n{}", s.cite, clip(&s.text))).collect();
    let user = format!("{}\n\nQuestion: {question}", passages.join("\n\n"));
    GenerateRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)], ANSWER_TOKENS)
}

/// An answer by rules: the line of the context that shares most words with the question.
pub fn rules_answer(question: &str, context: &[&Source]) -> String {
    let asked = content_words(question);
    context
        .iter()
        .flat_map(|s| s.text.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .max_by_key(|l| content_words(l).iter().filter(|w| asked.contains(w)).count())
        .map_or_else(|| "The index has nothing on it.".to_string(), str::to_string)
}

/// The grade of an answer against the passage its question was asked of: half for finding
/// that passage again when searching for the question (retrieval works for it), half for the
/// share of the answer's content words the passage contains (the answer says what the source
/// says, not something else).
pub fn grade(answer: &str, source: &Source, cited: &[String]) -> f64 {
    let found = cited.iter().any(|c| overlaps(c, &source.cite));
    let words = content_words(answer);
    let support = if words.is_empty() {
        0.0
    } else {
        let passage = source.text.to_lowercase();
        words.iter().filter(|w| passage.contains(w.as_str())).count() as f64 / words.len() as f64
    };
    0.5 * f64::from(u8::from(found)) + 0.5 * support
}

/// Whether two citations (`path:start-end`) name the same file and overlapping lines.
fn overlaps(a: &str, b: &str) -> bool {
    fn parse(c: &str) -> Option<(&str, usize, usize)> {
        let (path, lines) = c.rsplit_once(':')?;
        let (s, e) = lines.split_once('-')?;
        Some((path, s.parse().ok()?, e.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((pa, sa, ea)), Some((pb, sb, eb))) => pa == pb && sa <= eb && sb <= ea,
        _ => a == b,
    }
}

/// One line of training data: the question and the graded answer as a chat, with the sources
/// (the `messages` layout that common fine-tuning tools read; `metadata` is extra).
pub fn training_record(persona: &str, role: &str, s: &StudySession, a: &StudyAnswer) -> serde_json::Value {
    let sources = if a.cited.is_empty() { a.source.clone() } else { a.cited.join(", ") };
    json!({
        "messages": [
            {"role": "system", "content": format!("You are {persona}, {role}. Answer from the project's sources and cite them.")},
            {"role": "user", "content": a.question},
            {"role": "assistant", "content": format!("{} (sources: {sources})", a.answer)},
        ],
        "metadata": {
            "persona": persona,
            "topic": s.topic,
            "source": a.source,
            "cited": a.cited,
            "grade": a.grade,
            "by": a.by,
            "session_started_us": s.started_us,
        }
    })
}

/// Where a persona's training data goes: `<data>/training/<persona>.jsonl`.
pub fn training_file(data_dir: &Path, persona: &str) -> PathBuf {
    data_dir.join("training").join(format!("{persona}.jsonl"))
}

/// Appends the passed answers of a session to the persona's training data, one JSON object per
/// line, synced; returns how many lines were written.
pub fn append_training(file: &Path, persona: &str, role: &str, s: &StudySession) -> std::io::Result<usize> {
    let lines: Vec<String> =
        s.answers.iter().filter(|a| a.passed()).map(|a| training_record(persona, role, s, a).to_string()).collect();
    if lines.is_empty() {
        return Ok(0);
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(file)?;
    f.write_all((lines.join("\n") + "\n").as_bytes())?;
    f.sync_data()?;
    Ok(lines.len())
}

/// The knowledge entry a session leaves: what the passed answers say, with their sources.
pub fn knowledge_of(s: &StudySession) -> Option<Knowledge> {
    let passed: Vec<&StudyAnswer> = s.answers.iter().filter(|a| a.passed()).collect();
    if passed.is_empty() {
        return None;
    }
    let summary = passed.iter().map(|a| format!("{} {}", a.question, a.answer)).collect::<Vec<_>>().join(" | ");
    let mut sources: Vec<String> = passed.iter().map(|a| a.source.clone()).collect();
    sources.dedup();
    Some(Knowledge { domain: "study".into(), topic: s.topic.clone(), summary, sources, at_us: s.finished_us })
}

pub mod training;

#[cfg(test)]
mod tests;
