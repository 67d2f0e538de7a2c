//! The `LlmWorker` actor: the fleet's LLM, served to every persona at once, from a backend it
//! owns: the local model ([`mindfleet_models::llama::Llm`]) or an OpenAI-compatible endpoint
//! ([`openai`]).
//!
//! A loader thread opens the model (rewriting a Q4_1 file as Q8_0 once, see
//! [`mindfleet_models::llama::runnable`]) and then serves the requests that come through one
//! crossbeam channel (requests sent while the model loads wait in it):
//!
//! - a local model on one thread, with continuous batching ([`mindfleet_models::llama::batch`]):
//!   up to `slots` requests are answered together, one forward pass for all of them, joining and
//!   leaving between passes; the others wait, in order, for a place and for room for their keys
//!   and values (`kv_bytes`);
//! - an endpoint on `slots` threads, one request each.
//!
//! Each request's answer is streamed to the caller's [`TokenStream`](mindfleet_core::llm::TokenStream)
//! as it is generated and sent to the caller from the serving thread, which reports what it cost
//! to the actor, keeper of the fleet's cost report. The slots are the worker's side of the
//! scheduler's inference slots: personas ask for a model call only while they hold an inference
//! grant, and `[scheduler] inference_slots` (by default `[llm] max_batch` for a local model)
//! sizes both.
//!
//! A fill ([`LlmMsg::Fill`]: a tool's arguments) is decoded by a local model constrained to the
//! job's JSON Schema ([`mindfleet_models::llama::fill`]): the model decides the values, the
//! JSON text around them is written for it, and the value validates. An endpoint is asked for
//! structured output and its answer checked ([`openai`]). A schema with a construct not filled
//! is refused with [`LlmFailure::Schema`], naming the field.
//!
//! If the model cannot be loaded the worker keeps running, degraded: every request is refused
//! with [`LlmFailure::Degraded`], naming the file and what is wrong.
//!
//! A fleet's worker ([`spawn_for`]) decodes the personas' replies and lessons (purposes
//! `reply` and `evaluate`) as `[llm]` says ([`Decoding`], see [`decode_as_configured`]): their
//! most tokens, and what keeps them from looping or echoing the message they answer. Other
//! requests are answered as they ask.

pub mod openai;
pub mod tool_turn;

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use mindfleet_core::config::Decoding;
use mindfleet_core::llm::{
    ChatMessage, Classification, ClassifyJob, FillJob, Filled, GenerateJob, GenerateRequest, Generation, LlmFailure,
    LlmInfo, LlmMsg, LlmStats, ToolTurn, ToolTurnJob,
};
use mindfleet_core::private::Private;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};

use self::openai::{OpenAi, OpenAiConfig};
use crate::scheduler::nearest_rank;
use mindfleet_core::llm::{Batching, TokenStream};
use mindfleet_models::llama::adapter::AdapterCache;
use mindfleet_models::llama::batch::{BatchConfig, BatchStats, Engine, Outcome, Ready, STEP_TOKENS, Work};
use mindfleet_models::llama::{Llm, LlmConfig, LlmError};

/// Times to first token kept for the p50/p99 in stats.
const TTFT_KEPT: usize = 1024;

#[derive(Debug, Clone)]
pub struct LlmArgs {
    pub backend: BackendArgs,
    /// Requests served at once (at least 1): a local model's most requests in one pass.
    pub slots: usize,
}

/// The bound on the adapters a local model holds for its requests (read again when dropped).
pub const ADAPTER_BYTES: usize = 64 << 20;

/// The bound on a local model's keys and values by default (`[llm] kv_memory_mb`).
pub const DEFAULT_KV_BYTES: usize = 512 << 20;

impl LlmArgs {
    /// A GGUF file run in process with the default [`LlmConfig`], `slots` requests batched,
    /// prompts' beginnings reused.
    pub fn local(model: PathBuf, slots: usize) -> LlmArgs {
        let backend =
            BackendArgs::Local { model, config: LlmConfig::default(), kv_bytes: DEFAULT_KV_BYTES, prefix_reuse: true };
        LlmArgs { backend, slots }
    }
}

/// Where the worker's model runs.
#[derive(Debug, Clone)]
pub enum BackendArgs {
    /// In process: a GGUF file (a Q4_1 one is run as its Q8_0 rewrite), its keys and values
    /// bounded by `kv_bytes`.
    Local { model: PathBuf, config: LlmConfig, kv_bytes: usize, prefix_reuse: bool },
    /// Behind an OpenAI-compatible endpoint.
    OpenAi(OpenAiConfig),
}

/// What the slots of an endpoint run requests on.
pub trait Backend: Send + Sync {
    fn generate(
        &self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, LlmError>;
    fn classify(&self, messages: &[ChatMessage], labels: &[&str]) -> Result<Classification, LlmError>;
    fn fill(&self, messages: &[ChatMessage], schema: &serde_json::Value, max_tokens: usize)
    -> Result<Filled, LlmError>;
    /// A turn of native tool calling (`tools` in the request).
    fn tool_turn(&self, job: &ToolTurnJob) -> Result<ToolTurn, LlmError>;
}

impl Backend for OpenAi {
    fn generate(
        &self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, LlmError> {
        OpenAi::generate(self, req, on_token)
    }

    fn classify(&self, messages: &[ChatMessage], labels: &[&str]) -> Result<Classification, LlmError> {
        OpenAi::classify(self, messages, labels)
    }

    fn fill(
        &self,
        messages: &[ChatMessage],
        schema: &serde_json::Value,
        max_tokens: usize,
    ) -> Result<Filled, LlmError> {
        OpenAi::fill(self, messages, schema, max_tokens)
    }

    fn tool_turn(&self, job: &ToolTurnJob) -> Result<ToolTurn, LlmError> {
        OpenAi::tool_turn(self, job)
    }
}

pub struct LlmWorker;

/// What the worker starts with: its backend and slots, and how it decodes the personas'
/// generations (none: every request as it asks).
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub llm: LlmArgs,
    pub decoding: Option<Decoding>,
}

/// A worker that answers every request as it asks.
pub async fn spawn(args: LlmArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<LlmMsg>, SpawnErr> {
    start(WorkerArgs { llm: args, decoding: None }, supervisor).await
}

/// A fleet's worker: the personas' replies and lessons decoded as `decoding` says
/// ([`decode_as_configured`]), other requests as they ask.
pub async fn spawn_for(
    args: LlmArgs,
    decoding: Decoding,
    supervisor: Option<ActorCell>,
) -> Result<ActorRef<LlmMsg>, SpawnErr> {
    start(WorkerArgs { llm: args, decoding: Some(decoding) }, supervisor).await
}

async fn start(args: WorkerArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<LlmMsg>, SpawnErr> {
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, LlmWorker, args, s).await?,
        None => Actor::spawn(None, LlmWorker, args).await?,
    };
    Ok(actor)
}

/// A generation as the worker runs it for `purpose`: a persona's reply (`reply`) or lesson
/// (`evaluate`) gets `decoding`'s most tokens, and its repetition settings unless the request
/// set its own. Conversation memory's observations (`observe`), a list of facts whose lines
/// share their beginnings, get only the stop before a line said again, within their own most
/// tokens. Any other purpose is left as asked.
pub fn decode_as_configured(decoding: &Decoding, purpose: &str, req: &mut GenerateRequest) {
    let max_tokens = match purpose {
        "reply" => decoding.reply_max_tokens,
        "evaluate" => decoding.lesson_max_tokens,
        "observe" => {
            if req.repetition.is_off() {
                req.repetition.stop_repeated_sentence = decoding.repetition.stop_repeated_sentence;
            }
            return;
        }
        _ => return,
    };
    req.max_tokens = max_tokens;
    if req.repetition.is_off() {
        req.repetition = decoding.repetition;
    }
}

/// What the loader and slot threads tell the actor. Only this module makes and opens these
/// (inside [`LlmMsg::Own`]), so no holder of the worker's ref can report a model loaded or
/// a request's cost.
enum Callback {
    /// The model is loaded (or failed to load).
    Loaded(Result<LlmInfo, String>),
    /// A request is done; what it cost, and the batch's figures after it (a local model).
    Done(Cost, Option<Box<Batching>>),
}

fn own(callback: Callback) -> LlmMsg {
    LlmMsg::Own(Private::new(callback))
}

/// What one inference cost.
#[derive(Debug, Clone, PartialEq, Default)]
struct Cost {
    purpose: String,
    persona: Option<String>,
    tokens_in: u64,
    tokens_out: u64,
    prompt_ms: f64,
    gen_ms: f64,
    ttft_ms: f64,
    ok: bool,
}

/// A request on its way to a slot.
enum Job {
    Generate(GenerateJob, RpcReplyPort<Result<Generation, LlmFailure>>),
    Classify(ClassifyJob, RpcReplyPort<Result<Classification, LlmFailure>>),
    Fill(FillJob, RpcReplyPort<Result<Filled, LlmFailure>>),
    /// An endpoint's only: a local model's turn is made of the requests above
    /// ([`tool_turn::local`]).
    ToolTurn(ToolTurnJob, RpcReplyPort<Result<ToolTurn, LlmFailure>>),
}

enum Status {
    Loading,
    Ready,
    Degraded(String),
}

pub struct LlmState {
    jobs: Option<Sender<Job>>,
    /// The model runs in process (not behind an endpoint).
    local: bool,
    status: Status,
    stats: LlmStats,
    batching: Option<Batching>,
    ttft: VecDeque<f64>,
    prompt_ms: f64,
    gen_ms: f64,
}

impl LlmState {
    fn send(&mut self, job: Job) {
        if let Status::Degraded(e) = &self.status {
            fail(job, LlmFailure::Degraded(e.clone()));
            self.stats.requests += 1;
            self.stats.failures += 1;
            return;
        }
        let Some(tx) = self.jobs.as_ref() else { return fail(job, LlmFailure::Stopped) };
        match tx.send(job) {
            Ok(()) => self.stats.in_flight += 1,
            Err(crossbeam_channel::SendError(job)) => fail(job, LlmFailure::Stopped),
        }
    }

    fn account(&mut self, c: Cost) {
        let s = &mut self.stats;
        s.in_flight = s.in_flight.saturating_sub(1);
        s.requests += 1;
        if !c.ok {
            s.failures += 1;
            return;
        }
        s.tokens_in += c.tokens_in;
        s.tokens_out += c.tokens_out;
        self.prompt_ms += c.prompt_ms;
        self.gen_ms += c.gen_ms;
        if c.ttft_ms > 0.0 {
            if self.ttft.len() == TTFT_KEPT {
                self.ttft.pop_front();
            }
            self.ttft.push_back(c.ttft_ms);
        }
        let p = s.by_purpose.entry(c.purpose).or_default();
        p.calls += 1;
        p.tokens_in += c.tokens_in;
        p.tokens_out += c.tokens_out;
        p.ms += c.prompt_ms + c.gen_ms;
    }

    fn stats(&self) -> LlmStats {
        let mut s = self.stats.clone();
        s.status = match &self.status {
            Status::Loading => "loading".into(),
            Status::Ready => "ready".into(),
            Status::Degraded(e) => {
                s.error = Some(e.clone());
                "degraded".into()
            }
        };
        let rate = |tokens: u64, ms: f64| if ms > 0.0 { tokens as f64 / (ms / 1e3) } else { 0.0 };
        s.prompt_tok_s = rate(s.tokens_in, self.prompt_ms);
        s.gen_tok_s = rate(s.tokens_out, self.gen_ms);
        let mut t: Vec<f64> = self.ttft.iter().copied().collect();
        t.sort_by(f64::total_cmp);
        s.ttft_p50_ms = nearest_rank(&t, 0.50).unwrap_or(0.0);
        s.ttft_p99_ms = nearest_rank(&t, 0.99).unwrap_or(0.0);
        s.batching = self.batching.clone();
        s
    }
}

fn fail(job: Job, why: LlmFailure) {
    match job {
        Job::Generate(_, reply) => {
            let _ = reply.send(Err(why));
        }
        Job::Classify(_, reply) => {
            let _ = reply.send(Err(why));
        }
        Job::Fill(_, reply) => {
            let _ = reply.send(Err(why));
        }
        Job::ToolTurn(_, reply) => {
            let _ = reply.send(Err(why));
        }
    }
}

impl Actor for LlmWorker {
    type Msg = LlmMsg;
    type State = LlmState;
    type Arguments = WorkerArgs;

    async fn pre_start(&self, myself: ActorRef<LlmMsg>, args: WorkerArgs) -> Result<LlmState, ActorProcessingErr> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let WorkerArgs { llm: args, decoding } = args;
        let local = matches!(args.backend, BackendArgs::Local { .. });
        let path = match &args.backend {
            BackendArgs::Local { model, .. } => model.display().to_string(),
            BackendArgs::OpenAi(c) => c.url.clone(),
        };
        let stats = LlmStats {
            status: "loading".into(),
            slots: args.slots.max(1),
            model: LlmInfo { path, ..Default::default() },
            ..Default::default()
        };
        std::thread::Builder::new()
            .name("llm-loader".into())
            .spawn(move || load_and_serve(args, decoding, rx, myself))?;
        Ok(LlmState {
            jobs: Some(tx),
            local,
            status: Status::Loading,
            stats,
            batching: None,
            ttft: VecDeque::with_capacity(TTFT_KEPT),
            prompt_ms: 0.0,
            gen_ms: 0.0,
        })
    }

    async fn handle(&self, me: ActorRef<LlmMsg>, msg: LlmMsg, st: &mut LlmState) -> Result<(), ActorProcessingErr> {
        match msg {
            LlmMsg::Generate { job, reply } => st.send(Job::Generate(job, reply)),
            LlmMsg::Classify { job, reply } => st.send(Job::Classify(job, reply)),
            LlmMsg::Fill { job, reply } => st.send(Job::Fill(job, reply)),
            LlmMsg::ToolTurn { job, reply } if st.local => {
                // Its parts come back through the mailbox: answered off the actor's loop.
                tokio::spawn(async move {
                    let _ = reply.send(tool_turn::local(me, job).await);
                });
            }
            LlmMsg::ToolTurn { job, reply } => st.send(Job::ToolTurn(job, reply)),
            LlmMsg::Stats(reply) => {
                let _ = reply.send(st.stats());
            }
            LlmMsg::Own(own) => match own.open::<Callback>() {
                Ok(Callback::Loaded(Ok(info))) => {
                    tracing::info!(model = %info.model, path = %info.path, load_s = info.load_s, threads = info.threads, "LLM ready");
                    st.stats.model = info;
                    st.status = Status::Ready;
                }
                Ok(Callback::Loaded(Err(e))) => {
                    tracing::error!(error = %e, "LLM unavailable: model-backed brains fall back to rules");
                    st.status = Status::Degraded(e);
                }
                Ok(Callback::Done(cost, batching)) => {
                    st.account(cost);
                    if let Some(b) = batching {
                        st.batching = Some(*b);
                    }
                }
                Err(_) => tracing::warn!("LLM worker: dropped a message that is not its own"),
            },
        }
        Ok(())
    }

    async fn post_stop(&self, _me: ActorRef<LlmMsg>, st: &mut LlmState) -> Result<(), ActorProcessingErr> {
        // Closing the channel ends the slots once their current requests are done.
        st.jobs = None;
        Ok(())
    }
}

/// Loads the model (or sets up the endpoint's client), then serves; on failure refuses what
/// was queued.
fn load_and_serve(args: LlmArgs, decoding: Option<Decoding>, jobs: Receiver<Job>, actor: ActorRef<LlmMsg>) {
    let started = Instant::now();
    let slots = args.slots.max(1);
    let loaded: Result<(Served, LlmInfo), LlmError> = match args.backend {
        BackendArgs::Local { model, config, kv_bytes, prefix_reuse } => mindfleet_models::llama::runnable(&model)
            .and_then(|file| {
                let llm = Llm::load_with(&file, config)?;
                let info = LlmInfo {
                    runs_on: llm.path(),
                    model: file_name(llm.file()),
                    path: llm.file().display().to_string(),
                    threads: llm.threads(),
                    context: llm.context(),
                    load_s: started.elapsed().as_secs_f64(),
                };
                let batch = BatchConfig { max_batch: slots, kv_bytes, prefix_reuse, step_tokens: STEP_TOKENS };
                Ok((Served::Local(Box::new(llm), batch), info))
            }),
        BackendArgs::OpenAi(config) => OpenAi::new(config).map(|client| {
            let c = client.config();
            let info = LlmInfo {
                model: c.model.clone(),
                path: c.url.clone(),
                runs_on: "openai endpoint".into(),
                ..Default::default()
            };
            (Served::Endpoint(Arc::new(client)), info)
        }),
    };
    let (served, info) = match loaded {
        Ok(loaded) => loaded,
        Err(e) => {
            let e = e.to_string();
            let _ = actor.cast(own(Callback::Loaded(Err(e.clone()))));
            // Requests sent before the actor heard of the failure.
            while let Ok(job) = jobs.recv() {
                let _ = actor.cast(own(Callback::Done(Cost::default(), None)));
                fail(job, LlmFailure::Degraded(e.clone()));
            }
            return;
        }
    };
    let _ = actor.cast(own(Callback::Loaded(Ok(info))));
    match served {
        Served::Local(llm, batch) => serve_batched(&llm, batch, decoding.as_ref(), &jobs, &actor),
        Served::Endpoint(backend) => {
            let threads: Vec<_> = (0..slots)
                .map(|i| {
                    let (backend, jobs, actor) = (backend.clone(), jobs.clone(), actor.clone());
                    std::thread::Builder::new()
                        .name(format!("llm-slot-{i}"))
                        .spawn(move || serve(backend.as_ref(), decoding.as_ref(), &jobs, &actor))
                })
                .collect();
            for t in threads.into_iter().flatten() {
                let _ = t.join();
            }
        }
    }
}

/// What serves the requests once loaded.
enum Served {
    Local(Box<Llm>, BatchConfig),
    Endpoint(Arc<dyn Backend>),
}

/// A request in a local model's batch: who asked, and what for.
struct Asked {
    purpose: String,
    persona: Option<String>,
    received: Instant,
    reply: Reply,
}

enum Reply {
    Generate(RpcReplyPort<Result<Generation, LlmFailure>>),
    Classify(RpcReplyPort<Result<Classification, LlmFailure>>),
    Fill(RpcReplyPort<Result<Filled, LlmFailure>>),
}

/// A local model's requests, batched on this thread until the channel closes and the last
/// request in the batch is answered.
fn serve_batched(
    llm: &Llm,
    batch: BatchConfig,
    decoding: Option<&Decoding>,
    jobs: &Receiver<Job>,
    actor: &ActorRef<LlmMsg>,
) {
    mindfleet_models::lower_model_thread_priority();
    let mut engine: Engine<'_, Asked> = llm.engine(batch);
    let mut waiting: VecDeque<Ready<'_, Asked>> = VecDeque::new();
    let mut adapters = AdapterCache::new(ADAPTER_BYTES);
    let mut open = true;
    loop {
        // Wait for a request when there is nothing to do; take every request that came.
        if engine.is_empty() && waiting.is_empty() {
            match jobs.recv() {
                Ok(job) => take(&engine, &mut adapters, decoding, job, &mut waiting, actor),
                Err(_) => return,
            }
        }
        while open {
            match jobs.try_recv() {
                Ok(job) => take(&engine, &mut adapters, decoding, job, &mut waiting, actor),
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => open = false,
            }
        }
        while waiting.front().is_some_and(|r| engine.has_room(r)) {
            engine.admit(waiting.pop_front().expect("checked"));
        }
        let done = engine.step();
        let last = done.len();
        for (n, (asked, outcome)) in done.into_iter().enumerate() {
            // The batch's figures go with the last answer of the pass.
            let figures = (n + 1 == last).then(|| Box::new(batching(&engine, waiting.len())));
            answer(asked, outcome, figures, actor);
        }
        if !open && engine.is_empty() && waiting.is_empty() {
            return;
        }
    }
}

/// Tokenizes a request into the line for the batch, with the adapter it asks for; a bad one
/// (or one whose adapter cannot be read) is answered at once.
fn take<'a>(
    engine: &Engine<'a, Asked>,
    adapters: &mut AdapterCache,
    decoding: Option<&Decoding>,
    job: Job,
    waiting: &mut VecDeque<Ready<'a, Asked>>,
    actor: &ActorRef<LlmMsg>,
) {
    let received = Instant::now();
    let mut adapter = None;
    let (work, asked, on_token): (_, _, mindfleet_models::llama::batch::OnToken<'a>) = match job {
        Job::Generate(GenerateJob { mut req, purpose, persona, stream }, reply) => {
            if let Some(d) = decoding {
                decode_as_configured(d, &purpose, &mut req);
            }
            let asked = Asked { purpose, persona, received, reply: Reply::Generate(reply) };
            if let Some(c) = &req.adapter {
                match adapters.get(&c.path, c.alpha) {
                    Ok(a) => adapter = Some(a),
                    Err(e) => {
                        let e = LlmError::Request(format!("adapter {}: {e}", c.id));
                        return answer(asked, Outcome::Generated(Err(e)), None, actor);
                    }
                }
            }
            (Work::Generate(req), asked, Box::new(stream_to(stream)))
        }
        Job::Classify(ClassifyJob { messages, labels, purpose, persona }, reply) => (
            Work::Classify { messages, labels },
            Asked { purpose, persona, received, reply: Reply::Classify(reply) },
            Box::new(|_: &str| ControlFlow::Continue(())),
        ),
        Job::Fill(FillJob { messages, schema, purpose, persona, max_tokens }, reply) => (
            Work::Fill { messages, schema, max_tokens },
            Asked { purpose, persona, received, reply: Reply::Fill(reply) },
            Box::new(|_: &str| ControlFlow::Continue(())),
        ),
        Job::ToolTurn(_, reply) => {
            // Never sent here: the actor makes a local model's turn of the requests above.
            let _ = reply.send(Err(LlmFailure::Failed("a local model's tool turn is made of its parts".into())));
            return;
        }
    };
    match engine.prepare(work, asked, on_token) {
        Ok(ready) => waiting.push_back(match adapter {
            Some(a) => ready.with_adapter(a),
            None => ready,
        }),
        Err(refused) => {
            let (asked, outcome) = *refused;
            answer(asked, outcome, None, actor)
        }
    }
}

/// Reports what a request cost, then answers it (so what its caller asks next counts it).
fn answer(asked: Asked, outcome: Outcome, figures: Option<Box<Batching>>, actor: &ActorRef<LlmMsg>) {
    let Asked { purpose, persona, received, reply } = asked;
    let failed = Cost { purpose: purpose.clone(), persona: persona.clone(), ..Default::default() };
    match (reply, outcome) {
        (Reply::Generate(reply), Outcome::Generated(out)) => {
            let cost = out.as_ref().map_or(failed, |g| generated(purpose, persona, g));
            let _ = actor.cast(own(Callback::Done(cost, figures)));
            let _ = reply.send(out.map_err(failure));
        }
        (Reply::Classify(reply), Outcome::Classified(out)) => {
            let cost = out.as_ref().map_or(failed, |c| classified(purpose, persona, c, received));
            let _ = actor.cast(own(Callback::Done(cost, figures)));
            let _ = reply.send(out.map_err(failure));
        }
        (Reply::Fill(reply), Outcome::Filled(out)) => {
            let cost = out.as_ref().map_or(failed, |f| filled(purpose, persona, f));
            let _ = actor.cast(own(Callback::Done(cost, figures)));
            let _ = reply.send(out.map_err(failure));
        }
        (reply, _) => {
            tracing::error!("LLM worker: a request was answered with another kind of answer");
            let _ = actor.cast(own(Callback::Done(failed, figures)));
            let why = LlmFailure::Failed("answered with another kind of answer".into());
            match reply {
                Reply::Generate(r) => drop(r.send(Err(why))),
                Reply::Classify(r) => drop(r.send(Err(why))),
                Reply::Fill(r) => drop(r.send(Err(why))),
            }
        }
    }
}

/// The batch's figures for the dump.
fn batching(engine: &Engine<'_, Asked>, waiting: usize) -> Batching {
    let BatchStats {
        passes,
        batched,
        tokens,
        busy_s,
        prompt_busy_s,
        prompt_tokens,
        reused_tokens,
        active,
        kv_reserved,
        kv_prefixes,
        kv_peak,
        prefixes,
    } = engine.stats();
    let config = engine.config();
    Batching {
        max_batch: config.max_batch,
        passes,
        mean_batch: if passes > 0 { batched as f64 / passes as f64 } else { 0.0 },
        model_tok_s: if busy_s > 0.0 { tokens as f64 / busy_s } else { 0.0 },
        prompt_pass_s: prompt_busy_s,
        generation_pass_s: busy_s - prompt_busy_s,
        prompt_tokens,
        reused_tokens,
        prefix_hit_rate: if prompt_tokens > 0 { reused_tokens as f64 / prompt_tokens as f64 } else { 0.0 },
        prefixes,
        active,
        waiting,
        kv_bytes: (kv_reserved + kv_prefixes) as u64,
        kv_peak_bytes: kv_peak as u64,
        kv_bound_bytes: config.kv_bytes as u64,
    }
}

fn generated(purpose: String, persona: Option<String>, g: &Generation) -> Cost {
    Cost {
        purpose,
        persona,
        tokens_in: g.tokens_in as u64,
        tokens_out: g.tokens_out as u64,
        prompt_ms: g.prompt_ms,
        gen_ms: g.gen_ms,
        ttft_ms: g.ttft_ms,
        ok: true,
    }
}

fn classified(purpose: String, persona: Option<String>, c: &Classification, received: Instant) -> Cost {
    Cost {
        purpose,
        persona,
        tokens_in: c.tokens_in as u64,
        tokens_out: c.scores.iter().map(|s| s.tokens as u64).sum(),
        prompt_ms: received.elapsed().as_secs_f64() * 1e3,
        ok: true,
        ..Default::default()
    }
}

fn turned(purpose: String, persona: Option<String>, t: &ToolTurn) -> Cost {
    Cost {
        purpose,
        persona,
        tokens_in: t.tokens_in as u64,
        tokens_out: t.tokens_out as u64,
        gen_ms: t.ms,
        ok: true,
        ..Default::default()
    }
}

fn filled(purpose: String, persona: Option<String>, f: &Filled) -> Cost {
    Cost {
        purpose,
        persona,
        tokens_in: f.tokens_in as u64,
        tokens_out: f.tokens_out as u64,
        prompt_ms: f.prompt_ms,
        gen_ms: f.gen_ms,
        ok: true,
        ..Default::default()
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

fn failure(e: LlmError) -> LlmFailure {
    match e {
        LlmError::Schema(e) => LlmFailure::Schema(e.to_string()),
        e => LlmFailure::Failed(e.to_string()),
    }
}

/// Sends each piece of an answer to the caller's stream, if any; a stream whose receiver is gone
/// cancels the generation.
fn stream_to(stream: Option<TokenStream>) -> impl FnMut(&str) -> ControlFlow<()> {
    move |piece| match &stream {
        Some(s) if s.send(piece.to_string()).is_err() => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    }
}

/// One slot of an endpoint: runs requests until the channel closes.
fn serve(backend: &dyn Backend, decoding: Option<&Decoding>, jobs: &Receiver<Job>, actor: &ActorRef<LlmMsg>) {
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Generate(mut job, reply) => {
                if let Some(d) = decoding {
                    decode_as_configured(d, &job.purpose, &mut job.req);
                }
                let out = backend.generate(&job.req, &mut stream_to(job.stream));
                let cost = match &out {
                    Ok(g) => generated(job.purpose, job.persona, g),
                    Err(_) => Cost { purpose: job.purpose, persona: job.persona, ..Default::default() },
                };
                // The cost is counted before the caller hears the answer, so what the caller
                // asks next (stats, a dump) includes it.
                let _ = actor.cast(own(Callback::Done(cost, None)));
                let _ = reply.send(out.map_err(failure));
            }
            Job::Classify(ClassifyJob { messages, labels, purpose, persona }, reply) => {
                let t = Instant::now();
                let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
                let out = backend.classify(&messages, &labels);
                let cost = match &out {
                    Ok(c) => classified(purpose, persona, c, t),
                    Err(_) => Cost { purpose, persona, ..Default::default() },
                };
                let _ = actor.cast(own(Callback::Done(cost, None)));
                let _ = reply.send(out.map_err(failure));
            }
            Job::Fill(FillJob { messages, schema, purpose, persona, max_tokens }, reply) => {
                let out = backend.fill(&messages, &schema, max_tokens);
                let cost = match &out {
                    Ok(f) => filled(purpose, persona, f),
                    Err(_) => Cost { purpose, persona, ..Default::default() },
                };
                let _ = actor.cast(own(Callback::Done(cost, None)));
                let _ = reply.send(out.map_err(failure));
            }
            Job::ToolTurn(job, reply) => {
                let out = backend.tool_turn(&job);
                let cost = match &out {
                    Ok(t) => turned(job.purpose, job.persona, t),
                    Err(_) => Cost { purpose: job.purpose, persona: job.persona, ..Default::default() },
                };
                let _ = actor.cast(own(Callback::Done(cost, None)));
                let _ = reply.send(out.map_err(failure));
            }
        }
    }
}

#[cfg(test)]
mod tests;
