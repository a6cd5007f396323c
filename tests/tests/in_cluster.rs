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
use futures::{AsyncBufReadExt as _, TryStreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams};
use serde_json::json;

const TEST: &str = "in_cluster::comb_runs_as_a_pod_installed_by_its_chart";

/// The world of the test, or why there is none here.
async fn world_or_skip() -> Option<DemoWorld> {
    let network = options_or_skip(TEST, ProxyMode::Nftables, 2)?;
    let image = in_cluster::default_image();
    let bin_dir = default_bin_dir();
    let node = RealNodeOptions {
        clusters: vec!["prod".into()],
        images: vec![image.clone()],
    };
    if let Some(why) = comb_sandbox::real::node::unavailable(&bin_dir, &node) {
        record_skip(&format!("{TEST}: skipped: {why}"));
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
    let Some(world) = world_or_skip().await else {
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
    world
        .apply(
            "prod",
            &json!({"apiVersion": "comb.internal/v1", "kind": "Comb",
                    "metadata": {"name": "local-cm", "namespace": "local"},
                    "spec": {"class": "Manifests", "config": {"manifests": [{
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "local-cm"}, "data": {"layer": "local"}}]}}}),
        )
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
    let Some(world) = world_or_skip().await else {
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
    pods.delete(
        &victim,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("force-deleting a replica");
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
    let pod = pods.get(holder).await.expect("the holder's Pod");
    let status = pod.status.expect("a status");
    let container = &status.container_statuses.expect("container statuses")[0];
    let container_id = container
        .container_id
        .as_deref()
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("a containerd container")
        .to_string();
    let restarts = container.restart_count;
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
