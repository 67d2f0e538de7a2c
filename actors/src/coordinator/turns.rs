//! The turn-taking of the coordinator as a state machine without an actor: claims, reports and
//! timers in, answers and timers out. The actor sends what it answers; the tests drive it
//! directly (the property test with simulated personas and any timing).
//!
//! The life of a turn:
//!
//! ```text
//!  claims --all in, or the window--> decided: holders granted, the other claims candidates
//!  (by the window, a message that names somebody whose claim is not in yet grants nobody:
//!  the named one's late claim takes it, else after `hold` the best candidate does)
//!  holder reports "posted" ------------------> answered (counted once no holder is out)
//!  holder reports "no reply", its actor
//!  stopped, or no report within `hold` ------> the turn passes to the best candidate
//!  a late claim -----------------------------> a candidate; granted at once if the turn is open
//! ```

use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::messages::{Claim, CoordinationStats, Retake, Turn, TurnReport};

/// Decided messages remembered for late claims and reports.
const DECIDED_KEPT: usize = 10_000;

/// A timer the state machine asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The claim window of an event is over.
    Decide(String),
    /// Time to look at the holders of an event's turn.
    Check(String),
}

struct Pending {
    claims: Vec<Claim>,
    audience: u32,
    timer_set: bool,
}

/// A persona holding a turn, since when, and why it got it.
struct Holder {
    claim: Claim,
    since: Instant,
    why: String,
    /// It got the turn passed on from a holder that could not answer.
    passed: bool,
}

impl Holder {
    /// A holder on another node is not watched: its reports and its actor's end do not reach
    /// this coordinator, so its turn counts as answered once granted.
    fn watched(&self) -> bool {
        self.claim.node.is_none()
    }
}

/// A decided message.
struct Decided {
    human: bool,
    /// Holders whose report is not in.
    holders: Vec<Holder>,
    /// Personas that posted a reply to it.
    posted: Vec<Arc<str>>,
    /// Claimants that do not hold the turn, best first: the turn passes to them.
    candidates: Vec<Claim>,
    /// Why the holders that lost the turn lost it.
    lost: Vec<String>,
    /// The replies it is counted under in the figures, once no holder is out.
    counted: Option<usize>,
    /// A check of its holders is due.
    checking: bool,
    /// A holder's draft repeated a reply posted to the thread: the turn does not pass on.
    redundant: bool,
    /// The message names somebody whose claim was not in when it was decided: until this
    /// deadline, only a mentioned claim takes the turn.
    awaiting_named: Option<Instant>,
}

/// Orders claims: mentioned first, then wanting, the more confident, the more suitable, by name.
fn rank(x: &Claim, y: &Claim) -> Ordering {
    y.mentioned
        .cmp(&x.mentioned)
        .then(y.wants.cmp(&x.wants))
        .then(y.confidence.total_cmp(&x.confidence))
        .then(y.suitability.total_cmp(&x.suitability))
        .then(x.persona.cmp(&y.persona))
}

fn names<'a>(it: impl Iterator<Item = &'a Arc<str>>) -> String {
    it.map(|n| &**n).collect::<Vec<_>>().join(", ")
}

pub(crate) struct Turns {
    responders: usize,
    window: Duration,
    hold: Duration,
    pending: HashMap<String, Pending>,
    decided: HashMap<String, Decided>,
    decided_order: VecDeque<String>,
    pub(crate) stats: CoordinationStats,
    /// Answers to send, in order: to whom (its claim) and what.
    pub(crate) answers: Vec<(Claim, Turn)>,
    /// Timers to set.
    pub(crate) timers: Vec<(Duration, Timer)>,
}

impl Turns {
    pub(crate) fn new(responders: usize, window: Duration, hold: Duration) -> Self {
        Turns {
            responders,
            window,
            hold,
            pending: HashMap::new(),
            decided: HashMap::new(),
            decided_order: VecDeque::new(),
            stats: CoordinationStats { responders, window_ms: window.as_millis() as u64, ..Default::default() },
            answers: Vec::new(),
            timers: Vec::new(),
        }
    }

    fn answer(&mut self, c: &Claim, granted: bool, assigned: bool, reason: String, retake: Option<Retake>) {
        let turn = Turn { event_id: c.event_id.clone(), granted, assigned, reason, retake };
        self.answers.push((c.clone(), turn));
    }

    /// A persona's claim (or pass) on a message.
    pub(crate) fn claim(&mut self, c: Claim, now: Instant) {
        let id = c.event_id.clone();
        if self.decided.contains_key(&id) {
            self.late(c, now);
            return;
        }
        let p = self.pending.entry(id.clone()).or_insert_with(|| Pending {
            claims: Vec::new(),
            audience: c.audience,
            timer_set: false,
        });
        p.audience = p.audience.max(c.audience);
        let mentioned = c.mentioned;
        match p.claims.iter_mut().find(|x| x.persona == c.persona) {
            // Sent again (by a restarted persona, perhaps): where its answer goes now.
            Some(x) => (x.actor, x.node) = (c.actor, c.node),
            None => p.claims.push(c),
        }
        // A mentioned persona always gets the turn and the others' claims cannot change that
        // (a mentioned one that comes later gets it too, the rest are redundant), so it is
        // decided now rather than when the busiest receiver has passed.
        if mentioned || (p.audience > 0 && p.claims.len() as u32 >= p.audience) {
            self.decide(&id, now);
        } else if !p.timer_set {
            // A known audience is waited for (every receiver claims or passes after its gate,
            // which may wait for a slot): the timer is only a safety net, shorter than the
            // personas' own wait (4 windows + 1 s). An unknown one (after a restore) gets one
            // window.
            p.timer_set = true;
            let wait = if p.audience > 0 { self.window * 3 } else { self.window };
            self.timers.push((wait, Timer::Decide(id)));
        }
    }

    /// The claim window of `id` is over: decided on the claims in.
    pub(crate) fn window_over(&mut self, id: &str, now: Instant) {
        if self.pending.contains_key(id) {
            self.stats.by_window += 1;
            self.decide(id, now);
        }
    }

    /// Grants the turn for one message and answers every claimer.
    fn decide(&mut self, id: &str, now: Instant) {
        let Some(p) = self.pending.remove(id) else { return };
        let missing = p.audience > 0 && (p.claims.len() as u32) < p.audience;
        let mut claims = p.claims;
        claims.sort_by(rank);
        let human = claims.iter().any(|c| c.from_human);
        let mut d = Decided {
            human,
            holders: Vec::new(),
            posted: Vec::new(),
            candidates: Vec::new(),
            lost: Vec::new(),
            counted: None,
            checking: false,
            redundant: false,
            awaiting_named: None,
        };
        let mentioned = claims.iter().take_while(|c| c.mentioned).count();
        let granted =
            if mentioned > 0 { mentioned } else { claims.iter().take_while(|c| c.wants).count().min(self.responders) };
        if mentioned == 0 && missing && claims.iter().any(|c| c.named) {
            // Addressed to somebody who has not claimed yet (busy with other work): theirs.
            d.awaiting_named = Some(now + self.hold);
            self.timers.push((self.hold, Timer::Check(id.to_string())));
            for c in claims {
                self.answer(&c, false, false, "it names somebody else, who has not claimed it yet".into(), None);
                d.candidates.push(c);
            }
        } else if granted > 0 {
            let rest = claims.split_off(granted);
            let holding = names(claims.iter().map(|c| &c.persona));
            for c in claims {
                let why = if c.mentioned { "mentioned" } else { "most confident claim" };
                let why = format!("{why} ({:.2})", c.confidence);
                self.grant(&mut d, c, now, why, None);
            }
            for c in rest {
                if c.wants {
                    self.stats.redundant += 1;
                }
                self.answer(&c, false, false, format!("redundant: {holding} has the turn"), None);
                d.candidates.push(c);
            }
        } else if let Some(i) = human.then(|| Self::most_suitable(&claims)).flatten() {
            // Nobody claimed a human message: the most suitable persona is assigned. A persona
            // that cannot take it (dormant: suitability 0) is never assigned.
            let chosen = claims.remove(i);
            let (name, why) =
                (chosen.persona.clone(), format!("nobody claimed it; most suitable ({:.2})", chosen.suitability));
            self.grant(&mut d, chosen, now, why, None);
            for c in claims {
                self.answer(&c, false, false, format!("assigned to {name}"), None);
                d.candidates.push(c);
            }
        } else {
            // Nobody can take a human message; an unclaimed persona message ends its chatter
            // chain. A claim that comes later may still take it.
            let why =
                if human { "nobody claimed it and nobody can take it" } else { "nobody claimed this persona message" };
            for c in claims {
                self.answer(&c, false, false, why.into(), None);
                d.candidates.push(c);
            }
        }
        if human {
            self.stats.messages += 1;
        }
        self.remember(id, d);
        self.settle(id);
    }

    /// The index of the most suitable claim that can take a message (suitability above 0).
    fn most_suitable(claims: &[Claim]) -> Option<usize> {
        claims
            .iter()
            .enumerate()
            .filter(|(_, c)| c.suitability > 0.0)
            .max_by(|a, b| a.1.suitability.total_cmp(&b.1.suitability).then(b.1.persona.cmp(&a.1.persona)))
            .map(|(i, _)| i)
    }

    /// Gives `c` the turn of `d` (answering it) and watches it until it reports. A turn passed
    /// on (`retake`) is answered as given by the coordinator, as one nobody claimed.
    fn grant(&mut self, d: &mut Decided, c: Claim, now: Instant, why: String, retake: Option<Retake>) {
        let passed = retake.is_some();
        if !c.wants && !c.mentioned {
            self.stats.assigned += 1;
        }
        self.answer(&c, true, passed || (!c.wants && !c.mentioned), why.clone(), retake);
        if !d.checking && c.node.is_none() {
            d.checking = true;
            self.timers.push((self.window, Timer::Check(c.event_id.clone())));
        }
        d.holders.push(Holder { claim: c, since: now, why, passed });
    }

    fn remember(&mut self, id: &str, d: Decided) {
        self.decided.insert(id.to_string(), d);
        self.decided_order.push_back(id.to_string());
        if self.decided_order.len() > DECIDED_KEPT
            && let Some(old) = self.decided_order.pop_front()
        {
            self.decided.remove(&old);
        }
    }

    /// A claim on a message decided already: sent again, or late (after the window, or a
    /// persona that restarted). It never makes a second holder while one is out or a reply
    /// is posted; it is kept as a candidate, and takes a turn that is open.
    fn late(&mut self, c: Claim, now: Instant) {
        let Some(mut d) = self.decided.remove(&c.event_id) else { return };
        let id = c.event_id.clone();
        if let Some(h) = d.holders.iter_mut().find(|h| h.claim.persona == c.persona) {
            // Sent again (its answer was overdue, or it restarted): it holds the turn.
            (h.claim.actor, h.claim.node) = (c.actor.clone(), c.node.clone());
            let why = format!("it holds the turn: {}", h.why);
            let given = h.passed || (!c.wants && !c.mentioned);
            self.answer(&c, true, given, why, None);
        } else if d.posted.contains(&c.persona) {
            self.answer(&c, false, false, "it answered already".into(), None);
        } else {
            let open = d.holders.is_empty() && d.posted.is_empty() && !d.redundant && d.awaiting_named.is_none();
            let can_take = c.mentioned || c.wants || (d.human && c.suitability > 0.0);
            d.candidates.retain(|x| x.persona != c.persona);
            if c.mentioned || (open && can_take) {
                d.awaiting_named = None;
                let why = match (c.mentioned, c.wants) {
                    (true, _) => format!("mentioned ({:.2})", c.confidence),
                    (false, true) => format!("the turn was open: claim after the decision ({:.2})", c.confidence),
                    (false, false) => format!("the turn was open: most suitable late claimant ({:.2})", c.suitability),
                };
                self.grant(&mut d, c, now, why, None);
            } else {
                if c.wants && c.retry == 0 {
                    self.stats.redundant += 1;
                }
                let why = if !d.holders.is_empty() {
                    format!("redundant: {} has the turn", names(d.holders.iter().map(|h| &h.claim.persona)))
                } else if d.awaiting_named.is_some() {
                    "it names somebody else, who has not claimed it yet".to_string()
                } else if !d.posted.is_empty() {
                    format!("redundant: {} answered it", names(d.posted.iter()))
                } else {
                    "decided already: nobody answers it".to_string()
                };
                self.answer(&c, false, false, why, None);
                let at = d.candidates.partition_point(|x| rank(x, &c) == Ordering::Less);
                d.candidates.insert(at, c);
            }
        }
        self.decided.insert(id, d);
    }

    /// A persona finished an event it held the turn of: a reply posted, or none (the turn
    /// passes on, unless the draft repeated a reply posted to the thread).
    pub(crate) fn report(&mut self, r: TurnReport, now: Instant) {
        let Some(d) = self.decided.get_mut(&r.event_id) else { return };
        match d.holders.iter().position(|h| h.claim.persona == r.persona) {
            Some(i) => {
                d.holders.remove(i);
                if r.posted {
                    d.posted.push(r.persona);
                } else {
                    d.redundant |= r.redundant;
                    d.lost.push(format!("{} could not answer: {}", r.persona, r.why));
                }
            }
            // Posted without holding the turn (it went ahead on its own, or lost the turn by
            // the deadline and posted after all): it counts.
            None if r.posted && !d.posted.contains(&r.persona) => d.posted.push(r.persona),
            None => return,
        }
        self.pass_if_open(&r.event_id, now);
        self.settle(&r.event_id);
    }

    /// Looks at the holders of `id`'s turn: one whose actor stopped (`alive` says), or that has
    /// held it longer than the hold deadline, loses it.
    pub(crate) fn check(&mut self, id: &str, now: Instant, alive: impl Fn(&Claim) -> bool) {
        let Some(d) = self.decided.get_mut(id) else { return };
        d.checking = false;
        if d.awaiting_named.is_some_and(|until| now >= until) {
            d.awaiting_named = None;
            if d.holders.is_empty() && d.posted.is_empty() {
                d.lost.push("nobody it names claimed it within the hold deadline".into());
            }
        }
        let hold = self.hold;
        let mut lost = Vec::new();
        d.holders.retain(|h| {
            let why = if !h.watched() {
                return true;
            } else if !alive(&h.claim) {
                "its actor stopped"
            } else if now.duration_since(h.since) >= hold {
                "no reply within the hold deadline"
            } else {
                return true;
            };
            lost.push(format!("{} could not answer: {why}", h.claim.persona));
            false
        });
        d.lost.extend(lost);
        self.pass_if_open(id, now);
        self.settle(id);
        if let Some(d) = self.decided.get_mut(id)
            && d.holders.iter().any(Holder::watched)
            && !d.checking
        {
            d.checking = true;
            self.timers.push((self.window, Timer::Check(id.to_string())));
        }
    }

    /// Nobody holds the turn of `id` and nobody posted, after a holder lost it: the turn passes
    /// to the best candidate (a wanting one first, by the order of the claims; else, for a
    /// human's message, the most suitable one that can take it).
    fn pass_if_open(&mut self, id: &str, now: Instant) {
        let Some(mut d) = self.decided.remove(id) else { return };
        if d.holders.is_empty() && d.posted.is_empty() && !d.lost.is_empty() && !d.redundant {
            let next = d
                .candidates
                .iter()
                .position(|c| c.wants || c.mentioned)
                .or_else(|| d.human.then(|| Self::most_suitable(&d.candidates)).flatten());
            if let Some(i) = next {
                let c = d.candidates.remove(i);
                self.stats.passed += 1;
                let why = format!("{}; the turn passed to {}", d.lost.join("; "), c.persona);
                let retake = Some(Retake { seq: c.seq, audience: c.audience });
                self.grant(&mut d, c, now, why, retake);
            }
        }
        self.decided.insert(id.to_string(), d);
    }

    /// Once no holder of a human message's turn is out, it is counted by the replies posted
    /// (again if a reply comes later).
    fn settle(&mut self, id: &str) {
        let Some(d) = self.decided.get_mut(id) else { return };
        let n = d.posted.len() + d.holders.iter().filter(|h| !h.watched()).count();
        if !d.human || d.holders.iter().any(Holder::watched) || d.counted == Some(n) {
            return;
        }
        let s = &mut self.stats;
        if let Some(was) = d.counted {
            let bucket = match was {
                0 => &mut s.answered_by_none,
                1 => &mut s.answered_by_one,
                _ => &mut s.answered_by_many,
            };
            *bucket -= 1;
        }
        d.counted = Some(n);
        match n {
            0 => s.answered_by_none += 1,
            1 => s.answered_by_one += 1,
            _ => s.answered_by_many += 1,
        }
        s.efficiency = s.answered_by_one as f64 / s.messages.max(1) as f64;
    }
}
