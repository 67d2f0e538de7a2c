//! A fleet across nodes: where each persona runs ([`place`]), what this node knows of the
//! others ([`ClusterView`]), and the [`NodeAgent`], the one actor of a node that the other
//! nodes talk to (through ractor_cluster; its messages travel as bytes).
//!
//! Discovery is by ractor process groups in the [`SCOPE`] scope: each node's agent joins
//! [`node_group`] of its node, so any node's admin finds the agent of the node a persona is
//! placed on. A node whose link is down has no member there: events for its personas are
//! refused, never accepted and lost.
//!
//! Messages: [`NodeMsg`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort, call_t};
use ractor_cluster_derive::RactorClusterMessage;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ai::AiQuery;
use crate::config::{FleetConfig, PersonaConfig};
use crate::dump::NodeDump;
use crate::messages::{Fault, InjectError, StateChange};
use crate::time::{now_us, rfc3339};

/// The process-group scope of a fleet's nodes.
pub const SCOPE: &str = "mindfleet";

/// How long a node waits for another node's answer.
pub const REMOTE_CALL_MS: u64 = 10_000;

/// The group the agent of `node` joins.
pub fn node_group(node: &str) -> String {
    format!("node/{node}")
}

/// The agent of `node`, when its link is open (this node's own agent too); see
/// [`ClusterView::agent`] for one that also answers.
pub fn agent_of(node: &str) -> Option<ActorRef<NodeMsg>> {
    ractor::pg::get_scoped_members(&SCOPE.to_string(), &node_group(node)).into_iter().next().map(ActorRef::from)
}

/// The node each persona runs on, in the order of `personas`: its own `node = ...` if it
/// names one, else the node with the fewest personas so far (personas that name a node
/// counted first; ties go to the node listed first). A pure function of the fleet file, so
/// every node computes the same placement without asking the others.
pub fn place(personas: &[PersonaConfig], nodes: &[String]) -> Result<Vec<String>, String> {
    if nodes.is_empty() {
        return Err("the fleet names no node: set `[cluster] nodes` or `node = ...` on a persona".into());
    }
    let mut load: Vec<usize> = vec![0; nodes.len()];
    for p in personas {
        if let Some(n) = &p.node {
            let i = nodes.iter().position(|x| x == n).ok_or_else(|| {
                format!("persona {:?}: node {n:?} is not one of the fleet's nodes ({})", p.name, nodes.join(", "))
            })?;
            load[i] += 1;
        }
    }
    Ok(personas
        .iter()
        .map(|p| match &p.node {
            Some(n) => n.clone(),
            None => {
                let i = (0..nodes.len()).min_by_key(|&i| (load[i], i)).expect("nodes is not empty");
                load[i] += 1;
                nodes[i].clone()
            }
        })
        .collect())
}

/// One other node as this node sees it.
#[derive(Debug, Clone, Default)]
struct Link {
    /// Its session is ready.
    up: bool,
    /// It failed the last liveness check (its socket is open, it does not answer).
    silent: bool,
    /// It is stopping and hands its personas over: it takes none.
    leaving: bool,
    addr: String,
    since_us: Option<i64>,
    error: Option<String>,
}

impl Link {
    fn reachable(&self) -> bool {
        self.up && !self.silent
    }
}

/// Why a node that keeps its link open counts as unreachable.
pub const SILENT: &str = "no answer to the liveness check";

/// What this node knows of the cluster's nodes: which are linked, since when. Updated by the
/// node server's events, read by dumps.
#[derive(Clone)]
pub struct ClusterView {
    me: Arc<str>,
    links: Arc<Mutex<BTreeMap<String, Link>>>,
}

impl ClusterView {
    /// This node `me` among the fleet's `nodes`, none of the others linked yet.
    pub fn new(me: &str, nodes: &[String]) -> Self {
        let links = nodes
            .iter()
            .filter(|n| n.as_str() != me)
            .map(|n| (n.clone(), Link { error: Some("not joined yet".into()), ..Default::default() }))
            .collect();
        ClusterView { me: me.into(), links: Arc::new(Mutex::new(links)) }
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    fn links(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Link>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The link to `node` is ready.
    pub fn linked(&self, node: &str, addr: &str) {
        if node == &*self.me {
            return;
        }
        let mut links = self.links();
        let l = links.entry(node.to_string()).or_default();
        *l = Link { up: true, addr: addr.to_string(), since_us: Some(now_us()), ..Default::default() };
    }

    /// The link to `node` dropped; whether it was up.
    pub fn unlinked(&self, node: &str, why: &str) -> bool {
        let mut links = self.links();
        let Some(l) = links.get_mut(node).filter(|l| l.up) else { return false };
        l.up = false;
        l.since_us = Some(now_us());
        l.error = Some(why.to_string());
        true
    }

    /// Whether `node` answered its last liveness check (a node that did not is treated as
    /// unreachable until it does); whether that changed.
    pub fn answered(&self, node: &str, ok: bool) -> bool {
        let mut links = self.links();
        let Some(l) = links.get_mut(node).filter(|l| l.up && l.silent == ok) else { return false };
        l.silent = !ok;
        l.since_us = Some(now_us());
        l.error = (!ok).then(|| SILENT.to_string());
        true
    }

    /// Whether `node` is this one, or linked and answering.
    pub fn is_up(&self, node: &str) -> bool {
        node == &*self.me || self.links().get(node).is_some_and(Link::reachable)
    }

    /// `node` said it is stopping (until its link comes up again).
    pub fn leaving(&self, node: &str) {
        if let Some(l) = self.links().get_mut(node) {
            l.leaving = true;
        }
    }

    /// Whether `node` is another node that is up and not stopping: one a persona can move to.
    pub fn takes_personas(&self, node: &str) -> bool {
        node != &*self.me && self.links().get(node).is_some_and(|l| l.reachable() && !l.leaving)
    }

    /// The agent of `node`, when it is up.
    pub fn agent(&self, node: &str) -> Option<ActorRef<NodeMsg>> {
        if self.is_up(node) { agent_of(node) } else { None }
    }

    /// Sends `request` in a `variant` message to the agent of `node` and waits up to `wait_ms`
    /// for its answer; why not, naming the node.
    pub async fn call(
        &self,
        node: &str,
        variant: fn(Vec<u8>, RpcReplyPort<Vec<u8>>) -> NodeMsg,
        request: Vec<u8>,
        wait_ms: u64,
    ) -> Result<Vec<u8>, String> {
        let agent = self.agent(node).ok_or_else(|| format!("node {node:?} is unreachable"))?;
        call_t!(agent, variant, wait_ms, request).map_err(|e| format!("node {node:?} did not answer: {e}"))
    }

    /// The nodes this node has an open link to (answering or not).
    pub fn linked_nodes(&self) -> Vec<String> {
        self.links().iter().filter(|(_, l)| l.up).map(|(n, _)| n.clone()).collect()
    }

    /// Every node, this one first, as a dump shows them; `personas` counts the personas placed
    /// on each.
    pub fn dump(&self, personas: &BTreeMap<String, usize>) -> Vec<NodeDump> {
        let links = self.links();
        let me = NodeDump {
            name: self.me.to_string(),
            status: "self".into(),
            personas: personas.get(&*self.me).copied().unwrap_or(0),
            links: links.iter().filter(|(_, l)| l.reachable()).map(|(n, _)| n.clone()).collect(),
            ..Default::default()
        };
        let others = links.iter().map(|(n, l)| NodeDump {
            name: n.clone(),
            status: if l.reachable() { "up" } else { "unreachable" }.into(),
            addr: l.addr.clone(),
            personas: personas.get(n).copied().unwrap_or(0),
            links: if l.reachable() { vec![self.me.to_string()] } else { Vec::new() },
            since: l.since_us.map(rfc3339),
            error: l.error.clone(),
        });
        std::iter::once(me).chain(others).collect()
    }
}

/// Which node decides turn-taking in each room: the first node, in the fleet's order, that
/// runs a member of the room and is linked. Nodes that see the same links and placement pick
/// the same one; a room none of whose members' nodes is linked is decided on each node for its
/// own members.
pub struct RoomRouter {
    view: ClusterView,
    order: Vec<String>,
    /// Room -> the nodes that run its members, in the fleet's order (replaced when a persona
    /// moves).
    rooms: Mutex<BTreeMap<String, Vec<String>>>,
}

impl RoomRouter {
    pub fn new(view: ClusterView, config: &FleetConfig, placement: &BTreeMap<String, String>) -> Self {
        let router = RoomRouter { view, order: config.cluster_nodes(), rooms: Mutex::default() };
        router.place(config, placement);
        router
    }

    /// Recomputes the nodes of each room from `placement`.
    pub fn place(&self, config: &FleetConfig, placement: &BTreeMap<String, String>) {
        let mut rooms: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for p in &config.personas {
            let Some(node) = placement.get(&p.name) else { continue };
            for r in &p.rooms {
                let nodes = rooms.entry(r.clone()).or_default();
                if !nodes.contains(node) {
                    nodes.push(node.clone());
                }
            }
        }
        for nodes in rooms.values_mut() {
            nodes.sort_by_key(|n| self.order.iter().position(|o| o == n));
        }
        *self.rooms.lock().unwrap_or_else(|e| e.into_inner()) = rooms;
    }

    pub fn me(&self) -> &str {
        self.view.me()
    }

    pub fn agent(&self, node: &str) -> Option<ActorRef<NodeMsg>> {
        self.view.agent(node)
    }

    /// The other node that decides `room`, if it is not this one.
    pub fn coordinator_of(&self, room: &str) -> Option<String> {
        let rooms = self.rooms.lock().unwrap_or_else(|e| e.into_inner());
        let node = rooms.get(room)?.iter().find(|n| self.view.is_up(n))?;
        (node != self.view.me()).then(|| node.clone())
    }
}

/// Another node that serves this one (`[cluster] embedding`, `[cluster] index`), and the view
/// to reach it.
pub struct Serving {
    pub view: ClusterView,
    pub node: String,
}

impl Serving {
    /// Sends `request` in a `variant` message to its agent, waiting up to `wait`; the answer.
    pub async fn ask(
        &self,
        variant: fn(Vec<u8>, RpcReplyPort<Vec<u8>>) -> NodeMsg,
        request: Vec<u8>,
        wait: Duration,
    ) -> Result<Vec<u8>, String> {
        self.view.call(&self.node, variant, request, wait.as_millis() as u64).await
    }
}

/// What travels between nodes: JSON (self-describing, so a field added later does not break
/// a node that does not know it yet).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("wire types serialize")
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, InjectError> {
    serde_json::from_slice(bytes).map_err(|e| InjectError::Storage(format!("undecodable cluster message: {e}")))
}

/// The node agent's messages: the only messages that cross nodes.
#[derive(RactorClusterMessage)]
pub enum NodeMsg {
    /// Store an event for personas of this node ([`StoreRequest`]); answers with the JSON
    /// of `Result<InjectAck, InjectError>` once it is durably stored here.
    #[rpc]
    Store(Vec<u8>, RpcReplyPort<Vec<u8>>),
    /// This node's own part of a dump (the JSON of `DumpDepth`); answers with the JSON of
    /// `Result<FleetDump, InjectError>`.
    #[rpc]
    Dump(Vec<u8>, RpcReplyPort<Vec<u8>>),
    /// The liveness check: answers with the number it was sent.
    #[rpc]
    Ping(u64, RpcReplyPort<u64>),
    /// A [`Claim`] for a room this node decides, from a persona of another node.
    Claim(Vec<u8>),
    /// The turn `(persona, Turn)` for a persona of this node, from the room's coordinator.
    Turn(Vec<u8>),
    /// A persona moving here with all its rows (a `PersonaSnapshot`); answers with the JSON
    /// of `Result<HandOff, InjectError>` once it is durably stored here.
    #[rpc]
    Adopt(Vec<u8>, RpcReplyPort<Vec<u8>>),
    /// Where personas that moved run: the JSON of `[(persona, node, version)]`.
    Placed(Vec<u8>),
    /// Rooms personas joined by directed events: the JSON of `[(room, persona)]`.
    Joined(Vec<u8>),
    /// For this node's embedding worker, from a node that has none (`[cluster] embedding`): the
    /// JSON of an [`embed::EmbedRequest`]; answers with the JSON of its answer.
    #[rpc]
    Embed(Vec<u8>, RpcReplyPort<Vec<u8>>),
    /// For this node's codebase index, from a node that has none (`[cluster] index`): the JSON
    /// of an [`index::IndexRequest`]; answers with the JSON of its answer.
    #[rpc]
    Index(Vec<u8>, RpcReplyPort<Vec<u8>>),
    /// The sending node (its name, as UTF-8) is stopping and hands its personas over.
    Leaving(Vec<u8>),
    /// A question about one of this node's personas, or this node's own part of a question
    /// about the fleet (the JSON of an [`Ask`]); answers with the JSON of
    /// `Result<serde_json::Value, InjectError>`.
    #[rpc]
    Ask(Vec<u8>, RpcReplyPort<Vec<u8>>),
}

/// What a node's admin asks the admin of another node, for a person who asked it.
#[derive(Debug, Serialize, Deserialize)]
pub enum Ask {
    /// An introspection query, answered from that node's personas alone.
    Ai(AiQuery),
    SetState {
        persona: String,
        change: StateChange,
    },
    Study {
        persona: String,
        topic: Option<String>,
    },
    Fault {
        persona: String,
        fault: Fault,
    },
}

/// Asks the admin of `node`; its answer as JSON.
pub async fn ask_node(view: &ClusterView, node: &str, ask: &Ask) -> Result<serde_json::Value, InjectError> {
    let bytes = view.call(node, NodeMsg::Ask, encode(ask), REMOTE_CALL_MS).await.map_err(InjectError::Unavailable)?;
    decode::<Result<serde_json::Value, InjectError>>(&bytes)?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FleetConfig;

    fn personas(pins: &[Option<&str>]) -> Vec<PersonaConfig> {
        let one = "[[persona]]\nname = \"a\"\nrole = \"helper\"\n";
        let template = FleetConfig::from_toml(std::path::Path::new("fleet.toml"), one).unwrap().personas[0].clone();
        pins.iter()
            .enumerate()
            .map(|(i, n)| PersonaConfig { name: format!("p{i}"), node: n.map(String::from), ..template.clone() })
            .collect()
    }

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn placement_keeps_pins_and_fills_the_least_loaded_node() {
        // Two pinned to a: the free ones go to b until it catches up, then alternate.
        let p = personas(&[Some("a"), Some("a"), None, None, None, None]);
        assert_eq!(place(&p, &nodes(&["a", "b"])).unwrap(), nodes(&["a", "a", "b", "b", "a", "b"]));
        // Without pins: round the nodes in their listed order.
        let p = personas(&[None, None, None, None, None]);
        assert_eq!(place(&p, &nodes(&["x", "y", "z"])).unwrap(), nodes(&["x", "y", "z", "x", "y"]));
    }

    #[test]
    fn placement_names_what_is_wrong() {
        let p = personas(&[Some("c")]);
        let e = place(&p, &nodes(&["a", "b"])).unwrap_err();
        assert!(e.contains("\"p0\"") && e.contains("\"c\""), "{e}");
        assert!(place(&p, &[]).unwrap_err().contains("names no node"));
    }

    #[test]
    fn the_view_reports_links_as_they_come_and_go() {
        let v = ClusterView::new("a", &nodes(&["a", "b", "c"]));
        assert!(v.is_up("a") && !v.is_up("b"));
        v.linked("b", "127.0.0.1:4698");
        assert_eq!(v.linked_nodes(), nodes(&["b"]));
        // Open but silent: unreachable until it answers again.
        assert!(v.answered("b", false) && !v.is_up("b") && !v.answered("b", false));
        assert!(v.answered("b", true) && v.is_up("b"));
        assert!(v.unlinked("b", "link closed"));
        assert!(!v.is_up("b") && !v.unlinked("b", "again"), "a link drops once");
        let counts = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1)]);
        let d = v.dump(&counts);
        let summary: Vec<(&str, &str, usize)> =
            d.iter().map(|n| (n.name.as_str(), n.status.as_str(), n.personas)).collect();
        assert_eq!(summary, [("a", "self", 2), ("b", "unreachable", 1), ("c", "unreachable", 0)]);
        assert_eq!(d[1].error.as_deref(), Some("link closed"));
    }
}
