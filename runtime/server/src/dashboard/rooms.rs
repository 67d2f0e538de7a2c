//! The rooms beside the cards, each with its latest messages.

use serde::Serialize;

use mindfleet_core::dump::FleetDump;

use super::html::escape;

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
pub(super) const ROOM_MESSAGES: usize = 8;

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
                    // When it was said (its `ts`), as conversation memory keeps it.
                    at_us: e.ts_us,
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
