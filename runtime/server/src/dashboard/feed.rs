//! The live feed: one poller per server takes a dump a second while a page listens and
//! publishes a frame when something shown changed; each page's Server-Sent Events stream sends
//! it the frames as updates.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use ractor::ActorRef;
use serde::Serialize;
use tokio::sync::watch;

use mindfleet_core::messages::AdminMsg;

use super::frame;
use super::page::Frame;

/// How often the poller takes a dump while a page listens.
pub(super) const TICK: Duration = Duration::from_secs(1);
/// What a page waits before reconnecting, told to the browser with each stream.
pub(super) const RETRY: Duration = Duration::from_secs(1);

/// A frame as the feed publishes it, with its update from the frame published before it,
/// serialized once for every page that was sent that one.
pub struct Published {
    frame: Arc<Frame>,
    prev: Option<Arc<Frame>>,
    /// `frame.update(prev)`, as JSON.
    delta: String,
    /// `frame.update(None)`, as JSON, made when a page first needs it.
    full: OnceLock<String>,
}

impl Published {
    fn new(frame: Frame, prev: Option<Arc<Frame>>) -> Published {
        let delta = json(&frame.update(prev.as_deref()));
        Published { frame: Arc::new(frame), prev, delta, full: OnceLock::new() }
    }

    /// The update for a page that was last sent `shown`.
    fn data_for(&self, shown: Option<&Arc<Frame>>) -> String {
        match shown {
            None => self.full.get_or_init(|| json(&self.frame.update(None))).clone(),
            Some(s) if self.prev.as_ref().is_some_and(|p| Arc::ptr_eq(p, s)) => self.delta.clone(),
            Some(s) => json(&self.frame.update(Some(s))),
        }
    }
}

pub(super) fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

pub(super) type Poller = watch::Sender<Option<Arc<Published>>>;

/// The latest frame (none before the first dump).
pub type Frames = watch::Receiver<Option<Arc<Published>>>;

/// The frames every open page listens to: one poller, started by the first listener.
#[derive(Clone, Default)]
pub struct Feed {
    live: Arc<Mutex<Option<Poller>>>,
}

impl Feed {
    /// A receiver of the frames, starting the poller if none runs.
    /// The poller stops when `ready` turns false (the fleet stopping) or a dump fails.
    pub fn subscribe(&self, admin: &ActorRef<AdminMsg>, ready: Arc<AtomicBool>) -> Frames {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = live.as_ref() {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(None);
        *live = Some(tx.clone());
        let (feed, admin) = (self.clone(), admin.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                {
                    // Nobody listens: stop (under the lock, so no one subscribes meanwhile).
                    let mut live = feed.live.lock().unwrap_or_else(|e| e.into_inner());
                    if tx.receiver_count() == 0 {
                        *live = None;
                        return;
                    }
                }
                let next = if ready.load(Ordering::Acquire) { frame(&admin).await } else { Err("stopping".into()) };
                match next {
                    // Published when something shown changed: a quiet fleet sends nothing. The
                    // rendering and the JSON are made off the runtime's workers, once for all pages.
                    Ok((d, cost)) => {
                        let prev = tx.borrow().as_ref().map(|p| p.frame.clone());
                        let made = tokio::task::spawn_blocking(move || {
                            let f = Frame::of(&d, &cost);
                            prev.as_ref().is_none_or(|p| f.differs(p)).then(|| Published::new(f, prev))
                        });
                        if let Ok(Some(p)) = made.await {
                            tx.send_replace(Some(Arc::new(p)));
                        }
                    }
                    Err(e) => {
                        // The fleet is going: every stream ends, and its page reconnects.
                        tracing::debug!(error = %e, "dashboard feed stops");
                        *feed.live.lock().unwrap_or_else(|e| e.into_inner()) = None;
                        return;
                    }
                }
            }
        });
        rx
    }
}

/// The stream of one page: a `cards` event per new frame, until the feed stops: the first with
/// everything, the next ones with what changed since ([`Frame::update`]).
pub fn events(mut rx: Frames) -> Sse<impl futures::Stream<Item = Result<Event, std::convert::Infallible>>> {
    // A page (re)connecting gets the latest frame at once.
    rx.mark_changed();
    let shown: Option<Arc<Frame>> = None;
    let stream = futures::stream::unfold((rx, shown, true), |(mut rx, shown, first)| async move {
        if first {
            // The reconnect delay, before anything else.
            return Some((Ok(Event::default().retry(RETRY).comment("hello")), (rx, shown, false)));
        }
        loop {
            rx.changed().await.ok()?;
            let published = rx.borrow_and_update().clone();
            if let Some(p) = published {
                let data = p.data_for(shown.as_ref());
                return Some((Ok(Event::default().event("cards").data(data)), (rx, Some(p.frame.clone()), false)));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
