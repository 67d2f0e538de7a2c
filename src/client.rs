//! A client of the admin API, used by `mindfleet inject`, `dump`, `ai`, `embed --admin` and
//! `rag --admin`.

use mindfleet_core::dump::FleetDump;
use mindfleet_core::event::EventInput;
use mindfleet_core::tools::ToolsDump;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the admin API at {addr}: {message} (is `mindfleet run` running?)")]
    Unreachable { addr: String, message: String },
    /// The API's refusal: its status, its message, and the field it names, if any.
    #[error("admin API answered {status}: {message}")]
    Status { status: u16, message: String, field: Option<String> },
}

impl ClientError {
    /// 2 for a request the fleet refused as bad input (4xx), 3 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            ClientError::Status { status, .. } if (400..500).contains(status) && *status != 429 => 2,
            _ => 3,
        }
    }
}

/// The API's error JSON (`{"error", "field"?}`) answered with `status`.
fn refusal(status: u16, body: &Value) -> ClientError {
    let message = body.get("error").and_then(Value::as_str).unwrap_or("no error message").to_string();
    let field = body.get("field").and_then(Value::as_str).map(str::to_string);
    ClientError::Status { status, message, field }
}

pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// `addr` is `host:port` or a full `http://` URL.
    pub fn new(addr: &str, token: Option<String>) -> Self {
        let base =
            if addr.starts_with("http://") { addr.trim_end_matches('/').to_string() } else { format!("http://{addr}") };
        Client { base, token, http: reqwest::Client::new() }
    }

    fn req(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn send(&self, r: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        let resp = self
            .req(r)
            .send()
            .await
            .map_err(|e| ClientError::Unreachable { addr: self.base.clone(), message: e.to_string() })?;
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status == 200 { Ok(body) } else { Err(refusal(status, &body)) }
    }

    pub async fn inject(&self, input: &EventInput) -> Result<Value, ClientError> {
        self.send(self.http.post(format!("{}/events", self.base)).json(input)).await
    }

    pub async fn dump(&self, persona: Option<&str>) -> Result<FleetDump, ClientError> {
        // Persona names are URL-safe (a-z, 0-9, '-', '_'), checked by the server.
        let url = match persona {
            Some(p) => format!("{}/dump?persona={p}", self.base),
            None => format!("{}/dump", self.base),
        };
        let v = self.send(self.http.get(url)).await?;
        serde_json::from_value(v).map_err(|e| ClientError::Status {
            status: 200,
            message: format!("unexpected dump shape: {e}"),
            field: None,
        })
    }

    /// `GET /ai/{query}` with its parameters.
    pub async fn ai(&self, query: &str, params: &[(&str, String)]) -> Result<Value, ClientError> {
        let mut url = reqwest::Url::parse(&format!("{}/ai/{query}", self.base))
            .map_err(|e| ClientError::Unreachable { addr: self.base.clone(), message: e.to_string() })?;
        for (k, v) in params {
            url.query_pairs_mut().append_pair(k, v);
        }
        self.send(self.http.get(url)).await
    }

    /// `GET /outbox/stream` with its parameters: the response, open, to be read as it comes
    /// (`chunk`); a refusal is the error.
    pub async fn outbox_stream(&self, params: &[(&str, String)]) -> Result<reqwest::Response, ClientError> {
        let mut url = reqwest::Url::parse(&format!("{}/outbox/stream", self.base))
            .map_err(|e| ClientError::Unreachable { addr: self.base.clone(), message: e.to_string() })?;
        for (k, v) in params {
            url.query_pairs_mut().append_pair(k, v);
        }
        let resp = self
            .req(self.http.get(url))
            .send()
            .await
            .map_err(|e| ClientError::Unreachable { addr: self.base.clone(), message: e.to_string() })?;
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(resp);
        }
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        Err(refusal(status, &body))
    }

    /// `POST /ai/state`.
    pub async fn set_state(&self, body: &Value) -> Result<Value, ClientError> {
        self.send(self.http.post(format!("{}/ai/state", self.base)).json(body)).await
    }

    /// `POST /ai/study`.
    pub async fn study(&self, body: &Value) -> Result<Value, ClientError> {
        self.send(self.http.post(format!("{}/ai/study", self.base)).json(body)).await
    }

    /// `POST /ai/train`.
    pub async fn train(&self, body: &Value) -> Result<Value, ClientError> {
        self.send(self.http.post(format!("{}/ai/train", self.base)).json(body)).await
    }

    /// `POST /ai/embedding/generate`.
    pub async fn embed(&self, body: &Value) -> Result<Value, ClientError> {
        self.send(self.http.post(format!("{}/ai/embedding/generate", self.base)).json(body)).await
    }

    /// `POST /rag/{command}` with the request's JSON body.
    pub async fn rag(&self, command: &str, body: &Value) -> Result<Value, ClientError> {
        self.send(self.http.post(format!("{}/rag/{command}", self.base)).json(body)).await
    }

    /// `POST /webhooks/retry[?webhook=NAME]`.
    pub async fn webhooks_retry(&self, webhook: Option<&str>) -> Result<Value, ClientError> {
        let mut url = reqwest::Url::parse(&format!("{}/webhooks/retry", self.base))
            .map_err(|e| ClientError::Unreachable { addr: self.base.clone(), message: e.to_string() })?;
        if let Some(w) = webhook {
            url.query_pairs_mut().append_pair("webhook", w);
        }
        self.send(self.http.post(url)).await
    }

    /// `GET /tools`: the tool servers, their tools and states.
    pub async fn tools(&self) -> Result<ToolsDump, ClientError> {
        let v = self.send(self.http.get(format!("{}/tools", self.base))).await?;
        serde_json::from_value(v).map_err(|e| ClientError::Status {
            status: 200,
            message: format!("unexpected /tools shape: {e}"),
            field: None,
        })
    }

    /// `POST /tools/approve[?server=NAME]`.
    pub async fn tools_approve(&self, server: Option<&str>) -> Result<Value, ClientError> {
        let mut url = reqwest::Url::parse(&format!("{}/tools/approve", self.base))
            .map_err(|e| ClientError::Unreachable { addr: self.base.clone(), message: e.to_string() })?;
        if let Some(s) = server {
            url.query_pairs_mut().append_pair("server", s);
        }
        self.send(self.http.post(url)).await
    }

    /// `GET /ai/approvals`: the tool calls that wait for a person's approval.
    pub async fn approvals(&self) -> Result<Value, ClientError> {
        self.send(self.http.get(format!("{}/ai/approvals", self.base))).await
    }

    /// `POST /ai/approvals/{id}`: approves (`true`) or denies the call `id`, by `by`, for `reason`.
    pub async fn decide(&self, id: &str, approve: bool, reason: &str, by: &str) -> Result<Value, ClientError> {
        let decision = if approve { "approve" } else { "deny" };
        let body = serde_json::json!({ "decision": decision, "reason": reason, "by": by });
        let mut url = reqwest::Url::parse(&format!("{}/ai/approvals", self.base))
            .map_err(|e| ClientError::Unreachable { addr: self.base.clone(), message: e.to_string() })?;
        url.path_segments_mut()
            .map_err(|()| ClientError::Unreachable { addr: self.base.clone(), message: "not a base URL".into() })?
            .push(id);
        self.send(self.http.post(url).json(&body)).await
    }

    /// `POST /cluster/{command}` (`move`, `drain`) with the request's JSON body.
    pub async fn cluster(&self, command: &str, body: &Value) -> Result<Value, ClientError> {
        self.send(self.http.post(format!("{}/cluster/{command}", self.base)).json(body)).await
    }

    pub async fn health(&self) -> bool {
        self.send(self.http.get(format!("{}/health", self.base))).await.is_ok()
    }
}
