//! The database's layout: its tables, the rows kept per persona, the counters the writer caches
//! in `meta`, and every table opened once per write transaction. The layout is described for
//! people in `docs/STORAGE.md`; older layouts and their migrations are in `legacy.rs`.

use redb::{Database, ReadableDatabase, TableDefinition, WriteTransaction};

/// Version of the layout below. Older files are migrated on open, newer ones refused.
/// 1: the first layout. 2: adds `rooms` (memberships made by directed events).
/// 3: adds `plans` and `learnings` (the reasoning loop's journal) and long-term memory:
/// `experiences`, `procedures`, `knowledge`, `profiles`, `consolidations`. 4: pending
/// deliveries keyed by sequence number first. 5: decisions carry the references their event
/// called for; adds `references` (what each persona selected), `conversation` (the chat
/// messages each persona took in) and `studies` (self-directed study sessions). 6: plans carry
/// the long-term memory they used; adds `deferred` (deliveries kept aside as preoccupations).
/// 7: a conversation message keeps when it was said (its event's `ts`), when it was taken in
/// and whether it was consolidated; adds `observations` (what consolidation made of messages).
/// 8: a decision keeps its event's room; adds `hook_queue` and `hook_dead` (webhook deliveries).
/// 9: a plan keeps the draft check's finding on the model's draft. 10: a plan's `call_tool`
/// step keeps its call and what became of it; adds `tool_calls` (calls waiting for approval,
/// and the journal of calls that may not run twice). 11: adds `record` (each persona's recorded
/// history, for `mindfleet replay`). 12: `record` chained and its commits digested with xxh3,
/// some entries written shorter (the histories of 11 are forgotten). 13: `record` entries
/// framed by length, the hot ones binary, each commit's note in its batch's row, commits
/// digested from their stored encoding (the histories of 12 are forgotten). 14: `record` becomes
/// `recorded`, every persona's rows in one sequence in the order they were committed (a
/// commit's rows together on the disk), each naming its persona (the histories of 13 kept).
pub const SCHEMA_VERSION: u64 = 14;
/// The oldest schema whose recorded histories this build replays: an older data dir's are
/// forgotten when it is opened (each later schema keeps them, migrated, or moves this on).
pub const HISTORY_SINCE: u64 = 13;

pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(crate) const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
pub(crate) const EVENT_IDS: TableDefinition<&str, u64> = TableDefinition::new("event_ids");
pub(crate) const PENDING: TableDefinition<(u64, &str), u32> = TableDefinition::new("pending");
pub(crate) const PENDING_BY_SEQ: TableDefinition<u64, u32> = TableDefinition::new("pending_by_seq");
pub(crate) const DECISIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("decisions");
/// Decisions not yet copied into `decisions`, by decision number: (persona, decision).
pub(crate) const DECISION_LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("decision_log");
pub(crate) const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");
pub(crate) const SELF_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("self_state");
pub(crate) const MEMORY: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("memory");
pub(crate) const EVICTIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("evictions");
pub(crate) const DEAD_LETTERS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("dead_letters");
pub(crate) const COUNTERS: TableDefinition<(&str, &str), u64> = TableDefinition::new("counters");
pub(crate) const ROOMS: TableDefinition<(&str, &str), ()> = TableDefinition::new("rooms");
pub(crate) const PLANS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("plans");
pub(crate) const LEARNINGS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("learnings");
pub(crate) const EXPERIENCES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("experiences");
pub(crate) const PROCEDURES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("procedures");
pub(crate) const KNOWLEDGE: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("knowledge");
pub(crate) const PROFILES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("profiles");
pub(crate) const CONSOLIDATIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("consolidations");
/// The references each persona selected: (persona, reference id) -> how it was found.
pub(crate) const REFERENCES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("references");
/// The chat messages each persona took in: (persona, delivery seq) -> `Said`.
pub(crate) const CONVERSATION: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("conversation");
/// What consolidation made of each persona's messages: (persona, observation id) -> `Observation`.
pub(crate) const OBSERVATIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("observations");
/// Each persona's study sessions: (persona, start time in µs) -> `StudySession`.
pub(crate) const STUDIES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("studies");
/// Deliveries a persona deferred: (seq, persona) -> the `Preoccupation` it keeps. The delivery
/// stays in `pending` (so its event is kept) until a later commit finishes it.
pub(crate) const DEFERRED: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("deferred");
/// Replies for personas of other nodes, until their node has stored them: (node, the reply's
/// seq) -> the request to send (opaque here).
pub(crate) const FORWARDS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("forwards");
/// Webhook deliveries not acknowledged yet: (webhook, key from `next_hook`) -> `HookDelivery`.
/// Written in the transaction of the reply (decision, dead letter) it reports.
pub(crate) const HOOK_QUEUE: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("hook_queue");
/// Webhook deliveries that gave up, until `webhooks retry`: same keys and values.
pub(crate) const HOOK_DEAD: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("hook_dead");
/// Tool calls that need a person's approval or may not run twice: (persona, call id) ->
/// `CallJournal` as JSON (its result may hold any JSON).
pub(crate) const TOOL_CALLS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("tool_calls");
/// A fleet across nodes: where each persona that moved runs, persona -> (node, version).
pub(crate) const PLACEMENT: TableDefinition<&str, &[u8]> = TableDefinition::new("placement");
/// Every persona's recorded history, row by row in the order they were committed: place ->
/// the row (`crate::history::RecordRow`: whose, its first entry's number, its chain and its
/// batch of entries). A commit's rows go in together, so each commit writes to one end of
/// the table rather than to a page of each persona's.
pub(crate) const RECORDED: TableDefinition<u64, &[u8]> = TableDefinition::new("recorded");
/// Before version 14: each persona's recorded history under (persona, first entry's number), a
/// row its chain then its batch. The migration to 14 moves its rows; a replay of an older data
/// dir looks in it for a history it cannot read.
pub(crate) const RECORD_V13: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("record");

/// Evictions kept per persona.
pub(crate) const EVICTIONS_KEPT: u64 = 1000;
/// Journaled tool calls kept per persona (those that wait for approval are always kept); the
/// oldest are forgotten once a hundred more were written.
pub(crate) const TOOL_CALLS_KEPT: usize = 1000;
/// Finished plans kept per persona.
pub(crate) const PLANS_KEPT: u64 = 200;

/// Long-term memory limits, per persona.
pub const EXPERIENCES_KEPT: u64 = 1000;
pub const PROCEDURES_PER_DOMAIN: usize = 50;
pub const KNOWLEDGE_KEPT: u64 = 500;
/// Study sessions kept per persona.
pub const STUDIES_KEPT: u64 = 200;
pub(crate) const CONSOLIDATIONS_KEPT: u64 = 100;
/// Chat messages kept per persona for conversation memory.
pub const CONVERSATION_KEPT: u64 = 10_000;
/// Observations kept per persona: a fact per message and a summary per session at most.
pub const OBSERVATIONS_KEPT: u64 = 2 * CONVERSATION_KEPT;

pub(crate) fn open_all(txn: &WriteTransaction) -> Result<(), redb::Error> {
    Tables::open(txn).map(drop)
}

/// Every table, opened once per batch (opening costs more than most single writes).
pub(crate) struct Tables<'t> {
    pub(crate) meta: redb::Table<'t, &'static str, u64>,
    pub(crate) events: redb::Table<'t, u64, &'static [u8]>,
    pub(crate) event_ids: redb::Table<'t, &'static str, u64>,
    pub(crate) pending: redb::Table<'t, (u64, &'static str), u32>,
    pub(crate) pending_by_seq: redb::Table<'t, u64, u32>,
    pub(crate) deferred: redb::Table<'t, (u64, &'static str), &'static [u8]>,
    pub(crate) decisions: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) decision_log: redb::Table<'t, u64, &'static [u8]>,
    pub(crate) outbox: redb::Table<'t, u64, &'static [u8]>,
    pub(crate) self_state: redb::Table<'t, &'static str, &'static [u8]>,
    pub(crate) memory: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) evictions: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) dead_letters: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) counters: redb::Table<'t, (&'static str, &'static str), u64>,
    pub(crate) rooms: redb::Table<'t, (&'static str, &'static str), ()>,
    pub(crate) plans: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) learnings: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(crate) experiences: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) procedures: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(crate) knowledge: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) profiles: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(crate) consolidations: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) references: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(crate) conversation: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) observations: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) studies: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) forwards: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) placement: redb::Table<'t, &'static str, &'static [u8]>,
    pub(crate) hook_queue: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) hook_dead: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    pub(crate) tool_calls: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(crate) recorded: redb::Table<'t, u64, &'static [u8]>,
}

impl<'t> Tables<'t> {
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Tables {
            meta: txn.open_table(META)?,
            events: txn.open_table(EVENTS)?,
            event_ids: txn.open_table(EVENT_IDS)?,
            pending: txn.open_table(PENDING)?,
            pending_by_seq: txn.open_table(PENDING_BY_SEQ)?,
            deferred: txn.open_table(DEFERRED)?,
            decisions: txn.open_table(DECISIONS)?,
            decision_log: txn.open_table(DECISION_LOG)?,
            outbox: txn.open_table(OUTBOX)?,
            self_state: txn.open_table(SELF_STATE)?,
            memory: txn.open_table(MEMORY)?,
            evictions: txn.open_table(EVICTIONS)?,
            dead_letters: txn.open_table(DEAD_LETTERS)?,
            counters: txn.open_table(COUNTERS)?,
            rooms: txn.open_table(ROOMS)?,
            plans: txn.open_table(PLANS)?,
            learnings: txn.open_table(LEARNINGS)?,
            experiences: txn.open_table(EXPERIENCES)?,
            procedures: txn.open_table(PROCEDURES)?,
            knowledge: txn.open_table(KNOWLEDGE)?,
            profiles: txn.open_table(PROFILES)?,
            consolidations: txn.open_table(CONSOLIDATIONS)?,
            references: txn.open_table(REFERENCES)?,
            conversation: txn.open_table(CONVERSATION)?,
            observations: txn.open_table(OBSERVATIONS)?,
            studies: txn.open_table(STUDIES)?,
            forwards: txn.open_table(FORWARDS)?,
            placement: txn.open_table(PLACEMENT)?,
            hook_queue: txn.open_table(HOOK_QUEUE)?,
            hook_dead: txn.open_table(HOOK_DEAD)?,
            tool_calls: txn.open_table(TOOL_CALLS)?,
            recorded: txn.open_table(RECORDED)?,
        })
    }
}

/// Counters kept in `meta`, cached by the writer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meta {
    pub(crate) next_seq: u64,
    pub(crate) next_decision: u64,
    pub(crate) next_outbox: u64,
    pub(crate) next_eviction: u64,
    pub(crate) next_dead: u64,
    pub(crate) next_plan: u64,
    pub(crate) next_memory: u64,
    pub(crate) pending: u64,
    pub(crate) outbox_count: u64,
    pub(crate) events_count: u64,
    pub(crate) next_hook: u64,
}

pub(crate) const META_KEYS: [&str; 11] = [
    "next_seq",
    "next_decision",
    "next_outbox",
    "next_eviction",
    "next_dead",
    "next_plan",
    "next_memory",
    "pending",
    "outbox_count",
    "events_count",
    "next_hook",
];

impl Meta {
    pub(crate) fn fields(&mut self) -> [&mut u64; 11] {
        [
            &mut self.next_seq,
            &mut self.next_decision,
            &mut self.next_outbox,
            &mut self.next_eviction,
            &mut self.next_dead,
            &mut self.next_plan,
            &mut self.next_memory,
            &mut self.pending,
            &mut self.outbox_count,
            &mut self.events_count,
            &mut self.next_hook,
        ]
    }

    pub(crate) fn load(db: &Database) -> Result<Meta, redb::Error> {
        let txn = db.begin_read()?;
        let t = txn.open_table(META)?;
        let mut m = Meta::default();
        for (k, f) in META_KEYS.iter().zip(m.fields()) {
            *f = t.get(*k)?.map_or(0, |g| g.value());
        }
        m.next_seq = m.next_seq.max(1);
        // Keys from 1: a sender reads after the last it finished, 0 before any.
        m.next_hook = m.next_hook.max(1);
        Ok(m)
    }

    pub(crate) fn save(&mut self, t: &mut redb::Table<&str, u64>) -> Result<(), redb::Error> {
        for (k, f) in META_KEYS.iter().zip(self.fields()) {
            t.insert(*k, *f)?;
        }
        Ok(())
    }
}
