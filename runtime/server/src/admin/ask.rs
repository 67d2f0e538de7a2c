//! Questions and requests for personas: introspection (`ai`, answered from a dump and storage,
//! across nodes in a cluster), embeddings, study topics, state changes and faults. A request for
//! a persona of another node is asked of that node.

use ractor::{RpcReplyPort, call_t};
use std::sync::Arc;
use std::time::Duration;

use mindfleet_core::adapter::TrainerMsg;
use mindfleet_core::ai::AiQuery;
use mindfleet_core::cluster::{Ask, ClusterView};
use mindfleet_core::dump::FleetDump;
use mindfleet_core::embedding::{EmbedMsg, LongText, Urgency};
use mindfleet_core::messages::{DumpDepth, Fault, InjectError, PersonaMsg, StateChange};
use mindfleet_core::sched::SchedulerMsg;
use mindfleet_store::Storage;

use super::{AdminState, DUMP_CALL_MS};

impl AdminState {
    /// Answers `query` from this node's personas.
    pub(super) fn ai_here(&mut self, query: AiQuery, reply: RpcReplyPort<Result<serde_json::Value, InjectError>>) {
        match query {
            AiQuery::Cost { since_secs, buckets } => {
                let scheduler = self.scheduler.actor().clone();
                let since = Duration::from_secs(since_secs);
                let c = &self.config.conversation;
                let observer = if c.enabled { c.observations } else { mindfleet_core::config::Observer::Off };
                tokio::spawn(async move {
                    let r = call_t!(scheduler, |reply| SchedulerMsg::Cost { since, buckets, reply }, DUMP_CALL_MS)
                        .map(|mut c| {
                            c.observations = observer.as_str().to_string();
                            serde_json::to_value(c).unwrap_or_default()
                        })
                        .map_err(|e| InjectError::Storage(format!("scheduler: {e}")));
                    let _ = reply.send(r);
                });
            }
            AiQuery::Recall(q) => {
                let Some(index) = self.conversation.clone() else {
                    let _ = reply.send(Err(InjectError::Unavailable(
                        "conversation memory is off ([conversation] enabled = false)".into(),
                    )));
                    return;
                };
                if !self.personas.contains_key(q.persona.as_str()) {
                    let _ = reply.send(Err(InjectError::NotFound(format!("unknown persona {:?}", q.persona))));
                    return;
                }
                let (storage, weights) = (self.storage.clone(), self.config.conversation.weights);
                tokio::spawn(async move {
                    // A person asking waits for the model: its answer is what they asked for.
                    let r =
                        mindfleet_store::conversation::recall(&index, &storage, &q, &weights, None).await.map(|r| {
                            let mut marks = mindfleet_core::conversation::SaidMarks::default();
                            marks.recall(r.items.iter().map(|i| i.said.seq), mindfleet_core::time::now_us());
                            storage.conversation_marks(q.persona.as_str().into(), marks);
                            serde_json::json!({ "persona": q.persona, "query": q.query, "recall": r })
                        });
                    let r = r.map_err(InjectError::Unavailable);
                    let _ = reply.send(r);
                });
            }
            q @ (AiQuery::Why { .. } | AiQuery::History { .. }) => {
                // From storage alone: no dump needed.
                let storage = self.storage.clone();
                tokio::spawn(async move {
                    let r = tokio::task::spawn_blocking(move || match &q {
                        AiQuery::Why { event_id } => crate::ai::why(&storage, event_id),
                        AiQuery::History { room, since_us } => crate::ai::history(&storage, room, *since_us),
                        _ => Ok(serde_json::Value::Null),
                    })
                    .await
                    .map_err(|e| InjectError::Storage(e.to_string()))
                    .and_then(|r| r.map_err(|e| InjectError::Storage(e.to_string())));
                    let _ = reply.send(r);
                });
            }
            query => match self.dump_work(query.persona()) {
                Ok(work) => {
                    answer_from(self.dump_base().gather(work, DumpDepth::Full), query, self.storage.clone(), reply)
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
        }
    }

    /// Answers `query` for the whole cluster: a persona's from its node; a question about
    /// every persona from the cluster's dump, or (learnings, recoveries and model costs, kept
    /// by each node for its own personas) from every node's own answer.
    pub(super) fn ai_across(&mut self, query: AiQuery, reply: RpcReplyPort<Result<serde_json::Value, InjectError>>) {
        if let Some(persona) = query.persona() {
            match self.elsewhere(persona) {
                Some((view, node)) => {
                    tokio::spawn(async move {
                        let _ = reply.send(mindfleet_core::cluster::ask_node(&view, &node, &Ask::Ai(query)).await);
                    });
                }
                None => self.ai_here(query, reply),
            }
            return;
        }
        match query {
            AiQuery::Cost { .. }
            | AiQuery::Learnings { .. }
            | AiQuery::Recoveries { .. }
            | AiQuery::Why { .. }
            | AiQuery::History { .. } => {
                // Kept by each node for its own personas: every node's answer, joined.
                let costs = matches!(query, AiQuery::Cost { .. });
                let (tx, here) = tokio::sync::oneshot::channel();
                self.ai_here(query.clone(), tx.into());
                let view = self.cluster.as_ref().map(|c| c.view.clone()).expect("a cluster");
                let nodes: Vec<String> = self.per_node.keys().filter(|n| n.as_str() != view.me()).cloned().collect();
                tokio::spawn(async move {
                    let ask = Ask::Ai(query);
                    let theirs = futures::future::join_all(
                        nodes.iter().map(|n| mindfleet_core::cluster::ask_node(&view, n, &ask)),
                    );
                    let (mine, theirs) = tokio::join!(here, theirs);
                    let mut parts = vec![mine.unwrap_or_else(|_| Err(InjectError::Storage("admin: no answer".into())))];
                    parts.extend(theirs);
                    let parts = parts.into_iter().collect::<Result<Vec<_>, _>>();
                    let _ = reply.send(if costs { parts.and_then(merge_costs) } else { parts.map(concat_lists) });
                });
            }
            query => match self.dump_task(None, DumpDepth::Full) {
                Ok(dump) => answer_from(dump, query, self.storage.clone(), reply),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
        }
    }

    /// The node of `persona` and the view to reach it, when it runs on another node.
    pub(super) fn elsewhere(&self, persona: &str) -> Option<(ClusterView, Arc<str>)> {
        let node = self.personas.get(persona)?.node.clone()?;
        Some((self.cluster.as_ref()?.view.clone(), node))
    }
}

/// Answers `query` from the dump `dump` gives (and storage), off the admin's loop.
pub(super) fn answer_from(
    dump: impl Future<Output = Result<FleetDump, InjectError>> + Send + 'static,
    query: AiQuery,
    storage: Storage,
    reply: RpcReplyPort<Result<serde_json::Value, InjectError>>,
) {
    tokio::spawn(async move {
        let r = match dump.await {
            Ok(dump) => tokio::task::spawn_blocking(move || crate::ai::answer(&query, &dump, &storage))
                .await
                .map_err(|e| InjectError::Storage(e.to_string()))
                .and_then(|r| r.map_err(|e| InjectError::Storage(e.to_string()))),
            Err(e) => Err(e),
        };
        let _ = reply.send(r);
    });
}

/// Every node's `ai cost` answer, as one report ([`mindfleet_core::sched::CostReport::merge`]).
pub(super) fn merge_costs(parts: Vec<serde_json::Value>) -> Result<serde_json::Value, InjectError> {
    let reports = parts
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<Vec<mindfleet_core::sched::CostReport>, _>>()
        .map_err(|e| InjectError::Storage(format!("a node's cost report: {e}")))?;
    Ok(serde_json::to_value(mindfleet_core::sched::CostReport::merge(reports)).unwrap_or_default())
}

/// The answers of every node to one question, as one: their lists joined key by key.
pub(super) fn concat_lists(parts: Vec<serde_json::Value>) -> serde_json::Value {
    let mut parts = parts.into_iter();
    let mut all = parts.next().unwrap_or_default();
    for part in parts {
        let (Some(all), serde_json::Value::Object(part)) = (all.as_object_mut(), part) else { continue };
        for (k, v) in part {
            if let (Some(serde_json::Value::Array(mine)), serde_json::Value::Array(theirs)) = (all.get_mut(&k), v) {
                mine.extend(theirs);
            }
        }
    }
    all
}

impl AdminState {
    /// The embedding of `text`, with the model that made it.
    pub(super) fn embed(
        &self,
        text: String,
        long: LongText,
        reply: RpcReplyPort<Result<serde_json::Value, InjectError>>,
    ) {
        let worker = self.embedding.clone();
        tokio::spawn(async move {
            let answer = ractor::call!(worker, |r| EmbedMsg::Embed {
                texts: vec![text],
                long,
                urgency: Urgency::Normal,
                reply: r
            });
            let stats = ractor::call!(worker, EmbedMsg::Stats);
            let r = match (answer, stats) {
                (Ok(Ok(mut e)), Ok(s)) => Ok(e.remove(0).to_json(&s.model.model)),
                (Ok(Err(e)), _) => Err(InjectError::Unavailable(e.to_string())),
                (Err(e), _) | (_, Err(e)) => Err(InjectError::Unavailable(format!("embedding worker: {e}"))),
            };
            let _ = reply.send(r);
        });
    }

    /// `persona` studies `topic` (else the knowledge gap it noted first) in idle time.
    pub(super) fn study(
        &self,
        persona: String,
        topic: Option<String>,
        reply: RpcReplyPort<Result<String, InjectError>>,
    ) {
        if let Some((view, node)) = self.elsewhere(&persona) {
            tokio::spawn(async move {
                let r = mindfleet_core::cluster::ask_node(&view, &node, &Ask::Study { persona, topic }).await.and_then(
                    |v| serde_json::from_value(v).map_err(|e| InjectError::Storage(format!("node {node:?}: {e}"))),
                );
                let _ = reply.send(r);
            });
            return;
        }
        let Some(actor) = self.personas.get(persona.as_str()).and_then(|p| p.actor.clone()) else {
            let _ = reply.send(Err(InjectError::NotFound(format!("unknown or stopped persona {persona:?}"))));
            return;
        };
        tokio::spawn(async move {
            let r = match call_t!(actor, |r| PersonaMsg::Study { topic, reply: r }, DUMP_CALL_MS) {
                Ok(Ok(topic)) => Ok(topic),
                Ok(Err(why)) => Err(InjectError::Invalid(why)),
                Err(e) => Err(InjectError::NotFound(format!("persona {persona:?} did not answer: {e}"))),
            };
            let _ = reply.send(r);
        });
    }

    /// Has the trainer train an adapter on `persona`'s study chats (about `topic`, else all).
    pub(super) fn train(
        &self,
        persona: String,
        topic: Option<String>,
        reply: RpcReplyPort<Result<String, InjectError>>,
    ) {
        if let Some((_, node)) = self.elsewhere(&persona) {
            let why = format!("persona {persona:?} runs on node {node:?}: ask that node's admin to train it");
            let _ = reply.send(Err(InjectError::Invalid(why)));
            return;
        }
        if !self.personas.contains_key(persona.as_str()) {
            let _ = reply.send(Err(InjectError::NotFound(format!("unknown persona {persona:?}"))));
            return;
        }
        let Some(trainer) = self.trainer.clone() else {
            let why = "this fleet has no local model to train adapters for ([llm] is an endpoint, or no persona uses the model)";
            let _ = reply.send(Err(InjectError::Unavailable(why.into())));
            return;
        };
        tokio::spawn(async move {
            let r = match call_t!(trainer, |r| TrainerMsg::Train { persona, topic, reply: r }, DUMP_CALL_MS) {
                Ok(Ok(id)) => Ok(id),
                Ok(Err(why)) => Err(InjectError::Invalid(why)),
                Err(e) => Err(InjectError::Unavailable(format!("the trainer did not answer: {e}"))),
            };
            let _ = reply.send(r);
        });
    }

    /// Changes `persona`'s state (dormant, awake, a focus).
    pub(super) fn set_state(&self, persona: String, change: StateChange, reply: RpcReplyPort<Result<(), InjectError>>) {
        if let Some((view, node)) = self.elsewhere(&persona) {
            tokio::spawn(async move {
                let _ = reply.send(
                    mindfleet_core::cluster::ask_node(&view, &node, &Ask::SetState { persona, change }).await.map(drop),
                );
            });
            return;
        }
        let r = match self.personas.get(persona.as_str()).and_then(|p| p.actor.clone()) {
            Some(a) => a
                .cast(PersonaMsg::SetState(change))
                .map_err(|_| InjectError::NotFound(format!("persona {persona:?} is down"))),
            None => Err(InjectError::NotFound(format!("unknown or stopped persona {persona:?}"))),
        };
        let _ = reply.send(r);
    }

    /// Injects `fault` into `persona` (only with `[admin] faults = true` on its node).
    pub(super) fn fault(&self, persona: String, fault: Fault, reply: RpcReplyPort<Result<(), InjectError>>) {
        if let Some((view, node)) = self.elsewhere(&persona) {
            tokio::spawn(async move {
                let _ = reply.send(
                    mindfleet_core::cluster::ask_node(&view, &node, &Ask::Fault { persona, fault }).await.map(drop),
                );
            });
            return;
        }
        let r = if !self.config.admin.faults {
            Err(InjectError::Invalid("fault injection is disabled (set `[admin] faults = true`)".into()))
        } else {
            match self.personas.get(persona.as_str()).and_then(|p| p.actor.clone()) {
                Some(a) => a
                    .cast(PersonaMsg::Fault(fault))
                    .map_err(|_| InjectError::NotFound(format!("persona {persona:?} is down"))),
                None => Err(InjectError::NotFound(format!("unknown or stopped persona {persona:?}"))),
            }
        };
        let _ = reply.send(r);
    }
}
