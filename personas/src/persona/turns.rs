//! The persona's side of a room's turn beyond its claim: the report of a turn it held (a reply
//! posted, or none, so that the turn passes on), and a turn that passed to it after it had
//! finished the event (it takes the event up again).

use std::time::Duration;

use mindfleet_core::messages::{CoordinatorMsg, Turn, TurnReport};
use mindfleet_core::model::Verdict;
use mindfleet_store::Reopened;

use crate::inbox::InboxMsg;

use super::PersonaState;
use super::phase::{Gated, PlanEnd};

/// How often a passed turn asks storage again for a delivery whose finish is not committed yet.
const REOPEN_TRIES: u32 = 20;
/// How long it waits between two tries.
const REOPEN_WAIT: Duration = Duration::from_millis(100);

impl PersonaState {
    /// Reports to the room's coordinator how an event it engaged on in a shared room ended: a
    /// reply posted (the message is answered) or none, with the decision's reason (the turn
    /// passes to the next claimant). Only such events report: on the others it held no turn.
    pub(super) fn report_turn(&self, gated: &Gated, plan: Option<&PlanEnd>, reason: &str) {
        let d = &gated.seen.delivery;
        if d.audience <= 1 || d.event.persona.is_some() || gated.gate.verdict != Verdict::Engage {
            return;
        }
        let posted = plan.is_some_and(|end| end.reply.is_some());
        let why = if posted { String::new() } else { format!("no reply posted ({reason})") };
        let report = TurnReport { event_id: d.event.id.clone(), persona: self.name.clone(), posted, why };
        let _ = self.args.coordinator.cast(CoordinatorMsg::Report(report));
    }

    /// A turn for an event the persona is not waiting on. Granted with a delivery to retake, the
    /// turn passed to it after it finished the event: storage makes the delivery pending again
    /// (durably, so a restart takes it up too) and the inbox queues it; the persona claims
    /// again and the coordinator answers that it holds the turn. Anything else is an answer to
    /// a claim that is over.
    pub(super) fn on_passed_turn(&mut self, t: Turn) {
        let Some(retake) = t.retake.filter(|_| t.granted) else { return };
        if self.current_event().is_some_and(|d| d.seq == retake.seq) {
            // In hand again already (redelivered after a restart): its claim goes as it is.
            return;
        }
        tracing::info!(persona = %self.name, event = %t.event_id, reason = %t.reason, "the turn passed to this persona: taking the event up again");
        self.done.retain(|seq| *seq != retake.seq);
        let (storage, inbox, name) = (self.args.storage.clone(), self.inbox.actor.clone(), self.name.clone());
        tokio::spawn(async move {
            for _ in 0..REOPEN_TRIES {
                match storage.reopen(name.clone(), retake.seq).await {
                    Ok(Reopened::Delivery(mut d)) => {
                        d.audience = retake.audience.max(2);
                        let _ = inbox.cast(InboxMsg::Return(d));
                        return;
                    }
                    // Its own finish of the event is still on its way to storage.
                    Ok(Reopened::StillPending) => tokio::time::sleep(REOPEN_WAIT).await,
                    Ok(Reopened::Gone) => break,
                    Err(e) => {
                        tracing::warn!(persona = %name, event = %t.event_id, error = %e, "a passed turn could not be taken up");
                        return;
                    }
                }
            }
            tracing::warn!(persona = %name, event = %t.event_id, "a passed turn could not be taken up: the delivery is not finished or gone");
        });
    }
}
