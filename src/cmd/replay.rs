//! `mindfleet replay DATA_DIR`: feeds each persona's recorded history to its lifecycle again,
//! with no model, tool or network, and checks every decision, plan, reply and self-state change
//! against what the journal holds (`mindfleet_replay`). Exit 0: identical; 1: the first
//! divergence, with its diff; 2: a history refused (or bad arguments).

use std::path::PathBuf;
use std::process::ExitCode;

use mindfleet_replay::{HistoryReader, Options, Outcome, Report, Until};

use super::{Json, fail};

#[derive(clap::Args)]
pub struct Args {
    /// The data dir of the fleet whose history to replay (`[storage] data_dir`).
    data_dir: PathBuf,
    /// Only this persona's history.
    #[arg(long)]
    persona: Option<String>,
    /// Stop after this entry of each history (a number: a persona's entries count from 0) or
    /// this time (RFC 3339, e.g. 2026-11-29T10:00:00Z).
    #[arg(long, value_parser = until, conflicts_with = "live")]
    until: Option<Until>,
    /// Send the history's events again, in order, to a fresh fleet that asks its model and
    /// tools again, and report what each persona now does otherwise (exit 0 either way).
    #[arg(long)]
    live: bool,
    /// The fleet file of the live run (default: config/fleet.toml, else the embedded default).
    #[arg(long, requires = "live")]
    config: Option<PathBuf>,
    /// Where the live run keeps its data, to look at after (a new directory; default: a
    /// temporary one).
    #[arg(long, requires = "live")]
    live_data: Option<PathBuf>,
    #[command(flatten)]
    out: Json,
}

fn until(s: &str) -> Result<Until, String> {
    if let Ok(n) = s.parse::<u64>() {
        return Ok(Until::Row(n));
    }
    s.parse::<jiff::Timestamp>()
        .map(|t| Until::Time(t.as_microsecond()))
        .map_err(|e| format!("neither a row number nor an RFC 3339 time: {e}"))
}

pub fn run(Args { data_dir, persona, until, live, config, live_data, out: Json { json } }: Args) -> ExitCode {
    if live {
        return super::block_on(run_live(data_dir, config, live_data, json));
    }
    let reader = match HistoryReader::open(&data_dir) {
        Ok(r) => r,
        Err(e) => return fail(2, e),
    };
    let opts = Options { persona: persona.clone(), until, ..Options::default() };
    let report = match mindfleet_replay::replay(&reader, &opts) {
        Ok(r) => r,
        Err(e) => return fail(1, e),
    };
    if let Some(p) = persona
        && report.personas.is_empty()
    {
        return fail(2, format!("{}: no recorded history of persona {p:?}", data_dir.display()));
    }
    if json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        print!("{}", text(&data_dir, &report));
    }
    match report.outcome {
        Outcome::Identical => ExitCode::SUCCESS,
        Outcome::Diverged(_) => ExitCode::from(1),
        Outcome::Refused(_) => ExitCode::from(2),
    }
}

/// The report for people: a line per persona, then the outcome.
fn text(data_dir: &std::path::Path, r: &Report) -> String {
    let mut s = String::new();
    if let Some(why) = &r.copied {
        s += &format!("(read from a copy: {why})\n");
    }
    s += &format!(
        "{:<14} {:>5} {:>8} {:>8} {:>8} {:>11} {:>11} {:>11}\n",
        "persona", "runs", "inputs", "commits", "checked", "self-state", "recorded s", "replayed s"
    );
    for p in &r.personas {
        s += &format!(
            "{:<14} {:>5} {:>8} {:>8} {:>8} {:>11} {:>11.1} {:>11.3}\n",
            p.persona,
            p.runs,
            p.inputs,
            p.commits,
            p.commits_checked,
            p.self_state_changes,
            p.recorded_ms / 1e3,
            p.replay_ms / 1e3
        );
    }
    match &r.outcome {
        Outcome::Identical => s += &format!("{}: identical\n", data_dir.display()),
        Outcome::Diverged(d) => {
            s += &format!("{}: diverged: persona {}, row {}", data_dir.display(), d.persona, d.row);
            if let Some(e) = &d.event {
                s += &format!(", event {e}");
            }
            s += &format!("\n  {}\n  input: {}\n", d.what, d.input);
            for line in &d.diff {
                s += &format!("  {line}\n");
            }
        }
        Outcome::Refused(f) => {
            s += &format!("{}: refused: persona {}, row {}: {}\n", data_dir.display(), f.persona, f.row, f.reason)
        }
    }
    s
}

async fn run_live(data_dir: PathBuf, config: Option<PathBuf>, live_data: Option<PathBuf>, json: bool) -> ExitCode {
    let config = match mindfleet::fleet_config(config.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(2, format!("{e:#}")),
    };
    let report = match mindfleet::live::live(&data_dir, config, live_data.as_deref()).await {
        Ok(r) => r,
        Err(e) => return fail(1, format!("{e:#}")),
    };
    if json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let c = report.changed;
    println!(
        "{} events sent again, {} outcomes compared: {} verdicts, {} plans, {} replies, {} tool calls changed",
        report.events, report.compared, c.verdict, c.plan, c.reply, c.tool_calls
    );
    if !report.differences.is_empty() {
        println!("{:<22} {:<12} {:<28} {:<24} then -> now", "event", "persona", "text", "changed");
    }
    let cut = |s: &str, n: usize| {
        if s.chars().count() > n { format!("{}...", s.chars().take(n - 3).collect::<String>()) } else { s.to_string() }
    };
    for d in &report.differences {
        let (then, now) = if d.changed.contains(&"reply") {
            (
                d.recorded.reply.clone().unwrap_or_else(|| "(none)".into()),
                d.live.reply.clone().unwrap_or_else(|| "(none)".into()),
            )
        } else if d.changed.contains(&"verdict") {
            (d.recorded.verdict.clone(), d.live.verdict.clone())
        } else {
            (d.recorded.plan.join(" > "), d.live.plan.join(" > "))
        };
        println!(
            "{:<22} {:<12} {:<28} {:<24} {} -> {}",
            d.event,
            d.persona,
            cut(&d.text, 28),
            d.changed.join(","),
            cut(&then, 60),
            cut(&now, 60)
        );
    }
    ExitCode::SUCCESS
}
