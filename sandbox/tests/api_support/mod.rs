//! Shared setup of the API conformance tests: sandbox clusters reached through a real
//! `kube::Client` built from the sandbox's own kubeconfig.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use comb_sandbox::{Sandbox, SandboxOptions, Store};
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

/// One plain cluster and a client for it.
pub async fn cluster() -> (Sandbox, kube::Client) {
    let sandbox = start(plain(&["test"])).await;
    let client = client(&sandbox, "test").await;
    (sandbox, client)
}

/// The store of the sandbox's first cluster.
pub fn store(sandbox: &Sandbox) -> Store {
    sandbox.clusters()[0].store().clone()
}

/// Waits until `check` holds, re-checking after every change in `store`, failing after
/// [`DEADLINE`].
pub async fn until<F, Fut>(store: &Store, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut events = store.subscribe();
    let deadline = tokio::time::Instant::now() + DEADLINE;
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

/// The reason of an API error, or a panic naming what was expected.
pub fn reason(error: kube::Error) -> (u16, String, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error, got {other}"),
    }
}
