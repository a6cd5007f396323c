//! comb as its users run it (issue 32): its image (`tests/image/build`) loaded into the real node
//! of prod's cluster, installed by its chart with helm, running as a Pod with the chart's
//! defaults (non-root, read-only root filesystem, no capabilities, probes). One story, in order:
//!
//! - the demo's Combs converge on all three layers under the Pod (prod and staging through its
//!   ServiceAccount, dev through `kubeconfigSecret`), and the calls through the bridges are
//!   answered as `comb demo --backend kube --network` shows them;
//! - the chart's admission webhook answers from the Pod (kube-apiserver reaches it through its
//!   Service, across the node's network);
//! - the Pod's identity is in the Lease it holds and in the Events it writes; its log is read
//!   through the API server (`kubectl logs`: the kubelet, through kube-apiserver's egress);
//! - `helm upgrade` with a changed configuration (a layer through the `in-cluster` context beside
//!   the mounted kubeconfig) and a new image tag rolls the Deployment while a Comb is edited: the
//!   last edit lands, and the new layer's Comb converges;
//! - a Pod deleted (SIGTERM) stops gracefully within its grace period.
//!
//! Runs with `COMB_TEST_BACKEND=kube`, as root, with the network's tools, the real node's
//! (containerd, runc, CNI plugins, the kubelet and pause from `tests/kube/build`) and the image
//! archive (`$COMB_IMAGE`, else the last `tests/image/build` wrote); without them it skips and
//! says why (`$COMB_SKIP_LOG`).

use std::time::Duration;

use comb_federation::cli::demo::{DemoWorld, shortfalls};
use comb_federation::cli::in_cluster::{self, Install, NAMESPACE, REFUSED_COMB};
use comb_sandbox::real::network::ProxyMode;
use comb_sandbox::real::node::{REAL_NODE_NAME, RealNodeOptions};
use comb_sandbox::real::{default_bin_dir, record_skip};
use comb_testkit::network::options_or_skip;
use comb_testkit::wait_until;
use futures::{AsyncBufReadExt as _, StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams};
use serde_json::json;

/// The world of the test `test` (its name in the skip log), or why there is none here.
async fn world_or_skip(test: &str) -> Option<DemoWorld> {
    let test = format!("in_cluster::{test}");
    let network = options_or_skip(&test, ProxyMode::Nftables, 2)?;
    let image = in_cluster::default_image();
    let bin_dir = default_bin_dir();
    let node = RealNodeOptions {
        clusters: vec!["prod".into()],
        images: vec![image.clone()],
    };
    if let Some(why) = comb_sandbox::real::node::unavailable(&bin_dir, &node) {
        record_skip(&format!("{test}: skipped: {why}"));
        return None;
    }
    Some(
        in_cluster::start_world(network, vec![image], &bin_dir)
            .await
            .expect("the demo's clusters with a real node"),
    )
}

/// Prod's real node, where comb's Pods run.
fn real_node(world: &DemoWorld) -> std::sync::Arc<comb_sandbox::real::node::RealNode> {
    world
        .sandbox
        .real()
        .and_then(|real| real.cluster("prod").ok())
        .and_then(|prod| prod.real_node().cloned())
        .expect("prod's real node")
}

/// A Comb of prod whose ConfigMap carries `value`: what the edits during the upgrade change.
fn edited_comb(value: usize) -> serde_json::Value {
    json!({
        "apiVersion": "comb.internal/v1", "kind": "Comb",
        "metadata": {"name": "edited", "namespace": "platform"},
        "spec": {"class": "Manifests", "config": {"manifests": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "edited"},
            "data": {"value": value.to_string()}
        }]}}
    })
}

/// The log of `pod` in the release namespace, through the API server.
async fn log_of(pods: &Api<Pod>, pod: &str) -> String {
    pods.logs(pod, &LogParams::default())
        .await
        .unwrap_or_else(|error| panic!("the log of {pod} through the API server: {error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comb_runs_as_a_pod_installed_by_its_chart() {
    let Some(world) = world_or_skip("comb_runs_as_a_pod_installed_by_its_chart").await else {
        return;
    };
    let helm = default_bin_dir().join("helm");
    let install = Install::new(helm.clone());
    let running = in_cluster::install(&world, &install)
        .await
        .expect("helm install of charts/comb");
    let [pod] = running.pods.as_slice() else {
        panic!("one comb Pod runs: {:?}", running.pods);
    };
    assert_eq!(pod.node, REAL_NODE_NAME, "comb runs on the real node");
    assert_eq!(pod.image, format!("localhost/comb:{}", install.tag));
    assert!(pod.image_id.starts_with("sha256:"), "{pod:?}");

    // The demo's Combs converge under the Pod, and the calls cross its bridges.
    in_cluster::while_the_webhook_is_unreachable(|| world.apply_examples())
        .await
        .expect("the example Combs");
    world.apply_clients().await.expect("the client Pods");
    let rows = wait_until(
        "every Comb of the demo converged under the Pod",
        async || {
            let rows = world.rows().await.map_err(|error| error.to_string())?;
            let missing = shortfalls(&rows);
            if missing.is_empty() {
                Ok(rows)
            } else {
                Err(missing.join("; "))
            }
        },
    )
    .await;
    let calls = world.calls(&rows).await;
    let incomplete: Vec<_> = calls.iter().filter(|row| !row.complete()).collect();
    assert!(
        incomplete.is_empty(),
        "calls not answered as comb says: {incomplete:?}"
    );

    // The webhook answers from the Pod.
    let refused = world
        .apply_combs("prod", REFUSED_COMB)
        .await
        .expect_err("the webhook refuses a Comb of an unknown class");
    assert!(
        format!("{refused:#}").contains("Redis is not a known class"),
        "{refused:#}"
    );

    // The Pod's identity: in its Lease, in its Events; its log through the API server.
    let prod = world.pool.client("prod").await.expect("prod's client");
    let leases: Api<Lease> = Api::namespaced(prod.clone(), NAMESPACE);
    let holder = leases
        .get("comb-controller")
        .await
        .expect("the leader Lease")
        .spec
        .and_then(|spec| spec.holder_identity);
    assert_eq!(holder.as_deref(), Some(pod.name.as_str()));
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(prod.clone(), "platform");
    let by_comb: Vec<_> = events
        .list(&ListParams::default())
        .await
        .expect("Events")
        .items
        .into_iter()
        .filter(|event| event.reporting_controller.as_deref() == Some("comb"))
        .collect();
    assert!(!by_comb.is_empty(), "comb wrote Events in platform");
    for event in &by_comb {
        assert_eq!(event.reporting_instance.as_deref(), Some(pod.name.as_str()));
    }
    let pods: Api<Pod> = Api::namespaced(prod.clone(), NAMESPACE);
    let log = log_of(&pods, &pod.name).await;
    assert!(log.contains("leading: reconciling"), "{log}");

    // helm upgrade with a new layer (through `in-cluster`, beside the mounted kubeconfig) and a
    // new image tag, while a Comb is edited: the last edit lands, the new layer converges.
    let node = real_node(&world);
    node.tag_image(&pod.image, "localhost/comb:next")
        .await
        .expect("a new tag of the image");
    world
        .apply(
            "prod",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "local"}}),
        )
        .await
        .expect("the new layer's namespace");
    world
        .apply("prod", &edited_comb(0))
        .await
        .expect("the edited Comb");
    let mut upgrade = install.clone();
    upgrade.tag = "next".into();
    let mut layers = in_cluster::values(comb_federation::cli::demo::CONFIG_YAML, &install)
        .expect("values")["config"]["layers"]
        .clone();
    if let Some(layers) = layers.as_array_mut() {
        layers.push(json!({"name": "local", "context": "in-cluster", "namespaces": ["local"]}));
    }
    upgrade.extra = json!({
        "config": {"layers": layers},
        "rbac": {"contexts": ["prod", "staging", "in-cluster"]}
    });
    let edits = {
        let world_pool = world.pool.clone();
        tokio::spawn(async move {
            let client = world_pool.client("prod").await.expect("prod's client");
            let resource = kube::discovery::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk("comb.internal", "v1", "Comb"),
                "combs",
            );
            let combs: Api<kube::api::DynamicObject> =
                Api::namespaced_with(client, "platform", &resource);
            for value in 1..=20 {
                combs
                    .patch(
                        "edited",
                        &PatchParams::apply("in-cluster-test").force(),
                        &Patch::Apply(&edited_comb(value)),
                    )
                    .await
                    .map(|_| ())
                    .or_else(|error| match error {
                        // The webhook while no new replica serves it yet: the edit is tried again.
                        kube::Error::Api(status)
                            if status.message.contains("failed calling webhook") =>
                        {
                            Ok(())
                        }
                        error => Err(error),
                    })
                    .expect("an edit");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            in_cluster::while_the_webhook_is_unreachable(|| async {
                combs
                    .patch(
                        "edited",
                        &PatchParams::apply("in-cluster-test").force(),
                        &Patch::Apply(&edited_comb(21)),
                    )
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from)
            })
            .await
            .expect("the last edit");
        })
    };
    let upgraded = in_cluster::install(&world, &upgrade)
        .await
        .expect("helm upgrade of charts/comb");
    edits.await.expect("the edits");
    let new_pods: Vec<_> = upgraded
        .pods
        .iter()
        .filter(|p| p.image == "localhost/comb:next")
        .collect();
    assert!(
        !new_pods.is_empty(),
        "the upgrade runs the new tag: {upgraded:?}"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(prod.clone(), "platform");
    wait_until("the last edit reached its ConfigMap", async || {
        let value = config_maps
            .get_opt("edited")
            .await
            .ok()
            .flatten()
            .and_then(|cm| cm.data)
            .and_then(|data| data.get("value").cloned());
        (value.as_deref() == Some("21"))
            .then_some(())
            .ok_or(format!("value {value:?}"))
    })
    .await;
    let local_comb = json!({"apiVersion": "comb.internal/v1", "kind": "Comb",
            "metadata": {"name": "local-cm", "namespace": "local"},
            "spec": {"class": "Manifests", "config": {"manifests": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "local-cm"}, "data": {"layer": "local"}}]}}});
    // The webhook's Pod may be a moment away from the API server's egress (a 502 from the node
    // proxy under load): a write is asked again while the webhook is unreachable, as for every
    // batch of Combs here.
    in_cluster::while_the_webhook_is_unreachable(|| world.apply("prod", &local_comb))
        .await
        .expect("a Comb of the in-cluster layer");
    let local: Api<ConfigMap> = Api::namespaced(prod.clone(), "local");
    wait_until("the in-cluster layer's Comb deployed", async || {
        local.get_opt("local-cm").await.ok().flatten().is_some()
    })
    .await;

    // SIGTERM: the Pod stops gracefully, well within its grace period (its log ends with
    // `stopped`), and is gone.
    let pod = new_pods[0].name.clone();
    let mut lines = pods
        .log_stream(
            &pod,
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("following the Pod's log")
        .lines();
    pods.delete(&pod, &DeleteParams::default())
        .await
        .expect("deleting the Pod");
    let mut last = String::new();
    while let Some(line) = lines.try_next().await.expect("the log stream") {
        last = line;
    }
    assert!(last.contains("stopped"), "the log ends with: {last}");
    wait_until("the deleted Pod is gone", async || {
        pods.get_opt(&pod).await.ok().flatten().is_none()
    })
    .await;

    world.sandbox.shutdown().await;
}

/// The shard Leases of the demo's layers: `layer -> holder`.
async fn holders(leases: &Api<Lease>) -> std::collections::BTreeMap<String, String> {
    let mut holders = std::collections::BTreeMap::new();
    for layer in ["prod", "staging", "dev"] {
        let holder = leases
            .get_opt(&format!("comb-shard-{layer}"))
            .await
            .ok()
            .flatten()
            .and_then(|lease| lease.spec)
            .and_then(|spec| spec.holder_identity);
        if let Some(holder) = holder {
            holders.insert(layer.to_string(), holder);
        }
    }
    holders
}

/// Replicas as Pods: two sharded replicas split the demo's three layers. One is deleted at once
/// (`--grace-period=0 --force`): its layers move to the survivor within the Lease duration and
/// a step, and an edit in a moved layer lands. Then the container of a replica holding a layer
/// is killed: the kubelet restarts it, the layer is stepped again, an edit lands. The handover
/// times are printed (figures, not assertions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_pods_hand_their_layers_over_when_one_is_killed() {
    let Some(world) = world_or_skip("sharded_pods_hand_their_layers_over_when_one_is_killed").await
    else {
        return;
    };
    let mut install = Install::new(default_bin_dir().join("helm"));
    install.replicas = 2;
    let lease = Duration::from_secs(5);
    install.sharding = Some(lease);
    let running = in_cluster::install(&world, &install)
        .await
        .expect("helm install with two sharded replicas");
    assert_eq!(running.pods.len(), 2, "{running:?}");
    let prod = world.pool.client("prod").await.expect("prod's client");
    let leases: Api<Lease> = Api::namespaced(prod.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(prod.clone(), NAMESPACE);
    let names: Vec<String> = running.pods.iter().map(|p| p.name.clone()).collect();
    let split = wait_until("the two Pods split the three layers", async || {
        let holders = holders(&leases).await;
        let both = names
            .iter()
            .all(|name| holders.values().any(|holder| holder == name));
        (holders.len() == 3 && both)
            .then_some(holders.clone())
            .ok_or(format!("{holders:?}"))
    })
    .await;
    in_cluster::while_the_webhook_is_unreachable(|| world.apply_examples())
        .await
        .expect("the example Combs");
    wait_until(
        "every Comb of the demo converged under two Pods",
        async || {
            let rows = world.rows().await.map_err(|error| error.to_string())?;
            let missing = shortfalls(&rows);
            missing.is_empty().then_some(()).ok_or(missing.join("; "))
        },
    )
    .await;

    // Delete the holder of most layers at once.
    let victim = names
        .iter()
        .max_by_key(|name| split.values().filter(|holder| holder == name).count())
        .cloned()
        .expect("a victim");
    let moved: Vec<String> = split
        .iter()
        .filter(|(_, holder)| **holder == victim)
        .map(|(layer, _)| layer.clone())
        .collect();
    let killed = std::time::Instant::now();
    force_delete(&pods, &victim).await;
    wait_until(
        "the deleted replica's layers are held by another",
        async || {
            let holders = holders(&leases).await;
            moved
                .iter()
                .all(|layer| holders.get(layer).is_some_and(|holder| *holder != victim))
                .then_some(())
                .ok_or(format!("{holders:?}"))
        },
    )
    .await;
    let handover = killed.elapsed();
    eprintln!(
        "handover after a force-deleted Pod: {:.1}s for layer(s) {} (Lease duration {}s)",
        handover.as_secs_f64(),
        moved.join(", "),
        lease.as_secs()
    );
    edit_lands(&world, &moved[0]).await;

    // Kill the container of a replica that holds a layer: the kubelet restarts it.
    let holders_now = holders(&leases).await;
    let (layer, holder) = holders_now.iter().next().expect("a held layer");
    let (container_id, restarts) = container_of(&pods, holder).await;
    let node = real_node(&world);
    let killed = std::time::Instant::now();
    node.kill_container(&container_id)
        .await
        .expect("killing the container");
    wait_until("the kubelet restarted the killed container", async || {
        pods.get(holder)
            .await
            .ok()
            .and_then(|pod| pod.status)
            .and_then(|status| status.container_statuses)
            .is_some_and(|statuses| statuses[0].restart_count > restarts && statuses[0].ready)
    })
    .await;
    edit_lands(&world, layer).await;
    eprintln!(
        "after a killed container (replica {holder}, layer {layer}): restarted, Ready and an edit in its layer applied {:.1}s after the kill",
        killed.elapsed().as_secs_f64()
    );
    world.sandbox.shutdown().await;
}

/// `kubectl delete pod --grace-period=0 --force`.
async fn force_delete(pods: &Api<Pod>, name: &str) {
    pods.delete(
        name,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("force-deleting a replica");
}

/// The containerd id of `pod`'s container and how often it restarted.
async fn container_of(pods: &Api<Pod>, pod: &str) -> (String, i32) {
    let pod = pods.get(pod).await.expect("the holder's Pod");
    let status = pod.status.expect("a status");
    let container = &status.container_statuses.expect("container statuses")[0];
    let id = container
        .container_id
        .as_deref()
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("a containerd container")
        .to_string();
    (id, container.restart_count)
}

/// An edit of a Comb in `layer` reaches what the Comb deploys.
async fn edit_lands(world: &DemoWorld, layer: &str) {
    let (context, namespace) = match layer {
        "prod" => ("prod", "platform"),
        "staging" => ("staging", "staging"),
        _ => ("dev", "platform"),
    };
    let value = format!("{layer}-{}", std::process::id());
    let mut comb = edited_comb(0);
    comb["metadata"]["namespace"] = json!(namespace);
    comb["spec"]["config"]["manifests"][0]["data"]["value"] = json!(value);
    in_cluster::while_the_webhook_is_unreachable(|| world.apply(context, &comb))
        .await
        .expect("an edit");
    let client = world.pool.client(context).await.expect("a client");
    let config_maps: Api<ConfigMap> = Api::namespaced(client, namespace);
    wait_until(format!("the edit in layer {layer} landed"), async || {
        config_maps
            .get_opt("edited")
            .await
            .ok()
            .flatten()
            .and_then(|cm| cm.data)
            .is_some_and(|data| data.get("value") == Some(&value))
    })
    .await;
}

/// The layers of the demo, as (layer, context, namespace).
const LAYERS: [(&str, &str, &str); 3] = [
    ("prod", "prod", "platform"),
    ("staging", "staging", "staging"),
    ("dev", "dev", "platform"),
];

/// Combs per layer in each batch of [`a_handover_repeats_no_write_it_need_not`].
const PER_LAYER: usize = 300;

/// What was written of one Comb, seen by a watch of its layer: each status and each finalizer
/// list it was written with (a re-list delivers the same ones again and counts nothing).
#[derive(Default)]
struct Written {
    status: Option<serde_json::Value>,
    finalizers: Vec<String>,
    status_writes: usize,
    finalizer_writes: usize,
    running: bool,
}

type Seen = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<(String, String), Written>>>;

/// Watches the Combs of every layer, counting the writes of each as they come.
fn watch_writes(world: &DemoWorld, seen: &Seen) -> Vec<tokio::task::JoinHandle<()>> {
    LAYERS
        .iter()
        .map(|(_, context, namespace)| {
            let (pool, seen) = (world.pool.clone(), seen.clone());
            let (context, namespace) = (context.to_string(), namespace.to_string());
            tokio::spawn(async move {
                let client = pool.client(&context).await.expect("a client");
                let combs: Api<comb_api::Comb> = Api::namespaced_with(
                    client,
                    &namespace,
                    &comb_api::api_resource(comb_api::DEFAULT_GROUP),
                );
                // A watch the API server ends or fails is resumed (with backoff), not given up:
                // a watch that stopped would leave the batch waiting and its writes uncounted.
                let stream =
                    kube::runtime::watcher(combs, kube::runtime::watcher::Config::default());
                let stream = kube::runtime::WatchStreamExt::default_backoff(stream);
                let mut stream =
                    std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(stream));
                while let Some(next) = stream.next().await {
                    let comb = match next {
                        Ok(comb) => comb,
                        Err(error) => {
                            eprintln!("the watch of {context}'s Combs failed, resuming: {error}");
                            continue;
                        }
                    };
                    let name = comb.metadata.name.clone().unwrap_or_default();
                    let status = comb
                        .status
                        .as_ref()
                        .map(|s| serde_json::to_value(s).expect("a status as JSON"));
                    let finalizers = comb.metadata.finalizers.clone().unwrap_or_default();
                    let mut seen = seen.lock().expect("the counts");
                    let written = seen.entry((context.clone(), name)).or_default();
                    if status.is_some() && status != written.status {
                        written.status_writes += 1;
                        written.status = status;
                    }
                    if finalizers != written.finalizers {
                        written.finalizer_writes += 1;
                        written.finalizers = finalizers;
                    }
                    written.running = comb.status.as_ref().and_then(|s| s.phase.as_ref())
                        == Some(&comb_api::Phase::Running)
                        && comb.status.as_ref().and_then(|s| s.observed_generation)
                            == comb.metadata.generation;
                }
            })
        })
        .collect()
}

/// How a batch's run is disturbed once a third of its Combs are Running.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Disturbance {
    None,
    /// `kubectl delete pod --grace-period=0 --force` of the holder of most layers.
    ForceDeletedPod,
    /// The container of the holder of most layers killed on the node (SIGKILL); the kubelet
    /// restarts it.
    KilledContainer,
}

/// What one batch wrote, per Comb, and which layers moved.
struct BatchFigures {
    disturbance: Disturbance,
    status_writes: usize,
    finalizer_writes: usize,
    events: usize,
    /// Combs of the layers whose holder was disturbed: what a handover may step again.
    moved_combs: usize,
}

impl BatchFigures {
    fn row(&self) -> String {
        let combs = (PER_LAYER * LAYERS.len()) as f64;
        format!(
            "| {:?} | {:.2} | {:.2} | {:.2} | {} |",
            self.disturbance,
            self.status_writes as f64 / combs,
            self.finalizer_writes as f64 / combs,
            self.events as f64 / combs,
            self.moved_combs
        )
    }
}

fn load_comb(batch: usize, index: usize, namespace: &str) -> comb_api::Comb {
    let name = format!("b{batch}-{index:03}");
    let spec: comb_api::CombSpec = serde_json::from_value(json!({
        "class": "Manifests",
        "config": {"manifests": [{
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"batch": batch.to_string()}
        }]}
    }))
    .expect("a Comb spec");
    comb_api::Comb::new(comb_api::DEFAULT_GROUP, namespace, &name, spec)
}

/// The Events comb wrote about the batch's Combs, each counted as often as it occurred.
async fn events_of_batch(world: &DemoWorld, batch: usize) -> usize {
    let prefix = format!("b{batch}-");
    let mut total = 0;
    for (_, context, namespace) in LAYERS {
        let client = world.pool.client(context).await.expect("a client");
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, namespace);
        let list = events
            .list(&ListParams::default().fields("involvedObject.kind=Comb"))
            .await
            .expect("listing Events");
        total += list
            .items
            .iter()
            .filter(|event| {
                event
                    .involved_object
                    .name
                    .as_deref()
                    .is_some_and(|name| name.starts_with(&prefix))
            })
            .map(|event| event.count.unwrap_or(1).max(1) as usize)
            .sum::<usize>();
    }
    total
}

/// The batch's Combs the API server does not show Running for their generation, with what
/// their status says (the first few), so that a batch that does not converge says why.
async fn stragglers(world: &DemoWorld, batch: usize) -> String {
    let prefix = format!("b{batch}-");
    let mut found = Vec::new();
    for (_, context, namespace) in LAYERS {
        let Ok(client) = world.pool.client(context).await else {
            continue;
        };
        let combs: Api<comb_api::Comb> = Api::namespaced_with(
            client,
            namespace,
            &comb_api::api_resource(comb_api::DEFAULT_GROUP),
        );
        let list = match combs.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(error) => {
                found.push(format!("{context}: listing failed: {error}"));
                continue;
            }
        };
        for comb in list.items {
            let name = comb.metadata.name.clone().unwrap_or_default();
            let status = comb.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_ref());
            let observed = status.and_then(|s| s.observed_generation);
            if !name.starts_with(&prefix)
                || (phase == Some(&comb_api::Phase::Running)
                    && observed == comb.metadata.generation)
            {
                continue;
            }
            found.push(format!(
                "{context}/{name}: phase {phase:?}, observed {observed:?} of {:?}, reason {:?}, \
                 message {:?}",
                comb.metadata.generation,
                status
                    .and_then(|s| s.ready())
                    .and_then(|c| c.reason.as_ref()),
                status
                    .and_then(|s| s.ready())
                    .and_then(|c| c.message.as_deref()),
            ));
        }
    }
    let shown = found.len().min(5);
    format!("{} not Running: {}", found.len(), found[..shown].join("; "))
}

/// Runs one batch of `PER_LAYER` Combs per layer to convergence, disturbed as said, and counts
/// what comb wrote for them.
async fn run_batch(
    world: &DemoWorld,
    batch: usize,
    disturbance: Disturbance,
    leases: &Api<Lease>,
    pods: &Api<Pod>,
) -> BatchFigures {
    let seen: Seen = Default::default();
    let watches = watch_writes(world, &seen);
    let batch_of = |key: &(String, String)| key.1.starts_with(&format!("b{batch}-"));
    let running = |seen: &Seen| {
        seen.lock()
            .expect("the counts")
            .iter()
            .filter(|(key, written)| batch_of(key) && written.running)
            .count()
    };
    let total = PER_LAYER * LAYERS.len();
    let creates = futures::stream::iter(LAYERS.iter().flat_map(|(_, context, namespace)| {
        (0..PER_LAYER).map(move |index| (*context, load_comb(batch, index, namespace)))
    }))
    .map(|(context, comb)| async move {
        let client = world.pool.client(context).await?;
        let combs: Api<comb_api::Comb> = Api::namespaced_with(
            client,
            comb.metadata.namespace.as_deref().unwrap_or_default(),
            &comb_api::api_resource(comb_api::DEFAULT_GROUP),
        );
        in_cluster::while_the_webhook_is_unreachable(|| async {
            combs
                .create(&Default::default(), &comb)
                .await
                .map(|_| ())
                .map_err(anyhow::Error::from)
        })
        .await
    })
    .buffer_unordered(16)
    .try_collect::<Vec<()>>();
    let disturb = async {
        if disturbance == Disturbance::None {
            return 0;
        }
        wait_until(format!("a third of batch {batch} Running"), async || {
            (running(&seen) >= total / 3).then_some(())
        })
        .await;
        let holders = holders(leases).await;
        let victim = holders
            .values()
            .max_by_key(|holder| holders.values().filter(|h| h == holder).count())
            .cloned()
            .expect("a holder");
        let moved = holders.values().filter(|h| **h == victim).count();
        match disturbance {
            Disturbance::ForceDeletedPod => {
                force_delete(pods, &victim).await;
            }
            Disturbance::KilledContainer => {
                let (id, _) = container_of(pods, &victim).await;
                real_node(world)
                    .kill_container(&id)
                    .await
                    .expect("killing the container");
            }
            Disturbance::None => unreachable!(),
        }
        eprintln!("batch {batch}: {disturbance:?} of {victim}, holder of {moved} layer(s)");
        moved * PER_LAYER
    };
    let (created, moved_combs) = tokio::join!(creates, disturb);
    created.expect("the batch's Combs");
    wait_until(format!("every Comb of batch {batch} Running"), async || {
        let now = running(&seen);
        if now == total {
            return Ok(());
        }
        Err(format!(
            "{now} of {total}; the API server has: {}",
            stragglers(world, batch).await
        ))
    })
    .await;
    // Settled: nothing more is written for a while (a write still on its way counts).
    let count = |seen: &Seen| -> (usize, usize) {
        seen.lock()
            .expect("the counts")
            .iter()
            .filter(|(key, _)| batch_of(key))
            .fold((0, 0), |(s, f), (_, w)| {
                (s + w.status_writes, f + w.finalizer_writes)
            })
    };
    let mut last = (count(&seen), std::time::Instant::now());
    wait_until(format!("batch {batch}'s writes settled"), async || {
        let now = count(&seen);
        if now != last.0 {
            last = (now, std::time::Instant::now());
        }
        (last.1.elapsed() >= Duration::from_secs(5)).then_some(())
    })
    .await;
    for watch in watches {
        watch.abort();
    }
    let (status_writes, finalizer_writes) = count(&seen);
    BatchFigures {
        disturbance,
        status_writes,
        finalizer_writes,
        events: events_of_batch(world, batch).await,
        moved_combs,
    }
}

/// Replicas as Pods under load (issue 32 item 4): two sharded replicas converge three batches of
/// 3x300 Combs; during the second a replica is force-deleted, during the third a replica's
/// container is killed. Every Comb converges each time, and what comb wrote per Comb (status,
/// finalizer, Events, counted by watches and the Events' counts) is printed beside the
/// undisturbed batch: a handover repeats at most one status write and one Event per Comb it
/// moves, and never a finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_repeats_no_write_it_need_not() {
    let Some(world) = world_or_skip("a_handover_repeats_no_write_it_need_not").await else {
        return;
    };
    let mut install = Install::new(default_bin_dir().join("helm"));
    install.replicas = 2;
    install.sharding = Some(Duration::from_secs(5));
    in_cluster::install(&world, &install)
        .await
        .expect("helm install with two sharded replicas");
    let prod = world.pool.client("prod").await.expect("prod's client");
    let leases: Api<Lease> = Api::namespaced(prod.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(prod, NAMESPACE);
    wait_until("every layer held", async || {
        let holders = holders(&leases).await;
        (holders.len() == 3)
            .then_some(())
            .ok_or(format!("{holders:?}"))
    })
    .await;
    let mut figures = Vec::new();
    for (batch, disturbance) in [
        Disturbance::None,
        Disturbance::ForceDeletedPod,
        Disturbance::KilledContainer,
    ]
    .into_iter()
    .enumerate()
    {
        figures.push(run_batch(&world, batch, disturbance, &leases, &pods).await);
    }
    eprintln!(
        "| 3x{PER_LAYER} Combs, per Comb | status writes | finalizer writes | Events | Combs moved |"
    );
    eprintln!("|---|---|---|---|---|");
    for batch in &figures {
        eprintln!("{}", batch.row());
    }
    let calm = &figures[0];
    for batch in &figures[1..] {
        assert_eq!(
            batch.finalizer_writes, calm.finalizer_writes,
            "a finalizer is written once per Comb, handover or not ({:?})",
            batch.disturbance
        );
        for (what, without, with) in [
            ("status writes", calm.status_writes, batch.status_writes),
            ("Events", calm.events, batch.events),
        ] {
            assert!(
                with <= without + batch.moved_combs,
                "{what}: {with} with {:?} against {without} without; a handover may repeat one \
                 per Comb it moves ({})",
                batch.disturbance,
                batch.moved_combs
            );
        }
    }
    world.sandbox.shutdown().await;
}
