terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 5.67 added aws_lambda_function_recursion_config, 5.70 added tags on event-source
      # mappings. CI validates and plans the module with 5.100.0 (the example's lock file,
      # tests/tests/end_to_end/terraform_plan.rs); 6.x is a major version nobody has planned it with.
      version = ">= 5.70, < 6.0"
    }
  }
}
