//! Cadence: a persona's paced tasks that are not due yet wait aside, best first, until a timer
//! finds the persona due (see the module doc of the scheduler for the policy).

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ready::Waiting;
use super::{Persona, SchedulerState};

/// A task set aside until its persona's cadence allows it; best first in a max-heap.
#[derive(Debug)]
pub(super) struct Aside(pub(super) Waiting);

impl PartialEq for Aside {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Aside {}
impl PartialOrd for Aside {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Aside {
    /// Higher class, then higher key, then earlier arrival.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .0
            .class
            .cmp(&self.0.class)
            .then_with(|| self.0.key.total_cmp(&other.0.key))
            .then_with(|| other.0.seq.cmp(&self.0.seq))
    }
}

impl Persona {
    /// When its next non-urgent task may be granted (`None`: now).
    pub(super) fn next_due(&self) -> Option<Instant> {
        if self.cadence.is_zero() { None } else { self.last_grant.map(|g| g + self.cadence) }
    }
}

impl SchedulerState {
    pub(super) fn set_aside(&mut self, p: u32, w: Waiting) {
        tracing::trace!(task = w.task.id, persona = &*w.task.persona, label = w.task.label, "deferred by cadence");
        self.deferred[w.class as usize] += 1;
        self.personas[p as usize].aside.push(Aside(w));
        self.schedule_due(p);
    }

    /// Queues the persona's next due instant for the timer, if it has tasks aside.
    pub(super) fn schedule_due(&mut self, p: u32) {
        let ps = &mut self.personas[p as usize];
        if let Some(d) = ps.next_due()
            && !ps.aside.is_empty()
            && ps.due_queued != Some(d)
        {
            ps.due_queued = Some(d);
            self.due.push(Reverse((d, p)));
        }
    }

    /// Returns the persona's best task aside to the queues if it is due (all of them if it
    /// has no cadence any more); otherwise queues its due instant.
    pub(super) fn release_aside(&mut self, p: u32, now: Instant) {
        let ps = &mut self.personas[p as usize];
        if ps.aside.is_empty() {
            return;
        }
        if ps.next_due().is_some_and(|d| d > now) {
            self.schedule_due(p);
            return;
        }
        let take = if ps.cadence.is_zero() { ps.aside.len() } else { 1 };
        let back: Vec<Waiting> = (0..take).filter_map(|_| ps.aside.pop()).map(|a| a.0).collect();
        for w in back {
            self.deferred[w.class as usize] -= 1;
            self.enqueue(w);
        }
    }

    /// Personas whose cadence came due: their best task aside goes back to the queues.
    pub(super) fn release_due(&mut self, now: Instant) {
        while let Some(&Reverse((at, p))) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            let ps = &mut self.personas[p as usize];
            if ps.due_queued != Some(at) {
                continue;
            }
            ps.due_queued = None;
            self.release_aside(p, now);
        }
    }

    pub(super) fn set_cadence(&mut self, persona: Arc<str>, interval: Duration, now: Instant) {
        let p = self.persona_index(&persona);
        let ps = &mut self.personas[p as usize];
        let (had, has) = (!ps.cadence.is_zero(), !interval.is_zero());
        ps.cadence = interval;
        match (had, has) {
            (false, true) => self.with_cadence += 1,
            (true, false) => self.with_cadence -= 1,
            _ => {}
        }
        self.release_aside(p, now);
    }
}
