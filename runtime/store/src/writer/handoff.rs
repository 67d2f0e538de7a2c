//! A persona's hand-off between nodes: all its rows leave one database in one transaction
//! ([`Writer::release`]) and arrive in another in one transaction ([`Writer::adopt`]), with the
//! persona's placement. The snapshot travels in the `forwards` table of the node it leaves, so
//! it is kept until the other node has stored it.

use std::sync::Arc;

use redb::ReadableTable;

use mindfleet_core::event::Event;
use mindfleet_core::stored::{HandOff, PersonaSnapshot, Rows};

use crate::behind::Unheld;
use crate::schema::Tables;
use crate::writer::Writer;
use crate::{dec, enc};

type Numbered<'a, 't> = &'a mut redb::Table<'t, (&'static str, u64), &'static [u8]>;
type Named<'a, 't> = &'a mut redb::Table<'t, (&'static str, &'static str), &'static [u8]>;

impl<'t> Tables<'t> {
    /// The tables keyed by (persona, number), by name.
    fn numbered(&mut self) -> [(&'static str, Numbered<'_, 't>); 11] {
        [
            ("decisions", &mut self.decisions),
            ("memory", &mut self.memory),
            ("evictions", &mut self.evictions),
            ("dead_letters", &mut self.dead_letters),
            ("plans", &mut self.plans),
            ("experiences", &mut self.experiences),
            ("knowledge", &mut self.knowledge),
            ("consolidations", &mut self.consolidations),
            ("conversation", &mut self.conversation),
            ("observations", &mut self.observations),
            ("studies", &mut self.studies),
        ]
    }

    /// The tables keyed by (persona, name), by name.
    fn named(&mut self) -> [(&'static str, Named<'_, 't>); 5] {
        [
            ("learnings", &mut self.learnings),
            ("procedures", &mut self.procedures),
            ("profiles", &mut self.profiles),
            ("references", &mut self.references),
            // Calls waiting for approval and those that may not run twice go with the persona.
            ("tool_calls", &mut self.tool_calls),
        ]
    }
}

/// The stored placement of a persona: its node and the version of that placement.
pub(super) fn placement_row(node: &str, version: u64) -> Vec<u8> {
    enc(&(node, version))
}

pub(crate) fn placement_of(row: &[u8]) -> Result<(String, u64), redb::Error> {
    dec(row)
}

impl Writer {
    /// Takes every row of `persona` out of the database (its held writes first) and returns
    /// them, placed on `node` at `version`. Its placement row says where it went.
    pub(super) fn release(
        &mut self,
        t: &mut Tables<'_>,
        persona: &Arc<str>,
        node: &str,
        version: u64,
    ) -> Result<PersonaSnapshot, redb::Error> {
        self.write_held_of(t, persona)?;
        let p: &str = persona;
        let mut s = PersonaSnapshot { persona: p.to_string(), node: node.to_string(), version, ..Default::default() };
        for (name, table) in t.numbered() {
            let rows: Rows<u64> = table
                .range((p, 0)..=(p, u64::MAX))?
                .map(|r| r.map(|(k, v)| (k.value().1, v.value().to_vec())))
                .collect::<Result<_, _>>()?;
            for (n, _) in &rows {
                table.remove((p, *n))?;
            }
            if !rows.is_empty() {
                s.numbered.push((name.to_string(), rows));
            }
        }
        for (name, table) in t.named() {
            let mut rows = Vec::new();
            for r in table.range((p, "")..)? {
                let (k, v) = r?;
                if k.value().0 != p {
                    break;
                }
                rows.push((k.value().1.to_string(), v.value().to_vec()));
            }
            for (n, _) in &rows {
                table.remove((p, n.as_str()))?;
            }
            if !rows.is_empty() {
                s.named.push((name.to_string(), rows));
            }
        }
        s.self_state = t.self_state.remove(p)?.map(|g| g.value().to_vec());
        let mut counters = Vec::new();
        for r in t.counters.range((p, "")..)? {
            let (k, v) = r?;
            if k.value().0 != p {
                break;
            }
            counters.push((k.value().1.to_string(), v.value()));
        }
        for (name, _) in &counters {
            t.counters.remove((p, name.as_str()))?;
        }
        s.counters = counters;
        // Room memberships stay: every node routes by them.
        for r in t.rooms.iter()? {
            let (k, _) = r?;
            if k.value().1 == p {
                s.rooms.push(k.value().0.to_string());
            }
        }
        let seqs: Vec<u64> = self.pending_of.get(p).map(|s| s.iter().copied().collect()).unwrap_or_default();
        for seq in seqs {
            let crashes = t.pending.get((seq, p))?.map_or(0, |g| g.value());
            let event = t.events.get(seq)?.map(|g| g.value().to_vec());
            self.finish_delivery(t, p, seq)?;
            if let Some(event) = event {
                s.pending.push((event, crashes));
            }
        }
        self.journal_counts.remove(p);
        t.placement.insert(p, placement_row(node, version).as_slice())?;
        Ok(s)
    }

    /// Writes a persona's rows from another node, and places it here. A snapshot of a version
    /// already placed here (sent again) changes nothing.
    pub(super) fn adopt(&mut self, t: &mut Tables<'_>, s: PersonaSnapshot) -> Result<HandOff, redb::Error> {
        let p = s.persona.as_str();
        let mut done = HandOff {
            persona: s.persona.clone(),
            node: s.node.clone(),
            version: s.version,
            rows: s.rows(),
            pending: s.pending.len(),
            duplicate: false,
        };
        if let Some(row) = t.placement.get(p)? {
            let (_, version) = placement_of(row.value())?;
            if version >= s.version {
                done.duplicate = true;
                return Ok(done);
            }
        }
        for (name, rows) in &s.numbered {
            let Some((_, table)) = t.numbered().into_iter().find(|(n, _)| n == name) else {
                return Err(redb::Error::Corrupted(format!("persona snapshot: unknown table {name:?}")));
            };
            for (n, v) in rows {
                table.insert((p, *n), v.as_slice())?;
            }
            // Numbers this node gives later stay above the persona's, so its rows keep their order.
            let Some(top) = rows.iter().map(|(n, _)| *n).max() else { continue };
            let next = match name.as_str() {
                "decisions" => Some(&mut self.meta.next_decision),
                "evictions" => Some(&mut self.meta.next_eviction),
                "dead_letters" => Some(&mut self.meta.next_dead),
                "plans" => Some(&mut self.meta.next_plan),
                "experiences" | "knowledge" | "consolidations" => Some(&mut self.meta.next_memory),
                // Keyed by the delivery's seq: later deliveries must not reuse one.
                "conversation" => Some(&mut self.meta.next_seq),
                _ => None,
            };
            if let Some(next) = next {
                *next = (*next).max(top + 1);
            }
        }
        for (name, rows) in &s.named {
            let Some((_, table)) = t.named().into_iter().find(|(n, _)| n == name) else {
                return Err(redb::Error::Corrupted(format!("persona snapshot: unknown table {name:?}")));
            };
            for (n, v) in rows {
                table.insert((p, n.as_str()), v.as_slice())?;
            }
        }
        if let Some(state) = &s.self_state {
            t.self_state.insert(p, state.as_slice())?;
        }
        for (name, n) in &s.counters {
            t.counters.insert((p, name.as_str()), *n)?;
        }
        for room in &s.rooms {
            t.rooms.insert((room.as_str(), p), ())?;
        }
        let persona: Arc<str> = p.into();
        for (bytes, crashes) in &s.pending {
            let event: Event = dec(bytes)?;
            // An event this node stored too (it went to personas of both) keeps its seq here.
            let known = t.event_ids.get(event.id.as_str())?.map(|g| g.value());
            let seq = match known {
                Some(seq) => seq,
                None => self.put_event(t, event, &[])?.0,
            };
            if t.pending.insert((seq, p), *crashes)?.is_none() {
                self.pending_of.entry(persona.clone()).or_default().insert(seq);
                let n = t.pending_by_seq.get(seq)?.map_or(0, |g| g.value());
                t.pending_by_seq.insert(seq, n + 1)?;
                self.meta.pending += 1;
            }
        }
        self.journal_counts.remove(p);
        t.placement.insert(p, placement_row(&s.node, s.version).as_slice())?;
        Ok(done)
    }

    /// Writes the held writes of `persona` now, and drops its decisions from `decision_log`.
    /// What it takes out of `held` waits in `unheld` until the transaction ends.
    fn write_held_of(&mut self, t: &mut Tables<'_>, persona: &Arc<str>) -> Result<(), redb::Error> {
        let unheld = self.held.take_of(persona);
        let held = self.held.of(persona, self.cfg.write_behind);
        let (decisions, others): (Vec<_>, Vec<_>) =
            std::mem::take(&mut held.decisions).into_iter().partition(|(p, _, _)| p == persona);
        held.decisions = others;
        let result = write_unheld(&mut self.meta.next_eviction, t, &unheld);
        self.unheld.push(unheld);
        result?;
        let p: &str = persona;
        for (_, key, d) in decisions {
            t.decisions.insert((p, key), enc(&d).as_slice())?;
            t.decision_log.remove(key)?;
        }
        Ok(())
    }
}

/// Writes a persona's held state, memory and evictions taken out for a hand-off.
fn write_unheld(next_eviction: &mut u64, t: &mut Tables<'_>, u: &Unheld) -> Result<(), redb::Error> {
    let p: &str = &u.persona;
    if let Some(state) = &u.state {
        t.self_state.insert(p, enc(&**state).as_slice())?;
    }
    for (id, e) in &u.memory {
        match e {
            Some(e) => t.memory.insert((p, *id), enc(&**e).as_slice())?,
            None => t.memory.remove((p, *id))?,
        };
    }
    for ev in &u.evictions {
        let key = *next_eviction;
        *next_eviction += 1;
        t.evictions.insert((p, key), enc(ev).as_slice())?;
    }
    Ok(())
}
