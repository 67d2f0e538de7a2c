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
mod deferred;
mod durability;
mod edges;
mod embed;
mod flow;
mod inbox;
mod llm;
mod mcp;
mod memory;
mod memory_eval;
mod models;
mod plans;
mod props;
mod rag;
mod readme;
mod readme_lines;
mod recall;
mod refs;
mod replies;
mod signals;
mod study;
mod supervision;
mod tools;
mod turns;
mod webhooks;
