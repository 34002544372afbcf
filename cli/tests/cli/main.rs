//! The command line's tests as one test binary (one link of DataFusion, not four); each
//! module was a test file of its own. Run one part with a filter, e.g.
//! `cargo test --workspace --test cli fuzz::`.

mod fuzz;
mod hostile;
mod query_and_shell;
mod serve;
