//! Each persona's recorded history (`record`): rows appended in the order the persona sent them,
//! a commit's rows in the commit's transaction followed by a note of the journal rows it wrote,
//! and the oldest runs of a lifecycle forgotten past `record_rows`. Each row is stored behind
//! its chain (8 bytes): a row missing, moved or edited breaks the chain of the next.

use std::collections::VecDeque;
use std::sync::Arc;

use redb::ReadableTable;

use mindfleet_core::record::Committed;

use crate::history;
use crate::schema::Tables;
use crate::writer::Writer;

/// Rows removed per commit at most when a history is trimmed (the rest goes with later ones).
const TRIM_PER_COMMIT: usize = 4096;

/// What the writer knows of one persona's history once it has read it.
#[derive(Debug, Default)]
pub(crate) struct RecordCount {
    next: u64,
    rows: u64,
    /// The key of each run's first row (its `Begin`), oldest first.
    begins: VecDeque<u64>,
    /// The chain of the last row (see `history::chain`).
    chain: u64,
}

/// Whether a row is a `Begin` entry: a lifecycle was built there.
fn begins_a_run(row: &[u8]) -> bool {
    row.starts_with(b"{\"Begin\"")
}

/// The row a commit's note is: `{"Committed": {...}}`, as `mindfleet_cognition::history::Entry`
/// reads it.
fn committed_row(c: Committed) -> Vec<u8> {
    #[derive(serde::Serialize)]
    enum Row {
        Committed(Committed),
    }
    serde_json::to_vec(&Row::Committed(c)).expect("plain data")
}

impl Writer {
    /// Appends `rows` to the history of `persona`, then the note of `committed`.
    pub(crate) fn put_record(
        &mut self,
        t: &mut Tables<'_>,
        persona: &Arc<str>,
        rows: Vec<Vec<u8>>,
        committed: Option<Committed>,
    ) -> Result<(), redb::Error> {
        if !self.records.contains_key(persona) {
            let count = count_rows(t, persona)?;
            self.records.insert(persona.clone(), count);
        }
        let count = self.records.get_mut(persona).expect("inserted above");
        for row in rows.iter().map(Vec::as_slice).chain(committed.map(committed_row).as_deref()) {
            if begins_a_run(row) {
                count.begins.push_back(count.next);
            }
            count.chain = history::chain(count.chain, row);
            let mut stored = Vec::with_capacity(8 + row.len());
            stored.extend_from_slice(&count.chain.to_le_bytes());
            stored.extend_from_slice(row);
            t.record.insert((&**persona, count.next), stored.as_slice())?;
            count.next += 1;
            count.rows += 1;
        }
        trim(t, persona, count, self.cfg.record_rows)
    }
}

fn count_rows(t: &Tables<'_>, persona: &str) -> Result<RecordCount, redb::Error> {
    let mut count = RecordCount::default();
    for r in t.record.range((persona, 0)..=(persona, u64::MAX))? {
        let (k, v) = r?;
        let n = k.value().1;
        let (chain, row) = history::split(v.value())?;
        if begins_a_run(row) {
            count.begins.push_back(n);
        }
        count.chain = chain;
        count.next = n + 1;
        count.rows += 1;
    }
    Ok(count)
}

/// Past `limit` rows (and a slack of a sixteenth), forgets the oldest runs of the lifecycle,
/// whole, never the one running: a replay starts where a run begins.
fn trim(t: &mut Tables<'_>, persona: &str, count: &mut RecordCount, limit: u64) -> Result<(), redb::Error> {
    if count.rows <= limit + limit / 16 || count.begins.len() < 2 {
        return Ok(());
    }
    let first = count.next - count.rows;
    // The run to keep first: the oldest whose rows to the end fit in the limit (or the last).
    let keep_from =
        count.begins.iter().copied().find(|b| count.next - b <= limit).unwrap_or(count.begins[count.begins.len() - 1]);
    let upto = keep_from.min(first + TRIM_PER_COMMIT as u64);
    let mut removed = 0;
    t.record.retain_in((persona, first)..(persona, upto), |_, _| {
        removed += 1;
        false
    })?;
    count.rows -= removed;
    while count.begins.front().is_some_and(|&b| b < upto) {
        count.begins.pop_front();
    }
    Ok(())
}
