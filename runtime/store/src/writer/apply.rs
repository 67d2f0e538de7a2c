//! One function per request the writer applies inside a batch's transaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use ractor::RpcReplyPort;
use redb::ReadableTable;
use tokio::sync::oneshot;

use mindfleet_core::event::Event;
use mindfleet_core::history::Committed;
use mindfleet_core::messages::{Deferral, Delivery, InjectAck, InjectError, PersonaCommit};
use mindfleet_core::record::{DeadLetter, Decision, SelfStateData, Verdict, WmEntry};
use mindfleet_core::stored::HandOff;
use mindfleet_core::time::now_us;
use mindfleet_core::webhook::{HookDelivery, HookKind};

use super::handoff;
use super::journal::{deliver, mark_said, put_said};
use super::{AfterCommit, Injected, NotCommitted, Writer};
use crate::op::{Op, Release};
use crate::schema::Tables;
use crate::{FORWARD_ADOPT, Forward, InboxRestore, Reopened, StorageError, Target, dec, enc};

impl Writer {
    /// Applies one request inside the batch's transaction; true when it wrote anything.
    pub(crate) fn apply(
        &mut self,
        t: &mut Tables<'_>,
        op: Op,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        match op {
            Op::Inject { event, targets, elsewhere, reply } => {
                self.on_inject(t, event, targets, elsewhere, reply, after)
            }
            Op::Commit { commit, reply_targets, elsewhere, forwards } => {
                self.on_commit(t, commit, reply_targets, elsewhere, forwards, after)
            }
            Op::Consolidate(persona, c) => {
                self.put_consolidation(t, &persona, *c)?;
                Ok(true)
            }
            Op::Forwarded(node, seq) => {
                t.forwards.remove((&*node, seq))?;
                Ok(true)
            }
            Op::Release(release) => self.on_release(t, release, after),
            Op::Adopt(snapshot, reply) => {
                let done = self.adopt(t, *snapshot)?;
                after.push(Box::new(move |r| {
                    let _ = reply.send(r.map(|_| done).map_err(NotCommitted::error));
                    None
                }));
                Ok(true)
            }
            Op::Place(persona, node, version) => {
                let newer = match t.placement.get(&*persona)? {
                    Some(row) => handoff::placement_of(row.value())?.1 < version,
                    None => true,
                };
                if newer {
                    t.placement.insert(&*persona, handoff::placement_row(&node, version).as_slice())?;
                }
                Ok(newer)
            }
            Op::JoinRoom(room, persona) => {
                t.rooms.insert((room.as_str(), &*persona), ())?;
                Ok(true)
            }
            Op::Record(persona, batch) => {
                self.put_record(t, &persona, batch, None)?;
                Ok(true)
            }
            Op::SelectReference(persona, m) => {
                t.references.insert((&*persona, m.id.as_str()), enc(&*m).as_slice())?;
                Ok(true)
            }
            Op::ToolCall(journal, reply) => {
                self.journal_call(t, &journal)?;
                if let Some(reply) = reply {
                    after.push(Box::new(move |r| {
                        let _ = reply.send(r.map_err(NotCommitted::error));
                        None
                    }));
                }
                Ok(true)
            }
            Op::Study(persona, session, knowledge) => {
                self.put_study(t, &persona, &session, knowledge.as_deref())?;
                Ok(true)
            }
            Op::SaidMarks(persona, marks) => {
                mark_said(t, &persona, marks)?;
                Ok(true)
            }
            Op::PutSelfState(persona, state) => {
                self.held.of(&persona, self.cfg.write_behind).states.insert(persona, state);
                Ok(false)
            }
            Op::PutMemory(persona, entry) => {
                self.held.of(&persona, self.cfg.write_behind).memory.insert((persona, entry.id), Some(entry));
                Ok(false)
            }
            Op::DeleteMemory(persona, id, eviction) => {
                let held = self.held.of(&persona, self.cfg.write_behind);
                if let Some(ev) = eviction {
                    held.evictions.push((persona.clone(), ev));
                }
                held.memory.insert((persona, id), None);
                Ok(false)
            }
            Op::Crash { persona, seq, reason } => self.on_crash(t, persona, seq, reason),
            Op::LoadSelfState(persona, tx) => self.load_self_state(t, persona, tx, after),
            Op::LoadMemory(persona, tx) => self.load_memory(t, persona, tx, after),
            Op::LoadInbox(persona, tx) => self.load_inbox(t, persona, tx, after),
            Op::LoadDeferred(persona, tx) => self.load_deferred(t, persona, tx, after),
            Op::Reopen(persona, seq, tx) => self.on_reopen(t, persona, seq, tx, after),
            Op::HookRoutes(routes) => {
                let routes = routes.into_iter().map(|(r, wake)| super::hooks::Route::new(r, wake)).collect();
                self.on_routes(t, routes)
            }
            Op::HookAcked(name, key) => self.on_hook_acked(t, &name, key),
            Op::HookFailed(name, key, error) => self.on_hook_failed(t, &name, key, error),
            Op::HookDead(name, key, why) => self.on_hook_dead(t, &name, key, why),
            Op::HookRetry(name, tx) => self.on_hook_retry(t, name, tx, after),
            Op::Stats(tx) => {
                // Answered once what the figures count is committed, so a reader that asks
                // for the figures first and then reads the tables finds everything counted.
                let stats = self.stats();
                after.push(Box::new(move |r| match r {
                    Err(n) if n.retried() => Some(Op::Stats(tx)),
                    _ => {
                        let _ = tx.send(stats);
                        None
                    }
                }));
                Ok(false)
            }
            Op::Flush(tx) => {
                after.push(Box::new(move |r| match r {
                    Err(n) if n.retried() => Some(Op::Flush(tx)),
                    _ => {
                        let _ = tx.send(());
                        None
                    }
                }));
                Ok(false)
            }
            Op::Close(_) => unreachable!("taken out of the batch by the writer loop"),
        }
    }

    /// Stores an event (see [`Writer::inject`]) and answers once committed; delivers it then.
    fn on_inject(
        &mut self,
        t: &mut Tables<'_>,
        event: Box<Event>,
        targets: Vec<Target>,
        elsewhere: u32,
        reply: RpcReplyPort<Result<InjectAck, InjectError>>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        match self.inject(t, event, &targets) {
            Ok(injected) => {
                let wrote = !matches!(injected, Injected::Duplicate(_));
                after.push(Box::new(move |r| {
                    let answer = match (r, injected) {
                        (Err(not), _) => Err(not.refusal()),
                        (Ok(()), Injected::Duplicate(ack)) => Ok(ack),
                        (Ok(()), Injected::QueueFull(pending)) => Err(InjectError::QueueFull { pending }),
                        (Ok(()), Injected::Stored { ack, seq, event }) => {
                            let _ = reply.send(Ok(ack));
                            deliver(&targets, elsewhere, seq, &event);
                            return None;
                        }
                    };
                    let _ = reply.send(answer);
                    None
                }));
                Ok(wrote)
            }
            Err(e) => {
                // Refused with the batch's failure, which this error makes.
                after.push(Box::new(move |r| {
                    let _ = reply.send(Err(r.err().map_or_else(
                        || InjectError::Storage("not stored: the batch failed".into()),
                        NotCommitted::refusal,
                    )));
                    None
                }));
                Err(e)
            }
        }
    }

    /// Stores a persona's decision on a delivery, with its plan, reply and chat message; hands the reply to its personas once committed.
    fn on_commit(
        &mut self,
        t: &mut Tables<'_>,
        commit: Box<PersonaCommit>,
        reply_targets: Vec<Target>,
        elsewhere: u32,
        forwards: Vec<Forward>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        let PersonaCommit { persona, seq, accepted_us, decision, reply, plan, said, defer, recorded } = *commit;
        let digest = recorded.as_ref().map_or(0, |r| r.digest);
        let mut committed = Committed { seq, decision: None, plan: None, outbox: None, digest };
        let kept = match &defer {
            // Deferred: the delivery stays pending, aside from the inbox, until taken up.
            Some(p) => {
                t.pending.get((seq, &*persona))?.is_some() && {
                    t.deferred.insert((seq, &*persona), enc(p).as_slice())?;
                    true
                }
            }
            None => self.finish_delivery(t, &persona, seq)?,
        };
        if !kept {
            self.stats.stale_finishes += 1;
            // What led to it happened all the same: the history keeps it.
            let Some(recorded) = recorded else { return Ok(false) };
            self.put_record(t, &persona, recorded.rows, Some(committed))?;
            return Ok(true);
        }
        if matches!(decision.verdict, Verdict::Shed | Verdict::Duplicate) {
            let name = decision.verdict.as_str();
            let n = t.counters.get((&*persona, name))?.map_or(0, |g| g.value());
            t.counters.insert((&*persona, name), n + 1)?;
        }
        *self.stats.decisions_by_verdict.entry(decision.verdict.as_str().to_string()).or_default() += 1;
        committed.decision = Some(self.put_decision(t, &persona, decision)?);
        self.stats.decisions += 1;
        if let Some(said) = said {
            put_said(t, &persona, &said)?;
        }
        if let Some(plan) = plan {
            committed.plan = Some(self.put_plan(t, &persona, &plan)?);
        }
        let latency_ms = (now_us() - accepted_us).max(0) as f64 / 1e3;
        self.decision_ms.push(latency_ms);
        self.decision_all.push(latency_ms);
        self.stats.decision_latency.observe(latency_ms);
        if let Some((entry, event)) = reply {
            let seq = self.put_outbox(t, &entry)?;
            committed.outbox = Some(seq - 1);
            self.queue_hooks(t, HookKind::Reply, &persona, &entry.room, || HookDelivery::reply(seq, &entry))?;
            let (rseq, event) = self.put_event(t, event, &reply_targets)?;
            for f in &forwards {
                t.forwards.insert((&*f.node, rseq), f.request.as_slice())?;
            }
            after.push(Box::new(move |r| {
                if r.is_ok() {
                    deliver(&reply_targets, elsewhere, rseq, &event);
                    for f in forwards {
                        let _ = f.to.send((rseq, f.request));
                    }
                }
                None
            }));
        }
        if let Some(recorded) = recorded {
            self.put_record(t, &persona, recorded.rows, Some(committed))?;
        }
        Ok(true)
    }

    /// Takes a persona's rows out and keeps them for its new node, in order with the replies around them.
    fn on_release(
        &mut self,
        t: &mut Tables<'_>,
        release: Release,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        let Release { persona, version, node, to, reply } = release;
        let snapshot = self.release(t, &persona, &node, version)?;
        let done = HandOff {
            persona: persona.to_string(),
            node: node.to_string(),
            version,
            rows: snapshot.rows(),
            pending: snapshot.pending.len(),
            duplicate: false,
        };
        // Kept under a seq, so it goes out in order with the replies around it.
        let key = self.meta.next_seq;
        self.meta.next_seq += 1;
        let mut request = vec![FORWARD_ADOPT];
        request.extend(snapshot.encode());
        t.forwards.insert((&*node, key), request.as_slice())?;
        after.push(Box::new(move |r| {
            if r.is_ok() {
                let _ = to.send((key, request));
            }
            let _ = reply.send(r.map(|_| done).map_err(NotCommitted::error));
            None
        }));
        Ok(true)
    }

    /// Counts a crash of `persona` on delivery `seq`; past the limit the event goes to the dead letters.
    fn on_crash(
        &mut self,
        t: &mut Tables<'_>,
        persona: Arc<str>,
        seq: u64,
        reason: String,
    ) -> Result<bool, redb::Error> {
        let Some(crashes) = t.pending.get((seq, &*persona))?.map(|g| g.value() + 1) else {
            return Ok(false);
        };
        if crashes < self.cfg.max_crashes_per_event {
            t.pending.insert((seq, &*persona), crashes)?;
            return Ok(true);
        }
        let event: Option<Event> = match t.events.get(seq)? {
            Some(b) => Some(dec(b.value())?),
            None => None,
        };
        let (event_id, room) = event.map_or_else(|| (format!("seq {seq}"), String::new()), |e| (e.id, e.room));
        self.finish_delivery(t, &persona, seq)?;
        let now = now_us();
        let dl = DeadLetter {
            persona: persona.to_string(),
            event_id: event_id.clone(),
            crashes,
            reason: reason.clone(),
            at_us: now,
        };
        let key = self.meta.next_dead;
        self.meta.next_dead += 1;
        t.dead_letters.insert((&*persona, key), enc(&dl).as_slice())?;
        self.queue_hooks(t, HookKind::DeadLetter, &persona, &room, || HookDelivery::dead_letter(key + 1, &room, &dl))?;
        let decision = Decision {
            event_id,
            verdict: Verdict::DeadLetter,
            reason: format!("crashed the persona {crashes} times (last: {reason}); moved to the dead letters"),
            by: "supervisor".into(),
            priority: 0.0,
            numbers: vec![("crashes".into(), crashes as f64)],
            at_us: now,
            references: Vec::new(),
            room,
        };
        self.put_decision(t, &persona, decision)?;
        self.stats.dead_letters += 1;
        Ok(true)
    }

    /// Makes a finished delivery pending again; answers once committed.
    fn on_reopen(
        &mut self,
        t: &mut Tables<'_>,
        persona: Arc<str>,
        seq: u64,
        tx: oneshot::Sender<Result<Reopened, StorageError>>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        let outcome = if t.pending.get((seq, &*persona))?.is_some() {
            Reopened::StillPending
        } else {
            match t.events.get(seq)?.map(|b| dec::<Event>(b.value())).transpose()? {
                None => Reopened::Gone,
                Some(event) => {
                    t.pending.insert((seq, &*persona), 0u32)?;
                    self.pending_of.entry(persona.clone()).or_default().insert(seq);
                    let n = t.pending_by_seq.get(seq)?.map_or(0, |g| g.value());
                    t.pending_by_seq.insert(seq, n + 1)?;
                    self.meta.pending += 1;
                    Reopened::Delivery(Delivery { seq, event: Arc::new(event), crashes: 0, audience: 0 })
                }
            }
        };
        let wrote = matches!(outcome, Reopened::Delivery(_));
        after.push(Box::new(move |r| {
            let _ = tx.send(r.map(|_| outcome).map_err(NotCommitted::error));
            None
        }));
        Ok(wrote)
    }

    /// A persona's self-state, through the held writes.
    fn load_self_state(
        &mut self,
        t: &mut Tables<'_>,
        persona: Arc<str>,
        tx: oneshot::Sender<Option<SelfStateData>>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        let v = match (self.held.get(&persona).states.get(&persona), t.self_state.get(&*persona)?) {
            (Some(held), _) => Some((**held).clone()),
            (None, Some(b)) => Some(dec(b.value())?),
            (None, None) => None,
        };
        after.push(Box::new(move |r| match r {
            Err(n) if n.retried() => Some(Op::LoadSelfState(persona, tx)),
            _ => {
                let _ = tx.send(v);
                None
            }
        }));
        Ok(false)
    }

    /// A persona's working memory, through the held writes.
    fn load_memory(
        &mut self,
        t: &mut Tables<'_>,
        persona: Arc<str>,
        tx: oneshot::Sender<Vec<WmEntry>>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        let mut rows = BTreeMap::new();
        for r in t.memory.range((&*persona, 0)..=(&*persona, u64::MAX))? {
            let (k, v) = r?;
            rows.insert(k.value().1, dec::<WmEntry>(v.value())?);
        }
        for (id, e) in self.held.get(&persona).memory_of(&persona) {
            match e {
                Some(e) => rows.insert(*id, (**e).clone()),
                None => rows.remove(id),
            };
        }
        let v: Vec<WmEntry> = rows.into_values().collect();
        after.push(Box::new(move |r| match r {
            Err(n) if n.retried() => Some(Op::LoadMemory(persona, tx)),
            _ => {
                let _ = tx.send(v);
                None
            }
        }));
        Ok(false)
    }

    /// A persona's pending deliveries and inbox counters.
    fn load_inbox(
        &mut self,
        t: &mut Tables<'_>,
        persona: Arc<str>,
        tx: oneshot::Sender<InboxRestore>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        let mut out = InboxRestore::default();
        for &seq in self.pending_of.get(&*persona).into_iter().flatten() {
            let Some(crashes) = t.pending.get((seq, &*persona))? else { continue };
            if t.deferred.get((seq, &*persona))?.is_some() {
                // Aside as a preoccupation: the persona takes it up (`LoadDeferred`).
                continue;
            }
            if let Some(b) = t.events.get(seq)? {
                // The personas still to decide it: all of its audience when none has yet (a
                // restart, or a resync that races the live delivery), so a shared room's
                // turn-taking still holds.
                let audience = t.pending_by_seq.get(seq)?.map_or(1, |g| g.value());
                out.deliveries.push(Delivery {
                    seq,
                    event: Arc::new(dec(b.value())?),
                    crashes: crashes.value(),
                    audience,
                });
            }
        }
        out.shed = t.counters.get((&*persona, Verdict::Shed.as_str()))?.map_or(0, |g| g.value());
        out.duplicates = t.counters.get((&*persona, Verdict::Duplicate.as_str()))?.map_or(0, |g| g.value());
        after.push(Box::new(move |r| match r {
            Err(n) if n.retried() => Some(Op::LoadInbox(persona, tx)),
            _ => {
                let _ = tx.send(out);
                None
            }
        }));
        Ok(false)
    }

    fn load_deferred(
        &mut self,
        t: &mut Tables<'_>,
        persona: Arc<str>,
        tx: oneshot::Sender<Vec<(Delivery, Deferral)>>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<bool, redb::Error> {
        let mut out = Vec::new();
        for &seq in self.pending_of.get(&*persona).into_iter().flatten() {
            let Some(p) = t.deferred.get((seq, &*persona))? else { continue };
            let deferral: Deferral = dec(p.value())?;
            let crashes = t.pending.get((seq, &*persona))?.map_or(0, |g| g.value());
            if let Some(b) = t.events.get(seq)? {
                let event = Arc::new(dec(b.value())?);
                out.push((Delivery { seq, event, crashes, audience: deferral.audience }, deferral));
            }
        }
        after.push(Box::new(move |r| match r {
            Err(n) if n.retried() => Some(Op::LoadDeferred(persona, tx)),
            _ => {
                let _ = tx.send(out);
                None
            }
        }));
        Ok(false)
    }
}
