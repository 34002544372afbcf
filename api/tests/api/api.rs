//! The HTTP API: the happy path in every result format, and every kind of bad input
//! answered with a clear 4xx (never a 500, never a panic).

use crate::common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use lambdafusion::EngineConfig;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};
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
                .with_min_scan_bytes_per_task(1)
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
    let response = lambdafusion_api::router(engine.services().clone())
        .oneshot(request)
        .await
        .unwrap();
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
    lambdafusion_embedded::verify::compare(&expected, &batches, true).unwrap();

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
            post(r#"{"sql": "SELECT CAST('x' AS INT)"}"#),
            StatusCode::BAD_REQUEST,
            "Cast error",
        ),
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
            "no write location is configured",
        ),
        (
            post(r#"{"sql": "COPY (SELECT 1 AS a) TO '/tmp/x/' STORED AS PARQUET"}"#),
            StatusCode::BAD_REQUEST,
            "outside the locations statements may write to",
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
            // 180 KB of SQL whose 200 columns' names make a result schema that, with
            // the SQL, no job record can hold (before: stored embedded, a 500 on
            // DynamoDB, past its 400 KB item limit).
            post(
                serde_json::json!({
                    "sql": format!(
                        "SELECT {}",
                        (0..200)
                            .map(|i| format!("1 AS c{i}_{}", "n".repeat(900)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .to_string(),
            ),
            StatusCode::PAYLOAD_TOO_LARGE,
            "result schema (200 columns",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_lists_queries_newest_first_a_page_at_a_time() {
    let (engine, _dir) = engine().await;
    let mut ids = Vec::new();
    for n in 0..5 {
        let id = submit(&engine, &format!("SELECT {n} AS n")).await;
        wait(&engine, &id).await;
        ids.push(id);
        // Distinct submission times, so that newest-first is one order.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut uri = "/v1/queries?limit=2".to_string();
    loop {
        let (status, body) = call(&engine, get(&uri)).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let page = json(&body);
        let queries = page["queries"].as_array().unwrap();
        assert!(queries.len() <= 2);
        for q in queries {
            seen.push(q["id"].as_str().unwrap().to_string());
            for field in [
                "sql",
                "state",
                "created_ms",
                "elapsed_ms",
                "estimated_cost_usd",
            ] {
                assert!(!q[field].is_null(), "{field} in {q}");
            }
        }
        match page["next"].as_str() {
            Some(next) => uri = format!("/v1/queries?limit=2&next={next}"),
            None => break,
        }
    }
    // The engine's CREATE statements came first, so they are last.
    assert_eq!(seen[..5], ids[..], "newest first, each once");
    let (_, body) = call(&engine, get("/v1/queries?limit=1")).await;
    let first = &json(&body)["queries"][0];
    assert_eq!(first["sql"], "SELECT 4 AS n");
    assert_eq!(
        (first["state"].as_str(), first["result_rows"].as_u64()),
        (Some("succeeded"), Some(1))
    );
    for bad in [
        "limit=0",
        "limit=101",
        "limit=x",
        "next=garbage",
        "next=MDAwMDAwMDAwMDAwMA",
    ] {
        let (status, body) = call(&engine, get(&format!("/v1/queries?{bad}"))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        let message = error_message(&body);
        assert!(
            message.contains("limit") || message.contains("next"),
            "{bad}: {message}"
        );
    }
}

/// The OpenAPI document lists exactly the routes the router serves, with their
/// parameters, and every error the router answers has the documented shape and a
/// documented status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_every_route() {
    let (engine, _dir) = engine().await;
    let (status, body) = call(&engine, get("/v1/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    let doc = json(&body);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "OpenAPI 3.1"
    );
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                operations.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    operations.sort();
    assert_eq!(
        operations,
        [
            "DELETE /v1/queries/{id}",
            "GET /",
            "GET /console.css",
            "GET /console.js",
            "GET /health",
            "GET /v1/openapi.json",
            "GET /v1/queries",
            "GET /v1/queries/{id}",
            "GET /v1/queries/{id}/result",
            "GET /v1/queries/{id}/result/objects",
            "GET /v1/tables",
            "POST /v1/queries",
        ]
    );
    let params = |path: &str, method: &str| -> Vec<String> {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| p["name"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(params("/v1/queries", "get"), ["limit", "next"]);
    assert_eq!(params("/v1/queries/{id}", "get"), ["id", "wait"]);
    assert_eq!(params("/v1/queries/{id}/result", "get"), ["id", "format"]);
    assert_eq!(
        params("/v1/queries/{id}/result/objects", "get"),
        ["id", "expires"]
    );
    assert!(doc["components"]["schemas"]["JobStatus"]["properties"]["stages"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());

    // Each route, called: served (not the fallback) and, when it fails, with a status the
    // document lists for it and the documented error body.
    let id = submit(&engine, "SELECT 1 AS x").await;
    wait(&engine, &id).await;
    let calls: Vec<(&str, &str, String, Option<&str>)> = vec![
        ("get", "/", "/".into(), None),
        ("get", "/console.js", "/console.js".into(), None),
        ("get", "/console.css", "/console.css".into(), None),
        ("get", "/health", "/health".into(), None),
        ("get", "/v1/openapi.json", "/v1/openapi.json".into(), None),
        ("get", "/v1/tables", "/v1/tables".into(), None),
        ("get", "/v1/queries", "/v1/queries?limit=nope".into(), None),
        (
            "post",
            "/v1/queries",
            "/v1/queries".into(),
            Some(r#"{"sql": "SELEC 1"}"#),
        ),
        (
            "post",
            "/v1/queries",
            "/v1/queries".into(),
            Some(r#"{"sql": "SELECT 1"}"#),
        ),
        (
            "get",
            "/v1/queries/{id}",
            format!("/v1/queries/{id}?wait=-1"),
            None,
        ),
        ("get", "/v1/queries/{id}", "/v1/queries/nope".into(), None),
        (
            "get",
            "/v1/queries/{id}/result",
            format!("/v1/queries/{id}/result?format=xml"),
            None,
        ),
        (
            "get",
            "/v1/queries/{id}/result",
            format!("/v1/queries/{id}/result?format=csv"),
            None,
        ),
        (
            "get",
            "/v1/queries/{id}/result/objects",
            format!("/v1/queries/{id}/result/objects"),
            None,
        ),
        (
            "delete",
            "/v1/queries/{id}",
            "/v1/queries/nope".into(),
            None,
        ),
        (
            "delete",
            "/v1/queries/{id}",
            format!("/v1/queries/{id}"),
            None,
        ),
    ];
    for (method, path, uri, body) in calls {
        let request = Request::builder()
            .method(method.to_uppercase().as_str())
            .uri(&uri)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let (status, body) = call(&engine, request).await;
        let documented = doc["paths"][path][method]["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("{method} {path} is not documented"));
        assert!(
            documented.contains_key(status.as_str()),
            "{method} {uri} answered {status}, which the document does not list for it: {}",
            String::from_utf8_lossy(&body)
        );
        if !status.is_success() {
            let error = json(&body);
            assert_eq!(error["error"]["status"], status.as_u16(), "{error}");
            assert!(error["error"]["message"].is_string(), "{error}");
            let schema =
                &documented[status.as_str()]["content"]["application/json"]["schema"]["$ref"];
            assert_eq!(
                schema, "#/components/schemas/ErrorBody",
                "{method} {path} {status}"
            );
        }
    }
    let (status, body) = call(&engine, get("/v1/nope")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error_message(&body).contains("/v1/openapi.json"));
    // A method a route does not take: the same error body, not axum's empty 405.
    let (status, body) = call(
        &engine,
        Request::put("/v1/tables").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(error_message(&body).contains("/v1/openapi.json"));

    // Behind `serve --token`, every API operation answers 401 without the token, as the
    // document says (the console's page and assets stay open: they hold no data).
    let guarded = lambdafusion_api::with_bearer_token(
        lambdafusion_api::router(engine.services().clone()),
        "s3cret".into(),
    );
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in ["get", "post", "delete"] {
            let Some(operation) = item.get(method) else {
                continue;
            };
            let uri = path.replace("{id}", &id);
            let request = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(&uri)
                .body(Body::empty())
                .unwrap();
            let response = guarded.clone().oneshot(request).await.unwrap();
            let status = response.status();
            let console = ["/", "/console.js", "/console.css"].contains(&path.as_str());
            if console {
                assert_eq!(status, StatusCode::OK, "{method} {path}");
                assert!(operation.get("security").is_none(), "{method} {path}");
                continue;
            }
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
            assert_eq!(
                operation["responses"]["401"]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorBody",
                "{method} {path}"
            );
            assert!(operation["responses"]["500"].is_object(), "{method} {path}");
            assert_eq!(
                operation["security"],
                serde_json::json!([{}, {"bearer": []}]),
                "{method} {path}: the token is optional (none on loopback)"
            );
        }
    }
}

/// A waiter wakes on the job's own change, not on a polling schedule: however long the
/// job runs, waiting for it reads the job item about twice (it read it at 0, 5, 15, 35,
/// 75, 155, 315 ms ... before, noticing the end up to 250 ms late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_when_the_job_ends() {
    use lambdafusion::state::intercept::{Action, Hook, Intercepted};
    use lambdafusion::state::{JobState, JobStore};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (services, store) = lambdafusion_embedded::in_memory_services(
        std::sync::Arc::new(lambdafusion_embedded::LocalInvoker::new(1, 8).unwrap()),
        lambdafusion::EngineConfig::default(),
    )
    .unwrap();
    let reads = std::sync::Arc::new(AtomicUsize::new(0));
    let counting = reads.clone();
    let hook: Hook = std::sync::Arc::new(move |call| {
        if call.op == "get_job" {
            counting.fetch_add(1, Ordering::SeqCst);
        }
        Action::Proceed
    });
    let services = lambdafusion::Services {
        store: std::sync::Arc::new(Intercepted::new(std::sync::Arc::new(store.clone()), hook)),
        ..services
    };
    let job = lambdafusion::state::JobRecord {
        task_limit: None,
        job_id: "0123456789abcdef0123456789abcdef".into(),
        sql: "SELECT 1".into(),
        kind: lambdafusion::state::JobKind::Query,
        state: JobState::Running,
        stage_count: 0,
        result_schema: lambdafusion::plan::encode_schema(
            &datafusion::arrow::datatypes::Schema::empty(),
        )
        .unwrap(),
        owner: "local".into(),
        created_ms: lambdafusion::time::now_ms(),
        deadline_ms: None,
        finished_ms: None,
        error: None,
        requests: Default::default(),
        write: None,
        expires_at: u64::MAX / 2,
    };
    store
        .create_job(&lambdafusion::state::NewJob {
            job,
            stages: vec![],
            plans: vec![],
            tasks: vec![],
        })
        .await
        .unwrap();
    let waiter = {
        let services = services.clone();
        tokio::spawn(async move {
            lambdafusion::status::wait_for_status(
                &services,
                "0123456789abcdef0123456789abcdef",
                std::time::Duration::from_secs(10),
            )
            .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    store
        .finish_job(
            "0123456789abcdef0123456789abcdef",
            JobState::Succeeded,
            None,
            lambdafusion::time::now_ms(),
        )
        .await
        .unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(2), waiter)
        .await
        .expect("the waiter woke")
        .unwrap()
        .unwrap();
    assert_eq!(status.state, "succeeded");
    let n = reads.load(Ordering::SeqCst);
    assert!(n <= 3, "{n} reads of the job item while waiting 600 ms");
}
