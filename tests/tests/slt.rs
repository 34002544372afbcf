//! DataFusion's sqllogictest suite through lambdafusion (see `tests/src/slt.rs`).
//!
//! `curated_files_pass` runs a curated subset in CI (about two minutes) and fails on any
//! wrong answer or error beyond those listed in `KNOWN` below. The whole suite, or any
//! files, print their table with:
//!
//! ```sh
//! cargo test --workspace --test slt -- --ignored --nocapture            # all 500-odd files
//! SLT_FILES=window,joins cargo test --workspace --test slt -- --ignored --nocapture
//! ```

use std::path::PathBuf;

use lambdafusion_tests::slt::{self, FileReport, Options};

/// The CI subset: files whose set-up is in the file itself (no data outside the crate).
const CURATED: &[&str] = &["grouping.slt"];

fn files(filter: Option<&str>) -> Vec<PathBuf> {
    let dir = slt::test_files_dir().expect("the .slt files");
    let mut files: Vec<PathBuf> = walk(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| match filter {
            None => true,
            Some(names) => names.split(',').any(|n| {
                let n = n.trim();
                !n.is_empty() && p.to_string_lossy().contains(n)
            }),
        })
        .collect();
    files.sort();
    files
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

async fn run(files: &[PathBuf]) -> Vec<FileReport> {
    let options = Options::default();
    let mut reports = Vec::new();
    for file in files {
        let started = std::time::Instant::now();
        let report = slt::run_file(file, &options).await;
        eprintln!(
            "{}: {} records in {:.1} s",
            report.file,
            report.records,
            started.elapsed().as_secs_f64()
        );
        reports.push(report);
    }
    reports
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(16 * 1024 * 1024)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn curated_files_pass() {
    let dir = slt::test_files_dir().expect("the .slt files");
    let files: Vec<PathBuf> = CURATED.iter().map(|f| dir.join(f)).collect();
    let reports = runtime().block_on(run(&files));
    println!("{}", slt::table(&reports));
    let mut problems = Vec::new();
    for r in &reports {
        problems.extend(r.details.iter().cloned());
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
#[ignore = "long: every .slt file of the suite (SLT_FILES=a,b to choose)"]
fn suite() {
    let filter = std::env::var("SLT_FILES").ok();
    let files = files(filter.as_deref());
    let reports = runtime().block_on(run(&files));
    println!("{}", slt::table(&reports));
    for r in &reports {
        for d in &r.details {
            println!("{d}");
        }
    }
}
