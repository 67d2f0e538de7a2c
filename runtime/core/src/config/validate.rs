//! Validation, the second step: each section's raw values checked (ranges, names, cross
//! references) into the runtime types, every error naming `path:line:column` and the key.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::error::{ConfigError, ReadError, line_col, parse_error, read_capped};
use super::raw::*;
use super::*;
use crate::tools::{DEFAULT_MAX_IDENTICAL_CALLS, DEFAULT_MAX_TOOL_STEPS};
use crate::webhook::{HookKind, HookRoute, WebhookConfig};

mod tools;
mod webhooks;

/// A persona's tuning as the file gives it (seconds, counts), before it becomes durations.
#[derive(Clone, Copy)]
pub(super) struct Tuning {
    inbox_capacity: i64,
    wm_capacity: i64,
    wm_ttl_secs: f64,
    inferences_per_hour: i64,
    tokens_per_hour: i64,
    consolidate_every_secs: f64,
    focus_max_secs: f64,
    preoccupation_ttl_secs: f64,
}

impl Tuning {
    const BUILT_IN: Tuning = Tuning {
        inbox_capacity: 1000,
        wm_capacity: 100,
        wm_ttl_secs: 7.0 * 86_400.0,
        inferences_per_hour: 600,
        tokens_per_hour: 200_000,
        consolidate_every_secs: 300.0,
        focus_max_secs: 900.0,
        preoccupation_ttl_secs: 3600.0,
    };
}

pub(super) struct Ctx<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
}

impl Ctx<'_> {
    pub(super) fn err_at(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: self.path.to_path_buf(),
            line: Some(line_col(self.text, span.start)),
            message: message.into(),
        }
    }

    pub(super) fn int(
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

    pub(super) fn float(
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

    pub(super) fn llm(&self, l: RawLlm) -> Result<LlmBackend, ConfigError> {
        let backend = l.backend.as_ref().map_or("local", |b| b.get_ref().as_str());
        match backend {
            "local" => {
                if let Some(url) = &l.url {
                    return Err(self.err_at(url.span(), "`url` is for `backend = \"openai\"`"));
                }
                let d = LocalLlm::default();
                // One request at its longest context must fit: 2,048 tokens of SmolLM2-135M
                // take 90 MiB.
                Ok(LlmBackend::Local(LocalLlm {
                    max_batch: self.int(&l.max_batch, "max_batch", 1..=256, d.max_batch as i64)? as usize,
                    kv_memory_mb: self.int(&l.kv_memory_mb, "kv_memory_mb", 128..=1 << 20, d.kv_memory_mb as i64)?
                        as u64,
                    prefix_reuse: l.prefix_reuse.as_ref().map_or(d.prefix_reuse, |b| *b.get_ref()),
                }))
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
                let model = l.model.ok_or_else(|| self.err_at(at.clone(), "`backend = \"openai\"` needs `model`"))?;
                if let Some(key) = [&l.max_batch, &l.kv_memory_mb].into_iter().flatten().next() {
                    return Err(self.err_at(key.span(), "`max_batch` and `kv_memory_mb` are for `backend = \"local\"`"));
                }
                if let Some(key) = &l.prefix_reuse {
                    return Err(self.err_at(key.span(), "`prefix_reuse` is for `backend = \"local\"`"));
                }
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

    /// The decoding keys of `[llm]`, which either backend takes.
    pub(super) fn decoding(&self, l: &RawLlm) -> Result<Decoding, ConfigError> {
        let (d, r) = (Decoding::default(), Decoding::DEFAULT_REPETITION);
        let count = |v: &Option<Spanned<i64>>, key: &str, range: std::ops::RangeInclusive<i64>, default: usize| {
            self.int(v, key, range, default as i64).map(|n| n as usize)
        };
        let sentence = l.stop_repeated_sentence.as_ref().map_or(r.stop_repeated_sentence, |b| *b.get_ref());
        Ok(Decoding {
            repetition: Repetition {
                penalty: self.float(&l.repetition_penalty, "repetition_penalty", 1.0..=10.0, r.penalty.into())? as f32,
                no_repeat_ngram: count(&l.no_repeat_ngram, "no_repeat_ngram", 0..=64, r.no_repeat_ngram)?,
                no_copy_ngram: count(&l.no_copy_ngram, "no_copy_ngram", 0..=64, r.no_copy_ngram)?,
                stop_repeated_sentence: sentence,
            },
            reply_max_tokens: count(&l.reply_max_tokens, "reply_max_tokens", 1..=8192, d.reply_max_tokens)?,
            lesson_max_tokens: count(&l.lesson_max_tokens, "lesson_max_tokens", 1..=8192, d.lesson_max_tokens)?,
        })
    }

    /// Validates `[[reference]]` tables of this file into `out`: ids unique across files,
    /// paths (relative to this file) present.
    fn catalog_entries(
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

    fn observer(&self, v: &Spanned<BoolOrName>) -> Result<Observer, ConfigError> {
        match v.get_ref() {
            BoolOrName::Bool(true) => Ok(Observer::Rules),
            BoolOrName::Bool(false) => Ok(Observer::Off),
            BoolOrName::Name(n) if n == "rules" => Ok(Observer::Rules),
            BoolOrName::Name(n) if n == "model" => Ok(Observer::Model),
            BoolOrName::Name(n) if n == "off" => Ok(Observer::Off),
            BoolOrName::Name(other) => Err(self.err_at(
                v.span(),
                format!(
                    "`observations` = {other:?} is not available (known: \"rules\", \"model\", \"off\", true, false)"
                ),
            )),
        }
    }

    pub(super) fn brain(&self, v: &Spanned<String>) -> Result<BrainKind, ConfigError> {
        match v.get_ref().as_str() {
            "rules" => Ok(BrainKind::Rules),
            "local" => Ok(BrainKind::Local),
            other => {
                Err(self
                    .err_at(v.span(), format!("`brain` = {other:?} is not available (known: \"rules\", \"local\")")))
            }
        }
    }

    pub(super) fn admin(&self, a: RawAdmin) -> Result<AdminConfig, ConfigError> {
        let addr = match &a.addr {
            None => "127.0.0.1:7878".parse().expect("literal address"),
            Some(s) => s
                .get_ref()
                .parse::<SocketAddr>()
                .map_err(|e| self.err_at(s.span(), format!("`addr` = {:?}: {e}", s.get_ref())))?,
        };
        let mut allowed_hosts = Vec::new();
        for h in a.allowed_hosts.unwrap_or_default() {
            if !valid_host_name(h.get_ref()) {
                return Err(self.err_at(
                    h.span(),
                    format!(
                        "`allowed_hosts`: {:?} is not a host name (letters, digits, '-' and '.', no port or scheme)",
                        h.get_ref()
                    ),
                ));
            }
            allowed_hosts.push(h.get_ref().to_ascii_lowercase());
        }
        let max_connections = self.int(
            &a.max_connections,
            "max_connections",
            1..=1_000_000,
            AdminConfig::DEFAULT_MAX_CONNECTIONS as i64,
        )? as usize;
        Ok(AdminConfig {
            addr,
            token: a.token.filter(|t| !t.is_empty()),
            max_body_bytes: self.int(&a.max_body_bytes, "max_body_bytes", 256..=(64 << 20), 64 * 1024)? as usize,
            faults: a.faults.unwrap_or(false),
            allowed_hosts,
            header_timeout: Duration::from_secs_f64(self.float(
                &a.header_timeout_secs,
                "header_timeout_secs",
                0.01..=3600.0,
                AdminConfig::DEFAULT_HEADER_TIMEOUT_SECS,
            )?),
            idle_timeout: Duration::from_secs_f64(self.float(
                &a.idle_timeout_secs,
                "idle_timeout_secs",
                0.01..=86_400.0,
                AdminConfig::DEFAULT_IDLE_TIMEOUT_SECS,
            )?),
            max_streams: self.max_streams(&a.max_streams, max_connections)?,
            max_connections,
        })
    }

    /// `max_streams`: below `max_connections`, so ordinary requests always have connections
    /// left; by default 64, or half the connections of a fleet with fewer than 128.
    fn max_streams(&self, v: &Option<Spanned<i64>>, max_connections: usize) -> Result<usize, ConfigError> {
        let default = AdminConfig::DEFAULT_MAX_STREAMS.min(max_connections / 2);
        let n = self.int(v, "max_streams", 0..=999_999, default as i64)? as usize;
        match v {
            Some(s) if n >= max_connections => Err(self.err_at(
                s.span(),
                format!(
                    "`max_streams` = {n} must be less than `max_connections` ({max_connections}): streams would \
                     leave no connection for other requests"
                ),
            )),
            _ => Ok(n),
        }
    }

    pub(super) fn storage(&self, s: RawStorage) -> Result<StorageConfig, ConfigError> {
        Ok(StorageConfig {
            data_dir: PathBuf::from(s.data_dir.unwrap_or_else(|| "./data".into())),
            max_pending: self.int(&s.max_pending, "max_pending", 1..=100_000_000, 1_000_000)? as u64,
            decisions_per_persona: self.int(&s.decisions_per_persona, "decisions_per_persona", 1..=10_000_000, 1000)?
                as u64,
            outbox_limit: self.int(&s.outbox_limit, "outbox_limit", 1..=100_000_000, 10_000)? as u64,
            events_retained: self.int(&s.events_retained, "events_retained", 1..=100_000_000, 100_000)? as u64,
            max_batch: self.int(&s.max_batch, "max_batch", 1..=100_000, 4096)? as usize,
            max_crashes_per_event: self.int(&s.max_crashes_per_event, "max_crashes_per_event", 1..=100, 3)? as u32,
            cache_mb: self.int(&s.cache_mb, "cache_mb", 1..=1_048_576, 256)? as usize,
            write_behind: Duration::from_millis(
                self.int(&s.write_behind_ms, "write_behind_ms", 0..=60_000, 2000)? as u64
            ),
            min_free_mb: self.int(&s.min_free_mb, "min_free_mb", 0..=1_048_576, 8)? as u64,
            record: s.record.unwrap_or(true),
            record_rows: self.int(&s.record_rows, "record_rows", 1000..=1_000_000_000, 200_000)? as u64,
        })
    }

    pub(super) fn supervision(&self, s: RawSupervision) -> Result<SupervisionConfig, ConfigError> {
        let (r, w) = (s.max_restarts, s.within_secs);
        Ok(SupervisionConfig {
            max_restarts: self.int(&r, "max_restarts", 0..=1000, 3)? as u32,
            within: Duration::from_secs_f64(self.float(&w, "within_secs", 0.001..=86_400.0, 5.0)?),
        })
    }

    pub(super) fn scheduler(&self, s: RawScheduler) -> Result<SchedulerConfig, ConfigError> {
        let d = SchedulerConfig::default();
        Ok(SchedulerConfig {
            inference_slots: self.int(&s.inference_slots, "inference_slots", 1..=1024, d.inference_slots as i64)?
                as usize,
            cheap_slots: self.int(&s.cheap_slots, "cheap_slots", 1..=100_000, d.cheap_slots as i64)? as usize,
            aging_per_30s: self.float(&s.aging_per_30s, "aging_per_30s", 0.0..=10.0, d.aging_per_30s)?,
            promote_after: Duration::from_secs_f64(self.float(
                &s.promote_after_secs,
                "promote_after_secs",
                0.001..=86_400.0,
                SchedulerConfig::DEFAULT_PROMOTE_AFTER_SECS,
            )?),
            background_period: Duration::from_secs_f64(self.float(
                &s.background_period_secs,
                "background_period_secs",
                0.001..=86_400.0,
                SchedulerConfig::DEFAULT_BACKGROUND_PERIOD_SECS,
            )?),
            fleet_inferences_per_hour: self.int(
                &s.fleet_inferences_per_hour,
                "fleet_inferences_per_hour",
                0..=i64::MAX,
                d.fleet_inferences_per_hour as i64,
            )? as u64,
            fleet_tokens_per_hour: self.int(
                &s.fleet_tokens_per_hour,
                "fleet_tokens_per_hour",
                0..=i64::MAX,
                d.fleet_tokens_per_hour as i64,
            )? as u64,
            budget_soft_limit: self.float(&s.budget_soft_limit, "budget_soft_limit", 0.0..=1.0, d.budget_soft_limit)?,
            queue_deadline: Duration::from_secs_f64(self.float(
                &s.queue_deadline_secs,
                "queue_deadline_secs",
                0.0..=3600.0,
                SchedulerConfig::DEFAULT_QUEUE_DEADLINE_SECS,
            )?),
        })
    }

    pub(super) fn coordination(&self, c: RawCoordination) -> Result<CoordinationConfig, ConfigError> {
        Ok(CoordinationConfig {
            responders: self.int(&c.responders, "responders", 1..=1000, 1)? as usize,
            window: Duration::from_millis(self.int(&c.window_ms, "window_ms", 1..=60_000, 300)? as u64),
            hold: Duration::from_secs(self.int(&c.hold_secs, "hold_secs", 1..=86_400, 300)? as u64),
            redundancy_threshold: self.float(
                &c.redundancy_threshold,
                "redundancy_threshold",
                0.0..=1.0,
                REDUNDANCY_THRESHOLD,
            )?,
        })
    }

    pub(super) fn cluster(&self, c: RawCluster) -> Result<ClusterConfig, ConfigError> {
        let mut nodes: Vec<String> = Vec::new();
        for n in &c.nodes {
            if !valid_name(n.get_ref()) {
                return Err(self.err_at(
                    n.span(),
                    format!("[cluster] node {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'", n.get_ref()),
                ));
            }
            if nodes.contains(n.get_ref()) {
                return Err(self.err_at(n.span(), format!("[cluster] node {:?} is listed twice", n.get_ref())));
            }
            nodes.push(n.get_ref().clone());
        }
        // A node that serves the others: one of the fleet's nodes.
        let serving = |key: &str, n: Option<Spanned<String>>| match n {
            Some(n) if !valid_name(n.get_ref()) => Err(self.err_at(
                n.span(),
                format!("[cluster] {key} {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'", n.get_ref()),
            )),
            Some(n) if !nodes.is_empty() && !nodes.contains(n.get_ref()) => Err(self.err_at(
                n.span(),
                format!("[cluster] {key}: node {:?} is not in `[cluster] nodes` ({})", n.get_ref(), nodes.join(", ")),
            )),
            n => Ok(n.map(Spanned::into_inner)),
        };
        let embedding = serving("embedding", c.embedding)?;
        let index = serving("index", c.index)?;
        Ok(ClusterConfig {
            nodes,
            rebalance: c.rebalance.unwrap_or(true),
            embedding,
            index,
            drain_on_stop: c.drain_on_stop.unwrap_or(true),
        })
    }

    pub(super) fn models(&self, m: RawModels) -> ModelsConfig {
        ModelsConfig {
            dir: m.dir.map_or_else(default_models_dir, PathBuf::from),
            embedding: m.embedding.map(PathBuf::from),
            llm: m.llm.map(PathBuf::from),
            pull: m.pull.unwrap_or(true),
        }
    }

    pub(super) fn embedding(&self, e: RawEmbedding) -> Result<EmbeddingConfig, ConfigError> {
        let d = EmbeddingConfig::default();
        Ok(EmbeddingConfig {
            max_batch: self.int(&e.max_batch, "max_batch", 1..=1024, d.max_batch as i64)? as usize,
            max_wait: Duration::from_secs_f64(
                self.float(&e.max_wait_ms, "max_wait_ms", 0.0..=10_000.0, d.max_wait.as_secs_f64() * 1e3)? / 1e3,
            ),
            cache: e.cache.unwrap_or(d.cache),
        })
    }

    pub(super) fn index(&self, i: RawIndex) -> Result<IndexConfig, ConfigError> {
        let d = IndexConfig::default();
        let mut allowed_roots = Vec::new();
        for r in i.allowed_roots.unwrap_or_default() {
            let root = PathBuf::from(r.get_ref());
            if !root.is_absolute() {
                return Err(
                    self.err_at(r.span(), format!("`allowed_roots`: {:?} is not an absolute path", r.get_ref()))
                );
            }
            allowed_roots.push(root);
        }
        let keyword_weight = self.float(&i.keyword_weight, "keyword_weight", 0.0..=100.0, 1.0)? as f32;
        let vector_weight = self.float(&i.vector_weight, "vector_weight", 0.0..=100.0, 1.0)? as f32;
        if keyword_weight + vector_weight == 0.0 {
            let at = i.keyword_weight.as_ref().map_or(0..0, Spanned::span);
            return Err(self.err_at(at, "`keyword_weight` and `vector_weight`: the weights cannot both be 0"));
        }
        Ok(IndexConfig {
            allowed_roots,
            cursor_ttl: Duration::from_secs_f64(self.float(
                &i.cursor_ttl_secs,
                "cursor_ttl_secs",
                1.0..=86_400.0,
                d.cursor_ttl.as_secs_f64(),
            )?),
            max_cursors: self.int(&i.max_cursors, "max_cursors", 1..=100_000, d.max_cursors as i64)? as usize,
            keyword_weight,
            vector_weight,
            rrf_k: d.rrf_k,
        })
    }

    pub(super) fn references(
        &self,
        r: RawReferences,
        inline: &[Spanned<RawReference>],
    ) -> Result<ReferencesConfig, ConfigError> {
        let mut refs = Vec::new();
        self.catalog_entries(inline, &mut refs)?;
        for inc in &r.include {
            let file = self.path.parent().unwrap_or(Path::new(".")).join(inc.get_ref());
            let text = read_capped(&file).map_err(|e| {
                self.err_at(
                    inc.span(),
                    match e {
                        ReadError::Io(e) => format!("`include`: cannot read {}: {e}", file.display()),
                        e @ ReadError::TooLarge => format!("`include`: {} is {e}", file.display()),
                    },
                )
            })?;
            let sub = Ctx { path: &file, text: &text };
            let raw: RawReferenceFile = toml::from_str(&text).map_err(|e| parse_error(&file, &text, &e))?;
            sub.catalog_entries(&raw.reference, &mut refs)?;
        }
        Ok(ReferencesConfig {
            catalog: crate::refs::Catalog { refs },
            semantic_threshold: self.float(
                &r.semantic_threshold,
                "semantic_threshold",
                0.0..=1.0,
                ReferencesConfig::DEFAULT_SEMANTIC_THRESHOLD,
            )? as f32,
            discovery_depth: self.int(&r.discovery_depth, "discovery_depth", 0..=16, 2)? as usize,
        })
    }

    pub(super) fn conversation(&self, c: RawConversation) -> Result<ConversationConfig, ConfigError> {
        let d = ConversationConfig::default();
        let w = |v: &Option<Spanned<f64>>, name, default| self.float(v, name, 0.0..=100.0, default);
        let weights = crate::conversation::RecallWeights {
            relevance: w(&c.relevance_weight, "relevance_weight", d.weights.relevance)?,
            recency: w(&c.recency_weight, "recency_weight", d.weights.recency)?,
            importance: w(&c.importance_weight, "importance_weight", d.weights.importance)?,
            same_room: w(&c.room_weight, "room_weight", d.weights.same_room)?,
            half_life: Duration::from_secs_f64(
                3600.0
                    * self.float(
                        &c.half_life_hours,
                        "half_life_hours",
                        0.01..=1e6,
                        d.weights.half_life.as_secs_f64() / 3600.0,
                    )?,
            ),
            keyword: w(&c.keyword_weight, "keyword_weight", d.weights.keyword)?,
            vector: w(&c.vector_weight, "vector_weight", d.weights.vector)?,
            rrf_k: self.float(&c.rrf_k, "rrf_k", 0.0..=1000.0, d.weights.rrf_k)?,
            context: self.int(&c.context_messages, "context_messages", 0..=16, d.weights.context as i64)? as usize,
        };
        if weights.keyword + weights.vector == 0.0 {
            let at = c.keyword_weight.as_ref().map_or(0..0, Spanned::span);
            return Err(self.err_at(at, "`keyword_weight` and `vector_weight`: the weights cannot both be 0"));
        }
        let max_lag = self.float(&c.max_lag_secs, "max_lag_secs", 0.01..=86_400.0, d.max_lag.as_secs_f64())?;
        let recall_wait =
            self.float(&c.recall_wait_secs, "recall_wait_secs", 0.01..=600.0, d.recall_wait.as_secs_f64())?;
        let observe_after =
            self.float(&c.observe_after_secs, "observe_after_secs", 0.01..=86_400.0, d.observe_after.as_secs_f64())?;
        Ok(ConversationConfig {
            enabled: c.enabled.unwrap_or(d.enabled),
            weights,
            max_lag: Duration::from_secs_f64(max_lag),
            recall_wait: Duration::from_secs_f64(recall_wait),
            observations: match &c.observations {
                Some(o) => self.observer(o)?,
                None => d.observations,
            },
            observe_after: Duration::from_secs_f64(observe_after),
        })
    }

    /// `[defaults]`: the tuning of every persona that does not set its own.
    pub(super) fn defaults(&self, d: RawPersonaTuning) -> Result<Tuning, ConfigError> {
        self.tuning(&d, Tuning::BUILT_IN)
    }

    /// A persona's tuning: its own keys, else `base` (the `[defaults]`, else the built-in ones).
    fn tuning(&self, t: &RawPersonaTuning, base: Tuning) -> Result<Tuning, ConfigError> {
        Ok(Tuning {
            inbox_capacity: self.int(&t.inbox_capacity, "inbox_capacity", 1..=10_000_000, base.inbox_capacity)?,
            wm_capacity: self.int(&t.wm_capacity, "wm_capacity", 1..=1_000_000, base.wm_capacity)?,
            wm_ttl_secs: self.float(&t.wm_ttl_secs, "wm_ttl_secs", 1.0..=3.2e7, base.wm_ttl_secs)?,
            inferences_per_hour: self.int(
                &t.inferences_per_hour,
                "inferences_per_hour",
                0..=i64::MAX,
                base.inferences_per_hour,
            )?,
            tokens_per_hour: self.int(&t.tokens_per_hour, "tokens_per_hour", 0..=i64::MAX, base.tokens_per_hour)?,
            consolidate_every_secs: self.float(
                &t.consolidate_every_secs,
                "consolidate_every_secs",
                0.01..=86_400.0,
                base.consolidate_every_secs,
            )?,
            focus_max_secs: self.float(&t.focus_max_secs, "focus_max_secs", 0.01..=604_800.0, base.focus_max_secs)?,
            preoccupation_ttl_secs: self.float(
                &t.preoccupation_ttl_secs,
                "preoccupation_ttl_secs",
                0.01..=3.2e7,
                base.preoccupation_ttl_secs,
            )?,
        })
    }

    /// One `[[persona]]`, checked against the names before it and the cluster's nodes.
    pub(super) fn persona(
        &self,
        p: &RawPersona,
        names: &mut BTreeSet<String>,
        base: Tuning,
        cluster: &ClusterConfig,
        default_brain: BrainKind,
        tool_servers: &BTreeSet<String>,
    ) -> Result<PersonaConfig, ConfigError> {
        let name = p.name.get_ref();
        if !valid_name(name) {
            return Err(self.err_at(
                p.name.span(),
                format!("persona `name` = {name:?} must be 1-64 characters of a-z, 0-9, '-' or '_'"),
            ));
        }
        if !names.insert(name.clone()) {
            return Err(self.err_at(p.name.span(), format!("duplicate persona name {name:?}")));
        }
        for dmn in &p.domains {
            if !DOMAINS.contains(&dmn.get_ref().as_str()) {
                return Err(self.err_at(
                    dmn.span(),
                    format!("persona {name:?}: unknown domain {:?} (known: {})", dmn.get_ref(), DOMAINS.join(", ")),
                ));
            }
        }
        for room in &p.rooms {
            if !valid_name(room.get_ref()) {
                return Err(self.err_at(
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
                return Err(self.err_at(
                    node.span(),
                    format!(
                        "persona {name:?}: node {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'",
                        node.get_ref()
                    ),
                ));
            }
            if !cluster.nodes.is_empty() && !cluster.nodes.contains(node.get_ref()) {
                return Err(self.err_at(
                    node.span(),
                    format!(
                        "persona {name:?}: node {:?} is not in `[cluster] nodes` ({})",
                        node.get_ref(),
                        cluster.nodes.join(", ")
                    ),
                ));
            }
        }
        let tools = self.tool_allowlist(name, &p.tools, tool_servers)?;
        let procedures = self.procedures(name, &p.procedure, &tools)?;
        let tuning = self.tuning(&p.tuning(), base)?;
        Ok(PersonaConfig {
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
                Some(b) => self.brain(b)?,
                None => default_brain,
            },
            inbox_capacity: tuning.inbox_capacity as usize,
            wm_capacity: tuning.wm_capacity as usize,
            wm_ttl: Duration::from_secs_f64(tuning.wm_ttl_secs),
            inferences_per_hour: tuning.inferences_per_hour as u64,
            tokens_per_hour: tuning.tokens_per_hour as u64,
            consolidate_every: Duration::from_secs_f64(tuning.consolidate_every_secs),
            focus_max: Duration::from_secs_f64(tuning.focus_max_secs),
            preoccupation_ttl: Duration::from_secs_f64(tuning.preoccupation_ttl_secs),
            node: p.node.as_ref().map(|n| n.get_ref().clone()),
            tools,
            procedures,
            max_tool_steps: self.int(&p.max_tool_steps, "max_tool_steps", 1..=64, DEFAULT_MAX_TOOL_STEPS as i64)?
                as u32,
            max_identical_calls: self.int(
                &p.max_identical_calls,
                "max_identical_calls",
                1..=16,
                DEFAULT_MAX_IDENTICAL_CALLS as i64,
            )? as u32,
        })
    }
}
