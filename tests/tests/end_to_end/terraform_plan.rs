//! Plans the Terraform example (`infra/terraform/examples/basic`, which calls the module)
//! with the real hashicorp/aws provider, offline: fake credentials, every account and
//! region check skipped, no AWS call. `terraform init -lockfile=readonly` holds the
//! committed `.terraform.lock.hcl` to the provider actually used, `terraform validate`
//! checks the module against the provider's schema, and each plan runs the module's
//! validations and preconditions, which the static contract test cannot.
//!
//! The provider comes from a local plugin directory (`TF_PLUGIN_DIR`, or
//! `/opt/tf-plugins`, or `~/.terraform.d/plugins`), so CI needs no registry. Without one,
//! `terraform init` downloads the locked version. Without `terraform` on the PATH the tests
//! fail, unless `LAMBDAFUSION_SKIP_TERRAFORM_PLAN=1` says to skip them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};

const SKIP: &str = "LAMBDAFUSION_SKIP_TERRAFORM_PLAN";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `terraform` on the PATH; `None` only when the caller said to skip.
fn terraform() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("terraform"))
            .find(|p| p.is_file())
    });
    match found {
        Some(t) => Some(t),
        None if std::env::var(SKIP).as_deref() == Ok("1") => {
            eprintln!("skipped: terraform is not on the PATH and {SKIP}=1");
            None
        }
        None => panic!(
            "terraform is not on the PATH: install it \
             (https://developer.hashicorp.com/terraform/install), or set {SKIP}=1 to skip \
             the offline plan"
        ),
    }
}

/// A directory holding `registry.terraform.io/hashicorp/aws`.
fn plugin_dir() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("TF_PLUGIN_DIR") {
        candidates.push(d.into());
    }
    candidates.push("/opt/tf-plugins".into());
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".terraform.d/plugins"));
    }
    candidates
        .into_iter()
        .find(|d| d.join("registry.terraform.io/hashicorp/aws").is_dir())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".terraform" || name.to_string_lossy().ends_with(".tfstate") {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(&name));
        } else {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

/// A copy of `infra/terraform`, initialized, and a package directory for the zips.
struct Example {
    terraform: PathBuf,
    _dir: tempfile::TempDir,
    root: PathBuf,
    package: PathBuf,
}

/// Offline: fake credentials, and nothing that would call STS, IMDS or the region list.
const OFFLINE_PROVIDER: &str = r#"provider "aws" {
  region                      = "us-east-1"
  access_key                  = "offline"
  secret_key                  = "offline"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}
"#;

impl Example {
    fn new() -> Option<Example> {
        let terraform = terraform()?;
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&repo().join("infra/terraform"), dir.path());
        let root = dir.path().join("examples/basic");
        std::fs::write(root.join("offline_override.tf"), OFFLINE_PROVIDER).unwrap();
        let package = dir.path().join("package");
        let example = Example {
            terraform,
            root,
            package,
            _dir: dir,
        };
        let mut init = vec![
            "init".to_string(),
            "-input=false".into(),
            "-backend=false".into(),
            "-lockfile=readonly".into(),
        ];
        if let Some(plugins) = plugin_dir() {
            init.push(format!("-plugin-dir={}", plugins.display()));
        }
        let out = example.run(&init);
        assert!(
            out.status.success(),
            "terraform init with the committed lock file failed:\n{}",
            text(&out)
        );
        Some(example)
    }

    fn run<S: AsRef<str>>(&self, args: &[S]) -> Output {
        Command::new(&self.terraform)
            .args(args.iter().map(AsRef::as_ref))
            .arg("-no-color")
            .current_dir(&self.root)
            // No version check against checkpoint-api.hashicorp.com, no prompts.
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env_remove("TF_CLI_ARGS")
            .output()
            .unwrap()
    }

    /// Writes both zips (`contents` tells them apart from other builds) and, when
    /// `manifest` is given, a package.json as `scripts/package` writes it.
    fn package(&self, contents: &str, manifest: Option<Manifest>) {
        let _ = std::fs::remove_dir_all(&self.package);
        let mut functions = serde_json::Map::new();
        for f in ["scheduler-fn", "executor-fn"] {
            let dir = self.package.join(f);
            std::fs::create_dir_all(&dir).unwrap();
            let zip = dir.join("bootstrap.zip");
            let bytes = format!("{f} {contents}");
            std::fs::write(&zip, &bytes).unwrap();
            let hash = match &manifest {
                Some(Manifest::Stale { .. }) => sha256_base64(b"another build"),
                _ => sha256_base64(bytes.as_bytes()),
            };
            functions.insert(
                f.into(),
                serde_json::json!({"zip": zip, "sha256_base64": hash}),
            );
        }
        if let Some(Manifest::For { arch } | Manifest::Stale { arch }) = manifest {
            let doc = serde_json::json!({"architecture": arch, "functions": functions});
            std::fs::write(self.package.join("package.json"), doc.to_string()).unwrap();
        }
    }

    /// `terraform plan` with the package's zips and `vars`; on success, the plan as JSON.
    fn plan(&self, vars: &[&str]) -> Result<Value, String> {
        let mut args = vec![
            "plan".to_string(),
            "-input=false".into(),
            "-refresh=false".into(),
            "-out=plan.bin".into(),
        ];
        for f in ["scheduler", "executor"] {
            args.push(format!(
                "-var={f}_zip_path={}",
                self.package.join(format!("{f}-fn/bootstrap.zip")).display()
            ));
        }
        args.extend(vars.iter().map(|v| format!("-var={v}")));
        let out = self.run(&args);
        if !out.status.success() {
            return Err(text(&out));
        }
        let show = self.run(&["show", "-json", "plan.bin"]);
        assert!(show.status.success(), "{}", text(&show));
        Ok(serde_json::from_slice(&show.stdout).unwrap())
    }
}

enum Manifest {
    /// A package.json that vouches for the zips, built for `arch`.
    For { arch: &'static str },
    /// A package.json of another build (its hashes are not the zips').
    Stale { arch: &'static str },
}

fn sha256_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(bytes))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The planned values of the resource at `address`.
fn planned<'a>(plan: &'a Value, address: &str) -> &'a Value {
    plan["planned_values"]["root_module"]["child_modules"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["resources"].as_array().into_iter().flatten())
        .find(|r| r["address"] == address)
        .map(|r| &r["values"])
        .unwrap_or_else(|| panic!("{address} is not in the plan"))
}

/// Terraform wraps messages at 80 columns; compare them as one line.
fn flat(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_example_validates_and_plans_what_was_packaged() {
    let Some(example) = Example::new() else {
        return;
    };
    let out = example.run(&["validate"]);
    assert!(out.status.success(), "terraform validate:\n{}", text(&out));

    // No architecture given: the functions get the one package.json names.
    for arch in ["x86_64", "arm64"] {
        example.package(arch, Some(Manifest::For { arch }));
        let plan = example.plan(&[]).unwrap_or_else(|e| panic!("{arch}: {e}"));
        for f in ["scheduler", "executor"] {
            let values = planned(
                &plan,
                &format!("module.lambdafusion.aws_lambda_function.{f}"),
            );
            assert_eq!(values["architectures"], serde_json::json!([arch]), "{f}");
            // JSON lines into the function's own log group (`lambdafusion logs`).
            let logging = &values["logging_config"][0];
            assert_eq!(logging["log_format"], "JSON", "{f}");
            assert_eq!(
                logging["log_group"],
                format!("/aws/lambda/lambdafusion-{f}"),
                "{f}"
            );
        }
        let creates = plan["resource_changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["change"]["actions"] == serde_json::json!(["create"]))
            .count();
        assert!(creates >= 30, "{creates} resources to create");
    }

    // What the first day relies on, as the provider plans it.
    let plan = example.plan(&[]).unwrap();
    let table = planned(&plan, "module.lambdafusion.aws_dynamodb_table.jobs");
    assert_eq!(
        table["deletion_protection_enabled"], true,
        "the catalog is protected"
    );
    let scheduler_events = planned(
        &plan,
        "module.lambdafusion.aws_lambda_function_event_invoke_config.scheduler",
    );
    assert_eq!(scheduler_events["maximum_event_age_in_seconds"], 900);
    assert_eq!(scheduler_events["maximum_retry_attempts"], 2);
}

#[test]
fn a_zip_built_for_another_architecture_is_refused_before_anything_is_created() {
    let Some(example) = Example::new() else {
        return;
    };
    // The case of the first deployment: x86_64 zips, arm64 asked for.
    example.package("x86", Some(Manifest::For { arch: "x86_64" }));
    let err = flat(&example.plan(&["architecture=arm64"]).unwrap_err());
    assert!(err.contains("Resource precondition failed"), "{err}");
    assert!(
        err.contains("architecture = arm64, but")
            && err.contains("was built for x86_64")
            && err.contains("exec format error"),
        "{err}"
    );
    // Agreeing with package.json is fine.
    example.plan(&["architecture=x86_64"]).unwrap();

    // Zips without a manifest, or with one that describes another build: the module
    // cannot tell, and says how to fix it.
    for manifest in [None, Some(Manifest::Stale { arch: "arm64" })] {
        example.package("unknown", manifest);
        let err = flat(&example.plan(&[]).unwrap_err());
        assert!(
            err.contains("cannot tell what") && err.contains("re-run scripts/package"),
            "{err}"
        );
        // Said explicitly, it is taken.
        let plan = example.plan(&["architecture=x86_64"]).unwrap();
        let values = planned(&plan, "module.lambdafusion.aws_lambda_function.executor");
        assert_eq!(values["architectures"], serde_json::json!(["x86_64"]));
    }

    // Not an architecture at all.
    let err = flat(&example.plan(&["architecture=amd64"]).unwrap_err());
    assert!(err.contains("architecture must be null"), "{err}");
}

#[test]
fn input_validation_refuses_what_aws_would_refuse_later() {
    let Some(example) = Example::new() else {
        return;
    };
    example.package("ok", Some(Manifest::For { arch: "arm64" }));
    // A KMS key by ARN is granted; an alias is refused (kms:Decrypt is checked on the key).
    let key = r#"data_kms_key_arns=["arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"]"#;
    example.plan(&[key]).unwrap();
    let alias = r#"data_kms_key_arns=["alias/data"]"#;
    let err = flat(&example.plan(&[alias]).unwrap_err());
    assert!(
        err.contains("data_kms_key_arns must be KMS key ARNs"),
        "{err}"
    );
    // Glue databases by name; a default database among them.
    example
        .plan(&[
            r#"glue_databases=["sales","web"]"#,
            "glue_default_database=sales",
        ])
        .unwrap();
    for (vars, message) in [
        (
            [r#"glue_databases=["Sales"]"#, "glue_default_database=null"],
            "glue_databases must be Glue database names",
        ),
        (
            [r#"glue_databases=["sales"]"#, "glue_default_database=web"],
            "glue_default_database must be one of glue_databases",
        ),
    ] {
        let err = flat(&example.plan(&vars).unwrap_err());
        assert!(err.contains(message), "{vars:?}: {err}");
    }
}

#[test]
fn a_stage_wider_than_the_executors_reserved_concurrency_is_refused() {
    let Some(example) = Example::new() else {
        return;
    };
    example.package("ok", Some(Manifest::For { arch: "x86_64" }));
    // 50 executors, stages of up to 1000 tasks (the code's default): refused.
    let err = flat(
        &example
            .plan(&["executor_reserved_concurrency=50"])
            .unwrap_err(),
    );
    assert!(
        err.contains("max_tasks_per_stage (1000, 1000 when null) must be at most executor_reserved_concurrency (50)"),
        "{err}"
    );
    let plan = example
        .plan(&["executor_reserved_concurrency=50", "max_tasks_per_stage=50"])
        .unwrap();
    let executor = planned(&plan, "module.lambdafusion.aws_lambda_function.executor");
    assert_eq!(executor["reserved_concurrent_executions"], 50);
    // A large executor no larger than the executor is refused before anything is
    // planned; so are budget limits.
    let err = flat(
        &example
            .plan(&["large_executor_memory_mb=2048"])
            .unwrap_err(),
    );
    assert!(
        err.contains("large_executor_memory_mb must be null or above executor_memory_mb"),
        "{err}"
    );
    let err = flat(&example.plan(&["max_query_cost_usd=0"]).unwrap_err());
    assert!(
        err.contains("max_query_cost_usd must be null or above 0"),
        "{err}"
    );
}

#[test]
fn a_large_executor_is_the_executors_code_with_more_memory_and_both_functions_know_it() {
    let Some(example) = Example::new() else {
        return;
    };
    example.package("ok", Some(Manifest::For { arch: "arm64" }));
    let plan = example.plan(&[]).unwrap();
    assert!(
        planned_of(&plan, "aws_lambda_function").len() == 2,
        "no large executor by default"
    );
    let plan = example.plan(&["large_executor_memory_mb=10240"]).unwrap();
    let large = planned(
        &plan,
        "module.lambdafusion.aws_lambda_function.executor_large[0]",
    );
    let executor = planned(&plan, "module.lambdafusion.aws_lambda_function.executor");
    assert_eq!(large["memory_size"], 10240);
    assert_eq!(large["function_name"], "lambdafusion-executor-large");
    assert_eq!(large["source_code_hash"], executor["source_code_hash"]);
    assert_eq!(large["architectures"], executor["architectures"]);
    let config = planned(
        &plan,
        "module.lambdafusion.aws_lambda_function_event_invoke_config.executor_large[0]",
    );
    assert_eq!(
        config["maximum_retry_attempts"], 0,
        "the scheduler owns retries"
    );
    // The functions' environments are only known at apply (they name the bucket); the
    // local stack's reader checks them (local/emulator, `a_large_executor_*`).
    // Watched as the executor is.
    let alarms = planned_of(&plan, "aws_cloudwatch_metric_alarm");
    for metric in ["Errors", "Throttles", "AsyncEventsDropped"] {
        assert!(
            alarms.iter().any(|(_, v)| v["metric_name"] == metric
                && v["dimensions"]["FunctionName"] == "lambdafusion-executor-large"),
            "no {metric} alarm on the large executor"
        );
    }
}

/// Every planned resource of `kind`, by address.
fn planned_of<'a>(plan: &'a Value, kind: &str) -> Vec<(&'a str, &'a Value)> {
    plan["planned_values"]["root_module"]["child_modules"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["resources"].as_array().into_iter().flatten())
        .filter(|r| r["type"] == kind)
        .map(|r| (r["address"].as_str().unwrap_or_default(), &r["values"]))
        .collect()
}

#[test]
fn alarms_and_the_dashboard_watch_the_deployments_own_resources() {
    let Some(example) = Example::new() else {
        return;
    };
    example.package("ok", Some(Manifest::For { arch: "arm64" }));
    let plan = example
        .plan(&["alarm_email=ops@example.com", "name_prefix=lfx"])
        .unwrap();
    // (namespace, metric, dimension, the resource's name as planned)
    let mut expected: Vec<(&str, String, &str, &str)> = Vec::new();
    for f in ["lfx-scheduler", "lfx-executor"] {
        for m in ["Errors", "Throttles", "AsyncEventsDropped"] {
            expected.push(("AWS/Lambda", m.into(), "FunctionName", f));
        }
    }
    expected.push((
        "AWS/Lambda",
        "IteratorAge".into(),
        "FunctionName",
        "lfx-scheduler",
    ));
    expected.push((
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible".into(),
        "QueueName",
        "lfx-scheduler-dlq",
    ));
    for m in ["ReadThrottleEvents", "WriteThrottleEvents"] {
        expected.push(("AWS/DynamoDB", m.into(), "TableName", "lfx-jobs"));
    }
    let alarms = planned_of(&plan, "aws_cloudwatch_metric_alarm");
    for (namespace, metric, dimension, name) in &expected {
        let found = alarms.iter().find(|(_, v)| {
            v["namespace"] == *namespace
                && v["metric_name"] == metric.as_str()
                && v["dimensions"][*dimension] == *name
        });
        let Some((address, values)) = found else {
            panic!("no alarm on {namespace} {metric} of {name}");
        };
        // Each notifies the topic (its ARN is known only after the apply) and is quiet
        // while the metric has no data (an idle deployment).
        assert_eq!(values["treat_missing_data"], "notBreaching", "{address}");
        assert_eq!(values["period"], 300, "{address}");
    }
    let api = alarms
        .iter()
        .find(|(_, v)| v["namespace"] == "AWS/ApiGateway" && v["metric_name"] == "5xx");
    assert!(api.is_some(), "an alarm on the HTTP API's 5xx");
    assert_eq!(alarms.len(), expected.len() + 1, "no alarm beyond these");
    let subscriptions = planned_of(&plan, "aws_sns_topic_subscription");
    assert_eq!(subscriptions.len(), 1);
    assert_eq!(subscriptions[0].1["endpoint"], "ops@example.com");
    assert_eq!(subscriptions[0].1["protocol"], "email");

    // Without the HTTP API, everything on the dashboard is known at plan time.
    let plan = example
        .plan(&["enable_http_api=false", "enable_function_url=true"])
        .unwrap();
    assert!(
        planned_of(&plan, "aws_sns_topic").is_empty(),
        "no address, no topic"
    );
    let dashboards = planned_of(&plan, "aws_cloudwatch_dashboard");
    assert_eq!(dashboards.len(), 1);
    let body: Value =
        serde_json::from_str(dashboards[0].1["dashboard_body"].as_str().unwrap()).unwrap();
    let text = body.to_string();
    for name in [
        "lambdafusion-scheduler",
        "lambdafusion-executor",
        "lambdafusion-jobs",
        "lambdafusion-scheduler-dlq",
    ] {
        assert!(text.contains(name), "the dashboard shows {name}");
    }
    assert!(!text.contains("AWS/ApiGateway"), "no API, no API widget");
    let err = flat(&example.plan(&["alarm_email=not-an-address"]).unwrap_err());
    assert!(
        err.contains("alarm_email must be an email address"),
        "{err}"
    );
}

/// The optional monthly budget counts the deployment's tagged costs and tells the alarm
/// address; every resource carries the deployment tag it filters on.
#[test]
fn a_monthly_budget_follows_the_deployments_tag() {
    let Some(example) = Example::new() else {
        return;
    };
    example.package("ok", Some(Manifest::For { arch: "arm64" }));
    let plan = example.plan(&[]).unwrap();
    assert!(
        planned_of(&plan, "aws_budgets_budget").is_empty(),
        "none by default"
    );
    let plan = example
        .plan(&[
            "monthly_budget_usd=25",
            "alarm_email=ops@example.com",
            "name_prefix=lfx",
        ])
        .unwrap();
    let budgets = planned_of(&plan, "aws_budgets_budget");
    assert_eq!(budgets.len(), 1);
    let budget = budgets[0].1;
    assert_eq!(budget["limit_amount"], "25.00");
    assert_eq!(budget["time_unit"], "MONTHLY");
    assert_eq!(
        budget["cost_filter"][0]["values"],
        serde_json::json!(["user:lambdafusion:deployment$lfx"])
    );
    let notifications = budget["notification"].as_array().unwrap();
    assert_eq!(notifications.len(), 2, "{budget}");
    assert!(notifications
        .iter()
        .all(|n| n["subscriber_email_addresses"] == serde_json::json!(["ops@example.com"])));
    // The tag the budget filters on is on what costs money.
    for kind in [
        "aws_lambda_function",
        "aws_dynamodb_table",
        "aws_s3_bucket",
        "aws_sqs_queue",
    ] {
        for (address, values) in planned_of(&plan, kind) {
            assert_eq!(
                values["tags"]["lambdafusion:deployment"], "lfx",
                "{address}"
            );
        }
    }
}
