//! One set of control planes per test binary, for [`crate::Setup::shared`].
//!
//! A real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)
//! takes seconds to start; a test binary whose tests each touch only their own namespaces can
//! start it once. Every `#[tokio::test]` has a runtime of its own that ends with the test, and
//! the clusters' proxies are tasks of the runtime that started them: so the shared set is
//! started, and its proxies served, by a runtime on a thread of its own that lives as long as
//! the process. Its processes end with the test binary (their watchdogs see its pipes close)
//! and take their data directories with them.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use comb_kubeconfigs::write::KubeconfigBuilder;
use comb_sandbox::{Backend, Clusters, SandboxOptions};
use tokio::sync::OnceCell;

/// A process-wide set of clusters.
pub struct SharedClusters {
    clusters: Clusters,
}

impl SharedClusters {
    pub fn clusters(&self) -> &Clusters {
        &self.clusters
    }

    /// The kubeconfig with a context per cluster; each test adds its own namespaced contexts.
    pub fn kubeconfig(&self) -> KubeconfigBuilder {
        self.clusters.kubeconfig()
    }
}

/// The sets by their cluster names: each is started by the first test that asks for it.
type Sets = Mutex<BTreeMap<Vec<String>, &'static OnceCell<&'static SharedClusters>>>;

fn sets() -> &'static Sets {
    static SETS: OnceLock<Sets> = OnceLock::new();
    SETS.get_or_init(Default::default)
}

/// The shared real clusters named `names`, started on first use.
pub async fn clusters(names: &[String]) -> &'static SharedClusters {
    let cell: &'static OnceCell<&'static SharedClusters> = {
        let mut sets = sets()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        sets.entry(names.to_vec())
            .or_insert_with(|| Box::leak(Box::new(OnceCell::new())))
    };
    cell.get_or_init(|| start(names.to_vec())).await
}

/// Starts the clusters on a runtime of their own, on a thread that lives as long as the
/// process, and hands them over once they serve.
async fn start(names: Vec<String>) -> &'static SharedClusters {
    let (started, answer) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("shared clusters {}", names.join(",")))
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the shared clusters' runtime");
            runtime.block_on(async move {
                let options = SandboxOptions {
                    clusters: names,
                    pod_ready_delay: Duration::ZERO,
                    ..SandboxOptions::default()
                };
                let clusters = Clusters::start(Backend::Kube, options, None).await;
                let _ = started.send(
                    clusters.map(|clusters| &*Box::leak(Box::new(SharedClusters { clusters }))),
                );
                // Serve the proxies until the process ends.
                std::future::pending::<()>().await;
            });
        })
        .expect("the shared clusters' thread starts");
    match answer.await {
        Ok(Ok(set)) => set,
        Ok(Err(error)) => panic!("the shared test clusters do not start: {error}"),
        Err(_) => panic!("the shared test clusters' thread ended before they started"),
    }
}
