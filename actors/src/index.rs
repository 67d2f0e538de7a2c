//! The `Index` actor: the fleet's codebase knowledge, shared by every persona and by people
//! through the admin API and the CLI.
//!
//! The index ([`mindfleet_index::Index`]) is synchronous and its work is long (indexing a tree
//! embeds thousands of chunks), so a dedicated thread owns it and serves the actor's requests
//! in order, over a crossbeam channel. It embeds through the fleet's shared `EmbeddingWorker`
//! (so the index's texts batch with everyone else's and share the embedding cache) and asks
//! `rag ask`'s answers of the fleet's `LlmWorker`, whatever backend `[llm]` configures.
//!
//! A search's query is embedded by the actor, off the thread (a task per request), so the
//! queries of concurrent searches batch at the worker and the thread only searches; a request
//! may bound that wait (`embed_wait_ms`), past which it searches by words and says so.
//!
//! Cursors are the actor's own: `fetch` and `close` are answered at once, even while the thread
//! indexes. `open` searches on the thread and keeps the ranking under a handle; any caller can
//! also page through a list of its own (`OpenList`: a persona's thoughts).
//!
//! Messages: [`IndexMsg`]: `Request` (every `rag` command), `OpenList`, `Stats`.

mod ask;
mod cursors;

use cursors::{CursorBook, page_json};

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use mindfleet_core::config::IndexConfig;
use mindfleet_core::cursor::{CursorError, Cursors, Page};
use mindfleet_core::embedding::{EmbedFailure, EmbedMsg, LongText, Urgency};
use mindfleet_core::knowledge::{
    AskRequest, IndexMsg, IndexRequest, IndexStats, PathKind, RagError, RagReply, RagRequest, SearchMode, SearchRequest,
};
use mindfleet_core::llm::{GenerateJob, LlmMsg};
use mindfleet_index::{Embed, Entry, Index, IndexError, MAX_LIMIT, Mode, SearchOptions, SearchResults, UpdateOptions};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};
use serde_json::{Value, json};

use mindfleet_models::embed::Tokens;

use crate::embed::model_name;

/// Longest the index thread waits for the embedding worker on one batch.
const EMBED_CALL: Duration = Duration::from_secs(300);
/// Texts the index thread sends the embedding worker at once: the worker cuts them into its own
/// batches and runs them back to back, where a call per batch would leave the model idle
/// between them.
const WORKER_CALL_TEXTS: usize = 256;
/// Longest it waits for the LLM's answer to `rag ask`.
const ASK_CALL: Duration = Duration::from_secs(600);
/// Most chunks `rag ask` gives the model.
const MAX_ASK_CHUNKS: usize = 16;

/// Called as indexing goes: files done, files in all (for a progress bar).
pub type Progress = Arc<dyn Fn(usize, usize) + Send + Sync>;

pub struct IndexArgs {
    /// The index's directory (`<data>/index`).
    pub dir: PathBuf,
    pub embedding: ActorRef<EmbedMsg>,
    /// The embedding worker's model directory: the index names its vectors after it and
    /// counts tokens with its tokenizer.
    pub model_dir: PathBuf,
    /// The fleet's LLM, for `rag ask`.
    pub llm: Option<ActorRef<LlmMsg>>,
    pub config: IndexConfig,
    /// Refuse paths outside `config.allowed_roots` (an admin API on a non-loopback address).
    pub restrict_paths: bool,
    /// Keep the cursors in this file, so they outlive the process (the in-process CLI).
    pub cursor_file: Option<PathBuf>,
    pub progress: Option<Progress>,
}

pub struct IndexActor;

/// Spawns the actor and its thread (linked to `supervisor` when given). The index opens on the
/// thread; requests sent meanwhile wait for it.
pub async fn spawn(args: IndexArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<IndexMsg>, SpawnErr> {
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, IndexActor, args, s).await?,
        None => Actor::spawn(None, IndexActor, args).await?,
    };
    Ok(actor)
}

struct Job {
    req: RagRequest,
    reply: RagReply,
    /// The query's vector, embedded by the actor (or why not), for a request that searches.
    query: Option<Result<Vec<f32>, String>>,
}

/// The text a request searches by meaning, and how long it may wait for its vector.
fn query_of(req: &RagRequest) -> Option<(String, Option<Duration>)> {
    let (query, mode, wait) = match req {
        RagRequest::Search(r) | RagRequest::Query(r) | RagRequest::Open(r) => (&r.query, r.mode, r.embed_wait_ms),
        RagRequest::Ask(a) => (&a.question, a.mode, None),
        _ => return None,
    };
    let by_meaning = mode != SearchMode::Keyword || matches!(req, RagRequest::Query(_));
    (by_meaning && !query.trim().is_empty()).then(|| (query.clone(), wait.map(Duration::from_millis)))
}

/// Vectors of `texts` from the embedding worker, at `urgency`.
async fn embed_at(worker: &ActorRef<EmbedMsg>, texts: Vec<String>, urgency: Urgency) -> Result<Vec<Vec<f32>>, String> {
    let answer = ractor::call_t!(
        worker,
        |reply| EmbedMsg::Embed { texts, long: LongText::Truncate, urgency, reply },
        EMBED_CALL.as_millis() as u64
    );
    let embedded = answer.map_err(|e| format!("embedding worker: {e}"))?.map_err(|e| match e {
        EmbedFailure::Late => "the embedding model was busy past the query's wait".to_string(),
        e => e.to_string(),
    })?;
    Ok(embedded.into_iter().map(|e| e.vector().to_vec()).collect())
}

pub struct IndexState {
    jobs: Option<Sender<Job>>,
    embedding: ActorRef<EmbedMsg>,
    thread: Option<JoinHandle<()>>,
    cursors: Arc<Mutex<CursorBook>>,
    stats: Arc<Mutex<IndexStats>>,
}

impl Actor for IndexActor {
    type Msg = IndexMsg;
    type State = IndexState;
    type Arguments = IndexArgs;

    async fn pre_start(&self, _myself: ActorRef<IndexMsg>, args: IndexArgs) -> Result<IndexState, ActorProcessingErr> {
        let cursors = Arc::new(Mutex::new(CursorBook::load(args.cursor_file.clone(), &args.config)));
        let stats = Arc::new(Mutex::new(IndexStats { status: "opening".into(), ..Default::default() }));
        let (tx, rx) = crossbeam_channel::unbounded();
        let embedding = args.embedding.clone();
        let service = Service {
            dir: args.dir,
            embedding: args.embedding,
            model_dir: args.model_dir,
            tokens: None,
            llm: args.llm,
            config: args.config,
            restrict: args.restrict_paths,
            progress: args.progress,
            rt: tokio::runtime::Handle::current(),
            cursors: cursors.clone(),
            stats: stats.clone(),
        };
        let thread = std::thread::Builder::new().name("index".into()).spawn(move || service.serve(rx))?;
        Ok(IndexState { jobs: Some(tx), embedding, thread: Some(thread), cursors, stats })
    }

    async fn post_stop(&self, _myself: ActorRef<IndexMsg>, st: &mut IndexState) -> Result<(), ActorProcessingErr> {
        // The thread ends when its channel closes, after the request it is serving.
        st.jobs = None;
        if let Some(t) = st.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<IndexMsg>,
        msg: IndexMsg,
        st: &mut IndexState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            IndexMsg::Request(req, reply) => match *req {
                // Cursors are answered here, at once.
                RagRequest::Fetch(f) => {
                    let r = match f.limit.filter(|l| !(1..=MAX_LIMIT).contains(l)) {
                        Some(l) => Err(RagError::Invalid(format!("limit: {l} is not within 1..={MAX_LIMIT}"))),
                        None => lock(&st.cursors)
                            .with(|c, now| c.fetch(&f.handle, f.direction, f.offset, f.limit, now))
                            .map(|page| page_json(&f.handle, page)),
                    };
                    let _ = reply.send(r);
                }
                RagRequest::Close(c) => {
                    let r = lock(&st.cursors).with(|cs, now| cs.close(&c.handle, now));
                    let _ = reply.send(r.map(|()| json!({ "handle": c.handle, "closed": true })));
                }
                req => {
                    lock(&st.stats).in_flight += 1;
                    let Some(jobs) = st.jobs.clone() else {
                        let _ = reply.send(Err(RagError::Unavailable("the index thread stopped".into())));
                        return Ok(());
                    };
                    let send = move |job: Job| {
                        if let Err(e) = jobs.send(job) {
                            let _ = e
                                .into_inner()
                                .reply
                                .send(Err(RagError::Unavailable("the index thread stopped".into())));
                        }
                    };
                    match query_of(&req) {
                        Some((query, wait)) => {
                            let worker = st.embedding.clone();
                            tokio::spawn(async move {
                                let urgency = wait.map_or(Urgency::Normal, |w| Urgency::Before(Instant::now() + w));
                                let vector = embed_at(&worker, vec![query], urgency)
                                    .await
                                    .and_then(|mut v| v.pop().ok_or_else(|| "no vector for the query".to_string()));
                                send(Job { req, reply, query: Some(vector) });
                            });
                        }
                        None => send(Job { req, reply, query: None }),
                    }
                }
            },
            IndexMsg::OpenList { items, page_size, reply } => {
                let _ = reply.send(lock(&st.cursors).open(items, page_size, None));
            }
            IndexMsg::Stats(reply) => {
                let mut s = lock(&st.stats).clone();
                s.open_cursors = lock(&st.cursors).cursors.len();
                let _ = reply.send(s);
            }
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves the data as consistent as any single update.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The index thread's side.
struct Service {
    dir: PathBuf,
    embedding: ActorRef<EmbedMsg>,
    model_dir: PathBuf,
    /// Loaded at the first request that needs the model.
    tokens: Option<Result<WorkerEmbed, String>>,
    llm: Option<ActorRef<LlmMsg>>,
    config: IndexConfig,
    restrict: bool,
    progress: Option<Progress>,
    rt: tokio::runtime::Handle,
    cursors: Arc<Mutex<CursorBook>>,
    stats: Arc<Mutex<IndexStats>>,
}

impl Service {
    fn serve(mut self, jobs: Receiver<Job>) {
        let mut index = match Index::open(&self.dir) {
            Ok(i) => {
                let mut s = lock(&self.stats);
                s.status = "ready".into();
                s.repairs = i.repairs().to_vec();
                for r in &s.repairs {
                    tracing::warn!(repair = %r, "index repaired at open");
                }
                drop(s);
                self.count(&i);
                Ok(i)
            }
            Err(e) => {
                tracing::error!(error = %e, "index unavailable");
                let mut s = lock(&self.stats);
                s.status = "failed".into();
                s.error = Some(e.to_string());
                Err(e.to_string())
            }
        };
        while let Ok(first) = jobs.recv() {
            // What queued meanwhile: searches first (someone waits on each), then the entries
            // to store, in one commit, then the rest in order. A caller that needs its write
            // seen by its search waits for the write's answer before it searches.
            let queued: Vec<Job> = std::iter::once(first).chain(jobs.try_iter()).collect();
            let (reads, rest): (Vec<Job>, Vec<Job>) = queued
                .into_iter()
                .partition(|j| matches!(j.req, RagRequest::Search(_) | RagRequest::Query(_) | RagRequest::Open(_)));
            let (writes, rest): (Vec<Job>, Vec<Job>) =
                rest.into_iter().partition(|j| matches!(j.req, RagRequest::CreateMany(_)));
            for job in reads {
                self.serve_one(&mut index, job);
            }
            match (&mut index, writes.len()) {
                (Ok(index), 2..) => self.create_together(index, writes),
                _ => writes.into_iter().for_each(|job| self.serve_one(&mut index, job)),
            }
            for job in rest {
                self.serve_one(&mut index, job);
            }
        }
    }

    fn serve_one(&mut self, index: &mut Result<Index, String>, Job { req, reply, query }: Job) {
        let r = match index {
            Ok(index) => {
                let r = self.execute(index, req, query.as_ref());
                if r.is_ok() {
                    self.count(index);
                }
                r
            }
            Err(e) => Err(RagError::Unavailable(format!("index: {e}"))),
        };
        self.answer(reply, r);
    }

    fn answer(&self, reply: RagReply, r: Result<Value, RagError>) {
        {
            let mut s = lock(&self.stats);
            s.in_flight = s.in_flight.saturating_sub(1);
            s.requests += 1;
            s.failures += r.is_err() as u64;
        }
        let _ = reply.send(r);
    }

    /// Several `create-many` requests stored in one transaction and one keyword commit (under
    /// load, the commits are what the thread's time goes to). If that is refused, each is
    /// tried alone, so one bad entry fails only its own request.
    fn create_together(&mut self, index: &mut Index, writes: Vec<Job>) {
        let mut entries = Vec::new();
        let mut counts = Vec::with_capacity(writes.len());
        for job in &writes {
            let RagRequest::CreateMany(m) = &job.req else { unreachable!("partitioned above") };
            counts.push(m.entries.len());
            entries.extend(m.entries.iter().cloned());
        }
        let (embed, unembedded) = self.model_for_entries();
        let entries = entries
            .into_iter()
            .map(|c| Entry { path: c.file_path, content: c.content, embedding: c.embedding })
            .collect();
        let Ok(ids) = index.create_many(entries, embed) else {
            for job in writes {
                let r = self.execute(index, job.req, None);
                self.answer(job.reply, r);
            }
            self.count(index);
            return;
        };
        self.count(index);
        lock(&self.stats).grouped_writes += writes.len() as u64;
        let mut ids = ids.into_iter();
        for (job, n) in writes.into_iter().zip(counts) {
            let RagRequest::CreateMany(m) = &job.req else { unreachable!("partitioned above") };
            let note = unembedded.as_ref().filter(|_| m.entries.iter().any(|c| c.embedding.is_none()));
            let mine: Vec<String> = ids.by_ref().take(n).map(|id| id.to_string()).collect();
            self.answer(job.reply, Ok(json!({ "entry_ids": mine, "indexed": true, "note": note })));
        }
    }

    fn count(&self, index: &Index) {
        if let Ok((files, chunks, texts)) = index.counts() {
            let mut s = lock(&self.stats);
            (s.files, s.chunks, s.texts) = (files, chunks, texts);
        }
    }

    /// The model through the embedding worker, or why it cannot be had.
    fn embedder(&mut self) -> Result<&WorkerEmbed, RagError> {
        let (dir, worker, rt) = (&self.model_dir, &self.embedding, &self.rt);
        let e = self.tokens.get_or_insert_with(|| {
            Tokens::load(dir)
                .map(|tokens| WorkerEmbed { worker: worker.clone(), rt: rt.clone(), name: model_name(dir), tokens })
                .map_err(|e| format!("embedding model: {e}"))
        });
        e.as_ref().map_err(|e| RagError::Unavailable(e.clone()))
    }

    /// Serves `req`; `query` is the vector of what it searches for, embedded beforehand.
    fn execute(
        &mut self,
        index: &mut Index,
        req: RagRequest,
        query: Option<&Result<Vec<f32>, String>>,
    ) -> Result<Value, RagError> {
        match req {
            RagRequest::Index(r) => self.index(index, r),
            RagRequest::Search(r) => Ok(json!(self.search(index, &r, r.limit, query)?)),
            RagRequest::Query(r) => {
                let r = SearchRequest { mode: SearchMode::Vector, ..r };
                let found = self.search(index, &r, r.limit, query)?;
                if found.mode != Mode::Vector {
                    return Err(RagError::Unavailable(found.note.unwrap_or_default()));
                }
                let scores: Vec<f32> = found.hits.iter().map(|h| h.similarity.unwrap_or(0.0)).collect();
                Ok(json!({ "entries": found.hits, "relevance_scores": scores }))
            }
            RagRequest::Open(r) => {
                if !(1..=MAX_LIMIT).contains(&r.limit) {
                    return Err(RagError::Invalid(format!("page_size: {} is not within 1..={MAX_LIMIT}", r.limit)));
                }
                let found = self.search(index, &r, MAX_LIMIT, query)?;
                let items = found.hits.iter().map(|h| json!(h)).collect();
                lock(&self.cursors).open(items, r.limit, found.note)
            }
            RagRequest::Create(c) => {
                let embed = if c.embedding.is_none() { Some(self.embedder()? as &dyn Embed) } else { None };
                let id = index.create(&c.file_path, &c.content, c.embedding, embed).map_err(rag_error)?;
                Ok(json!({ "entry_id": id.to_string(), "indexed": true }))
            }
            RagRequest::CreateMany(m) => {
                let needs_model = m.entries.iter().any(|c| c.embedding.is_none());
                let (embed, unembedded) = self.model_for_entries();
                let note = unembedded.filter(|_| needs_model);
                let entries = m
                    .entries
                    .into_iter()
                    .map(|c| Entry { path: c.file_path, content: c.content, embedding: c.embedding })
                    .collect();
                let ids = index.create_many(entries, embed).map_err(rag_error)?;
                let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                Ok(json!({ "entry_ids": ids, "indexed": true, "note": note }))
            }
            RagRequest::Ask(a) => self.ask(index, a, query),
            RagRequest::Fetch(_) | RagRequest::Close(_) => {
                Err(RagError::Invalid("cursors are the actor's, not the index thread's".into()))
            }
        }
    }

    /// The model for stored entries, or why entries that need it are kept for keyword search
    /// only. The model names the vectors also when every entry brings its own (conversation
    /// memory embeds at the worker, as bulk work), so queries are compared with them.
    fn model_for_entries(&mut self) -> (Option<&dyn Embed>, Option<String>) {
        match self.embedder() {
            Ok(e) => (Some(e as &dyn Embed), None),
            Err(e) => (None, Some(format!("{e}: kept for keyword search only"))),
        }
    }

    fn search(
        &mut self,
        index: &Index,
        r: &SearchRequest,
        limit: usize,
        query: Option<&Result<Vec<f32>, String>>,
    ) -> Result<SearchResults, RagError> {
        let mode = match r.mode {
            SearchMode::Hybrid => Mode::Hybrid,
            SearchMode::Keyword => Mode::Keyword,
            SearchMode::Vector => Mode::Vector,
        };
        let opts = SearchOptions {
            limit,
            lang: r.lang.clone(),
            path_prefix: r.path_prefix.clone(),
            threshold: r.threshold,
            mode,
            keyword_weight: self.config.keyword_weight,
            vector_weight: self.config.vector_weight,
            rrf_k: self.config.rrf_k,
        };
        if let Some(t) = r.threshold.filter(|t| !(0.0..=1.0).contains(t)) {
            return Err(RagError::Invalid(format!("threshold: {t} is not within 0..=1")));
        }
        // Keyword search needs no model; the others fall back to keywords, saying why, without one.
        let model = match mode {
            Mode::Keyword => None,
            _ => self.embedder().ok(),
        };
        let prepared = model.zip(query).map(|(model, vector)| Prepared { model, query: &r.query, vector });
        let embed = match &prepared {
            Some(p) => Some(p as &dyn Embed),
            None => model.map(|e| e as &dyn Embed),
        };
        index.search(&r.query, embed, &opts).map_err(rag_error)
    }

    fn index(&mut self, index: &mut Index, r: IndexRequest) -> Result<Value, RagError> {
        if r.paths.is_empty() {
            return Err(RagError::Invalid("paths: none given".into()));
        }
        let mut paths = Vec::with_capacity(r.paths.len());
        for p in &r.paths {
            let abs = resolve(p, self.restrict.then_some(self.config.allowed_roots.as_slice()))?;
            match r.expect {
                Some(PathKind::File) if !abs.is_file() => return Err(RagError::Invalid(format!("{p}: not a file"))),
                Some(PathKind::Dir) if !abs.is_dir() => return Err(RagError::Invalid(format!("{p}: not a directory"))),
                _ => {}
            }
            paths.push(abs);
        }
        let opts = UpdateOptions { types: r.types, recursive: r.recursive, ..UpdateOptions::default() };
        let progress = self.progress.clone();
        let embed = self.embedder()?;
        let mut reports = Vec::new();
        for path in &paths {
            let report = index
                .update_with(path, embed, &opts, &mut |done, total| {
                    if let Some(p) = &progress {
                        p(done, total);
                    }
                })
                .map_err(rag_error)?;
            reports.push(report);
        }
        let (files, chunks, texts) = index.counts().map_err(rag_error)?;
        Ok(json!({ "indexed": reports, "files": files, "chunks": chunks, "texts": texts }))
    }

    fn ask(
        &mut self,
        index: &Index,
        a: AskRequest,
        query: Option<&Result<Vec<f32>, String>>,
    ) -> Result<Value, RagError> {
        if !(1..=MAX_ASK_CHUNKS).contains(&a.limit) {
            return Err(RagError::Invalid(format!("limit: {} is not within 1..={MAX_ASK_CHUNKS}", a.limit)));
        }
        if !(1..=4096).contains(&a.max_tokens) {
            return Err(RagError::Invalid(format!("max_tokens: {} is not within 1..=4096", a.max_tokens)));
        }
        let search = SearchRequest {
            query: a.question.clone(),
            limit: a.limit,
            lang: a.lang,
            path_prefix: a.path_prefix,
            threshold: None,
            mode: a.mode,
            embed_wait_ms: None,
        };
        let found = self.search(index, &search, a.limit, query)?;
        let sources = ask::relevant(&found.hits);
        if sources.is_empty() {
            return Ok(ask::nothing(&a.question, found.note.as_deref()));
        }
        let Some(llm) = &self.llm else {
            return Err(RagError::Unavailable("this fleet runs no LLM (no persona has a model-backed brain)".into()));
        };
        let job = GenerateJob {
            req: ask::request(&a.question, &sources, a.max_tokens),
            purpose: "ask".into(),
            persona: None,
            stream: None,
        };
        let g = self
            .rt
            .block_on(async {
                ractor::call_t!(llm, |reply| LlmMsg::Generate { job, reply }, ASK_CALL.as_millis() as u64)
            })
            .map_err(|e| RagError::Unavailable(format!("LLM worker: {e}")))?
            .map_err(|e| RagError::Unavailable(e.to_string()))?;
        Ok(ask::answer(&g, &sources, found.note.as_deref()))
    }
}

/// The path `p` names, resolved, when it may be indexed: under `roots` when there are roots to
/// keep to. A path outside them is refused before the file system is asked (from its lexically
/// normalised form), so the answer is the same whether it exists or not; then again once
/// resolved, so a link inside a root does not lead out of it.
fn resolve(p: &str, roots: Option<&[PathBuf]>) -> Result<PathBuf, RagError> {
    let outside = |roots: &[PathBuf]| {
        RagError::Forbidden(if roots.is_empty() {
            format!("{p}: this admin API is not on loopback and `[index] allowed_roots` is empty")
        } else {
            let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
            format!("{p}: outside the allowed roots ({})", roots.join(", "))
        })
    };
    if let Some(roots) = roots {
        let lexical = lexically_absolute(Path::new(p));
        if !roots.iter().any(|root| lexical.starts_with(root) || within(&lexical, root)) {
            return Err(outside(roots));
        }
    }
    let abs = Path::new(p).canonicalize().map_err(|e| RagError::Invalid(format!("{p}: {e}")))?;
    match roots {
        Some(roots) if !roots.iter().any(|root| within(&abs, root)) => Err(outside(roots)),
        _ => Ok(abs),
    }
}

/// `p` made absolute (from the working directory), with `.` and `..` resolved by name alone.
fn lexically_absolute(p: &Path) -> PathBuf {
    let joined = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(p) };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether `path` (absolute, resolved) is `root` or inside it.
fn within(path: &Path, root: &Path) -> bool {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    path.starts_with(root)
}

fn rag_error(e: IndexError) -> RagError {
    match e {
        IndexError::Request(m) => RagError::Invalid(m),
        IndexError::Path { .. } => RagError::Invalid(e.to_string()),
        IndexError::Embed(_) => RagError::Unavailable(e.to_string()),
        _ => RagError::Failed(e.to_string()),
    }
}

/// The embedding model as the index needs it, served by the fleet's embedding worker: the
/// index's thread waits for the worker's answers.
struct WorkerEmbed {
    worker: ActorRef<EmbedMsg>,
    rt: tokio::runtime::Handle,
    name: String,
    tokens: Tokens,
}

impl Embed for WorkerEmbed {
    fn model(&self) -> String {
        self.name.clone()
    }

    fn window(&self) -> usize {
        self.tokens.window()
    }

    fn count_tokens(&self, text: &str) -> usize {
        // A text the tokenizer cannot read counts as too long, so it is cut.
        self.tokens.count(text).unwrap_or(usize::MAX)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        self.rt.block_on(embed_at(&self.worker, texts, Urgency::Normal))
    }

    fn batch(&self) -> usize {
        WORKER_CALL_TEXTS
    }
}

/// The model, with the vector of a search's query already had (embedded by the actor).
struct Prepared<'a> {
    model: &'a WorkerEmbed,
    query: &'a str,
    vector: &'a Result<Vec<f32>, String>,
}

impl Embed for Prepared<'_> {
    fn model(&self) -> String {
        self.model.model()
    }

    fn window(&self) -> usize {
        self.model.window()
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.model.count_tokens(text)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        match texts {
            [t] if *t == self.query => self.vector.clone().map(|v| vec![v]),
            _ => self.model.embed(texts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_outside_the_roots_is_refused_alike_whether_it_exists_or_not() {
        let root = std::env::temp_dir().join("mindfleet-index-root");
        let roots = [root.clone()];
        let refusal = |p: &str| match resolve(p, Some(&roots)) {
            Err(RagError::Forbidden(m)) => m.replacen(p, "PATH", 1),
            r => panic!("{p}: {r:?}"),
        };
        let existing = refusal("/etc");
        assert_eq!(refusal("/no/such/path/at/all"), existing);
        assert_eq!(refusal(&format!("{}/../etc", root.display())), existing);
        assert!(existing.contains("outside the allowed roots"), "{existing}");
        // Inside a root, a missing path may be told apart: it is the operator's to see.
        match resolve(&format!("{}/missing.md", root.display()), Some(&roots)) {
            Err(RagError::Invalid(m)) => assert!(m.contains("missing.md"), "{m}"),
            r => panic!("{r:?}"),
        }
        // Without roots to keep to (a loopback admin, the CLI), any readable path goes.
        assert!(resolve("/etc", None).is_ok());
    }

    #[test]
    fn lexical_normalisation_resolves_dots_by_name() {
        assert_eq!(lexically_absolute(Path::new("/a/b/../c/./d")), PathBuf::from("/a/c/d"));
        assert_eq!(lexically_absolute(Path::new("/../../etc")), PathBuf::from("/etc"));
        assert!(lexically_absolute(Path::new("x")).is_absolute());
    }
}
