//! Consolidating conversation memory: once no message has been taken in for `observe_after`
//! (and what was taken in is embedded), a `Background` task reads the messages not consolidated
//! yet, makes observations of them (`crate::observe`, by rules), puts them in the persona's
//! namespace of the conversation index (embedded as bulk work, like the messages) and keeps them
//! in storage with the marks that make their messages `observed`, in one transaction. Dormant
//! personas consolidate too: nothing here waits for the gate.

use std::time::Duration;

use mindfleet_core::conversation::Observation;
use mindfleet_core::knowledge::CreateRequest;
use mindfleet_core::sched::{Class, Grant, TaskId};
use mindfleet_core::time::now_us;

use super::phase::TaskFor;
use super::{ConversationArgs, Own, PersonaState};
use crate::conversation::{Memorable, remember};

impl PersonaState {
    /// Asks for the consolidation when the conversation is quiet, else checks again when it may
    /// be (one check set at a time).
    pub(super) fn arm_observe(&mut self) {
        let Some(c) = self.convo.as_mut().filter(|c| !c.observe_armed) else { return };
        match c.observe_wait(now_us()) {
            None => {}
            Some(0) => self.want_observe(),
            Some(wait_us) => {
                c.observe_armed = true;
                self.myself.send_after(Duration::from_micros(wait_us as u64), || Own::ObserveDue.into());
            }
        }
    }

    fn want_observe(&mut self) {
        let t = self.own_task(Class::Background, 0.2, "observe");
        let Some(c) = self.convo.as_mut() else { return };
        c.observe_asked = Some(t.id);
        self.submit(t, TaskFor::Observe);
    }

    /// The consolidation's slot: the messages are read, observed and indexed off the persona's
    /// loop, and the slot given back at once (the work runs on storage's readers, the embedding
    /// worker and the index's thread).
    pub(super) fn run_observe(&mut self, g: Grant) {
        let ran = g.outcome.holds_slot();
        let Some(ConversationArgs { index, embedding, .. }) = self.args.conversation.clone() else {
            return self.release(&g);
        };
        let Some(c) = self.convo.as_mut() else { return self.release(&g) };
        c.observe_asked = None;
        let seqs = if ran { c.take_observing() } else { Vec::new() };
        if seqs.is_empty() {
            // No slot given (or nothing left): the next check asks again.
            self.release(&g);
            self.observe_later();
            return;
        }
        let (storage, persona, me, task) = (self.args.storage.clone(), self.name.clone(), self.myself.clone(), g.task);
        tokio::spawn(async move {
            let result = async {
                let reader = storage.clone();
                let name = persona.clone();
                let said = tokio::task::spawn_blocking(move || reader.conversation(&name, &seqs))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                let made = crate::observe::observe(&said);
                let entries: Vec<Memorable> = made
                    .iter()
                    .map(|o| {
                        let entry = CreateRequest {
                            file_path: Observation::path(&persona, o.id),
                            content: o.text.clone(),
                            embedding: None,
                        };
                        (entry, o.text.clone())
                    })
                    .collect();
                if !entries.is_empty() {
                    remember(&embedding, &index, entries).await?;
                }
                Ok(made)
            }
            .await;
            let _ = me.cast(Own::Observed { task, result }.into());
        });
        self.args.scheduler.done(g.task);
    }

    /// The consolidation is over: its observations and marks are written at once, and what is
    /// left is consolidated next.
    pub(super) fn on_observed(&mut self, task: TaskId, result: Result<Vec<Observation>, String>) {
        let Some(c) = self.convo.as_mut() else { return };
        if let Err(e) = &result {
            tracing::warn!(persona = %self.name, task = ?task, error = %e, "conversation memory: consolidation failed; kept to retry");
        }
        let failed = result.is_err();
        c.observed(result);
        if let Some(marks) = c.marks_due(true) {
            self.args.storage.conversation_marks(self.name.clone(), marks);
        }
        if failed { self.observe_later() } else { self.arm_observe() }
    }

    /// Checks again after `observe_after`, not at once (after a failure, or a grant that gave
    /// no slot).
    fn observe_later(&mut self) {
        let Some(c) = self.convo.as_mut().filter(|c| !c.observe_armed) else { return };
        c.observe_armed = true;
        self.myself.send_after(c.observe_after, || Own::ObserveDue.into());
    }
}
