//! Routing: which personas an event goes to (the addressed one, else the room's members and
//! anyone mentioned), which of them run on this node, and where a persona's finished event and
//! its reply go. Also the registry of this node's persona actors as they come up and go down.

use ractor::ActorRef;
use std::collections::BTreeMap;
use std::sync::Arc;

use mindfleet_core::cluster::NodeMsg;
use mindfleet_core::event::Event;
use mindfleet_core::messages::{InjectError, PersonaCommit, PersonaMsg, PersonaStatus, StoreRequest, Turn};
use mindfleet_store::{Forward, ForwardQueue, Target};

use super::AdminState;
use super::forwarder::forwarder;

impl AdminState {
    pub(super) fn target(&self, name: &Arc<str>) -> Target {
        (name.clone(), self.personas.get(name).and_then(|p| p.actor.clone()))
    }

    /// Personas an event goes to: the addressed one, else the room's members and anyone
    /// mentioned. The addressed persona joins a room it was not in.
    pub(super) fn route(&mut self, event: &Event) -> Result<Vec<Arc<str>>, InjectError> {
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
    pub(super) fn forwarder(&mut self, node: &Arc<str>) -> ForwardQueue {
        let (view, storage) = (self.cluster.as_ref().map(|c| c.view.clone()), self.storage.clone());
        let admin = self.myself.clone();
        self.forwarders
            .entry(node.clone())
            .or_insert_with(|| forwarder(view.expect("a node of a cluster"), storage, admin, node.clone()))
            .clone()
    }

    /// `name` joins `room` if it was not in it; whether it was new.
    pub(super) fn join(&mut self, room: &str, name: Arc<str>) -> bool {
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
    pub(super) fn joined(&self) -> Vec<(String, String)> {
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
    pub(super) fn split(&self, names: &[Arc<str>]) -> (Vec<Target>, BTreeMap<Arc<str>, Vec<String>>) {
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

    /// A persona's finished event: stored, with its reply for the room's other members (kept
    /// for those on other nodes in their node's queue).
    pub(super) fn commit(&mut self, commit: Box<PersonaCommit>) {
        let names: Vec<Arc<str>> = match &commit.reply {
            Some((entry, _)) => self
                .rooms
                .get(&entry.room)
                .map(|m| m.iter().filter(|n| ***n != *commit.persona).cloned().collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let (targets, remote) = self.split(&names);
        let elsewhere = (names.len() - targets.len()) as u32;
        let mut forwards = Vec::with_capacity(remote.len());
        if let Some((_, reply)) = &commit.reply {
            for (node, personas) in remote {
                let request = StoreRequest { event: reply.clone(), personas, audience: names.len() as u32, hops: 0 };
                let to = self.forwarder(&node);
                forwards.push(Forward { node, request: mindfleet_core::cluster::encode(&request), to });
            }
        }
        self.storage.commit(commit, targets, elsewhere, forwards);
    }

    /// A room's turn for a persona of this node, from the node that decides the room.
    pub(super) fn turn(&self, persona: &str, turn: Turn) {
        if let Some(a) = self.personas.get(persona).and_then(|p| p.actor.clone()) {
            let _ = a.cast(PersonaMsg::Turn(turn));
        }
    }

    /// A persona actor of this node started (or restarted).
    pub(super) fn persona_up(&mut self, name: &str, actor: ActorRef<PersonaMsg>) {
        if let Some(p) = self.personas.get_mut(name) {
            // Commits sent to storage before this point may have found the persona
            // unreachable; its reload goes through the writer after them.
            let _ = actor.cast(PersonaMsg::Resync);
            p.actor = Some(actor);
            p.status = PersonaStatus::Running;
        }
    }

    /// What the supervisor says of a persona: its status, restarts and last error.
    pub(super) fn persona_status(&mut self, name: &str, status: PersonaStatus, restarts: u32, error: Option<String>) {
        if let Some(p) = self.personas.get_mut(name) {
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

    /// Memberships another node made by directed events, `(room, persona)`.
    pub(super) fn join_rooms(&mut self, joined: Vec<(String, String)>) {
        for (room, persona) in joined {
            if let Some((name, _)) = self.personas.get_key_value(persona.as_str()) {
                let name = name.clone();
                self.join(&room, name);
            }
        }
    }
}
