//! The `Persona` actor: supervises its `Inbox`, `SelfState` and `WorkingMemory`, runs the
//! engagement gate inline, and submits everything after the gate to the scheduler.
//!
//! One event at a time: the persona pulls the inbox's best event and decides through the
//! gate chain (fast path, thermal, the brain's judgement: engage / ignore / defer, journaled
//! with the adapter, the reason and the numbers). For an engaged event its brain formulates a
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
//! Messages: [`PersonaMsg`].

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mindfleet_core::config::{BrainKind, ConversationConfig, PersonaConfig, SupervisionConfig};
use mindfleet_core::conversation::{Recall, RecallQuery, Recalled, Said};
use mindfleet_core::dump::{ActorsDump, ChildDump, PersonaDump, WorkingMemoryDump};
use mindfleet_core::embedding::EmbedMsg;
use mindfleet_core::event::{Event, SenderKind, new_event_id, text_mentions};
use mindfleet_core::knowledge::{IndexMsg, RagError, RagRequest, SearchRequest, Source};
use mindfleet_core::llm::{Classification, ClassifyJob, GenerateJob, Generation, LabelScore, LlmFailure, LlmMsg};
use mindfleet_core::messages::{
    AdminMsg, Claim, CoordinatorMsg, Delivery, DumpDepth, Fault, FaultTarget, FaultWhen, PersonaCommit, PersonaMsg,
    PersonaStatus, StateChange, StudyStep, Turn,
};
use mindfleet_core::model::{
    Action, Adjustment, AdjustmentRecord, Decision, EntryKind, ErrorClass, Learning, OutboxEntry, PlanRecord,
    Preoccupation, SelfStateData, Step, StepState, StudySession, Verdict, WmEntry,
};
use mindfleet_core::refs::{self as refs, Enrichment, RefMatch, RefMode, Via};
use mindfleet_core::restart::RestartWindow;
use mindfleet_core::sched::{Class, Grant, Outcome, Owner, SchedulerHandle, Slot, Task, TaskId};
use mindfleet_core::time::now_us;
use mindfleet_store::Storage;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent, call_t};
use tracing::Instrument;

use crate::brain::{Brain, LessonContext, LocalBrain, PlanChoice, PlanContext, RespondContext, RulesBrain};
use crate::consolidate::consolidate;
use crate::conversation::ConversationBook;
use crate::enrich::{Enricher, RefBook};
use crate::faults::FaultBook;
use crate::gate::{
    ECHO_WINDOW_US, GateDecision, GateState, PriorityInput, SPOKE_WINDOW_US, explain, fast_path, keyword_hits,
    priority, score, thermal,
};
use crate::inbox::{Inbox, InboxArgs, InboxMsg};
use crate::memory::Draft;
use crate::mind::{Activity, REFERENCE_KIND, Update, cadence};
use crate::self_state::{SelfState, SelfStateArgs, SelfStateMsg};
use crate::study::{self, StudyBook};
use crate::working_memory::{MemoryArgs, MemoryMsg, WorkingMemory};
use mindfleet_core::team::suitability;

/// How long the persona waits for its own children (recall, dumps).
const CHILD_CALL_MS: u64 = 1000;
/// Finished deliveries remembered to drop their redeliveries.
const DONE_KEPT: usize = 256;
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
}

/// What conversation memory uses: the fleet's conversation index, the embedding worker that
/// makes its vectors, and how recall ranks.
#[derive(Clone)]
pub struct ConversationArgs {
    pub index: ActorRef<IndexMsg>,
    pub embedding: ActorRef<EmbedMsg>,
    pub config: ConversationConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inbox,
    SelfState,
    Memory,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Inbox => "inbox",
            Kind::SelfState => "self_state",
            Kind::Memory => "working_memory",
        }
    }
}

struct Child<M: ractor::Message> {
    actor: ActorRef<M>,
    window: RestartWindow,
    last_error: Option<String>,
}

impl<M: ractor::Message> Child<M> {
    fn dump(&self) -> ChildDump {
        ChildDump { status: "running".into(), restarts: self.window.total, last_error: self.last_error.clone() }
    }
}

/// An event the fast path and the thermal adapter passed on, waiting for its `gate` task: the
/// brain's judgement is cognitive work and runs as a scheduler task like any other.
struct Judging {
    delivery: Delivery,
    backlog: usize,
    priority: f64,
    state: GateState,
    task: TaskId,
}

/// An event decided by the gate whose turn the room's coordinator has not granted yet.
struct Waiting {
    delivery: Delivery,
    backlog: usize,
    priority: f64,
    gate: GateDecision,
    state: GateState,
    /// The claim, to send again while its answer is overdue.
    claim: Claim,
}

/// The event being worked on and its plan.
struct InFlight {
    delivery: Delivery,
    backlog: usize,
    priority: f64,
    class: Class,
    gate: GateDecision,
    state: GateState,
    /// The scheduler task of the step being run.
    task: TaskId,
    record: PlanRecord,
    /// Index of the step being run (or next to run).
    cursor: usize,
    recalled: Vec<WmEntry>,
    /// What conversation memory recalled.
    conversation: Vec<Recalled>,
    /// What the knowledge search found.
    found: Vec<Source>,
    draft: Option<String>,
    reply: Option<(OutboxEntry, Event)>,
    /// Actions that failed in replaced plans.
    avoid: Vec<Action>,
    /// What the decision's reason must say besides the gate's (steps run without a model).
    notes: Vec<String>,
    /// The brain that wrote the draft (the rules brain when the model failed).
    drafted_by: &'static str,
    /// Model tokens used by the step being run.
    tokens: u32,
    /// Candidate plans the model is to choose from before the first step (`record.plan` is the
    /// rules brain's meanwhile).
    choosing: Option<PlanChoice>,
}

/// Most chunks a knowledge search brings into working memory and the reply.
const KNOWLEDGE_CHUNKS: usize = 3;
/// How long a study stage that gave its slot back waits before it asks again.
const STUDY_RETRY: Duration = Duration::from_secs(2);
/// How many times a claim goes again to a coordinator that has not answered it.
const TURN_RETRIES: u32 = 5;
/// Longest a knowledge search waits for the index (which may be busy indexing a tree).
const SEARCH_CALL_MS: u64 = 20_000;
/// How long conversation memory gathers messages before it asks to embed them (unless a batch
/// fills first).
const GATHER: Duration = Duration::from_secs(1);
/// Most messages conversation memory brings into a reply.
const CONVERSATION_RECALLED: usize = 3;

/// Tokens a drafting step reserves from the budgets: its prompt and its answer.
const DRAFT_TOKENS_RESERVED: u32 = 1024;
/// Tokens the gate's model question reserves.
const GATE_TOKENS_RESERVED: u32 = 256;
/// Tokens the plan questions (one per order of the candidates) reserve.
const PLAN_TOKENS_RESERVED: u32 = 768;
/// Tokens the lesson of a plan reserves: its prompt and its answer.
const LESSON_TOKENS_RESERVED: u32 = 768;

/// Most references one `select_reference` step selects from the candidates offered.
const REFS_SELECTED_PER_STEP: usize = 3;
/// Most references one `select_reference` step reads a passage of.
const REFS_READ_PER_STEP: usize = 3;

/// How a step ended its run: done (with its result's text, which the enrichment pipeline reads
/// before the persona goes on), or waiting for an answer (a message to come).
enum StepRun {
    Done(Option<String>),
    Waiting,
}

pub struct PersonaState {
    args: PersonaArgs,
    name: Arc<str>,
    myself: ActorRef<PersonaMsg>,
    inbox: Child<InboxMsg>,
    self_state: Child<SelfStateMsg>,
    memory: Child<MemoryMsg>,
    snapshot: SelfStateData,
    in_flight: Option<InFlight>,
    /// An event in the enrichment pipeline, before the gate (with the inbox's backlog).
    enriching: Option<(Delivery, usize)>,
    judging: Option<Judging>,
    waiting: Option<Waiting>,
    done: VecDeque<u64>,
    /// Times of persona messages seen per room (echo-storm guard).
    persona_msgs: HashMap<String, VecDeque<i64>>,
    brain: Box<dyn Brain>,
    /// What the persona learned from its plans (kept in storage too).
    learnings: Vec<Learning>,
    /// The last finished plan (for dumps).
    last_plan: Option<PlanRecord>,
    /// The consolidation task waiting for its grant, if any.
    consolidating: Option<TaskId>,
    /// The cadence last sent to the scheduler (from mood and budget).
    cadence: Duration,
    /// Share of the model budget left, as of the last grant.
    budget_left: f64,
    refs: RefBook,
    /// Conversation memory, when the fleet keeps one.
    convo: Option<ConversationBook>,
    /// The message of the event in hand as conversation memory keeps it, for its commit.
    taking_in: Option<Said>,
    /// Knowledge gaps noted and the study session under way.
    study: StudyBook,
}

async fn spawn_inbox(
    st_args: &PersonaArgs,
    name: &Arc<str>,
    me: &ActorRef<PersonaMsg>,
) -> Result<ActorRef<InboxMsg>, ActorProcessingErr> {
    let args = InboxArgs {
        config: st_args.config.clone(),
        name: name.clone(),
        storage: st_args.storage.clone(),
        admin: st_args.admin.clone(),
        parent: me.clone(),
        faults: st_args.faults.clone(),
    };
    Ok(Actor::spawn_linked(None, Inbox, args, me.get_cell()).await?.0)
}

async fn spawn_self_state(
    a: &PersonaArgs,
    name: &Arc<str>,
    me: &ActorRef<PersonaMsg>,
) -> Result<ActorRef<SelfStateMsg>, ActorProcessingErr> {
    let args = SelfStateArgs {
        name: name.clone(),
        dormant: a.config.dormant,
        storage: a.storage.clone(),
        parent: me.clone(),
        faults: a.faults.clone(),
    };
    Ok(Actor::spawn_linked(None, SelfState, args, me.get_cell()).await?.0)
}

async fn spawn_memory(
    a: &PersonaArgs,
    name: &Arc<str>,
    me: &ActorRef<PersonaMsg>,
) -> Result<ActorRef<MemoryMsg>, ActorProcessingErr> {
    let args = MemoryArgs {
        config: a.config.clone(),
        name: name.clone(),
        storage: a.storage.clone(),
        faults: a.faults.clone(),
    };
    Ok(Actor::spawn_linked(None, WorkingMemory, args, me.get_cell()).await?.0)
}

impl PersonaState {
    fn which(&self, cell: &ActorCell) -> Option<Kind> {
        let id = cell.get_id();
        if id == self.inbox.actor.get_id() {
            Some(Kind::Inbox)
        } else if id == self.self_state.actor.get_id() {
            Some(Kind::SelfState)
        } else if id == self.memory.actor.get_id() {
            Some(Kind::Memory)
        } else {
            None
        }
    }

    /// Restarts a failed child, retrying failed starts, until the restart window is
    /// exhausted; then escalates by failing the persona.
    async fn restart(&mut self, kind: Kind, error: String) -> Result<(), ActorProcessingErr> {
        let mut error = error;
        loop {
            let window = match kind {
                Kind::Inbox => &mut self.inbox.window,
                Kind::SelfState => &mut self.self_state.window,
                Kind::Memory => &mut self.memory.window,
            };
            if !window.allow(Instant::now()) {
                return Err(format!("{} of {} {ESCALATION} (last: {error})", kind.label(), self.name).into());
            }
            tracing::warn!(persona = %self.name, child = kind.label(), %error, "restarting child");
            let spawned = match kind {
                Kind::Inbox => spawn_inbox(&self.args, &self.name, &self.myself).await.map(|a| {
                    self.inbox.actor = a;
                    self.inbox.last_error = Some(error.clone());
                }),
                Kind::SelfState => spawn_self_state(&self.args, &self.name, &self.myself).await.map(|a| {
                    self.self_state.actor = a;
                    self.self_state.last_error = Some(error.clone());
                }),
                Kind::Memory => spawn_memory(&self.args, &self.name, &self.myself).await.map(|a| {
                    self.memory.actor = a;
                    self.memory.last_error = Some(error.clone());
                }),
            };
            match spawned {
                Ok(()) => break,
                Err(e) => error = format!("restart failed: {e}"),
            }
        }
        if kind == Kind::Inbox && self.in_flight.is_none() {
            self.pull();
        }
        Ok(())
    }

    fn pull(&mut self) {
        let _ = self.inbox.actor.cast(InboxMsg::Pull);
    }

    fn is_done(&self, seq: u64) -> bool {
        self.done.contains(&seq) || self.current_event().is_some_and(|d| d.seq == seq)
    }

    /// The event being judged, waiting for its turn, or worked on.
    fn current_event(&self) -> Option<&Delivery> {
        self.in_flight
            .as_ref()
            .map(|f| &f.delivery)
            .or_else(|| self.judging.as_ref().map(|j| &j.delivery))
            .or_else(|| self.waiting.as_ref().map(|w| &w.delivery))
            .or_else(|| self.enriching.as_ref().map(|(d, _)| d))
    }

    fn busy(&self) -> bool {
        self.current_event().is_some()
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

    /// A task of this persona in a cheap slot.
    fn own_task(&self, class: Class, priority: f64, label: &'static str) -> Task {
        Task::new(self.name.clone(), class, priority, Slot::Cheap, label, Owner::Persona(self.myself.clone()))
    }

    /// A task of this persona for the event `e` (its class, priority and room).
    fn task_for(&self, e: &Event, class: Class, priority: f64, label: &'static str) -> Task {
        self.own_task(class, priority, label).in_room(&e.room)
    }

    /// Sends the scheduler a new cadence when mood or budget changed it.
    fn retune(&mut self) {
        let c = cadence(self.snapshot.mood, self.budget_left);
        if c != self.cadence {
            self.cadence = c;
            self.args.scheduler.set_cadence(self.name.clone(), c);
        }
    }

    fn spoke_recently(&self, room: &str, now: i64) -> bool {
        self.snapshot.spoke_in.get(room).is_some_and(|t| now - t < SPOKE_WINDOW_US)
    }

    fn gate_state(&mut self, event: &Event, now: i64) -> GateState {
        let room = event.room.as_str();
        let seen = self.persona_msgs.get_mut(room).map_or(0, |q| {
            while q.front().is_some_and(|t| now - t > ECHO_WINDOW_US) {
                q.pop_front();
            }
            q.len()
        });
        let own = self.snapshot.spoke_in.get(room).is_some_and(|t| now - t <= ECHO_WINDOW_US);
        let s = &self.snapshot;
        GateState {
            mood: s.mood,
            dormant: s.dormant,
            load: s.cognitive_load,
            capacity: s.available_capacity,
            focus_intensity: if s.focus.activity == "idle" { 0.0 } else { s.focus.intensity },
            same_domain: s.focus.domain == event.domain,
            recent_persona_msgs: seen + usize::from(own),
            keyword_hits: keyword_hits(&event.text, &self.args.config.expertise),
        }
    }

    fn on_deliver(&mut self, d: Delivery) {
        if self.is_done(d.seq) {
            return;
        }
        let now = now_us();
        if d.event.sender_kind == SenderKind::Persona && d.event.from != *self.name {
            let q = self.persona_msgs.entry(d.event.room.clone()).or_default();
            q.push_back(d.event.ts_us.min(now));
            if q.len() > 64 {
                q.pop_front();
            }
        }
        let spoke = self.spoke_recently(&d.event.room, now);
        let _ = self.inbox.actor.cast(InboxMsg::Push(d, spoke));
    }

    fn on_next(&mut self, d: Delivery, backlog: usize) {
        if self.is_done(d.seq) {
            if !self.busy() {
                self.pull();
            }
            return;
        }
        if self.busy() {
            // A hand-over from an inbox that restarted meanwhile: back in the queue it goes.
            let _ = self.inbox.actor.cast(InboxMsg::Return(d));
            return;
        }
        self.args.marker.store(d.seq, Ordering::SeqCst);
        if self.args.faults.text_triggers(&d.event.text) {
            panic!("injected fault: persona {} panics on event {}", self.name, d.event.id);
        }
        if let Some(enricher) = self.args.enricher.clone() {
            // The pipeline first: what the event calls for is known before the gate.
            let (me, seq, text) = (self.myself.clone(), d.seq, d.event.text.clone());
            self.enriching = Some((d, backlog));
            tokio::spawn(async move {
                let enrichment = enricher.enrich(&text).await;
                let _ = me.cast(PersonaMsg::Enriched { seq, enrichment });
            });
            return;
        }
        self.gate(d, backlog);
    }

    /// What the event of delivery `seq` calls for: references it names are selected at once;
    /// then the gate.
    fn on_enriched(&mut self, seq: u64, enrichment: Enrichment) {
        let Some((d, backlog)) = self.enriching.take_if(|(d, _)| d.seq == seq) else { return };
        self.take_matches(&d.event.id, "event", enrichment);
        self.gate(d, backlog);
    }

    /// Records what a text of the current event called for (logging each match), and selects
    /// the references it names, with those they lead to; returns the new matches.
    fn take_matches(&mut self, event_id: &str, stage: &str, enrichment: Enrichment) -> Vec<RefMatch> {
        let Some(enricher) = self.args.enricher.clone() else { return Vec::new() };
        if let Some(why) = &enrichment.semantic_off
            && self.refs.semantic_off.as_ref() != Some(why)
        {
            tracing::warn!(persona = %self.name, %why, "semantic reference matching is off: tags and @id only");
        }
        let fresh = self.refs.note(enrichment);
        self.log_matches(event_id, stage, &fresh);
        let named: Vec<RefMatch> = fresh.iter().filter(|m| m.via == Via::Id).cloned().collect();
        self.select_all(&enricher, event_id, named);
        fresh
    }

    /// Selects each of `chosen` (authorising its path, keeping the choice in storage) and then
    /// what the newly selected ones lead to, breadth first.
    fn select_all(&mut self, enricher: &Enricher, event_id: &str, chosen: Vec<RefMatch>) {
        let mut new_ids = Vec::new();
        for m in chosen {
            if self.refs.select(enricher.catalog(), m.clone()) {
                self.args.storage.select_reference(self.name.clone(), m.clone());
                new_ids.push(m.id);
            }
        }
        if new_ids.is_empty() {
            return;
        }
        let known: BTreeSet<String> =
            self.refs.selected.keys().chain(self.refs.current.iter().map(|m| &m.id)).cloned().collect();
        let linked = enricher.discover(&new_ids, &known);
        self.log_matches(event_id, "linked", &linked);
        self.refs.matches += linked.len() as u64;
        self.refs.current.extend(linked.iter().cloned());
        for m in linked {
            if self.refs.select(enricher.catalog(), m.clone()) {
                self.args.storage.select_reference(self.name.clone(), m);
            }
        }
    }

    fn log_matches(&self, event_id: &str, stage: &str, matches: &[RefMatch]) {
        for m in matches {
            tracing::info!(
                persona = %self.name, event = event_id, stage, reference = %m.id, via = m.via.as_str(),
                score = m.score, matched = ?m.matched, "reference matched"
            );
        }
    }

    /// The gate chain on an event: the fast path and the thermal adapter inline, else the
    /// brain's judgement as a task.
    fn gate(&mut self, d: Delivery, backlog: usize) {
        let now = now_us();
        let p = priority(&PriorityInput {
            event: &d.event,
            persona: &self.name,
            expertise: &self.args.config.expertise,
            now_us: now,
            spoke_recently: self.spoke_recently(&d.event.room, now),
        });
        self.take_in(&d, p, now);
        let state = self.gate_state(&d.event, now);
        match fast_path(&d.event, &self.name, p, &state).or_else(|| thermal(p, &state)) {
            Some(gate) => self.decided(d, backlog, p, gate, state),
            None => {
                let mut t = self.task_for(&d.event, self.class_of(&d.event), p, "gate");
                if self.args.config.brain == BrainKind::Local {
                    // The model judges: an inference slot, reserving what the question takes.
                    t.slot = Slot::Inference;
                    t = t.with_max_tokens(GATE_TOKENS_RESERVED);
                }
                self.judging = Some(Judging { delivery: d, backlog, priority: p, state, task: t.id });
                self.args.scheduler.submit(t);
            }
        }
    }

    /// The gate chain decided: take part in turn-taking, engage, or finish.
    fn decided(&mut self, d: Delivery, backlog: usize, p: f64, gate: GateDecision, state: GateState) {
        let e = &d.event;
        // An undirected message that several personas got: the room's coordinator decides
        // who answers (every receiver claims or passes, so it knows when all have spoken).
        if d.audience > 1 && e.persona.is_none() {
            let c = &self.args.config;
            let claim = Claim {
                event_id: e.id.clone(),
                room: e.room.clone(),
                persona: self.name.clone(),
                actor: Some(self.myself.clone()),
                node: None,
                wants: gate.verdict == Verdict::Engage,
                mentioned: gate.rule == "mention",
                confidence: if gate.adapter == "model" { gate.score } else { p },
                // Dormant: never assigned a message nobody claimed.
                suitability: if self.snapshot.dormant {
                    0.0
                } else {
                    suitability(&self.snapshot, &c.domains, &e.domain, p, &e.text)
                },
                audience: d.audience,
                from_human: e.sender_kind == SenderKind::Human,
                retry: 0,
            };
            let gone = self.args.coordinator.cast(CoordinatorMsg::Claim(Box::new(claim.clone()))).is_err();
            // A pass on a persona message is final: nobody is assigned one that nobody claims,
            // so there is no turn to wait for (waiting would hold up this persona's next events,
            // and, through their claims, other personas' turns).
            if !claim.wants && !claim.mentioned && !claim.from_human {
                self.finish(d, backlog, p, gate, state, None, None);
                return;
            }
            let id = e.id.clone();
            if gone {
                self.waiting = Some(Waiting { delivery: d, backlog, priority: p, gate, state, claim });
                self.go_on_alone(&id);
                return;
            }
            self.myself.send_after(self.args.turn_timeout, move || PersonaMsg::TurnOverdue(id));
            self.waiting = Some(Waiting { delivery: d, backlog, priority: p, gate, state, claim });
            return;
        }
        if gate.verdict == Verdict::Engage {
            self.engage(d, backlog, p, gate, state);
        } else {
            self.finish(d, backlog, p, gate, state, None, None);
        }
    }

    /// The coordinator has not answered the claim on `event_id` in time. While it runs, the
    /// claim goes again (a restarted coordinator forgot it; a busy one answers it once): a
    /// persona that went ahead on its own would answer a message somebody else holds. Only
    /// a coordinator that stays gone leaves the persona to its own verdict.
    fn on_turn_overdue(&mut self, event_id: String) {
        let Some(w) = self.waiting.as_mut().filter(|w| w.delivery.event.id == event_id) else { return };
        w.claim.retry += 1;
        tracing::warn!(persona = %self.name, event = %event_id, retry = w.claim.retry, "the coordinator has not answered the claim: sent again");
        let sent = w.claim.retry <= TURN_RETRIES
            && self.args.coordinator.cast(CoordinatorMsg::Claim(Box::new(w.claim.clone()))).is_ok();
        if sent {
            self.myself.send_after(self.args.turn_timeout, move || PersonaMsg::TurnOverdue(event_id));
        } else {
            self.go_on_alone(&event_id);
        }
    }

    /// No coordinator answers: the persona follows its own gate.
    fn go_on_alone(&mut self, event_id: &str) {
        let Some(wants) = self.waiting.as_ref().map(|w| w.gate.verdict == Verdict::Engage) else { return };
        let reason = "no coordinator answered: the persona's own verdict".into();
        self.on_turn(Turn { event_id: event_id.to_string(), granted: wants, assigned: false, reason });
    }

    /// The coordinator's answer: go ahead, stay silent, or take a message nobody claimed.
    fn on_turn(&mut self, t: Turn) {
        let Some(w) = self.waiting.take_if(|w| w.delivery.event.id == t.event_id) else { return };
        let coordinated = |verdict, rule| GateDecision {
            verdict,
            adapter: "coordinator",
            rule,
            threshold: w.gate.threshold,
            score: w.gate.score,
            note: t.reason.clone(),
        };
        match (t.granted, w.gate.verdict == Verdict::Engage) {
            (true, true) => self.engage(w.delivery, w.backlog, w.priority, w.gate, w.state),
            (true, false) => {
                let gate = coordinated(Verdict::Engage, "assigned");
                self.engage(w.delivery, w.backlog, w.priority, gate, w.state);
            }
            (false, true) => {
                let gate = coordinated(Verdict::Ignore, "redundant");
                self.finish(w.delivery, w.backlog, w.priority, gate, w.state, None, None);
            }
            (false, false) => self.finish(w.delivery, w.backlog, w.priority, w.gate, w.state, None, None),
        }
    }

    /// Engaged: the brain plans, and the first step goes to the scheduler.
    fn engage(&mut self, d: Delivery, backlog: usize, p: f64, gate: GateDecision, state: GateState) {
        let now = now_us();
        let e = &d.event;
        let class = self.class_of(e);
        let ctx = PlanContext {
            persona: &self.name,
            role: &self.args.config.role,
            event: e,
            avoid: &[],
            learnings: &self.learnings,
            attempt: 0,
            references: !self.refs.current.is_empty(),
        };
        let plan = self.brain.formulate_plan(&ctx);
        let choosing = self.args.llm.as_ref().and_then(|_| self.brain.plan_request(&ctx));
        let focus = Activity {
            event_id: e.id.clone(),
            verdict: "engage".into(),
            reason: format!("working on: {}", plan.goal),
            engaged: Some((e.domain.clone(), plan.goal.clone(), p.max(0.3))),
            backlog,
            ..Default::default()
        };
        let _ = self.self_state.actor.cast(SelfStateMsg::Apply(Update::Focus(Box::new(focus))));
        let record = PlanRecord {
            event_id: e.id.clone(),
            domain: e.domain.clone(),
            plan,
            replaced: Vec::new(),
            adjustments: Vec::new(),
            evaluation: None,
            started_us: now,
            finished_us: None,
        };
        self.in_flight = Some(InFlight {
            delivery: d,
            backlog,
            priority: p,
            class,
            gate,
            state,
            task: 0,
            record,
            cursor: 0,
            recalled: Vec::new(),
            conversation: Vec::new(),
            found: Vec::new(),
            draft: None,
            reply: None,
            avoid: Vec::new(),
            notes: Vec::new(),
            drafted_by: "rules",
            tokens: 0,
            choosing,
        });
        self.next_step();
    }

    /// Submits the next pending step as a scheduler task; after the last one, the evaluation.
    ///
    /// The first step of a `work` plan starts a new piece of self-paced work, so it waits for
    /// the persona's cadence; the steps after it, and interactive and urgent work, do not.
    fn next_step(&mut self) {
        let Some(f) = self.in_flight.as_ref() else { return };
        if f.choosing.is_some() {
            // The model chooses the plan first: an inference slot, like the first step's.
            let mut t = self.task_for(&f.delivery.event, f.class, f.priority, "plan");
            t.slot = Slot::Inference;
            t = t.with_max_tokens(PLAN_TOKENS_RESERVED);
            if f.class == Class::Work {
                t = t.paced();
            }
            let f = self.in_flight.as_mut().expect("checked above");
            f.task = t.id;
            self.args.scheduler.submit(t);
            return;
        }
        let action = f.record.plan.steps.get(f.cursor).map(|s| s.action);
        let label = action.map_or("evaluate", Action::as_str);
        let mut t = self.task_for(&f.delivery.event, f.class, f.priority, label);
        if matches!(action, Some(Action::DraftReply) | None) && self.args.config.brain == BrainKind::Local {
            // The model drafts the reply, or writes the lesson: an inference slot, reserving
            // the most tokens the request can take.
            t.slot = Slot::Inference;
            t = t.with_max_tokens(if action.is_some() { DRAFT_TOKENS_RESERVED } else { LESSON_TOKENS_RESERVED });
        }
        let starts = f.cursor == 0 && f.record.adjustments.is_empty();
        if starts && f.class == Class::Work {
            t = t.paced();
        }
        let f = self.in_flight.as_mut().expect("checked above");
        if let Some(step) = f.record.plan.steps.get_mut(f.cursor) {
            step.state = StepState::Running;
        }
        f.task = t.id;
        self.args.scheduler.submit(t);
    }

    /// Asks for a Background slot to consolidate (at most one request at a time).
    fn want_consolidation(&mut self) {
        if self.consolidating.is_some() {
            return;
        }
        let t = self.own_task(Class::Background, 0.3, "consolidate").paced();
        self.consolidating = Some(t.id);
        self.args.scheduler.submit(t);
    }

    /// Takes a chat message in for conversation memory: embedded by a `Background` task, and
    /// stored with the event's decision.
    fn take_in(&mut self, d: &Delivery, importance: f64, now: i64) {
        let e = &d.event;
        let Some(c) = self.convo.as_mut() else { return };
        if !matches!(e.domain.as_str(), "chat" | "voice") || e.from == *self.name {
            return;
        }
        let said = Said {
            seq: d.seq,
            event_id: e.id.clone(),
            room: e.room.clone(),
            from: e.from.clone(),
            text: e.text.clone(),
            at_us: e.accepted_us.min(now),
            importance: importance.clamp(0.0, 1.0),
            embedded: false,
            recalled: 0,
            last_recalled_us: 0,
        };
        c.take(said.clone());
        // Kept with the event's decision (the event stays pending until then).
        self.taking_in = Some(said);
        self.gather();
    }

    /// Asks for the embedding of what waits once a batch is full, else after gathering for
    /// [`GATHER`]: one index commit per batch, not one per message.
    fn gather(&mut self) {
        let Some(c) = self.convo.as_mut().filter(|c| c.asked.is_empty() && c.waiting_count() > 0) else { return };
        if c.pending.len() >= crate::conversation::BATCH {
            self.want_remember();
        } else if !c.gathering {
            c.gathering = true;
            self.myself.send_after(GATHER, || PersonaMsg::RememberDue);
        }
    }

    /// Asks for a `Background` slot to embed what conversation memory has waiting, and checks
    /// the wait after `max_lag`.
    fn want_remember(&mut self) {
        let t = self.own_task(Class::Background, 0.2, "remember");
        let Some(c) = self.convo.as_mut() else { return };
        c.asked.push(t.id);
        self.myself.send_after(c.max_lag, || PersonaMsg::ConversationLag);
        self.args.scheduler.submit(t);
    }

    /// A message waited past `max_lag`: the embedding also asks for a `work` slot.
    fn on_conversation_lag(&mut self) {
        let t = self.own_task(Class::Work, 0.5, "remember");
        let Some(c) = self.convo.as_mut().filter(|c| c.overdue(now_us())) else { return };
        c.asked.push(t.id);
        c.promotions += 1;
        tracing::info!(persona = %self.name, lag_ms = c.lag_us(now_us()) / 1000, "conversation memory behind: promoted to work");
        self.args.scheduler.submit(t);
    }

    /// A batch of conversation memory is embedded (or goes back in line).
    fn on_remembered(&mut self, task: TaskId, result: Result<(), String>) {
        let Some(c) = self.convo.as_mut() else { return };
        c.asked.retain(|t| *t != task);
        if let Err(e) = &result {
            tracing::warn!(persona = %self.name, error = %e, "conversation memory: embedding failed; kept to retry");
        }
        let failed = result.is_err();
        c.batch_done(result, now_us());
        if let Some(marks) = c.marks_due(!failed) {
            self.args.storage.conversation_marks(self.name.clone(), marks);
        }
        // More waiting: gather again (after a failure, at the next message or check).
        if !failed {
            self.refill_conversation();
            self.gather();
        }
    }

    /// Reads back what waits in storage once the queue runs low: at most `QUEUED` messages,
    /// off the persona's loop (`ReadBack`).
    fn refill_conversation(&mut self) {
        let Some(c) = self.convo.as_mut() else { return };
        let asked = c.to_refill();
        if asked.is_empty() {
            return;
        }
        c.reading = true;
        let (storage, name, me) = (self.args.storage.clone(), self.name.clone(), self.myself.clone());
        tokio::task::spawn_blocking(move || {
            let found = storage.conversation(&name, &asked).map_err(|e| e.to_string());
            let _ = me.cast(PersonaMsg::ReadBack { asked, found });
        });
    }

    /// What waited in storage is back in the queue.
    fn on_read_back(&mut self, asked: Vec<u64>, found: Result<Vec<Said>, String>) {
        let Some(c) = self.convo.as_mut() else { return };
        c.reading = false;
        match found {
            Ok(found) => c.refill(&asked, found),
            Err(e) => {
                tracing::warn!(persona = %self.name, error = %e, "conversation memory: reading back what waits failed")
            }
        }
        self.gather();
    }

    /// What conversation memory recalled for the recall step: into the reply, and (when it
    /// could only match words) reported.
    fn on_recalled(&mut self, task: TaskId, recall: Result<Recall, String>) {
        let Some(f) = self.in_flight.as_mut().filter(|f| f.task == task) else {
            self.args.scheduler.done(task);
            return;
        };
        let seq = f.delivery.seq;
        let mut degraded = None;
        match recall {
            Ok(r) => {
                f.conversation = r.items.into_iter().filter(|i| i.said.seq != seq).collect();
                degraded = r.degraded;
            }
            Err(e) => f.notes.push(format!("conversation memory did not answer: {e}")),
        }
        if let Some(why) = &degraded {
            f.notes.push(format!("conversation recall degraded (words only): {why}"));
        }
        let text = f
            .recalled
            .iter()
            .map(|m| m.text.clone())
            .chain(f.conversation.iter().map(|r| r.said.content()))
            .collect::<Vec<_>>()
            .join("\n");
        if let Some(c) = self.convo.as_mut() {
            if degraded.is_some() && c.degraded != degraded {
                tracing::warn!(persona = %self.name, why = degraded.as_deref().unwrap_or(""), "conversation recall is degraded: words only, not meaning");
            }
            c.recalls += 1;
            c.recalls_by_words += u64::from(degraded.is_some());
            c.degraded = degraded;
            c.marks.recall(f.conversation.iter().map(|r| r.said.seq), now_us());
            if let Some(marks) = c.marks_due(false) {
                self.args.storage.conversation_marks(self.name.clone(), marks);
            }
        }
        self.step_result(task, Ok(Some(text)));
    }

    /// One consolidation pass: working memory and recent plans into long-term memory.
    async fn consolidate(&mut self) {
        let Ok(entries) = call_t!(self.memory.actor, MemoryMsg::Snapshot, CHILD_CALL_MS) else { return };
        let storage = self.args.storage.clone();
        let name = self.name.clone();
        // Storage reads and the clustering run off the actor threads.
        let pass = tokio::task::spawn_blocking(move || {
            let plans = storage.recent_plans(&name, 200)?;
            let long_term = storage.long_term(&name, 0)?;
            let pass = consolidate(&entries, &plans, &long_term.profiles, long_term.watermark, now_us());
            Ok::<_, mindfleet_store::StorageError>((pass.watermark > long_term.watermark).then_some(pass))
        })
        .await;
        match pass {
            Ok(Ok(Some(pass))) => {
                tracing::debug!(persona = %self.name, report = ?pass.report, "consolidated");
                self.args.storage.consolidate(self.name.clone(), pass);
            }
            Ok(Ok(None)) => {}
            _ => tracing::warn!(persona = %self.name, "consolidation skipped: long-term memory unreadable"),
        }
    }

    /// Runs the granted task: a gate judgement, a consolidation pass, a plan step (adjusting the
    /// plan if it fails) or the plan's evaluation. Each is a `debug` span with the persona, the
    /// task's label and class, its wait and its run time.
    async fn on_grant(&mut self, g: Grant) {
        if (self.budget_left - g.budget_left).abs() > f64::EPSILON {
            self.budget_left = g.budget_left;
            self.retune();
        }
        let ran = g.outcome.holds_slot();
        let label = if self.judging.as_ref().is_some_and(|j| j.task == g.task) {
            "gate"
        } else if self.consolidating == Some(g.task) {
            "consolidate"
        } else if self.convo.as_ref().is_some_and(|c| c.asked.contains(&g.task)) {
            "remember"
        } else if self.study.run.as_ref().is_some_and(|r| r.task == Some(g.task)) {
            "study"
        } else if let Some(f) = self.in_flight.as_ref().filter(|f| f.task == g.task) {
            if f.choosing.is_some() {
                "plan"
            } else {
                f.record.plan.steps.get(f.cursor).map_or("evaluate", |s| s.action.as_str())
            }
        } else {
            // A task of an event that is over (the persona restarted meanwhile).
            if ran {
                self.args.scheduler.done(g.task);
            }
            return;
        };
        let span = tracing::debug_span!("task", persona = %self.name, label, class = g.class.as_str(), waited_us = g.waited_us, outcome = ?g.outcome);
        let started = Instant::now();
        self.run_grant(g).instrument(span.clone()).await;
        tracing::debug!(parent: &span, run_us = started.elapsed().as_micros() as u64, "task done");
    }

    async fn run_grant(&mut self, g: Grant) {
        let ran = g.outcome.holds_slot();
        if let Some(j) = self.judging.take_if(|j| j.task == g.task) {
            let gate = match g.outcome {
                Outcome::Run => {
                    let job = self.brain.judge_request(&self.name, &self.args.config.role, &j.delivery.event);
                    if let (Some(job), Some(llm)) = (job, self.args.llm.clone()) {
                        let judged = |task, answer| PersonaMsg::Judged { task, answer };
                        self.ask_llm(llm, g.task, |reply| LlmMsg::Classify { job, reply }, judged);
                        // The grant is held until the model answers (`PersonaMsg::Judged`).
                        self.judging = Some(j);
                        return;
                    }
                    self.brain.judge(&j.delivery.event, j.priority, &j.state)
                }
                // No budget for the brain's judgement: the deterministic scorer decides.
                Outcome::RulesOnly(_) | Outcome::Skipped(_) => {
                    GateDecision { note: "over budget: judged by rules".into(), ..score(j.priority, &j.state) }
                }
            };
            if ran {
                self.args.scheduler.done(g.task);
            }
            self.decided(j.delivery, j.backlog, j.priority, gate, j.state);
            return;
        }
        if self.convo.as_ref().is_some_and(|c| c.asked.contains(&g.task))
            && let Some(convo) = self.args.conversation.clone()
        {
            if ran {
                self.refill_conversation();
            }
            let c = self.convo.as_mut().expect("checked above");
            let batch = if ran { c.take_batch(&self.name) } else { Vec::new() };
            if batch.is_empty() {
                // The other request took the batch, or no slot was given (or what waits in
                // storage is not committed yet): done with this one.
                c.asked.retain(|t| *t != g.task);
                if ran {
                    self.args.scheduler.done(g.task);
                }
                if c.embedding.is_empty() {
                    self.gather();
                }
                return;
            }
            let (me, task, worker) = (self.myself.clone(), g.task, convo.embedding.clone());
            tokio::spawn(async move {
                let result = crate::conversation::remember(&worker, &convo.index, batch).await;
                let _ = me.cast(PersonaMsg::Remembered { task, result });
            });
            // The slot is free again at once: the embedding runs on the worker and the index's
            // thread, and holding the slot would keep the persona's own next steps waiting.
            self.args.scheduler.done(g.task);
            return;
        }
        if self.study.run.as_ref().is_some_and(|r| r.task == Some(g.task)) {
            self.run_study(g);
            return;
        }
        if self.consolidating == Some(g.task) {
            self.consolidating = None;
            if ran {
                self.consolidate().await;
                self.args.scheduler.done(g.task);
            }
            return;
        }
        let f = self.in_flight.as_mut().expect("on_grant checked the task");
        if let Some(choice) = f.choosing.take() {
            if let (Outcome::Run, Some(llm)) = (&g.outcome, self.args.llm.clone()) {
                let jobs: Vec<ClassifyJob> = choice.orders.iter().map(|(_, job)| job.clone()).collect();
                let (task, me) = (g.task, self.myself.clone());
                tokio::spawn(async move {
                    let mut answers = Vec::with_capacity(jobs.len());
                    for job in jobs {
                        match ractor::call!(llm, |reply| LlmMsg::Classify { job, reply }) {
                            Ok(Ok(c)) => answers.push(c),
                            Ok(Err(e)) => return me.cast(PersonaMsg::Planned { task, answer: Err(e) }),
                            Err(e) => {
                                let answer = Err(LlmFailure::Failed(e.to_string()));
                                return me.cast(PersonaMsg::Planned { task, answer });
                            }
                        }
                    }
                    me.cast(PersonaMsg::Planned { task, answer: Ok(answers) })
                });
                // The grant is held until the model answers (`PersonaMsg::Planned`).
                f.choosing = Some(choice);
                return;
            }
            f.notes.push("no budget for the model to choose the plan: rules plan".into());
            if ran {
                self.args.scheduler.done(g.task);
            }
            self.next_step();
            return;
        }
        if f.cursor >= f.record.plan.steps.len() {
            if let (Outcome::Run, Some(llm)) = (&g.outcome, self.args.llm.clone()) {
                let evaluation = self.brain.evaluate_outcome(&f.record);
                let ctx = LessonContext {
                    respond: RespondContext {
                        persona: &self.name,
                        role: &self.args.config.role,
                        event: &f.delivery.event,
                        recalled: &f.recalled,
                        conversation: &f.conversation,
                        found: &f.found,
                        hints: &self.refs.hint(self.args.enricher.as_deref()),
                        state: &f.state,
                    },
                    record: &f.record,
                    evaluation: &evaluation,
                    reply: f.reply.as_ref().map(|(o, _)| o.text.as_str()),
                };
                if let Some(req) = self.brain.lesson_request(&ctx) {
                    let job = GenerateJob {
                        req,
                        purpose: "evaluate".into(),
                        persona: Some(self.name.to_string()),
                        stream: None,
                    };
                    let evaluated = |task, answer| PersonaMsg::Evaluated { task, answer };
                    self.ask_llm(llm, g.task, |reply| LlmMsg::Generate { job, reply }, evaluated);
                    // The grant is held until the model answers (`PersonaMsg::Evaluated`).
                    return;
                }
            }
            if ran {
                self.args.scheduler.done(g.task);
            }
            self.complete(None);
            return;
        }
        if let Outcome::Skipped(reason) = g.outcome {
            let f = self.in_flight.as_mut().expect("checked above");
            let action = f.record.plan.steps[f.cursor].action;
            f.record.adjustments.push(AdjustmentRecord {
                step: f.cursor,
                action,
                class: ErrorClass::RateLimit,
                error: format!("skipped by the scheduler: {reason:?}"),
                adjustment: Adjustment::Abort,
                reason: "over budget: the plan stops here".into(),
                at_us: now_us(),
            });
            for s in &mut f.record.plan.steps[f.cursor..] {
                s.state = StepState::Skipped;
            }
            f.cursor = f.record.plan.steps.len();
            self.next_step();
            return;
        }
        let rules_only = match g.outcome {
            Outcome::RulesOnly(reason) => {
                let f = self.in_flight.as_mut().expect("checked above");
                let action = f.record.plan.steps[f.cursor].action.as_str();
                f.notes.push(format!("{action} ran on the rules brain ({})", reason.as_str()));
                true
            }
            _ => false,
        };
        match self.run_step(rules_only).await {
            // The grant is held until the answer comes (`PersonaMsg::Drafted`, `Searched`).
            Ok(StepRun::Waiting) => {}
            Ok(StepRun::Done(text)) => self.step_result(g.task, Ok(text)),
            Err(e) => self.step_result(g.task, Err(e)),
        }
    }

    /// The step of `task` ended: its result's text goes through the enrichment pipeline (the
    /// grant held meanwhile) before the plan goes on.
    fn step_result(&mut self, task: TaskId, result: Result<Option<String>, (ErrorClass, String)>) {
        match (result, self.args.enricher.clone()) {
            (Ok(Some(text)), Some(enricher)) if !text.trim().is_empty() => {
                let me = self.myself.clone();
                tokio::spawn(async move {
                    let enrichment = enricher.enrich(&text).await;
                    let _ = me.cast(PersonaMsg::StepEnriched { task, enrichment });
                });
            }
            (result, _) => self.step_done(task, result.map(drop)),
        }
    }

    /// What the result of the step of `task` calls for. References it names are selected at
    /// once; new candidates get a `select_reference` step before the answer is drafted.
    fn on_step_enriched(&mut self, task: TaskId, enrichment: Enrichment) {
        let Some(f) = self.in_flight.as_ref().filter(|f| f.task == task) else {
            self.args.scheduler.done(task);
            return;
        };
        let event_id = f.delivery.event.id.clone();
        let stage = format!("step:{}", f.record.plan.steps[f.cursor].action.as_str());
        let fresh = self.take_matches(&event_id, &stage, enrichment);
        let f = self.in_flight.as_mut().expect("checked above");
        let ahead = &f.record.plan.steps[f.cursor + 1..];
        let drafts_later = ahead.iter().any(|s| s.action == Action::DraftReply);
        let selects_later = ahead.iter().any(|s| s.action == Action::SelectReference);
        if !fresh.is_empty() && drafts_later && !selects_later {
            let step = Step { action: Action::SelectReference, state: StepState::Pending, contingency: false };
            f.record.plan.steps.insert(f.cursor + 1, step);
        }
        self.step_done(task, Ok(()));
    }

    /// The step of `task` is over: release its grant, then go on with the plan as its outcome
    /// says.
    fn step_done(&mut self, task: TaskId, result: Result<(), (ErrorClass, String)>) {
        let tokens = self.in_flight.as_mut().map_or(0, |f| std::mem::take(&mut f.tokens));
        if tokens > 0 {
            self.args.scheduler.done_with_tokens(task, tokens);
        } else {
            self.args.scheduler.done(task);
        }
        let Some(f) = self.in_flight.as_mut() else { return };
        let i = f.cursor;
        match result {
            Ok(()) => {
                f.record.plan.steps[i].state = StepState::Done;
                f.cursor += 1;
            }
            Err((class, message)) => {
                let action = f.record.plan.steps[i].action;
                f.record.plan.steps[i].state = StepState::Failed { class, message: message.clone() };
                let (adjustment, reason) = self.brain.adjust_plan(&f.record, i, class);
                tracing::debug!(persona = %self.name, action = action.as_str(), class = class.as_str(), adjustment = adjustment.kind(), "step failed");
                f.record.adjustments.push(AdjustmentRecord {
                    step: i,
                    action,
                    class,
                    error: message,
                    adjustment: adjustment.clone(),
                    reason,
                    at_us: now_us(),
                });
                match adjustment {
                    Adjustment::Continue => f.cursor += 1,
                    Adjustment::Contingency(actions) => {
                        let at = i + 1;
                        for (k, a) in actions.into_iter().enumerate() {
                            f.record
                                .plan
                                .steps
                                .insert(at + k, Step { action: a, state: StepState::Pending, contingency: true });
                        }
                        f.cursor = at;
                    }
                    Adjustment::Replan => {
                        f.avoid.push(action);
                        let attempt = f.record.plan.attempt + 1;
                        let plan = self.brain.formulate_plan(&PlanContext {
                            persona: &self.name,
                            role: &self.args.config.role,
                            event: &f.delivery.event,
                            avoid: &f.avoid,
                            learnings: &self.learnings,
                            attempt,
                            references: !self.refs.current.is_empty(),
                        });
                        let old = std::mem::replace(&mut f.record.plan, plan);
                        f.record.replaced.push(old);
                        f.cursor = 0;
                    }
                    Adjustment::Abort => {
                        for s in &mut f.record.plan.steps[i + 1..] {
                            s.state = StepState::Skipped;
                        }
                        f.cursor = f.record.plan.steps.len();
                    }
                }
            }
        }
        self.next_step();
    }

    /// One action of the registry; `rules_only`: without a model (the budget's hard limit).
    async fn run_step(&mut self, rules_only: bool) -> Result<StepRun, (ErrorClass, String)> {
        let f = self.in_flight.as_ref().expect("a step runs for the event in flight");
        let action = f.record.plan.steps[f.cursor].action;
        if let Some(delay) = self.args.faults.take_action_delay(action) {
            tokio::time::sleep(delay).await;
        }
        if let Some(class) = self.args.faults.take_action_failure(action) {
            return Err((class, format!("injected {} failure", class.as_str())));
        }
        let e = f.delivery.event.clone();
        let to = if e.sender_kind == SenderKind::Human { format!("@{}", e.from) } else { e.from.clone() };
        match action {
            Action::RecallMemory => {
                let got = call_t!(
                    self.memory.actor,
                    |reply| MemoryMsg::Recall { domain: e.domain.clone(), query: e.text.clone(), limit: 3, reply },
                    CHILD_CALL_MS
                )
                .map_err(|err| (ErrorClass::Timeout, format!("working memory did not answer: {err}")))?;
                let text = got.iter().map(|m| m.text.as_str()).collect::<Vec<_>>().join("\n");
                let f = self.in_flight.as_mut().expect("still in flight");
                f.recalled = got;
                let Some(ConversationArgs { index, config, .. }) = self.args.conversation.clone() else {
                    return Ok(StepRun::Done(Some(text)));
                };
                // And what was said before, from conversation memory, off the persona's loop.
                let q = RecallQuery {
                    persona: self.name.to_string(),
                    query: e.text.split_whitespace().filter(|w| !w.starts_with('@')).collect::<Vec<_>>().join(" "),
                    room: Some(e.room.clone()),
                    since_us: None,
                    limit: CONVERSATION_RECALLED,
                };
                if q.query.is_empty() {
                    return Ok(StepRun::Done(Some(text)));
                }
                let (storage, weights, wait) = (self.args.storage.clone(), config.weights, config.recall_wait);
                let (me, task) = (self.myself.clone(), f.task);
                tokio::spawn(async move {
                    let recall =
                        mindfleet_store::conversation::recall(&index, &storage, &q, &weights, Some(wait)).await;
                    let _ = me.cast(PersonaMsg::Recalled { task, recall });
                });
                Ok(StepRun::Waiting)
            }
            Action::SearchKnowledge => {
                let Some(index) = self.args.index.clone() else {
                    return Err((ErrorClass::MissingResource, "no knowledge index in this fleet".into()));
                };
                // The question in words: mentions say who is asked, not what.
                let query: String =
                    e.text.split_whitespace().filter(|w| !w.starts_with('@')).collect::<Vec<_>>().join(" ");
                if query.is_empty() {
                    return Err((ErrorClass::MissingResource, "nothing to search for".into()));
                }
                let req = RagRequest::Search(SearchRequest::new(query, KNOWLEDGE_CHUNKS));
                let (me, task) = (self.myself.clone(), f.task);
                // Off the persona's loop: the index may be busy with a long indexing run.
                tokio::spawn(async move {
                    let answer = match call_t!(index, IndexMsg::Request, SEARCH_CALL_MS, Box::new(req)) {
                        Ok(Ok(v)) => Ok(Source::relevant_hits(&v)),
                        Ok(Err(e)) => Err(e),
                        Err(e) => Err(RagError::Unavailable(format!("the index did not answer: {e}"))),
                    };
                    let _ = me.cast(PersonaMsg::Searched { task, answer });
                });
                Ok(StepRun::Waiting)
            }
            Action::StudyTopic => {
                if self.args.index.is_none() {
                    return Err((ErrorClass::MissingResource, "studying needs the knowledge index".into()));
                }
                // Studied later, in idle time: the step only notes the topic.
                let topic = study::topic_of(&e.text);
                if !self.study.note(&topic, "a plan step asked to study it", now_us(), false) {
                    return Ok(StepRun::Done(None));
                }
                Ok(StepRun::Done(Some(format!("noted for study: {topic}"))))
            }
            Action::DraftReply => {
                let ctx = RespondContext {
                    persona: &self.name,
                    role: &self.args.config.role,
                    event: &e,
                    recalled: &f.recalled,
                    conversation: &f.conversation,
                    found: &f.found,
                    hints: &self.refs.hint(self.args.enricher.as_deref()),
                    state: &f.state,
                };
                let request = if rules_only { None } else { self.brain.reply_request(&ctx) };
                let Some(req) = request else {
                    let brain: &dyn Brain = if rules_only { &RulesBrain } else { self.brain.as_ref() };
                    let text = brain.respond(&ctx);
                    let f = self.in_flight.as_mut().expect("still in flight");
                    f.draft = Some(text.clone());
                    f.drafted_by = brain.name();
                    return Ok(StepRun::Done(Some(text)));
                };
                let Some(llm) = self.args.llm.clone() else {
                    self.draft_by_rules("no LLM in this fleet".into());
                    return Ok(StepRun::Done(self.in_flight.as_ref().and_then(|f| f.draft.clone())));
                };
                let job =
                    GenerateJob { req, purpose: "reply".into(), persona: Some(self.name.to_string()), stream: None };
                let drafted = |task, answer| PersonaMsg::Drafted { task, answer };
                self.ask_llm(llm, f.task, |reply| LlmMsg::Generate { job, reply }, drafted);
                Ok(StepRun::Waiting)
            }
            Action::AskClarifyingQuestion => {
                let about: String = e.text.chars().filter(|c| *c != '@').take(60).collect();
                let text = format!("{to} {} here: could you say more about \"{about}\"?", self.name);
                self.in_flight.as_mut().expect("still in flight").draft = Some(text);
                Ok(StepRun::Done(None))
            }
            Action::NotePreoccupation => Ok(StepRun::Done(None)),
            Action::SelectReference => self.select_references(&e).map(|text| StepRun::Done(Some(text))),
            Action::PostReply => {
                let Some(text) = f.draft.clone() else {
                    return Err((ErrorClass::Unknown, "nothing drafted to post".into()));
                };
                let now = now_us();
                let reply_event = Event {
                    id: new_event_id(),
                    ts_us: now,
                    accepted_us: now,
                    domain: e.domain.clone(),
                    room: e.room.clone(),
                    from: self.name.to_string(),
                    sender_kind: SenderKind::Persona,
                    mentions: text_mentions(&text).map(str::to_string).collect(),
                    text: text.clone(),
                    persona: None,
                    priority: None,
                    urgent: false,
                    in_reply_to: Some(e.id.clone()),
                };
                let entry = OutboxEntry {
                    persona: self.name.to_string(),
                    room: e.room.clone(),
                    in_reply_to: e.id.clone(),
                    event_id: reply_event.id.clone(),
                    text,
                    brain: f.drafted_by.into(),
                    at_us: now,
                };
                self.in_flight.as_mut().expect("still in flight").reply = Some((entry, reply_event));
                Ok(StepRun::Done(None))
            }
        }
    }

    /// Sends the LLM a request from a task of its own and casts its answer back as
    /// `answered(task, answer)`, so the persona handles other messages meanwhile.
    fn ask_llm<T: Send + 'static>(
        &self,
        llm: ActorRef<LlmMsg>,
        task: TaskId,
        request: impl FnOnce(RpcReplyPort<Result<T, LlmFailure>>) -> LlmMsg + Send + 'static,
        answered: fn(TaskId, Result<T, LlmFailure>) -> PersonaMsg,
    ) {
        let me = self.myself.clone();
        tokio::spawn(async move {
            let answer = ractor::call!(llm, request).unwrap_or_else(|e| Err(LlmFailure::Failed(e.to_string())));
            let _ = me.cast(answered(task, answer));
        });
    }

    /// The model's choice of plan for the event in flight: the plan it picked with a clear
    /// margin, else the rules plan; then the first step.
    fn on_planned(&mut self, task: TaskId, answer: Result<Vec<Classification>, LlmFailure>) {
        let Some(f) = self.in_flight.as_mut().filter(|f| f.task == task && f.choosing.is_some()) else {
            self.args.scheduler.done(task);
            return;
        };
        let choice = f.choosing.take().expect("checked above");
        match answer {
            Ok(answers) => {
                let tokens: usize =
                    answers.iter().map(|c| c.tokens_in + c.scores.iter().map(|s| s.tokens).sum::<usize>()).sum();
                self.args.scheduler.done_with_tokens(task, tokens as u32);
                let scores: Vec<Vec<LabelScore>> = answers.into_iter().map(|c| c.scores).collect();
                let (plan, note) = choice.choose(&scores);
                f.record.plan = plan;
                f.notes.push(note);
            }
            Err(e) => {
                self.args.scheduler.done(task);
                f.notes.push(format!("model failed to choose the plan ({e}): rules plan"));
            }
        }
        self.next_step();
    }

    /// The model's label scores for the engagement question of `task`.
    fn on_judged(&mut self, task: TaskId, answer: Result<Classification, LlmFailure>) {
        let Some(j) = self.judging.take_if(|j| j.task == task) else {
            self.args.scheduler.done(task);
            return;
        };
        let gate = match answer {
            Ok(c) => {
                let tokens: usize = c.tokens_in + c.scores.iter().map(|s| s.tokens).sum::<usize>();
                self.args.scheduler.done_with_tokens(task, tokens as u32);
                self.brain.judge_answer(&c.scores, j.priority, &j.state)
            }
            Err(e) => {
                self.args.scheduler.done(task);
                GateDecision { note: format!("model failed ({e}): judged by rules"), ..score(j.priority, &j.state) }
            }
        };
        self.decided(j.delivery, j.backlog, j.priority, gate, j.state);
    }

    /// The `select_reference` step: selects the candidates the event's texts were offered (by
    /// tag or meaning, best first), then reads, from each selected reference the event called
    /// for, the passage that bears most on it (only where its selection authorises). Returns
    /// the passages.
    fn select_references(&mut self, e: &Event) -> Result<String, (ErrorClass, String)> {
        let Some(enricher) = self.args.enricher.clone() else {
            return Err((ErrorClass::MissingResource, "no reference catalog in this fleet".into()));
        };
        let offered: Vec<RefMatch> = self
            .refs
            .current
            .iter()
            .filter(|m| matches!(m.via, Via::Tag | Via::Semantic) && !self.refs.selected.contains_key(&m.id))
            .take(REFS_SELECTED_PER_STEP)
            .cloned()
            .collect();
        if !offered.is_empty() {
            let hint = refs::hint_block(enricher.catalog(), &offered);
            tracing::info!(persona = %self.name, event = %e.id, %hint, "selecting references");
        }
        self.select_all(&enricher, &e.id, offered);
        let f = self.in_flight.as_ref().expect("a step runs for the event in flight");
        let read = |id: &str| f.found.iter().any(|s| s.cite.starts_with(&format!("ref:{id}/")));
        let to_read: Vec<String> = self
            .refs
            .current
            .iter()
            .filter(|m| self.refs.selected.contains_key(&m.id) && !read(&m.id))
            .take(REFS_READ_PER_STEP)
            .map(|m| m.id.clone())
            .collect();
        let (mut found, mut refused) = (Vec::new(), Vec::new());
        for id in to_read {
            let Some(r) = enricher.catalog().get(&id) else { continue };
            let (passage, denied) = refs::excerpt(r, &e.text, &self.refs.authorised);
            refused.extend(denied.into_iter().map(|file| format!("@{id}/{file}")));
            if let Some(x) = passage {
                found.push(Source {
                    cite: format!("ref:{id}/{}:{}-{}", x.file, x.start_line, x.end_line),
                    kind: REFERENCE_KIND.into(),
                    symbol: Some(r.name.clone()),
                    text: x.text,
                    score: 1.0,
                });
            }
        }
        if found.is_empty() {
            return Err(if refused.is_empty() {
                (ErrorClass::MissingResource, "the references have no passage to read".into())
            } else {
                (ErrorClass::AccessDenied, format!("not authorised to read {}", refused.join(", ")))
            });
        }
        for s in &found {
            let first: String = s.text.lines().next().unwrap_or("").chars().take(160).collect();
            let name = s.symbol.as_deref().unwrap_or("");
            self.remember(e, EntryKind::Observation, format!("[{}] {name}: {}", s.cite, first.trim()), 0.6);
        }
        let text = found.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("\n");
        let f = self.in_flight.as_mut().expect("still in flight");
        if !refused.is_empty() {
            f.notes.push(format!("select_reference: not authorised to read {}", refused.join(", ")));
        }
        f.found.extend(found);
        Ok(text)
    }

    /// Drafts the reply with the rules brain instead of the model, saying why in the decision.
    fn draft_by_rules(&mut self, why: String) {
        let f = self.in_flight.as_mut().expect("a draft is for the event in flight");
        let text = RulesBrain.respond(&RespondContext {
            persona: &self.name,
            role: &self.args.config.role,
            event: &f.delivery.event,
            recalled: &f.recalled,
            conversation: &f.conversation,
            found: &f.found,
            hints: &self.refs.hint(self.args.enricher.as_deref()),
            state: &f.state,
        });
        tracing::info!(persona = %self.name, %why, "reply drafted by the rules brain");
        f.notes.push(format!("draft_reply fell back to the rules brain: {why}"));
        f.draft = Some(text);
        f.drafted_by = RulesBrain.name();
    }

    /// The model's draft for the step of `task` (or why there is none).
    fn on_drafted(&mut self, task: TaskId, answer: Result<Generation, LlmFailure>) {
        if self.in_flight.as_ref().is_none_or(|f| f.task != task) {
            // The event is over (the persona restarted meanwhile): only the grant is left.
            self.args.scheduler.done(task);
            return;
        }
        match answer {
            Ok(g) if !g.text.trim().is_empty() => {
                let f = self.in_flight.as_mut().expect("checked above");
                let to = if f.delivery.event.sender_kind == SenderKind::Human {
                    format!("@{} ", f.delivery.event.from)
                } else {
                    String::new()
                };
                f.draft = Some(format!("{to}{}", g.text.trim()));
                f.drafted_by = self.brain.name();
                f.tokens = (g.tokens_in + g.tokens_out) as u32;
            }
            Ok(g) => self.draft_by_rules(format!("the model answered nothing ({:?})", g.stop)),
            Err(e) => self.draft_by_rules(e.to_string()),
        }
        let draft = self.in_flight.as_ref().and_then(|f| f.draft.clone());
        self.step_result(task, Ok(draft));
    }

    /// The knowledge search's results: into working memory as observations, and into the reply.
    fn on_searched(&mut self, task: TaskId, answer: Result<Vec<Source>, RagError>) {
        let Some(f) = self.in_flight.as_mut().filter(|f| f.task == task) else {
            self.args.scheduler.done(task);
            return;
        };
        let e = f.delivery.event.clone();
        let result = match answer {
            Ok(found) if !found.is_empty() => {
                f.found.extend(found.iter().cloned());
                for s in &found {
                    let what = s.symbol.as_deref().map_or_else(|| s.kind.clone(), |sym| format!("{} {sym}", s.kind));
                    let first: String =
                        s.text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").chars().take(160).collect();
                    self.remember(&e, EntryKind::Observation, format!("[{}] {what}: {}", s.cite, first.trim()), 0.6);
                }
                Ok(Some(found.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("\n")))
            }
            Ok(_) => Err((ErrorClass::MissingResource, "the index has nothing relevant".into())),
            Err(RagError::Unavailable(m)) if m.starts_with("the index did not answer") => Err((ErrorClass::Timeout, m)),
            Err(RagError::Unavailable(m)) => Err((ErrorClass::MissingResource, m)),
            Err(e) => Err((ErrorClass::Unknown, e.to_string())),
        };
        self.step_result(task, result);
    }

    /// The model's lesson of the plan in flight: the plan is complete.
    fn on_evaluated(&mut self, task: TaskId, answer: Result<Generation, LlmFailure>) {
        let over = self.in_flight.as_ref().is_none_or(|f| f.task != task || f.cursor < f.record.plan.steps.len());
        if over {
            self.args.scheduler.done(task);
            return;
        }
        let lesson = match answer {
            Ok(g) => {
                self.args.scheduler.done_with_tokens(task, (g.tokens_in + g.tokens_out) as u32);
                let text = g.text.trim().to_string();
                if text.is_empty() { Err(format!("the model answered nothing ({:?})", g.stop)) } else { Ok(text) }
            }
            Err(e) => {
                self.args.scheduler.done(task);
                Err(e.to_string())
            }
        };
        match lesson {
            Ok(text) => self.complete(Some(text)),
            Err(why) => {
                self.in_flight.as_mut().expect("checked above").notes.push(format!("no lesson from the model: {why}"));
                self.complete(None);
            }
        }
    }

    /// The plan is over: evaluate it, learn from it (with the model's `lesson`, when it wrote
    /// one), and finish the event.
    fn complete(&mut self, lesson: Option<String>) {
        let Some(mut f) = self.in_flight.take() else { return };
        let evaluation = self.brain.evaluate_outcome(&f.record);
        let now = now_us();
        f.record.finished_us = Some(now);
        let reflection = match &lesson {
            Some(l) => {
                f.notes.push(format!("lesson: {l}"));
                format!("reflection: {}; lesson: {l}", evaluation.pattern)
            }
            None => format!("reflection: {}", evaluation.pattern),
        };
        self.remember(&f.delivery.event, EntryKind::Reflection, reflection, if evaluation.success { 0.8 } else { 0.9 });
        match self.learnings.iter_mut().find(|l| l.pattern == evaluation.pattern) {
            Some(l) => {
                if evaluation.success {
                    l.successes += 1;
                } else {
                    l.failures += 1;
                }
                l.last_us = now;
            }
            None => self.learnings.push(Learning {
                pattern: evaluation.pattern.clone(),
                domain: f.record.domain.clone(),
                successes: u32::from(evaluation.success),
                failures: u32::from(!evaluation.success),
                last_us: now,
            }),
        }
        let failed = !evaluation.success;
        self.note_gap(&f, failed);
        f.record.evaluation = Some(evaluation);
        self.last_plan = Some(f.record.clone());
        self.finish(f.delivery, f.backlog, f.priority, f.gate, f.state, f.reply, Some((f.record, failed, f.notes)));
    }

    /// Notes a gap in what the persona knows when the event showed one: its knowledge search
    /// found nothing relevant, its reply says it does not know, or its plan failed. The topic
    /// is the question's content words; a topic that comes up again while it waits counts up.
    fn note_gap(&mut self, f: &InFlight, failed: bool) {
        if self.args.index.is_none() {
            return;
        }
        let searched = f.record.plan.steps.iter().any(|s| s.action == Action::SearchKnowledge);
        let why = if searched && f.found.is_empty() {
            "knowledge search found nothing relevant"
        } else if f.draft.as_deref().is_some_and(study::says_unsure) {
            "its reply said it does not know"
        } else if failed {
            "its plan failed"
        } else {
            return;
        };
        let topic = study::topic_of(&f.delivery.event.text);
        if self.study.note(&topic, why, now_us(), false) {
            tracing::info!(persona = %self.name, %topic, why, event = %f.delivery.event.id, "knowledge gap noted for study");
        }
    }

    /// A person asks for study: `topic`, else the gap noted first. Answers with the topic.
    fn on_study(&mut self, topic: Option<String>) -> Result<String, String> {
        if self.args.index.is_none() {
            return Err("studying needs the knowledge index ([index] in the fleet config)".into());
        }
        let topic = match topic.as_deref().map(str::trim) {
            Some("") => return Err("the topic is empty".into()),
            Some(t) => t.to_string(),
            None => match self.study.gaps.front() {
                Some(g) => g.topic.clone(),
                None => return Err(format!("{} has noted no knowledge gap: name a topic", self.name)),
            },
        };
        self.study.note(&topic, "asked by a person", now_us(), true);
        self.study_next();
        Ok(topic)
    }

    /// Asks for a `background` slot for the next stage of study, when the persona is idle and
    /// has something to study (one stage at a time; busy, it asks again once it is done).
    fn study_next(&mut self) {
        if self.args.index.is_none() || self.busy() {
            return;
        }
        let with_model = self.study_llm().is_some();
        let mut t = self.own_task(Class::Background, 0.2, "study").preemptible();
        let Some(run) = self.study.start(now_us()).filter(|r| r.task.is_none()) else { return };
        if run.stage.uses_model() && with_model {
            t.slot = Slot::Inference;
            t = t.with_max_tokens(study::STAGE_TOKENS_RESERVED);
        }
        run.task = Some(t.id);
        self.args.scheduler.submit(t);
    }

    /// The model study asks, when this persona's brain is the local one.
    fn study_llm(&self) -> Option<ActorRef<LlmMsg>> {
        self.args.llm.clone().filter(|_| self.args.config.brain == BrainKind::Local)
    }

    /// The slot for a stage of study: run it off the persona's loop, unless work came first
    /// (then the slot goes back and the stage waits for the persona to be idle again).
    fn run_study(&mut self, g: Grant) {
        let busy = self.busy();
        let rules_only = match g.outcome {
            Outcome::Run => false,
            Outcome::RulesOnly(_) => true,
            Outcome::Skipped(why) => {
                if let Some(run) = self.study.run.as_mut() {
                    run.end(&format!("stopped: {}", why.as_str()));
                }
                if let Some(session) = self.study.finish(now_us()) {
                    self.keep_study(session);
                }
                return;
            }
        };
        let svc = study::Services {
            index: self.args.index.clone().expect("study needs the index"),
            llm: if rules_only { None } else { self.study_llm() },
            persona: self.name.to_string(),
        };
        let Some(run) = self.study.run.as_mut() else { return };
        if busy {
            run.task = None;
            self.args.scheduler.done(g.task);
            return;
        }
        let (copy, me, task) = (run.clone(), self.myself.clone(), g.task);
        self.study.stage = Some(tokio::spawn(async move {
            let step = study::run_stage(copy, svc).await;
            let _ = me.cast(PersonaMsg::Studied { task, step });
        }));
    }

    /// Higher-class work waits for the slot of the study stage of `task`: the stage stops (its
    /// model call with it) and gives the slot back, to run again later.
    fn on_preempt(&mut self, task: TaskId) {
        let Some(run) = self.study.run.as_mut().filter(|r| r.task == Some(task)) else { return };
        run.task = None;
        if let Some(stage) = self.study.stage.take() {
            stage.abort();
        }
        self.args.scheduler.done(task);
        tracing::debug!(persona = %self.name, topic = %run.session.topic, "study stage yielded its slot");
        self.myself.send_after(STUDY_RETRY, || PersonaMsg::StudyDue);
    }

    /// A stage of study is done: the next one, or the end of the session.
    fn on_studied(&mut self, task: TaskId, step: StudyStep) {
        let tokens = match &step {
            StudyStep::Asked { tokens, .. } | StudyStep::Answered { tokens, .. } => *tokens,
            StudyStep::Found(_) => 0,
        };
        self.args.scheduler.done_with_tokens(task, tokens);
        let Some(run) = self.study.run.as_mut().filter(|r| r.task == Some(task)) else { return };
        self.study.stage = None;
        if run.apply(step)
            && let Some(session) = self.study.finish(now_us())
        {
            self.keep_study(session);
        }
        self.study_next();
    }

    /// Keeps a finished session (storage, with its learning and knowledge) and appends its
    /// passed answers to the persona's training data.
    fn keep_study(&self, session: StudySession) {
        tracing::info!(
            persona = %self.name, topic = %session.topic, outcome = %session.outcome, score = session.score,
            answers = session.answers.len(), tokens = session.tokens, "study session over"
        );
        let file = study::training_file(self.args.storage.data_dir(), &self.name);
        let (name, role, copy) = (self.name.clone(), self.args.config.role.clone(), session.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = study::append_training(&file, &name, &role, &copy) {
                tracing::warn!(persona = %name, file = %file.display(), error = %e, "study: training data not written");
            }
        });
        self.args.storage.study(self.name.clone(), session.clone(), study::knowledge_of(&session));
    }

    /// Journals the decision (with the reply and plan) through the admin, updates self-state
    /// and memory, and asks for the next event.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        d: Delivery,
        backlog: usize,
        p: f64,
        gate: GateDecision,
        state: GateState,
        reply: Option<(OutboxEntry, Event)>,
        plan: Option<(PlanRecord, bool, Vec<String>)>,
    ) {
        let e = &d.event;
        let mut reason = explain(&gate, p, &state);
        let failed = plan.as_ref().is_some_and(|(_, failed, _)| *failed);
        if let Some((record, _, notes)) = &plan
            && let Some(ev) = &record.evaluation
        {
            let outcome = if ev.success { "succeeded" } else { "failed" };
            reason = format!("{reason}; plan {outcome} after {} adjustments", record.adjustments.len());
            for n in notes {
                reason = format!("{reason}; {n}");
            }
        }
        let decision = Decision {
            event_id: e.id.clone(),
            verdict: gate.verdict,
            reason: reason.clone(),
            by: gate.by(),
            priority: p,
            numbers: vec![
                ("priority".into(), p),
                ("threshold".into(), gate.threshold),
                ("score".into(), gate.score),
                ("load".into(), state.load),
                ("capacity".into(), state.capacity),
                ("focus_intensity".into(), state.focus_intensity),
                ("recent_persona_msgs".into(), state.recent_persona_msgs as f64),
            ],
            at_us: now_us(),
            references: self.refs.finish(&e.id),
        };
        let mut activity = Activity {
            event_id: e.id.clone(),
            verdict: gate.verdict.as_str().into(),
            reason,
            backlog,
            failed,
            ..Default::default()
        };
        let summary: String = e.text.chars().take(160).collect();
        match gate.verdict {
            Verdict::Engage => {
                activity.completed = true;
                activity.thought = Some(format!("{} asked in #{}: {summary}", e.from, e.room));
                activity.spoke_in = reply.as_ref().map(|(o, _)| o.room.clone());
                self.remember(e, EntryKind::Observation, format!("{} in #{}: {summary}", e.from, e.room), p);
            }
            Verdict::Defer => {
                activity.preoccupation = Some(Preoccupation {
                    concern: format!("{} in #{}: {summary}", e.from, e.room),
                    priority: p,
                    domain: e.domain.clone(),
                    event_id: e.id.clone(),
                    created_us: now_us(),
                });
                self.remember(
                    e,
                    EntryKind::Question,
                    format!("deferred: {} in #{}: {summary}", e.from, e.room),
                    p * 0.8,
                );
            }
            _ => {}
        }
        let _ = self.self_state.actor.cast(SelfStateMsg::Apply(Update::Activity(Box::new(activity))));
        let _ = self.args.admin.cast(AdminMsg::Commit(Box::new(PersonaCommit {
            persona: self.name.clone(),
            seq: d.seq,
            accepted_us: e.accepted_us,
            decision,
            reply,
            plan: plan.map(|(r, _, _)| r),
            said: self.taking_in.take().filter(|s| s.seq == d.seq).map(|mut s| {
                // Embedded already when it is no longer waiting.
                s.embedded = self.convo.as_ref().is_some_and(|c| !c.waiting(s.seq));
                s
            }),
        })));
        self.done.push_back(d.seq);
        if self.done.len() > DONE_KEPT {
            self.done.pop_front();
        }
        self.args.marker.store(0, Ordering::SeqCst);
        self.pull();
        self.study_next();
    }

    fn remember(&self, e: &Event, kind: EntryKind, text: String, importance: f64) {
        let relevance = if self.snapshot.focus.domain == e.domain { 0.5 } else { 0.0 };
        let _ = self.memory.actor.cast(MemoryMsg::Store(Draft {
            domain: e.domain.clone(),
            kind,
            text,
            importance,
            event_id: Some(e.id.clone()),
            relevance,
        }));
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
            brain: self.brain.name().into(),
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
            in_flight: self.current_event().map(|d| d.event.id.clone()),
            cadence_ms: self.cadence.as_millis() as u64,
            budget_left: self.budget_left,
            plan: self.in_flight.as_ref().map(|f| f.record.clone()).or_else(|| self.last_plan.clone()),
            references: self.args.enricher.as_ref().filter(|_| full).map(|_| self.refs.dump()),
            conversation: self.convo.as_ref().filter(|_| full).map(|c| c.dump(now_us())),
            study: self.args.index.as_ref().filter(|_| full).map(|_| self.study.dump()),
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
        let mut study = StudyBook::default();
        if args.index.is_some() {
            study.recent = args.storage.studies(&name, study::RECENT_KEPT)?.into();
        }
        let convo = match &args.conversation {
            Some(ConversationArgs { config, .. }) => {
                let (unembedded, kept) = args.storage.unembedded(&name)?;
                Some(ConversationBook::new(config.max_lag, unembedded, kept))
            }
            None => None,
        };
        Ok(PersonaState {
            snapshot: SelfStateData { dormant: args.config.dormant, ..SelfStateData::default() },
            name,
            myself,
            inbox: Child { actor: inbox, window: RestartWindow::new(sup), last_error: None },
            self_state: Child { actor: self_state, window: RestartWindow::new(sup), last_error: None },
            memory: Child { actor: memory, window: RestartWindow::new(sup), last_error: None },
            in_flight: None,
            enriching: None,
            judging: None,
            waiting: None,
            done: VecDeque::new(),
            persona_msgs: HashMap::new(),
            brain: match args.config.brain {
                BrainKind::Rules => Box::new(RulesBrain),
                BrainKind::Local => Box::new(LocalBrain),
            },
            learnings,
            last_plan: None,
            consolidating: None,
            cadence: Duration::ZERO,
            budget_left: 1.0,
            refs,
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
        myself.send_after(every.mul_f64((phase % 1000) as f64 / 1000.0), || PersonaMsg::Consolidate);
        st.retune();
        if st.convo.as_ref().is_some_and(|c| c.waiting_count() > 0) {
            // What was taken in before a restart and not embedded.
            st.want_remember();
        }
        st.pull();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<PersonaMsg>,
        msg: PersonaMsg,
        st: &mut PersonaState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PersonaMsg::Deliver(d) => st.on_deliver(d),
            PersonaMsg::Next(d, backlog) => st.on_next(d, backlog),
            PersonaMsg::SelfState(s) => {
                st.snapshot = *s;
                st.retune();
            }
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
            PersonaMsg::Turn(t) => st.on_turn(t),
            PersonaMsg::TurnOverdue(id) => st.on_turn_overdue(id),
            PersonaMsg::Study { topic, reply } => {
                let _ = reply.send(st.on_study(topic));
            }
            PersonaMsg::Studied { task, step } => st.on_studied(task, step),
            PersonaMsg::Preempt(task) => st.on_preempt(task),
            PersonaMsg::StudyDue => st.study_next(),
            PersonaMsg::Consolidate => {
                myself.send_after(st.args.config.consolidate_every, || PersonaMsg::Consolidate);
                st.want_consolidation();
            }
            PersonaMsg::Drafted { task, answer } => st.on_drafted(task, answer),
            PersonaMsg::Searched { task, answer } => st.on_searched(task, answer),
            PersonaMsg::Enriched { seq, enrichment } => st.on_enriched(seq, enrichment),
            PersonaMsg::StepEnriched { task, enrichment } => st.on_step_enriched(task, enrichment),
            PersonaMsg::Remembered { task, result } => st.on_remembered(task, result),
            PersonaMsg::ReadBack { asked, found } => st.on_read_back(asked, found),
            PersonaMsg::ConversationLag => st.on_conversation_lag(),
            PersonaMsg::RememberDue => {
                if let Some(c) = st.convo.as_mut() {
                    c.gathering = false;
                    if c.asked.is_empty() && c.waiting_count() > 0 {
                        st.want_remember();
                    }
                }
            }
            PersonaMsg::Recalled { task, recall } => st.on_recalled(task, recall),
            PersonaMsg::Judged { task, answer } => st.on_judged(task, answer),
            PersonaMsg::Planned { task, answer } => st.on_planned(task, answer),
            PersonaMsg::Evaluated { task, answer } => st.on_evaluated(task, answer),
            PersonaMsg::SetState(change) => {
                let u = match change {
                    StateChange::Dormant => Update::SetDormant(true),
                    StateChange::Wake => Update::SetDormant(false),
                    StateChange::Focus { objective, intensity } => Update::SetFocus { objective, intensity },
                };
                let _ = st.self_state.actor.cast(SelfStateMsg::Apply(u));
            }
        }
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<PersonaMsg>, st: &mut PersonaState) -> Result<(), ActorProcessingErr> {
        // Recall marks still gathering: written, as a stop loses nothing it can keep.
        if let Some(marks) = st.convo.as_mut().and_then(|c| c.marks_due(true)) {
            st.args.storage.conversation_marks(st.name.clone(), marks);
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<PersonaMsg>,
        evt: SupervisionEvent,
        st: &mut PersonaState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, error) = match evt {
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, format!("stopped unexpectedly: {}", reason.unwrap_or_else(|| "no reason".into())))
            }
            _ => return Ok(()),
        };
        match st.which(&cell) {
            Some(kind) => st.restart(kind, error).await,
            None => Ok(()), // an old incarnation's late notice
        }
    }
}
