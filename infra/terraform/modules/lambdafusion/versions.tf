terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 5.67 added aws_lambda_function_recursion_config, 5.70 added tags on event-source
      # mappings; nothing used here changed in 6.x.
      version = ">= 5.70, < 7.0"
    }
  }
}
