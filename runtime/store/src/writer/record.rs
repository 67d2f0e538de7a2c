//! Each persona's recorded history (`record`): batches of entries appended in the order the
//! persona sent them, a commit's batch in the commit's transaction noted with the journal rows
//! it wrote (one row), and the oldest runs of a lifecycle forgotten past `record_rows`. A
//! row is a batch under the number of its first entry, stored behind its chain (8 bytes): a
//! batch missing, moved or edited breaks the chain of the next.

use std::collections::VecDeque;
use std::sync::Arc;

use redb::ReadableTable;

use mindfleet_core::history::{Committed, RecordBatch};

use crate::history;
use crate::schema::Tables;
use crate::writer::Writer;

/// Rows (batches) removed per commit at most when a history is trimmed.
const TRIM_PER_COMMIT: usize = 1024;

/// What the writer knows of one persona's history once it has read it.
#[derive(Debug, Default)]
pub(crate) struct RecordCount {
    /// The number the next entry gets.
    next: u64,
    /// Entries kept, and the first one's number.
    entries: u64,
    first: u64,
    /// The number of each run's first entry (its `Begin`), oldest first.
    begins: VecDeque<u64>,
    /// The chain of the last row.
    chain: u64,
}

impl Writer {
    /// Appends `batch` to the history of `persona`, noted with `committed` (one row).
    pub(crate) fn put_record(
        &mut self,
        t: &mut Tables<'_>,
        persona: &Arc<str>,
        batch: RecordBatch,
        committed: Option<Committed>,
    ) -> Result<(), redb::Error> {
        let entries = batch.entries + u64::from(committed.is_some());
        if entries == 0 {
            return Ok(());
        }
        if !self.records.contains_key(persona) {
            let count = count_rows(t, persona)?;
            self.records.insert(persona.clone(), count);
        }
        let count = self.records.get_mut(persona).expect("inserted above");
        if RecordBatch::begins(&batch.stored) {
            count.begins.push_back(count.next);
        }
        if count.entries == 0 {
            count.first = count.next;
        }
        let row;
        (count.chain, row) = history::chained(count.chain, |row| match committed {
            Some(c) => RecordBatch::noted(&batch.stored, &c, row),
            None => row.extend_from_slice(&batch.stored),
        });
        t.record.insert((&**persona, count.next), row.as_slice())?;
        count.next += entries;
        count.entries += entries;
        trim(t, persona, count, self.cfg.record_rows)
    }
}

/// A persona's history as the writer keeps count of it, read once: each row's key (its first
/// entry's number) and flags, and the last row's entries, so no other row is unpacked.
fn count_rows(t: &Tables<'_>, persona: &str) -> Result<RecordCount, redb::Error> {
    let mut count = RecordCount::default();
    let mut last = None;
    for r in t.record.range((persona, 0)..=(persona, u64::MAX))? {
        let (k, v) = r?;
        let n = k.value().1;
        let (chain, stored) = history::split(v.value())?;
        if RecordBatch::begins(stored) {
            count.begins.push_back(n);
        }
        if last.is_none() {
            count.first = n;
        }
        count.chain = chain;
        last = Some(n);
    }
    if let Some(n) = last {
        let row = t.record.get((persona, n))?.expect("read above");
        let (_, stored) = history::split(row.value())?;
        let entries =
            RecordBatch::unpack(stored).map_err(|e| redb::Error::Corrupted(format!("record {persona}/{n}: {e}")))?;
        count.next = n + entries.len() as u64;
        count.entries = count.next - count.first;
    }
    Ok(count)
}

/// Past `limit` entries (and a slack of a sixteenth), forgets the oldest runs of the lifecycle,
/// whole, never the one running: a replay starts where a run begins.
fn trim(t: &mut Tables<'_>, persona: &str, count: &mut RecordCount, limit: u64) -> Result<(), redb::Error> {
    if count.entries <= limit + limit / 16 || count.begins.len() < 2 {
        return Ok(());
    }
    // The run to keep first: the oldest whose entries to the end fit in the limit (or the last).
    let last = count.begins[count.begins.len() - 1];
    let keep_from = count.begins.iter().copied().find(|b| count.next - b <= limit).unwrap_or(last);
    let mut gone = Vec::new();
    for r in t.record.range((persona, count.first)..(persona, keep_from))?.take(TRIM_PER_COMMIT) {
        gone.push(r?.0.value().1);
    }
    for n in &gone {
        t.record.remove((persona, *n))?;
    }
    // The first entry kept: the next row's.
    count.first = match t.record.range((persona, count.first)..=(persona, u64::MAX))?.next() {
        Some(r) => r?.0.value().1,
        None => count.next,
    };
    count.entries = count.next - count.first;
    while count.begins.front().is_some_and(|&b| b < count.first) {
        count.begins.pop_front();
    }
    Ok(())
}
