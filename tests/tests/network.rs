//! Packets, not just objects (issue 20): on the real backend with the sandbox network, every kind
//! of bridge comb writes is proven by traffic. A client Pod in a layer calls a service by the
//! name its consumers use; the call goes through the layer's CoreDNS, kube-proxy and, across
//! clusters, the router and the upstream's load balancer, and is answered by the identity server
//! of the Pod that got it (`cluster/namespace/pod PORT`). Each check repeats its call
//! ([`CALLS`] times once converged) and requires the expected answer every time.
//!
//! One set of clusters (the demo's: prod with staging as a namespace, and dev) carries the
//! whole story, in order: the demo's layers (a local Comb, an ExternalName bridge, an
//! EndpointSlice bridge with named ports, two hops, a stub), a host-name external served by the
//! sandbox's zone, a bridge to an upstream that publishes no external address, then the
//! switches (a Comb leaves the borrow list and runs locally; the borrowing Comb is deleted). A
//! second sandbox, through the binary, proves kube-proxy's iptables mode, a NodePort on the
//! node's address and the `/_sandbox/` call control, and is killed with SIGKILL: every process and namespace it made must go.

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use comb_federation::cli::demo::{CONFIG_YAML, DemoWorld, RunningController, shortfalls};
use comb_federation::config::Config;
use comb_sandbox::Backend;
use comb_sandbox::real::network::{CallOutcome, ClusterNetwork, Failure, ProxyMode};
use comb_testkit::network::{CALLS, expect_answers, expect_failures, options_or_skip};
use comb_testkit::process::KillOnDrop;
use comb_testkit::wait_until;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// Applies `object` (server-side) through `context` of `config`.
async fn apply(config: &Config, context: &str, object: &Value) {
    let client = comb_federation::config::client_pool(config)
        .expect("a client pool")
        .client(context)
        .await
        .expect("a client");
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
    let types = object.types.clone().expect("apiVersion and kind");
    let gvk = kube::core::GroupVersionKind::try_from(&types).expect("a kind");
    let (resource, _) = kube::discovery::pinned_kind(&client, &gvk)
        .await
        .expect("a served kind");
    let api: Api<DynamicObject> = match &object.metadata.namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, &resource),
        None => Api::all_with(client, &resource),
    };
    let name = object.metadata.name.clone().expect("a name");
    api.patch(
        &name,
        &PatchParams::apply("network-test"),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|error| panic!("applying {} {name}: {error}", types.kind));
}

/// The phase and reason of Comb `namespace/name` through `context`.
async fn verdict(
    config: &Config,
    context: &str,
    namespace: &str,
    name: &str,
) -> Option<(String, String)> {
    let client = comb_federation::config::client_pool(config)
        .ok()?
        .client(context)
        .await
        .ok()?;
    let combs: Api<DynamicObject> =
        Api::namespaced_with(client, namespace, &comb_api::api_resource(&config.group));
    let comb = serde_json::to_value(combs.get_opt(name).await.ok()??).ok()?;
    let ready = comb["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    Some((
        comb["status"]["phase"].as_str()?.to_string(),
        ready["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

fn answered_by(outcomes: &[CallOutcome]) -> BTreeSet<String> {
    outcomes
        .iter()
        .filter_map(|o| Some(format!("{}:{}", o.answered_by.as_deref()?, o.port?)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bridge_carries_traffic() {
    let Some(network) = options_or_skip(
        "network::every_bridge_carries_traffic",
        ProxyMode::Nftables,
        2,
    ) else {
        return;
    };
    let world = DemoWorld::start_with(Backend::Kube, None, Duration::ZERO, Some(network))
        .await
        .expect("the demo's clusters start with the network");
    let prod = world.sandbox.network("prod").expect("prod's network");
    let dev = world.sandbox.network("dev").expect("dev's network");

    // The demo's story, with a client Pod in each layer.
    let demo = RunningController::start(&world.config)
        .await
        .expect("the controller starts");
    world.apply_examples().await.expect("the examples apply");
    world.apply_clients().await.expect("the clients apply");
    let rows = wait_until("the demo's Combs where the story ends", async || {
        let rows = world.rows().await.map_err(|e| vec![e.to_string()])?;
        match shortfalls(&rows).as_slice() {
            [] => Ok(rows),
            missing => Err(missing.to_vec()),
        }
    })
    .await;

    // Every layer's calls are answered where comb's via chain says (the demo's own table).
    for row in world.calls(&rows).await {
        assert!(row.complete(), "{row:?}");
    }
    demo_bridges(&prod, &dev).await;
    host_name_external(&world).await;

    // Switches: nats leaves dev's borrow list (it runs in dev), then dev's db is deleted.
    demo.stop().await.expect("the controller ends");
    let config = world
        .config_from(
            "comb-switched.yaml",
            &CONFIG_YAML.replace("combs: [nats, db]", "combs: [db]"),
        )
        .expect("the switched configuration");
    let running = RunningController::start(&config)
        .await
        .expect("the controller starts");
    expect_answers(
        &dev,
        "platform",
        "client",
        "nats:4222",
        "dev/platform/nats-",
    )
    .await;
    expect_answers(&dev, "platform", "client", "db:5432", "prod/platform/db-0").await;
    let combs: Api<DynamicObject> = Api::namespaced_with(
        comb_federation::config::client_pool(&config)
            .expect("a pool")
            .client("dev")
            .await
            .expect("a client"),
        "platform",
        &comb_api::api_resource(&config.group),
    );
    combs
        .delete("db", &DeleteParams::default())
        .await
        .expect("dev's db is deleted");
    // Its name no longer resolves, and nothing answers.
    let gone = expect_failures(&dev, "platform", "client", "db:5432", Failure::NotFound).await;
    assert!(gone.iter().all(|o| o.answered_by.is_none()), "{gone:?}");
    running.stop().await.expect("the controller ends");
    world.sandbox.shutdown().await;
}

/// The demo's bridges one by one, by the identity of who answers.
async fn demo_bridges(prod: &ClusterNetwork, dev: &ClusterNetwork) {
    // A local Comb: prod's client reaches prod's nats.
    let local = expect_answers(
        prod,
        "platform",
        "client",
        "nats:4222",
        "prod/platform/nats-",
    )
    .await;
    assert_eq!(local[0].names, ["nats.platform.svc.cluster.local"]);

    // An ExternalName bridge: staging's db is a CNAME to prod's, which answers.
    let external_name =
        expect_answers(prod, "staging", "client", "db:5432", "prod/platform/db-0").await;
    assert_eq!(
        external_name[0].names,
        [
            "db.staging.svc.cluster.local",
            "db.platform.svc.cluster.local"
        ],
        "resolved by CoreDNS through the CNAME"
    );

    // An EndpointSlice bridge, one hop, named ports: dev's nats is staging's, on both ports.
    for port in [4222, 8222] {
        let calls = expect_answers(
            dev,
            "platform",
            "client",
            &format!("nats:{port}"),
            "prod/staging/nats-",
        )
        .await;
        assert!(
            calls.iter().all(|o| o.port == Some(port)),
            "each named port reaches its own port upstream: {:?}",
            answered_by(&calls)
        );
        assert!(
            calls.iter().all(|o| o
                .address
                .as_deref()
                .is_some_and(|a| a.starts_with("10.96."))),
            "through dev's bridge Service: {calls:?}"
        );
    }

    // Two hops: dev's db is prod's, via staging.
    let two_hops = expect_answers(dev, "platform", "client", "db:5432", "prod/platform/db-0").await;
    assert_eq!(
        answered_by(&two_hops),
        BTreeSet::from(["prod/platform/db-0:5432".to_string()])
    );

    // A stub: dev's mailer is dev's own stub (Mailpit's port 1025), never an upper layer's.
    let stub = expect_answers(
        dev,
        "platform",
        "client",
        "mailer:587",
        "dev/platform/mailer-",
    )
    .await;
    assert!(
        stub.iter().all(|o| o.port == Some(1025)),
        "{:?}",
        answered_by(&stub)
    );
}

/// The layers of the host-name test, on the demo's clusters in namespaces of their own: `pg`
/// publishes `pg.prod.example:5432` (its load balancer carries external-dns's annotation), and
/// `quiet` publishes no external address at all.
const EXTERNAL_CONFIG: &str = "
group: comb.internal
labelPrefix: comb.internal/
managedBy: comb
layers:
  - name: upstream
    context: prod
    namespaces: [names]
  - name: downstream
    context: dev
    namespaces: [names]
    borrow: { from: upstream, namespace: names, combs: [pg, quiet] }
";

fn comb(name: &str, external: Option<&str>, extra: Vec<Value>) -> Value {
    let mut endpoint = json!({"name": "postgres", "port": 5432});
    if let Some(external) = external {
        endpoint["external"] = json!(external);
    }
    let mut manifests = vec![
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "postgres", "image": "postgres:16",
                                                              "ports": [{"name": "postgres", "containerPort": 5432}]}]}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"selector": {"app": name}, "ports": [{"name": "postgres", "port": 5432}]}}),
    ];
    manifests.extend(extra);
    json!({"apiVersion": "comb.internal/v1", "kind": "Comb",
           "metadata": {"name": name, "namespace": "names"},
           "spec": {"class": "Manifests", "config": {"endpoints": [endpoint], "manifests": manifests}}})
}

/// A host-name external resolved by the sandbox's zone; and an upstream without an external
/// address, whose bridge never runs and never answers.
async fn host_name_external(world: &DemoWorld) {
    let config = world
        .config_from(
            "comb-names.yaml",
            &format!("kubeconfig: sandbox.kubeconfig\n{EXTERNAL_CONFIG}"),
        )
        .expect("the configuration loads");
    for context in ["prod", "dev"] {
        apply(
            &config,
            context,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "names"}}),
        )
        .await;
        apply(
            &config,
            context,
            &comb_federation::cli::packets::client_pod("names"),
        )
        .await;
    }
    let public = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "pg-public",
                     "annotations": {"external-dns.alpha.kubernetes.io/hostname": "pg.prod.example"}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "pg"}, "ports": [{"name": "postgres", "port": 5432}]}});
    apply(
        &config,
        "prod",
        &comb("pg", Some("pg.prod.example:5432"), vec![public]),
    )
    .await;
    apply(&config, "prod", &comb("quiet", None, Vec::new())).await;
    apply(
        &config,
        "dev",
        &comb("pg", Some("pg.dev.example:5432"), Vec::new()),
    )
    .await;
    apply(&config, "dev", &comb("quiet", None, Vec::new())).await;
    let running = RunningController::start(&config)
        .await
        .expect("the controller starts");
    let dev = world.sandbox.network("dev").expect("dev's network");
    let calls = expect_answers(&dev, "names", "client", "pg:5432", "prod/names/pg-").await;
    assert_eq!(
        calls[0].names,
        ["pg.names.svc.cluster.local", "pg.prod.example"],
        "dev's ExternalName bridge, resolved by the sandbox's zone"
    );
    // `quiet` is Running upstream, but its bridge is never Running, and nothing answers.
    wait_until("quiet Running upstream", async || {
        verdict(&config, "prod", "names", "quiet")
            .await
            .filter(|(phase, _)| phase == "Running")
    })
    .await;
    let (phase, reason) = wait_until("a verdict on dev's quiet", async || {
        verdict(&config, "dev", "names", "quiet").await
    })
    .await;
    assert_ne!(phase, "Running", "{reason}");
    let quiet = dev.call("names", "client", "quiet:5432").await;
    assert_eq!(quiet.answered_by, None, "{quiet:?}");
    assert_ne!(
        verdict(&config, "dev", "names", "quiet")
            .await
            .map(|(phase, _)| phase),
        Some("Running".to_string()),
        "still not Running after its calls"
    );
    running.stop().await.expect("the controller ends");
}

/// The descendants of `pid`, by `/proc/<pid>/task/*/children`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

fn netns_of(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|link| link.display().to_string())
}

/// The sandboxes' data directories (`$TMPDIR/comb-kube-*`) that the processes `pids` hold files
/// open in.
fn data_directories(pids: &[u32]) -> BTreeSet<PathBuf> {
    let temp = std::env::temp_dir();
    pids.iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/fd")).ok())
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|open| {
            let top = open.strip_prefix(&temp).ok()?.components().next()?;
            let top = top.as_os_str().to_str()?;
            top.starts_with("comb-kube-").then(|| temp.join(top))
        })
        .collect()
}

/// The processes inside any of `namespaces`.
fn processes_in(namespaces: &BTreeSet<String>) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| netns_of(*pid).is_some_and(|ns| namespaces.contains(&ns)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iptables_mode_and_the_call_control_and_nothing_outlives_a_killed_sandbox() {
    let test = "network::iptables_mode_and_the_call_control_and_nothing_outlives_a_killed_sandbox";
    let Some(network) = options_or_skip(test, ProxyMode::Iptables, 1) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let identity = network.identity_bin.clone().expect("comb-identity");
    let mut child = comb_testkit::comb()
        .args([
            "sandbox",
            "--backend",
            "kube",
            "--network",
            "--proxy-mode",
            "iptables",
        ])
        .args(["--clusters", "solo", "--kubeconfig"])
        .arg(&kubeconfig)
        .env("COMB_IDENTITY_BIN", &identity)
        .stdout(Stdio::piped())
        .spawn()
        .expect("comb sandbox starts");
    let stdout = child.stdout.take().expect("its output");
    let sandbox = KillOnDrop(child);
    let lines = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take_while(|line| line != "ready")
            .collect::<Vec<_>>()
    })
    .await
    .expect("its output is read");
    let url = lines
        .iter()
        .find_map(|line| line.strip_prefix("cluster solo "))
        .unwrap_or_else(|| panic!("no cluster line: {lines:?}"))
        .to_string();

    // A Service of two Pods and a client, then calls through the proxy's control.
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("a client configuration");
    let client = kube::Client::try_from(config).expect("a client");
    let objects = [
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 8080}]}]}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-node", "namespace": "default"},
               "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nobody", "namespace": "default"},
               "spec": {"selector": {"app": "nobody"}, "ports": [{"port": 80}]}}),
        comb_federation::cli::packets::client_pod("default"),
    ];
    for object in &objects {
        let object: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
        let types = object.types.clone().expect("a kind");
        let gvk = kube::core::GroupVersionKind::try_from(&types).expect("a kind");
        let (resource, _) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .expect("served");
        Api::<DynamicObject>::namespaced_with(client.clone(), "default", &resource)
            .patch(
                object.metadata.name.as_deref().expect("a name"),
                &PatchParams::apply("network-test"),
                &Patch::Apply(&object),
            )
            .await
            .expect("applied");
    }
    let call = async |target: &str| -> CallOutcome {
        let request = http::Request::post(format!("{url}/_sandbox/network/call"))
            .body(
                json!({"namespace": "default", "pod": "client", "target": target})
                    .to_string()
                    .into_bytes(),
            )
            .expect("a request");
        let text = client
            .request_text(request)
            .await
            .expect("the control answers");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    let first = wait_until(
        "web answering through kube-proxy's iptables rules",
        async || {
            let outcome = call("web:80").await;
            if outcome.answered_by.is_some() {
                Ok(outcome)
            } else {
                Err(outcome)
            }
        },
    )
    .await;
    assert_eq!(first.port, Some(8080), "{first:?}");
    let mut pods = BTreeSet::new();
    for _ in 0..CALLS {
        let outcome = call("web:80").await;
        let by = outcome
            .answered_by
            .clone()
            .unwrap_or_else(|| panic!("{outcome:?}"));
        assert!(by.starts_with("solo/default/web-"), "{by}");
        pods.insert(by);
    }
    assert!(!pods.is_empty());
    // A NodePort answers on the node's address, as kube-proxy serves it on a real node.
    let node_port =
        Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "default")
            .get("web-node")
            .await
            .expect("the NodePort Service")
            .spec
            .and_then(|spec| spec.ports)
            .and_then(|ports| ports.first().and_then(|port| port.node_port))
            .expect("a node port allocated");
    let node_address = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("the nodes")
        .items
        .into_iter()
        .flat_map(|node| {
            node.status
                .and_then(|status| status.addresses)
                .unwrap_or_default()
        })
        .find(|address| address.type_ == "InternalIP")
        .map(|address| address.address)
        .expect("the node's InternalIP");
    let through_node_port = format!("{node_address}:{node_port}");
    // web-node is a Service of its own: kube-proxy programs its rules when its EndpointSlice
    // arrives, which may be after web's answered (the call was refused once, here).
    wait_until(
        "web-node answering on the node's address through kube-proxy's iptables rules",
        async || {
            let outcome = call(&through_node_port).await;
            if outcome.answered_by.is_some() {
                Ok(())
            } else {
                Err(outcome)
            }
        },
    )
    .await;
    for _ in 0..CALLS {
        let outcome = call(&through_node_port).await;
        let by = outcome
            .answered_by
            .clone()
            .unwrap_or_else(|| panic!("{through_node_port}: {outcome:?}"));
        assert!(by.starts_with("solo/default/web-"), "{by}");
    }
    // A Service without endpoints: kube-proxy rejects the connection.
    let refused = call("nobody:80").await;
    assert_eq!(refused.failure, Some(Failure::Refused), "{refused:?}");

    // SIGKILL: nothing it started may outlive it, in any namespace it made.
    let pid = sandbox.0.id();
    let processes = descendants(pid);
    let host = netns_of(std::process::id()).expect("our namespace");
    let namespaces: BTreeSet<String> = processes
        .iter()
        .filter_map(|p| netns_of(*p))
        .filter(|ns| *ns != host)
        .collect();
    assert!(
        namespaces.len() >= 2,
        "the node's and the Pods' namespaces hold processes: {namespaces:?}"
    );
    // Nor the directory its clusters kept their data and logs in.
    let directories = data_directories(&processes);
    assert_eq!(directories.len(), 1, "{directories:?}");
    let mut sandbox = sandbox;
    sandbox.0.kill().expect("SIGKILL");
    sandbox.0.wait().expect("reaped");
    wait_until(
        "every process and the directory of the killed sandbox gone",
        || async {
            let alive: Vec<u32> = processes
                .iter()
                .copied()
                .filter(|p| Path::new(&format!("/proc/{p}")).exists())
                .collect();
            let inside = processes_in(&namespaces);
            let kept: Vec<&PathBuf> = directories.iter().filter(|dir| dir.exists()).collect();
            if alive.is_empty() && inside.is_empty() && kept.is_empty() {
                Ok(())
            } else {
                Err((alive, inside, kept))
            }
        },
    )
    .await;
    let named = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    assert_eq!(
        String::from_utf8_lossy(&named.stdout).trim(),
        "",
        "no named namespace"
    );
}
