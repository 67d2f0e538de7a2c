//! What the fleet's shared workers are started with: the embedding worker, the index, the LLM
//! worker and the trainer, from the fleet file; and where each persona runs.

use super::*;

/// How often the trainer looks for personas whose study sessions kept enough new chats.
pub(super) const TRAINING_CHECK: Duration = Duration::from_secs(10);

/// The personas with study chats: the names of `<data>/training/*.jsonl`.
pub(super) fn studied(data_dir: std::path::PathBuf) -> StudiedFn {
    Arc::new(move || {
        let dir = data_dir.join("training");
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .map(|e| {
                e.flatten().filter_map(|e| e.file_name().to_str()?.strip_suffix(".jsonl").map(str::to_string)).collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    })
}

/// A persona's study chats for the trainer (about `topic`, else all), split by source passage
/// into those to train on and those held out.
pub(super) fn study_chats(data_dir: std::path::PathBuf) -> ChatsFn {
    use mindfleet_personas::study::training::{HOLD_OUT_EVERY, hold_out, read_training};
    Arc::new(move |persona: &str, topic: Option<&str>| {
        let file = mindfleet_personas::study::training_file(&data_dir, persona);
        let chats = read_training(&file)?.into_iter().filter(|c| topic.is_none_or(|t| c.topic == t)).collect();
        let (train, held) = hold_out(chats, HOLD_OUT_EVERY);
        let messages =
            |v: Vec<mindfleet_personas::study::training::TrainingChat>| v.into_iter().map(|c| c.messages).collect();
        Ok((messages(train), messages(held)))
    })
}

/// The node that serves this one (`[cluster] embedding` or `index`), when it is another node.
pub(super) fn serving(args: &FleetArgs, node: Option<&String>) -> Option<Serving> {
    let c = args.cluster.as_ref()?;
    let node = node?;
    (node != c.view.me()).then(|| Serving { view: c.view.clone(), node: node.clone() })
}

/// The embedding worker of a fleet: the configured model directory (else the pulled MiniLM),
/// with its cache in the data dir.
pub fn embed_args(config: &FleetConfig) -> EmbedArgs {
    let e = config.embedding;
    EmbedArgs {
        model_dir: config.models.embedding.clone().unwrap_or_else(|| config.models.dir.join(fetch::MINILM.name)),
        cache: e.cache.then(|| config.storage.data_dir.join("embeddings.redb")),
        max_batch: e.max_batch,
        max_wait: e.max_wait,
    }
}

/// The codebase index of a fleet, in `<data>/index`, embedding through the fleet's worker.
pub fn index_args(config: &FleetConfig, embedding: ActorRef<EmbedMsg>, llm: Option<ActorRef<LlmMsg>>) -> IndexArgs {
    IndexArgs {
        dir: config.storage.data_dir.join("index"),
        embedding,
        model_dir: embed_args(config).model_dir,
        llm,
        config: config.index.clone(),
        restrict_paths: !config.admin.addr.ip().is_loopback(),
        cursor_file: None,
        progress: None,
    }
}

/// Where the LLM of `[llm]` runs: the configured GGUF (else the pulled SmolLM2, run as Q8_0),
/// or an OpenAI-compatible endpoint.
pub fn llm_backend(config: &FleetConfig) -> BackendArgs {
    match &config.llm {
        LlmBackend::Local(local) => BackendArgs::Local {
            // A path, or a packaged model's name (`gemma3-270m`), else the pulled SmolLM2.
            model: match config.models.llm.as_deref() {
                Some(value) => match fetch::named_llm(value) {
                    Some(p) => config.models.dir.join(p.name).join(p.model_file()),
                    None => value.to_path_buf(),
                },
                None => config.models.dir.join(fetch::SMOLLM2.name).join(fetch::SMOLLM2.files[0].name),
            },
            config: LlmConfig::default(),
            kv_bytes: usize::try_from(local.kv_memory_mb << 20).unwrap_or(usize::MAX),
            prefix_reuse: local.prefix_reuse,
        },
        LlmBackend::OpenAi { url, model, api_key, timeout } => BackendArgs::OpenAi(OpenAiConfig {
            url: url.clone(),
            model: model.clone(),
            api_key: api_key.clone(),
            timeout: *timeout,
        }),
    }
}

/// The LLM worker of a fleet, when a persona's brain or the consolidation of conversations
/// uses it: a local model decodes `[llm] max_batch` requests together, an endpoint serves one
/// request per inference slot of the scheduler.
pub(super) fn llm_args(config: &FleetConfig) -> Option<LlmArgs> {
    let c = &config.conversation;
    let observes = c.enabled && c.observations == Observer::Model;
    let slots = match &config.llm {
        LlmBackend::Local(local) => local.max_batch,
        LlmBackend::OpenAi { .. } => config.scheduler.inference_slots,
    };
    (observes || config.personas.iter().any(|p| p.brain == BrainKind::Local))
        .then(|| LlmArgs { backend: llm_backend(config), slots })
}

/// Where each persona of the fleet runs, as node `o.node` computes it (every node computes the
/// same: docs/INTERNALS.md, "A fleet across nodes").
pub(super) fn placement(config: &FleetConfig, o: &crate::cluster::ClusterOptions) -> Result<AdminCluster, FleetError> {
    let nodes = config.cluster_nodes();
    if !nodes.is_empty() && !nodes.contains(&o.node) {
        return Err(FleetError::Cluster(format!(
            "--node {:?} is not one of the fleet's nodes in {} ({})",
            o.node,
            config.source.display(),
            nodes.join(", ")
        )));
    }
    let placed = mindfleet_core::cluster::place(&config.personas, &nodes)
        .map_err(|e| FleetError::Cluster(format!("{}: {e}", config.source.display())))?;
    let placement = config.personas.iter().map(|p| p.name.clone()).zip(placed).collect();
    let view = mindfleet_core::cluster::ClusterView::new(&o.node, &nodes);
    let rooms = Arc::new(RoomRouter::new(view.clone(), config, &placement));
    Ok(AdminCluster { view, placement, versions: BTreeMap::new(), rooms })
}
