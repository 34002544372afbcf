//! The contract between the code and its deployment: every environment variable the two
//! functions read and every AWS API action they call, per function.
//!
//! `infra/terraform` is held against these lists by `tests/tests/terraform_contract.rs`,
//! and the lists are held against the code by `tests/tests/iam_contract.rs` (which job
//! store operations each function performs, and which DynamoDB actions each needs) and
//! by `contract_tests` in `store/actions.rs` (every SDK call of the store maps to a listed action), so
//! the IAM policy cannot drift from the code in either direction.

/// DynamoDB table holding jobs, stages, tasks and the table catalog (required).
pub const ENV_TABLE: &str = "LAMBDAFUSION_TABLE";
/// S3 bucket for shuffle data, results and stage plans too large for an item (required).
pub const ENV_BUCKET: &str = "LAMBDAFUSION_BUCKET";
/// Key prefix inside the bucket (optional, default `lambdafusion`).
pub const ENV_PREFIX: &str = "LAMBDAFUSION_PREFIX";
/// Name or ARN of the executor function the scheduler invokes per task (required by the scheduler).
pub const ENV_EXECUTOR_FUNCTION: &str = "LAMBDAFUSION_EXECUTOR_FUNCTION";
/// Name or ARN of the scheduler function an executor wakes on the fast path (required by the executor).
pub const ENV_SCHEDULER_FUNCTION: &str = "LAMBDAFUSION_SCHEDULER_FUNCTION";
/// Target input bytes per leaf task (optional).
pub const ENV_BYTES_PER_TASK: &str = "LAMBDAFUSION_BYTES_PER_TASK";
/// Target shuffle input bytes per task of a coalesced (adaptive) stage (optional,
/// default 64 MiB).
pub const ENV_SHUFFLE_BYTES_PER_TASK: &str = "LAMBDAFUSION_SHUFFLE_BYTES_PER_TASK";
/// Least scan bytes per task of a leaf stage; smaller plan partitions are merged
/// (optional, default 16 MiB).
pub const ENV_MIN_SCAN_BYTES_PER_TASK: &str = "LAMBDAFUSION_MIN_SCAN_BYTES_PER_TASK";
/// Largest committed side of a partitioned semi / anti / mark join that switches the
/// join to a broadcast of it; 0 never switches (optional, default 16 MiB).
pub const ENV_MAX_BROADCAST_BYTES: &str = "LAMBDAFUSION_MAX_BROADCAST_BYTES";
/// Whether stages are shaped from their inputs' committed sizes when they become ready
/// (optional, default true).
pub const ENV_ADAPTIVE: &str = "LAMBDAFUSION_ADAPTIVE";
/// Upper bound on tasks per stage (optional).
pub const ENV_MAX_TASKS_PER_STAGE: &str = "LAMBDAFUSION_MAX_TASKS_PER_STAGE";
/// Attempts per task before the job fails (optional).
pub const ENV_MAX_ATTEMPTS: &str = "LAMBDAFUSION_MAX_ATTEMPTS";
/// Seconds after dispatch when the sweep treats a task as lost (optional).
pub const ENV_TASK_TIMEOUT_SECS: &str = "LAMBDAFUSION_TASK_TIMEOUT_SECS";
/// Concurrent async invocations per dispatching function (optional).
pub const ENV_DISPATCH_CONCURRENCY: &str = "LAMBDAFUSION_DISPATCH_CONCURRENCY";
/// Most ranged GETs one hash shuffle may take read directly (producers × consumer tasks)
/// before it goes through a combining stage, a two-level exchange (optional, default
/// 65536).
pub const ENV_MAX_SHUFFLE_READS: &str = "LAMBDAFUSION_MAX_SHUFFLE_READS";
/// Invocations one dispatcher makes before a stage goes through an invocation tree
/// (optional, default 32, at least 2).
pub const ENV_DISPATCH_FANOUT: &str = "LAMBDAFUSION_DISPATCH_FANOUT";
/// Days a job's records live before DynamoDB's TTL removes them (optional).
pub const ENV_JOB_TTL_DAYS: &str = "LAMBDAFUSION_JOB_TTL_DAYS";
/// Whether an executor that completes a stage wakes the scheduler at once (optional, default true).
pub const ENV_FAST_PATH: &str = "LAMBDAFUSION_FAST_PATH";
/// Comma-separated S3 locations tables may be created on (`bucket`, `bucket/prefix` or
/// `s3://bucket/prefix`); the IAM policy lets the functions read exactly these buckets.
/// Unset or empty: no location at all (optional). Local paths are refused: a function's
/// file system is never readable from SQL.
pub const ENV_DATA_BUCKETS: &str = "LAMBDAFUSION_DATA_BUCKETS";
/// Comma-separated principal ARNs (or JWT subjects) that may read and cancel every
/// caller's queries; everyone else sees only their own (optional, default none).
pub const ENV_ADMIN_PRINCIPALS: &str = "LAMBDAFUSION_ADMIN_PRINCIPALS";
/// Comma-separated principal ARNs (or JWT subjects) that may create and drop tables
/// (optional; unset: every caller may; set but empty: nobody may, the catalog is frozen).
pub const ENV_CATALOG_WRITERS: &str = "LAMBDAFUSION_CATALOG_WRITERS";
/// Longest lifetime of a presigned result download URL, in seconds (optional, default
/// 900, at most 604800).
pub const ENV_MAX_PRESIGN_SECS: &str = "LAMBDAFUSION_MAX_PRESIGN_SECS";
/// Longest a query may run, in seconds; a request may ask for less (optional, default
/// 3600).
pub const ENV_MAX_QUERY_SECONDS: &str = "LAMBDAFUSION_MAX_QUERY_SECONDS";
/// Seconds after which a claimed stage or retried attempt whose invocations were not all
/// confirmed is dispatched again (optional, default 30).
pub const ENV_DISPATCH_DEADLINE_SECS: &str = "LAMBDAFUSION_DISPATCH_DEADLINE_SECS";
/// Seconds one sweep may spend before it stops and leaves a bookmark for the next
/// (optional, default 20; keep it below the scheduler's timeout).
pub const ENV_SWEEP_BUDGET_SECS: &str = "LAMBDAFUSION_SWEEP_BUDGET_SECS";
/// The seeded fault plan (JSON or a file path; see `lambdafusion-faults`) — for the
/// local stack's failure tests only; never set it in a deployment (optional).
pub const ENV_FAULTS: &str = "LAMBDAFUSION_FAULTS";

/// Largest result the API returns in one response (optional, default 4 MiB: a Lambda
/// response carries 6 MB, base64 for binary formats); larger ones are downloaded through
/// presigned URLs.
pub const ENV_MAX_RESPONSE_BYTES: &str = "LAMBDAFUSION_MAX_RESPONSE_BYTES";

/// Variables the scheduler function must have set.
pub const SCHEDULER_REQUIRED_ENV: &[&str] = &[
    ENV_TABLE,
    ENV_BUCKET,
    ENV_EXECUTOR_FUNCTION,
    ENV_SCHEDULER_FUNCTION,
];
/// Variables the executor function must have set.
pub const EXECUTOR_REQUIRED_ENV: &[&str] = &[
    ENV_TABLE,
    ENV_BUCKET,
    ENV_SCHEDULER_FUNCTION,
    ENV_EXECUTOR_FUNCTION,
];
/// Every variable either function reads (besides the AWS runtime's own, such as `AWS_REGION`).
pub const ALL_ENV: &[&str] = &[
    ENV_TABLE,
    ENV_BUCKET,
    ENV_PREFIX,
    ENV_EXECUTOR_FUNCTION,
    ENV_SCHEDULER_FUNCTION,
    ENV_BYTES_PER_TASK,
    ENV_SHUFFLE_BYTES_PER_TASK,
    ENV_MIN_SCAN_BYTES_PER_TASK,
    ENV_MAX_BROADCAST_BYTES,
    ENV_ADAPTIVE,
    ENV_MAX_TASKS_PER_STAGE,
    ENV_MAX_ATTEMPTS,
    ENV_TASK_TIMEOUT_SECS,
    ENV_DISPATCH_CONCURRENCY,
    ENV_DISPATCH_FANOUT,
    ENV_MAX_SHUFFLE_READS,
    ENV_JOB_TTL_DAYS,
    ENV_FAST_PATH,
    ENV_DATA_BUCKETS,
    ENV_ADMIN_PRINCIPALS,
    ENV_CATALOG_WRITERS,
    ENV_MAX_PRESIGN_SECS,
    ENV_MAX_QUERY_SECONDS,
    ENV_DISPATCH_DEADLINE_SECS,
    ENV_SWEEP_BUDGET_SECS,
    ENV_MAX_RESPONSE_BYTES,
];

/// DynamoDB actions on the job table the scheduler function calls. (A transaction is
/// authorized by the actions of its parts: `TransactWriteItems` of puts, updates and
/// deletes needs `PutItem`, `UpdateItem` and `DeleteItem`; there is no action of its own.)
pub const SCHEDULER_TABLE_ACTIONS: &[&str] = &[
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
    "dynamodb:BatchWriteItem",
];
/// DynamoDB Streams actions the scheduler's event-source mapping needs on the table's stream.
pub const SCHEDULER_STREAM_ACTIONS: &[&str] = &[
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
];
/// DynamoDB actions on the job table the executor function calls (reads — the job,
/// stage, task and plan in one BatchGetItem — commits and their counters, failure
/// records, and the scheduler's step it runs when its commit completes a stage: claims,
/// dispatch records, finishing the job, whose active-index entry it deletes).
pub const EXECUTOR_TABLE_ACTIONS: &[&str] = &[
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
];
/// S3 object actions the scheduler calls on the shuffle bucket (`arn:...:bucket/<prefix>/*`):
/// statement results and large stage plans (put), results (get), clean-up (delete).
pub const SCHEDULER_BUCKET_OBJECT_ACTIONS: &[&str] =
    &["s3:GetObject", "s3:PutObject", "s3:DeleteObject"];
/// S3 bucket actions the scheduler calls on the shuffle bucket (`arn:...:bucket`): listing
/// a finished job's objects to delete them.
pub const SCHEDULER_BUCKET_ACTIONS: &[&str] = &["s3:ListBucket"];
/// S3 object actions the executor calls on the shuffle bucket: shuffle output (put),
/// inputs and large stage plans (get), a losing duplicate's output and a finished job's
/// objects (delete).
pub const EXECUTOR_BUCKET_OBJECT_ACTIONS: &[&str] =
    &["s3:GetObject", "s3:PutObject", "s3:DeleteObject"];
/// S3 bucket actions the executor calls on the shuffle bucket: listing a finished job's
/// objects to delete them (the scheduler's step after a job's last stage).
pub const EXECUTOR_BUCKET_ACTIONS: &[&str] = &["s3:ListBucket"];
/// S3 object actions the scheduler calls on the data buckets (schema resolution reads
/// file footers).
pub const SCHEDULER_DATA_OBJECT_ACTIONS: &[&str] = &["s3:GetObject"];
/// S3 bucket actions the scheduler calls on the data buckets (listing a table's files).
pub const SCHEDULER_DATA_BUCKET_ACTIONS: &[&str] = &["s3:ListBucket"];
/// S3 object actions the executor calls on the data buckets (reading its files).
pub const EXECUTOR_DATA_OBJECT_ACTIONS: &[&str] = &["s3:GetObject"];
/// S3 bucket actions the executor calls on the data buckets: none, the stage plan names
/// its files.
pub const EXECUTOR_DATA_BUCKET_ACTIONS: &[&str] = &[];
/// Lambda action the scheduler calls on the executor function (task dispatch) and on
/// itself (the nodes of invocation trees).
pub const SCHEDULER_LAMBDA_ACTIONS: &[&str] = &["lambda:InvokeFunction"];
/// Lambda action the executor calls on the scheduler function (a wake-up, the nodes of
/// invocation trees; Lambda's on-failure destination too) and on itself (dispatching the
/// tasks of the stages its commits make ready).
pub const EXECUTOR_LAMBDA_ACTIONS: &[&str] = &["lambda:InvokeFunction"];

/// Lambda runtime of both functions (`cargo lambda build` output is a `bootstrap` binary).
pub const RUNTIME: &str = "provided.al2023";
/// Handler name (ignored by custom runtimes, but set to the binary's name by convention).
pub const HANDLER: &str = "bootstrap";
/// Architecture `cargo lambda build --release --arm64` targets.
pub const ARCHITECTURE: &str = "arm64";
