# Alarms and a dashboard: what can go wrong without any query noticing. Every alarm
# notifies var.alarm_actions (SNS topic ARNs) and, with alarm_email, a topic of the
# module's own. tests/tests/terraform_plan.rs holds each alarm to its metric and resource.

locals {
  alarm_actions = concat(var.alarm_actions, aws_sns_topic.alarms[*].arn)

  alarmed_functions = {
    scheduler = aws_lambda_function.scheduler.function_name
    executor  = aws_lambda_function.executor.function_name
  }

  # Per function: a Lambda metric, its statistic, and above what it alarms (per 5 minutes).
  function_alarms = {
    # An error returned by a function: the executor could not even record a task's
    # failure, the scheduler failed a step (the stream retries it, then the poison queue).
    errors = { metric = "Errors", statistic = "Sum", above = 0 }
    # Invocations refused for concurrency: tasks wait in the async queue, the API answers 429.
    throttles = { metric = "Throttles", statistic = "Sum", above = 0 }
    # Async events Lambda dropped (too old, or out of retries without a destination).
    dropped = { metric = "AsyncEventsDropped", statistic = "Sum", above = 0 }
  }
}

resource "aws_sns_topic" "alarms" {
  #checkov:skip=CKV_AWS_26:CloudWatch alarms cannot publish to a topic encrypted with the AWS-managed SNS key, and a customer-managed key costs $1/month; the notifications name an alarm and a metric, no data.
  count = var.alarm_email == null ? 0 : 1
  name  = "${var.name_prefix}-alarms"
  tags  = var.tags
}

resource "aws_sns_topic_subscription" "alarm_email" {
  count     = var.alarm_email == null ? 0 : 1
  topic_arn = aws_sns_topic.alarms[0].arn
  protocol  = "email"
  endpoint  = var.alarm_email
}

resource "aws_cloudwatch_metric_alarm" "function" {
  for_each = {
    for pair in setproduct(keys(local.alarmed_functions), keys(local.function_alarms)) :
    "${pair[0]}-${pair[1]}" => { function = pair[0], alarm = pair[1] }
  }

  alarm_name          = "${local.alarmed_functions[each.value.function]}-${each.value.alarm}"
  alarm_description   = "lambdafusion ${each.value.function}: ${local.function_alarms[each.value.alarm].metric} above ${local.function_alarms[each.value.alarm].above} in 5 minutes. See docs/deploy.md, First day."
  namespace           = "AWS/Lambda"
  metric_name         = local.function_alarms[each.value.alarm].metric
  dimensions          = { FunctionName = local.alarmed_functions[each.value.function] }
  statistic           = local.function_alarms[each.value.alarm].statistic
  period              = 300
  evaluation_periods  = 1
  threshold           = local.function_alarms[each.value.alarm].above
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

# The stream trigger falling behind: commits wait that long before the scheduler sees them.
resource "aws_cloudwatch_metric_alarm" "stream_iterator_age" {
  alarm_name          = "${local.scheduler_function_name}-stream-iterator-age"
  alarm_description   = "lambdafusion: the DynamoDB stream trigger of ${local.scheduler_function_name} is more than a minute behind."
  namespace           = "AWS/Lambda"
  metric_name         = "IteratorAge"
  dimensions          = { FunctionName = aws_lambda_function.scheduler.function_name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 60000
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

# Records the scheduler could not process: each is a wake-up or a failure record lost to
# the job it belongs to (the sweep redoes their work; the message says what it was).
resource "aws_cloudwatch_metric_alarm" "poison_queue" {
  alarm_name          = "${aws_sqs_queue.poison.name}-messages"
  alarm_description   = "lambdafusion: the scheduler's poison queue holds messages; read them (terraform output poison_queue_url)."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.poison.name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

# The job table refusing requests: on-demand tables throttle past twice their previous
# peak, or on one hot partition.
resource "aws_cloudwatch_metric_alarm" "table_throttles" {
  for_each = toset(["ReadThrottleEvents", "WriteThrottleEvents"])

  alarm_name          = "${aws_dynamodb_table.jobs.name}-${each.value}"
  alarm_description   = "lambdafusion: DynamoDB ${each.value} on ${aws_dynamodb_table.jobs.name}."
  namespace           = "AWS/DynamoDB"
  metric_name         = each.value
  dimensions          = { TableName = aws_dynamodb_table.jobs.name }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

# Server errors of the HTTP API (the scheduler failing, or timing out past 30 s).
resource "aws_cloudwatch_metric_alarm" "api_5xx" {
  count = local.api_count

  alarm_name          = "${var.name_prefix}-api-5xx"
  alarm_description   = "lambdafusion: the HTTP API answered more than 5 server errors in 5 minutes."
  namespace           = "AWS/ApiGateway"
  metric_name         = "5xx"
  dimensions          = { ApiId = aws_apigatewayv2_api.http[0].id, Stage = "$default" }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 5
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
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
