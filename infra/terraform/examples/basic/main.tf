# A complete lambdafusion deployment with the module's defaults: build the two functions
# (see ../../README.md), then `terraform init && terraform apply` here.

module "lambdafusion" {
  source = "../../modules/lambdafusion"

  name_prefix = var.name_prefix

  # scripts/package writes the zips and the package.json that says what they were built
  # for (--arch arm64 by default); the module deploys that architecture.
  scheduler_zip_path = coalesce(var.scheduler_zip_path, "${path.module}/../../../../target/lambda/scheduler-fn/bootstrap.zip")
  executor_zip_path  = coalesce(var.executor_zip_path, "${path.module}/../../../../target/lambda/executor-fn/bootstrap.zip")
  architecture       = var.architecture
  code_upload        = var.code_upload

  data_buckets      = var.data_buckets
  write_locations   = var.write_locations
  data_kms_key_arns = var.data_kms_key_arns
  force_destroy     = var.force_destroy

  glue_databases        = var.glue_databases
  glue_default_database = var.glue_default_database

  admin_principals    = var.admin_principals
  catalog_writers     = var.catalog_writers
  max_presign_seconds = var.max_presign_seconds

  scheduler_reserved_concurrency = var.scheduler_reserved_concurrency
  executor_reserved_concurrency  = var.executor_reserved_concurrency
  large_executor_memory_mb       = var.large_executor_memory_mb
  max_tasks_per_stage            = var.max_tasks_per_stage
  max_scan_bytes_per_query       = var.max_scan_bytes_per_query
  max_query_cost_usd             = var.max_query_cost_usd

  alarm_email        = var.alarm_email
  alarm_actions      = var.alarm_actions
  monthly_budget_usd = var.monthly_budget_usd

  enable_http_api       = var.enable_http_api
  enable_function_url   = var.enable_function_url
  public_console_routes = var.public_console_routes
  allow_recursive_loop  = var.allow_recursive_loop

  tags = merge({ Project = "lambdafusion" }, var.tags)
}
