//! The `Admin` actor: the one door for injection and introspection.
//!
//! It owns the routing table (which personas are in which room), validates where an
//! event goes, hands it to the storage writer (which acknowledges after the fsync and
//! then delivers), routes personas' finished events to storage with the room's reply
//! targets, and assembles dumps. HTTP handlers (see [`crate::http`]) only authenticate,
//! size-check and parse, then call this actor.
//!
//! Messages: [`AdminMsg`].

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, call_t};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ai::AiQuery;
use crate::cluster::{ClusterView, NodeMsg, REMOTE_CALL_MS, StoreRequest};
use crate::config::FleetConfig;
use crate::dump::{AdminDump, ChildDump, FleetDump, PersonaDump};
use crate::embedding::{EmbedMsg, EmbedStats, Urgency};
use crate::event::Event;
use crate::knowledge::{IndexMsg, IndexStats};
use crate::llm::{LlmMsg, LlmStats};
use crate::messages::{AdminMsg, CoordinatorMsg, DumpDepth, InjectAck, InjectError, PersonaMsg, PersonaStatus};
use crate::sched::{SchedulerHandle, SchedulerMsg};
use crate::storage::{Forward, Storage, Target};
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
    /// This node's part in a fleet that spans nodes.
    pub cluster: Option<AdminCluster>,
}

/// What the admin of one node of a cluster knows: the links, and where each persona runs.
#[derive(Clone)]
pub struct AdminCluster {
    pub view: ClusterView,
    /// The node of every persona of the fleet.
    pub placement: BTreeMap<String, String>,
}

struct PersonaEntry {
    name: Arc<str>,
    /// The node it runs on, when that is another node.
    node: Option<Arc<str>>,
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
    cluster: Option<AdminCluster>,
    /// How many personas are placed on each node (a dump shows it; the placement is fixed).
    per_node: BTreeMap<String, usize>,
    /// Per other node, the queue of replies for its personas.
    forwarders: BTreeMap<Arc<str>, tokio::sync::mpsc::UnboundedSender<(u64, Vec<u8>)>>,
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
    fn route(&mut self, event: &Event) -> Result<Vec<Arc<str>>, InjectError> {
        if let Some(p) = &event.persona {
            let Some((name, _)) = self.personas.get_key_value(p.as_str()) else {
                return Err(InjectError::NotFound(format!("unknown persona {p:?}")));
            };
            let name = name.clone();
            self.join(&event.room, name.clone());
            return Ok(vec![name]);
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
        Ok(names)
    }

    /// The queue of replies for the personas of `node` (its task started on first use).
    fn forwarder(&mut self, node: &Arc<str>) -> tokio::sync::mpsc::UnboundedSender<(u64, Vec<u8>)> {
        let (view, storage) = (self.cluster.as_ref().map(|c| c.view.clone()), self.storage.clone());
        self.forwarders
            .entry(node.clone())
            .or_insert_with(|| forwarder(view.expect("a node of a cluster"), storage, node.clone()))
            .clone()
    }

    /// `name` joins `room` if it was not in it.
    fn join(&mut self, room: &str, name: Arc<str>) {
        let members = self.rooms.entry(room.to_string()).or_default();
        if !members.contains(&name) {
            members.push(name.clone());
            // Sent before the event itself: the membership is stored no later than it.
            self.storage.join_room(room.to_string(), name);
        }
    }

    /// `names` split by where they run: the targets on this node, and the names on each other
    /// node.
    fn split(&self, names: &[Arc<str>]) -> (Vec<Target>, BTreeMap<Arc<str>, Vec<String>>) {
        let mut remote: BTreeMap<Arc<str>, Vec<String>> = BTreeMap::new();
        let mut local = Vec::new();
        for n in names {
            match self.personas.get(n).and_then(|p| p.node.clone()) {
                Some(node) => remote.entry(node).or_default().push(n.to_string()),
                None => local.push(self.target(n)),
            }
        }
        (local, remote)
    }

    /// Stores `event` for `local` here and for `remote` on their nodes, and answers once every
    /// node has: accepted only if every one accepted. Refused at once (503, naming the node)
    /// when a node is unreachable, so nothing is accepted that could not be delivered.
    fn inject_across(
        &self,
        event: Box<Event>,
        local: Vec<Target>,
        remote: BTreeMap<Arc<str>, Vec<String>>,
        reply: RpcReplyPort<Result<InjectAck, InjectError>>,
    ) {
        let mut agents = Vec::with_capacity(remote.len());
        for (node, names) in remote {
            match self.cluster.as_ref().and_then(|c| c.view.agent(&node)) {
                Some(agent) => agents.push((node, agent, names)),
                None => {
                    let _ = reply.send(Err(unreachable(&node, &names)));
                    return;
                }
            }
        }
        let audience = (local.len() + agents.iter().map(|(_, _, names)| names.len()).sum::<usize>()) as u32;
        let here = (!local.is_empty()).then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let elsewhere = audience - local.len() as u32;
            self.storage.inject_among(event.clone(), local, elsewhere, tx.into());
            rx
        });
        tokio::spawn(async move {
            let remote = agents.into_iter().map(|(node, agent, personas)| {
                let request = crate::cluster::encode(&StoreRequest {
                    event: (*event).clone(),
                    personas: personas.clone(),
                    audience,
                });
                async move {
                    match call_t!(agent, NodeMsg::Store, REMOTE_CALL_MS, request) {
                        Ok(bytes) => crate::cluster::decode::<Result<InjectAck, InjectError>>(&bytes).and_then(|r| r),
                        Err(_) => Err(unreachable(&node, &personas)),
                    }
                }
            });
            let mut acks = futures::future::join_all(remote).await;
            if let Some(rx) = here {
                acks.push(rx.await.unwrap_or_else(|_| Err(InjectError::Storage("storage writer stopped".into()))));
            }
            let _ = reply.send(merge_acks(&event.id, acks));
        });
    }
}

/// The refusal of an event for personas on a node that cannot be reached.
fn unreachable(node: &str, personas: &[String]) -> InjectError {
    InjectError::Unavailable(format!(
        "node {node:?} is unreachable (it runs {}); retry when it is back",
        personas.join(", ")
    ))
}

/// One answer from the answers of every node an event went to: the first refusal, else an
/// acceptance for every persona (a duplicate only if it was one everywhere).
fn merge_acks(event_id: &str, acks: Vec<Result<InjectAck, InjectError>>) -> Result<InjectAck, InjectError> {
    let mut merged =
        InjectAck { event_id: event_id.to_string(), accepted: true, duplicate: true, personas: Vec::new() };
    for a in acks {
        let a = a?;
        merged.accepted &= a.accepted;
        merged.duplicate &= a.duplicate;
        merged.personas.extend(a.personas);
    }
    merged.personas.sort();
    Ok(merged)
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

    /// The personas of this node a dump covers: one (which must exist, here) or all.
    fn dump_work(&self, persona: Option<&str>) -> Result<DumpWork, InjectError> {
        let selected: Vec<&PersonaEntry> = match persona {
            Some(name) => {
                let p = self
                    .personas
                    .get(name)
                    .ok_or_else(|| InjectError::NotFound(format!("unknown persona {name:?}")))?;
                if let Some(node) = &p.node {
                    return Err(InjectError::NotFound(format!(
                        "persona {name:?} runs on node {node:?}: ask that node's admin"
                    )));
                }
                vec![p]
            }
            None => self.personas.values().filter(|p| p.node.is_none()).collect(),
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
            let node = args.cluster.as_ref().and_then(|c| {
                let node = c.placement.get(&p.name)?;
                (node != c.view.me()).then(|| Arc::from(node.as_str()))
            });
            personas.insert(
                name.clone(),
                PersonaEntry { name, node, actor: None, status: PersonaStatus::Starting, restarts: 0, error: None },
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
        // Replies kept for other nodes by an earlier run: sent first.
        let kept = if args.cluster.is_some() { args.storage.pending_forwards()? } else { Vec::new() };
        let mut st = AdminState {
            config: args.config,
            storage: args.storage,
            scheduler: args.scheduler,
            coordinator: args.coordinator,
            embedding: args.embedding,
            llm: args.llm,
            index: args.index,
            conversation: args.conversation,
            addr: args.addr,
            per_node: args.cluster.as_ref().map(|c| count_per_node(&c.placement)).unwrap_or_default(),
            cluster: args.cluster,
            forwarders: BTreeMap::new(),
            personas,
            rooms,
            rejected: 0,
            closed: false,
        };
        for (node, seq, request) in kept {
            let _ = st.forwarder(&Arc::from(node.as_str())).send((seq, request));
        }
        Ok(st)
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
                    Ok(names) => {
                        let (local, remote) = st.split(&names);
                        if remote.is_empty() {
                            st.storage.inject(event, local, reply);
                        } else {
                            st.inject_across(event, local, remote, reply);
                        }
                    }
                    Err(e) => {
                        st.rejected += 1;
                        let _ = reply.send(Err(e));
                    }
                }
            }
            AdminMsg::StoreHere(event, names, audience, reply) => {
                // Accepted by another node for personas of this one: they must be here.
                let mut targets = Vec::with_capacity(names.len());
                for n in &names {
                    match st.personas.get_key_value(n.as_str()) {
                        Some((name, p)) if p.node.is_none() => targets.push(name.clone()),
                        _ => {
                            let _ = reply.send(Err(InjectError::NotFound(format!(
                                "persona {n:?} does not run on node {:?}",
                                st.cluster.as_ref().map_or("", |c| c.view.me())
                            ))));
                            return Ok(());
                        }
                    }
                }
                if let Some(p) = &event.persona
                    && let Some(name) = targets.iter().find(|t| ***t == **p)
                {
                    st.join(&event.room, name.clone());
                }
                let local: Vec<Target> = targets.iter().map(|n| st.target(n)).collect();
                let elsewhere = audience.saturating_sub(local.len() as u32);
                st.storage.inject_among(event, local, elsewhere, reply);
            }
            AdminMsg::RemoteClaim(claim) => {
                let _ = st.coordinator.cast(CoordinatorMsg::Claim(claim));
            }
            AdminMsg::Turn { persona, turn } => {
                if let Some(a) = st.personas.get(persona.as_str()).and_then(|p| p.actor.clone()) {
                    let _ = a.cast(PersonaMsg::Turn(turn));
                }
            }
            AdminMsg::Commit(commit) => {
                let names: Vec<Arc<str>> = match &commit.reply {
                    Some((entry, _)) => st
                        .rooms
                        .get(&entry.room)
                        .map(|m| m.iter().filter(|n| ***n != *commit.persona).cloned().collect())
                        .unwrap_or_default(),
                    None => Vec::new(),
                };
                let (targets, remote) = st.split(&names);
                let elsewhere = (names.len() - targets.len()) as u32;
                let mut forwards = Vec::with_capacity(remote.len());
                if let Some((_, reply)) = &commit.reply {
                    for (node, personas) in remote {
                        let request = StoreRequest { event: reply.clone(), personas, audience: names.len() as u32 };
                        let to = st.forwarder(&node);
                        forwards.push(Forward { node, request: crate::cluster::encode(&request), to });
                    }
                }
                st.storage.commit(commit, targets, elsewhere, forwards);
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
            AdminMsg::Dump { persona, depth, reply } => {
                let remote = st.cluster_part(persona.as_deref());
                // A persona of another node: only its node's part.
                let here = match (&persona, &remote) {
                    (Some(p), Some(c)) if c.personas.iter().any(|(n, _)| n == p) => Ok(Vec::new()),
                    _ => st.dump_work(persona.as_deref()),
                };
                match here {
                    Ok(work) => {
                        let base = st.dump_base();
                        // Gathering waits on every persona: do it off the admin's loop.
                        tokio::spawn(async move {
                            let mut r = base.gather(work, depth).await;
                            if let (Ok(d), Some(c)) = (&mut r, remote) {
                                c.complete(d, depth).await;
                            }
                            let _ = reply.send(r);
                        });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            AdminMsg::NodeDump { depth, reply } => {
                let work = st.dump_work(None);
                let base = st.dump_base();
                let node = st.cluster.as_ref().map(|c| (c.view.clone(), st.per_node.clone()));
                tokio::spawn(async move {
                    let r = match work {
                        Ok(work) => base.gather(work, depth).await,
                        Err(e) => Err(e),
                    };
                    let _ = reply.send(r.map(|mut d| {
                        if let Some((view, per_node)) = node {
                            for p in &mut d.personas {
                                p.node = Some(view.me().to_string());
                            }
                            d.nodes = view.dump(&per_node);
                        }
                        d
                    }));
                });
            }
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

/// The task that sends personas' replies to the room's members on `node`, in the order they
/// were written. Each is kept in storage with the reply (table `forwards`) until `node` has
/// stored it, so none is lost while `node` is unreachable or if this node stops: what is queued
/// goes out together (sent in order, answered in any order), what `node` could not take goes
/// again a second later, and a restarted node sends what it kept.
fn forwarder(
    view: ClusterView,
    storage: Storage,
    node: Arc<str>,
) -> tokio::sync::mpsc::UnboundedSender<(u64, Vec<u8>)> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Vec<u8>)>();
    tokio::spawn(async move {
        let mut queue: Vec<(u64, Vec<u8>)> = Vec::new();
        loop {
            if queue.is_empty() {
                let Some(r) = rx.recv().await else { return };
                queue.push(r);
            }
            while let Ok(r) = rx.try_recv() {
                queue.push(r);
            }
            let Some(agent) = view.agent(&node) else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            // `join_all` polls them in order the first time: they are sent in order.
            let sends = queue.iter().map(|(_, r)| {
                let (agent, r) = (agent.clone(), r.clone());
                async move { call_t!(agent, NodeMsg::Store, REMOTE_CALL_MS, r) }
            });
            let answers = futures::future::join_all(sends).await;
            let mut again = Vec::new();
            for ((seq, request), answer) in queue.drain(..).zip(answers) {
                let answer = answer
                    .map_err(|e| InjectError::Unavailable(e.to_string()))
                    .and_then(|b| crate::cluster::decode::<Result<InjectAck, InjectError>>(&b))
                    .and_then(|r| r);
                match answer {
                    Ok(_) => storage.forwarded(node.clone(), seq),
                    Err(InjectError::Invalid(e) | InjectError::NotFound(e)) => {
                        // Refused for good (the fleet files differ): sending it again changes nothing.
                        tracing::error!(node = %node, error = %e, "a reply was refused by its room's node");
                        storage.forwarded(node.clone(), seq);
                    }
                    Err(_) => again.push((seq, request)),
                }
            }
            if !again.is_empty() {
                queue = again;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    tx
}

/// How many personas are placed on each node.
fn count_per_node(placement: &BTreeMap<String, String>) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for node in placement.values() {
        *n.entry(node.clone()).or_insert(0) += 1;
    }
    n
}

/// The part of a cluster dump that other nodes give: their personas, journals and links.
struct ClusterPart {
    view: ClusterView,
    /// How many personas are placed on each node.
    per_node: BTreeMap<String, usize>,
    /// The personas of other nodes the dump covers, with their node.
    personas: Vec<(String, Arc<str>)>,
}

impl AdminState {
    fn cluster_part(&self, persona: Option<&str>) -> Option<ClusterPart> {
        let c = self.cluster.as_ref()?;
        let personas = self
            .personas
            .values()
            .filter(|p| persona.is_none_or(|name| *p.name == *name))
            .filter_map(|p| Some((p.name.to_string(), p.node.clone()?)))
            .collect();
        Some(ClusterPart { view: c.view.clone(), per_node: self.per_node.clone(), personas })
    }
}

impl ClusterPart {
    /// Completes this node's dump `d` with the other nodes' parts: their personas (each with
    /// its node; placeholders, `unreachable`, for a node that does not answer), one outbox and
    /// event list for the cluster, and `nodes[]` with their links.
    async fn complete(self, d: &mut FleetDump, depth: DumpDepth) {
        let me = self.view.me().to_string();
        for p in &mut d.personas {
            p.node = Some(me.clone());
        }
        let mut nodes: Vec<Arc<str>> = self.personas.iter().map(|(_, n)| n.clone()).collect();
        nodes.sort();
        nodes.dedup();
        let view = &self.view;
        let asks = nodes.iter().map(|node| async move {
            let Some(agent) = view.agent(node) else {
                return Err(format!("node {node:?} is unreachable"));
            };
            let bytes = call_t!(agent, NodeMsg::Dump, DUMP_CALL_MS + 1000, crate::cluster::encode(&depth))
                .map_err(|e| format!("node {node:?} did not answer: {e}"))?;
            crate::cluster::decode::<Result<FleetDump, InjectError>>(&bytes)
                .and_then(|r| r)
                .map_err(|e| format!("node {node:?}: {e}"))
        });
        let answers = futures::future::join_all(asks).await;
        let mut parts: BTreeMap<Arc<str>, Result<FleetDump, String>> = nodes.into_iter().zip(answers).collect();
        for (name, node) in &self.personas {
            let found = match parts.get_mut(node) {
                Some(Ok(part)) => part.personas.iter().position(|p| p.name == *name).map(|i| part.personas.remove(i)),
                _ => None,
            };
            let p = found.unwrap_or_else(|| {
                let why = match parts.get(node) {
                    Some(Err(e)) => e.clone(),
                    _ => format!("not running on node {node:?}"),
                };
                PersonaDump::placeholder(name, PersonaStatus::Unreachable, 0, Some(why))
            });
            d.personas.push(PersonaDump { node: Some(node.to_string()), ..p });
        }
        d.personas.sort_by(|a, b| a.name.cmp(&b.name));
        let mut nodes = self.view.dump(&self.per_node);
        for (node, part) in parts {
            let Ok(part) = part else { continue };
            if let Some(n) = nodes.iter_mut().find(|n| *n.name == *node)
                && let Some(theirs) = part.nodes.first()
            {
                n.links = theirs.links.clone();
            }
            d.outbox.extend(part.outbox);
            d.recent_events.extend(part.recent_events);
            d.dead_letters.extend(part.dead_letters);
            d.admin.accepted += part.admin.accepted;
            d.admin.duplicates += part.admin.duplicates;
            d.admin.rejected += part.admin.rejected;
            d.coordination.add(&part.coordination);
        }
        d.outbox.sort_by_key(|o| std::cmp::Reverse(o.at_us));
        d.outbox.truncate(RECENT);
        d.recent_events.sort_by_key(|e| std::cmp::Reverse(e.accepted_us));
        d.recent_events.truncate(RECENT);
        d.nodes = nodes;
    }
}

/// How many outbox entries and events a dump shows.
const RECENT: usize = 100;

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
            let (outbox, events) = (storage.recent_outbox(RECENT)?, storage.recent_events(RECENT)?);
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
            nodes: Vec::new(),
        })
    }
}
