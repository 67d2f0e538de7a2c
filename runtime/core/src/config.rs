//! Fleet configuration: TOML in, validated runtime types out.
//!
//! Parsing happens in two steps (as ripgrep's `LowArgs` -> `HiArgs`): serde reads the
//! file into `Raw*` structs with `deny_unknown_fields`, keeping the byte span of every
//! value that later needs checking; [`FleetConfig::from_toml`] then validates ranges,
//! duplicates and cross references, and every error names `path:line:column` and the key.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

/// A configuration error with the place it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File the error is in (`<embedded>` for the built-in default).
    pub path: PathBuf,
    /// 1-based line and column, when the error has a place in the file.
    pub line: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some((line, col)) => write!(f, "{}:{line}:{col}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleetFile {
    fleet: Option<RawFleet>,
    admin: Option<RawAdmin>,
    storage: Option<RawStorage>,
    supervision: Option<RawSupervision>,
    scheduler: Option<RawScheduler>,
    coordination: Option<RawCoordination>,
    cluster: Option<RawCluster>,
    models: Option<RawModels>,
    embedding: Option<RawEmbedding>,
    llm: Option<RawLlm>,
    index: Option<RawIndex>,
    references: Option<RawReferences>,
    #[serde(default)]
    reference: Vec<Spanned<RawReference>>,
    conversation: Option<RawConversation>,
    defaults: Option<RawPersonaTuning>,
    #[serde(default)]
    persona: Vec<Spanned<RawPersona>>,
}

/// `[conversation]`: conversation memory.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConversation {
    enabled: Option<bool>,
    similarity_weight: Option<Spanned<f64>>,
    recency_weight: Option<Spanned<f64>>,
    importance_weight: Option<Spanned<f64>>,
    room_weight: Option<Spanned<f64>>,
    half_life_hours: Option<Spanned<f64>>,
    max_lag_secs: Option<Spanned<f64>>,
    recall_wait_secs: Option<Spanned<f64>>,
}

/// `[references]`: catalog files to include, and how matching behaves.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReferences {
    #[serde(default)]
    include: Vec<Spanned<String>>,
    semantic_threshold: Option<Spanned<f64>>,
    discovery_depth: Option<Spanned<i64>>,
}

/// A catalog file of `[references] include`: `[[reference]]` tables only.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReferenceFile {
    #[serde(default)]
    reference: Vec<Spanned<RawReference>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReference {
    id: Spanned<String>,
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    tags: Vec<String>,
    path: Spanned<String>,
    contents: Option<Spanned<BTreeMap<String, Vec<String>>>>,
    mode: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    name: Option<String>,
    brain: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    addr: Option<Spanned<String>>,
    token: Option<String>,
    max_body_bytes: Option<Spanned<i64>>,
    faults: Option<bool>,
    allowed_hosts: Option<Vec<Spanned<String>>>,
    header_timeout_secs: Option<Spanned<f64>>,
    idle_timeout_secs: Option<Spanned<f64>>,
    max_connections: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    data_dir: Option<String>,
    max_pending: Option<Spanned<i64>>,
    decisions_per_persona: Option<Spanned<i64>>,
    outbox_limit: Option<Spanned<i64>>,
    events_retained: Option<Spanned<i64>>,
    max_batch: Option<Spanned<i64>>,
    max_crashes_per_event: Option<Spanned<i64>>,
    cache_mb: Option<Spanned<i64>>,
    write_behind_ms: Option<Spanned<i64>>,
    min_free_mb: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSupervision {
    max_restarts: Option<Spanned<i64>>,
    within_secs: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduler {
    inference_slots: Option<Spanned<i64>>,
    cheap_slots: Option<Spanned<i64>>,
    aging_per_30s: Option<Spanned<f64>>,
    promote_after_secs: Option<Spanned<f64>>,
    background_period_secs: Option<Spanned<f64>>,
    fleet_inferences_per_hour: Option<Spanned<i64>>,
    fleet_tokens_per_hour: Option<Spanned<i64>>,
    budget_soft_limit: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCoordination {
    responders: Option<Spanned<i64>>,
    window_ms: Option<Spanned<i64>>,
}

/// `[cluster]`: the nodes a fleet spans.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    #[serde(default)]
    nodes: Vec<Spanned<String>>,
    rebalance: Option<bool>,
    embedding: Option<Spanned<String>>,
    index: Option<Spanned<String>>,
    drain_on_stop: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModels {
    dir: Option<String>,
    embedding: Option<String>,
    llm: Option<String>,
    pull: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmbedding {
    max_batch: Option<Spanned<i64>>,
    max_wait_ms: Option<Spanned<f64>>,
    cache: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIndex {
    allowed_roots: Option<Vec<Spanned<String>>>,
    cursor_ttl_secs: Option<Spanned<f64>>,
    max_cursors: Option<Spanned<i64>>,
    keyword_weight: Option<Spanned<f64>>,
    vector_weight: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLlm {
    backend: Option<Spanned<String>>,
    url: Option<Spanned<String>>,
    model: Option<String>,
    api_key_env: Option<Spanned<String>>,
    timeout_secs: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPersonaTuning {
    inbox_capacity: Option<Spanned<i64>>,
    wm_capacity: Option<Spanned<i64>>,
    wm_ttl_secs: Option<Spanned<f64>>,
    inferences_per_hour: Option<Spanned<i64>>,
    tokens_per_hour: Option<Spanned<i64>>,
    consolidate_every_secs: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPersona {
    name: Spanned<String>,
    role: String,
    #[serde(default)]
    domains: Vec<Spanned<String>>,
    #[serde(default)]
    expertise: Vec<String>,
    #[serde(default)]
    rooms: Vec<Spanned<String>>,
    #[serde(default)]
    dormant: bool,
    brain: Option<Spanned<String>>,
    /// The node it runs on when the fleet spans nodes.
    node: Option<Spanned<String>>,
    // The tuning keys of `[defaults]`, repeated: `serde(flatten)` would lose their spans.
    inbox_capacity: Option<Spanned<i64>>,
    wm_capacity: Option<Spanned<i64>>,
    wm_ttl_secs: Option<Spanned<f64>>,
    inferences_per_hour: Option<Spanned<i64>>,
    tokens_per_hour: Option<Spanned<i64>>,
    consolidate_every_secs: Option<Spanned<f64>>,
}

/// The validated fleet.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Where the fleet was read from (for messages).
    pub source: PathBuf,
    pub name: String,
    pub admin: AdminConfig,
    pub storage: StorageConfig,
    pub supervision: SupervisionConfig,
    pub scheduler: SchedulerConfig,
    pub coordination: CoordinationConfig,
    pub cluster: ClusterConfig,
    pub models: ModelsConfig,
    pub embedding: EmbeddingConfig,
    pub llm: LlmBackend,
    pub index: IndexConfig,
    pub references: ReferencesConfig,
    pub conversation: ConversationConfig,
    pub personas: Vec<PersonaConfig>,
}

/// `[cluster]`: the nodes a fleet spans, when it runs on several (`mindfleet run --node`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Every node of the fleet, in the order placement fills them; empty: the nodes that
    /// personas name with `node = ...`.
    pub nodes: Vec<String>,
    /// When a node links, each node moves to it the personas pinned there, then some of the
    /// others while it has two or more personas more than that node.
    pub rebalance: bool,
    /// The node whose embedding worker every node uses (none: each node runs its own).
    pub embedding: Option<String>,
    /// The node whose codebase index every node uses (none: each node keeps its own replica).
    pub index: Option<String>,
    /// A node stopped by a signal first moves its personas to the other nodes that are up.
    pub drain_on_stop: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig { nodes: Vec::new(), rebalance: true, embedding: None, index: None, drain_on_stop: true }
    }
}

impl FleetConfig {
    /// The nodes the fleet is placed on: `[cluster] nodes`, else those that personas name.
    pub fn cluster_nodes(&self) -> Vec<String> {
        if !self.cluster.nodes.is_empty() {
            return self.cluster.nodes.clone();
        }
        let mut nodes: Vec<String> = Vec::new();
        for n in self.personas.iter().filter_map(|p| p.node.as_ref()) {
            if !nodes.contains(n) {
                nodes.push(n.clone());
            }
        }
        nodes
    }
}

/// Conversation memory (`[conversation]`): every chat message a persona takes in, embedded by
/// a `Background` task into its namespace of the conversation index, recalled by meaning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConversationConfig {
    pub enabled: bool,
    pub weights: crate::conversation::RecallWeights,
    /// A message waiting longer than this to be embedded promotes the task to `work`.
    pub max_lag: Duration,
    /// Longest a persona's recall waits for the embedding model to take its query; past it,
    /// recall goes on by words (reported as degraded).
    pub recall_wait: Duration,
}

impl Default for ConversationConfig {
    fn default() -> Self {
        ConversationConfig {
            // On: a 1,000-persona fleet holds 300 events/s with it on 2 cores; past that its
            // writes saturate the storage writer (docs/BENCHMARKS.md, replay, "Under load").
            enabled: true,
            weights: crate::conversation::RecallWeights::default(),
            max_lag: Duration::from_secs(30),
            recall_wait: Duration::from_millis(250),
        }
    }
}

/// The reference catalog (`[[reference]]`, `[references]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReferencesConfig {
    pub catalog: crate::refs::Catalog,
    /// Least cosine similarity of a semantic candidate.
    pub semantic_threshold: f32,
    /// How many links away from a selected reference discovery goes.
    pub discovery_depth: usize,
}

impl ReferencesConfig {
    /// The default semantic threshold (see docs/CONFIG.md, `[references]`): the best F1 of
    /// all-MiniLM-L6-v2 on the labelled set of `mindfleet bench refs-eval` (docs/BENCHMARKS.md).
    pub const DEFAULT_SEMANTIC_THRESHOLD: f64 = 0.26;
}

/// Where the local models come from (`[models]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelsConfig {
    /// The cache `mindfleet models pull` fills (default: [`default_models_dir`]).
    pub dir: PathBuf,
    /// A local HuggingFace-layout BERT directory used instead of the pulled MiniLM.
    pub embedding: Option<PathBuf>,
    /// A local GGUF file used instead of the pulled SmolLM2.
    pub llm: Option<PathBuf>,
    /// Pull missing models when the fleet starts (their first use).
    pub pull: bool,
}

/// Where the LLM of model-backed brains runs (`[llm]`).
#[derive(Debug, Clone, PartialEq)]
pub enum LlmBackend {
    /// In process, on the GGUF of `[models]`.
    Local,
    /// Behind an OpenAI-compatible chat endpoint.
    OpenAi {
        /// The API's base (`http://host:port/v1`).
        url: String,
        model: String,
        /// The key, read from the environment variable `api_key_env` names.
        api_key: Option<String>,
        timeout: Duration,
    },
}

/// The shared embedding worker (`[embedding]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmbeddingConfig {
    /// Most texts per model call.
    pub max_batch: usize,
    /// Longest a short batch waits for more requests.
    pub max_wait: Duration,
    /// Keep embeddings in `embeddings.redb` in the data dir, keyed by content hash.
    pub cache: bool,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig { max_batch: 32, max_wait: Duration::from_millis(2), cache: true }
    }
}

/// The shared codebase index (`[index]`).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexConfig {
    /// What an admin API on a non-loopback address may index (absolute; none: nothing). The
    /// in-process CLI and a loopback admin API index any readable path.
    pub allowed_roots: Vec<PathBuf>,
    /// How long an open cursor lives after its last use.
    pub cursor_ttl: Duration,
    /// Most cursors open at once; opening one more is refused until one is closed or expires.
    pub max_cursors: usize,
    /// Weights of the keyword and the vector ranking in the hybrid fusion.
    pub keyword_weight: f32,
    pub vector_weight: f32,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            allowed_roots: Vec::new(),
            cursor_ttl: Duration::from_secs(600),
            max_cursors: 64,
            keyword_weight: 1.0,
            vector_weight: 1.0,
        }
    }
}

/// Turn-taking in shared rooms.
#[derive(Debug, Clone, Copy)]
pub struct CoordinationConfig {
    /// Most personas that answer one undirected human message (a mentioned one always does).
    pub responders: usize,
    /// How long claims are collected when not every persona's answer is awaited.
    pub window: Duration,
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub addr: SocketAddr,
    /// Bearer token; required when `addr` is not loopback.
    pub token: Option<String>,
    pub max_body_bytes: usize,
    /// Allow fault injection through the admin (tests, chaos drills).
    pub faults: bool,
    /// Host names, lowercase, that `Host` and `Origin` may name besides the loopback literals.
    pub allowed_hosts: Vec<String>,
    /// How long a client may take to send a request's head, from its connection or its first
    /// byte.
    pub header_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Most connections served at once; more are accepted and closed at once.
    pub max_connections: usize,
}

impl AdminConfig {
    pub const DEFAULT_HEADER_TIMEOUT_SECS: f64 = 10.0;
    pub const DEFAULT_IDLE_TIMEOUT_SECS: f64 = 60.0;
    /// Half the usual soft limit of 1024 open files: the API cannot take the descriptors the
    /// database, the models and the cluster's links need, and it is far more than an operator,
    /// a few dashboards and the injecting clients hold.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
}

#[derive(Debug, Clone)]
pub struct StorageConfig {
    pub data_dir: PathBuf,
    /// Accepted-but-unfinished deliveries above which injection answers 429.
    pub max_pending: u64,
    pub decisions_per_persona: u64,
    pub outbox_limit: u64,
    /// Finished events remembered for de-duplication by id.
    pub events_retained: u64,
    /// Most requests folded into one group commit.
    pub max_batch: usize,
    /// Crashes of its persona after which an event goes to the dead letters.
    pub max_crashes_per_event: u32,
    /// Size of the database's page cache, MiB: what bounds the fleet's memory as the data
    /// grows.
    pub cache_mb: usize,
    /// Self-state and working-memory writes, and the copy of decisions from the decision log
    /// into the per-persona journal, wait up to this long in the writer, so that a persona's
    /// many changes cost one row write; 0 writes them in the next commit.
    pub write_behind: Duration,
    /// Free space, MiB, the data dir's disk must have for the fleet to start, and again for
    /// the writer to resume after a full disk.
    pub min_free_mb: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct SupervisionConfig {
    pub max_restarts: u32,
    pub within: Duration,
}

/// The `[scheduler]` table. `Default` gives the documented defaults.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerConfig {
    pub inference_slots: usize,
    pub cheap_slots: usize,
    /// Priority gained by waiting 30 s.
    pub aging_per_30s: f64,
    /// A task waiting this long in its class moves up one class (never into `urgent`).
    pub promote_after: Duration,
    /// A background task that waited this long may run ahead of waiting higher-class work,
    /// at most one per slot pool per period.
    pub background_period: Duration,
    /// Model calls the whole fleet may start in any sliding hour.
    pub fleet_inferences_per_hour: u64,
    /// Model tokens the whole fleet may use in any sliding hour.
    pub fleet_tokens_per_hour: u64,
    /// Share (0..=1) of a budget above which only high-priority model calls are granted.
    pub budget_soft_limit: f64,
}

impl SchedulerConfig {
    pub const DEFAULT_CHEAP_SLOTS: usize = 256;
    pub const DEFAULT_AGING_PER_30S: f64 = 0.5;
    pub const DEFAULT_PROMOTE_AFTER_SECS: f64 = 60.0;
    pub const DEFAULT_BACKGROUND_PERIOD_SECS: f64 = 10.0;
    pub const DEFAULT_FLEET_INFERENCES_PER_HOUR: u64 = 1_000_000;
    pub const DEFAULT_FLEET_TOKENS_PER_HOUR: u64 = 1_000_000_000;
    pub const DEFAULT_BUDGET_SOFT_LIMIT: f64 = 0.8;

    /// One inference slot per core but one (at least one).
    pub fn default_inference_slots() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1).max(1)
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            inference_slots: Self::default_inference_slots(),
            cheap_slots: Self::DEFAULT_CHEAP_SLOTS,
            aging_per_30s: Self::DEFAULT_AGING_PER_30S,
            promote_after: Duration::from_secs_f64(Self::DEFAULT_PROMOTE_AFTER_SECS),
            background_period: Duration::from_secs_f64(Self::DEFAULT_BACKGROUND_PERIOD_SECS),
            fleet_inferences_per_hour: Self::DEFAULT_FLEET_INFERENCES_PER_HOUR,
            fleet_tokens_per_hour: Self::DEFAULT_FLEET_TOKENS_PER_HOUR,
            budget_soft_limit: Self::DEFAULT_BUDGET_SOFT_LIMIT,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrainKind {
    /// Deterministic: templates and rules, no model.
    Rules,
    /// The local LLM writes replies; the rest is the rules brain's, for now (see CONFIG.md).
    Local,
}

#[derive(Debug, Clone)]
pub struct PersonaConfig {
    pub name: String,
    pub role: String,
    pub domains: Vec<String>,
    pub expertise: Vec<String>,
    pub rooms: Vec<String>,
    pub dormant: bool,
    pub brain: BrainKind,
    pub inbox_capacity: usize,
    pub wm_capacity: usize,
    pub wm_ttl: Duration,
    pub inferences_per_hour: u64,
    pub tokens_per_hour: u64,
    /// How often working memory is consolidated into long-term memory (a Background task).
    pub consolidate_every: Duration,
    /// The node it runs on (`node = ...`), when the fleet spans nodes; else placement picks one.
    pub node: Option<String>,
}

/// The domains a persona may name.
pub const DOMAINS: &[&str] = &["chat", "code", "voice", "tasks", "docs"];

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    fn err_at(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: self.path.to_path_buf(),
            line: Some(line_col(self.text, span.start)),
            message: message.into(),
        }
    }

    fn int(
        &self,
        v: &Option<Spanned<i64>>,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
        default: i64,
    ) -> Result<i64, ConfigError> {
        match v {
            None => Ok(default),
            Some(s) if range.contains(s.get_ref()) => Ok(*s.get_ref()),
            Some(s) => Err(self.err_at(
                s.span(),
                format!("`{key}` = {} is out of range ({}..={})", s.get_ref(), range.start(), range.end()),
            )),
        }
    }

    fn float(
        &self,
        v: &Option<Spanned<f64>>,
        key: &str,
        range: std::ops::RangeInclusive<f64>,
        default: f64,
    ) -> Result<f64, ConfigError> {
        match v {
            None => Ok(default),
            Some(s) if range.contains(s.get_ref()) => Ok(*s.get_ref()),
            Some(s) => Err(self.err_at(
                s.span(),
                format!("`{key}` = {} is out of range ({}..={})", s.get_ref(), range.start(), range.end()),
            )),
        }
    }

    fn llm(&self, l: RawLlm) -> Result<LlmBackend, ConfigError> {
        let backend = l.backend.as_ref().map_or("local", |b| b.get_ref().as_str());
        match backend {
            "local" => {
                if let Some(url) = &l.url {
                    return Err(self.err_at(url.span(), "`url` is for `backend = \"openai\"`"));
                }
                Ok(LlmBackend::Local)
            }
            "openai" => {
                let at = l.backend.as_ref().map_or(0..0, Spanned::span);
                let url = l.url.ok_or_else(|| self.err_at(at.clone(), "`backend = \"openai\"` needs `url`"))?;
                if !url.get_ref().starts_with("http://") {
                    return Err(self.err_at(
                        url.span(),
                        format!("`url` = {:?}: only http:// endpoints are supported", url.get_ref()),
                    ));
                }
                let model = l.model.ok_or_else(|| self.err_at(at, "`backend = \"openai\"` needs `model`"))?;
                let api_key = match &l.api_key_env {
                    None => None,
                    Some(var) => Some(std::env::var(var.get_ref()).map_err(|_| {
                        self.err_at(var.span(), format!("`api_key_env`: the variable {} is not set", var.get_ref()))
                    })?),
                };
                let timeout = self.float(&l.timeout_secs, "timeout_secs", 0.1..=3600.0, 120.0)?;
                Ok(LlmBackend::OpenAi {
                    url: url.into_inner(),
                    model,
                    api_key,
                    timeout: Duration::from_secs_f64(timeout),
                })
            }
            other => Err(self.err_at(
                l.backend.as_ref().map_or(0..0, Spanned::span),
                format!("`backend` = {other:?} is not available (known: \"local\", \"openai\")"),
            )),
        }
    }

    /// Validates `[[reference]]` tables of this file into `out`: ids unique across files,
    /// paths (relative to this file) present.
    fn references(
        &self,
        raw: &[Spanned<RawReference>],
        out: &mut Vec<crate::refs::Reference>,
    ) -> Result<(), ConfigError> {
        use crate::refs::{RefMode, Reference};
        for r in raw {
            let r = r.get_ref();
            let id = r.id.get_ref();
            if !valid_name(id) {
                return Err(self.err_at(
                    r.id.span(),
                    format!("reference `id` = {id:?} must be 1-64 characters of a-z, 0-9, '-' or '_'"),
                ));
            }
            if out.iter().any(|o| o.id == *id) {
                return Err(self.err_at(r.id.span(), format!("duplicate reference id {id:?}")));
            }
            let path = self.path.parent().unwrap_or(Path::new(".")).join(r.path.get_ref());
            if !path.exists() {
                return Err(
                    self.err_at(r.path.span(), format!("reference {id:?}: `path` {} does not exist", path.display()))
                );
            }
            let mode = match r.mode.as_ref().map(|m| m.get_ref().as_str()) {
                None | Some("selectable") => RefMode::Selectable,
                Some("auto") => RefMode::Auto,
                Some(other) => {
                    return Err(self.err_at(
                        r.mode.as_ref().map_or(0..0, Spanned::span),
                        format!("reference {id:?}: `mode` = {other:?} is not \"auto\" or \"selectable\""),
                    ));
                }
            };
            let contents = r.contents.as_ref().map(|c| c.get_ref().clone()).unwrap_or_default();
            if let Some(bad) =
                contents.keys().find(|k| !["templates", "validation", "policies", "scripts"].contains(&k.as_str()))
            {
                return Err(self.err_at(
                    r.contents.as_ref().map_or(0..0, Spanned::span),
                    format!(
                        "reference {id:?}: `contents` has {bad:?} (known: templates, validation, policies, scripts)"
                    ),
                ));
            }
            out.push(Reference {
                id: id.clone(),
                name: r.name.clone(),
                description: r.description.clone(),
                tags: r.tags.clone(),
                path,
                contents,
                mode,
            });
        }
        Ok(())
    }

    fn brain(&self, v: &Spanned<String>) -> Result<BrainKind, ConfigError> {
        match v.get_ref().as_str() {
            "rules" => Ok(BrainKind::Rules),
            "local" => Ok(BrainKind::Local),
            other => {
                Err(self
                    .err_at(v.span(), format!("`brain` = {other:?} is not available (known: \"rules\", \"local\")")))
            }
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[derive(Clone, Copy)]
struct Tuning {
    inbox_capacity: i64,
    wm_capacity: i64,
    wm_ttl_secs: f64,
    inferences_per_hour: i64,
    tokens_per_hour: i64,
    consolidate_every_secs: f64,
}

/// Largest fleet file, and reference file it includes, that is read: 4 MiB.
pub const MAX_FLEET_FILE_BYTES: u64 = 4 << 20;

/// Why a fleet or reference file could not be read.
enum ReadError {
    Io(std::io::Error),
    TooLarge,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::TooLarge => {
                write!(f, "larger than the limit of 4 MiB ({MAX_FLEET_FILE_BYTES} bytes)")
            }
        }
    }
}

/// Reads a file of at most [`MAX_FLEET_FILE_BYTES`]: refused from its size when it has one, and
/// never read past the limit (`/dev/zero` and pipes have no size).
fn read_capped(path: &Path) -> Result<String, ReadError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    if file.metadata().map_err(ReadError::Io)?.len() > MAX_FLEET_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    let mut bytes = Vec::new();
    file.take(MAX_FLEET_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_FLEET_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    String::from_utf8(bytes)
        .map_err(|_| ReadError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, "the file is not UTF-8")))
}

/// A serde error of `text` (a fleet or reference file) at its place, with the dotted path of the
/// key it is about: serde's own message names the expected type, not the key.
fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let mut message = e.message().trim_end_matches('\n').to_string();
    // serde's words for TOML's types: a datetime reaches serde as a map, a table is one of our
    // `Raw*` structs.
    let at_digit =
        e.span().and_then(|s| text.get(s.start..)).is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()));
    if at_digit {
        message = message.replace("invalid type: map,", "invalid type: datetime,");
    }
    if let Some(i) = message.find("expected struct Raw") {
        message.replace_range(i.., "expected a table");
    }
    let message = message.as_str();
    let key = e.span().and_then(|s| key_path_at(text, s, message.starts_with("duplicate key")));
    ConfigError {
        path: path.to_path_buf(),
        line: e.span().map(|s| line_col(text, s.start)),
        message: match key {
            Some(key) => format!("`{key}`: {message}"),
            None => message.to_string(),
        },
    }
}

/// The dotted path (`storage.max_pending`, `persona[1].inbox_capacity`, arrays counted from
/// 0) of the key or value at byte `at` of a TOML document, found in the document's spanned
/// tree. A table's span is its header, so every branch is searched, the deepest match wins.
///
/// A `repeated` key is not in the tree (the parser kept the first): its path is that of the
/// nearest key of the same name before it, which is in the same table.
fn key_path_at(text: &str, span: std::ops::Range<usize>, repeated: bool) -> Option<String> {
    let (root, _) = toml::de::DeTable::parse_recoverable(text);
    let root = Spanned::new(root.span(), toml::de::DeValue::Table(root.into_inner()));
    let mut path = String::new();
    if find_key(&root, span.start, &mut path) && !path.is_empty() {
        return Some(path);
    }
    if !repeated {
        return None;
    }
    let written = text.get(span.clone())?;
    let name = written.trim_matches(|c| c == '"' || c == '\'');
    let mut nearest = None;
    if !name.is_empty() && !name.contains('\n') {
        keys_named(&root, name, span.start, &mut String::new(), &mut nearest);
    }
    nearest.map(|(_, path)| path)
}

/// Appends a key to a dotted path, quoted unless bare.
fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        path.push_str(key);
    } else {
        path.push_str(&format!("{key:?}"));
    }
}

fn find_key(v: &Spanned<toml::de::DeValue<'_>>, at: usize, path: &mut String) -> bool {
    use toml::de::DeValue;
    let len = path.len();
    match v.get_ref() {
        DeValue::Table(t) => {
            for (k, child) in t.iter() {
                push_key(path, k.get_ref());
                if k.span().contains(&at) || find_key(child, at, path) {
                    return true;
                }
                path.truncate(len);
            }
        }
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                if find_key(item, at, path) {
                    return true;
                }
                path.truncate(len);
            }
        }
        _ => {}
    }
    v.span().contains(&at)
}

/// The path of the last key called `name` that starts before `before`, into `nearest`.
fn keys_named(
    v: &Spanned<toml::de::DeValue<'_>>,
    name: &str,
    before: usize,
    path: &mut String,
    nearest: &mut Option<(usize, String)>,
) {
    use toml::de::DeValue;
    let len = path.len();
    match v.get_ref() {
        DeValue::Table(t) => {
            for (k, child) in t.iter() {
                push_key(path, k.get_ref());
                let at = k.span().start;
                if k.get_ref() == name && at < before && nearest.as_ref().is_none_or(|(n, _)| *n < at) {
                    *nearest = Some((at, path.clone()));
                }
                keys_named(child, name, before, path, nearest);
                path.truncate(len);
            }
        }
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                keys_named(item, name, before, path, nearest);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

impl FleetConfig {
    /// Reads and validates a fleet file (at most [`MAX_FLEET_FILE_BYTES`]).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = read_capped(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            line: None,
            message: match e {
                ReadError::Io(e) => format!("cannot read fleet file: {e}"),
                e @ ReadError::TooLarge => format!("the fleet file is {e}"),
            },
        })?;
        Self::from_toml(path, &text)
    }

    /// Validates fleet TOML text; `path` is used in messages only.
    pub fn from_toml(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let cx = Ctx { path, text };
        let raw: RawFleetFile = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;

        let fleet = raw.fleet.unwrap_or(RawFleet { name: None, brain: None });
        let default_brain = match &fleet.brain {
            Some(b) => cx.brain(b)?,
            None => BrainKind::Rules,
        };

        let admin = {
            let a = raw.admin.unwrap_or_default();
            let addr = match &a.addr {
                None => "127.0.0.1:7878".parse().expect("literal address"),
                Some(s) => s
                    .get_ref()
                    .parse::<SocketAddr>()
                    .map_err(|e| cx.err_at(s.span(), format!("`addr` = {:?}: {e}", s.get_ref())))?,
            };
            let mut allowed_hosts = Vec::new();
            for h in a.allowed_hosts.unwrap_or_default() {
                if !valid_host_name(h.get_ref()) {
                    return Err(cx.err_at(
                        h.span(),
                        format!(
                            "`allowed_hosts`: {:?} is not a host name (letters, digits, '-' and '.', no port or scheme)",
                            h.get_ref()
                        ),
                    ));
                }
                allowed_hosts.push(h.get_ref().to_ascii_lowercase());
            }
            AdminConfig {
                addr,
                token: a.token.filter(|t| !t.is_empty()),
                max_body_bytes: cx.int(&a.max_body_bytes, "max_body_bytes", 256..=(64 << 20), 64 * 1024)? as usize,
                faults: a.faults.unwrap_or(false),
                allowed_hosts,
                header_timeout: Duration::from_secs_f64(cx.float(
                    &a.header_timeout_secs,
                    "header_timeout_secs",
                    0.01..=3600.0,
                    AdminConfig::DEFAULT_HEADER_TIMEOUT_SECS,
                )?),
                idle_timeout: Duration::from_secs_f64(cx.float(
                    &a.idle_timeout_secs,
                    "idle_timeout_secs",
                    0.01..=86_400.0,
                    AdminConfig::DEFAULT_IDLE_TIMEOUT_SECS,
                )?),
                max_connections: cx.int(
                    &a.max_connections,
                    "max_connections",
                    1..=1_000_000,
                    AdminConfig::DEFAULT_MAX_CONNECTIONS as i64,
                )? as usize,
            }
        };

        let storage = {
            let s = raw.storage.unwrap_or(RawStorage {
                data_dir: None,
                max_pending: None,
                decisions_per_persona: None,
                outbox_limit: None,
                events_retained: None,
                max_batch: None,
                max_crashes_per_event: None,
                cache_mb: None,
                write_behind_ms: None,
                min_free_mb: None,
            });
            StorageConfig {
                data_dir: PathBuf::from(s.data_dir.unwrap_or_else(|| "./data".into())),
                max_pending: cx.int(&s.max_pending, "max_pending", 1..=100_000_000, 1_000_000)? as u64,
                decisions_per_persona: cx.int(
                    &s.decisions_per_persona,
                    "decisions_per_persona",
                    1..=10_000_000,
                    1000,
                )? as u64,
                outbox_limit: cx.int(&s.outbox_limit, "outbox_limit", 1..=100_000_000, 10_000)? as u64,
                events_retained: cx.int(&s.events_retained, "events_retained", 1..=100_000_000, 100_000)? as u64,
                max_batch: cx.int(&s.max_batch, "max_batch", 1..=100_000, 4096)? as usize,
                max_crashes_per_event: cx.int(&s.max_crashes_per_event, "max_crashes_per_event", 1..=100, 3)? as u32,
                cache_mb: cx.int(&s.cache_mb, "cache_mb", 1..=1_048_576, 256)? as usize,
                write_behind: Duration::from_millis(
                    cx.int(&s.write_behind_ms, "write_behind_ms", 0..=60_000, 2000)? as u64
                ),
                min_free_mb: cx.int(&s.min_free_mb, "min_free_mb", 0..=1_048_576, 8)? as u64,
            }
        };

        let supervision = {
            let (r, w) = raw.supervision.map_or((None, None), |s| (s.max_restarts, s.within_secs));
            SupervisionConfig {
                max_restarts: cx.int(&r, "max_restarts", 0..=1000, 3)? as u32,
                within: Duration::from_secs_f64(cx.float(&w, "within_secs", 0.001..=86_400.0, 5.0)?),
            }
        };

        let scheduler = {
            let s = raw.scheduler.unwrap_or_default();
            let d = SchedulerConfig::default();
            SchedulerConfig {
                inference_slots: cx.int(&s.inference_slots, "inference_slots", 1..=1024, d.inference_slots as i64)?
                    as usize,
                cheap_slots: cx.int(&s.cheap_slots, "cheap_slots", 1..=100_000, d.cheap_slots as i64)? as usize,
                aging_per_30s: cx.float(&s.aging_per_30s, "aging_per_30s", 0.0..=10.0, d.aging_per_30s)?,
                promote_after: Duration::from_secs_f64(cx.float(
                    &s.promote_after_secs,
                    "promote_after_secs",
                    0.001..=86_400.0,
                    SchedulerConfig::DEFAULT_PROMOTE_AFTER_SECS,
                )?),
                background_period: Duration::from_secs_f64(cx.float(
                    &s.background_period_secs,
                    "background_period_secs",
                    0.001..=86_400.0,
                    SchedulerConfig::DEFAULT_BACKGROUND_PERIOD_SECS,
                )?),
                fleet_inferences_per_hour: cx.int(
                    &s.fleet_inferences_per_hour,
                    "fleet_inferences_per_hour",
                    0..=i64::MAX,
                    d.fleet_inferences_per_hour as i64,
                )? as u64,
                fleet_tokens_per_hour: cx.int(
                    &s.fleet_tokens_per_hour,
                    "fleet_tokens_per_hour",
                    0..=i64::MAX,
                    d.fleet_tokens_per_hour as i64,
                )? as u64,
                budget_soft_limit: cx.float(
                    &s.budget_soft_limit,
                    "budget_soft_limit",
                    0.0..=1.0,
                    d.budget_soft_limit,
                )?,
            }
        };

        let coordination = {
            let c = raw.coordination.unwrap_or_default();
            CoordinationConfig {
                responders: cx.int(&c.responders, "responders", 1..=1000, 1)? as usize,
                window: Duration::from_millis(cx.int(&c.window_ms, "window_ms", 1..=60_000, 300)? as u64),
            }
        };

        let cluster = {
            let c = raw.cluster.unwrap_or_default();
            let mut nodes: Vec<String> = Vec::new();
            for n in &c.nodes {
                if !valid_name(n.get_ref()) {
                    return Err(cx.err_at(
                        n.span(),
                        format!("[cluster] node {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'", n.get_ref()),
                    ));
                }
                if nodes.contains(n.get_ref()) {
                    return Err(cx.err_at(n.span(), format!("[cluster] node {:?} is listed twice", n.get_ref())));
                }
                nodes.push(n.get_ref().clone());
            }
            // A node that serves the others: one of the fleet's nodes.
            let serving = |key: &str, n: Option<Spanned<String>>| match n {
                Some(n) if !valid_name(n.get_ref()) => Err(cx.err_at(
                    n.span(),
                    format!("[cluster] {key} {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'", n.get_ref()),
                )),
                Some(n) if !nodes.is_empty() && !nodes.contains(n.get_ref()) => Err(cx.err_at(
                    n.span(),
                    format!(
                        "[cluster] {key}: node {:?} is not in `[cluster] nodes` ({})",
                        n.get_ref(),
                        nodes.join(", ")
                    ),
                )),
                n => Ok(n.map(Spanned::into_inner)),
            };
            let embedding = serving("embedding", c.embedding)?;
            let index = serving("index", c.index)?;
            ClusterConfig {
                nodes,
                rebalance: c.rebalance.unwrap_or(true),
                embedding,
                index,
                drain_on_stop: c.drain_on_stop.unwrap_or(true),
            }
        };

        let models = {
            let m = raw.models.unwrap_or_default();
            ModelsConfig {
                dir: m.dir.map_or_else(default_models_dir, PathBuf::from),
                embedding: m.embedding.map(PathBuf::from),
                llm: m.llm.map(PathBuf::from),
                pull: m.pull.unwrap_or(true),
            }
        };

        let embedding = {
            let e = raw.embedding.unwrap_or_default();
            let d = EmbeddingConfig::default();
            EmbeddingConfig {
                max_batch: cx.int(&e.max_batch, "max_batch", 1..=1024, d.max_batch as i64)? as usize,
                max_wait: Duration::from_secs_f64(
                    cx.float(&e.max_wait_ms, "max_wait_ms", 0.0..=10_000.0, d.max_wait.as_secs_f64() * 1e3)? / 1e3,
                ),
                cache: e.cache.unwrap_or(d.cache),
            }
        };

        let llm = cx.llm(raw.llm.unwrap_or_default())?;

        let index = {
            let i = raw.index.unwrap_or_default();
            let d = IndexConfig::default();
            let mut allowed_roots = Vec::new();
            for r in i.allowed_roots.unwrap_or_default() {
                let root = PathBuf::from(r.get_ref());
                if !root.is_absolute() {
                    return Err(
                        cx.err_at(r.span(), format!("`allowed_roots`: {:?} is not an absolute path", r.get_ref()))
                    );
                }
                allowed_roots.push(root);
            }
            let keyword_weight = cx.float(&i.keyword_weight, "keyword_weight", 0.0..=100.0, 1.0)? as f32;
            let vector_weight = cx.float(&i.vector_weight, "vector_weight", 0.0..=100.0, 1.0)? as f32;
            if keyword_weight + vector_weight == 0.0 {
                let at = i.keyword_weight.as_ref().map_or(0..0, Spanned::span);
                return Err(cx.err_at(at, "`keyword_weight` and `vector_weight`: the weights cannot both be 0"));
            }
            IndexConfig {
                allowed_roots,
                cursor_ttl: Duration::from_secs_f64(cx.float(
                    &i.cursor_ttl_secs,
                    "cursor_ttl_secs",
                    1.0..=86_400.0,
                    d.cursor_ttl.as_secs_f64(),
                )?),
                max_cursors: cx.int(&i.max_cursors, "max_cursors", 1..=100_000, d.max_cursors as i64)? as usize,
                keyword_weight,
                vector_weight,
            }
        };

        let references = {
            let r = raw.references.unwrap_or_default();
            let mut refs = Vec::new();
            cx.references(&raw.reference, &mut refs)?;
            for inc in &r.include {
                let file = path.parent().unwrap_or(Path::new(".")).join(inc.get_ref());
                let text = read_capped(&file).map_err(|e| {
                    cx.err_at(
                        inc.span(),
                        match e {
                            ReadError::Io(e) => format!("`include`: cannot read {}: {e}", file.display()),
                            e @ ReadError::TooLarge => format!("`include`: {} is {e}", file.display()),
                        },
                    )
                })?;
                let sub = Ctx { path: &file, text: &text };
                let raw: RawReferenceFile = toml::from_str(&text).map_err(|e| parse_error(&file, &text, &e))?;
                sub.references(&raw.reference, &mut refs)?;
            }
            ReferencesConfig {
                catalog: crate::refs::Catalog { refs },
                semantic_threshold: cx.float(
                    &r.semantic_threshold,
                    "semantic_threshold",
                    0.0..=1.0,
                    ReferencesConfig::DEFAULT_SEMANTIC_THRESHOLD,
                )? as f32,
                discovery_depth: cx.int(&r.discovery_depth, "discovery_depth", 0..=16, 2)? as usize,
            }
        };

        let conversation = {
            let c = raw.conversation.unwrap_or_default();
            let d = ConversationConfig::default();
            let w = |v: &Option<Spanned<f64>>, name, default| cx.float(v, name, 0.0..=100.0, default);
            let weights = crate::conversation::RecallWeights {
                similarity: w(&c.similarity_weight, "similarity_weight", d.weights.similarity)?,
                recency: w(&c.recency_weight, "recency_weight", d.weights.recency)?,
                importance: w(&c.importance_weight, "importance_weight", d.weights.importance)?,
                same_room: w(&c.room_weight, "room_weight", d.weights.same_room)?,
                half_life: Duration::from_secs_f64(
                    3600.0
                        * cx.float(
                            &c.half_life_hours,
                            "half_life_hours",
                            0.01..=1e6,
                            d.weights.half_life.as_secs_f64() / 3600.0,
                        )?,
                ),
            };
            let max_lag = cx.float(&c.max_lag_secs, "max_lag_secs", 0.01..=86_400.0, d.max_lag.as_secs_f64())?;
            let recall_wait =
                cx.float(&c.recall_wait_secs, "recall_wait_secs", 0.01..=600.0, d.recall_wait.as_secs_f64())?;
            ConversationConfig {
                enabled: c.enabled.unwrap_or(d.enabled),
                weights,
                max_lag: Duration::from_secs_f64(max_lag),
                recall_wait: Duration::from_secs_f64(recall_wait),
            }
        };

        let d = raw.defaults.unwrap_or_default();
        let base = Tuning {
            inbox_capacity: cx.int(&d.inbox_capacity, "inbox_capacity", 1..=10_000_000, 1000)?,
            wm_capacity: cx.int(&d.wm_capacity, "wm_capacity", 1..=1_000_000, 100)?,
            wm_ttl_secs: cx.float(&d.wm_ttl_secs, "wm_ttl_secs", 1.0..=3.2e7, 7.0 * 86_400.0)?,
            inferences_per_hour: cx.int(&d.inferences_per_hour, "inferences_per_hour", 0..=i64::MAX, 600)?,
            tokens_per_hour: cx.int(&d.tokens_per_hour, "tokens_per_hour", 0..=i64::MAX, 200_000)?,
            consolidate_every_secs: cx.float(
                &d.consolidate_every_secs,
                "consolidate_every_secs",
                0.01..=86_400.0,
                300.0,
            )?,
        };

        if raw.persona.is_empty() {
            return Err(ConfigError {
                path: path.to_path_buf(),
                line: None,
                message: "the fleet has no `[[persona]]`: at least one is needed".into(),
            });
        }
        let mut names = BTreeSet::new();
        let mut personas = Vec::with_capacity(raw.persona.len());
        for sp in &raw.persona {
            let p = sp.get_ref();
            let name = p.name.get_ref();
            if !valid_name(name) {
                return Err(cx.err_at(
                    p.name.span(),
                    format!("persona `name` = {name:?} must be 1-64 characters of a-z, 0-9, '-' or '_'"),
                ));
            }
            if !names.insert(name.clone()) {
                return Err(cx.err_at(p.name.span(), format!("duplicate persona name {name:?}")));
            }
            for dmn in &p.domains {
                if !DOMAINS.contains(&dmn.get_ref().as_str()) {
                    return Err(cx.err_at(
                        dmn.span(),
                        format!("persona {name:?}: unknown domain {:?} (known: {})", dmn.get_ref(), DOMAINS.join(", ")),
                    ));
                }
            }
            for room in &p.rooms {
                if !valid_name(room.get_ref()) {
                    return Err(cx.err_at(
                        room.span(),
                        format!(
                            "persona {name:?}: room {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'",
                            room.get_ref()
                        ),
                    ));
                }
            }
            if let Some(node) = &p.node {
                if !valid_name(node.get_ref()) {
                    return Err(cx.err_at(
                        node.span(),
                        format!(
                            "persona {name:?}: node {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'",
                            node.get_ref()
                        ),
                    ));
                }
                if !cluster.nodes.is_empty() && !cluster.nodes.contains(node.get_ref()) {
                    return Err(cx.err_at(
                        node.span(),
                        format!(
                            "persona {name:?}: node {:?} is not in `[cluster] nodes` ({})",
                            node.get_ref(),
                            cluster.nodes.join(", ")
                        ),
                    ));
                }
            }
            let t = p;
            let tuning = Tuning {
                inbox_capacity: cx.int(&t.inbox_capacity, "inbox_capacity", 1..=10_000_000, base.inbox_capacity)?,
                wm_capacity: cx.int(&t.wm_capacity, "wm_capacity", 1..=1_000_000, base.wm_capacity)?,
                wm_ttl_secs: cx.float(&t.wm_ttl_secs, "wm_ttl_secs", 1.0..=3.2e7, base.wm_ttl_secs)?,
                inferences_per_hour: cx.int(
                    &t.inferences_per_hour,
                    "inferences_per_hour",
                    0..=i64::MAX,
                    base.inferences_per_hour,
                )?,
                tokens_per_hour: cx.int(&t.tokens_per_hour, "tokens_per_hour", 0..=i64::MAX, base.tokens_per_hour)?,
                consolidate_every_secs: cx.float(
                    &t.consolidate_every_secs,
                    "consolidate_every_secs",
                    0.01..=86_400.0,
                    base.consolidate_every_secs,
                )?,
            };
            personas.push(PersonaConfig {
                name: name.clone(),
                role: p.role.clone(),
                domains: if p.domains.is_empty() {
                    vec!["chat".to_string()]
                } else {
                    p.domains.iter().map(|d| d.get_ref().clone()).collect()
                },
                expertise: p.expertise.iter().map(|e| e.to_lowercase()).collect(),
                rooms: p.rooms.iter().map(|r| r.get_ref().clone()).collect(),
                dormant: p.dormant,
                brain: match &p.brain {
                    Some(b) => cx.brain(b)?,
                    None => default_brain,
                },
                inbox_capacity: tuning.inbox_capacity as usize,
                wm_capacity: tuning.wm_capacity as usize,
                wm_ttl: Duration::from_secs_f64(tuning.wm_ttl_secs),
                inferences_per_hour: tuning.inferences_per_hour as u64,
                tokens_per_hour: tuning.tokens_per_hour as u64,
                consolidate_every: Duration::from_secs_f64(tuning.consolidate_every_secs),
                node: p.node.as_ref().map(|n| n.get_ref().clone()),
            });
        }

        Ok(FleetConfig {
            source: path.to_path_buf(),
            name: fleet.name.unwrap_or_else(|| "fleet".into()),
            admin,
            storage,
            supervision,
            scheduler,
            coordination,
            cluster,
            models,
            embedding,
            llm,
            index,
            references,
            conversation,
            personas,
        })
    }
}

/// A DNS name as `[admin] allowed_hosts` takes it: labels of ASCII letters, digits and '-'.
fn valid_host_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// Persona and room names: what is safe in URLs, keys and `@mentions`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// The cache directory: `$MINDFLEET_MODELS`, else `$XDG_CACHE_HOME/mindfleet/models`, else
/// `~/.cache/mindfleet/models`, else `./.mindfleet-models`. Config may name another.
pub fn default_models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MINDFLEET_MODELS").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("mindfleet").join("models");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("mindfleet").join("models"),
        None => PathBuf::from(".mindfleet-models"),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "config_props.rs"]
mod props;
