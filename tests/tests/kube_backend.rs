//! The real-Kubernetes backend through the binary: `comb sandbox --backend kube` starts real
//! control planes behind the sandbox's proxy (the same contexts, `ready` line and `/_sandbox/`
//! controls as the emulator), kubectl meets a real kube-apiserver, and `comb demo --backend
//! kube` converges with the emulator's via chains. Skipped, with the reason, where
//! `tests/kube/build` has not built the binaries.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use comb_sandbox::real::{KUBE_VERSION, available_or_skip};
use comb_testkit::cli::{comb, row};
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output_within(COMMAND_DEADLINE);
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[test]
fn comb_sandbox_on_the_real_backend_serves_kubectl_with_the_sandbox_controls() {
    if !available_or_skip("kube_backend::comb_sandbox_on_the_real_backend") {
        return;
    }
    if comb_testkit::kubectl("kube_backend::comb_sandbox_on_the_real_backend").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kube.kubeconfig");
    let mut sandbox = comb()
        .args(["sandbox", "--backend", "kube", "--clusters", "prod,dev"])
        .args(["--context", "staging=prod/staging", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .spawn()
        .expect("comb sandbox starts");
    let stdout = sandbox.stdout.take().unwrap();
    let started = Instant::now();
    let lines: Vec<String> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .take_while(|line| line != "ready")
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("cluster prod https://127.0.0.1:")),
        "{lines:?}"
    );
    eprintln!("the real backend was ready in {:?}", started.elapsed());

    let (ok, version) = kubectl(&kubeconfig, &["version", "-o", "json"]);
    assert!(ok, "{version}");
    assert!(
        version.contains(&format!("\"gitVersion\": \"v{KUBE_VERSION}\"")),
        "a real kube-apiserver answers: {version}"
    );
    let (ok, nodes) = kubectl(
        &kubeconfig,
        &["--context", "dev", "get", "nodes", "-o", "name"],
    );
    assert!(ok && nodes.contains("node/sandbox-node"), "{nodes}");
    let (ok, account) = kubectl(
        &kubeconfig,
        &[
            "--context",
            "staging",
            "get",
            "serviceaccount",
            "default",
            "-o",
            "name",
        ],
    );
    assert!(
        ok,
        "the context's namespace exists, with its ServiceAccount: {account}"
    );

    // The controls answer on the proxy: a fault, counted requests.
    let fault = dir.path().join("fault.json");
    std::fs::write(
        &fault,
        r#"{"method": "GET", "path": "/api/v1/namespaces", "status": 503, "count": 1, "message": "injected"}"#,
    )
    .unwrap();
    let (ok, created) = kubectl(
        &kubeconfig,
        &[
            "--context",
            "prod",
            "create",
            "--raw",
            "/_sandbox/faults",
            "-f",
            fault.to_str().unwrap(),
        ],
    );
    assert!(ok, "{created}");
    let (ok, refused) = kubectl(&kubeconfig, &["--context", "prod", "get", "namespaces"]);
    assert!(!ok && refused.contains("injected"), "{refused}");
    let (ok, namespaces) = kubectl(&kubeconfig, &["--context", "prod", "get", "namespaces"]);
    assert!(ok && namespaces.contains("staging"), "{namespaces}");
    let (ok, requests) = kubectl(
        &kubeconfig,
        &["--context", "prod", "get", "--raw", "/_sandbox/requests"],
    );
    assert!(
        ok && requests.contains("\"list namespaces\":2"),
        "{requests}"
    );

    // SIGTERM stops everything.
    Command::new("kill")
        .args(["-TERM", &sandbox.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = sandbox.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "comb sandbox did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, _) = kubectl(
        &kubeconfig,
        &["--context", "prod", "--request-timeout", "2s", "get", "ns"],
    );
    assert!(!ok, "the clusters are gone");
}

#[test]
fn the_demo_converges_on_the_real_backend_with_the_same_via_chains() {
    if !available_or_skip("kube_backend::the_demo_converges_on_the_real_backend") {
        return;
    }
    let output = comb()
        .args(["demo", "--backend", "kube", "--timeout", "180s"])
        .output_within(COMMAND_DEADLINE);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for (layer, namespace, name, via) in [
        ("staging", "staging", "db", "prod"),
        ("dev", "platform", "db", "staging, prod"),
        ("dev", "platform", "nats", "staging"),
    ] {
        let cells = row(&stdout, &[layer, namespace, name]);
        assert_eq!(cells[4], "Running", "{cells:?}");
        assert_eq!(cells[7], via, "{cells:?}");
    }
    let converged = stdout
        .lines()
        .find(|l| l.starts_with("Every Comb reached its expected phase"))
        .unwrap_or_default();
    eprintln!("real backend: {converged}");
}

/// The CRD's CEL rules refuse bad Combs at the door of a real API server, in one sentence each
/// (the differential test holds the emulator's evaluation of them to the same answers).
#[tokio::test]
async fn the_crd_refuses_bad_combs_at_the_door() {
    use kube::api::{Api, DynamicObject, PostParams};
    if !available_or_skip("kube_backend::the_crd_refuses_bad_combs_at_the_door") {
        return;
    }
    let clusters = comb_sandbox::Clusters::start(
        comb_sandbox::Backend::Kube,
        comb_sandbox::SandboxOptions::clusters(["prod"]),
        None,
    )
    .await
    .expect("a real cluster starts");
    let pool = comb_kubeconfigs::ClientPool::from_kubeconfig(clusters.kubeconfig().build(), "test");
    let client = pool.client("prod").await.unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(
        &PostParams::default(),
        &comb_api::custom_resource_definition(comb_api::DEFAULT_GROUP).unwrap(),
    )
    .await
    .expect("the API server accepts the CRD and its rules");
    let combs: Api<DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &comb_api::api_resource(comb_api::DEFAULT_GROUP),
    );
    let comb = |name: &str, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "comb.internal/v1", "kind": "Comb",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec
        }))
        .unwrap()
    };
    // The CRD may take a moment to be served.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match combs
            .create(
                &PostParams::default(),
                &comb(
                    "fine",
                    serde_json::json!({
                        "class": "Manifests", "dependsOn": ["db", "infra/vault"],
                        "upstream": {"class": "K8s", "context": "prod"},
                        "config": {"endpoints": [{"name": "web", "port": 80}]}
                    }),
                ),
            )
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.code == 404 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("a good Comb is accepted: {error}"),
        }
    }
    let long = "x".repeat(64);
    let cases = [
        (
            long.as_str(),
            serde_json::json!({"class": "Manifests"}),
            "a Comb name becomes a label value on everything it deploys, so it has at most 63 characters",
        ),
        (
            "deps",
            serde_json::json!({"class": "Manifests", "dependsOn": ["Bad Name"]}),
            "spec.dependsOn[0]: Invalid value: \"Bad Name\": each dependsOn entry is a Comb name or namespace/name",
        ),
        (
            "up",
            serde_json::json!({"class": "Manifests", "upstream": {"class": "Nope"}}),
            "spec.upstream: Invalid value: spec.upstream.class is one of K8s, Static, Kubernetes::Comb::Upstream::K8s, Kubernetes::Comb::Upstream::Static",
        ),
        (
            "ep",
            serde_json::json!({"class": "Manifests", "config": {"endpoints": [{"name": "Web_UI", "port": 80}]}}),
            "spec.config.endpoints[0].name: Invalid value: \"Web_UI\": an endpoint name is a DNS-1123 label",
        ),
        (
            "Bad_Name",
            serde_json::json!({"class": "Manifests"}),
            "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain",
        ),
    ];
    for (name, spec, expected) in cases {
        match combs
            .create(&PostParams::default(), &comb(name, spec))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {status:?}");
                assert!(
                    status.message.contains(expected),
                    "{name}: {}",
                    status.message
                );
            }
            other => panic!("{name} was not refused: {other:?}"),
        }
    }
    // `upstream: null` (an explicit local) passes the rule.
    combs
        .create(
            &PostParams::default(),
            &comb(
                "local",
                serde_json::json!({"class": "Manifests", "upstream": null}),
            ),
        )
        .await
        .expect("upstream: null is accepted");
    clusters.shutdown().await;
}
