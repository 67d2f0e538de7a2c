//! The `Persona` actor: supervises its `Inbox`, `SelfState` and `WorkingMemory`, runs the
//! fast-path engagement gate inline, and submits everything after the gate to the scheduler.
//!
//! One event at a time: the persona pulls the inbox's best event, decides (engage / ignore /
//! defer, journaled with the reason and the numbers), and for an engaged event waits for the
//! scheduler's grant, recalls from working memory, lets its brain write the reply, and hands
//! decision and reply to the admin, which commits both with the finished delivery in one
//! transaction.
//!
//! Supervision: a failed child is restarted with its state restored from storage; more than
//! `max_restarts` failures within `within_secs` escalate (the persona fails, and the fleet
//! supervisor restarts the whole persona).
//!
//! Messages: [`PersonaMsg`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use mindfleet_runtime::config::{PersonaConfig, SupervisionConfig};
use mindfleet_runtime::dump::{ActorsDump, ChildDump, PersonaDump};
use mindfleet_runtime::event::{Event, SenderKind, new_event_id, text_mentions};
use mindfleet_runtime::messages::{
    AdminMsg, Delivery, Fault, FaultTarget, FaultWhen, PersonaCommit, PersonaMsg, PersonaStatus,
};
use mindfleet_runtime::model::{Decision, EntryKind, OutboxEntry, Preoccupation, SelfStateData, Verdict};
use mindfleet_runtime::restart::RestartWindow;
use mindfleet_runtime::sched::{Class, Owner, SchedulerHandle, Slot, Task, TaskId};
use mindfleet_runtime::storage::Storage;
use mindfleet_runtime::time::now_us;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent, call_t};

use crate::faults::FaultBook;
use crate::gate::{
    ECHO_WINDOW_US, GateDecision, GateState, PriorityInput, SPOKE_WINDOW_US, explain, fast_gate, priority,
};
use crate::inbox::{Inbox, InboxArgs, InboxMsg};
use crate::memory::Draft;
use crate::mind::{Activity, Update, rules_reply};
use crate::self_state::{SelfState, SelfStateArgs, SelfStateMsg};
use crate::working_memory::{MemoryArgs, MemoryMsg, WorkingMemory};

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

struct InFlight {
    delivery: Delivery,
    backlog: usize,
    priority: f64,
    gate: GateDecision,
    state: GateState,
    task: TaskId,
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
    done: VecDeque<u64>,
    /// Times of persona messages seen per room (echo-storm guard).
    persona_msgs: HashMap<String, VecDeque<i64>>,
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
        self.done.contains(&seq) || self.in_flight.as_ref().is_some_and(|f| f.delivery.seq == seq)
    }

    fn spoke_recently(&self, room: &str, now: i64) -> bool {
        self.snapshot.spoke_in.get(room).is_some_and(|t| now - t < SPOKE_WINDOW_US)
    }

    fn gate_state(&mut self, room: &str, now: i64) -> GateState {
        let seen = self.persona_msgs.get_mut(room).map_or(0, |q| {
            while q.front().is_some_and(|t| now - t > ECHO_WINDOW_US) {
                q.pop_front();
            }
            q.len()
        });
        let own = self.snapshot.spoke_in.get(room).is_some_and(|t| now - t <= ECHO_WINDOW_US);
        GateState {
            mood: self.snapshot.mood,
            dormant: self.snapshot.dormant,
            load: self.snapshot.cognitive_load,
            recent_persona_msgs: seen + usize::from(own),
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
        if self.done.contains(&d.seq) || self.in_flight.as_ref().is_some_and(|f| f.delivery.seq == d.seq) {
            if self.in_flight.is_none() {
                self.pull();
            }
            return;
        }
        if self.in_flight.is_some() {
            // A hand-over from an inbox that restarted meanwhile: back in the queue it goes.
            let _ = self.inbox.actor.cast(InboxMsg::Return(d));
            return;
        }
        self.args.marker.store(d.seq, Ordering::SeqCst);
        if self.args.faults.text_triggers(&d.event.text) {
            panic!("injected fault: persona {} panics on event {}", self.name, d.event.id);
        }
        let now = now_us();
        let p = priority(&PriorityInput {
            event: &d.event,
            persona: &self.name,
            expertise: &self.args.config.expertise,
            now_us: now,
            spoke_recently: self.spoke_recently(&d.event.room, now),
        });
        let state = self.gate_state(&d.event.room, now);
        let gate = fast_gate(&d.event, &self.name, p, &state);
        if gate.verdict == Verdict::Engage {
            let e = &d.event;
            let class =
                if e.urgent || (e.sender_kind == SenderKind::Human && e.mentions.iter().any(|m| **m == *self.name)) {
                    Class::Urgent
                } else if matches!(e.domain.as_str(), "chat" | "voice") {
                    Class::Interactive
                } else {
                    Class::Work
                };
            let t = Task::new(self.name.clone(), class, p, Slot::Cheap, "respond", Owner::Persona(self.myself.clone()));
            let task = t.id;
            self.args.scheduler.submit(t);
            self.in_flight = Some(InFlight { delivery: d, backlog, priority: p, gate, state, task });
        } else {
            self.finish(d, backlog, p, gate, state, None);
        }
    }

    /// Runs the granted reply step: recall, write the reply, finish.
    async fn respond(&mut self, task: TaskId) {
        let Some(f) = self.in_flight.take_if(|f| f.task == task) else {
            self.args.scheduler.done(task);
            return;
        };
        let e = f.delivery.event.clone();
        let recalled = call_t!(
            self.memory.actor,
            |reply| MemoryMsg::Recall { domain: e.domain.clone(), query: e.text.clone(), limit: 3, reply },
            CHILD_CALL_MS
        )
        .unwrap_or_default();
        let text = rules_reply(&self.name, &self.args.config.role, &e, &recalled);
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
            brain: "rules".into(),
            at_us: now,
        };
        self.finish(f.delivery, f.backlog, f.priority, f.gate, f.state, Some((entry, reply_event)));
        self.args.scheduler.done(task);
    }

    /// Journals the decision (and reply) through the admin, updates self-state and memory,
    /// and asks for the next event.
    fn finish(
        &mut self,
        d: Delivery,
        backlog: usize,
        p: f64,
        gate: GateDecision,
        state: GateState,
        reply: Option<(OutboxEntry, Event)>,
    ) {
        let e = &d.event;
        let reason = explain(&gate, p, &state);
        let decision = Decision {
            event_id: e.id.clone(),
            verdict: gate.verdict,
            reason: reason.clone(),
            by: format!("fast_path/{}", gate.rule),
            priority: p,
            numbers: vec![
                ("priority".into(), p),
                ("threshold".into(), gate.threshold),
                ("load".into(), state.load),
                ("recent_persona_msgs".into(), state.recent_persona_msgs as f64),
            ],
            at_us: now_us(),
        };
        let mut activity = Activity {
            event_id: e.id.clone(),
            verdict: gate.verdict.as_str().into(),
            reason: reason.clone(),
            backlog,
            ..Default::default()
        };
        let summary: String = e.text.chars().take(160).collect();
        match gate.verdict {
            Verdict::Engage => {
                let objective = format!("answer {} in #{}", e.from, e.room);
                activity.engaged = Some((e.domain.clone(), objective, p.max(0.3)));
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
        })));
        self.done.push_back(d.seq);
        if self.done.len() > DONE_KEPT {
            self.done.pop_front();
        }
        self.args.marker.store(0, Ordering::SeqCst);
        self.pull();
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

    async fn dump(&self) -> PersonaDump {
        let inbox = call_t!(self.inbox.actor, InboxMsg::Stats, CHILD_CALL_MS).unwrap_or_default();
        let working_memory = call_t!(self.memory.actor, MemoryMsg::Dump, CHILD_CALL_MS).unwrap_or_default();
        let c = &self.args.config;
        PersonaDump {
            name: self.name.to_string(),
            role: c.role.clone(),
            status: PersonaStatus::Running,
            brain: "rules".into(),
            rooms: c.rooms.clone(),
            domains: c.domains.clone(),
            actors: ActorsDump {
                persona: ChildDump::running(0),
                inbox: self.inbox.dump(),
                self_state: self.self_state.dump(),
                working_memory: self.memory.dump(),
            },
            self_state: Some(self.snapshot.clone()),
            inbox,
            working_memory,
            decisions: Vec::new(),
            in_flight: self.in_flight.as_ref().map(|f| f.delivery.event.id.clone()),
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
        Ok(PersonaState {
            snapshot: SelfStateData { dormant: args.config.dormant, ..SelfStateData::default() },
            name,
            myself,
            inbox: Child { actor: inbox, window: RestartWindow::new(sup), last_error: None },
            self_state: Child { actor: self_state, window: RestartWindow::new(sup), last_error: None },
            memory: Child { actor: memory, window: RestartWindow::new(sup), last_error: None },
            in_flight: None,
            done: VecDeque::new(),
            persona_msgs: HashMap::new(),
            args,
        })
    }

    async fn post_start(&self, _myself: ActorRef<PersonaMsg>, st: &mut PersonaState) -> Result<(), ActorProcessingErr> {
        st.pull();
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<PersonaMsg>,
        msg: PersonaMsg,
        st: &mut PersonaState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PersonaMsg::Deliver(d) => st.on_deliver(d),
            PersonaMsg::Next(d, backlog) => st.on_next(d, backlog),
            PersonaMsg::SelfState(s) => st.snapshot = *s,
            PersonaMsg::Granted(g) => st.respond(g.task).await,
            PersonaMsg::Dump(reply) => {
                let _ = reply.send(st.dump().await);
            }
            PersonaMsg::Fault(f) => st.fault(f),
            PersonaMsg::Resync => drop(st.inbox.actor.cast(InboxMsg::Resync)),
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
