//! The outbox as a feed: `GET /outbox?after=SEQ&limit=N` pages through the replies this node's
//! personas posted, by their sequence number (from 1; `after=0` is from the oldest kept); `GET /outbox/stream` follows them as Server-Sent
//! Events (`id:` the sequence number, so a client that reconnects with `Last-Event-ID` resumes
//! after the last one it got). Both read storage: an entry is there once its reply is committed.
//! The outbox is bounded (`[storage] outbox_limit`): entries older than the oldest kept are gone.

use std::collections::VecDeque;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Json};
use futures::{Stream, StreamExt};
use mindfleet_core::record::OutboxEntry;
use mindfleet_core::webhook::reply_json;
use serde::Deserialize;
use serde_json::{Value, json};

use super::HttpState;
use super::extract::{ApiError, Params};

/// Most entries one page gives.
pub const MAX_PAGE: usize = 1000;
/// How often a stream with nothing new looks at storage again.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// Entries a stream reads from storage at a time.
const READ_AT_ONCE: usize = 256;

#[derive(Deserialize, Default)]
pub(super) struct Page {
    after: Option<u64>,
    limit: Option<usize>,
    room: Option<String>,
    persona: Option<String>,
}

impl Page {
    /// Only the entries of `room`.
    pub(super) fn room(room: String) -> Page {
        Page { room: Some(room), ..Page::default() }
    }

    fn wants(&self, o: &OutboxEntry) -> bool {
        self.room.as_deref().is_none_or(|r| r == o.room) && self.persona.as_deref().is_none_or(|p| p == o.persona)
    }
}

async fn read(st: &HttpState, after: u64, limit: usize) -> Result<Vec<(u64, OutboxEntry)>, ApiError> {
    let store = st.store.clone();
    tokio::task::spawn_blocking(move || store.outbox_after(after, limit))
        .await
        .map_err(|e| ApiError::unavailable(e.to_string()))?
        .map_err(|e| ApiError::unavailable(e.to_string()))
}

/// `GET /outbox?after=SEQ&limit=N[&room=R][&persona=P]`: `{"entries": [...], "next": SEQ}`; the
/// next page is `after=next` (`next` is `after` itself when nothing came after it).
pub(super) async fn get_outbox(State(st): State<HttpState>, Params(p): Params<Page>) -> Result<Json<Value>, ApiError> {
    let after = p.after.unwrap_or(0);
    let limit = p.limit.unwrap_or(100).clamp(1, MAX_PAGE);
    let filtered = p.room.is_some() || p.persona.is_some();
    let mut entries = Vec::new();
    let mut next = after;
    // With a filter, read on until a page is full or the outbox ends.
    loop {
        let got = read(&st, next, if filtered { READ_AT_ONCE } else { limit }).await?;
        let Some((last, _)) = got.last() else { break };
        let last = *last;
        for (seq, o) in &got {
            if entries.len() == limit {
                break;
            }
            next = *seq;
            if p.wants(o) {
                entries.push(reply_json(*seq, o));
            }
        }
        if entries.len() == limit || !filtered || next < last {
            break;
        }
    }
    Ok(Json(json!({ "entries": entries, "next": next })))
}

/// `GET /outbox/stream[?after=SEQ][&room=R][&persona=P]`: every entry after `after` (or after
/// the `Last-Event-ID` header of a reconnecting client; else only new ones), then each new one
/// as it is committed, as `reply` events.
pub(super) async fn get_outbox_stream(
    State(st): State<HttpState>,
    headers: HeaderMap,
    Params(p): Params<Page>,
) -> Result<impl IntoResponse, ApiError> {
    let resume = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let after = match resume.or(p.after) {
        Some(a) => a,
        // From now: after the newest entry.
        None => last(&st).await?,
    };
    let events = follow(st, p, after).map(|(seq, o)| {
        Ok::<_, std::convert::Infallible>(
            Event::default().id(seq.to_string()).event("reply").data(reply_json(seq, &o).to_string()),
        )
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// The sequence number of the newest entry (0: none yet).
pub(super) async fn last(st: &HttpState) -> Result<u64, ApiError> {
    let store = st.store.clone();
    tokio::task::spawn_blocking(move || store.outbox_last())
        .await
        .map_err(|e| ApiError::unavailable(e.to_string()))?
        .map_err(|e| ApiError::unavailable(e.to_string()))
}

/// Every entry after `after` that `p` wants, then each new one as it is committed; the stream
/// ends when storage cannot be read.
pub(super) fn follow(st: HttpState, p: Page, after: u64) -> impl Stream<Item = (u64, OutboxEntry)> + Send + 'static {
    let state = (st, p, after, VecDeque::<(u64, OutboxEntry)>::new());
    futures::stream::unfold(state, |(st, p, mut after, mut queue)| async move {
        loop {
            if let Some((seq, o)) = queue.pop_front() {
                if !p.wants(&o) {
                    continue;
                }
                return Some(((seq, o), (st, p, after, queue)));
            }
            match read(&st, after, READ_AT_ONCE).await {
                Ok(got) if !got.is_empty() => {
                    after = got.last().map_or(after, |(s, _)| *s);
                    queue.extend(got);
                }
                Ok(_) => tokio::time::sleep(FOLLOW_EVERY).await,
                // Storage cannot be read: the stream ends, and the client reconnects.
                Err(_) => return None,
            }
        }
    })
}
