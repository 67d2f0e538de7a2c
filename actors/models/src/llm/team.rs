//! A team of threads that runs a forward pass's products together: the caller and its
//! workers each take a share of one job, and the caller returns when every share is done.
//!
//! Generating a token takes about 150 such jobs of some tens of microseconds each, so a
//! job's start and end must cost far less than that. Between jobs the workers spin on the
//! job counter for a while (the gaps within a forward pass are short), then yield, then sleep
//! until the next job, so an idle model costs no CPU.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker spins for the next job before it yields the core, then before it sleeps.
const SPIN: Duration = Duration::from_micros(200);
const YIELD: Duration = Duration::from_millis(2);

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// The current job, lifetime erased: set by [`Team::run`] before it publishes the job
    /// through `epoch`, and alive until `pending` is back to zero, which `run` waits for.
    job: UnsafeCell<Option<&'static Job>>,
    /// Jobs published so far; a worker runs a job when this moves past the last it saw.
    epoch: AtomicUsize,
    /// Workers that have not finished the current job.
    pending: AtomicUsize,
    /// A worker's share of the current job panicked.
    panicked: AtomicBool,
    stop: AtomicBool,
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the one `run` in progress (runs are exclusive through
// `Team::turn`) while no worker reads it, and read by workers only between its publication
// (`epoch`, Release/Acquire) and their decrement of `pending`.
unsafe impl Sync for Shared {}

pub struct Team {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    turn: Mutex<()>,
}

impl Team {
    /// A team of `threads` (at least 1): the caller of [`Team::run`] and `threads - 1`
    /// workers named `{name}-1`, `{name}-2`, ...
    pub fn new(threads: usize, name: &str) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            job: UnsafeCell::new(None),
            epoch: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..threads.max(1))
            .map(|index| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new().name(format!("{name}-{index}")).spawn(move || work(&shared, index))
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Team { shared, workers, turn: Mutex::new(()) })
    }

    /// Threads of the team, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(i)` for every `i` in `0..threads()`, `0` on the calling thread, and returns
    /// when all are done. A panic in any share is raised here once all have ended.
    pub fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() {
            return job(0);
        }
        let _turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: the reference outlives every use: workers use it only until they decrement
        // `pending`, and this function returns only after `pending` is zero.
        let erased = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        // SAFETY: no worker reads `job` now: the previous run ended with `pending` at zero.
        unsafe { *s.job.get() = Some(erased) };
        s.pending.store(self.workers.len(), Ordering::Relaxed);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            drop(s.lock.lock().unwrap_or_else(|e| e.into_inner()));
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        wait(|| s.pending.load(Ordering::Acquire) == 0);
        if let Err(panic) = mine {
            resume_unwind(panic);
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a thread of the team panicked in its share of the job");
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.stop.store(true, Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        drop(s.lock.lock().unwrap_or_else(|e| e.into_inner()));
        s.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Spins, then yields, until `done`.
fn wait(done: impl Fn() -> bool) {
    let start = Instant::now();
    let mut spins = 0u32;
    while !done() {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && start.elapsed() > SPIN {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

fn work(s: &Shared, index: usize) {
    crate::lower_model_thread_priority();
    let mut seen = 0;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let epoch = s.epoch.load(Ordering::Acquire);
            if epoch != seen {
                break epoch;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let waited = start.elapsed();
            if waited < SPIN {
                std::hint::spin_loop();
            } else if waited < YIELD {
                std::thread::yield_now();
            } else {
                s.sleeping.fetch_add(1, Ordering::SeqCst);
                let mut guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                while s.epoch.load(Ordering::SeqCst) == seen {
                    guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                drop(guard);
                s.sleeping.fetch_sub(1, Ordering::SeqCst);
            }
        };
        seen = epoch;
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        // SAFETY: published before `epoch` (Acquire above) and alive until `pending` drops.
        let job = unsafe { *s.job.get() }.expect("a published job");
        if catch_unwind(AssertUnwindSafe(|| job(index))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_share_runs_once_per_job_and_the_caller_sees_their_writes() {
        let team = Team::new(3, "test").unwrap();
        let counts: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for round in 1..=500 {
            team.run(&|i| {
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == round), "round {round}");
        }
        // Workers asleep after a pause still take the next job.
        let deadline = Instant::now() + Duration::from_secs(10);
        while team.shared.sleeping.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < deadline, "the workers never went to sleep");
            std::thread::yield_now();
        }
        team.run(&|i| {
            counts[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 501));
    }

    #[test]
    fn a_panic_in_a_workers_share_reaches_the_caller_and_the_team_goes_on() {
        let team = Team::new(2, "test").unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| team.run(&|i| assert_ne!(i, 1, "share 1 fails"))));
        assert!(r.is_err());
        let ran = AtomicUsize::new(0);
        team.run(&|_| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ran.load(Ordering::Relaxed), 2);
    }
}
