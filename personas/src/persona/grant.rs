//! Grants: the scheduler's go for a task of the persona. A task of the lifecycle goes to it as
//! an input (a fault injected on the step it runs goes with it); one of the persona's chores
//! (consolidation, conversation memory, observation, study) runs here.

use std::time::Instant;

use mindfleet_core::sched::{Grant, TaskId};
use tracing::Instrument;

use super::lifecycle::Input;
use super::{Chore, Own, PersonaState};

impl PersonaState {
    /// Runs the granted task. Each is a `debug` span with the persona, the task's label and
    /// class, its wait and its run time.
    pub(super) async fn on_grant(&mut self, g: Grant) {
        if (self.budget_left - g.budget_left).abs() > f64::EPSILON {
            self.budget_left = g.budget_left;
            self.retune();
        }
        let chore = self.chores.remove(&g.task);
        let label = match chore {
            Some(chore) => chore_label(chore),
            None => match self.life.label_of(g.task) {
                Some(label) => label,
                // A task nothing waits for any more: the lifecycle gives its slot back.
                None => return self.feed(Input::Granted { grant: g, failure: None }).await,
            },
        };
        let span = tracing::debug_span!("task", persona = %self.name, label, class = g.class.as_str(), waited_us = g.waited_us, outcome = ?g.outcome);
        let started = Instant::now();
        async {
            match chore {
                Some(chore) => self.run_chore(chore, g).await,
                None => {
                    let mut failure = None;
                    if let Some(action) = self.life.step_run_by(&g) {
                        if let Some(delay) = self.args.faults.take_action_delay(action) {
                            tokio::time::sleep(delay).await;
                        }
                        failure = self.args.faults.take_action_failure(action);
                    }
                    self.feed(Input::Granted { grant: g, failure }).await;
                }
            }
        }
        .instrument(span.clone())
        .await;
        tracing::debug!(parent: &span, run_us = started.elapsed().as_micros() as u64, "task done");
    }

    /// Whether what the chore's task was for still waits for it: conversation memory and study
    /// keep the tasks they asked for until their answers come.
    fn still_waits(&self, chore: Chore, task: TaskId) -> bool {
        match chore {
            Chore::Remember => {
                self.convo.as_ref().is_some_and(|c| c.asked.contains(&task)) && self.args.conversation.is_some()
            }
            Chore::Observe => self.convo.as_ref().is_some_and(|c| c.observe_asked == Some(task)),
            Chore::Study => self.study.run.as_ref().is_some_and(|r| r.task == Some(task)),
            Chore::Consolidate => true,
        }
    }

    /// Gives back the slot of a grant nothing runs on.
    pub(super) fn release(&self, g: &Grant) {
        if g.outcome.holds_slot() {
            self.args.scheduler.done(g.task);
        }
    }

    async fn run_chore(&mut self, chore: Chore, g: Grant) {
        if !self.still_waits(chore, g.task) {
            return self.release(&g);
        }
        match chore {
            Chore::Remember => self.run_remember(g),
            Chore::Observe => self.run_observe(g),
            Chore::Study => self.run_study(g),
            Chore::Consolidate => {
                if g.outcome.holds_slot() {
                    self.consolidate().await;
                    self.args.scheduler.done(g.task);
                }
            }
        }
    }

    /// Conversation memory's task: embed the next batch off the persona's loop.
    fn run_remember(&mut self, g: Grant) {
        let ran = g.outcome.holds_slot();
        let Some(convo) = self.args.conversation.clone() else { return self.release(&g) };
        if ran {
            self.refill_conversation();
        }
        let Some(c) = self.convo.as_mut() else { return self.release(&g) };
        let batch = if ran { c.take_batch(&self.name) } else { Vec::new() };
        if batch.is_empty() {
            // The other request took the batch, or no slot was given (or what waits in
            // storage is not committed yet): done with this one.
            c.asked.retain(|t| *t != g.task);
            if ran {
                self.args.scheduler.done(g.task);
            }
            if c.embedding.is_empty() {
                self.gather();
            }
            return;
        }
        let (me, task, worker) = (self.myself.clone(), g.task, convo.embedding.clone());
        tokio::spawn(async move {
            let result = crate::conversation::remember(&worker, &convo.index, batch).await;
            let _ = me.cast(Own::Remembered { task, result }.into());
        });
        // The slot is free again at once: the embedding runs on the worker and the index's
        // thread, and holding the slot would keep the persona's own next steps waiting.
        self.args.scheduler.done(g.task);
    }
}

/// A chore's label in the `task` span.
fn chore_label(chore: Chore) -> &'static str {
    match chore {
        Chore::Consolidate => "consolidate",
        Chore::Remember => "remember",
        Chore::Observe => "observe",
        Chore::Study => "study",
    }
}
