# HTTP entry: an API Gateway HTTP API (payload format 2.0) whose routes all go to the
# scheduler, which serves the whole API router (api/src): the API under /v1/, liveness at
# /health and the web console at /, /console.js and /console.css. IAM (SigV4) authorization by
# default, JWT as an option. A function URL, when enabled, reaches every path without routes.

locals {
  api_count = var.enable_http_api ? 1 : 0
  jwt_count = var.enable_http_api && var.authorization_type == "JWT" ? 1 : 0

  # Every path the router serves needs a route: an HTTP API answers 404 {"message":"Not
  # Found"} for a request no route matches, before any Lambda runs. `ANY /v1/{proxy+}` is
  # greedy (it takes /v1/queries/{id}/result, /v1/openapi.json, ...) but does not match
  # /health or /, which are routes of their own. tests/tests/end_to_end/terraform_contract.rs checks
  # these keys against the router's OpenAPI document, path by path and method by method.
  # The value: whether the route is one of the console's data-free ones (the page, its
  # script and style, liveness) that public_console_routes may open.
  api_routes = {
    "ANY /v1/{proxy+}" = false
    "GET /health"      = true
    "GET /"            = true
    "GET /console.js"  = true
    "GET /console.css" = true
  }
}

resource "aws_apigatewayv2_api" "http" {
  count         = local.api_count
  name          = "${var.name_prefix}-api"
  description   = "lambdafusion HTTP API (scheduler-fn)"
  protocol_type = "HTTP"
  tags          = local.tags
}

resource "aws_apigatewayv2_integration" "scheduler" {
  count                  = local.api_count
  api_id                 = aws_apigatewayv2_api.http[0].id
  integration_type       = "AWS_PROXY"
  integration_uri        = aws_lambda_function.scheduler.invoke_arn
  integration_method     = "POST"
  payload_format_version = "2.0"
  timeout_milliseconds   = 30000 # the HTTP API maximum
}

resource "aws_apigatewayv2_authorizer" "jwt" {
  count            = local.jwt_count
  api_id           = aws_apigatewayv2_api.http[0].id
  name             = "${var.name_prefix}-jwt"
  authorizer_type  = "JWT"
  identity_sources = ["$request.header.Authorization"]

  jwt_configuration {
    issuer   = var.jwt_issuer
    audience = var.jwt_audience
  }
}

resource "aws_apigatewayv2_route" "api" {
  for_each  = { for key, open in local.api_routes : key => open if var.enable_http_api }
  api_id    = aws_apigatewayv2_api.http[0].id
  route_key = each.key
  target    = "integrations/${aws_apigatewayv2_integration.scheduler[0].id}"

  # The console's page, script and style and /health carry no data, so they may be opened to
  # unsigned browsers (public_console_routes); everything under /v1/ always needs the API's
  # authorization.
  authorization_type = each.value && var.public_console_routes ? "NONE" : var.authorization_type
  authorizer_id      = each.value && var.public_console_routes ? null : one(aws_apigatewayv2_authorizer.jwt[*].id) # null unless JWT

  lifecycle {
    precondition {
      condition     = var.authorization_type != "JWT" || (var.jwt_issuer != null && length(var.jwt_audience) > 0)
      error_message = "authorization_type = \"JWT\" needs jwt_issuer and at least one jwt_audience."
    }
  }
}

# The single route of earlier versions of this module is the first of the map now.
moved {
  from = aws_apigatewayv2_route.v1[0]
  to   = aws_apigatewayv2_route.api["ANY /v1/{proxy+}"]
}

resource "aws_cloudwatch_log_group" "api" {
  #checkov:skip=CKV_AWS_158:Logs are encrypted with CloudWatch's own key; a customer-managed KMS key costs $1/month plus requests and buys nothing for access logs without secrets.
  #checkov:skip=CKV_AWS_338:Retention is a variable (default 30 days); a year of access logs is cost without use here.
  count             = local.api_count
  name              = "/aws/apigateway/${var.name_prefix}-api"
  retention_in_days = var.log_retention_days
  tags              = local.tags
}

resource "aws_apigatewayv2_stage" "default" {
  count       = local.api_count
  api_id      = aws_apigatewayv2_api.http[0].id
  name        = "$default"
  auto_deploy = true

  default_route_settings {
    throttling_burst_limit = var.api_throttling_burst_limit
    throttling_rate_limit  = var.api_throttling_rate_limit
  }

  access_log_settings {
    destination_arn = aws_cloudwatch_log_group.api[0].arn
    format = jsonencode({
      requestId          = "$context.requestId"
      ip                 = "$context.identity.sourceIp"
      caller             = "$context.identity.caller"
      user               = "$context.identity.user"
      requestTime        = "$context.requestTime"
      httpMethod         = "$context.httpMethod"
      routeKey           = "$context.routeKey"
      path               = "$context.path"
      status             = "$context.status"
      protocol           = "$context.protocol"
      responseLength     = "$context.responseLength"
      integrationStatus  = "$context.integrationStatus"
      integrationLatency = "$context.integrationLatency"
      integrationError   = "$context.integrationErrorMessage"
      authorizerError    = "$context.authorizer.error"
    })
  }

  tags = local.tags
}

resource "aws_lambda_permission" "api" {
  count         = local.api_count
  statement_id  = "AllowHttpApi"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.scheduler.function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.http[0].execution_arn}/*/*"

  # No request reaches the scheduler before it may read its table.
  depends_on = [aws_iam_role_policy.scheduler]
}

# Optional function URL (LocalStack Community has no HTTP APIs). Never without auth. It
# reaches every path of the router (no routes). Callers in this account need no resource
# policy: their own identity policy decides (output caller_policy_json).
resource "aws_lambda_function_url" "scheduler" {
  count              = var.enable_function_url ? 1 : 0
  function_name      = aws_lambda_function.scheduler.function_name
  authorization_type = "AWS_IAM"

  # No request reaches the scheduler before it may read its table.
  depends_on = [aws_iam_role_policy.scheduler]
}

# ---------------------------------------------------------------------------------------
# What a caller needs: the identity policy to attach to the users or roles that query
# (output caller_policy_json).
# ---------------------------------------------------------------------------------------

locals {
  caller_uses_api = var.enable_http_api && var.authorization_type == "AWS_IAM"
}

data "aws_iam_policy_document" "caller" {
  # The HTTP API with AWS_IAM authorization: every route, every method.
  dynamic "statement" {
    for_each = local.caller_uses_api ? [1] : []
    content {
      sid       = "InvokeHttpApi"
      actions   = ["execute-api:Invoke"]
      resources = ["${aws_apigatewayv2_api.http[0].execution_arn}/*"]
    }
  }

  # The function URL. Since October 2025 a new function URL with AWS_IAM auth needs both
  # lambda:InvokeFunctionUrl and lambda:InvokeFunction
  # (https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html). InvokeFunction is limited
  # to requests that come through the URL (condition key lambda:InvokedViaFunctionUrl):
  # a direct Invoke could hand the scheduler a forged HTTP event naming any principal.
  dynamic "statement" {
    for_each = var.enable_function_url ? [1] : []
    content {
      sid       = "InvokeFunctionUrl"
      actions   = ["lambda:InvokeFunctionUrl"]
      resources = [aws_lambda_function.scheduler.arn]

      condition {
        test     = "StringEquals"
        variable = "lambda:FunctionUrlAuthType"
        values   = ["AWS_IAM"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.enable_function_url ? [1] : []
    content {
      sid       = "InvokeFunctionThroughUrl"
      actions   = ["lambda:InvokeFunction"]
      resources = [aws_lambda_function.scheduler.arn]

      condition {
        test     = "Bool"
        variable = "lambda:InvokedViaFunctionUrl"
        values   = ["true"]
      }
    }
  }
}
