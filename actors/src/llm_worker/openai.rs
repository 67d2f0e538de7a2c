//! The `openai` backend: the worker's requests sent to an OpenAI-compatible chat endpoint
//! (llama.cpp's server, Ollama, vLLM, or another fleet's `/v1`), for models too big to run in
//! process.
//!
//! Calls are blocking and run on the worker's slot threads, like the local model's forward
//! passes. Generations are streamed (server-sent events), so the caller gets each piece as it
//! comes and time to first token is measured the same way as locally; tokens are counted from
//! the server's `usage` when it reports one, else one per streamed piece. Classification asks for
//! one token with its `top_logprobs` and scores each label as one of them. A fill asks for the
//! answer in the schema's shape (`response_format` of type `json_schema`, strict: the schema as
//! [`Shape::to_schema`] writes it, every property filled required) and checks the value it gets
//! against that shape, so a fill answered validates as a local model's does. The prompt is not
//! trimmed here: the server's own context limit applies, and a prompt over it is the server's
//! error, reported as the request's failure.
//!
//! A request's [`Repetition`](mindfleet_core::llm::Repetition) goes as far as the API takes it:
//! the penalty as llama.cpp's `repeat_penalty` and as OpenAI's `frequency_penalty` (the penalty
//! less 1, at most 2); the n-gram bans have no field and are not sent. Repeated sentences are
//! found in the streamed text as a local model's are, held back until each sentence ends: a
//! repeated one ends the answer before it and closes the connection. OpenAI takes at most four
//! stop strings; the others are looked for here.

use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use mindfleet_core::llm::{Filled, TokenLogprob, ToolCallAsked, ToolTurn, ToolTurnJob, TopLogprob};
use mindfleet_models::llama::schema::Shape;
use mindfleet_models::llama::{
    AnswerText, ChatMessage, Classification, GenerateRequest, Generation, LabelScore, LlmError, Sampling, Stop,
};

/// Alternatives asked for when classifying (OpenAI's most).
const CLASSIFY_TOP: usize = 20;

/// Stop strings OpenAI's API takes at most.
pub const MAX_SENT_STOPS: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The API's base, e.g. `http://127.0.0.1:8080/v1`; requests go to `{url}/chat/completions`.
    pub url: String,
    /// Sent as `model` with every request.
    pub model: String,
    /// Sent as a bearer token when set.
    pub api_key: Option<String>,
    /// Longest a request may take, answer included.
    pub timeout: Duration,
}

pub struct OpenAi {
    config: OpenAiConfig,
    endpoint: String,
    http: reqwest::blocking::Client,
}

impl OpenAi {
    pub fn new(config: OpenAiConfig) -> Result<OpenAi, LlmError> {
        let endpoint = format!("{}/chat/completions", config.url.trim_end_matches('/'));
        if !config.url.starts_with("http://") {
            return Err(LlmError::Endpoint {
                url: config.url.clone(),
                message: "only http:// endpoints are supported (this build has no TLS)".into(),
            });
        }
        let http = reqwest::blocking::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| LlmError::Endpoint { url: config.url.clone(), message: e.to_string() })?;
        Ok(OpenAi { config, endpoint, http })
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    fn error(&self, message: impl std::fmt::Display) -> LlmError {
        LlmError::Endpoint { url: self.endpoint.clone(), message: message.to_string() }
    }

    fn post(&self, body: &Value) -> Result<reqwest::blocking::Response, LlmError> {
        let mut req = self.http.post(&self.endpoint).json(body);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().map_err(|e| self.error(causes(&e.without_url())))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().unwrap_or_default();
            let detail = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| {
                    let e = v.get("error")?;
                    Some(e.get("message").and_then(Value::as_str).map_or_else(|| e.to_string(), str::to_string))
                })
                .unwrap_or(text);
            return Err(self.error(format!("{status}: {}", detail.chars().take(500).collect::<String>())));
        }
        Ok(resp)
    }

    fn body(&self, messages: &[ChatMessage], max_tokens: usize) -> Value {
        json!({ "model": self.config.model, "messages": messages, "max_tokens": max_tokens })
    }

    /// Streams the answer to `on_token`; `Break` from it closes the connection.
    pub fn generate(
        &self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, LlmError> {
        let start = Instant::now();
        if req.max_tokens == 0 {
            return Err(LlmError::Request("max_tokens must be at least 1".into()));
        }
        let mut body = self.body(&req.messages, req.max_tokens);
        body["stream"] = json!(true);
        body["stream_options"] = json!({ "include_usage": true });
        match req.sampling {
            Sampling::Greedy => body["temperature"] = json!(0.0),
            Sampling::TopP { temperature, top_p, seed } => {
                body["temperature"] = json!(temperature);
                body["top_p"] = json!(top_p);
                body["seed"] = json!(seed);
            }
        }
        let (sent, kept) = req.stop.split_at(req.stop.len().min(MAX_SENT_STOPS));
        if !sent.is_empty() {
            body["stop"] = json!(sent);
        }
        let penalty = req.repetition.penalty;
        if penalty != 1.0 {
            body["repeat_penalty"] = json!(penalty);
            body["frequency_penalty"] = json!((penalty - 1.0).clamp(0.0, 2.0));
        }
        if let Some(k) = req.top_logprobs {
            body["logprobs"] = json!(true);
            body["top_logprobs"] = json!(k);
        }
        let resp = self.post(&body)?;
        // The stop strings not sent, and the sentences, looked for in the text as it comes.
        let mut answer = AnswerText::new(kept, req.repetition.stop_repeated_sentence);
        let mut text = String::new();
        let (mut pieces, mut usage) = (0usize, None);
        let mut first_token = None;
        let mut finish = None;
        let mut logprobs = Vec::new();
        let mut lines = BufReader::new(resp).lines();
        let stop = loop {
            let Some(line) = lines.next() else { break finish.unwrap_or(Stop::Eos) };
            let line = line.map_err(|e| self.error(format!("reading the stream: {e}")))?;
            let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
            if data == "[DONE]" {
                break finish.unwrap_or(Stop::Eos);
            }
            let chunk: Value =
                serde_json::from_str(data).map_err(|e| self.error(format!("unreadable stream chunk: {e}: {data}")))?;
            if let Some(e) = chunk.get("error") {
                return Err(self.error(e));
            }
            if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
                usage = Some(u.clone());
            }
            let Some(choice) = chunk.pointer("/choices/0") else { continue };
            logprobs.extend(read_logprobs(choice));
            if let Some(piece) = choice.pointer("/delta/content").and_then(Value::as_str).filter(|p| !p.is_empty()) {
                first_token.get_or_insert_with(Instant::now);
                pieces += 1;
                let (piece, ended) = answer.push(piece.as_bytes());
                if !piece.is_empty() {
                    text.push_str(&piece);
                    if on_token(&piece).is_break() && ended.is_none() {
                        break Stop::Cancelled;
                    }
                }
                if let Some(stop) = ended {
                    break stop;
                }
            }
            match choice.get("finish_reason").and_then(Value::as_str) {
                Some("length") => finish = Some(Stop::MaxTokens),
                Some(_) => finish = Some(Stop::Eos),
                None => {}
            }
        };
        let (rest, stop) = answer.finish(stop);
        if !rest.is_empty() {
            text.push_str(&rest);
            let _ = on_token(&rest);
        }
        let count = |field: &str| usage.as_ref().and_then(|u| u.get(field)).and_then(Value::as_u64);
        let first = first_token.unwrap_or_else(Instant::now);
        let ttft_ms = (first - start).as_secs_f64() * 1e3;
        Ok(Generation {
            text,
            tokens_in: count("prompt_tokens").unwrap_or(0) as usize,
            tokens_out: count("completion_tokens").map_or(pieces, |n| n as usize),
            prompt_ms: ttft_ms,
            gen_ms: first.elapsed().as_secs_f64() * 1e3,
            ttft_ms,
            stop,
            trimmed: None,
            logprobs,
        })
    }

    /// Each label's log-probability as the start of the answer: that of the first token's
    /// alternative that is the label (leading spaces aside). So labels must be single tokens of
    /// the endpoint's model (`Yes`/`No`); a label that is none of the alternatives (or more than
    /// one token) has at most the least likely alternative's log-probability, and gets that.
    pub fn classify(&self, messages: &[ChatMessage], labels: &[&str]) -> Result<Classification, LlmError> {
        if labels.is_empty() || labels.iter().any(|l| l.is_empty()) {
            return Err(LlmError::Request("classify needs labels, none empty".into()));
        }
        let mut body = self.body(messages, 1);
        body["temperature"] = json!(0.0);
        body["logprobs"] = json!(true);
        body["top_logprobs"] = json!(CLASSIFY_TOP);
        let answer: Value = self.post(&body)?.json().map_err(|e| self.error(format!("unreadable answer: {e}")))?;
        let top = answer
            .pointer("/choices/0")
            .and_then(|c| read_logprobs(c).into_iter().next())
            .map(|t| t.top)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.error("the answer has no top_logprobs (does the server support logprobs?)"))?;
        let floor = top.iter().map(|t| t.logprob).fold(f32::INFINITY, f32::min);
        let mut scores: Vec<LabelScore> = labels
            .iter()
            .map(|label| {
                let logprob = top
                    .iter()
                    .filter(|t| t.token.trim_start() == label.trim_start())
                    .map(|t| t.logprob)
                    .fold(floor, f32::max);
                LabelScore { label: label.to_string(), logprob, tokens: 1 }
            })
            .collect();
        scores.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
        let tokens_in = answer.pointer("/usage/prompt_tokens").and_then(Value::as_u64).unwrap_or(0) as usize;
        Ok(Classification { scores, tokens_in })
    }
}

impl OpenAi {
    /// A JSON value of `schema` as the answer, asked for as structured output and checked: a
    /// schema with a construct not filled is refused as a local model refuses it, and an answer
    /// that is not JSON of the schema's shape is the endpoint's error, naming the field.
    pub fn fill(&self, messages: &[ChatMessage], schema: &Value, max_tokens: usize) -> Result<Filled, LlmError> {
        let start = Instant::now();
        if max_tokens == 0 {
            return Err(LlmError::Request("max_tokens must be at least 1".into()));
        }
        let shape = Shape::compile(schema)?;
        let mut body = self.body(messages, max_tokens);
        body["temperature"] = json!(0.0);
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": { "name": "arguments", "strict": true, "schema": shape.to_schema() }
        });
        let answer: Value = self.post(&body)?.json().map_err(|e| self.error(format!("unreadable answer: {e}")))?;
        let text = answer
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| self.error("the answer has no message content"))?;
        let value: Value = serde_json::from_str(text).map_err(|e| {
            self.error(format!("the answer is not JSON ({e}): {}", text.chars().take(200).collect::<String>()))
        })?;
        shape.check(&value).map_err(|e| self.error(format!("the answer does not fit the schema: {e}")))?;
        let count = |field: &str| answer.pointer(&format!("/usage/{field}")).and_then(Value::as_u64).unwrap_or(0);
        Ok(Filled {
            value,
            text: text.to_string(),
            tokens_in: count("prompt_tokens") as usize,
            tokens_out: count("completion_tokens") as usize,
            prompt_ms: 0.0,
            gen_ms: start.elapsed().as_secs_f64() * 1e3,
            trimmed: None,
        })
    }
}

impl OpenAi {
    /// A turn of native tool calling: the job's messages and rounds (the model's `tool_calls`
    /// and a `tool` message for each result), with its tools offered under names the API takes
    /// ([`wire_name`]); the calls answered come back under the fleet's names.
    pub fn tool_turn(&self, job: &ToolTurnJob) -> Result<ToolTurn, LlmError> {
        let start = Instant::now();
        let mut messages: Vec<Value> = job.messages.iter().map(|m| json!(m)).collect();
        for round in &job.rounds {
            let calls: Vec<Value> = round
                .calls
                .iter()
                .map(|c| {
                    json!({ "id": c.id, "type": "function",
                            "function": { "name": wire_name(&c.name), "arguments": c.arguments } })
                })
                .collect();
            messages.push(json!({ "role": "assistant", "content": null, "tool_calls": calls }));
            for (i, c) in round.calls.iter().enumerate() {
                let result = round.results.get(i).map_or("(no result)", String::as_str);
                messages.push(json!({ "role": "tool", "tool_call_id": c.id, "content": result }));
            }
        }
        let tools: Vec<Value> = job
            .tools
            .iter()
            .map(|t| {
                json!({ "type": "function", "function": {
                    "name": wire_name(&t.name), "description": t.description, "parameters": t.parameters } })
            })
            .collect();
        let choice = match job.choice.as_str() {
            c @ ("auto" | "required" | "none") => json!(c),
            name => json!({ "type": "function", "function": { "name": wire_name(name) } }),
        };
        let body = json!({
            "model": self.config.model, "messages": messages, "max_tokens": job.max_tokens.max(1),
            "temperature": 0.0, "tools": tools, "tool_choice": choice,
        });
        let answer: Value = self.post(&body)?.json().map_err(|e| self.error(format!("unreadable answer: {e}")))?;
        let message = answer.pointer("/choices/0/message").ok_or_else(|| self.error("the answer has no message"))?;
        let calls = message.get("tool_calls").and_then(Value::as_array).map_or_else(Vec::new, |calls| {
            calls
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let f = c.get("function")?;
                    let wire = f.get("name")?.as_str()?;
                    let name = job.tools.iter().find(|t| wire_name(&t.name) == wire).map_or(wire, |t| &t.name);
                    // Arguments are JSON text; some servers send an object.
                    let arguments = match f.get("arguments")? {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    };
                    let id = c.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{i}"), str::to_string);
                    Some(ToolCallAsked { id, name: name.to_string(), arguments })
                })
                .collect()
        });
        let text = message.get("content").and_then(Value::as_str).unwrap_or("").to_string();
        let count = |field: &str| answer.pointer(&format!("/usage/{field}")).and_then(Value::as_u64).unwrap_or(0);
        Ok(ToolTurn {
            calls,
            text,
            tokens_in: count("prompt_tokens") as usize,
            tokens_out: count("completion_tokens") as usize,
            ms: start.elapsed().as_secs_f64() * 1e3,
        })
    }
}

/// A tool's name as OpenAI's API takes it (`^[a-zA-Z0-9_-]{1,64}$`): the server's dot is
/// `__`, any other character outside the set `_`.
pub fn wire_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    for c in name.chars() {
        match c {
            '.' => out.push_str("__"),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.chars().take(64).collect()
}

/// The tokens of a choice's `logprobs.content`.
fn read_logprobs(choice: &Value) -> Vec<TokenLogprob> {
    let Some(content) = choice.pointer("/logprobs/content").and_then(Value::as_array) else { return Vec::new() };
    let entry = |v: &Value| -> Option<TopLogprob> {
        Some(TopLogprob { token: v.get("token")?.as_str()?.to_string(), logprob: v.get("logprob")?.as_f64()? as f32 })
    };
    content
        .iter()
        .filter_map(|c| {
            let own = entry(c)?;
            let top = c.get("top_logprobs").and_then(Value::as_array).map_or_else(Vec::new, |t| {
                let mut t: Vec<TopLogprob> = t.iter().filter_map(entry).collect();
                t.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
                t
            });
            Some(TokenLogprob { token: own.token, logprob: own.logprob, top })
        })
        .collect()
}

/// An error and its causes, outermost first ("error sending request: connection refused").
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

#[cfg(test)]
mod tests;
