//! The crates keep their one job each (docs/design.md, "The layout"): the engine links no
//! HTTP server, database or AWS SDK; the executor function links only the engine and the
//! AWS backends; only `lambdafusion-aws` knows the AWS SDK. Checked on what cargo
//! resolves, so a dependency added in the wrong place fails here, not in a zip.

use lambdafusion_tests::cargo_tree;

/// The crates `selection` links (normal dependencies, features as cargo resolves them).
fn linked(selection: &[&str]) -> Vec<String> {
    let args = ["-e", "normal", "--prefix", "none", "--format", "{p}"];
    let mut names: Vec<String> = cargo_tree(&[&args[..], selection].concat())
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

fn assert_absent(what: &str, crates: &[String], absent: &[&str]) {
    let found: Vec<&String> = crates
        .iter()
        .filter(|c| {
            absent
                .iter()
                .any(|a| c.as_str() == *a || c.starts_with(&format!("{a}-")))
        })
        .collect();
    assert!(found.is_empty(), "{what} links {found:?}");
}

const SERVING: &[&str] = &[
    "axum",
    "utoipa",
    "redb",
    "lambdafusion-api",
    "lambdafusion-embedded",
];

#[test]
fn the_engine_links_no_server_database_or_sdk() {
    let engine = linked(&["-p", "lambdafusion"]);
    assert!(engine.iter().any(|c| c == "datafusion"), "{engine:?}");
    assert_absent("the engine", &engine, SERVING);
    assert_absent(
        "the engine",
        &engine,
        &["aws-sdk", "aws-config", "lambda_runtime"],
    );
}

#[test]
fn the_executor_function_links_only_what_a_task_needs() {
    let executor = linked(&["-p", "executor-fn"]);
    assert!(
        executor.iter().any(|c| c == "lambdafusion-aws"),
        "{executor:?}"
    );
    assert_absent("executor-fn", &executor, SERVING);
}

#[test]
fn only_the_aws_crate_knows_the_sdk() {
    for krate in ["lambdafusion-embedded", "lambdafusion-api"] {
        let crates = linked(&["-p", krate]);
        assert_absent(
            krate,
            &crates,
            &["aws-sdk", "aws-config", "lambdafusion-aws"],
        );
    }
    let api = linked(&["-p", "lambdafusion-api"]);
    assert_absent("the API", &api, &["redb", "lambdafusion-embedded"]);
}
