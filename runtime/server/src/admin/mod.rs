//! The `Admin` actor: the one door for injection and introspection.
//!
//! It owns the routing table (which personas are in which room), validates where an
//! event goes, hands it to the storage writer (which acknowledges after the fsync and
//! then delivers), routes personas' finished events to storage with the room's reply
//! targets, and assembles dumps. HTTP handlers (see [`crate::http`]) only authenticate,
//! size-check and parse, then call this actor.
//!
//! Messages: [`AdminMsg`]. This file is the shell (state, start, and `handle`, which hands each
//! message to the file of its concern):
//!
//! - `inject`: events from the API, and those another node accepted for personas of this one;
//! - `routing`: who an event goes to and where they run, finished events and their replies, the
//!   persona actors coming up and going down;
//! - `ask`: introspection (`ai`), embeddings, study, state changes and faults;
//! - `dump`: gathering dumps, across nodes in a cluster;
//! - `moves`: moves and placement across nodes, rebalancing, draining;
//! - `forwarder`: the task per other node that sends what this node keeps for it.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::collections::BTreeMap;
use std::sync::Arc;

use mindfleet_core::adapter::TrainerMsg;
use mindfleet_core::cluster::{ClusterView, RoomRouter};
use mindfleet_core::config::FleetConfig;
use mindfleet_core::embedding::EmbedMsg;
use mindfleet_core::fleet::FleetMsg;
use mindfleet_core::knowledge::IndexMsg;
use mindfleet_core::llm::LlmMsg;
use mindfleet_core::messages::{AdminMsg, CoordinatorMsg, PersonaMsg, PersonaStatus};
use mindfleet_core::sched::SchedulerHandle;
use mindfleet_core::tools::ToolsMsg;
use mindfleet_store::{ForwardQueue, Storage};

mod ask;
mod dump;
mod forwarder;
mod inject;
mod moves;
mod routing;

use moves::{Moving, count_per_node};

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
    /// The trainer of adapters, with a local model.
    pub trainer: Option<ActorRef<TrainerMsg>>,
    pub index: ActorRef<IndexMsg>,
    /// The conversation index (`[conversation]` on), for `ai recall`.
    pub conversation: Option<ActorRef<IndexMsg>>,
    /// The tool host, when the fleet declares tool servers.
    pub tools: Option<ActorRef<ToolsMsg>>,
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
    trainer: Option<ActorRef<TrainerMsg>>,
    index: ActorRef<IndexMsg>,
    conversation: Option<ActorRef<IndexMsg>>,
    tools: Option<ActorRef<ToolsMsg>>,
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
            trainer: args.trainer,
            index: args.index,
            conversation: args.conversation,
            tools: args.tools,
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

    /// One line per message: each is handled in the file of its concern.
    async fn handle(
        &self,
        _myself: ActorRef<AdminMsg>,
        msg: AdminMsg,
        st: &mut AdminState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            // Injection (`inject`).
            AdminMsg::Inject(event, reply) => st.inject(event, reply),
            AdminMsg::StoreHere(request, reply) => st.store_here(*request, reply),
            // Routing (`routing`).
            AdminMsg::Commit(commit) => st.commit(commit),
            AdminMsg::Record(persona, rows) => st.storage.record(persona, rows),
            AdminMsg::RemoteClaim(claim) => {
                let _ = st.coordinator.cast(CoordinatorMsg::Claim(claim));
            }
            AdminMsg::Turn { persona, turn } => st.turn(&persona, turn),
            AdminMsg::PersonaUp { name, actor } => st.persona_up(&name, actor),
            AdminMsg::PersonaStatus { name, status, restarts, error } => {
                st.persona_status(&name, status, restarts, error)
            }
            AdminMsg::Joined(joined) => st.join_rooms(joined),
            // Questions and requests for personas (`ask`).
            AdminMsg::Ai(query, reply) if st.cluster.is_some() => st.ai_across(query, reply),
            AdminMsg::Ai(query, reply) | AdminMsg::NodeAi(query, reply) => st.ai_here(query, reply),
            AdminMsg::Embed { text, long, reply } => st.embed(text, long, reply),
            AdminMsg::Study { persona, topic, reply } => st.study(persona, topic, reply),
            AdminMsg::Train { persona, topic, reply } => st.train(persona, topic, reply),
            AdminMsg::SetState { persona, change, reply } => st.set_state(persona, change, reply),
            AdminMsg::Fault { persona, fault, reply } => st.fault(persona, fault, reply),
            // Dumps (`dump`).
            AdminMsg::Dump { persona, depth, reply } => st.dump(persona.as_deref(), depth, reply),
            AdminMsg::NodeDump { depth, reply } => st.node_dump(depth, reply),
            // Moves and placement (`moves`).
            AdminMsg::Move { persona, to, reply } => st.start_move(persona, to, reply),
            AdminMsg::Stopped(persona) => st.stopped(persona),
            AdminMsg::Stayed { persona, version, error } => st.stayed(persona, version, error),
            AdminMsg::Adopt(snapshot, reply) => st.adopt(snapshot, reply),
            AdminMsg::Adopted(done) => st.adopted(done),
            AdminMsg::Placed(placed) => st.placed(placed),
            AdminMsg::NodeLinked(node) => st.node_linked(node),
            AdminMsg::Drain { to, reply } => st.drain(to, reply),
            AdminMsg::Leave(reply) => st.leave(reply),
            AdminMsg::NodeLeaving(node) => st.node_leaving(&node),
            AdminMsg::Close(reply) => {
                st.closed = true;
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}
