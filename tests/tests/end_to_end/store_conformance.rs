//! The job store's one specification (`lambdafusion_tests::conformance`) run against
//! the embedded store, in memory and on a file. The same suite runs against DynamoDB in
//! `tests/tests/store_on_the_stack.rs`.

use lambdafusion_embedded::EmbeddedStore;
use lambdafusion_tests::conformance;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_follows_the_specification() {
    let store = EmbeddedStore::in_memory().unwrap();
    let cases = conformance::run_all(&store).await;
    // Every public case of the specification is registered (and so ran): the module's
    // `pub async fn`s but `run_all` itself.
    let source = include_str!("../../src/conformance.rs");
    let mut written: Vec<&str> = source
        .lines()
        .filter_map(|l| l.strip_prefix("pub async fn "))
        .filter_map(|l| l.split('(').next())
        .filter(|name| *name != "run_all")
        .collect();
    written.sort_unstable();
    let mut registered = cases.clone();
    registered.sort_unstable();
    assert_eq!(registered, written, "cases written and cases run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_on_a_file_follows_the_specification() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("state.redb")).unwrap();
    conformance::run_all(&store).await;
}
