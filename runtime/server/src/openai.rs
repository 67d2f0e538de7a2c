//! The fleet's LLM worker as an OpenAI-compatible chat API, so that other programs (and other
//! fleets' `openai` backends) can use the model this fleet runs:
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/chat/completions` | `messages`, `max_tokens` (or `max_completion_tokens`; default 256), `temperature` (absent or 0: greedy), `top_p`, `seed`, `stop` (a string or up to 4), `logprobs` + `top_logprobs` (at most 20), `stream` (server-sent events, with `stream_options.include_usage`) |
//! | `GET /v1/models` | the one model the worker runs |
//!
//! Other request fields are ignored, `model` included: the fleet has one LLM. Errors have
//! OpenAI's shape, `{"error": {"message", "type"}}`: 400 for a bad request, 503 when the fleet
//! has no LLM worker or it is degraded. Requests are accounted in the worker's cost report
//! under the purpose `api`.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use ractor::ActorRef;
use serde::Deserialize;
use serde_json::{Value, json};

use mindfleet_core::llm::{ChatMessage, GenerateJob, GenerateRequest, Generation, LlmFailure, LlmMsg, Sampling, Stop};
use mindfleet_core::time::now_us;

const DEFAULT_MAX_TOKENS: usize = 256;
const MAX_TOKENS: usize = 8192;
const MAX_TOP_LOGPROBS: usize = 20;
const MAX_STOPS: usize = 4;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let kind = if status == StatusCode::BAD_REQUEST { "invalid_request_error" } else { "server_error" };
    (status, axum::Json(json!({ "error": { "message": message.into(), "type": kind } }))).into_response()
}

fn no_llm() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "this fleet runs no LLM (no persona has brain = \"local\")")
}

fn failure(e: LlmFailure) -> Response {
    let status = match e {
        LlmFailure::Failed(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stops {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct ChatRequest {
    messages: Vec<ChatMessage>,
    max_tokens: Option<usize>,
    max_completion_tokens: Option<usize>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<u64>,
    stop: Option<Stops>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    logprobs: bool,
    top_logprobs: Option<usize>,
}

impl ChatRequest {
    /// The worker's request, or what is wrong with this one (naming the field).
    fn to_generate(&self) -> Result<GenerateRequest, String> {
        if self.messages.is_empty() {
            return Err("`messages` is empty".into());
        }
        let max_tokens = self.max_completion_tokens.or(self.max_tokens).unwrap_or(DEFAULT_MAX_TOKENS);
        if !(1..=MAX_TOKENS).contains(&max_tokens) {
            return Err(format!("`max_tokens` = {max_tokens} is out of range (1..={MAX_TOKENS})"));
        }
        let sampling = match self.temperature {
            None | Some(0.0) => Sampling::Greedy,
            Some(t) if t.is_finite() && t > 0.0 && t <= 2.0 => {
                let top_p = self.top_p.unwrap_or(1.0);
                if !(top_p > 0.0 && top_p <= 1.0) {
                    return Err(format!("`top_p` = {top_p} is not in (0, 1]"));
                }
                Sampling::TopP { temperature: t, top_p, seed: self.seed.unwrap_or_else(|| now_us().unsigned_abs()) }
            }
            Some(t) => return Err(format!("`temperature` = {t} is not in 0..=2")),
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stops::One(s)) => vec![s.clone()],
            Some(Stops::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOPS || stop.iter().any(String::is_empty) {
            return Err(format!("`stop`: at most {MAX_STOPS} strings, none empty"));
        }
        let top_logprobs = match (self.logprobs, self.top_logprobs) {
            (false, None) => None,
            (false, Some(_)) => return Err("`top_logprobs` needs `logprobs`: true".into()),
            (true, None) => Some(0),
            (true, Some(k)) if k <= MAX_TOP_LOGPROBS => Some(k),
            (true, Some(k)) => return Err(format!("`top_logprobs` = {k} is out of range (0..={MAX_TOP_LOGPROBS})")),
        };
        Ok(GenerateRequest { sampling, stop, top_logprobs, ..GenerateRequest::new(self.messages.clone(), max_tokens) })
    }
}

fn finish_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::MaxTokens => "length",
        Stop::Eos | Stop::StopString | Stop::Cancelled | Stop::Repetition => "stop",
    }
}

fn usage(g: &Generation) -> Value {
    json!({ "prompt_tokens": g.tokens_in, "completion_tokens": g.tokens_out, "total_tokens": g.tokens_in + g.tokens_out })
}

fn logprobs(g: &Generation) -> Value {
    if g.logprobs.is_empty() {
        return Value::Null;
    }
    let content: Vec<Value> = g
        .logprobs
        .iter()
        .map(|t| {
            let top: Vec<Value> = t.top.iter().map(|a| json!({ "token": a.token, "logprob": a.logprob })).collect();
            json!({ "token": t.token, "logprob": t.logprob, "top_logprobs": top })
        })
        .collect();
    json!({ "content": content })
}

/// The model's name, from the worker's stats.
async fn model_name(llm: &ActorRef<LlmMsg>) -> Option<String> {
    ractor::call!(llm, LlmMsg::Stats)
        .ok()
        .map(|s| if s.model.model.is_empty() { "local".into() } else { s.model.model })
}

/// `GET /v1/models`.
pub async fn models(llm: Option<ActorRef<LlmMsg>>) -> Response {
    let Some(llm) = llm else { return no_llm() };
    let Some(model) = model_name(&llm).await else { return no_llm() };
    axum::Json(json!({ "object": "list", "data": [{ "id": model, "object": "model", "owned_by": "mindfleet" }] }))
        .into_response()
}

/// `POST /v1/chat/completions` with the request's body.
pub async fn chat_completions(llm: Option<ActorRef<LlmMsg>>, body: &str) -> Response {
    let Some(llm) = llm else { return no_llm() };
    let chat: ChatRequest = match serde_json::from_str(body) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid chat request: {e}")),
    };
    let req = match chat.to_generate() {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let model = model_name(&llm).await.unwrap_or_else(|| "local".into());
    let id = format!("chatcmpl-{}", now_us());
    let created = now_us() / 1_000_000;
    let job = |stream| GenerateJob { req, purpose: "api".into(), persona: None, stream };
    if !chat.stream {
        return match ractor::call!(llm, |reply| LlmMsg::Generate { job: job(None), reply }) {
            Ok(Ok(g)) => axum::Json(json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{
                    "index": 0,
                    "message": { "role": "assistant", "content": g.text },
                    "logprobs": logprobs(&g),
                    "finish_reason": finish_reason(g.stop),
                }],
                "usage": usage(&g),
            }))
            .into_response(),
            Ok(Err(e)) => failure(e),
            Err(e) => failure(LlmFailure::Degraded(format!("LLM worker: {e}"))),
        };
    }

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = llm.clone();
    let answer = tokio::spawn(async move {
        ractor::call!(worker, |reply| LlmMsg::Generate { job: job(Some(tx)), reply })
            .unwrap_or_else(|e| Err(LlmFailure::Degraded(format!("LLM worker: {e}"))))
    });
    let include_usage = chat.stream_options.unwrap_or_default().include_usage;
    let chunk = move |delta: Value, finish: Option<&str>| {
        let c = json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        });
        format!("data: {c}\n\n")
    };
    // The role, then each piece as the worker streams it, then how the answer ended (and its
    // usage when asked), then `[DONE]`. A client that goes away drops `rx`: the worker cancels.
    let first = chunk(json!({ "role": "assistant" }), None);
    let state = (Some(first), rx, Some(answer));
    let events = futures::stream::unfold(state, move |(first, mut rx, answer)| {
        let chunk = chunk.clone();
        async move {
            if let Some(first) = first {
                return Some((Ok::<_, Infallible>(first), (None, rx, answer)));
            }
            let answer = answer?;
            if let Some(piece) = rx.recv().await {
                return Some((Ok(chunk(json!({ "content": piece }), None)), (None, rx, Some(answer))));
            }
            let end = match answer.await {
                Ok(Ok(g)) => {
                    let mut end = chunk(json!({}), Some(finish_reason(g.stop)));
                    if include_usage {
                        let u = json!({ "object": "chat.completion.chunk", "choices": [], "usage": usage(&g) });
                        end.push_str(&format!("data: {u}\n\n"));
                    }
                    end
                }
                Ok(Err(e)) => format!("data: {}\n\n", json!({ "error": { "message": e.to_string() } })),
                Err(e) => format!("data: {}\n\n", json!({ "error": { "message": e.to_string() } })),
            };
            Some((Ok(end + "data: [DONE]\n\n"), (None, rx, None)))
        }
    });
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], Body::from_stream(events))
        .into_response()
}
