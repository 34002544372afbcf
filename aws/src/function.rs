//! What both Lambda binaries do before serving: logging fit for CloudWatch, one JSON object
//! per line (Lambda's JSON log format), filtered by `RUST_LOG` (default `info`).
//!
//! Each line carries its level, message and fields at the top, and the current span's
//! fields under `span`: on a task's lines `job_id`, `stage`, `task` and `attempt`, on the
//! scheduler's the `job_id` it works on. `lambdafusion logs <query-id>` finds a query's
//! lines in both functions' log groups by its id ([`crate::logs`]).

/// Initializes logging for a function.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(false)
        .init();
}
