//! Fault injection for tests and chaos drills. A persona's [`FaultBook`] is owned by the
//! fleet supervisor, so planned faults survive the restarts they cause.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use mindfleet_core::messages::FaultTarget;
use mindfleet_core::record::{Action, ErrorClass};

#[derive(Debug, Default)]
pub struct FaultBook {
    on_start: [AtomicU32; 4],
    on_text: Mutex<Option<String>>,
    /// Planned failures of plan actions: (action, class, how many more).
    actions: Mutex<Vec<(Action, ErrorClass, u32)>>,
    /// Planned delays of plan actions: (action, delay, how many more).
    delays: Mutex<Vec<(Action, Duration, u32)>>,
}

fn index(t: FaultTarget) -> usize {
    match t {
        FaultTarget::Persona => 0,
        FaultTarget::Inbox => 1,
        FaultTarget::SelfState => 2,
        FaultTarget::WorkingMemory => 3,
    }
}

impl FaultBook {
    /// Makes the next `n` starts of `target` panic.
    pub fn plan_start_failures(&self, target: FaultTarget, n: u32) {
        self.on_start[index(target)].store(n, Ordering::SeqCst);
    }

    /// True (and one fewer planned) when this start of `target` must panic.
    pub fn take_start(&self, target: FaultTarget) -> bool {
        self.on_start[index(target)].fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }

    pub fn set_text_trigger(&self, text: Option<String>) {
        *self.on_text.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    /// Makes the next `times` runs of `action` fail with `class`.
    pub fn fail_action(&self, action: Action, class: ErrorClass, times: u32) {
        let mut a = self.actions.lock().unwrap_or_else(|e| e.into_inner());
        a.retain(|(x, _, _)| *x != action);
        a.push((action, class, times));
    }

    /// The class this run of `action` must fail with, if one is planned.
    pub fn take_action_failure(&self, action: Action) -> Option<ErrorClass> {
        let mut a = self.actions.lock().unwrap_or_else(|e| e.into_inner());
        let (_, class, left) = a.iter_mut().find(|(x, _, n)| *x == action && *n > 0)?;
        *left -= 1;
        Some(*class)
    }

    /// Makes the next `times` runs of `action` take `delay` longer.
    pub fn slow_action(&self, action: Action, delay: Duration, times: u32) {
        let mut a = self.delays.lock().unwrap_or_else(|e| e.into_inner());
        a.retain(|(x, _, _)| *x != action);
        a.push((action, delay, times));
    }

    /// The delay this run of `action` must take, if one is planned.
    pub fn take_action_delay(&self, action: Action) -> Option<Duration> {
        let mut a = self.delays.lock().unwrap_or_else(|e| e.into_inner());
        let (_, delay, left) = a.iter_mut().find(|(x, _, n)| *x == action && *n > 0)?;
        *left -= 1;
        Some(*delay)
    }

    /// True when handling an event with this text must panic.
    pub fn text_triggers(&self, text: &str) -> bool {
        self.on_text.lock().unwrap_or_else(|e| e.into_inner()).as_deref().is_some_and(|t| text.contains(t))
    }
}
