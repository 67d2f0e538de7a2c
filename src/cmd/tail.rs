//! `mindfleet tail`: follows the replies a running fleet's personas post, live, from its outbox
//! stream (`GET /outbox/stream`), one line each, until interrupted.

use std::io::Write;
use std::process::ExitCode;

use serde_json::Value;

use super::{Json, Remote, fail};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: Remote,
    /// Only the replies in this room.
    #[arg(long)]
    room: Option<String>,
    /// Only the replies of this persona.
    #[arg(long)]
    persona: Option<String>,
    /// Start after this outbox sequence number (0: everything kept); default: only new replies.
    #[arg(long)]
    after: Option<u64>,
    /// Each reply as one JSON object per line (`seq`, `kind`, `event_id`, `persona`, `room`,
    /// `in_reply_to`, `text`, `brain`, `at`).
    #[command(flatten)]
    json: Json,
}

pub async fn run(a: Args) -> ExitCode {
    let params: Vec<(&str, String)> =
        [a.room.map(|r| ("room", r)), a.persona.map(|p| ("persona", p)), a.after.map(|n| ("after", n.to_string()))]
            .into_iter()
            .flatten()
            .collect();
    let json = a.json.json;
    let mut resp = match a.remote.client().outbox_stream(&params).await {
        Ok(r) => r,
        Err(e) => return fail(e.exit_code() as u8, e),
    };
    // Server-Sent Events: `field: value` lines, an event ends at an empty line.
    let (mut pending, mut data) = (String::new(), String::new());
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => return fail(3, "the fleet closed the stream"),
            Err(e) => return fail(3, format!("the stream broke: {e}")),
        };
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            } else if line.is_empty() && !data.is_empty() {
                print_reply(&std::mem::take(&mut data), json);
            }
        }
    }
}

fn print_reply(data: &str, json: bool) {
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{data}");
    } else {
        let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        let _ = writeln!(out, "{} #{} {}: {}", s("at"), s("room"), s("persona"), s("text"));
    }
    let _ = out.flush();
}
