//! Memory: consolidation of working memory, conversation memory (taking messages in,
//! embedding them in batches, recalling them for a reply), and the recall of long-term memory
//! before a plan.

use std::sync::Arc;

use mindfleet_core::conversation::Said;
use mindfleet_core::embedding::{EmbedMsg, LongText, Urgency};
use mindfleet_core::event::Event;
use mindfleet_core::messages::Delivery;
use mindfleet_core::sched::{Class, TaskId};
use mindfleet_core::time::now_us;
use ractor::call_t;

use crate::brain::recall::{self, RECALL_READ, Read};
use crate::consolidate::consolidate;
use crate::working_memory::MemoryMsg;

use super::lifecycle::Input;
use super::{CHILD_CALL_MS, Chore, GATHER, Own, PersonaState};

/// Longest the embedding worker may take to begin embedding the recall's texts before a plan: past
/// it (or at once, when its queue would keep them past it) the worker answers `Late` and the
/// recall compares by words. Under load the plan does not wait on the model; the embedding
/// worker's thread runs at a lower priority and falls behind first on a busy machine.
const RECALL_EMBED_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
/// Longest the recall waits for the answer once the model took it up (a first request also
/// waits for the weights to load).
const RECALL_EMBED_MS: u64 = 2000;

impl PersonaState {
    /// Asks for a Background slot to consolidate (at most one request at a time).
    pub(super) fn want_consolidation(&mut self) {
        if self.chores.values().any(|what| *what == Chore::Consolidate) {
            return;
        }
        let t = self.own_task(Class::Background, 0.3, "consolidate").paced();
        self.submit(t, Chore::Consolidate);
    }

    /// Takes a chat message in for conversation memory: embedded by a `Background` task, and
    /// stored with the event's decision.
    pub(super) fn take_in(&mut self, d: &Delivery, importance: f64, now: i64) {
        let e = &d.event;
        let Some(c) = self.convo.as_mut() else { return };
        if !matches!(e.domain.as_str(), "chat" | "voice") || e.from == *self.name {
            return;
        }
        let said = Said {
            seq: d.seq,
            event_id: e.id.clone(),
            room: e.room.clone(),
            from: e.from.clone(),
            text: e.text.clone(),
            // When it was said: its event's time, also for history replayed or imported.
            at_us: e.ts_us,
            taken_us: now,
            importance: importance.clamp(0.0, 1.0),
            embedded: false,
            observed: false,
            recalled: 0,
            last_recalled_us: 0,
        };
        c.take(said.clone());
        // Kept with the event's decision (the event stays pending until then).
        self.taking_in = Some(said);
        self.gather();
        self.arm_observe();
    }

    /// Asks for the embedding of what waits once a batch is full, else after gathering for
    /// [`GATHER`]: one index commit per batch, not one per message.
    pub(super) fn gather(&mut self) {
        let Some(c) = self.convo.as_mut().filter(|c| c.asked.is_empty() && c.waiting_count() > 0) else { return };
        if c.pending.len() >= crate::conversation::BATCH {
            self.want_remember();
        } else if !c.gathering {
            c.gathering = true;
            self.myself.send_after(GATHER, || Own::RememberDue.into());
        }
    }

    /// Asks for a `Background` slot to embed what conversation memory has waiting, and checks
    /// the wait after `max_lag`.
    pub(super) fn want_remember(&mut self) {
        let t = self.own_task(Class::Background, 0.2, "remember");
        let Some(c) = self.convo.as_mut() else { return };
        c.asked.push(t.id);
        self.myself.send_after(c.max_lag, || Own::ConversationLag.into());
        self.submit(t, Chore::Remember);
    }

    /// A message waited past `max_lag`: the embedding also asks for a `work` slot.
    pub(super) fn on_conversation_lag(&mut self) {
        let t = self.own_task(Class::Work, 0.5, "remember");
        let Some(c) = self.convo.as_mut().filter(|c| c.overdue(now_us())) else { return };
        c.asked.push(t.id);
        c.promotions += 1;
        tracing::info!(persona = %self.name, lag_ms = c.lag_us(now_us()) / 1000, "conversation memory behind: promoted to work");
        self.submit(t, Chore::Remember);
    }

    /// A batch of conversation memory is embedded (or goes back in line).
    pub(super) fn on_remembered(&mut self, task: TaskId, result: Result<(), String>) {
        let Some(c) = self.convo.as_mut() else { return };
        c.asked.retain(|t| *t != task);
        if let Err(e) = &result {
            tracing::warn!(persona = %self.name, error = %e, "conversation memory: embedding failed; kept to retry");
        }
        let failed = result.is_err();
        c.batch_done(result, now_us());
        if let Some(marks) = c.marks_due(!failed) {
            self.args.storage.conversation_marks(self.name.clone(), marks);
        }
        // More waiting: gather again (after a failure, at the next message or check).
        if !failed {
            self.refill_conversation();
            self.gather();
            self.arm_observe();
        }
    }

    /// Reads back what waits in storage once the queue runs low: at most `QUEUED` messages,
    /// off the persona's loop (`ReadBack`).
    pub(super) fn refill_conversation(&mut self) {
        let Some(c) = self.convo.as_mut() else { return };
        let asked = c.to_refill();
        if asked.is_empty() {
            return;
        }
        c.reading = true;
        let (storage, name, me) = (self.args.storage.clone(), self.name.clone(), self.myself.clone());
        tokio::task::spawn_blocking(move || {
            let found = storage.conversation(&name, &asked).map_err(|e| e.to_string());
            let _ = me.cast(Own::ReadBack { asked, found }.into());
        });
    }

    /// What waited in storage is back in the queue.
    pub(super) fn on_read_back(&mut self, asked: Vec<u64>, found: Result<Vec<Said>, String>) {
        let Some(c) = self.convo.as_mut() else { return };
        c.reading = false;
        match found {
            Ok(found) => c.refill(&asked, found),
            Err(e) => {
                tracing::warn!(persona = %self.name, error = %e, "conversation memory: reading back what waits failed")
            }
        }
        self.gather();
    }

    /// Conversation memory recalled the messages `seqs` for a reply (by words only when
    /// `degraded` says why): its counts and recall marks.
    pub(super) fn on_conversation_recalled(&mut self, seqs: Vec<u64>, degraded: Option<String>) {
        let Some(c) = self.convo.as_mut() else { return };
        if degraded.is_some() && c.degraded != degraded {
            tracing::warn!(persona = %self.name, why = degraded.as_deref().unwrap_or(""), "conversation recall is degraded: words only, not meaning");
        }
        c.recalls += 1;
        c.recalls_by_words += u64::from(degraded.is_some());
        c.degraded = degraded;
        c.marks.recall(seqs, now_us());
        if let Some(marks) = c.marks_due(false) {
            self.args.storage.conversation_marks(self.name.clone(), marks);
        }
    }

    /// Recalls long-term memory for the engaged `event`, off the persona's loop: a storage read
    /// (bounded, [`RECALL_READ`]) and, when there is something to compare by meaning, one
    /// embedding request; answered by `Input::LongTermRecalled`.
    pub(super) fn recall_long_term(&self, event: Arc<Event>) {
        let (storage, name, me) = (self.args.storage.clone(), self.name.clone(), self.myself.clone());
        let (embedding, adapters) = (self.args.embedding.clone(), self.args.adapters.clone());
        tokio::spawn(async move {
            let query = recall::query_of(&event);
            let about = query.clone();
            // The adapter that fits the event is chosen with the rest of long-term memory.
            let (read, adapter) = match tokio::task::spawn_blocking(move || {
                let adapter = adapters.map(|dir| dir.choose(&name, &about)).transpose();
                (storage.long_term(&name, RECALL_READ), adapter)
            })
            .await
            {
                Ok((read, adapter)) => (Ok(read), adapter.map(Option::flatten)),
                Err(e) => (Err(e), Ok(None)),
            };
            let read = match read {
                Ok(Ok(lt)) => Ok(Read {
                    experiences: lt.experiences,
                    knowledge: lt.knowledge,
                    procedures: lt.procedures,
                    profiles: lt.profiles,
                }),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let (mut memory, mut note) = match read {
                Err(e) => (Default::default(), Some(format!("long-term memory unreadable ({e}): planned without it"))),
                // Nothing to compare by meaning: no embedding asked (the query's vector alone
                // would say nothing).
                Ok(read) if read.nothing_to_compare() => (recall::recollect(&event, read, Ok(vec![Vec::new()])), None),
                Ok(read) => {
                    let texts = recall::texts(&query, &read.experiences, &read.knowledge);
                    let vectors = match embedding {
                        None => Err("no embedding worker".to_string()),
                        Some(worker) => {
                            let urgency = Urgency::Before(std::time::Instant::now() + RECALL_EMBED_WAIT);
                            match call_t!(
                                worker,
                                |reply| EmbedMsg::Embed { texts, long: LongText::Truncate, urgency, reply },
                                RECALL_EMBED_MS
                            ) {
                                Ok(Ok(v)) => Ok(v.iter().map(|e| e.vector().to_vec()).collect()),
                                Ok(Err(e)) => Err(e.to_string()),
                                Err(e) => Err(format!("the embedding worker did not answer: {e}")),
                            }
                        }
                    };
                    let memory = recall::recollect(&event, read, vectors);
                    let note = memory
                        .by_words
                        .as_ref()
                        .filter(|_| !memory.experiences.is_empty() || !memory.knowledge.is_empty())
                        .map(|why| format!("long-term memory recalled by words, not meaning: {why}"));
                    (memory, note)
                }
            };
            match adapter {
                Ok(a) => memory.adapter = a.map(|(record, weights)| recall::RecalledAdapter::new(&record, weights)),
                Err(e) => {
                    let unreadable = format!("adapters unreadable ({e}): answered without one");
                    note = Some(note.map_or(unreadable.clone(), |n| format!("{n}; {unreadable}")));
                }
            }
            let event_id = event.id.clone();
            let _ = me.cast(Own::Life(Input::LongTermRecalled { event_id, memory: Box::new(memory), note }).into());
        });
    }

    /// One consolidation pass: working memory and recent plans into long-term memory.
    pub(super) async fn consolidate(&mut self) {
        let Ok(entries) = call_t!(self.memory.actor, MemoryMsg::Snapshot, CHILD_CALL_MS) else { return };
        let storage = self.args.storage.clone();
        let name = self.name.clone();
        // Storage reads and the clustering run off the actor threads.
        let pass = tokio::task::spawn_blocking(move || {
            let plans = storage.recent_plans(&name, 200)?;
            let long_term = storage.long_term(&name, 0)?;
            let pass = consolidate(&entries, &plans, &long_term.profiles, long_term.watermark, now_us());
            Ok::<_, mindfleet_store::StorageError>((pass.watermark > long_term.watermark).then_some(pass))
        })
        .await;
        match pass {
            Ok(Ok(Some(pass))) => {
                tracing::debug!(persona = %self.name, report = ?pass.report, "consolidated");
                self.args.storage.consolidate(self.name.clone(), pass);
            }
            Ok(Ok(None)) => {}
            _ => tracing::warn!(persona = %self.name, "consolidation skipped: long-term memory unreadable"),
        }
    }
}
