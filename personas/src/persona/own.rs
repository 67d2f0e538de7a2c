//! The persona's own continuations: what only it sends itself (its timers, and the answers to
//! what it asked off its loop) or its children send it. They travel as
//! [`PersonaMsg::Own`](mindfleet_core::messages::PersonaMsg::Own), which only this crate can
//! make or open, so no holder of the persona's ref can forge one.

use mindfleet_core::conversation::{Observation, Said};
use mindfleet_core::messages::{Delivery, PersonaMsg};
use mindfleet_core::private::Private;
use mindfleet_core::record::SelfStateData;
use mindfleet_core::sched::TaskId;

use super::lifecycle::{Input, Timer};
use crate::study::StudyStep;

pub(crate) enum Own {
    /// For the lifecycle of its events: an answer to what it asked off the loop, or its timer.
    Life(Input),
    /// From the self-state child: its new snapshot.
    SelfState(Box<SelfStateData>),
    /// Time to try the study session again (after a preemption).
    StudyDue,
    /// A stage of the study session of `task` is done.
    Studied { task: TaskId, step: StudyStep },
    /// Time to consolidate working memory.
    Consolidate,
    /// The batch of conversation memory that the task `task` embedded is in the index (or why
    /// not).
    Remembered { task: TaskId, result: Result<(), String> },
    /// Conversation memory's messages `asked`, read back from storage (those it had).
    ReadBack { asked: Vec<u64>, found: Result<Vec<Said>, String> },
    /// Time to check how long conversation memory has waited to be embedded.
    ConversationLag,
    /// Conversation memory has gathered long enough: time to embed what waits.
    RememberDue,
    /// Time to check whether the conversation has gone quiet, to consolidate it.
    ObserveDue,
    /// The observations the consolidation task `task` made and put in the index (or why not).
    Observed { task: TaskId, result: Result<Vec<Observation>, String> },
}

impl Own {
    /// From the inbox: its highest-priority event and how many remain.
    pub(crate) fn next(d: Delivery, backlog: usize) -> Own {
        Own::Life(Input::Next(d, backlog))
    }

    /// The lifecycle's `timer` is due.
    pub(crate) fn timer(timer: Timer) -> Own {
        Own::Life(match timer {
            Timer::TurnOverdue(id) => Input::TurnOverdue(id),
            Timer::DeferralsDue => Input::DeferralsDue,
        })
    }
}

impl Own {
    /// The continuation a [`PersonaMsg::Own`] carries, if it is the persona's (anything else
    /// was made by someone else, and is dropped).
    pub(crate) fn open(carried: Private) -> Option<Own> {
        carried.open::<Own>().ok()
    }
}

impl From<Own> for PersonaMsg {
    fn from(own: Own) -> Self {
        PersonaMsg::Own(Private::new(own))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continuation_of_another_type_does_not_open() {
        struct Forged;
        assert!(Own::open(Private::new(Forged)).is_none());
        assert!(Own::open(Private::new("Consolidate")).is_none());
        assert!(matches!(Own::open(Private::new(Own::StudyDue)), Some(Own::StudyDue)));
    }
}
