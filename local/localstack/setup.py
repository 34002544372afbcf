#!/usr/bin/env python3
"""Helpers of local/localstack/up, run with the venv's python (boto3 comes with moto).

Not a setuptools script. Subcommands:

  setup.py wait URL TIMEOUT_SECS
      waits until URL answers HTTP (any status).
  setup.py resources --endpoint URL --table NAME --bucket NAME [--region R]
      creates, idempotently, on moto_server: the DynamoDB table (pk S hash, sk S range,
      PAY_PER_REQUEST, stream NEW_IMAGE, TTL on expires_at) and the S3 bucket.
  setup.py config --out FILE --state-dir DIR --bin-dir DIR --moto-port P
                  --invoke-port P --url-port P --front-port P
      writes the lambdafusion-local config (two functions, one stream trigger, the
      DynamoDB / S3 front before moto); see local/README.md. Reads TABLE/BUCKET/
      instances/RUST_LOG/FRONT_* knobs from the environment and passes every
      LAMBDAFUSION_* variable of the caller through to both functions.

Only 127.0.0.1 endpoints with the dummy credentials "test"/"test" are ever used.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

REGION = "us-east-1"


def wait(url: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return 0
        except urllib.error.HTTPError:
            return 0  # it answered
        except OSError:
            if time.monotonic() >= deadline:
                print(f"setup.py: {url} did not answer within {timeout:.0f}s", file=sys.stderr)
                return 1
            time.sleep(0.1)


def _client(service: str, endpoint: str, region: str):
    import boto3  # installed with moto[server]

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def resources(endpoint: str, table: str, bucket: str, region: str) -> int:
    if not endpoint.startswith(("http://127.0.0.1:", "http://localhost:")):
        print(f"setup.py: refusing a non-local endpoint {endpoint}", file=sys.stderr)
        return 2
    ddb = _client("dynamodb", endpoint, region)
    existing = ddb.list_tables().get("TableNames", [])
    if table in existing:
        desc = ddb.describe_table(TableName=table)["Table"]
        spec = desc.get("StreamSpecification") or {}
        if not spec.get("StreamEnabled"):
            ddb.update_table(
                TableName=table,
                StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
            )
        print(f"table {table}: exists")
    else:
        ddb.create_table(
            TableName=table,
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
        )
        ddb.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
        print(f"table {table}: created")
    ttl = ddb.describe_time_to_live(TableName=table).get("TimeToLiveDescription", {})
    if ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        ddb.update_time_to_live(
            TableName=table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
        )

    s3 = _client("s3", endpoint, region)
    names = [b["Name"] for b in s3.list_buckets().get("Buckets", [])]
    if bucket in names:
        print(f"bucket {bucket}: exists")
    else:
        if region == "us-east-1":
            s3.create_bucket(Bucket=bucket)
        else:
            s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
        print(f"bucket {bucket}: created")
    return 0


def front_config(front_port: str, moto: str) -> dict:
    """The emulator's DynamoDB / S3 front, between every client and moto (local/README.md,
    "The DynamoDB / S3 front"). FRONT_LATENCY and FRONT_THROUGHPUT are "aws" (the
    default), "off", or the JSON object the emulator's config takes."""

    def knob(var: str):
        value = os.environ.get(var, "aws").strip()
        if value.startswith("{"):
            return json.loads(value)
        if value not in ("aws", "off"):
            raise SystemExit(f"setup.py: {var} must be aws, off or a JSON object, not {value!r}")
        return value

    return {
        "listen": f"127.0.0.1:{front_port}",
        "upstream": moto,
        "latency": knob("FRONT_LATENCY"),
        "throughput": knob("FRONT_THROUGHPUT"),
    }


def config(args: argparse.Namespace) -> int:
    env = os.environ
    table = env.get("LAMBDAFUSION_TABLE", "lambdafusion")
    bucket = env.get("LAMBDAFUSION_BUCKET", "lambdafusion")
    scheduler = env.get("LAMBDAFUSION_SCHEDULER_FUNCTION", "lambdafusion-scheduler")
    executor = env.get("LAMBDAFUSION_EXECUTOR_FUNCTION", "lambdafusion-executor")
    moto = f"http://127.0.0.1:{args.moto_port}"
    # Clients reach DynamoDB, DynamoDB Streams and S3 through the front, never moto itself.
    front = f"http://127.0.0.1:{args.front_port}"
    function_env = {
        "LAMBDAFUSION_TABLE": table,
        "LAMBDAFUSION_BUCKET": bucket,
        "LAMBDAFUSION_PREFIX": "lambdafusion",
        "LAMBDAFUSION_EXECUTOR_FUNCTION": executor,
        "LAMBDAFUSION_SCHEDULER_FUNCTION": scheduler,
        "AWS_ENDPOINT_URL_DYNAMODB": front,
        "AWS_ENDPOINT_URL_S3": front,
        "AWS_ENDPOINT_URL_LAMBDA": f"http://127.0.0.1:{args.invoke_port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "RUST_LOG": env.get("FUNCTION_RUST_LOG", "info"),
    }
    # Pass-through, so tests can set e.g. LAMBDAFUSION_FAST_PATH=false.
    function_env.update({k: v for k, v in env.items() if k.startswith("LAMBDAFUSION_")})

    def instances(var: str, default: int) -> int:
        value = env.get(var, str(default))
        if not value.isdigit() or int(value) < 1:
            raise SystemExit(f"setup.py: {var} must be a positive integer, not {value!r}")
        return int(value)

    doc = {
        "region": REGION,
        # Lambda's own waits: "fast" (async retries after 200 / 400 ms) for tests, or
        # LAMBDA_TIMING=aws for AWS's (about 1 and 2 minutes).
        "timing": env.get("LAMBDA_TIMING", "fast"),
        "account": "000000000000",
        "invoke_listen": f"127.0.0.1:{args.invoke_port}",
        "state_dir": args.state_dir,
        "functions": [
            {
                "name": scheduler,
                "command": [os.path.join(args.bin_dir, "scheduler-fn")],
                "env": function_env,
                "instances": instances("SCHEDULER_INSTANCES", 2),
                "timeout_secs": 60,
                "memory_mb": 1024,
                "max_retry_attempts": 2,
                "max_event_age_secs": 21600,
                "on_failure": None,
                # As behind the deployment's API Gateway HTTP API: 503 after 30 s.
                "url": {"listen": f"127.0.0.1:{args.url_port}", "integration_timeout_secs": 30},
            },
            {
                "name": executor,
                "command": [os.path.join(args.bin_dir, "executor-fn")],
                "env": function_env,
                "instances": instances("EXECUTOR_INSTANCES", 4),
                "timeout_secs": 120,
                # As infra/terraform's defaults; both limits are enforced by the emulator.
                "memory_mb": 3008,
                "ephemeral_storage_mb": 2048,
                "max_retry_attempts": 0,
                "max_event_age_secs": 1800,
                "on_failure": scheduler,
                "url_listen": None,
            },
        ],
        # Mirrors aws_lambda_event_source_mapping.stream in infra/terraform (filters,
        # bisection, partial batch responses), with fewer retries.
        "stream_mappings": [
            {
                "table": table,
                "function": scheduler,
                "dynamodb_endpoint": front,
                "batch_size": 100,
                "poll_interval_ms": 250,
                "maximum_retry_attempts": 3,
                "bisect_batch_on_function_error": True,
                "starting_position": "LATEST",
                "filters": [
                    {"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "COUNT#"}]}, "remaining": {"N": ["0"]}}}},
                    {"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "TASK#"}]}, "state": {"S": ["FAILED"]}}}},
                ],
            }
        ],
    }
    doc["front"] = front_config(args.front_port, moto)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait")
    w.add_argument("url")
    w.add_argument("timeout", type=float)
    r = sub.add_parser("resources")
    r.add_argument("--endpoint", required=True)
    r.add_argument("--table", required=True)
    r.add_argument("--bucket", required=True)
    r.add_argument("--region", default=REGION)
    c = sub.add_parser("config")
    for name in ("--out", "--state-dir", "--bin-dir", "--moto-port", "--invoke-port", "--url-port", "--front-port"):
        c.add_argument(name, required=True)
    args = parser.parse_args()
    if args.cmd == "wait":
        return wait(args.url, args.timeout)
    if args.cmd == "resources":
        return resources(args.endpoint, args.table, args.bucket, args.region)
    return config(args)


if __name__ == "__main__":
    sys.exit(main())
