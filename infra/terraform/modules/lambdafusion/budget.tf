# An optional monthly AWS Budgets cost budget for the deployment: every resource carries
# the tag lambdafusion:deployment = name_prefix, and the budget counts the costs under it.
# Budgets sees a tag only once it is activated as a cost allocation tag (Billing console,
# "Cost allocation tags"; it can take a day to show); the guide says so.

locals {
  # Every taggable resource of the module: the caller's tags and the deployment's own.
  tags = merge(var.tags, { "lambdafusion:deployment" = var.name_prefix })
}

resource "aws_budgets_budget" "monthly" {
  count = var.monthly_budget_usd == null ? 0 : 1

  name         = "${var.name_prefix}-monthly"
  budget_type  = "COST"
  limit_amount = format("%.2f", var.monthly_budget_usd)
  limit_unit   = "USD"
  time_unit    = "MONTHLY"

  cost_filter {
    name   = "TagKeyValue"
    values = [format("user:lambdafusion:deployment$%s", var.name_prefix)]
  }

  # 80% of the month's budget spent, and 100% forecast: to alarm_email, when given.
  dynamic "notification" {
    for_each = var.alarm_email == null ? [] : [
      { type = "ACTUAL", threshold = 80 },
      { type = "FORECASTED", threshold = 100 },
    ]
    content {
      comparison_operator        = "GREATER_THAN"
      threshold                  = notification.value.threshold
      threshold_type             = "PERCENTAGE"
      notification_type          = notification.value.type
      subscriber_email_addresses = [var.alarm_email]
    }
  }

  tags = local.tags
}
