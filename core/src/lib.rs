//! lambdafusion — serverless distributed SQL.
//!
//! DataFusion plans a query; [`plan`] cuts the physical plan into a stage DAG at every
//! exchange; the stateless [`scheduler`] keeps that DAG in a [`state::JobStore`] and
//! pushes every ready task through an [`dispatch::Invoker`]; the [`executor`] runs one
//! partition of one stage, writes its output through [`shuffle`] to an object store and
//! commits a completion record whose change record wakes the scheduler again.
//!
//! Every decision lives in this crate; the AWS backends (DynamoDB, Lambda, S3) live in
//! `lambdafusion-aws` and plug into the same seams. [`embedded::Embedded`] wires the
//! in-process implementations together for `lambdafusion serve` and the tests.

pub mod access;
pub mod analyze;
pub mod catalog;
pub mod config;
pub mod delta;
pub mod dispatch;
pub mod error;
pub mod executor;
pub mod faults;
pub mod format_scan;
pub mod glue;
pub mod hidden;
pub mod iceberg;
pub mod plan;
pub mod requests;
pub mod results;
pub mod scheduler;
pub mod services;
pub mod shuffle;
pub mod sql;
pub mod state;
pub mod status;
pub mod time;
pub mod time_travel;
pub mod write;

pub use config::EngineConfig;
pub use error::{Error, Result};
pub use services::Services;

/// Re-export of the DataFusion version this crate is built against.
pub use datafusion;

/// A multi-threaded tokio runtime whose threads have stacks deep enough for DataFusion's
/// planner on large queries (debug builds recurse deeply). Used by the CLI and both
/// Lambda functions.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(16 * 1024 * 1024)
        .build()
}
