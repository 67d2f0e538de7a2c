//! What becomes of a model call the budget refuses, by who waits on it ([`OverBudget`]): skipped
//! when nobody does, run on the rules brain when a human does, or, for a reply a human waits on
//! with priority above [`QUEUE_PRIORITY`], queued for budget until `queue_deadline` after its
//! submission and then run on the rules brain.
//!
//! The queue is small (replies held for at most `queue_deadline`) and looked at after every
//! message: a queued call the budget has room for goes back to the class queues (it is judged
//! again when a slot is offered, and queued again if another call took the room meanwhile); one
//! past its deadline goes to the cheap pool as `RulesOnly`. The scheduler's timer wakes it at the
//! earliest deadline, or when the window's oldest call leaves the hour.

use std::time::Instant;

use mindfleet_core::sched::{Class, OverBudget, SkipReason};

use super::SchedulerState;
use super::budget::{Verdict, WINDOW};
use super::ready::{CHEAP, Waiting};

/// Priority above which a reply a human waits on waits for budget rather than going to the rules
/// brain at once.
pub(super) const QUEUE_PRIORITY: f64 = 0.6;

/// What a refused model call becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    Skip,
    Rules,
    Queue,
}

impl SchedulerState {
    /// What the model call `w`, refused by the budget, becomes now.
    pub(super) fn refused(&self, w: &Waiting, now: Instant) -> Refused {
        match w.task.over_budget {
            _ if w.task.class == Class::Urgent => Refused::Rules,
            OverBudget::Skip => Refused::Skip,
            OverBudget::Queue if w.task.priority > QUEUE_PRIORITY && now < self.queue_deadline(w) => Refused::Queue,
            OverBudget::Queue | OverBudget::Rules => Refused::Rules,
        }
    }

    fn queue_deadline(&self, w: &Waiting) -> Instant {
        w.task.submitted + self.config.queue_deadline
    }

    /// Holds `w` until the budget has room for it or its deadline passes.
    pub(super) fn queue_for_budget(&mut self, w: Waiting, reason: SkipReason) {
        tracing::debug!(
            task = w.task.id,
            persona = &*w.task.persona,
            label = w.task.label,
            reason = reason.as_str(),
            "queued for budget"
        );
        self.budget_queue.push((reason, w));
    }

    /// Queued calls the budget has room for now go back to the class queues; those past their
    /// deadline go to the cheap pool, to run on the rules brain.
    pub(super) fn release_budget_queue(&mut self, now: Instant) {
        if self.budget_queue.is_empty() {
            return;
        }
        for (reason, mut w) in std::mem::take(&mut self.budget_queue) {
            if now >= self.queue_deadline(&w) {
                w.rules_only = Some(reason);
                w.pool = CHEAP;
                self.enqueue(w);
                continue;
            }
            let p = self.persona_index(&w.task.persona);
            match self.judge(&w, p, now) {
                Verdict::Run => self.enqueue(w),
                Verdict::Skip(_) | Verdict::RulesOnly(_) => self.budget_queue.push((reason, w)),
            }
        }
    }

    /// When the queue needs a look without a message: its earliest deadline, or when the
    /// window's oldest call leaves the hour (that frees budget).
    pub(super) fn budget_queue_due(&self) -> Option<Instant> {
        let deadline = self.budget_queue.iter().map(|(_, w)| self.queue_deadline(w)).min()?;
        let expiry = self.window.oldest().map(|at| at + WINDOW);
        Some(expiry.map_or(deadline, |e| e.min(deadline)))
    }

    /// Drops the queued calls of a released persona; how many.
    pub(super) fn release_queued(&mut self, persona: &str) -> usize {
        let before = self.budget_queue.len();
        self.budget_queue.retain(|(_, w)| &*w.task.persona != persona);
        before - self.budget_queue.len()
    }
}
