//! `lambdafusion serve` as a user meets it: beyond loopback it refuses to start without
//! a token; with a token every request must carry it; and the /etc/hostname table of
//! the issue answers 400 without touching the catalog.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn lambdafusion() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lambdafusion"))
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `serve` and waits until it prints that it is serving.
fn serve(dir: &std::path::Path, args: &[&str]) -> Server {
    let mut child = lambdafusion()
        .arg("serve")
        .args(args)
        .current_dir(dir)
        .env_remove("LAMBDAFUSION_TOKEN")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    // Keep reading its log, so that the server never writes into a closed pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("lambdafusion serving on") {
                let _ = ready_tx.send(());
            }
        }
    });
    ready
        .recv_timeout(Duration::from_secs(60))
        .expect("serve started");
    Server(child)
}

#[test]
fn beyond_loopback_without_a_token_serve_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = lambdafusion()
        .args(["serve", "--bind", "0.0.0.0:0"])
        .current_dir(dir.path())
        .env_remove("LAMBDAFUSION_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--token") && stderr.contains("0.0.0.0"),
        "{stderr}"
    );
}

#[tokio::test]
async fn with_a_token_every_request_must_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let _server = serve(
        dir.path(),
        &["--bind", &bind, "--token", "t0ken-of-sixteen-chars"],
    );
    let http = reqwest::Client::new();
    let url = format!("http://{bind}/v1/tables");
    let status = http.get(&url).send().await.unwrap().status();
    assert_eq!(status, 401);
    let status = http
        .get(&url)
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 401);
    let status = http
        .get(&url)
        .bearer_auth("t0ken-of-sixteen-chars")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_table_on_etc_hostname_is_a_400_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let _server = serve(dir.path(), &["--bind", &bind]);
    let http = reqwest::Client::new();
    let response = http
        .post(format!("http://{bind}/v1/queries"))
        .json(&serde_json::json!({
            "sql": "CREATE EXTERNAL TABLE t (l VARCHAR) STORED AS CSV LOCATION '/etc/hostname'"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--allow-path"), "{message}");
    let tables: serde_json::Value = http
        .get(format!("http://{bind}/v1/tables"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tables["tables"], serde_json::json!([]));
}

/// `lambdafusion console --endpoint`: the page from this binary, API calls forwarded
/// with the endpoint's credentials (here a `serve --token`), and only for a page that
/// presents the session token the command printed.
#[tokio::test]
async fn the_console_command_forwards_the_api_with_its_own_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let bind = format!("127.0.0.1:{}", free_port());
    let _server = serve(
        dir.path(),
        &["--bind", &bind, "--token", "endpoint-secret-0123"],
    );
    let refused = lambdafusion()
        .args(["console", "--endpoint", "http://x", "--bind", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("loopback"));

    let console_bind = format!("127.0.0.1:{}", free_port());
    let mut child = lambdafusion()
        .args([
            "console",
            "--endpoint",
            &format!("http://{bind}"),
            "--bind",
            &console_bind,
        ])
        .env("LAMBDAFUSION_TOKEN", "endpoint-secret-0123")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.trim().strip_prefix("http://") {
                let _ = url_tx.send(url.to_string());
            }
        }
    });
    let _console = Server(child);
    let url = url_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("console started");
    let session = url
        .split("#token=")
        .nth(1)
        .expect("the address carries a token")
        .to_string();
    let base = format!("http://{console_bind}");
    let http = reqwest::Client::new();

    let page = http.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("console.js"));
    let anonymous = http.get(format!("{base}/v1/tables")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "no session token, no forwarding");
    let wrong = http
        .get(format!("{base}/v1/tables"))
        .bearer_auth("endpoint-secret-0123")
        .send()
        .await
        .unwrap();
    assert_eq!(
        wrong.status(),
        401,
        "the endpoint's own secret is not the session token"
    );

    let submitted: serde_json::Value = http
        .post(format!("{base}/v1/queries"))
        .bearer_auth(&session)
        .json(&serde_json::json!({"sql": "SELECT 6 * 7 AS answer"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = submitted["id"]
        .as_str()
        .expect("submitted through the console")
        .to_string();
    let status: serde_json::Value = http
        .get(format!("{base}/v1/queries/{id}?wait=10"))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["state"], "succeeded", "{status}");
    let rows: serde_json::Value = http
        .get(format!("{base}/v1/queries/{id}/result"))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rows, serde_json::json!([{"answer": 42}]));
    let missing = http
        .get(format!(
            "{base}/v1/queries/0123456789abcdef0123456789abcdef"
        ))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap();
    assert_eq!(
        missing.status(),
        404,
        "the endpoint's errors come through as they are"
    );
    let body: serde_json::Value = missing.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("0123456789abcdef0123456789abcdef") && message.contains("not found"),
        "{message}"
    );
}
