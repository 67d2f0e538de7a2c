//! Long-lived streams get slots of their own (`[admin] max_streams`): `/outbox/stream`, the
//! dashboard's live feed and `/mcp` each hold one from their request until their response's
//! body ends or is dropped. A request with every slot taken is refused at once (503, and the
//! connection closed), so open streams can never hold every connection of `max_connections`:
//! `/health`, `POST /events` and the rest are still served.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::Semaphore;

use super::conn::Holding;
use super::extract::error;

/// The stream slots of one admin API.
#[derive(Clone)]
pub(super) struct Streams {
    slots: Arc<Semaphore>,
    max: usize,
}

impl Streams {
    pub(super) fn new(max: usize) -> Streams {
        Streams { slots: Arc::new(Semaphore::new(max)), max }
    }
}

/// Takes a slot for the request's whole response, or refuses it.
pub(super) async fn hold_stream(State(streams): State<Streams>, req: Request, next: Next) -> Response {
    let Ok(slot) = streams.slots.clone().try_acquire_owned() else {
        let max = streams.max;
        tracing::debug!(path = req.uri().path(), max, "admin API: stream refused, every slot is taken");
        let message = format!(
            "too many open streams: all {max} of `[admin] max_streams` are taken (by /outbox/stream, the \
             dashboard's live feed and /mcp); other requests are still served, open this one again once a \
             stream has closed"
        );
        let mut refused = error(StatusCode::SERVICE_UNAVAILABLE, message, None);
        // The client is told to go: a refused stream holds no connection either.
        refused.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        return refused;
    };
    next.run(req).await.map(|body| Body::new(Holding { body, _guard: slot }))
}
