//! The cluster forwarder: one task per other node, sending what this node keeps for it.

use ractor::{ActorRef, call_t};
use std::sync::Arc;
use std::time::Duration;

use mindfleet_core::cluster::{ClusterView, NodeMsg, REMOTE_CALL_MS};
use mindfleet_core::messages::{AdminMsg, InjectAck, InjectError};
use mindfleet_store::{FORWARD_ADOPT, ForwardQueue, HandOff, Storage};

use super::moves::MOVE_MS;

/// The task that sends what is kept for `node`, in the order it was written: personas'
/// replies for the room's members there, and personas moving there with their rows. Each is
/// kept in storage (table `forwards`) until `node` has stored it, so none is lost while `node`
/// is unreachable or if this node stops: what is queued goes out together (sent in order,
/// answered in any order), what `node` could not take goes again a second later, and a
/// restarted node sends what it kept.
pub(super) fn forwarder(
    view: ClusterView,
    storage: Storage,
    admin: ActorRef<AdminMsg>,
    node: Arc<str>,
) -> ForwardQueue {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Vec<u8>)>();
    tokio::spawn(async move {
        let mut queue: Vec<(u64, Vec<u8>)> = Vec::new();
        loop {
            if queue.is_empty() {
                let Some(r) = rx.recv().await else { return };
                queue.push(r);
            }
            while let Ok(r) = rx.try_recv() {
                queue.push(r);
            }
            let Some(agent) = view.agent(&node) else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            // `join_all` polls them in order the first time: they are sent in order.
            let sends = queue.iter().map(|(_, r)| {
                let (agent, r) = (agent.clone(), r.clone());
                async move {
                    let answer = match r.split_first() {
                        Some((&FORWARD_ADOPT, snapshot)) => {
                            call_t!(agent, NodeMsg::Adopt, MOVE_MS, snapshot.to_vec()).map(|b| (true, b))
                        }
                        _ => call_t!(agent, NodeMsg::Store, REMOTE_CALL_MS, r).map(|b| (false, b)),
                    };
                    answer.map_err(|e| InjectError::Unavailable(e.to_string()))
                }
            });
            let answers = futures::future::join_all(sends).await;
            let mut again = Vec::new();
            for ((seq, request), answer) in queue.drain(..).zip(answers) {
                let adopt = request.first() == Some(&FORWARD_ADOPT);
                let answer = answer.and_then(|(adopt, b)| {
                    if adopt {
                        let done =
                            mindfleet_core::cluster::decode::<Result<HandOff, InjectError>>(&b).and_then(|r| r)?;
                        let _ = admin.cast(AdminMsg::Adopted(done));
                        Ok(())
                    } else {
                        mindfleet_core::cluster::decode::<Result<InjectAck, InjectError>>(&b).and_then(|r| r).map(drop)
                    }
                });
                match answer {
                    Ok(()) => storage.forwarded(node.clone(), seq),
                    Err(InjectError::Invalid(e) | InjectError::NotFound(e)) if !adopt => {
                        // Refused for good (the fleet files differ): sending it again changes nothing.
                        tracing::error!(node = %node, error = %e, "a reply was refused by its room's node");
                        storage.forwarded(node.clone(), seq);
                    }
                    Err(e) => {
                        if adopt {
                            tracing::warn!(node = %node, error = %e, "a moving persona was not stored yet; retrying");
                        }
                        again.push((seq, request));
                    }
                }
            }
            if !again.is_empty() {
                queue = again;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    tx
}
