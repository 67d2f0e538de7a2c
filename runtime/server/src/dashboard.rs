//! The fleet dashboard: a page at `/` rendered on the server from the dump, so it is useful at
//! once and without scripts: a card per persona, the fleet (health, scheduler classes,
//! supervision tree), the rooms with their latest replies, and forms that drive the fleet
//! through the admin API. `GET /dashboard/persona/{name}` renders a persona's introspection
//! panel. `GET /dashboard/events` streams the same markup as Server-Sent Events, and the page's
//! script swaps in what changed: the page has one renderer, this module.
//!
//! One poller per server feeds every open page: it takes a dump a second while anyone listens,
//! sends a frame when something shown changed, and stops when the last page leaves, so ten tabs
//! cost what one does. The fleet stopping (or a failed dump) ends every stream; the page then
//! reconnects by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use ractor::{ActorRef, call_t};
use serde::Serialize;
use tokio::sync::watch;

use mindfleet_core::ai::AiQuery;
use mindfleet_core::cursor::{Direction, Page};
use mindfleet_core::dump::{FleetDump, PersonaDump};
use mindfleet_core::knowledge::{FetchRequest, IndexMsg, RagError, RagRequest};
use mindfleet_core::messages::{AdminMsg, DumpDepth, InjectError, PersonaStatus};
use mindfleet_core::model::{Decision, Mood, SelfStateData, StepState, WmEntry};
use mindfleet_core::sched::CostReport;
use mindfleet_core::team;

/// How often the poller takes a dump while a page listens.
const TICK: Duration = Duration::from_secs(1);
/// How long the poller waits for a dump.
const DUMP_CALL_MS: u64 = 10_000;
/// What a page waits before reconnecting, told to the browser with each stream.
const RETRY: Duration = Duration::from_secs(1);
/// The cost chart: tokens per persona over this window, in this many buckets, for the
/// personas that used most.
const COST_WINDOW: Duration = Duration::from_secs(15 * 60);
const COST_BUCKETS: u32 = 30;
const COST_PERSONAS: usize = 8;

pub const SCRIPT: &str = include_str!("dashboard/dashboard.js");
pub const STYLE: &str = include_str!("dashboard/dashboard.css");

/// What a card shows of a persona.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Card {
    pub name: String,
    pub role: String,
    /// The node it runs on, in a fleet across nodes.
    pub node: Option<String>,
    /// `thinking`, `working`, `idle`, `overloaded`, `dormant`, `failed`, `restarting`,
    /// `starting`, `stopped` or `unreachable` ([`status_of`]).
    pub status: &'static str,
    /// Cognitive load, 0..=1 (the badge's colour).
    pub load: f64,
    pub activity: String,
    pub objective: String,
    pub intensity: f64,
    pub capacity: f64,
    pub inbox: usize,
    pub inbox_capacity: usize,
    /// Share of its hourly model budget used, as of its last grant.
    pub budget_used: f64,
    /// Its concerns, most pressing first (at most three).
    pub preoccupations: Vec<String>,
    /// Its last decision, and why.
    pub last_decision: Option<(String, String)>,
    /// The card as the page shows it ([`render_card`]): the script swaps it in as it is, so
    /// the page has one renderer.
    pub html: String,
}

/// The status badge of a persona: its supervisor's word when it is not running, else dormant,
/// overloaded, working on a plan, thinking (an event in hand, no plan running yet), or idle.
pub fn status_of(p: &PersonaDump) -> &'static str {
    match p.status {
        PersonaStatus::Failed => return "failed",
        PersonaStatus::Restarting => return "restarting",
        PersonaStatus::Starting => return "starting",
        PersonaStatus::Stopped => return "stopped",
        PersonaStatus::Unreachable => return "unreachable",
        PersonaStatus::Running => {}
    }
    let Some(s) = &p.self_state else { return "starting" };
    if s.dormant {
        "dormant"
    } else if team::overloaded(s) || s.mood == Mood::Overwhelmed {
        "overloaded"
    } else if p.in_flight.is_some() {
        if p.plan.as_ref().is_some_and(|r| r.finished_us.is_none()) { "working" } else { "thinking" }
    } else {
        "idle"
    }
}

pub fn card(p: &PersonaDump) -> Card {
    let fallback = SelfStateData::default();
    let s = p.self_state.as_ref().unwrap_or(&fallback);
    let mut worries: Vec<_> = s.preoccupations.iter().collect();
    worries.sort_by(|a, b| b.priority.total_cmp(&a.priority));
    let mut card = Card {
        name: p.name.clone(),
        role: p.role.clone(),
        node: p.node.clone(),
        status: status_of(p),
        load: s.cognitive_load,
        activity: s.focus.activity.clone(),
        objective: s.focus.objective.clone(),
        intensity: s.focus.intensity,
        capacity: s.available_capacity,
        inbox: p.inbox.len,
        inbox_capacity: p.inbox.capacity,
        // Unknown while it is not running.
        budget_used: if p.self_state.is_some() { (1.0 - p.budget_left).clamp(0.0, 1.0) } else { 0.0 },
        preoccupations: worries.into_iter().take(3).map(|w| w.concern.clone()).collect(),
        last_decision: s
            .recent_decisions
            .last()
            .map(|d| (d.decision.clone(), d.reason.clone()))
            .or_else(|| p.decisions.first().map(|d| (named(&d.verdict), d.reason.clone()))),
        html: String::new(),
    };
    card.html = render_card(&card);
    card
}

/// The fleet as a whole: health, the scheduler's classes, and the supervision tree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetView {
    /// `healthy`, `reduce_load` or `assign_work`, with the counts it comes from.
    pub recommendation: String,
    pub overloaded: usize,
    pub idle: usize,
    pub dormant: usize,
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
    let h = team::health(d.personas.iter().filter_map(|p| p.self_state.as_ref()));
    let s = &d.scheduler;
    let class = |name, c: &mindfleet_core::sched::ClassStats| (name, c.queued, c.running, c.deadline_misses);
    FleetView {
        recommendation: named(&h.recommendation).to_lowercase(),
        overloaded: h.overloaded,
        idle: h.idle,
        dormant: h.dormant,
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
    }
}

/// A persona's tokens over time as a line, on a scale whose top is `max`.
fn sparkline(series: &[u64], max: u64) -> String {
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
fn render_cost(f: &FleetView) -> String {
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
            r#"<p class="health" data-recommendation="{rec}"><b>{rec}</b> <small>{over} overloaded, {idle} idle, {dormant} dormant, "#,
            r#"capacity {cap} on average</small></p>"#,
            r#"<table><caption>scheduler</caption><thead><tr><th>class</th><th>queued</th><th>running</th><th>late</th></tr></thead>"#,
            r#"<tbody>{classes}</tbody></table><p><small>deadline misses {misses}, skipped for the budget {skipped}</small></p>"#,
            "{cost}{nodes}",
            r#"<details><summary>supervision tree <small>({restarts} restarts)</small></summary><ul class="tree">{tree}</ul></details>"#,
            r#"</section>"#
        ),
        rec = e(&f.recommendation),
        over = f.overloaded,
        idle = f.idle,
        dormant = f.dormant,
        cap = percent(f.average_capacity),
        classes = classes,
        misses = f.deadline_misses,
        skipped = f.skipped,
        cost = render_cost(f),
        nodes = render_nodes(&f.nodes),
        restarts = f.tree.iter().map(|p| p.restarts + p.actors.iter().map(|a| a.2).sum::<u32>()).sum::<u32>(),
        tree = tree,
    )
}

/// The nodes of a fleet across nodes: each with its status, personas and links.
fn render_nodes(nodes: &[mindfleet_core::dump::NodeDump]) -> String {
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

/// A message in a room, from a person or a persona.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoomMessage {
    pub event_id: String,
    pub from: String,
    /// A persona's reply (else a person's message).
    pub persona: bool,
    pub text: String,
    /// The event a reply answers.
    pub in_reply_to: Option<String>,
    /// The personas that answered this message.
    pub answered_by: Vec<String>,
    pub at_us: i64,
}

/// A room: who is in it, and its latest messages, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Room {
    pub name: String,
    pub members: Vec<String>,
    pub messages: Vec<RoomMessage>,
}

/// Messages shown per room.
const ROOM_MESSAGES: usize = 8;

pub fn rooms(d: &FleetDump) -> Vec<Room> {
    d.admin
        .rooms
        .iter()
        .map(|(name, members)| {
            // The dump's events are newest first.
            let mut messages: Vec<RoomMessage> = d
                .recent_events
                .iter()
                .filter(|e| &e.room == name)
                .take(ROOM_MESSAGES)
                .map(|e| RoomMessage {
                    event_id: e.id.clone(),
                    from: e.from.clone(),
                    persona: e.sender_kind == mindfleet_core::event::SenderKind::Persona,
                    text: e.text.clone(),
                    in_reply_to: e.in_reply_to.clone(),
                    answered_by: d.outbox.iter().filter(|o| o.in_reply_to == e.id).map(|o| o.persona.clone()).collect(),
                    at_us: e.accepted_us,
                })
                .collect();
            messages.reverse();
            Room { name: name.clone(), members: members.clone(), messages }
        })
        .collect()
}

pub fn render_rooms(rooms: &[Room]) -> String {
    let e = escape;
    let mut out = String::from(r#"<section id="rooms" aria-label="rooms"><h2>Rooms</h2>"#);
    for r in rooms {
        out.push_str(&format!(
            r#"<article class="room" id="room-{n}"><h3>#{n}</h3><p class="members">{m}</p><ol class="messages">"#,
            n = e(&r.name),
            m = e(&r.members.join(", "))
        ));
        for m in &r.messages {
            let answered = if m.answered_by.is_empty() {
                String::new()
            } else {
                format!(r#" <small class="answered">answered by {}</small>"#, e(&m.answered_by.join(", ")))
            };
            out.push_str(&format!(
                r#"<li id="msg-{id}" data-from="{f}" data-kind="{kind}" data-reply-to="{to}"><b>{f}</b> {t}{answered}</li>"#,
                id = e(&m.event_id),
                f = e(&m.from),
                kind = if m.persona { "persona" } else { "person" },
                to = e(m.in_reply_to.as_deref().unwrap_or("")),
                t = e(&m.text)
            ));
        }
        out.push_str("</ol></article>");
    }
    out.push_str("</section>");
    out
}

/// The forms that drive the fleet through the admin API (the script sends them).
fn render_controls(cards: &[Card], rooms: &[Room]) -> String {
    let e = escape;
    let options = |names: &mut dyn Iterator<Item = &String>| {
        names.map(|n| format!(r#"<option value="{n}">{n}</option>"#, n = e(n))).collect::<String>()
    };
    format!(
        concat!(
            r#"<section id="controls" aria-label="controls"><h2>Controls</h2>"#,
            r#"<form id="inject"><fieldset><legend>Say in a room</legend>"#,
            r#"<label>room <select name="room">{rooms}</select></label>"#,
            r#"<label>from <input name="from" value="operator" required></label>"#,
            r#"<label>text <input name="text" required size="40"></label>"#,
            r#"<label>mentions <input name="mentions" placeholder="@helper @ops"></label>"#,
            r#"<button>Send</button> <output name="result" role="status"></output></fieldset></form>"#,
            r#"<form id="state"><fieldset><legend>Change a persona</legend>"#,
            r#"<label>persona <select name="persona">{personas}</select></label>"#,
            r#"<label>change <select name="change"><option value="dormant">make dormant</option>"#,
            r#"<option value="wake">wake</option><option value="focus">set focus</option></select></label>"#,
            r#"<label>objective <input name="objective"></label>"#,
            r#"<label>intensity <input name="intensity" type="number" min="0" max="1" step="0.1" value="0.5"></label>"#,
            r#"<button>Apply</button> <output name="result" role="status"></output></fieldset></form>"#,
            r#"</section>"#
        ),
        rooms = options(&mut rooms.iter().map(|r| &r.name)),
        personas = options(&mut cards.iter().map(|c| &c.name)),
    )
}

/// What a page shows, as of one dump; pages are sent [`Update`]s of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frame {
    pub fleet: String,
    pub generated_at: String,
    pub cards: Vec<Card>,
    pub rooms: Vec<Room>,
    /// The rooms as the page shows them ([`render_rooms`]).
    pub rooms_html: String,
    pub fleet_view: FleetView,
    /// The fleet view as the page shows it ([`render_fleet`]).
    pub fleet_html: String,
}

impl Frame {
    pub fn of(d: &FleetDump, cost: &CostReport) -> Frame {
        let (rooms, fleet_view) = (rooms(d), fleet_view(d, cost));
        Frame {
            fleet: d.fleet.clone(),
            generated_at: d.generated_at.clone(),
            cards: d.personas.iter().map(card).collect(),
            rooms_html: render_rooms(&rooms),
            rooms,
            fleet_html: render_fleet(&fleet_view),
            fleet_view,
        }
    }

    /// Whether a page would show anything else than `other` (the time aside). Cards compare by
    /// their markup: a load that moved by less than the page shows is no change.
    fn differs(&self, other: &Frame) -> bool {
        self.cards.len() != other.cards.len()
            || self.cards.iter().zip(&other.cards).any(|(a, b)| a.name != b.name || a.html != b.html)
            || self.rooms != other.rooms
            || self.fleet_view != other.fleet_view
    }

    /// What a page that shows `shown` needs to show this frame; everything without `shown`.
    pub fn update<'a>(&'a self, shown: Option<&Frame>) -> Update<'a> {
        let names = |f: &'a Frame| f.cards.iter().map(|c| c.name.as_str()).collect::<Vec<_>>();
        let order = names(self);
        let (cards, order): (Vec<&Card>, _) = match shown {
            None => (self.cards.iter().collect(), Some(order)),
            Some(prev) => {
                let before: std::collections::HashMap<&str, &Card> =
                    prev.cards.iter().map(|c| (c.name.as_str(), c)).collect();
                let changed =
                    self.cards.iter().filter(|c| before.get(c.name.as_str()).is_none_or(|b| b.html != c.html));
                let same_order =
                    prev.cards.len() == order.len() && prev.cards.iter().zip(&order).all(|(c, n)| c.name == *n);
                (changed.collect(), (!same_order).then_some(order))
            }
        };
        let rooms_changed = shown.is_none_or(|p| p.rooms != self.rooms);
        let fleet_changed = shown.is_none_or(|p| p.fleet_view != self.fleet_view);
        Update {
            fleet: &self.fleet,
            generated_at: &self.generated_at,
            cards: cards.into_iter().map(|c| CardUpdate { name: &c.name, status: c.status, html: &c.html }).collect(),
            order,
            rooms: rooms_changed.then_some(&self.rooms),
            rooms_html: rooms_changed.then_some(&self.rooms_html),
            fleet_view: fleet_changed.then_some(&self.fleet_view),
            fleet_html: fleet_changed.then_some(&self.fleet_html),
        }
    }
}

/// A card as a page is sent it: the markup, with the name and the status (the rest of
/// [`Card`] is in the markup, and in the dump).
#[derive(Debug, Serialize)]
pub struct CardUpdate<'a> {
    pub name: &'a str,
    pub status: &'static str,
    pub html: &'a str,
}

/// What a page is sent: the first of its stream holds everything, the next ones only what
/// changed since the one before (a page's stream sends them in order, none skipped).
#[derive(Debug, Serialize)]
pub struct Update<'a> {
    pub fleet: &'a str,
    pub generated_at: &'a str,
    /// The cards that changed (all of them, first).
    pub cards: Vec<CardUpdate<'a>>,
    /// Every persona's name in the order of the cards, when a card came or went (and first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rooms: Option<&'a Vec<Room>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rooms_html: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet_view: Option<&'a FleetView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet_html: Option<&'a String>,
}

/// Escapes text for HTML content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn percent(x: f64) -> String {
    format!("{:.0}%", (x * 100.0).clamp(0.0, 100.0))
}

/// One card's HTML.
pub fn render_card(c: &Card) -> String {
    let e = escape;
    let hover = {
        let mut lines = vec![format!("objective: {}", if c.objective.is_empty() { "-" } else { &c.objective })];
        if !c.preoccupations.is_empty() {
            lines.push(format!("preoccupations: {}", c.preoccupations.join("; ")));
        }
        if let Some((what, why)) = &c.last_decision {
            lines.push(format!("last decision: {what}: {why}"));
        }
        lines.join("\n")
    };
    format!(
        concat!(
            r#"<article class="card" id="card-{id}" data-persona="{id}" data-status="{status}" tabindex="0" title="{hover}">"#,
            r#"<header><h2>{name}</h2><span class="badge" style="--load:{load:.2}">{status}</span></header>"#,
            r#"<p class="role">{role}{node}</p>"#,
            r#"<dl>"#,
            r#"<dt>focus</dt><dd class="focus">{activity} <meter min="0" max="1" value="{intensity:.2}" title="intensity {intensity_pct}"></meter></dd>"#,
            r#"<dt>load</dt><dd class="load">{load_pct}</dd>"#,
            r#"<dt>capacity</dt><dd class="capacity">{capacity_pct}</dd>"#,
            r#"<dt>inbox</dt><dd class="inbox">{inbox} / {inbox_capacity}</dd>"#,
            r#"<dt>budget used</dt><dd class="budget">{budget_pct}</dd>"#,
            r#"</dl>"#,
            r#"<p class="decision">{decision}</p>"#,
            r#"</article>"#
        ),
        id = e(&c.name),
        name = e(&c.name),
        role = e(&c.role),
        node = c.node.as_deref().map_or_else(String::new, |n| format!(r#" <small class="node">on {}</small>"#, e(n))),
        status = c.status,
        hover = e(&hover),
        load = c.load,
        load_pct = percent(c.load),
        activity = e(&c.activity),
        intensity = c.intensity,
        intensity_pct = percent(c.intensity),
        capacity_pct = percent(c.capacity),
        inbox = c.inbox,
        inbox_capacity = c.inbox_capacity,
        budget_pct = percent(c.budget_used),
        decision = c.last_decision.as_ref().map_or_else(String::new, |(what, why)| format!("{}: {}", e(what), e(why))),
    )
}

/// The whole page, cards included.
pub fn render_page(f: &Frame) -> String {
    let cards: String = f.cards.iter().map(|c| c.html.as_str()).collect();
    format!(
        concat!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
            "<title>{fleet}: mindfleet</title><link rel=\"stylesheet\" href=\"/dashboard/dashboard.css\"></head>",
            "<body><header class=\"top\"><h1>{fleet}</h1>",
            "<p class=\"live\" id=\"live\" role=\"status\" data-state=\"static\">as of <time id=\"at\">{at}</time></p></header>",
            "<main><section id=\"cards\" aria-label=\"personas\">{cards}</section>",
            "<div class=\"side\">{fleet_view}{rooms}{controls}</div></main>",
            "<dialog id=\"panel\" aria-label=\"introspection\"><form method=\"dialog\"><button class=\"close\">Close</button></form>",
            "<div id=\"panel-body\"></div></dialog>",
            "<script src=\"/dashboard/dashboard.js\" defer></script></body></html>\n"
        ),
        fleet = escape(&f.fleet),
        at = escape(&f.generated_at),
        cards = cards,
        fleet_view = f.fleet_html,
        rooms = f.rooms_html,
        controls = render_controls(&f.cards, &f.rooms),
    )
}

/// A value's name as the API spells it (`snake_case`), or its compact JSON.
fn named<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// A list section of the panel: `items` (already HTML), or what an empty one means.
fn section(title: &str, empty: &str, items: Vec<String>) -> String {
    let body = if items.is_empty() {
        format!(r#"<p class="empty">{empty}</p>"#)
    } else {
        format!("<ol>{}</ol>", items.into_iter().map(|i| format!("<li>{i}</li>")).collect::<String>())
    };
    format!("<section><h3>{title}</h3>{body}</section>")
}

/// Entries per page of the panel's long lists.
pub const PAGE: usize = 10;

/// A long list of the panel, paged through the same cursor as `ai thoughts --page-size` and
/// `ai decisions --page-size`: its first page comes with the panel, the next ones from a cursor
/// opened when the first page is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    /// The decision journal, newest first.
    Decisions,
    /// Working memory's entries (the `thoughts` of `ai thoughts`).
    Memory,
}

impl List {
    /// The list named by the panel's path, `decisions` or `memory`.
    pub fn parse(name: &str) -> Option<List> {
        match name {
            "decisions" => Some(List::Decisions),
            "memory" => Some(List::Memory),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            List::Decisions => "decisions",
            List::Memory => "memory",
        }
    }

    fn items(self, p: &PersonaDump) -> Vec<serde_json::Value> {
        let json = |v: Result<serde_json::Value, _>| v.unwrap_or_default();
        match self {
            List::Decisions => p.decisions.iter().map(|d| json(serde_json::to_value(d))).collect(),
            List::Memory => p.working_memory.recent.iter().map(|m| json(serde_json::to_value(m))).collect(),
        }
    }

    /// The page the panel opens with, before any cursor.
    fn first_page(self, p: &PersonaDump) -> Page<serde_json::Value> {
        let mut entries = self.items(p);
        let total_count = entries.len();
        entries.truncate(PAGE);
        Page { offset: 0, entries, total_count, has_more: total_count > PAGE, has_previous: false }
    }

    /// One entry as the panel shows it.
    fn entry(self, v: &serde_json::Value) -> String {
        let e = escape;
        let at = |us: i64| mindfleet_core::time::rfc3339(us).get(11..19).unwrap_or_default().to_string();
        match self {
            List::Decisions => match serde_json::from_value::<Decision>(v.clone()) {
                Ok(d) => format!(
                    "<time>{}</time> <b>{}</b> {}: {}",
                    at(d.at_us),
                    named(&d.verdict),
                    e(&d.event_id),
                    e(&d.reason)
                ),
                Err(_) => e(&v.to_string()),
            },
            List::Memory => match serde_json::from_value::<WmEntry>(v.clone()) {
                Ok(m) => format!(
                    "<small>{}</small> {}: {} <small>({:.2})</small>",
                    e(&m.domain),
                    named(&m.kind),
                    e(&m.text),
                    m.importance
                ),
                Err(_) => e(&v.to_string()),
            },
        }
    }
}

/// A page of a list: the cursor it came from (none for the first page), its entries, and
/// buttons for the pages before and after.
pub fn render_list(persona: &str, list: List, handle: Option<&str>, page: &Page<serde_json::Value>) -> String {
    let (title, empty) = match list {
        List::Decisions => ("Decisions", "none yet"),
        List::Memory => ("Working memory", "empty"),
    };
    let body = if page.entries.is_empty() {
        format!(r#"<p class="empty">{empty}</p>"#)
    } else {
        let items: String = page.entries.iter().map(|v| format!("<li>{}</li>", list.entry(v))).collect();
        format!(r#"<ol start="{}">{items}</ol>"#, page.offset + 1)
    };
    let nav = if page.has_more || page.has_previous {
        let button = |dir: &str, label: &str, on: bool| {
            let disabled = if on { "" } else { " disabled" };
            format!(r#"<button type="button" data-page="{dir}"{disabled}>{label}</button>"#)
        };
        let (newer, older) = match list {
            List::Decisions => ("newer", "older"),
            List::Memory => ("previous", "next"),
        };
        format!(
            "<nav>{} {}</nav>",
            button("backward", newer, page.has_previous),
            button("forward", older, page.has_more)
        )
    } else {
        String::new()
    };
    let range = if page.entries.is_empty() {
        String::new()
    } else {
        format!(" <small>{}–{} of {}</small>", page.offset + 1, page.offset + page.entries.len(), page.total_count)
    };
    format!(
        r#"<section class="paged" data-persona="{p}" data-list="{l}" data-handle="{h}" data-offset="{o}"><h3>{title}{range}</h3>{body}{nav}</section>"#,
        p = escape(persona),
        l = list.name(),
        h = escape(handle.unwrap_or("")),
        o = page.offset,
    )
}

/// The introspection panel of a persona: its thoughts, working memory by domain, plan with the
/// state of each step, decision journal, learnings and recoveries; working memory and the journal
/// are paged ([`List`]). `learnings` and
/// `recoveries` are the answers of `ai learnings` and `ai recoveries` for it.
pub fn render_panel(p: &PersonaDump, learnings: &serde_json::Value, recoveries: &serde_json::Value) -> String {
    let e = escape;
    let at = |us: i64| mindfleet_core::time::rfc3339(us).get(11..19).unwrap_or_default().to_string();
    let fallback = SelfStateData::default();
    let s = p.self_state.as_ref().unwrap_or(&fallback);
    let thoughts =
        s.recent_thoughts.iter().rev().map(|t| format!("<time>{}</time> {}", at(t.at_us), e(&t.text))).collect();
    let mut domains: Vec<(&String, &usize)> = p.working_memory.per_domain.iter().collect();
    domains.sort();
    let domains: Vec<String> = domains.into_iter().map(|(d, n)| format!("{} ({n})", e(d))).collect();
    let plan = match &p.plan {
        None => r#"<p class="empty">no plan yet</p>"#.to_string(),
        Some(r) => {
            let steps: String = r
                .plan
                .steps
                .iter()
                .map(|st| {
                    let (state, failed) = match &st.state {
                        StepState::Pending => ("pending", String::new()),
                        StepState::Running => ("running", String::new()),
                        StepState::Done => ("done", String::new()),
                        StepState::Skipped => ("skipped", String::new()),
                        StepState::Failed { class, message } => {
                            ("failed", format!(" <small>{}: {}</small>", named(class), e(message)))
                        }
                    };
                    format!(
                        r#"<li data-state="{state}">{action} <span class="state">{state}</span>{contingency}{failed}</li>"#,
                        action = e(&named(&st.action)),
                        contingency = if st.contingency { " <small>(contingency)</small>" } else { "" },
                    )
                })
                .collect();
            let outcome = match (&r.evaluation, r.finished_us) {
                (Some(ev), _) => format!("{}: {}", if ev.success { "succeeded" } else { "failed" }, e(&ev.pattern)),
                (None, Some(_)) => "finished".into(),
                (None, None) => "running".into(),
            };
            format!(
                r#"<p>{goal} <small>for {event}, {outcome}, {n} adjustments</small></p><ol class="steps">{steps}</ol>"#,
                goal = e(&r.plan.goal),
                event = e(&r.event_id),
                n = r.adjustments.len(),
            )
        }
    };
    let list = |v: &serde_json::Value, key: &str| v[key].as_array().cloned().unwrap_or_default();
    let learnings = list(learnings, "learnings")
        .iter()
        .map(|l| {
            format!(
                "{} <small>({}) {} succeeded, {} failed</small>",
                e(l["pattern"].as_str().unwrap_or("")),
                e(l["domain"].as_str().unwrap_or("")),
                l["successes"],
                l["failures"]
            )
        })
        .collect();
    let recoveries = list(recoveries, "recoveries")
        .iter()
        .map(|r| {
            format!(
                "{} <small>{} adjustments, {}</small>",
                e(r["event_id"].as_str().unwrap_or("")),
                r["adjustments"].as_array().map_or(0, Vec::len),
                if r["recovered"] == true { "recovered" } else { "not recovered" }
            )
        })
        .collect();
    format!(
        concat!(
            r#"<div class="panel" id="panel-{id}" data-persona="{id}"><header><h2>{name}</h2> <span class="role">{role}</span> "#,
            r#"<span class="badge">{status}</span></header>{thoughts}<p class="domains">by domain: {domains}</p>{memory}"#,
            r#"<section><h3>Plan</h3>{plan}</section>{decisions}{learnings}{recoveries}</div>"#
        ),
        id = e(&p.name),
        name = e(&p.name),
        role = e(&p.role),
        status = status_of(p),
        thoughts = section("Thoughts", "no thoughts yet", thoughts),
        domains = if domains.is_empty() { "none".to_string() } else { domains.join(", ") },
        memory = render_list(&p.name, List::Memory, None, &List::Memory.first_page(p)),
        plan = plan,
        decisions = render_list(&p.name, List::Decisions, None, &List::Decisions.first_page(p)),
        learnings = section("Learnings", "none yet", learnings),
        recoveries = section("Recoveries", "none yet", recoveries),
    )
}

/// The page that asks for the admin token (the fleet has one); `wrong` after a refused try.
pub fn render_login(wrong: bool) -> String {
    format!(
        concat!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mindfleet: sign in</title>",
            "<link rel=\"stylesheet\" href=\"/dashboard/dashboard.css\"></head><body><main class=\"login\">",
            "<form method=\"post\" action=\"/dashboard/login\"><h1>mindfleet</h1>{wrong}",
            "<label>admin token <input name=\"token\" type=\"password\" autocomplete=\"current-password\" required autofocus></label> ",
            "<button>Sign in</button></form></main></body></html>\n"
        ),
        wrong = if wrong { r#"<p class="error" role="alert">That is not the token.</p>"# } else { "" },
    )
}

/// The dump of the whole fleet and its cost timeline, as the admin gives them. Without a cost
/// report (the scheduler busy past the wait) the chart is empty for this frame.
async fn frame(admin: &ActorRef<AdminMsg>) -> Result<(FleetDump, CostReport), String> {
    let d = match call_t!(admin, |reply| AdminMsg::Dump { persona: None, depth: DumpDepth::Cards, reply }, DUMP_CALL_MS)
    {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(e) => return Err(format!("admin unavailable: {e}")),
    };
    let ask = AiQuery::Cost { since_secs: COST_WINDOW.as_secs(), buckets: COST_BUCKETS };
    let cost = match call_t!(admin, AdminMsg::Ai, DUMP_CALL_MS, ask) {
        Ok(Ok(v)) => serde_json::from_value(v).unwrap_or_default(),
        _ => CostReport::default(),
    };
    Ok((d, cost))
}

pub async fn page(admin: &ActorRef<AdminMsg>) -> Result<String, String> {
    let (d, cost) = frame(admin).await?;
    tokio::task::spawn_blocking(move || render_page(&Frame::of(&d, &cost))).await.map_err(|e| e.to_string())
}

/// What the panel of `persona` is made of: its dump, its learnings and its recoveries (three
/// calls to the Admin, one after the other). `Ok(None)`: no such persona.
pub async fn panel(admin: &ActorRef<AdminMsg>, persona: String) -> Result<Option<String>, String> {
    let unavailable = |e| format!("admin unavailable: {e}");
    let d = match call_t!(
        admin,
        |reply| AdminMsg::Dump { persona: Some(persona.clone()), depth: DumpDepth::Full, reply },
        DUMP_CALL_MS
    ) {
        Ok(Ok(d)) => d,
        Ok(Err(InjectError::NotFound(_))) => return Ok(None),
        Ok(Err(e)) => return Err(e.to_string()),
        Err(e) => return Err(unavailable(e)),
    };
    let Some(p) = d.personas.into_iter().next() else { return Ok(None) };
    let ask = |q: AiQuery| async move {
        call_t!(admin, AdminMsg::Ai, DUMP_CALL_MS, q).map_err(unavailable)?.map_err(|e| e.to_string())
    };
    let learnings = ask(AiQuery::Learnings { persona: Some(persona.clone()) }).await?;
    let recoveries = ask(AiQuery::Recoveries { persona: Some(persona), limit: 20 }).await?;
    Ok(Some(render_panel(&p, &learnings, &recoveries)))
}

/// Another page of a panel's list: with `handle`, the page in `direction` of the cursor's last
/// one; without, a cursor is opened over the persona's list as it is now, and its second page
/// returned. `Ok(None)`: no such persona, or the cursor expired or was closed.
pub async fn list_page(
    admin: &ActorRef<AdminMsg>,
    index: &ActorRef<IndexMsg>,
    persona: String,
    list: List,
    handle: Option<String>,
    direction: Direction,
) -> Result<Option<String>, String> {
    let unavailable = |who: &str, e: &dyn std::fmt::Display| format!("{who} unavailable: {e}");
    let fetch = |handle: String, direction| async move {
        let req = RagRequest::Fetch(FetchRequest { handle, direction, offset: None, limit: None });
        call_t!(index, IndexMsg::Request, DUMP_CALL_MS, Box::new(req)).map_err(|e| unavailable("index", &e))
    };
    let answer = match handle {
        Some(h) => fetch(h, direction).await?,
        None => {
            let p = match call_t!(
                admin,
                |reply| AdminMsg::Dump { persona: Some(persona.clone()), depth: DumpDepth::Full, reply },
                DUMP_CALL_MS
            ) {
                Ok(Ok(d)) => d.personas.into_iter().next(),
                Ok(Err(InjectError::NotFound(_))) => None,
                Ok(Err(e)) => return Err(e.to_string()),
                Err(e) => return Err(unavailable("admin", &e)),
            };
            let Some(p) = p else { return Ok(None) };
            let items = list.items(&p);
            let opened = call_t!(index, |reply| IndexMsg::OpenList { items, page_size: PAGE, reply }, DUMP_CALL_MS)
                .map_err(|e| unavailable("index", &e))?
                .map_err(|e| e.to_string())?;
            let Some(h) = opened["handle"].as_str() else { return Err(format!("no handle in {opened}")) };
            fetch(h.to_string(), Direction::Forward).await?
        }
    };
    let mut v = match answer {
        Ok(v) => v,
        Err(RagError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let handle = v["handle"].take();
    let page: Page<serde_json::Value> = serde_json::from_value(v).map_err(|e| e.to_string())?;
    Ok(Some(render_list(&persona, list, handle.as_str(), &page)))
}

/// A frame as the feed publishes it, with its update from the frame published before it,
/// serialized once for every page that was sent that one.
pub struct Published {
    frame: Arc<Frame>,
    prev: Option<Arc<Frame>>,
    /// `frame.update(prev)`, as JSON.
    delta: String,
    /// `frame.update(None)`, as JSON, made when a page first needs it.
    full: OnceLock<String>,
}

impl Published {
    fn new(frame: Frame, prev: Option<Arc<Frame>>) -> Published {
        let delta = json(&frame.update(prev.as_deref()));
        Published { frame: Arc::new(frame), prev, delta, full: OnceLock::new() }
    }

    /// The update for a page that was last sent `shown`.
    fn data_for(&self, shown: Option<&Arc<Frame>>) -> String {
        match shown {
            None => self.full.get_or_init(|| json(&self.frame.update(None))).clone(),
            Some(s) if self.prev.as_ref().is_some_and(|p| Arc::ptr_eq(p, s)) => self.delta.clone(),
            Some(s) => json(&self.frame.update(Some(s))),
        }
    }
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

type Poller = watch::Sender<Option<Arc<Published>>>;

/// The latest frame (none before the first dump).
pub type Frames = watch::Receiver<Option<Arc<Published>>>;

/// The frames every open page listens to: one poller, started by the first listener.
#[derive(Clone, Default)]
pub struct Feed {
    live: Arc<Mutex<Option<Poller>>>,
}

impl Feed {
    /// A receiver of the frames, starting the poller if none runs.
    /// The poller stops when `ready` turns false (the fleet stopping) or a dump fails.
    pub fn subscribe(&self, admin: &ActorRef<AdminMsg>, ready: Arc<AtomicBool>) -> Frames {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = live.as_ref() {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(None);
        *live = Some(tx.clone());
        let (feed, admin) = (self.clone(), admin.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                {
                    // Nobody listens: stop (under the lock, so no one subscribes meanwhile).
                    let mut live = feed.live.lock().unwrap_or_else(|e| e.into_inner());
                    if tx.receiver_count() == 0 {
                        *live = None;
                        return;
                    }
                }
                let next = if ready.load(Ordering::Acquire) { frame(&admin).await } else { Err("stopping".into()) };
                match next {
                    // Published when something shown changed: a quiet fleet sends nothing. The
                    // rendering and the JSON are made off the runtime's workers, once for all pages.
                    Ok((d, cost)) => {
                        let prev = tx.borrow().as_ref().map(|p| p.frame.clone());
                        let made = tokio::task::spawn_blocking(move || {
                            let f = Frame::of(&d, &cost);
                            prev.as_ref().is_none_or(|p| f.differs(p)).then(|| Published::new(f, prev))
                        });
                        if let Ok(Some(p)) = made.await {
                            tx.send_replace(Some(Arc::new(p)));
                        }
                    }
                    Err(e) => {
                        // The fleet is going: every stream ends, and its page reconnects.
                        tracing::debug!(error = %e, "dashboard feed stops");
                        *feed.live.lock().unwrap_or_else(|e| e.into_inner()) = None;
                        return;
                    }
                }
            }
        });
        rx
    }
}

/// The stream of one page: a `cards` event per new frame, until the feed stops: the first with
/// everything, the next ones with what changed since ([`Frame::update`]).
pub fn events(mut rx: Frames) -> Sse<impl futures::Stream<Item = Result<Event, std::convert::Infallible>>> {
    // A page (re)connecting gets the latest frame at once.
    rx.mark_changed();
    let shown: Option<Arc<Frame>> = None;
    let stream = futures::stream::unfold((rx, shown, true), |(mut rx, shown, first)| async move {
        if first {
            // The reconnect delay, before anything else.
            return Some((Ok(Event::default().retry(RETRY).comment("hello")), (rx, shown, false)));
        }
        loop {
            rx.changed().await.ok()?;
            let published = rx.borrow_and_update().clone();
            if let Some(p) = published {
                let data = p.data_for(shown.as_ref());
                return Some((Ok(Event::default().event("cards").data(data)), (rx, Some(p.frame.clone()), false)));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mindfleet_core::dump::{ActorsDump, ChildDump, InboxDump, NodeDump, WorkingMemoryDump};
    use mindfleet_core::model::RecentDecision;

    fn persona(name: &str) -> PersonaDump {
        PersonaDump {
            name: name.into(),
            node: None,
            role: "assistant".into(),
            status: PersonaStatus::Running,
            brain: "rules".into(),
            brain_degraded: None,
            rooms: vec!["general".into()],
            domains: vec!["chat".into()],
            actors: ActorsDump {
                persona: ChildDump::running(0),
                inbox: ChildDump::running(0),
                self_state: ChildDump::running(0),
                working_memory: ChildDump::running(0),
            },
            self_state: Some(SelfStateData::default()),
            inbox: InboxDump { len: 2, capacity: 64, shed: 0, duplicates: 0, top: Vec::new() },
            working_memory: WorkingMemoryDump::default(),
            decisions: Vec::new(),
            in_flight: None,
            plan: None,
            cadence_ms: 0,
            budget_left: 0.75,
            references: None,
            conversation: None,
            study: None,
        }
    }

    fn dump(personas: Vec<PersonaDump>) -> FleetDump {
        FleetDump {
            fleet: "t".into(),
            generated_at: String::new(),
            supervisor: ChildDump::running(0),
            admin: Default::default(),
            scheduler: Default::default(),
            coordination: Default::default(),
            embedding: Default::default(),
            llm: Default::default(),
            index: Default::default(),
            storage: Default::default(),
            personas,
            outbox: Vec::new(),
            recent_events: Vec::new(),
            dead_letters: Vec::new(),
            nodes: Vec::new(),
        }
    }

    #[test]
    fn an_update_holds_what_changed_and_the_order_when_a_card_came_or_went() {
        let cost = CostReport::default();
        let before = Frame::of(&dump(vec![persona("ada"), persona("bob")]), &cost);
        let first = before.update(None);
        assert_eq!((first.cards.len(), first.order.clone()), (2, Some(vec!["ada", "bob"])));
        assert!(first.rooms_html.is_some() && first.fleet_html.is_some());
        assert!(before.update(Some(&before)).cards.is_empty(), "nothing changed");
        let mut calm = persona("ada");
        calm.self_state.as_mut().unwrap().cognitive_load = 0.001;
        let calm = Frame::of(&dump(vec![calm, persona("bob")]), &cost);
        assert!(!calm.differs(&before) && calm.update(Some(&before)).cards.is_empty(), "no change the page shows");

        let mut ada = persona("ada");
        ada.inbox.len = 9;
        let after = Frame::of(&dump(vec![ada, persona("bob")]), &cost);
        let u = after.update(Some(&before));
        assert_eq!(u.cards.iter().map(|c| c.name).collect::<Vec<_>>(), ["ada"]);
        assert!(u.order.is_none() && u.rooms_html.is_none(), "same cards, same rooms");
        let json = serde_json::to_value(&u).unwrap();
        assert!(json.get("order").is_none() && json.get("rooms").is_none(), "{json}");

        let gone = Frame::of(&dump(vec![persona("ada"), persona("cy")]), &cost);
        let u = gone.update(Some(&before));
        assert_eq!(u.cards.iter().map(|c| c.name).collect::<Vec<_>>(), ["cy"]);
        assert_eq!(u.order, Some(vec!["ada", "cy"]), "bob went, cy came");
    }

    #[test]
    fn the_badge_says_what_the_persona_is_doing_failure_and_dormancy_first() {
        let mut p = persona("helper");
        assert_eq!(status_of(&p), "idle");
        p.in_flight = Some("e1".into());
        assert_eq!(status_of(&p), "thinking", "an event in hand, no plan yet");
        p.self_state.as_mut().unwrap().cognitive_load = 0.95;
        assert_eq!(status_of(&p), "overloaded");
        p.self_state.as_mut().unwrap().dormant = true;
        assert_eq!(status_of(&p), "dormant");
        p.status = PersonaStatus::Failed;
        assert_eq!(status_of(&p), "failed");
    }

    #[test]
    fn a_card_escapes_what_people_typed() {
        let mut p = persona("helper");
        p.self_state.as_mut().unwrap().recent_decisions.push(RecentDecision {
            decision: "engage".into(),
            reason: "<script>alert('x')</script> & more".into(),
            at_us: 1,
        });
        let c = card(&p);
        assert_eq!(c.budget_used, 0.25);
        let html = render_card(&c);
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains(r#"data-status="idle""#) && html.contains("2 / 64"), "{html}");
    }

    #[test]
    fn the_cost_chart_draws_the_top_personas_on_one_scale() {
        use mindfleet_core::sched::{CostRow, CostSeries};
        let row = |k: &str, tokens| CostRow { key: k.into(), inferences: 1, tokens };
        let series = |k: &str, tokens: Vec<u64>| CostSeries { key: k.into(), tokens };
        let mut cost = CostReport {
            by_persona: vec![row("ada", 300), row("bob", 100)],
            timeline: vec![series("ada", vec![0, 200, 100]), series("bob", vec![100, 0, 0])],
            bucket_secs: 30.0,
            ..CostReport::default()
        };
        let mut d = dump(vec![persona("ada")]);
        let html = render_fleet(&fleet_view(&d, &cost));
        // ada's peak (200) is the top of the shared scale, bob's 100 half way.
        assert!(
            html.contains(r#"<tr data-persona="ada"><th scope="row">ada</th><td>300</td><td title="0 200 100">"#),
            "{html}"
        );
        assert!(html.contains(r#"points="0.0,23.0 60.0,1.0 120.0,12.0""#), "{html}");
        assert!(html.contains(r#"points="0.0,12.0 60.0,23.0 120.0,23.0""#), "{html}");
        assert!(html.contains("(per 30 s)"), "{html}");
        cost.by_persona = (0..12).map(|i| row(&format!("p{i}"), 1)).collect();
        cost.timeline = (0..12).map(|i| series(&format!("p{i}"), vec![1])).collect();
        assert_eq!(fleet_view(&d, &cost).cost.len(), COST_PERSONAS, "the top ones only");
        d.personas.clear();
        let quiet = render_fleet(&fleet_view(&d, &CostReport::default()));
        assert!(quiet.contains("no model calls in the last 15 min"), "{quiet}");
    }

    #[test]
    fn a_fleet_across_nodes_shows_its_nodes_and_where_each_persona_runs() {
        let mut d = dump(vec![PersonaDump { node: Some("b".into()), ..persona("ada") }]);
        assert!(!render_fleet(&fleet_view(&d, &CostReport::default())).contains("nodes"), "one node: no list");
        d.nodes = vec![
            NodeDump { name: "a".into(), status: "self".into(), personas: 0, links: vec![], ..Default::default() },
            NodeDump {
                name: "b".into(),
                status: "unreachable".into(),
                personas: 1,
                error: Some("link closed".into()),
                ..Default::default()
            },
        ];
        let html = render_fleet(&fleet_view(&d, &CostReport::default()));
        assert!(
            html.contains(r#"<li data-node="b" data-status="unreachable">b <small>unreachable, 1 personas: link closed</small></li>"#),
            "{html}"
        );
        assert!(
            card(&d.personas[0]).html.contains(r#"<p class="role">assistant <small class="node">on b</small></p>"#)
        );
    }
}
