//! A property test of turn-taking: simulated personas claim one message with any timing
//! (before or after the window, in any order, sent again), hold the turn and post, post
//! nothing, crash (and restart, or not) or hang, and the coordinator's state machine answers
//! them on a simulated clock. Whatever the timing, a human's message that an awake persona can
//! answer ends with exactly one reply posted, and a persona's message is never assigned.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use mindfleet_core::messages::{Claim, Turn, TurnReport};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::turns::{Timer, Turns};

const WINDOW_MS: u64 = 100;
const HOLD_MS: u64 = 2_000;
/// Longest the simulation runs (far beyond every delay and deadline).
const END_MS: u64 = 120_000;

/// What a persona does with the turn the first time it holds it (after that it posts).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Post,
    /// Finishes without a reply (its plan failed) and reports it.
    NoReply,
    /// Its actor stops while it works; it restarts after so many ms, or stays down.
    Crash(Option<u64>),
    /// Alive, but never reports.
    Hang,
}

#[derive(Debug, Clone)]
struct Persona {
    wants: bool,
    confidence: f64,
    suitability: f64,
    /// When its gate decides (its claim is sent), from the message or a restart.
    claim_ms: u64,
    /// Its claim sent again this long after, if it still waits.
    retry_ms: Option<u64>,
    /// How long its plan runs.
    work_ms: u64,
    outcome: Outcome,
}

impl Persona {
    fn can_take(&self) -> bool {
        self.wants || self.suitability > 0.0
    }

    /// Eventually posts when it holds the turn.
    fn reliable(&self) -> bool {
        matches!(self.outcome, Outcome::Post | Outcome::Crash(Some(_)))
    }
}

fn persona() -> impl Strategy<Value = Persona> {
    let outcome = prop_oneof![
        3 => Just(Outcome::Post),
        1 => Just(Outcome::NoReply),
        1 => prop::option::of(0u64..3_000).prop_map(Outcome::Crash),
        1 => Just(Outcome::Hang),
    ];
    (
        any::<bool>(),
        0.0..1.0f64,
        prop_oneof![Just(0.0), 0.01..1.0f64],
        0u64..1_000,
        prop::option::of(0u64..1_500),
        1u64..800,
        outcome,
    )
        .prop_map(|(wants, confidence, suitability, claim_ms, retry_ms, work_ms, outcome)| Persona {
            wants,
            confidence,
            suitability,
            claim_ms,
            retry_ms,
            work_ms,
            outcome,
        })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Gating,
    Waiting,
    Working,
    Done,
    Down,
}

#[derive(Debug)]
enum Ev {
    /// Persona `p`'s claim (incarnation `inc`) reaches the coordinator.
    Claim {
        p: usize,
        inc: u32,
        retry: u32,
    },
    /// Its gate decided: it sends its claim.
    Gated {
        p: usize,
        inc: u32,
    },
    /// Time to send its claim again, if it still waits.
    Retry {
        p: usize,
        inc: u32,
    },
    Timer(Timer),
    /// The coordinator's answer reaches persona `p`.
    Turn {
        p: usize,
        inc: u32,
        turn: Turn,
    },
    /// Its plan is over.
    Worked {
        p: usize,
        inc: u32,
    },
    Restart {
        p: usize,
    },
    Report(TurnReport),
}

struct Sim {
    personas: Vec<Persona>,
    phase: Vec<Phase>,
    inc: Vec<u32>,
    /// How often each held the turn.
    held: Vec<u32>,
    human: bool,
    turns: Turns,
    start: Instant,
    now: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: Vec<Option<Ev>>,
    posted: Vec<usize>,
    /// Turns granted to a persona that did not want them.
    assigned: u32,
}

impl Sim {
    fn new(personas: Vec<Persona>, human: bool) -> Self {
        let n = personas.len();
        let mut sim = Sim {
            phase: vec![Phase::Gating; n],
            inc: vec![0; n],
            held: vec![0; n],
            human,
            turns: Turns::new(1, Duration::from_millis(WINDOW_MS), Duration::from_millis(HOLD_MS)),
            start: Instant::now(),
            now: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            posted: Vec::new(),
            assigned: 0,
            personas,
        };
        for p in 0..n {
            sim.at(sim.personas[p].claim_ms, Ev::Gated { p, inc: 0 });
        }
        sim
    }

    fn at(&mut self, ms: u64, ev: Ev) {
        self.queue.push(Reverse((self.now + ms, self.events.len() as u64)));
        self.events.push(Some(ev));
    }

    fn claim(&self, p: usize, inc: u32, retry: u32) -> Claim {
        let s = &self.personas[p];
        Claim {
            event_id: "m".into(),
            // The incarnation the answer goes to.
            room: inc.to_string(),
            persona: format!("p{p}").into(),
            actor: None,
            node: None,
            wants: s.wants,
            mentioned: false,
            named: false,
            confidence: s.confidence,
            suitability: s.suitability,
            audience: self.personas.len() as u32,
            from_human: self.human,
            retry,
            seq: 1,
        }
    }

    /// Sends what the coordinator answered (in order, 1 ms later) and sets its timers.
    fn flush(&mut self) {
        for (c, turn) in std::mem::take(&mut self.turns.answers) {
            let p: usize = c.persona[1..].parse().unwrap();
            // Given to a persona that did not want it (a turn passed on to a wanting one is
            // answered as given too, and is fine).
            if turn.granted && !self.personas[p].wants {
                self.assigned += 1;
            }
            let inc: u32 = c.room.parse().unwrap();
            self.at(1, Ev::Turn { p, inc, turn });
        }
        for (after, timer) in std::mem::take(&mut self.turns.timers) {
            self.at(after.as_millis() as u64, Ev::Timer(timer));
        }
    }

    fn run(&mut self) {
        while let Some(Reverse((t, i))) = self.queue.pop() {
            if t > END_MS {
                break;
            }
            self.now = t;
            let ev = self.events[i as usize].take().unwrap();
            self.step(ev);
            self.flush();
        }
    }

    fn step(&mut self, ev: Ev) {
        let now = self.start + Duration::from_millis(self.now);
        match ev {
            Ev::Claim { p, inc, retry } => {
                let c = self.claim(p, inc, retry);
                self.turns.claim(c, now);
            }
            Ev::Gated { p, inc } if inc == self.inc[p] && self.phase[p] == Phase::Gating => {
                self.phase[p] = Phase::Waiting;
                // Claims reach the coordinator in the order they are sent.
                self.at(1, Ev::Claim { p, inc, retry: 0 });
                if let Some(after) = self.personas[p].retry_ms {
                    self.at(after, Ev::Retry { p, inc });
                }
            }
            Ev::Retry { p, inc } if inc == self.inc[p] && self.phase[p] == Phase::Waiting => {
                self.at(1, Ev::Claim { p, inc, retry: 1 });
            }
            Ev::Timer(Timer::Decide(id)) => self.turns.window_over(&id, now),
            Ev::Timer(Timer::Check(id)) => {
                let (inc, phase) = (self.inc.clone(), self.phase.clone());
                self.turns.check(&id, now, |c| {
                    let p: usize = c.persona[1..].parse().unwrap();
                    c.room.parse::<u32>().unwrap() == inc[p] && phase[p] != Phase::Down
                });
            }
            Ev::Turn { p, inc, turn } if inc == self.inc[p] && self.phase[p] != Phase::Down => {
                match (self.phase[p], turn.granted, turn.retake) {
                    (Phase::Waiting, true, _) => {
                        self.phase[p] = Phase::Working;
                        self.held[p] += 1;
                        self.at(self.personas[p].work_ms, Ev::Worked { p, inc });
                    }
                    (Phase::Waiting, false, _) => self.phase[p] = Phase::Done,
                    // The turn passed to it after it finished: it takes the event up again.
                    (Phase::Done, true, Some(_)) => {
                        self.phase[p] = Phase::Gating;
                        self.at(self.personas[p].claim_ms % 50, Ev::Gated { p, inc });
                    }
                    _ => {}
                }
            }
            Ev::Worked { p, inc } if inc == self.inc[p] && self.phase[p] == Phase::Working => {
                let outcome = if self.held[p] == 1 { self.personas[p].outcome } else { Outcome::Post };
                let report = |posted| TurnReport {
                    event_id: "m".into(),
                    persona: format!("p{p}").into(),
                    posted,
                    why: "plan failed".into(),
                    redundant: false,
                };
                match outcome {
                    Outcome::Post => {
                        self.phase[p] = Phase::Done;
                        self.posted.push(p);
                        self.at(1, Ev::Report(report(true)));
                    }
                    Outcome::NoReply => {
                        self.phase[p] = Phase::Done;
                        self.at(1, Ev::Report(report(false)));
                    }
                    Outcome::Crash(restart) => {
                        self.phase[p] = Phase::Down;
                        if let Some(after) = restart {
                            self.at(after, Ev::Restart { p });
                        }
                    }
                    Outcome::Hang => {}
                }
            }
            Ev::Restart { p } => {
                // A new actor: the event is delivered again, and its gate decides again.
                self.inc[p] += 1;
                self.phase[p] = Phase::Gating;
                let inc = self.inc[p];
                self.at(self.personas[p].claim_ms, Ev::Gated { p, inc });
            }
            Ev::Report(r) => self.turns.report(r, now),
            _ => {}
        }
    }
}

#[test]
fn whatever_the_timing_a_human_message_gets_exactly_one_reply_and_a_persona_message_is_never_assigned() {
    let mut runner = TestRunner::new(Config { cases: 512, failure_persistence: None, ..Config::default() });
    runner
        .run(&(prop::collection::vec(persona(), 1..6), any::<bool>()), |(personas, human)| {
            let mut sim = Sim::new(personas.clone(), human);
            sim.run();
            let posted = sim.posted.len();
            prop_assert!(posted <= 1, "{posted} replies posted by {:?}: {personas:#?}", sim.posted);
            if human {
                if personas.iter().any(|p| p.can_take() && p.reliable()) {
                    prop_assert_eq!(posted, 1, "nobody answered: {:#?}", personas);
                    let s = &sim.turns.stats;
                    prop_assert_eq!((s.messages, s.answered_by_one), (1, 1), "{:?}", s);
                }
            } else {
                prop_assert_eq!(sim.assigned, 0, "a persona message was assigned: {:#?}", personas);
                prop_assert_eq!(sim.turns.stats.messages, 0);
            }
            Ok(())
        })
        .unwrap();
}
