//! Helpers for the end-to-end tests: the local AWS stack (started and stopped around a
//! test), clients configured for it, and DataFusion's sqllogictest suite run through
//! the engine ([`slt`]), and the job store's specification ([`conformance`]).

pub mod conformance;
pub mod slt;
pub mod stack;
pub mod workload;
