//! Runs the simulated controllers of one cluster: store events and timers name the objects to
//! look at, each is reconciled by its pure `plan` over fresh state read from the store, and the
//! plan's writes go back through the store, where every client sees them.
//!
//! The work queue holds each object at most once, so a burst of events costs one reconcile
//! per object; nothing runs unless an event or a due timer asks for it.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::Value;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::service::Addresses;
use super::{
    Action, Kind, Plan, SimConfig, cronjob, daemonset, deployment, endpoints, job, namespace,
    object, pod, replicaset, service, statefulset, volume,
};
use crate::api_error::ApiError;
use crate::resources::ResourceType;
use crate::service_addresses::{Pool, ip_of};
use crate::store::{EventType, Propagation, Store, StoreEvent, object_resource_version};

/// How many objects are reconciled before the task yields and reads new events.
const BATCH: usize = 128;

/// One object of a simulated kind.
type Key = (Kind, String, String);

/// Starts the simulated controllers and kubelet of `store`; they stop with `shutdown`.
/// `ca_pem` is the bundle published in every namespace's `kube-root-ca.crt`.
pub fn spawn(
    store: Store,
    config: SimConfig,
    ca_pem: String,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let mut events = store.subscribe();
    tokio::spawn(async move {
        let mut sim = Simulation::new(store, config, ca_pem);
        sim.register_node();
        sim.resync();
        loop {
            // Take every event that is already there, then work, then wait.
            loop {
                match events.try_recv() {
                    Ok(event) => sim.on_event(&event),
                    Err(TryRecvError::Lagged(_)) => sim.resync(),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Closed) => return,
                }
            }
            sim.enqueue_due_timers();
            if !sim.queue.is_empty() {
                sim.work(BATCH);
                tokio::task::yield_now().await;
                continue;
            }
            let next_timer = sim.timers.peek().map(|Reverse((at, _))| *at);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                event = events.recv() => match event {
                    Ok(event) => sim.on_event(&event),
                    Err(RecvError::Lagged(_)) => sim.resync(),
                    Err(RecvError::Closed) => return,
                },
                _ = sleep_until(next_timer) => {}
            }
        }
    })
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

struct Simulation {
    store: Store,
    config: SimConfig,
    ca_pem: String,
    queue: VecDeque<Key>,
    queued: HashSet<Key>,
    timers: BinaryHeap<Reverse<(Instant, Key)>>,
    /// The earliest pending timer of each key, so repeated plans do not pile up timers.
    timer_of: HashMap<Key, Instant>,
    /// The resourceVersion of each object's latest write by its own controller: the event of
    /// that write needs no second look at the object (its owner still gets one).
    own_writes: HashMap<Key, u64>,
    addresses: Addresses,
    pod_ips: Pool,
    /// Pod IPs handed out but not yet in a written status, by Pod UID.
    pending_ips: HashMap<String, u32>,
    /// The selector of every Service that has one, by namespace.
    selectors: HashMap<String, endpoints::SelectorIndex>,
}

impl Simulation {
    fn new(store: Store, config: SimConfig, ca_pem: String) -> Simulation {
        let ip = |a, b, c, d| u32::from(Ipv4Addr::new(a, b, c, d));
        Simulation {
            store,
            config,
            ca_pem,
            queue: VecDeque::new(),
            queued: HashSet::new(),
            timers: BinaryHeap::new(),
            timer_of: HashMap::new(),
            own_writes: HashMap::new(),
            addresses: Addresses::new(config.load_balancer_pool),
            pod_ips: Pool::new(ip(10, 244, 0, 2), ip(10, 244, 255, 254)),
            pending_ips: HashMap::new(),
            selectors: HashMap::new(),
        }
    }

    fn enqueue(&mut self, key: Key) {
        if self.queued.insert(key.clone()) {
            self.queue.push_back(key);
        }
    }

    /// Registers the node, as a kubelet does when it starts.
    fn register_node(&self) {
        let Some(nodes) = self.store.resource_type("", "Node") else {
            return;
        };
        let (node, status) = pod::node(Timestamp::now());
        let registered = match self.store.create(&nodes, None, node) {
            Ok(created) => created,
            // Registered by an earlier simulation of this store.
            Err(_) => return,
        };
        let mut reported = registered;
        reported["status"] = status;
        if let Err(error) = self.store.update_status(&nodes, None, reported) {
            tracing::warn!(%error, "the simulated node could not report its status");
        }
    }

    /// Looks at everything again (at start, and after missing events).
    fn resync(&mut self) {
        for (rt, object) in self.store.all_objects() {
            if let Some(kind) = Kind::from_group_kind(&rt.group, &rt.kind) {
                self.track(kind, &object, false);
                let key = key_of(kind, &object);
                match kind {
                    Kind::Service => self.enqueue((Kind::Endpoints, key.1.clone(), key.2.clone())),
                    // Looked at through their Service, or their namespace.
                    Kind::EndpointSlice | Kind::ServiceAccount | Kind::ConfigMap => continue,
                    _ => {}
                }
                self.enqueue(key);
            }
        }
    }

    fn on_event(&mut self, event: &StoreEvent) {
        let Some(kind) = Kind::from_group_kind(&event.resource.group, &event.resource.kind) else {
            return;
        };
        let object = &event.object;
        if matches!(kind, Kind::ServiceAccount | Kind::ConfigMap) {
            if namespace::is_published(kind, object::name(object)) {
                let ns = object::namespace(object).to_string();
                self.enqueue((Kind::Namespace, String::new(), ns));
            }
            return;
        }
        let deleted = event.event_type == EventType::Deleted;
        if kind == Kind::Service
            && let Some(old) = event.old_object.as_ref().filter(|_| !deleted)
        {
            self.addresses.release(old);
        }
        self.track(kind, object, deleted);
        self.enqueue_endpoints(kind, event);
        let key = key_of(kind, object);
        if let Some((owner_kind, owner_name)) = controller_key(object) {
            self.enqueue((owner_kind, key.1.clone(), owner_name));
        }
        if deleted {
            self.own_writes.remove(&key);
            self.timer_of.remove(&key);
            return;
        }
        if self.own_writes.get(&key) == Some(&event.resource_version) {
            return;
        }
        self.enqueue(key);
    }

    /// The endpoints of the Services an event may change: a Service's own, a managed slice's
    /// Service's, and those of the Services selecting a Pod whose address, readiness or labels
    /// changed.
    fn enqueue_endpoints(&mut self, kind: Kind, event: &StoreEvent) {
        let object = &event.object;
        let namespace = object::namespace(object).to_string();
        match kind {
            Kind::Service => {
                self.enqueue((Kind::Endpoints, namespace, object::name(object).to_string()));
            }
            // Its own writes are skipped by the caller; a deletion by someone else is repaired.
            Kind::Endpoints if event.event_type == EventType::Deleted => {
                self.enqueue((Kind::Endpoints, namespace, object::name(object).to_string()));
            }
            Kind::EndpointSlice => {
                let managed = object::label(object, endpoints::MANAGED_BY_LABEL)
                    == Some(endpoints::MANAGED_BY);
                if let Some(service) =
                    object::label(object, endpoints::SERVICE_NAME_LABEL).filter(|_| managed)
                {
                    self.enqueue((Kind::Endpoints, namespace, service.to_string()));
                }
            }
            Kind::Pod => {
                let old = event.old_object.as_ref();
                let modified = event.event_type == EventType::Modified;
                if modified && old.is_some_and(|old| endpoint_view(old) == endpoint_view(object)) {
                    return;
                }
                let labels = [
                    Some(&object["metadata"]["labels"]),
                    old.map(|o| &o["metadata"]["labels"]),
                ];
                // A set: a Pod whose labels changed may be selected before and after.
                let selecting: BTreeSet<String> = self
                    .selectors
                    .get(&namespace)
                    .into_iter()
                    .flat_map(|index| labels.iter().flatten().flat_map(|l| index.selecting(l)))
                    .map(str::to_string)
                    .collect();
                for service in selecting {
                    self.enqueue((Kind::Endpoints, namespace.clone(), service));
                }
            }
            _ => {}
        }
    }

    /// Keeps the address pools and the Service selectors in step with what exists.
    fn track(&mut self, kind: Kind, object: &Value, deleted: bool) {
        if kind == Kind::Service {
            let namespace = object::namespace(object).to_string();
            self.selectors.entry(namespace).or_default().set(
                object::name(object),
                endpoints::selector(object).filter(|_| !deleted),
            );
        }
        match (kind, deleted) {
            (Kind::Service, false) => self.addresses.hold(object),
            (Kind::Service, true) => self.addresses.release(object),
            (Kind::Pod, false) => {
                if let Some(ip) = ip_of(&object["status"]["podIP"])
                    .filter(|_| object["spec"]["hostNetwork"] != true)
                {
                    self.pod_ips.hold(ip);
                    self.pending_ips.remove(object::uid(object));
                }
            }
            (Kind::Pod, true) => {
                if let Some(ip) = ip_of(&object["status"]["podIP"])
                    .filter(|_| object["spec"]["hostNetwork"] != true)
                {
                    self.pod_ips.release(ip);
                }
                if let Some(ip) = self.pending_ips.remove(object::uid(object)) {
                    self.pod_ips.release(ip);
                }
            }
            _ => {}
        }
    }

    fn enqueue_due_timers(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, key))) = self.timers.pop() else {
                break;
            };
            if self.timer_of.get(&key) == Some(&at) {
                self.timer_of.remove(&key);
                self.enqueue(key);
            }
        }
    }

    fn schedule(&mut self, key: Key, wake: Timestamp, now: Timestamp) {
        let delay = wake.duration_since(now).as_millis().max(1);
        let at = Instant::now()
            + std::time::Duration::from_millis(u64::try_from(delay).unwrap_or(u64::MAX));
        if self
            .timer_of
            .get(&key)
            .is_some_and(|existing| *existing <= at)
        {
            return;
        }
        self.timer_of.insert(key.clone(), at);
        self.timers.push(Reverse((at, key)));
    }

    fn work(&mut self, budget: usize) {
        for _ in 0..budget {
            let Some(key) = self.queue.pop_front() else {
                return;
            };
            self.queued.remove(&key);
            self.reconcile(key);
        }
    }

    fn reconcile(&mut self, key: Key) {
        let (kind, namespace, name) = &key;
        if *kind == Kind::Endpoints {
            let plan = self.endpoints_plan(namespace, name);
            self.apply(&key, plan, Timestamp::now());
            return;
        }
        let Some(rt) = self.store.resource_type(kind.group(), kind.name()) else {
            return;
        };
        let Ok(object) = self.store.get_shared(&rt, Some(namespace), name) else {
            return;
        };
        let now = Timestamp::now();
        let children = match kind {
            Kind::Deployment => self.children(&object, "ReplicaSet"),
            Kind::CronJob => self.children(&object, "Job"),
            Kind::ReplicaSet | Kind::StatefulSet | Kind::DaemonSet | Kind::Job => {
                self.children(&object, "Pod")
            }
            Kind::Pod
            | Kind::Service
            | Kind::Endpoints
            | Kind::EndpointSlice
            | Kind::PersistentVolumeClaim
            | Kind::Namespace
            | Kind::ServiceAccount
            | Kind::ConfigMap => Vec::new(),
        };
        let children: Vec<&Value> = children.iter().map(|child| &**child).collect();
        let plan = match kind {
            Kind::Pod => {
                let ip = self.pod_ip(&object);
                pod::plan(&object, now, &self.config, &ip)
            }
            Kind::ReplicaSet => replicaset::plan(&object, &children, now),
            Kind::Deployment => deployment::plan(&object, &children, now),
            Kind::StatefulSet => {
                let claims = self.store.resource_type("", "PersistentVolumeClaim");
                let exists = |claim: &str| {
                    claims
                        .as_ref()
                        .is_some_and(|rt| self.store.get_shared(rt, Some(namespace), claim).is_ok())
                };
                statefulset::plan(&object, &children, &exists, now)
            }
            Kind::DaemonSet => daemonset::plan(&object, &children, now),
            Kind::Job => job::plan(&object, &children, now),
            Kind::CronJob => cronjob::plan(&object, &children, now),
            Kind::Service => service::plan(&object, &mut self.addresses),
            Kind::PersistentVolumeClaim => volume::plan(&object),
            Kind::Namespace => self.namespace_plan(&object),
            // Handled above, by the Service's name; slices, service accounts and config maps
            // are never work items of their own.
            Kind::Endpoints | Kind::EndpointSlice | Kind::ServiceAccount | Kind::ConfigMap => {
                Plan::default()
            }
        };
        self.apply(&key, plan, now);
    }

    /// What the namespace still needs of its default ServiceAccount and CA bundle.
    fn namespace_plan(&self, ns: &Value) -> Plan {
        let read = |kind: Kind, name: &str| {
            let rt = self.store.resource_type(kind.group(), kind.name())?;
            self.store
                .get_shared(&rt, Some(object::name(ns)), name)
                .ok()
        };
        let service_account = read(Kind::ServiceAccount, namespace::SERVICE_ACCOUNT);
        let root_ca = read(Kind::ConfigMap, namespace::ROOT_CA_CONFIG_MAP);
        namespace::plan(
            ns,
            service_account.as_deref(),
            root_ca.as_deref(),
            &self.ca_pem,
        )
    }

    /// The endpoints controllers' plan for the Service `name`, from fresh reads.
    fn endpoints_plan(&self, namespace: &str, name: &str) -> Plan {
        let read = |group: &str, kind: &str| self.store.resource_type(group, kind);
        let (Some(services), Some(pods), Some(endpoints), Some(slices)) = (
            read("", "Service"),
            read("", "Pod"),
            read("", "Endpoints"),
            read("discovery.k8s.io", "EndpointSlice"),
        ) else {
            return Plan::default();
        };
        let ns = Some(namespace);
        let service = self.store.get_shared(&services, ns, name).ok();
        let list = |rt, selector: &str| {
            self.store
                .list_shared(rt, ns, Some(selector), None)
                .map(|(items, _)| items)
                .unwrap_or_default()
        };
        let selected = match service.as_deref().and_then(endpoints::selector) {
            Some(selector) => list(&pods, &endpoints::selector_string(selector)),
            None => Vec::new(),
        };
        let managed = list(&slices, &endpoints::slice_selector(name));
        let current = self.store.get_shared(&endpoints, ns, name).ok();
        let selected: Vec<&Value> = selected.iter().map(|pod| &**pod).collect();
        let managed: Vec<&Value> = managed.iter().map(|slice| &**slice).collect();
        endpoints::plan(
            namespace,
            name,
            service.as_deref(),
            &selected,
            &managed,
            current.as_deref(),
        )
    }

    /// The address of a Pod on the node: the one it has, or the next free one.
    fn pod_ip(&mut self, pod: &Value) -> String {
        if let Some(ip) = pod["status"]["podIP"].as_str() {
            return ip.to_string();
        }
        let uid = object::uid(pod).to_string();
        let ip = match self.pending_ips.get(&uid) {
            Some(ip) => Some(*ip),
            None if pod["spec"]["nodeName"] == pod::NODE_NAME => {
                let ip = self.pod_ips.take();
                if let Some(ip) = ip {
                    self.pending_ips.insert(uid, ip);
                }
                ip
            }
            None => None,
        };
        ip.map(|ip| Ipv4Addr::from(ip).to_string())
            .unwrap_or_default()
    }

    /// The objects of `kind` that `owner` controls.
    fn children(&self, owner: &Value, kind: &str) -> Vec<Arc<Value>> {
        self.store
            .dependents_of(object::uid(owner))
            .into_iter()
            .filter(|(rt, child)| rt.kind == kind && object::is_controlled_by(child, owner))
            .map(|(_, child)| child)
            .collect()
    }

    fn apply(&mut self, key: &Key, plan: Plan, now: Timestamp) {
        let Plan { actions, wake } = plan;
        // A plan that changed the object itself but not its status (a Pod just bound) has a
        // next step, which its own write's event would not trigger.
        let own = |a: &Action| match a {
            Action::Update(kind, object) | Action::UpdateStatus(kind, object) => {
                key_of(*kind, object) == *key
            }
            Action::Bind { namespace, name } => {
                (Kind::Pod, namespace, name) == (key.0, &key.1, &key.2)
            }
            _ => false,
        };
        let next_step = actions
            .iter()
            .any(|a| matches!(a, Action::Update(..) | Action::Bind { .. }) && own(a))
            && !actions
                .iter()
                .any(|a| matches!(a, Action::UpdateStatus(..)) && own(a));
        // An update changes the resourceVersion a later status update of the same object needs.
        let mut written: HashMap<Key, String> = HashMap::new();
        for action in actions {
            let kind = action.kind();
            let Some(rt) = self.store.resource_type(kind.group(), kind.name()) else {
                continue;
            };
            let result = match action {
                Action::Create(_, object) => {
                    let namespace = object::namespace(&object).to_string();
                    self.store.create(&rt, Some(&namespace), object)
                }
                Action::Update(_, object) => {
                    self.write(&rt, kind, object, false, key, &mut written)
                }
                Action::UpdateStatus(_, object) => {
                    self.write(&rt, kind, object, true, key, &mut written)
                }
                Action::Delete {
                    namespace, name, ..
                } => self
                    .store
                    .delete(&rt, Some(&namespace), &name, Propagation::Background),
                Action::Bind { namespace, name } => {
                    let bound = self.store.bind_pod(&namespace, &name, pod::NODE_NAME);
                    if let Ok(stored) = &bound {
                        self.wrote((Kind::Pod, namespace, name), key, stored, &mut written);
                    }
                    bound
                }
            };
            if let Err(error) = result {
                self.on_write_error(key, kind, &error);
            }
        }
        if next_step {
            self.enqueue(key.clone());
        }
        if let Some(wake) = wake {
            self.schedule(key.clone(), wake, now);
        }
    }

    /// An update of the main resource or of its status, at the resourceVersion of an earlier
    /// write of the same plan if there was one.
    fn write(
        &mut self,
        rt: &ResourceType,
        kind: Kind,
        mut object: Value,
        status: bool,
        reconciling: &Key,
        written: &mut HashMap<Key, String>,
    ) -> Result<Value, ApiError> {
        let target = key_of(kind, &object);
        if let Some(version) = written.get(&target) {
            object["metadata"]["resourceVersion"] = Value::String(version.clone());
        }
        let namespace = Some(target.1.as_str());
        let result = if status {
            self.store.update_status(rt, namespace, object)
        } else {
            self.store.update(rt, namespace, object)
        };
        if let Ok(stored) = &result {
            self.wrote(target, reconciling, stored, written);
        }
        result
    }

    /// Notes a plan's successful write of `target` (now `stored`) while reconciling
    /// `reconciling`.
    fn wrote(
        &mut self,
        target: Key,
        reconciling: &Key,
        stored: &Value,
        written: &mut HashMap<Key, String>,
    ) {
        // Only a controller's write of its own object is already accounted for; a write to
        // another object (a Deployment scaling its ReplicaSet) is news to that object's
        // controller.
        if target == *reconciling
            && let Some(version) = object_resource_version(stored)
        {
            self.own_writes.insert(target.clone(), version);
        }
        written.insert(target, crate::meta::resource_version(stored).to_string());
    }

    fn on_write_error(&mut self, key: &Key, kind: Kind, error: &ApiError) {
        match error.reason.as_str() {
            // Someone else wrote first: look again (their event is on its way too).
            "Conflict" => self.enqueue(key.clone()),
            // Created by an earlier pass, or gone meanwhile, or the namespace is going away.
            "AlreadyExists" | "NotFound" | "Forbidden" => {}
            _ => {
                tracing::warn!(kind = kind.name(), %error, "the simulated cluster could not write")
            }
        }
    }
}

/// What of a Pod its Services' endpoints show.
fn endpoint_view(pod: &Value) -> (&Value, &Value, bool, bool) {
    (
        &pod["metadata"]["labels"],
        &pod["status"]["podIP"],
        pod::is_ready(pod),
        pod::is_active(pod),
    )
}

fn key_of(kind: Kind, object: &Value) -> Key {
    (
        kind,
        object::namespace(object).to_string(),
        object::name(object).to_string(),
    )
}

/// The simulated owner that controls `object`, if any.
fn controller_key(object: &Value) -> Option<(Kind, String)> {
    let reference = object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?;
    let kind = Kind::from_group_kind(
        group_of(reference["apiVersion"].as_str().unwrap_or_default()),
        reference["kind"].as_str()?,
    )?;
    Some((kind, reference["name"].as_str()?.to_string()))
}
