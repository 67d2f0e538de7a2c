//! The `Inbox` actor: a persona's bounded priority queue of stored deliveries.
//!
//! Pushes come from the persona; the persona pulls one event at a time (`Pull`), and the
//! inbox answers with `Own::next` as soon as it has one. When full, the lowest
//! priority event (the newest among equals) is shed; repeats (the same room+sender+text as
//! another delivery within 3 s) are dropped; both are journaled as decisions through the
//! admin, which finishes their delivery in storage: nothing is dropped silently. A delivery
//! it already holds or handed over (a reload racing a push) is the same event, not a repeat,
//! and is skipped; one handed over and returned is queued again. On (re)start, and on `Resync`, it loads every unfinished delivery of its
//! persona from storage.
//!
//! Messages: [`InboxMsg`].

use std::cmp::Reverse;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use mindfleet_core::config::PersonaConfig;
use mindfleet_core::dump::InboxDump;
use mindfleet_core::messages::{AdminMsg, Delivery, FaultTarget, PersonaCommit, PersonaMsg};
use mindfleet_core::record::{Decision, Verdict};
use mindfleet_core::time::now_us;
use mindfleet_store::Storage;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;

use crate::faults::FaultBook;
use crate::gate::{PriorityInput, priority};
use crate::persona::own::Own;

/// Repeats of the same room+sender+text within this window are dropped.
pub const DUPLICATE_WINDOW_US: i64 = 3_000_000;
/// Hand-overs, and deliveries dropped, remembered so that a reload does not queue them again.
const HANDED_KEPT: usize = 256;

#[derive(Debug, RactorMessage)]
pub enum InboxMsg {
    /// A stored delivery, and whether the persona spoke recently in its room.
    Push(Delivery, bool),
    /// The persona is ready for its next event.
    Pull,
    Stats(RpcReplyPort<InboxDump>),
    /// Reload unfinished deliveries from storage and queue the ones it does not know.
    Resync,
    /// A handed-over delivery the persona could not take: queue it again.
    Return(Delivery),
    /// Injected fault: panic now.
    Panic,
}

pub struct Inbox;

pub struct InboxArgs {
    pub config: Arc<PersonaConfig>,
    pub name: Arc<str>,
    pub storage: Storage,
    pub admin: ActorRef<AdminMsg>,
    pub parent: ActorRef<PersonaMsg>,
    pub faults: Arc<FaultBook>,
}

/// Adds `seq` to the last [`HANDED_KEPT`] remembered in `list`.
fn remember(list: &mut VecDeque<u64>, seq: u64) {
    list.push_back(seq);
    if list.len() > HANDED_KEPT {
        list.pop_front();
    }
}

/// Highest priority last; among equal priorities the oldest (lowest seq) last.
type Key = (u64, Reverse<u64>);

/// What became of a pushed delivery.
#[derive(Debug)]
pub(crate) enum Pushed {
    Queued,
    /// A delivery it holds, handed over or dropped (a reload raced a push): the same event,
    /// skipped.
    Known,
    /// Another delivery's room, sender and text within 3 s: a repeat, dropped.
    Repeat(Delivery),
    /// Queued, and over capacity: the lowest priority (the newest among equals) was shed with
    /// its priority; it can be the delivery just pushed.
    Shed(Delivery, f64),
}

/// The queue apart from the actor (tested against a model in `inbox_props.rs`): the order,
/// the capacity, repeats, and what was handed over.
pub(crate) struct Queue {
    capacity: usize,
    queue: BTreeMap<Key, (Delivery, f64)>,
    keys: HashMap<u64, Key>,
    /// Deliveries recently handed to the persona (a reload must not queue them again).
    handed: VecDeque<u64>,
    /// Deliveries recently dropped as repeats or shed: their decision is on its way to storage,
    /// and a reload that still finds them there must not queue them, nor drop them twice.
    dropped: VecDeque<u64>,
    /// Content hash -> time and seq of the last delivery with that room+sender+text.
    recent: HashMap<u64, (i64, u64)>,
}

impl Queue {
    pub(crate) fn new(capacity: usize) -> Self {
        Queue {
            capacity,
            queue: BTreeMap::new(),
            keys: HashMap::new(),
            handed: VecDeque::new(),
            dropped: VecDeque::new(),
            recent: HashMap::new(),
        }
    }

    /// Queues `d` with priority `p` (compared after rounding down to a multiple of 1e-9).
    pub(crate) fn push(&mut self, d: Delivery, p: f64) -> Pushed {
        if self.keys.contains_key(&d.seq) || self.handed.contains(&d.seq) || self.dropped.contains(&d.seq) {
            return Pushed::Known;
        }
        let h = content_hash(&d);
        // A delivery is no repeat of itself (one handed over and returned, or reloaded after
        // its hand-over was forgotten).
        if self
            .recent
            .get(&h)
            .is_some_and(|&(prev, seq)| seq != d.seq && (d.event.ts_us - prev).abs() < DUPLICATE_WINDOW_US)
        {
            remember(&mut self.dropped, d.seq);
            return Pushed::Repeat(d);
        }
        if self.recent.len() > 4096 {
            let cutoff = d.event.ts_us - DUPLICATE_WINDOW_US;
            self.recent.retain(|_, (t, _)| *t >= cutoff);
        }
        self.recent.insert(h, (d.event.ts_us, d.seq));
        let key = ((p * 1e9) as u64, Reverse(d.seq));
        self.keys.insert(d.seq, key);
        self.queue.insert(key, (d, p));
        if self.queue.len() > self.capacity {
            let (k, (victim, vp)) = self.queue.pop_first().expect("over capacity, so not empty");
            self.keys.remove(&k.1.0);
            remember(&mut self.dropped, victim.seq);
            return Pushed::Shed(victim, vp);
        }
        Pushed::Queued
    }

    /// Takes the highest priority delivery (the oldest among equals) and remembers it as
    /// handed over.
    pub(crate) fn pop(&mut self) -> Option<Delivery> {
        let (k, (d, _)) = self.queue.pop_last()?;
        self.keys.remove(&k.1.0);
        remember(&mut self.handed, d.seq);
        Some(d)
    }

    /// A handed-over delivery came back: it may be queued again.
    pub(crate) fn returned(&mut self, seq: u64) {
        self.handed.retain(|s| *s != seq);
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// The `n` deliveries handed over next: (event id, priority).
    pub(crate) fn top(&self, n: usize) -> Vec<(String, f64)> {
        self.queue.values().rev().take(n).map(|(d, p)| (d.event.id.clone(), *p)).collect()
    }
}

pub struct InboxState {
    args: InboxArgs,
    queue: Queue,
    wanted: bool,
    shed: u64,
    duplicates: u64,
}

fn content_hash(d: &Delivery) -> u64 {
    let mut h = DefaultHasher::new();
    (&d.event.room, &d.event.from, &d.event.text).hash(&mut h);
    h.finish()
}

impl InboxState {
    fn drop_event(&mut self, d: &Delivery, verdict: Verdict, p: f64, reason: String) {
        match verdict {
            Verdict::Shed => self.shed += 1,
            _ => self.duplicates += 1,
        }
        let decision = Decision {
            event_id: d.event.id.clone(),
            verdict,
            reason,
            by: "inbox".into(),
            priority: p,
            numbers: vec![("priority".into(), p), ("capacity".into(), self.args.config.inbox_capacity as f64)],
            at_us: now_us(),
            references: Vec::new(),
            room: d.event.room.clone(),
        };
        let commit = PersonaCommit::decision_only(self.args.name.clone(), d, decision);
        let _ = self.args.admin.cast(AdminMsg::Commit(Box::new(commit)));
    }

    fn push(&mut self, d: Delivery, spoke_recently: bool) {
        let p = priority(&PriorityInput {
            event: &d.event,
            persona: &self.args.name,
            expertise: &self.args.config.expertise,
            now_us: now_us(),
            spoke_recently,
        });
        match self.queue.push(d, p) {
            Pushed::Queued | Pushed::Known => {}
            Pushed::Repeat(d) => {
                let reason = "duplicate: same room, sender and text within 3 s".to_string();
                self.drop_event(&d, Verdict::Duplicate, p, reason);
            }
            Pushed::Shed(victim, vp) => {
                let reason = format!(
                    "inbox full ({} events): shed the lowest priority ({vp:.2})",
                    self.args.config.inbox_capacity
                );
                self.drop_event(&victim, Verdict::Shed, vp, reason);
            }
        }
    }

    fn hand_over(&mut self) {
        if !self.wanted {
            return;
        }
        if let Some(d) = self.queue.pop() {
            self.wanted = false;
            let _ = self.args.parent.cast(Own::next(d, self.queue.len()).into());
        }
    }
}

impl Actor for Inbox {
    type Msg = InboxMsg;
    type State = InboxState;
    type Arguments = InboxArgs;

    async fn pre_start(&self, _myself: ActorRef<InboxMsg>, args: InboxArgs) -> Result<InboxState, ActorProcessingErr> {
        if args.faults.take_start(FaultTarget::Inbox) {
            panic!("injected fault: inbox of {} panics in pre_start", args.name);
        }
        let restored = args.storage.load_inbox(args.name.clone()).await?;
        let mut st = InboxState {
            queue: Queue::new(args.config.inbox_capacity),
            args,
            wanted: false,
            shed: restored.shed,
            duplicates: restored.duplicates,
        };
        for d in restored.deliveries {
            st.push(d, false);
        }
        Ok(st)
    }

    async fn handle(
        &self,
        _myself: ActorRef<InboxMsg>,
        msg: InboxMsg,
        st: &mut InboxState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            InboxMsg::Push(d, spoke) => {
                st.push(d, spoke);
                st.hand_over();
            }
            InboxMsg::Pull => {
                st.wanted = true;
                st.hand_over();
            }
            InboxMsg::Stats(reply) => {
                let _ = reply.send(InboxDump {
                    len: st.queue.len(),
                    capacity: st.args.config.inbox_capacity,
                    shed: st.shed,
                    duplicates: st.duplicates,
                    top: st.queue.top(5),
                });
            }
            InboxMsg::Return(d) => {
                st.queue.returned(d.seq);
                st.push(d, false);
                st.hand_over();
            }
            InboxMsg::Resync => {
                for d in st.args.storage.load_inbox(st.args.name.clone()).await?.deliveries {
                    st.push(d, false);
                }
                st.hand_over();
            }
            InboxMsg::Panic => panic!("injected fault: inbox of {} panics", st.args.name),
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "inbox_props.rs"]
mod props;
