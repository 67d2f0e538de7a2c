//! The [`NodeAgent`]: the one actor of a node that the other nodes talk to (through
//! ractor_cluster; its messages travel as bytes), and the proxies through which a node without
//! its own embedding worker or index uses another node's.

pub mod embed;
pub mod index;

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, call_t};
use serde::Serialize;

use mindfleet_core::cluster::{Ask, NodeMsg, REMOTE_CALL_MS, SCOPE, decode, encode, node_group};
use mindfleet_core::dump::FleetDump;
use mindfleet_core::embedding::EmbedMsg;
use mindfleet_core::knowledge::IndexMsg;
use mindfleet_core::messages::StoreRequest;
use mindfleet_core::messages::{AdminMsg, Claim, DumpDepth, InjectError, Turn};
use mindfleet_core::stored::PersonaSnapshot;

/// The actor of a node that the other nodes talk to. It hands what comes in to its node's
/// admin (or embedding worker, or index), off its own loop, so a slow store never holds up a
/// dump.
pub struct NodeAgent;

/// The actors of its node that a node agent hands requests to.
pub struct AgentArgs {
    pub node: String,
    pub admin: ActorRef<AdminMsg>,
    pub embedding: ActorRef<EmbedMsg>,
    pub index: ActorRef<IndexMsg>,
}

impl Actor for NodeAgent {
    type Msg = NodeMsg;
    type State = AgentArgs;
    type Arguments = AgentArgs;

    async fn pre_start(&self, myself: ActorRef<NodeMsg>, args: AgentArgs) -> Result<Self::State, ActorProcessingErr> {
        ractor::pg::join_scoped(SCOPE.to_string(), node_group(&args.node), vec![myself.get_cell()]);
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<NodeMsg>,
        msg: NodeMsg,
        st: &mut AgentArgs,
    ) -> Result<(), ActorProcessingErr> {
        let admin = st.admin.clone();
        match msg {
            NodeMsg::Embed(bytes, reply) => {
                let worker = st.embedding.clone();
                tokio::spawn(async move {
                    let _ = reply.send(embed::serve(&worker, &bytes).await);
                });
            }
            NodeMsg::Index(bytes, reply) => {
                let index = st.index.clone();
                tokio::spawn(async move {
                    let _ = reply.send(index::serve(&index, &bytes).await);
                });
            }
            NodeMsg::Store(bytes, reply) => {
                // Handed to the admin here, in the order the stores came (one node's replies
                // reach a room's members in the order they were written); answered off the loop.
                let stored =
                    decode::<StoreRequest>(&bytes).and_then(|r| ask(&admin, |tx| AdminMsg::StoreHere(Box::new(r), tx)));
                answer(stored, reply);
            }
            NodeMsg::Adopt(bytes, reply) => {
                // In order with the stores around it: the persona is here before its next event.
                let adopted = PersonaSnapshot::decode(&bytes)
                    .map_err(|e| InjectError::Invalid(e.to_string()))
                    .and_then(|s| ask(&admin, |tx| AdminMsg::Adopt(Box::new(s), tx)));
                answer(adopted, reply);
            }
            NodeMsg::Ask(bytes, reply) => match decode::<Ask>(&bytes) {
                Ok(Ask::Ai(query)) => answer(ask(&admin, |tx| AdminMsg::NodeAi(query, tx)), reply),
                Ok(Ask::SetState { persona, change }) => {
                    answer(ask(&admin, |tx| AdminMsg::SetState { persona, change, reply: tx }), reply)
                }
                Ok(Ask::Study { persona, topic }) => {
                    answer(ask(&admin, |tx| AdminMsg::Study { persona, topic, reply: tx }), reply)
                }
                Ok(Ask::Fault { persona, fault }) => {
                    answer(ask(&admin, |tx| AdminMsg::Fault { persona, fault, reply: tx }), reply)
                }
                Err(e) => answer::<()>(Err(e), reply),
            },
            NodeMsg::Joined(bytes) => match decode::<Vec<(String, String)>>(&bytes) {
                Ok(joined) => {
                    let _ = admin.cast(AdminMsg::Joined(joined));
                }
                Err(e) => tracing::warn!(error = %e, "room memberships from another node were dropped"),
            },
            NodeMsg::Leaving(node) => {
                let _ = admin.cast(AdminMsg::NodeLeaving(String::from_utf8_lossy(&node).into_owned()));
            }
            NodeMsg::Placed(bytes) => match decode::<Vec<(String, String, u64)>>(&bytes) {
                Ok(placed) => {
                    let _ = admin.cast(AdminMsg::Placed(placed));
                }
                Err(e) => tracing::warn!(error = %e, "a placement from another node was dropped"),
            },
            NodeMsg::Dump(bytes, reply) => {
                tokio::spawn(async move {
                    let r: Result<FleetDump, InjectError> = match decode::<DumpDepth>(&bytes) {
                        Ok(depth) => call_t!(admin, |r| AdminMsg::NodeDump { depth, reply: r }, REMOTE_CALL_MS)
                            .unwrap_or_else(|e| Err(InjectError::Storage(format!("admin: {e}")))),
                        Err(e) => Err(e),
                    };
                    let _ = reply.send(encode(&r));
                });
            }
            NodeMsg::Ping(n, reply) => {
                let _ = reply.send(n);
            }
            NodeMsg::Claim(bytes) => match decode::<Claim>(&bytes) {
                Ok(claim) => {
                    let _ = admin.cast(AdminMsg::RemoteClaim(Box::new(claim)));
                }
                Err(e) => tracing::warn!(error = %e, "a claim from another node was dropped"),
            },
            NodeMsg::Turn(bytes) => match decode::<(String, Turn)>(&bytes) {
                Ok((persona, turn)) => {
                    let _ = admin.cast(AdminMsg::Turn { persona, turn });
                }
                Err(e) => tracing::warn!(error = %e, "a turn from another node was dropped"),
            },
        }
        Ok(())
    }
}

/// Casts a request with a reply port to the admin; the receiver of its answer.
fn ask<T>(
    admin: &ActorRef<AdminMsg>,
    make: impl FnOnce(RpcReplyPort<Result<T, InjectError>>) -> AdminMsg,
) -> Result<tokio::sync::oneshot::Receiver<Result<T, InjectError>>, InjectError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    admin.cast(make(tx.into())).map_err(|e| InjectError::Storage(format!("admin: {e}")))?;
    Ok(rx)
}

/// Sends the admin's answer back to the other node (as JSON), off the agent's loop.
fn answer<T: Serialize + Send + 'static>(
    asked: Result<tokio::sync::oneshot::Receiver<Result<T, InjectError>>, InjectError>,
    reply: RpcReplyPort<Vec<u8>>,
) {
    tokio::spawn(async move {
        let r: Result<T, InjectError> = match asked {
            Ok(rx) => match tokio::time::timeout(Duration::from_millis(REMOTE_CALL_MS), rx).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(InjectError::Storage("admin: no answer".into())),
                Err(_) => Err(InjectError::Storage("admin: timed out".into())),
            },
            Err(e) => Err(e),
        };
        let _ = reply.send(encode(&r));
    });
}
