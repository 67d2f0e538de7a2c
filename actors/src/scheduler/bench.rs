//! The scheduler's benchmark: how fast an `Urgent` task gets through a backlog, and how
//! many trivial tasks the scheduler moves per second.
//!
//! Run it with `mindfleet bench scheduler --backlog 100000 --samples 1000 --json`; it prints
//! the JSON object [`bench`] returns.
//!
//! - **Urgent latency.** One cheap slot, held, and `backlog` `Background` tasks waiting for
//!   it. Each sample submits an `Urgent` task and frees the slot, then times from the submit
//!   to the grant arriving at a channel owner on another thread (the sampling thread, while
//!   the scheduler runs on the tokio workers). `overtaken` counts backlog tasks granted
//!   between the submit and the urgent grant, over all samples (warm-up included); the
//!   backlog is refilled after each sample. The first `warmup` samples are not timed.
//! - **Throughput.** One thread submits trivial `Work` tasks (no model, cheap slot) keeping
//!   `in_flight` of them submitted and not yet granted, and answers every grant with `done`
//!   at once; `tasks_per_s` is tasks over the time until the scheduler counted the last
//!   `done`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::config::SchedulerConfig;
use mindfleet_core::sched::{Class, Grant, Owner, SchedulerHandle, SchedulerMsg, SchedulerStats, Slot, Task};
use ractor::call_t;
use serde_json::{Value, json};

/// Tasks pushed through in the throughput part.
pub const THROUGHPUT_TASKS: usize = 1_000_000;
/// Submitted and not yet granted, at most, in the throughput part.
pub const IN_FLIGHT: usize = 4096;
/// Cheap slots in the throughput part.
pub const THROUGHPUT_SLOTS: usize = 256;

const STATS_MS: u64 = 30_000;

/// Runs both parts and returns their figures and parameters as one JSON object.
///
/// Needs a multi-thread tokio runtime: the sampling thread blocks while the scheduler runs.
pub async fn bench(backlog: usize, samples: usize) -> Value {
    let warmup = (samples / 10).min(100);
    let (latency, overtaken) = urgent_latency(backlog, samples, warmup).await;
    let (tasks_per_s, secs) = throughput(THROUGHPUT_TASKS).await;
    let us = |d: Duration| (d.as_secs_f64() * 1e7).round() / 10.0;
    let pct = |p: f64| super::nearest_rank(&latency, p);
    let mean = latency.iter().sum::<Duration>().checked_div(latency.len() as u32).unwrap_or_default();
    json!({
        "backlog": backlog,
        "samples": samples,
        "warmup": warmup,
        "urgent_p50_us": pct(0.50).map(us),
        "urgent_p90_us": pct(0.90).map(us),
        "urgent_p99_us": pct(0.99).map(us),
        "urgent_max_us": latency.last().copied().map(us),
        "urgent_mean_us": us(mean),
        "overtaken": overtaken,
        "throughput_tasks": THROUGHPUT_TASKS,
        "throughput_in_flight": IN_FLIGHT,
        "throughput_cheap_slots": THROUGHPUT_SLOTS,
        "throughput_secs": (secs * 1e3).round() / 1e3,
        "tasks_per_s": tasks_per_s.round(),
    })
}

/// Sorted latencies of the timed samples, and the backlog tasks that overtook an urgent one.
async fn urgent_latency(backlog: usize, samples: usize, warmup: usize) -> (Vec<Duration>, u64) {
    let config = SchedulerConfig { inference_slots: 1, cheap_slots: 1, ..SchedulerConfig::default() };
    let h = super::spawn(config, None).await.expect("spawn the scheduler");
    let sampler = h.clone();
    let rt = tokio::runtime::Handle::current();
    let (mut latency, overtaken) = tokio::task::spawn_blocking(move || {
        let (tx, rx) = crossbeam_channel::unbounded::<Grant>();
        let persona: Arc<str> = Arc::from("bench");
        let task =
            |class, label| Task::new(persona.clone(), class, 0.5, Slot::Cheap, label, Owner::Channel(tx.clone()));
        sampler.submit(task(Class::Background, "holder"));
        let mut holder = recv(&rx).task;
        for _ in 0..backlog {
            sampler.submit(task(Class::Background, "backlog"));
        }
        // The reply comes after the scheduler took in everything submitted before the call.
        let s = stats(&sampler, &rt);
        assert_eq!(s.background.queued, backlog, "the backlog waits");
        let mut latency = Vec::with_capacity(samples);
        let mut overtaken = 0;
        for i in 0..warmup + samples {
            let urgent = task(Class::Urgent, "urgent");
            let id = urgent.id;
            let start = Instant::now();
            sampler.submit(urgent);
            sampler.done(holder);
            let mut passed = 0;
            loop {
                let g = recv(&rx);
                if g.task == id {
                    if i >= warmup {
                        latency.push(start.elapsed());
                    }
                    break;
                }
                passed += 1;
                sampler.done(g.task);
            }
            overtaken += passed;
            sampler.done(id);
            holder = recv(&rx).task;
            for _ in 0..=passed {
                sampler.submit(task(Class::Background, "backlog"));
            }
        }
        (latency, overtaken)
    })
    .await
    .expect("the sampling thread");
    h.actor().stop(None);
    latency.sort_unstable();
    (latency, overtaken)
}

/// Tasks per second and seconds taken for `n` trivial tasks.
async fn throughput(n: usize) -> (f64, f64) {
    let config = SchedulerConfig { cheap_slots: THROUGHPUT_SLOTS, ..SchedulerConfig::default() };
    let h = super::spawn(config, None).await.expect("spawn the scheduler");
    let driver = h.clone();
    let rt = tokio::runtime::Handle::current();
    let secs = tokio::task::spawn_blocking(move || {
        let (tx, rx) = crossbeam_channel::unbounded::<Grant>();
        let persona: Arc<str> = Arc::from("bench");
        let start = Instant::now();
        let (mut submitted, mut granted) = (0, 0);
        while granted < n {
            while submitted < n && submitted - granted < IN_FLIGHT {
                let owner = Owner::Channel(tx.clone());
                driver.submit(Task::new(persona.clone(), Class::Work, 0.5, Slot::Cheap, "trivial", owner));
                submitted += 1;
            }
            let mut g = Some(recv(&rx));
            while let Some(grant) = g {
                driver.done(grant.task);
                granted += 1;
                g = rx.try_recv().ok();
            }
        }
        while (stats(&driver, &rt).done as usize) < n {
            std::thread::yield_now();
        }
        start.elapsed().as_secs_f64()
    })
    .await
    .expect("the driving thread");
    h.actor().stop(None);
    (n as f64 / secs, secs)
}

fn recv(rx: &crossbeam_channel::Receiver<Grant>) -> Grant {
    rx.recv_timeout(Duration::from_secs(30)).expect("a grant within 30 s")
}

fn stats(h: &SchedulerHandle, rt: &tokio::runtime::Handle) -> SchedulerStats {
    rt.block_on(async { call_t!(h.actor(), SchedulerMsg::Stats, STATS_MS) }).expect("scheduler stats")
}
