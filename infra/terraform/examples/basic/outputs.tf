output "api_url" {
  description = "Endpoint for `lambdafusion query --endpoint <api_url> \"SELECT 1\"`."
  value       = module.lambdafusion.api_url
}

output "api_id" {
  description = "HTTP API id, for callers' execute-api:Invoke permission (arn:aws:execute-api:<region>:<account>:<api_id>/*)."
  value       = module.lambdafusion.api_id
}

output "caller_policy_json" {
  description = "IAM policy to attach to whoever queries: execute-api:Invoke on the API, and for the function URL both lambda:InvokeFunctionUrl and lambda:InvokeFunction (required since October 2025)."
  value       = module.lambdafusion.caller_policy_json
}

output "function_url" {
  description = "Scheduler function URL, when enable_function_url is true."
  value       = module.lambdafusion.function_url
}

output "table_name" {
  description = "DynamoDB job table."
  value       = module.lambdafusion.table_name
}

output "bucket_name" {
  description = "Shuffle/result bucket (empty it before `terraform destroy`, or set force_destroy)."
  value       = module.lambdafusion.bucket_name
}

output "scheduler_function_name" {
  description = "Scheduler function."
  value       = module.lambdafusion.scheduler_function_name
}

output "executor_function_name" {
  description = "Executor function."
  value       = module.lambdafusion.executor_function_name
}

output "poison_queue_url" {
  description = "Queue of records the scheduler could not process."
  value       = module.lambdafusion.poison_queue_url
}
