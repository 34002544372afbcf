# One role per function, each with exactly the actions aws/src/contract.rs lists for it, on
# exactly the resources they are called on. tests/tests/end_to_end/terraform_contract.rs compares these
# statements with the contract (sets equal, in both directions). Where the contract lists no
# action for a role on a resource, the role has no statement for it at all (the executor
# never lists the shuffle bucket or the data buckets, so it has no s3:ListBucket).
#
# DynamoDB transactions (TransactWriteItems) need no permission of their own: a
# transaction is authorized by the PutItem/UpdateItem/DeleteItem of its parts, which the
# JobTable statements grant.
#
# Each role has two inline policies:
#  - *_runtime: what Lambda itself needs before the function can even be created (logs,
#    X-Ray, the scheduler's dead-letter queue); it names no function, so the functions can
#    depend on it;
#  - the data policy: table, stream, bucket and the other function, which names the other
#    function's ARN and so is attached after the functions exist.
#
# Ordering, so that one `terraform apply` succeeds. Lambda checks the execution role's
# permissions when it creates a function with a dead-letter queue (sqs:SendMessage), an
# Active-traced function (X-Ray), an event-source mapping (the stream reads and the
# on-failure queue) and an async destination (lambda:InvokeFunction on the target). A
# role alone is not enough: each of those resources depends_on the aws_iam_role_policy
# that grants what is checked (tests/tests/end_to_end/terraform_contract.rs holds these edges):
#
#   scheduler function      <- scheduler_runtime  (poison queue, X-Ray, logs)
#   executor function       <- executor_runtime   (X-Ray, logs)
#   stream mapping          <- scheduler, scheduler_runtime (stream reads, poison queue)
#   executor invoke config  <- executor           (InvokeFunction on the scheduler)
#   sweep target, API permission, function URL <- scheduler (nothing invokes the scheduler
#                           before it may read its table)
#
# IAM is eventually consistent: a policy just attached can still be refused for some
# seconds (https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_general.html#troubleshoot_general_eventual-consistency).
# The AWS provider retries exactly these refusals, for up to 5 minutes (functions,
# mappings) or 2 minutes (invoke configs): "The provided execution role does not have
# permissions" / "cannot be assumed by Lambda" on CreateFunction, "ensure the role can
# perform" on CreateEventSourceMapping, "does not have permissions" on
# PutFunctionEventInvokeConfig (terraform-provider-aws internal/service/lambda: function.go,
# event_source_mapping.go, function_event_invoke_config.go). With the edges above, the
# retries only ever wait for propagation, never for a policy not yet created, so no
# time_sleep (and no extra hashicorp/time provider) is needed.

data "aws_partition" "current" {}

locals {
  data_bucket_arns        = [for b in var.data_buckets : "arn:${data.aws_partition.current.partition}:s3:::${b}"]
  data_bucket_object_arns = [for b in var.data_buckets : "arn:${data.aws_partition.current.partition}:s3:::${b}/*"]
  # Where COPY may write: the locations' buckets (listing) and their objects.
  write_bucket_arns = [for l in var.write_locations : "arn:${data.aws_partition.current.partition}:s3:::${split("/", l)[0]}"]
  write_object_arns = [for l in var.write_locations : "arn:${data.aws_partition.current.partition}:s3:::${l}/*"]
  # The Glue Data Catalog of this account and region, both taken from the job table's ARN
  # (no sts call, so an offline plan works), the attached databases and their tables.
  table_arn_parts  = split(":", aws_dynamodb_table.jobs.arn)
  glue_catalog_arn = "arn:${data.aws_partition.current.partition}:glue:${local.table_arn_parts[3]}:${local.table_arn_parts[4]}"
  glue_resources = concat(
    ["${local.glue_catalog_arn}:catalog"],
    [for d in var.glue_databases : "${local.glue_catalog_arn}:database/${d}"],
    [for d in var.glue_databases : "${local.glue_catalog_arn}:table/${d}/*"],
  )
}

data "aws_iam_policy_document" "lambda_assume_role" {
  statement {
    sid     = "LambdaAssumeRole"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

# ---------------------------------------------------------------------------------------
# scheduler-fn
# ---------------------------------------------------------------------------------------

resource "aws_iam_role" "scheduler" {
  name               = "${var.name_prefix}-scheduler"
  description        = "Execution role of ${local.scheduler_function_name}"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume_role.json
  tags               = local.tags
}

data "aws_iam_policy_document" "scheduler_runtime" {
  statement {
    sid       = "WriteOwnLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.scheduler.arn}:*"]
  }

  statement {
    sid       = "XRay"
    actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
    resources = ["*"] # X-Ray has no resource-level permissions
  }

  # Failure destination of the stream trigger and dead-letter queue of async invocations:
  # both are delivered with the function's own role.
  statement {
    sid       = "PoisonQueue"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.poison.arn]
  }
}

resource "aws_iam_role_policy" "scheduler_runtime" {
  name   = "runtime"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler_runtime.json
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid = "JobTable"
    actions = [
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:Query",
      "dynamodb:BatchWriteItem",
    ]
    # The table has no secondary indexes; add "${arn}/index/<name>" here if it gets one.
    resources = [aws_dynamodb_table.jobs.arn]
  }

  statement {
    sid = "JobTableStream"
    actions = [
      "dynamodb:DescribeStream",
      "dynamodb:GetRecords",
      "dynamodb:GetShardIterator",
    ]
    resources = [aws_dynamodb_table.jobs.stream_arn]
  }

  # The event-source mapping calls ListStreams, which is not resource-scoped: AWS requires "*".
  statement {
    sid       = "ListStreams"
    actions   = ["dynamodb:ListStreams"]
    resources = ["*"]
  }

  # Listing a finished job's objects to delete them.
  statement {
    sid       = "ShuffleBucket"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.shuffle.arn]
  }

  # Statement results and large stage plans (put), results (get), clean-up (delete).
  statement {
    sid       = "ShuffleObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${aws_s3_bucket.shuffle.arn}/${var.prefix}/*"]
  }

  # Planning lists a table's files and reads their footers for the schema.
  dynamic "statement" {
    for_each = length(var.data_buckets) > 0 ? [1] : []
    content {
      sid       = "DataBuckets"
      actions   = ["s3:ListBucket"]
      resources = local.data_bucket_arns
    }
  }

  dynamic "statement" {
    for_each = length(var.data_buckets) > 0 ? [1] : []
    content {
      sid       = "DataObjects"
      actions   = ["s3:GetObject"]
      resources = local.data_bucket_object_arns
    }
  }

  # COPY: is the location empty, which files did a job write (list); the manifest, the
  # clean-up of files no attempt committed, reading a table written there.
  dynamic "statement" {
    for_each = length(var.write_locations) > 0 ? [1] : []
    content {
      sid       = "WriteBuckets"
      actions   = ["s3:ListBucket"]
      resources = local.write_bucket_arns
    }
  }

  dynamic "statement" {
    for_each = length(var.write_locations) > 0 ? [1] : []
    content {
      sid       = "WriteObjects"
      actions   = ["s3:PutObject", "s3:DeleteObject", "s3:GetObject"]
      resources = local.write_object_arns
    }
  }

  # Objects in data_buckets encrypted with a customer-managed key (SSE-KMS).
  dynamic "statement" {
    for_each = length(var.data_kms_key_arns) > 0 ? [1] : []
    content {
      sid       = "DataKeys"
      actions   = ["kms:Decrypt"]
      resources = var.data_kms_key_arns
    }
  }

  # Tables of the attached Glue databases: their metadata, partitions and names.
  dynamic "statement" {
    for_each = length(var.glue_databases) > 0 ? [1] : []
    content {
      sid       = "GlueCatalog"
      actions   = ["glue:GetTable", "glue:GetTables", "glue:GetPartitions"]
      resources = local.glue_resources
    }
  }

  statement {
    sid       = "DispatchTasks"
    actions   = ["lambda:InvokeFunction"]
    resources = local.executor_arns
  }

  # The nodes of invocation trees: stages wider than dispatch_fanout go out through
  # scheduler invocations, each sending a range of tasks (or further nodes).
  statement {
    sid       = "DispatchTree"
    actions   = ["lambda:InvokeFunction"]
    resources = [aws_lambda_function.scheduler.arn]
  }
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "engine"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}

# ---------------------------------------------------------------------------------------
# executor-fn
# ---------------------------------------------------------------------------------------

resource "aws_iam_role" "executor" {
  name               = "${var.name_prefix}-executor"
  description        = "Execution role of ${local.executor_function_name}"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume_role.json
  tags               = local.tags
}

locals {
  # The executors tasks are dispatched to: the executor, and the large one (its ARN the
  # executor's with "-large") where there is one.
  executor_arns = local.has_large_executor ? [aws_lambda_function.executor.arn, "${aws_lambda_function.executor.arn}-large"] : [aws_lambda_function.executor.arn]
}

data "aws_iam_policy_document" "executor_runtime" {
  statement {
    sid     = "WriteOwnLogs"
    actions = ["logs:CreateLogStream", "logs:PutLogEvents"]
    # The large executor's log group, where there is one, is the executor's with "-large".
    resources = local.has_large_executor ? ["${aws_cloudwatch_log_group.executor.arn}:*", "${aws_cloudwatch_log_group.executor.arn}-large:*"] : ["${aws_cloudwatch_log_group.executor.arn}:*"]
  }

  statement {
    sid       = "XRay"
    actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
    resources = ["*"] # X-Ray has no resource-level permissions
  }
}

resource "aws_iam_role_policy" "executor_runtime" {
  name   = "runtime"
  role   = aws_iam_role.executor.id
  policy = data.aws_iam_policy_document.executor_runtime.json
}

data "aws_iam_policy_document" "executor" {
  # Its task's reads and commit, and the scheduler's step it runs when its commit completes
  # a stage (claims, dispatch records, and finishing the job: the job item and its entry in
  # the active index, deleted in the same transaction).
  statement {
    sid = "JobTable"
    actions = [
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
    ]
    resources = [aws_dynamodb_table.jobs.arn]
  }

  # Listing a finished job's objects to delete them (the scheduler's step after the last
  # stage).
  statement {
    sid       = "ShuffleBucket"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.shuffle.arn]
  }

  # Shuffle output (put), inputs and large stage plans (get), a losing duplicate's output
  # and a finished job's objects (delete), and the abort of a spilled object's multipart
  # upload whose part failed (otherwise its parts are billed until the lifecycle rule).
  statement {
    sid       = "ShuffleObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.shuffle.arn}/${var.prefix}/*"]
  }

  # Reading table files. No DataBuckets statement: the stage plan names the files, the
  # executor never lists a data bucket.
  dynamic "statement" {
    for_each = length(var.data_buckets) > 0 ? [1] : []
    content {
      sid       = "DataObjects"
      actions   = ["s3:GetObject"]
      resources = local.data_bucket_object_arns
    }
  }

  # COPY: each task writes its own files (multipart for large ones) and deletes them when
  # another attempt committed; reading a table written there.
  dynamic "statement" {
    for_each = length(var.write_locations) > 0 ? [1] : []
    content {
      sid       = "WriteObjects"
      actions   = ["s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject"]
      resources = local.write_object_arns
    }
  }

  # Objects in data_buckets encrypted with a customer-managed key (SSE-KMS).
  dynamic "statement" {
    for_each = length(var.data_kms_key_arns) > 0 ? [1] : []
    content {
      sid       = "DataKeys"
      actions   = ["kms:Decrypt"]
      resources = var.data_kms_key_arns
    }
  }

  # Waking the scheduler (a job past its deadline, a failed scheduler step), the nodes of
  # invocation trees, and the on-failure destination of task events, which Lambda
  # delivers with this role.
  statement {
    sid       = "WakeScheduler"
    actions   = ["lambda:InvokeFunction"]
    resources = [aws_lambda_function.scheduler.arn]
  }

  # Dispatching the tasks of the stages its commits make ready.
  statement {
    sid       = "DispatchTasks"
    actions   = ["lambda:InvokeFunction"]
    resources = local.executor_arns
  }
}

resource "aws_iam_role_policy" "executor" {
  name   = "engine"
  role   = aws_iam_role.executor.id
  policy = data.aws_iam_policy_document.executor.json
}
