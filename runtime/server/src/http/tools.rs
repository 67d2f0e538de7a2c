//! `GET /tools` and `POST /tools/approve`: the fleet's tool servers, their tools and states, and
//! the approval of tools whose descriptions changed since they were pinned.

use axum::Json;
use axum::extract::State;
use mindfleet_core::tools::{ToolsDump, ToolsMsg};
use ractor::call_t;
use serde::Deserialize;
use serde_json::{Value, json};

use super::extract::{ApiError, Params};
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
