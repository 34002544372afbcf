# HTTP entry: an API Gateway HTTP API (payload format 2.0) whose one route, ANY /v1/{proxy+},
# goes to the scheduler. IAM (SigV4) authorization by default, JWT as an option.

locals {
  api_count = var.enable_http_api ? 1 : 0
  jwt_count = var.enable_http_api && var.authorization_type == "JWT" ? 1 : 0
}

resource "aws_apigatewayv2_api" "http" {
  count         = local.api_count
  name          = "${var.name_prefix}-api"
  description   = "lambdafusion HTTP API (scheduler-fn)"
  protocol_type = "HTTP"
  tags          = var.tags
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

resource "aws_apigatewayv2_route" "v1" {
  count              = local.api_count
  api_id             = aws_apigatewayv2_api.http[0].id
  route_key          = "ANY /v1/{proxy+}"
  target             = "integrations/${aws_apigatewayv2_integration.scheduler[0].id}"
  authorization_type = var.authorization_type
  authorizer_id      = one(aws_apigatewayv2_authorizer.jwt[*].id) # null unless JWT

  lifecycle {
    precondition {
      condition     = var.authorization_type != "JWT" || (var.jwt_issuer != null && length(var.jwt_audience) > 0)
      error_message = "authorization_type = \"JWT\" needs jwt_issuer and at least one jwt_audience."
    }
  }
}

resource "aws_cloudwatch_log_group" "api" {
  #checkov:skip=CKV_AWS_158:Logs are encrypted with CloudWatch's own key; a customer-managed KMS key costs $1/month plus requests and buys nothing for access logs without secrets.
  #checkov:skip=CKV_AWS_338:Retention is a variable (default 30 days); a year of access logs is cost without use here.
  count             = local.api_count
  name              = "/aws/apigateway/${var.name_prefix}-api"
  retention_in_days = var.log_retention_days
  tags              = var.tags
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

  tags = var.tags
}

resource "aws_lambda_permission" "api" {
  count         = local.api_count
  statement_id  = "AllowHttpApi"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.scheduler.function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.http[0].execution_arn}/*/*"
}

# Optional function URL (LocalStack Community has no HTTP APIs). Never without auth.
resource "aws_lambda_function_url" "scheduler" {
  count              = var.enable_function_url ? 1 : 0
  function_name      = aws_lambda_function.scheduler.function_name
  authorization_type = "AWS_IAM"
}
