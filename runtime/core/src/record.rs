//! The data a persona keeps and journals: self-state, working memory entries,
//! decisions, outbox entries. Stored with bincode (no `skip_serializing_if`), shown as JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::refs::RefMatch;

/// What the engagement gate (or the runtime on its behalf) decided about an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Engage,
    Ignore,
    Defer,
    /// Dropped by a full inbox (the lowest priority goes first).
    Shed,
    /// Dropped by the inbox as a repeat: same room+sender+text within 3 s. (A repeated
    /// event id is answered `duplicate` at injection and never delivered twice.)
    Duplicate,
    /// Refused at injection because the durable queue was full (HTTP 429).
    Skipped,
    /// Crashed its persona too often; kept in the dead letters.
    DeadLetter,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Engage => "engage",
            Verdict::Ignore => "ignore",
            Verdict::Defer => "defer",
            Verdict::Shed => "shed",
            Verdict::Duplicate => "duplicate",
            Verdict::Skipped => "skipped",
            Verdict::DeadLetter => "dead_letter",
        }
    }
}

/// One journaled decision with its reason and the numbers that led to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub event_id: String,
    pub verdict: Verdict,
    pub reason: String,
    /// Who decided: `fast_path/<rule>`, `inbox`, `admin`, `supervisor`.
    pub by: String,
    pub priority: f64,
    /// Named inputs of the decision (priority, threshold, load, ...).
    pub numbers: Vec<(String, f64)>,
    pub at_us: i64,
    /// The references the event and the results of its steps called for, each with why.
    #[serde(default)]
    pub references: Vec<RefMatch>,
    /// The room of the event decided on (`ai decisions --room`, a webhook's `rooms`).
    #[serde(default)]
    pub room: String,
}

/// A reply a persona posted into a room.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEntry {
    pub persona: String,
    pub room: String,
    pub in_reply_to: String,
    /// The id the reply carries as an event in the room.
    pub event_id: String,
    pub text: String,
    /// Which brain wrote it: `rules`, or `local` (the fleet's LLM, run here or behind an OpenAI-compatible endpoint).
    pub brain: String,
    pub at_us: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mood {
    #[default]
    Idle,
    Active,
    Tired,
    Overwhelmed,
}

impl Mood {
    pub fn as_str(self) -> &'static str {
        match self {
            Mood::Idle => "idle",
            Mood::Active => "active",
            Mood::Tired => "tired",
            Mood::Overwhelmed => "overwhelmed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Focus {
    /// What the persona is doing: `idle`, `responding`, ...
    pub activity: String,
    pub domain: String,
    pub objective: String,
    /// 0..=1.
    pub intensity: f64,
    pub since_us: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preoccupation {
    pub concern: String,
    pub priority: f64,
    pub domain: String,
    pub event_id: String,
    pub created_us: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thought {
    pub text: String,
    pub at_us: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentDecision {
    pub decision: String,
    pub reason: String,
    pub at_us: i64,
}

/// A persona's picture of itself. Every fraction is kept in 0..=1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfStateData {
    pub focus: Focus,
    pub preoccupations: Vec<Preoccupation>,
    pub recent_thoughts: Vec<Thought>,
    pub recent_decisions: Vec<RecentDecision>,
    pub cognitive_load: f64,
    pub available_capacity: f64,
    pub mood: Mood,
    pub energy: f64,
    pub dormant: bool,
    /// Activities completed since creation.
    pub activities: u64,
    pub updated_us: i64,
    /// Last time this persona posted, per room (for inbox priority).
    pub spoke_in: BTreeMap<String, i64>,
}

impl Default for SelfStateData {
    fn default() -> Self {
        SelfStateData {
            focus: Focus { activity: "idle".into(), ..Focus::default() },
            preoccupations: Vec::new(),
            recent_thoughts: Vec::new(),
            recent_decisions: Vec::new(),
            cognitive_load: 0.0,
            available_capacity: 1.0,
            mood: Mood::Idle,
            energy: 1.0,
            dormant: false,
            activities: 0,
            updated_us: 0,
            spoke_in: BTreeMap::new(),
        }
    }
}

impl SelfStateData {
    /// What a persona's decisions and the team's answers weigh of it.
    pub fn view(&self) -> SelfView {
        SelfView {
            focus: self.focus.clone(),
            preoccupations: self.preoccupations.clone(),
            cognitive_load: self.cognitive_load,
            available_capacity: self.available_capacity,
            mood: self.mood,
            dormant: self.dormant,
            spoke_in: self.spoke_in.clone(),
        }
    }
}

/// What a persona's decisions weigh of its self-state ([`SelfStateData::view`]): the snapshot
/// without its recent thoughts and decisions, energy and counts, which only people read. A
/// persona's lifecycle is given this, so it is all a recorded history keeps of a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfView {
    pub focus: Focus,
    pub preoccupations: Vec<Preoccupation>,
    pub cognitive_load: f64,
    pub available_capacity: f64,
    pub mood: Mood,
    pub dormant: bool,
    pub spoke_in: BTreeMap<String, i64>,
}

impl Default for SelfView {
    fn default() -> Self {
        SelfStateData::default().view()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Observation,
    Question,
    Decision,
    ResponseDraft,
    Reflection,
}

/// One thought in working memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WmEntry {
    pub id: u64,
    pub domain: String,
    pub kind: EntryKind,
    pub text: String,
    /// 0..=1.
    pub importance: f64,
    pub event_id: Option<String>,
    /// Relevance to the focus at the time it was stored, 0..=1.
    pub relevance: f64,
    pub created_us: i64,
    pub last_access_us: i64,
    pub access_count: u32,
    pub expires_us: i64,
}

/// Why a working-memory entry left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eviction {
    pub entry_id: u64,
    pub domain: String,
    pub text: String,
    /// `capacity` (lowest retention score) or `expired`.
    pub reason: String,
    pub retention: f64,
    pub at_us: i64,
}

/// An event that crashed its persona too often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub persona: String,
    pub event_id: String,
    pub crashes: u32,
    pub reason: String,
    pub at_us: i64,
}

/// An action a plan step can take (the action registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    RecallMemory,
    SearchKnowledge,
    DraftReply,
    PostReply,
    AskClarifyingQuestion,
    NotePreoccupation,
    StudyTopic,
    /// Selects the references the text calls for (authorising their paths) and reads the
    /// passages of them that bear on it.
    SelectReference,
    /// Calls a tool of a tool server (the step's [`ToolStep`] says which, with what).
    CallTool,
}

impl Action {
    pub const ALL: [Action; 9] = [
        Action::RecallMemory,
        Action::SearchKnowledge,
        Action::DraftReply,
        Action::PostReply,
        Action::AskClarifyingQuestion,
        Action::NotePreoccupation,
        Action::StudyTopic,
        Action::SelectReference,
        Action::CallTool,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::RecallMemory => "recall_memory",
            Action::SearchKnowledge => "search_knowledge",
            Action::DraftReply => "draft_reply",
            Action::PostReply => "post_reply",
            Action::AskClarifyingQuestion => "ask_clarifying_question",
            Action::NotePreoccupation => "note_preoccupation",
            Action::StudyTopic => "study_topic",
            Action::SelectReference => "select_reference",
            Action::CallTool => "call_tool",
        }
    }
}

/// How a failed step is classified; contingencies are keyed by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Timeout,
    RateLimit,
    MissingResource,
    AccessDenied,
    Unknown,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "timeout",
            ErrorClass::RateLimit => "rate_limit",
            ErrorClass::MissingResource => "missing_resource",
            ErrorClass::AccessDenied => "access_denied",
            ErrorClass::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Pending,
    Running,
    Done,
    Failed {
        class: ErrorClass,
        message: String,
    },
    /// Left out by an adjustment (CONTINUE past a failure, or an abort).
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub action: Action,
    pub state: StepState,
    /// Injected by a contingency rather than planned.
    pub contingency: bool,
    /// The call of a `call_tool` step, and what became of it. Since schema version 10 (older
    /// plans are migrated with none); JSON without it reads as none.
    #[serde(default)]
    pub call: Option<ToolStep>,
}

impl Step {
    /// A planned step, not run yet.
    pub fn pending(action: Action) -> Step {
        Step { action, state: StepState::Pending, contingency: false, call: None }
    }

    /// A planned `call_tool` step.
    pub fn tool(call: ToolStep) -> Step {
        Step { call: Some(call), ..Step::pending(Action::CallTool) }
    }
}

/// The call a `call_tool` step makes, and (once it was made, refused or parked) its journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStep {
    /// `server.tool`.
    pub tool: String,
    /// Its arguments, as JSON text (an object).
    pub arguments: String,
    /// Why the plan calls it: the procedure that planned it, or the model's choice.
    pub why: String,
    /// What became of the call, once it was asked.
    #[serde(default)]
    pub outcome: Option<CallOutcome>,
}

/// What became of a tool call: the journal `ai plan` and `ai why` show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallOutcome {
    /// The call's id, which is its approval's id too: the same call of the same step of the
    /// same event has the same id, across restarts.
    pub id: String,
    pub took_ms: u64,
    /// Bytes of the result's text before any cut.
    pub bytes: u64,
    /// The result was cut at the server's `max_output_kb`.
    pub cut: bool,
    /// How it failed, if it did.
    pub error: Option<ErrorClass>,
    /// `not needed`, `pending`, `approved by ...`, `denied by ...: why`, or `no answer within
    /// N s`.
    pub approval: String,
    /// The start of what it returned, or why it failed.
    pub summary: String,
    /// Answered from the journal of a call made before a restart, not made again.
    pub replayed: bool,
}

/// What makes a plan a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Criterion {
    /// A reply (or a clarifying question) was posted.
    ReplyPosted,
    /// Something relevant was recalled or found first.
    ContextGathered,
}

/// How a plan changes after a failed step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Adjustment {
    /// Go on with the next step.
    Continue,
    /// Insert these steps before the next one.
    Contingency(Vec<Action>),
    /// Throw the rest away and plan again.
    Replan,
    /// Stop; the plan failed.
    Abort,
}

impl Adjustment {
    pub fn kind(&self) -> &'static str {
        match self {
            Adjustment::Continue => "continue",
            Adjustment::Contingency(_) => "contingency",
            Adjustment::Replan => "replan",
            Adjustment::Abort => "abort",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdjustmentRecord {
    pub step: usize,
    pub action: Action,
    pub class: ErrorClass,
    pub error: String,
    pub adjustment: Adjustment,
    pub reason: String,
    pub at_us: i64,
}

/// A plan: goal, steps from the action registry, contingencies keyed by error class,
/// success criteria.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub goal: String,
    pub steps: Vec<Step>,
    pub contingencies: Vec<(ErrorClass, Vec<Action>)>,
    pub criteria: Vec<Criterion>,
    /// Where the steps came from: `template:<domain>` or `procedure:<name>`.
    pub source: String,
    /// 0 for the first plan, +1 per replan.
    pub attempt: u32,
}

/// The outcome of a plan, judged after it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub success: bool,
    pub criteria_met: Vec<Criterion>,
    pub criteria_missed: Vec<Criterion>,
    pub what_worked: Vec<String>,
    pub mistakes: Vec<String>,
    /// One line to learn from.
    pub pattern: String,
}

/// A finished (or running) plan with its history, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub event_id: String,
    pub domain: String,
    pub plan: Plan,
    /// Plans replaced by a replan, oldest first.
    pub replaced: Vec<Plan>,
    pub adjustments: Vec<AdjustmentRecord>,
    pub evaluation: Option<Evaluation>,
    pub started_us: i64,
    pub finished_us: Option<i64>,
    /// What long-term memory the plan recalled and what each piece changed (in the plan or the
    /// reply), or why it changed nothing. Since schema version 6 (older plans are migrated with
    /// none); JSON without it reads as none.
    #[serde(default)]
    pub memory_used: Vec<MemoryUse>,
    /// The model's draft that was not posted as written, and why (the draft check). Since
    /// schema version 9 (older plans are migrated with none); JSON without it reads as none.
    #[serde(default)]
    pub draft_check: Option<DraftCheck>,
}

/// A draft the draft check did not let through: what was wrong with it, and the draft itself.
/// The grounded reply was posted instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DraftCheck {
    /// `empty`, `echo`, `loop`, `ungrounded` or `unsupported`.
    pub flaw: String,
    /// What showed it ("11 of the message's 12 words in a row").
    pub detail: String,
    /// The draft as the model wrote it.
    pub draft: String,
}

/// The kinds of long-term memory a plan recalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    Experience,
    Procedure,
    UserProfile,
    Knowledge,
    /// A LoRA adapter trained on the persona's study chats (`mindfleet_core::adapter`).
    Adapter,
}

impl MemoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Experience => "experience",
            MemoryKind::Procedure => "procedure",
            MemoryKind::UserProfile => "user_profile",
            MemoryKind::Knowledge => "knowledge",
            MemoryKind::Adapter => "adapter",
        }
    }
}

/// A piece of long-term memory a plan recalled: which (an experience by the event it came
/// from, a procedure by its name, a user profile by the user, knowledge by its topic) and, in
/// words, what it changed ("no effect: ..." when it changed nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryUse {
    pub kind: MemoryKind,
    pub id: String,
    pub effect: String,
}

impl MemoryUse {
    /// Whether it changed the plan or the reply.
    pub fn had_effect(&self) -> bool {
        !self.effect.starts_with(NO_EFFECT)
    }
}

/// How the effect of a recalled piece of memory that changed nothing starts.
pub const NO_EFFECT: &str = "no effect";

/// What a persona learned from its plans: a pattern with its success and failure counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Learning {
    pub pattern: String,
    pub domain: String,
    pub successes: u32,
    pub failures: u32,
    pub last_us: i64,
}

/// Long-term memory: what happened, with its outcome (a promoted reflection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experience {
    pub domain: String,
    /// What the persona was doing.
    pub task: String,
    /// The steps it took, in order.
    pub trajectory: Vec<String>,
    pub success: bool,
    pub learnings: Vec<String>,
    pub event_id: Option<String>,
    pub at_us: i64,
}

/// Long-term memory: reusable steps with their record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Procedure {
    pub name: String,
    pub domain: String,
    pub steps: Vec<Action>,
    pub success_rate: f64,
    pub times_used: u32,
    pub updated_us: i64,
}

/// Long-term memory: what a persona knows about a topic, from clustered observations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knowledge {
    pub domain: String,
    pub topic: String,
    pub summary: String,
    pub sources: Vec<String>,
    pub at_us: i64,
}

/// Long-term memory: what a persona observed about one user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserProfile {
    pub user: String,
    /// Topics with how often they came up, most frequent first.
    pub topics: Vec<(String, u32)>,
    /// Preferences stated by the user ("I prefer ...", "please always ...").
    pub preferences: Vec<String>,
    /// `beginner`, `intermediate` or `expert`.
    pub technical_level: String,
    /// 0..=1, grows with the number of messages seen.
    pub confidence: f64,
    pub messages: u32,
    pub updated_us: i64,
}

/// What one consolidation pass did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConsolidationReport {
    pub at_us: i64,
    pub entries: usize,
    pub clusters: usize,
    pub experiences: usize,
    pub procedures: usize,
    pub knowledge: usize,
    pub profiles: usize,
    /// Why something was dropped or not kept (limits).
    pub dropped: Vec<String>,
}

/// Everything one consolidation pass writes, in one transaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Consolidation {
    pub experiences: Vec<Experience>,
    pub procedures: Vec<Procedure>,
    pub knowledge: Vec<Knowledge>,
    pub profiles: Vec<UserProfile>,
    /// Working-memory entries up to this id are consolidated.
    pub watermark: u64,
    pub report: ConsolidationReport,
}

/// A gap in what a persona knows, noted for study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyGap {
    /// What to study: the content words of the question that showed the gap.
    pub topic: String,
    /// How the gap showed (`knowledge search found nothing relevant`, `said it does not know`,
    /// `plan failed`, `asked by the admin`).
    pub why: String,
    pub noted_us: i64,
    /// How often the topic came up unanswered while it waited.
    pub mentions: u32,
}

/// One question of a study session, its answer and its grade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyAnswer {
    pub question: String,
    pub answer: String,
    /// The passage the question was asked of (`path:start-end`): what the answer is graded
    /// against.
    pub source: String,
    /// What the search for the question found, best first (the answer's context).
    pub cited: Vec<String>,
    /// 0..=1: half for finding the source again, half for the share of the answer's words the
    /// source supports.
    pub grade: f64,
    /// `model` or `rules`: who wrote the answer.
    pub by: String,
}

/// The grade a study answer needs to count as learned (and to become training data).
pub const STUDY_PASS_MARK: f64 = 0.5;

impl StudyAnswer {
    pub fn passed(&self) -> bool {
        self.grade >= STUDY_PASS_MARK
    }
}

/// A finished (or abandoned) study session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudySession {
    pub topic: String,
    pub why: String,
    pub started_us: i64,
    pub finished_us: i64,
    pub answers: Vec<StudyAnswer>,
    /// Mean grade of the answers (0 without any).
    pub score: f64,
    /// `studied`, or why it stopped (`nothing in the index about it`, ...).
    pub outcome: String,
    /// Model tokens the session spent.
    pub tokens: u32,
}
