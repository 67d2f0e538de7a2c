//! A transport wrapped to see two things rmcp does not tell its caller: which requests a
//! `notifications/cancelled` actually went out for, and the moment the connection ended.
//!
//! The first makes a Timeout's "cancelled" a fact rather than a hope; the second ends a call in
//! flight as soon as its server dies instead of at its deadline, and marks the server lost.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::RoleClient;
use rmcp::model::{ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::watch;

/// How many cancelled request ids are remembered: a call looks its own up right after its
/// timeout, so only the most recent matter.
const RECENT_CANCELLATIONS: usize = 64;

/// What the wrapped transport saw, shared with the client.
pub(crate) struct Wire {
    cancellations: AtomicU64,
    recent: Mutex<VecDeque<RequestId>>,
    closed: watch::Sender<bool>,
    /// Why the connection was judged lost while the transport itself stayed open (an HTTP
    /// server that stopped answering: rmcp's worker goes on trying).
    lost: Mutex<Option<String>>,
}

impl Wire {
    pub(crate) fn new() -> Arc<Wire> {
        Arc::new(Wire {
            cancellations: AtomicU64::new(0),
            recent: Mutex::new(VecDeque::new()),
            closed: watch::Sender::new(false),
            lost: Mutex::new(None),
        })
    }

    /// `notifications/cancelled` written to the transport since the connection opened.
    pub(crate) fn cancellations(&self) -> u64 {
        self.cancellations.load(Ordering::Relaxed)
    }

    /// Whether a cancellation of request `id` was written.
    pub(crate) fn was_cancelled(&self, id: &RequestId) -> bool {
        self.recent.lock().unwrap_or_else(|e| e.into_inner()).contains(id)
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the transport has ended (at once if it has).
    pub(crate) async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = rx.wait_for(|closed| *closed).await;
    }

    fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Judges the connection lost for `reason`, as if the transport had ended. A transport seen
    /// ending first keeps its own reason.
    pub(crate) fn lose(&self, reason: String) {
        if !self.is_closed() {
            self.lost.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(reason);
            self.close();
        }
    }

    /// The reason given to [`Wire::lose`], if the loss was judged rather than seen.
    pub(crate) fn lost_reason(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record_cancellation(&self, id: Option<RequestId>) {
        self.cancellations.fetch_add(1, Ordering::Relaxed);
        if let Some(id) = id {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == RECENT_CANCELLATIONS {
                recent.pop_front();
            }
            recent.push_back(id);
        }
    }
}

/// `inner`, reporting to `wire`.
pub(crate) struct Tapped<T> {
    pub(crate) inner: T,
    pub(crate) wire: Arc<Wire>,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let cancelled = match &item {
            JsonRpcMessage::Notification(n) => match &n.notification {
                ClientNotification::CancelledNotification(c) => Some(c.params.request_id.clone()),
                _ => None,
            },
            _ => None,
        };
        let sent = self.inner.send(item);
        let wire = self.wire.clone();
        async move {
            let result = sent.await;
            if let (Ok(()), Some(id)) = (&result, cancelled) {
                wire.record_cancellation(id);
            }
            result
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if message.is_none() {
            self.wire.close();
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.wire.close();
        self.inner.close()
    }
}
