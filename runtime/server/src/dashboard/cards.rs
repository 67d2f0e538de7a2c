//! A persona's card: what it shows ([`Card`], from the persona's dump), its status badge, and
//! its markup.

use serde::Serialize;

use mindfleet_core::dump::PersonaDump;
use mindfleet_core::record::SelfStateData;

use super::html::{escape, named, percent};
use crate::team::condition;

/// What a card shows of a persona.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Card {
    pub name: String,
    pub role: String,
    /// The node it runs on, in a fleet across nodes.
    pub node: Option<String>,
    /// `thinking`, `working`, `waiting`, `focused`, `idle`, `overloaded`, `dormant`, `failed`,
    /// `restarting`, `starting`, `stopped` or `unreachable` ([`status_of`]).
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

/// The status badge of a persona: its [`condition`], the one rule health, availability and the
/// activity map read too.
pub fn status_of(p: &PersonaDump) -> &'static str {
    condition(p).as_str()
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
