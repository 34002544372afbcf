//! The contract between the code and its deployment: every environment variable the two
//! functions read and every AWS API action they call, per function.
//!
//! `infra/terraform` is held against these lists by `tests/tests/end_to_end/terraform_contract.rs`,
//! and the lists are held against the code by `tests/tests/end_to_end/iam_contract.rs` (which job
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
/// Name or ARN of the large executor function, where the deployment has one (optional;
/// set together with `LAMBDAFUSION_LARGE_EXECUTOR_MEMORY_MB`): the stages the scheduler
/// sizes up run their tasks there.
pub const ENV_LARGE_EXECUTOR_FUNCTION: &str = "LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION";
/// Name or ARN of the scheduler function an executor wakes on the fast path (required by the executor).
pub const ENV_SCHEDULER_FUNCTION: &str = "LAMBDAFUSION_SCHEDULER_FUNCTION";
/// Comma-separated S3 locations tables may be created on (`bucket`, `bucket/prefix` or
/// `s3://bucket/prefix`); the IAM policy lets the functions read exactly these buckets.
/// Unset or empty: no location at all (optional). Local paths are refused: a function's
/// file system is never readable from SQL.
pub const ENV_DATA_BUCKETS: &str = "LAMBDAFUSION_DATA_BUCKETS";
/// Comma-separated S3 locations (`bucket` or `bucket/prefix`, optionally `s3://`) that
/// `COPY ... TO` may write into, and so also read (optional, default none: no statement
/// writes anywhere).
pub const ENV_WRITE_LOCATIONS: &str = "LAMBDAFUSION_WRITE_LOCATIONS";
/// Comma-separated principal ARNs (or JWT subjects) that may read and cancel every
/// caller's queries; everyone else sees only their own (optional, default none).
pub const ENV_ADMIN_PRINCIPALS: &str = "LAMBDAFUSION_ADMIN_PRINCIPALS";
/// Comma-separated principal ARNs (or JWT subjects) that may create and drop tables
/// (optional; unset: every caller may; set but empty: nobody may, the catalog is frozen).
pub const ENV_CATALOG_WRITERS: &str = "LAMBDAFUSION_CATALOG_WRITERS";
/// Longest lifetime of a presigned result download URL, in seconds (optional, default
/// 900, at most 604800).
pub const ENV_MAX_PRESIGN_SECS: &str = "LAMBDAFUSION_MAX_PRESIGN_SECS";
/// Comma-separated Glue databases whose tables queries may read as
/// `glue.<database>.<table>` (optional, default none); the scheduler's role may call
/// `glue:GetDatabase`, `GetTable`, `GetTables` and `GetPartitions` on exactly these.
pub const ENV_GLUE_DATABASES: &str = "LAMBDAFUSION_GLUE_DATABASES";
/// The Glue database (one of [`ENV_GLUE_DATABASES`]) whose tables are also found
/// unqualified, after the tables declared with SQL (optional, default none).
pub const ENV_GLUE_DEFAULT_DATABASE: &str = "LAMBDAFUSION_GLUE_DEFAULT_DATABASE";
/// The seeded fault plan (JSON or a file path; see `lambdafusion-faults`) — for the
/// local stack's failure tests only; never set it in a deployment (optional).
pub const ENV_FAULTS: &str = "LAMBDAFUSION_FAULTS";

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
/// The deployment's own variables (where things are, who may do what); the engine's tuning
/// variables are declared with their settings in `lambdafusion::config::SETTINGS`.
pub const DEPLOYMENT_ENV: &[&str] = &[
    ENV_TABLE,
    ENV_BUCKET,
    ENV_PREFIX,
    ENV_EXECUTOR_FUNCTION,
    ENV_LARGE_EXECUTOR_FUNCTION,
    ENV_SCHEDULER_FUNCTION,
    ENV_DATA_BUCKETS,
    ENV_WRITE_LOCATIONS,
    ENV_ADMIN_PRINCIPALS,
    ENV_CATALOG_WRITERS,
    ENV_MAX_PRESIGN_SECS,
    ENV_GLUE_DATABASES,
    ENV_GLUE_DEFAULT_DATABASE,
];

/// Every variable either function reads (besides the AWS runtime's own, such as
/// `AWS_REGION`): [`DEPLOYMENT_ENV`] and every engine setting's.
pub fn all_env() -> Vec<&'static str> {
    let settings = lambdafusion::config::SETTINGS.iter().filter_map(|s| s.env);
    DEPLOYMENT_ENV.iter().copied().chain(settings).collect()
}

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
/// objects (delete), and the abort of a spilled shuffle object's multipart upload when a
/// part fails (`FinishedObject::upload`; `s3:PutObject` does not cover it).
pub const EXECUTOR_BUCKET_OBJECT_ACTIONS: &[&str] = &[
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
];
/// S3 bucket actions the executor calls on the shuffle bucket: listing a finished job's
/// objects to delete them (the scheduler's step after a job's last stage).
pub const EXECUTOR_BUCKET_ACTIONS: &[&str] = &["s3:ListBucket"];
/// S3 object actions the scheduler calls on the data buckets (schema resolution reads
/// file footers).
pub const SCHEDULER_DATA_OBJECT_ACTIONS: &[&str] = &["s3:GetObject"];
/// S3 bucket actions the scheduler calls on the data buckets (listing a table's files).
pub const SCHEDULER_DATA_BUCKET_ACTIONS: &[&str] = &["s3:ListBucket"];
/// S3 object actions the scheduler calls in the write locations: a write's emptiness check
/// and manifest (get), its commit (put the manifest, delete files of attempts that did not
/// commit), and the clean-up of a write that failed (delete); reading a table there (get).
pub const SCHEDULER_WRITE_OBJECT_ACTIONS: &[&str] =
    &["s3:GetObject", "s3:PutObject", "s3:DeleteObject"];
/// S3 bucket actions the scheduler calls on the write locations' buckets: listing a
/// location (is it empty, which files a job wrote, a table's files).
pub const SCHEDULER_WRITE_BUCKET_ACTIONS: &[&str] = &["s3:ListBucket"];
/// S3 object actions the executor calls in the write locations: writing a task's files
/// (put, multipart), deleting those of an attempt that did not commit, reading a table
/// there.
pub const EXECUTOR_WRITE_OBJECT_ACTIONS: &[&str] = &[
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
];
/// KMS actions both functions need on the customer-managed keys of the data buckets
/// (Terraform `data_kms_key_arns`): S3 decrypts an SSE-KMS object for a GET only when the
/// caller may `kms:Decrypt` with its key.
pub const DATA_KEY_ACTIONS: &[&str] = &["kms:Decrypt"];
/// Glue (scheduler only, and only with attached databases): planning reads a table's
/// metadata and its partitions, `SHOW TABLES` lists a database's tables. Granted on the
/// account's catalog, the attached databases and their tables (Glue checks all three).
pub const SCHEDULER_GLUE_ACTIONS: &[&str] =
    &["glue:GetTable", "glue:GetTables", "glue:GetPartitions"];
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
/// Architectures `scripts/package --arch` builds for. The Terraform module deploys the one
/// the `package.json` beside the zips names (and refuses a contradicting variable), since
/// a zip for the other one fails every invocation with "exec format error".
pub const ARCHITECTURES: &[&str] = &["arm64", "x86_64"];
