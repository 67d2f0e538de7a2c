//! The fleet's LLM worker as an OpenAI-compatible chat API, so that other programs (and other
//! fleets' `openai` backends) can use the model this fleet runs:
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/chat/completions` | `messages`, `max_tokens` (or `max_completion_tokens`; default 256), `temperature` (absent or 0: greedy), `top_p`, `seed`, `stop` (a string or up to 4), `logprobs` + `top_logprobs` (at most 20), `stream` (server-sent events, with `stream_options.include_usage`); `tools` + `tool_choice` (not streamed); `response_format` of type `json_schema` (not streamed) |
//! | `GET /v1/models` | the one model the worker runs |
//!
//! With `tools`, the answer is the worker's tool turn ([`LlmMsg::ToolTurn`]): a local model
//! chooses a tool (or none) by label choice and fills its arguments decoded to the tool's
//! `parameters`, so the `tool_calls` it answers validate; choosing none, it answers in text.
//! The conversation may hold the model's earlier `tool_calls` and `tool` messages answering
//! them. With `response_format` of type `json_schema`, the content is a value of the schema
//! ([`LlmMsg::Fill`]).
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

use mindfleet_core::llm::{
    ChatMessage, FillJob, GenerateJob, GenerateRequest, Generation, LlmFailure, LlmMsg, Sampling, Stop, ToolCallAsked,
    ToolDef, ToolRound, ToolTurnJob, rounds_as_text,
};
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
        LlmFailure::Failed(_) | LlmFailure::Schema(_) => StatusCode::BAD_REQUEST,
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

/// A message's content: text, or parts of which the text ones are read.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Value>),
}

impl Content {
    fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => {
                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
            }
        }
    }
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Vec<InToolCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
struct InToolCall {
    id: String,
    function: InFunction,
}

#[derive(Deserialize)]
struct InFunction {
    name: String,
    /// JSON text (some clients send the object).
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize)]
struct InTool {
    function: InToolFunction,
}

#[derive(Deserialize)]
struct InToolFunction {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    parameters: Option<Value>,
}

#[derive(Deserialize)]
struct ChatRequest {
    messages: Vec<InMessage>,
    #[serde(default)]
    tools: Vec<InTool>,
    tool_choice: Option<Value>,
    response_format: Option<Value>,
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
    /// The conversation: its messages, then the rounds of tool calls that end it (earlier
    /// rounds, followed by other messages, told as text), or what is wrong with it.
    fn conversation(&self) -> Result<(Vec<ChatMessage>, Vec<ToolRound>), String> {
        if self.messages.is_empty() {
            return Err("`messages` is empty".into());
        }
        let (mut messages, mut rounds): (Vec<ChatMessage>, Vec<ToolRound>) = (Vec::new(), Vec::new());
        for (i, m) in self.messages.iter().enumerate() {
            let text = m.content.as_ref().map(Content::text).unwrap_or_default();
            if m.role == "assistant" && !m.tool_calls.is_empty() {
                let calls: Vec<ToolCallAsked> = m
                    .tool_calls
                    .iter()
                    .map(|c| ToolCallAsked {
                        id: c.id.clone(),
                        name: c.function.name.clone(),
                        arguments: match &c.function.arguments {
                            Value::String(s) => s.clone(),
                            v => v.to_string(),
                        },
                    })
                    .collect();
                let results = vec!["(no result)".to_string(); calls.len()];
                rounds.push(ToolRound { calls, results });
            } else if m.role == "tool" {
                let id = m.tool_call_id.as_deref().unwrap_or("");
                let slot = rounds.last_mut().and_then(|r| {
                    let i = r.calls.iter().position(|c| c.id == id)?;
                    r.results.get_mut(i)
                });
                let Some(slot) = slot else {
                    return Err(format!(
                        "`messages[{i}]`: a tool message answering no call of the message before it (`tool_call_id` {id:?})"
                    ));
                };
                *slot = text;
            } else {
                if !rounds.is_empty() {
                    messages = rounds_as_text(&messages, &rounds);
                    rounds.clear();
                }
                messages.push(ChatMessage::new(m.role.clone(), text));
            }
        }
        Ok((messages, rounds))
    }

    /// The tools offered, and the choice among them (`auto`, `none`, `required` or a tool's
    /// name), or what is wrong with them.
    fn tools(&self) -> Result<(Vec<ToolDef>, String), String> {
        let tools: Vec<ToolDef> = self
            .tools
            .iter()
            .map(|t| ToolDef {
                name: t.function.name.clone(),
                description: t.function.description.clone(),
                parameters: t.function.parameters.clone().unwrap_or_else(|| json!({ "type": "object" })),
            })
            .collect();
        let choice = match &self.tool_choice {
            None => "auto".to_string(),
            Some(Value::String(c)) if matches!(c.as_str(), "auto" | "none" | "required") => c.clone(),
            Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
                Some(name) if tools.iter().any(|t| t.name == name) => name.to_string(),
                Some(name) => return Err(format!("`tool_choice` names {name:?}, which is not one of `tools`")),
                None => return Err(format!("`tool_choice` = {v}: expected auto, none, required or a function")),
            },
        };
        Ok((tools, choice))
    }

    /// The schema the answer must be a value of (`response_format` of type `json_schema`).
    fn schema(&self) -> Result<Option<Value>, String> {
        let Some(format) = &self.response_format else { return Ok(None) };
        match format.get("type").and_then(Value::as_str) {
            Some("text") => Ok(None),
            Some("json_schema") => format
                .pointer("/json_schema/schema")
                .cloned()
                .map(Some)
                .ok_or_else(|| "`response_format.json_schema.schema` is missing".to_string()),
            other => Err(format!("`response_format` of type {other:?}: only text and json_schema are served")),
        }
    }

    fn max_tokens(&self) -> Result<usize, String> {
        let max_tokens = self.max_completion_tokens.or(self.max_tokens).unwrap_or(DEFAULT_MAX_TOKENS);
        if !(1..=MAX_TOKENS).contains(&max_tokens) {
            return Err(format!("`max_tokens` = {max_tokens} is out of range (1..={MAX_TOKENS})"));
        }
        Ok(max_tokens)
    }

    /// The worker's request, or what is wrong with this one (naming the field).
    fn to_generate(&self) -> Result<GenerateRequest, String> {
        let (messages, rounds) = self.conversation()?;
        let messages = rounds_as_text(&messages, &rounds);
        let max_tokens = self.max_tokens()?;
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
        Ok(GenerateRequest { sampling, stop, top_logprobs, ..GenerateRequest::new(messages, max_tokens) })
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
    match structured(&llm, &chat).await {
        Ok(None) => {}
        Ok(Some((message, finish, usage))) => {
            return axum::Json(json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
                "usage": usage,
            }))
            .into_response();
        }
        Err(e) => return e,
    }
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

/// The answer to a request with `tools` (a tool turn) or a `response_format` schema (a fill):
/// its message, how it finished and its usage; `None` for a plain generation.
async fn structured(
    llm: &ActorRef<LlmMsg>,
    chat: &ChatRequest,
) -> Result<Option<(Value, &'static str, Value)>, Response> {
    let bad = |e: String| error(StatusCode::BAD_REQUEST, e);
    let (tools, choice) = chat.tools().map_err(bad)?;
    let schema = chat.schema().map_err(bad)?;
    let offered = !tools.is_empty() && choice != "none";
    if !offered && schema.is_none() {
        return Ok(None);
    }
    if chat.stream {
        return Err(bad("`stream` is not served with `tools` or `response_format`: ask without it".into()));
    }
    let (messages, rounds) = chat.conversation().map_err(bad)?;
    let max_tokens = chat.max_tokens().map_err(bad)?;
    let worker = |e: ractor::RactorErr<LlmMsg>| failure(LlmFailure::Degraded(format!("LLM worker: {e}")));
    let usage = |i: usize, o: usize| json!({ "prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o });
    if offered {
        let job = ToolTurnJob { messages, rounds, tools, choice, max_tokens, purpose: "api".into(), persona: None };
        let turn = ractor::call!(llm, |reply| LlmMsg::ToolTurn { job, reply }).map_err(worker)?.map_err(failure)?;
        let usage = usage(turn.tokens_in, turn.tokens_out);
        if turn.calls.is_empty() {
            return Ok(Some((json!({ "role": "assistant", "content": turn.text }), "stop", usage)));
        }
        let calls: Vec<Value> = turn
            .calls
            .iter()
            .map(
                |c| json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments } }),
            )
            .collect();
        return Ok(Some((json!({ "role": "assistant", "content": null, "tool_calls": calls }), "tool_calls", usage)));
    }
    let schema = schema.expect("checked");
    let messages = rounds_as_text(&messages, &rounds);
    let job = FillJob { messages, schema, purpose: "api".into(), persona: None, max_tokens };
    let filled = ractor::call!(llm, |reply| LlmMsg::Fill { job, reply }).map_err(worker)?.map_err(failure)?;
    let message = json!({ "role": "assistant", "content": filled.value.to_string() });
    Ok(Some((message, "stop", usage(filled.tokens_in, filled.tokens_out))))
}
