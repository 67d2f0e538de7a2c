//! `mindfleet inject`: one event into a running fleet, through its admin API (`POST /events`).

use std::process::ExitCode;

use clap::ValueEnum;
use mindfleet_core::event::{EventInput, SenderKind};

use super::{Remote, fail};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: Remote,
    /// Address the event to one persona (else the room's personas).
    #[arg(long)]
    persona: Option<String>,
    #[arg(long, default_value = "chat")]
    domain: String,
    #[arg(long)]
    room: String,
    #[arg(long)]
    from: String,
    #[arg(long)]
    text: String,
    #[arg(long)]
    id: Option<String>,
    /// RFC 3339 time of the event (default: now).
    #[arg(long)]
    ts: Option<String>,
    #[arg(long, value_enum, default_value = "human")]
    sender_kind: Kind,
    /// A persona mentioned (repeatable); `@name` in the text counts too.
    #[arg(long = "mention")]
    mentions: Vec<String>,
    #[arg(long)]
    priority: Option<f64>,
    #[arg(long)]
    urgent: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Human,
    Persona,
    System,
}

pub async fn run(a: Args) -> ExitCode {
    let input = EventInput {
        id: a.id,
        ts: a.ts,
        domain: a.domain,
        room: a.room,
        from: a.from,
        sender_kind: match a.sender_kind {
            Kind::Human => SenderKind::Human,
            Kind::Persona => SenderKind::Persona,
            Kind::System => SenderKind::System,
        },
        text: a.text,
        persona: a.persona,
        mentions: a.mentions,
        priority: a.priority,
        urgent: a.urgent,
        in_reply_to: None,
    };
    match a.remote.client().inject(&input).await {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}
