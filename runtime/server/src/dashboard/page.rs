//! The page: a [`Frame`] (what a page shows as of one dump, cards, rooms and fleet view, each
//! rendered once), the [`Update`] a listening page is sent, the whole page's markup and its forms.

use serde::Serialize;

use mindfleet_core::dump::FleetDump;
use mindfleet_core::sched::CostReport;

use super::cards::{Card, card};
use super::fleet::{FleetView, fleet_view, render_fleet};
use super::html::escape;
use super::rooms::{Room, render_rooms, rooms};

/// The forms that drive the fleet through the admin API (the script sends them).
pub(super) fn render_controls(cards: &[Card], rooms: &[Room]) -> String {
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
    pub(super) fn differs(&self, other: &Frame) -> bool {
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
