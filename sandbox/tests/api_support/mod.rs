//! Shared setup of the API conformance tests: clusters reached through a real `kube::Client`
//! built from the sandbox's own kubeconfig, on the backend `COMB_TEST_BACKEND` names. On the
//! emulator every test starts its own cluster (milliseconds) and works in `default`; on the
//! real backend the tests of one binary share one control plane, each in a namespace of its
//! own.

#![allow(dead_code)]

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use comb_kubeconfigs::ClientPool;
use comb_sandbox::{Backend, Sandbox, SandboxOptions, SharedClusters, Store};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// How long a test waits for something asynchronous (the collectors, a watch) to happen.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A sandbox of plain API servers: no simulated controllers, so the tests see only their own
/// writes and the API server's collectors.
pub fn plain(clusters: &[&str]) -> SandboxOptions {
    SandboxOptions {
        extensions: Vec::new(),
        ..SandboxOptions::clusters(clusters.iter().copied())
    }
}

pub async fn start(options: SandboxOptions) -> Sandbox {
    Sandbox::start(options).await.expect("the sandbox starts")
}

/// A client for one context of the sandbox's kubeconfig, as any program would build it.
pub async fn client(sandbox: &Sandbox, context: &str) -> kube::Client {
    let yaml = sandbox.kubeconfig_yaml().expect("kubeconfig");
    let kubeconfig = Kubeconfig::from_yaml(&yaml).expect("kube reads the sandbox kubeconfig");
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("config for the context");
    kube::Client::try_from(config).expect("client")
}

/// The real control plane this test binary shares.
fn shared() -> &'static SharedClusters {
    static SHARED: OnceLock<SharedClusters> = OnceLock::new();
    SHARED.get_or_init(|| {
        SharedClusters::start(Backend::Kube, plain(&["test"]))
            .expect("the shared real control plane starts")
    })
}

/// One test's cluster: its own emulator, or its own namespace of the shared real one.
pub struct TestCluster {
    /// The namespace the test works in.
    pub ns: String,
    pub client: kube::Client,
    /// The URL the client uses, and the CA it trusts (when HTTPS).
    pub url: String,
    pub ca: Option<String>,
    emulator: Option<Sandbox>,
}

impl TestCluster {
    /// The emulator's store of the cluster, on the emulator backend.
    pub fn store(&self) -> Option<Store> {
        self.emulator
            .as_ref()
            .map(|sandbox| sandbox.clusters()[0].store().clone())
    }

    pub fn backend(&self) -> Backend {
        if self.emulator.is_some() {
            Backend::Emulator
        } else {
            Backend::Kube
        }
    }
}

/// A namespace no other test of this binary uses.
fn fresh_namespace() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("t-{}", &id[..10])
}

/// One plain cluster (on the real backend: a fresh namespace of the shared one) and a client.
pub async fn cluster() -> (TestCluster, kube::Client) {
    cluster_with(plain(&["test"])).await
}

/// A cluster `test` started with `options` on the emulator; on the real backend, which has
/// every controller and always serves HTTPS, a fresh namespace of the shared one.
pub async fn cluster_with(options: SandboxOptions) -> (TestCluster, kube::Client) {
    match Backend::from_env() {
        Backend::Emulator => {
            let sandbox = start(options).await;
            let client = client(&sandbox, "test").await;
            let cluster = TestCluster {
                ns: "default".into(),
                client: client.clone(),
                url: sandbox.clusters()[0].url(),
                ca: sandbox.ca_pem().map(str::to_string),
                emulator: Some(sandbox),
            };
            (cluster, client)
        }
        Backend::Kube => {
            let clusters = shared().clusters();
            let kubeconfig = clusters.kubeconfig().build();
            let client = ClientPool::from_kubeconfig(kubeconfig, "the shared cluster")
                .client("test")
                .await
                .expect("a client of the shared cluster");
            let ns = fresh_namespace();
            let namespace: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
                    .expect("a namespace");
            Api::<Namespace>::all(client.clone())
                .create(&PostParams::default(), &namespace)
                .await
                .expect("the test's namespace");
            let cluster = TestCluster {
                ns,
                client: client.clone(),
                url: clusters.url("test").expect("the shared cluster's URL"),
                ca: clusters.ca_pem().map(str::to_string),
                emulator: None,
            };
            (cluster, client)
        }
    }
}

/// Waits until `check` holds, failing after [`DEADLINE`]: on the emulator re-checking after
/// every change in its store, on the real backend every 50 ms.
pub async fn until<F, Fut>(cluster: &TestCluster, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let Some(store) = cluster.store() else {
        loop {
            if check().await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let mut events = store.subscribe();
    loop {
        if check().await {
            return;
        }
        // Drain what is queued so the next wait is for a change after this check.
        while events.try_recv().is_ok() {}
        if check().await {
            return;
        }
        let next = tokio::time::timeout_at(deadline, events.recv()).await;
        assert!(next.is_ok(), "timed out waiting for {what}");
    }
}

/// The ConfigMap kube-controller-manager publishes in every namespace (as the emulator's
/// simulation does): lists of a real cluster's namespace have it.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// The names of listed objects, without [`ROOT_CA`].
pub fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items
        .iter()
        .filter_map(|o| o.meta().name.clone())
        .filter(|n| n != ROOT_CA)
        .collect()
}

/// The reason of an API error, or a panic naming what was expected.
pub fn reason(error: kube::Error) -> (u16, String, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error, got {other}"),
    }
}
