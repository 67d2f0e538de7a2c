//! A thread pool of our own: a [`Team`] of threads that runs a forward pass's products
//! together. A job is cut into shares, the caller and its workers take shares until none is
//! left, and the caller returns when every share is done.
//!
//! Shares are taken, not dealt: a worker that is not running (its core busy with the fleet's
//! actors, which come first) takes none, and the caller does them. So a second thread on a
//! machine of two cores only ever adds what the other core has to spare; a job waits for a
//! worker only in the share it is in the middle of.
//!
//! Generating a token takes about 150 such jobs of some tens of microseconds each, so a
//! job's start and end must cost far less than that. Between jobs the workers spin on the
//! job counter for a while (the gaps within a forward pass are short), then yield, then sleep
//! until the next job, so an idle model costs no CPU.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker spins for the next job before it yields the core, then before it sleeps.
const SPIN: Duration = Duration::from_micros(200);
const YIELD: Duration = Duration::from_millis(2);

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// The current job, lifetime erased: set by [`Team::run`] before it opens the job (`open`),
    /// and alive until no worker is in it (`inside` back to zero after `open` went false),
    /// which `run` waits for.
    job: UnsafeCell<Option<&'static Job>>,
    /// The current job's shares, the next one to take, and how many are done.
    shares: AtomicUsize,
    next: AtomicUsize,
    done: AtomicUsize,
    /// Whether the current job may still be joined, and the workers in it.
    open: AtomicBool,
    inside: AtomicUsize,
    /// Jobs published so far; a worker looks for shares when this moves past the last it saw.
    epoch: AtomicUsize,
    /// A worker's share of the current job panicked.
    panicked: AtomicBool,
    stop: AtomicBool,
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the one `run` in progress (runs are exclusive through
// `Team::turn`) while the job is closed and no worker is inside, and read by a worker only
// after it entered (`inside`) and saw the job open: `run` closes the job and then waits for
// `inside` to be zero, and a worker counts itself in before it looks at `open` (both SeqCst),
// so either `run` waits for it or it sees the job closed.
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
            shares: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            open: AtomicBool::new(false),
            inside: AtomicUsize::new(0),
            epoch: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..threads.max(1))
            .map(|index| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new().name(format!("{name}-{index}")).spawn(move || work(&shared))
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Team { shared, workers, turn: Mutex::new(()) })
    }

    /// Threads of the team, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(i)` once for every `i` in `0..shares`, each on whichever thread of the team
    /// takes it first (the caller takes them too), and returns when all are done. A panic in
    /// any share is raised here once all have ended.
    pub fn run(&self, shares: usize, job: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() || shares <= 1 {
            return (0..shares).for_each(job);
        }
        let _turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: the reference outlives every use: workers use it only while they are inside
        // the open job, and this function returns only after closing it with nobody inside.
        let erased = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        // SAFETY: no worker reads `job` now: the previous run closed its job with nobody inside.
        unsafe { *s.job.get() = Some(erased) };
        s.shares.store(shares, Ordering::Relaxed);
        s.next.store(0, Ordering::Relaxed);
        s.done.store(0, Ordering::Relaxed);
        s.open.store(true, Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            drop(s.lock.lock().unwrap_or_else(|e| e.into_inner()));
            s.wake.notify_all();
        }
        take_shares(s, job);
        wait(|| s.done.load(Ordering::Acquire) == shares);
        s.open.store(false, Ordering::SeqCst);
        wait(|| s.inside.load(Ordering::SeqCst) == 0);
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a share of the team's job panicked");
        }
    }
}

/// Takes shares of the current job and runs them until none is left; a panic in one is noted
/// and the share counted done.
fn take_shares(s: &Shared, job: &(dyn Fn(usize) + Sync)) {
    let shares = s.shares.load(Ordering::Relaxed);
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= shares {
            return;
        }
        if catch_unwind(AssertUnwindSafe(|| job(i))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.done.fetch_add(1, Ordering::Release);
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

fn work(s: &Shared) {
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
        s.inside.fetch_add(1, Ordering::SeqCst);
        if s.open.load(Ordering::SeqCst) {
            // SAFETY: the job is open and this worker inside it: `run` has not returned.
            let job = unsafe { *s.job.get() }.expect("an open job");
            take_shares(s, job);
        }
        s.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_share_runs_once_per_job_and_the_caller_sees_their_writes() {
        let team = Team::new(3, "test").unwrap();
        let counts: Vec<AtomicUsize> = (0..40).map(|_| AtomicUsize::new(0)).collect();
        for round in 1..=500 {
            team.run(counts.len(), &|i| {
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == round), "round {round}");
        }
        // Workers asleep after a pause still take shares of the next job.
        let deadline = Instant::now() + Duration::from_secs(10);
        while team.shared.sleeping.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < deadline, "the workers never went to sleep");
            std::thread::yield_now();
        }
        team.run(counts.len(), &|i| {
            counts[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 501));
    }

    #[test]
    fn a_worker_takes_the_shares_the_caller_leaves() {
        // The caller's share waits until the other one ran on a worker.
        let team = Team::new(2, "test").unwrap();
        let caller = std::thread::current().id();
        let on_worker = AtomicBool::new(false);
        team.run(2, &|_| {
            if std::thread::current().id() != caller {
                on_worker.store(true, Ordering::SeqCst);
                return;
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while !on_worker.load(Ordering::SeqCst) {
                assert!(Instant::now() < deadline, "no worker took the other share");
                std::thread::yield_now();
            }
        });
        assert!(on_worker.load(Ordering::SeqCst));
    }

    #[test]
    fn the_caller_does_the_shares_a_busy_worker_cannot_take() {
        // The worker is held in the first job's share 0 until the caller has done every other
        // share of it: dealt shares would wait for each other forever, taken ones do not.
        let team = Team::new(2, "test").unwrap();
        let others = AtomicUsize::new(0);
        let caller = std::thread::current().id();
        team.run(8, &|i| {
            if std::thread::current().id() != caller && i == 0 {
                let deadline = Instant::now() + Duration::from_secs(10);
                while others.load(Ordering::SeqCst) < 7 {
                    assert!(Instant::now() < deadline, "the caller left the other shares undone");
                    std::thread::yield_now();
                }
            } else {
                others.fetch_add(1, Ordering::SeqCst);
            }
        });
        assert!(others.load(Ordering::SeqCst) >= 7);
    }

    #[test]
    fn a_panic_in_a_workers_share_reaches_the_caller_and_the_team_goes_on() {
        let team = Team::new(2, "test").unwrap();
        let caller = std::thread::current().id();
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.run(64, &|_| {
                assert_eq!(std::thread::current().id(), caller, "a share the worker took fails");
                std::thread::sleep(Duration::from_millis(1));
            })
        }));
        assert!(r.is_err(), "the worker took one of 64 shares of a millisecond each");
        let ran = AtomicUsize::new(0);
        team.run(5, &|_| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ran.load(Ordering::Relaxed), 5);
    }
}
