//! The `EmbeddingWorker` actor: one per fleet, serving every persona.
//!
//! The actor answers what the cache holds and sends the rest, as jobs, over a crossbeam
//! channel to a dedicated inference thread that owns the model. The thread coalesces jobs
//! into batches: it takes what is queued, waits up to `max_wait` for more while the batch is
//! short of `max_batch` inputs, and runs the model on inputs sorted by length (so a batch
//! pads little). A text already on its way to the model (the same message taken in by every
//! persona of a room) is not sent again: its answer serves every request that asked for it.
//! Under load, callers' requests queue while the model runs, so throughput is batch
//! throughput. A `bulk` request (a backlog of background work) waits while other requests are
//! queued, so a query waits for at most the batch running; but while they keep the model busy,
//! the backlog gets one batch in every `BULK_EVERY + 1`, so it still moves. A request with a
//! deadline is answered `Late` instead of run when the model has not taken it up by then, or at
//! once when the inputs queued ahead of it, at the model's recent pace, would keep it past it:
//! under overload the model works on answers someone still waits for, and who would wait in
//! vain learns it at once.
//! Results come back to the actor as a message; it fills the cache and answers.
//!
//! The thread checks the model's files at once and loads the weights with the first request. If
//! the model cannot be loaded the worker keeps running, degraded: it answers from the cache
//! what it can and fails the rest with [`EmbedFailure::Degraded`], naming the file and what
//! is wrong.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use mindfleet_core::embedding::{
    EmbedFailure, EmbedMsg, EmbedReply, EmbedStats, Embedded, LongText, ModelInfo, Piece, Urgency,
};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};
use sha2::{Digest, Sha256};

use super::cache::{Cache, Key};
use crate::scheduler::nearest_rank;
use thread::{Callback, Computed, Job, inference_thread};

mod thread;

/// Latencies kept for the p50/p99 in stats.
const LATENCIES_KEPT: usize = 4096;
/// While other work keeps the model busy, the backlog (bulk work) gets a batch for every this
/// many batches of it: queries go first, and the backlog still moves (at least a quarter).
const BULK_EVERY: usize = 3;
/// Other work that came this recently makes the backlog's batches small.
const QUERIES_RECENT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct EmbedArgs {
    /// A HuggingFace-layout BERT directory.
    pub model_dir: PathBuf,
    /// The cache file (none: no cache).
    pub cache: Option<PathBuf>,
    /// Most inputs per model call.
    pub max_batch: usize,
    /// Longest a short batch waits for more requests.
    pub max_wait: Duration,
}

pub struct EmbeddingWorker;

/// Spawns the worker (linked to `supervisor` when given). The model loads on the inference
/// thread; requests sent meanwhile wait for it.
pub async fn spawn(args: EmbedArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<EmbedMsg>, SpawnErr> {
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, EmbeddingWorker, args, s).await?,
        None => Actor::spawn(None, EmbeddingWorker, args).await?,
    };
    Ok(actor)
}

/// A text on its way to the model, and the other requests (id, index in its results) that
/// asked for it meanwhile: it is embedded once for all of them.
struct InFlight {
    /// Sent as bulk work: a request that is not waits for no bulk job, so it sends its own copy.
    bulk: bool,
    sharers: Vec<(u64, usize)>,
}

struct Request {
    reply: RpcReplyPort<EmbedReply>,
    results: Vec<Option<Embedded>>,
    /// Index in `results` and cache key of each text sent to the model in this request's job
    /// (cleared when the job is done).
    misses: Vec<(usize, Key)>,
    /// Texts of this request already being embedded for another (or twice in this one),
    /// not answered yet.
    shared: usize,
    failure: Option<EmbedFailure>,
    received: Instant,
    /// Inputs of its job counted in `WorkerState::queued` (none for bulk work).
    queued: usize,
}

impl Request {
    fn answered(&self) -> bool {
        self.misses.is_empty() && self.shared == 0
    }
}

enum Status {
    Loading,
    /// The files are sound; the weights load with the first request.
    Idle,
    Ready(ModelInfo),
    Degraded(String),
}

pub struct WorkerState {
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    status: Status,
    model_path: PathBuf,
    fingerprint: Key,
    /// File I/O: used off the tokio workers (`spawn_blocking`).
    cache: Option<Arc<Mutex<Cache>>>,
    /// Where the cache lives, and when to open it again after a failure (a full disk heals).
    cache_path: Option<PathBuf>,
    cache_retry: Option<Instant>,
    waiting: HashMap<u64, Request>,
    /// Texts sent to the model and not back yet. A request with a deadline owns none (it may
    /// be dropped as late), but it may share one.
    in_flight: HashMap<Key, InFlight>,
    next_id: u64,
    /// Texts of jobs other than bulk at the model or waiting for it.
    queued: usize,
    stats: EmbedStats,
    latencies: VecDeque<f64>,
}

impl WorkerState {
    fn finish(&mut self, req: Request, outcome: Result<(), EmbedFailure>) {
        let ms = req.received.elapsed().as_secs_f64() * 1e3;
        if self.latencies.len() == LATENCIES_KEPT {
            self.latencies.pop_front();
        }
        self.latencies.push_back(ms);
        self.stats.requests += 1;
        self.stats.texts += req.results.len() as u64;
        let answer = outcome.map(|()| req.results.into_iter().map(|r| r.expect("every text answered")).collect());
        let _ = req.reply.send(answer);
    }

    fn cache_failed(&mut self, e: impl std::fmt::Display) {
        tracing::warn!(error = %e, retry_in_s = CACHE_RETRY.as_secs(), "embedding cache disabled");
        self.cache = None;
        self.cache_retry = self.cache_path.as_ref().map(|_| Instant::now() + CACHE_RETRY);
        self.stats.cache_error = Some(e.to_string());
        self.stats.cache_entries = None;
    }

    fn stats(&self) -> EmbedStats {
        let mut s = self.stats.clone();
        match &self.status {
            Status::Loading | Status::Idle => {
                s.status = if matches!(self.status, Status::Idle) { "idle" } else { "loading" }.into();
                s.model.path = self.model_path.display().to_string();
            }
            Status::Ready(info) => {
                s.status = "ready".into();
                s.model = info.clone();
            }
            Status::Degraded(e) => {
                s.status = "degraded".into();
                s.error = Some(e.clone());
                s.model.path = self.model_path.display().to_string();
            }
        }
        let mut lat: Vec<f64> = self.latencies.iter().copied().collect();
        lat.sort_by(f64::total_cmp);
        s.p50_ms = nearest_rank(&lat, 0.50).unwrap_or(0.0);
        s.p99_ms = nearest_rank(&lat, 0.99).unwrap_or(0.0);
        s.in_flight = self.waiting.len();
        s
    }

    /// Runs `op` on the cache off the tokio workers; a failure disables the cache. `None` when
    /// there is no cache (or it just failed).
    async fn with_cache<T: Send + 'static>(
        &mut self,
        op: impl FnOnce(&mut Cache) -> Result<T, super::cache::CacheError> + Send + 'static,
    ) -> Option<T> {
        self.reopen_cache().await;
        let cache = self.cache.clone()?;
        let done = tokio::task::spawn_blocking(move || op(&mut cache.lock().unwrap_or_else(|e| e.into_inner()))).await;
        match done {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.cache_failed(e);
                None
            }
            Err(e) => {
                self.cache_failed(e);
                None
            }
        }
    }
}

/// How long the embedding cache stays off after a failure before it is opened again.
const CACHE_RETRY: Duration = Duration::from_secs(30);

impl WorkerState {
    /// Opens the cache again once [`CACHE_RETRY`] has passed since it failed.
    async fn reopen_cache(&mut self) {
        let (Some(path), Some(at)) = (self.cache_path.clone(), self.cache_retry) else { return };
        if self.cache.is_some() || Instant::now() < at {
            return;
        }
        let error = match tokio::task::spawn_blocking(move || Cache::open(&path)).await {
            Ok(Ok(c)) => {
                tracing::info!("embedding cache open again");
                self.stats.cache_entries = c.len().ok();
                self.stats.cache_error = None;
                self.cache = Some(Arc::new(Mutex::new(c)));
                self.cache_retry = None;
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        self.stats.cache_error = Some(error);
        self.cache_retry = Some(Instant::now() + CACHE_RETRY);
    }
}

impl WorkerState {
    /// A request: what the cache holds is answered, the rest goes to the model (or waits for a
    /// copy already on its way there), unless the model is degraded or the request would be late.
    async fn embed(&mut self, texts: Vec<String>, long: LongText, urgency: Urgency, reply: RpcReplyPort<EmbedReply>) {
        let received = Instant::now();
        let keys: Vec<Key> = texts.iter().map(|t| Cache::key(&self.fingerprint, long, t)).collect();
        let lookup = keys.clone();
        let found = self.with_cache(move |c| c.get_many(&lookup)).await.unwrap_or_else(|| vec![None; keys.len()]);
        let mut req = Request {
            reply,
            results: Vec::with_capacity(texts.len()),
            misses: Vec::new(),
            shared: 0,
            failure: None,
            received,
            queued: 0,
        };
        let mut missed = Vec::new();
        for (i, ((text, key), hit)) in texts.into_iter().zip(keys).zip(found).enumerate() {
            match hit {
                Some(pieces) => req.results.push(Some(Embedded { pieces, cached: true })),
                None => {
                    req.results.push(None);
                    req.misses.push((i, key));
                    missed.push(text);
                }
            }
        }
        self.stats.cache_hits += (req.results.len() - missed.len()) as u64;
        self.stats.cache_misses += missed.len() as u64;
        if missed.is_empty() {
            self.finish(req, Ok(()));
            return;
        }
        if let Status::Degraded(e) = &self.status {
            let e = EmbedFailure::Degraded(e.clone());
            self.finish(req, Err(e));
            return;
        }
        if let Urgency::Before(deadline) = urgency
            && self.stats.inputs_per_s > 0.0
            && received + Duration::from_secs_f64((self.queued + missed.len()) as f64 / self.stats.inputs_per_s)
                > deadline
        {
            self.stats.late += 1;
            self.finish(req, Err(EmbedFailure::Late));
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        // A text already on its way to the model waits for that answer.
        let bulk = urgency == Urgency::Bulk;
        let (mut job, mut owned) = (Vec::new(), Vec::new());
        for ((i, key), text) in std::mem::take(&mut req.misses).into_iter().zip(missed) {
            match self.in_flight.get_mut(&key) {
                Some(f) if bulk || !f.bulk => {
                    f.sharers.push((id, i));
                    req.shared += 1;
                }
                sent => {
                    if sent.is_none() && !matches!(urgency, Urgency::Before(_)) {
                        self.in_flight.insert(key, InFlight { bulk, sharers: Vec::new() });
                        owned.push(key);
                    }
                    req.misses.push((i, key));
                    job.push(text);
                }
            }
        }
        if !job.is_empty()
            && self.jobs.as_ref().is_none_or(|tx| tx.send(Job { id, texts: job, long, urgency }).is_err())
        {
            for key in &owned {
                self.in_flight.remove(key);
            }
            self.finish(req, Err(EmbedFailure::Stopped));
            return;
        }
        if !bulk {
            req.queued = req.misses.len();
            self.queued += req.queued;
        }
        self.waiting.insert(id, req);
    }

    /// A batch back from the model: the pace and batch figures, the cache filled, and every
    /// request it completes (its own texts or texts it shared) answered.
    async fn computed(&mut self, done: Computed) {
        let Computed { model_calls, inputs, seconds, jobs } = done;
        if inputs > 0 && seconds > 0.0 {
            // Recent batches count most: the texts' lengths drift.
            let pace = f64::from(inputs) / seconds;
            let s = &mut self.stats;
            s.inputs_per_s = if s.inputs_per_s > 0.0 { 0.8 * s.inputs_per_s + 0.2 * pace } else { pace };
        }
        self.stats.batches += model_calls as u64;
        let total = self.stats.mean_batch * (self.stats.batches - model_calls as u64) as f64 + inputs as f64;
        self.stats.mean_batch = if self.stats.batches > 0 { total / self.stats.batches as f64 } else { 0.0 };
        let mut fresh: Vec<(Key, Vec<Piece>)> = Vec::new();
        let mut outcomes: Vec<(Key, Result<Vec<Piece>, EmbedFailure>)> = Vec::new();
        let mut touched = Vec::with_capacity(jobs.len());
        for (id, outcome) in jobs {
            let Some(req) = self.waiting.get_mut(&id) else { continue };
            touched.push(id);
            self.queued -= std::mem::take(&mut req.queued);
            let misses = std::mem::take(&mut req.misses);
            match outcome {
                Ok(all) => {
                    for ((i, key), pieces) in misses.into_iter().zip(all) {
                        fresh.push((key, pieces.clone()));
                        outcomes.push((key, Ok(pieces.clone())));
                        req.results[i] = Some(Embedded { pieces, cached: false });
                    }
                }
                // A late job owned none of its texts: whoever shares them waits for their
                // owner's answer.
                Err(EmbedFailure::Late) => {
                    self.stats.late += 1;
                    req.failure = Some(EmbedFailure::Late);
                }
                Err(e) => {
                    outcomes.extend(misses.into_iter().map(|(_, key)| (key, Err(e.clone()))));
                    req.failure = Some(e);
                }
            }
        }
        // The requests that asked for the same texts meanwhile.
        for (key, outcome) in outcomes {
            let sharers = self.in_flight.remove(&key).map(|f| f.sharers).unwrap_or_default();
            for (id, i) in sharers {
                let Some(req) = self.waiting.get_mut(&id) else { continue };
                req.shared -= 1;
                match &outcome {
                    Ok(pieces) => req.results[i] = Some(Embedded { pieces: pieces.clone(), cached: false }),
                    Err(e) => req.failure = Some(e.clone()),
                }
                touched.push(id);
            }
        }
        if !fresh.is_empty() {
            let put = move |c: &mut Cache| {
                c.put_many(fresh.iter().map(|(k, p)| (*k, p.as_slice())))?;
                c.len()
            };
            if let Some(entries) = self.with_cache(put).await {
                self.stats.cache_entries = Some(entries);
            }
        }
        for id in touched {
            if self.waiting.get(&id).is_some_and(Request::answered) {
                let mut req = self.waiting.remove(&id).expect("checked above");
                let outcome = req.failure.take().map_or(Ok(()), Err);
                self.finish(req, outcome);
            }
        }
    }

    /// The inference thread checked the model's files.
    fn checked(&mut self, checked: Result<(), String>) {
        match checked {
            Ok(()) if matches!(self.status, Status::Loading) => self.status = Status::Idle,
            Ok(()) => {}
            Err(e) => self.degraded(e),
        }
    }

    /// The inference thread loaded the model, or failed to.
    fn loaded(&mut self, loaded: Result<ModelInfo, String>) {
        match loaded {
            Ok(info) => {
                tracing::info!(model = %info.model, load_s = info.load_s, "embedding model loaded");
                self.status = Status::Ready(info);
            }
            Err(e) => self.degraded(e),
        }
    }

    fn degraded(&mut self, e: String) {
        tracing::error!(error = %e, "embedding model unavailable: semantic features degraded");
        self.status = Status::Degraded(e);
    }
}

impl Actor for EmbeddingWorker {
    type Msg = EmbedMsg;
    type State = WorkerState;
    type Arguments = EmbedArgs;

    async fn pre_start(&self, myself: ActorRef<EmbedMsg>, args: EmbedArgs) -> Result<WorkerState, ActorProcessingErr> {
        let mut stats = EmbedStats {
            status: "loading".into(),
            max_batch: args.max_batch.max(1),
            max_wait_ms: args.max_wait.as_secs_f64() * 1e3,
            ..Default::default()
        };
        stats.model.model = model_name(&args.model_dir);
        // Opening the cache and reading the model's files for its fingerprint are file I/O.
        let (dir, path) = (args.model_dir.clone(), args.cache.clone());
        let (cache, fingerprint) =
            tokio::task::spawn_blocking(move || (path.as_deref().map(Cache::open).transpose(), fingerprint(&dir)))
                .await?;
        let cache = match cache {
            Ok(c) => {
                stats.cache_entries = c.as_ref().and_then(|c| c.len().ok());
                c.map(|c| Arc::new(Mutex::new(c)))
            }
            Err(e) => {
                tracing::warn!(error = %e, "embedding cache disabled");
                stats.cache_error = Some(e.to_string());
                None
            }
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        let (dir, batch, wait) = (args.model_dir.clone(), stats.max_batch, args.max_wait);
        let thread = std::thread::Builder::new()
            .name("embedding".into())
            .spawn(move || inference_thread(&dir, batch, wait, rx, myself))?;
        Ok(WorkerState {
            jobs: Some(tx),
            thread: Some(thread),
            status: Status::Loading,
            fingerprint,
            model_path: args.model_dir,
            cache_retry: args.cache.as_ref().filter(|_| cache.is_none()).map(|_| Instant::now() + CACHE_RETRY),
            cache_path: args.cache,
            cache,
            waiting: HashMap::new(),
            in_flight: HashMap::new(),
            next_id: 0,
            queued: 0,
            stats,
            latencies: VecDeque::with_capacity(LATENCIES_KEPT),
        })
    }

    async fn handle(
        &self,
        _me: ActorRef<EmbedMsg>,
        msg: EmbedMsg,
        st: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            EmbedMsg::Embed { texts, long, urgency, reply } => st.embed(texts, long, urgency, reply).await,
            EmbedMsg::Own(own) => match own.open::<Callback>() {
                Ok(Callback::Computed(done)) => st.computed(done).await,
                Ok(Callback::Checked(checked)) => st.checked(checked),
                Ok(Callback::Loaded(loaded)) => st.loaded(loaded),
                Err(_) => tracing::warn!("embedding worker: dropped a message that is not its own"),
            },
            EmbedMsg::Stats(reply) => {
                let _ = reply.send(st.stats());
            }
            EmbedMsg::Sync(reply) => {
                st.with_cache(Cache::sync).await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn post_stop(&self, _me: ActorRef<EmbedMsg>, st: &mut WorkerState) -> Result<(), ActorProcessingErr> {
        // Closing the channel ends the thread once its current batch is done.
        st.jobs = None;
        for (_, req) in std::mem::take(&mut st.waiting) {
            let _ = req.reply.send(Err(EmbedFailure::Stopped));
        }
        if let Some(cache) = st.cache.take() {
            let synced =
                tokio::task::spawn_blocking(move || cache.lock().unwrap_or_else(|e| e.into_inner()).sync()).await;
            if let Ok(Err(e)) = synced {
                tracing::warn!(error = %e, "embedding cache not synced at stop");
            }
        }
        drop(st.thread.take());
        Ok(())
    }
}

/// The model's name: its directory's name.
fn model_name(dir: &Path) -> String {
    dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// Identifies the model for the cache: its configuration, tokenizer, window and the size of its
/// weights. A changed model gets new keys, so stale vectors are never served.
pub(crate) fn fingerprint(dir: &Path) -> Key {
    let mut h = Sha256::new();
    for file in ["config.json", "tokenizer.json", "sentence_bert_config.json"] {
        h.update(file.as_bytes());
        h.update(std::fs::read(dir.join(file)).unwrap_or_default());
    }
    let weights = std::fs::metadata(dir.join("model.safetensors")).map_or(0, |m| m.len());
    h.update(weights.to_le_bytes());
    h.finalize().into()
}

#[cfg(test)]
mod tests;
