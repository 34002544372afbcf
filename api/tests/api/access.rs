//! Safe by default, through the HTTP API of the embedded engine: table locations outside
//! the allowed directories (and the engine's own files) are refused and never stored;
//! callers see only their own queries; catalog writers; the bearer token; a saturated
//! engine's 503; the query deadline; a task's memory pool; an incomplete result.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use lambdafusion::access::Caller;
use lambdafusion::dispatch::{InvocationState, TaskSpec};
use lambdafusion::state::{
    JobKind, JobRecord, JobState, NewJob, StageRecord, StageState, TaskOutput, TaskRecord,
    TaskState,
};
use lambdafusion::EngineConfig;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};
use object_store::ObjectStoreExt;
use serde_json::Value;
use tower::ServiceExt;

/// An engine on a data directory, allowed to read `allowed`.
async fn engine(
    config: EngineConfig,
    data: &std::path::Path,
    allowed: &std::path::Path,
) -> Arc<Embedded> {
    Embedded::start(EmbeddedOptions {
        data_dir: Some(data.to_path_buf()),
        config: common::allow(config, allowed),
        slots: 2,
        ..EmbeddedOptions::default()
    })
    .await
    .unwrap()
}

/// The router with each request's caller taken from an `x-caller` header, as the
/// scheduler function takes it from API Gateway's request context.
fn as_callers(router: axum::Router) -> axum::Router {
    router.layer(axum::middleware::from_fn(
        |mut request: axum::extract::Request, next: axum::middleware::Next| async move {
            if let Some(caller) = request
                .headers()
                .get("x-caller")
                .and_then(|v| v.to_str().ok())
                .map(|v| Caller(v.to_string()))
            {
                request.extensions_mut().insert(caller);
            }
            next.run(request).await
        },
    ))
}

async fn call(router: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let mut value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let (Some(after), Value::Object(map)) = (retry_after, &mut value) {
        map.insert("retry_after".into(), Value::String(after));
    }
    (status, value)
}

fn post(caller: &str, body: Value) -> Request<Body> {
    Request::post("/v1/queries")
        .header("content-type", "application/json")
        .header("x-caller", caller)
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn get(caller: &str, uri: &str) -> Request<Body> {
    Request::get(uri)
        .header("x-caller", caller)
        .body(Body::empty())
        .unwrap()
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn create(name: &str, location: &str) -> Value {
    serde_json::json!({"sql": format!("CREATE EXTERNAL TABLE {name} (l VARCHAR) STORED AS CSV LOCATION '{location}'")})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locations_outside_the_allowed_directories_are_refused_and_never_stored() {
    let data = tempfile::tempdir().unwrap();
    let allowed = tempfile::tempdir().unwrap();
    std::fs::write(allowed.path().join("ok.csv"), "l\nfine\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", allowed.path().join("escape.csv")).unwrap();
    std::os::unix::fs::symlink("/etc", allowed.path().join("etc")).unwrap();
    let engine = engine(EngineConfig::default(), data.path(), allowed.path()).await;
    let router = lambdafusion_api::router(engine.services().clone());
    let refusals = [
        "/etc/hostname".to_string(),
        "file:///etc/hostname".to_string(),
        "/proc/self/environ".to_string(),
        format!("{}/../", allowed.path().display()),
        format!("{}/escape.csv", allowed.path().display()),
        format!("{}/etc/", allowed.path().display()),
        format!(
            "{}/shuffle/",
            std::fs::canonicalize(data.path()).unwrap().display()
        ),
        format!(
            "{}/state.redb",
            std::fs::canonicalize(data.path()).unwrap().display()
        ),
    ];
    for (i, location) in refusals.iter().enumerate() {
        let (status, body) = call(&router, post("local", create(&format!("t{i}"), location))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{location}: {body}");
        let text = message(&body);
        assert!(
            text.contains("--allow-path") || text.contains("own shuffle"),
            "{location}: the refusal names the setting: {text}"
        );
    }
    assert!(
        engine
            .services()
            .store
            .list_tables()
            .await
            .unwrap()
            .is_empty(),
        "nothing was stored"
    );
    // Inside the allowed directory: fine.
    let ok = format!("{}/ok.csv", allowed.path().display());
    let (status, body) = call(&router, post("local", create("ok", &ok))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = engine.submit("SELECT l FROM ok").await.unwrap();
    let status = engine.wait(&id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(status.state, "succeeded", "{status:?}");
    // A table stored before the policy changed cannot be read either.
    let mut sneaky = engine
        .services()
        .store
        .get_table("ok")
        .await
        .unwrap()
        .unwrap();
    sneaky.name = "sneaky".into();
    sneaky.locations = vec!["file:///etc/hostname".into()];
    engine
        .services()
        .store
        .put_table(&sneaky, false)
        .await
        .unwrap();
    let (status, body) = call(
        &router,
        post("local", serde_json::json!({"sql": "SELECT * FROM sneaky"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("cannot be read"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_confined_file_system_stops_what_the_sql_layer_lets_through() {
    // Even with the location check bypassed, the embedded file store refuses paths
    // outside its roots: the last line of defence.
    let data = tempfile::tempdir().unwrap();
    let allowed = tempfile::tempdir().unwrap();
    let engine = engine(EngineConfig::default(), data.path(), allowed.path()).await;
    let store = engine
        .services()
        .runtime
        .object_store(
            datafusion::execution::object_store::ObjectStoreUrl::parse("file://").unwrap(),
        )
        .unwrap();
    let err = store
        .get(&object_store::path::Path::from("etc/hostname"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::PermissionDenied { .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_see_only_their_own_queries_unless_admins() {
    let data = tempfile::tempdir().unwrap();
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let mut config = EngineConfig::default();
    config.access.admins = vec!["root".into()];
    config.access.catalog_writers = Some(vec!["alice".into()]);
    let engine = engine(config, data.path(), tables.path()).await;
    let router = as_callers(lambdafusion_api::router(engine.services().clone()));
    for sql in common::create_statements(tables.path()) {
        let (status, body) = call(&router, post("bob", serde_json::json!({ "sql": sql }))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(
            message(&body).contains("LAMBDAFUSION_CATALOG_WRITERS"),
            "{body}"
        );
        let (status, body) = call(&router, post("alice", serde_json::json!({ "sql": sql }))).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let (status, body) = call(
        &router,
        post("bob", serde_json::json!({"sql": "DROP TABLE dims"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Views are the catalog's too: only its writers create or drop one.
    let view = "CREATE VIEW few AS SELECT k FROM dims WHERE k < 3";
    let (status, body) = call(&router, post("bob", serde_json::json!({ "sql": view }))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = call(&router, post("alice", serde_json::json!({ "sql": view }))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for sql in [
        "DROP VIEW few",
        "CREATE OR REPLACE VIEW few AS SELECT 1 AS k",
    ] {
        let (status, body) = call(&router, post("bob", serde_json::json!({ "sql": sql }))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{sql}: {body}");
    }

    let (_, body) = call(
        &router,
        post(
            "alice",
            serde_json::json!({"sql": "SELECT count(*) AS n FROM facts"}),
        ),
    )
    .await;
    let id = body["id"].as_str().unwrap().to_string();
    let (status, body) = call(&router, get("alice", &format!("/v1/queries/{id}?wait=10"))).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (StatusCode::OK, Some("succeeded"))
    );
    for uri in [
        format!("/v1/queries/{id}"),
        format!("/v1/queries/{id}/result"),
        format!("/v1/queries/{id}/result/objects"),
    ] {
        let (status, body) = call(&router, get("bob", &uri)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "bob {uri}: {body}");
    }
    let cancel = Request::delete(format!("/v1/queries/{id}"))
        .header("x-caller", "bob")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&router, cancel).await.0, StatusCode::NOT_FOUND);
    let (status, body) = call(&router, get("root", &format!("/v1/queries/{id}/result"))).await;
    assert_eq!(status, StatusCode::OK, "the admin reads it: {body}");
    assert_eq!(body[0]["n"], 30000);
    let (status, _) = call(&router, get("alice", &format!("/v1/queries/{id}/result"))).await;
    assert_eq!(status, StatusCode::OK);

    // The history lists each caller's own queries only.
    let ids = |body: &Value| -> Vec<String> {
        body["queries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, alice) = call(&router, get("alice", "/v1/queries")).await;
    assert_eq!(status, StatusCode::OK, "{alice}");
    assert_eq!(ids(&alice).first(), Some(&id), "alice's newest query first");
    assert_eq!(alice["queries"][0]["result_rows"], 1);
    let (_, bob) = call(&router, get("bob", "/v1/queries")).await;
    assert!(
        !ids(&bob).contains(&id),
        "bob does not see alice's query: {bob}"
    );
    let (_, root) = call(&router, get("root", "/v1/queries")).await;
    assert!(
        !ids(&root).contains(&id),
        "the history is one's own, admin or not"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_guards_every_request() {
    let data = tempfile::tempdir().unwrap();
    let engine = engine(EngineConfig::default(), data.path(), data.path()).await;
    let router = lambdafusion_api::with_bearer_token(
        lambdafusion_api::router(engine.services().clone()),
        "s3cret".into(),
    );
    for auth in [
        None,
        Some("Bearer nope"),
        Some("Bearer s3cre"),
        Some("s3cret"),
    ] {
        let mut request = Request::get("/health");
        if let Some(a) = auth {
            request = request.header("authorization", a);
        }
        let (status, body) = call(&router, request.body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert!(message(&body).contains("bearer token"), "{body}");
    }
    let request = Request::get("/health")
        .header("authorization", "Bearer s3cret")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&router, request).await.0, StatusCode::OK);
}

/// An invoker whose functions are all busy.
#[derive(Debug)]
struct Saturated;

#[async_trait::async_trait]
impl lambdafusion::dispatch::Invoker for Saturated {
    async fn run_task(
        &self,
        _invocation: &lambdafusion::dispatch::TaskInvocation,
    ) -> lambdafusion::Result<()> {
        Ok(())
    }
    async fn dispatch(
        &self,
        _range: &lambdafusion::dispatch::DispatchRange,
    ) -> lambdafusion::Result<()> {
        Ok(())
    }
    async fn wake_scheduler(&self, _job_id: &str) -> lambdafusion::Result<()> {
        Ok(())
    }
    fn saturated(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(2))
    }
}

/// A saturated engine turns new queries away with 503 and `Retry-After` (when one
/// query alone can saturate the embedded engine is the invoker's concern: see
/// `dispatch::local`'s tests, where one query never does).
#[tokio::test]
async fn a_saturated_engine_answers_503_with_retry_after() {
    let (services, _store) = lambdafusion_embedded::in_memory_services(
        std::sync::Arc::new(Saturated),
        EngineConfig::default(),
    )
    .unwrap();
    let router = lambdafusion_api::router(services);
    let (status, body) = call(
        &router,
        post("local", serde_json::json!({"sql": "SELECT 1"})),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(message(&body).contains("try again"), "{body}");
    assert_eq!(body["retry_after"], "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_past_its_deadline_fails_and_its_tasks_stop() {
    let data = tempfile::tempdir().unwrap();
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let mut config = EngineConfig::default().with_max_query_time(Duration::from_secs(30));
    // Small batches: the nested-loop join below works in steps of 256 x 30,000 pairs, and
    // a task notices its job's end between steps.
    config.batch_size = 256;
    let engine = engine(config, data.path(), tables.path()).await;
    for sql in common::create_statements(tables.path()) {
        engine.sql(&sql).await.unwrap();
    }
    let router = lambdafusion_api::router(engine.services().clone());
    // 30,000 x 30,000 rows: far longer than a second.
    let slow = "SELECT count(*) FROM facts a CROSS JOIN facts b WHERE a.v + b.v < 0";
    let started = std::time::Instant::now();
    let (status, body) = call(
        &router,
        post("local", serde_json::json!({"sql": slow, "max_seconds": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let (_, status) = call(&router, get("local", &format!("/v1/queries/{id}?wait=15"))).await;
    assert_eq!(status["state"], "failed", "{status}");
    let error = status["error"].as_str().unwrap();
    assert!(error.contains("time limit of 1 s"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Its running tasks stop at their next batch.
    let snapshot = engine
        .services()
        .store
        .load_job(&id)
        .await
        .unwrap()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let running = snapshot.stages.iter().any(|s| {
            (0..s.tasks).any(|p| {
                matches!(
                    engine.services().invoker.state(&TaskSpec {
                        job_id: id.clone(),
                        stage: s.stage,
                        partition: p,
                        attempt: 1,
                    }),
                    InvocationState::Running { .. } | InvocationState::Queued
                )
            })
        });
        if !running {
            break;
        }
        if std::time::Instant::now() >= deadline {
            let states: Vec<_> = snapshot
                .stages
                .iter()
                .flat_map(|s| (0..s.tasks).map(move |p| (s.stage, p)))
                .map(|(s, p)| {
                    (
                        s,
                        p,
                        engine.services().invoker.state(&TaskSpec {
                            job_id: id.clone(),
                            stage: s,
                            partition: p,
                            attempt: 1,
                        }),
                    )
                })
                .collect();
            let now = engine
                .services()
                .store
                .load_job(&id)
                .await
                .unwrap()
                .unwrap();
            panic!(
                "tasks still running: {states:?} {:?} {:?}",
                now.stages, now.tasks
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_task_runs_within_its_memory_pool() {
    let data = tempfile::tempdir().unwrap();
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let sql = "SELECT s, v FROM facts ORDER BY s DESC";
    // A pool far too small for the sort: refused by the pool, not by the machine.
    let tiny = EngineConfig {
        task_memory_limit: Some(16 * 1024),
        ..EngineConfig::default()
    };
    let engine_tiny = engine(tiny, data.path(), tables.path()).await;
    for create in common::create_statements(tables.path()) {
        engine_tiny.sql(&create).await.unwrap();
    }
    let err = engine_tiny.sql(sql).await.unwrap_err().to_string();
    assert!(err.to_lowercase().contains("resources exhausted"), "{err}");
    drop(engine_tiny);
    // A small pool: the sort spills to the data directory and the result is right.
    let data = tempfile::tempdir().unwrap();
    // (above the sort's 10 MB merge reservation, below what it sorts)
    let small = EngineConfig {
        task_memory_limit: Some(11 * 1024 * 1024),
        ..EngineConfig::default()
    };
    let engine = engine(small, data.path(), tables.path()).await;
    for create in common::create_statements(tables.path()) {
        engine.sql(&create).await.unwrap();
    }
    let out = engine.sql(sql).await.unwrap();
    let expected = common::reference(tables.path(), sql).await;
    lambdafusion_embedded::verify::compare(&expected, &out.batches, true).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_with_missing_task_outputs_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let engine = engine(EngineConfig::default(), data.path(), data.path()).await;
    let store = &engine.services().store;
    let expires_at = u64::MAX / 2;
    let schema =
        lambdafusion::plan::encode_schema(&Arc::new(datafusion::arrow::datatypes::Schema::empty()))
            .unwrap();
    let mut task = TaskRecord::new("short", 0, 0, TaskState::Succeeded, 1, expires_at);
    task.output = Some(TaskOutput {
        attempt: 1,
        object: "x".into(),
        ends: vec![0],
        rows: 0,
        bytes: 0,
        started_ms: 0,
        finished_ms: 0,
        metrics: Vec::new(),
        requests: Default::default(),
        handoff: None,
        cpu: None,
        written: None,
    });
    store
        .create_job(&NewJob {
            job: JobRecord {
                task_limit: None,
                job_id: "short".into(),
                sql: "SELECT 1".into(),
                kind: JobKind::Query,
                state: JobState::Succeeded,
                stage_count: 1,
                result_schema: schema,
                owner: Caller::LOCAL.into(),
                created_ms: 0,
                deadline_ms: None,
                finished_ms: Some(1),
                error: None,
                requests: Default::default(),
                write: None,
                expires_at,
            },
            stages: vec![StageRecord {
                job_id: "short".into(),
                stage: 0,
                state: StageState::Dispatched,
                tasks: 2,
                output_partitions: 1,
                inputs: vec![],
                summary: "two tasks, one committed".into(),
                scan_bytes: vec![],
                switch: None,
                combines: None,
                dispatched_ms: Some(0),
                confirmed_ms: Some(0),
                decision: None,
                expires_at,
            }],
            plans: vec![],
            tasks: vec![task],
        })
        .await
        .unwrap();
    let err = lambdafusion::results::collect(engine.services(), "short")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("1 of 2 task outputs"), "{err}");
}
