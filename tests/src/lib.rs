//! Helpers for the end-to-end tests: the local AWS stack (started and stopped around a
//! test), and clients configured for it.

pub mod stack;
pub mod workload;
