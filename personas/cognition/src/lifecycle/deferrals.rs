//! Deferred events come back. A deferral keeps its delivery pending in storage, aside from the
//! inbox, as a preoccupation (so it survives a `kill -9`). When the focus has ended and the
//! persona is idle, it takes its preoccupations up, highest priority first, each with a `work`
//! task: the event is judged again and, when engaged, answered (its plan in the event's own
//! class: a person who waited is not made to wait for the persona's cadence too). One that waits longer than
//! `preoccupation_ttl_secs`, or that more urgent ones push out, is dropped with a journaled
//! decision, never silently.

use std::collections::BTreeMap;

use mindfleet_core::event::SenderKind;
use mindfleet_core::messages::{Deferral, Delivery, PersonaCommit};
use mindfleet_core::record::{Decision, Preoccupation, Verdict};
use mindfleet_core::sched::{Class, Grant, TaskId};

use crate::gate::GateDecision;
use crate::mind::Update;

use super::phase::TaskFor;
use super::{Effect, Lifecycle, Timer};

/// Most deferred events a persona keeps in mind; past it the lowest priority is dropped.
pub(super) const KEEP_DEFERRED: usize = 10;

/// The deferred event being taken up.
#[derive(Debug, Clone)]
pub(super) struct TakingUp {
    pub seq: u64,
    /// When it was deferred.
    pub since_us: i64,
}

/// What the persona deferred and has not taken up yet.
#[derive(Debug, Default)]
pub(super) struct DeferBook {
    /// By delivery seq.
    items: BTreeMap<u64, (Delivery, Preoccupation)>,
    /// The take-up task submitted and not granted yet.
    task: Option<TaskId>,
    taking: Option<TakingUp>,
    /// When the timer for the next stale one is due, if one is set.
    pub due: Option<i64>,
    /// One a room's turn passed to: taken up next, whatever the focus.
    passed: Option<u64>,
}

impl DeferBook {
    pub fn new(restored: Vec<(Delivery, Deferral)>) -> Self {
        let items = restored.into_iter().map(|(d, k)| (d.seq, (d, k.preoccupation))).collect();
        DeferBook { items, ..DeferBook::default() }
    }

    /// Its preoccupations in the order they are taken up: highest priority first, then oldest.
    pub fn preoccupations(&self) -> Vec<Preoccupation> {
        let mut v: Vec<Preoccupation> = self.items.values().map(|(_, p)| p.clone()).collect();
        v.sort_by(first_up);
        v
    }

    /// The seq of the one to take up next.
    fn next(&self) -> Option<u64> {
        self.items.iter().min_by(|a, b| first_up(&a.1.1, &b.1.1)).map(|(s, _)| *s)
    }

    /// The seqs of those deferred for `ttl_us` or longer at `now`.
    fn stale(&self, now: i64, ttl_us: i64) -> Vec<u64> {
        self.items.iter().filter(|(_, (_, p))| now - p.created_us >= ttl_us).map(|(s, _)| *s).collect()
    }

    /// The seq of the one taken up last (lowest priority, then newest).
    fn last(&self) -> Option<u64> {
        self.items.iter().max_by(|a, b| first_up(&a.1.1, &b.1.1)).map(|(s, _)| *s)
    }

    pub fn holds(&self, seq: u64) -> bool {
        self.items.contains_key(&seq)
    }

    /// The one to take up now: one a turn passed to, else the most urgent, when the persona is
    /// `free` (its focus over).
    fn pick(&self, free: bool) -> Option<u64> {
        self.passed.filter(|s| self.items.contains_key(s)).or_else(|| self.next().filter(|_| free))
    }

    pub fn taking(&self, seq: u64) -> Option<&TakingUp> {
        self.taking.as_ref().filter(|t| t.seq == seq)
    }
}

/// The order deferrals are taken up in: highest priority first, then oldest.
fn first_up(a: &Preoccupation, b: &Preoccupation) -> std::cmp::Ordering {
    b.priority.total_cmp(&a.priority).then(a.created_us.cmp(&b.created_us))
}

impl Lifecycle {
    /// Whether the persona's focus is over and it is awake: free to take a deferred event up.
    fn focus_over(&self) -> bool {
        !self.snapshot.dormant && self.snapshot.focus.activity == "idle"
    }

    /// A shared room's turn passed to this persona for an event it deferred: it takes it up as
    /// soon as nothing is in hand, whatever its focus (the room waits on it).
    pub(super) fn take_up_passed(&mut self, seq: u64) {
        self.deferrals.passed = Some(seq);
        self.tend_deferred();
    }

    /// Drops what went stale, then, when the persona is free, asks the scheduler for a `work`
    /// slot to take the most urgent deferred event up.
    pub(super) fn tend_deferred(&mut self) {
        let ttl = self.setup.config.preoccupation_ttl;
        let now = self.now;
        for seq in self.deferrals.stale(now, ttl.as_micros() as i64) {
            if self.deferrals.taking.as_ref().is_some_and(|t| t.seq == seq) {
                continue;
            }
            let (_, p) = &self.deferrals.items[&seq];
            let waited = (now - p.created_us) as f64 / 1e6;
            let why = format!(
                "dropped: stale after {waited:.0} s (deferred longer than preoccupation_ttl_secs = {:.0})",
                ttl.as_secs_f64()
            );
            self.drop_deferred(seq, why);
        }
        self.wake_when_stale(now, ttl.as_micros() as i64);
        if self.deferrals.task.is_some() || self.deferrals.taking.is_some() || self.busy() {
            return;
        }
        let Some(seq) = self.deferrals.pick(self.focus_over()) else { return };
        let priority = self.deferrals.items[&seq].1.priority;
        let t = self.own_task(Class::Work, priority, "take_up");
        self.deferrals.task = Some(t.id);
        self.submit(t, TaskFor::TakeUp);
    }

    /// Sets a timer for when the oldest deferred event goes stale (unless an earlier one is set).
    fn wake_when_stale(&mut self, now: i64, ttl_us: i64) {
        let Some(oldest) = self.deferrals.items.values().map(|(_, p)| p.created_us).min() else { return };
        let at = oldest + ttl_us;
        if self.deferrals.due.is_some_and(|due| due <= at) {
            return;
        }
        self.deferrals.due = Some(at);
        let after = std::time::Duration::from_micros((at - now).max(0) as u64 + 10_000);
        self.emit(Effect::After { after, timer: Timer::DeferralsDue });
    }

    /// The `work` slot to take a deferred event up: its event goes through the gate again
    /// (then runs in its own class), unless the persona got busy meanwhile (then it waits for
    /// the next chance: the end of what it has in hand).
    pub(super) fn run_take_up(&mut self, g: Grant) {
        self.deferrals.task = None;
        self.release(&g);
        if self.busy() {
            return;
        }
        let Some(seq) = self.deferrals.pick(self.focus_over()) else { return };
        if self.deferrals.passed == Some(seq) {
            self.deferrals.passed = None;
        }
        let (d, p) = self.deferrals.items[&seq].clone();
        tracing::info!(persona = %self.name, event = %d.event.id, "taking up a deferred event");
        self.deferrals.taking = Some(TakingUp { seq, since_us: p.created_us });
        self.emit(Effect::Mark(seq));
        self.gate(d, 0);
    }

    /// The gate's verdict on an event taken up: it is decided now. A deferral again becomes an
    /// engagement when a human waits on this persona alone, else it is let go (a shared room's
    /// coordinator sees that somebody answers).
    pub(super) fn decide_taken_up(d: &Delivery, gate: &mut GateDecision) {
        if gate.verdict != Verdict::Defer {
            return;
        }
        let alone = d.audience <= 1 || d.event.persona.is_some();
        if d.event.sender_kind == SenderKind::Human && alone {
            gate.verdict = Verdict::Engage;
            gate.note = "a human waits on me alone: answered now".into();
        } else {
            gate.verdict = Verdict::Ignore;
            gate.note = "still below the bar: let go".into();
        }
    }

    /// Keeps the delivery `d`, just deferred as `p`, in mind; returns what the commit keeps in
    /// storage, or `None` when more urgent deferrals leave no room for it (the reason says so).
    pub(super) fn keep_deferred(&mut self, d: &Delivery, p: Preoccupation, reason: &mut String) -> Option<Deferral> {
        let deferral = Deferral { preoccupation: p.clone(), audience: d.audience };
        self.deferrals.items.insert(d.seq, (d.clone(), p));
        let mut kept = Some(deferral);
        if self.deferrals.items.len() > KEEP_DEFERRED
            && let Some(last) = self.deferrals.last()
        {
            let why = format!("dropped: {KEEP_DEFERRED} deferred events of higher priority are kept");
            if last == d.seq {
                self.deferrals.items.remove(&last);
                *reason = format!("{reason}; {why}");
                kept = None;
            } else {
                self.drop_deferred(last, why);
            }
        }
        self.publish_preoccupations();
        kept
    }

    /// The delivery `seq` was decided again (taken up): it is no longer deferred.
    pub(super) fn taken_up(&mut self, seq: u64) {
        if self.deferrals.taking.as_ref().is_some_and(|t| t.seq == seq) {
            self.deferrals.taking = None;
        }
        if self.deferrals.passed == Some(seq) {
            self.deferrals.passed = None;
        }
        if self.deferrals.items.remove(&seq).is_some() {
            self.publish_preoccupations();
        }
    }

    /// Drops the deferred delivery `seq` with a journaled decision saying why.
    fn drop_deferred(&mut self, seq: u64, why: String) {
        let Some((d, p)) = self.deferrals.items.remove(&seq) else { return };
        tracing::info!(persona = %self.name, event = %d.event.id, %why, "a deferred event is dropped");
        let decision = Decision {
            event_id: d.event.id.clone(),
            verdict: Verdict::Ignore,
            reason: why,
            by: "deferral/dropped".into(),
            priority: p.priority,
            numbers: vec![("deferred_at_us".into(), p.created_us as f64)],
            at_us: self.now,
            references: Vec::new(),
            room: d.event.room.clone(),
        };
        let commit = PersonaCommit::decision_only(self.name.clone(), &d, decision);
        self.emit(Effect::Commit { commit: Box::new(commit), said: false });
        self.publish_preoccupations();
    }

    /// Tells the self-state what the persona keeps in mind.
    pub(super) fn publish_preoccupations(&mut self) {
        let u = Update::Preoccupations(self.deferrals.preoccupations());
        self.emit(Effect::SelfState(u));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn delivery(seq: u64, id: &str) -> Delivery {
        let e = mindfleet_core::event::EventInput {
            id: Some(id.into()),
            domain: "chat".into(),
            room: "general".into(),
            from: "alice".into(),
            text: "hello".into(),
            ..Default::default()
        }
        .validate()
        .unwrap();
        Delivery { seq, event: Arc::new(e), crashes: 0, audience: 1 }
    }

    fn deferral(id: &str, priority: f64, created_us: i64) -> Deferral {
        let preoccupation =
            Preoccupation { concern: id.into(), priority, domain: "chat".into(), event_id: id.into(), created_us };
        Deferral { preoccupation, audience: 1 }
    }

    #[test]
    fn deferred_events_are_taken_up_by_priority_then_age_and_the_stale_are_found() {
        let book = DeferBook::new(vec![
            (delivery(1, "old-low"), deferral("old-low", 0.2, 10)),
            (delivery(2, "high"), deferral("high", 0.6, 30)),
            (delivery(3, "old-high"), deferral("old-high", 0.6, 20)),
        ]);
        let order: Vec<String> = book.preoccupations().into_iter().map(|p| p.event_id).collect();
        assert_eq!(order, ["old-high", "high", "old-low"]);
        assert_eq!(book.next(), Some(3));
        assert_eq!(book.last(), Some(1));
        assert_eq!(book.stale(40, 20), [1, 3]);
        assert!(book.stale(40, 31).is_empty());
    }

    #[test]
    fn a_deferral_taken_up_is_decided_now_never_deferred_again() {
        let gate = || GateDecision { verdict: Verdict::Defer, ..crate::gate::score(0.0, &Default::default()) };
        let alone = delivery(1, "e");
        let mut g = gate();
        Lifecycle::decide_taken_up(&alone, &mut g);
        assert_eq!(g.verdict, Verdict::Engage, "a human waits on this persona alone");
        let shared = Delivery { audience: 3, ..alone.clone() };
        let mut g = gate();
        Lifecycle::decide_taken_up(&shared, &mut g);
        assert_eq!(g.verdict, Verdict::Ignore, "the room's coordinator sees to it");
        let mut engaged = GateDecision { verdict: Verdict::Engage, ..gate() };
        Lifecycle::decide_taken_up(&shared, &mut engaged);
        assert_eq!(engaged.verdict, Verdict::Engage);
    }
}
