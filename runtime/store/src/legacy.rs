//! Older layouts, apart from the live one: the migrations from each schema version to the next
//! and the record formats only they read.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use mindfleet_core::conversation::Said;
use mindfleet_core::event::Event;
use mindfleet_core::record::{
    Action, AdjustmentRecord, Criterion, Decision, DraftCheck, ErrorClass, Evaluation, MemoryUse, Plan, PlanRecord,
    Step, StepState, Verdict,
};
use mindfleet_core::refs::RefMatch;

use crate::schema::{
    CONVERSATION, DECISION_LOG, DECISIONS, EVENT_IDS, EVENTS, PENDING, PLANS, RECORD_V13, RECORDED, ROOMS, Tables,
};
use crate::{dec, enc};

/// Before version 4: pending deliveries keyed by persona first.
pub(crate) const DELIVERIES_V3: TableDefinition<(&str, u64), u32> = TableDefinition::new("deliveries");

/// Rows of a table keyed by (persona, number), with their keys.
type Rows<T> = Vec<((String, u64), T)>;

/// Every row of a table keyed by (persona, number), decoded as an older layout's `T`.
fn rows<T: serde::de::DeserializeOwned>(t: &redb::Table<(&str, u64), &[u8]>) -> Result<Rows<T>, redb::Error> {
    t.iter()?
        .map(|r| {
            let (k, v) = r?;
            let (p, n) = k.value();
            Ok(((p.to_string(), n), dec(v.value())?))
        })
        .collect()
}

/// Upgrades from each older schema version to the next; index 0 upgrades version 1.
pub(crate) type Migration = fn(&WriteTransaction) -> Result<(), redb::Error>;
pub(crate) const MIGRATIONS: &[Migration] = &[
    migrate_1_to_2,
    migrate_2_to_3,
    migrate_3_to_4,
    migrate_4_to_5,
    migrate_5_to_6,
    migrate_6_to_7,
    migrate_7_to_8,
    migrate_8_to_9,
    migrate_9_to_10,
    migrate_10_to_11,
    migrate_11_to_12,
    migrate_12_to_13,
    migrate_13_to_14,
];

/// Version 1 kept room memberships made by directed events in memory only: rebuild them
/// from the stored events that were addressed to a persona.
pub(crate) fn migrate_1_to_2(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let events = txn.open_table(EVENTS)?;
    let mut rooms = txn.open_table(ROOMS)?;
    for r in events.iter()? {
        let event: Event = dec(r?.1.value())?;
        if let Some(p) = &event.persona {
            rooms.insert((event.room.as_str(), p.as_str()), ())?;
        }
    }
    Ok(())
}

/// Version 3 adds tables that start empty.
pub(crate) fn migrate_2_to_3(txn: &WriteTransaction) -> Result<(), redb::Error> {
    Tables::open(txn).map(drop)
}

/// Version 4 keys pending deliveries by sequence number first, so that the deliveries of one
/// event, and of events accepted together, share B-tree pages (keyed by persona first, each
/// insert and each finish wrote a page of its own persona).
pub(crate) fn migrate_3_to_4(txn: &WriteTransaction) -> Result<(), redb::Error> {
    {
        let old = txn.open_table(DELIVERIES_V3)?;
        let mut new = txn.open_table(PENDING)?;
        for r in old.iter()? {
            let (k, crashes) = r?;
            let (persona, seq) = k.value();
            new.insert((seq, persona), crashes.value())?;
        }
    }
    txn.delete_table(DELIVERIES_V3)?;
    Ok(())
}

/// A decision as version 4 stored it: without the references.
#[derive(Deserialize)]
pub(crate) struct DecisionV4 {
    pub(crate) event_id: String,
    pub(crate) verdict: Verdict,
    pub(crate) reason: String,
    pub(crate) by: String,
    pub(crate) priority: f64,
    pub(crate) numbers: Vec<(String, f64)>,
    pub(crate) at_us: i64,
}

impl From<DecisionV4> for DecisionV7 {
    fn from(d: DecisionV4) -> DecisionV7 {
        let DecisionV4 { event_id, verdict, reason, by, priority, numbers, at_us } = d;
        DecisionV7 { event_id, verdict, reason, by, priority, numbers, at_us, references: Vec::new() }
    }
}

/// A decision as versions 5 to 7 stored it: without its event's room.
#[derive(Serialize, Deserialize)]
pub(crate) struct DecisionV7 {
    pub(crate) event_id: String,
    pub(crate) verdict: Verdict,
    pub(crate) reason: String,
    pub(crate) by: String,
    pub(crate) priority: f64,
    pub(crate) numbers: Vec<(String, f64)>,
    pub(crate) at_us: i64,
    pub(crate) references: Vec<RefMatch>,
}

/// Version 5 adds the references to decisions (rewritten without any), and the `references`
/// and `conversation` tables (empty).
pub(crate) fn migrate_4_to_5(txn: &WriteTransaction) -> Result<(), redb::Error> {
    rewrite_decisions(txn, |d: DecisionV4| Ok(DecisionV7::from(d)))?;
    Tables::open(txn).map(drop)
}

/// Rewrites every decision of `decisions` and `decision_log`, each read as an older layout's
/// `Old`, as `convert` makes it.
fn rewrite_decisions<Old: serde::de::DeserializeOwned, New: Serialize>(
    txn: &WriteTransaction,
    mut convert: impl FnMut(Old) -> Result<New, redb::Error>,
) -> Result<(), redb::Error> {
    let mut t = txn.open_table(DECISIONS)?;
    let old: Rows<Old> = rows(&t)?;
    for ((p, n), d) in old {
        t.insert((p.as_str(), n), enc(&convert(d)?).as_slice())?;
    }
    let mut log = txn.open_table(DECISION_LOG)?;
    let old: Vec<(u64, (String, Old))> = log
        .iter()?
        .map(|r| {
            let (k, v) = r?;
            Ok((k.value(), dec(v.value())?))
        })
        .collect::<Result<_, redb::Error>>()?;
    for (k, (p, d)) in old {
        log.insert(k, enc(&(p, convert(d)?)).as_slice())?;
    }
    Ok(())
}

/// A plan as version 5 stored it: without the long-term memory it used.
#[derive(Deserialize)]
pub(crate) struct PlanRecordV5 {
    pub(crate) event_id: String,
    pub(crate) domain: String,
    pub(crate) plan: PlanV9,
    pub(crate) replaced: Vec<PlanV9>,
    pub(crate) adjustments: Vec<AdjustmentRecord>,
    pub(crate) evaluation: Option<Evaluation>,
    pub(crate) started_us: i64,
    pub(crate) finished_us: Option<i64>,
}

impl From<PlanRecordV5> for PlanRecordV8 {
    fn from(p: PlanRecordV5) -> PlanRecordV8 {
        let PlanRecordV5 { event_id, domain, plan, replaced, adjustments, evaluation, started_us, finished_us } = p;
        PlanRecordV8 {
            event_id,
            domain,
            plan,
            replaced,
            adjustments,
            evaluation,
            started_us,
            finished_us,
            memory_used: Vec::new(),
        }
    }
}

/// A plan as versions 6 to 8 stored it: without the draft check's finding.
#[derive(Serialize, Deserialize)]
pub(crate) struct PlanRecordV8 {
    pub(crate) event_id: String,
    pub(crate) domain: String,
    pub(crate) plan: PlanV9,
    pub(crate) replaced: Vec<PlanV9>,
    pub(crate) adjustments: Vec<AdjustmentRecord>,
    pub(crate) evaluation: Option<Evaluation>,
    pub(crate) started_us: i64,
    pub(crate) finished_us: Option<i64>,
    pub(crate) memory_used: Vec<MemoryUse>,
}

impl From<PlanRecordV8> for PlanRecordV9 {
    fn from(p: PlanRecordV8) -> PlanRecordV9 {
        let PlanRecordV8 {
            event_id,
            domain,
            plan,
            replaced,
            adjustments,
            evaluation,
            started_us,
            finished_us,
            memory_used,
        } = p;
        PlanRecordV9 {
            event_id,
            domain,
            plan,
            replaced,
            adjustments,
            evaluation,
            started_us,
            finished_us,
            memory_used,
            draft_check: None,
        }
    }
}

/// A plan as versions 1 to 9 stored it: steps without a tool call.
#[derive(Serialize, Deserialize)]
pub(crate) struct PlanV9 {
    pub(crate) goal: String,
    pub(crate) steps: Vec<StepV9>,
    pub(crate) contingencies: Vec<(ErrorClass, Vec<Action>)>,
    pub(crate) criteria: Vec<Criterion>,
    pub(crate) source: String,
    pub(crate) attempt: u32,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct StepV9 {
    pub(crate) action: Action,
    pub(crate) state: StepState,
    pub(crate) contingency: bool,
}

impl From<PlanV9> for Plan {
    fn from(p: PlanV9) -> Plan {
        let PlanV9 { goal, steps, contingencies, criteria, source, attempt } = p;
        let steps = steps
            .into_iter()
            .map(|s| Step { action: s.action, state: s.state, contingency: s.contingency, call: None })
            .collect();
        Plan { goal, steps, contingencies, criteria, source, attempt }
    }
}

/// A plan record as version 9 stored it.
#[derive(Serialize, Deserialize)]
pub(crate) struct PlanRecordV9 {
    pub(crate) event_id: String,
    pub(crate) domain: String,
    pub(crate) plan: PlanV9,
    pub(crate) replaced: Vec<PlanV9>,
    pub(crate) adjustments: Vec<AdjustmentRecord>,
    pub(crate) evaluation: Option<Evaluation>,
    pub(crate) started_us: i64,
    pub(crate) finished_us: Option<i64>,
    pub(crate) memory_used: Vec<MemoryUse>,
    pub(crate) draft_check: Option<DraftCheck>,
}

impl From<PlanRecordV9> for PlanRecord {
    fn from(p: PlanRecordV9) -> PlanRecord {
        let PlanRecordV9 {
            event_id,
            domain,
            plan,
            replaced,
            adjustments,
            evaluation,
            started_us,
            finished_us,
            memory_used,
            draft_check,
        } = p;
        PlanRecord {
            event_id,
            domain,
            plan: plan.into(),
            replaced: replaced.into_iter().map(Plan::from).collect(),
            adjustments,
            evaluation,
            started_us,
            finished_us,
            memory_used,
            draft_check,
        }
    }
}

/// Version 6 adds the long-term memory a plan used to plans (rewritten with none), and the
/// `deferred` table.
pub(crate) fn migrate_5_to_6(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let mut t = txn.open_table(PLANS)?;
    let old: Rows<PlanRecordV5> = rows(&t)?;
    for ((p, n), plan) in old {
        t.insert((p.as_str(), n), enc(&PlanRecordV8::from(plan)).as_slice())?;
    }
    drop(t);
    // And `deferred`, which starts empty.
    Tables::open(txn).map(drop)
}

/// A chat message as version 6 kept it: its time was when it arrived, and it had no other.
#[derive(Deserialize)]
pub(crate) struct SaidV6 {
    pub(crate) seq: u64,
    pub(crate) event_id: String,
    pub(crate) room: String,
    pub(crate) from: String,
    pub(crate) text: String,
    pub(crate) at_us: i64,
    pub(crate) importance: f64,
    pub(crate) embedded: bool,
    pub(crate) recalled: u32,
    pub(crate) last_recalled_us: i64,
}

/// Version 7 keeps when a message was said (its event's `ts`) apart from when it was taken in:
/// the arrival becomes `taken_us`, and `at_us` its event's time where the event is still kept
/// (else the arrival, as before); no message is consolidated yet.
pub(crate) fn migrate_6_to_7(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let events = txn.open_table(EVENTS)?;
    let ids = txn.open_table(EVENT_IDS)?;
    let mut t = txn.open_table(CONVERSATION)?;
    let old: Rows<SaidV6> = rows(&t)?;
    for ((p, n), s) in old {
        let said_at = match ids.get(s.event_id.as_str())? {
            Some(seq) => events.get(seq.value())?.map(|e| dec::<Event>(e.value())).transpose()?.map(|e| e.ts_us),
            None => None,
        };
        let said = Said {
            seq: s.seq,
            event_id: s.event_id,
            room: s.room,
            from: s.from,
            text: s.text,
            at_us: said_at.unwrap_or(s.at_us),
            taken_us: s.at_us,
            importance: s.importance,
            embedded: s.embedded,
            observed: false,
            recalled: s.recalled,
            last_recalled_us: s.last_recalled_us,
        };
        t.insert((p.as_str(), n), enc(&said).as_slice())?;
    }
    drop((t, ids, events));
    // And `observations`, which starts empty.
    Tables::open(txn).map(drop)
}

/// Version 8 keeps the room of the event decided on in each decision (its event's room where the
/// event is still kept, else none), and adds the webhooks' queues (empty).
pub(crate) fn migrate_7_to_8(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let events = txn.open_table(EVENTS)?;
    let ids = txn.open_table(EVENT_IDS)?;
    let room_of = |d: DecisionV7| -> Result<Decision, redb::Error> {
        let room = match ids.get(d.event_id.as_str())? {
            Some(seq) => events.get(seq.value())?.map(|e| dec::<Event>(e.value())).transpose()?.map(|e| e.room),
            None => None,
        };
        let DecisionV7 { event_id, verdict, reason, by, priority, numbers, at_us, references } = d;
        Ok(Decision {
            event_id,
            verdict,
            reason,
            by,
            priority,
            numbers,
            at_us,
            references,
            room: room.unwrap_or_default(),
        })
    };
    rewrite_decisions(txn, room_of)?;
    drop((ids, events));
    Tables::open(txn).map(drop)
}

/// Version 9 adds the draft check's finding to plans (rewritten with none).
pub(crate) fn migrate_8_to_9(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let mut t = txn.open_table(PLANS)?;
    let old: Rows<PlanRecordV8> = rows(&t)?;
    for ((p, n), plan) in old {
        t.insert((p.as_str(), n), enc(&PlanRecordV9::from(plan)).as_slice())?;
    }
    Ok(())
}

/// Version 10 adds the tool call of a `call_tool` step to plans (rewritten with none).
pub(crate) fn migrate_9_to_10(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let mut t = txn.open_table(PLANS)?;
    let old: Rows<PlanRecordV9> = rows(&t)?;
    for ((p, n), plan) in old {
        t.insert((p.as_str(), n), enc(&PlanRecord::from(plan)).as_slice())?;
    }
    Ok(())
}

/// Version 11 adds `record` (created empty with the other tables): a history starts with the
/// first run after the upgrade.
pub(crate) fn migrate_10_to_11(_: &WriteTransaction) -> Result<(), redb::Error> {
    Ok(())
}

/// Version 12 chains `record`'s rows and digests its commits with xxh3 (FNV-1a before) and
/// writes some entries shorter: the histories of version 11 are forgotten (a history starts with
/// the first run after the upgrade).
pub(crate) fn migrate_11_to_12(txn: &WriteTransaction) -> Result<(), redb::Error> {
    txn.open_table(RECORD_V13)?.retain(|_, _| false)?;
    Ok(())
}

/// Version 13 frames `record` entries by length and digests commits from their stored encoding,
/// so a history of 12 would not replay: it is forgotten, as at 12 (the journal stays).
pub(crate) fn migrate_12_to_13(txn: &WriteTransaction) -> Result<(), redb::Error> {
    migrate_11_to_12(txn)
}

/// Version 14 stores every persona's history rows in one sequence, in the order they were
/// committed (`recorded`): the rows of 13 are moved there as they were, a persona's after
/// another's, and `record` is dropped.
pub(crate) fn migrate_13_to_14(txn: &WriteTransaction) -> Result<(), redb::Error> {
    {
        let old = txn.open_table(RECORD_V13)?;
        let mut new = txn.open_table(RECORDED)?;
        let from = new.last()?.map_or(0, |(k, _)| k.value() + 1);
        for (at, r) in (from..).zip(old.iter()?) {
            let (k, v) = r?;
            let ((persona, n), v) = (k.value(), v.value());
            // A row cut shorter than its chain is moved as it is (a replay refuses it there).
            let (chain, stored) = v.split_first_chunk::<8>().map_or((0, v), |(c, s)| (u64::from_le_bytes(*c), s));
            let row = crate::history::RecordRow { persona, n, chain, stored };
            new.insert(at, row.value().as_slice())?;
        }
    }
    txn.delete_table(RECORD_V13)?;
    Ok(())
}
