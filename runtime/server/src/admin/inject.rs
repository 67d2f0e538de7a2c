//! Injection: an event from the API, or one another node accepted for personas of this one,
//! checked, routed and handed to the storage writer here and to the nodes that run the rest.

use ractor::{RpcReplyPort, call_t};
use std::collections::BTreeMap;
use std::sync::Arc;

use mindfleet_core::cluster::{NodeMsg, REMOTE_CALL_MS};
use mindfleet_core::event::Event;
use mindfleet_core::messages::{InjectAck, InjectError, StoreRequest};
use mindfleet_store::Target;

use super::AdminState;

impl AdminState {
    /// Stores `event` for `local` here and for `remote` on their nodes, and answers once every
    /// node has: accepted only if every one accepted. Refused at once (503, naming the node)
    /// when a node is unreachable, so nothing is accepted that could not be delivered.
    /// `passed` is the audience and hop count of an event another node passed on.
    pub(super) fn inject_across(
        &self,
        event: Box<Event>,
        (local, remote): (Vec<Target>, BTreeMap<Arc<str>, Vec<String>>),
        passed: Option<(u32, u32)>,
        reply: RpcReplyPort<Result<InjectAck, InjectError>>,
    ) {
        let mut agents = Vec::with_capacity(remote.len());
        for (node, names) in remote {
            match self.cluster.as_ref().and_then(|c| c.view.agent(&node)) {
                Some(agent) => agents.push((node, agent, names)),
                None => {
                    let _ = reply.send(Err(unreachable(&node, &names)));
                    return;
                }
            }
        }
        let (audience, hops) = passed.unwrap_or_else(|| {
            ((local.len() + agents.iter().map(|(_, _, names)| names.len()).sum::<usize>()) as u32, 0)
        });
        let here = (!local.is_empty()).then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let elsewhere = audience.saturating_sub(local.len() as u32);
            self.storage.inject_among(event.clone(), local, elsewhere, tx.into());
            rx
        });
        tokio::spawn(async move {
            let remote = agents.into_iter().map(|(node, agent, personas)| {
                let request = mindfleet_core::cluster::encode(&StoreRequest {
                    event: (*event).clone(),
                    personas: personas.clone(),
                    audience,
                    hops: hops + u32::from(passed.is_some()),
                });
                async move {
                    match call_t!(agent, NodeMsg::Store, REMOTE_CALL_MS, request) {
                        Ok(bytes) => {
                            mindfleet_core::cluster::decode::<Result<InjectAck, InjectError>>(&bytes).and_then(|r| r)
                        }
                        Err(_) => Err(unreachable(&node, &personas)),
                    }
                }
            });
            let mut acks = futures::future::join_all(remote).await;
            if let Some(rx) = here {
                acks.push(rx.await.unwrap_or_else(|_| Err(InjectError::Storage("storage writer stopped".into()))));
            }
            let _ = reply.send(merge_acks(&event.id, acks));
        });
    }
}

/// The refusal of an event for personas on a node that cannot be reached.
pub(super) fn unreachable(node: &str, personas: &[String]) -> InjectError {
    InjectError::Unavailable(format!(
        "node {node:?} is unreachable (it runs {}); retry when it is back",
        personas.join(", ")
    ))
}

/// One answer from the answers of every node an event went to: the first refusal, else an
/// acceptance for every persona (a duplicate only if it was one everywhere).
pub(super) fn merge_acks(event_id: &str, acks: Vec<Result<InjectAck, InjectError>>) -> Result<InjectAck, InjectError> {
    let mut merged =
        InjectAck { event_id: event_id.to_string(), accepted: true, duplicate: true, personas: Vec::new() };
    for a in acks {
        let a = a?;
        merged.accepted &= a.accepted;
        merged.duplicate &= a.duplicate;
        merged.personas.extend(a.personas);
    }
    merged.personas.sort();
    Ok(merged)
}

impl AdminState {
    /// An event from the API: refused once the admin is closed or when it cannot be routed,
    /// else stored here (and on the nodes that run some of its personas).
    pub(super) fn inject(&mut self, event: Box<Event>, reply: RpcReplyPort<Result<InjectAck, InjectError>>) {
        if self.closed {
            let _ = reply.send(Err(InjectError::ShuttingDown));
            return;
        }
        match self.route(&event).and_then(|names| self.not_moving(&names).map(|()| names)) {
            Ok(names) => {
                let (local, remote) = self.split(&names);
                if remote.is_empty() {
                    self.storage.inject(event, local, reply);
                } else {
                    self.inject_across(event, (local, remote), None, reply);
                }
            }
            Err(e) => {
                self.rejected += 1;
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Accepted by another node for personas of this one. One that moved away since the sender
    /// last heard is passed on to its node (once at most).
    pub(super) fn store_here(&mut self, request: StoreRequest, reply: RpcReplyPort<Result<InjectAck, InjectError>>) {
        let StoreRequest { event, personas, audience, hops } = request;
        let mut names = Vec::with_capacity(personas.len());
        for n in &personas {
            let me = self.cluster.as_ref().map_or("", |c| c.view.me());
            let refused = match self.personas.get_key_value(n.as_str()) {
                Some((name, p)) if p.node.is_none() || hops == 0 => {
                    names.push(name.clone());
                    continue;
                }
                // Moving between other nodes as this is sent: worth a retry.
                Some(_) => InjectError::Unavailable(format!(
                    "persona {n:?} is not on node {me:?} and was passed on once; retry"
                )),
                None => InjectError::NotFound(format!("persona {n:?} does not run on node {me:?}")),
            };
            let _ = reply.send(Err(refused));
            return;
        }
        if let Err(e) = self.not_moving(&names) {
            let _ = reply.send(Err(e));
            return;
        }
        let (local, remote) = self.split(&names);
        if let Some(p) = &event.persona
            && let Some((name, _)) = local.iter().find(|(t, _)| **t == **p)
        {
            self.join(&event.room, name.clone());
        }
        let event = Box::new(event);
        if remote.is_empty() {
            let elsewhere = audience.saturating_sub(local.len() as u32);
            self.storage.inject_among(event, local, elsewhere, reply);
        } else {
            self.inject_across(event, (local, remote), Some((audience, hops)), reply);
        }
    }
}
