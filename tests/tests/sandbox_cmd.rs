//! `comb sandbox` end to end: the built binary starts clusters, writes the kubeconfig, prints
//! `ready`, serves clients through that kubeconfig, and stops cleanly on SIGTERM.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;

const DEADLINE: Duration = Duration::from_secs(30);

/// Starts `comb sandbox` with `args` and reads its stdout up to `ready`; returns the lines before.
async fn start(args: &[&str]) -> (Child, Vec<String>) {
    let mut child = Command::new(comb_testkit::bin::comb_path())
        .arg("sandbox")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("comb starts");
    let stdout = child.stdout.take().expect("a stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut before = Vec::new();
    let reading = async {
        while let Some(line) = lines.next_line().await.expect("stdout is readable") {
            if line == "ready" {
                return;
            }
            before.push(line);
        }
        panic!("comb sandbox ended before `ready`; it printed {before:?}");
    };
    timeout(DEADLINE, reading)
        .await
        .expect("`ready` within the deadline");
    (child, before)
}

async fn client(kubeconfig: &Path, context: &str) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("the kubeconfig parses");
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("the context is usable");
    kube::Client::try_from(config).expect("a client")
}

/// A plain HTTP/1.1 GET, body included in the returned text.
async fn http_get(address: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("the server accepts");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request is sent");
    let mut response = String::new();
    timeout(DEADLINE, stream.read_to_string(&mut response))
        .await
        .expect("an answer within the deadline")
        .expect("the answer is readable");
    response
}

/// Sends SIGTERM and expects a clean exit.
async fn stop(mut child: Child) {
    let pid = child.id().expect("still running").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(killed.success());
    let status = timeout(DEADLINE, child.wait())
        .await
        .expect("comb stops within the deadline")
        .expect("comb exits");
    assert!(status.success(), "comb sandbox exited with {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_clusters_through_its_kubeconfig_until_terminated() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("sandbox.kubeconfig");
    let path = kubeconfig.to_str().expect("a UTF-8 path");
    let (child, printed) = start(&[
        "--clusters",
        "prod,dev",
        "--context",
        "staging=prod/staging",
        "--kubeconfig",
        path,
        "--pod-ready-delay",
        "0",
    ])
    .await;
    let urls: Vec<&String> = printed
        .iter()
        .filter(|l| l.starts_with("cluster "))
        .collect();
    assert_eq!(urls.len(), 2, "{printed:?}");
    assert!(
        urls[0].starts_with("cluster prod http://127.0.0.1:"),
        "{printed:?}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("kubeconfig ") && l.ends_with("sandbox.kubeconfig"))
    );
    assert!(
        kubeconfig.is_file(),
        "the kubeconfig exists once `ready` is printed"
    );

    // The extra context's namespace exists, on prod only.
    let prod = client(&kubeconfig, "staging").await;
    let names: Vec<String> = Api::<Namespace>::all(prod)
        .list(&ListParams::default())
        .await
        .expect("namespaces of prod")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"staging".to_string()), "{names:?}");
    let dev = client(&kubeconfig, "dev").await;
    let dev_staging = Api::<Namespace>::all(dev)
        .get_opt("staging")
        .await
        .expect("a read");
    assert!(dev_staging.is_none());

    // The test controls answer on each server.
    let dev_address = printed
        .iter()
        .find_map(|l| l.strip_prefix("cluster dev http://"))
        .expect("dev's URL");
    let counts = http_get(dev_address, "/_sandbox/requests").await;
    assert!(counts.contains("get namespaces"), "{counts}");

    stop(child).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_with_its_own_ca() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kc");
    let path = kubeconfig.to_str().expect("a UTF-8 path");
    let (child, printed) = start(&["--https", "--kubeconfig", path]).await;
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("cluster sandbox https://127.0.0.1:")),
        "{printed:?}"
    );
    let client = client(&kubeconfig, "sandbox").await;
    let default = Api::<Namespace>::all(client)
        .get("default")
        .await
        .expect("HTTPS with the CA");
    assert_eq!(default.metadata.name.as_deref(), Some("default"));
    stop(child).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_bad_arguments_as_usage_errors() {
    let output = Command::new(comb_testkit::bin::comb_path())
        .args([
            "sandbox",
            "--context",
            "staging",
            "--pod-ready-delay",
            "soon",
        ])
        .output()
        .await
        .expect("comb runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("NAME=CLUSTER[/NAMESPACE]"), "{stderr}");
}
