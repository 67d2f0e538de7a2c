//! `ask`: an event to one persona, then its reply to it. The replies are followed from before the
//! event goes in, so none is missed; the journal (`why`) is looked at now and then as well, which
//! finds a reply the stream did not bring (an event id the fleet had seen, a stream that ended)
//! and a persona that decided not to reply, so that no one waits out the timeout for nothing.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep_until};

use super::{Done, Fleet, FleetTools, Refusal, tools, words};

/// The first look at the journal; each next one waits twice as long, up to [`LOOK_AT_MOST`].
const LOOK_FIRST: Duration = Duration::from_millis(250);
const LOOK_AT_MOST: Duration = Duration::from_secs(2);

/// Verdicts after which no reply comes: only `engage` replies, and `defer` may engage later.
const SILENT: [&str; 5] = ["ignore", "shed", "duplicate", "skipped", "dead_letter"];

impl<F: Fleet> FleetTools<F> {
    pub(super) async fn ask(&self, args: Value) -> Result<Done, Refusal> {
        let (input, persona, timeout) = tools::ask(args)?;
        let deadline = Instant::now() + timeout;
        // Opened before the event goes in. Refused (every stream slot taken), the journal alone
        // finds the reply, a little later.
        let (mut replies, mut streaming) = match self.fleet.replies(input.room.clone()).await {
            Ok(r) => (r, true),
            Err(e) => {
                tracing::debug!(error = %e, "ask: no reply stream, the journal alone is looked at");
                (futures::stream::empty().boxed(), false)
            }
        };
        let ack = self.fleet.inject(input).await?;
        let id = ack["event_id"].as_str().unwrap_or_default().to_string();
        let mut look = LOOK_FIRST;
        let mut next_look = Instant::now() + look;
        let mut last = Value::Null;
        loop {
            tokio::select! {
                r = replies.next(), if streaming => match r {
                    Some(r) if r["in_reply_to"] == id.as_str() && r["persona"] == persona.as_str() => {
                        return Ok(replied(&id, &persona, r));
                    }
                    Some(_) => {}
                    // The journal alone, from now on.
                    None => streaming = false,
                },
                () = sleep_until(next_look) => {
                    last = self.fleet.ai("why", vec![("event", id.clone())]).await?;
                    let theirs = |list: &str| {
                        last[list].as_array().into_iter().flatten().filter(|x| x["persona"] == persona.as_str()).cloned().collect::<Vec<_>>()
                    };
                    if let Some(r) = theirs("replies").into_iter().next() {
                        return Ok(replied(&id, &persona, r));
                    }
                    if let Some(d) = theirs("decisions").pop()
                        && SILENT.iter().any(|v| d["verdict"] == *v)
                    {
                        let text = format!(
                            "{persona} did not reply to event {id}: it decided `{}` ({})",
                            d["verdict"].as_str().unwrap_or_default(),
                            d["reason"].as_str().unwrap_or("no reason given")
                        );
                        let value = json!({ "event_id": id, "persona": persona, "replied": false, "decision": d });
                        return Ok(Done { text, value });
                    }
                    look = (look * 2).min(LOOK_AT_MOST);
                    next_look = Instant::now() + look;
                },
                () = sleep_until(deadline) => {
                    let so_far = match last["decisions"].as_array().and_then(|d| d.iter().rfind(|x| x["persona"] == persona.as_str())) {
                        Some(d) => format!("its last decision on it was `{}`", d["verdict"].as_str().unwrap_or_default()),
                        None => "it has not decided on it yet".to_string(),
                    };
                    return Err(Refusal::Refused {
                        status: 504,
                        message: format!(
                            "no reply from {persona} to event {id} within {} s ({so_far}); `why` with the event's id tells what became of it",
                            words::secs(timeout)
                        ),
                        field: None,
                    });
                },
            }
        }
    }
}

/// `ask`'s answer: the reply's text, and the reply.
fn replied(id: &str, persona: &str, reply: Value) -> Done {
    let text = reply["text"].as_str().unwrap_or_default().to_string();
    Done { text, value: json!({ "event_id": id, "persona": persona, "replied": true, "reply": reply }) }
}
