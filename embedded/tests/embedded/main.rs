//! The embedded engine's tests as one test binary (one link of DataFusion, not eight); each
//! module was a test file of its own. Run one part with a filter, e.g.
//! `cargo test --workspace --test embedded failure_model::`.

#[path = "../common/mod.rs"]
mod common;

mod delta_writes;
mod embedded;
mod failure_model;
mod fault_tolerance;
mod handoff;
mod iceberg_writes;
mod peer_cases;
mod persistence;
mod planning;
mod shuffle;
mod views;
mod writes;
