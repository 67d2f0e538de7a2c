//! Consolidating conversation memory: once no message has been taken in for `observe_after`
//! (and what was taken in is embedded), a `Background` task reads the messages not consolidated
//! yet, makes observations of them (`crate::observe`, by rules, and with the fleet's LLM when
//! `[conversation] observations = "model"`), puts them in the persona's namespace of the
//! conversation index (embedded as bulk work, like the messages) and keeps them in storage with
//! the marks that make their messages `observed`, in one transaction. Dormant personas
//! consolidate too: nothing here waits for the gate.
//!
//! With the model, the task holds an inference slot, within the budgets (over them, the rules
//! alone consolidate), until its model calls are over; it gives the slot back when other work
//! waits for it (the pieces not read yet are left to the rules).

use std::sync::Arc;
use std::time::Duration;

use mindfleet_core::config::Observer;
use mindfleet_core::conversation::{Observation, Said};
use mindfleet_core::knowledge::CreateRequest;
use mindfleet_core::llm::LlmMsg;
use mindfleet_core::sched::{Class, Grant, OverBudget, Slot, TaskId};
use mindfleet_core::task::Outcome;
use mindfleet_core::time::now_us;
use ractor::ActorRef;
use tokio::sync::Notify;

use super::{Chore, ConversationArgs, Own, PersonaState};
use crate::conversation::{Memorable, OBSERVE_BATCH, remember};
use crate::observe::by_model;

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
        let mut t = self.own_task(Class::Background, 0.2, "observe");
        if self.observe_llm().is_some() {
            t.slot = Slot::Inference;
            t = t
                .with_max_tokens(by_model::CALL_TOKENS * by_model::CALLS as u32)
                .preemptible()
                .over_budget(OverBudget::Rules);
        }
        let Some(c) = self.convo.as_mut() else { return };
        c.observe_asked = Some(t.id);
        self.submit(t, Chore::Observe);
    }

    /// The consolidation's slot: the messages are read, observed and indexed off the persona's
    /// loop, and the slot given back at once (the work runs on storage's readers, the embedding
    /// worker and the index's thread).
    pub(super) fn run_observe(&mut self, g: Grant) {
        let ran = g.outcome.holds_slot();
        // The model's slot, when the budget gave it.
        let llm = self.observe_llm().filter(|_| g.outcome == Outcome::Run && g.slot == Slot::Inference);
        let Some(ConversationArgs { index, embedding, .. }) = self.args.conversation.clone() else {
            return self.release(&g);
        };
        let Some(c) = self.convo.as_mut() else { return self.release(&g) };
        c.observe_asked = None;
        let seqs = if ran {
            c.take_observing(if llm.is_some() { by_model::BATCH } else { OBSERVE_BATCH })
        } else {
            Vec::new()
        };
        if seqs.is_empty() {
            // No slot given (or nothing left): the next check asks again.
            self.release(&g);
            self.observe_later();
            return;
        }
        let stop = Arc::new(Notify::new());
        let model_slot = llm.is_some();
        if model_slot {
            c.observe_stop = Some((g.task, stop.clone()));
        }
        let (storage, persona, me, task) = (self.args.storage.clone(), self.name.clone(), self.myself.clone(), g.task);
        let scheduler = self.args.scheduler.clone();
        tokio::spawn(async move {
            let result = async {
                let reader = storage.clone();
                let name = persona.clone();
                let said = tokio::task::spawn_blocking(move || reader.conversation(&name, &seqs))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()));
                let mut made = said.as_deref().map(crate::observe::observe).unwrap_or_default();
                if let Some(llm) = llm {
                    // The slot is given back once the model is done, whatever became of the rest.
                    let tokens = match &said {
                        Ok(said) => by_model(&llm, &persona, said, &mut made, &stop).await,
                        Err(_) => 0,
                    };
                    scheduler.done_with_tokens(task, tokens);
                }
                said?;
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
        // Without the model, the slot is not needed past here; with it, the task gives it back.
        if !model_slot {
            self.args.scheduler.done(g.task);
        }
    }

    /// The model this persona's consolidation asks, when `[conversation] observations = "model"`.
    fn observe_llm(&self) -> Option<ActorRef<LlmMsg>> {
        let by_model = self.args.conversation.as_ref().is_some_and(|c| c.config.observations == Observer::Model);
        self.args.llm.clone().filter(|_| by_model)
    }

    /// Other work waits for the model's slot of the consolidation `task`: it stops asking the
    /// model (and gives the slot back). Whether `task` was one.
    pub(super) fn preempt_observe(&mut self, task: TaskId) -> bool {
        match self.convo.as_ref().and_then(|c| c.observe_stop.as_ref()) {
            Some((t, stop)) if *t == task => {
                stop.notify_one();
                true
            }
            _ => false,
        }
    }

    /// The consolidation is over: its observations and marks are written at once, and what is
    /// left is consolidated next.
    pub(super) fn on_observed(&mut self, task: TaskId, result: Result<Vec<Observation>, String>) {
        let Some(c) = self.convo.as_mut() else { return };
        c.observe_stop = None;
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

/// What the model adds to `made` (the rules' observations of `said`): it reads the pieces of
/// `said` in turn, at most [`by_model::CALLS`] of them, until `stop` is notified. The tokens it
/// used.
async fn by_model(
    llm: &ActorRef<LlmMsg>,
    persona: &str,
    said: &[Said],
    made: &mut Vec<Observation>,
    stop: &Notify,
) -> u32 {
    let mut tokens = 0;
    for piece in by_model::pieces(said).iter().take(by_model::CALLS) {
        let asked = tokio::select! {
            r = crate::llm::generate(llm, persona, "observe", by_model::request(piece)) => r,
            () = stop.notified() => break,
        };
        match asked {
            Ok((answer, used)) => {
                tokens += used;
                by_model::add(made, piece, by_model::facts(piece, &answer));
            }
            Err(e) => {
                // The rules' observations stand.
                tracing::warn!(persona, error = %e, "conversation memory: the model made no observations");
                break;
            }
        }
    }
    tokens
}
