# The sweep: a scheduled EventBridge rule invokes the scheduler with a standard scheduled
# event (detail-type "Scheduled Event"); it finds tasks past their deadline (lost async
# invocations) and jobs whose wake-up was missed, and re-drives them.

resource "aws_cloudwatch_event_rule" "sweep" {
  name                = "${var.name_prefix}-sweep"
  description         = "lambdafusion sweep: re-drive lost tasks and stuck jobs"
  schedule_expression = var.sweep_schedule_expression
  tags                = local.tags
}

resource "aws_cloudwatch_event_target" "sweep" {
  rule = aws_cloudwatch_event_rule.sweep.name
  arn  = aws_lambda_function.scheduler.arn

  # A missed sweep is made up by the next scheduled one.
  retry_policy {
    maximum_event_age_in_seconds = 60
    maximum_retry_attempts       = 0
  }

  # No sweep before the scheduler may read its table (it would fail into the poison queue).
  depends_on = [aws_iam_role_policy.scheduler]
}

resource "aws_lambda_permission" "sweep" {
  statement_id  = "AllowSweepSchedule"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.scheduler.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.sweep.arn
}
