//! Retention: the oldest finished events and the oldest rows of each persona's journals are
//! forgotten past their limits, a bounded amount per commit.

use std::collections::HashMap;

use redb::ReadableTable;

use mindfleet_core::event::Event;

use crate::dec;
use crate::schema::Tables;
use crate::writer::Writer;

impl Writer {
    /// Forgets the oldest finished events beyond the retention limit (a bounded amount per
    /// commit, so one commit never stalls on a large backlog).
    pub(crate) fn trim_events(&mut self, t: &mut Tables<'_>) -> Result<(), redb::Error> {
        if self.meta.events_count <= self.cfg.events_retained {
            return Ok(());
        }
        let excess = (self.meta.events_count - self.cfg.events_retained).min(1024) as usize;
        let mut victims = Vec::with_capacity(excess);
        for r in t.events.iter()? {
            if victims.len() == excess {
                break;
            }
            let (k, v) = r?;
            let seq = k.value();
            if t.pending_by_seq.get(seq)?.is_none() {
                victims.push((seq, dec::<Event>(v.value())?.id));
            }
        }
        for (seq, id) in victims {
            t.events.remove(seq)?;
            t.event_ids.remove(id.as_str())?;
            self.meta.events_count -= 1;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Journal {
    Decisions = 0,
    Plans = 1,
    Evictions = 2,
}

/// What the writer knows of one persona's hot journal: inserts since its last sweep, and its
/// number of rows once counted (`None` after opening, and after a failed commit, until the next
/// sweep counts them).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JournalCount {
    pub(crate) since_sweep: u64,
    pub(crate) rows: Option<u64>,
}

/// Keeps a hot journal of `persona` (a table keyed by (persona, n), written with most events) at
/// `limit` rows plus a slack of `limit / 16`: the oldest rows go in one sweep once every slack
/// inserts. The count is kept in memory, not in a counter row, which spares each insert a second
/// B-tree page; a sweep reads only the rows it removes, except the first after opening, which
/// counts them all.
pub(crate) fn trim_journal(
    counts: &mut HashMap<String, [JournalCount; 3]>,
    t: &mut redb::Table<(&str, u64), &[u8]>,
    persona: &str,
    journal: Journal,
    limit: u64,
) -> Result<(), redb::Error> {
    let slack = (limit / 16).max(1);
    let c = match counts.get_mut(persona) {
        Some(c) => &mut c[journal as usize],
        None => &mut counts.entry(persona.to_string()).or_default()[journal as usize],
    };
    c.since_sweep += 1;
    if let Some(rows) = &mut c.rows {
        *rows += 1;
    }
    if c.since_sweep < slack {
        return Ok(());
    }
    c.since_sweep = 0;
    let rows = match c.rows {
        Some(rows) => rows,
        None => {
            let mut n = 0;
            for r in t.range((persona, 0)..=(persona, u64::MAX))? {
                r?;
                n += 1;
            }
            n
        }
    };
    let excess = rows.saturating_sub(limit);
    if excess > 0 {
        let oldest = t
            .range((persona, 0)..=(persona, u64::MAX))?
            .take(excess as usize)
            .map(|r| r.map(|(k, _)| k.value().1))
            .collect::<Result<Vec<u64>, _>>()?;
        for k in oldest {
            t.remove((persona, k))?;
        }
    }
    c.rows = Some(rows - excess);
    Ok(())
}

/// Keeps at most `limit` rows of `persona` in a journal table keyed by (persona, n), counted in
/// `counters` (the long-term tables, whose counts are shown).
pub(crate) fn bounded(
    t: &mut redb::Table<(&str, u64), &[u8]>,
    counters: &mut redb::Table<(&str, &str), u64>,
    persona: &str,
    name: &str,
    limit: u64,
) -> Result<u64, redb::Error> {
    let mut n = counters.get((persona, name))?.map_or(0, |g| g.value()) + 1;
    let mut removed = 0;
    while n > limit {
        let first = t.range((persona, 0)..=(persona, u64::MAX))?.next().transpose()?.map(|(k, _)| k.value().1);
        match first {
            Some(k) => {
                t.remove((persona, k))?;
                n -= 1;
                removed += 1;
            }
            None => break,
        }
    }
    counters.insert((persona, name), n)?;
    Ok(removed)
}
