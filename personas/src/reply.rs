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

use crate::brain::RespondContext;

/// What `ctx`'s event asks, and the material that bears on it, best first.
pub fn ground(ctx: &RespondContext) -> (Ask, Vec<Piece>) {
    let ask = Ask::of(&ctx.event.text, &ctx.event.domain, ctx.persona);
    let pieces = gather(ctx, &ask);
    (ask, pieces)
}

/// Checks a model's `draft` for `ctx` against the material `pieces`; `open`: the model may
/// answer without material.
pub fn check_draft(ctx: &RespondContext, pieces: &[Piece], draft: &str, open: bool) -> Option<Finding> {
    let material: Vec<String> = pieces.iter().map(Piece::text).collect();
    // Mentions say who is asked, not what; the persona's own name and role are not facts: a
    // draft that names them says nothing.
    let asked: Vec<&str> = ctx.event.text.split_whitespace().filter(|w| !w.starts_with('@')).collect();
    check(draft, &asked.join(" "), &material, &[ctx.event.from.as_str()], open)
}

#[cfg(test)]
mod tests;
