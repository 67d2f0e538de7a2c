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

use mindfleet_core::ai::AiQuery;
use mindfleet_core::cluster::{Ask, ClusterView, NodeMsg, REMOTE_CALL_MS, RoomRouter};
use mindfleet_core::config::FleetConfig;
use mindfleet_core::dump::{AdminDump, ChildDump, FleetDump, PersonaDump};
use mindfleet_core::embedding::{EmbedMsg, EmbedStats, Urgency};
use mindfleet_core::event::Event;
use mindfleet_core::fleet::FleetMsg;
use mindfleet_core::knowledge::{IndexMsg, IndexStats};
use mindfleet_core::llm::{LlmMsg, LlmStats};
use mindfleet_core::messages::StoreRequest;
use mindfleet_core::messages::{
    AdminMsg, CoordinatorMsg, DumpDepth, InjectAck, InjectError, PersonaMsg, PersonaStatus,
};
use mindfleet_core::sched::{SchedulerHandle, SchedulerMsg};
use mindfleet_core::time::{now_us, rfc3339};
use mindfleet_store::{FORWARD_ADOPT, Forward, ForwardQueue, HandOff, Storage, Target};

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
    /// The fleet supervisor, which starts and stops personas that move between nodes.
    pub fleet: Option<ActorRef<FleetMsg>>,
}

/// What the admin of one node of a cluster knows: the links, and where each persona runs.
#[derive(Clone)]
pub struct AdminCluster {
    pub view: ClusterView,
    /// The node of every persona of the fleet.
    pub placement: BTreeMap<String, String>,
    /// The version of each placement that changed since the fleet file's (a move counts one up).
    pub versions: BTreeMap<String, u64>,
    /// The node that decides each room's turn-taking (follows the placement).
    pub rooms: Arc<RoomRouter>,
}

impl AdminCluster {
    /// Places the personas that moved where this node's record says, `(persona, node, version)`.
    pub fn moved(&mut self, config: &FleetConfig, moved: Vec<(String, String, u64)>) {
        for (persona, node, version) in moved {
            if let Some(n) = self.placement.get_mut(&persona) {
                *n = node;
                self.versions.insert(persona, version);
            }
        }
        self.rooms.place(config, &self.placement);
    }
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
    fleet: Option<ActorRef<FleetMsg>>,
    myself: ActorRef<AdminMsg>,
    /// How many personas are placed on each node (a dump shows it).
    per_node: BTreeMap<String, usize>,
    /// Per other node, the queue of what is kept for it: replies for its personas, personas
    /// moving there.
    forwarders: BTreeMap<Arc<str>, ForwardQueue>,
    /// Personas leaving this node: where to, and who waits for the move to finish.
    moving: BTreeMap<Arc<str>, Moving>,
    /// This node is stopping: it hands its personas over and takes none.
    leaving: bool,
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
            if self.join(&event.room, name.clone()) {
                // Every node routes the room's next events to it too.
                let joined = mindfleet_core::cluster::encode(&[(event.room.clone(), name.to_string())]);
                self.tell_others(|| NodeMsg::Joined(joined.clone()), None);
            }
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

    /// The queue of what is kept for `node` (its task started on first use).
    fn forwarder(&mut self, node: &Arc<str>) -> ForwardQueue {
        let (view, storage) = (self.cluster.as_ref().map(|c| c.view.clone()), self.storage.clone());
        let admin = self.myself.clone();
        self.forwarders
            .entry(node.clone())
            .or_insert_with(|| forwarder(view.expect("a node of a cluster"), storage, admin, node.clone()))
            .clone()
    }

    /// `name` joins `room` if it was not in it; whether it was new.
    fn join(&mut self, room: &str, name: Arc<str>) -> bool {
        let members = self.rooms.entry(room.to_string()).or_default();
        if members.contains(&name) {
            return false;
        }
        members.push(name.clone());
        // Sent before the event itself: the membership is stored no later than it.
        self.storage.join_room(room.to_string(), name);
        true
    }

    /// The memberships made by directed events (not in the fleet file), `(room, persona)`.
    fn joined(&self) -> Vec<(String, String)> {
        let configured = |room: &str, name: &str| {
            self.config.personas.iter().any(|p| p.name == name && p.rooms.iter().any(|r| r == room))
        };
        let mut out = Vec::new();
        for (room, members) in &self.rooms {
            out.extend(members.iter().filter(|m| !configured(room, m)).map(|m| (room.clone(), m.to_string())));
        }
        out
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
    /// `passed` is the audience and hop count of an event another node passed on.
    fn inject_across(
        &self,
        event: Box<Event>,
        (local, remote): (Vec<Target>, BTreeMap<Arc<str>, Vec<String>>),
        passed: Option<(u32, u32)>,
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
        let (audience, hops) = passed.unwrap_or_else(|| {
            ((local.len() + agents.iter().map(|(_, _, names)| names.len()).sum::<usize>()) as u32, 0)
        });
        let here = (!local.is_empty()).then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let elsewhere = audience.saturating_sub(local.len() as u32);
            self.storage.inject_among(event.clone(), local, elsewhere, tx.into());
            rx
        });
        tokio::spawn(async move {
            let remote = agents.into_iter().map(|(node, agent, personas)| {
                let request = mindfleet_core::cluster::encode(&StoreRequest {
                    event: (*event).clone(),
                    personas: personas.clone(),
                    audience,
                    hops: hops + u32::from(passed.is_some()),
                });
                async move {
                    match call_t!(agent, NodeMsg::Store, REMOTE_CALL_MS, request) {
                        Ok(bytes) => {
                            mindfleet_core::cluster::decode::<Result<InjectAck, InjectError>>(&bytes).and_then(|r| r)
                        }
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

/// A persona leaving this node.
struct Moving {
    node: Arc<str>,
    /// Who asked, answered once the other node has stored it.
    waiting: Vec<RpcReplyPort<Result<HandOff, InjectError>>>,
}

/// How long a move waits for the persona to stop, and then for its new node to store it.
const MOVE_MS: u64 = 60_000;

impl AdminState {
    /// Refuses personas that are moving between nodes (503: their next node has them soon).
    fn not_moving(&self, names: &[Arc<str>]) -> Result<(), InjectError> {
        match names.iter().find_map(|n| Some((n, self.moving.get(n)?))) {
            Some((n, m)) => Err(InjectError::Unavailable(format!(
                "persona {n:?} is moving to node {:?}; retry in a moment",
                m.node
            ))),
            None => Ok(()),
        }
    }

    /// `persona` runs on `node` from placement `version` on.
    fn place(&mut self, persona: &str, node: &str, version: u64) {
        let Some(c) = self.cluster.as_mut() else { return };
        let Some(p) = self.personas.get_mut(persona) else { return };
        p.node = (node != c.view.me()).then(|| Arc::from(node));
        if p.node.is_some() {
            p.actor = None;
        } else {
            p.status = PersonaStatus::Starting;
        }
        c.placement.insert(persona.to_string(), node.to_string());
        c.versions.insert(persona.to_string(), version);
        c.rooms.place(&self.config, &c.placement);
        self.per_node = count_per_node(&c.placement);
    }

    /// The node a persona of this node moves to: `to` if it is up, else the up node with the
    /// fewest personas.
    fn move_target(&self, persona: &str, to: Option<&str>) -> Result<Arc<str>, InjectError> {
        let Some(c) = &self.cluster else {
            return Err(InjectError::Invalid("this fleet runs on one node: there is nowhere to move".into()));
        };
        let me = c.view.me();
        match self.personas.get(persona) {
            None => return Err(InjectError::NotFound(format!("unknown persona {persona:?}"))),
            Some(p) if p.node.is_some() => {
                return Err(InjectError::Invalid(format!(
                    "persona {persona:?} runs on node {:?}: ask that node to move it",
                    p.node.as_deref().unwrap_or_default()
                )));
            }
            Some(_) if self.moving.contains_key(persona) => {
                return Err(InjectError::Invalid(format!("persona {persona:?} is already moving")));
            }
            Some(_) => {}
        }
        let nodes = self.config.cluster_nodes();
        if let Some(to) = to {
            if to == me {
                return Err(InjectError::Invalid(format!("persona {persona:?} already runs on node {to:?}")));
            }
            if !nodes.iter().any(|n| n == to) {
                return Err(InjectError::Invalid(format!(
                    "node {to:?} is not one of the fleet's nodes ({})",
                    nodes.join(", ")
                )));
            }
            if !c.view.is_up(to) {
                return Err(InjectError::Unavailable(format!("node {to:?} is unreachable")));
            }
            if !c.view.takes_personas(to) {
                return Err(InjectError::Unavailable(format!("node {to:?} is stopping")));
            }
            return Ok(to.into());
        }
        nodes
            .iter()
            .filter(|n| c.view.takes_personas(n))
            .min_by_key(|n| self.per_node.get(*n).copied().unwrap_or(0))
            .map(|n| Arc::from(n.as_str()))
            .ok_or_else(|| InjectError::Unavailable("no other node is up (and not stopping) to take it".into()))
    }

    /// Moves every persona of this node to other nodes (`to`, else each to the one with the
    /// fewest personas), one after the other; answers with what moved, or names what did not.
    fn drain(&self, to: Option<String>, reply: RpcReplyPort<Result<Vec<HandOff>, InjectError>>) {
        let mine: Vec<String> =
            self.personas.values().filter(|p| p.node.is_none()).map(|p| p.name.to_string()).collect();
        let moves = self.move_each(mine, to);
        tokio::spawn(async move {
            let _ = reply.send(match moves.await {
                (moved, None) => Ok(moved),
                (moved, Some((persona, e))) => {
                    let done: Vec<&str> = moved.iter().map(|d| d.persona.as_str()).collect();
                    Err(InjectError::Unavailable(format!(
                        "moved {} persona(s) ({}); {persona:?} did not move: {e}",
                        done.len(),
                        done.join(", ")
                    )))
                }
            });
        });
    }

    /// Moves `personas` one after the other, each to `to` (else the node with the fewest
    /// personas then); what moved, and the first that did not, with why (the rest stay).
    fn move_each(
        &self,
        personas: Vec<String>,
        to: Option<String>,
    ) -> impl Future<Output = (Vec<HandOff>, Option<(String, InjectError)>)> + Send + 'static {
        let myself = self.myself.clone();
        async move {
            let mut moved = Vec::with_capacity(personas.len());
            for persona in personas {
                let to = to.clone();
                let r = call_t!(myself, |r| AdminMsg::Move { persona: persona.clone(), to, reply: r }, MOVE_MS)
                    .map_err(|e| InjectError::Unavailable(e.to_string()))
                    .and_then(|r| r);
                match r {
                    Ok(done) => moved.push(done),
                    Err(e) => return (moved, Some((persona, e))),
                }
            }
            (moved, None)
        }
    }

    /// The personas of this node to move to `node`, which just linked: those the fleet file
    /// pins there, then, in name order, unpinned ones while this node has two or more personas
    /// more than `node`.
    fn to_give(&self, node: &str) -> Vec<String> {
        let pinned = |name: &str| self.config.personas.iter().find(|p| p.name == name).and_then(|p| p.node.clone());
        let mine: Vec<&str> = self
            .personas
            .values()
            .filter(|p| p.node.is_none() && !self.moving.contains_key(&p.name))
            .map(|p| &*p.name)
            .collect();
        let mut give: Vec<String> =
            mine.iter().filter(|p| pinned(p).as_deref() == Some(node)).map(|p| p.to_string()).collect();
        let (mut here, mut there) =
            (mine.len() - give.len(), self.per_node.get(node).copied().unwrap_or(0) + give.len());
        for p in mine.iter().filter(|p| pinned(p).is_none()) {
            if here < there + 2 {
                break;
            }
            give.push(p.to_string());
            here -= 1;
            there += 1;
        }
        give
    }

    /// Every changed placement, to tell a node that (re)joins.
    fn placements(&self) -> Vec<(String, String, u64)> {
        let Some(c) = &self.cluster else { return Vec::new() };
        c.versions.iter().filter_map(|(p, v)| Some((p.clone(), c.placement.get(p)?.clone(), *v))).collect()
    }

    /// Casts `msg` to the agent of every other node that is up (but `except`).
    fn tell_others(&self, msg: impl Fn() -> NodeMsg, except: Option<&str>) {
        let Some(c) = &self.cluster else { return };
        for node in c.view.linked_nodes().iter().filter(|n| Some(n.as_str()) != except) {
            if let Some(agent) = c.view.agent(node) {
                let _ = agent.cast(msg());
            }
        }
    }
}

impl AdminState {
    /// Answers `query` from this node's personas.
    fn ai_here(&mut self, query: AiQuery, reply: RpcReplyPort<Result<serde_json::Value, InjectError>>) {
        match query {
            AiQuery::Cost { since_secs, buckets } => {
                let scheduler = self.scheduler.actor().clone();
                let since = Duration::from_secs(since_secs);
                tokio::spawn(async move {
                    let r = call_t!(scheduler, |reply| SchedulerMsg::Cost { since, buckets, reply }, DUMP_CALL_MS)
                        .map(|c| serde_json::to_value(c).unwrap_or_default())
                        .map_err(|e| InjectError::Storage(format!("scheduler: {e}")));
                    let _ = reply.send(r);
                });
            }
            AiQuery::Recall(q) => {
                let Some(index) = self.conversation.clone() else {
                    let _ = reply.send(Err(InjectError::Unavailable(
                        "conversation memory is off ([conversation] enabled = false)".into(),
                    )));
                    return;
                };
                if !self.personas.contains_key(q.persona.as_str()) {
                    let _ = reply.send(Err(InjectError::NotFound(format!("unknown persona {:?}", q.persona))));
                    return;
                }
                let (storage, weights) = (self.storage.clone(), self.config.conversation.weights);
                tokio::spawn(async move {
                    // A person asking waits for the model: its answer is what they asked for.
                    let r =
                        mindfleet_store::conversation::recall(&index, &storage, &q, &weights, None).await.map(|r| {
                            let mut marks = mindfleet_core::conversation::SaidMarks::default();
                            marks.recall(r.items.iter().map(|i| i.said.seq), mindfleet_core::time::now_us());
                            storage.conversation_marks(q.persona.as_str().into(), marks);
                            serde_json::json!({ "persona": q.persona, "query": q.query, "recall": r })
                        });
                    let r = r.map_err(InjectError::Unavailable);
                    let _ = reply.send(r);
                });
            }
            query => match self.dump_work(query.persona()) {
                Ok(work) => {
                    answer_from(self.dump_base().gather(work, DumpDepth::Full), query, self.storage.clone(), reply)
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
        }
    }

    /// Answers `query` for the whole cluster: a persona's from its node; a question about
    /// every persona from the cluster's dump, or (learnings, recoveries and model costs, kept
    /// by each node for its own personas) from every node's own answer.
    fn ai_across(&mut self, query: AiQuery, reply: RpcReplyPort<Result<serde_json::Value, InjectError>>) {
        if let Some(persona) = query.persona() {
            match self.elsewhere(persona) {
                Some((view, node)) => {
                    tokio::spawn(async move {
                        let _ = reply.send(mindfleet_core::cluster::ask_node(&view, &node, &Ask::Ai(query)).await);
                    });
                }
                None => self.ai_here(query, reply),
            }
            return;
        }
        match query {
            AiQuery::Cost { .. } | AiQuery::Learnings { .. } | AiQuery::Recoveries { .. } => {
                // Kept by each node for its own personas: every node's answer, joined.
                let costs = matches!(query, AiQuery::Cost { .. });
                let (tx, here) = tokio::sync::oneshot::channel();
                self.ai_here(query.clone(), tx.into());
                let view = self.cluster.as_ref().map(|c| c.view.clone()).expect("a cluster");
                let nodes: Vec<String> = self.per_node.keys().filter(|n| n.as_str() != view.me()).cloned().collect();
                tokio::spawn(async move {
                    let ask = Ask::Ai(query);
                    let theirs = futures::future::join_all(
                        nodes.iter().map(|n| mindfleet_core::cluster::ask_node(&view, n, &ask)),
                    );
                    let (mine, theirs) = tokio::join!(here, theirs);
                    let mut parts = vec![mine.unwrap_or_else(|_| Err(InjectError::Storage("admin: no answer".into())))];
                    parts.extend(theirs);
                    let parts = parts.into_iter().collect::<Result<Vec<_>, _>>();
                    let _ = reply.send(if costs { parts.and_then(merge_costs) } else { parts.map(concat_lists) });
                });
            }
            query => match self.dump_task(None, DumpDepth::Full) {
                Ok(dump) => answer_from(dump, query, self.storage.clone(), reply),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
        }
    }

    /// The node of `persona` and the view to reach it, when it runs on another node.
    fn elsewhere(&self, persona: &str) -> Option<(ClusterView, Arc<str>)> {
        let node = self.personas.get(persona)?.node.clone()?;
        Some((self.cluster.as_ref()?.view.clone(), node))
    }

    /// A dump of one persona (on whichever node) or of the fleet (on every node), to be
    /// awaited off the admin's loop.
    fn dump_task(
        &self,
        persona: Option<&str>,
        depth: DumpDepth,
    ) -> Result<impl Future<Output = Result<FleetDump, InjectError>> + Send + 'static, InjectError> {
        let remote = self.cluster_part(persona);
        // A persona of another node: only its node's part.
        let work = match (persona, &remote) {
            (Some(p), Some(c)) if c.personas.iter().any(|(n, _)| n == p) => Vec::new(),
            _ => self.dump_work(persona)?,
        };
        let base = self.dump_base();
        Ok(async move {
            let mut r = base.gather(work, depth).await;
            if let (Ok(d), Some(c)) = (&mut r, remote) {
                c.complete(d, depth).await;
            }
            r
        })
    }
}

/// Answers `query` from the dump `dump` gives (and storage), off the admin's loop.
fn answer_from(
    dump: impl Future<Output = Result<FleetDump, InjectError>> + Send + 'static,
    query: AiQuery,
    storage: Storage,
    reply: RpcReplyPort<Result<serde_json::Value, InjectError>>,
) {
    tokio::spawn(async move {
        let r = match dump.await {
            Ok(dump) => tokio::task::spawn_blocking(move || crate::ai::answer(&query, &dump, &storage))
                .await
                .map_err(|e| InjectError::Storage(e.to_string()))
                .and_then(|r| r.map_err(|e| InjectError::Storage(e.to_string()))),
            Err(e) => Err(e),
        };
        let _ = reply.send(r);
    });
}

/// Every node's `ai cost` answer, as one report ([`mindfleet_core::sched::CostReport::merge`]).
fn merge_costs(parts: Vec<serde_json::Value>) -> Result<serde_json::Value, InjectError> {
    let reports = parts
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<Vec<mindfleet_core::sched::CostReport>, _>>()
        .map_err(|e| InjectError::Storage(format!("a node's cost report: {e}")))?;
    Ok(serde_json::to_value(mindfleet_core::sched::CostReport::merge(reports)).unwrap_or_default())
}

/// The answers of every node to one question, as one: their lists joined key by key.
fn concat_lists(parts: Vec<serde_json::Value>) -> serde_json::Value {
    let mut parts = parts.into_iter();
    let mut all = parts.next().unwrap_or_default();
    for part in parts {
        let (Some(all), serde_json::Value::Object(part)) = (all.as_object_mut(), part) else { continue };
        for (k, v) in part {
            if let (Some(serde_json::Value::Array(mine)), serde_json::Value::Array(theirs)) = (all.get_mut(&k), v) {
                mine.extend(theirs);
            }
        }
    }
    all
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

    async fn pre_start(&self, myself: ActorRef<AdminMsg>, args: AdminArgs) -> Result<AdminState, ActorProcessingErr> {
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
            moving: BTreeMap::new(),
            leaving: false,
            fleet: args.fleet,
            myself,
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
                match st.route(&event).and_then(|names| st.not_moving(&names).map(|()| names)) {
                    Ok(names) => {
                        let (local, remote) = st.split(&names);
                        if remote.is_empty() {
                            st.storage.inject(event, local, reply);
                        } else {
                            st.inject_across(event, (local, remote), None, reply);
                        }
                    }
                    Err(e) => {
                        st.rejected += 1;
                        let _ = reply.send(Err(e));
                    }
                }
            }
            AdminMsg::StoreHere(request, reply) => {
                // Accepted by another node for personas of this one. One that moved away since
                // the sender last heard is passed on to its node (once at most).
                let StoreRequest { event, personas, audience, hops } = *request;
                let mut names = Vec::with_capacity(personas.len());
                for n in &personas {
                    let me = st.cluster.as_ref().map_or("", |c| c.view.me());
                    let refused = match st.personas.get_key_value(n.as_str()) {
                        Some((name, p)) if p.node.is_none() || hops == 0 => {
                            names.push(name.clone());
                            continue;
                        }
                        // Moving between other nodes as this is sent: worth a retry.
                        Some(_) => InjectError::Unavailable(format!(
                            "persona {n:?} is not on node {me:?} and was passed on once; retry"
                        )),
                        None => InjectError::NotFound(format!("persona {n:?} does not run on node {me:?}")),
                    };
                    let _ = reply.send(Err(refused));
                    return Ok(());
                }
                if let Err(e) = st.not_moving(&names) {
                    let _ = reply.send(Err(e));
                    return Ok(());
                }
                let (local, remote) = st.split(&names);
                if let Some(p) = &event.persona
                    && let Some((name, _)) = local.iter().find(|(t, _)| **t == **p)
                {
                    st.join(&event.room, name.clone());
                }
                let event = Box::new(event);
                if remote.is_empty() {
                    let elsewhere = audience.saturating_sub(local.len() as u32);
                    st.storage.inject_among(event, local, elsewhere, reply);
                } else {
                    st.inject_across(event, (local, remote), Some((audience, hops)), reply);
                }
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
                        let request =
                            StoreRequest { event: reply.clone(), personas, audience: names.len() as u32, hops: 0 };
                        let to = st.forwarder(&node);
                        forwards.push(Forward { node, request: mindfleet_core::cluster::encode(&request), to });
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
            AdminMsg::Ai(query, reply) if st.cluster.is_some() => st.ai_across(query, reply),
            AdminMsg::Ai(query, reply) | AdminMsg::NodeAi(query, reply) => st.ai_here(query, reply),
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
            AdminMsg::Study { persona, topic, reply } if st.elsewhere(&persona).is_some() => {
                let (view, node) = st.elsewhere(&persona).expect("checked");
                tokio::spawn(async move {
                    let r = mindfleet_core::cluster::ask_node(&view, &node, &Ask::Study { persona, topic })
                        .await
                        .and_then(|v| {
                            serde_json::from_value(v).map_err(|e| InjectError::Storage(format!("node {node:?}: {e}")))
                        });
                    let _ = reply.send(r);
                });
            }
            AdminMsg::SetState { persona, change, reply } if st.elsewhere(&persona).is_some() => {
                let (view, node) = st.elsewhere(&persona).expect("checked");
                tokio::spawn(async move {
                    let _ = reply.send(
                        mindfleet_core::cluster::ask_node(&view, &node, &Ask::SetState { persona, change })
                            .await
                            .map(drop),
                    );
                });
            }
            AdminMsg::Fault { persona, fault, reply } if st.elsewhere(&persona).is_some() => {
                let (view, node) = st.elsewhere(&persona).expect("checked");
                tokio::spawn(async move {
                    let _ = reply.send(
                        mindfleet_core::cluster::ask_node(&view, &node, &Ask::Fault { persona, fault }).await.map(drop),
                    );
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
            AdminMsg::Dump { persona, depth, reply } => match st.dump_task(persona.as_deref(), depth) {
                // Gathering waits on every persona: do it off the admin's loop.
                Ok(dump) => {
                    tokio::spawn(async move {
                        let _ = reply.send(dump.await);
                    });
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
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
            AdminMsg::Move { persona, to, reply } => {
                let node = match st.move_target(&persona, to.as_deref()) {
                    Ok(node) => node,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                let Some(fleet) = st.fleet.clone() else {
                    let _ = reply.send(Err(InjectError::Unavailable("no supervisor to stop the persona".into())));
                    return Ok(());
                };
                let (name, _) = st.personas.get_key_value(persona.as_str()).expect("checked by move_target");
                tracing::info!(persona = %name, to = %node, "moving a persona to another node");
                st.moving.insert(name.clone(), Moving { node, waiting: vec![reply] });
                // Stopped first, so nothing more is written for it here; what was sent before
                // goes with it.
                let myself = st.myself.clone();
                tokio::spawn(async move {
                    if let Err(e) = call_t!(fleet, FleetMsg::Stop, MOVE_MS, persona.clone()) {
                        tracing::warn!(%persona, error = %e, "the supervisor did not confirm the stop");
                    }
                    let _ = myself.cast(AdminMsg::Stopped(persona));
                });
            }
            AdminMsg::Stopped(persona) => {
                let Some((name, node)) =
                    st.moving.get_key_value(persona.as_str()).map(|(n, m)| (n.clone(), m.node.clone()))
                else {
                    return Ok(());
                };
                let version = st.cluster.as_ref().and_then(|c| c.versions.get(&persona)).copied().unwrap_or(0) + 1;
                // From here on, what comes for it is kept for its new node, behind its rows.
                st.place(&persona, &node, version);
                let queue = st.forwarder(&node);
                let (storage, myself) = (st.storage.clone(), st.myself.clone());
                tokio::spawn(async move {
                    if let Err(error) = storage.release(name.clone(), version, node.clone(), queue).await {
                        let _ =
                            myself.cast(AdminMsg::Stayed { persona: name.to_string(), version: version + 1, error });
                    }
                });
            }
            AdminMsg::Stayed { persona, version, error } => {
                // Its rows could not leave: it runs here again.
                tracing::error!(%persona, %error, "a persona could not leave this node");
                let me = st.cluster.as_ref().map_or(String::new(), |c| c.view.me().to_string());
                st.place(&persona, &me, version);
                st.storage.place(persona.as_str().into(), me, version);
                if let Some(fleet) = &st.fleet {
                    let _ = fleet.cast(FleetMsg::Start(persona.clone()));
                }
                for w in st.moving.remove(persona.as_str()).map(|m| m.waiting).unwrap_or_default() {
                    let _ = w.send(Err(InjectError::Storage(format!("persona {persona:?} stays: {error}"))));
                }
            }
            AdminMsg::Adopted(done) => {
                let Some(m) = st.moving.remove(done.persona.as_str()) else { return Ok(()) };
                tracing::info!(persona = %done.persona, node = %done.node, rows = done.rows, "persona moved");
                let placed = mindfleet_core::cluster::encode(&[(&done.persona, &done.node, done.version)]);
                st.tell_others(|| NodeMsg::Placed(placed.clone()), Some(&done.node));
                for w in m.waiting {
                    let _ = w.send(Ok(done.clone()));
                }
            }
            AdminMsg::Adopt(snapshot, reply) if st.leaving => {
                let me = st.cluster.as_ref().map_or("", |c| c.view.me());
                let _ = reply.send(Err(InjectError::Unavailable(format!(
                    "node {me:?} is stopping: persona {:?} waits for it to be back",
                    snapshot.persona
                ))));
            }
            AdminMsg::Adopt(snapshot, reply) => {
                let Some((name, _)) = st.personas.get_key_value(snapshot.persona.as_str()) else {
                    let _ = reply.send(Err(InjectError::NotFound(format!(
                        "persona {:?} is not in this node's fleet file",
                        snapshot.persona
                    ))));
                    return Ok(());
                };
                let (name, me) = (name.clone(), st.cluster.as_ref().map_or(String::new(), |c| c.view.me().to_string()));
                st.place(&name, &me, snapshot.version);
                let (storage, fleet) = (st.storage.clone(), st.fleet.clone());
                tokio::spawn(async move {
                    let r = storage.adopt(*snapshot).await.map_err(InjectError::Storage);
                    if r.is_ok()
                        && let Some(fleet) = fleet
                    {
                        let _ = fleet.cast(FleetMsg::Start(name.to_string()));
                    }
                    let _ = reply.send(r);
                });
            }
            AdminMsg::Placed(placed) => {
                let Some(me) = st.cluster.as_ref().map(|c| c.view.me().to_string()) else { return Ok(()) };
                for (persona, node, version) in placed {
                    let known = st.cluster.as_ref().and_then(|c| c.versions.get(&persona)).copied().unwrap_or(0);
                    if version <= known || !st.personas.contains_key(persona.as_str()) {
                        continue;
                    }
                    let here = st.personas.get(persona.as_str()).is_some_and(|p| p.node.is_none());
                    if node == me || here {
                        // It arrives with its rows (`Adopt`), and never leaves unasked.
                        tracing::warn!(%persona, %node, version, "a placement that disagrees with this node was ignored");
                        continue;
                    }
                    st.place(&persona, &node, version);
                    st.storage.place(persona.as_str().into(), node, version);
                }
            }
            AdminMsg::Joined(joined) => {
                for (room, persona) in joined {
                    if let Some((name, _)) = st.personas.get_key_value(persona.as_str()) {
                        let name = name.clone();
                        st.join(&room, name);
                    }
                }
            }
            AdminMsg::NodeLinked(node) => {
                let (placed, joined) = (st.placements(), st.joined());
                if !placed.is_empty() || !joined.is_empty() {
                    let node = node.clone();
                    tokio::spawn(async move {
                        // Its agent is in the process group a moment after the link is up.
                        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                        let agent = loop {
                            match mindfleet_core::cluster::agent_of(&node) {
                                Some(agent) => break agent,
                                None if tokio::time::Instant::now() > deadline => return,
                                None => tokio::time::sleep(Duration::from_millis(50)).await,
                            }
                        };
                        if !placed.is_empty() {
                            let _ = agent.cast(NodeMsg::Placed(mindfleet_core::cluster::encode(&placed)));
                        }
                        if !joined.is_empty() {
                            let _ = agent.cast(NodeMsg::Joined(mindfleet_core::cluster::encode(&joined)));
                        }
                    });
                }
                let give = if st.config.cluster.rebalance && !st.leaving { st.to_give(&node) } else { Vec::new() };
                if !give.is_empty() {
                    tracing::info!(%node, personas = ?give, "rebalancing: moving personas to a node that linked");
                    let moves = st.move_each(give, Some(node.clone()));
                    tokio::spawn(async move {
                        if let (_, Some((persona, e))) = moves.await {
                            tracing::warn!(%persona, %node, error = %e, "rebalancing: a persona did not move");
                        }
                    });
                }
            }
            AdminMsg::Drain { to, reply } => st.drain(to, reply),
            AdminMsg::Leave(reply) => {
                st.leaving = true;
                let me = st.cluster.as_ref().map_or(Vec::new(), |c| c.view.me().as_bytes().to_vec());
                st.tell_others(|| NodeMsg::Leaving(me.clone()), None);
                st.drain(None, reply);
            }
            AdminMsg::NodeLeaving(node) => {
                if let Some(c) = &st.cluster {
                    tracing::info!(%node, "a node is stopping: no persona moves there");
                    c.view.leaving(&node);
                }
            }
            AdminMsg::Close(reply) => {
                st.closed = true;
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}

/// The task that sends what is kept for `node`, in the order it was written: personas'
/// replies for the room's members there, and personas moving there with their rows. Each is
/// kept in storage (table `forwards`) until `node` has stored it, so none is lost while `node`
/// is unreachable or if this node stops: what is queued goes out together (sent in order,
/// answered in any order), what `node` could not take goes again a second later, and a
/// restarted node sends what it kept.
fn forwarder(view: ClusterView, storage: Storage, admin: ActorRef<AdminMsg>, node: Arc<str>) -> ForwardQueue {
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
                async move {
                    let answer = match r.split_first() {
                        Some((&FORWARD_ADOPT, snapshot)) => {
                            call_t!(agent, NodeMsg::Adopt, MOVE_MS, snapshot.to_vec()).map(|b| (true, b))
                        }
                        _ => call_t!(agent, NodeMsg::Store, REMOTE_CALL_MS, r).map(|b| (false, b)),
                    };
                    answer.map_err(|e| InjectError::Unavailable(e.to_string()))
                }
            });
            let answers = futures::future::join_all(sends).await;
            let mut again = Vec::new();
            for ((seq, request), answer) in queue.drain(..).zip(answers) {
                let adopt = request.first() == Some(&FORWARD_ADOPT);
                let answer = answer.and_then(|(adopt, b)| {
                    if adopt {
                        let done =
                            mindfleet_core::cluster::decode::<Result<HandOff, InjectError>>(&b).and_then(|r| r)?;
                        let _ = admin.cast(AdminMsg::Adopted(done));
                        Ok(())
                    } else {
                        mindfleet_core::cluster::decode::<Result<InjectAck, InjectError>>(&b).and_then(|r| r).map(drop)
                    }
                });
                match answer {
                    Ok(()) => storage.forwarded(node.clone(), seq),
                    Err(InjectError::Invalid(e) | InjectError::NotFound(e)) if !adopt => {
                        // Refused for good (the fleet files differ): sending it again changes nothing.
                        tracing::error!(node = %node, error = %e, "a reply was refused by its room's node");
                        storage.forwarded(node.clone(), seq);
                    }
                    Err(e) => {
                        if adopt {
                            tracing::warn!(node = %node, error = %e, "a moving persona was not stored yet; retrying");
                        }
                        again.push((seq, request));
                    }
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
            let bytes =
                view.call(node, NodeMsg::Dump, mindfleet_core::cluster::encode(&depth), DUMP_CALL_MS + 1000).await?;
            mindfleet_core::cluster::decode::<Result<FleetDump, InjectError>>(&bytes)
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
            Ok::<_, mindfleet_store::StorageError>((journals, outbox, events, storage.dead_letters()?))
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
