//! Configuration of the two functions from environment variables — every variable is
//! named in [`crate::contract`] and documented there; a missing required one is an error
//! naming it.

use std::time::Duration;

use lambdafusion::EngineConfig;

use crate::contract::*;

/// Which function is starting: they need different variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// scheduler-fn: dispatches to the executor.
    Scheduler,
    /// executor-fn: wakes the scheduler.
    Executor,
}

/// A configuration problem, naming the variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("environment variable {0} is not set (see lambdafusion_aws::contract for what each variable means)")]
    Missing(&'static str),
    /// A variable holds something unusable.
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    Invalid {
        /// Variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
}

/// Everything the functions read from their environment.
#[derive(Debug, Clone)]
pub struct AwsSettings {
    /// DynamoDB table.
    pub table: String,
    /// S3 bucket for shuffle data and results.
    pub bucket: String,
    /// Key prefix in the bucket.
    pub prefix: String,
    /// Executor function (required by the scheduler).
    pub executor_function: Option<String>,
    /// The large executor function, where the deployment has one.
    pub large_executor_function: Option<String>,
    /// Scheduler function (required by the executor).
    pub scheduler_function: Option<String>,
    /// Engine settings.
    pub engine: EngineConfig,
    /// The attached Glue databases (`LAMBDAFUSION_GLUE_DATABASES`).
    pub glue_databases: Vec<String>,
    /// The Glue database found unqualified (`LAMBDAFUSION_GLUE_DEFAULT_DATABASE`).
    pub glue_default_database: Option<String>,
}

impl AwsSettings {
    /// Reads the process environment.
    pub fn from_env(role: Role) -> Result<Self, ConfigError> {
        Self::from_lookup(role, |k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (the environment, or a map in tests).
    pub fn from_lookup(
        role: Role,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        // Whether a variable is there at all, even empty (only the catalog writers care).
        let present = |k: &'static str| get(k).is_some();
        let get = |k: &'static str| get(k).filter(|v| !v.trim().is_empty());
        let required = |k: &'static str| get(k).ok_or(ConfigError::Missing(k));
        // Every engine setting with an environment variable, as config.rs declares it.
        let mut engine = EngineConfig::default();
        for setting in lambdafusion::config::SETTINGS {
            let Some(var) = setting.env else { continue };
            if let Some(value) = get(var) {
                engine
                    .set(setting.name, &value)
                    .map_err(|reason| ConfigError::Invalid { var, value, reason })?;
            }
        }
        // Lambda answers at most 6 MB: past 4 MiB (base64 grows binary formats by a third)
        // a result is downloaded through presigned URLs instead.
        if engine.max_response_bytes.is_none() {
            engine.max_response_bytes = Some(4 * 1024 * 1024);
        }
        let number = |k: &'static str| -> Result<Option<u64>, ConfigError> {
            get(k)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|e| ConfigError::Invalid {
                        var: k,
                        value: v.clone(),
                        reason: e.to_string(),
                    })
                })
                .transpose()
        };
        let list = |k: &'static str| -> Vec<String> {
            get(k)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|x| !x.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let data_locations = list(ENV_DATA_BUCKETS)
            .into_iter()
            .map(data_location)
            .collect::<Result<_, _>>()?;
        engine.access.data_locations = data_locations;
        engine.access.location_setting = format!("{ENV_DATA_BUCKETS} (Terraform: data_buckets)");
        engine.access.write_locations = list(ENV_WRITE_LOCATIONS)
            .into_iter()
            .map(|l| s3_location(l, ENV_WRITE_LOCATIONS))
            .collect::<Result<_, _>>()?;
        engine.access.write_setting = format!("{ENV_WRITE_LOCATIONS} (Terraform: write_locations)");
        engine.access.admins = list(ENV_ADMIN_PRINCIPALS);
        // Set, even to an empty list (Terraform's `catalog_writers = []`): only those listed
        // may change the catalog, so an empty list freezes it. Unset: every caller may.
        engine.access.catalog_writers =
            present(ENV_CATALOG_WRITERS).then(|| list(ENV_CATALOG_WRITERS));
        if let Some(v) = number(ENV_MAX_PRESIGN_SECS)? {
            // SigV4 presigned URLs live at most 7 days.
            if v == 0 || v > 604_800 {
                return Err(ConfigError::Invalid {
                    var: ENV_MAX_PRESIGN_SECS,
                    value: v.to_string(),
                    reason: "must be 1 to 604800 seconds (SigV4's limit)".into(),
                });
            }
            engine.access.max_presign = Duration::from_secs(v);
        }
        // A DynamoDB item holds at most 400 KB; base64 makes a plan a third larger.
        engine.inline_plan_limit = engine.inline_plan_limit.min(192 * 1024);
        let table = required(ENV_TABLE)?;
        let bucket = required(ENV_BUCKET)?;
        let prefix = get(ENV_PREFIX).unwrap_or_else(|| "lambdafusion".into());
        // The deployment's own shuffle and result objects are never a table.
        engine
            .access
            .reserved_locations
            .push(format!("s3://{bucket}/{}", prefix.trim_matches('/')));
        // Both functions dispatch (the executor: invocation-tree nodes and the stages its
        // commit makes ready) and both wake the scheduler; each names its own need first.
        let needed = match role {
            Role::Scheduler => [ENV_EXECUTOR_FUNCTION, ENV_SCHEDULER_FUNCTION],
            Role::Executor => [ENV_SCHEDULER_FUNCTION, ENV_EXECUTOR_FUNCTION],
        };
        for var in needed {
            required(var)?;
        }
        // The scheduler sizes stages up only where it knows the large executor's memory,
        // and needs its name to send them there: one without the other is a broken
        // deployment, found at start rather than at the first stage sized up.
        let large_function = get(ENV_LARGE_EXECUTOR_FUNCTION);
        match (&large_function, engine.large_executor_memory_mb) {
            (Some(_), None) => {
                return Err(ConfigError::Missing(
                    "LAMBDAFUSION_LARGE_EXECUTOR_MEMORY_MB",
                ))
            }
            (None, Some(_)) => return Err(ConfigError::Missing(ENV_LARGE_EXECUTOR_FUNCTION)),
            _ => {}
        }
        Ok(Self {
            table,
            bucket,
            prefix,
            executor_function: get(ENV_EXECUTOR_FUNCTION),
            large_executor_function: large_function,
            scheduler_function: get(ENV_SCHEDULER_FUNCTION),
            engine,
            glue_databases: list(ENV_GLUE_DATABASES),
            glue_default_database: get(ENV_GLUE_DEFAULT_DATABASE).map(|d| d.trim().to_string()),
        })
    }
}

/// One entry of `LAMBDAFUSION_DATA_BUCKETS` as an `s3://` location without a trailing `/`.
fn data_location(location: String) -> Result<String, ConfigError> {
    s3_location(location, ENV_DATA_BUCKETS)
}

/// One entry of a list of S3 locations (`var`) as an `s3://` location without a trailing
/// `/`.
fn s3_location(location: String, var: &'static str) -> Result<String, ConfigError> {
    let location = match location.split_once("://") {
        None => format!("s3://{location}"),
        Some(("s3", rest)) if !rest.is_empty() => location.clone(),
        Some(_) => {
            return Err(ConfigError::Invalid {
                var,
                value: location,
                reason: "locations are S3 buckets (`bucket`, `bucket/prefix` or \
                         `s3://bucket/prefix`); a function's local file system is never \
                         read or written"
                    .into(),
            })
        }
    };
    Ok(location.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn missing_variables_are_named() {
        let err = AwsSettings::from_lookup(Role::Scheduler, lookup(&[])).unwrap_err();
        assert_eq!(err, ConfigError::Missing(ENV_TABLE));
        let err = AwsSettings::from_lookup(
            Role::Scheduler,
            lookup(&[(ENV_TABLE, "t"), (ENV_BUCKET, "b")]),
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::Missing(ENV_EXECUTOR_FUNCTION));
        assert!(err.to_string().contains("LAMBDAFUSION_EXECUTOR_FUNCTION"));
        let err = AwsSettings::from_lookup(
            Role::Executor,
            lookup(&[(ENV_TABLE, "t"), (ENV_BUCKET, "b")]),
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::Missing(ENV_SCHEDULER_FUNCTION));
    }

    #[test]
    fn values_are_parsed_and_checked() {
        let base = [
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_SCHEDULER_FUNCTION, "s"),
            (ENV_EXECUTOR_FUNCTION, "e"),
        ];
        let s = AwsSettings::from_lookup(
            Role::Executor,
            lookup(
                &[
                    &base[..],
                    &[
                        ("LAMBDAFUSION_MAX_ATTEMPTS", "5"),
                        ("LAMBDAFUSION_FAST_PATH", "off"),
                        ("LAMBDAFUSION_TASK_TIMEOUT_SECS", "90"),
                        ("LAMBDAFUSION_ADAPTIVE", "false"),
                        ("LAMBDAFUSION_SHUFFLE_BYTES_PER_TASK", "2097152"),
                        ("LAMBDAFUSION_MIN_SCAN_BYTES_PER_TASK", "4194304"),
                        ("LAMBDAFUSION_MAX_BROADCAST_BYTES", "0"),
                        ("LAMBDAFUSION_MAX_TASKS_PER_STAGE", "10000"),
                        ("LAMBDAFUSION_DISPATCH_FANOUT", "8"),
                        ("LAMBDAFUSION_MAX_SHUFFLE_READS", "1000"),
                    ],
                ]
                .concat(),
            ),
        )
        .unwrap();
        assert_eq!(s.engine.max_tasks_per_stage, 10_000);
        assert_eq!(s.engine.dispatch_fanout, 8);
        assert_eq!(s.engine.max_shuffle_reads, 1000);
        for (var, value) in [
            ("LAMBDAFUSION_MAX_TASKS_PER_STAGE", "10001"),
            ("LAMBDAFUSION_MAX_TASKS_PER_STAGE", "0"),
            ("LAMBDAFUSION_DISPATCH_FANOUT", "1"),
        ] {
            let err = AwsSettings::from_lookup(
                Role::Executor,
                lookup(&[&base[..], &[(var, value)]].concat()),
            )
            .unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { var: v, .. } if *v == var),
                "{var}={value}: {err}"
            );
        }
        assert_eq!(s.engine.max_attempts, 5);
        assert!(!s.engine.fast_path);
        assert!(!s.engine.adaptive);
        assert_eq!(s.engine.shuffle_bytes_per_task, 2 * 1024 * 1024);
        assert_eq!(s.engine.min_scan_bytes_per_task, 4 * 1024 * 1024);
        assert_eq!(s.engine.max_broadcast_bytes, 0);
        let err = AwsSettings::from_lookup(
            Role::Executor,
            lookup(&[&base[..], &[("LAMBDAFUSION_ADAPTIVE", "sometimes")]].concat()),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    var: "LAMBDAFUSION_ADAPTIVE",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(s.engine.task_timeout, Duration::from_secs(90));
        assert_eq!(s.prefix, "lambdafusion");
        let err = AwsSettings::from_lookup(
            Role::Executor,
            lookup(&[&base[..], &[("LAMBDAFUSION_BYTES_PER_TASK", "lots")]].concat()),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    var: "LAMBDAFUSION_BYTES_PER_TASK",
                    ..
                }
            ),
            "{err}"
        );
        let s = AwsSettings::from_lookup(
            Role::Executor,
            lookup(&[&base[..], &[(ENV_DATA_BUCKETS, "s3://lake, raw/tables/")]].concat()),
        )
        .unwrap();
        assert_eq!(
            s.engine.access.data_locations,
            vec!["s3://lake", "s3://raw/tables"]
        );
        assert_eq!(
            s.engine.access.reserved_locations,
            vec!["s3://b/lambdafusion"]
        );
        assert!(s.engine.access.catalog_writers.is_none());
        assert_eq!(s.engine.access.max_presign, Duration::from_secs(900));
        let err = AwsSettings::from_lookup(
            Role::Executor,
            lookup(&[&base[..], &[(ENV_DATA_BUCKETS, "lake,file:///etc")]].concat()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("local file system"), "{err}");
        // Write locations: none by default; S3 only, named in the refusal.
        assert!(s.engine.access.write_locations.is_empty());
        let e = s
            .engine
            .access
            .check_write_location("s3://lake/out/")
            .unwrap_err();
        assert!(e.to_string().contains(ENV_WRITE_LOCATIONS), "{e}");
        let s = AwsSettings::from_lookup(
            Role::Scheduler,
            lookup(
                &[
                    &base[..],
                    &[(ENV_WRITE_LOCATIONS, "out/results/, s3://lake/exports")],
                ]
                .concat(),
            ),
        )
        .unwrap();
        assert_eq!(
            s.engine.access.write_locations,
            vec!["s3://out/results", "s3://lake/exports"]
        );
        assert!(s
            .engine
            .access
            .check_write_location("s3://out/results/q1/")
            .is_ok());
        assert!(s
            .engine
            .access
            .check_write_location("s3://out/other/")
            .is_err());
        assert!(
            s.engine
                .access
                .check_location("s3://lake/exports/t/")
                .is_ok(),
            "readable too"
        );
        let err = AwsSettings::from_lookup(
            Role::Scheduler,
            lookup(&[&base[..], &[(ENV_WRITE_LOCATIONS, "file:///tmp")]].concat()),
        )
        .unwrap_err();
        assert!(err.to_string().contains(ENV_WRITE_LOCATIONS), "{err}");
    }

    #[test]
    fn access_settings_are_read() {
        let base = [
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_EXECUTOR_FUNCTION, "e"),
            (ENV_SCHEDULER_FUNCTION, "s"),
        ];
        let s = AwsSettings::from_lookup(Role::Scheduler, lookup(&base)).unwrap();
        assert!(
            s.engine.access.data_locations.is_empty(),
            "no bucket by default"
        );
        assert!(s
            .engine
            .access
            .check_location("s3://anything/x")
            .unwrap_err()
            .to_string()
            .contains(ENV_DATA_BUCKETS));
        let s = AwsSettings::from_lookup(
            Role::Scheduler,
            lookup(
                &[
                    &base[..],
                    &[
                        (ENV_ADMIN_PRINCIPALS, "arn:a, arn:b"),
                        (ENV_CATALOG_WRITERS, "arn:w"),
                        (ENV_MAX_PRESIGN_SECS, "60"),
                        ("LAMBDAFUSION_MAX_QUERY_SECONDS", "120"),
                        (ENV_DATA_BUCKETS, "b"),
                    ],
                ]
                .concat(),
            ),
        )
        .unwrap();
        assert_eq!(s.engine.access.admins, vec!["arn:a", "arn:b"]);
        assert_eq!(s.engine.access.catalog_writers, Some(vec!["arn:w".into()]));
        // An empty list (what Terraform's `catalog_writers = []` sets) is nobody, not
        // everybody: the catalog is frozen.
        for empty in ["", " , "] {
            let s = AwsSettings::from_lookup(
                Role::Scheduler,
                lookup(&[&base[..], &[(ENV_CATALOG_WRITERS, empty)]].concat()),
            )
            .unwrap();
            assert_eq!(s.engine.access.catalog_writers, Some(vec![]), "{empty:?}");
            let anyone = lambdafusion::access::Caller("arn:anyone".into());
            assert!(s.engine.access.check_catalog_writer(&anyone).is_err());
        }
        assert_eq!(s.engine.access.max_presign, Duration::from_secs(60));
        assert_eq!(s.engine.max_query_time, Duration::from_secs(120));
        let e = s
            .engine
            .access
            .check_location("s3://b/lambdafusion/jobs/x/")
            .unwrap_err();
        assert!(e.to_string().contains("shuffle"), "{e}");
        assert!(s.engine.access.check_location("s3://b/tables/t/").is_ok());
        let err = AwsSettings::from_lookup(
            Role::Scheduler,
            lookup(&[&base[..], &[(ENV_MAX_PRESIGN_SECS, "999999")]].concat()),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                var: ENV_MAX_PRESIGN_SECS,
                ..
            }
        ));
    }
}
