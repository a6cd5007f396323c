//! [`ClientPool`]: one lazily built, kept `kube::Client` per kube context.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use kube::Client;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

use crate::error::{Error, Result};

/// The name of the one context of an in-cluster pool.
pub const IN_CLUSTER_CONTEXT: &str = "in-cluster";

/// One `kube::Client` per context of a kubeconfig (or the single in-cluster context).
///
/// Constructing a pool reads the configuration but connects nowhere and checks no context:
/// a context that does not exist is an error of the call that uses it, so that one bad layer
/// never prevents the others from working. Clients are built on first use and kept. Cloning
/// the pool is cheap and shares the clients.
#[derive(Clone)]
pub struct ClientPool {
    inner: Arc<Inner>,
}

struct Inner {
    source: Source,
    /// Where the contexts come from, as error messages name it.
    origin: String,
    /// By context and the user the client impersonates (`None`: the configuration's own).
    clients: Mutex<HashMap<ClientKey, Client>>,
}

type ClientKey = (String, Option<String>);

enum Source {
    /// A kubeconfig, and beside it, inside a Pod, the Pod's in-cluster configuration: the
    /// context `in-cluster` names it (unless the kubeconfig has a context of that name), so that
    /// a controller with a mounted kubeconfig for other clusters' layers still reaches its own
    /// cluster's as its ServiceAccount, as the chart's `kubeconfigSecret` sets it up.
    Kubeconfig {
        kubeconfig: Box<Kubeconfig>,
        in_cluster: Option<Box<Config>>,
    },
    InCluster(Box<Config>),
}

impl std::fmt::Debug for ClientPool {
    // Only the origin: the configuration holds credentials, which never go into a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPool")
            .field("origin", &self.inner.origin)
            .finish_non_exhaustive()
    }
}

impl ClientPool {
    /// A pool over one kubeconfig file.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_paths(&[path.as_ref().to_path_buf()])
    }

    /// A pool from `$KUBECONFIG` (a list of files, merged as kubectl merges them), else
    /// `~/.kube/config`, else the in-cluster service account.
    pub fn from_environment() -> Result<Self> {
        Self::from_sources(
            std::env::var_os("KUBECONFIG"),
            std::env::var_os("HOME").map(PathBuf::from),
        )
    }

    /// A pool of the in-cluster service account, with the single context [`IN_CLUSTER_CONTEXT`].
    pub fn in_cluster() -> Result<Self> {
        let config = Config::incluster().map_err(|error| Error::NoConfiguration {
            in_cluster: error.to_string(),
        })?;
        Ok(Self::new(
            Source::InCluster(Box::new(config)),
            "the in-cluster configuration".to_string(),
        ))
    }

    /// A pool over a kubeconfig already in memory; `origin` names it in error messages
    /// (e.g. `the kubeconfig /tmp/sandbox.yaml`).
    pub fn from_kubeconfig(kubeconfig: Kubeconfig, origin: impl Into<String>) -> Self {
        Self::new(
            Source::Kubeconfig {
                kubeconfig: Box::new(kubeconfig),
                in_cluster: None,
            },
            origin.into(),
        )
    }

    /// A pool over a kubeconfig with an in-cluster configuration beside it (the context
    /// `in-cluster`, unless the kubeconfig has one of that name).
    fn from_kubeconfig_beside(kubeconfig: Kubeconfig, in_cluster: Config, origin: String) -> Self {
        Self::new(
            Source::Kubeconfig {
                kubeconfig: Box::new(kubeconfig),
                in_cluster: Some(Box::new(in_cluster)),
            },
            origin,
        )
    }

    fn new(source: Source, origin: String) -> Self {
        ClientPool {
            inner: Arc::new(Inner {
                source,
                origin,
                clients: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn from_sources(kubeconfig_env: Option<OsString>, home: Option<PathBuf>) -> Result<Self> {
        let listed: Vec<PathBuf> = kubeconfig_env
            .map(|value| {
                std::env::split_paths(&value)
                    .filter(|path| !path.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if !listed.is_empty() {
            return Self::from_paths(&listed);
        }
        if let Some(default) = home.map(|home| home.join(".kube").join("config"))
            && default.exists()
        {
            return Self::from_paths(&[default]);
        }
        Self::in_cluster()
    }

    fn from_paths(paths: &[PathBuf]) -> Result<Self> {
        let mut merged = Kubeconfig::default();
        for path in paths {
            let read = Kubeconfig::read_from(path).map_err(|error| Error::Read {
                path: path.clone(),
                message: error.to_string(),
            })?;
            merged = merged.merge(read).map_err(|error| Error::Read {
                path: path.clone(),
                message: error.to_string(),
            })?;
        }
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let origin = match names.as_slice() {
            [one] => format!("the kubeconfig {one}"),
            many => format!("the kubeconfigs {}", many.join(", ")),
        };
        // Inside a Pod (its ServiceAccount's token and CA mounted, the API server's address in
        // the environment), the in-cluster context is there beside the files' contexts.
        Ok(match Config::incluster() {
            Ok(in_cluster) => Self::from_kubeconfig_beside(merged, in_cluster, origin),
            Err(_) => Self::from_kubeconfig(merged, origin),
        })
    }

    /// This pool's contexts and one more, `name`: the current context of `kubeconfig` (else
    /// its first), under that name, with its cluster and user renamed alike so that they
    /// cannot clash with this pool's. `what` names where the kubeconfig came from (a Secret)
    /// in messages. The new pool builds its own clients.
    pub fn with_context(&self, name: &str, kubeconfig: Kubeconfig, what: &str) -> Result<Self> {
        let malformed = |message: &str| Error::Read {
            path: PathBuf::from(what),
            message: message.to_string(),
        };
        let chosen = kubeconfig
            .current_context
            .as_deref()
            .and_then(|current| kubeconfig.contexts.iter().find(|c| c.name == current))
            .or_else(|| kubeconfig.contexts.first())
            .ok_or_else(|| malformed("it defines no context"))?;
        let mut context = chosen
            .context
            .clone()
            .ok_or_else(|| malformed("its context is empty"))?;
        let mut cluster = kubeconfig
            .clusters
            .iter()
            .find(|named| named.name == context.cluster)
            .cloned()
            .ok_or_else(|| {
                malformed(&format!("its context names no cluster {}", context.cluster))
            })?;
        cluster.name = name.to_string();
        context.cluster = name.to_string();
        let mut users = Vec::new();
        if let Some(user) = &context.user {
            let mut named = kubeconfig
                .auth_infos
                .iter()
                .find(|named| &named.name == user)
                .cloned()
                .ok_or_else(|| malformed(&format!("its context names no user {user}")))?;
            named.name = name.to_string();
            context.user = Some(name.to_string());
            users.push(named);
        }
        let (mut merged, in_cluster) = match &self.inner.source {
            Source::Kubeconfig {
                kubeconfig,
                in_cluster,
            } => ((**kubeconfig).clone(), in_cluster.clone()),
            Source::InCluster(config) => (Kubeconfig::default(), Some(config.clone())),
        };
        merged.contexts.retain(|named| named.name != name);
        merged.clusters.retain(|named| named.name != name);
        merged.auth_infos.retain(|named| named.name != name);
        let mut named = chosen.clone();
        named.name = name.to_string();
        named.context = Some(context);
        merged.contexts.push(named);
        merged.clusters.push(cluster);
        merged.auth_infos.extend(users);
        let origin = format!("{} and {what}", self.inner.origin);
        Ok(Self::new(
            Source::Kubeconfig {
                kubeconfig: Box::new(merged),
                in_cluster,
            },
            origin,
        ))
    }

    /// Where the contexts come from, e.g. `the kubeconfig /home/me/.kube/config`.
    pub fn origin(&self) -> &str {
        &self.inner.origin
    }

    /// The names of all contexts, in the order of the configuration.
    pub fn contexts(&self) -> Vec<String> {
        match &self.inner.source {
            Source::Kubeconfig {
                kubeconfig,
                in_cluster,
            } => {
                let mut names: Vec<String> = kubeconfig
                    .contexts
                    .iter()
                    .map(|named| named.name.clone())
                    .collect();
                if in_cluster.is_some() && !names.iter().any(|n| n == IN_CLUSTER_CONTEXT) {
                    names.push(IN_CLUSTER_CONTEXT.to_string());
                }
                names
            }
            Source::InCluster(_) => vec![IN_CLUSTER_CONTEXT.to_string()],
        }
    }

    /// The configuration's current context, if it names one.
    pub fn current_context(&self) -> Option<&str> {
        match &self.inner.source {
            Source::Kubeconfig { kubeconfig, .. } => kubeconfig.current_context.as_deref(),
            Source::InCluster(_) => Some(IN_CLUSTER_CONTEXT),
        }
    }

    /// `context` if given, else the current context.
    pub fn context_or_current(&self, context: Option<&str>) -> Result<String> {
        context
            .or_else(|| self.current_context())
            .map(str::to_string)
            .ok_or_else(|| Error::NoCurrentContext {
                origin: self.inner.origin.clone(),
            })
    }

    /// The API server URL of a context, exactly as the configuration writes it. Two contexts
    /// with equal URLs talk to the same API server.
    pub fn server_url(&self, context: &str) -> Result<String> {
        if let Some(config) = self.in_cluster_config(context) {
            return Ok(config.cluster_url.to_string());
        }
        match &self.inner.source {
            Source::Kubeconfig { kubeconfig, .. } => {
                let cluster_name = &self.kubeconfig_context(kubeconfig, context)?.cluster;
                kubeconfig
                    .clusters
                    .iter()
                    .find(|named| &named.name == cluster_name)
                    .and_then(|named| named.cluster.as_ref())
                    .and_then(|cluster| cluster.server.clone())
                    .ok_or_else(|| Error::NoServer {
                        context: context.to_string(),
                        cluster: cluster_name.clone(),
                        origin: self.inner.origin.clone(),
                    })
            }
            // The in-cluster pool's one context was answered above.
            Source::InCluster(_) => Err(self.unknown_context(context)),
        }
    }

    /// The namespace a context defaults to: its `namespace`, else `default`.
    pub fn default_namespace(&self, context: &str) -> Result<String> {
        if let Some(config) = self.in_cluster_config(context) {
            return Ok(config.default_namespace.clone());
        }
        match &self.inner.source {
            Source::Kubeconfig { kubeconfig, .. } => Ok(self
                .kubeconfig_context(kubeconfig, context)?
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string())),
            Source::InCluster(_) => Err(self.unknown_context(context)),
        }
    }

    /// The client of a context, built on first use and kept for the life of the pool.
    pub async fn client(&self, context: &str) -> Result<Client> {
        self.client_as(context, None).await
    }

    /// The client of a context that acts as `user` (header `Impersonate-User`), e.g.
    /// `system:serviceaccount:apps:deployer`: the API server authorizes its requests as that
    /// user, provided the configuration's own user may impersonate it. Built on first use and
    /// kept, like [`ClientPool::client`].
    pub async fn impersonating_client(&self, context: &str, user: &str) -> Result<Client> {
        self.client_as(context, Some(user)).await
    }

    async fn client_as(&self, context: &str, user: Option<&str>) -> Result<Client> {
        let key: ClientKey = (context.to_string(), user.map(str::to_string));
        if let Some(client) = self.cached(&key) {
            return Ok(client);
        }
        let mut config = self.config(context).await?;
        // kube retries 429/503/504 itself for minutes (15 attempts, backoff up to 1000 s), which
        // would hold one Comb's step while its layer is down. The controller retries failed steps
        // with its own backoff and keeps the other layers going, so a request fails fast here.
        config.default_retry = false;
        if let Some(user) = user {
            config.auth_info.impersonate = Some(user.to_string());
        }
        let client = Client::try_from(config).map_err(|error| Error::Build {
            context: context.to_string(),
            message: match user {
                Some(user) => format!("impersonating {user}: {error}"),
                None => error.to_string(),
            },
        })?;
        // Two first uses may race; the first stored client wins so that every caller shares it.
        let mut clients = self.lock_clients();
        Ok(clients.entry(key).or_insert(client).clone())
    }

    fn cached(&self, key: &ClientKey) -> Option<Client> {
        self.lock_clients().get(key).cloned()
    }

    fn lock_clients(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, Client>> {
        // The map is never left half-updated, so a panic elsewhere does not make it unusable.
        self.inner
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn config(&self, context: &str) -> Result<Config> {
        if let Some(config) = self.in_cluster_config(context) {
            return Ok(config.clone());
        }
        match &self.inner.source {
            Source::Kubeconfig { kubeconfig, .. } => {
                // Checked here so that a missing context gets our message, not kube's.
                self.server_url(context)?;
                let options = KubeConfigOptions {
                    context: Some(context.to_string()),
                    ..KubeConfigOptions::default()
                };
                Config::from_custom_kubeconfig((**kubeconfig).clone(), &options)
                    .await
                    .map_err(|error| Error::Build {
                        context: context.to_string(),
                        message: error.to_string(),
                    })
            }
            Source::InCluster(_) => Err(self.unknown_context(context)),
        }
    }

    fn kubeconfig_context<'a>(
        &self,
        kubeconfig: &'a Kubeconfig,
        context: &str,
    ) -> Result<&'a kube::config::Context> {
        kubeconfig
            .contexts
            .iter()
            .find(|named| named.name == context)
            .and_then(|named| named.context.as_ref())
            .ok_or_else(|| self.unknown_context(context))
    }

    /// The in-cluster configuration `context` names, if it names one: the single context of an
    /// in-cluster pool, or `in-cluster` beside a kubeconfig that has no context of that name.
    fn in_cluster_config(&self, context: &str) -> Option<&Config> {
        if context != IN_CLUSTER_CONTEXT {
            return None;
        }
        match &self.inner.source {
            Source::InCluster(config) => Some(config),
            Source::Kubeconfig {
                kubeconfig,
                in_cluster,
            } => in_cluster
                .as_deref()
                .filter(|_| !kubeconfig.contexts.iter().any(|c| c.name == context)),
        }
    }

    fn unknown_context(&self, context: &str) -> Error {
        Error::UnknownContext {
            context: context.to_string(),
            origin: self.inner.origin.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: prod
clusters:
  - name: prod
    cluster:
      server: http://127.0.0.1:6443
  - name: dev
    cluster:
      server: http://127.0.0.1:7443
contexts:
  - name: prod
    context:
      cluster: prod
      user: admin
  - name: staging
    context:
      cluster: prod
      user: admin
      namespace: staging
  - name: dev
    context:
      cluster: dev
      user: admin
  - name: broken
    context:
      cluster: nowhere
      user: admin
users:
  - name: admin
    user:
      token: not-a-secret
"#;

    #[tokio::test]
    async fn a_kubeconfig_held_elsewhere_adds_one_context_under_its_own_name() {
        let (_dir, _path, pool) = pool();
        let held = Kubeconfig::from_yaml(
            "apiVersion: v1\nkind: Config\ncurrent-context: dev\nclusters:\n  - {name: prod, cluster: {server: 'http://127.0.0.1:9443'}}\ncontexts:\n  - {name: dev, context: {cluster: prod, user: admin}}\nusers:\n  - {name: admin, user: {token: other}}\n",
        )
        .unwrap();
        let wider = pool
            .with_context("secret/comb-system/dev", held, "Secret comb-system/dev")
            .unwrap();
        assert_eq!(
            wider.server_url("secret/comb-system/dev").unwrap(),
            "http://127.0.0.1:9443"
        );
        // The pool's own contexts, cluster `prod` and user `admin` keep theirs.
        assert_eq!(wider.server_url("prod").unwrap(), "http://127.0.0.1:6443");
        assert!(wider.client("secret/comb-system/dev").await.is_ok());
        assert!(
            wider
                .contexts()
                .contains(&"secret/comb-system/dev".to_string())
        );
        let empty = Kubeconfig::default();
        assert_eq!(
            pool.with_context("x", empty, "Secret a/b")
                .unwrap_err()
                .to_string(),
            "reading the kubeconfig Secret a/b failed: it defines no context"
        );
    }

    fn write_kubeconfig(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    fn pool() -> (tempfile::TempDir, PathBuf, ClientPool) {
        pool_from(KUBECONFIG)
    }

    fn pool_from(text: &str) -> (tempfile::TempDir, PathBuf, ClientPool) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_kubeconfig(&dir, "config.yaml", text);
        let pool = ClientPool::from_path(&path).expect("pool");
        (dir, path, pool)
    }

    /// An in-cluster configuration as a Pod has it (without reading a Pod's files).
    fn in_cluster() -> Config {
        let mut config = Config::new("https://10.96.0.1:443".parse().expect("url"));
        config.default_namespace = "comb-system".into();
        config
    }

    #[test]
    fn inside_a_pod_the_in_cluster_context_stands_beside_a_mounted_kubeconfigs() {
        let kubeconfig = Kubeconfig::from_yaml(KUBECONFIG).expect("kubeconfig");
        let pool = ClientPool::from_kubeconfig_beside(kubeconfig, in_cluster(), "K".into());
        assert_eq!(
            pool.contexts(),
            ["prod", "staging", "dev", "broken", IN_CLUSTER_CONTEXT]
        );
        assert_eq!(
            pool.server_url(IN_CLUSTER_CONTEXT).expect("in-cluster"),
            "https://10.96.0.1:443/"
        );
        assert_eq!(
            pool.default_namespace(IN_CLUSTER_CONTEXT)
                .expect("in-cluster"),
            "comb-system"
        );
        assert_eq!(
            pool.server_url("dev").expect("dev"),
            "http://127.0.0.1:7443"
        );
        // Outside a Pod, or where the kubeconfig names its own `in-cluster`, the file decides.
        let (_dir, path, plain) = pool_from(KUBECONFIG);
        assert_eq!(
            plain
                .server_url(IN_CLUSTER_CONTEXT)
                .expect_err("no in-cluster")
                .to_string(),
            format!(
                "context in-cluster is not in the kubeconfig {}",
                path.display()
            )
        );
        let own = KUBECONFIG.replace(
            "- name: dev\n    context:",
            "- name: in-cluster\n    context:",
        );
        let kubeconfig = Kubeconfig::from_yaml(&own).expect("kubeconfig");
        let pool = ClientPool::from_kubeconfig_beside(kubeconfig, in_cluster(), "K".into());
        assert_eq!(
            pool.server_url(IN_CLUSTER_CONTEXT).expect("the file's"),
            "http://127.0.0.1:7443"
        );
        assert_eq!(pool.contexts().len(), 4);
    }

    #[tokio::test]
    async fn the_in_cluster_context_beside_a_kubeconfig_builds_its_client() {
        let kubeconfig = Kubeconfig::from_yaml(KUBECONFIG).expect("kubeconfig");
        let pool = ClientPool::from_kubeconfig_beside(kubeconfig, in_cluster(), "K".into());
        let client = pool.client(IN_CLUSTER_CONTEXT).await.expect("client");
        assert_eq!(client.default_namespace(), "comb-system");
    }

    #[test]
    fn lists_contexts_in_order_and_the_current_one() {
        let (_dir, _path, pool) = pool();
        assert_eq!(pool.contexts(), ["prod", "staging", "dev", "broken"]);
        assert_eq!(pool.current_context(), Some("prod"));
        assert_eq!(pool.context_or_current(None).expect("current"), "prod");
        assert_eq!(pool.context_or_current(Some("dev")).expect("dev"), "dev");
    }

    #[test]
    fn server_urls_are_the_strings_of_the_cluster_entries() {
        let (_dir, _path, pool) = pool();
        assert_eq!(
            pool.server_url("prod").expect("prod"),
            "http://127.0.0.1:6443"
        );
        // Two contexts on one cluster share the URL: same API server detection relies on it.
        assert_eq!(
            pool.server_url("staging").expect("staging"),
            pool.server_url("prod").expect("prod")
        );
        assert_ne!(
            pool.server_url("dev").expect("dev"),
            pool.server_url("prod").expect("prod")
        );
    }

    #[test]
    fn default_namespaces_come_from_the_context_else_default() {
        let (_dir, _path, pool) = pool();
        assert_eq!(
            pool.default_namespace("staging").expect("staging"),
            "staging"
        );
        assert_eq!(pool.default_namespace("prod").expect("prod"), "default");
    }

    #[test]
    fn a_missing_context_is_an_error_of_its_use_naming_the_file() {
        let (_dir, path, pool) = pool();
        let error = pool.server_url("qa").expect_err("no qa context");
        assert_eq!(
            error.to_string(),
            format!("context qa is not in the kubeconfig {}", path.display())
        );
        let error = pool.default_namespace("qa").expect_err("no qa context");
        assert_eq!(error.category(), "unknown-context");
    }

    #[test]
    fn a_context_without_its_cluster_says_which_cluster() {
        let (_dir, path, pool) = pool();
        let error = pool.server_url("broken").expect_err("no cluster");
        assert_eq!(
            error.to_string(),
            format!(
                "context broken names the cluster nowhere, which has no server in the kubeconfig {}",
                path.display()
            )
        );
    }

    #[tokio::test]
    async fn clients_are_built_on_first_use_and_kept() {
        let (_dir, path, pool) = pool();
        let key =
            |context: &str, user: Option<&str>| (context.to_string(), user.map(str::to_string));
        assert!(pool.cached(&key("prod", None)).is_none());
        pool.client("prod").await.expect("prod client");
        pool.client("prod").await.expect("prod client again");
        pool.clone().client("dev").await.expect("dev client");
        let deployer = "system:serviceaccount:apps:deployer";
        pool.impersonating_client("prod", deployer)
            .await
            .expect("an impersonating prod client");
        pool.impersonating_client("prod", deployer)
            .await
            .expect("the impersonating prod client again");
        let mut cached: Vec<ClientKey> = pool.lock_clients().keys().cloned().collect();
        cached.sort();
        assert_eq!(
            cached,
            [
                key("dev", None),
                key("prod", None),
                key("prod", Some(deployer))
            ],
            "the impersonating client is kept beside the context's own"
        );

        let Err(error) = pool.client("qa").await else {
            panic!("a client for a context that does not exist");
        };
        assert_eq!(
            error.to_string(),
            format!("context qa is not in the kubeconfig {}", path.display())
        );
        assert!(pool.cached(&key("qa", None)).is_none());
    }

    #[test]
    fn kubeconfig_lists_are_merged_first_file_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = write_kubeconfig(&dir, "a.yaml", KUBECONFIG);
        let second = write_kubeconfig(
            &dir,
            "b.yaml",
            r#"
current-context: qa
clusters:
  - name: qa
    cluster:
      server: https://qa.example:6443
  - name: prod
    cluster:
      server: https://ignored.example
contexts:
  - name: qa
    context:
      cluster: qa
"#,
        );
        let joined = std::env::join_paths([&first, &second]).expect("join");
        let pool = ClientPool::from_sources(Some(joined), None).expect("pool");
        assert_eq!(pool.current_context(), Some("prod"));
        assert_eq!(
            pool.server_url("qa").expect("qa"),
            "https://qa.example:6443"
        );
        assert_eq!(
            pool.server_url("prod").expect("prod"),
            "http://127.0.0.1:6443"
        );
        assert_eq!(
            pool.origin(),
            format!("the kubeconfigs {}, {}", first.display(), second.display())
        );
    }

    #[test]
    fn without_kubeconfig_variable_the_home_config_is_used() {
        let home = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(home.path().join(".kube")).expect("mkdir");
        let path = write_kubeconfig(&home, ".kube/config", KUBECONFIG);
        let pool = ClientPool::from_sources(Some(OsString::new()), Some(home.path().into()))
            .expect("pool");
        assert_eq!(pool.origin(), format!("the kubeconfig {}", path.display()));
    }

    #[test]
    fn an_unreadable_kubeconfig_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("missing.yaml");
        let error = ClientPool::from_path(&path).expect_err("missing file");
        assert!(
            error.to_string().starts_with(&format!(
                "reading the kubeconfig {} failed: ",
                path.display()
            )),
            "{error}"
        );
    }
}
