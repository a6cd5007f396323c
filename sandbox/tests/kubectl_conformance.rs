//! The real, installed `kubectl` against sandbox clusters: what an operator would type works as
//! on a real cluster. Each test skips with a printed reason when kubectl is not installed (and
//! fails in CI, which installs it).
//!
//! On the backend `COMB_TEST_BACKEND` names: on the emulator each test starts its clusters
//! (milliseconds) and works in `default`; on the real backend the tests share one set of
//! control planes and each works in a namespace of its own (kubectl's `--namespace`).

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use comb_sandbox::controls::{ClusterControls, Controls};
use comb_sandbox::sim::Simulation;
use comb_sandbox::{
    Backend, Clusters, ExtraContext, SandboxOptions, SharedClusters, emulator_only,
};
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::time::Instant;

/// How often the emulator's containers write a log line here.
const LOG_INTERVAL: Duration = Duration::from_millis(100);

/// Two clusters (`prod`, `dev`) and an extra context `staging` = prod, namespace staging.
fn options() -> SandboxOptions {
    let mut options = SandboxOptions::clusters(["prod", "dev"]);
    options.contexts.push(ExtraContext {
        name: "staging".into(),
        cluster: "prod".into(),
        namespace: Some("staging".into()),
    });
    options
}

/// The real control planes this test binary shares.
fn shared() -> &'static SharedClusters {
    static SHARED: OnceLock<SharedClusters> = OnceLock::new();
    SHARED.get_or_init(|| {
        SharedClusters::start(Backend::Kube, options())
            .expect("the shared real control planes start")
    })
}

enum Held {
    Own(Box<Clusters>),
    Shared(&'static SharedClusters),
}

struct Fixture {
    held: Held,
    kubectl: PathBuf,
    kubeconfig: PathBuf,
    home: TempDir,
    /// The test's namespace on the shared real clusters (kubectl's `--namespace`).
    namespace: Option<String>,
}

impl Fixture {
    async fn start() -> Option<Fixture> {
        let kubectl = comb_sandbox::kubectl_or_skip("kubectl_conformance")?;
        let (held, namespace) = match Backend::from_env() {
            Backend::Emulator => {
                let mut options = options();
                options.extensions = vec![
                    Arc::new(Simulation::default()),
                    Arc::new(ClusterControls::default()),
                ];
                // Followed logs grow within a test's patience.
                options.server.log_interval = LOG_INTERVAL;
                let clusters = Clusters::start(Backend::Emulator, options, None)
                    .await
                    .expect("the sandbox starts");
                (Held::Own(Box::new(clusters)), None)
            }
            Backend::Kube => {
                let id = uuid::Uuid::new_v4().simple().to_string();
                (Held::Shared(shared()), Some(format!("t-{}", &id[..10])))
            }
        };
        let home = tempfile::tempdir().expect("a temporary directory");
        let kubeconfig = home.path().join("kubeconfig");
        let fixture = Fixture {
            held,
            kubectl,
            kubeconfig,
            home,
            namespace,
        };
        fixture
            .clusters()
            .write_kubeconfig(&fixture.kubeconfig)
            .expect("the kubeconfig is written");
        if let Some(namespace) = &fixture.namespace {
            let manifest =
                format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n");
            for cluster in ["prod", "dev"] {
                fixture
                    .ok_with_input(&["--context", cluster, "create", "-f", "-"], &manifest)
                    .await;
            }
        }
        Some(fixture)
    }

    fn clusters(&self) -> &Clusters {
        match &self.held {
            Held::Own(clusters) => clusters,
            Held::Shared(shared) => shared.clusters(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.kubectl);
        command.arg("--kubeconfig").arg(&self.kubeconfig);
        // The test's namespace, unless the command names one (or the staging context's).
        let chooses = args.first() == Some(&"config")
            || args
                .iter()
                .any(|a| matches!(*a, "-n" | "--namespace" | "staging"));
        if let Some(namespace) = self.namespace.as_deref().filter(|_| !chooses) {
            command.arg("--namespace").arg(namespace);
        }
        command
            .args(args)
            // kubectl caches discovery per server; ports are reused between runs.
            .env("KUBECACHEDIR", self.home.path().join("cache"))
            .env("HOME", self.home.path())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().await.expect("kubectl runs")
    }

    /// Runs kubectl and returns its stdout, failing the test when it fails.
    async fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(
            output.status.success(),
            "kubectl {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).to_string()
    }

    /// Runs kubectl with `input` on stdin.
    async fn ok_with_input(&self, args: &[&str], input: &str) -> String {
        let mut command = self.command(args);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command.spawn().expect("kubectl starts");
        let output = feed(child, input).await;
        assert!(
            output.status.success(),
            "kubectl {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).to_string()
    }

    async fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(args).await;
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("kubectl {} printed no JSON ({e}): {text}", args.join(" ")))
    }

    fn controls(&self, cluster: &str) -> Controls {
        self.clusters()
            .controls(cluster)
            .expect("controls for the cluster")
    }

    /// Deployment [`WEB`] applied in prod and ready: the name of its first Pod.
    async fn web_ready(&self) -> String {
        self.ok_with_input(&["apply", "-f", "-"], WEB).await;
        wait_until_ready(self, "prod", "web", 2).await;
        let pod = self
            .ok(&[
                "get",
                "pods",
                "-l",
                "app=web",
                "-o",
                "jsonpath={.items[0].metadata.name}",
            ])
            .await;
        pod.trim().to_string()
    }

    /// How many objects of `kind` in the test's namespace of `cluster` match `labels`.
    async fn count(&self, cluster: &str, kind: &str, labels: &str) -> usize {
        self.ok(&[
            "--context",
            cluster,
            "get",
            kind,
            "-l",
            labels,
            "-o",
            "name",
        ])
        .await
        .lines()
        .count()
    }
}

/// Waits until `check` holds, asking again every 100 ms, failing after 30 s. (kubectl's
/// answers are the test's only view, the same on both backends.)
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: main
        image: nginx:1.27
        ports:
        - containerPort: 80
"#;

fn configmap(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: b\n")
}

async fn wait_until_ready(fixture: &Fixture, cluster: &str, name: &str, replicas: i64) {
    let args = [
        "--context",
        cluster,
        "get",
        "deployment",
        name,
        "-o",
        "json",
    ];
    eventually("the deployment to be ready", async || {
        fixture.json(&args).await["status"]["readyReplicas"] == replicas
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contexts_switch_between_clusters() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    let contexts = fx.ok(&["config", "get-contexts", "-o", "name"]).await;
    let mut names: Vec<&str> = contexts.lines().collect();
    names.sort();
    assert_eq!(names, ["dev", "prod", "staging"]);
    assert_eq!(fx.ok(&["config", "current-context"]).await.trim(), "prod");

    fx.ok_with_input(
        &["--context", "dev", "create", "-f", "-"],
        &configmap("only-in-dev"),
    )
    .await;
    let missing = fx
        .run(&["--context", "prod", "get", "configmap", "only-in-dev"])
        .await;
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains(r#"configmaps "only-in-dev" not found"#),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    assert_eq!(
        fx.ok(&[
            "--context",
            "dev",
            "get",
            "configmap",
            "only-in-dev",
            "-o",
            "name"
        ])
        .await
        .trim(),
        "configmap/only-in-dev"
    );

    // The extra context is prod with another default namespace.
    // Manifests rather than `kubectl create namespace`: kubectl's typed create sends protobuf.
    let namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: staging\n";
    fx.ok_with_input(&["--context", "prod", "create", "-f", "-"], namespace)
        .await;
    fx.ok_with_input(
        &["--context", "staging", "create", "-f", "-"],
        &configmap("staged"),
    )
    .await;
    let staged = fx
        .json(&[
            "--context",
            "prod",
            "get",
            "configmap",
            "staged",
            "-n",
            "staging",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(staged["metadata"]["namespace"], "staging");

    fx.ok(&["config", "use-context", "dev"]).await;
    assert_eq!(
        fx.ok(&["get", "configmap", "only-in-dev", "-o", "name"])
            .await
            .trim(),
        "configmap/only-in-dev"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_and_label_selection() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    let manifests = format!(
        "{WEB}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: front\n  labels: {{tier: front}}\ndata: {{a: b}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: back\n  labels: {{tier: back}}\n"
    );
    let created = fx.ok_with_input(&["create", "-f", "-"], &manifests).await;
    assert!(created.contains("deployment.apps/web created"), "{created}");
    assert!(created.contains("configmap/front created"), "{created}");

    let web = fx.json(&["get", "deployment", "web", "-o", "json"]).await;
    assert_eq!(web["kind"], "Deployment");
    assert_eq!(web["spec"]["replicas"], 2);
    assert!(web["metadata"]["uid"].is_string());
    assert!(web["metadata"]["resourceVersion"].is_string());

    assert_eq!(
        fx.ok(&["get", "configmaps", "-l", "tier=front", "-o", "name"])
            .await
            .trim(),
        "configmap/front"
    );
    let both = fx
        .ok(&[
            "get",
            "configmaps",
            "-l",
            "tier in (front,back)",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(both.lines().count(), 2, "{both}");
    assert_eq!(
        fx.ok(&["get", "configmaps", "-l", "tier!=front,tier", "-o", "name"])
            .await
            .trim(),
        "configmap/back"
    );

    wait_until_ready(&fx, "prod", "web", 2).await;
    let pods = fx
        .json(&["get", "pods", "-l", "app=web", "-o", "json"])
        .await;
    assert_eq!(pods["items"].as_array().map(Vec::len), Some(2));
    let nodes = fx.ok(&["get", "nodes"]).await;
    assert!(
        nodes.contains("sandbox-node") && nodes.contains("Ready"),
        "{nodes}"
    );
    let described = fx.ok(&["describe", "deployment", "web"]).await;
    assert!(described.contains("NewReplicaSetAvailable"), "{described}");
    let table = fx.ok(&["get", "deployment", "web"]).await;
    assert!(table.contains("2/2"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_client_side_and_server_side() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    let out = fx.ok_with_input(&["apply", "-f", "-"], WEB).await;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let scaled = WEB.replace("replicas: 2", "replicas: 3");
    let out = fx.ok_with_input(&["apply", "-f", "-"], &scaled).await;
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    let out = fx.ok_with_input(&["apply", "-f", "-"], &scaled).await;
    assert!(out.contains("deployment.apps/web unchanged"), "{out}");
    let web = fx.json(&["get", "deployment", "web", "-o", "json"]).await;
    assert_eq!(web["spec"]["replicas"], 3);
    let last_applied =
        web["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap_or_default();
    assert!(last_applied.contains(r#""replicas":3"#), "{last_applied}");
    wait_until_ready(&fx, "prod", "web", 3).await;

    let config =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: fast\n";
    let out = fx
        .ok_with_input(&["apply", "--server-side", "-f", "-"], config)
        .await;
    assert!(
        out.contains("configmap/settings serverside-applied"),
        "{out}"
    );
    let out = fx
        .ok_with_input(
            &["apply", "--server-side", "-f", "-"],
            &config.replace("fast", "slow"),
        )
        .await;
    assert!(
        out.contains("configmap/settings serverside-applied"),
        "{out}"
    );
    let settings = fx
        .json(&[
            "get",
            "configmap",
            "settings",
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .await;
    assert_eq!(settings["data"]["mode"], "slow");
    let managers: Vec<&str> = settings["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(managers, ["kubectl"]);
    assert_eq!(
        settings["metadata"]["managedFields"][0]["operation"],
        "Apply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_cascades_in_the_background() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    fx.ok_with_input(&["apply", "-f", "-"], WEB).await;
    wait_until_ready(&fx, "prod", "web", 2).await;
    assert_eq!(fx.count("prod", "replicasets", "app=web").await, 1);
    assert_eq!(fx.count("prod", "pods", "app=web").await, 2);

    let out = fx
        .ok(&["delete", "deployment", "web", "--cascade=background"])
        .await;
    assert!(out.contains(r#"deployment.apps "web" deleted"#), "{out}");
    eventually("the replica set and pods to go", async || {
        fx.count("prod", "replicasets,pods", "app=web").await == 0
    })
    .await;
    let left = fx
        .ok(&["get", "pods,replicasets", "-l", "app=web", "-o", "name"])
        .await;
    assert_eq!(left.trim(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_pods_and_deployments() {
    if !emulator_only(
        "kubectl_conformance::logs_of_pods_and_deployments",
        "the emulator's simulated containers write logs; kwok's fake ones have none",
    ) {
        return;
    }
    let Some(fx) = Fixture::start().await else {
        return;
    };
    let pod = fx.web_ready().await;
    let log = fx.ok(&["logs", "deployment/web"]).await;
    assert!(log.contains("/main started image nginx:1.27"), "{log}");

    let tail = fx.ok(&["logs", &pod, "-c", "main", "--tail=1"]).await;
    assert_eq!(tail.lines().count(), 1, "{tail}");
    let previous = fx.run(&["logs", &pod, "--previous"]).await;
    assert!(!previous.status.success());
    assert!(
        String::from_utf8_lossy(&previous.stderr)
            .contains("previous terminated container \"main\""),
        "{}",
        String::from_utf8_lossy(&previous.stderr)
    );
}

/// The lines of a followed log, as kubectl prints them.
type Followed = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// For test `test` (emulator only: kwok's containers write no logs), `kubectl logs -f` of the
/// first Pod of Deployment `web` (started and ready): the fixture, kubectl, its output lines,
/// and the Pod's name.
async fn follow_first_web_pod(
    test: &str,
) -> Option<(Fixture, tokio::process::Child, Followed, String)> {
    use tokio::io::AsyncBufReadExt as _;
    if !emulator_only(
        test,
        "the emulator's simulated containers write logs; kwok's fake ones have none",
    ) {
        return None;
    }
    let fx = Fixture::start().await?;
    let pod = fx.web_ready().await;
    let mut child = fx
        .command(&["logs", "-f", &pod])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kubectl starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    Some((fx, child, tokio::io::BufReader::new(stdout).lines(), pod))
}

/// The next line of a followed log, failing after 20 s (`None`: the stream ended).
async fn next_line(lines: &mut Followed) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("a log line within 20 s")
        .expect("kubectl's output reads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_a_running_container() {
    let test = "kubectl_conformance::logs_follow_a_running_container";
    let Some((_fx, mut child, mut lines, pod)) = follow_first_web_pod(test).await else {
        return;
    };
    let first = next_line(&mut lines).await.expect("the log so far");
    assert!(
        first.ends_with(&format!("{pod}/main started image nginx:1.27")),
        "{first}"
    );
    // Lines keep coming while the container runs: the stream stays open.
    let mut heartbeats = Vec::new();
    while heartbeats.len() < 3 {
        let line = next_line(&mut lines)
            .await
            .expect("the stream stays open while the container runs");
        if line.contains(" heartbeat ") {
            heartbeats.push(line);
        }
    }
    assert!(
        child.try_wait().expect("kubectl's status").is_none(),
        "kubectl logs -f still follows"
    );
    let numbers: Vec<u64> = heartbeats
        .iter()
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(
        numbers.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "{heartbeats:?}"
    );
    child.kill().await.expect("kubectl stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_ends_when_the_pod_is_deleted() {
    let test = "kubectl_conformance::logs_follow_ends_when_the_pod_is_deleted";
    let Some((fx, mut child, mut lines, pod)) = follow_first_web_pod(test).await else {
        return;
    };
    next_line(&mut lines).await.expect("the log so far");
    fx.ok(&["delete", "pod", &pod, "--wait=false"]).await;
    // Whatever was written before, then the end.
    while next_line(&mut lines).await.is_some() {}
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("kubectl ends with the stream")
        .expect("kubectl's status");
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_sees_events_until_the_request_timeout() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    fx.ok_with_input(&["create", "-f", "-"], &configmap("early"))
        .await;
    let controls = fx.controls("prod");
    let watcher = fx
        .command(&[
            "get",
            "configmaps",
            "-w",
            "--request-timeout=3s",
            "-o",
            "name",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    // The watch is open once the server has seen it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while controls.request_count("watch", "configmaps") == 0 {
        assert!(
            Instant::now() < deadline,
            "kubectl never opened its watch: {:?}",
            controls.requests()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fx.ok_with_input(&["create", "-f", "-"], &configmap("late"))
        .await;
    let output = watcher
        .wait_with_output()
        .await
        .expect("kubectl ends at its timeout");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("configmap/early"), "{stdout}");
    assert!(stdout.contains("configmap/late"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_an_established_crd() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
"#;
    fx.ok_with_input(&["--context", "dev", "apply", "-f", "-"], crd)
        .await;
    let waited = fx
        .ok(&[
            "--context",
            "dev",
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=20s",
        ])
        .await;
    assert!(waited.contains("condition met"), "{waited}");
    let widget =
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n";
    fx.ok_with_input(&["--context", "dev", "apply", "-f", "-"], widget)
        .await;
    assert_eq!(
        fx.ok(&["--context", "dev", "get", "wd", "-o", "name"])
            .await
            .trim(),
        "widget.example.com/w1"
    );
    // The other cluster has its own CRDs.
    let elsewhere = fx.run(&["--context", "prod", "get", "widgets"]).await;
    assert!(!elsewhere.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_scale_and_restart() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    fx.ok_with_input(&["apply", "-f", "-"], WEB).await;
    let status = fx
        .ok(&["rollout", "status", "deployment/web", "--timeout=20s"])
        .await;
    assert!(
        status.contains(r#"deployment "web" successfully rolled out"#),
        "{status}"
    );

    let scaled = fx.ok(&["scale", "deployment/web", "--replicas=3"]).await;
    assert!(scaled.contains("deployment.apps/web scaled"), "{scaled}");
    wait_until_ready(&fx, "prod", "web", 3).await;

    let restarted = fx.ok(&["rollout", "restart", "deployment/web"]).await;
    assert!(
        restarted.contains("deployment.apps/web restarted"),
        "{restarted}"
    );
    let status = fx
        .ok(&["rollout", "status", "deployment/web", "--timeout=20s"])
        .await;
    assert!(status.contains("successfully rolled out"), "{status}");
    let history = fx.ok(&["rollout", "history", "deployment/web"]).await;
    assert!(history.lines().any(|l| l.starts_with('2')), "{history}");
    let sets = fx
        .ok(&["get", "replicasets", "-l", "app=web", "-o", "name"])
        .await;
    assert_eq!(sets.lines().count(), 2, "{sets}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_onto_an_existing_comb_sends_a_merge_patch() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    let crd = comb_api::crd(comb_api::DEFAULT_GROUP).expect("the Comb CRD");
    fx.ok_with_input(&["--context", "dev", "create", "-f", "-"], &crd.to_string())
        .await;
    fx.ok(&[
        "--context",
        "dev",
        "wait",
        "--for=condition=Established",
        "crd/combs.comb.internal",
        "--timeout=20s",
    ])
    .await;
    let comb = |class: &str| {
        format!(
            "apiVersion: comb.internal/v1\nkind: Comb\nmetadata:\n  name: c1\nspec:\n  class: {class}\n"
        )
    };
    fx.ok_with_input(&["--context", "dev", "apply", "-f", "-"], &comb("Stub"))
        .await;
    // The second apply patches: kubectl finds no strategic merge patch for Combs in the
    // OpenAPI v3 document, as on a real server, and sends a JSON merge patch.
    let applied = fx
        .ok_with_input(&["--context", "dev", "apply", "-f", "-"], &comb("Other"))
        .await;
    assert!(
        applied.contains("comb.comb.internal/c1 configured"),
        "{applied}"
    );
    let live = fx
        .json(&["--context", "dev", "get", "comb", "c1", "-o", "json"])
        .await;
    assert_eq!(live["spec"]["class"], "Other");
    // A name that is no DNS-1123 subdomain is refused, as by kube-apiserver.
    let refused = fx
        .command(&["--context", "dev", "create", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let output = feed(refused, &comb("Stub").replace("name: c1", "name: Bad_Name")).await;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains(r#""Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn feed(mut child: tokio::process::Child, input: &str) -> Output {
    let mut stdin = child.stdin.take().expect("a stdin");
    stdin
        .write_all(input.as_bytes())
        .await
        .expect("stdin written");
    drop(stdin);
    child.wait_with_output().await.expect("kubectl finishes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_a_list_of_objects() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    // kubectl validates a List on the client against /openapi/v2, which must be served.
    let list = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l1"}, "data": {"a": "1"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l2"}}]}"#;
    let created = fx.ok_with_input(&["create", "-f", "-"], list).await;
    assert!(created.contains("configmap/l1 created"), "{created}");
    assert!(created.contains("configmap/l2 created"), "{created}");
    let l1 = fx.json(&["get", "configmap", "l1", "-o", "json"]).await;
    assert_eq!(l1["data"]["a"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_deployment_sends_protobuf() {
    let Some(fx) = Fixture::start().await else {
        return;
    };
    let created = fx
        .ok(&[
            "create",
            "deployment",
            "proto",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=8080",
            "--",
            "sleep",
            "60",
        ])
        .await;
    assert!(
        created.contains("deployment.apps/proto created"),
        "{created}"
    );
    let live = fx.json(&["get", "deployment", "proto", "-o", "json"]).await;
    assert_eq!(live["metadata"]["labels"]["app"], "proto");
    assert_eq!(live["spec"]["replicas"], 2);
    assert_eq!(live["spec"]["selector"]["matchLabels"]["app"], "proto");
    assert_eq!(live["spec"]["strategy"]["type"], "RollingUpdate");
    let container = &live["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "nginx");
    assert_eq!(container["image"], "nginx:1.27");
    assert_eq!(container["command"], serde_json::json!(["sleep", "60"]));
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    assert_eq!(container["ports"][0]["protocol"], "TCP");
    assert_eq!(
        live["spec"]["template"]["metadata"]["labels"]["app"],
        "proto"
    );
}
