//! The `Admin` actor: the one door for injection and introspection.
//!
//! It owns the routing table (which personas are in which room), validates where an
//! event goes, hands it to the storage writer (which acknowledges after the fsync and
//! then delivers), routes personas' finished events to storage with the room's reply
//! targets, and assembles dumps. HTTP handlers (see [`crate::http`]) only authenticate,
//! size-check and parse, then call this actor.
//!
//! Messages: [`AdminMsg`].

use ractor::{Actor, ActorProcessingErr, ActorRef, call_t};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ai::AiQuery;
use crate::config::FleetConfig;
use crate::dump::{AdminDump, ChildDump, FleetDump, PersonaDump};
use crate::embedding::{EmbedMsg, EmbedStats, Urgency};
use crate::event::Event;
use crate::knowledge::{IndexMsg, IndexStats};
use crate::llm::{LlmMsg, LlmStats};
use crate::messages::{AdminMsg, CoordinatorMsg, DumpDepth, InjectError, PersonaMsg, PersonaStatus};
use crate::sched::{SchedulerHandle, SchedulerMsg};
use crate::storage::{Storage, Target};
use crate::time::{now_us, rfc3339};

/// How long a dump waits for one persona before showing it as unresponsive.
const DUMP_CALL_MS: u64 = 2000;

pub struct Admin;

pub struct AdminArgs {
    pub config: Arc<FleetConfig>,
    pub storage: Storage,
    pub scheduler: SchedulerHandle,
    pub coordinator: ActorRef<CoordinatorMsg>,
    pub embedding: ActorRef<EmbedMsg>,
    /// The LLM worker, when a persona's brain uses it.
    pub llm: Option<ActorRef<LlmMsg>>,
    pub index: ActorRef<IndexMsg>,
    /// The conversation index (`[conversation]` on), for `ai recall`.
    pub conversation: Option<ActorRef<IndexMsg>>,
    /// The address the HTTP API is bound to, once known.
    pub addr: String,
}

struct PersonaEntry {
    name: Arc<str>,
    actor: Option<ActorRef<PersonaMsg>>,
    status: PersonaStatus,
    restarts: u32,
    error: Option<String>,
}

pub struct AdminState {
    config: Arc<FleetConfig>,
    storage: Storage,
    scheduler: SchedulerHandle,
    coordinator: ActorRef<CoordinatorMsg>,
    embedding: ActorRef<EmbedMsg>,
    llm: Option<ActorRef<LlmMsg>>,
    index: ActorRef<IndexMsg>,
    conversation: Option<ActorRef<IndexMsg>>,
    addr: String,
    personas: BTreeMap<Arc<str>, PersonaEntry>,
    rooms: BTreeMap<String, Vec<Arc<str>>>,
    rejected: u64,
    closed: bool,
}

impl AdminState {
    fn target(&self, name: &Arc<str>) -> Target {
        (name.clone(), self.personas.get(name).and_then(|p| p.actor.clone()))
    }

    /// Personas an event goes to: the addressed one, else the room's members and anyone
    /// mentioned. The addressed persona joins a room it was not in.
    fn route(&mut self, event: &Event) -> Result<Vec<Target>, InjectError> {
        if let Some(p) = &event.persona {
            let Some((name, _)) = self.personas.get_key_value(p.as_str()) else {
                return Err(InjectError::NotFound(format!("unknown persona {p:?}")));
            };
            let name = name.clone();
            let members = self.rooms.entry(event.room.clone()).or_default();
            if !members.contains(&name) {
                members.push(name.clone());
                // Sent before the event itself: the membership is stored no later than it.
                self.storage.join_room(event.room.clone(), name.clone());
            }
            return Ok(vec![self.target(&name)]);
        }
        let Some(members) = self.rooms.get(&event.room) else {
            return Err(InjectError::NotFound(format!("no persona is in room {:?}", event.room)));
        };
        let mut names: Vec<Arc<str>> = members.clone();
        for m in &event.mentions {
            if let Some((name, _)) = self.personas.get_key_value(m.as_str())
                && !names.contains(name)
            {
                names.push(name.clone());
            }
        }
        Ok(names.iter().map(|n| self.target(n)).collect())
    }
}

impl AdminState {
    /// What a dump needs besides the personas.
    fn dump_base(&self) -> DumpBase {
        DumpBase {
            fleet: self.config.name.clone(),
            storage: self.storage.clone(),
            scheduler: self.scheduler.actor().clone(),
            coordinator: self.coordinator.clone(),
            embedding: self.embedding.clone(),
            llm: self.llm.clone(),
            index: self.index.clone(),
            admin: AdminDump {
                addr: self.addr.clone(),
                rooms: self.rooms.iter().map(|(r, m)| (r.clone(), m.iter().map(|n| n.to_string()).collect())).collect(),
                rejected: self.rejected,
                ..Default::default()
            },
        }
    }

    /// The personas a dump covers: one (which must exist) or all.
    fn dump_work(&self, persona: Option<&str>) -> Result<DumpWork, InjectError> {
        let selected: Vec<&PersonaEntry> = match persona {
            Some(name) => vec![
                self.personas.get(name).ok_or_else(|| InjectError::NotFound(format!("unknown persona {name:?}")))?,
            ],
            None => self.personas.values().collect(),
        };
        Ok(selected
            .into_iter()
            .map(|p| (p.name.clone(), p.actor.clone(), p.status, p.restarts, p.error.clone()))
            .collect())
    }
}

impl Actor for Admin {
    type Msg = AdminMsg;
    type State = AdminState;
    type Arguments = AdminArgs;

    async fn pre_start(&self, _myself: ActorRef<AdminMsg>, args: AdminArgs) -> Result<AdminState, ActorProcessingErr> {
        let mut personas = BTreeMap::new();
        let mut rooms: BTreeMap<String, Vec<Arc<str>>> = BTreeMap::new();
        for p in &args.config.personas {
            let name: Arc<str> = p.name.as_str().into();
            for r in &p.rooms {
                rooms.entry(r.clone()).or_default().push(name.clone());
            }
            personas.insert(
                name.clone(),
                PersonaEntry { name, actor: None, status: PersonaStatus::Starting, restarts: 0, error: None },
            );
        }
        // Memberships made by directed events in earlier runs.
        for (room, members) in args.storage.rooms()? {
            for m in members {
                if let Some((name, _)) = personas.get_key_value(m.as_str()) {
                    let list = rooms.entry(room.clone()).or_default();
                    if !list.contains(name) {
                        list.push(name.clone());
                    }
                }
            }
        }
        Ok(AdminState {
            config: args.config,
            storage: args.storage,
            scheduler: args.scheduler,
            coordinator: args.coordinator,
            embedding: args.embedding,
            llm: args.llm,
            index: args.index,
            conversation: args.conversation,
            addr: args.addr,
            personas,
            rooms,
            rejected: 0,
            closed: false,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<AdminMsg>,
        msg: AdminMsg,
        st: &mut AdminState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            AdminMsg::Inject(event, reply) => {
                if st.closed {
                    let _ = reply.send(Err(InjectError::ShuttingDown));
                    return Ok(());
                }
                match st.route(&event) {
                    Ok(targets) => st.storage.inject(event, targets, reply),
                    Err(e) => {
                        st.rejected += 1;
                        let _ = reply.send(Err(e));
                    }
                }
            }
            AdminMsg::Commit(commit) => {
                let targets = match &commit.reply {
                    Some((entry, _)) => st
                        .rooms
                        .get(&entry.room)
                        .map(|m| m.iter().filter(|n| ***n != *commit.persona).map(|n| st.target(n)).collect())
                        .unwrap_or_default(),
                    None => Vec::new(),
                };
                st.storage.commit(commit, targets);
            }
            AdminMsg::PersonaUp { name, actor } => {
                if let Some(p) = st.personas.get_mut(name.as_str()) {
                    // Commits sent to storage before this point may have found the persona
                    // unreachable; its reload goes through the writer after them.
                    let _ = actor.cast(PersonaMsg::Resync);
                    p.actor = Some(actor);
                    p.status = PersonaStatus::Running;
                }
            }
            AdminMsg::PersonaStatus { name, status, restarts, error } => {
                if let Some(p) = st.personas.get_mut(name.as_str()) {
                    if status != PersonaStatus::Running {
                        p.actor = None;
                    }
                    p.status = status;
                    p.restarts = restarts;
                    if error.is_some() {
                        p.error = error;
                    }
                }
            }
            AdminMsg::Ai(AiQuery::Cost { since_secs, buckets }, reply) => {
                let scheduler = st.scheduler.actor().clone();
                let since = Duration::from_secs(since_secs);
                tokio::spawn(async move {
                    let r = call_t!(scheduler, |reply| SchedulerMsg::Cost { since, buckets, reply }, DUMP_CALL_MS)
                        .map(|c| serde_json::to_value(c).unwrap_or_default())
                        .map_err(|e| InjectError::Storage(format!("scheduler: {e}")));
                    let _ = reply.send(r);
                });
            }
            AdminMsg::Ai(AiQuery::Recall(q), reply) => {
                let Some(index) = st.conversation.clone() else {
                    let _ = reply.send(Err(InjectError::Unavailable(
                        "conversation memory is off ([conversation] enabled = false)".into(),
                    )));
                    return Ok(());
                };
                if !st.personas.contains_key(q.persona.as_str()) {
                    let _ = reply.send(Err(InjectError::NotFound(format!("unknown persona {:?}", q.persona))));
                    return Ok(());
                }
                let (storage, weights) = (st.storage.clone(), st.config.conversation.weights);
                tokio::spawn(async move {
                    // A person asking waits for the model: its answer is what they asked for.
                    let r = crate::conversation::recall(&index, &storage, &q, &weights, None).await.map(|r| {
                        let mut marks = crate::conversation::SaidMarks::default();
                        marks.recall(r.items.iter().map(|i| i.said.seq), crate::time::now_us());
                        storage.conversation_marks(q.persona.as_str().into(), marks);
                        serde_json::json!({ "persona": q.persona, "query": q.query, "recall": r })
                    });
                    let r = r.map_err(InjectError::Unavailable);
                    let _ = reply.send(r);
                });
            }
            AdminMsg::Ai(query, reply) => {
                let base = st.dump_base();
                let work = match st.dump_work(query.persona()) {
                    Ok(w) => w,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                tokio::spawn(async move {
                    let storage = base.storage.clone();
                    let r = match base.gather(work, DumpDepth::Full).await {
                        Ok(dump) => tokio::task::spawn_blocking(move || crate::ai::answer(&query, &dump, &storage))
                            .await
                            .map_err(|e| InjectError::Storage(e.to_string()))
                            .and_then(|r| r.map_err(|e| InjectError::Storage(e.to_string()))),
                        Err(e) => Err(e),
                    };
                    let _ = reply.send(r);
                });
            }
            AdminMsg::Embed { text, long, reply } => {
                let worker = st.embedding.clone();
                tokio::spawn(async move {
                    let answer = ractor::call!(worker, |r| EmbedMsg::Embed {
                        texts: vec![text],
                        long,
                        urgency: Urgency::Normal,
                        reply: r
                    });
                    let stats = ractor::call!(worker, EmbedMsg::Stats);
                    let r = match (answer, stats) {
                        (Ok(Ok(mut e)), Ok(s)) => Ok(e.remove(0).to_json(&s.model.model)),
                        (Ok(Err(e)), _) => Err(InjectError::Unavailable(e.to_string())),
                        (Err(e), _) | (_, Err(e)) => Err(InjectError::Unavailable(format!("embedding worker: {e}"))),
                    };
                    let _ = reply.send(r);
                });
            }
            AdminMsg::Study { persona, topic, reply } => {
                let Some(actor) = st.personas.get(persona.as_str()).and_then(|p| p.actor.clone()) else {
                    let _ = reply.send(Err(InjectError::NotFound(format!("unknown or stopped persona {persona:?}"))));
                    return Ok(());
                };
                tokio::spawn(async move {
                    let r = match call_t!(actor, |r| PersonaMsg::Study { topic, reply: r }, DUMP_CALL_MS) {
                        Ok(Ok(topic)) => Ok(topic),
                        Ok(Err(why)) => Err(InjectError::Invalid(why)),
                        Err(e) => Err(InjectError::NotFound(format!("persona {persona:?} did not answer: {e}"))),
                    };
                    let _ = reply.send(r);
                });
            }
            AdminMsg::SetState { persona, change, reply } => {
                let r = match st.personas.get(persona.as_str()).and_then(|p| p.actor.clone()) {
                    Some(a) => a
                        .cast(PersonaMsg::SetState(change))
                        .map_err(|_| InjectError::NotFound(format!("persona {persona:?} is down"))),
                    None => Err(InjectError::NotFound(format!("unknown or stopped persona {persona:?}"))),
                };
                let _ = reply.send(r);
            }
            AdminMsg::Dump { persona, depth, reply } => match st.dump_work(persona.as_deref()) {
                Ok(work) => {
                    let base = st.dump_base();
                    // Gathering waits on every persona: do it off the admin's loop.
                    tokio::spawn(async move {
                        let _ = reply.send(base.gather(work, depth).await);
                    });
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            AdminMsg::Fault { persona, fault, reply } => {
                let r = if !st.config.admin.faults {
                    Err(InjectError::Invalid("fault injection is disabled (set `[admin] faults = true`)".into()))
                } else {
                    match st.personas.get(persona.as_str()).and_then(|p| p.actor.clone()) {
                        Some(a) => a
                            .cast(PersonaMsg::Fault(fault))
                            .map_err(|_| InjectError::NotFound(format!("persona {persona:?} is down"))),
                        None => Err(InjectError::NotFound(format!("unknown or stopped persona {persona:?}"))),
                    }
                };
                let _ = reply.send(r);
            }
            AdminMsg::Close(reply) => {
                st.closed = true;
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}

struct DumpBase {
    fleet: String,
    storage: Storage,
    scheduler: ActorRef<SchedulerMsg>,
    coordinator: ActorRef<CoordinatorMsg>,
    embedding: ActorRef<EmbedMsg>,
    llm: Option<ActorRef<LlmMsg>>,
    index: ActorRef<IndexMsg>,
    admin: AdminDump,
}

type DumpWork = Vec<(Arc<str>, Option<ActorRef<PersonaMsg>>, PersonaStatus, u32, Option<String>)>;

impl DumpBase {
    async fn gather(self, work: DumpWork, depth: DumpDepth) -> Result<FleetDump, InjectError> {
        let (decisions, evictions) = match depth {
            DumpDepth::Full => (50, 20),
            DumpDepth::Cards => (1, 0),
        };
        let calls = work.into_iter().map(|(name, actor, status, restarts, error)| async move {
            let live = match (&actor, status) {
                (Some(a), PersonaStatus::Running) => call_t!(a, PersonaMsg::Dump, DUMP_CALL_MS, depth).ok(),
                _ => None,
            };
            let mut d = live.unwrap_or_else(|| {
                let status = if status == PersonaStatus::Running { PersonaStatus::Restarting } else { status };
                PersonaDump::placeholder(&name, status, restarts, error.clone())
            });
            d.actors.persona.restarts = restarts;
            if d.actors.persona.last_error.is_none() {
                d.actors.persona.last_error = error;
            }
            d
        });
        let mut personas = futures::future::join_all(calls).await;
        let storage = self.storage.clone();
        let names: Vec<String> = personas.iter().map(|p| p.name.clone()).collect();
        let (journals, outbox, recent_events, dead_letters) = tokio::task::spawn_blocking(move || {
            let decisions = storage.recent_decisions_of(&names, decisions)?;
            let evictions: Result<Vec<_>, _> = match evictions {
                0 => Ok(vec![Vec::new(); names.len()]),
                n => names.iter().map(|name| storage.recent_evictions(name, n)).collect(),
            };
            let journals: Vec<_> = decisions.into_iter().zip(evictions?).collect();
            let (outbox, events) = (storage.recent_outbox(100)?, storage.recent_events(100)?);
            Ok::<_, crate::storage::StorageError>((journals, outbox, events, storage.dead_letters()?))
        })
        .await
        .map_err(|e| InjectError::Storage(e.to_string()))?
        .map_err(|e| InjectError::Storage(e.to_string()))?;
        for (p, (decisions, evictions)) in personas.iter_mut().zip(journals) {
            p.decisions = decisions;
            p.working_memory.evictions = evictions;
        }
        let storage_stats = self.storage.stats().await.map_err(|e| InjectError::Storage(e.to_string()))?;
        let scheduler = call_t!(self.scheduler, SchedulerMsg::Stats, DUMP_CALL_MS).unwrap_or_default();
        let coordination = call_t!(self.coordinator, CoordinatorMsg::Stats, DUMP_CALL_MS).unwrap_or_default();
        let embedding = call_t!(self.embedding, EmbedMsg::Stats, DUMP_CALL_MS).unwrap_or_else(|e| EmbedStats {
            status: "failed".into(),
            error: Some(e.to_string()),
            ..Default::default()
        });
        let llm = match &self.llm {
            None => LlmStats { status: "off".into(), ..Default::default() },
            Some(l) => call_t!(l, LlmMsg::Stats, DUMP_CALL_MS).unwrap_or_else(|e| LlmStats {
                status: "failed".into(),
                error: Some(e.to_string()),
                ..Default::default()
            }),
        };
        let index = call_t!(self.index, IndexMsg::Stats, DUMP_CALL_MS).unwrap_or_else(|e| IndexStats {
            status: "failed".into(),
            error: Some(e.to_string()),
            ..Default::default()
        });
        if llm.status == "degraded" {
            let why = format!("LLM unavailable: {}", llm.error.as_deref().unwrap_or("unknown"));
            for p in personas.iter_mut().filter(|p| p.brain == "local") {
                p.brain_degraded = Some(why.clone());
            }
        }
        let mut admin = self.admin;
        admin.accepted = storage_stats.accepted;
        admin.duplicates = storage_stats.duplicates;
        Ok(FleetDump {
            fleet: self.fleet,
            generated_at: rfc3339(now_us()),
            supervisor: ChildDump::running(0),
            admin,
            scheduler,
            coordination,
            embedding,
            llm,
            index,
            storage: storage_stats,
            personas,
            outbox,
            recent_events,
            dead_letters,
        })
    }
}
