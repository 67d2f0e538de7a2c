//! The `FleetSupervisor` actor and [`Fleet`], the handle that starts, drives and stops a
//! fleet in this process.
//!
//! The supervisor spawns the scheduler, the admin and one persona per configured persona.
//! A persona that fails is restarted (its state comes back from storage); the delivery it
//! was handling is charged a crash and dead-lettered after `max_crashes_per_event`. More
//! than `max_restarts` failures within `within_secs` stop the persona for good: it is
//! reported `failed` in dumps and the rest of the fleet runs on.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mindfleet_actors::coordinator::CoordinatorArgs;
use mindfleet_actors::embed::worker::EmbedArgs;
use mindfleet_actors::index::IndexArgs;
use mindfleet_actors::llm_worker::openai::OpenAiConfig;
use mindfleet_actors::llm_worker::{BackendArgs, LlmArgs};
use mindfleet_actors::tools::ToolHostArgs;
use mindfleet_actors::trainer::{ChatsFn, StudiedFn, TrainerArgs};
use mindfleet_actors::training_run::TrainOptions;
use mindfleet_core::cluster::RoomRouter;
use mindfleet_core::cluster::Serving;
use mindfleet_core::config::{BrainKind, FleetConfig, LlmBackend, Observer, PersonaConfig};
use mindfleet_core::dump::FleetDump;
use mindfleet_core::embedding::EmbedMsg;
use mindfleet_core::event::EventInput;
use mindfleet_core::fleet::{FleetMsg, Handles};
use mindfleet_core::knowledge::IndexMsg;
use mindfleet_core::llm::LlmMsg;
use mindfleet_core::messages::{
    AdminMsg, CoordinatorMsg, DumpDepth, Fault, InjectAck, InjectError, PersonaMsg, PersonaStatus,
};
use mindfleet_core::restart::{RestartWindow, child_failure};
use mindfleet_core::sched::{SchedulerHandle, SchedulerMsg};
use mindfleet_core::tools::ToolsMsg;
use mindfleet_models::fetch;
use mindfleet_models::llama::LlmConfig;
use mindfleet_personas::enrich::Enricher;
use mindfleet_personas::redundancy::Redundancy;
use mindfleet_personas::{ConversationArgs, FaultBook, Persona, PersonaArgs};
use mindfleet_server::admin::{Admin, AdminArgs, AdminCluster};
use mindfleet_server::http::{self, HttpState};
use mindfleet_server::node::embed::RemoteEmbed;
use mindfleet_server::node::index::RemoteIndex;
use mindfleet_server::webhook::Senders;
use mindfleet_store::adapters::AdapterDir;
use mindfleet_store::{DataDirLock, HandOff, Storage, lock_data_dir};
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent, call_t};

pub use crate::error::FleetError;
use workers::{TRAINING_CHECK, llm_args, placement, serving, studied, study_chats};
pub use workers::{embed_args, index_args, llm_backend};

mod workers;

pub struct FleetSupervisor;

pub struct FleetArgs {
    pub config: Arc<FleetConfig>,
    pub storage: Storage,
    pub admin_addr: String,
    /// This node's part in a fleet that spans nodes: only the personas placed here run here.
    pub cluster: Option<AdminCluster>,
}

struct Slot {
    config: Arc<PersonaConfig>,
    marker: Arc<AtomicU64>,
    faults: Arc<FaultBook>,
    window: RestartWindow,
    actor: Option<ActorRef<PersonaMsg>>,
}

pub struct FleetState {
    config: Arc<FleetConfig>,
    storage: Storage,
    admin: ActorRef<AdminMsg>,
    scheduler: SchedulerHandle,
    coordinator: ActorRef<CoordinatorMsg>,
    embedding: ActorRef<EmbedMsg>,
    llm: Option<ActorRef<LlmMsg>>,
    index: ActorRef<IndexMsg>,
    enricher: Option<Arc<Enricher>>,
    /// The conversation index (`[conversation]` on).
    conversation: Option<ActorRef<IndexMsg>>,
    /// The adapters the trainer keeps, when the model is local.
    adapters: Option<AdapterDir>,
    /// The tool host, when the fleet declares tool servers.
    tools: Option<ActorRef<ToolsMsg>>,
    slots: Vec<Slot>,
    by_id: HashMap<ActorId, usize>,
}

impl Slot {
    fn new(p: &PersonaConfig, config: &FleetConfig) -> Slot {
        Slot {
            config: Arc::new(p.clone()),
            marker: Arc::new(AtomicU64::new(0)),
            faults: Arc::new(FaultBook::default()),
            window: RestartWindow::new(config.supervision),
            actor: None,
        }
    }
}

impl FleetState {
    fn persona_args(&self, i: usize) -> PersonaArgs {
        let s = &self.slots[i];
        PersonaArgs {
            config: s.config.clone(),
            storage: self.storage.clone(),
            admin: self.admin.clone(),
            scheduler: self.scheduler.clone(),
            supervision: self.config.supervision,
            marker: s.marker.clone(),
            faults: s.faults.clone(),
            coordinator: self.coordinator.clone(),
            turn_timeout: self.config.coordination.window * 4 + Duration::from_secs(1),
            llm: self.llm.clone(),
            index: Some(self.index.clone()),
            enricher: self.enricher.clone(),
            conversation: self.conversation.clone().map(|index| ConversationArgs {
                index,
                embedding: self.embedding.clone(),
                config: self.config.conversation,
            }),
            embedding: Some(self.embedding.clone()),
            redundancy: Some(Redundancy {
                embedding: self.embedding.clone(),
                threshold: self.config.coordination.redundancy_threshold,
            }),
            adapters: self.adapters.clone(),
            // A model behind an endpoint may be one that knows things: its drafts may answer
            // without material. The local model's may not.
            open_answers: matches!(self.config.llm, LlmBackend::OpenAi { .. }),
            personas: self.config.personas.iter().map(|p| p.name.clone()).collect(),
            tools: self.tools.clone(),
            native_tools: matches!(self.config.llm, LlmBackend::OpenAi { .. }),
            record: self.config.storage.record,
        }
    }

    /// Starts persona `i`, retrying failed starts within its restart window; reports the
    /// outcome to the admin.
    async fn start_persona(&mut self, i: usize, me: &ActorCell, mut error: Option<String>, restart: bool) {
        let name = self.slots[i].config.name.clone();
        loop {
            if restart || error.is_some() {
                let allowed = self.slots[i].window.allow(Instant::now());
                if !allowed {
                    let error = error.unwrap_or_default();
                    tracing::error!(persona = %name, %error, "persona failed too often; stopped");
                    let _ = self.admin.cast(AdminMsg::PersonaStatus {
                        name,
                        status: PersonaStatus::Failed,
                        restarts: self.slots[i].window.total,
                        error: Some(error),
                    });
                    return;
                }
                let _ = self.admin.cast(AdminMsg::PersonaStatus {
                    name: name.clone(),
                    status: PersonaStatus::Restarting,
                    restarts: self.slots[i].window.total,
                    error: error.clone(),
                });
            }
            match Actor::spawn_linked(None, Persona, self.persona_args(i), me.clone()).await {
                Ok((actor, _)) => {
                    self.by_id.insert(actor.get_id(), i);
                    self.slots[i].actor = Some(actor.clone());
                    let _ = self.admin.cast(AdminMsg::PersonaUp { name: name.clone(), actor });
                    if self.slots[i].window.total > 0 {
                        let _ = self.admin.cast(AdminMsg::PersonaStatus {
                            name,
                            status: PersonaStatus::Running,
                            restarts: self.slots[i].window.total,
                            error: None,
                        });
                    }
                    return;
                }
                Err(e) => error = Some(format!("start failed: {e}")),
            }
        }
    }
}

impl Actor for FleetSupervisor {
    type Msg = FleetMsg;
    type State = FleetState;
    type Arguments = FleetArgs;

    async fn pre_start(&self, myself: ActorRef<FleetMsg>, args: FleetArgs) -> Result<FleetState, ActorProcessingErr> {
        let me = myself.get_cell();
        let budgets = mindfleet_actors::scheduler::budgets(&args.config.personas);
        let scheduler =
            mindfleet_actors::scheduler::spawn_with_budgets(args.config.scheduler, budgets, Some(me.clone())).await?;
        let c = args.config.coordination;
        let rooms = args.cluster.as_ref().map(|c| c.rooms.clone());
        let coordinator = mindfleet_actors::coordinator::spawn(
            CoordinatorArgs { responders: c.responders, window: c.window, hold: c.hold, rooms },
            Some(me.clone()),
        )
        .await?;
        let embedding = match serving(&args, args.config.cluster.embedding.as_ref()) {
            // Another node embeds for this one.
            Some(remote) => Actor::spawn_linked(None, RemoteEmbed, remote, me.clone()).await?.0,
            None => mindfleet_actors::embed::worker::spawn(embed_args(&args.config), Some(me.clone())).await?,
        };
        let llm = match llm_args(&args.config) {
            Some(a) => Some(mindfleet_actors::llm_worker::spawn_for(a, args.config.decoding, Some(me.clone())).await?),
            None => None,
        };
        let trainer = match llm_args(&args.config).map(|a| a.backend) {
            Some(BackendArgs::Local { model, .. }) if llm.is_some() => {
                let data_dir = args.config.storage.data_dir.clone();
                let t = &args.config.training;
                let a = TrainerArgs {
                    model,
                    data_dir: data_dir.clone(),
                    options: TrainOptions::from(t),
                    chats: study_chats(data_dir.clone()),
                    studied: studied(data_dir),
                    new_chats: t.new_chats,
                    check_every: TRAINING_CHECK,
                    scheduler: Some(scheduler.clone()),
                };
                Some(mindfleet_actors::trainer::spawn(a, Some(me.clone())).await?)
            }
            _ => None,
        };
        let adapters = trainer.is_some().then(|| AdapterDir::new(&args.config.storage.data_dir));
        let index = match serving(&args, args.config.cluster.index.as_ref()) {
            // Another node keeps the codebase index for this one.
            Some(remote) => Actor::spawn_linked(None, RemoteIndex, remote, me.clone()).await?.0,
            None => {
                let a = index_args(&args.config, embedding.clone(), llm.clone());
                mindfleet_actors::index::spawn(a, Some(me.clone())).await?
            }
        };
        let conversation = if args.config.conversation.enabled {
            let mut a = index_args(&args.config, embedding.clone(), None);
            a.dir = args.config.storage.data_dir.join("conversation");
            // Recall's fusion ([conversation]), not the codebase index's.
            let w = args.config.conversation.weights;
            (a.config.keyword_weight, a.config.vector_weight, a.config.rrf_k) =
                (w.keyword as f32, w.vector as f32, w.rrf_k as f32);
            Some(mindfleet_actors::index::spawn(a, Some(me.clone())).await?)
        } else {
            None
        };
        let tools = match args.config.tool_servers.is_empty() {
            true => None,
            false => Some(
                mindfleet_actors::tools::spawn(ToolHostArgs::of(&args.config, args.storage.clone()), Some(me.clone()))
                    .await?,
            ),
        };
        let enricher = Enricher::new(&args.config.references, Some(embedding.clone())).map(Arc::new);
        if let Some(e) = enricher.clone() {
            // The catalog's embeddings, made before the first event needs them.
            tokio::spawn(async move {
                if let Err(why) = e.warm().await {
                    tracing::warn!(%why, "semantic reference matching is off: tags and @id only");
                }
            });
        }
        let admin_args = AdminArgs {
            config: args.config.clone(),
            storage: args.storage.clone(),
            scheduler: scheduler.clone(),
            coordinator: coordinator.clone(),
            embedding: embedding.clone(),
            llm: llm.clone(),
            trainer,
            index: index.clone(),
            conversation: conversation.clone(),
            tools: tools.clone(),
            addr: args.admin_addr,
            cluster: args.cluster.clone(),
            fleet: Some(myself.clone()),
        };
        let (admin, _) = Actor::spawn_linked(None, Admin, admin_args, me.clone()).await?;
        let here = |p: &&PersonaConfig| {
            args.cluster.as_ref().is_none_or(|c| c.placement.get(&p.name).is_some_and(|n| n == c.view.me()))
        };
        let slots = args.config.personas.iter().filter(here).map(|p| Slot::new(p, &args.config)).collect();
        let mut st = FleetState {
            config: args.config,
            storage: args.storage,
            admin,
            scheduler,
            coordinator,
            embedding,
            llm,
            index,
            enricher,
            conversation,
            adapters,
            tools,
            slots,
            by_id: HashMap::new(),
        };
        // Launch in waves so the storage writer folds the personas' restores into few batches.
        const WAVE: usize = 256;
        let n = st.slots.len();
        for start in (0..n).step_by(WAVE) {
            let end = (start + WAVE).min(n);
            let spawns = (start..end).map(|i| Actor::spawn_linked(None, Persona, st.persona_args(i), me.clone()));
            let results = futures::future::join_all(spawns).await;
            for (i, r) in (start..end).zip(results) {
                match r {
                    Ok((actor, _)) => {
                        st.by_id.insert(actor.get_id(), i);
                        st.slots[i].actor = Some(actor.clone());
                        let _ = st.admin.cast(AdminMsg::PersonaUp { name: st.slots[i].config.name.clone(), actor });
                    }
                    Err(e) => st.start_persona(i, &me, Some(format!("start failed: {e}")), false).await,
                }
            }
        }
        Ok(st)
    }

    async fn handle(
        &self,
        myself: ActorRef<FleetMsg>,
        msg: FleetMsg,
        st: &mut FleetState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            FleetMsg::Handles(reply) => {
                let _ = reply.send(Handles {
                    admin: st.admin.clone(),
                    scheduler: st.scheduler.clone(),
                    embedding: st.embedding.clone(),
                    llm: st.llm.clone(),
                    index: st.index.clone(),
                    tools: st.tools.clone(),
                });
            }
            FleetMsg::Stop(name, reply) => {
                // Out of supervision first: its stop is not a failure to restart.
                if let Some(actor) = st.slots.iter_mut().find(|s| s.config.name == name).and_then(|s| s.actor.take()) {
                    st.by_id.remove(&actor.get_id());
                    let _ = actor.stop_and_wait(Some("moved to another node".into()), None).await;
                    st.scheduler.release(name.as_str().into());
                }
                let _ = reply.send(());
            }
            FleetMsg::Start(name) => {
                let i = match st.slots.iter().position(|s| s.config.name == name) {
                    Some(i) if st.slots[i].actor.is_some() => return Ok(()),
                    Some(i) => i,
                    None => {
                        let Some(p) = st.config.personas.iter().find(|p| p.name == name) else { return Ok(()) };
                        st.slots.push(Slot::new(p, &st.config));
                        st.slots.len() - 1
                    }
                };
                st.start_persona(i, &myself.get_cell(), None, false).await;
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<FleetMsg>,
        evt: SupervisionEvent,
        st: &mut FleetState,
    ) -> Result<(), ActorProcessingErr> {
        let Some((cell, error)) = child_failure(evt) else { return Ok(()) };
        let Some(i) = st.by_id.remove(&cell.get_id()) else {
            let core = [
                st.admin.get_id(),
                st.scheduler.actor().get_id(),
                st.coordinator.get_id(),
                st.embedding.get_id(),
                st.index.get_id(),
            ];
            let conversation = st.conversation.as_ref().is_some_and(|c| c.get_id() == cell.get_id());
            if core.contains(&cell.get_id())
                || conversation
                || st.llm.as_ref().is_some_and(|l| l.get_id() == cell.get_id())
            {
                // Not restarted yet: every persona holds these. Fail the fleet loudly.
                return Err(format!("core actor failed: {error}").into());
            }
            return Ok(());
        };
        let slot = &mut st.slots[i];
        slot.actor = None;
        let name = slot.config.name.clone();
        tracing::warn!(persona = %name, %error, "persona failed");
        st.scheduler.release(name.as_str().into());
        let seq = slot.marker.swap(0, Ordering::SeqCst);
        // A child's escalation is not the in-flight event's fault: only a crash is charged.
        if seq != 0 && !error.contains(mindfleet_personas::persona::ESCALATION) {
            st.storage.crash(name.as_str().into(), seq, error.clone());
        }
        st.start_persona(i, &myself.get_cell(), Some(error), true).await;
        Ok(())
    }
}

/// A running fleet in this process.
pub struct Fleet {
    pub config: Arc<FleetConfig>,
    pub admin: ActorRef<AdminMsg>,
    pub scheduler: SchedulerHandle,
    /// The shared embedding worker.
    pub embedding: ActorRef<EmbedMsg>,
    pub supervisor: ActorRef<FleetMsg>,
    pub storage: Storage,
    /// Where the admin API listens.
    pub addr: SocketAddr,
    /// The tool host, when the fleet declares tool servers.
    pub tools: Option<ActorRef<ToolsMsg>>,
    ready: Arc<AtomicBool>,
    http_stop: Option<tokio::sync::oneshot::Sender<()>>,
    http_task: Option<tokio::task::JoinHandle<()>>,
    /// Turns true when the supervisor has stopped (shutdown, or a core actor failed).
    supervisor_done: tokio::sync::watch::Receiver<bool>,
    /// This process as a node of a cluster, and where the fleet's personas run.
    node: Option<crate::cluster::Node>,
    placement: Option<AdminCluster>,
    /// The `[[webhook]]` senders.
    webhooks: Senders,
    _lock: DataDirLock,
}

impl Fleet {
    /// Locks the data dir, opens storage, starts the tree and the admin API, restores
    /// every persona, and only then reports healthy.
    pub async fn start(config: FleetConfig) -> Result<Fleet, FleetError> {
        Self::start_node(config, None).await
    }

    /// Starts this process's part of a fleet: all of it, or, as a node of a cluster, the
    /// personas placed on this node; then joins the cluster.
    pub async fn start_node(
        config: FleetConfig,
        cluster: Option<crate::cluster::ClusterOptions>,
    ) -> Result<Fleet, FleetError> {
        crate::panic_hook::install(false);
        let addr = config.admin.addr;
        if !addr.ip().is_loopback() && config.admin.token.is_none() {
            return Err(FleetError::TokenRequired { addr });
        }
        if let Some(chars) = config.admin.token.as_deref().map(|t| t.trim().chars().count())
            && !addr.ip().is_loopback()
            && chars < http::MIN_TOKEN_CHARS
        {
            return Err(FleetError::TokenTooShort { addr, chars });
        }
        let mut placement = match &cluster {
            Some(o) => Some(placement(&config, o)?),
            None => None,
        };
        // The address first: a port in use fails before anything touches the disk.
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| FleetError::Bind { addr, source })?;
        let local = listener.local_addr().map_err(|source| FleetError::Bind { addr, source })?;
        let lock = lock_data_dir(&config.storage.data_dir)?;
        let storage = Storage::open(&config.storage)?;
        if let Some(c) = &mut placement {
            // Personas that moved since the fleet file placed them.
            c.moved(&config, storage.placements()?);
        }
        // Before any persona can reply: each reply a webhook wants is queued with it.
        let webhooks = Senders::start(&storage, &config.webhooks);
        let config = Arc::new(config);
        let args = FleetArgs {
            config: config.clone(),
            storage: storage.clone(),
            admin_addr: local.to_string(),
            cluster: placement.clone(),
        };
        let (supervisor, supervisor_task) =
            Actor::spawn(None, FleetSupervisor, args).await.map_err(|e| FleetError::Spawn(e.to_string()))?;
        let Handles { admin, scheduler, embedding, llm, index, tools } =
            call_t!(supervisor, FleetMsg::Handles, 10_000).map_err(|e| FleetError::Spawn(e.to_string()))?;
        let ready = Arc::new(AtomicBool::new(false));
        let state = HttpState {
            admin: admin.clone(),
            token: config.admin.token.as_deref().map(Arc::from),
            max_body: config.admin.max_body_bytes,
            ready: ready.clone(),
            local,
            llm,
            index: index.clone(),
            feed: Default::default(),
            storage: storage.health().clone(),
            store: storage.clone(),
            refused: Default::default(),
            edges: http::Edges::from(&config.admin),
            webhooks: config.webhooks.iter().map(|w| w.name.clone()).collect(),
            tools: tools.clone(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let http_task = tokio::spawn(async move {
            if let Err(e) = http::serve(listener, state, async {
                let _ = rx.await;
            })
            .await
            {
                tracing::error!(error = %e, "admin API stopped");
            }
        });
        let (done_tx, supervisor_done) = tokio::sync::watch::channel(false);
        let ready_flag = ready.clone();
        tokio::spawn(async move {
            let _ = supervisor_task.await;
            ready_flag.store(false, Ordering::Release);
            let _ = done_tx.send(true);
        });
        let node = match (&cluster, &placement) {
            (Some(o), Some(p)) => {
                match crate::cluster::start(o, p.view.clone(), admin.clone(), embedding.clone(), index.clone()).await {
                    Ok(n) => Some(n),
                    Err(e) => {
                        supervisor.stop(None);
                        let _ = tx.send(());
                        let _ = storage.clone().close().await;
                        return Err(e);
                    }
                }
            }
            _ => None,
        };
        // Every persona restored its state in `pre_start`: the fleet is ready.
        ready.store(true, Ordering::Release);
        let fleet = Fleet {
            config,
            admin,
            scheduler,
            embedding,
            supervisor,
            storage,
            addr: local,
            tools,
            ready,
            http_stop: Some(tx),
            http_task: Some(http_task),
            supervisor_done,
            node,
            placement,
            webhooks,
            _lock: lock,
        };
        tracing::info!(fleet = %fleet.config.name, personas = fleet.personas_here(), admin = %local, "fleet ready");
        Ok(fleet)
    }

    /// How many personas run in this process (all of the fleet's, unless it is one node of
    /// several).
    pub fn personas_here(&self) -> usize {
        self.placement
            .as_ref()
            .map_or(self.config.personas.len(), |c| c.placement.values().filter(|n| n.as_str() == c.view.me()).count())
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Resolves when the fleet supervisor has stopped: after [`Fleet::shutdown`], or when a
    /// core actor (admin, scheduler) failed and took the fleet down.
    pub async fn stopped(&self) {
        let mut rx = self.supervisor_done.clone();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Validates and injects one event, as `POST /events` does.
    pub async fn inject(&self, input: EventInput) -> Result<InjectAck, InjectError> {
        let event = input.validate().map_err(|e| InjectError::Invalid(e.to_string()))?;
        call_t!(self.admin, AdminMsg::Inject, 10_000, Box::new(event))
            .map_err(|e| InjectError::Storage(format!("admin: {e}")))?
    }

    pub async fn dump(&self, persona: Option<String>) -> Result<FleetDump, InjectError> {
        call_t!(self.admin, |reply| AdminMsg::Dump { persona, depth: DumpDepth::Full, reply }, 10_000)
            .map_err(|e| InjectError::Storage(format!("admin: {e}")))?
    }

    pub async fn fault(&self, persona: &str, fault: Fault) -> Result<(), InjectError> {
        let persona = persona.to_string();
        call_t!(self.admin, |reply| AdminMsg::Fault { persona, fault, reply }, 10_000)
            .map_err(|e| InjectError::Storage(format!("admin: {e}")))?
    }

    /// Waits until every delivery to a running persona is finished and no scheduler task of a
    /// class above `background` is queued or running, or `timeout` passes. Returns whether the
    /// fleet became idle.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_idle().await {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn is_idle(&self) -> bool {
        // A question that goes unanswered says nothing about idleness: not idle (yet).
        let Ok(stats) = self.storage.stats().await else { return false };
        let Ok(sched) = call_t!(self.scheduler.actor(), SchedulerMsg::Stats, 10_000) else { return false };
        if !sched.foreground_idle() {
            return false;
        }
        if stats.pending == 0 {
            return true;
        }
        // Deliveries waiting for a persona that failed for good do not keep the fleet busy.
        let Ok(dump) = self.dump(None).await else { return false };
        let failed: Vec<&str> =
            dump.personas.iter().filter(|p| p.status == PersonaStatus::Failed).map(|p| p.name.as_str()).collect();
        if failed.is_empty() {
            return false;
        }
        let storage = self.storage.clone();
        let pending = tokio::task::spawn_blocking(move || storage.pending_by_persona()).await;
        matches!(pending, Ok(Ok(p)) if p.keys().all(|k| failed.contains(&k.as_str())))
    }

    /// Stops accepting events, lets in-flight work finish (up to `drain`), flushes storage
    /// and stops every actor.
    /// As a node of a cluster that stops: tells the other nodes, and moves every persona of
    /// this node, with its state, to those that are up. What moved; an error names what stayed.
    pub async fn leave(&self) -> Result<Vec<HandOff>, InjectError> {
        call_t!(self.admin, AdminMsg::Leave, 600_000).map_err(|e| InjectError::Unavailable(format!("admin: {e}")))?
    }

    pub async fn shutdown(mut self, drain: Duration) {
        let _ = call_t!(self.admin, AdminMsg::Close, 1000);
        self.ready.store(false, Ordering::Release);
        let idle = self.wait_idle(drain).await;
        if !idle {
            tracing::warn!("shutting down with work pending; it is stored and resumes on the next start");
        }
        if let Some(tx) = self.http_stop.take() {
            let _ = tx.send(());
        }
        if let Some(node) = self.node.take() {
            node.stop();
        }
        self.supervisor.stop(Some("shutdown".into()));
        self.webhooks.stop();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.stopped()).await;
        if let Some(t) = self.http_task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), t).await;
        }
        if let Err(e) = self.storage.clone().close().await {
            tracing::error!(error = %e, "final commit failed");
        }
    }
}
