//! Test hooks stay out of deployable functions: fault injection and the crash-file hook
//! (`lambdafusion_aws::test_hooks`) exist only with the `test-hooks` feature, which this
//! crate turns on for every workspace build and `scripts/package` (building the two
//! functions alone) never does. `scripts/package` also fails if a zip's binary names
//! either hook's variable; this test holds the feature wiring that makes that so.

use lambdafusion_tests::cargo_tree;

/// The features of `lambdafusion-aws` as cargo resolves them when building `package`
/// alone (what `cargo lambda build -p scheduler-fn -p executor-fn` does) or the workspace.
fn aws_features(selection: &[&str]) -> String {
    let args = [
        "-e",
        "features",
        "-i",
        "lambdafusion-aws",
        "--prefix",
        "none",
    ];
    cargo_tree(&[&args[..], selection].concat())
}

#[test]
fn the_functions_built_alone_have_no_test_hooks() {
    for function in ["scheduler-fn", "executor-fn"] {
        let tree = aws_features(&["-p", function]);
        assert!(
            tree.contains(function),
            "{function} uses lambdafusion-aws:\n{tree}"
        );
        assert!(
            !tree.contains("feature \"test-hooks\""),
            "{function} built alone would carry the test hooks:\n{tree}"
        );
    }
}

#[test]
fn workspace_builds_for_the_local_stack_have_them() {
    let tree = aws_features(&["--workspace"]);
    assert!(
        tree.contains("lambdafusion-aws feature \"test-hooks\""),
        "the local stack's functions (target/debug) need the hooks:\n{tree}"
    );
}
