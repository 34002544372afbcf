# The two functions. Runtime, handler, architecture and every environment variable name
# come from aws/src/contract.rs; tests/tests/terraform_contract.rs holds this file to it.

locals {
  # Names are known before the functions exist, so each function can name the other in its
  # environment without a dependency cycle.
  scheduler_function_name = "${var.name_prefix}-scheduler"
  executor_function_name  = "${var.name_prefix}-executor"

  # The longest a task can legitimately take from dispatch to commit: waiting in the async
  # queue (at most executor_max_event_age_seconds), then running (at most the executor's
  # timeout), plus a minute of slack. Past it, the sweep treats the task as lost.
  task_timeout_seconds = coalesce(
    var.task_timeout_seconds,
    var.executor_max_event_age_seconds + var.executor_timeout_seconds + 60,
  )

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
    },
    {
      for name, value in {
        LAMBDAFUSION_BYTES_PER_TASK         = var.bytes_per_task
        LAMBDAFUSION_MAX_TASKS_PER_STAGE    = var.max_tasks_per_stage
        LAMBDAFUSION_MAX_ATTEMPTS           = var.max_attempts
        LAMBDAFUSION_DISPATCH_CONCURRENCY   = var.dispatch_concurrency
        LAMBDAFUSION_FAST_PATH              = var.fast_path
        LAMBDAFUSION_MAX_RESPONSE_BYTES     = var.max_response_bytes
        LAMBDAFUSION_DATA_BUCKETS           = length(var.data_buckets) > 0 ? join(",", [for b in var.data_buckets : "s3://${b}"]) : null
        LAMBDAFUSION_ADMIN_PRINCIPALS       = length(var.admin_principals) > 0 ? join(",", var.admin_principals) : null
        LAMBDAFUSION_CATALOG_WRITERS        = var.catalog_writers == null ? null : join(",", var.catalog_writers)
        LAMBDAFUSION_DISPATCH_DEADLINE_SECS = var.dispatch_deadline_seconds
      } : name => tostring(value) if value != null
    },
  )
}

# ---------------------------------------------------------------------------------------
# scheduler-fn: HTTP API, DynamoDB stream batches, sweep, and executor failure records
# ---------------------------------------------------------------------------------------

resource "aws_cloudwatch_log_group" "scheduler" {
  #checkov:skip=CKV_AWS_158:Logs are encrypted with CloudWatch's own key; a customer-managed KMS key costs $1/month plus requests and buys nothing for operational logs without secrets.
  #checkov:skip=CKV_AWS_338:Retention is a variable (default 30 days); a year of debug logs for an ephemeral query engine is cost without use.
  name              = "/aws/lambda/${local.scheduler_function_name}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_lambda_function" "scheduler" {
  #checkov:skip=CKV_AWS_117:No VPC: the function only calls public AWS APIs (DynamoDB, S3, Lambda); a VPC would add NAT or endpoint costs and cold-start latency for nothing.
  #checkov:skip=CKV_AWS_173:The environment holds resource names and tuning numbers, no secrets; Lambda encrypts it at rest with its service key, a customer-managed KMS key would only add cost.
  #checkov:skip=CKV_AWS_272:Code signing needs an AWS Signer profile and signed artifacts from CI; the zips come straight from `cargo lambda build` in this deployment.
  function_name = local.scheduler_function_name
  description   = "lambdafusion scheduler: plans SQL, keeps the stage DAG in DynamoDB, dispatches tasks to ${local.executor_function_name}"
  role          = aws_iam_role.scheduler.arn

  filename         = var.scheduler_zip_path
  source_code_hash = filebase64sha256(var.scheduler_zip_path)
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = ["arm64"]

  memory_size                    = var.scheduler_memory_mb
  timeout                        = var.scheduler_timeout_seconds
  reserved_concurrent_executions = var.scheduler_reserved_concurrency == null ? -1 : var.scheduler_reserved_concurrency

  ephemeral_storage {
    size = var.scheduler_ephemeral_storage_mb
  }

  tracing_config {
    mode = var.tracing_mode
  }

  # Async events to the scheduler (sweep, fast-path wakes, executor failure records) are
  # retried twice by Lambda; what still fails lands in the poison queue instead of vanishing.
  dead_letter_config {
    target_arn = aws_sqs_queue.poison.arn
  }

  environment {
    variables = merge(local.engine_env, {
      LAMBDAFUSION_EXECUTOR_FUNCTION = local.executor_function_name
    })
  }

  tags = var.tags

  # The log group must exist before Lambda creates its own without retention, and Lambda
  # checks at creation that the role may send to the dead-letter queue and to X-Ray.
  depends_on = [
    aws_cloudwatch_log_group.scheduler,
    aws_iam_role_policy.scheduler_runtime,
  ]
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
  tags              = var.tags
}

resource "aws_lambda_function" "executor" {
  #checkov:skip=CKV_AWS_117:No VPC: the function only calls public AWS APIs (DynamoDB, S3, Lambda); a VPC would add NAT or endpoint costs and cold-start latency for nothing.
  #checkov:skip=CKV_AWS_173:The environment holds resource names and tuning numbers, no secrets; Lambda encrypts it at rest with its service key, a customer-managed KMS key would only add cost.
  #checkov:skip=CKV_AWS_272:Code signing needs an AWS Signer profile and signed artifacts from CI; the zips come straight from `cargo lambda build` in this deployment.
  #checkov:skip=CKV_AWS_116:Failed and expired task events go to the on-failure destination (aws_lambda_function_event_invoke_config.executor), which reaches the scheduler: a dropped task becomes a visible failed attempt there instead of a message in a queue nobody reads.
  function_name = local.executor_function_name
  description   = "lambdafusion executor: runs one task of a stage against S3 and commits to DynamoDB"
  role          = aws_iam_role.executor.arn

  filename         = var.executor_zip_path
  source_code_hash = filebase64sha256(var.executor_zip_path)
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = ["arm64"]

  memory_size                    = var.executor_memory_mb
  timeout                        = var.executor_timeout_seconds
  reserved_concurrent_executions = var.executor_reserved_concurrency == null ? -1 : var.executor_reserved_concurrency

  ephemeral_storage {
    size = var.executor_ephemeral_storage_mb
  }

  tracing_config {
    mode = var.tracing_mode
  }

  environment {
    variables = merge(local.engine_env, {
      LAMBDAFUSION_SCHEDULER_FUNCTION = local.scheduler_function_name
    })
  }

  tags = var.tags

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

  # Lambda checks that the executor's role may invoke the destination.
  depends_on = [aws_iam_role_policy.executor]
}
