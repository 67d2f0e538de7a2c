//! `mindfleet ai ...`: asks a running fleet about its personas' minds (self-state, decisions,
//! plans, ...) through its admin API (`GET /ai/{query}`), and changes a self-state.

use std::process::ExitCode;

use clap::Subcommand;
use mindfleet::table;

use super::{Format, OutputFormat, Remote, fail};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: Remote,
    #[command(flatten)]
    format: Format,
    #[command(subcommand)]
    query: AiCmd,
}

#[derive(Subcommand)]
enum AiCmd {
    /// Self-states, or change one (`ai state update`).
    State {
        // Global, so `ai state update --persona NAME` takes it after `update` too.
        #[arg(long, global = true)]
        persona: Option<String>,
        #[command(subcommand)]
        update: Option<StateCmd>,
    },
    /// Working-memory entries of a persona, and its recent thoughts.
    Thoughts {
        #[arg(long)]
        persona: String,
        #[arg(long)]
        domain: Option<String>,
        /// Only the last while: 90s, 15m, 1h, 2d.
        #[arg(long)]
        since: Option<String>,
        /// Page through them under a handle (`mindfleet rag fetch HANDLE --admin ...`).
        #[arg(long)]
        page_size: Option<usize>,
    },
    /// Why an event was decided as it was: every persona's decision on it that the journal
    /// keeps (verdict, reason, rule, numbers, time) and the replies posted to it.
    Why {
        /// The event's id (as `inject` printed it).
        #[arg(long)]
        event: String,
    },
    /// What was said in a room, human and persona messages, oldest first (as its personas took
    /// it in and posted it).
    History {
        #[arg(long)]
        room: String,
        /// Only the last while: 90s, 15m, 1h, 2d.
        #[arg(long)]
        since: Option<String>,
        /// Page through it under a handle (`mindfleet rag fetch HANDLE --admin ...`, either way).
        #[arg(long)]
        page_size: Option<usize>,
    },
    /// The decision journal, with the reasons.
    Decisions {
        #[arg(long)]
        persona: String,
        /// engage, ignore, defer, shed, duplicate, skipped, dead_letter
        #[arg(long)]
        verdict: Option<String>,
        /// Only the last while: 90s, 15m, 1h, 2d.
        #[arg(long)]
        since: Option<String>,
        /// Only decisions on events of this room.
        #[arg(long)]
        room: Option<String>,
        /// Page through them under a handle (`mindfleet rag fetch HANDLE --admin ...`).
        #[arg(long)]
        page_size: Option<usize>,
    },
    /// The plan being run (or the last one); `ai plan history` for the finished ones.
    Plan {
        #[arg(long)]
        persona: String,
        #[command(subcommand)]
        history: Option<PlanCmd>,
    },
    /// Learnings with their success and failure counts (study sessions add `study: TOPIC`).
    Learnings {
        #[arg(long)]
        persona: Option<String>,
    },
    /// Train a LoRA adapter on the persona's study chats (about TOPIC, else all) in the model's
    /// idle time; held-out chats judge it, and it is kept only when it beats the base model.
    Train {
        #[arg(long)]
        persona: String,
        #[arg(long)]
        topic: Option<String>,
    },
    /// Have a persona study a topic in idle time: search the index, quiz itself on what it
    /// finds, grade the answers, keep learnings and training data. Without --topic, the
    /// knowledge gap it noted first.
    Study {
        #[arg(long)]
        persona: String,
        #[arg(long)]
        topic: Option<String>,
    },
    /// Plans that needed adjustments, and how they recovered.
    Recoveries {
        #[arg(long)]
        persona: Option<String>,
    },
    /// Long-term memory: experiences, procedures, knowledge, user profiles.
    Memory {
        #[arg(long)]
        persona: String,
    },
    /// LoRA adapters the persona trained from its study data: kept or discarded (and why), the
    /// held-out perplexity and grade before and after, and each run's whole record.
    Adapters {
        #[arg(long)]
        persona: String,
    },
    /// Overloaded, idle and focused personas, and a recommendation.
    Health,
    /// Who can take new work now, and why the others cannot.
    Availability {
        #[arg(long)]
        persona: Option<String>,
    },
    /// Who is doing what where: personas by room with their focus, and focus by domain.
    ActivityMap,
    /// Personas ranked by suitability for a task.
    SelectForTask {
        #[arg(long)]
        domain: String,
        #[arg(long, default_value_t = 0.5)]
        priority: f64,
        #[arg(long, default_value = "")]
        text: String,
    },
    /// What a persona was told about a topic: its conversation memory, recalled by words and
    /// meaning (ranked by their fused relevance, recency, importance and room; `degraded` when
    /// only words could be matched). Each message says who said it (`from`) and when (`at`).
    Recall {
        #[arg(long)]
        persona: String,
        /// The topic, in words.
        query: String,
        /// Rank this room's messages higher.
        #[arg(long)]
        room: Option<String>,
        /// Only what was said within this window: `90s`, `15m`, `1h`, `7d`.
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// The tool calls that wait for a person's approval: id, persona, tool, arguments, why.
    Approvals,
    /// Approve the tool call ID (as `ai approvals` lists it): it runs, and its plan goes on.
    Approve { id: String },
    /// Deny the tool call ID: its plan goes on without it (access_denied).
    Deny {
        id: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Model calls and tokens by persona, room and purpose, with latency percentiles.
    Cost {
        /// How far back: `90s`, `15m`, `1h` (default and most: the budget's hour).
        #[arg(long)]
        since: Option<String>,
        /// Also each persona's tokens over this many equal slices of the window (`timeline`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=120))]
        buckets: Option<u32>,
    },
}

#[derive(Subcommand)]
enum StateCmd {
    /// Make a persona dormant, wake it, set its focus, or clear it (it then takes up what it
    /// deferred).
    Update {
        #[arg(long)]
        dormant: bool,
        #[arg(long, conflicts_with = "dormant")]
        wake: bool,
        #[arg(long, conflicts_with_all = ["dormant", "wake"])]
        focus: Option<String>,
        #[arg(long, conflicts_with_all = ["dormant", "wake", "focus"])]
        clear_focus: bool,
        #[arg(long, default_value_t = 0.7)]
        intensity: f64,
    },
}

#[derive(Subcommand)]
enum PlanCmd {
    /// Finished plans, newest first.
    History {
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Page through them under a handle (`mindfleet rag fetch HANDLE --admin ...`).
        #[arg(long)]
        page_size: Option<usize>,
    },
}

pub async fn run(Args { remote, format, query }: Args) -> ExitCode {
    let format = match format.only("ai", &[OutputFormat::Json, OutputFormat::Table]) {
        Ok(f) => f,
        Err(e) => return fail(2, e),
    };
    let client = remote.client();
    let opt = |k: &'static str, v: Option<String>| v.map(|v| (k, v));
    // Checked here too, so a typo is reported without a round trip (same message as the API's).
    if let AiCmd::Thoughts { since: Some(since), .. }
    | AiCmd::Decisions { since: Some(since), .. }
    | AiCmd::History { since: Some(since), .. }
    | AiCmd::Cost { since: Some(since), .. } = &query
        && let Err(e) = mindfleet_core::ai::parse_window(since)
    {
        return fail(2, e);
    }
    let r = match query {
        AiCmd::State {
            persona: Some(persona),
            update: Some(StateCmd::Update { dormant, wake, focus, clear_focus, intensity }),
        } => {
            let change = match (dormant, wake, focus) {
                (true, _, _) => serde_json::json!("dormant"),
                (_, true, _) => serde_json::json!("wake"),
                (_, _, Some(objective)) => {
                    serde_json::json!({"focus": {"objective": objective, "intensity": intensity}})
                }
                _ if clear_focus => serde_json::json!("clear_focus"),
                _ => return fail(2, "ai state update needs --dormant, --wake, --focus TEXT or --clear-focus"),
            };
            client.set_state(&serde_json::json!({"persona": persona, "change": change})).await
        }
        AiCmd::State { persona: None, update: Some(_) } => return fail(2, "ai state update needs --persona"),
        AiCmd::State { persona, update: None } => {
            client.ai("state", &opt("persona", persona).into_iter().collect::<Vec<_>>()).await
        }
        AiCmd::Thoughts { persona, domain, since, page_size } => {
            let page_size = page_size.map(|n| n.to_string());
            let p: Vec<_> =
                [Some(("persona", persona)), opt("domain", domain), opt("since", since), opt("page_size", page_size)]
                    .into_iter()
                    .flatten()
                    .collect();
            client.ai("thoughts", &p).await
        }
        AiCmd::Decisions { persona, verdict, since, room, page_size } => {
            let page_size = page_size.map(|n| n.to_string());
            let p: Vec<_> = [
                Some(("persona", persona)),
                opt("verdict", verdict),
                opt("since", since),
                opt("room", room),
                opt("page_size", page_size),
            ]
            .into_iter()
            .flatten()
            .collect();
            client.ai("decisions", &p).await
        }
        AiCmd::Plan { persona, history: None } => client.ai("plan", &[("persona", persona)]).await,
        AiCmd::Plan { persona, history: Some(PlanCmd::History { limit, page_size }) } => {
            let p: Vec<_> = [Some(("persona", persona)), Some(("limit", limit.to_string()))]
                .into_iter()
                .chain([opt("page_size", page_size.map(|n| n.to_string()))])
                .flatten()
                .collect();
            client.ai("plan-history", &p).await
        }
        AiCmd::Learnings { persona } => {
            client.ai("learnings", &opt("persona", persona).into_iter().collect::<Vec<_>>()).await
        }
        AiCmd::Study { persona, topic } => client.study(&serde_json::json!({"persona": persona, "topic": topic})).await,
        AiCmd::Train { persona, topic } => client.train(&serde_json::json!({"persona": persona, "topic": topic})).await,
        AiCmd::Recoveries { persona } => {
            client.ai("recoveries", &opt("persona", persona).into_iter().collect::<Vec<_>>()).await
        }
        AiCmd::Memory { persona } => client.ai("memory", &[("persona", persona)]).await,
        AiCmd::Adapters { persona } => client.ai("adapters", &[("persona", persona)]).await,
        AiCmd::Health => client.ai("health", &[]).await,
        AiCmd::Why { event } => client.ai("why", &[("event", event)]).await,
        AiCmd::History { room, since, page_size } => {
            let p: Vec<_> =
                [Some(("room", room)), opt("since", since), opt("page_size", page_size.map(|n| n.to_string()))]
                    .into_iter()
                    .flatten()
                    .collect();
            client.ai("history", &p).await
        }
        AiCmd::Availability { persona } => {
            client.ai("availability", &opt("persona", persona).into_iter().collect::<Vec<_>>()).await
        }
        AiCmd::ActivityMap => client.ai("activity-map", &[]).await,
        AiCmd::Approvals => client.approvals().await,
        AiCmd::Approve { id } => client.decide(&id, true, "", "cli").await,
        AiCmd::Deny { id, reason } => client.decide(&id, false, &reason, "cli").await,
        AiCmd::Cost { since, buckets } => {
            let params: Vec<_> =
                opt("since", since).into_iter().chain(opt("buckets", buckets.map(|b| b.to_string()))).collect();
            client.ai("cost", &params).await
        }
        AiCmd::Recall { persona, query, room, since, limit } => {
            let p: Vec<_> = [Some(("persona", persona)), Some(("text", query)), opt("room", room), opt("since", since)]
                .into_iter()
                .flatten()
                .chain([("limit", limit.to_string())])
                .collect();
            client.ai("recall", &p).await
        }
        AiCmd::SelectForTask { domain, priority, text } => {
            client
                .ai("select-for-task", &[("domain", domain), ("priority", priority.to_string()), ("text", text)])
                .await
        }
    };
    match r {
        Ok(v) => {
            match format {
                OutputFormat::Table => print!("{}", table::render(&v)),
                _ => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.exit_code() as u8, e),
    }
}
