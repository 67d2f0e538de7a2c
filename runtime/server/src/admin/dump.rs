//! Gathering dumps: every persona of this node asked with a deadline (a placeholder for one
//! that does not answer), the shared actors' figures, the journals from storage, and in a
//! cluster the other nodes' parts. All of it off the admin's loop.

use ractor::{ActorRef, RpcReplyPort, call_t};
use std::collections::BTreeMap;
use std::sync::Arc;

use mindfleet_core::cluster::{ClusterView, NodeMsg};
use mindfleet_core::dump::{AdminDump, ChildDump, FleetDump, PersonaDump};
use mindfleet_core::embedding::{EmbedMsg, EmbedStats};
use mindfleet_core::knowledge::{IndexMsg, IndexStats};
use mindfleet_core::llm::{LlmMsg, LlmStats};
use mindfleet_core::messages::{CoordinatorMsg, DumpDepth, InjectError, PersonaMsg, PersonaStatus};
use mindfleet_core::sched::SchedulerMsg;
use mindfleet_core::time::{now_us, rfc3339};
use mindfleet_core::tools::{ToolsDump, ToolsMsg};
use mindfleet_core::webhook::{WebhookConfig, WebhookDump};
use mindfleet_store::Storage;

use super::{AdminState, DUMP_CALL_MS, PersonaEntry};

impl AdminState {
    /// A dump of one persona (on whichever node) or of the fleet (on every node), to be
    /// awaited off the admin's loop.
    pub(super) fn dump_task(
        &self,
        persona: Option<&str>,
        depth: DumpDepth,
    ) -> Result<impl Future<Output = Result<FleetDump, InjectError>> + Send + 'static, InjectError> {
        let remote = self.cluster_part(persona);
        // A persona of another node: only its node's part.
        let work = match (persona, &remote) {
            (Some(p), Some(c)) if c.personas.iter().any(|(n, _)| n == p) => Vec::new(),
            _ => self.dump_work(persona)?,
        };
        let base = self.dump_base();
        Ok(async move {
            let mut r = base.gather(work, depth).await;
            if let (Ok(d), Some(c)) = (&mut r, remote) {
                c.complete(d, depth).await;
            }
            r
        })
    }
}

impl AdminState {
    /// What a dump needs besides the personas.
    pub(super) fn dump_base(&self) -> DumpBase {
        DumpBase {
            fleet: self.config.name.clone(),
            storage: self.storage.clone(),
            scheduler: self.scheduler.actor().clone(),
            coordinator: self.coordinator.clone(),
            embedding: self.embedding.clone(),
            llm: self.llm.clone(),
            index: self.index.clone(),
            tools: self.tools.clone(),
            admin: AdminDump {
                addr: self.addr.clone(),
                rooms: self.rooms.iter().map(|(r, m)| (r.clone(), m.iter().map(|n| n.to_string()).collect())).collect(),
                rejected: self.rejected,
                ..Default::default()
            },
            webhooks: self.config.webhooks.clone(),
        }
    }

    /// The personas of this node a dump covers: one (which must exist, here) or all.
    pub(super) fn dump_work(&self, persona: Option<&str>) -> Result<DumpWork, InjectError> {
        let selected: Vec<&PersonaEntry> = match persona {
            Some(name) => {
                let p = self
                    .personas
                    .get(name)
                    .ok_or_else(|| InjectError::NotFound(format!("unknown persona {name:?}")))?;
                if let Some(node) = &p.node {
                    return Err(InjectError::NotFound(format!(
                        "persona {name:?} runs on node {node:?}: ask that node's admin"
                    )));
                }
                vec![p]
            }
            None => self.personas.values().filter(|p| p.node.is_none()).collect(),
        };
        Ok(selected
            .into_iter()
            .map(|p| (p.name.clone(), p.actor.clone(), p.status, p.restarts, p.error.clone()))
            .collect())
    }
}

/// The part of a cluster dump that other nodes give: their personas, journals and links.
pub(super) struct ClusterPart {
    view: ClusterView,
    /// How many personas are placed on each node.
    per_node: BTreeMap<String, usize>,
    /// The personas of other nodes the dump covers, with their node.
    personas: Vec<(String, Arc<str>)>,
}

impl AdminState {
    pub(super) fn cluster_part(&self, persona: Option<&str>) -> Option<ClusterPart> {
        let c = self.cluster.as_ref()?;
        let personas = self
            .personas
            .values()
            .filter(|p| persona.is_none_or(|name| *p.name == *name))
            .filter_map(|p| Some((p.name.to_string(), p.node.clone()?)))
            .collect();
        Some(ClusterPart { view: c.view.clone(), per_node: self.per_node.clone(), personas })
    }
}

impl ClusterPart {
    /// Completes this node's dump `d` with the other nodes' parts: their personas (each with
    /// its node; placeholders, `unreachable`, for a node that does not answer), one outbox and
    /// event list for the cluster, and `nodes[]` with their links.
    pub(super) async fn complete(self, d: &mut FleetDump, depth: DumpDepth) {
        let me = self.view.me().to_string();
        for p in &mut d.personas {
            p.node = Some(me.clone());
        }
        let mut nodes: Vec<Arc<str>> = self.personas.iter().map(|(_, n)| n.clone()).collect();
        nodes.sort();
        nodes.dedup();
        let view = &self.view;
        let asks = nodes.iter().map(|node| async move {
            let bytes =
                view.call(node, NodeMsg::Dump, mindfleet_core::cluster::encode(&depth), DUMP_CALL_MS + 1000).await?;
            mindfleet_core::cluster::decode::<Result<FleetDump, InjectError>>(&bytes)
                .and_then(|r| r)
                .map_err(|e| format!("node {node:?}: {e}"))
        });
        let answers = futures::future::join_all(asks).await;
        let mut parts: BTreeMap<Arc<str>, Result<FleetDump, String>> = nodes.into_iter().zip(answers).collect();
        for (name, node) in &self.personas {
            let found = match parts.get_mut(node) {
                Some(Ok(part)) => part.personas.iter().position(|p| p.name == *name).map(|i| part.personas.remove(i)),
                _ => None,
            };
            let p = found.unwrap_or_else(|| {
                let why = match parts.get(node) {
                    Some(Err(e)) => e.clone(),
                    _ => format!("not running on node {node:?}"),
                };
                PersonaDump::placeholder(name, PersonaStatus::Unreachable, 0, Some(why))
            });
            d.personas.push(PersonaDump { node: Some(node.to_string()), ..p });
        }
        d.personas.sort_by(|a, b| a.name.cmp(&b.name));
        let mut nodes = self.view.dump(&self.per_node);
        for (node, part) in parts {
            let Ok(part) = part else { continue };
            if let Some(n) = nodes.iter_mut().find(|n| *n.name == *node)
                && let Some(theirs) = part.nodes.first()
            {
                n.links = theirs.links.clone();
            }
            d.outbox.extend(part.outbox);
            d.recent_events.extend(part.recent_events);
            d.dead_letters.extend(part.dead_letters);
            for theirs in part.webhooks {
                match d.webhooks.iter_mut().find(|w| w.name == theirs.name) {
                    Some(w) => w.add(theirs),
                    None => d.webhooks.push(theirs),
                }
            }
            d.admin.accepted += part.admin.accepted;
            d.admin.duplicates += part.admin.duplicates;
            d.admin.rejected += part.admin.rejected;
            d.coordination.add(&part.coordination);
        }
        d.outbox.sort_by_key(|o| std::cmp::Reverse(o.at_us));
        d.outbox.truncate(RECENT);
        d.recent_events.sort_by_key(|e| std::cmp::Reverse(e.accepted_us));
        d.recent_events.truncate(RECENT);
        d.nodes = nodes;
    }
}

/// How many outbox entries and events a dump shows.
pub(super) const RECENT: usize = 100;

pub(super) struct DumpBase {
    fleet: String,
    storage: Storage,
    scheduler: ActorRef<SchedulerMsg>,
    coordinator: ActorRef<CoordinatorMsg>,
    embedding: ActorRef<EmbedMsg>,
    llm: Option<ActorRef<LlmMsg>>,
    index: ActorRef<IndexMsg>,
    tools: Option<ActorRef<ToolsMsg>>,
    admin: AdminDump,
    webhooks: Vec<WebhookConfig>,
}

pub(super) type DumpWork = Vec<(Arc<str>, Option<ActorRef<PersonaMsg>>, PersonaStatus, u32, Option<String>)>;

impl DumpBase {
    pub(super) async fn gather(self, work: DumpWork, depth: DumpDepth) -> Result<FleetDump, InjectError> {
        let (decisions, evictions) = match depth {
            DumpDepth::Full => (50, 20),
            DumpDepth::Cards => (1, 0),
        };
        let calls = work.into_iter().map(|(name, actor, status, restarts, error)| async move {
            // A running persona that does not answer in time is said to be unresponsive, not
            // restarting: its supervisor has it running.
            let (live, status) = match (&actor, status) {
                (Some(a), PersonaStatus::Running) => match call_t!(a, PersonaMsg::Dump, DUMP_CALL_MS, depth) {
                    Ok(d) => (Some(d), status),
                    Err(ractor::RactorErr::Timeout) => (None, PersonaStatus::Unresponsive),
                    Err(_) => (None, PersonaStatus::Restarting),
                },
                (_, PersonaStatus::Running) => (None, PersonaStatus::Restarting),
                _ => (None, status),
            };
            let mut d = live.unwrap_or_else(|| PersonaDump::placeholder(&name, status, restarts, error.clone()));
            d.actors.persona.restarts = restarts;
            if d.actors.persona.last_error.is_none() {
                d.actors.persona.last_error = error;
            }
            d
        });
        let mut personas = futures::future::join_all(calls).await;
        // The figures first, then the tables: they are answered once what they count is
        // committed, so every dead letter counted is in the read below.
        let storage_stats = self.storage.stats().await.map_err(|e| InjectError::Storage(e.to_string()))?;
        let storage = self.storage.clone();
        let names: Vec<String> = personas.iter().map(|p| p.name.clone()).collect();
        let hooks: Vec<String> = self.webhooks.iter().map(|h| h.name.clone()).collect();
        let (journals, outbox, recent_events, dead_letters, hooks_dead) = tokio::task::spawn_blocking(move || {
            let decisions = storage.recent_decisions_of(&names, decisions)?;
            let evictions: Result<Vec<_>, _> = match evictions {
                0 => Ok(vec![Vec::new(); names.len()]),
                n => names.iter().map(|name| storage.recent_evictions(name, n)).collect(),
            };
            let journals: Vec<_> = decisions.into_iter().zip(evictions?).collect();
            let (outbox, events) = (storage.recent_outbox(RECENT)?, storage.recent_events(RECENT)?);
            let hooks_dead: Result<Vec<_>, _> =
                hooks.iter().map(|h| storage.hook_dead_letters(h, WebhookDump::DEAD_SHOWN)).collect();
            Ok::<_, mindfleet_store::StorageError>((journals, outbox, events, storage.dead_letters()?, hooks_dead?))
        })
        .await
        .map_err(|e| InjectError::Storage(e.to_string()))?
        .map_err(|e| InjectError::Storage(e.to_string()))?;
        for (p, (decisions, evictions)) in personas.iter_mut().zip(journals) {
            p.decisions = decisions;
            p.working_memory.evictions = evictions;
        }
        let scheduler = call_t!(self.scheduler, SchedulerMsg::Stats, DUMP_CALL_MS).unwrap_or_default();
        let coordination = call_t!(self.coordinator, CoordinatorMsg::Stats, DUMP_CALL_MS).unwrap_or_default();
        let embedding = call_t!(self.embedding, EmbedMsg::Stats, DUMP_CALL_MS).unwrap_or_else(|e| EmbedStats {
            status: "failed".into(),
            error: Some(e.to_string()),
            ..Default::default()
        });
        let llm = match &self.llm {
            None => LlmStats { status: "off".into(), ..Default::default() },
            Some(l) => call_t!(l, LlmMsg::Stats, DUMP_CALL_MS).unwrap_or_else(|e| LlmStats {
                status: "failed".into(),
                error: Some(e.to_string()),
                ..Default::default()
            }),
        };
        let index = call_t!(self.index, IndexMsg::Stats, DUMP_CALL_MS).unwrap_or_else(|e| IndexStats {
            status: "failed".into(),
            error: Some(e.to_string()),
            ..Default::default()
        });
        let tools = match &self.tools {
            Some(t) => call_t!(t, ToolsMsg::Dump, DUMP_CALL_MS).unwrap_or_default(),
            None => ToolsDump::default(),
        };
        if llm.status == "degraded" {
            let why = format!("LLM unavailable: {}", llm.error.as_deref().unwrap_or("unknown"));
            for p in personas.iter_mut().filter(|p| p.brain == "local") {
                p.brain_degraded = Some(why.clone());
            }
        }
        let webhooks = self
            .webhooks
            .iter()
            .zip(hooks_dead)
            .map(|(h, dead)| {
                WebhookDump::new(h, storage_stats.webhooks.get(&h.name).cloned().unwrap_or_default(), dead)
            })
            .collect();
        let mut admin = self.admin;
        admin.accepted = storage_stats.accepted;
        admin.duplicates = storage_stats.duplicates;
        Ok(FleetDump {
            fleet: self.fleet,
            generated_at: rfc3339(now_us()),
            supervisor: ChildDump::running(0),
            admin,
            scheduler,
            coordination,
            embedding,
            llm,
            index,
            storage: storage_stats,
            personas,
            outbox,
            recent_events,
            dead_letters,
            webhooks,
            nodes: Vec::new(),
            tools,
        })
    }
}

impl AdminState {
    /// A dump of one persona (on whichever node) or of the fleet.
    pub(super) fn dump(
        &self,
        persona: Option<&str>,
        depth: DumpDepth,
        reply: RpcReplyPort<Result<FleetDump, InjectError>>,
    ) {
        match self.dump_task(persona, depth) {
            // Gathering waits on every persona: do it off the admin's loop.
            Ok(dump) => {
                tokio::spawn(async move {
                    let _ = reply.send(dump.await);
                });
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// This node's part of a cluster's dump: its own personas, each with this node's name, and
    /// its links.
    pub(super) fn node_dump(&self, depth: DumpDepth, reply: RpcReplyPort<Result<FleetDump, InjectError>>) {
        let work = self.dump_work(None);
        let base = self.dump_base();
        let node = self.cluster.as_ref().map(|c| (c.view.clone(), self.per_node.clone()));
        tokio::spawn(async move {
            let r = match work {
                Ok(work) => base.gather(work, depth).await,
                Err(e) => Err(e),
            };
            let _ = reply.send(r.map(|mut d| {
                if let Some((view, per_node)) = node {
                    for p in &mut d.personas {
                        p.node = Some(view.me().to_string());
                    }
                    d.nodes = view.dump(&per_node);
                }
                d
            }));
        });
    }
}
