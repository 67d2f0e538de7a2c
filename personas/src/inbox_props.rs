//! Model-based test of the inbox queue: random pushes (new deliveries, the same delivery
//! again, repeats of a content), hand-overs and returns, applied to [`Queue`] and to a plain
//! list that follows docs/RUNTIME-SEMANTICS.md "Inbox order", compared after every step.

use std::collections::HashMap;
use std::sync::Arc;

use mindfleet_core::event::{Event, SenderKind};
use proptest::prelude::*;

use super::*;

fn delivery(seq: u64, content: u8, ts_us: i64) -> Delivery {
    Delivery {
        seq,
        event: Arc::new(Event {
            id: format!("e{seq}"),
            ts_us,
            accepted_us: ts_us,
            domain: "chat".into(),
            room: "general".into(),
            from: format!("user{}", content % 2),
            sender_kind: SenderKind::Human,
            text: format!("text {}", content / 2),
            persona: None,
            mentions: Vec::new(),
            priority: None,
            urgent: false,
            in_reply_to: None,
        }),
        crashes: 0,
        audience: 1,
    }
}

/// The inbox as the docs state it: a list of (seq, priority key, content, ts), scanned.
#[derive(Default)]
struct Model {
    capacity: usize,
    queued: Vec<(u64, u64, u8, i64)>,
    /// Handed over, most recent last (the last `HANDED_KEPT` are remembered).
    handed: Vec<u64>,
    /// Dropped as repeats or shed, most recent last (the last `HANDED_KEPT` are remembered).
    dropped: Vec<u64>,
    /// Content -> (ts, seq) of the last delivery queued with it.
    recent: HashMap<u8, (i64, u64)>,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Queued,
    Known,
    Repeat(u64),
    Shed(u64),
}

impl Model {
    fn push(&mut self, seq: u64, p: f64, content: u8, ts: i64) -> Outcome {
        let handed = &self.handed[self.handed.len().saturating_sub(HANDED_KEPT)..];
        let dropped = &self.dropped[self.dropped.len().saturating_sub(HANDED_KEPT)..];
        if self.queued.iter().any(|q| q.0 == seq) || handed.contains(&seq) || dropped.contains(&seq) {
            return Outcome::Known;
        }
        if let Some(&(prev, by)) = self.recent.get(&content)
            && by != seq
            && (ts - prev).abs() < DUPLICATE_WINDOW_US
        {
            self.dropped.push(seq);
            return Outcome::Repeat(seq);
        }
        self.recent.insert(content, (ts, seq));
        // Rounded down to a multiple of 1e-9.
        self.queued.push((seq, (p * 1e9).floor() as u64, content, ts));
        if self.queued.len() <= self.capacity {
            return Outcome::Queued;
        }
        // The lowest priority; the newest (highest seq) among equals.
        let lowest = self.queued.iter().map(|q| q.1).min().expect("not empty");
        let victim = self.queued.iter().filter(|q| q.1 == lowest).map(|q| q.0).max().expect("one has it");
        self.queued.retain(|q| q.0 != victim);
        self.dropped.push(victim);
        Outcome::Shed(victim)
    }

    fn pop(&mut self) -> Option<u64> {
        // The highest priority; the oldest (lowest seq) among equals: first in, first out.
        let highest = self.queued.iter().map(|q| q.1).max()?;
        let seq = self.queued.iter().filter(|q| q.1 == highest).map(|q| q.0).min()?;
        self.queued.retain(|q| q.0 != seq);
        self.handed.push(seq);
        Some(seq)
    }

    fn returned(&mut self, seq: u64) {
        self.handed.retain(|s| *s != seq);
    }

    /// The order in which the queue would hand its deliveries over.
    fn order(&self) -> Vec<u64> {
        let mut q = self.queued.clone();
        q.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        q.iter().map(|q| q.0).collect()
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A new delivery (the next seq) with one of a few priorities and contents, at a time.
    Push {
        p: usize,
        content: u8,
        ts_ms: i64,
    },
    /// A delivery pushed before, again (a reload racing a push, or racing the commit of the
    /// delivery's drop).
    Again {
        which: prop::sample::Index,
    },
    Pop,
    /// A handed-over delivery comes back.
    Return {
        which: prop::sample::Index,
    },
}

/// Few distinct priorities, so ties are common; the last two are equal once rounded.
const PRIORITIES: [f64; 6] = [0.0, 0.25, 0.5, 0.5000000001, 1.0, 0.1];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..PRIORITIES.len(), 0u8..6, 0i64..10_000).prop_map(|(p, content, ts_ms)| Op::Push { p, content, ts_ms }),
        1 => any::<prop::sample::Index>().prop_map(|which| Op::Again { which }),
        3 => Just(Op::Pop),
        1 => any::<prop::sample::Index>().prop_map(|which| Op::Return { which }),
    ]
}

fn outcome(p: Pushed) -> Outcome {
    match p {
        Pushed::Queued => Outcome::Queued,
        Pushed::Known => Outcome::Known,
        Pushed::Repeat(d) => Outcome::Repeat(d.seq),
        Pushed::Shed(d, _) => Outcome::Shed(d.seq),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_inbox_queue_behaves_as_the_model(capacity in 1usize..6, ops in proptest::collection::vec(op(), 1..80)) {
        let mut real = Queue::new(capacity);
        let mut model = Model { capacity, ..Model::default() };
        // Every delivery pushed so far: (seq, priority, content, ts).
        let mut pushed: Vec<(u64, f64, u8, i64)> = Vec::new();
        for op in ops {
            match op {
                Op::Push { p, content, ts_ms } => {
                    let seq = pushed.len() as u64 + 1;
                    let (p, ts) = (PRIORITIES[p], ts_ms * 1000);
                    pushed.push((seq, p, content, ts));
                    let got = outcome(real.push(delivery(seq, content, ts), p));
                    prop_assert_eq!(got, model.push(seq, p, content, ts));
                }
                Op::Again { which } | Op::Return { which } if pushed.is_empty() => {
                    let _ = which;
                    continue;
                }
                Op::Again { which } => {
                    let &(seq, p, content, ts) = which.get(&pushed);
                    let got = outcome(real.push(delivery(seq, content, ts), p));
                    prop_assert_eq!(got, model.push(seq, p, content, ts));
                }
                Op::Pop => prop_assert_eq!(real.pop().map(|d| d.seq), model.pop()),
                Op::Return { which } => {
                    let Some(&seq) = (!model.handed.is_empty()).then(|| which.get(&model.handed)) else {
                        continue;
                    };
                    let &(_, p, content, ts) = &pushed[seq as usize - 1];
                    real.returned(seq);
                    model.returned(seq);
                    let got = outcome(real.push(delivery(seq, content, ts), p));
                    prop_assert_eq!(got, model.push(seq, p, content, ts));
                }
            }
            prop_assert!(real.len() <= capacity);
            let order: Vec<u64> =
                real.top(usize::MAX).iter().map(|(id, _)| id[1..].parse().expect("e<seq>")).collect();
            prop_assert_eq!(order, model.order());
        }
    }
}

#[test]
fn a_returned_delivery_is_queued_again_not_dropped_as_a_repeat_of_itself() {
    let mut q = Queue::new(4);
    assert!(matches!(q.push(delivery(1, 0, 0), 0.5), Pushed::Queued));
    assert_eq!(q.pop().map(|d| d.seq), Some(1));
    // Handed over and not taken: back it comes, within the repeat window of its own content.
    q.returned(1);
    assert!(matches!(q.push(delivery(1, 0, 0), 0.5), Pushed::Queued));
    assert_eq!(q.pop().map(|d| d.seq), Some(1));
    // Another delivery with the same content is still a repeat.
    assert!(matches!(q.push(delivery(2, 0, 1000), 0.5), Pushed::Repeat(d) if d.seq == 2));
}

#[test]
fn a_reload_that_finds_a_dropped_delivery_neither_queues_it_nor_drops_it_again() {
    let mut q = Queue::new(1);
    assert_eq!(outcome(q.push(delivery(1, 0, 0), 0.5)), Outcome::Queued);
    assert_eq!(outcome(q.push(delivery(2, 0, 1000), 0.5)), Outcome::Repeat(2));
    assert_eq!(outcome(q.push(delivery(3, 3, 0), 0.9)), Outcome::Shed(1));
    // A reload (the persona's start, say) still finds them in storage, their decisions not
    // yet committed: each was decided once.
    for seq in [1, 2] {
        assert_eq!(outcome(q.push(delivery(seq, 0, 0), 0.5)), Outcome::Known);
    }
    assert_eq!([q.pop().map(|d| d.seq), q.pop().map(|d| d.seq)], [Some(3), None]);
}

#[test]
fn equal_priorities_leave_first_in_first_out_and_the_newest_is_shed() {
    let mut q = Queue::new(2);
    for seq in 1..=3 {
        let got = q.push(delivery(seq, seq as u8, 0), 0.5);
        assert_eq!(outcome(got), if seq == 3 { Outcome::Shed(3) } else { Outcome::Queued });
    }
    assert_eq!(outcome(q.push(delivery(4, 4, 0), 0.9)), Outcome::Shed(2));
    assert_eq!([q.pop().map(|d| d.seq), q.pop().map(|d| d.seq), q.pop().map(|d| d.seq)], [Some(4), Some(1), None]);
}
