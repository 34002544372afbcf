//! DataFusion's sqllogictest suite through lambdafusion (see `tests/src/slt.rs`).
//!
//! `curated_files_pass` runs a curated subset in CI (about two minutes) and fails on any
//! wrong answer or error beyond the refusals listed in `KNOWN` below. The whole suite, or any
//! files, print their table with:
//!
//! ```sh
//! cargo test --workspace --test end_to_end slt:: -- --ignored --nocapture   # all 500-odd files
//! SLT_FILES=window,joins cargo test --workspace --test end_to_end slt:: -- --ignored --nocapture
//! SLT_FILES=/path/to/mine.slt cargo test --workspace --test end_to_end slt:: -- --ignored --nocapture
//! ```

use std::path::PathBuf;

use lambdafusion_tests::slt::{self, FileReport, Options};

/// The CI subset (about two minutes on two cores, debug build): files whose set-up is
/// in the file itself (no data outside the crate) and whose queries exercise what the
/// distribution does — shuffles, joins of every kind, subqueries, recursive queries,
/// unions, windows, grouping sets, unnesting, ordering and limits.
const CURATED: &[&str] = &[
    "group_by.slt",
    "joins.slt",
    "join_only.slt",
    "sort_merge_join.slt",
    "pwmj.slt",
    "join_is_not_distinct_from.slt",
    "lateral_join.slt",
    "null_aware_anti_join.slt",
    "subquery.slt",
    "cte.slt",
    "union.slt",
    "union_by_name.slt",
    "grouping.slt",
    "window_limits.slt",
    "window_topn.slt",
    "qualify.slt",
    "distinct_on.slt",
    "array_agg.slt",
    "unnest.slt",
    "map.slt",
    "case.slt",
    "in_list.slt",
    "order.slt",
    "limit.slt",
    "math.slt",
    "datetime/dates.slt",
    "datetime/interval.slt",
    "datetime/timestamps.slt",
    "expr.slt",
];

/// Records of the CI subset the engine refuses by design (a 4xx naming what it does not
/// support), each with its error class: `file:line`.
const KNOWN: &[(&str, &str)] = &[
    // CREATE UNBOUNDED EXTERNAL TABLE: a query's tasks read a fixed set of files.
    ("limit.slt:549", "unsupported"),
];

/// Records of the CI subset the engine answers wrongly, as single-process DataFusion does
/// (`file:line`, and why): bugs of DataFusion's planner the engine inherits, each checked
/// against the right answer (`DISPUTED` in `tests/src/slt.rs`) so that a fix shows.
const KNOWN_WRONG: &[(&str, &str)] = &[
    // DataFusion's expression simplifier unwraps the cast of a zoned timestamp column
    // into a literal of another zone and shifts the instant: a row 23:00:01Z is found
    // equal to 00:00:01Z. Reached through the view (inlined as DataFusion inlines it),
    // as through the same query written with a CTE. Upstream: apache/datafusion#25095
    // (fix proposed in #25099); with a DataFusion that has it, this entry fails the test
    // until it is removed.
    ("timestamps.slt:4301", "a cast unwrapped across time zones"),
];

/// Fewest records the CI subset must pass: a harness that skipped everything would
/// otherwise pass too.
const CURATED_MIN_PASSED: usize = 3900;

fn files(filter: Option<&str>) -> Vec<PathBuf> {
    // A path to a file of one's own runs that file.
    if let Some(own) = filter.map(std::path::Path::new).filter(|p| p.is_file()) {
        return vec![own.to_path_buf()];
    }
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
    let mut seen = Vec::new();
    for r in &reports {
        for d in &r.details {
            match KNOWN.iter().chain(KNOWN_WRONG).find(|(at, class)| {
                d.starts_with(&format!("{at} ERROR[{class}]"))
                    || (KNOWN_WRONG.contains(&(at, class)) && d.starts_with(&format!("{at} WRONG")))
            }) {
                Some(known) => seen.push(known),
                None => problems.push(d.clone()),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for known in KNOWN.iter().chain(KNOWN_WRONG) {
        assert!(
            seen.contains(&known),
            "{} no longer fails as listed in KNOWN / KNOWN_WRONG: remove it",
            known.0
        );
    }
    let passed: usize = reports.iter().map(|r| r.passed).sum();
    assert!(
        passed >= CURATED_MIN_PASSED,
        "only {passed} records passed (at least {CURATED_MIN_PASSED} did before)"
    );
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
