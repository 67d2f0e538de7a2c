//! Whether the process's models are answering anything now, and for how long they have not:
//! what work that runs in idle time only (an adapter in training) waits on. The LLM's batches
//! count each request they hold; the embedding model counts each batch it embeds.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// When the last request ended, in ns after [`epoch`] (0: none yet).
static LAST_END_NS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `n` requests begin.
pub(crate) fn begin(n: usize) {
    epoch();
    IN_FLIGHT.fetch_add(n, Ordering::Relaxed);
}

/// `n` requests end.
pub(crate) fn end(n: usize) {
    if n == 0 {
        return;
    }
    LAST_END_NS.store(epoch().elapsed().as_nanos() as u64, Ordering::Relaxed);
    IN_FLIGHT.fetch_sub(n, Ordering::Relaxed);
}

/// One request for as long as it lives.
pub(crate) struct Busy;

impl Busy {
    pub(crate) fn new() -> Busy {
        begin(1);
        Busy
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        end(1);
    }
}

/// Requests the process's models are answering now.
pub fn in_flight() -> usize {
    IN_FLIGHT.load(Ordering::Relaxed)
}

/// How long the models have answered nothing: `None` while they answer something (since the
/// process began using them, when nothing has ended yet).
pub fn idle_for() -> Option<Duration> {
    if in_flight() > 0 {
        return None;
    }
    let last = Duration::from_nanos(LAST_END_NS.load(Ordering::Relaxed));
    Some(epoch().elapsed().saturating_sub(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_are_idle_only_once_every_request_has_ended_and_from_the_last_end() {
        let a = Busy::new();
        begin(2);
        assert_eq!(idle_for(), None);
        end(2);
        assert_eq!(idle_for(), None, "one still answered");
        drop(a);
        // Other tests of the process may be using a model: their requests end too.
        let idle = crate::busy::idle_for();
        assert!(idle.is_none_or(|d| d < Duration::from_secs(5)), "{idle:?}");
    }
}
