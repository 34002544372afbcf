output "api_url" {
  description = "Base URL of the HTTP API (pass it to `lambdafusion query --endpoint`); null when enable_http_api is false."
  value       = one(aws_apigatewayv2_stage.default[*].invoke_url)
}

output "api_id" {
  description = "ID of the HTTP API (for execute-api:Invoke policies of callers: arn:aws:execute-api:<region>:<account>:<api_id>/*); null when enable_http_api is false."
  value       = one(aws_apigatewayv2_api.http[*].id)
}

output "caller_policy_json" {
  description = "IAM policy (JSON) to attach to the users or roles that query: execute-api:Invoke on the HTTP API (with AWS_IAM authorization) and, with the function URL, both lambda:InvokeFunctionUrl and lambda:InvokeFunction (the latter only through the URL), which new function URLs require since October 2025. null when neither entry uses IAM (JWT without a function URL)."
  value       = local.caller_uses_api || var.enable_function_url ? data.aws_iam_policy_document.caller.json : null
}

output "function_url" {
  description = "Function URL of the scheduler (AWS_IAM auth); null unless enable_function_url is true."
  value       = one(aws_lambda_function_url.scheduler[*].function_url)
}

output "table_name" {
  description = "Name of the DynamoDB job table (LAMBDAFUSION_TABLE)."
  value       = aws_dynamodb_table.jobs.name
}

output "table_arn" {
  description = "ARN of the DynamoDB job table."
  value       = aws_dynamodb_table.jobs.arn
}

output "table_stream_arn" {
  description = "ARN of the job table's stream that triggers the scheduler."
  value       = aws_dynamodb_table.jobs.stream_arn
}

output "bucket_name" {
  description = "Name of the shuffle/result bucket (LAMBDAFUSION_BUCKET)."
  value       = aws_s3_bucket.shuffle.id
}

output "bucket_arn" {
  description = "ARN of the shuffle/result bucket."
  value       = aws_s3_bucket.shuffle.arn
}

output "prefix" {
  description = "Key prefix inside the bucket (LAMBDAFUSION_PREFIX)."
  value       = var.prefix
}

output "scheduler_function_name" {
  description = "Name of the scheduler function."
  value       = aws_lambda_function.scheduler.function_name
}

output "scheduler_function_arn" {
  description = "ARN of the scheduler function."
  value       = aws_lambda_function.scheduler.arn
}

output "executor_function_name" {
  description = "Name of the executor function."
  value       = aws_lambda_function.executor.function_name
}

output "large_executor_function_name" {
  description = "Name of the large executor function; null without large_executor_memory_mb."
  value       = local.has_large_executor ? local.large_executor_function_name : null
}

output "executor_function_arn" {
  description = "ARN of the executor function."
  value       = aws_lambda_function.executor.arn
}

output "scheduler_role_arn" {
  description = "ARN of the scheduler's execution role."
  value       = aws_iam_role.scheduler.arn
}

output "executor_role_arn" {
  description = "ARN of the executor's execution role."
  value       = aws_iam_role.executor.arn
}

output "poison_queue_url" {
  description = "URL of the SQS queue that receives poison stream records and failed scheduler async events (watch its depth)."
  value       = aws_sqs_queue.poison.url
}

output "log_group_names" {
  description = "CloudWatch log groups of the scheduler, the executor and (if created) the API access log."
  value = {
    scheduler = aws_cloudwatch_log_group.scheduler.name
    executor  = aws_cloudwatch_log_group.executor.name
    api       = one(aws_cloudwatch_log_group.api[*].name)
  }
}
