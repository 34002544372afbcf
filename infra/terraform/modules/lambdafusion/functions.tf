# The two functions. Runtime, handler, architecture and every environment variable name
# come from aws/src/contract.rs; tests/tests/end_to_end/terraform_contract.rs holds this file to it.

locals {
  # Names are known before the functions exist, so each function can name the other in its
  # environment without a dependency cycle.
  scheduler_function_name = "${var.name_prefix}-scheduler"
  executor_function_name  = "${var.name_prefix}-executor"
  # The large executor's name is the executor's with "-large", so its ARN (and its log
  # group's) is the executor's with "-large" too: the roles can name it whether or not
  # it exists.
  large_executor_function_name = "${local.executor_function_name}-large"
  has_large_executor           = var.large_executor_memory_mb != null
  function_names = {
    scheduler = local.scheduler_function_name
    executor  = local.executor_function_name
  }

  # The longest a task can legitimately take from dispatch to commit: waiting in the async
  # queue (at most executor_max_event_age_seconds), then running (at most the executor's
  # timeout), plus a minute of slack. Past it, the sweep treats the task as lost.
  task_timeout_seconds = coalesce(
    var.task_timeout_seconds,
    var.executor_max_event_age_seconds + var.executor_timeout_seconds + 60,
  )

  # The tasks a stage may have: the variable, or the code's default (EngineConfig's
  # max_tasks_per_stage; tests/tests/end_to_end/terraform_contract.rs holds the two equal).
  code_default_max_tasks_per_stage = 1000
  max_tasks_per_stage              = coalesce(var.max_tasks_per_stage, local.code_default_max_tasks_per_stage)

  # Spills stay within each function's /tmp (ephemeral storage), less a tenth (at least
  # 64 MiB) kept for the runtime and other files; past it a task fails naming the setting.
  max_spill_bytes = {
    scheduler = (var.scheduler_ephemeral_storage_mb - max(64, floor(var.scheduler_ephemeral_storage_mb / 10))) * 1048576
    executor  = (var.executor_ephemeral_storage_mb - max(64, floor(var.executor_ephemeral_storage_mb / 10))) * 1048576
  }

  # Settings both functions read. Optional ones left null are not set at all, so the code's
  # own defaults apply.
  engine_env = merge(
    {
      LAMBDAFUSION_TABLE             = aws_dynamodb_table.jobs.name
      LAMBDAFUSION_BUCKET            = aws_s3_bucket.shuffle.id
      LAMBDAFUSION_PREFIX            = var.prefix
      LAMBDAFUSION_TASK_TIMEOUT_SECS = tostring(local.task_timeout_seconds)
      LAMBDAFUSION_JOB_TTL_DAYS      = tostring(coalesce(var.job_ttl_days, var.results_retention_days))
      LAMBDAFUSION_MAX_PRESIGN_SECS  = tostring(var.max_presign_seconds)
      LAMBDAFUSION_MAX_QUERY_SECONDS = tostring(var.max_query_seconds)
      # A sweep stops in time to save its bookmark before the scheduler's timeout.
      LAMBDAFUSION_SWEEP_BUDGET_SECS = tostring(max(2, var.scheduler_timeout_seconds - 10))
      # What the cost estimate (and max_query_cost_usd) prices a task's seconds at.
      LAMBDAFUSION_EXECUTOR_MEMORY_MB            = tostring(var.executor_memory_mb)
      LAMBDAFUSION_EXECUTOR_EPHEMERAL_STORAGE_MB = tostring(var.executor_ephemeral_storage_mb)
    },
    {
      for name, value in {
        LAMBDAFUSION_BYTES_PER_TASK           = var.bytes_per_task
        LAMBDAFUSION_SHUFFLE_BYTES_PER_TASK   = var.shuffle_bytes_per_task
        LAMBDAFUSION_MIN_SCAN_BYTES_PER_TASK  = var.min_scan_bytes_per_task
        LAMBDAFUSION_MAX_BROADCAST_BYTES      = var.max_broadcast_bytes
        LAMBDAFUSION_ADAPTIVE                 = var.adaptive_stages
        LAMBDAFUSION_MAX_TASKS_PER_STAGE      = var.max_tasks_per_stage
        LAMBDAFUSION_MAX_ATTEMPTS             = var.max_attempts
        LAMBDAFUSION_DISPATCH_CONCURRENCY     = var.dispatch_concurrency
        LAMBDAFUSION_DISPATCH_FANOUT          = var.dispatch_fanout
        LAMBDAFUSION_MAX_SHUFFLE_READS        = var.max_shuffle_reads
        LAMBDAFUSION_FAST_PATH                = var.fast_path
        LAMBDAFUSION_SPECULATION              = var.speculation
        LAMBDAFUSION_BROADCAST_SCAN_PERCENT   = var.broadcast_scan_percent
        LAMBDAFUSION_SPECULATION_PERCENT      = var.speculation_percent
        LAMBDAFUSION_SPECULATION_FLOOR_SECS   = var.speculation_floor_seconds
        LAMBDAFUSION_MAX_RESPONSE_BYTES       = var.max_response_bytes
        LAMBDAFUSION_DATA_BUCKETS             = length(var.data_buckets) > 0 ? join(",", [for b in var.data_buckets : "s3://${b}"]) : null
        LAMBDAFUSION_WRITE_LOCATIONS          = length(var.write_locations) > 0 ? join(",", [for l in var.write_locations : "s3://${l}"]) : null
        LAMBDAFUSION_ADMIN_PRINCIPALS         = length(var.admin_principals) > 0 ? join(",", var.admin_principals) : null
        LAMBDAFUSION_CATALOG_WRITERS          = var.catalog_writers == null ? null : join(",", var.catalog_writers)
        LAMBDAFUSION_GLUE_DATABASES           = length(var.glue_databases) > 0 ? join(",", var.glue_databases) : null
        LAMBDAFUSION_GLUE_DEFAULT_DATABASE    = var.glue_default_database
        LAMBDAFUSION_DISPATCH_DEADLINE_SECS   = var.dispatch_deadline_seconds
        LAMBDAFUSION_MAX_SCAN_BYTES_PER_QUERY = var.max_scan_bytes_per_query
        LAMBDAFUSION_MAX_QUERIES_PER_CALLER   = var.max_queries_per_caller
        LAMBDAFUSION_MAX_TASKS_PER_CALLER     = var.max_tasks_per_caller
        LAMBDAFUSION_MAX_QUERY_COST_USD       = var.max_query_cost_usd
        LAMBDAFUSION_LARGE_EXECUTOR_MEMORY_MB = var.large_executor_memory_mb
        LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION  = local.has_large_executor ? local.large_executor_function_name : null
        LAMBDAFUSION_SIZE_COST_PERCENT        = var.size_cost_percent
      } : name => tostring(value) if value != null
    },
  )
}

# ---------------------------------------------------------------------------------------
# Code: each zip goes to Lambda in the API request, or through S3 when it is too large
# ---------------------------------------------------------------------------------------

locals {
  zip_paths = {
    scheduler = var.scheduler_zip_path
    executor  = var.executor_zip_path
  }

  # Lambda takes a zip of at most 50 MB in the CreateFunction / UpdateFunctionCode request
  # itself and larger ones (up to 250 MB unzipped) from S3
  # (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html). 1 MiB of
  # slack for the rest of the request (environment, configuration).
  direct_upload_max_bytes = 49 * 1024 * 1024

  # Terraform has no file-size function; base64 takes 4 characters per 3 bytes.
  zip_bytes = { for f, path in local.zip_paths : f => floor(length(filebase64(path)) * 3 / 4) }

  code_in_s3 = {
    for f, bytes in local.zip_bytes :
    f => var.code_upload == "s3" || (var.code_upload == "auto" && bytes >= local.direct_upload_max_bytes)
  }

  # Objects outside "<prefix>/": the functions' own roles can neither read nor replace them.
  # Named by content, so new code is a new object and the function's s3_key changes.
  code_key_prefix = "lambda-code/"
}

# ---------------------------------------------------------------------------------------
# Architecture: what the zips were built for, from scripts/package's manifest
# ---------------------------------------------------------------------------------------

locals {
  # scripts/package writes <out>/package.json beside <out>/<function>-fn/bootstrap.zip: the
  # architecture it built for and each zip's hash. The manifest speaks for a zip only when
  # that hash is the zip's, so a stale manifest beside rebuilt zips says nothing.
  package_manifest_paths = { for f, path in local.zip_paths : f => "${dirname(dirname(path))}/package.json" }
  package_manifests = {
    for f, path in local.package_manifest_paths : f => fileexists(path) ? jsondecode(file(path)) : null
  }
  packaged_architecture = {
    for f, m in local.package_manifests : f => (
      try(m.functions["${f}-fn"].sha256_base64, null) == filebase64sha256(local.zip_paths[f]) ? m.architecture : null
    )
  }
  known_architectures = distinct(compact(values(local.packaged_architecture)))
  architecture = var.architecture != null ? var.architecture : (
    length(local.known_architectures) == 1 ? local.known_architectures[0] : null
  )
  architecture_problem = {
    for f, packaged in local.packaged_architecture : f => (
      local.architecture == null ? (
        length(local.known_architectures) > 1 ?
        "the two zips were packaged for different architectures (${join(" and ", local.known_architectures)}); run scripts/package once for both" :
        "cannot tell what ${local.zip_paths[f]} was built for: no package.json beside it describes it (scripts/package writes one, with the zip's hash); re-run scripts/package, or set architecture to what the zips were built for"
      ) :
      packaged != null && packaged != local.architecture ?
      "architecture = ${local.architecture}, but ${local.package_manifest_paths[f]} says ${local.zip_paths[f]} was built for ${packaged}: every invocation would fail with \"exec format error\". Leave architecture unset to deploy what was built, or rebuild with scripts/package --arch ${local.architecture}" :
      null
    )
  }
}

resource "aws_s3_object" "code" {
  #checkov:skip=CKV_AWS_186:The bucket's default encryption (SSE-S3) covers the zips; a customer-managed KMS key would also have to be granted to Lambda for no protection the code needs.
  for_each = { for f, in_s3 in local.code_in_s3 : f => local.zip_paths[f] if in_s3 }

  bucket = aws_s3_bucket.shuffle.id
  key    = "${local.code_key_prefix}${local.function_names[each.key]}/${filesha256(each.value)}.zip"
  source = each.value
  tags   = local.tags

  lifecycle {
    precondition {
      condition     = !startswith("${var.prefix}/", local.code_key_prefix)
      error_message = "prefix must not start with lambda-code/: the function zips live there, out of the functions' reach."
    }
  }

  depends_on = [aws_s3_bucket_server_side_encryption_configuration.shuffle]
}

# ---------------------------------------------------------------------------------------
# scheduler-fn: HTTP API, DynamoDB stream batches, sweep, and executor failure records
# ---------------------------------------------------------------------------------------

resource "aws_cloudwatch_log_group" "scheduler" {
  #checkov:skip=CKV_AWS_158:Logs are encrypted with CloudWatch's own key; a customer-managed KMS key costs $1/month plus requests and buys nothing for operational logs without secrets.
  #checkov:skip=CKV_AWS_338:Retention is a variable (default 30 days); a year of debug logs for an ephemeral query engine is cost without use.
  name              = "/aws/lambda/${local.scheduler_function_name}"
  retention_in_days = var.log_retention_days
  tags              = local.tags
}

resource "aws_lambda_function" "scheduler" {
  #checkov:skip=CKV_AWS_117:No VPC: the function only calls public AWS APIs (DynamoDB, S3, Lambda); a VPC would add NAT or endpoint costs and cold-start latency for nothing.
  #checkov:skip=CKV_AWS_173:The environment holds resource names and tuning numbers, no secrets; Lambda encrypts it at rest with its service key, a customer-managed KMS key would only add cost.
  #checkov:skip=CKV_AWS_272:Code signing needs an AWS Signer profile and signed artifacts from CI; the zips come straight from `cargo lambda build` in this deployment.
  #checkov:skip=CKV_AWS_50:X-Ray is PassThrough by default (tracing_mode): Active tracing costs up to $5 per million task invocations and the engine's segments carry no query; lambdafusion logs follows a query instead.
  function_name = local.scheduler_function_name
  description   = "lambdafusion scheduler: plans SQL, keeps the stage DAG in DynamoDB, dispatches tasks to ${local.executor_function_name}"
  role          = aws_iam_role.scheduler.arn

  # The zip itself, or its S3 copy (code_upload); the hash is the zip's either way.
  filename         = local.code_in_s3.scheduler ? null : var.scheduler_zip_path
  s3_bucket        = local.code_in_s3.scheduler ? aws_s3_object.code["scheduler"].bucket : null
  s3_key           = local.code_in_s3.scheduler ? aws_s3_object.code["scheduler"].key : null
  source_code_hash = filebase64sha256(var.scheduler_zip_path)
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = [local.architecture]

  memory_size                    = var.scheduler_memory_mb
  timeout                        = var.scheduler_timeout_seconds
  reserved_concurrent_executions = var.scheduler_reserved_concurrency == null ? -1 : var.scheduler_reserved_concurrency

  ephemeral_storage {
    size = var.scheduler_ephemeral_storage_mb
  }

  tracing_config {
    mode = var.tracing_mode
  }

  # One JSON object per line (the functions write JSON; Lambda's own START / END / REPORT
  # lines become JSON too), so that a query's lines are found and read by their fields.
  logging_config {
    log_format            = "JSON"
    application_log_level = "INFO"
    system_log_level      = "INFO"
    log_group             = aws_cloudwatch_log_group.scheduler.name
  }

  # Async events to the scheduler (sweep, fast-path wakes, executor failure records) are
  # retried twice by Lambda; what still fails lands in the poison queue instead of vanishing.
  dead_letter_config {
    target_arn = aws_sqs_queue.poison.arn
  }

  # The scheduler names itself too: the nodes of invocation trees are its invocations.
  environment {
    variables = merge(local.engine_env, {
      LAMBDAFUSION_EXECUTOR_FUNCTION  = local.executor_function_name
      LAMBDAFUSION_SCHEDULER_FUNCTION = local.scheduler_function_name
      LAMBDAFUSION_MAX_SPILL_BYTES    = tostring(local.max_spill_bytes.scheduler)
    })
  }

  tags = local.tags

  lifecycle {
    precondition {
      condition     = local.architecture_problem.scheduler == null
      error_message = "scheduler-fn: ${coalesce(local.architecture_problem.scheduler, "-")}."
    }
  }

  # The log group must exist before Lambda creates its own without retention, and Lambda
  # checks at creation that the role may send to the dead-letter queue and to X-Ray (the
  # runtime policy; see "Ordering" in iam.tf).
  depends_on = [
    aws_cloudwatch_log_group.scheduler,
    aws_iam_role_policy.scheduler_runtime,
  ]
}

# Asynchronous events to the scheduler: Lambda's two retries, then the dead-letter queue
# (poison queue); an event throttled for longer than the event age goes there too, unrun.
resource "aws_lambda_function_event_invoke_config" "scheduler" {
  function_name                = aws_lambda_function.scheduler.function_name
  maximum_retry_attempts       = 2
  maximum_event_age_in_seconds = var.scheduler_max_event_age_seconds
}

resource "aws_lambda_function_recursion_config" "scheduler" {
  count          = var.allow_recursive_loop ? 1 : 0
  function_name  = aws_lambda_function.scheduler.function_name
  recursive_loop = "Allow"
}

# ---------------------------------------------------------------------------------------
# executor-fn: one task (one partition of one stage) per invocation
# ---------------------------------------------------------------------------------------

resource "aws_cloudwatch_log_group" "executor" {
  #checkov:skip=CKV_AWS_158:Logs are encrypted with CloudWatch's own key; a customer-managed KMS key costs $1/month plus requests and buys nothing for operational logs without secrets.
  #checkov:skip=CKV_AWS_338:Retention is a variable (default 30 days); a year of debug logs for an ephemeral query engine is cost without use.
  name              = "/aws/lambda/${local.executor_function_name}"
  retention_in_days = var.log_retention_days
  tags              = local.tags
}

resource "aws_lambda_function" "executor" {
  #checkov:skip=CKV_AWS_117:No VPC: the function only calls public AWS APIs (DynamoDB, S3, Lambda); a VPC would add NAT or endpoint costs and cold-start latency for nothing.
  #checkov:skip=CKV_AWS_173:The environment holds resource names and tuning numbers, no secrets; Lambda encrypts it at rest with its service key, a customer-managed KMS key would only add cost.
  #checkov:skip=CKV_AWS_272:Code signing needs an AWS Signer profile and signed artifacts from CI; the zips come straight from `cargo lambda build` in this deployment.
  #checkov:skip=CKV_AWS_50:X-Ray is PassThrough by default (tracing_mode): Active tracing costs up to $5 per million task invocations and the engine's segments carry no query; lambdafusion logs follows a query instead.
  #checkov:skip=CKV_AWS_116:Failed and expired task events go to the on-failure destination (aws_lambda_function_event_invoke_config.executor), which reaches the scheduler: a dropped task becomes a visible failed attempt there instead of a message in a queue nobody reads.
  function_name = local.executor_function_name
  description   = "lambdafusion executor: runs one task of a stage against S3 and commits to DynamoDB"
  role          = aws_iam_role.executor.arn

  # The zip itself, or its S3 copy (code_upload); the hash is the zip's either way.
  filename         = local.code_in_s3.executor ? null : var.executor_zip_path
  s3_bucket        = local.code_in_s3.executor ? aws_s3_object.code["executor"].bucket : null
  s3_key           = local.code_in_s3.executor ? aws_s3_object.code["executor"].key : null
  source_code_hash = filebase64sha256(var.executor_zip_path)
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = [local.architecture]

  memory_size                    = var.executor_memory_mb
  timeout                        = var.executor_timeout_seconds
  reserved_concurrent_executions = var.executor_reserved_concurrency == null ? -1 : var.executor_reserved_concurrency

  ephemeral_storage {
    size = var.executor_ephemeral_storage_mb
  }

  tracing_config {
    mode = var.tracing_mode
  }

  # One JSON object per line (the functions write JSON; Lambda's own START / END / REPORT
  # lines become JSON too), so that a query's lines are found and read by their fields.
  logging_config {
    log_format            = "JSON"
    application_log_level = "INFO"
    system_log_level      = "INFO"
    log_group             = aws_cloudwatch_log_group.executor.name
  }

  # The executor names itself too: it dispatches the stages its commits make ready (the
  # fast path runs the scheduler's step in place).
  environment {
    variables = merge(local.engine_env, {
      LAMBDAFUSION_SCHEDULER_FUNCTION = local.scheduler_function_name
      LAMBDAFUSION_EXECUTOR_FUNCTION  = local.executor_function_name
      LAMBDAFUSION_MAX_SPILL_BYTES    = tostring(local.max_spill_bytes.executor)
    })
  }

  tags = local.tags

  lifecycle {
    precondition {
      condition     = local.architecture_problem.executor == null
      error_message = "executor-fn: ${coalesce(local.architecture_problem.executor, "-")}."
    }

    # A stage of more tasks than the executor may run at once waits on throttling: its
    # last tasks start only when the first end, and may age out of the async queue.
    precondition {
      condition = (
        var.executor_reserved_concurrency == null ||
        local.max_tasks_per_stage <= coalesce(var.executor_reserved_concurrency, 0)
      )
      error_message = "max_tasks_per_stage (${local.max_tasks_per_stage}, ${local.code_default_max_tasks_per_stage} when null) must be at most executor_reserved_concurrency (${coalesce(var.executor_reserved_concurrency, 0)}): a stage would hold more tasks than the executor may run at once. Set max_tasks_per_stage to the reserved concurrency or below."
    }
  }

  # As the scheduler: the log group first, and Lambda checks the X-Ray permissions of the
  # role at creation.
  depends_on = [
    aws_cloudwatch_log_group.executor,
    aws_iam_role_policy.executor_runtime,
  ]
}

resource "aws_lambda_function_recursion_config" "executor" {
  count          = var.allow_recursive_loop ? 1 : 0
  function_name  = aws_lambda_function.executor.function_name
  recursive_loop = "Allow"
}

# The scheduler owns retries: Lambda must not retry a task on its own (a retry would reuse
# the attempt number), and an event that waited too long or whose invocation failed (crash,
# timeout, out of memory) is handed to the scheduler as a destination record
# ({"requestContext": {...}, "requestPayload": <task>, "responsePayload": <error>}), which
# turns it into a failed attempt and dispatches the next one.
resource "aws_lambda_function_event_invoke_config" "executor" {
  function_name                = aws_lambda_function.executor.function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = var.executor_max_event_age_seconds

  destination_config {
    on_failure {
      destination = aws_lambda_function.scheduler.arn
    }
  }

  # Lambda checks that the executor's role may invoke the destination (WakeScheduler in
  # the executor's engine policy; see "Ordering" in iam.tf).
  depends_on = [aws_iam_role_policy.executor]
}

# ---------------------------------------------------------------------------------------
# executor-fn, large: the same code, role and settings with more memory (and vCPUs), for
# the stages the scheduler sizes up (large_executor_memory_mb; none by default)
# ---------------------------------------------------------------------------------------

resource "aws_cloudwatch_log_group" "executor_large" {
  #checkov:skip=CKV_AWS_158:Logs are encrypted with CloudWatch's own key; a customer-managed KMS key costs $1/month plus requests and buys nothing for operational logs without secrets.
  #checkov:skip=CKV_AWS_338:Retention is a variable (default 30 days); a year of debug logs for an ephemeral query engine is cost without use.
  count             = local.has_large_executor ? 1 : 0
  name              = "/aws/lambda/${local.large_executor_function_name}"
  retention_in_days = var.log_retention_days
  tags              = local.tags
}

resource "aws_lambda_function" "executor_large" {
  #checkov:skip=CKV_AWS_117:No VPC: the function only calls public AWS APIs (DynamoDB, S3, Lambda); a VPC would add NAT or endpoint costs and cold-start latency for nothing.
  #checkov:skip=CKV_AWS_173:The environment holds resource names and tuning numbers, no secrets; Lambda encrypts it at rest with its service key, a customer-managed KMS key would only add cost.
  #checkov:skip=CKV_AWS_272:Code signing needs an AWS Signer profile and signed artifacts from CI; the zips come straight from `cargo lambda build` in this deployment.
  #checkov:skip=CKV_AWS_50:X-Ray is PassThrough by default (tracing_mode): Active tracing costs up to $5 per million task invocations and the engine's segments carry no query; lambdafusion logs follows a query instead.
  #checkov:skip=CKV_AWS_116:Failed and expired task events go to the on-failure destination (aws_lambda_function_event_invoke_config.executor_large), which reaches the scheduler, as the executor's do.
  count         = local.has_large_executor ? 1 : 0
  function_name = local.large_executor_function_name
  description   = "lambdafusion executor, large: runs one task of a stage the scheduler sized up"
  role          = aws_iam_role.executor.arn

  filename         = local.code_in_s3.executor ? null : var.executor_zip_path
  s3_bucket        = local.code_in_s3.executor ? aws_s3_object.code["executor"].bucket : null
  s3_key           = local.code_in_s3.executor ? aws_s3_object.code["executor"].key : null
  source_code_hash = filebase64sha256(var.executor_zip_path)
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = [local.architecture]

  memory_size = var.large_executor_memory_mb
  timeout     = var.executor_timeout_seconds
  # Its tasks count against the account's unreserved pool; the executor's reservation, if
  # any, stays the executor's.
  reserved_concurrent_executions = -1

  ephemeral_storage {
    size = var.executor_ephemeral_storage_mb
  }

  tracing_config {
    mode = var.tracing_mode
  }

  logging_config {
    log_format            = "JSON"
    application_log_level = "INFO"
    system_log_level      = "INFO"
    log_group             = "/aws/lambda/${local.large_executor_function_name}"
  }

  environment {
    variables = merge(local.engine_env, {
      LAMBDAFUSION_SCHEDULER_FUNCTION = local.scheduler_function_name
      LAMBDAFUSION_EXECUTOR_FUNCTION  = local.executor_function_name
      LAMBDAFUSION_MAX_SPILL_BYTES    = tostring(local.max_spill_bytes.executor)
    })
  }

  tags = local.tags

  lifecycle {
    precondition {
      condition     = local.architecture_problem.executor == null
      error_message = "executor-fn: ${coalesce(local.architecture_problem.executor, "-")}."
    }
  }

  depends_on = [
    aws_cloudwatch_log_group.executor_large,
    aws_iam_role_policy.executor_runtime,
  ]
}

# As the executor's: no retries by Lambda, failures and expired events to the scheduler.
resource "aws_lambda_function_event_invoke_config" "executor_large" {
  count                        = local.has_large_executor ? 1 : 0
  function_name                = local.large_executor_function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = var.executor_max_event_age_seconds

  destination_config {
    on_failure {
      destination = aws_lambda_function.scheduler.arn
    }
  }

  depends_on = [aws_iam_role_policy.executor, aws_lambda_function.executor_large]
}
