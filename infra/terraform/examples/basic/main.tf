# A complete lambdafusion deployment with the module's defaults: build the two functions
# (see ../../README.md), then `terraform init && terraform apply` here.

module "lambdafusion" {
  source = "../../modules/lambdafusion"

  name_prefix = var.name_prefix

  # cargo lambda build --release --arm64 --output-format zip -p scheduler-fn -p executor-fn
  scheduler_zip_path = coalesce(var.scheduler_zip_path, "${path.module}/../../../../target/lambda/scheduler-fn/bootstrap.zip")
  executor_zip_path  = coalesce(var.executor_zip_path, "${path.module}/../../../../target/lambda/executor-fn/bootstrap.zip")

  data_buckets  = var.data_buckets
  force_destroy = var.force_destroy

  enable_http_api      = var.enable_http_api
  enable_function_url  = var.enable_function_url
  allow_recursive_loop = var.allow_recursive_loop

  tags = merge({ Project = "lambdafusion" }, var.tags)
}
