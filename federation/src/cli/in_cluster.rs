//! comb as its users run it (`comb demo --backend kube --network --in-cluster`): its image, loaded
//! into the real node of prod's cluster, installed by its chart with `helm install`, running as a
//! Pod with the chart's defaults (non-root, read-only root filesystem, no capabilities, probes).
//!
//! The demo's layers, seen from inside that Pod: prod and staging through the Pod's own
//! ServiceAccount (a kubeconfig whose contexts read the projected token and the cluster's CA
//! from the Pod's files, so that `via` reads as layers), dev through a kubeconfig of dev's API
//! server in a Secret (`kubeconfigSecret`), reached across the sandbox network as one cluster
//! reaches another. The chart's webhook is on: kube-apiserver calls it through its Service.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use comb_sandbox::real::node::{REAL_NODE_NAME, REAL_NODE_TAINT};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

use std::process::ExitCode;
use std::time::Instant;

use jiff::Timestamp;

use crate::cli::common::{Federation, StopSignals, block_on};
use crate::cli::demo::{
    CHECK_EVERY, DemoArgs, DemoWorld, follow_hints, print_calls, read_rows, shortfalls,
};
use crate::cli::{get, packets};

/// The release namespace and name, as the README's install has them.
pub const NAMESPACE: &str = "comb-system";
pub const RELEASE: &str = "comb";

/// The Secret with the kubeconfig of the other clusters' layers.
const CLUSTERS_SECRET: &str = "comb-clusters";

/// A Comb the webhook refuses (its class is not one comb knows).
pub const REFUSED_COMB: &str = "apiVersion: comb.internal/v1
kind: Comb
metadata:
  name: refused
spec:
  class: Redis
";

/// Where the chart is: this repository's (the demo runs from a checkout).
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("charts")
        .join("comb")
}

/// The image archive the demo loads: `$COMB_IMAGE`, else the last one `tests/image/build` wrote.
pub fn default_image() -> PathBuf {
    if let Some(path) = std::env::var_os("COMB_IMAGE").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let dir = std::env::var_os("COMB_IMAGE_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| comb_sandbox::real::cache_dir().join("image"));
    dir.join("comb.oci.tar")
}

/// The demo's clusters with a real node in prod's loading `images`, on `network`.
pub async fn start_world(
    mut network: comb_sandbox::real::network::NetworkOptions,
    images: Vec<PathBuf>,
    bin_dir: &Path,
) -> anyhow::Result<DemoWorld> {
    network.real_node = Some(comb_sandbox::real::node::RealNodeOptions {
        clusters: vec!["prod".to_string()],
        images,
    });
    DemoWorld::start_with(
        comb_sandbox::Backend::Kube,
        Some(bin_dir.to_path_buf()),
        Duration::ZERO,
        Some(network),
    )
    .await
}

/// The digest of the manifest of `image` as prod's real node loaded it.
pub fn manifest_digest(world: &DemoWorld, image: &str) -> Option<String> {
    let node = world
        .sandbox
        .real()?
        .cluster("prod")
        .ok()?
        .real_node()?
        .clone();
    node.images()
        .iter()
        .find(|loaded| loaded.name == image)
        .map(|loaded| loaded.digest.clone())
}

/// `comb demo --in-cluster`.
pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    block_on(run_story(args))
}

/// `comb demo --in-cluster`: the demo's clusters with a real node in prod's, comb installed there
/// by its chart; the example Combs converge under the Pod, the calls cross its bridges, and its
/// admission webhook answers from the Pod.
async fn run_story(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let mut stop_signals = StopSignals::listen()?;
    let network = args
        .backend
        .network()
        .context("--in-cluster runs comb on the sandbox network's real node: add --network")?;
    let images = match args.backend.images.as_slice() {
        [] => vec![default_image()],
        images => images.to_vec(),
    };
    println!(
        "comb demo --in-cluster: sandbox clusters prod and dev, a real node in prod's loading {}",
        images
            .iter()
            .map(|image| image.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let bin_dir = args
        .backend
        .kube_bin
        .clone()
        .unwrap_or_else(comb_sandbox::real::default_bin_dir);
    let world = start_world(network, images, &bin_dir).await?;
    let outcome = in_cluster_story(&world, &args, &bin_dir, started, &mut stop_signals).await;
    world.sandbox.shutdown().await;
    outcome
}

async fn in_cluster_story(
    world: &DemoWorld,
    args: &DemoArgs,
    bin_dir: &Path,
    started: Instant,
    stop_signals: &mut StopSignals,
) -> anyhow::Result<ExitCode> {
    println!(
        "helm upgrade --install {} {} --namespace {} (the demo's layers; prod and staging through the Pod's ServiceAccount, dev through kubeconfigSecret)",
        RELEASE,
        chart_dir().display(),
        NAMESPACE
    );
    let running = install(world, &Install::new(bin_dir.join("helm"))).await?;
    for pod in &running.pods {
        println!(
            "comb runs in Pod {}/{} on node {}, image {} (manifest {}, image ID {})",
            NAMESPACE,
            pod.name,
            pod.node,
            pod.image,
            manifest_digest(world, &pod.image).unwrap_or_else(|| "unknown".into()),
            pod.image_id
        );
    }
    let installed = Instant::now();
    while_the_webhook_is_unreachable(|| world.apply_examples()).await?;
    let applied = Instant::now();
    world.apply_clients().await?;
    let federation = Federation {
        config: world.config.clone(),
        pool: world.pool.clone(),
    };
    let deadline = tokio::time::Instant::now() + args.timeout;
    let mut rows = read_rows(&federation).await?;
    let mut missing = shortfalls(&rows);
    while !missing.is_empty() {
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => break,
            () = stop_signals.recv() => anyhow::bail!("interrupted before every Comb reached its expected phase"),
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
        rows = read_rows(&federation).await?;
        missing = shortfalls(&rows);
    }
    println!();
    print!("{}", get::table(&rows, false, Timestamp::now()));
    if !missing.is_empty() {
        anyhow::bail!(
            "not every Comb reached its expected phase within {:?} of comb's Pod being Ready: {}",
            args.timeout,
            missing.join("; ")
        );
    }
    println!(
        "\nEvery Comb reached its expected phase {:.1}s after the Combs were applied, {:.1}s after comb's Pod was Ready ({:.1}s in all).",
        applied.elapsed().as_secs_f64(),
        installed.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "\nCalls from the Pod `{}` of each layer ({} each once answered):",
        packets::CLIENT,
        packets::CALLS_PER_ROW
    );
    let incomplete = print_calls(world, &rows).await;
    if !incomplete.is_empty() {
        anyhow::bail!(
            "calls not answered from where comb says the service comes from: {}",
            incomplete.join(", ")
        );
    }
    let refused = world
        .apply_combs("prod", REFUSED_COMB)
        .await
        .err()
        .context("the admission webhook let a Comb of an unknown class through")?;
    println!(
        "\nThe admission webhook (a Service of the chart, answered by the Pod) refuses a Comb of an unknown class:\n  {}",
        refused.root_cause()
    );
    if args.follow {
        print!(
            "{}",
            follow_hints(&world.config_path(), &world.kubeconfig_path())
        );
        println!(
            "  kubectl --kubeconfig {} --context prod -n {} logs deploy/{}",
            world.kubeconfig_path().display(),
            NAMESPACE,
            RELEASE
        );
        stop_signals.recv().await;
    }
    Ok(ExitCode::SUCCESS)
}

/// How comb is installed.
#[derive(Debug, Clone)]
pub struct Install {
    /// The helm binary (`tests/kube/build` builds it).
    pub helm: PathBuf,
    /// `image.tag` (the image is `localhost/comb:<tag>`).
    pub tag: String,
    pub replicas: u32,
    /// `sharding.enabled` with this Lease duration.
    pub sharding: Option<Duration>,
    /// Values beside these, merged last (`--set-json`-like): `{"config": {"resync": "30s"}}`.
    pub extra: Value,
}

impl Install {
    pub fn new(helm: PathBuf) -> Install {
        Install {
            helm,
            tag: env!("CARGO_PKG_VERSION").to_string(),
            replicas: 1,
            sharding: None,
            extra: json!({}),
        }
    }
}

/// Where comb runs once installed.
#[derive(Debug, Clone)]
pub struct Running {
    pub pods: Vec<RunningPod>,
}

#[derive(Debug, Clone)]
pub struct RunningPod {
    pub name: String,
    pub node: String,
    pub image: String,
    /// The image's digest as the kubelet reports it (`imageID`).
    pub image_id: String,
    /// When its container started (RFC 3339).
    pub started_at: Option<String>,
}

/// The kubeconfig the Pod reads (`kubeconfigSecret`): prod and staging through its own
/// ServiceAccount's files (its projected token, its cluster's CA, the `kubernetes` Service), dev
/// through dev's API server on dev's node address with the sandbox's credentials. Contexts are
/// named after the layers, so that `via` reads as layers.
pub fn clusters_kubeconfig(
    dev_server: &str,
    ca_pem: &str,
    token: &str,
) -> comb_kubeconfigs::write::KubeconfigBuilder {
    let service_account = "/var/run/secrets/kubernetes.io/serviceaccount";
    comb_kubeconfigs::write::KubeconfigBuilder::new()
        .cluster_with_ca_file(
            "self",
            "https://kubernetes.default.svc",
            &format!("{service_account}/ca.crt"),
        )
        .cluster("dev", dev_server, Some(ca_pem))
        .token_file_user("service-account", &format!("{service_account}/token"))
        .token_user("dev-admin", token)
        .context("prod", "self", "service-account", None)
        .context("staging", "self", "service-account", Some("staging"))
        .context("dev", "dev", "dev-admin", None)
}

/// The chart's values for the demo: the demo's layers, the image from the node's store, the
/// Pod on the real node, the webhook on.
pub fn values(layers_yaml: &str, install: &Install) -> anyhow::Result<Value> {
    let config: Value =
        serde_saphyr::from_str(layers_yaml).context("the demo's configuration does not parse")?;
    let mut federation = json!({
        "group": config["group"], "labelPrefix": config["labelPrefix"],
        "managedBy": config["managedBy"], "resync": config["resync"],
        "maxUpstreamDepth": config["maxUpstreamDepth"], "layers": config["layers"],
    });
    if let Some(map) = federation.as_object_mut() {
        map.retain(|_, value| !value.is_null());
    }
    let mut values = json!({
        "image": {"repository": "localhost/comb", "tag": install.tag, "pullPolicy": "Never"},
        "nodeSelector": {"kubernetes.io/hostname": REAL_NODE_NAME},
        "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "kubeconfigSecret": CLUSTERS_SECRET,
        "config": federation,
        // prod's mailer checks that the Secret mailer-relay exists in platform (its
        // `requires.secrets`): comb reads Secrets only where the values say.
        "rbac": {"contexts": ["prod", "staging"], "secretReadNamespaces": ["platform"]},
        "webhook": {"enabled": true},
        "replicas": install.replicas,
    });
    if let Some(lease) = install.sharding {
        values["sharding"] =
            json!({"enabled": true, "leaseDuration": format!("{}s", lease.as_secs())});
    }
    merge(&mut values, &install.extra);
    Ok(values)
}

/// `extra` over `base`, objects key by key (as helm merges values files).
fn merge(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (key, value) in extra {
                merge(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (base, extra) => *base = extra.clone(),
    }
}

/// Installs (or upgrades) the chart in prod's cluster of `world` and waits until its Pods are
/// Ready: the Secret of the other clusters first, then `helm upgrade --install --wait`.
pub async fn install(world: &DemoWorld, install: &Install) -> anyhow::Result<Running> {
    let real = world
        .sandbox
        .real()
        .context("comb runs as a Pod only on the real backend (--backend kube)")?;
    let dev = real.cluster("dev")?;
    let dev_port = dev
        .api_url()
        .rsplit(':')
        .next()
        .context("dev's API URL has no port")?;
    let dev_ip = dev
        .network()
        .context("dev has no network (--network)")?
        .addresses()
        .node_ip;
    let kubeconfig = clusters_kubeconfig(
        &format!("https://{dev_ip}:{dev_port}"),
        real.ca_pem(),
        real.admin_token(),
    );
    world
        .apply(
            "prod",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        )
        .await?;
    world
        .apply(
            "prod",
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": CLUSTERS_SECRET, "namespace": NAMESPACE},
                    "stringData": {"config": kubeconfig.to_yaml()?}}),
        )
        .await?;
    let values_path = world.dir().join("values.json");
    let values = values(crate::cli::demo::CONFIG_YAML, install)?;
    std::fs::write(&values_path, values.to_string())
        .with_context(|| format!("writing {} failed", values_path.display()))?;
    helm(
        install,
        world,
        &[
            "upgrade",
            "--install",
            RELEASE,
            &chart_dir().display().to_string(),
            "--namespace",
            NAMESPACE,
            "--values",
            &values_path.display().to_string(),
            "--wait",
            "--timeout",
            "300s",
        ],
    )
    .await?;
    running(world).await
}

/// `helm ARGS` against prod's context of the demo's kubeconfig; its output in the error.
pub async fn helm(install: &Install, world: &DemoWorld, args: &[&str]) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(&install.helm)
        .arg("--kubeconfig")
        .arg(world.kubeconfig_path())
        .args(["--kube-context", "prod"])
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {} failed", install.helm.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        anyhow::bail!(
            "helm {} failed ({}): {}",
            args.join(" "),
            output.status,
            text.trim()
        );
    }
    Ok(text)
}

/// How long a write may wait for the webhook's Service to reach a Ready Pod.
const WEBHOOK_REACHABLE: Duration = Duration::from_secs(60);

/// Runs `write` again while the API server cannot reach the admission webhook (`failed calling
/// webhook`): a Pod is Ready before kube-proxy sends its Service's traffic there, and with
/// `failurePolicy: Fail` a Comb written in between is refused, as in any cluster.
pub async fn while_the_webhook_is_unreachable<F, Fut>(write: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let deadline = tokio::time::Instant::now() + WEBHOOK_REACHABLE;
    loop {
        match write().await {
            Err(error)
                if format!("{error:#}").contains("failed calling webhook")
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            outcome => return outcome,
        }
    }
}

/// comb's Pods in the release namespace that run, with where and from what.
pub async fn running(world: &DemoWorld) -> anyhow::Result<Running> {
    let pods: Api<Pod> = Api::namespaced(world.pool.client("prod").await?, NAMESPACE);
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=comb"))
        .await
        .context("listing comb's Pods failed")?;
    let pods = list
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter_map(|pod| {
            let status = pod.status.as_ref()?;
            let container = status.container_statuses.as_ref()?.first()?;
            let running = container.state.as_ref()?.running.as_ref()?;
            let spec = pod.spec.as_ref()?;
            Some(RunningPod {
                name: pod.metadata.name.clone()?,
                node: spec.node_name.clone()?,
                // The Pod's own (the runtime names an image by its first name, and two tags of
                // one image share it).
                image: spec.containers.first()?.image.clone()?,
                image_id: container.image_id.clone(),
                started_at: running.started_at.as_ref().map(|t| t.0.to_string()),
            })
        })
        .collect();
    Ok(Running { pods })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_put_comb_on_the_real_node_with_the_demos_layers() {
        let mut install = Install::new(PathBuf::from("helm"));
        install.replicas = 2;
        install.sharding = Some(Duration::from_secs(4));
        install.extra = json!({"config": {"resync": "30s"}, "image": {"tag": "next"}});
        let values = values(crate::cli::demo::CONFIG_YAML, &install).expect("values");
        assert_eq!(values["image"]["repository"], "localhost/comb");
        assert_eq!(values["image"]["tag"], "next");
        assert_eq!(values["image"]["pullPolicy"], "Never");
        assert_eq!(
            values["nodeSelector"]["kubernetes.io/hostname"],
            REAL_NODE_NAME
        );
        assert_eq!(values["tolerations"][0]["key"], REAL_NODE_TAINT);
        assert_eq!(values["config"]["resync"], "30s");
        assert_eq!(values["config"]["group"], "comb.internal");
        let layers: Vec<&str> = values["config"]["layers"]
            .as_array()
            .expect("layers")
            .iter()
            .filter_map(|layer| layer["context"].as_str())
            .collect();
        assert_eq!(layers, ["prod", "staging", "dev"]);
        assert!(values["config"].get("kubeconfig").is_none());
        assert_eq!(values["sharding"]["leaseDuration"], "4s");
        assert_eq!(values["replicas"], 2);
    }

    #[test]
    fn the_pods_kubeconfig_reads_its_own_service_account_for_its_own_cluster() {
        let kubeconfig = clusters_kubeconfig("https://172.18.1.2:4444", "PEM", "t").build();
        let contexts: Vec<(&str, Option<&str>)> = kubeconfig
            .contexts
            .iter()
            .map(|c| {
                let context = c.context.as_ref().expect("a context");
                (c.name.as_str(), context.user.as_deref())
            })
            .collect();
        assert_eq!(
            contexts,
            [
                ("prod", Some("service-account")),
                ("staging", Some("service-account")),
                ("dev", Some("dev-admin"))
            ]
        );
        let user = kubeconfig.auth_infos[0].auth_info.as_ref().expect("a user");
        assert_eq!(
            user.token_file.as_deref(),
            Some("/var/run/secrets/kubernetes.io/serviceaccount/token")
        );
        let dev = kubeconfig.clusters[1].cluster.as_ref().expect("a cluster");
        assert_eq!(dev.server.as_deref(), Some("https://172.18.1.2:4444"));
    }
}
