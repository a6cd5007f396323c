//! The simulated cluster end to end on one store: workloads get Pods, Pods run (or fail the way
//! their images ask), statuses follow, and deletion cascades through the garbage collector.

use std::time::Duration;

use comb_sandbox::sim::{self, SimConfig};
use comb_sandbox::{Propagation, ResourceType, Store, Subresource, gc, logs};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the simulated containers write a log line.
const LOG_INTERVAL: Duration = Duration::from_secs(2);

/// What the simulation publishes as the cluster's CA bundle.
const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/// A store with its collectors and simulated controllers, stopped on drop.
struct Cluster {
    store: Store,
    shutdown: CancellationToken,
}

impl Cluster {
    /// The cluster, or `None` on the real backend: these tests are of the emulator's own
    /// simulated controllers (the real ones are kube-controller-manager's). Said once.
    fn start() -> Option<Cluster> {
        static SAID: std::sync::Once = std::sync::Once::new();
        if comb_sandbox::Backend::from_env() != comb_sandbox::Backend::Emulator {
            SAID.call_once(|| {
                comb_sandbox::emulator_only(
                    "sim_workloads (every test)",
                    "they test the emulator's own simulated controllers on its store",
                );
            });
            return None;
        }
        Some(Cluster::running())
    }

    fn running() -> Cluster {
        let store = Store::default();
        let shutdown = CancellationToken::new();
        let config = SimConfig {
            pod_ready_delay: Duration::ZERO,
            crash_backoff: Duration::from_millis(20),
            ..SimConfig::default()
        };
        gc::spawn(store.clone(), shutdown.clone());
        sim::spawn(store.clone(), config, CA_PEM.to_string(), shutdown.clone());
        Cluster { store, shutdown }
    }

    fn rt(&self, group: &str, kind: &str) -> ResourceType {
        self.store
            .resource_type(group, kind)
            .unwrap_or_else(|| panic!("{group}/{kind} is served"))
    }

    fn create(&self, group: &str, kind: &str, object: Value) -> Value {
        let rt = self.rt(group, kind);
        self.store
            .create(&rt, Some("default"), object)
            .unwrap_or_else(|e| panic!("create {kind}: {e}"))
    }

    fn get(&self, group: &str, kind: &str, name: &str) -> Option<Value> {
        self.store
            .get(&self.rt(group, kind), Some("default"), name)
            .ok()
    }

    fn list(&self, group: &str, kind: &str, labels: Option<&str>) -> Vec<Value> {
        let rt = self.rt(group, kind);
        self.store
            .list(&rt, Some("default"), labels, None)
            .map(|(items, _)| items)
            .unwrap_or_default()
    }

    /// Waits until `check` holds, looking again after every change in the store.
    async fn wait_for<T>(&self, what: &str, mut check: impl FnMut(&Cluster) -> Option<T>) -> T {
        let mut events = self.store.subscribe();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(found) = check(self) {
                return found;
            }
            if tokio::time::timeout_at(deadline, events.recv())
                .await
                .is_err()
            {
                panic!("timed out waiting for {what}");
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "main", "image": image}]}},
        },
    })
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn ready(pod: &Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_rolls_out_scales_and_rolls_again() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    cluster.create("apps", "Deployment", deployment("web", 3, "nginx:1.27"));
    let done = cluster
        .wait_for("web to be available", |c| {
            let d = c.get("apps", "Deployment", "web")?;
            let progressed = condition(&d, "Progressing")?["reason"] == "NewReplicaSetAvailable";
            (d["status"]["availableReplicas"] == 3 && progressed).then_some(d)
        })
        .await;
    assert_eq!(done["status"]["readyReplicas"], 3);
    assert_eq!(done["status"]["updatedReplicas"], 3);
    assert_eq!(done["status"]["observedGeneration"], 1);
    assert_eq!(
        condition(&done, "Available").map(|c| c["reason"].clone()),
        Some(json!("MinimumReplicasAvailable"))
    );
    assert_eq!(
        done["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );

    let sets = cluster.list("apps", "ReplicaSet", Some("app=web"));
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(
        rs["metadata"]["ownerReferences"][0]["uid"],
        done["metadata"]["uid"]
    );
    let pods = cluster.list("", "Pod", Some("app=web"));
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let suffix = name
            .strip_prefix(&format!("web-{hash}-"))
            .unwrap_or_default();
        assert_eq!(suffix.len(), 5, "{name}");
        assert!(ready(pod), "{pod}");
        assert_eq!(pod["status"]["phase"], "Running");
        assert!(
            pod["status"]["podIP"]
                .as_str()
                .is_some_and(|ip| ip.starts_with("10.244."))
        );
        assert_eq!(pod["spec"]["nodeName"], "sandbox-node");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
    }
    let mut ips: Vec<&str> = pods
        .iter()
        .filter_map(|p| p["status"]["podIP"].as_str())
        .collect();
    ips.sort_unstable();
    ips.dedup();
    assert_eq!(ips.len(), 3);

    // Scale.
    let rt = cluster.rt("apps", "Deployment");
    let mut scaled = done.clone();
    scaled["spec"]["replicas"] = json!(5);
    cluster
        .store
        .update(&rt, Some("default"), scaled)
        .expect("scale");
    cluster
        .wait_for("five ready pods", |c| {
            let d = c.get("apps", "Deployment", "web")?;
            (d["status"]["readyReplicas"] == 5 && d["status"]["observedGeneration"] == 2)
                .then_some(())
        })
        .await;

    // A template change rolls to a new ReplicaSet and scales the old one to zero.
    let mut current = cluster.get("apps", "Deployment", "web").expect("exists");
    current["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    cluster
        .store
        .update(&rt, Some("default"), current)
        .expect("new template");
    let rolled = cluster
        .wait_for("the rollout to nginx:1.28", |c| {
            let d = c.get("apps", "Deployment", "web")?;
            let pods = c.list("", "Pod", Some("app=web"));
            let all_new = pods.len() == 5
                && pods
                    .iter()
                    .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.28" && ready(p));
            let complete = d["status"]["updatedReplicas"] == 5
                && d["status"]["replicas"] == 5
                && condition(&d, "Progressing")?["reason"] == "NewReplicaSetAvailable";
            (all_new && complete).then_some(d)
        })
        .await;
    assert_eq!(
        rolled["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    let sets = cluster.list("apps", "ReplicaSet", Some("app=web"));
    assert_eq!(sets.len(), 2);
    let old = sets
        .iter()
        .find(|s| s["metadata"]["labels"]["pod-template-hash"] == hash)
        .expect("old set kept");
    assert_eq!(old["spec"]["replicas"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_fail_the_way_their_images_ask() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    cluster.create(
        "apps",
        "Deployment",
        deployment("crash", 1, "example/crashloop:1"),
    );
    cluster.create(
        "apps",
        "Deployment",
        deployment("pull", 1, "example/imagepull:1"),
    );
    let mut greedy = deployment("greedy", 1, "nginx");
    greedy["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "100"}});
    cluster.create("apps", "Deployment", greedy);

    let crashing = cluster
        .wait_for("a crash loop with restarts", |c| {
            let pod = c.list("", "Pod", Some("app=crash")).pop()?;
            let restarts = pod["status"]["containerStatuses"][0]["restartCount"].as_u64()?;
            (restarts >= 2).then_some(pod)
        })
        .await;
    let status = &crashing["status"]["containerStatuses"][0];
    assert_eq!(status["state"]["waiting"]["reason"], "CrashLoopBackOff");
    let message = status["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    let pod_name = crashing["metadata"]["name"].as_str().unwrap_or_default();
    assert!(message.starts_with("back-off "), "{message}");
    assert!(
        message.contains(&format!(
            "restarting failed container=main pod={pod_name}_default("
        )),
        "{message}"
    );
    assert_eq!(status["lastState"]["terminated"]["exitCode"], 1);
    let previous_instance = logs::LogRequest {
        previous: true,
        ..logs::LogRequest::default()
    };
    let previous = logs::read(
        &cluster.store,
        "default",
        pod_name,
        &previous_instance,
        LOG_INTERVAL,
    )
    .expect("a previous log");
    assert!(
        previous.ends_with("fatal: exiting with code 1\n"),
        "{previous}"
    );

    let pulling = cluster
        .wait_for("an image pull back-off", |c| {
            let pod = c.list("", "Pod", Some("app=pull")).pop()?;
            (pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                == "ImagePullBackOff")
                .then_some(pod)
        })
        .await;
    assert_eq!(pulling["status"]["phase"], "Pending");
    assert_eq!(
        pulling["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "Back-off pulling image \"example/imagepull:1\""
    );

    let unschedulable = cluster
        .wait_for("an unschedulable pod", |c| {
            let pod = c.list("", "Pod", Some("app=greedy")).pop()?;
            condition(&pod, "PodScheduled")
                .filter(|s| s["status"] == "False")
                .cloned()
        })
        .await;
    assert_eq!(unschedulable["reason"], "Unschedulable");
    assert_eq!(
        unschedulable["message"],
        "0/1 nodes are available: 1 Insufficient cpu."
    );
    let d = cluster.get("apps", "Deployment", "greedy").expect("exists");
    assert_eq!(
        condition(&d, "Available").map(|c| c["status"].clone()),
        Some(json!("False"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_complete_or_fail() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let job = |name: &str, image: &str| {
        json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "task", "image": image}]}}},
        })
    };
    cluster.create("batch", "Job", job("ok", "busybox"));
    cluster.create("batch", "Job", job("bad", "busybox-fail"));
    let ok = cluster
        .wait_for("the job to complete", |c| {
            let j = c.get("batch", "Job", "ok")?;
            condition(&j, "Complete")
                .filter(|c| c["status"] == "True")
                .map(|_| j.clone())
        })
        .await;
    assert_eq!(ok["status"]["succeeded"], 1);
    assert!(ok["status"]["completionTime"].is_string());
    let pods = cluster.list("", "Pod", Some("job-name=ok"));
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["status"]["phase"], "Succeeded");
    let log = logs::read(
        &cluster.store,
        "default",
        pods[0]["metadata"]["name"].as_str().unwrap_or_default(),
        &logs::LogRequest::default(),
        LOG_INTERVAL,
    )
    .expect("a log");
    assert!(log.ends_with("completed\n"), "{log}");

    let bad = cluster
        .wait_for("the job to fail", |c| {
            let j = c.get("batch", "Job", "bad")?;
            condition(&j, "Failed")
                .filter(|c| c["status"] == "True")
                .map(|_| j.clone())
        })
        .await;
    assert_eq!(
        condition(&bad, "Failed").map(|c| c["reason"].clone()),
        Some(json!("BackoffLimitExceeded"))
    );
    assert_eq!(bad["status"]["failed"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_and_daemon_sets_get_their_pods() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    cluster.create("apps", "StatefulSet", json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {
            "replicas": 3, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "postgres"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }));
    cluster.create("apps", "DaemonSet", json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent"}]}},
        },
    }));
    let set = cluster
        .wait_for("three ready members", |c| {
            let s = c.get("apps", "StatefulSet", "db")?;
            (s["status"]["readyReplicas"] == 3).then_some(s)
        })
        .await;
    assert_eq!(
        set["status"]["currentRevision"],
        set["status"]["updateRevision"]
    );
    let mut names: Vec<String> = cluster
        .list("", "Pod", Some("app=db"))
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    assert_eq!(names, ["db-0", "db-1", "db-2"]);
    let claim = cluster
        .wait_for("a bound claim", |c| {
            let claim = c.get("", "PersistentVolumeClaim", "data-db-2")?;
            (claim["status"]["phase"] == "Bound").then_some(claim)
        })
        .await;
    assert_eq!(claim["status"]["capacity"]["storage"], "1Gi");

    let daemon = cluster
        .wait_for("the daemon to be ready", |c| {
            let d = c.get("apps", "DaemonSet", "agent")?;
            (d["status"]["numberReady"] == 1).then_some(d)
        })
        .await;
    assert_eq!(daemon["status"]["desiredNumberScheduled"], 1);
    let pods = cluster.list("", "Pod", Some("app=agent"));
    assert_eq!(pods.len(), 1);
    assert_eq!(
        pods[0]["metadata"]["labels"]["pod-template-generation"],
        "1"
    );

    // A template change is a new template generation; its Pod replaces the old one.
    let rt = cluster.rt("apps", "DaemonSet");
    cluster
        .store
        .modify(&rt, Some("default"), "agent", Subresource::Main, |ds| {
            ds["spec"]["template"]["spec"]["containers"][0]["image"] = json!("agent:2");
        })
        .expect("the template changes");
    cluster
        .wait_for("the daemon's pod of template generation 2", |c| {
            let pods = c.list("", "Pod", Some("app=agent"));
            (pods.len() == 1 && pods[0]["metadata"]["labels"]["pod-template-generation"] == "2")
                .then_some(())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_is_scheduled_once_its_gates_are_removed() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let mut gated = deployment("held", 1, "nginx");
    gated["spec"]["template"]["spec"]["schedulingGates"] = json!([{"name": "example.com/hold"}]);
    cluster.create("apps", "Deployment", gated);
    let pod = cluster
        .wait_for("a gated pod", |c| c.list("", "Pod", Some("app=held")).pop())
        .await;
    let scheduled = condition(&pod, "PodScheduled").expect("a PodScheduled condition");
    assert_eq!(scheduled["reason"], "SchedulingGated", "{pod}");
    assert!(pod["spec"]["nodeName"].is_null(), "{pod}");

    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    cluster
        .store
        .modify(
            &cluster.rt("", "Pod"),
            Some("default"),
            &name,
            Subresource::Main,
            |pod| {
                pod["spec"]["schedulingGates"] = Value::Null;
            },
        )
        .expect("the gates are removed");
    let deployment = cluster
        .wait_for("the released pod to be ready", |c| {
            let d = c.get("apps", "Deployment", "held")?;
            (d["status"]["readyReplicas"] == 1).then_some(d)
        })
        .await;
    assert_eq!(deployment["status"]["updatedReplicas"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_get_unique_addresses() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let service = |name: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec});
    for i in 0..5 {
        cluster.create(
            "",
            "Service",
            service(
                &format!("svc-{i}"),
                json!({"selector": {"app": "x"}, "ports": [{"port": 80}]}),
            ),
        );
    }
    cluster.create(
        "",
        "Service",
        service(
            "headless",
            json!({"clusterIP": "None", "ports": [{"port": 80}]}),
        ),
    );
    cluster.create(
        "",
        "Service",
        service(
            "external",
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
        ),
    );
    cluster.create(
        "",
        "Service",
        service(
            "lb",
            json!({"type": "LoadBalancer", "ports": [{"port": 443}]}),
        ),
    );

    let lb = cluster
        .wait_for("a load balancer ingress", |c| {
            let s = c.get("", "Service", "lb")?;
            s["status"]["loadBalancer"]["ingress"][0]["ip"]
                .is_string()
                .then_some(s)
        })
        .await;
    assert!(
        lb["status"]["loadBalancer"]["ingress"][0]["ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("192.0.2."))
    );
    assert!(
        lb["spec"]["ports"][0]["nodePort"]
            .as_u64()
            .is_some_and(|p| (30000..=32767).contains(&p))
    );
    let ips = cluster
        .wait_for("every cluster IP", |c| {
            let services = c.list("", "Service", None);
            let ips: Vec<String> = services
                .iter()
                .filter(|s| s["spec"]["type"] != "ExternalName")
                .filter_map(|s| s["spec"]["clusterIP"].as_str().map(str::to_string))
                .collect();
            (ips.len() == 7).then_some(ips)
        })
        .await;
    let mut allocated: Vec<&String> = ips.iter().filter(|ip| *ip != "None").collect();
    assert!(allocated.iter().all(|ip| ip.starts_with("10.96.")));
    allocated.sort();
    allocated.dedup();
    assert_eq!(allocated.len(), 6, "{ips:?}");
    let external = cluster.get("", "Service", "external").expect("exists");
    assert!(external["spec"].get("clusterIP").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_cron_job_starts_a_job() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    cluster.create("batch", "CronJob", json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "backup"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "b", "image": "backup"}]}}}}},
    }));
    // Pretend the last run was two minutes ago: the run of the last minute is due now.
    let rt = cluster.rt("batch", "CronJob");
    let two_minutes_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(2);
    let last = two_minutes_ago.strftime("%Y-%m-%dT%H:%M:00Z").to_string();
    cluster
        .store
        .modify(&rt, Some("default"), "backup", Subresource::Status, |cj| {
            cj["status"] = json!({"lastScheduleTime": last});
        })
        .expect("status");
    let job = cluster
        .wait_for("the scheduled job", |c| {
            c.list("batch", "Job", None)
                .into_iter()
                .find(|j| j["metadata"]["ownerReferences"][0]["name"] == "backup")
        })
        .await;
    assert!(
        job["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("backup-"))
    );
    // The Job runs at once (no ready delay): the CronJob records its success.
    let cronjob = cluster
        .wait_for("the cron job to record the run's success", |c| {
            let cj = c.get("batch", "CronJob", "backup")?;
            cj["status"]["lastSuccessfulTime"].is_string().then_some(cj)
        })
        .await;
    assert!(cronjob["status"]["lastScheduleTime"].is_string());
    assert!(cronjob["status"].get("active").is_none(), "{cronjob}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_removes_its_replica_sets_and_pods() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    cluster.create("apps", "Deployment", deployment("gone", 2, "nginx"));
    cluster
        .wait_for("two pods", |c| {
            (c.list("", "Pod", Some("app=gone")).len() == 2).then_some(())
        })
        .await;
    let rt = cluster.rt("apps", "Deployment");
    cluster
        .store
        .delete(&rt, Some("default"), "gone", Propagation::Background)
        .expect("delete");
    cluster
        .wait_for("the dependents to go", |c| {
            let empty = c.list("", "Pod", Some("app=gone")).is_empty()
                && c.list("apps", "ReplicaSet", Some("app=gone")).is_empty();
            empty.then_some(())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_deployments_settle() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let count = 300;
    // Followed through the events, so waiting costs little next to the simulation itself.
    let mut events = cluster.store.subscribe();
    for i in 0..count {
        cluster.create(
            "apps",
            "Deployment",
            deployment(&format!("d{i}"), 1, "nginx"),
        );
    }
    let mut settled = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while settled.len() < count {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {count} deployments settled", settled.len()))
            .expect("the events keep up");
        if event.resource.kind != "Deployment" {
            continue;
        }
        let d = &event.object;
        let name = d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let done = d["status"]["availableReplicas"] == 1
            && condition(d, "Progressing").is_some_and(|p| p["reason"] == "NewReplicaSetAvailable");
        if done {
            settled.insert(name);
        } else {
            settled.remove(&name);
        }
    }
    assert_eq!(cluster.list("", "Pod", None).len(), count);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_is_registered_and_ready() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let rt = cluster.rt("", "Node");
    let node = cluster
        .wait_for("the node", |c| {
            let node = c.store.get(&rt, None, "sandbox-node").ok()?;
            node["status"]["nodeInfo"]["kubeletVersion"]
                .is_string()
                .then_some(node)
        })
        .await;
    assert_eq!(node["status"]["capacity"]["cpu"], "64");
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        "sandbox-node"
    );
    let ready = condition(&node, "Ready").expect("a Ready condition");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("KubeletReady"))
    );
}

/// The Endpoints of Service `shop`, with how many addresses it and its EndpointSlice list, once
/// both exist.
fn shop_endpoints(c: &Cluster) -> Option<(Value, usize, usize)> {
    let endpoints = c.get("", "Endpoints", "shop")?;
    let slice = c
        .list(
            "discovery.k8s.io",
            "EndpointSlice",
            Some("kubernetes.io/service-name=shop"),
        )
        .pop()?;
    let addresses = endpoints["subsets"][0]["addresses"].as_array()?.len();
    let slice_endpoints = slice["endpoints"].as_array()?.len();
    Some((endpoints, addresses, slice_endpoints))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_service_lists_its_ready_pods() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let mut web = deployment("shop", 2, "nginx");
    web["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"name": "http", "containerPort": 8080}]);
    cluster.create("apps", "Deployment", web);
    cluster.create("", "Service", json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop"},
        "spec": {"selector": {"app": "shop"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }));
    let endpoints = cluster
        .wait_for("two ready addresses", |c| {
            let (e, addresses, slice_endpoints) = shop_endpoints(c)?;
            (addresses == 2 && slice_endpoints == 2).then_some(e)
        })
        .await;
    assert_eq!(
        endpoints["subsets"][0]["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    let slices = cluster.list(
        "discovery.k8s.io",
        "EndpointSlice",
        Some("kubernetes.io/service-name=shop"),
    );
    assert_eq!(slices.len(), 1);

    // Scaled to one, one address is left.
    let rt = cluster.rt("apps", "Deployment");
    cluster
        .store
        .modify(&rt, Some("default"), "shop", Subresource::Main, |d| {
            d["spec"]["replicas"] = json!(1)
        })
        .expect("scaled");
    cluster
        .wait_for("one address", |c| {
            let (_, addresses, slice_endpoints) = shop_endpoints(c)?;
            (addresses == 1 && slice_endpoints == 1).then_some(())
        })
        .await;

    // A Service without a selector is left alone.
    cluster.create(
        "",
        "Service",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "manual"},
            "spec": {"ports": [{"port": 5432}]},
        }),
    );
    cluster
        .wait_for("the manual service's cluster IP", |c| {
            c.get("", "Service", "manual")?["spec"]["clusterIP"]
                .as_str()
                .map(str::to_string)
        })
        .await;
    assert!(cluster.get("", "Endpoints", "manual").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_replaced_without_its_cluster_ip_keeps_it() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    cluster.create(
        "",
        "Service",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
            "spec": {"type": "NodePort", "ports": [{"name": "pg", "port": 5432}]},
        }),
    );
    let allocated = cluster
        .wait_for("the addresses", |c| {
            let s = c.get("", "Service", "db")?;
            s["spec"]["ports"][0]["nodePort"].is_u64().then_some(s)
        })
        .await;
    let rt = cluster.rt("", "Service");
    cluster
        .store
        .modify(&rt, Some("default"), "db", Subresource::Main, |s| {
            s["spec"] = json!({"type": "NodePort", "ports": [{"name": "pg", "port": 5433}]});
        })
        .expect("replaced");
    let kept = cluster
        .wait_for("the addresses back", |c| {
            let s = c.get("", "Service", "db")?;
            s["spec"]["ports"][0]["nodePort"].is_u64().then_some(s)
        })
        .await;
    assert_eq!(kept["spec"]["clusterIP"], allocated["spec"]["clusterIP"]);
    assert_eq!(
        kept["spec"]["ports"][0]["nodePort"],
        allocated["spec"]["ports"][0]["nodePort"]
    );
    assert_eq!(kept["spec"]["ports"][0]["port"], 5433);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_gets_its_service_account_and_ca_bundle_back() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let namespaces = cluster.rt("", "Namespace");
    cluster
        .store
        .create(&namespaces, None, json!({"metadata": {"name": "team"}}))
        .expect("namespace");
    let (sa, cm) = (
        cluster.rt("", "ServiceAccount"),
        cluster.rt("", "ConfigMap"),
    );
    let published = |c: &Cluster| {
        let sa = c.store.get(&sa, Some("team"), "default").ok()?;
        let cm = c.store.get(&cm, Some("team"), "kube-root-ca.crt").ok()?;
        (cm["data"]["ca.crt"] == CA_PEM).then_some((sa, cm))
    };
    let (first_sa, _) = cluster
        .wait_for("the namespace's defaults", published)
        .await;
    // The system namespaces get them too.
    cluster
        .wait_for("kube-system's CA bundle", |c| {
            c.store
                .get(&cm, Some("kube-system"), "kube-root-ca.crt")
                .ok()
        })
        .await;

    cluster
        .store
        .delete(&sa, Some("team"), "default", Propagation::Background)
        .expect("deleted");
    cluster
        .store
        .modify(
            &cm,
            Some("team"),
            "kube-root-ca.crt",
            Subresource::Main,
            |c| {
                c["data"]["ca.crt"] = json!("tampered");
            },
        )
        .expect("tampered");
    let (again, _) = cluster
        .wait_for("the defaults back", |c| {
            published(c).filter(|(s, _)| s["metadata"]["uid"] != first_sa["metadata"]["uid"])
        })
        .await;
    assert_eq!(again["metadata"]["name"], "default");
}
