//! The redundancy check: before a persona posts a draft, its meaning is compared with the
//! replies already posted to the same thread, and a draft that repeats one is withheld.
//!
//! The thread of a draft is the message it answers: the replies to that message count, and
//! when the message is itself a persona's reply, that reply and its siblings (the other replies
//! to the message it answered) count too. So a persona's reply does not draw one more reply
//! that says the same ("I'll take it from here"). Meaning is compared as the cosine similarity
//! of the texts' embeddings (the fleet's embedding worker, MiniLM); a draft at or above the
//! threshold (`[coordination] redundancy_threshold`, calibrated by `mindfleet bench
//! redundancy` on the labelled pairs in `bench/redundancy/pairs.tsv`) is redundant.

use std::time::{Duration, Instant};

use mindfleet_core::embedding::{EmbedMsg, LongText, Urgency, cosine};
use mindfleet_core::event::{Event, SenderKind};
use mindfleet_core::record::OutboxEntry;
use mindfleet_store::Storage;
use ractor::{ActorRef, call_t};

/// The newest replies of the fleet read for a thread's (a thread's replies are recent).
const OUTBOX_READ: usize = 256;
/// How far back, before a persona's reply was accepted, its siblings are looked for.
const SIBLINGS_SPAN_US: i64 = 60_000_000;
/// Longest the check waits for the embeddings: past it, the draft is posted unchecked. The wait
/// holds the persona's next events, and through its claims its room's turns: under a load that
/// keeps the (lower-priority) model thread behind, a long wait stalled whole rooms (3 s took a
/// 1,000-persona fleet in rooms of four from a 22 ms p99 to minutes, docs/BENCHMARKS.md), where
/// the worker answers a request it cannot serve in time at once (`Late`).
const EMBED_WAIT: Duration = Duration::from_millis(200);

/// What the check needs: the fleet's embedding worker and the threshold.
#[derive(Clone)]
pub struct Redundancy {
    pub embedding: ActorRef<EmbedMsg>,
    pub threshold: f64,
}

/// A reply posted to the thread that a draft repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeat {
    pub persona: String,
    pub event_id: String,
    pub similarity: f64,
}

impl Repeat {
    /// Why the draft is withheld, as the decision's reason says it.
    pub fn reason(&self, threshold: f64) -> String {
        format!(
            "redundant: the draft repeats {}'s reply {} (similarity {:.2} >= {threshold:.2}): withheld, nothing posted",
            self.persona, self.event_id, self.similarity
        )
    }
}

/// Whether `reply` is in the thread of `answered`, the message a draft answers: a reply to it;
/// when `answered` is a persona's reply, that reply itself and its siblings.
pub fn in_thread(reply: &OutboxEntry, answered: &Event) -> bool {
    if reply.in_reply_to == answered.id {
        return true;
    }
    answered.sender_kind == SenderKind::Persona
        && (reply.event_id == answered.id || answered.in_reply_to.as_deref() == Some(reply.in_reply_to.as_str()))
}

/// The posted reply most similar to the draft, when it is at or above `threshold`.
pub fn repeated<'a>(
    draft: &[f32],
    posted: impl IntoIterator<Item = (&'a OutboxEntry, &'a [f32])>,
    threshold: f64,
) -> Option<Repeat> {
    posted
        .into_iter()
        .map(|(o, v)| (o, cosine(draft, v)))
        .filter(|(_, s)| *s >= threshold)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(o, similarity)| Repeat { persona: o.persona.clone(), event_id: o.event_id.clone(), similarity })
}

/// The check of `draft`, the reply to `answered`: the reply of the thread it repeats, `None`
/// when it repeats none (or the thread has no reply yet), or why it could not be checked.
pub async fn check(r: &Redundancy, storage: &Storage, answered: &Event, draft: &str) -> Result<Option<Repeat>, String> {
    // Replies to a message come after it was accepted: a person's message needs only the replies
    // written since (at 1,000 replies/s, a handful instead of 256 read and decoded per draft); a
    // persona's reply has siblings written before it too.
    let since = match answered.sender_kind {
        SenderKind::Persona => answered.accepted_us - SIBLINGS_SPAN_US,
        _ => answered.accepted_us,
    };
    // Read in place: a read transaction over the few newest rows is tens of microseconds from the
    // page cache and never waits for the writer, where a round trip through the blocking pool
    // held every draft for the pool's threads on a busy machine (at 1,000 replies/s in rooms of
    // four, p50 217 ms against 15 ms in place, docs/BENCHMARKS.md).
    let outbox =
        storage.recent_outbox_since(OUTBOX_READ, since).map_err(|e| format!("reading the thread failed: {e}"))?;
    let thread: Vec<OutboxEntry> = outbox.into_iter().filter(|o| in_thread(o, answered)).collect();
    if thread.is_empty() {
        return Ok(None);
    }
    let texts: Vec<String> = std::iter::once(draft.to_string()).chain(thread.iter().map(|o| o.text.clone())).collect();
    let urgency = Urgency::Before(Instant::now() + EMBED_WAIT);
    let asked = call_t!(
        r.embedding,
        |reply| EmbedMsg::Embed { texts, long: LongText::Truncate, urgency, reply },
        EMBED_WAIT.as_millis() as u64 + 100
    );
    let embedded = asked
        .map_err(|e| format!("the embedding worker did not answer: {e}"))?
        .map_err(|e| format!("no embeddings: {e}"))?;
    let Some((draft, posted)) = embedded.split_first() else { return Ok(None) };
    Ok(repeated(draft.vector(), thread.iter().zip(posted.iter().map(|e| e.vector())), r.threshold))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, kind: SenderKind, in_reply_to: Option<&str>) -> Event {
        Event {
            id: id.into(),
            ts_us: 0,
            accepted_us: 0,
            domain: "chat".into(),
            room: "team".into(),
            from: "x".into(),
            sender_kind: kind,
            mentions: Vec::new(),
            text: "t".into(),
            persona: None,
            priority: None,
            urgent: false,
            in_reply_to: in_reply_to.map(str::to_string),
        }
    }

    fn reply(persona: &str, id: &str, to: &str) -> OutboxEntry {
        OutboxEntry {
            persona: persona.into(),
            room: "team".into(),
            in_reply_to: to.into(),
            event_id: id.into(),
            text: format!("{persona} says"),
            brain: "rules".into(),
            at_us: 0,
        }
    }

    #[test]
    fn the_thread_of_a_reply_to_a_persona_s_reply_holds_that_reply_and_its_siblings() {
        let h = event("h", SenderKind::Human, None);
        let r1 = event("r1", SenderKind::Persona, Some("h"));
        let (ada, bob, cyd) = (reply("ada", "r1", "h"), reply("bob", "r2", "h"), reply("cyd", "r3", "r1"));
        let other = reply("dee", "r4", "elsewhere");
        // Answering the human: the replies to it.
        let of_h: Vec<&str> =
            [&ada, &bob, &cyd, &other].into_iter().filter(|o| in_thread(o, &h)).map(|o| o.event_id.as_str()).collect();
        assert_eq!(of_h, ["r1", "r2"]);
        // Answering ada's reply: the replies to it, the reply itself and its sibling.
        let of_r1: Vec<&str> =
            [&ada, &bob, &cyd, &other].into_iter().filter(|o| in_thread(o, &r1)).map(|o| o.event_id.as_str()).collect();
        assert_eq!(of_r1, ["r1", "r2", "r3"]);
    }

    #[test]
    fn a_draft_repeats_the_most_similar_reply_at_or_above_the_threshold() {
        let (ada, bob) = (reply("ada", "r1", "h"), reply("bob", "r2", "h"));
        let draft = [1.0, 0.0, 0.0];
        let (near, far) = ([0.9f32, 0.1, 0.0], [0.0f32, 1.0, 0.0]);
        let posted = [(&ada, &far[..]), (&bob, &near[..])];
        let r = repeated(&draft, posted, 0.9).expect("repeats bob's");
        assert_eq!((r.persona.as_str(), r.event_id.as_str()), ("bob", "r2"));
        assert!((r.similarity - cosine(&draft, &near)).abs() < 1e-12);
        assert!(repeated(&draft, posted, 0.995).is_none());
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0, "a zero vector repeats nothing");
        assert!(r.reason(0.9).starts_with("redundant: the draft repeats bob's reply r2 (similarity 0.99 >= 0.90)"));
    }
}
