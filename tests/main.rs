//! Integration tests: one binary (see `util` for the shared fixtures).

mod util;

mod ai;
mod api;
mod browser;
mod budget;
mod chaos;
mod cluster;
mod config;
mod conversation;
mod dashboard;
mod durability;
mod edges;
mod embed;
mod flow;
mod inbox;
mod llm;
mod memory;
mod models;
mod plans;
mod props;
mod rag;
mod refs;
mod study;
mod supervision;
