//! A persona's side of conversation memory (see `mindfleet_core::conversation`): the chat
//! messages it took in and has not embedded yet, the `Background` task that embeds them into
//! its namespace of the conversation index, and the lag between the two.
//!
//! Batches go out in the order messages were taken in, so the book knows, for each message of
//! a batch, the few said just before it in its room ([`Context`]): they go into its keyword
//! document. After a restart the first messages of each room have none.
//!
//! The task asks for a `Background` slot, which work of every other class goes before. A
//! message waiting longer than `max_lag` promotes it: a second request, in the `work` class,
//! whichever is granted first takes the batch, so the lag stays bounded under load and is
//! reported (the dump's `conversation`) rather than growing unseen.
//!
//! Memory stays bounded when messages come faster than the model embeds them: at most
//! [`QUEUED`] wait in memory, and the rest only in storage (every message is written there with
//! its event's decision), by sequence number, read back as the queue runs low.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use std::time::Duration;

use mindfleet_core::config::{ConversationConfig, Observer};
use mindfleet_core::conversation::{CONTEXT_GAP_US, Observation, Said, SaidMarks};
use mindfleet_core::dump::ConversationDump;
use mindfleet_core::embedding::{EmbedFailure, EmbedMsg, LongText, Urgency};
use mindfleet_core::knowledge::{CreateManyRequest, CreateRequest, IndexMsg, RagRequest};
use mindfleet_core::sched::TaskId;
use mindfleet_store::{Backlog, CONVERSATION_KEPT};
use ractor::{ActorRef, call_t};
use tokio::sync::Notify;

/// Most messages one task embeds.
pub const BATCH: usize = 64;
/// Most messages waiting in memory; later ones wait in storage. One batch: a backlog costs a
/// read per batch, and a thousand personas behind hold no more than a batch each.
pub const QUEUED: usize = BATCH;
/// Messages with marks (embedded, recalled) gathered before they are written anyway.
pub const MARKS: usize = 64;
/// Most messages one consolidation task observes.
pub const OBSERVE_BATCH: usize = 512;
/// Longest a batch waits for its vectors: bulk work, after every query, so under a backlog it
/// waits its turn for long.
const EMBED_CALL_MS: u64 = 600_000;
/// Texts per bulk request: the model takes a request whole, so small ones let a query in
/// between.
const PIECE: usize = 8;
/// Longest the index takes to store a batch that has its vectors.
const STORE_CALL_MS: u64 = 60_000;

/// Most rooms whose last messages [`Context`] keeps; past it, it starts again (the next message
/// of each room then has no context).
const CONTEXT_ROOMS: usize = 1024;

/// An entry of the conversation index, and the text its vector is of (the message alone; the
/// entry's content is its keyword document).
pub type Memorable = (CreateRequest, String);

/// Embeds a batch at the worker as bulk work (queries go first), then stores it with its
/// vectors in the conversation index, whose thread so never waits for the model and answers
/// recall in between. Without the model the batch is stored without vectors.
pub async fn remember(
    worker: &ActorRef<EmbedMsg>,
    index: &ActorRef<IndexMsg>,
    batch: Vec<Memorable>,
) -> Result<(), String> {
    let (mut batch, meanings): (Vec<CreateRequest>, Vec<String>) = batch.into_iter().unzip();
    let asks = meanings.chunks(PIECE).map(|piece| {
        let texts = piece.to_vec();
        async move {
            call_t!(
                worker,
                |reply| EmbedMsg::Embed { texts, long: LongText::Truncate, urgency: Urgency::Bulk, reply },
                EMBED_CALL_MS
            )
        }
    });
    let answers = futures::future::join_all(asks).await;
    for (piece, asked) in batch.chunks_mut(PIECE).zip(answers) {
        match asked.map_err(|e| format!("the embedding worker did not answer: {e}"))? {
            Ok(embedded) => {
                for (entry, e) in piece.iter_mut().zip(embedded) {
                    entry.embedding = Some(e.vector().to_vec());
                }
            }
            // No model: kept without vectors, for recall by words (which says it is degraded).
            Err(EmbedFailure::Degraded(_)) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let req = RagRequest::CreateMany(CreateManyRequest { entries: batch });
    match call_t!(index, IndexMsg::Request, STORE_CALL_MS, Box::new(req)) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("the conversation index did not answer: {e}")),
    }
}

/// The last messages of each room, for the keyword documents of the next ones.
#[derive(Debug, Default, Clone)]
pub struct Context {
    /// How many messages before one its document holds.
    pub depth: usize,
    /// Per room, its last `depth` messages: when said, and content.
    rooms: BTreeMap<String, VecDeque<(i64, String)>>,
}

impl Context {
    pub fn new(depth: usize) -> Context {
        Context { depth, rooms: BTreeMap::new() }
    }

    /// The keyword document of `s` (see [`Said::document`]): the messages before it in its room
    /// said within [`CONTEXT_GAP_US`] of the one after each; then `s` joins its room's last.
    pub fn document(&mut self, s: &Said) -> String {
        if self.depth == 0 {
            return s.content();
        }
        if self.rooms.len() >= CONTEXT_ROOMS && !self.rooms.contains_key(&s.room) {
            self.rooms.clear();
        }
        let last = self.rooms.entry(s.room.clone()).or_default();
        let mut before: Vec<&str> = Vec::new();
        let mut after_us = s.at_us;
        for (at_us, content) in last.iter().rev() {
            if (after_us - *at_us).abs() > CONTEXT_GAP_US {
                break;
            }
            before.push(content);
            after_us = *at_us;
        }
        before.reverse();
        let doc = s.document(before);
        last.push_back((s.at_us, s.content()));
        while last.len() > self.depth {
            last.pop_front();
        }
        doc
    }
}

#[derive(Debug)]
pub struct ConversationBook {
    /// A wait past this promotes the embedding to `work`.
    pub max_lag: Duration,
    /// Taken in, not embedded yet, oldest first.
    pub pending: VecDeque<Said>,
    /// Taken in after these, waiting in storage only: their sequence numbers, oldest first
    /// (no more than storage keeps, [`CONVERSATION_KEPT`]).
    pub spilled: VecDeque<u64>,
    /// The batch being embedded.
    pub embedding: Vec<Said>,
    /// The tasks asked for: the `Background` one, and the `work` one a long wait adds.
    pub asked: Vec<TaskId>,
    /// Gathering messages for a batch (a timer is set).
    pub gathering: bool,
    /// Reading spilled messages back from storage.
    pub reading: bool,
    pub promotions: u64,
    /// Messages embedded (those kept from before included).
    pub stored: u64,
    /// The longest a message waited to be embedded, µs.
    pub max_lag_us: i64,
    pub last_error: Option<String>,
    /// Why the last recall could not use the vectors.
    pub degraded: Option<String>,
    /// Marks not written yet: with the next batch stored, or once [`MARKS`] gather.
    pub marks: SaidMarks,
    /// Recalls answered, and those of them by words only.
    pub recalls: u64,
    pub recalls_by_words: u64,
    /// The last messages of each room, for the keyword documents.
    pub context: Context,
    /// The context as it was before the batch being embedded: a failed batch goes back to it.
    context_before: Option<Context>,
    /// Who consolidates (`Off`: nobody), and a conversation quiet this long is consolidated.
    pub observe: Observer,
    pub observe_after: Duration,
    /// When the last message was taken in (µs).
    pub heard_us: i64,
    /// In the index, not consolidated yet, oldest first (sequence numbers).
    pub unobserved: VecDeque<u64>,
    /// Being consolidated by the task asked for.
    pub observing: Vec<u64>,
    /// The consolidation task asked for, until its answer.
    pub observe_asked: Option<TaskId>,
    /// A check of the quiet is set.
    pub observe_armed: bool,
    /// The consolidation holding the model's slot, and what tells it to give the slot back.
    pub observe_stop: Option<(TaskId, Arc<Notify>)>,
    /// Observations made since the start.
    pub observations: u64,
}

impl ConversationBook {
    /// From what storage kept (`backlog`): what waits to be embedded and to be consolidated.
    pub fn new(config: &ConversationConfig, backlog: Backlog) -> Self {
        let Backlog { unembedded, mut unobserved, kept } = backlog;
        if config.observations == Observer::Off {
            unobserved.clear();
        }
        let stored = kept.saturating_sub(unembedded.len() as u64);
        let mut unembedded = unembedded.into_iter();
        let pending = unembedded.by_ref().take(QUEUED).collect();
        ConversationBook {
            max_lag: config.max_lag,
            stored,
            pending,
            spilled: unembedded.map(|s| s.seq).collect(),
            embedding: Vec::new(),
            asked: Vec::new(),
            gathering: false,
            reading: false,
            promotions: 0,
            max_lag_us: 0,
            last_error: None,
            degraded: None,
            marks: SaidMarks::default(),
            recalls: 0,
            recalls_by_words: 0,
            context: Context::new(config.weights.context),
            context_before: None,
            observe: config.observations,
            observe_after: config.observe_after,
            heard_us: 0,
            unobserved: unobserved.into(),
            observing: Vec::new(),
            observe_asked: None,
            observe_armed: false,
            observe_stop: None,
            observations: 0,
        }
    }

    /// Takes a message in: into the queue, or, once [`QUEUED`] wait, into storage only.
    pub fn take(&mut self, said: Said) {
        self.heard_us = self.heard_us.max(said.taken_us);
        if self.spilled.is_empty() && self.pending.len() < QUEUED {
            self.pending.push_back(said);
            return;
        }
        self.spilled.push_back(said.seq);
        // Storage keeps no more: the oldest are gone from it.
        while self.spilled.len() > CONVERSATION_KEPT as usize {
            self.spilled.pop_front();
        }
    }

    /// Whether message `seq` is still to be embedded.
    pub fn waiting(&self, seq: u64) -> bool {
        self.pending.iter().chain(&self.embedding).any(|s| s.seq == seq) || self.spilled.contains(&seq)
    }

    /// Messages taken in and not embedded yet, in memory or in storage.
    pub fn waiting_count(&self) -> usize {
        self.pending.len() + self.embedding.len() + self.spilled.len()
    }

    /// The messages to read back from storage when the queue runs low (under a batch) and no
    /// read is under way.
    pub fn to_refill(&self) -> Vec<u64> {
        if self.reading || self.pending.len() >= BATCH {
            return Vec::new();
        }
        self.spilled.iter().take(QUEUED - self.pending.len()).copied().collect()
    }

    /// The messages of [`ConversationBook::to_refill`] that storage had. Messages are written in
    /// the order taken in, so one missing after a later one was found never will be (its event
    /// was not decided: dead-lettered); one missing after the last found is not committed yet
    /// and stays first in line for the next read.
    pub fn refill(&mut self, asked: &[u64], found: Vec<Said>) {
        let newest_found = found.last().map(|s| s.seq);
        let mut found = found.into_iter().peekable();
        let mut later = Vec::new();
        for &seq in asked {
            if self.spilled.front() != Some(&seq) {
                break;
            }
            self.spilled.pop_front();
            match found.next_if(|s| s.seq == seq) {
                Some(said) => self.pending.push_back(said),
                None if newest_found.is_none_or(|n| seq > n) => later.push(seq),
                None => {}
            }
        }
        for seq in later.into_iter().rev() {
            self.spilled.push_front(seq);
        }
    }

    /// How long the oldest waiting message has waited since it was taken in, µs.
    pub fn lag_us(&self, now_us: i64) -> i64 {
        self.embedding.first().or(self.pending.front()).map_or(0, |s| (now_us - s.taken_us).max(0))
    }

    /// Whether to ask for a `work` slot: a message waited past `max_lag` and only the
    /// `Background` request is out.
    pub fn overdue(&self, now_us: i64) -> bool {
        self.asked.len() == 1 && self.embedding.is_empty() && self.lag_us(now_us) >= self.max_lag.as_micros() as i64
    }

    /// The next batch, for the task granted: the index's entries, one per message, in the
    /// persona's namespace, each with its keyword document and the text to embed. Empty when
    /// another grant took it.
    pub fn take_batch(&mut self, persona: &str) -> Vec<Memorable> {
        if !self.embedding.is_empty() {
            return Vec::new();
        }
        let n = self.pending.len().min(BATCH);
        self.embedding = self.pending.drain(..n).collect();
        self.context_before = Some(self.context.clone());
        let context = &mut self.context;
        self.embedding
            .iter()
            .map(|s| {
                let entry = CreateRequest {
                    file_path: Said::path(persona, s.seq),
                    content: context.document(s),
                    embedding: None,
                };
                (entry, s.content())
            })
            .collect()
    }

    /// The batch is in the index (`Ok`: its oldest message's wait counts in the longest, and
    /// its messages are marked embedded), or goes back first in line.
    pub fn batch_done(&mut self, result: Result<(), String>, now_us: i64) {
        let batch = std::mem::take(&mut self.embedding);
        let before = self.context_before.take();
        match result {
            Ok(()) => {
                let waited = batch.first().map_or(0, |s| (now_us - s.taken_us).max(0));
                self.max_lag_us = self.max_lag_us.max(waited);
                self.last_error = None;
                self.stored += batch.len() as u64;
                self.marks.embedded.extend(batch.iter().map(|s| s.seq));
                if self.observe != Observer::Off {
                    self.unobserved.extend(batch.iter().map(|s| s.seq));
                    // Storage keeps no more: the oldest are gone from it.
                    while self.unobserved.len() > CONVERSATION_KEPT as usize {
                        self.unobserved.pop_front();
                    }
                }
            }
            Err(e) => {
                self.last_error = Some(e);
                for s in batch.into_iter().rev() {
                    self.pending.push_front(s);
                }
                // Sent again, its messages get the same documents.
                if let Some(before) = before {
                    self.context = before;
                }
            }
        }
    }

    /// The marks to write now: all of them after a batch is stored (`force`), or once
    /// [`MARKS`] messages have one; recall marks in between are only ranking hints, so a crash
    /// may lose a few of them, never a message.
    pub fn marks_due(&mut self, force: bool) -> Option<SaidMarks> {
        (!self.marks.is_empty() && (force || self.marks.len() >= MARKS)).then(|| std::mem::take(&mut self.marks))
    }

    /// How long until the conversation is to be consolidated (µs; 0: now), or none when
    /// nothing waits for it or a consolidation is under way. Only what is in the index is
    /// consolidated: while messages wait to be embedded, it waits too; but a room that is never
    /// quiet is consolidated a batch ([`OBSERVE_BATCH`]) at a time.
    pub fn observe_wait(&self, now_us: i64) -> Option<i64> {
        if self.unobserved.is_empty() || self.observe_asked.is_some() || !self.observing.is_empty() {
            return None;
        }
        if self.unobserved.len() >= OBSERVE_BATCH {
            return Some(0);
        }
        let quiet = (self.heard_us + self.observe_after.as_micros() as i64 - now_us).max(0);
        Some(if self.waiting_count() > 0 { quiet.max(1_000_000) } else { quiet })
    }

    /// The next messages to consolidate, oldest first (at most `max`).
    pub fn take_observing(&mut self, max: usize) -> Vec<u64> {
        if !self.observing.is_empty() {
            return Vec::new();
        }
        let n = self.unobserved.len().min(max);
        self.observing = self.unobserved.drain(..n).collect();
        self.observing.clone()
    }

    /// The consolidation is over: its observations, with the marks of the messages it read, go
    /// to storage with the next marks written (at once, `marks_due(true)`); or the messages go
    /// back first in line.
    pub fn observed(&mut self, result: Result<Vec<Observation>, String>) {
        let observing = std::mem::take(&mut self.observing);
        match result {
            Ok(made) => {
                self.observations += made.len() as u64;
                self.marks.observed.extend(observing);
                self.marks.observations.extend(made);
            }
            Err(e) => {
                self.last_error = Some(e);
                for seq in observing.into_iter().rev() {
                    self.unobserved.push_front(seq);
                }
            }
        }
    }

    pub fn dump(&self, now_us: i64) -> ConversationDump {
        ConversationDump {
            pending: self.waiting_count() as u64,
            lag_ms: self.lag_us(now_us) / 1000,
            max_lag_ms: self.max_lag_us.max(self.lag_us(now_us)) / 1000,
            stored: self.stored,
            observations_pending: (self.unobserved.len() + self.observing.len()) as u64,
            observations: self.observations,
            observed_by: match self.observe {
                Observer::Model => crate::observe::by_model::BY,
                Observer::Rules | Observer::Off => crate::observe::BY,
            }
            .to_string(),
            promotions: self.promotions,
            last_error: self.last_error.clone(),
            recall: self.degraded.as_ref().map_or_else(|| "semantic".to_string(), |why| format!("degraded: {why}")),
            recalls: self.recalls,
            recalls_by_words: self.recalls_by_words,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(seq: u64, at_us: i64) -> Said {
        Said {
            seq,
            event_id: format!("e{seq}"),
            room: "general".into(),
            from: "alice".into(),
            text: format!("message {seq}"),
            at_us,
            taken_us: at_us,
            importance: 0.5,
            embedded: false,
            observed: false,
            recalled: 0,
            last_recalled_us: 0,
        }
    }

    /// A book of the default `[conversation]` but a `max_lag` of 30 s, from what storage kept.
    fn book(unembedded: Vec<Said>, unobserved: Vec<u64>, kept: u64) -> ConversationBook {
        let config = ConversationConfig { max_lag: Duration::from_secs(30), ..ConversationConfig::default() };
        ConversationBook::new(&config, Backlog { unembedded, unobserved, kept })
    }

    #[test]
    fn a_conversation_is_consolidated_once_quiet_and_embedded_and_a_failure_goes_back_first() {
        const S: i64 = 1_000_000;
        // Two messages consolidated before: kept from storage as waiting.
        let mut c = book(Vec::new(), vec![1, 2], 2);
        assert_eq!(c.observe_wait(60 * S), Some(0), "nothing heard since the start: quiet");
        let mut m = said(3, 100 * S);
        m.taken_us = 100 * S;
        c.take(m);
        assert_eq!(c.observe_wait(101 * S), Some(59 * S), "quiet for 60 s from the last message");
        assert_eq!(c.observe_wait(170 * S), Some(S), "then waits for its embedding, a second at a time");
        c.take_batch("helper");
        c.batch_done(Ok(()), 102 * S);
        assert_eq!(c.observe_wait(130 * S), Some(30 * S));
        assert_eq!(c.observe_wait(160 * S), Some(0));
        assert_eq!(c.take_observing(OBSERVE_BATCH), [1, 2, 3]);
        assert_eq!(c.observe_wait(160 * S), None, "under way");
        assert_eq!(c.dump(160 * S).observations_pending, 3);
        c.observed(Err("index down".into()));
        assert_eq!(c.unobserved, [1, 2, 3], "back first in line");
        c.take_observing(OBSERVE_BATCH);
        let told = Said { text: "the deploy to production failed on friday".into(), ..said(1, 0) };
        let made = crate::observe::observe(&[told]);
        assert_eq!(made.len(), 1);
        c.observed(Ok(made.clone()));
        let d = c.dump(161 * S);
        assert_eq!((d.observations_pending, d.observations, d.observed_by.as_str()), (0, made.len() as u64, "rules"));
        let marks = c.marks_due(true).unwrap();
        assert_eq!((marks.observed, marks.observations), (vec![1, 2, 3], made));
        assert_eq!(c.observe_wait(161 * S), None, "nothing left");

        // Never quiet: a batch's worth is consolidated anyway.
        let mut c = book(Vec::new(), (0..OBSERVE_BATCH as u64).collect(), OBSERVE_BATCH as u64);
        c.heard_us = 1000 * S;
        assert_eq!(c.observe_wait(1000 * S), Some(0));
        c.unobserved.pop_back();
        assert_eq!(c.observe_wait(1000 * S), Some(60 * S));

        // Turned off: nothing waits to be consolidated, from before or after the start.
        let off = ConversationConfig { observations: Observer::Off, ..ConversationConfig::default() };
        let mut c = ConversationBook::new(&off, Backlog { unembedded: Vec::new(), unobserved: vec![1], kept: 1 });
        c.take(said(2, S));
        c.take_batch("helper");
        c.batch_done(Ok(()), 2 * S);
        assert_eq!((c.observe_wait(1000 * S), c.dump(1000 * S).observations_pending), (None, 0));
    }

    #[test]
    fn a_long_wait_promotes_once_batches_go_out_once_and_a_failed_batch_goes_back_first() {
        const S: i64 = 1_000_000;
        // One message kept from before a restart, embedded ones counted as stored.
        let mut c = book(vec![said(1, 0)], Vec::new(), 10);
        assert_eq!(c.stored, 9);
        c.pending.extend((2..=BATCH as u64 + 5).map(|i| said(i, i as i64 * S)));
        c.asked.push(7);
        assert!(!c.overdue(29 * S), "within max_lag");
        assert!(c.overdue(30 * S), "the oldest waited 30 s");
        c.asked.push(8);
        assert!(!c.overdue(60 * S), "promoted once: both requests are out");

        let batch = c.take_batch("helper");
        assert_eq!(batch.len(), BATCH);
        assert_eq!(batch[0].0.file_path, "helper/1");
        assert_eq!(batch[0].1, "alice in #general: message 1");
        assert!(c.take_batch("helper").is_empty(), "the other grant finds the batch taken");
        assert_eq!(c.lag_us(40 * S), 40 * S, "the batch being embedded still counts");

        let documents: Vec<String> = batch.iter().map(|(e, _)| e.content.clone()).collect();
        assert_eq!(documents[1], "alice in #general: message 1\nalice in #general: message 2");
        c.batch_done(Err("index down".into()), 41 * S);
        assert_eq!(c.marks_due(true), None, "nothing stored, nothing to mark");
        assert_eq!(c.pending.front().map(|s| s.seq), Some(1), "back first in line");
        assert_eq!(c.pending.len(), BATCH + 5);
        let again: Vec<String> = c.take_batch("helper").iter().map(|(e, _)| e.content.clone()).collect();
        assert_eq!(again, documents, "sent again, the same documents");
        c.batch_done(Ok(()), 42 * S);
        assert_eq!(c.marks_due(true).unwrap().embedded, (1..=BATCH as u64).collect::<Vec<_>>());
        assert_eq!((c.stored, c.max_lag_us), (9 + BATCH as u64, 42 * S));
        let d = c.dump(43 * S);
        // The 5 left came in after 43 s: no wait yet.
        assert_eq!((d.pending, d.lag_ms, d.max_lag_ms), (5, 0, 42_000));
    }

    #[test]
    fn recall_marks_gather_one_per_message_until_enough_or_a_batch_is_stored() {
        let mut c = book(Vec::new(), Vec::new(), 0);
        c.marks.recall([3, 5], 10);
        c.marks.recall([3], 20);
        assert_eq!(c.marks_due(false), None, "a few marks wait");
        c.marks.recall(100..100 + MARKS as u64 - 2, 30);
        let marks = c.marks_due(false).expect("enough to write");
        assert_eq!((marks.recalled.len(), marks.recalled[&3], marks.recalled[&5]), (MARKS, (2, 20), (1, 10)));
        assert!(c.marks.is_empty() && c.marks_due(true).is_none());
    }

    #[test]
    fn past_the_queue_messages_wait_in_storage_and_are_read_back_in_order_as_it_runs_low() {
        const S: i64 = 1_000_000;
        // A restart finds more waiting than the queue holds: the rest wait in storage.
        let unembedded: Vec<Said> = (1..=QUEUED as u64 + 10).map(|i| said(i, 0)).collect();
        let mut c = book(unembedded, Vec::new(), QUEUED as u64 + 10);
        assert_eq!((c.pending.len(), c.spilled.len(), c.dump(S).pending), (QUEUED, 10, QUEUED as u64 + 10));
        // A message taken in now waits behind them, in storage.
        let next = QUEUED as u64 + 11;
        c.take(said(next, S));
        assert_eq!((c.pending.len(), c.spilled.back()), (QUEUED, Some(&next)));
        assert!(c.waiting(next) && c.waiting(1) && !c.waiting(next + 1));
        assert!(c.to_refill().is_empty(), "a full queue reads nothing back");

        // Embed down to under a batch, then read back.
        while c.pending.len() >= BATCH {
            c.take_batch("helper");
            c.batch_done(Ok(()), 2 * S);
        }
        let asked = c.to_refill();
        assert_eq!(asked, (QUEUED as u64 + 1..=next).collect::<Vec<_>>());
        // Storage has all but the newest (its decision is not committed yet) and one whose
        // event was never decided (dead-lettered).
        let dead = QUEUED as u64 + 3;
        let found: Vec<Said> = asked.iter().filter(|s| **s != next && **s != dead).map(|&s| said(s, S)).collect();
        c.refill(&asked, found);
        assert_eq!(c.spilled, VecDeque::from([next]), "the uncommitted one is read again next time");
        let seqs: Vec<u64> = c.pending.iter().map(|s| s.seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]) && !seqs.contains(&dead), "{seqs:?}");
        assert_eq!(c.to_refill(), vec![next]);
        c.refill(&[next], vec![said(next, S)]);
        assert!(c.spilled.is_empty() && c.pending.back().map(|s| s.seq) == Some(next));
        // Empty spill: taken in goes to the queue again.
        c.take(said(next + 1, S));
        assert_eq!(c.pending.back().map(|s| s.seq), Some(next + 1));

        // Storage keeps no more than CONVERSATION_KEPT; nor does the spill.
        let mut c = book(Vec::new(), Vec::new(), 0);
        for i in 0..QUEUED as u64 + CONVERSATION_KEPT + 5 {
            c.take(said(i, 0));
        }
        assert_eq!(c.spilled.len() as u64, CONVERSATION_KEPT);
        assert_eq!(c.spilled.front(), Some(&(QUEUED as u64 + 5)), "the oldest went first");
    }

    #[test]
    fn a_keyword_document_holds_the_last_messages_of_its_room_said_in_a_row() {
        const MIN: i64 = 60_000_000;
        let at = |seq: u64, room: &str, at_us: i64| Said { room: room.into(), ..said(seq, at_us) };
        let mut c = Context::new(2);
        assert_eq!(c.document(&at(1, "general", 0)), "alice in #general: message 1");
        c.document(&at(2, "ops", MIN));
        c.document(&at(3, "general", 2 * MIN));
        // The two before it in its room, oldest first; the other room's are not.
        let doc = c.document(&at(4, "general", 3 * MIN));
        assert_eq!(doc, "alice in #general: message 1\nalice in #general: message 3\nalice in #general: message 4");
        assert_eq!(c.document(&at(5, "general", 4 * MIN)).lines().count(), 3);
        // After a gap longer than CONTEXT_GAP_US a new conversation starts.
        assert_eq!(c.document(&at(6, "general", 4 * MIN + CONTEXT_GAP_US + 1)), "alice in #general: message 6");
        // No context asked for: the message alone.
        assert_eq!(Context::new(0).document(&at(7, "ops", 0)), "alice in #ops: message 7");
    }
}
