//! The HTTP API: the happy path in every result format, and every kind of bad input
//! answered with a clear 4xx (never a 500, never a panic).

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use lambdafusion::embedded::{Embedded, EmbeddedOptions};
use lambdafusion::EngineConfig;
use serde_json::Value;
use tower::ServiceExt;

async fn engine() -> (Arc<Embedded>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    common::write_tables(dir.path()).await;
    let engine = Embedded::start(EmbeddedOptions {
        data_dir: None,
        config: common::allow(
            EngineConfig::default()
                .with_bytes_per_task(1)
                .with_max_tasks_per_stage(3),
            dir.path(),
        ),
        slots: 4,
        ..EmbeddedOptions::default()
    })
    .await
    .unwrap();
    for sql in common::create_statements(dir.path()) {
        engine.sql(&sql).await.unwrap();
    }
    (engine, dir)
}

async fn call(engine: &Embedded, request: Request<Body>) -> (StatusCode, Vec<u8>) {
    let response = engine.router().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, body)
}

fn post(body: impl Into<Body>) -> Request<Body> {
    Request::post("/v1/queries")
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

fn json(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

fn error_message(body: &[u8]) -> String {
    json(body)["error"]["message"].as_str().unwrap().to_string()
}

async fn submit(engine: &Embedded, sql: &str) -> String {
    let (status, body) = call(engine, post(serde_json::json!({ "sql": sql }).to_string())).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    json(&body)["id"].as_str().unwrap().to_string()
}

async fn wait(engine: &Embedded, id: &str) -> Value {
    let (status, body) = call(engine, get(&format!("/v1/queries/{id}?wait=10"))).await;
    assert_eq!(status, StatusCode::OK);
    json(&body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_through_the_api_in_every_format() {
    let (engine, dir) = engine().await;
    let sql = "SELECT k, count(*) AS n FROM facts WHERE k < 5 GROUP BY k ORDER BY k";
    let id = submit(&engine, sql).await;
    let status = wait(&engine, &id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result_rows"], 5);
    assert!(status["stages"].as_array().unwrap().len() >= 2);
    assert!(status["stages"][0]["tasks_done"] == status["stages"][0]["tasks"]);

    let (code, body) = call(&engine, get(&format!("/v1/queries/{id}/result"))).await;
    assert_eq!(code, StatusCode::OK);
    let rows = json(&body);
    assert_eq!(rows.as_array().unwrap().len(), 5);
    assert_eq!(rows[0]["k"], 0);

    let (code, body) = call(&engine, get(&format!("/v1/queries/{id}/result?format=csv"))).await;
    assert_eq!(code, StatusCode::OK);
    let csv = String::from_utf8(body).unwrap();
    assert_eq!(csv.lines().next(), Some("k,n"));
    assert_eq!(csv.lines().count(), 6);

    let (code, body) = call(
        &engine,
        get(&format!("/v1/queries/{id}/result?format=ndjson")),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(String::from_utf8(body).unwrap().lines().count(), 5);

    let (code, body) = call(
        &engine,
        get(&format!("/v1/queries/{id}/result?format=arrow")),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
            .unwrap();
    let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    let expected = common::reference(dir.path(), sql).await;
    lambdafusion::verify::compare(&expected, &batches, true).unwrap();

    let (code, body) = call(
        &engine,
        get(&format!("/v1/queries/{id}/result?format=parquet")),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(&body[..4], b"PAR1");

    // Embedded results are read directly; there is nothing to presign.
    let (code, body) = call(&engine, get(&format!("/v1/queries/{id}/result/objects"))).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(error_message(&body).contains("presign"));

    let (code, body) = call(&engine, get("/v1/tables")).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(json(&body)["tables"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_result_keeps_its_schema() {
    let (engine, _dir) = engine().await;
    let id = submit(&engine, "SELECT id, s FROM facts WHERE id < 0").await;
    assert_eq!(wait(&engine, &id).await["state"], "succeeded");
    let (code, body) = call(&engine, get(&format!("/v1/queries/{id}/result?format=csv"))).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        String::from_utf8(body).unwrap().trim(),
        "id,s",
        "header even without rows"
    );
    let (code, body) = call(&engine, get(&format!("/v1/queries/{id}/result"))).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(json(&body), serde_json::json!([]));
    let (_, body) = call(
        &engine,
        get(&format!("/v1/queries/{id}/result?format=arrow")),
    )
    .await;
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
            .unwrap();
    assert_eq!(reader.schema().fields().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_4xx() {
    let (engine, _dir) = engine().await;
    let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
        (
            post(r#"{"sql": "SELEC 1"}"#),
            StatusCode::BAD_REQUEST,
            "SELEC",
        ),
        (
            post(r#"{"sql": "SELECT * FROM nowhere"}"#),
            StatusCode::BAD_REQUEST,
            "nowhere",
        ),
        (
            post(r#"{"sql": "SELECT nope FROM facts"}"#),
            StatusCode::BAD_REQUEST,
            "nope",
        ),
        (post(r#"{"sql": ""}"#), StatusCode::BAD_REQUEST, "empty"),
        (
            post(r#"{"sql": "SELECT 1; SELECT 2"}"#),
            StatusCode::BAD_REQUEST,
            "single",
        ),
        (
            post(r#"{"sql": "#),
            StatusCode::BAD_REQUEST,
            "invalid request body",
        ),
        (
            post(r#"{"query": "SELECT 1"}"#),
            StatusCode::BAD_REQUEST,
            "sql",
        ),
        (
            post("not json"),
            StatusCode::BAD_REQUEST,
            "invalid request body",
        ),
        (
            Request::post("/v1/queries")
                .body(Body::from(r#"{"sql":"SELECT 1"}"#))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "Content-Type",
        ),
        (
            post(format!(
                r#"{{"sql": "SELECT '{}'"}}"#,
                "x".repeat(2 * 1024 * 1024)
            )),
            StatusCode::PAYLOAD_TOO_LARGE,
            "",
        ),
        (
            post(r#"{"sql": "INSERT INTO facts VALUES (1, 1, 1.0, 'x')"}"#),
            StatusCode::BAD_REQUEST,
            "not supported",
        ),
        (
            post(r#"{"sql": "CREATE TABLE t AS SELECT 1"}"#),
            StatusCode::BAD_REQUEST,
            "not supported",
        ),
        (
            post(r#"{"sql": "DROP TABLE missing"}"#),
            StatusCode::BAD_REQUEST,
            "does not exist",
        ),
        (
            post(
                r#"{"sql": "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/definitely/not/here/'"}"#,
            ),
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            get("/v1/queries/unknown-id"),
            StatusCode::NOT_FOUND,
            "not found",
        ),
        (
            get("/v1/queries/unknown-id/result"),
            StatusCode::NOT_FOUND,
            "not found",
        ),
        (
            Request::delete("/v1/queries/unknown-id")
                .body(Body::empty())
                .unwrap(),
            StatusCode::NOT_FOUND,
            "not found",
        ),
        (
            get("/v1/queries/x?wait=soon"),
            StatusCode::BAD_REQUEST,
            "wait",
        ),
        (
            get("/v1/queries/x?wait=NaN"),
            StatusCode::BAD_REQUEST,
            "wait must be a number of seconds from 0 to 20",
        ),
        (
            get("/v1/queries/x?wait=-1"),
            StatusCode::BAD_REQUEST,
            "wait",
        ),
        (
            get("/v1/queries/x?wait=inf"),
            StatusCode::BAD_REQUEST,
            "wait",
        ),
        (
            get("/v1/queries/x?wait=1e309"),
            StatusCode::BAD_REQUEST,
            "wait",
        ),
        (
            get("/v1/queries/x?wait=21"),
            StatusCode::BAD_REQUEST,
            "wait",
        ),
        (
            post(format!(
                r#"{{"sql": "SELECT '{}'"}}"#,
                "x".repeat(300 * 1024)
            )),
            StatusCode::PAYLOAD_TOO_LARGE,
            "SQL text",
        ),
        (
            post(r#"{"sql": "SELECT 1", "max_seconds": 0}"#),
            StatusCode::BAD_REQUEST,
            "max_seconds",
        ),
        (
            post(r#"{"sql": "SELECT 1", "max_seconds": 1e9}"#),
            StatusCode::BAD_REQUEST,
            "max_query_seconds",
        ),
        (
            get("/v2/anything"),
            StatusCode::NOT_FOUND,
            "no such endpoint",
        ),
    ];
    let shuffle = engine.services().shuffle_store().unwrap();
    let objects = |store: std::sync::Arc<dyn object_store::ObjectStore>| async move {
        use futures::StreamExt;
        store.list(None).count().await
    };
    let stored_before = objects(shuffle.clone()).await;
    let active_before = engine
        .services()
        .store
        .active_jobs(None, 100)
        .await
        .unwrap();
    for (request, expected, needle) in cases {
        let what = format!("{} {}", request.method(), request.uri());
        let (status, body) = call(&engine, request).await;
        assert_eq!(
            status,
            expected,
            "{what}: {}",
            String::from_utf8_lossy(&body)
        );
        if !needle.is_empty() {
            let message = error_message(&body);
            assert!(
                message.contains(needle),
                "{what}: {message:?} lacks {needle:?}"
            );
        }
    }
    // Nothing was written by a refused request.
    assert_eq!(
        objects(shuffle).await,
        stored_before,
        "no result objects written"
    );
    assert_eq!(
        engine
            .services()
            .store
            .active_jobs(None, 100)
            .await
            .unwrap(),
        active_before
    );
    // Nothing stored was harmed: the catalog and queries still work.
    let id = submit(&engine, "SELECT count(*) AS n FROM facts").await;
    assert_eq!(wait(&engine, &id).await["state"], "succeeded");
    let (_, body) = call(&engine, get(&format!("/v1/queries/{id}/result"))).await;
    assert_eq!(json(&body)[0]["n"], 30000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_of_unfinished_or_failed_queries_are_conflicts() {
    let (engine, _dir) = engine().await;
    let id = submit(&engine, "SELECT CAST(concat('x', s) AS INT) FROM facts").await;
    let status = wait(&engine, &id).await;
    assert_eq!(status["state"], "failed");
    assert!(status["error"]
        .as_str()
        .unwrap()
        .to_lowercase()
        .contains("cast"));
    let (code, body) = call(&engine, get(&format!("/v1/queries/{id}/result"))).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(error_message(&body).contains("failed"));

    let id = submit(&engine, "SELECT count(*) FROM facts").await;
    wait(&engine, &id).await;
    let (code, body) = call(&engine, get(&format!("/v1/queries/{id}/result?format=xml"))).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(error_message(&body).contains("xml"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_answer_at_once() {
    let (engine, _dir) = engine().await;
    let id = submit(&engine, "SHOW TABLES").await;
    let (_, body) = call(&engine, get(&format!("/v1/queries/{id}/result"))).await;
    let tables: Vec<String> = json(&body)
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["table_schema"] == "public")
        .map(|r| r["table_name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tables, vec!["dims", "facts"]);

    let id = submit(&engine, "EXPLAIN SELECT k, count(*) FROM facts GROUP BY k").await;
    let (_, body) = call(&engine, get(&format!("/v1/queries/{id}/result"))).await;
    let plans = json(&body);
    let distributed = plans
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["plan_type"] == "distributed_plan")
        .unwrap();
    let text = distributed["plan"].as_str().unwrap();
    assert!(
        text.contains("Stage 0") && text.contains("hash shuffle from stage 0"),
        "{text}"
    );

    let id = submit(&engine, "DESCRIBE facts").await;
    let (_, body) = call(&engine, get(&format!("/v1/queries/{id}/result"))).await;
    assert_eq!(json(&body).as_array().unwrap().len(), 4);

    let id = submit(&engine, "DROP TABLE dims").await;
    assert_eq!(wait(&engine, &id).await["state"], "succeeded");
    let (code, body) = call(&engine, post(r#"{"sql": "SELECT * FROM dims"}"#)).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(error_message(&body).contains("dims"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_through_the_api() {
    let (engine, _dir) = engine().await;
    let id = submit(
        &engine,
        "SELECT f.id, d.label FROM facts f JOIN dims d ON f.k = d.k ORDER BY f.s",
    )
    .await;
    let request = Request::delete(format!("/v1/queries/{id}"))
        .body(Body::empty())
        .unwrap();
    let (code, body) = call(&engine, request).await;
    assert_eq!(code, StatusCode::OK);
    let state = json(&body)["state"].as_str().unwrap().to_string();
    // It may have finished before the cancel arrived; either way it is final now.
    assert!(state == "cancelled" || state == "succeeded", "{state}");
    let status = wait(&engine, &id).await;
    assert_eq!(status["state"], state.as_str());
}
