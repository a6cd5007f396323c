//! A network for every Pod kwok runs, as a CNI plugin and a container runtime would give it: a
//! namespace of its own at its Pod IP, wired to its node by a veth pair (`eth0` inside, a /32
//! route to it in the node, a default route through the node), and on each TCP port its running
//! containers declare, an identity server (`comb-identity`) that answers with
//! `cluster/namespace/pod`. The namespace goes when the Pod object does, or when its containers
//! stop (Succeeded, Failed); a container that is not running (CrashLoopBackOff) serves nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio_util::sync::CancellationToken;

use super::links::Links;
use super::netns::Netns;
use crate::error::{Error, Result};
use crate::real::NODE_NAME;
use crate::real::addresses::Cidr;

/// How long an identity server may take to bind its ports.
const SERVER_START: Duration = Duration::from_secs(10);

/// How long a Pod's network outlives the Pod object. A kubelet stops a Pod's containers after
/// the Pod is marked for deletion and taken out of its Services' endpoints, and the object goes
/// last; kwok deletes the object at once. Kept this long (kube-proxy syncs at most once a
/// second), the Pod still answers the connections kube-proxy sends it until it stops sending
/// them, as a terminating container does.
pub const TERMINATION_GRACE: Duration = Duration::from_secs(2);

/// What the network of one Pod is made of, read from the Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    pub namespace: String,
    pub name: String,
    pub ip: Ipv4Addr,
    /// The TCP ports of its running containers, ascending.
    pub ports: Vec<u16>,
}

impl PodPlan {
    pub fn key(&self) -> String {
        pod_key(&self.namespace, &self.name)
    }
}

fn pod_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The network `pod` should have now: `None` while it has no IP or no longer runs (or uses the
/// node's network, which the sandbox's node namespace is already).
pub fn plan(pod: &Pod) -> Option<PodPlan> {
    let spec = pod.spec.as_ref()?;
    let status = pod.status.as_ref()?;
    if spec.host_network == Some(true) || status.phase.as_deref() != Some("Running") {
        return None;
    }
    let ip: Ipv4Addr = status.pod_ip.as_deref()?.parse().ok()?;
    let running: BTreeSet<&str> = status
        .container_statuses
        .iter()
        .flatten()
        .filter(|container| {
            container
                .state
                .as_ref()
                .is_some_and(|state| state.running.is_some())
        })
        .map(|container| container.name.as_str())
        .collect();
    let ports: BTreeSet<u16> = spec
        .containers
        .iter()
        .filter(|container| running.contains(container.name.as_str()))
        .flat_map(|container| container.ports.iter().flatten())
        .filter(|port| port.protocol.as_deref().is_none_or(|p| p == "TCP"))
        .filter_map(|port| u16::try_from(port.container_port).ok())
        .collect();
    Some(PodPlan {
        namespace: pod.metadata.namespace.clone()?,
        name: pod.metadata.name.clone()?,
        ip,
        ports: ports.into_iter().collect(),
    })
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The name of the node's end of a Pod's veth pair: unique per Pod IP, within 15 characters.
pub fn veth_name(ip: Ipv4Addr) -> String {
    format!("veth{:08x}", u32::from(ip))
}

/// An identity server in a Pod's namespace; it exits when dropped (its stdin closes).
struct IdentityServer {
    _child: Child,
    _stdin: Option<ChildStdin>,
}

/// One Pod's network.
struct PodNetwork {
    plan: PodPlan,
    netns: Netns,
    _server: Option<IdentityServer>,
}

/// The Pods of one cluster and their networks.
pub struct PodNetworks {
    cluster: String,
    node: Netns,
    node_ip: Ipv4Addr,
    node_links: Arc<Links>,
    identity_bin: PathBuf,
    log: PathBuf,
    pods: Mutex<BTreeMap<String, PodNetwork>>,
}

impl PodNetworks {
    pub fn new(
        cluster: &str,
        node: Netns,
        node_ip: Ipv4Addr,
        node_links: Arc<Links>,
        identity_bin: &Path,
        log: PathBuf,
    ) -> PodNetworks {
        PodNetworks {
            cluster: cluster.to_string(),
            node,
            node_ip,
            node_links,
            identity_bin: identity_bin.to_path_buf(),
            log,
            pods: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, PodNetwork>> {
        self.pods
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The namespace of Pod `namespace/name`, while it has one.
    pub fn netns_of(&self, namespace: &str, name: &str) -> Option<Netns> {
        self.lock()
            .get(&pod_key(namespace, name))
            .map(|pod| pod.netns.clone())
    }

    /// The Pods that have a network now, with their plans.
    pub fn plans(&self) -> Vec<PodPlan> {
        self.lock().values().map(|pod| pod.plan.clone()).collect()
    }

    /// Keeps the Pods' networks in step with the cluster's Pods until `shutdown`.
    pub async fn run(self: Arc<Self>, client: kube::Client, shutdown: CancellationToken) {
        let pods: Api<Pod> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("spec.nodeName={NODE_NAME}"));
        let mut events = watcher::watcher(pods, config).default_backoff().boxed();
        let mut listed = BTreeSet::new();
        // Deleted Pods whose networks go at the given time, oldest first.
        let mut retiring: std::collections::VecDeque<(tokio::time::Instant, String, PodPlan)> =
            std::collections::VecDeque::new();
        loop {
            let next_retirement = retiring.front().map(|(at, _, _)| *at);
            let event = tokio::select! {
                () = shutdown.cancelled() => break,
                () = sleep_until(next_retirement) => {
                    if let Some((_, key, plan)) = retiring.pop_front() {
                        // Unless a Pod of the same name came back meanwhile.
                        let current = self.lock().get(&key).map(|pod| pod.plan.clone());
                        if current.as_ref() == Some(&plan) {
                            self.converge(&key, None).await;
                        }
                    }
                    continue;
                }
                event = events.next() => event,
            };
            match event {
                Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => {
                    let key = pod_key(
                        pod.metadata.namespace.as_deref().unwrap_or_default(),
                        pod.metadata.name.as_deref().unwrap_or_default(),
                    );
                    listed.insert(key.clone());
                    self.converge(&key, plan(&pod)).await;
                }
                Some(Ok(Event::Delete(pod))) => {
                    let key = pod_key(
                        pod.metadata.namespace.as_deref().unwrap_or_default(),
                        pod.metadata.name.as_deref().unwrap_or_default(),
                    );
                    let current = self.lock().get(&key).map(|pod| pod.plan.clone());
                    if let Some(plan) = current {
                        let at = tokio::time::Instant::now() + TERMINATION_GRACE;
                        retiring.push_back((at, key, plan));
                    }
                }
                Some(Ok(Event::Init)) => listed.clear(),
                Some(Ok(Event::InitDone)) => {
                    let gone: Vec<String> = self
                        .lock()
                        .keys()
                        .filter(|key| !listed.contains(*key))
                        .cloned()
                        .collect();
                    for key in gone {
                        self.converge(&key, None).await;
                    }
                }
                // The watcher retries with backoff; a failed list or watch is only logged.
                Some(Err(error)) => {
                    tracing::debug!(cluster = %self.cluster, %error, "watching Pods for their networks");
                }
                None => break,
            }
        }
        self.remove_all().await;
    }

    /// Gives Pod `key` the network `wanted` (none: removes what it has).
    ///
    /// A new Pod at the address of one that is still retiring takes it over at once.
    async fn converge(&self, key: &str, wanted: Option<PodPlan>) {
        let current = self.lock().get(key).map(|pod| pod.plan.clone());
        if current == wanted {
            return;
        }
        if let Some(current) = current {
            // The same address with other ports: only the server changes; anything else anew.
            self.remove(key, &current).await;
        }
        let Some(wanted) = wanted else { return };
        // kwok hands a released IP to the next Pod: the one that had it is gone by now.
        let holder = self
            .lock()
            .iter()
            .find(|(_, pod)| pod.plan.ip == wanted.ip)
            .map(|(key, pod)| (key.clone(), pod.plan.clone()));
        if let Some((holder, plan)) = holder {
            self.remove(&holder, &plan).await;
        }
        match self.add(&wanted).await {
            Ok(network) => {
                self.lock().insert(key.to_string(), network);
            }
            Err(error) => {
                tracing::warn!(cluster = %self.cluster, pod = %key, %error, "the Pod gets no network");
                // Leave nothing half made behind.
                let _ = self.node_links.delete(&veth_name(wanted.ip)).await;
            }
        }
    }

    async fn add(&self, plan: &PodPlan) -> Result<PodNetwork> {
        let netns = Netns::create(&format!(
            "Pod {}/{}/{}",
            self.cluster, plan.namespace, plan.name
        ))?;
        let veth = veth_name(plan.ip);
        {
            let inside = Links::open(&netns)?;
            inside.up("lo").await?;
            inside.add_veth("eth0", &veth, &self.node).await?;
            inside.add_address("eth0", plan.ip, 32).await?;
            inside.up("eth0").await?;
            inside
                .add_route(Cidr::DEFAULT, Some(self.node_ip), "eth0")
                .await?;
        }
        self.node_links.up(&veth).await?;
        self.node_links
            .add_route(
                Cidr {
                    address: plan.ip,
                    prefix: 32,
                },
                None,
                &veth,
            )
            .await?;
        let server = if plan.ports.is_empty() {
            None
        } else {
            Some(self.serve(&netns, plan).await?)
        };
        Ok(PodNetwork {
            plan: plan.clone(),
            netns,
            _server: server,
        })
    }

    /// Starts the identity server of `plan` inside `netns` and waits until it listens.
    async fn serve(&self, netns: &Netns, plan: &PodPlan) -> Result<IdentityServer> {
        let identity = format!("{}/{}/{}", self.cluster, plan.namespace, plan.name);
        let failed = |message: String| Error::Io {
            what: format!("starting the identity server of Pod {identity}"),
            source: std::io::Error::other(message),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|source| Error::Io {
                what: format!("opening {}", self.log.display()),
                source,
            })?;
        let runtime = tokio::runtime::Handle::current();
        let mut command = Command::new(&self.identity_bin);
        command
            .arg(&identity)
            .args(plan.ports.iter().map(|port| format!("{}:{port}", plan.ip)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        let mut child = netns.run("starting comb-identity", || {
            let _entered = runtime.enter();
            command.spawn()
        })?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed("its output is not a pipe".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        match tokio::time::timeout(SERVER_START, lines.next_line()).await {
            Ok(Ok(Some(line))) if line == "ready" => Ok(IdentityServer {
                _child: child,
                _stdin: stdin,
            }),
            Ok(_) => Err(failed(format!(
                "it exited before it listened; see {}",
                self.log.display()
            ))),
            Err(_) => Err(failed(format!(
                "it did not listen within {}s",
                SERVER_START.as_secs()
            ))),
        }
    }

    async fn remove(&self, key: &str, plan: &PodPlan) {
        // Dropped: its server exits, and the namespace goes once nothing else holds it.
        let removed = self.lock().remove(key);
        drop(removed);
        if let Err(error) = self.node_links.delete(&veth_name(plan.ip)).await {
            tracing::warn!(cluster = %self.cluster, pod = %key, %error, "removing the Pod's link");
        }
    }

    /// Removes every Pod's network (the sandbox stops).
    pub async fn remove_all(&self) {
        let all: Vec<(String, PodPlan)> = self
            .lock()
            .iter()
            .map(|(key, pod)| (key.clone(), pod.plan.clone()))
            .collect();
        for (key, plan) in all {
            self.remove(&key, &plan).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a Pod")
    }

    fn running(name: &str) -> serde_json::Value {
        json!({"name": name, "image": "x", "imageID": "", "ready": true, "restartCount": 0,
               "state": {"running": {}}})
    }

    #[test]
    fn a_pod_gets_the_tcp_ports_of_its_running_containers() {
        let spec = json!({"containers": [
            {"name": "db", "ports": [{"containerPort": 5432}, {"containerPort": 53, "protocol": "UDP"}]},
            {"name": "metrics", "ports": [{"containerPort": 9187, "protocol": "TCP"}]},
            {"name": "crashing", "ports": [{"containerPort": 8080}]}
        ]});
        let metadata = json!({"name": "db-0", "namespace": "platform"});
        let waiting = json!({"name": "crashing", "image": "x", "imageID": "", "ready": false,
                             "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
        let cases = [
            (
                json!({"phase": "Running", "podIP": "10.244.0.7",
                       "containerStatuses": [running("db"), running("metrics"), waiting]}),
                Some(vec![5432, 9187]),
            ),
            (json!({"phase": "Pending"}), None),
            (
                json!({"phase": "Running", "containerStatuses": [running("db")]}),
                None,
            ),
            (
                json!({"phase": "Succeeded", "podIP": "10.244.0.7",
                       "containerStatuses": [running("db")]}),
                None,
            ),
            (
                json!({"phase": "Running", "podIP": "10.244.0.7", "containerStatuses": []}),
                Some(vec![]),
            ),
        ];
        for (status, ports) in cases {
            let planned = plan(&pod(
                json!({"metadata": metadata, "spec": spec, "status": status}),
            ));
            assert_eq!(planned.as_ref().map(|p| p.ports.clone()), ports, "{status}");
            if let Some(planned) = planned {
                assert_eq!(planned.ip, Ipv4Addr::new(10, 244, 0, 7));
                assert_eq!(planned.key(), "platform/db-0");
            }
        }
        let host = pod(json!({"metadata": metadata,
            "spec": {"hostNetwork": true, "containers": []},
            "status": {"phase": "Running", "podIP": "172.18.0.2"}}));
        assert_eq!(plan(&host), None);
    }

    #[test]
    fn veth_names_are_unique_per_address_and_short_enough() {
        let name = veth_name(Ipv4Addr::new(10, 244, 255, 254));
        assert_eq!(name, "veth0af4fffe");
        assert!(name.len() <= 15);
        assert_ne!(
            veth_name(Ipv4Addr::new(10, 244, 0, 1)),
            veth_name(Ipv4Addr::new(10, 245, 0, 1))
        );
    }
}
