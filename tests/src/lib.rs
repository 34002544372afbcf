//! Helpers for the end-to-end tests: the local AWS stack (started and stopped around a
//! test), clients configured for it, DataFusion's sqllogictest suite run through the
//! engine ([`slt`]), the job store's specification ([`conformance`]), and what cargo
//! resolves for the workspace ([`cargo_tree`]), the Delta Lake fixtures ([`delta`]).

pub mod conformance;
pub mod delta;
pub mod slt;
pub mod stack;
pub mod workload;

/// The Python of the test environment (`$VENV/bin/python`, else the repository's `.venv`,
/// which scripts/test.sh fills from local/requirements.txt); `purpose` names the test in
/// the panic that says how to get it.
pub fn test_python(purpose: &str) -> std::path::PathBuf {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    [
        std::env::var_os("VENV").map(|v| std::path::PathBuf::from(v).join("bin/python")),
        Some(repo.join(".venv/bin/python")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.exists())
    .unwrap_or_else(|| {
        panic!(
            "{purpose} needs the test Python (local/requirements.txt): set VENV, or run \
             scripts/test.sh, which installs it into .venv"
        )
    })
}

/// `cargo tree --locked --offline <args>` over this workspace (what cargo resolves for a
/// selection of packages: crates, features); panics with cargo's message if it fails.
pub fn cargo_tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::process::Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--locked", "--offline"])
        .args(args)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs the 22 TPC-H queries on `engine` and compares each answer with single-process
/// DataFusion's on `baseline` (the generated Parquet files registered); the failures, one
/// line each, prefixed with `label`.
pub async fn tpch_failures(
    engine: &lambdafusion_embedded::Embedded,
    baseline: &datafusion::prelude::SessionContext,
    label: &str,
) -> Vec<String> {
    use lambdafusion_cli::tpch;
    let mut failures = Vec::new();
    for q in 1..=22 {
        let sql = tpch::query(q);
        let want = baseline.sql(sql).await.unwrap().collect().await.unwrap();
        match engine.sql(sql).await {
            Ok(out) => {
                if let Err(e) =
                    lambdafusion_embedded::verify::compare(&want, &out.batches, tpch::is_ordered(q))
                {
                    failures.push(format!("{label}q{q}: {e}"));
                }
            }
            Err(e) => failures.push(format!("{label}q{q}: {e}")),
        }
    }
    failures
}
