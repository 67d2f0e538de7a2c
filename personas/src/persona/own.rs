//! The persona's own continuations: what only it sends itself (its timers, and the answers to
//! what it asked off its loop) or its children send it. They travel as
//! [`PersonaMsg::Own`](mindfleet_core::messages::PersonaMsg::Own), which only this crate can
//! make or open, so no holder of the persona's ref can forge one.

use mindfleet_core::conversation::{Observation, Recall, Said};
use mindfleet_core::knowledge::{RagError, Source};
use mindfleet_core::llm::{Classification, Generation, LlmFailure};
use mindfleet_core::messages::{Delivery, PersonaMsg};
use mindfleet_core::model::SelfStateData;
use mindfleet_core::private::Private;
use mindfleet_core::refs::Enrichment;
use mindfleet_core::sched::TaskId;

use crate::brain::Recollection;
use crate::study::StudyStep;

pub(crate) enum Own {
    /// From the inbox: its highest-priority event and how many remain.
    Next(Delivery, usize),
    /// From the self-state child: its new snapshot.
    SelfState(Box<SelfStateData>),
    /// The coordinator has not answered its claim on this event yet.
    TurnOverdue(String),
    /// Time to try the study session again (after a preemption).
    StudyDue,
    /// A stage of the study session of `task` is done.
    Studied { task: TaskId, step: StudyStep },
    /// Time to consolidate working memory.
    Consolidate,
    /// The LLM's answer to the reply the persona asked it to draft for the step of `task`.
    Drafted { task: TaskId, answer: Result<Generation, LlmFailure> },
    /// The LLM's label scores for the engagement question the persona asked for `task`.
    Judged { task: TaskId, answer: Result<Classification, LlmFailure> },
    /// The LLM's lesson of the plan whose evaluation is `task`.
    Evaluated { task: TaskId, answer: Result<Generation, LlmFailure> },
    /// The LLM's label scores for each question of the choice of plan asked for `task`.
    Planned { task: TaskId, answer: Result<Vec<Classification>, LlmFailure> },
    /// The index's relevant results for the knowledge search of the step of `task`.
    Searched { task: TaskId, answer: Result<Vec<Source>, RagError> },
    /// The references the event of delivery `seq` calls for (the enrichment pipeline ran on it
    /// before the gate).
    Enriched { seq: u64, enrichment: Enrichment },
    /// The references the result of the step of `task` calls for.
    StepEnriched { task: TaskId, enrichment: Enrichment },
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
    /// The oldest deferred event may have gone stale.
    DeferralsDue,
    /// What conversation memory recalled for the recall step of `task`, and the room's latest
    /// messages.
    Recalled { task: TaskId, recall: Result<Recall, String>, room: Vec<Said> },
    /// What long-term memory recalled for the engaged event `event_id`, before its plan (and
    /// a note when the recall was by words only or failed).
    LongTermRecalled { event_id: String, memory: Box<Recollection>, note: Option<String> },
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
