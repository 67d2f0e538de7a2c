//! Which task an input answers and which an effect asks: an answer in a history must answer a
//! task its run of the lifecycle asked for, or the history does not fit.

use mindfleet_cognition::lifecycle::{Effect, Enrich, Input};
use mindfleet_core::sched::TaskId;

/// The task `input` answers, when it answers one.
pub(crate) fn answers(input: &Input) -> Option<TaskId> {
    Some(match input {
        Input::Granted { grant, .. } => grant.task,
        Input::StepEnriched { task, .. }
        | Input::Judged { task, .. }
        | Input::Planned { task, .. }
        | Input::Drafted { task, .. }
        | Input::Evaluated { task, .. }
        | Input::Searched { task, .. }
        | Input::WorkingMemory { task, .. }
        | Input::Recalled { task, .. }
        | Input::ReferencesRead { task, .. }
        | Input::RedundancyChecked { task, .. }
        | Input::StudyNoted { task, .. }
        | Input::ToolAnswered { task, .. }
        | Input::ToolChosen { task, .. }
        | Input::Filled { task, .. }
        | Input::ToolTurned { task, .. } => *task,
        _ => return None,
    })
}

/// The task `effect` asks about, when it asks.
pub(crate) fn asks(effect: &Effect) -> Option<TaskId> {
    Some(match effect {
        Effect::Submit(t) => t.id,
        Effect::Enrich { of: Enrich::Step(task), .. }
        | Effect::Llm { task, .. }
        | Effect::RecallWorkingMemory { task, .. }
        | Effect::RecallConversation { task, .. }
        | Effect::Search { task, .. }
        | Effect::ReadReferences { task, .. }
        | Effect::CheckRedundancy { task, .. }
        | Effect::CallTool { task, .. }
        | Effect::NoteStudy { task: Some(task), .. } => *task,
        _ => return None,
    })
}
