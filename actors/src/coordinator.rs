//! The `Coordinator` actor: turn-taking for undirected human messages in shared rooms.
//!
//! Every persona that receives such a message answers with a [`Claim`]: it wants the turn
//! (its gate engaged) or it passes, with its confidence and its suitability for the task.
//! A mentioned persona always gets the turn, so its claim is decided at once (the others'
//! claims, late, are redundant; another mentioned one gets the turn too). Otherwise, once every
//! persona the message went to has answered (or the claim window ends, for an audience not
//! known after a restore), the coordinator decides: the `responders` most confident claimers
//! get the turn and the others stay silent as redundant. When nobody claims a human message,
//! the most suitable persona is assigned to it, so no human message goes unanswered (an
//! unclaimed persona message stays unanswered: that is the end of a chatter chain).
//!
//! A turn is held until its holder reports ([`TurnReport`]) that it posted the reply. A holder
//! that reports it posted nothing, whose actor stops, or that does not report within `hold`
//! loses the turn, and it passes to the next claimant (a wanting one first, else the most
//! suitable one), who takes the event up again. A claim that comes after the decision is kept
//! as a candidate: it takes a turn nobody holds, and never makes a second holder. The figures
//! count human messages, each by the replies posted to it once no holder is out.
//!
//! Messages: [`CoordinatorMsg`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::cluster::{self, NodeMsg, RoomRouter};
use mindfleet_core::messages::{Claim, CoordinatorMsg, PersonaMsg, Turn};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, ActorStatus, SpawnErr};

mod turns;

use turns::{Timer, Turns};

pub struct Coordinator;

#[derive(Clone)]
pub struct CoordinatorArgs {
    /// Most personas answering one message (an @mentioned one always answers).
    pub responders: usize,
    /// How long claims are collected when the audience is not known.
    pub window: Duration,
    /// How long a holder has to report its reply before the turn passes on.
    pub hold: Duration,
    /// In a fleet across nodes: which node decides each room's turn-taking. A claim for a room
    /// that another node decides goes there.
    pub rooms: Option<Arc<RoomRouter>>,
}

pub struct CoordinatorState {
    rooms: Option<Arc<RoomRouter>>,
    turns: Turns,
}

/// Answers a claim: to the persona, or through its node when it runs on another one.
fn turn(c: &Claim, turn: Turn) {
    match (&c.actor, &c.node) {
        (Some(a), _) => {
            let _ = a.cast(PersonaMsg::Turn(turn));
        }
        (None, Some(node)) => {
            // Lost with the link: the persona claims again when its wait runs out.
            if let Some(agent) = cluster::agent_of(node) {
                let _ = agent.cast(NodeMsg::Turn(cluster::encode(&(c.persona.to_string(), turn))));
            }
        }
        (None, None) => {}
    }
}

/// Whether the persona of a claim still runs (one on another node is taken to: its deadline
/// stands in).
fn alive(c: &Claim) -> bool {
    c.actor.as_ref().is_none_or(|a| !matches!(a.get_status(), ActorStatus::Stopping | ActorStatus::Stopped))
}

impl CoordinatorState {
    /// Sends what the turn-taking answered and sets the timers it asked for.
    fn flush(&mut self, myself: &ActorRef<CoordinatorMsg>) {
        for (c, t) in self.turns.answers.drain(..) {
            turn(&c, t);
        }
        for (after, timer) in self.turns.timers.drain(..) {
            myself.send_after(after, move || match timer {
                Timer::Decide(id) => CoordinatorMsg::Decide(id),
                Timer::Check(id) => CoordinatorMsg::Check(id),
            });
        }
    }
}

impl Actor for Coordinator {
    type Msg = CoordinatorMsg;
    type State = CoordinatorState;
    type Arguments = CoordinatorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<CoordinatorMsg>,
        args: CoordinatorArgs,
    ) -> Result<CoordinatorState, ActorProcessingErr> {
        Ok(CoordinatorState { turns: Turns::new(args.responders, args.window, args.hold), rooms: args.rooms })
    }

    async fn handle(
        &self,
        myself: ActorRef<CoordinatorMsg>,
        msg: CoordinatorMsg,
        st: &mut CoordinatorState,
    ) -> Result<(), ActorProcessingErr> {
        let now = Instant::now();
        match msg {
            CoordinatorMsg::Claim(mut c) => {
                // A room another node decides: the claim goes there (here, if it cannot).
                if let Some(rooms) = &st.rooms
                    && c.node.is_none()
                    && let Some(agent) = rooms.coordinator_of(&c.room).and_then(|n| rooms.agent(&n))
                {
                    let actor = c.actor.take();
                    c.node = Some(rooms.me().to_string());
                    if agent.cast(NodeMsg::Claim(cluster::encode(&*c))).is_ok() {
                        return Ok(());
                    }
                    (c.actor, c.node) = (actor, None);
                }
                st.turns.claim(*c, now);
            }
            CoordinatorMsg::Decide(id) => st.turns.window_over(&id, now),
            CoordinatorMsg::Report(r) => st.turns.report(r, now),
            CoordinatorMsg::Check(id) => st.turns.check(&id, now, alive),
            CoordinatorMsg::Stats(reply) => {
                let _ = reply.send(st.turns.stats.clone());
            }
        }
        st.flush(&myself);
        Ok(())
    }
}

/// Spawns the coordinator under `supervisor`.
pub async fn spawn(args: CoordinatorArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<CoordinatorMsg>, SpawnErr> {
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, Coordinator, args, s).await?,
        None => Actor::spawn(None, Coordinator, args).await?,
    };
    Ok(actor)
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
