//! `GET /tools` and `POST /tools/approve`: the fleet's tool servers, their tools and states, and
//! the approval of tools whose descriptions changed since they were pinned. `GET /ai/approvals`
//! and `POST /ai/approvals/{id}`: the calls that wait for a person, and a person's answer.

use axum::Json;
use axum::extract::{Path, State};
use mindfleet_core::tools::{ApprovalView, ToolsDump, ToolsMsg};
use ractor::call_t;
use serde::Deserialize;
use serde_json::{Value, json};

use super::extract::{ApiError, FromBody, JsonBody, Params, json_body};
use super::{ADMIN_CALL_MS, Answer, HttpState};

pub(super) async fn get_tools(State(st): State<HttpState>) -> Answer<ToolsDump> {
    match &st.tools {
        None => Ok(Json(ToolsDump::default())),
        Some(t) => call_t!(t, ToolsMsg::Dump, ADMIN_CALL_MS)
            .map(Json)
            .map_err(|e| ApiError::unavailable(format!("the tool host did not answer: {e}"))),
    }
}

#[derive(Deserialize)]
pub(super) struct ApproveParams {
    server: Option<String>,
}

/// Pins the current descriptions of `server`'s tools (every server's without one).
pub(super) async fn post_approve(State(st): State<HttpState>, Params(p): Params<ApproveParams>) -> Answer<Value> {
    let Some(t) = &st.tools else {
        return Err(ApiError::not_found("the fleet declares no [[tool_server]]"));
    };
    match call_t!(t, ToolsMsg::Approve, ADMIN_CALL_MS, p.server.clone()) {
        Ok(Ok(enabled)) => Ok(Json(json!({ "server": p.server, "enabled": enabled }))),
        Ok(Err(why)) => Err(ApiError::new(why, Some("server"))),
        Err(e) => Err(ApiError::unavailable(format!("the tool host did not answer: {e}"))),
    }
}

/// `GET /ai/approvals`: the tool calls that wait for a person's approval, oldest first.
pub(super) async fn get_approvals(State(st): State<HttpState>) -> Answer<Value> {
    let pending = match &st.tools {
        None => Vec::new(),
        Some(t) => call_t!(t, ToolsMsg::Approvals, ADMIN_CALL_MS)
            .map_err(|e| ApiError::unavailable(format!("the tool host did not answer: {e}")))?,
    };
    Ok(Json(json!({ "approvals": pending.iter().map(approval_json).collect::<Vec<_>>() })))
}

/// An approval as the API gives it: its arguments as JSON.
pub fn approval_json(a: &ApprovalView) -> Value {
    let arguments: Value = serde_json::from_str(&a.arguments).unwrap_or(Value::String(a.arguments.clone()));
    json!({
        "id": a.id,
        "persona": a.persona,
        "tool": a.tool,
        "arguments": arguments,
        "why": a.why,
        "event_id": a.event_id,
        "room": a.room,
        "requested_us": a.requested_us,
        "deadline_us": a.deadline_us,
        "state": a.state.describe(),
    })
}

/// `POST /ai/approvals/{id}`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DecideBody {
    /// `approve` or `deny`.
    decision: String,
    #[serde(default)]
    reason: String,
    /// Who answers (journaled with the call): `api` when not said.
    #[serde(default)]
    by: Option<String>,
}

impl FromBody for DecideBody {
    fn from_body(text: &str) -> Result<DecideBody, ApiError> {
        json_body(text, "invalid approval answer")
    }
}

/// `POST /ai/approvals/{id}`: approves or denies a call that waits; its plan goes on.
pub(super) async fn post_approval(
    State(st): State<HttpState>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<DecideBody>,
) -> Answer<Value> {
    let approve = match b.decision.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return Err(ApiError::new(
                format!("`decision` is \"approve\" or \"deny\", not {other:?}"),
                Some("decision"),
            ));
        }
    };
    let Some(t) = &st.tools else {
        return Err(ApiError::not_found("the fleet declares no [[tool_server]]: no call waits for approval"));
    };
    let by = b.by.filter(|b| !b.trim().is_empty()).unwrap_or_else(|| "api".into());
    let (reason, id2) = (b.reason, id.clone());
    match call_t!(t, |reply| ToolsMsg::Decide { id: id2, approve, by, reason, reply }, ADMIN_CALL_MS) {
        Ok(Ok(view)) => Ok(Json(approval_json(&view))),
        Ok(Err(why)) if why.starts_with("no tool call") => Err(ApiError::not_found(why)),
        Ok(Err(why)) => Err(ApiError::with_status(axum::http::StatusCode::CONFLICT, why)),
        Err(e) => Err(ApiError::unavailable(format!("the tool host did not answer: {e}"))),
    }
}
