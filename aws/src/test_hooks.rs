//! Hooks for the local AWS stack's failure tests, compiled only with the `test-hooks`
//! feature (the workspace's test builds enable it through `lambdafusion-tests`;
//! `scripts/package` never does, and checks that the zips it builds name neither
//! variable below).
//!
//! - `LAMBDAFUSION_FAULTS`: the seeded fault plan whose crash points kill a function at
//!   a chosen line (see `lambdafusion-faults`), read again whenever its file changes;
//! - `LAMBDAFUSION_TEST_CRASH_FILE`: when it names an existing file holding
//!   `<stage>/<partition>/<attempt>`, the matching task deletes the file and exits the
//!   process mid-invocation (status 70), as a crashed function would.
//!
//! Without the feature, a function has no fault plan and [`before_task`] does nothing.

use lambdafusion::dispatch::TaskSpec;
use lambdafusion::faults::Faults;
use lambdafusion::Result;

/// The fault plan of this function: from `LAMBDAFUSION_FAULTS` with the feature, none
/// without it.
pub fn faults() -> Result<Faults> {
    #[cfg(feature = "test-hooks")]
    {
        let plan = lambdafusion::faults::LivePlan::from_env().map_err(|e| {
            lambdafusion::Error::InvalidInput(format!("{}: {e}", crate::contract::ENV_FAULTS))
        })?;
        Ok(Faults::exiting(plan))
    }
    #[cfg(not(feature = "test-hooks"))]
    Ok(Faults::default())
}

/// Called by the executor function before each task: the crash-file hook.
pub fn before_task(task: &TaskSpec) {
    #[cfg(feature = "test-hooks")]
    {
        let Ok(path) = std::env::var("LAMBDAFUSION_TEST_CRASH_FILE") else {
            return;
        };
        let wanted = format!("{}/{}/{}", task.stage, task.partition, task.attempt);
        if std::fs::read_to_string(&path).is_ok_and(|s| s.trim() == wanted)
            && std::fs::remove_file(&path).is_ok()
        {
            eprintln!("LAMBDAFUSION_TEST_CRASH_FILE: crashing on {task}");
            std::process::exit(70);
        }
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = task;
}
