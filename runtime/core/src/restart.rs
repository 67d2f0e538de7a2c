//! Restart intensity, as OTP's: at most `max_restarts` within `within`, else escalate.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ractor::{ActorCell, SupervisionEvent};

use crate::config::SupervisionConfig;

/// The child a supervision event says failed or stopped, and why; `None` for the events that
/// ask nothing of a supervisor (a child started, a process group changed).
pub fn child_failure(evt: SupervisionEvent) -> Option<(ActorCell, String)> {
    match evt {
        SupervisionEvent::ActorFailed(cell, err) => Some((cell, err.to_string())),
        SupervisionEvent::ActorTerminated(cell, _, reason) => {
            Some((cell, format!("stopped unexpectedly: {}", reason.unwrap_or_else(|| "no reason".into()))))
        }
        _ => None,
    }
}

/// Remembers recent restarts of one supervised actor.
#[derive(Debug, Clone)]
pub struct RestartWindow {
    max: u32,
    within: Duration,
    recent: VecDeque<Instant>,
    /// Restarts over the actor's whole life (for dumps).
    pub total: u32,
}

impl RestartWindow {
    pub fn new(cfg: SupervisionConfig) -> Self {
        RestartWindow { max: cfg.max_restarts, within: cfg.within, recent: VecDeque::new(), total: 0 }
    }

    /// Records a failure at `now`; true when a restart is allowed, false when the
    /// failures within the window exceed the limit and the supervisor must escalate.
    pub fn allow(&mut self, now: Instant) -> bool {
        while self.recent.front().is_some_and(|t| now.duration_since(*t) > self.within) {
            self.recent.pop_front();
        }
        if self.recent.len() as u32 >= self.max {
            return false;
        }
        self.recent.push_back(now);
        self.total += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_in_five_seconds_then_escalate() {
        let mut w = RestartWindow::new(SupervisionConfig { max_restarts: 3, within: Duration::from_secs(5) });
        let t0 = Instant::now();
        assert!(w.allow(t0));
        assert!(w.allow(t0 + Duration::from_secs(1)));
        assert!(w.allow(t0 + Duration::from_secs(2)));
        assert!(!w.allow(t0 + Duration::from_secs(3)));
        // Once the first failures age out of the window, restarts are allowed again.
        assert!(w.allow(t0 + Duration::from_secs(7)));
        assert_eq!(w.total, 4);
    }
}
