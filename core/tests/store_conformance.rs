//! The job store's one specification (`lambdafusion::state::conformance`) run against
//! the embedded store, in memory and on a file. The same suite runs against DynamoDB in
//! `tests/tests/store_conformance.rs`.

use lambdafusion::state::{conformance, EmbeddedStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_follows_the_specification() {
    let store = EmbeddedStore::in_memory().unwrap();
    let cases = conformance::run_all(&store).await;
    assert!(cases.len() >= 9, "{cases:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_on_a_file_follows_the_specification() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("state.redb")).unwrap();
    conformance::run_all(&store).await;
}
