//! The fleet file as serde reads it, the first step: one struct per section, every key optional
//! (a missing section is its `Default`), with the byte span of each value that is checked later.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleetFile {
    pub(super) fleet: Option<RawFleet>,
    pub(super) admin: Option<RawAdmin>,
    pub(super) storage: Option<RawStorage>,
    pub(super) supervision: Option<RawSupervision>,
    pub(super) scheduler: Option<RawScheduler>,
    pub(super) coordination: Option<RawCoordination>,
    pub(super) cluster: Option<RawCluster>,
    pub(super) models: Option<RawModels>,
    pub(super) embedding: Option<RawEmbedding>,
    pub(super) llm: Option<RawLlm>,
    pub(super) index: Option<RawIndex>,
    pub(super) references: Option<RawReferences>,
    #[serde(default)]
    pub(super) reference: Vec<Spanned<RawReference>>,
    pub(super) conversation: Option<RawConversation>,
    pub(super) training: Option<RawTraining>,
    pub(super) defaults: Option<RawPersonaTuning>,
    #[serde(default)]
    pub(super) persona: Vec<Spanned<RawPersona>>,
    #[serde(default)]
    pub(super) webhook: Vec<Spanned<RawWebhook>>,
    #[serde(default)]
    pub(super) tool_server: Vec<Spanned<RawToolServer>>,
}

/// `[[tool_server]]`: an MCP server whose tools personas may call ([`crate::tools`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToolServer {
    pub(super) name: Spanned<String>,
    pub(super) command: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) env: Vec<Spanned<String>>,
    pub(super) url: Option<Spanned<String>>,
    pub(super) timeout_secs: Option<Spanned<i64>>,
    pub(super) max_output_kb: Option<Spanned<i64>>,
    pub(super) approval: Option<Spanned<String>>,
    pub(super) approval_timeout_secs: Option<Spanned<i64>>,
}

/// `[[persona.procedure]]`: a domain and phrases of the event, mapped to tool calls.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProcedure {
    pub(super) name: Spanned<String>,
    #[serde(default)]
    pub(super) domains: Vec<Spanned<String>>,
    pub(super) when: Vec<Spanned<String>>,
    pub(super) calls: Vec<Spanned<RawProcedureCall>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProcedureCall {
    pub(super) tool: Spanned<String>,
    #[serde(default)]
    pub(super) arguments: Option<Spanned<toml::Table>>,
}

/// `[[webhook]]`: where the fleet posts its replies (and decisions, dead letters).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub(super) name: Option<Spanned<String>>,
    pub(super) url: Spanned<String>,
    pub(super) secret_env: Spanned<String>,
    #[serde(default)]
    pub(super) rooms: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) personas: Vec<Spanned<String>>,
    pub(super) kinds: Option<Vec<Spanned<String>>>,
    pub(super) max_attempts: Option<Spanned<i64>>,
    pub(super) max_age_secs: Option<Spanned<f64>>,
    pub(super) backoff_initial_secs: Option<Spanned<f64>>,
    pub(super) backoff_max_secs: Option<Spanned<f64>>,
    pub(super) timeout_secs: Option<Spanned<f64>>,
}

/// `[conversation]`: conversation memory.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConversation {
    pub(super) enabled: Option<bool>,
    /// Called `similarity_weight` before recall fused keyword and vector ranks.
    #[serde(alias = "similarity_weight")]
    pub(super) relevance_weight: Option<Spanned<f64>>,
    pub(super) recency_weight: Option<Spanned<f64>>,
    pub(super) importance_weight: Option<Spanned<f64>>,
    pub(super) room_weight: Option<Spanned<f64>>,
    pub(super) half_life_hours: Option<Spanned<f64>>,
    pub(super) keyword_weight: Option<Spanned<f64>>,
    pub(super) vector_weight: Option<Spanned<f64>>,
    pub(super) rrf_k: Option<Spanned<f64>>,
    pub(super) context_messages: Option<Spanned<i64>>,
    pub(super) max_lag_secs: Option<Spanned<f64>>,
    pub(super) recall_wait_secs: Option<Spanned<f64>>,
    pub(super) observations: Option<Spanned<BoolOrName>>,
    pub(super) observe_after_secs: Option<Spanned<f64>>,
}

/// A key that takes `true`/`false` or a name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum BoolOrName {
    Bool(bool),
    Name(String),
}

/// `[references]`: catalog files to include, and how matching behaves.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReferences {
    #[serde(default)]
    pub(super) include: Vec<Spanned<String>>,
    pub(super) semantic_threshold: Option<Spanned<f64>>,
    pub(super) discovery_depth: Option<Spanned<i64>>,
}

/// A catalog file of `[references] include`: `[[reference]]` tables only.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReferenceFile {
    #[serde(default)]
    pub(super) reference: Vec<Spanned<RawReference>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReference {
    pub(super) id: Spanned<String>,
    pub(super) name: String,
    #[serde(default)]
    pub(super) description: String,
    #[serde(default)]
    pub(super) tags: Vec<String>,
    pub(super) path: Spanned<String>,
    pub(super) contents: Option<Spanned<BTreeMap<String, Vec<String>>>>,
    pub(super) mode: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    pub(super) name: Option<String>,
    pub(super) brain: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    pub(super) addr: Option<Spanned<String>>,
    pub(super) token: Option<String>,
    pub(super) max_body_bytes: Option<Spanned<i64>>,
    pub(super) faults: Option<bool>,
    pub(super) allowed_hosts: Option<Vec<Spanned<String>>>,
    pub(super) header_timeout_secs: Option<Spanned<f64>>,
    pub(super) idle_timeout_secs: Option<Spanned<f64>>,
    pub(super) max_connections: Option<Spanned<i64>>,
    pub(super) max_streams: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    pub(super) data_dir: Option<String>,
    pub(super) max_pending: Option<Spanned<i64>>,
    pub(super) decisions_per_persona: Option<Spanned<i64>>,
    pub(super) outbox_limit: Option<Spanned<i64>>,
    pub(super) events_retained: Option<Spanned<i64>>,
    pub(super) max_batch: Option<Spanned<i64>>,
    pub(super) max_crashes_per_event: Option<Spanned<i64>>,
    pub(super) cache_mb: Option<Spanned<i64>>,
    pub(super) write_behind_ms: Option<Spanned<i64>>,
    pub(super) min_free_mb: Option<Spanned<i64>>,
    pub(super) record: Option<bool>,
    pub(super) record_rows: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSupervision {
    pub(super) max_restarts: Option<Spanned<i64>>,
    pub(super) within_secs: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScheduler {
    pub(super) inference_slots: Option<Spanned<i64>>,
    pub(super) cheap_slots: Option<Spanned<i64>>,
    pub(super) aging_per_30s: Option<Spanned<f64>>,
    pub(super) promote_after_secs: Option<Spanned<f64>>,
    pub(super) background_period_secs: Option<Spanned<f64>>,
    pub(super) fleet_inferences_per_hour: Option<Spanned<i64>>,
    pub(super) fleet_tokens_per_hour: Option<Spanned<i64>>,
    pub(super) budget_soft_limit: Option<Spanned<f64>>,
    pub(super) queue_deadline_secs: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCoordination {
    pub(super) responders: Option<Spanned<i64>>,
    pub(super) window_ms: Option<Spanned<i64>>,
    pub(super) hold_secs: Option<Spanned<i64>>,
    pub(super) redundancy_threshold: Option<Spanned<f64>>,
}

/// `[cluster]`: the nodes a fleet spans.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    #[serde(default)]
    pub(super) nodes: Vec<Spanned<String>>,
    pub(super) rebalance: Option<bool>,
    pub(super) embedding: Option<Spanned<String>>,
    pub(super) index: Option<Spanned<String>>,
    pub(super) drain_on_stop: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModels {
    pub(super) dir: Option<String>,
    pub(super) embedding: Option<String>,
    pub(super) llm: Option<String>,
    pub(super) pull: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmbedding {
    pub(super) max_batch: Option<Spanned<i64>>,
    pub(super) max_wait_ms: Option<Spanned<f64>>,
    pub(super) cache: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIndex {
    pub(super) allowed_roots: Option<Vec<Spanned<String>>>,
    pub(super) cursor_ttl_secs: Option<Spanned<f64>>,
    pub(super) max_cursors: Option<Spanned<i64>>,
    pub(super) keyword_weight: Option<Spanned<f64>>,
    pub(super) vector_weight: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLlm {
    pub(super) backend: Option<Spanned<String>>,
    pub(super) url: Option<Spanned<String>>,
    pub(super) model: Option<String>,
    pub(super) api_key_env: Option<Spanned<String>>,
    pub(super) timeout_secs: Option<Spanned<f64>>,
    pub(super) max_batch: Option<Spanned<i64>>,
    pub(super) kv_memory_mb: Option<Spanned<i64>>,
    pub(super) prefix_reuse: Option<Spanned<bool>>,
    // How the personas' generations are decoded, with either backend.
    pub(super) repetition_penalty: Option<Spanned<f64>>,
    pub(super) no_repeat_ngram: Option<Spanned<i64>>,
    pub(super) no_copy_ngram: Option<Spanned<i64>>,
    pub(super) stop_repeated_sentence: Option<Spanned<bool>>,
    pub(super) reply_max_tokens: Option<Spanned<i64>>,
    pub(super) lesson_max_tokens: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPersonaTuning {
    pub(super) inbox_capacity: Option<Spanned<i64>>,
    pub(super) wm_capacity: Option<Spanned<i64>>,
    pub(super) wm_ttl_secs: Option<Spanned<f64>>,
    pub(super) inferences_per_hour: Option<Spanned<i64>>,
    pub(super) tokens_per_hour: Option<Spanned<i64>>,
    pub(super) consolidate_every_secs: Option<Spanned<f64>>,
    pub(super) focus_max_secs: Option<Spanned<f64>>,
    pub(super) preoccupation_ttl_secs: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPersona {
    pub(super) name: Spanned<String>,
    pub(super) role: String,
    #[serde(default)]
    pub(super) domains: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) expertise: Vec<String>,
    #[serde(default)]
    pub(super) rooms: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) dormant: bool,
    pub(super) brain: Option<Spanned<String>>,
    /// The node it runs on when the fleet spans nodes.
    pub(super) node: Option<Spanned<String>>,
    /// The tools it may call: `server.tool` or `server.*`.
    #[serde(default)]
    pub(super) tools: Vec<Spanned<String>>,
    /// `[[persona.procedure]]`: tool calls the rules brain plans.
    #[serde(default)]
    pub(super) procedure: Vec<Spanned<RawProcedure>>,
    pub(super) max_tool_steps: Option<Spanned<i64>>,
    pub(super) max_identical_calls: Option<Spanned<i64>>,
    // The tuning keys of `[defaults]`, repeated: `serde(flatten)` would lose their spans.
    pub(super) inbox_capacity: Option<Spanned<i64>>,
    pub(super) wm_capacity: Option<Spanned<i64>>,
    pub(super) wm_ttl_secs: Option<Spanned<f64>>,
    pub(super) inferences_per_hour: Option<Spanned<i64>>,
    pub(super) tokens_per_hour: Option<Spanned<i64>>,
    pub(super) consolidate_every_secs: Option<Spanned<f64>>,
    pub(super) focus_max_secs: Option<Spanned<f64>>,
    pub(super) preoccupation_ttl_secs: Option<Spanned<f64>>,
}

impl RawPersona {
    /// Its tuning keys, as `[defaults]` has them.
    pub(super) fn tuning(&self) -> RawPersonaTuning {
        RawPersonaTuning {
            inbox_capacity: self.inbox_capacity.clone(),
            wm_capacity: self.wm_capacity.clone(),
            wm_ttl_secs: self.wm_ttl_secs.clone(),
            inferences_per_hour: self.inferences_per_hour.clone(),
            tokens_per_hour: self.tokens_per_hour.clone(),
            consolidate_every_secs: self.consolidate_every_secs.clone(),
            focus_max_secs: self.focus_max_secs.clone(),
            preoccupation_ttl_secs: self.preoccupation_ttl_secs.clone(),
        }
    }
}

/// `[training]` as written (checked into `TrainingConfig`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTraining {
    pub(super) rank: Option<Spanned<i64>>,
    pub(super) alpha: Option<Spanned<f64>>,
    pub(super) targets: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) learning_rate: Option<Spanned<f64>>,
    pub(super) epochs: Option<Spanned<i64>>,
    pub(super) batch: Option<Spanned<i64>>,
    pub(super) new_chats: Option<Spanned<i64>>,
}
