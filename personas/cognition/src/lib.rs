//! What a persona thinks, as plain data and functions with no I/O: the engagement
//! [`gate`], the [`brain`]s (rules, and the local model's prompts and parsing), what a
//! [`reply`] is built from and the check of a model's draft, [`memory`] drafts, self-state
//! updates ([`mind`]), what a persona keeps of its [`references`] and of [`study`], and the
//! [`lifecycle`] of an event: a state machine that takes an input and the time and gives the
//! effects to carry out.
//!
//! Invariant: no runtime, actor, channel, thread, clock, random source, file or socket here.
//! The crate builds on the fleet's vocabulary without its actor messages
//! (`mindfleet-core` without its `actors` feature), so neither tokio nor ractor is in its tree;
//! the persona's actor (`mindfleet_personas::persona`) is the shell that feeds it and carries
//! its effects out.

pub mod brain;
pub mod gate;
pub mod history;
pub mod lifecycle;
pub mod memory;
pub mod mind;
pub mod references;
pub mod reply;
pub mod study;
