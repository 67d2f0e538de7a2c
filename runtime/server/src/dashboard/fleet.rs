//! The fleet view beside the cards: health, the scheduler's classes and cost chart, the
//! supervision tree, and the nodes of a fleet across nodes.

use std::time::Duration;

use serde::Serialize;

use mindfleet_core::dump::FleetDump;
use mindfleet_core::sched::CostReport;
use mindfleet_core::tools::{ApprovalView, ToolServerDump};
use mindfleet_core::webhook::WebhookDump;

use super::html::{escape, named, percent};
use crate::team;

/// The cost chart: tokens per persona over this window, in this many buckets, for the
/// personas that used most.
pub(super) const COST_WINDOW: Duration = Duration::from_secs(15 * 60);
pub(super) const COST_BUCKETS: u32 = 30;
pub(super) const COST_PERSONAS: usize = 8;

/// The fleet as a whole: health, the scheduler's classes, and the supervision tree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetView {
    /// `healthy`, `reduce_load`, `assign_work` or `nobody_awake`, with the counts it comes
    /// from (`ai health`'s, from the personas' conditions, as their badges).
    pub recommendation: String,
    pub overloaded: usize,
    pub idle: usize,
    pub busy: usize,
    pub dormant: usize,
    pub down: usize,
    pub average_capacity: f64,
    /// Per class, highest first: (class, queued, running, deadline misses).
    pub classes: Vec<(&'static str, usize, usize, u64)>,
    /// Tasks skipped for the budget.
    pub skipped: u64,
    pub deadline_misses: u64,
    /// The supervision tree: the fleet's supervisor (its status), the shared actors it stops
    /// the fleet for (name, status), and each persona with its actors.
    pub supervisor: String,
    pub shared: Vec<(&'static str, String)>,
    pub tree: Vec<Supervised>,
    /// The personas that used most tokens over the cost window: (persona, tokens, tokens per
    /// bucket, oldest first).
    pub cost: Vec<(String, u64, Vec<u64>)>,
    pub cost_bucket_secs: f64,
    /// The nodes of a fleet across nodes, with their links (empty on one node).
    pub nodes: Vec<mindfleet_core::dump::NodeDump>,
    /// The webhooks, with their deliveries and newest dead letters (empty without one).
    pub webhooks: Vec<WebhookDump>,
    /// The tool servers, with their tools (empty without one).
    pub tools: Vec<ToolServerDump>,
    /// The tool calls that wait for a person's approval.
    pub approvals: Vec<ApprovalView>,
}

/// A persona in the supervision tree: its status, restarts and last error, then its actors'
/// (name, status, restarts).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Supervised {
    pub persona: String,
    pub status: String,
    pub restarts: u32,
    pub last_error: Option<String>,
    pub actors: Vec<(&'static str, String, u32)>,
}

/// The fleet view of a dump, with the scheduler's cost report (asked with a timeline).
pub fn fleet_view(d: &FleetDump, cost: &CostReport) -> FleetView {
    let h = team::health(&d.personas);
    let s = &d.scheduler;
    let class = |name, c: &mindfleet_core::sched::ClassStats| (name, c.queued, c.running, c.deadline_misses);
    FleetView {
        recommendation: named(&h.recommendation).to_lowercase(),
        overloaded: h.overloaded,
        idle: h.idle,
        busy: h.busy,
        dormant: h.dormant,
        down: h.down,
        average_capacity: h.average_capacity,
        classes: vec![
            class("urgent", &s.urgent),
            class("interactive", &s.interactive),
            class("work", &s.work),
            class("background", &s.background),
        ],
        skipped: s.skipped.total(),
        deadline_misses: s.deadline_misses,
        supervisor: d.supervisor.status.clone(),
        shared: vec![
            ("admin", "running".into()),
            ("scheduler", "running".into()),
            ("coordinator", "running".into()),
            ("embedding", d.embedding.status.clone()),
            ("llm", d.llm.status.clone()),
            ("index", d.index.status.clone()),
        ],
        tree: d
            .personas
            .iter()
            .map(|p| {
                let a = &p.actors;
                let child = |name, c: &mindfleet_core::dump::ChildDump| (name, c.status.clone(), c.restarts);
                Supervised {
                    persona: p.name.clone(),
                    status: a.persona.status.clone(),
                    restarts: a.persona.restarts,
                    last_error: a.persona.last_error.clone(),
                    actors: vec![
                        child("inbox", &a.inbox),
                        child("self_state", &a.self_state),
                        child("working_memory", &a.working_memory),
                    ],
                }
            })
            .collect(),
        cost: cost
            .by_persona
            .iter()
            .zip(&cost.timeline)
            .take(COST_PERSONAS)
            .map(|(row, series)| (row.key.clone(), row.tokens, series.tokens.clone()))
            .collect(),
        cost_bucket_secs: cost.bucket_secs,
        nodes: d.nodes.clone(),
        webhooks: d.webhooks.clone(),
        tools: d.tools.servers.clone(),
        approvals: d.tools.approvals.clone(),
    }
}

/// A persona's tokens over time as a line, on a scale whose top is `max`.
pub(super) fn sparkline(series: &[u64], max: u64) -> String {
    const W: f64 = 120.0;
    const H: f64 = 24.0;
    let step = W / series.len().saturating_sub(1).max(1) as f64;
    let points: Vec<String> = series
        .iter()
        .enumerate()
        .map(|(i, &v)| format!("{:.1},{:.1}", i as f64 * step, H - 1.0 - v as f64 / max.max(1) as f64 * (H - 2.0)))
        .collect();
    format!(
        r#"<svg class="spark" viewBox="0 0 {W} {H}" width="{W}" height="{H}" aria-hidden="true"><polyline points="{}"/></svg>"#,
        points.join(" ")
    )
}

/// The cost chart: a row per persona, its tokens over the window as a line.
pub(super) fn render_cost(f: &FleetView) -> String {
    let window = COST_WINDOW.as_secs() / 60;
    if f.cost.is_empty() {
        return format!(r#"<p class="empty" id="cost">no model calls in the last {window} min</p>"#);
    }
    let max = f.cost.iter().flat_map(|(_, _, s)| s.iter().copied()).max().unwrap_or(0);
    let rows: String = f
        .cost
        .iter()
        .map(|(p, tokens, series)| {
            format!(
                r#"<tr data-persona="{p}"><th scope="row">{p}</th><td>{tokens}</td><td title="{series}">{line}</td></tr>"#,
                p = escape(p),
                series = series.iter().map(u64::to_string).collect::<Vec<_>>().join(" "),
                line = sparkline(series, max),
            )
        })
        .collect();
    format!(
        concat!(
            r#"<table id="cost"><caption>model tokens, last {window} min <small>(per {bucket:.0} s)</small></caption>"#,
            r#"<thead><tr><th>persona</th><th>tokens</th><th>over time</th></tr></thead><tbody>{rows}</tbody></table>"#
        ),
        window = window,
        bucket = f.cost_bucket_secs,
        rows = rows,
    )
}

pub fn render_fleet(f: &FleetView) -> String {
    let e = escape;
    let classes: String = f
        .classes
        .iter()
        .map(|(c, q, r, m)| format!("<tr><th scope=\"row\">{c}</th><td>{q}</td><td>{r}</td><td>{m}</td></tr>"))
        .collect();
    let shared: String = f
        .shared
        .iter()
        .map(|(name, status)| format!("{name} <small>{}</small>", e(status)))
        .collect::<Vec<_>>()
        .join(", ");
    let personas: String = f
        .tree
        .iter()
        .map(|p| {
            let error = p.last_error.as_deref().map_or_else(String::new, |err| format!(", last: {}", e(err)));
            let actors: String = p
                .actors
                .iter()
                .map(|(name, status, restarts)| {
                    format!(r#"<li data-actor="{name}">{name} <small>{}, restarts {restarts}</small></li>"#, e(status))
                })
                .collect();
            format!(
                r#"<li data-persona="{p}">{p} <small>{status}, restarts {restarts}{error}</small><ul>{actors}</ul></li>"#,
                p = e(&p.persona),
                status = e(&p.status),
                restarts = p.restarts,
            )
        })
        .collect();
    let tree = format!(
        r#"<li>supervisor <small>{sup}</small><ul><li>shared: {shared} <small>(not restarted: their failure stops the fleet)</small></li>{personas}</ul></li>"#,
        sup = e(&f.supervisor),
    );
    format!(
        concat!(
            r#"<section id="fleet" aria-label="fleet"><h2>Fleet</h2>"#,
            r#"<p class="health" data-recommendation="{rec}"><b>{rec}</b> <small>{over} overloaded, {busy} busy, {idle} idle, {dormant} dormant, {down} down, "#,
            r#"capacity {cap} on average</small></p>"#,
            r#"<table><caption>scheduler</caption><thead><tr><th>class</th><th>queued</th><th>running</th><th>late</th></tr></thead>"#,
            r#"<tbody>{classes}</tbody></table><p><small>deadline misses {misses}, skipped for the budget {skipped}</small></p>"#,
            "{approvals}{cost}{nodes}{webhooks}{tools}",
            r#"<details><summary>supervision tree <small>({restarts} restarts)</small></summary><ul class="tree">{tree}</ul></details>"#,
            r#"</section>"#
        ),
        rec = e(&f.recommendation),
        over = f.overloaded,
        idle = f.idle,
        busy = f.busy,
        dormant = f.dormant,
        down = f.down,
        cap = percent(f.average_capacity),
        classes = classes,
        misses = f.deadline_misses,
        skipped = f.skipped,
        cost = render_cost(f),
        nodes = render_nodes(&f.nodes),
        webhooks = render_webhooks(&f.webhooks),
        tools = render_tools(&f.tools),
        approvals = render_approvals(&f.approvals),
        restarts = f.tree.iter().map(|p| p.restarts + p.actors.iter().map(|a| a.2).sum::<u32>()).sum::<u32>(),
        tree = tree,
    )
}

/// The nodes of a fleet across nodes: each with its status, personas and links.
pub(super) fn render_nodes(nodes: &[mindfleet_core::dump::NodeDump]) -> String {
    if nodes.is_empty() {
        return String::new();
    }
    let items: String = nodes
        .iter()
        .map(|n| {
            let links = if n.links.is_empty() { String::new() } else { format!(", linked to {}", n.links.join(", ")) };
            let error = n.error.as_deref().map_or_else(String::new, |err| format!(": {err}"));
            format!(
                r#"<li data-node="{name}" data-status="{status}">{name} <small>{status}, {personas} personas{links}{error}</small></li>"#,
                name = escape(&n.name),
                status = escape(&n.status),
                personas = n.personas,
                links = escape(&links),
                error = escape(&error),
            )
        })
        .collect();
    format!(r#"<h3>nodes</h3><ul class="nodes">{items}</ul>"#)
}

/// The webhooks: each with its queue, deliveries, failed attempts and dead letters, the newest
/// of those listed (`mindfleet webhooks retry` sends them again).
pub(super) fn render_webhooks(hooks: &[WebhookDump]) -> String {
    if hooks.is_empty() {
        return String::new();
    }
    let items: String = hooks
        .iter()
        .map(|w| {
            let dead: String = w
                .dead_letters
                .iter()
                .map(|d| {
                    format!(
                        r#"<li data-delivery="{id}">{id} <small>{kind}, {attempts} attempts: {error}</small></li>"#,
                        id = escape(&d.id),
                        kind = d.kind.as_str(),
                        attempts = d.attempts,
                        error = escape(&d.error),
                    )
                })
                .collect();
            let dead = if dead.is_empty() { dead } else { format!("<ul>{dead}</ul>") };
            format!(
                concat!(
                    r#"<li data-webhook="{name}" data-dead="{n_dead}">{name} <small>{url}: {pending} pending, "#,
                    r#"{delivered} delivered, {failures} failed attempts, {n_dead} dead</small>{dead}</li>"#
                ),
                name = escape(&w.name),
                url = escape(&w.url),
                pending = w.pending,
                delivered = w.delivered,
                failures = w.failures,
                n_dead = w.dead,
                dead = dead,
            )
        })
        .collect();
    format!(r#"<h3>webhooks</h3><ul class="webhooks">{items}</ul>"#)
}

/// The tool calls that wait for a person: who wants to call what, with which arguments and why,
/// with buttons that answer (`POST /ai/approvals/{id}`, sent by the page's script).
pub(super) fn render_approvals(approvals: &[ApprovalView]) -> String {
    if approvals.is_empty() {
        return String::new();
    }
    let items: String = approvals
        .iter()
        .map(|a| {
            format!(
                concat!(
                    r#"<li data-approval="{id}"><b>{persona}</b> wants to call <code>{tool}</code> "#,
                    r#"<code>{arguments}</code> <small>{why} (event {event}, #{room})</small> "#,
                    r#"<button type="button" data-approve="{id}">Approve</button> "#,
                    r#"<button type="button" data-deny="{id}">Deny</button></li>"#
                ),
                id = escape(&a.id),
                persona = escape(&a.persona),
                tool = escape(&a.tool),
                arguments = escape(&a.arguments),
                why = escape(&a.why),
                event = escape(&a.event_id),
                room = escape(&a.room),
            )
        })
        .collect();
    format!(
        r#"<details open id="approvals"><summary>waiting for approval ({n})</summary><ul>{items}</ul></details>"#,
        n = approvals.len()
    )
}

/// The tool servers: each with its state, restarts and calls, and its tools: read-only or not,
/// whether a call waits for approval, and why a tool is disabled (`mindfleet tools approve`).
pub(super) fn render_tools(servers: &[ToolServerDump]) -> String {
    if servers.is_empty() {
        return String::new();
    }
    let items: String = servers
        .iter()
        .map(|s| {
            let tools: String = s
                .tools
                .iter()
                .map(|t| {
                    let access = if t.read_only { "read-only" } else { "may write" };
                    let approval = if t.needs_approval { ", needs approval" } else { "" };
                    let disabled = t
                        .disabled
                        .as_deref()
                        .map_or_else(String::new, |why| format!(r#" <b class="disabled">disabled: {}</b>"#, escape(why)));
                    format!(
                        r#"<li data-tool="{name}" data-enabled="{enabled}">{name} <small>{access}{approval}, {calls} calls</small>{disabled}</li>"#,
                        name = escape(&t.name),
                        enabled = t.disabled.is_none(),
                        calls = t.calls,
                    )
                })
                .collect();
            format!(
                concat!(
                    r#"<li data-tool-server="{name}" data-state="{state}">{name} <small>{transport}, {state}, "#,
                    r#"restarts {restarts}, {calls} calls, {failures} failed</small><ul>{tools}</ul></li>"#
                ),
                name = escape(&s.name),
                transport = escape(&s.transport),
                state = escape(&s.state),
                restarts = s.restarts,
                calls = s.calls,
                failures = s.failures,
                tools = tools,
            )
        })
        .collect();
    format!(r#"<details open><summary>tools</summary><ul class="tools">{items}</ul></details>"#)
}
