//! The `Persona` actor: supervises its `Inbox`, `SelfState` and `WorkingMemory`, runs the
//! engagement gate inline, and submits everything after the gate to the scheduler.
//!
//! One event at a time: the persona pulls the inbox's best event and decides through the
//! gate chain (fast path, thermal, the brain's judgement: engage / ignore / defer, journaled
//! with the stage, the rule, the reason and the numbers). For an engaged event its brain formulates a
//! plan from the action registry; each step is a scheduler task of its own, so higher-priority
//! work runs between two steps. A failed step is classified and the brain adjusts the plan
//! (continue, contingency, replan, abort). At the end the brain evaluates the outcome, which
//! becomes a reflection in working memory and a learning; decision, reply and plan go to the
//! admin, which commits them with the finished delivery in one transaction.
//!
//! Supervision: a failed child is restarted with its state restored from storage; more than
//! `max_restarts` failures within `within_secs` escalate (the persona fails, and the fleet
//! supervisor restarts the whole persona).
//!
//! The handling of an event is [`lifecycle`], a state machine with no I/O: this actor is its
//! shell. It turns messages into the lifecycle's inputs and carries its effects out
//! (`shell.rs`, in one place); what it asks off its loop comes back as another input.
//!
//! Messages: [`PersonaMsg`]; what only the persona sends itself (its timers, its children's
//! reports, the answers to what it asked off its loop) is [`Own`], carried in `PersonaMsg::Own`
//! and private to this crate.
//!
//! The folder, by concern (this file is the actor: its state and the dispatch):
//!
//! ```text
//! lifecycle/       the lifecycle of an event: inputs in, effects out
//! shell.rs         the lifecycle's effects carried out
//! own.rs           the persona's own continuations
//! children.rs      spawning and restarting the inbox, self-state and working memory
//! grant.rs         a grant: the lifecycle's, or one of the persona's chores
//! remembering.rs   consolidation, conversation memory, the recall of long-term memory
//! observing.rs     conversation memory consolidated into observations
//! studying.rs      knowledge gaps and study sessions
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use mindfleet_core::config::{ConversationConfig, PersonaConfig, SupervisionConfig};
use mindfleet_core::conversation::Said;
use mindfleet_core::dump::{ActorsDump, ChildDump, PersonaDump, WorkingMemoryDump};
use mindfleet_core::embedding::EmbedMsg;
use mindfleet_core::knowledge::IndexMsg;
use mindfleet_core::llm::LlmMsg;
use mindfleet_core::messages::{
    AdminMsg, CoordinatorMsg, DumpDepth, Fault, FaultTarget, FaultWhen, PersonaMsg, PersonaStatus, StateChange,
};
use mindfleet_core::record::SelfStateData;
use mindfleet_core::refs::{RefMatch, RefMode, Via};
use mindfleet_core::restart::{RestartWindow, child_failure};
use mindfleet_core::sched::{Class, Owner, SchedulerHandle, Slot, Task, TaskId};
use mindfleet_core::time::now_us;
use mindfleet_core::tools::ToolsMsg;
use mindfleet_store::Storage;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent, call_t};

use crate::conversation::ConversationBook;
use crate::enrich::Enricher;
use crate::faults::FaultBook;
use crate::inbox::InboxMsg;
use crate::mind::{Update, cadence};
use crate::references::RefBook;
use crate::self_state::SelfStateMsg;
use crate::study::{self, StudyBook};
use crate::working_memory::MemoryMsg;

mod children;
mod grant;
mod observing;
pub(crate) mod own;
mod remembering;
mod shell;
mod studying;

use children::{Child, spawn_inbox, spawn_memory, spawn_self_state};
use lifecycle::{Input, Lifecycle, Setup};
use mindfleet_cognition::history::{Begin, Recorder};
pub(crate) use mindfleet_cognition::lifecycle;
pub(crate) use own::Own;

/// How long the persona waits for its own children (recall, dumps).
const CHILD_CALL_MS: u64 = 1000;
/// How a persona's failure by escalation reads (its in-flight event is not to blame).
pub const ESCALATION: &str = "failed too often; escalating";

pub struct Persona;

pub struct PersonaArgs {
    pub config: Arc<PersonaConfig>,
    pub storage: Storage,
    pub admin: ActorRef<AdminMsg>,
    pub scheduler: SchedulerHandle,
    pub supervision: SupervisionConfig,
    /// The delivery being handled (0: none), read by the fleet supervisor after a crash.
    pub marker: Arc<AtomicU64>,
    pub faults: Arc<FaultBook>,
    /// Turn-taking for undirected human messages in shared rooms.
    pub coordinator: ActorRef<CoordinatorMsg>,
    /// How long to wait for the coordinator's answer before deciding alone.
    pub turn_timeout: Duration,
    /// The fleet's LLM, when a persona's brain uses it.
    pub llm: Option<ActorRef<LlmMsg>>,
    /// The fleet's codebase index, for the "search knowledge" step.
    pub index: Option<ActorRef<IndexMsg>>,
    /// The fleet's enrichment pipeline, when it has a reference catalog.
    pub enricher: Option<Arc<Enricher>>,
    /// Conversation memory, when it is on.
    pub conversation: Option<ConversationArgs>,
    /// The fleet's embedding worker: long-term memory is recalled by meaning through it.
    pub embedding: Option<ActorRef<EmbedMsg>>,
    /// The redundancy check of drafts before they are posted (none: every draft is posted).
    pub redundancy: Option<crate::redundancy::Redundancy>,
    /// The adapters trained for the fleet's local model (none when the model is an endpoint,
    /// which answers without them): recall chooses the one that fits an event.
    pub adapters: Option<mindfleet_store::adapters::AdapterDir>,
    /// The model's drafts may answer without material the steps found (the draft check,
    /// [`crate::reply::check`]): a model behind an endpoint, not the small local one.
    pub open_answers: bool,
    /// The names of the fleet's personas: their lines in a room are replies, not what people
    /// said, and a reply quotes people.
    pub personas: Arc<[String]>,
    /// The fleet's tool host, when it has tool servers (the `call_tool` step).
    pub tools: Option<ActorRef<ToolsMsg>>,
    /// The fleet's LLM calls tools natively (an OpenAI-compatible endpoint).
    pub native_tools: bool,
    /// Its lifecycle's inputs are recorded (`[storage] record`, `mindfleet replay`).
    pub record: bool,
}

/// What conversation memory uses: the fleet's conversation index, the embedding worker that
/// makes its vectors, and how recall ranks.
#[derive(Clone)]
pub struct ConversationArgs {
    pub index: ActorRef<IndexMsg>,
    pub embedding: ActorRef<EmbedMsg>,
    pub config: ConversationConfig,
}

/// Most chunks a knowledge search brings into working memory and the reply.
const KNOWLEDGE_CHUNKS: usize = 3;
/// How long a study stage that gave its slot back waits before it asks again.
const STUDY_RETRY: Duration = Duration::from_secs(2);
/// How often a persona whose model may choose tools asks which it may call now; while it has
/// none yet (its servers connecting), for its first minute, every [`CATALOG_FIRST`].
const CATALOG_EVERY: Duration = Duration::from_secs(10);
const CATALOG_FIRST: Duration = Duration::from_millis(250);

/// Tells the persona's lifecycle the tools it may call now, at once and then whenever they
/// change (a server connected, a tool disabled or approved), until the persona stops.
fn follow_catalog(tools: ActorRef<ToolsMsg>, me: ActorRef<PersonaMsg>, name: String) {
    tokio::spawn(async move {
        let (mut known, started) = (None::<Vec<mindfleet_core::tools::ToolSpec>>, std::time::Instant::now());
        loop {
            if let Ok(catalog) = call_t!(tools, ToolsMsg::Catalog, CHILD_CALL_MS, name.clone())
                && known.as_ref() != Some(&catalog)
            {
                known = Some(catalog.clone());
                if me.cast(Own::Life(Input::Catalog(catalog)).into()).is_err() {
                    return;
                }
            }
            if me.get_status() == ractor::ActorStatus::Stopped {
                return;
            }
            let none_yet = known.as_ref().is_none_or(Vec::is_empty);
            let fast = none_yet && started.elapsed() < Duration::from_secs(60);
            tokio::time::sleep(if fast { CATALOG_FIRST } else { CATALOG_EVERY }).await;
        }
    });
}

/// How much longer than a tool call's own deadline the persona waits for the tool host.
const TOOL_ANSWER_SLACK_MS: u64 = 5_000;
/// Longest a knowledge search waits for the index (which may be busy indexing a tree).
const SEARCH_CALL_MS: u64 = 20_000;
/// How long conversation memory gathers messages before it asks to embed them (unless a batch
/// fills first).
const GATHER: Duration = Duration::from_secs(1);
/// Most of the room's latest messages the recall step reads for a reply (questions about who
/// said what, and summaries, are answered from them).
const ROOM_LINES: usize = 200;

/// What a task of the persona's own (not the lifecycle's) was submitted for, until its grant
/// comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chore {
    Consolidate,
    Remember,
    /// Consolidating conversation memory into observations.
    Observe,
    Study,
}

pub struct PersonaState {
    args: PersonaArgs,
    name: Arc<str>,
    myself: ActorRef<PersonaMsg>,
    inbox: Child<InboxMsg>,
    self_state: Child<SelfStateMsg>,
    memory: Child<MemoryMsg>,
    /// The lifecycle of its events.
    life: Lifecycle,
    /// The self-state's last snapshot (the lifecycle is given what it weighs of it).
    snapshot: SelfStateData,
    /// Its recorded history, the entries not sent to storage yet (none: not recording).
    recorded: Option<Recorder>,
    /// What each of its chores' tasks submitted and not granted yet is for.
    chores: HashMap<TaskId, Chore>,
    /// The cadence last sent to the scheduler (from mood and budget).
    cadence: Duration,
    /// Share of the model budget left, as of the last grant.
    budget_left: f64,
    /// Conversation memory, when the fleet keeps one.
    convo: Option<ConversationBook>,
    /// The message of the event in hand as conversation memory keeps it, for its commit.
    taking_in: Option<Said>,
    /// Knowledge gaps noted and the study session under way.
    study: StudyBook,
}

impl PersonaState {
    fn pull(&mut self) {
        let _ = self.inbox.actor.cast(InboxMsg::Pull);
    }

    fn busy(&self) -> bool {
        self.life.busy()
    }

    /// A task of this persona in a cheap slot.
    fn own_task(&self, class: Class, priority: f64, label: &'static str) -> Task {
        Task::new(self.name.clone(), class, priority, Slot::Cheap, label, Owner::Persona(self.myself.clone()))
    }

    /// Submits `t`, one of its chores, to the scheduler (its grant looks it up).
    fn submit(&mut self, t: Task, what: Chore) {
        self.chores.insert(t.id, what);
        self.args.scheduler.submit(t);
    }

    /// Sends the scheduler a new cadence when mood or budget changed it.
    fn retune(&mut self) {
        let c = cadence(self.snapshot.mood, self.budget_left);
        if c != self.cadence {
            self.cadence = c;
            self.args.scheduler.set_cadence(self.name.clone(), c);
        }
    }

    /// One of the persona's own continuations.
    async fn on_own(&mut self, myself: &ActorRef<PersonaMsg>, own: Own) {
        match own {
            Own::Life(input) => self.feed(input).await,
            Own::SelfState(s) => {
                self.feed(Input::SelfState(Box::new(s.view()))).await;
                self.snapshot = *s;
                self.retune();
            }
            Own::StudyDue => self.study_next(),
            Own::Studied { task, step } => self.on_studied(task, step),
            Own::Consolidate => {
                myself.send_after(self.args.config.consolidate_every, || Own::Consolidate.into());
                self.want_consolidation();
            }
            Own::Remembered { task, result } => self.on_remembered(task, result),
            Own::ReadBack { asked, found } => self.on_read_back(asked, found),
            Own::ConversationLag => self.on_conversation_lag(),
            Own::RememberDue => {
                if let Some(c) = self.convo.as_mut() {
                    c.gathering = false;
                    if c.asked.is_empty() && c.waiting_count() > 0 {
                        self.want_remember();
                    }
                }
            }
            Own::ObserveDue => {
                if let Some(c) = self.convo.as_mut() {
                    c.observe_armed = false;
                }
                self.arm_observe();
            }
            Own::Observed { task, result } => self.on_observed(task, result),
        }
    }

    /// Its dump: what it holds now, then what its children answer (the returned future asks
    /// them).
    fn dump(&self, depth: DumpDepth) -> impl Future<Output = PersonaDump> + Send + 'static {
        let full = depth == DumpDepth::Full;
        let c = &self.args.config;
        let mut d = PersonaDump {
            name: self.name.to_string(),
            node: None,
            role: c.role.clone(),
            status: PersonaStatus::Running,
            brain: self.life.brain().into(),
            brain_degraded: None,
            rooms: c.rooms.clone(),
            domains: c.domains.clone(),
            actors: ActorsDump {
                persona: ChildDump::running(0),
                inbox: self.inbox.dump(),
                self_state: self.self_state.dump(),
                working_memory: self.memory.dump(),
            },
            self_state: Some(self.snapshot.clone()),
            inbox: Default::default(),
            working_memory: WorkingMemoryDump::default(),
            decisions: Vec::new(),
            in_flight: self.life.current_event().map(|d| d.event.id.clone()),
            cadence_ms: self.cadence.as_millis() as u64,
            budget_left: self.budget_left,
            plan: self.life.plan_record(),
            references: self.args.enricher.as_ref().filter(|_| full).map(|_| self.life.refs().dump()),
            conversation: self.convo.as_ref().filter(|_| full).map(|c| c.dump(now_us())),
            study: self.args.index.as_ref().filter(|_| full).map(|_| self.study.dump()),
            drafts_replaced: self.life.drafts_replaced().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            tools_now: self.life.catalog().iter().map(|t| t.name.clone()).collect(),
            waiting_approval: self.life.parked().map(|(id, _)| id.to_string()).collect(),
        };
        let (inbox, memory) = (self.inbox.actor.clone(), self.memory.actor.clone());
        async move {
            d.inbox = call_t!(inbox, InboxMsg::Stats, CHILD_CALL_MS).unwrap_or_default();
            if full {
                d.working_memory = call_t!(memory, MemoryMsg::Dump, CHILD_CALL_MS).unwrap_or_default();
            }
            d
        }
    }

    fn fault(&mut self, f: Fault) {
        match f.when {
            FaultWhen::OnText(t) => self.args.faults.set_text_trigger(Some(t)),
            FaultWhen::OnStart(n) => {
                self.args.faults.plan_start_failures(f.target, n);
                self.panic_now(f.target);
            }
            FaultWhen::Now => self.panic_now(f.target),
            FaultWhen::FailAction { action, class, times } => self.args.faults.fail_action(action, class, times),
            FaultWhen::SlowAction { action, ms, times } => {
                self.args.faults.slow_action(action, Duration::from_millis(ms), times)
            }
        }
    }

    fn panic_now(&self, target: FaultTarget) {
        match target {
            FaultTarget::Persona => panic!("injected fault: persona {} panics", self.name),
            FaultTarget::Inbox => drop(self.inbox.actor.cast(InboxMsg::Panic)),
            FaultTarget::SelfState => drop(self.self_state.actor.cast(SelfStateMsg::Panic)),
            FaultTarget::WorkingMemory => drop(self.memory.actor.cast(MemoryMsg::Panic)),
        }
    }
}

impl Actor for Persona {
    type Msg = PersonaMsg;
    type State = PersonaState;
    type Arguments = PersonaArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<PersonaMsg>,
        args: PersonaArgs,
    ) -> Result<PersonaState, ActorProcessingErr> {
        let name: Arc<str> = args.config.name.as_str().into();
        if args.faults.take_start(FaultTarget::Persona) {
            panic!("injected fault: persona {name} panics in pre_start");
        }
        // Self-state first: its snapshot reaches this mailbox before any event does.
        let self_state = spawn_self_state(&args, &name, &myself).await?;
        let memory = spawn_memory(&args, &name, &myself).await?;
        let inbox = spawn_inbox(&args, &name, &myself).await?;
        let sup = args.supervision;
        let learnings = args.storage.learnings(&name)?;
        let references = args.enricher.as_deref().map(Enricher::library);
        let mut refs = RefBook::default();
        if let Some(enricher) = &args.enricher {
            // Its choices so far, and the references every persona has.
            let auto = enricher.catalog().refs.iter().filter(|r| r.mode == RefMode::Auto).map(|r| RefMatch {
                id: r.id.clone(),
                via: Via::Auto,
                matched: Vec::new(),
                score: 1.0,
            });
            for m in args.storage.selected_references(&name)?.into_iter().chain(auto) {
                refs.select(enricher.catalog(), m);
            }
        }
        // What it deferred before it stopped: still aside in storage.
        let deferred = args.storage.load_deferred(name.clone()).await?;
        let mut study = StudyBook::default();
        if args.index.is_some() {
            study.recent = args.storage.studies(&name, study::RECENT_KEPT)?.into();
        }
        let convo = match &args.conversation {
            Some(ConversationArgs { config, .. }) => {
                Some(ConversationBook::new(config, args.storage.conversation_backlog(&name)?))
            }
            None => None,
        };
        let setup = Setup {
            config: args.config.clone(),
            llm: args.llm.is_some(),
            index: args.index.is_some(),
            conversation: args.conversation.is_some(),
            references,
            redundancy: args.redundancy.is_some(),
            open_answers: args.open_answers,
            personas: args.personas.clone(),
            turn_timeout: args.turn_timeout,
            first_task: SchedulerHandle::id_block(),
            tools: args.tools.is_some(),
            native_tools: args.native_tools,
        };
        // A run of the lifecycle begins its recorded history with what it is built from.
        let recorded = args.record.then(|| {
            let begin = Begin {
                setup: setup.clone(),
                learnings: learnings.clone(),
                refs: refs.clone(),
                deferred: deferred.clone(),
            };
            Recorder::begin(&begin)
        });
        Ok(PersonaState {
            snapshot: SelfStateData { dormant: setup.config.dormant, ..SelfStateData::default() },
            life: Lifecycle::new(setup, learnings, refs, deferred),
            recorded,
            chores: HashMap::new(),
            name,
            myself,
            inbox: Child { actor: inbox, window: RestartWindow::new(sup), last_error: None },
            self_state: Child { actor: self_state, window: RestartWindow::new(sup), last_error: None },
            memory: Child { actor: memory, window: RestartWindow::new(sup), last_error: None },
            cadence: Duration::ZERO,
            budget_left: 1.0,
            convo,
            taking_in: None,
            study,
            args,
        })
    }

    async fn post_start(&self, myself: ActorRef<PersonaMsg>, st: &mut PersonaState) -> Result<(), ActorProcessingErr> {
        // Personas that start together would all consolidate together, period after period:
        // each starts at its own phase of the period (from its name), then keeps the period.
        let every = st.args.config.consolidate_every;
        let phase =
            st.name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        myself.send_after(every.mul_f64((phase % 1000) as f64 / 1000.0), || Own::Consolidate.into());
        st.retune();
        if st.convo.as_ref().is_some_and(|c| c.waiting_count() > 0) {
            // What was taken in before a restart and not embedded.
            st.want_remember();
        }
        // And what was embedded and not consolidated.
        st.arm_observe();
        // The self-state keeps what storage kept (a `kill -9` may have lost its last write),
        // and the inbox is asked.
        st.feed(Input::Start).await;
        if let Some(tools) = st.args.tools.clone()
            && st.args.llm.is_some()
            && !st.args.config.tools.is_empty()
        {
            follow_catalog(tools, myself, st.name.to_string());
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<PersonaMsg>,
        msg: PersonaMsg,
        st: &mut PersonaState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PersonaMsg::Deliver(d) => st.feed(Input::Deliver(d)).await,
            PersonaMsg::Granted(g) => st.on_grant(g).await,
            // A full dump is one moment of the persona: its events wait for the children's
            // answers. The dashboard's, asked of every persona each second, does not hold them
            // back: the inbox's length may then be a moment younger than the rest.
            PersonaMsg::Dump(DumpDepth::Full, reply) => {
                let _ = reply.send(st.dump(DumpDepth::Full).await);
            }
            PersonaMsg::Dump(DumpDepth::Cards, reply) => {
                let d = st.dump(DumpDepth::Cards);
                tokio::spawn(async move {
                    let _ = reply.send(d.await);
                });
            }
            PersonaMsg::Fault(f) => st.fault(f),
            PersonaMsg::Resync => drop(st.inbox.actor.cast(InboxMsg::Resync)),
            PersonaMsg::Turn(t) => st.feed(Input::Turn(t)).await,
            PersonaMsg::Study { topic, reply } => {
                let _ = reply.send(st.on_study(topic));
            }
            PersonaMsg::Preempt(task) => st.on_preempt(task),
            PersonaMsg::SetState(change) => {
                let u = match change {
                    StateChange::Dormant => Update::SetDormant(true),
                    StateChange::Wake => Update::SetDormant(false),
                    StateChange::Focus { objective, intensity } => Update::SetFocus { objective, intensity },
                    StateChange::ClearFocus => Update::ClearFocus("focus cleared by a person".into()),
                };
                let _ = st.self_state.actor.cast(SelfStateMsg::Apply(u));
            }
            PersonaMsg::Own(carried) => match Own::open(carried) {
                Some(own) => st.on_own(&myself, own).await,
                // Not the persona's: somebody else made it.
                None => tracing::warn!(persona = %st.name, "a continuation of another type: dropped"),
            },
        }
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<PersonaMsg>, st: &mut PersonaState) -> Result<(), ActorProcessingErr> {
        // Recall marks still gathering: written, as a stop loses nothing it can keep.
        if let Some(marks) = st.convo.as_mut().and_then(|c| c.marks_due(true)) {
            st.args.storage.conversation_marks(st.name.clone(), marks);
        }
        st.send_recorded();
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<PersonaMsg>,
        evt: SupervisionEvent,
        st: &mut PersonaState,
    ) -> Result<(), ActorProcessingErr> {
        let Some((cell, error)) = child_failure(evt) else { return Ok(()) };
        match st.which(&cell) {
            Some(kind) => st.restart(kind, error).await,
            None => Ok(()), // an old incarnation's late notice
        }
    }
}

#[cfg(test)]
mod tests;
