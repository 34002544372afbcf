//! The contract between the code and its deployment: every environment variable the two
//! functions read and every AWS API action they call, per function.
//!
//! `infra/terraform` is held against these lists by a test (`tests/terraform_contract.rs`),
//! and a unit test below holds the lists against the SDK calls this crate makes, so the
//! IAM policy can never drift from the code in either direction.

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
/// Upper bound on tasks per stage (optional).
pub const ENV_MAX_TASKS_PER_STAGE: &str = "LAMBDAFUSION_MAX_TASKS_PER_STAGE";
/// Attempts per task before the job fails (optional).
pub const ENV_MAX_ATTEMPTS: &str = "LAMBDAFUSION_MAX_ATTEMPTS";
/// Seconds after dispatch when the sweep treats a task as lost (optional).
pub const ENV_TASK_TIMEOUT_SECS: &str = "LAMBDAFUSION_TASK_TIMEOUT_SECS";
/// Concurrent async invocations per dispatching function (optional).
pub const ENV_DISPATCH_CONCURRENCY: &str = "LAMBDAFUSION_DISPATCH_CONCURRENCY";
/// Days a job's records live before DynamoDB's TTL removes them (optional).
pub const ENV_JOB_TTL_DAYS: &str = "LAMBDAFUSION_JOB_TTL_DAYS";
/// Whether an executor that completes a stage wakes the scheduler at once (optional, default true).
pub const ENV_FAST_PATH: &str = "LAMBDAFUSION_FAST_PATH";
/// Comma-separated `s3://bucket` list the engine may read table data from (optional, informational).
pub const ENV_DATA_BUCKETS: &str = "LAMBDAFUSION_DATA_BUCKETS";

/// Variables the scheduler function must have set.
pub const SCHEDULER_REQUIRED_ENV: &[&str] = &[ENV_TABLE, ENV_BUCKET, ENV_EXECUTOR_FUNCTION];
/// Variables the executor function must have set.
pub const EXECUTOR_REQUIRED_ENV: &[&str] = &[ENV_TABLE, ENV_BUCKET, ENV_SCHEDULER_FUNCTION];
/// Every variable either function reads (besides the AWS runtime's own, such as `AWS_REGION`).
pub const ALL_ENV: &[&str] = &[
    ENV_TABLE,
    ENV_BUCKET,
    ENV_PREFIX,
    ENV_EXECUTOR_FUNCTION,
    ENV_SCHEDULER_FUNCTION,
    ENV_BYTES_PER_TASK,
    ENV_MAX_TASKS_PER_STAGE,
    ENV_MAX_ATTEMPTS,
    ENV_TASK_TIMEOUT_SECS,
    ENV_DISPATCH_CONCURRENCY,
    ENV_JOB_TTL_DAYS,
    ENV_FAST_PATH,
    ENV_DATA_BUCKETS,
];

/// DynamoDB actions on the job table the scheduler function calls.
pub const SCHEDULER_TABLE_ACTIONS: &[&str] = &[
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
    "dynamodb:BatchWriteItem",
    "dynamodb:TransactWriteItems",
];
/// DynamoDB Streams actions the scheduler's event-source mapping needs on the table's stream.
pub const SCHEDULER_STREAM_ACTIONS: &[&str] = &[
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
];
/// DynamoDB actions on the job table the executor function calls.
pub const EXECUTOR_TABLE_ACTIONS: &[&str] = &[
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
    "dynamodb:TransactWriteItems",
];
/// S3 object actions both functions call on the shuffle/result bucket (`arn:...:bucket/*`).
pub const BUCKET_OBJECT_ACTIONS: &[&str] = &["s3:GetObject", "s3:PutObject", "s3:DeleteObject"];
/// S3 bucket actions both functions call on the shuffle/result bucket (`arn:...:bucket`).
pub const BUCKET_ACTIONS: &[&str] = &["s3:ListBucket"];
/// S3 actions on the data buckets (read only): objects, and listing the bucket.
pub const DATA_OBJECT_ACTIONS: &[&str] = &["s3:GetObject"];
/// S3 bucket actions on the data buckets.
pub const DATA_BUCKET_ACTIONS: &[&str] = &["s3:ListBucket"];
/// Lambda action the scheduler calls on the executor function (task dispatch).
pub const SCHEDULER_LAMBDA_ACTIONS: &[&str] = &["lambda:InvokeFunction"];
/// Lambda action the executor calls on the scheduler function (fast-path wake).
pub const EXECUTOR_LAMBDA_ACTIONS: &[&str] = &["lambda:InvokeFunction"];

/// Lambda runtime of both functions (`cargo lambda build` output is a `bootstrap` binary).
pub const RUNTIME: &str = "provided.al2023";
/// Handler name (ignored by custom runtimes, but set to the binary's name by convention).
pub const HANDLER: &str = "bootstrap";
/// Architecture `cargo lambda build --release --arm64` targets.
pub const ARCHITECTURE: &str = "arm64";
