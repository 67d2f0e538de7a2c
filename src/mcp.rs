//! The fleet's MCP tools ([`mindfleet_server::mcp`]) on a running fleet reached over HTTP: what
//! `mindfleet mcp` serves on standard input and output. Each tool is the admin API's route it
//! stands for, asked with the token as every command asks it ([`crate::client`]).

use futures::StreamExt;
use serde_json::Value;

use mindfleet_core::event::EventInput;
use mindfleet_server::mcp::{Fleet, Refusal, Replies};

use crate::client::{Client, ClientError};

/// A running fleet, through its admin API.
#[derive(Clone)]
pub struct Remote {
    client: std::sync::Arc<Client>,
}

impl Remote {
    pub fn new(client: Client) -> Remote {
        Remote { client: std::sync::Arc::new(client) }
    }
}

impl From<ClientError> for Refusal {
    fn from(e: ClientError) -> Refusal {
        match e {
            ClientError::Status { status, message, field } => Refusal::Refused { status, message, field },
            e @ ClientError::Unreachable { .. } => Refusal::Unreachable(e.to_string()),
        }
    }
}

impl Fleet for Remote {
    async fn inject(&self, event: EventInput) -> Result<Value, Refusal> {
        Ok(self.client.inject(&event).await?)
    }

    async fn ai(&self, query: &'static str, params: Vec<(&'static str, String)>) -> Result<Value, Refusal> {
        Ok(self.client.ai(query, &params).await?)
    }

    async fn rag(&self, command: &'static str, body: Value) -> Result<Value, Refusal> {
        Ok(self.client.rag(command, &body).await?)
    }

    async fn replies(&self, room: String) -> Result<Replies, Refusal> {
        let resp = self.client.outbox_stream(&[("room", room)]).await?;
        Ok(sse_data(resp).filter_map(|data| async move { serde_json::from_str::<Value>(&data).ok() }).boxed())
    }
}

/// The `data` of each Server-Sent Event of `resp`, until it ends or breaks.
fn sse_data(resp: reqwest::Response) -> impl futures::Stream<Item = String> + Send + 'static {
    // Lines are cut from bytes, so a character split between two chunks stays whole.
    let state = (resp, Vec::<u8>::new(), String::new());
    futures::stream::unfold(state, |(mut resp, mut pending, mut data)| async move {
        loop {
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end_matches(['\n', '\r']);
                if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.strip_prefix(' ').unwrap_or(d));
                } else if line.is_empty() && !data.is_empty() {
                    let event = std::mem::take(&mut data);
                    return Some((event, (resp, pending, data)));
                }
            }
            match resp.chunk().await {
                Ok(Some(chunk)) => pending.extend_from_slice(&chunk),
                Ok(None) | Err(_) => return None,
            }
        }
    })
}
