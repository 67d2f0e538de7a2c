//! Micro-benchmarks of the persona hot path: inbox priority, the fast-path gate, and
//! working-memory store with eviction. `mindfleet bench gate --json` reports the gate's
//! decisions per second; these give the per-call cost.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use mindfleet_core::event::{EventInput, SenderKind};
use mindfleet_core::record::{EntryKind, Mood};
use mindfleet_personas::gate::{GateState, PriorityInput, gate_chain, priority};
use mindfleet_personas::memory::{Draft, Memory};

fn event(text: &str, kind: SenderKind) -> mindfleet_core::event::Event {
    EventInput {
        domain: "chat".into(),
        room: "general".into(),
        from: "alice".into(),
        sender_kind: kind,
        text: text.into(),
        ..Default::default()
    }
    .validate()
    .expect("valid event")
}

fn gate(c: &mut Criterion) {
    let e = event("the deploy of the auth service broke latency again", SenderKind::Human);
    let kw: Vec<String> = ["deploy", "auth", "latency", "incident"].iter().map(|s| s.to_string()).collect();
    let s = GateState { mood: Mood::Active, load: 0.3, recent_persona_msgs: 1, ..GateState::default() };
    c.bench_function("priority", |b| {
        b.iter(|| {
            priority(black_box(&PriorityInput {
                event: &e,
                persona: "ops",
                expertise: &kw,
                now_us: e.ts_us,
                spoke_recently: true,
            }))
        })
    });
    c.bench_function("gate_chain", |b| b.iter(|| gate_chain(black_box(&e), "ops", black_box(0.5), black_box(&s))));
}

fn memory(c: &mut Criterion) {
    c.bench_function("wm_store_full_domain_100", |b| {
        let mut m = Memory::new(100, i64::MAX / 4, Vec::new());
        let mut now = 0;
        b.iter(|| {
            now += 1;
            m.store(
                Draft {
                    domain: "chat".into(),
                    kind: EntryKind::Observation,
                    text: "alice in #general: the deploy broke".into(),
                    importance: (now % 10) as f64 / 10.0,
                    event_id: None,
                    relevance: 0.0,
                },
                now,
            )
        })
    });
}

criterion_group!(benches, gate, memory);
criterion_main!(benches);
