//! Reads for dumps and introspection: each in its own read transaction, off the writer thread,
//! through the writes the writer still holds back.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;

use mindfleet_core::conversation::Said;
use mindfleet_core::event::Event;
use mindfleet_core::record::{
    CallOutcome, DeadLetter, Decision, Eviction, Learning, OutboxEntry, PlanRecord, ToolStep,
};

use crate::schema::{
    CONSOLIDATIONS, CONVERSATION, COUNTERS, DEAD_LETTERS, DECISION_LOG, DECISIONS, EVENTS, EVICTIONS, EXPERIENCES,
    KNOWLEDGE, LEARNINGS, OUTBOX, PENDING, PLANS, PROCEDURES, PROFILES,
};
use crate::{LongTerm, Storage, StorageError, dec};

impl Storage {
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&redb::ReadTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, StorageError> {
        let Some(db) = self.db.get() else {
            let reason = self.health.failure().map_or_else(|| "reopening the database".into(), |f| f.reason);
            return Err(StorageError::Unavailable { path: self.path.to_path_buf(), reason });
        };
        let txn = db.begin_read().map_err(|e| self.db_err(e))?;
        f(&txn).map_err(|e| self.db_err(e))
    }

    pub(crate) fn db_err(&self, e: impl Into<redb::Error>) -> StorageError {
        StorageError::Db { path: self.path.to_path_buf(), source: e.into() }
    }

    /// Newest decisions of a persona, newest first (blocking read).
    pub fn recent_decisions(&self, persona: &str, n: usize) -> Result<Vec<Decision>, StorageError> {
        Ok(self.recent_decisions_of(&[persona.to_string()], n)?.pop().unwrap_or_default())
    }

    /// The newest `n` decisions of each of `personas`, newest first, in one read: the persona's
    /// `decisions` rows and the ones in `decision_log`. The log can still hold decisions already
    /// copied (it is trimmed only up to the oldest one another group of personas holds), so the
    /// two are merged by decision number. Newest is by when each was made (`at_us`): an event's
    /// decision is journaled when its work ends, so an engaged event's can come after the
    /// decisions its persona made meanwhile on others.
    pub fn recent_decisions_of(&self, personas: &[String], n: usize) -> Result<Vec<Vec<Decision>>, StorageError> {
        self.read(|txn| {
            let mut logged: HashMap<&str, BTreeMap<u64, Decision>> =
                personas.iter().map(|p| (p.as_str(), BTreeMap::new())).collect();
            for r in txn.open_table(DECISION_LOG)?.iter()? {
                let (k, v) = r?;
                let (persona, d): (String, Decision) = dec(v.value())?;
                if let Some(m) = logged.get_mut(persona.as_str()) {
                    m.insert(k.value(), d);
                }
            }
            let t = txn.open_table(DECISIONS)?;
            personas
                .iter()
                .map(|p| {
                    let mut m = logged.remove(p.as_str()).unwrap_or_default();
                    let extra = m.len();
                    for r in t.range((p.as_str(), 0)..=(p.as_str(), u64::MAX))?.rev().take(n.saturating_add(extra)) {
                        let (k, v) = r?;
                        if let std::collections::btree_map::Entry::Vacant(e) = m.entry(k.value().1) {
                            e.insert(dec(v.value())?);
                        }
                    }
                    let mut newest: Vec<Decision> = m.into_values().rev().take(n).collect();
                    newest.sort_by_key(|d| std::cmp::Reverse(d.at_us));
                    Ok(newest)
                })
                .collect()
        })
    }

    /// Newest evictions of a persona, newest first (blocking read).
    pub fn recent_evictions(&self, persona: &str, n: usize) -> Result<Vec<Eviction>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(EVICTIONS)?;
            t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    /// Newest finished plans of a persona, newest first (blocking read).
    pub fn recent_plans(&self, persona: &str, n: usize) -> Result<Vec<PlanRecord>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(PLANS)?;
            t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    /// A persona's long-term memory (blocking read): the newest `n` experiences, knowledge
    /// entries and consolidation reports, every procedure and user profile.
    pub fn long_term(&self, persona: &str, n: usize) -> Result<LongTerm, StorageError> {
        self.read(|txn| {
            pub(crate) fn newest<T: DeserializeOwned>(
                txn: &redb::ReadTransaction,
                def: TableDefinition<(&str, u64), &[u8]>,
                persona: &str,
                n: usize,
            ) -> Result<Vec<T>, redb::Error> {
                let t = txn.open_table(def)?;
                t.range((persona, 0)..=(persona, u64::MAX))?.rev().take(n).map(|r| dec(r?.1.value())).collect()
            }
            pub(crate) fn keyed<T: DeserializeOwned>(
                txn: &redb::ReadTransaction,
                def: TableDefinition<(&str, &str), &[u8]>,
                persona: &str,
            ) -> Result<Vec<T>, redb::Error> {
                let t = txn.open_table(def)?;
                let mut out = Vec::new();
                for r in t.range((persona, "")..)? {
                    let (k, v) = r?;
                    if k.value().0 != persona {
                        break;
                    }
                    out.push(dec(v.value())?);
                }
                Ok(out)
            }
            let counters = txn.open_table(COUNTERS)?;
            Ok(LongTerm {
                experiences: newest(txn, EXPERIENCES, persona, n)?,
                knowledge: newest(txn, KNOWLEDGE, persona, n)?,
                reports: newest(txn, CONSOLIDATIONS, persona, n)?,
                procedures: keyed(txn, PROCEDURES, persona)?,
                profiles: keyed(txn, PROFILES, persona)?,
                experience_count: counters.get((persona, "experiences"))?.map_or(0, |g| g.value()),
                watermark: counters.get((persona, "consolidated"))?.map_or(0, |g| g.value()),
            })
        })
    }

    /// A persona's learnings, most used first (blocking read).
    pub fn learnings(&self, persona: &str) -> Result<Vec<Learning>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(LEARNINGS)?;
            let mut v: Vec<Learning> = t
                .range((persona, "")..)?
                .map_while(|r| match r {
                    Ok((k, v)) if k.value().0 == persona => Some(dec(v.value())),
                    Ok(_) => None,
                    Err(e) => Some(Err(e.into())),
                })
                .collect::<Result<_, _>>()?;
            v.sort_by(|a, b| {
                (b.successes + b.failures).cmp(&(a.successes + a.failures)).then(a.pattern.cmp(&b.pattern))
            });
            Ok(v)
        })
    }

    /// Newest outbox entries, newest first (blocking read).
    pub fn recent_outbox(&self, n: usize) -> Result<Vec<OutboxEntry>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(OUTBOX)?;
            t.iter()?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    /// Up to `n` of the newest outbox entries written at or after `since_us`, newest first: the
    /// read stops at the first older one (blocking read).
    pub fn recent_outbox_since(&self, n: usize, since_us: i64) -> Result<Vec<OutboxEntry>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(OUTBOX)?;
            let mut out = Vec::new();
            for r in t.iter()?.rev().take(n) {
                let o: OutboxEntry = dec(r?.1.value())?;
                if o.at_us < since_us {
                    break;
                }
                out.push(o);
            }
            Ok(out)
        })
    }

    /// The `n` events accepted last, newest first: what was said in the rooms, by people and
    /// by personas.
    pub fn recent_events(&self, n: usize) -> Result<Vec<Event>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(EVENTS)?;
            t.iter()?.rev().take(n).map(|r| dec(r?.1.value())).collect()
        })
    }

    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(DEAD_LETTERS)?;
            t.iter()?.map(|r| dec(r?.1.value())).collect()
        })
    }

    /// Deliveries not finished yet, per persona (blocking read).
    pub fn pending_by_persona(&self) -> Result<BTreeMap<String, Vec<String>>, StorageError> {
        self.read(|txn| {
            let d = txn.open_table(PENDING)?;
            let ev = txn.open_table(EVENTS)?;
            let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for r in d.iter()? {
                let (k, _) = r?;
                let (seq, persona) = k.value();
                let id = match ev.get(seq)? {
                    Some(b) => dec::<Event>(b.value())?.id,
                    None => format!("seq {seq}"),
                };
                out.entry(persona.to_string()).or_default().push(id);
            }
            Ok(out)
        })
    }

    /// Every decision of every persona, by persona and decision number (blocking read; tests and
    /// exports).
    pub fn all_decisions(&self) -> Result<Vec<(String, Decision)>, StorageError> {
        self.read(|txn| {
            let mut all: BTreeMap<(String, u64), Decision> = BTreeMap::new();
            for r in txn.open_table(DECISIONS)?.iter()? {
                let (k, v) = r?;
                let (persona, n) = k.value();
                all.insert((persona.to_string(), n), dec(v.value())?);
            }
            for r in txn.open_table(DECISION_LOG)?.iter()? {
                let (k, v) = r?;
                let (persona, d): (String, Decision) = dec(v.value())?;
                all.entry((persona, k.value())).or_insert(d);
            }
            Ok(all.into_iter().map(|((p, _), d)| (p, d)).collect())
        })
    }
}

/// What the journal keeps of one event (`ai why`).
#[derive(Debug, Default)]
pub struct Why {
    /// Each persona's decision on it, with the persona, oldest first.
    pub decisions: Vec<(String, Decision)>,
    /// The replies posted to it.
    pub replies: Vec<OutboxEntry>,
    /// The tool calls its plans made or asked for, with the persona, in plan order; calls still
    /// waiting for approval last.
    pub calls: Vec<(String, ToolStep)>,
}

impl Storage {
    /// Every decision the journal keeps on the event `event_id`, of every persona of this
    /// storage, and the replies posted to it. Reads the whole journal (`decisions` and
    /// `decision_log`) and the outbox: a question a person asks, not a hot path.
    pub fn why(&self, event_id: &str) -> Result<Why, StorageError> {
        let mut decisions: Vec<(String, Decision)> =
            self.all_decisions()?.into_iter().filter(|(_, d)| d.event_id == event_id).collect();
        decisions.sort_by_key(|(_, d)| d.at_us);
        let waiting =
            self.tool_calls()?.into_iter().filter(|j| j.call.event_id == event_id && j.call.state.is_pending());
        let waiting: Vec<(String, ToolStep)> = waiting
            .map(|j| {
                let outcome = CallOutcome {
                    id: j.call.id.clone(),
                    took_ms: 0,
                    bytes: 0,
                    cut: false,
                    error: None,
                    approval: j.call.state.describe(),
                    summary: String::new(),
                    replayed: false,
                };
                let step = ToolStep {
                    tool: j.call.tool,
                    arguments: j.call.arguments,
                    why: j.call.why,
                    outcome: Some(outcome),
                };
                (j.call.persona, step)
            })
            .collect();
        self.read(|txn| {
            let mut replies = Vec::new();
            for r in txn.open_table(OUTBOX)?.iter()? {
                let o: OutboxEntry = dec(r?.1.value())?;
                if o.in_reply_to == event_id {
                    replies.push(o);
                }
            }
            let mut calls = Vec::new();
            for r in txn.open_table(PLANS)?.iter()? {
                let (k, v) = r?;
                let plan: PlanRecord = dec(v.value())?;
                if plan.event_id != event_id {
                    continue;
                }
                let steps = plan.replaced.iter().chain(std::iter::once(&plan.plan)).flat_map(|p| p.steps.iter());
                let persona = k.value().0.to_string();
                calls.extend(
                    steps.filter_map(|s| s.call.clone().filter(|c| c.outcome.is_some())).map(|c| (persona.clone(), c)),
                );
            }
            // A plan that waits for an approval is not journaled until it ends.
            calls.extend(waiting);
            Ok(Why { decisions, replies, calls })
        })
    }

    /// The sequence number of the newest outbox entry (0: none yet). An entry's sequence
    /// number is its row's key plus one, so that 0 is before every entry.
    pub fn outbox_last(&self) -> Result<u64, StorageError> {
        self.read(|txn| Ok(txn.open_table(OUTBOX)?.last()?.map_or(0, |(k, _)| k.value() + 1)))
    }

    /// Up to `limit` outbox entries after the sequence number `after`, oldest first, each with
    /// its sequence number (`GET /outbox`). The outbox is bounded: entries older than the
    /// oldest kept are gone.
    pub fn outbox_after(&self, after: u64, limit: usize) -> Result<Vec<(u64, OutboxEntry)>, StorageError> {
        self.read(|txn| {
            let t = txn.open_table(OUTBOX)?;
            // The entry of sequence number `after + 1` is the row `after`.
            t.range(after..)?
                .take(limit)
                .map(|r| {
                    let (k, v) = r?;
                    Ok((k.value() + 1, dec(v.value())?))
                })
                .collect()
        })
    }
}

/// What was said in a room, as this storage kept it (`ai history`).
#[derive(Debug, Default)]
pub struct RoomHistory {
    /// The room's messages its personas took in (conversation memory), each once, by when
    /// they were said.
    pub said: Vec<Said>,
    /// The replies its personas posted there (the outbox), oldest first.
    pub replies: Vec<OutboxEntry>,
}

impl Storage {
    /// The room's history: what its personas took in and posted there, each message once. Reads
    /// every persona's conversation memory and the outbox: bounded as they are.
    pub fn room_history(&self, room: &str) -> Result<RoomHistory, StorageError> {
        self.read(|txn| {
            let mut said: BTreeMap<String, Said> = BTreeMap::new();
            for r in txn.open_table(CONVERSATION)?.iter()? {
                let s: Said = dec(r?.1.value())?;
                if s.room == room {
                    said.entry(s.event_id.clone()).or_insert(s);
                }
            }
            let mut said: Vec<Said> = said.into_values().collect();
            said.sort_by_key(|s| (s.at_us, s.seq));
            let mut replies = Vec::new();
            for r in txn.open_table(OUTBOX)?.iter()? {
                let o: OutboxEntry = dec(r?.1.value())?;
                if o.room == room {
                    replies.push(o);
                }
            }
            Ok(RoomHistory { said, replies })
        })
    }
}

/// The decisions of `decision_log`, oldest first.
pub(crate) fn load_decision_log(db: &Database) -> Result<Vec<(Arc<str>, u64, Decision)>, redb::Error> {
    let txn = db.begin_read()?;
    let log = txn.open_table(DECISION_LOG)?;
    log.iter()?
        .map(|r| {
            let (k, v) = r?;
            let (persona, d): (String, Decision) = dec(v.value())?;
            Ok((persona.into(), k.value(), d))
        })
        .collect()
}

pub(crate) fn load_pending_of(db: &Database) -> Result<HashMap<Arc<str>, BTreeSet<u64>>, redb::Error> {
    let txn = db.begin_read()?;
    let mut out: HashMap<Arc<str>, BTreeSet<u64>> = HashMap::new();
    for r in txn.open_table(PENDING)?.iter()? {
        let (k, _) = r?;
        let (seq, persona) = k.value();
        match out.get_mut(persona) {
            Some(seqs) => seqs.insert(seq),
            None => out.entry(persona.into()).or_default().insert(seq),
        };
    }
    Ok(out)
}
