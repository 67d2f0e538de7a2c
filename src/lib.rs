//! mindfleet: a runtime for fleets of self-aware AI personas.
//!
//! This crate holds the fleet supervisor ([`fleet`]), the command-line client of the admin
//! API ([`client`]), the codebase index's commands ([`rag`]) and the benchmarks ([`bench`]);
//! the binary `mindfleet` wires them to the command line. See `docs/ARCHITECTURE.md` for the
//! crates and the supervision tree.

pub mod bench;
pub mod client;
pub mod fleet;
pub mod panic_hook;
pub mod rag;
pub mod table;

pub use fleet::{Fleet, FleetError};
