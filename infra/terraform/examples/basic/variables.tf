variable "region" {
  description = "AWS region to deploy into."
  type        = string
  default     = "us-east-1"
}

variable "name_prefix" {
  description = "Prefix of every resource name; must be unique per account (IAM role names are global)."
  type        = string
  default     = "lambdafusion"
}

variable "scheduler_zip_path" {
  description = "Path to scheduler-fn's bootstrap.zip; null for the cargo lambda default under the repository's target/ directory."
  type        = string
  default     = null
}

variable "executor_zip_path" {
  description = "Path to executor-fn's bootstrap.zip; null for the cargo lambda default under the repository's target/ directory."
  type        = string
  default     = null
}

variable "data_buckets" {
  description = "Names of buckets holding table data the engine may read (read-only access)."
  type        = list(string)
  default     = []
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete the shuffle/result bucket with its objects."
  type        = bool
  default     = false
}

variable "enable_http_api" {
  description = "Create the API Gateway HTTP API (set false on LocalStack Community, which lacks HTTP APIs)."
  type        = bool
  default     = true
}

variable "enable_function_url" {
  description = "Create an AWS_IAM-authorized function URL for the scheduler (the HTTP entry on LocalStack Community)."
  type        = bool
  default     = false
}

variable "allow_recursive_loop" {
  description = "Let the executor -> scheduler -> executor invocation chain run past Lambda's recursive loop limit (set false only where the API is unavailable, e.g. older LocalStack)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Extra tags for every resource."
  type        = map(string)
  default     = {}
}
