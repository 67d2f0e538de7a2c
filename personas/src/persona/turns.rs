//! The persona's side of a room's turn beyond its claim: the report of a turn it held (a reply
//! posted, or none, so that the turn passes on), a turn that passed to it after it had
//! finished the event (it takes the event up again), and the redundancy check of its draft
//! before it is posted (see [`crate::redundancy`]).

use std::time::Duration;

use mindfleet_core::event::SenderKind;
use mindfleet_core::messages::{CoordinatorMsg, Turn, TurnReport};
use mindfleet_core::model::Verdict;
use mindfleet_store::Reopened;

use crate::gate::GateDecision;
use crate::inbox::InboxMsg;
use crate::redundancy;

use super::PersonaState;
use super::phase::{Gated, PlanEnd, Work};

/// The adapter a draft withheld as redundant is journaled by (`redundancy/redundant`).
const REDUNDANCY: &str = "redundancy";

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
        if d.audience <= 1 || d.event.persona.is_some() || (gated.gate.verdict != Verdict::Engage && plan.is_none()) {
            return;
        }
        let posted = plan.is_some_and(|end| end.reply.is_some());
        let why = if posted { String::new() } else { format!("no reply posted ({reason})") };
        let redundant = gated.gate.adapter == REDUNDANCY;
        let report = TurnReport { event_id: d.event.id.clone(), persona: self.name.clone(), posted, why, redundant };
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
        if self.deferrals.holds(retake.seq) {
            // Deferred: still pending, kept aside; taken up at once.
            tracing::info!(persona = %self.name, event = %t.event_id, reason = %t.reason, "the turn passed to this persona: taking its deferral up");
            self.take_up_passed(retake.seq);
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

    /// The redundancy check of the draft about to be posted (the hook is in the `post_reply`
    /// step): a draft that repeats a reply already posted to its thread is withheld, and the
    /// decision says `ignore` by `redundancy/redundant` with the reply it repeats. A check that
    /// cannot run (no embedding model) lets the draft through, with a note saying why. A person
    /// who named this persona (a mention, a directed message) gets its answer unchecked.
    pub(super) async fn withheld_as_redundant(&mut self, f: &mut Work) -> bool {
        let e = f.event();
        let named = e.mentions.iter().any(|m| **m == *self.name) || e.persona.as_deref() == Some(&*self.name);
        if e.sender_kind == SenderKind::Human && named {
            return false;
        }
        let (Some(r), Some(draft)) = (self.args.redundancy.clone(), f.draft.clone()) else { return false };
        match redundancy::check(&r, &self.args.storage, f.event(), &draft).await {
            Ok(None) => false,
            Ok(Some(repeat)) => {
                let reason = repeat.reason(r.threshold);
                tracing::info!(persona = %self.name, event = %f.event().id, %reason, "draft withheld");
                f.gated.gate = GateDecision {
                    verdict: Verdict::Ignore,
                    adapter: REDUNDANCY,
                    rule: "redundant",
                    threshold: r.threshold,
                    score: repeat.similarity,
                    note: reason,
                };
                true
            }
            Err(why) => {
                f.notes.push(format!("redundancy check skipped: {why}"));
                false
            }
        }
    }
}
