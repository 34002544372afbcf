# The job table (jobs, stages, tasks, table catalog), its stream, and the stream trigger
# that wakes the scheduler once per stage rather than once per task.

resource "aws_dynamodb_table" "jobs" {
  #checkov:skip=CKV_AWS_119:Encrypted at rest with the DynamoDB-owned key; a customer-managed KMS key costs $1/month plus a KMS request per cache miss on a table written at every task commit.
  name         = "${var.name_prefix}-jobs"
  billing_mode = "PAY_PER_REQUEST" # nothing idles: on-demand bills per request
  hash_key     = "pk"              # JOB#<id> | TABLE#<name>
  range_key    = "sk"              # META | STAGE#<n> | TASK#<stage>#<partition> | COUNT#<stage>#<n>

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  # Job records carry an epoch-seconds expiry; DynamoDB deletes them for free.
  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  # The scheduler only needs the item as written (stage counter, task or job state).
  stream_enabled   = true
  stream_view_type = "NEW_IMAGE"

  deletion_protection_enabled = var.table_deletion_protection

  tags = local.tags
}

# Poison records: stream batches the scheduler failed on after every retry and bisection,
# and scheduler async events (sweep, wake-ups, executor failure records) that failed twice.
resource "aws_sqs_queue" "poison" {
  name                      = "${var.name_prefix}-scheduler-dlq"
  message_retention_seconds = var.poison_queue_retention_seconds
  sqs_managed_sse_enabled   = true
  tags                      = local.tags
}

resource "aws_lambda_event_source_mapping" "stream" {
  event_source_arn  = aws_dynamodb_table.jobs.stream_arn
  function_name     = aws_lambda_function.scheduler.arn
  starting_position = "LATEST"

  batch_size                         = var.stream_batch_size
  maximum_batching_window_in_seconds = 0 # latency matters more than batching here
  parallelization_factor             = var.stream_parallelization_factor

  # A failing batch is split until the bad record is isolated; the scheduler reports which
  # records failed so the good ones are not re-delivered.
  bisect_batch_on_function_error = true
  maximum_retry_attempts         = var.stream_maximum_retry_attempts
  maximum_record_age_in_seconds  = var.stream_maximum_record_age_seconds
  function_response_types        = ["ReportBatchItemFailures"]

  destination_config {
    on_failure {
      destination_arn = aws_sqs_queue.poison.arn
    }
  }

  # Wake the scheduler per share of a stage, not per task: only records whose new image is
  #  - a commit counter whose `remaining` reached 0 (the last of its up to 32 tasks
  #    committed), or
  #  - a task item that turned FAILED
  # (the same rule as ChangeRecord::wakes_scheduler in core/src/state/records.rs).
  # Cancellation sets the job to CANCELLED directly and needs no wake-up.
  # DynamoDB numbers arrive as strings in stream records, hence "0" in quotes.
  # Filters are ORed; TTL deletions (REMOVE, no NewImage) never match.
  filter_criteria {
    filter {
      pattern = jsonencode({
        dynamodb = {
          NewImage = {
            sk        = { S = [{ prefix = "COUNT#" }] }
            remaining = { N = ["0"] }
          }
        }
      })
    }

    filter {
      pattern = jsonencode({
        dynamodb = {
          NewImage = {
            sk    = { S = [{ prefix = "TASK#" }] }
            state = { S = ["FAILED"] }
          }
        }
      })
    }
  }

  tags = local.tags

  # Lambda checks at creation that the scheduler's role may read the stream (engine
  # policy) and send to the failure destination (runtime policy); see "Ordering" in iam.tf.
  depends_on = [
    aws_iam_role_policy.scheduler,
    aws_iam_role_policy.scheduler_runtime,
  ]
}
