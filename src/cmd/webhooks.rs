//! `mindfleet webhooks list|retry`: a running fleet's webhooks, and their dead letters sent again.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::{Json, Remote, fail};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: Remote,
    #[command(flatten)]
    out: Json,
    #[command(subcommand)]
    cmd: WebhooksCmd,
}

#[derive(Subcommand)]
enum WebhooksCmd {
    /// Each webhook: where it posts, what it is sent, its deliveries and its newest dead letters.
    List,
    /// Queue the dead letters again (behind what is queued), of one webhook or of all.
    Retry {
        /// The webhook's `name` (else its `url`); every webhook when left out.
        #[arg(long)]
        webhook: Option<String>,
    },
}

pub async fn run(Args { remote, out: Json { json }, cmd }: Args) -> ExitCode {
    let client = remote.client();
    match cmd {
        WebhooksCmd::List => match client.dump(None).await {
            Ok(d) if json => {
                println!("{}", json!({ "webhooks": d.webhooks }));
                ExitCode::SUCCESS
            }
            Ok(d) => {
                if d.webhooks.is_empty() {
                    println!("no webhooks ([[webhook]] in the fleet file)");
                }
                for w in &d.webhooks {
                    println!(
                        "{}  {}  kinds: {}  pending {}  delivered {}  failed attempts {}  dead {}",
                        w.name,
                        w.url,
                        w.kinds.join(","),
                        w.pending,
                        w.delivered,
                        w.failures,
                        w.dead
                    );
                    for dl in &w.dead_letters {
                        println!(
                            "  dead: {} ({}) after {} attempts: {}",
                            dl.id,
                            dl.kind.as_str(),
                            dl.attempts,
                            dl.error
                        );
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(e.exit_code() as u8, e),
        },
        WebhooksCmd::Retry { webhook } => match client.webhooks_retry(webhook.as_deref()).await {
            Ok(v) if json => {
                println!("{v}");
                ExitCode::SUCCESS
            }
            Ok(v) => {
                println!("{} dead letters queued again", v["retried"]);
                ExitCode::SUCCESS
            }
            Err(e) => fail(e.exit_code() as u8, e),
        },
    }
}
