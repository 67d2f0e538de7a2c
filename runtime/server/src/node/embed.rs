//! The embedding worker of another node (`[cluster] embedding = "node"`): an actor that takes
//! [`EmbedMsg`] like the local worker and has the designated node's worker answer, so a text
//! is embedded once, on that node, and found in its cache the next time any node asks.

use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::{Deserialize, Serialize};

use mindfleet_core::cluster::{NodeMsg, REMOTE_CALL_MS, Serving, decode, encode};
use mindfleet_core::embedding::{EmbedFailure, EmbedMsg, EmbedReply, EmbedStats, LongText, Urgency};

/// What a node asks the designated node's worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum EmbedRequest {
    Embed { texts: Vec<String>, long: LongText, urgency: WireUrgency },
    Stats,
}

/// [`Urgency`] as it travels: a deadline becomes the time left when it was sent.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum WireUrgency {
    Normal,
    Bulk,
    Within { ms: u64 },
}

impl WireUrgency {
    fn of(u: Urgency) -> Self {
        match u {
            Urgency::Normal => WireUrgency::Normal,
            Urgency::Bulk => WireUrgency::Bulk,
            Urgency::Before(t) => {
                WireUrgency::Within { ms: t.saturating_duration_since(Instant::now()).as_millis() as u64 }
            }
        }
    }

    fn urgency(self) -> Urgency {
        match self {
            WireUrgency::Normal => Urgency::Normal,
            WireUrgency::Bulk => Urgency::Bulk,
            WireUrgency::Within { ms } => Urgency::Before(Instant::now() + Duration::from_millis(ms)),
        }
    }
}

/// Answers a request from another node with this node's worker; the JSON of the answer
/// (`EmbedReply`, or `EmbedStats` for `Stats`).
pub async fn serve(worker: &ActorRef<EmbedMsg>, request: &[u8]) -> Vec<u8> {
    let request = match decode::<EmbedRequest>(request) {
        Ok(r) => r,
        Err(e) => return encode(&EmbedReply::Err(EmbedFailure::Failed(e.to_string()))),
    };
    match request {
        EmbedRequest::Embed { texts, long, urgency } => {
            let urgency = urgency.urgency();
            let r = ractor::call!(worker, |reply| EmbedMsg::Embed { texts, long, urgency, reply })
                .unwrap_or(Err(EmbedFailure::Stopped));
            encode(&r)
        }
        EmbedRequest::Stats => encode(&ractor::call!(worker, EmbedMsg::Stats).unwrap_or_default()),
    }
}

/// The local stand-in for the worker of node `node`.
pub struct RemoteEmbed;

impl Actor for RemoteEmbed {
    type Msg = EmbedMsg;
    type State = std::sync::Arc<Serving>;
    type Arguments = Serving;

    async fn pre_start(&self, _me: ActorRef<EmbedMsg>, args: Serving) -> Result<Self::State, ActorProcessingErr> {
        Ok(std::sync::Arc::new(args))
    }

    async fn handle(
        &self,
        _me: ActorRef<EmbedMsg>,
        msg: EmbedMsg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let st = st.clone();
        match msg {
            EmbedMsg::Embed { texts, long, urgency, reply } => {
                // Each request on its own task: the other node batches them with the rest.
                tokio::spawn(async move {
                    let wait = match urgency {
                        Urgency::Before(t) => t.saturating_duration_since(Instant::now()) + Duration::from_secs(1),
                        _ => Duration::from_millis(REMOTE_CALL_MS * 6),
                    };
                    let request = EmbedRequest::Embed { texts, long, urgency: WireUrgency::of(urgency) };
                    let r = match st.ask(NodeMsg::Embed, encode(&request), wait).await {
                        Ok(bytes) => {
                            decode::<EmbedReply>(&bytes).unwrap_or_else(|e| Err(EmbedFailure::Failed(e.to_string())))
                        }
                        Err(why) => Err(EmbedFailure::Degraded(why)),
                    };
                    let _ = reply.send(r);
                });
            }
            EmbedMsg::Stats(reply) => {
                tokio::spawn(async move {
                    let mut s = match st
                        .ask(NodeMsg::Embed, encode(&EmbedRequest::Stats), Duration::from_millis(REMOTE_CALL_MS))
                        .await
                    {
                        Ok(bytes) => decode::<EmbedStats>(&bytes).unwrap_or_else(|e| EmbedStats {
                            status: "degraded".into(),
                            error: Some(e.to_string()),
                            ..Default::default()
                        }),
                        Err(why) => EmbedStats { status: "degraded".into(), error: Some(why), ..Default::default() },
                    };
                    s.node = Some(st.node.clone());
                    let _ = reply.send(s);
                });
            }
            // The other node keeps its own cache durable.
            EmbedMsg::Sync(reply) => {
                let _ = reply.send(());
            }
            // The callbacks of a local worker's inference thread: none are meant for a proxy.
            EmbedMsg::Own(_) => tracing::warn!("remote embedding proxy: dropped a message that is not its own"),
        }
        Ok(())
    }
}
