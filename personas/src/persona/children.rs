//! The persona's children (inbox, self-state, working memory): spawning them, and restarting
//! a failed one within its restart window.

use std::sync::Arc;
use std::time::Instant;

use mindfleet_core::dump::ChildDump;
use mindfleet_core::messages::PersonaMsg;
use mindfleet_core::restart::RestartWindow;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef};

use crate::inbox::{Inbox, InboxArgs, InboxMsg};
use crate::self_state::{SelfState, SelfStateArgs, SelfStateMsg};
use crate::working_memory::{MemoryArgs, MemoryMsg, WorkingMemory};

use super::{ESCALATION, PersonaArgs, PersonaState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Inbox,
    SelfState,
    Memory,
}

impl Kind {
    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::Inbox => "inbox",
            Kind::SelfState => "self_state",
            Kind::Memory => "working_memory",
        }
    }
}

pub(super) struct Child<M: ractor::Message> {
    pub(super) actor: ActorRef<M>,
    pub(super) window: RestartWindow,
    pub(super) last_error: Option<String>,
}

impl<M: ractor::Message> Child<M> {
    pub(super) fn dump(&self) -> ChildDump {
        ChildDump { status: "running".into(), restarts: self.window.total, last_error: self.last_error.clone() }
    }
}

pub(super) async fn spawn_inbox(
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

pub(super) async fn spawn_self_state(
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
        focus_max: a.config.focus_max,
    };
    Ok(Actor::spawn_linked(None, SelfState, args, me.get_cell()).await?.0)
}

pub(super) async fn spawn_memory(
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
    pub(super) fn which(&self, cell: &ActorCell) -> Option<Kind> {
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
    pub(super) async fn restart(&mut self, kind: Kind, error: String) -> Result<(), ActorProcessingErr> {
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
        if kind == Kind::Inbox {
            self.feed(super::lifecycle::Input::InboxRestarted).await;
        }
        Ok(())
    }
}
