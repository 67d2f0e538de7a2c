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

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use mindfleet_runtime::embedding::{EmbedFailure, EmbedMsg, EmbedStats, Embedded, LongText, ModelInfo, Piece, Urgency};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};
use sha2::{Digest, Sha256};

use super::cache::{Cache, Key};
use crate::scheduler::nearest_rank;
use mindfleet_models::embed::Embedder;

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

/// Misses of one request, sent to the inference thread.
struct Job {
    id: u64,
    texts: Vec<String>,
    long: LongText,
    urgency: Urgency,
}

impl Job {
    fn bulk(&self) -> bool {
        self.urgency == Urgency::Bulk
    }
}

/// A text on its way to the model, and the other requests (id, index in its results) that
/// asked for it meanwhile: it is embedded once for all of them.
struct InFlight {
    /// Sent as bulk work: a request that is not waits for no bulk job, so it sends its own copy.
    bulk: bool,
    sharers: Vec<(u64, usize)>,
}

struct Request {
    reply: RpcReplyPort<mindfleet_runtime::embedding::EmbedReply>,
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
            EmbedMsg::Embed { texts, long, urgency, reply } => {
                let received = Instant::now();
                let keys: Vec<Key> = texts.iter().map(|t| Cache::key(&st.fingerprint, long, t)).collect();
                let lookup = keys.clone();
                let found = st.with_cache(move |c| c.get_many(&lookup)).await.unwrap_or_else(|| vec![None; keys.len()]);
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
                st.stats.cache_hits += (req.results.len() - missed.len()) as u64;
                st.stats.cache_misses += missed.len() as u64;
                if missed.is_empty() {
                    st.finish(req, Ok(()));
                    return Ok(());
                }
                if let Status::Degraded(e) = &st.status {
                    let e = EmbedFailure::Degraded(e.clone());
                    st.finish(req, Err(e));
                    return Ok(());
                }
                if let Urgency::Before(deadline) = urgency
                    && st.stats.inputs_per_s > 0.0
                    && received + Duration::from_secs_f64((st.queued + missed.len()) as f64 / st.stats.inputs_per_s)
                        > deadline
                {
                    st.stats.late += 1;
                    st.finish(req, Err(EmbedFailure::Late));
                    return Ok(());
                }
                let id = st.next_id;
                st.next_id += 1;
                // A text already on its way to the model waits for that answer.
                let bulk = urgency == Urgency::Bulk;
                let (mut job, mut owned) = (Vec::new(), Vec::new());
                for ((i, key), text) in std::mem::take(&mut req.misses).into_iter().zip(missed) {
                    match st.in_flight.get_mut(&key) {
                        Some(f) if bulk || !f.bulk => {
                            f.sharers.push((id, i));
                            req.shared += 1;
                        }
                        sent => {
                            if sent.is_none() && !matches!(urgency, Urgency::Before(_)) {
                                st.in_flight.insert(key, InFlight { bulk, sharers: Vec::new() });
                                owned.push(key);
                            }
                            req.misses.push((i, key));
                            job.push(text);
                        }
                    }
                }
                if !job.is_empty()
                    && st.jobs.as_ref().is_none_or(|tx| tx.send(Job { id, texts: job, long, urgency }).is_err())
                {
                    for key in &owned {
                        st.in_flight.remove(key);
                    }
                    st.finish(req, Err(EmbedFailure::Stopped));
                    return Ok(());
                }
                if !bulk {
                    req.queued = req.misses.len();
                    st.queued += req.queued;
                }
                st.waiting.insert(id, req);
            }
            EmbedMsg::Computed { model_calls, inputs, seconds, jobs } => {
                if inputs > 0 && seconds > 0.0 {
                    // Recent batches count most: the texts' lengths drift.
                    let pace = f64::from(inputs) / seconds;
                    let s = &mut st.stats;
                    s.inputs_per_s = if s.inputs_per_s > 0.0 { 0.8 * s.inputs_per_s + 0.2 * pace } else { pace };
                }
                st.stats.batches += model_calls as u64;
                let total = st.stats.mean_batch * (st.stats.batches - model_calls as u64) as f64 + inputs as f64;
                st.stats.mean_batch = if st.stats.batches > 0 { total / st.stats.batches as f64 } else { 0.0 };
                let mut fresh: Vec<(Key, Vec<Piece>)> = Vec::new();
                let mut outcomes: Vec<(Key, Result<Vec<Piece>, EmbedFailure>)> = Vec::new();
                let mut touched = Vec::with_capacity(jobs.len());
                for (id, outcome) in jobs {
                    let Some(req) = st.waiting.get_mut(&id) else { continue };
                    touched.push(id);
                    st.queued -= std::mem::take(&mut req.queued);
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
                            st.stats.late += 1;
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
                    let sharers = st.in_flight.remove(&key).map(|f| f.sharers).unwrap_or_default();
                    for (id, i) in sharers {
                        let Some(req) = st.waiting.get_mut(&id) else { continue };
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
                    if let Some(entries) = st.with_cache(put).await {
                        st.stats.cache_entries = Some(entries);
                    }
                }
                for id in touched {
                    if st.waiting.get(&id).is_some_and(Request::answered) {
                        let mut req = st.waiting.remove(&id).expect("checked above");
                        let outcome = req.failure.take().map_or(Ok(()), Err);
                        st.finish(req, outcome);
                    }
                }
            }
            EmbedMsg::Checked(Ok(())) => {
                if matches!(st.status, Status::Loading) {
                    st.status = Status::Idle;
                }
            }
            EmbedMsg::Checked(Err(e)) | EmbedMsg::Loaded(Err(e)) => {
                tracing::error!(error = %e, "embedding model unavailable: semantic features degraded");
                st.status = Status::Degraded(e);
            }
            EmbedMsg::Loaded(Ok(info)) => {
                tracing::info!(model = %info.model, load_s = info.load_s, "embedding model loaded");
                st.status = Status::Ready(info);
            }
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

/// Loads the model, then serves batches until the actor drops its end of the channel.
fn inference_thread(dir: &Path, max_batch: usize, max_wait: Duration, jobs: Receiver<Job>, actor: ActorRef<EmbedMsg>) {
    mindfleet_models::lower_model_thread_priority();
    // The files are checked now, so a broken model is reported at once; the weights load with
    // the first request, so a fleet that embeds nothing does not hold them.
    let checked = Embedder::check(dir).map_err(|e| e.to_string());
    let _ = actor.cast(EmbedMsg::Checked(checked.clone()));
    let mut model = checked.map(|()| None);
    let load = |model: &mut Result<Option<Embedder>, String>| {
        if !matches!(model, Ok(None)) {
            return;
        }
        let started = Instant::now();
        *model = match Embedder::load(dir) {
            Ok(m) => {
                let info = ModelInfo {
                    model: model_name(dir),
                    path: dir.display().to_string(),
                    dimensions: m.dimensions(),
                    window: m.window(),
                    load_s: started.elapsed().as_secs_f64(),
                };
                let _ = actor.cast(EmbedMsg::Loaded(Ok(info)));
                Ok(Some(m))
            }
            Err(e) => {
                let e = e.to_string();
                let _ = actor.cast(EmbedMsg::Loaded(Err(e.clone())));
                Err(e)
            }
        };
    };
    // Bulk jobs wait here while other jobs are queued.
    let mut deferred: VecDeque<Job> = VecDeque::new();
    let sort = |job: Job, batch: &mut Vec<Job>, deferred: &mut VecDeque<Job>| match job.bulk() {
        true => deferred.push_back(job),
        false => batch.push(job),
    };
    // Inputs of other work run since the backlog last had a batch, while it waited; and when
    // other work last came.
    let (mut since_bulk, mut last_other) = (0, None::<Instant>);
    loop {
        let mut batch = Vec::new();
        // Block only when nothing is deferred.
        if deferred.is_empty() {
            match jobs.recv() {
                Ok(job) => sort(job, &mut batch, &mut deferred),
                Err(_) => return,
            }
        }
        while let Ok(job) = jobs.try_recv() {
            sort(job, &mut batch, &mut deferred);
        }
        // A batch of the backlog: when there is no other work, and (beside it) once other work
        // has kept the backlog waiting for `BULK_EVERY` batches' worth. While other work keeps
        // coming, the backlog's batches are a quarter of the size, so a query that comes
        // while one runs waits a quarter as long.
        if !batch.is_empty() {
            last_other = Some(Instant::now());
        }
        let busy = last_other.is_some_and(|t| t.elapsed() < QUERIES_RECENT);
        let bulk_batch = if busy { (max_batch / 4).max(1) } else { max_batch };
        let backlog = |batch: &mut Vec<Job>, deferred: &mut VecDeque<Job>| {
            let mut inputs = 0;
            while inputs < bulk_batch
                && let Some(job) = deferred.pop_front()
            {
                inputs += job.texts.len();
                batch.push(job);
            }
        };
        if batch.is_empty() {
            backlog(&mut batch, &mut deferred);
            since_bulk = 0;
        } else {
            // Requests come in bursts: wait a little for more while the batch is short.
            let mut inputs: usize = batch.iter().map(|j| j.texts.len()).sum();
            let deadline = Instant::now() + max_wait;
            while inputs < max_batch {
                match jobs.recv_deadline(deadline) {
                    Ok(job) => {
                        inputs += if job.bulk() { 0 } else { job.texts.len() };
                        sort(job, &mut batch, &mut deferred);
                    }
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
            if !deferred.is_empty() {
                since_bulk += inputs;
            }
            if since_bulk >= BULK_EVERY * bulk_batch {
                backlog(&mut batch, &mut deferred);
                since_bulk = 0;
            }
        }
        // What is past its deadline is answered, not run.
        let now = Instant::now();
        let (late, batch): (Vec<Job>, Vec<Job>) =
            batch.into_iter().partition(|j| matches!(j.urgency, Urgency::Before(t) if t <= now));
        if !batch.is_empty() {
            load(&mut model);
        }
        let mut msg = match &model {
            Ok(Some(m)) => run_batch(m, batch, max_batch),
            Ok(None) if batch.is_empty() => {
                EmbedMsg::Computed { model_calls: 0, inputs: 0, seconds: 0.0, jobs: Vec::new() }
            }
            Ok(None) => unreachable!("loaded above"),
            Err(e) => EmbedMsg::Computed {
                model_calls: 0,
                inputs: 0,
                seconds: 0.0,
                jobs: batch.into_iter().map(|j| (j.id, Err(EmbedFailure::Degraded(e.clone())))).collect(),
            },
        };
        if let EmbedMsg::Computed { jobs, .. } = &mut msg {
            jobs.extend(late.into_iter().map(|j| (j.id, Err(EmbedFailure::Late))));
        }
        if actor.cast(msg).is_err() {
            return;
        }
    }
}

/// Runs the model over every input of `jobs`, shortest first in calls of at most `max_batch`.
fn run_batch(model: &Embedder, jobs: Vec<Job>, max_batch: usize) -> EmbedMsg {
    // Every input: (job, text, piece byte range).
    let mut inputs: Vec<(usize, usize, std::ops::Range<usize>)> = Vec::new();
    let mut failed: HashMap<usize, EmbedFailure> = HashMap::new();
    for (j, job) in jobs.iter().enumerate() {
        for (t, text) in job.texts.iter().enumerate() {
            match job.long {
                LongText::Truncate => inputs.push((j, t, 0..text.len())),
                LongText::Split => match model.pieces(text) {
                    Ok(ranges) => inputs.extend(ranges.into_iter().map(|r| (j, t, r))),
                    Err(e) => {
                        failed.insert(j, EmbedFailure::Failed(e.to_string()));
                    }
                },
            }
        }
    }
    let text_of = |&(j, t, ref r): &(usize, usize, std::ops::Range<usize>)| &jobs[j].texts[t][r.clone()];
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| text_of(&inputs[i]).len());
    let mut vectors: Vec<Option<Piece>> = vec![None; inputs.len()];
    let mut model_calls = 0u32;
    let started = Instant::now();
    for chunk in order.chunks(max_batch) {
        let texts: Vec<&str> = chunk.iter().map(|&i| text_of(&inputs[i])).collect();
        model_calls += 1;
        match model.embed(&texts) {
            Ok(out) => {
                for (&i, e) in chunk.iter().zip(out) {
                    let r = &inputs[i].2;
                    vectors[i] = Some(Piece {
                        vector: e.vector,
                        tokens: e.tokens as u32,
                        truncated_from: e.truncated_from.map(|n| n as u32),
                        start: r.start as u32,
                        end: r.end as u32,
                    });
                }
            }
            Err(e) => {
                let failure = EmbedFailure::Failed(e.to_string());
                for &i in chunk {
                    failed.entry(inputs[i].0).or_insert_with(|| failure.clone());
                }
            }
        }
    }
    // Regroup pieces by job and text, in order.
    let mut per_job: Vec<Vec<Vec<Piece>>> = jobs.iter().map(|j| vec![Vec::new(); j.texts.len()]).collect();
    for ((j, t, _), piece) in inputs.iter().zip(vectors) {
        if let Some(p) = piece {
            per_job[*j][*t].push(p);
        }
    }
    let results = jobs
        .iter()
        .zip(per_job)
        .enumerate()
        .map(|(j, (job, pieces))| (job.id, failed.remove(&j).map_or(Ok(pieces), Err)))
        .collect();
    EmbedMsg::Computed {
        model_calls,
        inputs: inputs.len() as u32,
        seconds: started.elapsed().as_secs_f64(),
        jobs: results,
    }
}
