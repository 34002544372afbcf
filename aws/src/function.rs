//! What both Lambda binaries do before serving: logging fit for CloudWatch (no colours,
//! no timestamps of our own: Lambda adds them), filtered by `RUST_LOG` (default `info`).

/// Initializes logging for a function.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(false)
        .without_time()
        .init();
}
