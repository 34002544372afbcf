//! The Delta Lake fixtures (`tests/delta/fixtures.py`): tables written by the `deltalake`
//! Python package and by Databricks, and the answers deltalake's own reader gives.

use std::path::{Path, PathBuf};

use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;

/// One query of the fixtures and whether its row order counts.
#[derive(Debug, Clone)]
pub struct Case {
    /// The name of its expected answer.
    pub name: String,
    /// What lambdafusion runs.
    pub sql: String,
    /// Whether the answer's row order is part of it.
    pub ordered: bool,
}

/// The fixtures written under a directory.
#[derive(Debug)]
pub struct Fixtures {
    /// Where they were written.
    pub dir: PathBuf,
    /// Table name -> its directory.
    pub tables: Vec<(String, PathBuf)>,
    /// The queries and their answers.
    pub cases: Vec<Case>,
}

impl Fixtures {
    /// Writes the fixtures under `dir` with the test Python.
    pub fn write(dir: &Path) -> Self {
        Self::written_by(&script("fixtures.py"), dir)
    }

    /// Writes fixtures under `dir` with `script`, which writes `cases.json` and the
    /// expected answers in the same layout (the Iceberg fixtures do).
    pub fn written_by(script: &Path, dir: &Path) -> Self {
        python(&[script.as_os_str(), dir.as_os_str()]);
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("cases.json")).unwrap()).unwrap();
        Self {
            dir: dir.to_path_buf(),
            tables: json["tables"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, path)| (name.clone(), PathBuf::from(path.as_str().unwrap())))
                .collect(),
            cases: json["cases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| Case {
                    name: c["name"].as_str().unwrap().to_string(),
                    sql: c["sql"].as_str().unwrap().to_string(),
                    ordered: c["ordered"].as_bool().unwrap(),
                })
                .collect(),
        }
    }

    /// The answer deltalake's reader gives for case `name`.
    pub async fn expected(&self, name: &str) -> Vec<RecordBatch> {
        let path = self.dir.join("expected").join(format!("{name}.parquet"));
        SessionContext::new()
            .read_parquet(path.display().to_string(), Default::default())
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()
    }

    /// Runs every case on `engine` and compares its answer with the expected one; the
    /// failures, one line each (empty when all agree).
    pub async fn failures(&self, engine: &lambdafusion_embedded::Embedded) -> Vec<String> {
        let mut failures = Vec::new();
        for case in &self.cases {
            let want = self.expected(&case.name).await;
            match engine.sql(&case.sql).await {
                Ok(out) => {
                    if let Err(e) =
                        lambdafusion_embedded::verify::compare(&want, &out.batches, case.ordered)
                    {
                        failures.push(format!("{}: {e}\n  {}", case.name, case.sql));
                    }
                }
                Err(e) => failures.push(format!("{}: {e}\n  {}", case.name, case.sql)),
            }
        }
        failures
    }

    /// Every file of table `name`, relative to its directory.
    pub fn files(&self, name: &str) -> Vec<(String, PathBuf)> {
        let root = &self.tables.iter().find(|(n, _)| n == name).unwrap().1;
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let relative = path
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .to_string();
                    out.push((relative, path));
                }
            }
        }
        out.sort();
        out
    }
}

/// Calls `DeltaTable(<table>).<call>` with the deltalake package (`delete()`,
/// `create_checkpoint()`...): a commit by the tool teams use, from a test.
pub fn deltalake(table: &Path, call: &str) {
    let code =
        format!("import sys; from deltalake import DeltaTable; DeltaTable(sys.argv[1]).{call}");
    python(&["-c".as_ref(), code.as_ref(), table.as_os_str()]);
}

/// A script of `tests/delta/`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("delta")
        .join(name)
}

/// Runs the test Python with `args`; panics with its error output unless it succeeds.
pub fn python(args: &[&std::ffi::OsStr]) {
    let out = std::process::Command::new(crate::test_python("the Delta tests"))
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "python {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
