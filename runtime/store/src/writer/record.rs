//! Every persona's recorded history (`recorded`): batches of entries appended in the order the
//! persona sent them, a commit's batch in the commit's transaction noted with the journal rows
//! it wrote (one row), and the oldest runs of a lifecycle forgotten past `record_rows`. Rows are
//! stored in the order they were committed, every persona's in one sequence, so a commit's rows
//! go to one end of the table together; each names its persona and its first entry's number
//! and is chained to its persona's row before (8 bytes): a batch missing, moved or edited
//! breaks the chain of the next.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use redb::ReadableTable;

use mindfleet_core::history::{Committed, RecordBatch};

use crate::history::RecordRow;
use crate::schema::Tables;
use crate::writer::Writer;

/// Rows removed per commit at most when a history is trimmed, and rows read past looking for
/// them (other personas' rows lie between).
const TRIM_PER_COMMIT: usize = 1024;
const TRIM_SCAN_PER_COMMIT: usize = 16 * TRIM_PER_COMMIT;

/// What the writer knows of the histories, once it has read them.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    /// The place of the next row.
    next_row: u64,
    personas: HashMap<Arc<str>, RecordCount>,
}

/// What the writer knows of one persona's history.
#[derive(Debug, Default)]
struct RecordCount {
    /// The number the next entry gets.
    next: u64,
    /// The first entry kept, and the place of its row (where a trim looks from).
    first: u64,
    first_row: u64,
    /// Each run's first entry (its `Begin`) and the place of its row, oldest first.
    begins: VecDeque<(u64, u64)>,
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
        if self.records.is_none() {
            self.records = Some(count_rows(t)?);
        }
        let recorded = self.records.as_mut().expect("counted above");
        let at = recorded.next_row;
        let count = recorded.personas.entry(persona.clone()).or_default();
        if count.next == count.first {
            count.first_row = at;
        }
        if RecordBatch::begins(&batch.stored) {
            count.begins.push_back((count.next, at));
        }
        let row;
        (count.chain, row) = RecordRow::chained(count.chain, persona, count.next, |row| match committed {
            Some(c) => RecordBatch::noted(&batch.stored, &c, row),
            None => row.extend_from_slice(&batch.stored),
        });
        t.recorded.insert(at, row.as_slice())?;
        recorded.next_row += 1;
        count.next += entries;
        trim(t, persona, count, self.cfg.record_rows)
    }
}

/// The histories as the writer keeps count of them, read once: each row's persona, number and
/// flags, and each persona's last row's entries, so no other row is unpacked.
fn count_rows(t: &Tables<'_>) -> Result<Recorded, redb::Error> {
    let mut recorded = Recorded::default();
    let mut last = HashMap::<Arc<str>, u64>::new();
    for r in t.recorded.iter()? {
        let (k, v) = r?;
        let at = k.value();
        let row = RecordRow::parse(v.value()).map_err(|e| redb::Error::Corrupted(format!("record row {at}: {e}")))?;
        let persona = match recorded.personas.get_key_value(row.persona) {
            Some((p, _)) => p.clone(),
            None => Arc::from(row.persona),
        };
        let count = recorded.personas.entry(persona.clone()).or_insert_with(|| RecordCount {
            first: row.n,
            first_row: at,
            ..RecordCount::default()
        });
        if RecordBatch::begins(row.stored) {
            count.begins.push_back((row.n, at));
        }
        count.chain = row.chain;
        last.insert(persona, at);
        recorded.next_row = at + 1;
    }
    for (persona, at) in last {
        let v = t.recorded.get(at)?.expect("read above");
        let row = RecordRow::parse(v.value()).map_err(|e| redb::Error::Corrupted(format!("record row {at}: {e}")))?;
        let entries = RecordBatch::unpack(row.stored)
            .map_err(|e| redb::Error::Corrupted(format!("record row {at} ({persona}/{}): {e}", row.n)))?;
        recorded.personas.get_mut(&persona).expect("counted above").next = row.n + entries.len() as u64;
    }
    Ok(recorded)
}

/// Past `limit` entries (and a slack of a sixteenth), forgets the oldest runs of the lifecycle,
/// whole, never the one running: a replay starts where a run begins.
fn trim(t: &mut Tables<'_>, persona: &str, count: &mut RecordCount, limit: u64) -> Result<(), redb::Error> {
    if count.next - count.first <= limit + limit / 16 || count.begins.len() < 2 {
        return Ok(());
    }
    // The run to keep first: the oldest whose entries to the end fit in the limit (or the last).
    let last = count.begins[count.begins.len() - 1];
    let (keep_from, keep_row) = count.begins.iter().copied().find(|(b, _)| count.next - b <= limit).unwrap_or(last);
    let mut gone = Vec::new();
    // Where this trim stops reading: the run kept, unless it stops short of it.
    let mut read_to = keep_row;
    for (read, r) in (1..).zip(t.recorded.range(count.first_row..keep_row)?) {
        let (k, v) = r?;
        if RecordRow::of(v.value(), persona) {
            gone.push(k.value());
        }
        if gone.len() == TRIM_PER_COMMIT || read == TRIM_SCAN_PER_COMMIT {
            read_to = k.value() + 1;
            break;
        }
    }
    for at in &gone {
        t.recorded.remove(*at)?;
    }
    // Where the rows left to forget (if any) begin: the first entry kept is counted from there
    // (an entry number later than it, until the trim reaches the run kept).
    count.first_row = read_to;
    if read_to == keep_row {
        count.first = keep_from;
    }
    while count.begins.front().is_some_and(|&(b, _)| b < count.first) {
        count.begins.pop_front();
    }
    Ok(())
}
