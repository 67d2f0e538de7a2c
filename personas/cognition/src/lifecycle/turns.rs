//! The persona's side of a room's turn beyond its claim: the report of a turn it held (a reply
//! posted, or none, so that the turn passes on), and a turn that passed to it after it had
//! finished the event (it takes the event up again).

use mindfleet_core::messages::{Turn, TurnReport};
use mindfleet_core::record::Verdict;

use super::phase::{Gated, PlanEnd};
use super::steps::REDUNDANCY;
use super::{Effect, Lifecycle};

impl Lifecycle {
    /// Reports to the room's coordinator how an event it engaged on in a shared room ended: a
    /// reply posted (the message is answered) or none, with the decision's reason (the turn
    /// passes to the next claimant). Only such events report: on the others it held no turn.
    pub(super) fn report_turn(&mut self, gated: &Gated, plan: Option<&PlanEnd>, reason: &str) {
        let d = &gated.seen.delivery;
        if d.audience <= 1 || d.event.persona.is_some() || (gated.gate.verdict != Verdict::Engage && plan.is_none()) {
            return;
        }
        let posted = plan.is_some_and(|end| end.reply.is_some());
        let why = if posted { String::new() } else { format!("no reply posted ({reason})") };
        let redundant = gated.gate.stage == REDUNDANCY;
        let report = TurnReport { event_id: d.event.id.clone(), persona: self.name.clone(), posted, why, redundant };
        self.emit(Effect::Report(report));
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
        if self.deferrals.holds(retake.seq) {
            // Deferred: still pending, kept aside; taken up at once.
            tracing::info!(persona = %self.name, event = %t.event_id, reason = %t.reason, "the turn passed to this persona: taking its deferral up");
            self.take_up_passed(retake.seq);
            return;
        }
        tracing::info!(persona = %self.name, event = %t.event_id, reason = %t.reason, "the turn passed to this persona: taking the event up again");
        self.done.retain(|seq| *seq != retake.seq);
        self.emit(Effect::Reopen { event_id: t.event_id, retake });
    }
}
