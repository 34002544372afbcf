# The bucket for shuffle data, results and stage plans too large for an item. Everything the
# engine writes lives under "<prefix>/"; per-job data under "<prefix>/jobs/".

resource "aws_s3_bucket" "shuffle" {
  #checkov:skip=CKV_AWS_18:Server access logs would log every shuffle PUT and ranged GET (more log bytes than data for small queries) into yet another bucket; CloudTrail data events are the opt-in alternative.
  #checkov:skip=CKV_AWS_144:Cross-region replication of intermediate data that expires within days protects nothing; source tables live in the data buckets.
  #checkov:skip=CKV_AWS_145:SSE-S3 (AES-256) is on; SSE-KMS would add a KMS request per shuffle object read and written, the engine's hottest path.
  #checkov:skip=CKV2_AWS_62:No consumer of bucket events: completion is signalled through DynamoDB, not S3 notifications.
  #checkov:skip=CKV_AWS_21:Versioning is deliberately off. Every object is written once under a key unique to its task attempt and never overwritten, so versions would protect nothing, while a versioned bucket keeps deleted shuffle data as billable noncurrent versions and makes the expiry rule leave delete markers behind.
  bucket        = var.bucket_name
  bucket_prefix = var.bucket_name == null ? "${var.name_prefix}-" : null
  force_destroy = var.force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_public_access_block" "shuffle" {
  bucket                  = aws_s3_bucket.shuffle.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "shuffle" {
  bucket = aws_s3_bucket.shuffle.id

  rule {
    object_ownership = "BucketOwnerEnforced" # ACLs off
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "shuffle" {
  bucket = aws_s3_bucket.shuffle.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

data "aws_iam_policy_document" "shuffle_bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.shuffle.arn,
      "${aws_s3_bucket.shuffle.arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "shuffle" {
  bucket = aws_s3_bucket.shuffle.id
  policy = data.aws_iam_policy_document.shuffle_bucket.json

  # S3 rejects a policy while the public access block is being applied.
  depends_on = [aws_s3_bucket_public_access_block.shuffle]
}

resource "aws_s3_bucket_lifecycle_configuration" "shuffle" {
  bucket = aws_s3_bucket.shuffle.id

  # Shuffle objects and results (the final stage's objects) of every job. Results are kept
  # as long as the API may serve them; the job records' TTL defaults to the same number of
  # days.
  rule {
    id     = "expire-jobs"
    status = "Enabled"

    filter {
      prefix = "${var.prefix}/jobs/"
    }

    expiration {
      days = var.results_retention_days
    }
  }

  # A task that dies mid-upload leaves parts that are billed but invisible (so does an
  # apply interrupted while uploading a function zip, code_upload). For the whole bucket:
  # `prefix = ""`, not an empty `filter {}` nor no filter, which draw "Invalid Attribute
  # Combination ... This will be an error in a future version of the provider" from AWS
  # provider 5.90 to 5.98 (hashicorp/terraform-provider-aws issues 41710, 41725, 42714);
  # an empty prefix is valid without a warning in every version this module allows, and
  # the provider's acceptance tests hold it to an empty plan (filterWithEmptyPrefix).
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    filter {
      prefix = ""
    }

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}
