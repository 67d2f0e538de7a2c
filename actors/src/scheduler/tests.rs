use std::time::Duration;

use mindfleet_runtime::sched::Owner;
use ractor::call_t;

use super::*;

fn config(cheap: usize) -> SchedulerConfig {
    SchedulerConfig { inference_slots: 1, cheap_slots: cheap, aging_per_30s: 0.5 }
}

fn task(id: TaskId, class: Class, priority: f64, age: Duration, tx: &crossbeam_channel::Sender<Grant>) -> Task {
    Task {
        id,
        persona: Arc::from("p"),
        class,
        priority,
        slot: Slot::Cheap,
        label: "test",
        owner: Owner::Channel(tx.clone()),
        submitted: Instant::now() - age,
        deadline: None,
        max_tokens: 0,
    }
}

fn recv(rx: &crossbeam_channel::Receiver<Grant>) -> TaskId {
    rx.recv_timeout(Duration::from_secs(5)).expect("a grant within 5 s").task
}

/// Submits `tasks` while the only slot is held by task 0, then frees it and records
/// the order in which the rest are granted.
async fn grant_order(tasks: Vec<(Class, f64, Duration)>) -> Vec<TaskId> {
    let h = spawn(config(1), None).await.unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    h.submit(task(0, Class::Work, 0.5, Duration::ZERO, &tx));
    assert_eq!(recv(&rx), 0);
    let n = tasks.len();
    for (i, (c, p, age)) in tasks.into_iter().enumerate() {
        h.submit(task(i as u64 + 1, c, p, age, &tx));
    }
    let mut order = Vec::new();
    let mut last = 0;
    for _ in 0..n {
        h.done(last);
        last = recv(&rx);
        order.push(last);
    }
    h.actor().stop(None);
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_go_strictly_first_then_priority() {
    let order = grant_order(vec![
        (Class::Background, 1.0, Duration::ZERO),
        (Class::Work, 0.2, Duration::ZERO),
        (Class::Urgent, 0.1, Duration::ZERO),
        (Class::Work, 0.9, Duration::ZERO),
        (Class::Interactive, 0.5, Duration::ZERO),
    ])
    .await;
    assert_eq!(order, [3, 5, 4, 2, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tasks_age_past_newer_higher_ones() {
    // 0.3 waiting 60 s ages to 1.3 and beats a fresh 0.9; a fresh 0.2 stays last.
    let order = grant_order(vec![
        (Class::Work, 0.9, Duration::ZERO),
        (Class::Work, 0.3, Duration::from_secs(60)),
        (Class::Work, 0.2, Duration::ZERO),
    ])
    .await;
    assert_eq!(order, [2, 1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_low_tasks_never_starves_a_high_one_and_still_finishes() {
    let h = spawn(config(4), None).await.unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    for i in 0..10_000 {
        h.submit(task(i, Class::Background, 0.5, Duration::ZERO, &tx));
    }
    h.submit(task(99_999, Class::Urgent, 0.5, Duration::ZERO, &tx));
    // At most the four slots granted before the urgent task arrived run ahead of it.
    let mut before = 0;
    loop {
        let id = recv(&rx);
        if id == 99_999 {
            break;
        }
        before += 1;
        h.done(id);
    }
    assert!(before <= 4 + 4, "{before} background tasks ran before the urgent one");
    h.done(99_999);
    let mut finished = before + 1;
    while finished < 10_001 {
        h.done(recv(&rx));
        finished += 1;
    }
    let stats = call_t!(h.actor(), SchedulerMsg::Stats, 5000).unwrap();
    assert_eq!(stats.queued(), 0);
    assert_eq!(stats.granted, 10_001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_frees_the_slots_of_a_gone_persona() {
    let h = spawn(config(1), None).await.unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    h.submit(task(1, Class::Work, 0.5, Duration::ZERO, &tx));
    assert_eq!(recv(&rx), 1);
    h.submit(task(2, Class::Work, 0.5, Duration::ZERO, &tx));
    let mut other = task(3, Class::Work, 0.4, Duration::ZERO, &tx);
    other.persona = Arc::from("q");
    h.submit(other);
    // "p" is gone: its running task 1 and queued task 2 are dropped, so "q" runs.
    h.release(Arc::from("p"));
    assert_eq!(recv(&rx), 3);
}
