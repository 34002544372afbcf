#!/usr/bin/env python3
"""Helpers of local/localstack/up, run with the venv's python (boto3 comes with moto).

Not a setuptools script. Subcommands:

  setup.py wait URL TIMEOUT_SECS
      waits until URL answers HTTP (any status).
  setup.py resources --endpoint URL --table NAME --bucket NAME [--region R]
      creates, idempotently, on moto_server: the DynamoDB table (pk S hash, sk S range,
      PAY_PER_REQUEST, stream NEW_IMAGE, TTL on expires_at) and the S3 bucket.
  setup.py unpack --package-dir DIR --out DIR
      extracts the `bootstrap` of DIR/scheduler-fn/bootstrap.zip and
      DIR/executor-fn/bootstrap.zip (what scripts/package and `cargo lambda build
      --output-format zip` write) to OUT/<function>/bootstrap, checking that each zip holds
      an executable ELF `bootstrap` for this machine's architecture; prints one line per
      function: `<function> <path>`.
  setup.py config --out FILE --state-dir DIR --bin-dir DIR --terraform DIR --moto-port P
                  --invoke-port P --url-port P --front-port P
                  [--scheduler-command PATH --executor-command PATH]
      writes the lambdafusion-local config; see local/README.md. This script writes only
      the local part (endpoints, credentials, commands, instances, listen addresses,
      timing, the DynamoDB / S3 front, the sweep's local period) to
      <state dir>/emulator.local.json, then runs `lambdafusion-local config`, which takes
      everything the deployment decides from the Terraform module (each function's
      environment, memory, timeout, /tmp, reserved concurrency, async retries and
      destination, URL auth or API timeout; the stream trigger and its filters; the
      sweep's schedule and retry policy). Knobs from the environment: LAMBDAFUSION_TABLE/
      BUCKET/SCHEDULER_FUNCTION/EXECUTOR_FUNCTION (the stack's names of the module's table,
      bucket and functions), SCHEDULER_INSTANCES/EXECUTOR_INSTANCES, FUNCTION_RUST_LOG,
      LAMBDA_TIMING, FRONT_*, SWEEP_EVERY_SECS (the sweep's period in seconds instead of
      the module's schedule expression, rate(1 minute) by default; unset: the module's);
      every TF_VAR_<name> becomes `--var <name>=...` (a variable
      of the module, as for terraform plan); every other LAMBDAFUSION_* variable is an
      environment override (replacing the variable on the functions Terraform sets it
      on, or going to both functions when Terraform sets it on neither).
      The functions run <bin dir>/scheduler-fn and <bin dir>/executor-fn, or the given
      commands (`up` passes the `bootstrap` it extracted from FUNCTION_PACKAGE_DIR's zips).

Only 127.0.0.1 endpoints with the dummy credentials "test"/"test" are ever used.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

REGION = "us-east-1"

# Which resource of the Terraform module each part of the local stack plays.
TABLE_RESOURCE = "aws_dynamodb_table.jobs"
BUCKET_RESOURCE = "aws_s3_bucket.shuffle"
SCHEDULER_RESOURCE = "aws_lambda_function.scheduler"
EXECUTOR_RESOURCE = "aws_lambda_function.executor"
# The caller's variables that name those resources (not environment overrides).
NAME_KNOBS = (
    "LAMBDAFUSION_TABLE",
    "LAMBDAFUSION_BUCKET",
    "LAMBDAFUSION_SCHEDULER_FUNCTION",
    "LAMBDAFUSION_EXECUTOR_FUNCTION",
)


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


# ELF e_machine values (https://refspecs.linuxfoundation.org/elf/gabi4+/ch4.eheader.html)
# of the two architectures Lambda runs, and the names `uname -m` gives them.
ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64"}
PACKAGED_FUNCTIONS = ("scheduler-fn", "executor-fn")


def unpack(package_dir: str, out: str) -> int:
    """Extracts each function's `bootstrap` from its deployment zip, so the local stack runs
    exactly what Lambda would: the zip's only entry, as Lambda's provided.al2023 runtime
    starts it."""
    import platform
    import zipfile

    host = platform.machine()
    for function in PACKAGED_FUNCTIONS:
        zip_path = os.path.join(package_dir, function, "bootstrap.zip")
        if not os.path.isfile(zip_path):
            print(
                f"setup.py: {zip_path} is missing: FUNCTION_PACKAGE_DIR must hold <function>/bootstrap.zip "
                "for scheduler-fn and executor-fn (build them with scripts/package --arch x86_64)",
                file=sys.stderr,
            )
            return 2
        with zipfile.ZipFile(zip_path) as archive:
            names = archive.namelist()
            if "bootstrap" not in names:
                print(f"setup.py: {zip_path} has no `bootstrap` (entries: {names})", file=sys.stderr)
                return 2
            data = archive.read("bootstrap")
        if data[:4] != b"\x7fELF":
            print(f"setup.py: the bootstrap in {zip_path} is not an ELF executable", file=sys.stderr)
            return 2
        machine = ELF_MACHINES.get(int.from_bytes(data[18:20], "little"), "unknown")
        if machine != host:
            print(
                f"setup.py: the bootstrap in {zip_path} is built for {machine}, this machine is {host}: "
                f"package for this machine (scripts/package --arch {'x86_64' if host == 'x86_64' else 'arm64'})",
                file=sys.stderr,
            )
            return 2
        target = os.path.join(out, function, "bootstrap")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = target + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
        print(f"{function} {target}")
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


def positive(var: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"setup.py: {var} must be a positive integer, not {value!r}")
    return int(value)


def iam_mode(value: str) -> str:
    if value not in ("enforce", "off"):
        raise SystemExit(f"setup.py: LOCAL_IAM must be enforce or off, not {value!r}")
    return value


def large_executor(env, executor: str, args: argparse.Namespace, local_env: dict, instances) -> list:
    """The large executor's local entry, where the module has one (TF_VAR_large_executor_memory_mb):
    the executor's command under the module's name for it, the executor's with "-large"."""
    memory = env.get("TF_VAR_large_executor_memory_mb", "").strip()
    if memory in ("", "null"):
        return []
    return [
        {
            "name": f"{executor}-large",
            "command": [args.executor_command or os.path.join(args.bin_dir, "executor-fn")],
            "env": local_env,
            "instances": instances("LARGE_EXECUTOR_INSTANCES", 2),
        }
    ]


def config(args: argparse.Namespace) -> int:
    env = os.environ
    table = env.get("LAMBDAFUSION_TABLE", "lambdafusion")
    bucket = env.get("LAMBDAFUSION_BUCKET", "lambdafusion")
    scheduler = env.get("LAMBDAFUSION_SCHEDULER_FUNCTION", "lambdafusion-scheduler")
    executor = env.get("LAMBDAFUSION_EXECUTOR_FUNCTION", "lambdafusion-executor")
    moto = f"http://127.0.0.1:{args.moto_port}"
    # Clients reach DynamoDB, DynamoDB Streams and S3 through the front, never moto itself.
    front = f"http://127.0.0.1:{args.front_port}"
    # Only what this machine decides; the LAMBDAFUSION_* settings come from Terraform.
    local_env = {
        "AWS_ENDPOINT_URL_DYNAMODB": front,
        "AWS_ENDPOINT_URL_S3": front,
        "AWS_ENDPOINT_URL_GLUE": front,
        "AWS_ENDPOINT_URL_LAMBDA": f"http://127.0.0.1:{args.invoke_port}",
        # No credentials: as Lambda does, the emulator gives each function those of the
        # execution role the module gives it, and the front checks the role's policies.
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "RUST_LOG": env.get("FUNCTION_RUST_LOG", "info"),
    }

    def instances(var: str, default: int) -> int:
        value = env.get(var, str(default))
        if not value.isdigit() or int(value) < 1:
            raise SystemExit(f"setup.py: {var} must be a positive integer, not {value!r}")
        return int(value)

    # The sweep (the module's scheduled rule on the scheduler) keeps the module's schedule
    # expression and retry policy; SWEEP_EVERY_SECS only shortens its period locally, so
    # tests need not wait a minute for lost tasks to be found.
    schedules = []
    sweep_every = env.get("SWEEP_EVERY_SECS", "").strip()
    if sweep_every:
        if not sweep_every.isdigit() or int(sweep_every) < 1:
            raise SystemExit(f"setup.py: SWEEP_EVERY_SECS must be a positive integer (seconds), not {sweep_every!r}")
        schedules.append({"function": scheduler, "every_secs": int(sweep_every)})

    local = {
        "region": REGION,
        # Who a function URL with AWS_IAM auth accepts (the module's
        # enable_function_url = true): the stack's dummy credentials, a second caller for
        # tests of who sees which query, and sessions of two assumed roles (whose session
        # names the callers choose) for tests of admin and writer entries.
        "credentials": [
            {"access_key": "test", "secret_key": "test", "arn": "arn:aws:iam::000000000000:user/test"},
            {"access_key": "other", "secret_key": "other", "arn": "arn:aws:iam::000000000000:user/other"},
            {"access_key": "ops-a", "secret_key": "ops-a", "arn": "arn:aws:sts::000000000000:assumed-role/Ops/a"},
            {"access_key": "analyst-alice", "secret_key": "analyst-alice",
             "arn": "arn:aws:sts::000000000000:assumed-role/Analysts/alice"},
            {"access_key": "analyst-mallory", "secret_key": "analyst-mallory",
             "arn": "arn:aws:sts::000000000000:assumed-role/Analysts/mallory"},
        ],
        # Lambda's own waits: AWS's by default (async retries after about 1 and 2
        # minutes), or LAMBDA_TIMING=fast (200 / 400 ms) as the tests ask for.
        "timing": env.get("LAMBDA_TIMING", "aws"),
        # Whether the functions may do only what their roles allow (LOCAL_IAM=off: all).
        "iam": iam_mode(env.get("LOCAL_IAM", "enforce")),
        # The account's concurrency quota GetAccountSettings reports (lambdafusion doctor):
        # AWS's default 1000, or e.g. 10 as new accounts get.
        "account_concurrency": positive("LAMBDA_ACCOUNT_CONCURRENCY", env.get("LAMBDA_ACCOUNT_CONCURRENCY", "1000")),
        "account": "000000000000",
        "invoke_listen": f"127.0.0.1:{args.invoke_port}",
        "state_dir": args.state_dir,
        "functions": [
            {
                "name": scheduler,
                "command": [args.scheduler_command or os.path.join(args.bin_dir, "scheduler-fn")],
                "env": local_env,
                # Capped by the module's reserved concurrency, if it sets one.
                "instances": instances("SCHEDULER_INSTANCES", 2),
                # Auth and integration timeout come from the module (its HTTP API or
                # function URL); where it listens is local.
                "url": {"listen": f"127.0.0.1:{args.url_port}"},
            },
            {
                "name": executor,
                "command": [args.executor_command or os.path.join(args.bin_dir, "executor-fn")],
                "env": local_env,
                "instances": instances("EXECUTOR_INSTANCES", 4),
            },
        ]
        + large_executor(env, executor, args, local_env, instances),
        # The trigger itself (batching, filters, bisection, retries) comes from the module.
        "stream_mappings": [
            {
                "table": table,
                "function": scheduler,
                "dynamodb_endpoint": front,
                "poll_interval_ms": 250,
            }
        ],
        # The schedule itself (expression, target, retry policy) comes from the module.
        "schedules": schedules,
        "front": front_config(args.front_port, moto),
        # The functions' output also goes to moto's CloudWatch Logs, as Lambda ships it
        # (`lambdafusion logs <query-id>` reads it back).
        "logs_endpoint": moto,
    }
    local_path = os.path.join(args.state_dir, "emulator.local.json")
    with open(local_path, "w", encoding="utf-8") as f:
        json.dump(local, f, indent=2)
        f.write("\n")

    command = [
        os.path.join(args.bin_dir, "lambdafusion-local"),
        "config",
        "--terraform",
        args.terraform,
        "--local",
        local_path,
        "--out",
        args.out,
        "--name",
        f"{TABLE_RESOURCE}={table}",
        "--name",
        f"{BUCKET_RESOURCE}={bucket}",
        "--name",
        f"{SCHEDULER_RESOURCE}={scheduler}",
        "--name",
        f"{EXECUTOR_RESOURCE}={executor}",
    ]
    for key, value in sorted(env.items()):
        if key.startswith("TF_VAR_") and len(key) > len("TF_VAR_"):
            command += ["--var", f"{key[len('TF_VAR_'):]}={value}"]
        # Test knobs such as LAMBDAFUSION_FAST_PATH=false or LAMBDAFUSION_TEST_CRASH_FILE.
        elif key.startswith("LAMBDAFUSION_") and key not in NAME_KNOBS:
            command += ["--env", f"{key}={value}"]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode != 0 and "unrecognized subcommand" in done.stderr:
        print(
            "setup.py: this lambdafusion-local has no `config` subcommand: rebuild it "
            "(cargo build -p lambdafusion-local)",
            file=sys.stderr,
        )
    return done.returncode


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
    u = sub.add_parser("unpack")
    u.add_argument("--package-dir", required=True)
    u.add_argument("--out", required=True)
    c = sub.add_parser("config")
    for name in (
        "--out",
        "--state-dir",
        "--bin-dir",
        "--terraform",
        "--moto-port",
        "--invoke-port",
        "--url-port",
        "--front-port",
    ):
        c.add_argument(name, required=True)
    c.add_argument("--scheduler-command")
    c.add_argument("--executor-command")
    args = parser.parse_args()
    if args.cmd == "wait":
        return wait(args.url, args.timeout)
    if args.cmd == "resources":
        return resources(args.endpoint, args.table, args.bucket, args.region)
    if args.cmd == "unpack":
        return unpack(args.package_dir, args.out)
    return config(args)


if __name__ == "__main__":
    sys.exit(main())
