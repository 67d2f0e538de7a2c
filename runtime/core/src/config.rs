//! Fleet configuration: TOML in, validated runtime types out.
//!
//! Parsing happens in two steps (as ripgrep's `LowArgs` -> `HiArgs`): serde reads the
//! file into the `Raw*` structs of `raw` with `deny_unknown_fields`, keeping the byte span of
//! every value that later needs checking; [`FleetConfig::from_toml`] then validates each
//! section (`validate`): ranges, duplicates and cross references, and every error names
//! `path:line:column` and the key (`error`).

mod error;
mod raw;
mod training;
mod validate;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::llm::Repetition;
pub use error::ConfigError;
use error::{ReadError, parse_error, read_capped};
use raw::RawFleetFile;
pub use training::{TARGETS, TrainingConfig};
use validate::Ctx;

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
    /// How the personas' replies and lessons are decoded, with either backend (`[llm]`).
    pub decoding: Decoding,
    pub index: IndexConfig,
    pub references: ReferencesConfig,
    pub conversation: ConversationConfig,
    /// `[training]`: the adapters trained on the personas' study data (a local model only).
    pub training: TrainingConfig,
    pub personas: Vec<PersonaConfig>,
    /// `[[webhook]]`: where replies (and decisions, dead letters) are posted.
    pub webhooks: Vec<crate::webhook::WebhookConfig>,
    /// `[[tool_server]]`: the MCP servers whose tools personas may call.
    pub tool_servers: Vec<crate::tools::ToolServerSpec>,
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
    /// Consolidation into observations: who makes them, and after how long a conversation is
    /// quiet (no message taken in).
    pub observations: Observer,
    pub observe_after: Duration,
}

/// Who consolidates conversations into observations (`[conversation] observations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Observer {
    /// None are made; recall searches the messages alone.
    Off,
    /// Extractive rules, no model.
    Rules,
    /// The rules, and the fleet's LLM adds the facts it reads in each session (a `background`
    /// model call per session, within the budget; the rules alone when the budget says so).
    Model,
}

impl Observer {
    pub fn as_str(self) -> &'static str {
        match self {
            Observer::Off => "off",
            Observer::Rules => "rules",
            Observer::Model => "model",
        }
    }
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
            observations: Observer::Rules,
            observe_after: Duration::from_secs(60),
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
    Local(LocalLlm),
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

/// How a local model serves the fleet's requests (`[llm]` with `backend = "local"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocalLlm {
    /// Most requests decoded together in one forward pass (1: one at a time).
    pub max_batch: usize,
    /// Bound on the memory of keys and values: the batch's requests' and the kept prompts'.
    pub kv_memory_mb: u64,
    /// Keep the keys and values of prompts read, and start a prompt from the longest beginning
    /// it shares with one kept.
    pub prefix_reuse: bool,
}

impl LocalLlm {
    /// Places in the batch by default. A persona's lesson is written while it takes up its next
    /// event, so it can have two calls in flight, and a reply that waits for a place behind
    /// lessons leaves the passes short: twelve kept the batch of eight personas fuller than eight
    /// places did (BENCHMARKS.md, "Cognition", tenth session).
    pub const DEFAULT_MAX_BATCH: usize = 12;
    pub const DEFAULT_KV_MEMORY_MB: u64 = 512;
}

impl Default for LocalLlm {
    fn default() -> LocalLlm {
        LocalLlm { max_batch: Self::DEFAULT_MAX_BATCH, kv_memory_mb: Self::DEFAULT_KV_MEMORY_MB, prefix_reuse: true }
    }
}

impl Default for LlmBackend {
    fn default() -> LlmBackend {
        LlmBackend::Local(LocalLlm::default())
    }
}

/// How the LLM worker decodes the generations the personas ask for, their replies and lessons,
/// with either backend (`[llm]`: `repetition_penalty`, `no_repeat_ngram`, `no_copy_ngram`,
/// `stop_repeated_sentence`, `reply_max_tokens`, `lesson_max_tokens`). Other generations (the
/// `generate` command's, the served API's, `rag ask`'s) are decoded as they ask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decoding {
    /// What keeps a reply or lesson from looping or echoing the message it answers.
    pub repetition: Repetition,
    /// Most tokens of a reply, and of a lesson.
    pub reply_max_tokens: usize,
    pub lesson_max_tokens: usize,
}

impl Decoding {
    /// Against repetition by default, measured on the replies of SmolLM2-135M, greedy, to 24
    /// chat messages (BENCHMARKS.md, "Decoding"): unguarded, one or two said a sentence again
    /// and seven copied five words of the message; with these, none did. A stronger penalty
    /// weighs on the message's own words too, and the replies left its topic (with 1.3, 6 of
    /// 24 kept a word of five letters or more of the message; with 1.1, 18; unguarded, 20).
    pub const DEFAULT_REPETITION: Repetition =
        Repetition { penalty: 1.1, no_repeat_ngram: 3, no_copy_ngram: 4, stop_repeated_sentence: true };
    pub const DEFAULT_REPLY_MAX_TOKENS: usize = 64;
    pub const DEFAULT_LESSON_MAX_TOKENS: usize = 40;
}

impl Default for Decoding {
    fn default() -> Decoding {
        Decoding {
            repetition: Self::DEFAULT_REPETITION,
            reply_max_tokens: Self::DEFAULT_REPLY_MAX_TOKENS,
            lesson_max_tokens: Self::DEFAULT_LESSON_MAX_TOKENS,
        }
    }
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
    /// Reciprocal rank fusion's constant (a result at rank r counts weight / (rrf_k + r)).
    pub rrf_k: f32,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            allowed_roots: Vec::new(),
            cursor_ttl: Duration::from_secs(600),
            max_cursors: 64,
            keyword_weight: 1.0,
            vector_weight: 1.0,
            rrf_k: 60.0,
        }
    }
}

/// `[coordination] redundancy_threshold` by default: the best F1 on the labelled pairs of
/// `bench/redundancy/pairs.tsv` (`mindfleet bench redundancy`, docs/BENCHMARKS.md).
pub const REDUNDANCY_THRESHOLD: f64 = 0.624;

/// Turn-taking in shared rooms.
#[derive(Debug, Clone, Copy)]
pub struct CoordinationConfig {
    /// Most personas that answer one undirected human message (a mentioned one always does).
    pub responders: usize,
    /// How long claims are collected when not every persona's answer is awaited.
    pub window: Duration,
    /// How long the holder of a turn has to report its reply before the turn passes on (a
    /// holder whose actor stopped loses it at once).
    pub hold: Duration,
    /// A draft whose embedding's cosine similarity to a reply already posted to its thread is at
    /// least this is withheld as redundant.
    pub redundancy_threshold: f64,
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
    /// Most long-lived streams (`/outbox/stream`, the dashboard's live feed, `/mcp`) open at
    /// once, fewer than `max_connections`: one more is refused at once (503), so streams never
    /// hold every connection.
    pub max_streams: usize,
}

impl AdminConfig {
    pub const DEFAULT_HEADER_TIMEOUT_SECS: f64 = 10.0;
    pub const DEFAULT_IDLE_TIMEOUT_SECS: f64 = 60.0;
    /// Half the usual soft limit of 1024 open files: the API cannot take the descriptors the
    /// database, the models and the cluster's links need, and it is far more than an operator,
    /// a few dashboards and the injecting clients hold.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
    /// Streams a fleet serves by default: an operator's `tail`, a few dashboards and MCP
    /// clients, with room to spare, far below `max_connections`. A fleet with fewer than 128
    /// connections gets half of them.
    pub const DEFAULT_MAX_STREAMS: usize = 64;
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
    /// Each persona's lifecycle records what it takes in (`mindfleet replay`).
    pub record: bool,
    /// Rows of recorded history kept per persona: past them the oldest runs of its lifecycle
    /// (from one start to the next) are forgotten, never the one running.
    pub record_rows: u64,
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
    /// How long a model call a human waits on (priority > 0.6) may wait for budget before the
    /// rules brain answers instead.
    pub queue_deadline: Duration,
}

impl SchedulerConfig {
    pub const DEFAULT_CHEAP_SLOTS: usize = 256;
    pub const DEFAULT_AGING_PER_30S: f64 = 0.5;
    pub const DEFAULT_PROMOTE_AFTER_SECS: f64 = 60.0;
    pub const DEFAULT_BACKGROUND_PERIOD_SECS: f64 = 10.0;
    pub const DEFAULT_FLEET_INFERENCES_PER_HOUR: u64 = 1_000_000;
    pub const DEFAULT_FLEET_TOKENS_PER_HOUR: u64 = 1_000_000_000;
    pub const DEFAULT_BUDGET_SOFT_LIMIT: f64 = 0.8;
    pub const DEFAULT_QUEUE_DEADLINE_SECS: f64 = 30.0;

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
            queue_deadline: Duration::from_secs_f64(Self::DEFAULT_QUEUE_DEADLINE_SECS),
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

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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
    /// Longest a focus holds before it ends by itself (`focus_max_secs`, default 900): then the
    /// persona takes its deferred events up.
    pub focus_max: Duration,
    /// How long a deferred event waits to be taken up before it is dropped, with a journaled
    /// decision (`preoccupation_ttl_secs`, default 3600).
    pub preoccupation_ttl: Duration,
    /// The node it runs on (`node = ...`), when the fleet spans nodes; else placement picks one.
    pub node: Option<String>,
    /// The tools it may call (`tools = ["git.*", "fs.read_text_file"]`): none by default.
    pub tools: Vec<String>,
    /// `[[persona.procedure]]`: the tool calls the rules brain plans for events that ask for them.
    pub procedures: Vec<crate::tools::ToolProcedure>,
    /// Most `call_tool` steps one event's plans run (`max_tool_steps`, default 8).
    pub max_tool_steps: u32,
    /// Most times one event's plans make the same call (`max_identical_calls`, default 2).
    pub max_identical_calls: u32,
}

/// The domains a persona may name.
pub const DOMAINS: &[&str] = &["chat", "code", "voice", "tasks", "docs"];

/// Largest fleet file, and reference file it includes, that is read: 4 MiB.
pub const MAX_FLEET_FILE_BYTES: u64 = 4 << 20;

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
        let fleet = raw.fleet.unwrap_or_default();
        let default_brain = match &fleet.brain {
            Some(b) => cx.brain(b)?,
            None => BrainKind::Rules,
        };
        // Section by section, in this order: the first error is the one reported.
        let admin = cx.admin(raw.admin.unwrap_or_default())?;
        let storage = cx.storage(raw.storage.unwrap_or_default())?;
        let supervision = cx.supervision(raw.supervision.unwrap_or_default())?;
        let raw_scheduler = raw.scheduler.unwrap_or_default();
        let slots_set = raw_scheduler.inference_slots.is_some();
        let mut scheduler = cx.scheduler(raw_scheduler)?;
        let coordination = cx.coordination(raw.coordination.unwrap_or_default())?;
        let cluster = cx.cluster(raw.cluster.unwrap_or_default())?;
        let models = cx.models(raw.models.unwrap_or_default());
        let embedding = cx.embedding(raw.embedding.unwrap_or_default())?;
        let raw_llm = raw.llm.unwrap_or_default();
        let decoding = cx.decoding(&raw_llm);
        let llm = cx.llm(raw_llm)?;
        let decoding = decoding?;
        // A local model's slots are its batch: by default, as many grants as it decodes together.
        if let (LlmBackend::Local(local), false) = (&llm, slots_set) {
            scheduler.inference_slots = local.max_batch;
        }
        let index = cx.index(raw.index.unwrap_or_default())?;
        let references = cx.references(raw.references.unwrap_or_default(), &raw.reference)?;
        let conversation = cx.conversation(raw.conversation.unwrap_or_default())?;
        let training = cx.training(raw.training.unwrap_or_default())?;
        let base = cx.defaults(raw.defaults.unwrap_or_default())?;
        let tool_servers = cx.tool_servers(&raw.tool_server)?;

        if raw.persona.is_empty() {
            return Err(ConfigError {
                path: path.to_path_buf(),
                line: None,
                message: "the fleet has no `[[persona]]`: at least one is needed".into(),
            });
        }
        let servers = tool_servers.iter().map(|t| t.name.clone()).collect();
        let mut names = BTreeSet::new();
        let personas = raw
            .persona
            .iter()
            .map(|p| cx.persona(p.get_ref(), &mut names, base, &cluster, default_brain, &servers))
            .collect::<Result<Vec<_>, _>>()?;
        let webhooks = cx.webhooks(&raw.webhook, &names)?;

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
            decoding,
            index,
            references,
            conversation,
            training,
            personas,
            webhooks,
            tool_servers,
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
