# Alarms and a dashboard: what can go wrong without any query noticing. Every alarm
# notifies var.alarm_actions (SNS topic ARNs) and, with alarm_email, a topic of the
# module's own. tests/tests/end_to_end/terraform_plan.rs holds each alarm to its metric and resource.

locals {
  alarm_actions = concat(var.alarm_actions, aws_sns_topic.alarms[*].arn)

  alarmed_functions = merge(
    {
      scheduler = aws_lambda_function.scheduler.function_name
      executor  = aws_lambda_function.executor.function_name
    },
    # The large executor, where there is one: its tasks fail, throttle and age out as
    # the executor's do.
    { for f, name in { executor_large = local.large_executor_function_name } : f => name if local.has_large_executor },
  )

  # Per function: a Lambda metric, and above what it alarms (sum over 5 minutes).
  function_metrics = {
    # An error returned by a function: the executor could not even record a task's
    # failure, the scheduler failed a step (the stream retries it, then the poison queue).
    errors = "Errors"
    # Invocations refused for concurrency: tasks wait in the async queue, the API answers 429.
    throttles = "Throttles"
    # Async events Lambda dropped (too old, or out of retries without a destination).
    dropped = "AsyncEventsDropped"
  }

  # Every alarm: its metric, the resource it watches, the statistic over 5 minutes and
  # above what it fires.
  alarms = merge(
    {
      for pair in setproduct(keys(local.alarmed_functions), keys(local.function_metrics)) :
      "${local.alarmed_functions[pair[0]]}-${pair[1]}" => {
        about      = "${pair[0]}: ${local.function_metrics[pair[1]]}"
        namespace  = "AWS/Lambda"
        metric     = local.function_metrics[pair[1]]
        dimensions = { FunctionName = local.alarmed_functions[pair[0]] }
        statistic  = "Sum"
        above      = 0
      }
    },
    {
      # The stream trigger falling behind: commits wait that long before the scheduler
      # sees them.
      "${local.scheduler_function_name}-stream-iterator-age" = {
        about      = "the stream trigger of the scheduler is more than a minute behind"
        namespace  = "AWS/Lambda"
        metric     = "IteratorAge"
        dimensions = { FunctionName = aws_lambda_function.scheduler.function_name }
        statistic  = "Maximum"
        above      = 60000
      }
      # Records the scheduler could not process: each is a wake-up or a failure record
      # lost to its job (the sweep redoes their work; the message says what it was).
      "${aws_sqs_queue.poison.name}-messages" = {
        about      = "the scheduler's poison queue holds messages; read them (terraform output poison_queue_url)"
        namespace  = "AWS/SQS"
        metric     = "ApproximateNumberOfMessagesVisible"
        dimensions = { QueueName = aws_sqs_queue.poison.name }
        statistic  = "Maximum"
        above      = 0
      }
    },
    {
      # The job table refusing requests: on-demand tables throttle past twice their
      # previous peak, or on one hot partition.
      for metric in ["ReadThrottleEvents", "WriteThrottleEvents"] :
      "${aws_dynamodb_table.jobs.name}-${metric}" => {
        about      = "DynamoDB ${metric} on the job table"
        namespace  = "AWS/DynamoDB"
        metric     = metric
        dimensions = { TableName = aws_dynamodb_table.jobs.name }
        statistic  = "Sum"
        above      = 0
      }
    },
    {
      # Server errors of the HTTP API (the scheduler failing, or timing out past 30 s).
      for api in aws_apigatewayv2_api.http :
      "${var.name_prefix}-api-5xx" => {
        about      = "the HTTP API answered more than 5 server errors"
        namespace  = "AWS/ApiGateway"
        metric     = "5xx"
        dimensions = { ApiId = api.id, Stage = "$default" }
        statistic  = "Sum"
        above      = 5
      }
    },
  )
}

resource "aws_sns_topic" "alarms" {
  #checkov:skip=CKV_AWS_26:CloudWatch alarms cannot publish to a topic encrypted with the AWS-managed SNS key, and a customer-managed key costs $1/month; the notifications name an alarm and a metric, no data.
  count = var.alarm_email == null ? 0 : 1
  name  = "${var.name_prefix}-alarms"
  tags  = local.tags
}

resource "aws_sns_topic_subscription" "alarm_email" {
  count     = var.alarm_email == null ? 0 : 1
  topic_arn = aws_sns_topic.alarms[0].arn
  protocol  = "email"
  endpoint  = var.alarm_email
}

resource "aws_cloudwatch_metric_alarm" "this" {
  for_each = local.alarms

  alarm_name          = each.key
  alarm_description   = "lambdafusion: ${each.value.about} (above ${each.value.above} in 5 minutes). See docs/deploy.md, First day."
  namespace           = each.value.namespace
  metric_name         = each.value.metric
  dimensions          = each.value.dimensions
  statistic           = each.value.statistic
  period              = 300
  evaluation_periods  = 1
  threshold           = each.value.above
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}
# One page for the deployment: the functions, the table, the queue and the API.
resource "aws_cloudwatch_dashboard" "deployment" {
  dashboard_name = var.name_prefix
  dashboard_body = jsonencode({
    widgets = [
      for i, w in [
        {
          title   = "Invocations, errors, throttles"
          metrics = flatten([for f in values(local.alarmed_functions) : [for m in ["Invocations", "Errors", "Throttles"] : ["AWS/Lambda", m, "FunctionName", f, { stat = "Sum" }]]])
        },
        {
          title   = "Concurrent executions"
          metrics = [for f in values(local.alarmed_functions) : ["AWS/Lambda", "ConcurrentExecutions", "FunctionName", f, { stat = "Maximum" }]]
        },
        {
          title   = "Duration (p50, p99)"
          metrics = flatten([for f in values(local.alarmed_functions) : [for s in ["p50", "p99"] : ["AWS/Lambda", "Duration", "FunctionName", f, { stat = s }]]])
        },
        {
          title = "Async events and the stream"
          metrics = [
            ["AWS/Lambda", "AsyncEventsDropped", "FunctionName", local.executor_function_name, { stat = "Sum" }],
            ["AWS/Lambda", "AsyncEventAge", "FunctionName", local.executor_function_name, { stat = "Maximum" }],
            ["AWS/Lambda", "IteratorAge", "FunctionName", local.scheduler_function_name, { stat = "Maximum" }],
            ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", aws_sqs_queue.poison.name, { stat = "Maximum" }],
          ]
        },
        {
          title = "Job table"
          metrics = [for m in ["ConsumedReadCapacityUnits", "ConsumedWriteCapacityUnits", "ReadThrottleEvents", "WriteThrottleEvents"] :
          ["AWS/DynamoDB", m, "TableName", aws_dynamodb_table.jobs.name, { stat = "Sum" }]]
        },
        {
          title = "HTTP API"
          metrics = local.api_count == 0 ? [] : [for m in ["Count", "4xx", "5xx"] :
          ["AWS/ApiGateway", m, "ApiId", aws_apigatewayv2_api.http[0].id, { stat = "Sum" }]]
        },
        ] : {
        type   = "metric"
        x      = (i % 2) * 12
        y      = floor(i / 2) * 6
        width  = 12
        height = 6
        properties = {
          title   = w.title
          metrics = w.metrics
          region  = data.aws_region.current.name
          period  = 300
          view    = "timeSeries"
        }
      } if length(w.metrics) > 0
    ]
  })
}

data "aws_region" "current" {}
