//! `lambdafusion doctor`: a deployment's preflight. It reads the account's Lambda quotas
//! (`GetAccountSettings`) and each function's configuration and reserved concurrency
//! (`GetFunctionConfiguration`, `GetFunctionConcurrency`), and says what will and will
//! not work: whether a query's tasks can take the slots the scheduler needs (the API,
//! the stream trigger and the sweep), whether a stage's tasks fit the executor's
//! concurrency, and how much CPU a task gets. [`gather`] reads, [`assess`] decides (pure,
//! so the rules are unit-tested).
//!
//! What it cannot read through Lambda's API: the account's memory quota (new accounts may
//! be held below 10,240 MB; that the functions exist with their sizes shows the quota
//! allowed them) and Service Quotas requests in flight.

use aws_sdk_lambda::Client;
use lambdafusion::{Error, Result};

use crate::config::{AwsSettings, Role};

/// Concurrency Lambda always keeps unreserved in an account: reservations may take only
/// what is above it (<https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html>).
pub const UNRESERVED_FLOOR: u64 = 100;

/// Concurrent executions the scheduler needs besides the tasks: the API's long-polling
/// status requests, the stream trigger's batches (two per shard) and the sweep.
pub const SCHEDULER_HEADROOM: u64 = 10;

/// Memory that buys one vCPU on Lambda.
pub const MB_PER_VCPU: f64 = 1_769.0;

/// One function as Lambda reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionFacts {
    /// Its name.
    pub name: String,
    /// `MemorySize`.
    pub memory_mb: u64,
    /// `Timeout`.
    pub timeout_secs: u64,
    /// `EphemeralStorage.Size`.
    pub ephemeral_mb: u64,
    /// `Architectures[0]`.
    pub architecture: String,
    /// `ReservedConcurrentExecutions`, if reserved.
    pub reserved: Option<u64>,
    /// Its environment (the engine settings the module set).
    pub env: std::collections::BTreeMap<String, String>,
}

/// What the preflight read.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// The account's concurrency quota.
    pub account_concurrency: u64,
    /// What reservations leave unreserved.
    pub unreserved: u64,
    /// The scheduler, if it exists.
    pub scheduler: Option<FunctionFacts>,
    /// The executor, if it exists.
    pub executor: Option<FunctionFacts>,
    /// The large executor (`<prefix>-executor-large`), if it exists.
    pub large_executor: Option<FunctionFacts>,
}

/// How a finding bears on the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// A fact worth knowing.
    Ok,
    /// Works, but not as well as it could.
    Warn,
    /// Will not work (or will fail under a query's load).
    Problem,
}

/// One line of the preflight's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How bad.
    pub level: Level,
    /// What, with the figures and what to do.
    pub text: String,
}

fn finding(level: Level, text: String) -> Finding {
    Finding { level, text }
}

/// A Lambda client from the environment's configuration (region, credentials, endpoint).
pub async fn client() -> Client {
    Client::new(&crate::clients::sdk_config().await)
}

/// Reads the account's quotas and the functions `<name_prefix>-scheduler`, `-executor`
/// and, where there is one, `-executor-large` (as the Terraform module names them).
pub async fn gather(client: &Client, name_prefix: &str) -> Result<Facts> {
    let service = |what: &str, e: String| {
        Error::InvalidInput(format!(
            "Lambda {what}: {e} (check the region and credentials)"
        ))
    };
    let settings = client.get_account_settings().send().await.map_err(|e| {
        service(
            "GetAccountSettings",
            aws_sdk_lambda::error::DisplayErrorContext(&e).to_string(),
        )
    })?;
    let limit = settings.account_limit();
    let mut facts = Facts {
        account_concurrency: limit.map_or(0, |l| l.concurrent_executions().max(0) as u64),
        unreserved: limit
            .and_then(|l| l.unreserved_concurrent_executions())
            .map_or(0, |n| n.max(0) as u64),
        scheduler: None,
        executor: None,
        large_executor: None,
    };
    for slot in ["scheduler", "executor", "executor-large"] {
        let name = format!("{name_prefix}-{slot}");
        let config = match client
            .get_function_configuration()
            .function_name(&name)
            .send()
            .await
        {
            Ok(c) => c,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                continue
            }
            Err(e) => {
                return Err(service(
                    &format!("GetFunctionConfiguration {name}"),
                    aws_sdk_lambda::error::DisplayErrorContext(&e).to_string(),
                ))
            }
        };
        let reserved = client
            .get_function_concurrency()
            .function_name(&name)
            .send()
            .await
            .map_err(|e| {
                service(
                    &format!("GetFunctionConcurrency {name}"),
                    aws_sdk_lambda::error::DisplayErrorContext(&e).to_string(),
                )
            })?
            .reserved_concurrent_executions()
            .map(|n| n.max(0) as u64);
        let f = FunctionFacts {
            name,
            memory_mb: config.memory_size().unwrap_or(128).max(0) as u64,
            timeout_secs: config.timeout().unwrap_or(3).max(0) as u64,
            ephemeral_mb: config
                .ephemeral_storage()
                .map_or(512, |e| e.size().max(0) as u64),
            architecture: config
                .architectures()
                .first()
                .map_or("x86_64".to_string(), |a| a.as_str().to_string()),
            reserved,
            env: config
                .environment()
                .and_then(|e| e.variables())
                .map(|v| v.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
        };
        match slot {
            "scheduler" => facts.scheduler = Some(f),
            "executor" => facts.executor = Some(f),
            _ => facts.large_executor = Some(f),
        }
    }
    Ok(facts)
}

/// What will and will not work, worst first.
pub fn assess(facts: &Facts, name_prefix: &str) -> Vec<Finding> {
    use Level::*;
    let mut out = Vec::new();
    let (Some(scheduler), Some(executor)) = (&facts.scheduler, &facts.executor) else {
        for (f, slot) in [
            (&facts.scheduler, "scheduler"),
            (&facts.executor, "executor"),
        ] {
            if f.is_none() {
                out.push(finding(
                    Problem,
                    format!(
                        "function {name_prefix}-{slot} not found: apply the Terraform module, \
                         or check --name-prefix and the region"
                    ),
                ));
            }
        }
        return out;
    };
    let settings =
        match AwsSettings::from_lookup(Role::Scheduler, |k| scheduler.env.get(k).cloned()) {
            Result::Ok(s) => s,
            Err(e) => {
                out.push(finding(
                    Problem,
                    format!(
                        "{}: the scheduler would refuse to start: {e}",
                        scheduler.name
                    ),
                ));
                return out;
            }
        };
    let max_tasks = settings.engine.max_tasks_per_stage as u64;
    let limit = facts.account_concurrency;
    let unreserved = facts.unreserved;
    let quota_help = "ask for more in Service Quotas (Lambda, \"Concurrent executions\", \
                      L-B99A9384)";

    out.push(finding(
        Ok,
        format!(
            "account: {limit} concurrent executions, {unreserved} unreserved; a stage runs at \
             most {max_tasks} tasks (max_tasks_per_stage)"
        ),
    ));
    // How many tasks can run at once, and whether they can starve the scheduler.
    let executor_slots = executor.reserved.unwrap_or(unreserved);
    match (scheduler.reserved, executor.reserved) {
        (_, Some(0)) => out.push(finding(
            Problem,
            format!(
                "{}: reserved concurrency 0 throttles every task: set executor_reserved_concurrency \
                 above 0 or to null",
                executor.name
            ),
        )),
        (Some(0), _) => out.push(finding(
            Problem,
            format!(
                "{}: reserved concurrency 0 throttles every request: set scheduler_reserved_concurrency \
                 above 0 or to null",
                scheduler.name
            ),
        )),
        (None, None) if limit < max_tasks + SCHEDULER_HEADROOM => {
            let reservable = limit.saturating_sub(UNRESERVED_FLOOR);
            let fix = if reservable >= 1 {
                format!(
                    "set executor_reserved_concurrency to at most {reservable} (the account keeps \
                     {UNRESERVED_FLOOR} unreserved) and max_tasks_per_stage to match, or {quota_help}"
                )
            } else {
                format!(
                    "no reservation is possible below {} (Lambda keeps {UNRESERVED_FLOOR} \
                     unreserved): {quota_help}, and meanwhile set max_tasks_per_stage to about {}",
                    UNRESERVED_FLOOR + 1,
                    limit.saturating_sub(SCHEDULER_HEADROOM).max(1)
                )
            };
            out.push(finding(
                Problem,
                format!(
                    "a stage of up to {max_tasks} tasks can take all {limit} of the account's \
                     concurrent executions: the scheduler (the API, the stream trigger, the sweep) \
                     is then throttled and queries stall; {fix}"
                ),
            ));
        }
        (None, None) => out.push(finding(
            Warn,
            format!(
                "neither function reserves concurrency: a busy account (other functions) can \
                 throttle queries; consider executor_reserved_concurrency = {max_tasks}"
            ),
        )),
        _ => {}
    }
    if let Some(r) = executor.reserved.filter(|&r| r > 0) {
        if max_tasks > r {
            out.push(finding(
                Problem,
                format!(
                    "{}: {r} reserved concurrent executions but a stage may run {max_tasks} tasks: \
                     the rest wait in Lambda's queue and a wide stage takes {}× as long; set \
                     max_tasks_per_stage to at most {r}",
                    executor.name,
                    max_tasks.div_ceil(r)
                ),
            ));
        }
    }
    if executor.reserved.is_some()
        && scheduler.reserved.is_none()
        && unreserved < SCHEDULER_HEADROOM
    {
        out.push(finding(
            Problem,
            format!(
                "only {unreserved} unreserved concurrent executions are left for the scheduler, \
                 which needs about {SCHEDULER_HEADROOM}: lower executor_reserved_concurrency or \
                 {quota_help}"
            ),
        ));
    }
    if executor_slots < max_tasks && executor.reserved.is_none() {
        out.push(finding(
            Warn,
            format!(
                "at most {executor_slots} tasks run at once (the unreserved pool), fewer than a \
                 stage's {max_tasks}"
            ),
        ));
    }
    large_executor(facts, &settings, &mut out);
    for f in [
        Some(scheduler),
        Some(executor),
        facts.large_executor.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        let vcpus = (f.memory_mb as f64 / MB_PER_VCPU).clamp(0.07, 6.0);
        out.push(finding(
            Ok,
            format!(
                "{}: {} MB ({vcpus:.1} vCPU), {} s timeout, {} MB /tmp, {}{}",
                f.name,
                f.memory_mb,
                f.timeout_secs,
                f.ephemeral_mb,
                f.architecture,
                f.reserved
                    .map_or(", unreserved".to_string(), |r| format!(", {r} reserved"))
            ),
        ));
    }
    if executor.memory_mb < MB_PER_VCPU as u64 {
        out.push(finding(
            Warn,
            format!(
                "{}: {} MB buys less than one vCPU ({MB_PER_VCPU} MB is one): tasks run slower \
                 than they cost",
                executor.name, executor.memory_mb
            ),
        ));
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.level));
    out
}

/// Whether the large executor the scheduler sends sized-up stages to is there, with the
/// memory it sizes them for.
fn large_executor(facts: &Facts, settings: &AwsSettings, out: &mut Vec<Finding>) {
    let wanted = settings
        .large_executor_function
        .as_ref()
        .zip(settings.engine.large_executor_memory_mb);
    match (wanted, &facts.large_executor) {
        (Some((name, _)), None) => out.push(finding(
            Level::Problem,
            format!(
                "the scheduler sends sized-up stages to {name}, which does not exist: apply the \
                 Terraform module (large_executor_memory_mb), or unset \
                 LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION"
            ),
        )),
        (Some((name, mb)), Some(f)) if f.name != *name || f.memory_mb != mb as u64 => {
            out.push(finding(
                Level::Problem,
                format!(
                    "the scheduler sizes stages for {name} at {mb} MB, but {} has {} MB: \
                     apply the Terraform module again",
                    f.name, f.memory_mb
                ),
            ))
        }
        (None, Some(f)) => out.push(finding(
            Level::Warn,
            format!(
                "{} exists but the scheduler does not use it (no \
                 LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION): left from an earlier deployment?",
                f.name
            ),
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str, reserved: Option<u64>) -> FunctionFacts {
        FunctionFacts {
            name: name.into(),
            memory_mb: 3008,
            timeout_secs: 900,
            ephemeral_mb: 2048,
            architecture: "x86_64".into(),
            reserved,
            env: [
                ("LAMBDAFUSION_TABLE", "t"),
                ("LAMBDAFUSION_BUCKET", "b"),
                ("LAMBDAFUSION_EXECUTOR_FUNCTION", "lf-executor"),
                ("LAMBDAFUSION_SCHEDULER_FUNCTION", "lf-scheduler"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }
    }

    fn facts(limit: u64, scheduler: Option<u64>, executor: Option<u64>) -> Facts {
        let reserved = scheduler.unwrap_or(0) + executor.unwrap_or(0);
        Facts {
            account_concurrency: limit,
            unreserved: limit - reserved,
            scheduler: Some(function("lf-scheduler", scheduler)),
            executor: Some(function("lf-executor", executor)),
            large_executor: None,
        }
    }

    fn problems(f: &Facts) -> Vec<String> {
        assess(f, "lf")
            .into_iter()
            .filter(|f| f.level == Level::Problem)
            .map(|f| f.text)
            .collect()
    }

    #[test]
    fn a_new_account_of_ten_cannot_reserve_and_is_told_so() {
        let p = problems(&facts(10, None, None));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("all 10 of the account's concurrent executions"),
            "{}",
            p[0]
        );
        assert!(p[0].contains("no reservation is possible") && p[0].contains("L-B99A9384"));
    }

    #[test]
    fn a_default_account_needs_a_reservation_for_1000_tasks() {
        let p = problems(&facts(1_000, None, None));
        assert!(p[0].contains("at most 900"), "{p:?}");
        // Reserved below the stage width: tasks queue.
        let p = problems(&facts(1_000, None, Some(500)));
        assert!(
            p[0].contains("set max_tasks_per_stage to at most 500"),
            "{p:?}"
        );
        // Reserved for every task, with room left for the scheduler: fine.
        let mut f = facts(2_000, None, Some(1_000));
        assert!(problems(&f).is_empty(), "{:?}", problems(&f));
        // ... unless nothing is left for the scheduler.
        f.unreserved = 5;
        assert!(problems(&f)[0].contains("only 5 unreserved"));
        // A big account without reservations works, with a warning.
        let all = assess(&facts(10_000, None, None), "lf");
        assert!(all.iter().all(|f| f.level != Level::Problem), "{all:?}");
        assert!(all.iter().any(|f| f.level == Level::Warn));
    }

    #[test]
    fn settings_and_missing_functions_are_problems() {
        let mut f = facts(10_000, None, Some(1_000));
        f.scheduler
            .as_mut()
            .unwrap()
            .env
            .insert("LAMBDAFUSION_MAX_TASKS_PER_STAGE".into(), "20000".into());
        assert!(
            problems(&f)[0].contains("would refuse to start"),
            "{:?}",
            problems(&f)
        );
        let mut f = facts(10_000, None, Some(1_000));
        f.scheduler
            .as_mut()
            .unwrap()
            .env
            .insert("LAMBDAFUSION_MAX_TASKS_PER_STAGE".into(), "64".into());
        assert!(problems(&f).is_empty());
        f.executor = None;
        assert!(problems(&f)[0].contains("function lf-executor not found"));
        let zero = problems(&facts(10_000, None, Some(0)));
        assert!(zero[0].contains("throttles every task"), "{zero:?}");
    }

    #[test]
    fn the_large_executor_must_be_there_with_the_memory_stages_are_sized_for() {
        let mut f = facts(10_000, None, Some(1_000));
        let scheduler = f.scheduler.as_mut().unwrap();
        scheduler
            .env
            .insert("LAMBDAFUSION_MAX_TASKS_PER_STAGE".into(), "64".into());
        scheduler.env.insert(
            "LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION".into(),
            "lf-executor-large".into(),
        );
        scheduler.env.insert(
            "LAMBDAFUSION_LARGE_EXECUTOR_MEMORY_MB".into(),
            "10240".into(),
        );
        assert!(
            problems(&f)[0].contains("lf-executor-large, which does not exist"),
            "{:?}",
            problems(&f)
        );
        f.large_executor = Some(FunctionFacts {
            memory_mb: 5120,
            ..function("lf-executor-large", None)
        });
        assert!(problems(&f)[0].contains("at 10240 MB, but lf-executor-large has 5120 MB"));
        f.large_executor.as_mut().unwrap().memory_mb = 10240;
        assert!(problems(&f).is_empty(), "{:?}", problems(&f));
        let all = assess(&f, "lf");
        assert!(all
            .iter()
            .any(|x| x.text.starts_with("lf-executor-large: 10240 MB (5.8 vCPU)")));
        // One without the scheduler's settings is left over.
        let scheduler = f.scheduler.as_mut().unwrap();
        scheduler.env.remove("LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION");
        scheduler
            .env
            .remove("LAMBDAFUSION_LARGE_EXECUTOR_MEMORY_MB");
        let all = assess(&f, "lf");
        assert!(all
            .iter()
            .any(|x| x.level == Level::Warn && x.text.contains("does not use it")));
    }
}
