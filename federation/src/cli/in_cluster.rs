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

use crate::cli::demo::DemoWorld;

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
