//! Engine settings shared by scheduler and executor, with defaults fit for both the
//! embedded engine and Lambda.

use std::time::Duration;

/// Settings the scheduler and executor read. Build with [`EngineConfig::default`] and the
/// `with_*` methods; the AWS crate fills it from environment variables.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Target input bytes per task of a leaf stage: a scan of `n` bytes gets about
    /// `n / bytes_per_task` tasks (at least one, at most `max_tasks_per_stage`).
    pub bytes_per_task: u64,
    /// Target shuffle input bytes per task of a stage reading hash shuffles: when the
    /// stage becomes ready, its small partitions are merged into tasks of about this
    /// much ([`crate::plan::adaptive`]).
    pub shuffle_bytes_per_task: u64,
    /// Least scan bytes a task of a leaf stage should read: when the stage becomes ready,
    /// its plan partitions smaller than this (an input cut finer than its work is worth,
    /// such as many small files or a small `bytes_per_task`) are merged into tasks of
    /// about this much ([`crate::plan::adaptive`]).
    pub min_scan_bytes_per_task: u64,
    /// A partitioned semi / anti / mark join whose emitted side commits at most this many
    /// bytes switches to a broadcast of that side: the other side's stage reads it whole
    /// and marks its rows instead of hash-shuffling them ([`crate::plan::switch`]).
    pub max_broadcast_bytes: u64,
    /// Whether stages are shaped from their inputs' committed sizes when they become
    /// ready (`false`: every stage runs exactly as planned at submit).
    pub adaptive: bool,
    /// A join build side that only scans files and reads at most this many bytes (a
    /// dimension table) is read by every consuming task itself instead of becoming a
    /// broadcast stage.
    pub inline_scan_bytes: u64,
    /// Upper bound on the number of tasks of any stage (and on hash shuffle width), at
    /// most [`MAX_TASKS_PER_STAGE`].
    pub max_tasks_per_stage: usize,
    /// Most ranged GETs one hash shuffle may take read directly, producers × consumer
    /// tasks: a shuffle planned wider goes through a combining stage (a two-level
    /// exchange), which regroups it so that reads grow about as the square root of that
    /// product, and which passes through when the shuffle turns out small enough.
    pub max_shuffle_reads: u64,
    /// Invocations one dispatcher makes: a stage of more tasks is sent through an
    /// invocation tree of dispatchers, each sending at most this many (tasks or further
    /// dispatchers), its leaves one commit counter's range each.
    pub dispatch_fanout: usize,
    /// Attempts a task gets (first run included) before its job fails.
    pub max_attempts: u32,
    /// A dispatched task with no completion record after this long is presumed lost
    /// and re-dispatched by the sweep.
    pub task_timeout: Duration,
    /// Concurrent dispatch calls one scheduler invocation makes.
    pub dispatch_concurrency: usize,
    /// Whether the executor that completes a stage wakes the scheduler at once
    /// instead of waiting for the change stream.
    pub fast_path: bool,
    /// How long job records live before the store may expire them.
    pub job_ttl: Duration,
    /// Stage plans larger than this go to object storage by reference.
    pub inline_plan_limit: usize,
    /// Largest accepted HTTP request body.
    pub max_request_bytes: usize,
    /// Rows per record batch inside executors.
    pub batch_size: usize,
    /// How often a running task checks whether its job was cancelled.
    pub cancel_check_interval: Duration,
    /// Largest result the API returns in one response body (a Lambda response carries at
    /// most 6 MB); larger results answer 413 and are downloaded through presigned URLs
    /// (`GET /v1/queries/{id}/result/objects`). `None`: no limit (streamed).
    pub max_response_bytes: Option<usize>,
    /// Where tables may live, and who may read what (see [`crate::access`]).
    pub access: crate::access::AccessPolicy,
    /// A claimed stage (or a retried attempt) whose invocations were not all confirmed
    /// within this time lost its dispatcher: its tasks are sent again.
    pub dispatch_deadline: Duration,
    /// Longest a query may run; a request may ask for less (`max_seconds`), never more.
    pub max_query_time: Duration,
    /// Longest SQL text accepted (the job record holds it; a DynamoDB item holds 400 KB).
    pub max_sql_bytes: usize,
    /// Time one sweep may spend; it continues where it stopped at the next run.
    pub sweep_budget: Duration,
    /// Memory each task may use before spilling (its own DataFusion memory pool);
    /// `None`: unbounded.
    pub task_memory_limit: Option<usize>,
    /// Deepest nesting a statement may have: expressions within expressions, subqueries,
    /// set-operation chains and joined tables each add a level ([`crate::sql`]). Past it
    /// the statement is refused before planning (400).
    pub max_sql_depth: usize,
    /// Longest planning may take (parsing, planning, cutting stages; and the statements
    /// the scheduler answers itself), within the query's own time limit.
    pub max_planning_time: Duration,
    /// Most stages one query may have (400 past it).
    pub max_stages_per_query: usize,
    /// Most tasks one query's stages may have together, as planned (400 past it).
    pub max_tasks_per_query: usize,
    /// Largest value a size-making function (`repeat`, `lpad`, `rpad`, `replace`,
    /// `array_repeat`, `range`, ...) may produce in one call, while planning (constant
    /// folding) or in a task ([`crate::plan::functions`]).
    pub max_value_bytes: usize,
}

/// The most tasks a stage may have (`max_tasks_per_stage`).
pub const MAX_TASKS_PER_STAGE: usize = 10_000;

/// Back-off of a throttled task invocation: `THROTTLE_BACKOFF_BASE * 2^throttles`, at most
/// [`THROTTLE_BACKOFF_CAP`].
pub const THROTTLE_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest back-off of a throttled task invocation.
pub const THROTTLE_BACKOFF_CAP: Duration = Duration::from_secs(60);

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            bytes_per_task: 128 * 1024 * 1024,
            shuffle_bytes_per_task: 64 * 1024 * 1024,
            min_scan_bytes_per_task: 16 * 1024 * 1024,
            max_broadcast_bytes: 16 * 1024 * 1024,
            adaptive: true,
            inline_scan_bytes: 4 * 1024 * 1024,
            max_tasks_per_stage: 1_000,
            dispatch_fanout: 32,
            max_shuffle_reads: 65_536,
            max_attempts: 3,
            task_timeout: Duration::from_secs(15 * 60),
            dispatch_concurrency: 32,
            fast_path: true,
            job_ttl: Duration::from_secs(7 * 24 * 3600),
            inline_plan_limit: 256 * 1024,
            max_request_bytes: 1024 * 1024,
            batch_size: 8192,
            cancel_check_interval: Duration::from_secs(1),
            max_response_bytes: None,
            access: crate::access::AccessPolicy::default(),
            dispatch_deadline: Duration::from_secs(30),
            max_query_time: Duration::from_secs(3600),
            max_sql_bytes: 256 * 1024,
            sweep_budget: Duration::from_secs(20),
            task_memory_limit: None,
            max_sql_depth: 1_000,
            max_planning_time: Duration::from_secs(30),
            max_stages_per_query: 200,
            max_tasks_per_query: 20_000,
            max_value_bytes: 64 * 1024 * 1024,
        }
    }
}

impl EngineConfig {
    /// Sets [`EngineConfig::bytes_per_task`].
    pub fn with_bytes_per_task(mut self, bytes: u64) -> Self {
        self.bytes_per_task = bytes.max(1);
        self
    }

    /// Sets [`EngineConfig::max_broadcast_bytes`] (0: never switch a join).
    pub fn with_max_broadcast_bytes(mut self, bytes: u64) -> Self {
        self.max_broadcast_bytes = bytes;
        self
    }

    /// Sets [`EngineConfig::min_scan_bytes_per_task`].
    pub fn with_min_scan_bytes_per_task(mut self, bytes: u64) -> Self {
        self.min_scan_bytes_per_task = bytes.max(1);
        self
    }

    /// Sets [`EngineConfig::shuffle_bytes_per_task`].
    pub fn with_shuffle_bytes_per_task(mut self, bytes: u64) -> Self {
        self.shuffle_bytes_per_task = bytes.max(1);
        self
    }

    /// Sets [`EngineConfig::adaptive`].
    pub fn with_adaptive(mut self, on: bool) -> Self {
        self.adaptive = on;
        self
    }

    /// Sets [`EngineConfig::max_tasks_per_stage`] (within 1..=[`MAX_TASKS_PER_STAGE`]).
    pub fn with_max_tasks_per_stage(mut self, tasks: usize) -> Self {
        self.max_tasks_per_stage = tasks.clamp(1, MAX_TASKS_PER_STAGE);
        self
    }

    /// Sets [`EngineConfig::max_shuffle_reads`] (at least 1).
    pub fn with_max_shuffle_reads(mut self, reads: u64) -> Self {
        self.max_shuffle_reads = reads.max(1);
        self
    }

    /// Sets [`EngineConfig::dispatch_fanout`] (at least 2).
    pub fn with_dispatch_fanout(mut self, fanout: usize) -> Self {
        self.dispatch_fanout = fanout.max(2);
        self
    }

    /// Sets [`EngineConfig::max_attempts`].
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets [`EngineConfig::task_timeout`].
    pub fn with_task_timeout(mut self, timeout: Duration) -> Self {
        self.task_timeout = timeout;
        self
    }

    /// Sets [`EngineConfig::fast_path`].
    pub fn with_fast_path(mut self, on: bool) -> Self {
        self.fast_path = on;
        self
    }

    /// Sets [`EngineConfig::job_ttl`].
    pub fn with_job_ttl(mut self, ttl: Duration) -> Self {
        self.job_ttl = ttl;
        self
    }

    /// Sets [`EngineConfig::inline_plan_limit`].
    pub fn with_inline_plan_limit(mut self, bytes: usize) -> Self {
        self.inline_plan_limit = bytes;
        self
    }

    /// Adds a location tables may be read from (see [`crate::access::AccessPolicy`]).
    pub fn with_data_location(mut self, location: impl Into<String>) -> Self {
        self.access.data_locations.push(location.into());
        self
    }

    /// Sets [`EngineConfig::max_query_time`].
    pub fn with_max_query_time(mut self, limit: Duration) -> Self {
        self.max_query_time = limit;
        self
    }

    /// The back-off before a task throttled `throttles` times is sent again.
    pub fn throttle_backoff(throttles: u32) -> Duration {
        THROTTLE_BACKOFF_BASE
            .saturating_mul(1u32 << throttles.min(16))
            .min(THROTTLE_BACKOFF_CAP)
    }

    /// Number of tasks for `bytes` of input: `ceil(bytes / bytes_per_task)` within
    /// `1..=max_tasks_per_stage`.
    pub fn tasks_for_bytes(&self, bytes: u64) -> usize {
        let tasks = bytes.div_ceil(self.bytes_per_task.max(1));
        (tasks as usize).clamp(1, self.max_tasks_per_stage.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_follow_input_size_within_bounds() {
        let c = EngineConfig::default()
            .with_bytes_per_task(100)
            .with_max_tasks_per_stage(8);
        assert_eq!(c.tasks_for_bytes(0), 1);
        assert_eq!(c.tasks_for_bytes(100), 1);
        assert_eq!(c.tasks_for_bytes(101), 2);
        assert_eq!(c.tasks_for_bytes(450), 5);
        assert_eq!(c.tasks_for_bytes(10_000), 8);
    }

    #[test]
    fn throttle_backoff_doubles_up_to_a_cap() {
        assert_eq!(EngineConfig::throttle_backoff(0), Duration::from_secs(1));
        assert_eq!(EngineConfig::throttle_backoff(3), Duration::from_secs(8));
        assert_eq!(EngineConfig::throttle_backoff(40), THROTTLE_BACKOFF_CAP);
    }
}
