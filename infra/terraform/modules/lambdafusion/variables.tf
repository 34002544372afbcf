# ---------------------------------------------------------------------------------------
# Naming and tagging
# ---------------------------------------------------------------------------------------

variable "name_prefix" {
  description = "Prefix of every resource name (functions, table, roles, queue, API, rule, log groups). Lower case letters, digits and hyphens, since it also starts the bucket name."
  type        = string
  default     = "lambdafusion"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 2-32 characters of lower case letters, digits and hyphens, start with a letter and not end with a hyphen."
  }
}

variable "tags" {
  description = "Tags applied to every taggable resource the module creates."
  type        = map(string)
  default     = {}
}

# ---------------------------------------------------------------------------------------
# Function code and sizing
# ---------------------------------------------------------------------------------------

variable "scheduler_zip_path" {
  description = "Path to scheduler-fn's deployment zip, as written by `scripts/package` (target/lambda/scheduler-fn/bootstrap.zip), built for `architecture`."
  type        = string

  validation {
    condition     = endswith(var.scheduler_zip_path, ".zip")
    error_message = "scheduler_zip_path must point at a .zip file (build with --output-format zip)."
  }
}

variable "executor_zip_path" {
  description = "Path to executor-fn's deployment zip, as written by `scripts/package` (target/lambda/executor-fn/bootstrap.zip), built for `architecture`."
  type        = string

  validation {
    condition     = endswith(var.executor_zip_path, ".zip")
    error_message = "executor_zip_path must point at a .zip file (build with --output-format zip)."
  }
}

variable "architecture" {
  description = "Instruction set of both functions: arm64 (Graviton, about 20% cheaper per GB-second than x86_64 at Lambda's list prices) or x86_64. null (the default) takes it from the package.json that `scripts/package` writes beside the zips, which vouches for them by their hashes; a value that contradicts package.json is refused before anything is created, since every invocation would fail with \"exec format error\"."
  type        = string
  default     = null

  validation {
    condition     = var.architecture == null ? true : contains(["arm64", "x86_64"], var.architecture)
    error_message = "architecture must be null (from package.json), arm64 or x86_64."
  }
}

variable "code_upload" {
  description = "How the zips reach Lambda: \"direct\" (in the CreateFunction / UpdateFunctionCode request, which Lambda limits to 50 MB zipped), \"s3\" (uploaded as objects under lambda-code/ in the module's bucket, then referenced by s3_bucket / s3_key), or \"auto\" (the default: S3 for a zip of 49 MiB or more, direct below; the 1 MiB of slack is for the rest of the request)."
  type        = string
  default     = "auto"

  validation {
    condition     = contains(["auto", "direct", "s3"], var.code_upload)
    error_message = "code_upload must be auto, direct or s3."
  }
}

variable "scheduler_memory_mb" {
  description = "Memory of the scheduler function in MB. It plans SQL and writes/reads a job's records; 1024 MB gives it ~0.6 vCPU, enough for DataFusion planning without paying for idle CPU."
  type        = number
  default     = 1024

  validation {
    condition     = var.scheduler_memory_mb >= 128 && var.scheduler_memory_mb <= 10240
    error_message = "scheduler_memory_mb must be between 128 and 10240."
  }
}

variable "scheduler_timeout_seconds" {
  description = "Timeout of the scheduler function in seconds. HTTP requests are cut at 30 s by API Gateway anyway; stream batches and sweeps only read one job and dispatch, so 60 s is generous."
  type        = number
  default     = 60

  validation {
    condition     = var.scheduler_timeout_seconds >= 3 && var.scheduler_timeout_seconds <= 900
    error_message = "scheduler_timeout_seconds must be between 3 and 900."
  }
}

variable "scheduler_ephemeral_storage_mb" {
  description = "Size of the scheduler function's /tmp in MB."
  type        = number
  default     = 512

  validation {
    condition     = var.scheduler_ephemeral_storage_mb >= 512 && var.scheduler_ephemeral_storage_mb <= 10240
    error_message = "scheduler_ephemeral_storage_mb must be between 512 and 10240."
  }
}

variable "executor_memory_mb" {
  description = "Memory of the executor function in MB. Lambda allots CPU in proportion to memory (1769 MB = 1 vCPU); 3008 MB gives ~1.7 vCPU for one DataFusion partition and is the largest size every account gets without a quota increase (new accounts are capped at 3008 MB). Both functions also read it as LAMBDAFUSION_EXECUTOR_MEMORY_MB, for the cost estimate."
  type        = number
  default     = 3008

  validation {
    condition     = var.executor_memory_mb >= 128 && var.executor_memory_mb <= 10240
    error_message = "executor_memory_mb must be between 128 and 10240."
  }
}

variable "large_executor_memory_mb" {
  description = "Memory of a second, larger executor function in MB, or null (the default) for none. With it the scheduler runs a stage's tasks there when the CPU its query measured says they finish sooner at a cost within size_cost_percent of the executor's (docs/deploy.md, \"Two executor sizes\"). It is the executor's code, role and settings under the name <name_prefix>-executor-large; both functions read its memory as LAMBDAFUSION_LARGE_EXECUTOR_MEMORY_MB and its name as LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION. 10240 MB (~5.8 vCPUs) suits the stages that spread over threads, and needs an account whose Lambda memory quota allows it."
  type        = number
  default     = null

  validation {
    condition     = var.large_executor_memory_mb == null ? true : (var.large_executor_memory_mb > var.executor_memory_mb && var.large_executor_memory_mb <= 10240)
    error_message = "large_executor_memory_mb must be null or above executor_memory_mb and at most 10240."
  }
}

variable "size_cost_percent" {
  description = "Most a stage may cost on the large executor, as a percentage of its predicted cost on the executor, for its tasks to run there (LAMBDAFUSION_SIZE_COST_PERCENT); they must also finish sooner. null for the code's default (150). Used only with large_executor_memory_mb."
  type        = number
  default     = null

  validation {
    condition     = var.size_cost_percent == null ? true : (var.size_cost_percent >= 100 && var.size_cost_percent <= 100000)
    error_message = "size_cost_percent must be null or from 100 to 100000."
  }
}

variable "executor_timeout_seconds" {
  description = "Timeout of the executor function in seconds. Tasks are sized to run for seconds, but a skewed partition must still finish rather than be retried forever, so the default is Lambda's maximum (900); only the time actually used is billed."
  type        = number
  default     = 900

  validation {
    condition     = var.executor_timeout_seconds >= 10 && var.executor_timeout_seconds <= 900
    error_message = "executor_timeout_seconds must be between 10 and 900."
  }
}

variable "executor_ephemeral_storage_mb" {
  description = "Size of the executor function's /tmp in MB: spill space for sorts, joins and aggregations that outgrow memory (2 GB costs a fraction of a cent per hour of use). Both functions also read it as LAMBDAFUSION_EXECUTOR_EPHEMERAL_STORAGE_MB, for the cost estimate; spills are capped a tenth below it."
  type        = number
  default     = 2048

  validation {
    condition     = var.executor_ephemeral_storage_mb >= 512 && var.executor_ephemeral_storage_mb <= 10240
    error_message = "executor_ephemeral_storage_mb must be between 512 and 10240."
  }
}

variable "scheduler_reserved_concurrency" {
  description = "Reserved concurrency of the scheduler function, or null to leave it unreserved (draws on the account's unreserved pool)."
  type        = number
  default     = null

  validation {
    condition     = var.scheduler_reserved_concurrency == null ? true : var.scheduler_reserved_concurrency >= 0
    error_message = "scheduler_reserved_concurrency must be null or >= 0."
  }
}

variable "executor_reserved_concurrency" {
  description = "Reserved concurrency of the executor function, or null to leave it unreserved. Setting it caps a query's fan-out (and protects other functions in the account); throttled task events wait in the async queue, up to executor_max_event_age_seconds."
  type        = number
  default     = null

  validation {
    condition     = var.executor_reserved_concurrency == null ? true : var.executor_reserved_concurrency >= 0
    error_message = "executor_reserved_concurrency must be null or >= 0."
  }
}

variable "tracing_mode" {
  description = "X-Ray tracing mode of both functions: PassThrough (the default: no traces of their own; a caller's sampled trace passes through) or Active (X-Ray samples the first invocation each second and 5% of the rest, $5 per million traces recorded: at 1,000 tasks a query, up to $0.005 a query). The engine does not annotate segments with the query; `lambdafusion logs` is how a query is followed."
  type        = string
  default     = "PassThrough"

  validation {
    condition     = contains(["Active", "PassThrough"], var.tracing_mode)
    error_message = "tracing_mode must be Active or PassThrough."
  }
}

variable "allow_recursive_loop" {
  description = "Set Lambda's recursive loop detection to Allow on both functions. The fast path (executor invokes scheduler, scheduler invokes executors) is a deliberate chain of direct invocations; with detection on (Terminate), Lambda drops the 17th invocation of a chain, i.e. queries with more than ~16 stages would stall until the sweep."
  type        = bool
  default     = true
}

variable "log_retention_days" {
  description = "Retention of the functions' and the API's CloudWatch log groups, in days."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be one of the values CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, ...)."
  }
}

# ---------------------------------------------------------------------------------------
# Task dispatch (executor async invocations)
# ---------------------------------------------------------------------------------------

variable "executor_max_event_age_seconds" {
  description = "How long a task event may wait in the executor's async queue (throttling, errors) before Lambda gives up on it and sends it to the on-failure destination (the scheduler, which records a failed attempt and retries it). 30 minutes: long enough to ride out a throttled wide stage, short enough that a query is not left waiting for hours."
  type        = number
  default     = 1800

  validation {
    condition     = var.executor_max_event_age_seconds >= 60 && var.executor_max_event_age_seconds <= 21600
    error_message = "executor_max_event_age_seconds must be between 60 and 21600."
  }
}

# ---------------------------------------------------------------------------------------
# DynamoDB stream -> scheduler
# ---------------------------------------------------------------------------------------

variable "scheduler_max_event_age_seconds" {
  description = "How long an asynchronous event to the scheduler (a wake-up, the sweep, an executor's failure record) may wait for a free instance (throttling) before Lambda drops it to the poison queue. 900 s by default instead of Lambda's 6 hours: the sweep, every minute, redoes what a wake-up older than that would do, and a failure record that old belongs to a job already past its deadline."
  type        = number
  default     = 900

  validation {
    condition     = var.scheduler_max_event_age_seconds >= 60 && var.scheduler_max_event_age_seconds <= 21600
    error_message = "scheduler_max_event_age_seconds must be from 60 to 21600 (Lambda's range)."
  }
}

variable "stream_batch_size" {
  description = "Maximum stream records per scheduler invocation (the filter already leaves only stage completions and failed tasks)."
  type        = number
  default     = 100

  validation {
    condition     = var.stream_batch_size >= 1 && var.stream_batch_size <= 10000
    error_message = "stream_batch_size must be between 1 and 10000."
  }
}

variable "stream_parallelization_factor" {
  description = "Concurrent scheduler invocations per stream shard (records of one job keep their order: they share a partition key)."
  type        = number
  default     = 2

  validation {
    condition     = var.stream_parallelization_factor >= 1 && var.stream_parallelization_factor <= 10
    error_message = "stream_parallelization_factor must be between 1 and 10."
  }
}

variable "stream_maximum_retry_attempts" {
  description = "Retries of a failing stream batch (halved each time by bisect_batch_on_function_error) before the record goes to the poison queue. Every scheduler step is idempotent, so retrying is safe."
  type        = number
  default     = 10

  validation {
    condition     = var.stream_maximum_retry_attempts >= 0 && var.stream_maximum_retry_attempts <= 10000
    error_message = "stream_maximum_retry_attempts must be between 0 and 10000."
  }
}

variable "stream_maximum_record_age_seconds" {
  description = "Stream records older than this are sent to the poison queue instead of the scheduler (the sweep re-drives their jobs anyway)."
  type        = number
  default     = 3600

  validation {
    condition     = var.stream_maximum_record_age_seconds >= 60 && var.stream_maximum_record_age_seconds <= 604800
    error_message = "stream_maximum_record_age_seconds must be between 60 and 604800."
  }
}

variable "poison_queue_retention_seconds" {
  description = "How long the poison queue keeps records (stream records the scheduler could not process, and scheduler async events that failed every retry)."
  type        = number
  default     = 1209600

  validation {
    condition     = var.poison_queue_retention_seconds >= 60 && var.poison_queue_retention_seconds <= 1209600
    error_message = "poison_queue_retention_seconds must be between 60 and 1209600 (14 days)."
  }
}

# ---------------------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------------------

variable "table_deletion_protection" {
  description = "DynamoDB deletion protection on the job table, on by default: besides job state that expires after job_ttl_days, the table holds the catalog (every CREATE EXTERNAL TABLE), which nothing else can rebuild. To tear a deployment down, apply with false first, then `terraform destroy`."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------------------
# Bucket
# ---------------------------------------------------------------------------------------

variable "bucket_name" {
  description = "Name of the shuffle/result bucket, or null to let AWS derive a unique one from name_prefix."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null ? true : can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name."
  }
}

variable "prefix" {
  description = "Key prefix inside the bucket under which the engine writes everything (LAMBDAFUSION_PREFIX). The functions may only touch objects under it."
  type        = string
  default     = "lambdafusion"

  validation {
    condition     = can(regex("^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$", var.prefix))
    error_message = "prefix must be a non-empty key prefix without leading or trailing '/'."
  }
}

variable "results_retention_days" {
  description = "Days after which shuffle data and results under <prefix>/jobs/ expire (one lifecycle rule). Also the default job TTL, so a job record never outlives its results."
  type        = number
  default     = 7

  validation {
    condition     = var.results_retention_days >= 1 && var.results_retention_days <= 3650
    error_message = "results_retention_days must be between 1 and 3650."
  }
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete the bucket even when it still holds objects. Off by default: empty the bucket first, or set this to true."
  type        = bool
  default     = false
}

variable "data_buckets" {
  description = "Names (not ARNs, not s3:// URLs) of buckets holding table data the engine may read (LAMBDAFUSION_DATA_BUCKETS). Both functions get s3:GetObject on their objects, the scheduler also s3:ListBucket on the buckets (to list a table's files); nothing else. Empty (the default) means no bucket is readable: every CREATE EXTERNAL TABLE answers 400 naming this setting. A function's local file system is never readable, and the deployment's own shuffle prefix is never a table location."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for b in var.data_buckets : can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", b))])
    error_message = "data_buckets must be plain bucket names (no s3:// scheme, no ARN, no key)."
  }
}

variable "write_locations" {
  description = "S3 locations (bucket or bucket/prefix; no s3:// scheme, no trailing slash) that COPY (query) TO 's3://...' may write into (LAMBDAFUSION_WRITE_LOCATIONS); tables there are also readable. The executor gets s3:PutObject, DeleteObject, AbortMultipartUpload and GetObject on their objects; the scheduler GetObject, PutObject and DeleteObject on them (a write's manifest, its clean-up) and s3:ListBucket on their buckets. Empty (the default): no statement writes anywhere, and COPY answers 400 naming this setting. Never the deployment's own bucket prefix."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for l in var.write_locations : can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^*?/][^*?]*[^*?/])?$", l))])
    error_message = "write_locations must be bucket or bucket/prefix (no s3:// scheme, no ARN, no wildcard, no leading or trailing slash)."
  }
}

variable "glue_databases" {
  description = "Glue Data Catalog databases (of this account and region) whose tables queries may read as glue.<database>.<table> (LAMBDAFUSION_GLUE_DATABASES). The scheduler gets glue:GetTable, GetTables and GetPartitions on the catalog, these databases and their tables, nothing else. A table's location (and each partition's) must still be in data_buckets. Empty (the default): no Glue access at all."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for d in var.glue_databases : can(regex("^[a-z0-9_]{1,255}$", d))])
    error_message = "glue_databases must be Glue database names as Glue stores them: lower-case letters, digits and _."
  }
}

variable "glue_default_database" {
  description = "One of glue_databases whose tables are also found unqualified, after the tables created with SQL (LAMBDAFUSION_GLUE_DEFAULT_DATABASE). Null (the default): Glue tables are always named glue.<database>.<table>."
  type        = string
  default     = null

  validation {
    condition     = var.glue_default_database == null || contains(var.glue_databases, coalesce(var.glue_default_database, "-"))
    error_message = "glue_default_database must be one of glue_databases."
  }
}

variable "data_kms_key_arns" {
  description = "ARNs of the customer-managed KMS keys that encrypt objects in data_buckets (SSE-KMS). Both functions get kms:Decrypt on exactly these keys, nothing else; reading an SSE-KMS object needs it, while SSE-S3 and the AWS-managed aws/s3 key need nothing. Empty (the default) grants no KMS permission."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for k in var.data_kms_key_arns : can(regex("^arn:[a-z-]+:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$", k))])
    error_message = "data_kms_key_arns must be KMS key ARNs (arn:aws:kms:<region>:<account>:key/<id>), not aliases."
  }
}

# ---------------------------------------------------------------------------------------
# HTTP entry
# ---------------------------------------------------------------------------------------

variable "enable_http_api" {
  description = "Create the API Gateway HTTP API in front of the scheduler. Turn off where HTTP APIs are unavailable (LocalStack Community) and use the function URL instead."
  type        = bool
  default     = true
}

variable "authorization_type" {
  description = "Authorization of the API's routes: AWS_IAM (callers sign with SigV4 and need execute-api:Invoke) or JWT (an OIDC issuer; set jwt_issuer and jwt_audience)."
  type        = string
  default     = "AWS_IAM"

  validation {
    condition     = contains(["AWS_IAM", "JWT"], var.authorization_type)
    error_message = "authorization_type must be AWS_IAM or JWT."
  }
}

variable "jwt_issuer" {
  description = "JWT issuer URL (e.g. https://cognito-idp.<region>.amazonaws.com/<pool id>) when authorization_type is JWT."
  type        = string
  default     = null

  validation {
    condition     = var.jwt_issuer == null ? true : startswith(var.jwt_issuer, "https://")
    error_message = "jwt_issuer must be an https:// URL."
  }
}

variable "jwt_audience" {
  description = "Accepted JWT audiences (aud or client_id claims) when authorization_type is JWT."
  type        = list(string)
  default     = []
}

variable "api_throttling_burst_limit" {
  description = "Burst limit of the API's default route settings (requests)."
  type        = number
  default     = 200

  validation {
    condition     = var.api_throttling_burst_limit >= 1
    error_message = "api_throttling_burst_limit must be at least 1."
  }
}

variable "api_throttling_rate_limit" {
  description = "Steady-state rate limit of the API's default route settings (requests per second)."
  type        = number
  default     = 100

  validation {
    condition     = var.api_throttling_rate_limit >= 1
    error_message = "api_throttling_rate_limit must be at least 1."
  }
}

variable "public_console_routes" {
  description = "Let unsigned requests reach the routes that carry no data: GET / (the web console's page), /console.js, /console.css and /health (authorization NONE on those routes only; every /v1/ route keeps authorization_type). Off by default. Turn it on with authorization_type = \"JWT\" so a browser can load the console, which then sends the user's token (Authorization: Bearer) on every API call. Each such request still invokes the scheduler, within the API's throttling limits."
  type        = bool
  default     = false
}

variable "enable_function_url" {
  description = "Also create a Lambda function URL for the scheduler, always with AWS_IAM auth (for LocalStack Community, which has no HTTP APIs, or to skip API Gateway)."
  type        = bool
  default     = false
}

# ---------------------------------------------------------------------------------------
# Sweep
# ---------------------------------------------------------------------------------------

variable "sweep_schedule_expression" {
  description = "EventBridge schedule of the sweep that finds lost tasks and stuck jobs (a rate() or cron() expression)."
  type        = string
  default     = "rate(1 minute)"

  validation {
    condition     = can(regex("^(rate|cron)\\(.+\\)$", var.sweep_schedule_expression))
    error_message = "sweep_schedule_expression must be a rate(...) or cron(...) expression."
  }
}

# ---------------------------------------------------------------------------------------
# Engine settings (environment). null leaves the variable unset: the code's default applies.
# ---------------------------------------------------------------------------------------

variable "bytes_per_task" {
  description = "Target input bytes per leaf task (LAMBDAFUSION_BYTES_PER_TASK); null for the code's default."
  type        = number
  default     = null

  validation {
    condition     = var.bytes_per_task == null ? true : var.bytes_per_task >= 1048576
    error_message = "bytes_per_task must be null or at least 1 MiB."
  }
}

variable "shuffle_bytes_per_task" {
  description = "Target shuffle input bytes per task of a stage the adaptive planner coalesces (LAMBDAFUSION_SHUFFLE_BYTES_PER_TASK); null for the code's default (64 MiB)."
  type        = number
  default     = null

  validation {
    condition     = var.shuffle_bytes_per_task == null ? true : var.shuffle_bytes_per_task >= 1048576
    error_message = "shuffle_bytes_per_task must be null or at least 1 MiB."
  }
}

variable "min_scan_bytes_per_task" {
  description = "Least scan bytes per task of a leaf stage: the adaptive planner merges smaller plan partitions (LAMBDAFUSION_MIN_SCAN_BYTES_PER_TASK); null for the code's default (16 MiB)."
  type        = number
  default     = null

  validation {
    condition     = var.min_scan_bytes_per_task == null ? true : var.min_scan_bytes_per_task >= 1048576
    error_message = "min_scan_bytes_per_task must be null or at least 1 MiB."
  }
}

variable "max_broadcast_bytes" {
  description = "Largest committed side of a partitioned semi / anti / mark join that switches the join to a broadcast of that side (LAMBDAFUSION_MAX_BROADCAST_BYTES); 0 never switches; null for the code's default (16 MiB)."
  type        = number
  default     = null

  validation {
    condition     = var.max_broadcast_bytes == null ? true : var.max_broadcast_bytes >= 0
    error_message = "max_broadcast_bytes must be null or at least 0."
  }
}

variable "adaptive_stages" {
  description = "Whether each stage is shaped from what its inputs committed when it becomes ready (LAMBDAFUSION_ADAPTIVE); null for the code's default (true)."
  type        = bool
  default     = null
}

variable "max_tasks_per_stage" {
  description = "Upper bound on tasks per stage (LAMBDAFUSION_MAX_TASKS_PER_STAGE); null for the code's default. Keep it at or below executor_reserved_concurrency if you set that."
  type        = number
  default     = null

  validation {
    condition     = var.max_tasks_per_stage == null ? true : (var.max_tasks_per_stage >= 1 && var.max_tasks_per_stage <= 10000)
    error_message = "max_tasks_per_stage must be null or from 1 to 10000."
  }
}

variable "admin_principals" {
  description = "Principals (IAM ARNs as API Gateway or the function URL report them in userArn, or JWT subjects) that may read and cancel every caller's queries (LAMBDAFUSION_ADMIN_PRINCIPALS). Everyone else sees only the queries they submitted; another caller's query answers 404."
  type        = list(string)
  default     = []
}

variable "catalog_writers" {
  description = "Principals that may CREATE and DROP tables (LAMBDAFUSION_CATALOG_WRITERS); others get 403. null (the default): every caller that passes the API's authorization may; [] (an empty list): nobody may, the catalog is frozen."
  type        = list(string)
  default     = null
}

variable "max_presign_seconds" {
  description = "Longest lifetime of the presigned S3 URLs handed out for large results (LAMBDAFUSION_MAX_PRESIGN_SECS); a caller's ?expires= is clamped to it. Default 900 (15 min); at most 604800 (SigV4's limit)."
  type        = number
  default     = 900

  validation {
    condition     = var.max_presign_seconds >= 1 && var.max_presign_seconds <= 604800
    error_message = "max_presign_seconds must be between 1 and 604800."
  }
}

variable "max_query_seconds" {
  description = "Longest a query may run (LAMBDAFUSION_MAX_QUERY_SECONDS); a request may ask for less with max_seconds. Past it the query fails with a message naming the limit, and its running tasks stop at their next batch."
  type        = number
  default     = 3600

  validation {
    condition     = var.max_query_seconds >= 1
    error_message = "max_query_seconds must be at least 1."
  }
}

variable "dispatch_deadline_seconds" {
  description = "A stage claimed (or an attempt retried) whose task invocations were not all confirmed within this time lost its dispatcher; its tasks are sent again by the next sweep or wake-up (LAMBDAFUSION_DISPATCH_DEADLINE_SECS). null for the code's default, 30."
  type        = number
  default     = null

  validation {
    condition     = var.dispatch_deadline_seconds == null ? true : var.dispatch_deadline_seconds >= 1
    error_message = "dispatch_deadline_seconds must be null or at least 1."
  }
}

variable "max_response_bytes" {
  description = "Largest query result the API returns in one response (LAMBDAFUSION_MAX_RESPONSE_BYTES); larger results answer 413 and are downloaded from S3 through presigned URLs (GET /v1/queries/{id}/result/objects, which the CLI uses by itself). null for the code's default, 4 MiB: a Lambda response carries at most 6 MB, base64-encoded for binary formats."
  type        = number
  default     = null

  validation {
    condition     = var.max_response_bytes == null ? true : (var.max_response_bytes >= 1024 && var.max_response_bytes <= 4500000)
    error_message = "max_response_bytes must be null or from 1024 to 4500000: Lambda returns at most 6 MB, and a binary result (Arrow IPC, Parquet) is base64-encoded on the way, 4 bytes for every 3."
  }
}

variable "max_queries_per_caller" {
  description = "Most queries one caller (IAM principal or JWT subject) may have running at once (LAMBDAFUSION_MAX_QUERIES_PER_CALLER); a further one is refused with a 429 naming the running ones. null (the default): no limit."
  type        = number
  default     = null

  validation {
    condition     = var.max_queries_per_caller == null ? true : var.max_queries_per_caller >= 1
    error_message = "max_queries_per_caller must be null or at least 1."
  }
}

variable "max_tasks_per_caller" {
  description = "Most tasks one caller's running queries may have in flight together (LAMBDAFUSION_MAX_TASKS_PER_CALLER): each query reserves its widest stage (at most this many tasks), runs no more than that at once, and a query whose reservation does not fit beside the caller's running ones is refused with a 429. null (the default): no limit."
  type        = number
  default     = null

  validation {
    condition     = var.max_tasks_per_caller == null ? true : var.max_tasks_per_caller >= 1
    error_message = "max_tasks_per_caller must be null or at least 1."
  }
}

variable "max_scan_bytes_per_query" {
  description = "Most bytes of table files one query may read (LAMBDAFUSION_MAX_SCAN_BYTES_PER_QUERY), as Athena's per-query data usage limit: a query planned to read more is refused with both figures, and one whose tasks read more while running fails. null (the default): no limit. 1099511627776 caps a query at 1 TiB, about $5 of Athena scanning."
  type        = number
  default     = null

  validation {
    condition     = var.max_scan_bytes_per_query == null ? true : var.max_scan_bytes_per_query >= 1
    error_message = "max_scan_bytes_per_query must be null or a positive number of bytes."
  }
}

variable "max_query_cost_usd" {
  description = "Most a query may cost in US dollars (decimals allowed, e.g. 0.5) by the engine's estimate (LAMBDAFUSION_MAX_QUERY_COST_USD): its committed tasks' GB-seconds and requests at list prices, checked at every scheduler step; past it the query fails with the figure and its tasks stop. null (the default): no limit."
  type        = number
  default     = null

  validation {
    condition     = var.max_query_cost_usd == null ? true : var.max_query_cost_usd > 0
    error_message = "max_query_cost_usd must be null or above 0."
  }
}

variable "max_attempts" {
  description = "Attempts per task before the job fails (LAMBDAFUSION_MAX_ATTEMPTS); null for the code's default. Lambda itself never retries a task (maximum_retry_attempts = 0): the scheduler owns retries."
  type        = number
  default     = null

  validation {
    condition     = var.max_attempts == null ? true : var.max_attempts >= 1
    error_message = "max_attempts must be null or at least 1."
  }
}

variable "task_timeout_seconds" {
  description = "Seconds after dispatch when the sweep treats a task as lost (LAMBDAFUSION_TASK_TIMEOUT_SECS). null derives it: executor_max_event_age_seconds + executor_timeout_seconds + 60, the longest a task can legitimately take from dispatch to commit."
  type        = number
  default     = null

  validation {
    condition     = var.task_timeout_seconds == null ? true : var.task_timeout_seconds >= 10
    error_message = "task_timeout_seconds must be null or at least 10."
  }
}

variable "dispatch_concurrency" {
  description = "Concurrent async invocations per dispatching function (LAMBDAFUSION_DISPATCH_CONCURRENCY); null for the code's default."
  type        = number
  default     = null

  validation {
    condition     = var.dispatch_concurrency == null ? true : var.dispatch_concurrency >= 1
    error_message = "dispatch_concurrency must be null or at least 1."
  }
}

variable "max_shuffle_reads" {
  description = "Most ranged GETs one hash shuffle may take read directly, producers x consumer tasks (LAMBDAFUSION_MAX_SHUFFLE_READS): a shuffle planned wider goes through a combining stage, a two-level exchange whose reads grow about as the square root of that product; null for the code's default (65536)."
  type        = number
  default     = null

  validation {
    condition     = var.max_shuffle_reads == null ? true : var.max_shuffle_reads >= 1
    error_message = "max_shuffle_reads must be null or at least 1."
  }
}

variable "dispatch_fanout" {
  description = "Invocations one dispatcher makes (LAMBDAFUSION_DISPATCH_FANOUT): a stage with more tasks goes out through an invocation tree of executor invocations, each sending at most this many; null for the code's default (32)."
  type        = number
  default     = null

  validation {
    condition     = var.dispatch_fanout == null ? true : var.dispatch_fanout >= 2
    error_message = "dispatch_fanout must be null or at least 2."
  }
}

variable "job_ttl_days" {
  description = "Days a job's records live before DynamoDB's TTL removes them (LAMBDAFUSION_JOB_TTL_DAYS). null uses results_retention_days, so job records and their results expire together."
  type        = number
  default     = null

  validation {
    condition     = var.job_ttl_days == null ? true : var.job_ttl_days >= 1
    error_message = "job_ttl_days must be null or at least 1."
  }
}

variable "broadcast_scan_percent" {
  description = "The join switch's cost rule (LAMBDAFUSION_BROADCAST_SCAN_PERCENT): a partitioned join switches to broadcasting its small side only while that side, read by every task of the large side, is at most this percentage of the bytes the large side scans. null for the code's default (25)."
  type        = number
  default     = null

  validation {
    condition     = var.broadcast_scan_percent == null ? true : (var.broadcast_scan_percent >= 1 && var.broadcast_scan_percent <= 100000)
    error_message = "broadcast_scan_percent must be null or from 1 to 100000."
  }
}

variable "speculation" {
  description = "Speculative attempts for stragglers (LAMBDAFUSION_SPECULATION): once half of a stage's tasks have committed, a task running speculation_percent of their median time gets a second attempt and the first commit wins. null for the code's default (true)."
  type        = bool
  default     = null
}

variable "speculation_percent" {
  description = "When a straggler gets its speculative attempt, as a percentage of the median run time of its stage's committed tasks (LAMBDAFUSION_SPECULATION_PERCENT); null for the code's default (150)."
  type        = number
  default     = null

  validation {
    condition     = var.speculation_percent == null ? true : (var.speculation_percent >= 100 && var.speculation_percent <= 100000)
    error_message = "speculation_percent must be null or from 100 to 100000."
  }
}

variable "speculation_floor_seconds" {
  description = "No task is speculated sooner than this after its stage was dispatched (LAMBDAFUSION_SPECULATION_FLOOR_SECS); null for the code's default (2)."
  type        = number
  default     = null

  validation {
    condition     = var.speculation_floor_seconds == null ? true : (var.speculation_floor_seconds >= 1 && var.speculation_floor_seconds <= 86400)
    error_message = "speculation_floor_seconds must be null or from 1 to 86400."
  }
}

variable "fast_path" {
  description = "Whether an executor that completes a stage wakes the scheduler at once (LAMBDAFUSION_FAST_PATH); null for the code's default (true)."
  type        = bool
  default     = null
}

# ---------------------------------------------------------------------------------------
# Alarms
# ---------------------------------------------------------------------------------------

variable "alarm_email" {
  description = "An address the module's alarms notify, through an SNS topic of its own (the address must confirm the subscription AWS mails it). null (the default): no topic."
  type        = string
  default     = null

  validation {
    condition     = var.alarm_email == null ? true : can(regex("^[^@[:space:]]+@[^@[:space:]]+\\.[^@[:space:]]+$", var.alarm_email))
    error_message = "alarm_email must be an email address."
  }
}

variable "alarm_actions" {
  description = "ARNs of existing SNS topics the alarms notify as well (on alarm and back to OK). Alarms exist either way and show in the console and the dashboard."
  type        = list(string)
  default     = []
}

variable "monthly_budget_usd" {
  description = "An AWS Budgets monthly cost budget for the deployment, in US dollars: the costs of the resources tagged lambdafusion:deployment = name_prefix (activate that cost allocation tag in the Billing console first). alarm_email, when given, hears at 80% spent and 100% forecast. null (the default): no budget."
  type        = number
  default     = null

  validation {
    condition     = var.monthly_budget_usd == null ? true : var.monthly_budget_usd > 0
    error_message = "monthly_budget_usd must be null or above 0."
  }
}
