//! What the writer stores per request: events and their deliveries, decisions, plans, outbox
//! entries, consolidations, studies and conversation memory, and the hand-over of a stored event
//! to its personas.

use std::collections::BTreeMap;
use std::sync::Arc;

use redb::ReadableTable;

use mindfleet_core::conversation::{Said, SaidMarks};
use mindfleet_core::event::Event;
use mindfleet_core::messages::{Delivery, InjectAck, PersonaMsg};
use mindfleet_core::record::{
    Consolidation, Decision, Knowledge, Learning, OutboxEntry, PlanRecord, Procedure, StudySession, Verdict,
};
use mindfleet_core::time::now_us;
use mindfleet_core::webhook::{HookDelivery, HookKind};

use crate::behind::Behind;
use crate::schema::{
    CONSOLIDATIONS_KEPT, CONVERSATION_KEPT, EVICTIONS_KEPT, EXPERIENCES_KEPT, KNOWLEDGE_KEPT, OBSERVATIONS_KEPT,
    PLANS_KEPT, PROCEDURES_PER_DOMAIN, STUDIES_KEPT, Tables,
};
use crate::writer::trim::{Journal, bounded, trim_journal};
use crate::writer::{Injected, Writer};
use crate::{Target, dec, enc};

impl Writer {
    /// Stores an event for its targets, unless it is known or the durable queue is full.
    pub(crate) fn inject(
        &mut self,
        t: &mut Tables<'_>,
        event: Box<Event>,
        targets: &[Target],
    ) -> Result<Injected, redb::Error> {
        if t.event_ids.get(event.id.as_str())?.is_some() {
            self.stats.duplicates += 1;
            return Ok(Injected::Duplicate(InjectAck {
                event_id: event.id,
                accepted: true,
                duplicate: true,
                personas: Vec::new(),
            }));
        }
        if self.meta.pending + targets.len() as u64 > self.cfg.max_pending {
            let pending = self.meta.pending;
            let reason = format!("durable queue full: {pending} deliveries pending (limit {})", self.cfg.max_pending);
            for (persona, _) in targets {
                self.put_decision(t, persona, skipped(&event, &reason))?;
            }
            return Ok(Injected::QueueFull(pending));
        }
        let (seq, event) = self.put_event(t, *event, targets)?;
        self.stats.accepted += 1;
        let ack = InjectAck {
            event_id: event.id.clone(),
            accepted: true,
            duplicate: false,
            personas: targets.iter().map(|(p, _)| p.to_string()).collect(),
        };
        Ok(Injected::Stored { ack, seq, event })
    }

    /// Writes the held writes of `groups` into the batch's transaction (the caller clears
    /// them once it commits), and drops from `decision_log` what no other group still holds.
    pub(crate) fn write_held(&mut self, t: &mut Tables<'_>, groups: &[usize]) -> Result<(), redb::Error> {
        let limit = self.cfg.decisions_per_persona;
        for &g in groups {
            let held = &self.held.groups[g];
            for (persona, state) in &held.states {
                t.self_state.insert(&**persona, enc(&**state).as_slice())?;
            }
            for ((persona, id), e) in &held.memory {
                match e {
                    Some(e) => t.memory.insert((&**persona, *id), enc(&**e).as_slice())?,
                    None => t.memory.remove((&**persona, *id))?,
                };
            }
            for (persona, ev) in &held.evictions {
                let key = self.meta.next_eviction;
                self.meta.next_eviction += 1;
                t.evictions.insert((&**persona, key), enc(ev).as_slice())?;
                trim_journal(&mut self.journal_counts, &mut t.evictions, persona, Journal::Evictions, EVICTIONS_KEPT)?;
            }
            for (persona, key, d) in &held.decisions {
                t.decisions.insert((&**persona, *key), enc(d).as_slice())?;
                trim_journal(&mut self.journal_counts, &mut t.decisions, persona, Journal::Decisions, limit)?;
            }
        }
        // The log keeps every decision from the oldest one still held on.
        let kept = (0..Behind::GROUPS)
            .filter(|g| !groups.contains(g))
            .filter_map(|g| self.held.groups[g].decisions.first().map(|(_, key, _)| *key))
            .min()
            .unwrap_or(u64::MAX);
        while t.decision_log.first()?.is_some_and(|(k, _)| k.value() < kept) {
            t.decision_log.pop_first()?;
        }
        Ok(())
    }

    /// Stores a new event and one delivery per target; returns its sequence number.
    pub(crate) fn put_event(
        &mut self,
        t: &mut Tables<'_>,
        event: Event,
        targets: &[Target],
    ) -> Result<(u64, Arc<Event>), redb::Error> {
        let seq = self.meta.next_seq;
        self.meta.next_seq += 1;
        t.events.insert(seq, enc(&event).as_slice())?;
        t.event_ids.insert(event.id.as_str(), seq)?;
        self.meta.events_count += 1;
        if !targets.is_empty() {
            for (persona, _) in targets {
                t.pending.insert((seq, &**persona), 0u32)?;
                self.pending_of.entry(persona.clone()).or_default().insert(seq);
            }
            t.pending_by_seq.insert(seq, targets.len() as u32)?;
            self.meta.pending += targets.len() as u64;
        }
        Ok((seq, Arc::new(event)))
    }

    /// Removes a delivery; false when it was not pending (already finished).
    pub(crate) fn finish_delivery(&mut self, t: &mut Tables<'_>, persona: &str, seq: u64) -> Result<bool, redb::Error> {
        if t.pending.remove((seq, persona))?.is_none() {
            return Ok(false);
        }
        t.deferred.remove((seq, persona))?;
        if let Some(seqs) = self.pending_of.get_mut(persona) {
            seqs.remove(&seq);
            if seqs.is_empty() {
                self.pending_of.remove(persona);
            }
        }
        self.meta.pending = self.meta.pending.saturating_sub(1);
        let left = t.pending_by_seq.get(seq)?.map_or(0, |g| g.value()).saturating_sub(1);
        if left == 0 {
            t.pending_by_seq.remove(seq)?;
        } else {
            t.pending_by_seq.insert(seq, left)?;
        }
        Ok(true)
    }

    /// Journals a decision: appended to `decision_log` in this transaction (one page for the
    /// whole batch), and copied into the persona's `decisions` rows with the held writes.
    pub(crate) fn put_decision(
        &mut self,
        t: &mut Tables<'_>,
        persona: &Arc<str>,
        d: Decision,
    ) -> Result<u64, redb::Error> {
        let key = self.meta.next_decision;
        self.meta.next_decision += 1;
        t.decision_log.insert(key, enc(&(&**persona, &d)).as_slice())?;
        self.queue_hooks(t, HookKind::Decision, persona, &d.room, || HookDelivery::decision(key + 1, persona, &d))?;
        self.held.of(persona, self.cfg.write_behind).decisions.push((persona.clone(), key, d));
        Ok(key)
    }

    pub(crate) fn put_consolidation(
        &mut self,
        t: &mut Tables<'_>,
        persona: &str,
        c: Consolidation,
    ) -> Result<(), redb::Error> {
        let mut report = c.report;
        for e in &c.experiences {
            let key = self.meta.next_memory;
            self.meta.next_memory += 1;
            t.experiences.insert((persona, key), enc(e).as_slice())?;
            let gone = bounded(&mut t.experiences, &mut t.counters, persona, "experiences", EXPERIENCES_KEPT)?;
            if gone > 0 {
                report.dropped.push(format!("{gone} oldest experience: limit {EXPERIENCES_KEPT}"));
            }
        }
        for k in &c.knowledge {
            let key = self.meta.next_memory;
            self.meta.next_memory += 1;
            t.knowledge.insert((persona, key), enc(k).as_slice())?;
            let gone = bounded(&mut t.knowledge, &mut t.counters, persona, "knowledge", KNOWLEDGE_KEPT)?;
            if gone > 0 {
                report.dropped.push(format!("{gone} oldest knowledge entry: limit {KNOWLEDGE_KEPT}"));
            }
        }
        for p in &c.procedures {
            t.procedures.insert((persona, p.name.as_str()), enc(p).as_slice())?;
        }
        // At most PROCEDURES_PER_DOMAIN per domain: the least proven go.
        let mut by_domain: BTreeMap<String, Vec<Procedure>> = BTreeMap::new();
        for r in t.procedures.range((persona, "")..)? {
            let (k, v) = r?;
            if k.value().0 != persona {
                break;
            }
            let p: Procedure = dec(v.value())?;
            by_domain.entry(p.domain.clone()).or_default().push(p);
        }
        for (domain, mut ps) in by_domain {
            if ps.len() <= PROCEDURES_PER_DOMAIN {
                continue;
            }
            ps.sort_by(|a, b| {
                (b.success_rate * b.times_used as f64).total_cmp(&(a.success_rate * a.times_used as f64))
            });
            for p in &ps[PROCEDURES_PER_DOMAIN..] {
                t.procedures.remove((persona, p.name.as_str()))?;
                report.dropped.push(format!(
                    "procedure {:?} ({domain}): limit {PROCEDURES_PER_DOMAIN} per domain, least proven",
                    p.name
                ));
            }
        }
        for p in &c.profiles {
            t.profiles.insert((persona, p.user.as_str()), enc(p).as_slice())?;
        }
        t.counters.insert((persona, "consolidated"), c.watermark)?;
        let key = self.meta.next_memory;
        self.meta.next_memory += 1;
        t.consolidations.insert((persona, key), enc(&report).as_slice())?;
        bounded(&mut t.consolidations, &mut t.counters, persona, "consolidations", CONSOLIDATIONS_KEPT)?;
        Ok(())
    }

    /// Keeps a study session, counts its answers in the learning `study: TOPIC` (passed ones
    /// as successes) and keeps the knowledge it left.
    pub(crate) fn put_study(
        &mut self,
        t: &mut Tables<'_>,
        persona: &str,
        s: &StudySession,
        knowledge: Option<&Knowledge>,
    ) -> Result<(), redb::Error> {
        t.studies.insert((persona, s.started_us.max(0) as u64), enc(s).as_slice())?;
        bounded(&mut t.studies, &mut t.counters, persona, "studies", STUDIES_KEPT)?;
        if !s.answers.is_empty() {
            let pattern = format!("study: {}", s.topic);
            let mut l = match t.learnings.get((persona, pattern.as_str()))? {
                Some(b) => dec(b.value())?,
                None => {
                    Learning { pattern: pattern.clone(), domain: "study".into(), successes: 0, failures: 0, last_us: 0 }
                }
            };
            let passed = s.answers.iter().filter(|a| a.passed()).count() as u32;
            l.successes += passed;
            l.failures += s.answers.len() as u32 - passed;
            l.last_us = s.finished_us;
            t.learnings.insert((persona, pattern.as_str()), enc(&l).as_slice())?;
        }
        if let Some(k) = knowledge {
            let key = self.meta.next_memory;
            self.meta.next_memory += 1;
            t.knowledge.insert((persona, key), enc(k).as_slice())?;
            bounded(&mut t.knowledge, &mut t.counters, persona, "knowledge", KNOWLEDGE_KEPT)?;
        }
        Ok(())
    }

    /// Journals a finished plan and counts its pattern as a success or a failure.
    pub(crate) fn put_plan(&mut self, t: &mut Tables<'_>, persona: &str, p: &PlanRecord) -> Result<u64, redb::Error> {
        let key = self.meta.next_plan;
        self.meta.next_plan += 1;
        t.plans.insert((persona, key), enc(p).as_slice())?;
        trim_journal(&mut self.journal_counts, &mut t.plans, persona, Journal::Plans, PLANS_KEPT)?;
        if let Some(e) = &p.evaluation {
            let mut l = match t.learnings.get((persona, e.pattern.as_str()))? {
                Some(b) => dec(b.value())?,
                None => Learning {
                    pattern: e.pattern.clone(),
                    domain: p.domain.clone(),
                    successes: 0,
                    failures: 0,
                    last_us: 0,
                },
            };
            if e.success {
                l.successes += 1;
            } else {
                l.failures += 1;
            }
            l.last_us = p.finished_us.unwrap_or_else(now_us);
            t.learnings.insert((persona, e.pattern.as_str()), enc(&l).as_slice())?;
        }
        Ok(key)
    }

    /// Appends a reply to the outbox; returns its sequence number (its key + 1, as feeds give it).
    pub(crate) fn put_outbox(&mut self, t: &mut Tables<'_>, e: &OutboxEntry) -> Result<u64, redb::Error> {
        let key = self.meta.next_outbox;
        self.meta.next_outbox += 1;
        t.outbox.insert(key, enc(e).as_slice())?;
        self.meta.outbox_count += 1;
        while self.meta.outbox_count > self.cfg.outbox_limit {
            if t.outbox.pop_first()?.is_none() {
                break;
            }
            self.meta.outbox_count -= 1;
        }
        Ok(key + 1)
    }
}

/// Keeps a chat message a persona took in (the oldest go past [`CONVERSATION_KEPT`]).
pub(crate) fn put_said(t: &mut Tables<'_>, persona: &str, said: &Said) -> Result<(), redb::Error> {
    t.conversation.insert((persona, said.seq), enc(said).as_slice())?;
    bounded(&mut t.conversation, &mut t.counters, persona, "conversation", CONVERSATION_KEPT)?;
    Ok(())
}

/// Applies `marks` to the kept messages of `persona`, rewriting each once, and keeps the
/// observations they carry (the oldest go past [`OBSERVATIONS_KEPT`]).
pub(crate) fn mark_said(t: &mut Tables<'_>, persona: &str, marks: SaidMarks) -> Result<(), redb::Error> {
    #[derive(Default)]
    struct Mark {
        embedded: bool,
        observed: bool,
        times: u32,
        at_us: i64,
    }
    let mut by_seq: BTreeMap<u64, Mark> = BTreeMap::new();
    for seq in marks.embedded {
        by_seq.entry(seq).or_default().embedded = true;
    }
    for seq in marks.observed {
        by_seq.entry(seq).or_default().observed = true;
    }
    for (seq, (times, at_us)) in marks.recalled {
        let m = by_seq.entry(seq).or_default();
        (m.times, m.at_us) = (times, at_us);
    }
    for (seq, m) in by_seq {
        let Some(mut said) = t.conversation.get((persona, seq))?.map(|v| dec::<Said>(v.value())).transpose()? else {
            continue;
        };
        said.embedded |= m.embedded;
        said.observed |= m.observed;
        said.recalled += m.times;
        said.last_recalled_us = said.last_recalled_us.max(m.at_us);
        t.conversation.insert((persona, seq), enc(&said).as_slice())?;
    }
    for o in marks.observations {
        // Made again after a crash: it replaces itself, and counts once.
        let again = t.observations.insert((persona, o.id), enc(&o).as_slice())?.is_some();
        if !again {
            bounded(&mut t.observations, &mut t.counters, persona, "observations", OBSERVATIONS_KEPT)?;
        }
    }
    Ok(())
}

pub(crate) fn skipped(event: &Event, reason: &str) -> Decision {
    Decision {
        event_id: event.id.clone(),
        verdict: Verdict::Skipped,
        reason: reason.to_string(),
        by: "admin".into(),
        priority: event.priority.unwrap_or(0.0),
        numbers: Vec::new(),
        at_us: now_us(),
        references: Vec::new(),
        room: event.room.clone(),
    }
}

/// Hands a stored event to its targets here; it went to `elsewhere` personas of other nodes too.
pub(crate) fn deliver(targets: &[Target], elsewhere: u32, seq: u64, event: &Arc<Event>) {
    let audience = targets.len() as u32 + elsewhere;
    for (persona, actor) in targets {
        let sent = actor.as_ref().is_some_and(|a| {
            a.cast(PersonaMsg::Deliver(Delivery { seq, event: event.clone(), crashes: 0, audience })).is_ok()
        });
        if !sent {
            // Stored: the persona's inbox restores it when the persona comes back.
            tracing::debug!(%persona, seq, "persona down; delivery stays queued in storage");
        }
    }
}
