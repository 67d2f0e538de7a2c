//! Replies worth reading. What a message asks ([`ask`]), what of the steps' findings bears on
//! it ([`material`]), the grounded reply built from that material ([`grounded`]), and the check
//! a model's draft passes before it is posted ([`check`]).
//!
//! The rules brain posts the grounded reply. A model brain is asked to phrase the same
//! material; its draft is posted only when it is not empty, does not repeat the message or
//! itself, and uses what was found without adding to it: otherwise the grounded reply goes
//! instead, and the decision says why.

pub mod ask;
pub mod check;
mod compose;
pub mod material;

pub use ask::{Ask, Social};
pub use check::{Finding, Flaw, check};
pub use compose::{clarify, grounded};
pub use material::{Piece, gather};

use mindfleet_core::conversation::{Recalled, Said};
use mindfleet_core::event::Event;
use mindfleet_core::knowledge::Source;
use mindfleet_core::record::WmEntry;

/// What a reply is built from: the message it answers and what the plan's steps found
/// (`brain::RespondContext::reply` gives it; this module knows nothing of brains).
pub struct Input<'a> {
    /// The persona replying.
    pub persona: &'a str,
    pub event: &'a Event,
    /// Working memory's entries for the event (only what someone said or a step found is
    /// material: never the persona's own notes).
    pub recalled: &'a [WmEntry],
    /// What conversation memory recalled.
    pub conversation: &'a [Recalled],
    /// The room's latest messages, oldest first.
    pub room: &'a [Said],
    /// The fleet's personas: what they said is a reply, not material.
    pub personas: &'a [String],
    /// What the knowledge search and the references found.
    pub found: &'a [Source],
    /// What long-term memory knows of topics near the message: (topic, summary).
    pub knowledge: Vec<(&'a str, &'a str)>,
    /// What the message asks (`Ask::of` its text).
    pub ask: std::borrow::Cow<'a, Ask>,
}

/// The material that bears on what `ctx`'s event asks, best first.
pub fn ground(ctx: &Input) -> Vec<Piece> {
    gather(ctx, &ctx.ask)
}

/// Checks a model's `draft` for `ctx` against the material `pieces`; `open`: the model may
/// answer without material.
pub fn check_draft(ctx: &Input, pieces: &[Piece], draft: &str, open: bool) -> Option<Finding> {
    let material: Vec<String> = pieces.iter().map(Piece::text).collect();
    // Mentions say who is asked, not what; the persona's own name and role are not facts: a
    // draft that names them says nothing.
    let asked: Vec<&str> = ctx.event.text.split_whitespace().filter(|w| !w.starts_with('@')).collect();
    check(draft, &asked.join(" "), &material, &[ctx.event.from.as_str()], open)
}

#[cfg(test)]
mod tests;
