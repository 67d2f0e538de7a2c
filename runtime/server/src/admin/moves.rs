//! Moves and placement: a persona of this node moving to another (stopped here, its rows sent
//! through the forwarder, started there), a persona arriving (`Adopt`), placements other nodes
//! announce, rebalancing when a node links, and draining this node when it stops.

use ractor::{RpcReplyPort, call_t};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mindfleet_core::cluster::NodeMsg;
use mindfleet_core::fleet::FleetMsg;
use mindfleet_core::messages::{AdminMsg, InjectError, PersonaStatus};
use mindfleet_store::{HandOff, PersonaSnapshot};

use super::AdminState;

/// A persona leaving this node.
pub(super) struct Moving {
    node: Arc<str>,
    /// Who asked, answered once the other node has stored it.
    waiting: Vec<RpcReplyPort<Result<HandOff, InjectError>>>,
}

/// How long a move waits for the persona to stop, and then for its new node to store it.
pub(super) const MOVE_MS: u64 = 60_000;

impl AdminState {
    /// Refuses personas that are moving between nodes (503: their next node has them soon).
    pub(super) fn not_moving(&self, names: &[Arc<str>]) -> Result<(), InjectError> {
        match names.iter().find_map(|n| Some((n, self.moving.get(n)?))) {
            Some((n, m)) => Err(InjectError::Unavailable(format!(
                "persona {n:?} is moving to node {:?}; retry in a moment",
                m.node
            ))),
            None => Ok(()),
        }
    }

    /// `persona` runs on `node` from placement `version` on.
    pub(super) fn place(&mut self, persona: &str, node: &str, version: u64) {
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
    pub(super) fn move_target(&self, persona: &str, to: Option<&str>) -> Result<Arc<str>, InjectError> {
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
    pub(super) fn drain(&self, to: Option<String>, reply: RpcReplyPort<Result<Vec<HandOff>, InjectError>>) {
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
    pub(super) fn move_each(
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
    pub(super) fn to_give(&self, node: &str) -> Vec<String> {
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
    pub(super) fn placements(&self) -> Vec<(String, String, u64)> {
        let Some(c) = &self.cluster else { return Vec::new() };
        c.versions.iter().filter_map(|(p, v)| Some((p.clone(), c.placement.get(p)?.clone(), *v))).collect()
    }

    /// Casts `msg` to the agent of every other node that is up (but `except`).
    pub(super) fn tell_others(&self, msg: impl Fn() -> NodeMsg, except: Option<&str>) {
        let Some(c) = &self.cluster else { return };
        for node in c.view.linked_nodes().iter().filter(|n| Some(n.as_str()) != except) {
            if let Some(agent) = c.view.agent(node) {
                let _ = agent.cast(msg());
            }
        }
    }
}

/// How many personas are placed on each node.
pub(super) fn count_per_node(placement: &BTreeMap<String, String>) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for node in placement.values() {
        *n.entry(node.clone()).or_insert(0) += 1;
    }
    n
}

impl AdminState {
    /// Starts moving `persona` to `to` (else the up node with the fewest personas): it is
    /// stopped first, then its rows leave (`stopped`); `reply` waits for its new node to store it.
    pub(super) fn start_move(
        &mut self,
        persona: String,
        to: Option<String>,
        reply: RpcReplyPort<Result<HandOff, InjectError>>,
    ) {
        let node = match self.move_target(&persona, to.as_deref()) {
            Ok(node) => node,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let Some(fleet) = self.fleet.clone() else {
            let _ = reply.send(Err(InjectError::Unavailable("no supervisor to stop the persona".into())));
            return;
        };
        let (name, _) = self.personas.get_key_value(persona.as_str()).expect("checked by move_target");
        tracing::info!(persona = %name, to = %node, "moving a persona to another node");
        self.moving.insert(name.clone(), Moving { node, waiting: vec![reply] });
        // Stopped first, so nothing more is written for it here; what was sent before
        // goes with it.
        let myself = self.myself.clone();
        tokio::spawn(async move {
            if let Err(e) = call_t!(fleet, FleetMsg::Stop, MOVE_MS, persona.clone()) {
                tracing::warn!(%persona, error = %e, "the supervisor did not confirm the stop");
            }
            let _ = myself.cast(AdminMsg::Stopped(persona));
        });
    }

    /// A moving persona stopped: placed on its new node, and its rows sent there.
    pub(super) fn stopped(&mut self, persona: String) {
        let Some((name, node)) = self.moving.get_key_value(persona.as_str()).map(|(n, m)| (n.clone(), m.node.clone()))
        else {
            return;
        };
        let version = self.cluster.as_ref().and_then(|c| c.versions.get(&persona)).copied().unwrap_or(0) + 1;
        // From here on, what comes for it is kept for its new node, behind its rows.
        self.place(&persona, &node, version);
        let queue = self.forwarder(&node);
        let (storage, myself) = (self.storage.clone(), self.myself.clone());
        tokio::spawn(async move {
            if let Err(error) = storage.release(name.clone(), version, node.clone(), queue).await {
                let error = error.to_string();
                let _ = myself.cast(AdminMsg::Stayed { persona: name.to_string(), version: version + 1, error });
            }
        });
    }

    /// Its rows could not leave: it runs here again.
    pub(super) fn stayed(&mut self, persona: String, version: u64, error: String) {
        tracing::error!(%persona, %error, "a persona could not leave this node");
        let me = self.cluster.as_ref().map_or(String::new(), |c| c.view.me().to_string());
        self.place(&persona, &me, version);
        self.storage.place(persona.as_str().into(), me, version);
        if let Some(fleet) = &self.fleet {
            let _ = fleet.cast(FleetMsg::Start(persona.clone()));
        }
        for w in self.moving.remove(persona.as_str()).map(|m| m.waiting).unwrap_or_default() {
            let _ = w.send(Err(InjectError::Storage(format!("persona {persona:?} stays: {error}"))));
        }
    }

    /// A persona arriving from another node with its rows (refused while this node stops).
    pub(super) fn adopt(&mut self, snapshot: Box<PersonaSnapshot>, reply: RpcReplyPort<Result<HandOff, InjectError>>) {
        if self.leaving {
            let me = self.cluster.as_ref().map_or("", |c| c.view.me());
            let _ = reply.send(Err(InjectError::Unavailable(format!(
                "node {me:?} is stopping: persona {:?} waits for it to be back",
                snapshot.persona
            ))));
            return;
        }
        let Some((name, _)) = self.personas.get_key_value(snapshot.persona.as_str()) else {
            let _ = reply.send(Err(InjectError::NotFound(format!(
                "persona {:?} is not in this node's fleet file",
                snapshot.persona
            ))));
            return;
        };
        let (name, me) = (name.clone(), self.cluster.as_ref().map_or(String::new(), |c| c.view.me().to_string()));
        self.place(&name, &me, snapshot.version);
        let (storage, fleet) = (self.storage.clone(), self.fleet.clone());
        tokio::spawn(async move {
            let r = storage.adopt(*snapshot).await.map_err(|e| InjectError::Storage(e.to_string()));
            if r.is_ok()
                && let Some(fleet) = fleet
            {
                let _ = fleet.cast(FleetMsg::Start(name.to_string()));
            }
            let _ = reply.send(r);
        });
    }

    /// A persona of this node was stored by its new node: the others hear of it, and whoever
    /// asked for the move is answered.
    pub(super) fn adopted(&mut self, done: HandOff) {
        let Some(m) = self.moving.remove(done.persona.as_str()) else { return };
        tracing::info!(persona = %done.persona, node = %done.node, rows = done.rows, "persona moved");
        let placed = mindfleet_core::cluster::encode(&[(&done.persona, &done.node, done.version)]);
        self.tell_others(|| NodeMsg::Placed(placed.clone()), Some(&done.node));
        for w in m.waiting {
            let _ = w.send(Ok(done.clone()));
        }
    }

    /// Placements another node announces, `(persona, node, version)`: newer ones are taken,
    /// except for a persona this node runs or is told it runs (it arrives with its rows).
    pub(super) fn placed(&mut self, placed: Vec<(String, String, u64)>) {
        let Some(me) = self.cluster.as_ref().map(|c| c.view.me().to_string()) else { return };
        for (persona, node, version) in placed {
            let known = self.cluster.as_ref().and_then(|c| c.versions.get(&persona)).copied().unwrap_or(0);
            if version <= known || !self.personas.contains_key(persona.as_str()) {
                continue;
            }
            let here = self.personas.get(persona.as_str()).is_some_and(|p| p.node.is_none());
            if node == me || here {
                // It arrives with its rows (`Adopt`), and never leaves unasked.
                tracing::warn!(%persona, %node, version, "a placement that disagrees with this node was ignored");
                continue;
            }
            self.place(&persona, &node, version);
            self.storage.place(persona.as_str().into(), node, version);
        }
    }

    /// A node linked: it hears the placements and memberships that changed, and takes the
    /// personas it should (`[cluster] rebalance`).
    pub(super) fn node_linked(&mut self, node: String) {
        let (placed, joined) = (self.placements(), self.joined());
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
        let give = if self.config.cluster.rebalance && !self.leaving { self.to_give(&node) } else { Vec::new() };
        if !give.is_empty() {
            tracing::info!(%node, personas = ?give, "rebalancing: moving personas to a node that linked");
            let moves = self.move_each(give, Some(node.clone()));
            tokio::spawn(async move {
                if let (_, Some((persona, e))) = moves.await {
                    tracing::warn!(%persona, %node, error = %e, "rebalancing: a persona did not move");
                }
            });
        }
    }

    /// This node stops: it takes no persona, tells the others, and hands its own over.
    pub(super) fn leave(&mut self, reply: RpcReplyPort<Result<Vec<HandOff>, InjectError>>) {
        self.leaving = true;
        let me = self.cluster.as_ref().map_or(Vec::new(), |c| c.view.me().as_bytes().to_vec());
        self.tell_others(|| NodeMsg::Leaving(me.clone()), None);
        self.drain(None, reply);
    }

    /// Another node stops: no persona moves there.
    pub(super) fn node_leaving(&self, node: &str) {
        if let Some(c) = &self.cluster {
            tracing::info!(%node, "a node is stopping: no persona moves there");
            c.view.leaving(node);
        }
    }
}
