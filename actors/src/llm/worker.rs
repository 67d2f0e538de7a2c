//! The `LlmWorker` actor: the fleet's LLM, served to every persona from a fixed number of
//! generation slots.
//!
//! A loader thread opens the model (rewriting a Q4_1 file as Q8_0 once, see
//! [`super::runnable`]) and then starts `slots` threads that share it, each taking requests from
//! one crossbeam channel, with a KV cache per request. A slot streams the answer to the caller's
//! [`TokenStream`] as it is generated, answers the caller itself, and reports what the request cost
//! to the actor, which keeps the fleet's cost report. Requests sent while the model loads wait in
//! the channel. The slots are the worker's side of the scheduler's inference slots: personas ask
//! for a model call only while they hold an inference grant, and `[scheduler] inference_slots`
//! sizes both.
//!
//! If the model cannot be loaded the worker keeps running, degraded: every request is refused
//! with [`LlmFailure::Degraded`], naming the file and what is wrong.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use mindfleet_core::llm::{
    ChatMessage, Classification, ClassifyJob, GenerateJob, GenerateRequest, Generation, LlmFailure, LlmInfo, LlmMsg,
    LlmStats,
};
use mindfleet_core::private::Private;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};

use super::openai::{OpenAi, OpenAiConfig};
use crate::scheduler::nearest_rank;
use mindfleet_models::llm::{Llm, LlmConfig, LlmError};

/// Times to first token kept for the p50/p99 in stats.
const TTFT_KEPT: usize = 1024;

#[derive(Debug, Clone)]
pub struct LlmArgs {
    pub backend: BackendArgs,
    /// Requests served at once (at least 1).
    pub slots: usize,
}

impl LlmArgs {
    /// A GGUF file run in process with the default [`LlmConfig`].
    pub fn local(model: PathBuf, slots: usize) -> LlmArgs {
        LlmArgs { backend: BackendArgs::Local { model, config: LlmConfig::default() }, slots }
    }
}

/// Where the worker's model runs.
#[derive(Debug, Clone)]
pub enum BackendArgs {
    /// In process: a GGUF file (a Q4_1 one is run as its Q8_0 rewrite).
    Local { model: PathBuf, config: LlmConfig },
    /// Behind an OpenAI-compatible endpoint.
    OpenAi(OpenAiConfig),
}

/// What the slots run requests on: the same calls, accounted the same way, whichever backend
/// answers them.
pub trait Backend: Send + Sync {
    fn generate(
        &self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, LlmError>;
    fn classify(&self, messages: &[ChatMessage], labels: &[&str]) -> Result<Classification, LlmError>;
}

impl Backend for Llm {
    fn generate(
        &self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, LlmError> {
        Llm::generate(self, req, on_token)
    }

    fn classify(&self, messages: &[ChatMessage], labels: &[&str]) -> Result<Classification, LlmError> {
        Llm::classify(self, messages, labels)
    }
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
}

pub struct LlmWorker;

pub async fn spawn(args: LlmArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<LlmMsg>, SpawnErr> {
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, LlmWorker, args, s).await?,
        None => Actor::spawn(None, LlmWorker, args).await?,
    };
    Ok(actor)
}

/// What the loader and slot threads tell the actor. Only this module makes and opens these
/// (inside [`LlmMsg::Own`]), so no holder of the worker's ref can report a model loaded or
/// a request's cost.
enum Callback {
    /// The model is loaded (or failed to load).
    Loaded(Result<LlmInfo, String>),
    /// A request is done; what it cost.
    Done(Cost),
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
}

enum Status {
    Loading,
    Ready,
    Degraded(String),
}

pub struct LlmState {
    jobs: Option<Sender<Job>>,
    status: Status,
    stats: LlmStats,
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
    }
}

impl Actor for LlmWorker {
    type Msg = LlmMsg;
    type State = LlmState;
    type Arguments = LlmArgs;

    async fn pre_start(&self, myself: ActorRef<LlmMsg>, args: LlmArgs) -> Result<LlmState, ActorProcessingErr> {
        let (tx, rx) = crossbeam_channel::unbounded();
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
        std::thread::Builder::new().name("llm-loader".into()).spawn(move || load_and_serve(args, rx, myself))?;
        Ok(LlmState {
            jobs: Some(tx),
            status: Status::Loading,
            stats,
            ttft: VecDeque::with_capacity(TTFT_KEPT),
            prompt_ms: 0.0,
            gen_ms: 0.0,
        })
    }

    async fn handle(&self, _me: ActorRef<LlmMsg>, msg: LlmMsg, st: &mut LlmState) -> Result<(), ActorProcessingErr> {
        match msg {
            LlmMsg::Generate { job, reply } => st.send(Job::Generate(job, reply)),
            LlmMsg::Classify { job, reply } => st.send(Job::Classify(job, reply)),
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
                Ok(Callback::Done(cost)) => st.account(cost),
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

/// Loads the model (or sets up the endpoint's client), then runs the slots; on failure refuses
/// what was queued.
fn load_and_serve(args: LlmArgs, jobs: Receiver<Job>, actor: ActorRef<LlmMsg>) {
    let started = Instant::now();
    let loaded: Result<(Arc<dyn Backend>, LlmInfo), LlmError> = match args.backend {
        BackendArgs::Local { model, config } => mindfleet_models::llm::runnable(&model).and_then(|file| {
            let llm = Llm::load_with(&file, config)?;
            let info = LlmInfo {
                model: file_name(llm.file()),
                path: llm.file().display().to_string(),
                threads: llm.threads(),
                context: llm.context(),
                load_s: started.elapsed().as_secs_f64(),
            };
            Ok((Arc::new(llm) as Arc<dyn Backend>, info))
        }),
        BackendArgs::OpenAi(config) => OpenAi::new(config).map(|client| {
            let c = client.config();
            let info = LlmInfo { model: c.model.clone(), path: c.url.clone(), ..Default::default() };
            (Arc::new(client) as Arc<dyn Backend>, info)
        }),
    };
    let (backend, info) = match loaded {
        Ok(loaded) => loaded,
        Err(e) => {
            let e = e.to_string();
            let _ = actor.cast(own(Callback::Loaded(Err(e.clone()))));
            // Requests sent before the actor heard of the failure.
            while let Ok(job) = jobs.recv() {
                let _ = actor.cast(own(Callback::Done(Cost::default())));
                fail(job, LlmFailure::Degraded(e.clone()));
            }
            return;
        }
    };
    let _ = actor.cast(own(Callback::Loaded(Ok(info))));
    let slots: Vec<_> = (0..args.slots.max(1))
        .map(|i| {
            let (backend, jobs, actor) = (backend.clone(), jobs.clone(), actor.clone());
            std::thread::Builder::new()
                .name(format!("llm-slot-{i}"))
                .spawn(move || serve(backend.as_ref(), &jobs, &actor))
        })
        .collect();
    for s in slots.into_iter().flatten() {
        let _ = s.join();
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

fn failure(e: LlmError) -> LlmFailure {
    LlmFailure::Failed(e.to_string())
}

/// One slot: runs requests until the channel closes.
fn serve(backend: &dyn Backend, jobs: &Receiver<Job>, actor: &ActorRef<LlmMsg>) {
    mindfleet_models::lower_model_thread_priority();
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Generate(job, reply) => {
                let stream = job.stream;
                let out = backend.generate(&job.req, &mut |piece| match &stream {
                    Some(s) if s.send(piece.to_string()).is_err() => ControlFlow::Break(()),
                    _ => ControlFlow::Continue(()),
                });
                let cost = match &out {
                    Ok(g) => Cost {
                        purpose: job.purpose,
                        persona: job.persona,
                        tokens_in: g.tokens_in as u64,
                        tokens_out: g.tokens_out as u64,
                        prompt_ms: g.prompt_ms,
                        gen_ms: g.gen_ms,
                        ttft_ms: g.ttft_ms,
                        ok: true,
                    },
                    Err(_) => Cost { purpose: job.purpose, persona: job.persona, ..Default::default() },
                };
                // The cost is counted before the caller hears the answer, so what the caller
                // asks next (stats, a dump) includes it.
                let _ = actor.cast(own(Callback::Done(cost)));
                let _ = reply.send(out.map_err(failure));
            }
            Job::Classify(ClassifyJob { messages, labels, purpose, persona }, reply) => {
                let t = Instant::now();
                let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
                let out = backend.classify(&messages, &labels);
                let cost = match &out {
                    Ok(c) => Cost {
                        purpose,
                        persona,
                        tokens_in: c.tokens_in as u64,
                        tokens_out: c.scores.iter().map(|s| s.tokens as u64).sum(),
                        prompt_ms: t.elapsed().as_secs_f64() * 1e3,
                        ok: true,
                        ..Default::default()
                    },
                    Err(_) => Cost { purpose, persona, ..Default::default() },
                };
                let _ = actor.cast(own(Callback::Done(cost)));
                let _ = reply.send(out.map_err(failure));
            }
        }
    }
}

#[cfg(test)]
mod tests;
