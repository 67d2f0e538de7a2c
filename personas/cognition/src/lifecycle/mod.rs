//! The lifecycle of an event in a persona, as one state machine with no I/O: an [`Input`] and
//! the time in, [`Effect`]s out ([`Lifecycle::handle`]). The actor around it (`persona/mod.rs`)
//! turns messages into inputs and carries the effects out; what it asked off its loop comes
//! back as another input.
//!
//! ```text
//!  Idle --Next--> Enriching --Enriched--> gate: fast path / thermal --> decided
//!    ^                                      \--brain's judgement: Submit(gate) --Granted-->
//!    |                                         (Llm --Judged-->) decided
//!    |   decided: shared room: Claim --Turn (or TurnOverdue, CoordinatorGone)--> engage or finish
//!    |            engage: RecallLongTerm --LongTermRecalled--> plan: Submit(step) --Granted-->
//!    |                    the step (Llm, Search, RecallConversation, ... --answer-->) --> next
//!    |                    step ... evaluate --> finish
//!    +--- finish: Commit (decision, reply, plan), SelfState, Remember, Pull; deferrals tended
//! ```
//!
//! It owns the phase of the event in hand, the book of its tasks, the plan record, the deferrals
//! and the reflections waiting for their lesson. Time comes in with each input, the ids of its
//! scheduler tasks from a counter it was given at start, and nothing inside reads a clock, a
//! channel or a random source: the same inputs in the same order give the same effects
//! (`props.rs` checks it with the other invariants).
//!
//! By concern:
//!
//! ```text
//! phase.rs      where the event in hand is, and what a grant runs
//! intake.rs     inbox to enrichment to the gate chain, turn-taking, the journaled decision
//! grant.rs      a grant looked up in the book of tasks and run
//! plan.rs       engaging, one task per step, adjusting a failed plan, the evaluation
//! steps.rs      the actions of the registry and the answers they wait for
//! calls.rs      the call_tool step, its guards, and plans parked for a person's approval
//! turns.rs      the report of a turn held, a turn passed after the event was finished
//! deferrals.rs  deferred events taken up or dropped
//! props.rs      property tests of the lifecycle alone
//! ```

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use mindfleet_core::config::{BrainKind, PersonaConfig};
use mindfleet_core::conversation::{Recall, RecallQuery, Said};
use mindfleet_core::event::{Event, SenderKind};
use mindfleet_core::knowledge::{RagError, Source};
use mindfleet_core::llm::{
    Classification, ClassifyJob, FillJob, Filled, GenerateJob, Generation, LlmFailure, ToolTurn, ToolTurnJob,
};
use mindfleet_core::messages::{Claim, Deferral, Delivery, PersonaCommit, Retake, Turn, TurnReport};
use mindfleet_core::record::{EntryKind, ErrorClass, Learning, PlanRecord, SelfView, WmEntry};
use mindfleet_core::refs::{Enrichment, Excerpt, RefMatch};
use mindfleet_core::sched::{Class, Grant, OverBudget, Slot, TaskId};
use mindfleet_core::tools::{ToolAnswer, ToolCall, ToolSpec};

use crate::brain::{Brain, LocalBrain, PlanChoice, Recollection, RulesBrain};
use crate::memory::Draft;
use crate::mind::Update;
use crate::references::{Authorised, Library, RefBook};

mod calls;
mod deferrals;
mod grant;
mod intake;
pub(super) mod phase;
mod plan;
mod steps;
mod turns;

use deferrals::DeferBook;
use phase::{Phase, TaskFor};

/// Finished deliveries remembered to drop their redeliveries.
const DONE_KEPT: usize = 256;
/// How many times a claim goes again to a coordinator that has not answered it.
const TURN_RETRIES: u32 = 5;
/// Most messages conversation memory brings into a reply.
const CONVERSATION_RECALLED: usize = 3;
/// Tokens a drafting step reserves from the budgets: its prompt and its answer.
const DRAFT_TOKENS_RESERVED: u32 = 1024;
/// Tokens the gate's model question reserves.
const GATE_TOKENS_RESERVED: u32 = 256;
/// Tokens the plan questions (one per order of the candidates) reserve.
const PLAN_TOKENS_RESERVED: u32 = 768;
/// Tokens a `call_tool` step the model chooses reserves: the choice's prompt and labels, and
/// the arguments' prompt and answer.
const CHOOSE_TOOL_TOKENS_RESERVED: u32 = 768;
/// Most tokens of a tool's arguments the model writes.
const FILL_MAX_TOKENS: usize = 96;
/// Tokens the lesson of a plan reserves: its prompt and its answer.
const LESSON_TOKENS_RESERVED: u32 = 768;
/// Most references one `select_reference` step selects from the candidates offered.
const REFS_SELECTED_PER_STEP: usize = 3;
/// Most references one `select_reference` step reads a passage of.
const REFS_READ_PER_STEP: usize = 3;

/// What the lifecycle knows of the fleet around it, fixed at start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Setup {
    pub config: Arc<PersonaConfig>,
    /// The fleet's LLM is there to ask.
    pub llm: bool,
    /// The fleet has a knowledge index (the "search knowledge" and "study" steps).
    pub index: bool,
    /// Conversation memory is on.
    pub conversation: bool,
    /// The reference catalog, when the fleet has one, and the links its files make.
    pub references: Option<Library>,
    /// The redundancy check of drafts is on.
    pub redundancy: bool,
    /// The model's drafts may answer without material (see `crate::reply::check`).
    pub open_answers: bool,
    /// The names of the fleet's personas.
    pub personas: Arc<[String]>,
    /// How long to wait for the coordinator's answer before claiming again.
    pub turn_timeout: Duration,
    /// The first id of the block its scheduler tasks take theirs from.
    pub first_task: TaskId,
    /// The fleet has tool servers (the `call_tool` step).
    pub tools: bool,
    /// The fleet's LLM calls tools natively (an OpenAI-compatible endpoint): a `call_tool` step
    /// it fills is a turn of its own tool calling, several calls in one plan, each result
    /// informing the next; else the model chooses a tool by label choice and fills it.
    pub native_tools: bool,
}

/// What the lifecycle is told: a message to the persona, an answer to what it asked, a timer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Input {
    /// Start (or restart): what it deferred before is kept in mind, and the inbox asked.
    Start,
    /// A delivery for the inbox.
    Deliver(Delivery),
    /// From the inbox: its highest-priority event and how many remain.
    Next(Delivery, usize),
    /// The references the event of delivery `seq` calls for.
    Enriched { seq: u64, enrichment: Enrichment },
    /// The references the result of the step of `task` calls for.
    StepEnriched { task: TaskId, enrichment: Enrichment },
    /// The scheduler granted `grant` (the step it runs fails with `failure`, when a fault was
    /// injected).
    Granted { grant: Grant, failure: Option<ErrorClass> },
    /// The model's label scores for the engagement question of `task`.
    Judged { task: TaskId, answer: Result<Classification, LlmFailure> },
    /// The model's scores of each question of the choice of plan of `task`.
    Planned { task: TaskId, answer: Result<Vec<Classification>, LlmFailure> },
    /// The model's draft for the step of `task`.
    Drafted { task: TaskId, answer: Result<Generation, LlmFailure> },
    /// The model's lesson of the plan evaluated by `task`.
    Evaluated { task: TaskId, answer: Result<Generation, LlmFailure> },
    /// The index's results for the search of the step of `task`.
    Searched { task: TaskId, answer: Result<Vec<Source>, RagError> },
    /// Working memory's entries for the recall step of `task`.
    WorkingMemory { task: TaskId, answer: Result<Vec<WmEntry>, String> },
    /// What conversation memory recalled for the recall step of `task`, and the room's latest
    /// messages.
    Recalled { task: TaskId, recall: Result<Recall, String>, room: Vec<Said> },
    /// What long-term memory recalled for the engaged event `event_id`.
    LongTermRecalled { event_id: String, memory: Box<Recollection>, note: Option<String> },
    /// The passages the `select_reference` step of `task` read (and the files it was refused).
    ReferencesRead { task: TaskId, read: Vec<(Option<Excerpt>, Vec<String>, String)> },
    /// The redundancy check of the draft of `task`: the repeat it found, or why it could not run.
    RedundancyChecked { task: TaskId, answer: Result<Option<Repeat>, String> },
    /// The study topic of the step of `task` was noted (`false`: it was already).
    StudyNoted { task: TaskId, topic: String, noted: bool },
    /// The tool host's answer to the call of the step of `task`.
    ToolAnswered { task: TaskId, answer: ToolAnswer },
    /// The approval of the parked call `id` was decided: the plan that waits for it goes on.
    ApprovalAnswered(String),
    /// The tools the persona may call now (allowed, enabled, their server connected).
    Catalog(Vec<ToolSpec>),
    /// The model's label scores for the choice of a tool of the step of `task`.
    ToolChosen { task: TaskId, answer: Result<Classification, LlmFailure> },
    /// The model's arguments for the tool it chose for the step of `task`.
    Filled { task: TaskId, answer: Result<Filled, LlmFailure> },
    /// The model's turn of native tool calling: the calls it asks for, or none.
    ToolTurned { task: TaskId, answer: Result<ToolTurn, LlmFailure> },
    /// The coordinator's answer to a claim.
    Turn(Turn),
    /// The coordinator has not answered the claim on this event yet.
    TurnOverdue(String),
    /// The coordinator is gone: the claim on this event could not be sent.
    CoordinatorGone(String),
    /// What the self-state's new snapshot says that decisions weigh.
    SelfState(Box<SelfView>),
    /// The oldest deferred event may have gone stale.
    DeferralsDue,
    /// The inbox was restarted.
    InboxRestarted,
}

/// A repeat the redundancy check found: the decision's numbers and reason.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Repeat {
    pub similarity: f64,
    pub threshold: f64,
    pub reason: String,
}

/// What the lifecycle asks of the world.
#[derive(Debug)]
pub enum Effect {
    /// Queue a delivery in the inbox (`true`: the persona spoke in its room lately).
    Push(Delivery, bool),
    /// Put a delivery back in the inbox.
    Return(Delivery),
    /// Ask the inbox for its next event.
    Pull,
    /// The delivery in hand, for the fleet supervisor (0: none).
    Mark(u64),
    /// An event taken from the inbox: the text that trips an injected fault.
    Taken(Arc<Event>),
    /// Run the enrichment pipeline on a text.
    Enrich { of: Enrich, text: String },
    /// Keep the selection of a reference in storage.
    KeepReference(RefMatch),
    /// Submit a scheduler task.
    Submit(TaskSpec),
    /// A task is over: its slot is free (with the model tokens it used).
    Done { task: TaskId, tokens: Option<u32> },
    /// Claim a turn of the room's coordinator.
    Claim(Box<Claim>),
    /// Report to the room's coordinator how a turn held ended.
    Report(TurnReport),
    /// Tell the lifecycle `timer` after `after`.
    After { after: Duration, timer: Timer },
    /// Update the self-state.
    SelfState(Update),
    /// Store a thought in working memory.
    Remember(Draft),
    /// Ask the LLM for `task`.
    Llm { task: TaskId, ask: Ask },
    /// Recall working memory's entries for the recall step of `task`.
    RecallWorkingMemory { task: TaskId, domain: String, query: String },
    /// Recall conversation memory for the recall step of `task`, with the room's latest messages.
    RecallConversation { task: TaskId, query: RecallQuery },
    /// Conversation memory recalled these messages (`degraded`: by words only, and why).
    ConversationRecalled { seqs: Vec<u64>, degraded: Option<String> },
    /// Search the knowledge index for the step of `task`.
    Search { task: TaskId, query: String },
    /// Recall long-term memory for an engaged event.
    RecallLongTerm(Arc<Event>),
    /// Read, from each reference of `ids`, the passage that bears most on `text`.
    ReadReferences { task: TaskId, ids: Vec<String>, text: String, authorised: Authorised },
    /// Check whether the draft of `task` repeats a reply already posted to its thread.
    CheckRedundancy { task: TaskId, event: Arc<Event>, draft: String },
    /// Call a tool for the step of `task` (answered by `ToolAnswered`).
    CallTool { task: TaskId, call: Box<ToolCall> },
    /// Note a knowledge gap for study (for the step of `task`, which waits for the answer).
    NoteStudy { task: Option<TaskId>, topic: String, why: String, event_id: String },
    /// Take a chat message in for conversation memory.
    TakeIn { delivery: Delivery, importance: f64 },
    /// Commit the decision (with its reply, plan and deferral) with the finished delivery. The
    /// reply's event gets its id when it is committed, and (`said`) the commit of the event in
    /// hand the message conversation memory took in of it.
    Commit { commit: Box<PersonaCommit>, said: bool },
    /// Make the finished delivery of a passed turn pending again, for the inbox.
    Reopen { event_id: String, retake: Retake },
    /// The event is finished and nothing is in hand: idle time (study may go on).
    Idle,
}

/// What an enrichment is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enrich {
    Event(u64),
    Step(TaskId),
}

/// A question to the LLM.
#[derive(Debug)]
pub enum Ask {
    /// The engagement question (answered by `Judged`).
    Judge(ClassifyJob),
    /// The orders of the candidate plans, in turn until the answers settle it (`Planned`).
    ChoosePlan(PlanChoice),
    /// The reply's draft (`Drafted`).
    Draft(GenerateJob),
    /// The lesson of a plan (`Evaluated`).
    Lesson(GenerateJob),
    /// The choice of a tool for a `call_tool` step (`ToolChosen`).
    ChooseTool(ClassifyJob),
    /// The arguments of the tool chosen, decoded to its schema (`Filled`).
    Fill(FillJob),
    /// A turn of the model's own tool calling (`ToolTurned`).
    ToolTurn(ToolTurnJob),
}

/// The lifecycle's timers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timer {
    TurnOverdue(String),
    DeferralsDue,
}

/// A scheduler task, as the lifecycle asks for it (the persona's actor is its owner).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub id: TaskId,
    pub class: Class,
    pub priority: f64,
    pub slot: Slot,
    pub label: &'static str,
    pub room: Option<String>,
    pub over_budget: OverBudget,
    pub paced: bool,
    pub max_tokens: u32,
    /// A tool call's tool: one call of the budget, no tokens.
    pub tool: Option<Arc<str>>,
}

impl TaskSpec {
    fn paced(mut self) -> Self {
        self.paced = true;
        self
    }

    /// A model call of at most `max_tokens` tokens, in an inference slot.
    fn inference(mut self, max_tokens: u32) -> Self {
        self.slot = Slot::Inference;
        self.max_tokens = max_tokens;
        self
    }
}

/// The lifecycle of the events of one persona.
pub struct Lifecycle {
    setup: Setup,
    name: Arc<str>,
    brain: Box<dyn Brain>,
    /// The self-state's last snapshot.
    snapshot: SelfView,
    /// The event in hand, and where it is.
    phase: Phase,
    /// What each task submitted and not granted yet is for.
    tasks: HashMap<TaskId, TaskFor>,
    next_task: TaskId,
    done: VecDeque<u64>,
    /// Times of persona messages seen per room (echo-storm guard).
    persona_msgs: HashMap<String, VecDeque<i64>>,
    /// What the persona learned from its plans (kept in storage too).
    learnings: Vec<Learning>,
    /// The last finished plan (for dumps).
    last_plan: Option<PlanRecord>,
    refs: RefBook,
    /// The events it deferred, until taken up or dropped.
    deferrals: DeferBook,
    /// The reflections of completed plans waiting for the model's lesson, by the task that
    /// asked it.
    reflecting: HashMap<TaskId, plan::Reflecting>,
    /// The model's drafts the draft check replaced, by flaw, since the persona started.
    drafts_replaced: BTreeMap<&'static str, u64>,
    /// Plans parked while a call of theirs waits for a person's approval, oldest first.
    parked: Vec<calls::Parked>,
    /// The tools the persona may call now, as a model is told of them.
    catalog: Vec<ToolSpec>,
    /// The effects of the input being handled.
    out: Vec<Effect>,
    /// The time of the input being handled.
    now: i64,
}

impl Lifecycle {
    /// The lifecycle of a persona that starts with what it learned, the references it selected
    /// and the events it deferred before.
    pub fn new(setup: Setup, learnings: Vec<Learning>, refs: RefBook, deferred: Vec<(Delivery, Deferral)>) -> Self {
        let brain: Box<dyn Brain> = match setup.config.brain {
            BrainKind::Rules => Box::new(RulesBrain),
            BrainKind::Local => Box::new(LocalBrain),
        };
        Lifecycle {
            name: setup.config.name.as_str().into(),
            snapshot: SelfView { dormant: setup.config.dormant, ..SelfView::default() },
            next_task: setup.first_task,
            setup,
            brain,
            phase: Phase::Idle,
            tasks: HashMap::new(),
            done: VecDeque::new(),
            persona_msgs: HashMap::new(),
            learnings,
            last_plan: None,
            refs,
            deferrals: DeferBook::new(deferred),
            reflecting: HashMap::new(),
            drafts_replaced: BTreeMap::new(),
            parked: Vec::new(),
            catalog: Vec::new(),
            out: Vec::new(),
            now: 0,
        }
    }

    /// Handles `input` at `now` (microseconds since the epoch): the effects it has, in order.
    pub fn handle(&mut self, input: Input, now: i64) -> Vec<Effect> {
        self.now = now;
        match input {
            Input::Start => {
                self.publish_preoccupations();
                self.emit(Effect::Pull);
            }
            Input::Deliver(d) => self.on_deliver(d),
            Input::Next(d, backlog) => self.on_next(d, backlog),
            Input::Enriched { seq, enrichment } => self.on_enriched(seq, enrichment),
            Input::StepEnriched { task, enrichment } => self.on_step_enriched(task, enrichment),
            Input::Granted { grant, failure } => self.on_grant(grant, failure),
            Input::Judged { task, answer } => self.on_judged(task, answer),
            Input::Planned { task, answer } => self.on_planned(task, answer),
            Input::Drafted { task, answer } => self.on_drafted(task, answer),
            Input::Evaluated { task, answer } => self.on_evaluated(task, answer),
            Input::Searched { task, answer } => self.on_searched(task, answer),
            Input::WorkingMemory { task, answer } => self.on_working_memory(task, answer),
            Input::Recalled { task, recall, room } => self.on_recalled(task, recall, room),
            Input::LongTermRecalled { event_id, memory, note } => self.on_long_term_recalled(&event_id, *memory, note),
            Input::ReferencesRead { task, read } => self.on_references_read(task, read),
            Input::RedundancyChecked { task, answer } => self.on_redundancy_checked(task, answer),
            Input::StudyNoted { task, topic, noted } => self.on_study_noted(task, topic, noted),
            Input::ToolAnswered { task, answer } => self.on_tool_answered(task, answer),
            Input::ApprovalAnswered(id) => self.on_approval_answered(&id),
            Input::Catalog(tools) => self.catalog = tools,
            Input::ToolChosen { task, answer } => self.on_tool_chosen(task, answer),
            Input::Filled { task, answer } => self.on_filled(task, answer),
            Input::ToolTurned { task, answer } => self.on_tool_turned(task, answer),
            Input::Turn(t) => self.on_turn(t),
            Input::TurnOverdue(id) => self.on_turn_overdue(id),
            Input::CoordinatorGone(id) => self.go_on_alone(&id),
            Input::SelfState(s) => {
                self.snapshot = *s;
                self.tend_deferred();
            }
            Input::DeferralsDue => {
                self.deferrals.due = None;
                self.tend_deferred();
            }
            Input::InboxRestarted => {
                if self.phase.working().is_none() {
                    self.emit(Effect::Pull);
                }
            }
        }
        std::mem::take(&mut self.out)
    }

    /// The event being enriched, judged, waiting for its turn, or worked on.
    pub fn current_event(&self) -> Option<&Delivery> {
        self.phase.delivery()
    }

    pub fn busy(&self) -> bool {
        self.current_event().is_some()
    }

    pub fn snapshot(&self) -> &SelfView {
        &self.snapshot
    }

    pub fn brain(&self) -> &'static str {
        self.brain.name()
    }

    /// The plan worked on, else the newest one parked until a call of it is approved, else the
    /// last one finished.
    pub fn plan_record(&self) -> Option<PlanRecord> {
        let parked = || self.parked.last().map(|p| p.work.record.clone());
        self.phase.working().map(|f| f.record.clone()).or_else(parked).or_else(|| self.last_plan.clone())
    }

    pub fn refs(&self) -> &RefBook {
        &self.refs
    }

    /// The tools the persona may call now, as its model is told of them.
    pub fn catalog(&self) -> &[ToolSpec] {
        &self.catalog
    }

    pub fn drafts_replaced(&self) -> &BTreeMap<&'static str, u64> {
        &self.drafts_replaced
    }

    fn emit(&mut self, e: Effect) {
        self.out.push(e);
    }

    fn is_done(&self, seq: u64) -> bool {
        self.done.contains(&seq)
            || self.current_event().is_some_and(|d| d.seq == seq)
            || self.parked.iter().any(|p| p.work.gated.seen.delivery.seq == seq)
    }

    /// The plans parked until a call of theirs is approved: (call id, plan).
    pub fn parked(&self) -> impl Iterator<Item = (&str, &PlanRecord)> {
        self.parked.iter().map(|p| (p.id.as_str(), &p.work.record))
    }

    /// The class the work on an event runs in: `urgent` if marked so or a human mentioned this
    /// persona, `interactive` for chat and voice, `work` otherwise.
    fn class_of(&self, e: &Event) -> Class {
        if e.urgent || (e.sender_kind == SenderKind::Human && e.mentions.iter().any(|m| **m == *self.name)) {
            Class::Urgent
        } else if matches!(e.domain.as_str(), "chat" | "voice") {
            Class::Interactive
        } else {
            Class::Work
        }
    }

    /// A task of this persona in a cheap slot, with the next id.
    fn own_task(&mut self, class: Class, priority: f64, label: &'static str) -> TaskSpec {
        let id = self.next_task;
        self.next_task += 1;
        TaskSpec {
            id,
            class,
            priority,
            slot: Slot::Cheap,
            label,
            room: None,
            over_budget: OverBudget::Skip,
            paced: false,
            max_tokens: 0,
            tool: None,
        }
    }

    /// A task of this persona for the event `e` (its class, priority and room, and what becomes
    /// of it over budget: see `grant::over_budget`).
    fn task_for(&mut self, e: &Event, class: Class, priority: f64, label: &'static str) -> TaskSpec {
        let mut t = self.own_task(class, priority, label);
        t.room = Some(e.room.clone());
        t.over_budget = grant::over_budget(e, label);
        t
    }

    /// Submits `t` to the scheduler, noting what it is for (its grant looks that up).
    fn submit(&mut self, t: TaskSpec, what: TaskFor) {
        self.tasks.insert(t.id, what);
        self.emit(Effect::Submit(t));
    }

    /// The task is over: its slot is free.
    fn done_task(&mut self, task: TaskId) {
        self.emit(Effect::Done { task, tokens: None });
    }

    /// The task is over, having used `tokens` model tokens.
    fn done_with_tokens(&mut self, task: TaskId, tokens: u32) {
        self.emit(Effect::Done { task, tokens: Some(tokens) });
    }

    fn remember(&mut self, e: &Event, kind: EntryKind, text: String, importance: f64) {
        let relevance = if self.snapshot.focus.domain == e.domain { 0.5 } else { 0.0 };
        self.emit(Effect::Remember(Draft {
            domain: e.domain.clone(),
            kind,
            text,
            importance,
            event_id: Some(e.id.clone()),
            relevance,
        }));
    }
}

#[cfg(test)]
mod props;
