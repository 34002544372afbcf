//! The HTTP API's tests as one test binary; each module was a test file of its own. Run one
//! part with a filter, e.g. `cargo test --workspace --test api access::`.

#[path = "../../../embedded/tests/common/mod.rs"]
mod common;

mod access;
mod api;
