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

variable "architecture" {
  description = "null (default): what scripts/package built, from the package.json beside the zips; or arm64 / x86_64, which must agree with it."
  type        = string
  default     = null
}

variable "code_upload" {
  description = "auto (default: through S3 for a zip of 49 MiB or more), direct or s3."
  type        = string
  default     = "auto"
}

variable "data_buckets" {
  description = "Names of buckets holding table data the engine may read (read-only access)."
  type        = list(string)
  default     = []
}

variable "write_locations" {
  description = "S3 locations (bucket or bucket/prefix) COPY ... TO may write into; see the module's variable."
  type        = list(string)
  default     = []
}

variable "data_kms_key_arns" {
  description = "Customer-managed KMS keys of the data buckets' SSE-KMS objects (kms:Decrypt on exactly these)."
  type        = list(string)
  default     = []
}

variable "glue_databases" {
  description = "Glue Data Catalog databases whose tables queries may read as glue.<database>.<table> (read-only access)."
  type        = list(string)
  default     = []
}

variable "glue_default_database" {
  description = "One of glue_databases whose tables are also found unqualified; null: none."
  type        = string
  default     = null
}

variable "admin_principals" {
  description = "Principals that may read and cancel every caller's queries (see the module)."
  type        = list(string)
  default     = []
}

variable "catalog_writers" {
  description = "Principals that may CREATE and DROP tables; null: every authorized caller, []: nobody."
  type        = list(string)
  default     = null
}

variable "max_presign_seconds" {
  description = "Longest lifetime of a presigned result URL, in seconds."
  type        = number
  default     = 900
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

variable "public_console_routes" {
  description = "Open GET /, /console.js, /console.css and /health of the HTTP API to unsigned requests (for the console with JWT authorization)."
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

variable "scheduler_reserved_concurrency" {
  description = "Instances kept for the scheduler (API, stream, sweep), or null; see docs/deploy.md, First day."
  type        = number
  default     = null
}

variable "executor_reserved_concurrency" {
  description = "Most tasks running at once, or null (the account's unreserved pool)."
  type        = number
  default     = null
}

variable "large_executor_memory_mb" {
  description = "Memory of a second, larger executor for the stages that finish sooner there at about the same cost (e.g. 10240), or null for one size; see docs/deploy.md, Two executor sizes."
  type        = number
  default     = null
}

variable "max_tasks_per_stage" {
  description = "Most tasks per stage (null: the code's 1000); at most executor_reserved_concurrency when that is set."
  type        = number
  default     = null
}

variable "max_scan_bytes_per_query" {
  description = "Most bytes of table files one query may read, or null for no limit."
  type        = number
  default     = null
}

variable "max_query_cost_usd" {
  description = "Most a query may cost by the engine's estimate, in US dollars, or null for no limit."
  type        = number
  default     = null
}

variable "alarm_email" {
  description = "Address the alarms notify (through an SNS topic the module creates), or null."
  type        = string
  default     = null
}

variable "alarm_actions" {
  description = "Existing SNS topic ARNs the alarms notify as well."
  type        = list(string)
  default     = []
}

variable "monthly_budget_usd" {
  description = "A monthly AWS Budgets cost budget for the deployment (USD), or null."
  type        = number
  default     = null
}
