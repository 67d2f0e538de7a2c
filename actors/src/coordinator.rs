//! The `Coordinator` actor: turn-taking for undirected human messages in shared rooms.
//!
//! Every persona that receives such a message answers with a [`Claim`]: it wants the turn
//! (its gate engaged) or it passes, with its confidence and its suitability for the task.
//! Once every persona the message went to has answered (or the claim window ends, for an
//! audience not known after a restore), the coordinator decides: a mentioned persona always
//! gets the turn; otherwise the `responders` most confident claimers get it and the others
//! stay silent as redundant. When nobody claims a human message, the most suitable persona is
//! assigned to it, so no human message goes unanswered (an unclaimed persona message stays
//! unanswered: that is the end of a chatter chain). The figures count human messages.
//!
//! Messages: [`CoordinatorMsg`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use mindfleet_core::cluster::{self, NodeMsg, RoomRouter};
use mindfleet_core::messages::{Claim, CoordinationStats, CoordinatorMsg, PersonaMsg, Turn};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};

pub struct Coordinator;

#[derive(Clone)]
pub struct CoordinatorArgs {
    /// Most personas answering one message (an @mentioned one always answers).
    pub responders: usize,
    /// How long claims are collected when the audience is not known.
    pub window: Duration,
    /// In a fleet across nodes: which node decides each room's turn-taking. A claim for a room
    /// that another node decides goes there.
    pub rooms: Option<Arc<RoomRouter>>,
}

struct Pending {
    claims: Vec<Claim>,
    audience: u32,
    timer_set: bool,
}

pub struct CoordinatorState {
    args: CoordinatorArgs,
    pending: HashMap<String, Pending>,
    /// Recently decided messages and who holds their turn, for claims that come late (or
    /// again).
    decided: HashMap<String, Vec<Arc<str>>>,
    decided_order: VecDeque<String>,
    stats: CoordinationStats,
}

/// Decided messages remembered for late claims.
const DECIDED_KEPT: usize = 10_000;

/// Answers a claim: to the persona, or through its node when it runs on another one.
fn turn(c: &Claim, granted: bool, assigned: bool, reason: String) {
    let turn = Turn { event_id: c.event_id.clone(), granted, assigned, reason };
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

impl CoordinatorState {
    fn remember(&mut self, event_id: &str, holders: Vec<Arc<str>>) {
        self.decided.insert(event_id.to_string(), holders);
        self.decided_order.push_back(event_id.to_string());
        if self.decided_order.len() > DECIDED_KEPT
            && let Some(old) = self.decided_order.pop_front()
        {
            self.decided.remove(&old);
        }
    }

    /// Grants the turn for one message and answers every claimer.
    fn decide(&mut self, event_id: &str) {
        let Some(p) = self.pending.remove(event_id) else { return };
        let mut claims = p.claims;
        claims.sort_by(|x, y| {
            y.mentioned
                .cmp(&x.mentioned)
                .then(y.wants.cmp(&x.wants))
                .then(y.confidence.total_cmp(&x.confidence))
                .then(y.suitability.total_cmp(&x.suitability))
                .then(x.persona.cmp(&y.persona))
        });
        let human = claims.iter().any(|c| c.from_human);
        let mentioned = claims.iter().take_while(|c| c.mentioned).count();
        let granted = if mentioned > 0 {
            mentioned
        } else {
            claims.iter().take_while(|c| c.wants).count().min(self.args.responders)
        };
        let answered = if granted > 0 {
            let holders: Vec<Arc<str>> = claims[..granted].iter().map(|c| c.persona.clone()).collect();
            let names = holders.join(", ");
            for (i, c) in claims.iter().enumerate() {
                if i < granted {
                    let why = if c.mentioned { "mentioned" } else { "most confident claim" };
                    turn(c, true, false, format!("{why} ({:.2})", c.confidence));
                } else {
                    if c.wants {
                        self.stats.redundant += 1;
                    }
                    turn(c, false, false, format!("redundant: {names} has the turn"));
                }
            }
            self.remember(event_id, holders);
            granted
        } else if human {
            // Nobody claimed a human message: the most suitable persona is assigned.
            // A persona that cannot take it (dormant: suitability 0) is never assigned.
            let best = claims
                .iter()
                .enumerate()
                .filter(|(_, c)| c.suitability > 0.0)
                .max_by(|a, b| a.1.suitability.total_cmp(&b.1.suitability).then(b.1.persona.cmp(&a.1.persona)));
            let Some((i, chosen)) = best else {
                for c in &claims {
                    turn(c, false, false, "nobody claimed it and nobody can take it".into());
                }
                self.remember(event_id, Vec::new());
                self.count(true, 0);
                return;
            };
            turn(chosen, true, true, format!("nobody claimed it; most suitable ({:.2})", chosen.suitability));
            for (j, other) in claims.iter().enumerate() {
                if j != i {
                    turn(other, false, false, format!("assigned to {}", chosen.persona));
                }
            }
            self.stats.assigned += 1;
            self.remember(event_id, vec![chosen.persona.clone()]);
            1
        } else {
            // An unclaimed persona message ends its chatter chain.
            for c in &claims {
                turn(c, false, false, "nobody claimed this persona message".into());
            }
            self.remember(event_id, Vec::new());
            0
        };
        self.count(human, answered);
    }

    /// Counts a decided human message by how many personas answer it.
    fn count(&mut self, human: bool, answered: usize) {
        if human {
            self.stats.messages += 1;
            match answered {
                0 => self.stats.answered_by_none += 1,
                1 => self.stats.answered_by_one += 1,
                _ => self.stats.answered_by_many += 1,
            }
            self.stats.efficiency = self.stats.answered_by_one as f64 / self.stats.messages as f64;
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
        let stats = CoordinationStats {
            responders: args.responders,
            window_ms: args.window.as_millis() as u64,
            ..Default::default()
        };
        Ok(CoordinatorState {
            args,
            pending: HashMap::new(),
            decided: HashMap::new(),
            decided_order: VecDeque::new(),
            stats,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<CoordinatorMsg>,
        msg: CoordinatorMsg,
        st: &mut CoordinatorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            CoordinatorMsg::Claim(mut c) => {
                // A room another node decides: the claim goes there (here, if it cannot).
                if let Some(rooms) = &st.args.rooms
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
                let id = c.event_id.clone();
                if let Some(holders) = st.decided.get(&id) {
                    if holders.contains(&c.persona) {
                        // A claim sent again by a persona that holds the turn.
                        turn(&c, true, !c.wants, "it holds the turn".into());
                        return Ok(());
                    }
                    // Came after the window closed (or again): the turn is taken.
                    if c.wants && c.retry == 0 {
                        st.stats.redundant += 1;
                    }
                    let why = if holders.is_empty() {
                        "decided already: nobody answers it".to_string()
                    } else {
                        format!("redundant: {} has the turn", holders.join(", "))
                    };
                    turn(&c, false, false, why);
                    return Ok(());
                }
                let p = st.pending.entry(id.clone()).or_insert_with(|| Pending {
                    claims: Vec::new(),
                    audience: c.audience,
                    timer_set: false,
                });
                p.audience = p.audience.max(c.audience);
                if !p.claims.iter().any(|x| x.persona == c.persona) {
                    p.claims.push(*c);
                }
                if p.audience > 0 && p.claims.len() as u32 >= p.audience {
                    st.decide(&id);
                } else if !p.timer_set {
                    // A known audience is waited for (every receiver claims or passes after
                    // its gate, which may wait for a slot): the timer is only a safety net,
                    // shorter than the personas' own wait (4 windows + 1 s). An unknown one
                    // (after a restore) gets one window.
                    p.timer_set = true;
                    let wait = if p.audience > 0 { st.args.window * 3 } else { st.args.window };
                    myself.send_after(wait, move || CoordinatorMsg::Decide(id));
                }
            }
            CoordinatorMsg::Decide(id) => {
                if st.pending.contains_key(&id) {
                    st.stats.by_window += 1;
                    st.decide(&id);
                }
            }
            CoordinatorMsg::Stats(reply) => {
                let _ = reply.send(st.stats.clone());
            }
        }
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
mod tests {
    use super::*;
    use mindfleet_core::messages::PersonaMsg;
    use ractor::call_t;
    use tokio::sync::mpsc;

    /// Stands in for a persona: passes on every turn it is given.
    struct Listener;

    impl Actor for Listener {
        type Msg = PersonaMsg;
        type State = mpsc::UnboundedSender<Turn>;
        type Arguments = mpsc::UnboundedSender<Turn>;

        async fn pre_start(
            &self,
            _: ActorRef<PersonaMsg>,
            tx: mpsc::UnboundedSender<Turn>,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(tx)
        }

        async fn handle(
            &self,
            _: ActorRef<PersonaMsg>,
            msg: PersonaMsg,
            tx: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            if let PersonaMsg::Turn(t) = msg {
                let _ = tx.send(t);
            }
            Ok(())
        }
    }

    async fn persona() -> (ActorRef<PersonaMsg>, mpsc::UnboundedReceiver<Turn>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (actor, _) = Actor::spawn(None, Listener, tx).await.unwrap();
        (actor, rx)
    }

    fn claim(name: &str, actor: &ActorRef<PersonaMsg>, wants: bool, confidence: f64) -> Box<Claim> {
        Box::new(Claim {
            event_id: "e1".into(),
            room: "team".into(),
            persona: name.into(),
            actor: Some(actor.clone()),
            node: None,
            wants,
            mentioned: false,
            confidence,
            suitability: 0.5,
            audience: 2,
            from_human: true,
            retry: 0,
        })
    }

    const ARGS: CoordinatorArgs = CoordinatorArgs { responders: 1, window: Duration::from_millis(100), rooms: None };

    #[tokio::test]
    async fn a_claim_sent_again_gets_the_same_answer_and_counts_once() {
        let coordinator = spawn(ARGS, None).await.unwrap();
        let (ada, mut ada_turns) = persona().await;
        let (bob, mut bob_turns) = persona().await;
        coordinator.cast(CoordinatorMsg::Claim(claim("ada", &ada, true, 0.9))).unwrap();
        coordinator.cast(CoordinatorMsg::Claim(claim("bob", &bob, true, 0.4))).unwrap();
        assert!(ada_turns.recv().await.unwrap().granted);
        assert!(!bob_turns.recv().await.unwrap().granted);
        // Both send their claims again, as if the answers were overdue.
        for (name, actor) in [("ada", &ada), ("bob", &bob)] {
            let mut again = claim(name, actor, true, 0.5);
            again.retry = 1;
            coordinator.cast(CoordinatorMsg::Claim(again)).unwrap();
        }
        let holder = ada_turns.recv().await.unwrap();
        assert!(holder.granted && !holder.assigned, "{holder:?}");
        let other = bob_turns.recv().await.unwrap();
        assert!(!other.granted, "{other:?}");
        assert_eq!(other.reason, "redundant: ada has the turn");
        let stats = call_t!(coordinator, CoordinatorMsg::Stats, 1000).unwrap();
        assert_eq!((stats.messages, stats.answered_by_one, stats.redundant), (1, 1, 1), "{stats:?}");
    }

    #[tokio::test]
    async fn a_claim_a_new_coordinator_never_saw_is_decided_after_its_window() {
        // A coordinator restarted after the first claim: the retry alone is decided by the
        // window, since the other receiver's claim went to the one before.
        let coordinator = spawn(ARGS, None).await.unwrap();
        let (ada, mut ada_turns) = persona().await;
        let mut again = claim("ada", &ada, true, 0.9);
        again.retry = 1;
        coordinator.cast(CoordinatorMsg::Claim(again)).unwrap();
        let t = tokio::time::timeout(Duration::from_secs(10), ada_turns.recv()).await.unwrap().unwrap();
        assert!(t.granted, "{t:?}");
        let stats = call_t!(coordinator, CoordinatorMsg::Stats, 1000).unwrap();
        assert_eq!(stats.by_window, 1, "{stats:?}");
    }
}
