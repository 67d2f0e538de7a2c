//! The fleet dashboard: a page at `/` rendered on the server from the dump, so it is useful at
//! once and without scripts: a card per persona, the fleet (health, scheduler classes,
//! supervision tree), the rooms with their latest replies, and forms that drive the fleet
//! through the admin API. `GET /dashboard/persona/{name}` renders a persona's introspection
//! panel. `GET /dashboard/events` streams the same markup as Server-Sent Events, and the page's
//! script swaps in what changed: the page has one renderer, this folder.
//!
//! One poller per server feeds every open page: it takes a dump a second while anyone listens,
//! sends a frame when something shown changed, and stops when the last page leaves, so ten tabs
//! cost what one does. The fleet stopping (or a failed dump) ends every stream; the page then
//! reconnects by itself.

use ractor::{ActorRef, call_t};

use mindfleet_core::ai::AiQuery;
use mindfleet_core::cursor::{Direction, Page};
use mindfleet_core::dump::FleetDump;
use mindfleet_core::knowledge::{FetchRequest, IndexMsg, RagError, RagRequest};
use mindfleet_core::messages::{AdminMsg, DumpDepth, InjectError};
use mindfleet_core::sched::CostReport;

mod cards;
mod feed;
mod fleet;
mod html;
mod page;
mod panel;
mod rooms;

pub use cards::{Card, card, render_card, status_of};
pub use feed::{Feed, Frames, Published, events};
pub use fleet::{FleetView, Supervised, fleet_view, render_fleet};
pub use html::escape;
pub use page::{CardUpdate, Frame, Update, render_page};
pub use panel::{Answers, List, PAGE, render_list, render_panel};
pub use rooms::{Room, RoomMessage, render_rooms, rooms};

use fleet::{COST_BUCKETS, COST_WINDOW};

/// How long the dashboard waits for the admin (a dump, an answer) and for the index.
const DUMP_CALL_MS: u64 = 10_000;

pub const SCRIPT: &str = include_str!("dashboard.js");
pub const STYLE: &str = include_str!("dashboard.css");

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

/// What the panel of `persona` is made of: its dump, its learnings, recoveries and adapters
/// (four calls to the Admin, one after the other). `Ok(None)`: no such persona.
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
    let recoveries = ask(AiQuery::Recoveries { persona: Some(persona.clone()), limit: 20 }).await?;
    let adapters = ask(AiQuery::Adapters { persona }).await?;
    Ok(Some(render_panel(&p, &Answers { learnings, recoveries, adapters })))
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

#[cfg(test)]
mod tests;
