//! Local model files (moving to `mindfleet-models`).

pub mod models;
