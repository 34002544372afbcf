terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # The major version CI plans with (5.100.0, recorded in .terraform.lock.hcl).
      version = "~> 5.100"
    }
  }
}

provider "aws" {
  region = var.region
}
