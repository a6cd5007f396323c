//! One cluster's object store: the etcd and registry layer of kube-apiserver.
//!
//! Every change takes the next resourceVersion of the cluster, is kept in a bounded history
//! (for watch resume and consistent paging) and is broadcast to subscribers in order. Methods
//! are synchronous and never await while holding the lock; the HTTP layer, the garbage
//! collector and the simulated controllers all write through them.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::api_error::{ApiError, FieldError};
use crate::crd;
use crate::meta;
use crate::resources::{Registry, ResourceType, crd_resource_types};
use crate::selectors::{FieldSelector, LabelOp, LabelSelector};
use crate::service_addresses::Allocator;
use crate::strategy;

mod delete;
mod history;
mod lifecycle;
mod list;
mod write;

pub(crate) use write::generated_name;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change of one object.
///
/// The objects are shared with the store's map (and with every subscriber and the history)
/// rather than copied: a deep copy of each written object for the map, the event and the
/// replaced state was a quarter of the emulator's CPU. Stored objects are never mutated in
/// place; a writer copies the one it changes.
#[derive(Debug, Clone)]
pub struct StoreEvent {
    pub event_type: EventType,
    /// The resource type in its storage version.
    pub resource: ResourceType,
    /// The object after the change (for `Deleted`, its last state at the deletion's version).
    pub object: Arc<Value>,
    /// The object before the change (`None` for `Added`).
    pub old_object: Option<Arc<Value>>,
    pub resource_version: u64,
    /// `object` as JSON, made by the first watch that sends it as stored and then shared by
    /// the others.
    encoded: OnceLock<Bytes>,
}

impl StoreEvent {
    fn new(
        event_type: EventType,
        resource: ResourceType,
        object: Arc<Value>,
        old_object: Option<Arc<Value>>,
        resource_version: u64,
    ) -> StoreEvent {
        StoreEvent {
            event_type,
            resource,
            object,
            old_object,
            resource_version,
            encoded: OnceLock::new(),
        }
    }

    /// `object` as compact JSON, encoded once.
    pub fn encoded_object(&self) -> &Bytes {
        self.encoded.get_or_init(|| {
            // Serializing a Value with string keys cannot fail.
            Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default())
        })
    }
}

/// How dependents are treated when their owner is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// The owner goes now; the garbage collector deletes dependents afterwards.
    #[default]
    Background,
    /// The owner waits (finalizer `foregroundDeletion`) until its blocking dependents are gone.
    Foreground,
    /// Dependents lose their ownerReference and stay (finalizer `orphan`).
    Orphan,
}

pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";

/// Options of create, update and patch.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: everything but the write.
    pub dry_run: bool,
    /// The manager recorded in `managedFields`; `None` records nothing.
    pub field_manager: Option<String>,
}

/// `metav1.DeleteOptions` as far as the sandbox honours them.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `None`: the kind's default (Background for everything served here).
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

/// The result of a delete.
#[derive(Debug, Clone, PartialEq)]
pub enum Deletion {
    /// Removed; the object as it was at its deletion.
    Deleted(Value),
    /// Marked with a deletionTimestamp; finalizers still have work to do.
    Pending(Value),
}

impl Deletion {
    pub fn into_object(self) -> Value {
        match self {
            Deletion::Deleted(v) | Deletion::Pending(v) => v,
        }
    }
}

/// List parameters beyond the resource and namespace.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: Option<LabelSelector>,
    pub field_selector: Option<FieldSelector>,
    /// Page size; `None` or 0 lists everything.
    pub limit: Option<usize>,
    /// The `continue` token of the previous page.
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Shared with the store (see [`StoreEvent`]).
    pub items: Vec<Arc<Value>>,
    pub resource_version: String,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<u64>,
}

/// What a watch starts from: synthetic ADDED objects (no resourceVersion given) or the kept
/// history after the given resourceVersion, then live events.
pub struct WatchStart {
    pub initial: Vec<Arc<Value>>,
    pub backlog: Vec<Arc<StoreEvent>>,
    pub receiver: broadcast::Receiver<Arc<StoreEvent>>,
    /// The resourceVersion everything up to which is in `initial`/`backlog`.
    pub resource_version: u64,
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How many past events are kept for watch resume; older resourceVersions get 410 Expired.
    pub history_limit: usize,
    /// Capacity of the live event channel; a subscriber further behind than this is dropped.
    pub event_buffer: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            history_limit: 4_096,
            event_buffer: 4_096,
        }
    }
}

/// Namespaces every cluster starts with; the first three may not be deleted.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

type ObjectKey = (String, String);

/// Where an object lives: storage key, namespace ("" when cluster-scoped), name.
type Location = (String, String, String);

/// Storage key, namespace, label key, label value.
type LabelledKey = (String, String, String, String);

struct State {
    resource_version: u64,
    objects: HashMap<String, BTreeMap<ObjectKey, Arc<Value>>>,
    by_uid: HashMap<String, Location>,
    dependents: HashMap<String, BTreeSet<Location>>,
    /// The names of a namespace's objects of a type that carry a label with a value, so that
    /// a list by an equality selector visits what it selects instead of the whole namespace:
    /// the simulated endpoint controllers list a namespace's Pods and slices by selector on
    /// every change, which at thousands of Services made the emulator's time grow with their
    /// square.
    labelled: HashMap<LabelledKey, BTreeSet<String>>,
    history: VecDeque<Arc<StoreEvent>>,
    /// Events after this resourceVersion are all in `history`.
    compacted: u64,
    registry: Registry,
    /// Events are shared, not copied, with every subscriber: each watch of the cluster receives
    /// every change, and a copy of the object per watch was most of the emulator's work.
    sender: broadcast::Sender<Arc<StoreEvent>>,
    history_limit: usize,
    /// The cluster IPs and node ports the stored Services have.
    service_addresses: Allocator,
}

/// One cluster's objects; cheap to clone.
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

fn namespace_key(rt: &ResourceType, namespace: Option<&str>) -> String {
    if rt.namespaced {
        namespace.unwrap_or_default().to_string()
    } else {
        String::new()
    }
}

fn is_service(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.kind == "Service"
}

impl State {
    fn location(rt: &ResourceType, ns: &str, name: &str) -> Location {
        (rt.storage_key(), ns.to_string(), name.to_string())
    }

    fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects
            .get(&rt.storage_key())
            .and_then(|objects| objects.get(&(ns.to_string(), name.to_string())))
    }

    fn next_rv(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn emit(&mut self, event: StoreEvent) {
        let event = Arc::new(event);
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.resource_version;
            }
        }
        // No subscriber is fine: nobody is watching yet.
        let _ = self.sender.send(event);
    }

    fn index(&mut self, location: &Location, object: &Value, add: bool) {
        let uid = meta::uid(object).to_string();
        for owner in meta::owner_uids(object) {
            if add {
                self.dependents
                    .entry(owner)
                    .or_default()
                    .insert(location.clone());
            } else if let Some(set) = self.dependents.get_mut(&owner) {
                set.remove(location);
                if set.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
        if add {
            self.by_uid.insert(uid, location.clone());
        } else {
            self.by_uid.remove(&uid);
        }
        let (storage, namespace, name) = location;
        let labels = object["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten();
        for (label, value) in labels {
            let Some(value) = value.as_str() else {
                continue;
            };
            let key = (
                storage.clone(),
                namespace.clone(),
                label.clone(),
                value.to_string(),
            );
            if add {
                self.labelled.entry(key).or_default().insert(name.clone());
            } else if let Some(names) = self.labelled.get_mut(&key) {
                names.remove(name);
                if names.is_empty() {
                    self.labelled.remove(&key);
                }
            }
        }
    }

    /// The objects of one namespace that a label selector's narrowest equality requirement
    /// admits, in the store's order; `None` when the selector has no equality to narrow by.
    /// The caller still matches the whole selector.
    fn labelled<'a>(
        &'a self,
        storage: &str,
        namespace: &str,
        selector: &LabelSelector,
    ) -> Option<Vec<(&'a ObjectKey, &'a Arc<Value>)>> {
        let empty = BTreeSet::new();
        let names = selector
            .requirements
            .iter()
            .filter_map(|requirement| match &requirement.op {
                LabelOp::Equals(value) => Some((&requirement.key, value)),
                _ => None,
            })
            .map(|(label, value)| {
                let key = (
                    storage.to_string(),
                    namespace.to_string(),
                    label.clone(),
                    value.clone(),
                );
                self.labelled.get(&key).unwrap_or(&empty)
            })
            .min_by_key(|names| names.len())?;
        let objects = self.objects.get(storage)?;
        Some(
            names
                .iter()
                .filter_map(|name| objects.get_key_value(&(namespace.to_string(), name.clone())))
                .collect(),
        )
    }

    /// Stores an object (new or replacing) at a fresh resourceVersion and emits the event.
    fn put(&mut self, rt: &ResourceType, mut object: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta::set_metadata_field(&mut object, "resourceVersion", Some(json!(rv.to_string())));
        let ns = meta::namespace(&object).unwrap_or_default().to_string();
        let name = meta::name(&object).to_string();
        let location = Self::location(rt, &ns, &name);
        let object = Arc::new(object);
        let old = self
            .objects
            .entry(rt.storage_key())
            .or_default()
            .insert((ns, name), Arc::clone(&object));
        if let Some(old) = &old {
            self.index(&location, old, false);
        }
        self.index(&location, &object, true);
        if is_service(rt) {
            if let Some(old) = &old {
                self.service_addresses.release(old);
            }
            self.service_addresses.hold(&object);
        }
        let event_type = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.emit(StoreEvent::new(
            event_type,
            rt.clone(),
            Arc::clone(&object),
            old,
            rv,
        ));
        object
    }

    /// Removes an object at a fresh resourceVersion and emits the event.
    fn remove(&mut self, rt: &ResourceType, ns: &str, name: &str) -> Option<Arc<Value>> {
        let old = self
            .objects
            .get_mut(&rt.storage_key())?
            .remove(&(ns.to_string(), name.to_string()))?;
        let location = Self::location(rt, ns, name);
        self.index(&location, &old, false);
        if is_service(rt) {
            self.service_addresses.release(&old);
        }
        let rv = self.next_rv();
        let mut last = Value::clone(&old);
        meta::set_metadata_field(&mut last, "resourceVersion", Some(json!(rv.to_string())));
        let last = Arc::new(last);
        self.emit(StoreEvent::new(
            EventType::Deleted,
            rt.clone(),
            Arc::clone(&last),
            Some(old),
            rv,
        ));
        Some(last)
    }

    fn crd_of(&self, rt: &ResourceType) -> Option<&Arc<Value>> {
        let crds = self
            .registry
            .by_kind("apiextensions.k8s.io", "CustomResourceDefinition")?;
        self.get(&crds, "", &format!("{}.{}", rt.plural, rt.group))
    }

    fn check_namespace(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        let namespaces = self
            .registry
            .by_kind("", "Namespace")
            .ok_or_else(|| ApiError::internal("namespaces are not served"))?;
        match self.get(&namespaces, "", ns) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(namespace) if meta::is_deleting(namespace) => {
                let mut error = ApiError::forbidden(
                    rt,
                    name,
                    &format!(
                        "unable to create new content in namespace {ns} because it is being terminated"
                    ),
                );
                if let Some(details) = error.details.as_mut() {
                    details["causes"] = json!([{
                        "reason": "NamespaceTerminating",
                        "message": format!("namespace {ns} is being terminated"),
                        "field": "metadata.namespace"
                    }]);
                }
                Err(error)
            }
            Some(_) => Ok(()),
        }
    }

    /// Serves a CRD's resources (if its names are free) and writes the status that says so.
    fn establish_crd(&mut self, crd_rt: &ResourceType, crd_object: &Value) {
        let name = meta::name(crd_object).to_string();
        let types = crd_resource_types(crd_object);
        let conflict = self.registry.name_conflict(&name, &types);
        if conflict.is_none() {
            self.registry.register_crd(&name, types);
        }
        let mut updated = Value::clone(crd_object);
        updated["status"] = crd::served_status(crd_object, conflict.as_deref());
        if meta::is_deleting(crd_object) {
            crd::set_terminating(&mut updated);
        }
        // A copy with another status, its resourceVersion the same: compared as it is.
        if updated != *crd_object {
            self.put(crd_rt, updated);
        }
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new(StoreOptions::default())
    }
}

impl Store {
    /// A store holding the system namespaces, like a fresh cluster.
    pub fn new(options: StoreOptions) -> Self {
        let (sender, _) = broadcast::channel(options.event_buffer.max(16));
        let store = Store {
            state: Arc::new(Mutex::new(State {
                resource_version: 0,
                objects: HashMap::new(),
                by_uid: HashMap::new(),
                dependents: HashMap::new(),
                labelled: HashMap::new(),
                history: VecDeque::new(),
                compacted: 0,
                registry: Registry::default(),
                sender,
                history_limit: options.history_limit.max(1),
                service_addresses: Allocator::default(),
            })),
        };
        {
            let mut state = store.lock();
            if let Some(namespaces) = state.registry.by_kind("", "Namespace") {
                for name in SYSTEM_NAMESPACES {
                    let object = json!({"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}});
                    // The system namespaces are valid by construction.
                    let _ = Self::create_locked(
                        &mut state,
                        &namespaces,
                        None,
                        object,
                        &WriteOptions::default(),
                    );
                }
            }
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every write is one insert),
        // so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The resource type of a group and kind (its storage version, else any served one).
    pub fn resource_type(&self, group: &str, kind: &str) -> Option<ResourceType> {
        self.lock().registry.by_kind(group, kind)
    }

    pub fn resource_by_plural(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<ResourceType> {
        self.lock().registry.by_plural(group, version, plural)
    }

    /// Every served resource type (built-ins, then CRDs' versions).
    pub fn resource_types(&self) -> Vec<ResourceType> {
        self.lock().registry.all().cloned().collect()
    }

    /// Every served API group with its versions, preferred version first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        self.lock().registry.groups()
    }

    /// Whether a named API group serves this version: what [`Store::groups`] lists, asked
    /// for on every request without building the list.
    pub fn serves(&self, group: &str, version: &str) -> bool {
        !group.is_empty()
            && self
                .lock()
                .registry
                .all()
                .any(|rt| rt.group == group && rt.version == version)
    }

    /// The cluster's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// Every change from now on, in resourceVersion order.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoreEvent>> {
        self.lock().sender.subscribe()
    }

    pub fn get(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.get_shared(rt, namespace, name)
            .map(Arc::unwrap_or_clone)
    }

    /// The stored object itself, shared rather than copied, for readers that do not change it.
    pub fn get_shared(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let state = self.lock();
        state
            .get(rt, &namespace_key(rt, namespace), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    fn holds_namespace_finalizer(rt: &ResourceType, object: &Value) -> bool {
        rt.group.is_empty()
            && rt.kind == "Namespace"
            && object["spec"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
    }
}

/// Which part of an object an update writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// Parses a resourceVersion query parameter (`""` and `"0"` mean "any").
pub fn parse_resource_version(raw: Option<&str>) -> Result<Option<u64>, ApiError> {
    match raw {
        None | Some("") | Some("0") => Ok(None),
        Some(text) => text
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {text:?}"))),
    }
}

/// The resourceVersion carried by an object as a number.
pub fn object_resource_version(object: &Value) -> Option<u64> {
    meta::resource_version(object).parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        Store::default()
    }

    fn rt(store: &Store, group: &str, kind: &str) -> ResourceType {
        store.resource_type(group, kind).expect("served")
    }

    #[test]
    fn a_list_by_label_finds_what_a_scan_of_the_namespace_finds() {
        use rand::rngs::StdRng;
        use rand::{Rng as _, SeedableRng as _};

        // Random creates, relabels and deletes in two namespaces; after each, every selector's
        // list (the label index where an equality narrows it) equals a scan's.
        let s = store();
        let cm = rt(&s, "", "ConfigMap");
        let namespaces = ["default", "kube-public"];
        let selectors = [
            "app=a",
            "app=a,tier=x",
            "tier=x,app=b",
            "app=a,tier!=x",
            "app!=a",
            "app in (a,b)",
            "app=c",
        ];
        let mut rng = StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        for change in 0..600 {
            let namespace = namespaces[rng.random_range(0..namespaces.len())];
            let name = format!("cm-{}", rng.random_range(0..12));
            let app = ["a", "b"][rng.random_range(0..2)];
            let tier = ["x", "y"][rng.random_range(0..2)];
            let labels = json!({"app": app, "tier": tier});
            let existing = s.get(&cm, Some(namespace), &name).ok();
            match (rng.random_range(0..3), existing) {
                (0, Some(_)) => {
                    s.delete(&cm, Some(namespace), &name, Propagation::Background)
                        .expect("deleted");
                }
                (_, Some(mut object)) => {
                    object["metadata"]["labels"] = labels;
                    s.update(&cm, Some(namespace), object).expect("relabelled");
                }
                (_, None) => {
                    s.create(
                        &cm,
                        Some(namespace),
                        json!({"metadata": {"name": name, "labels": labels}}),
                    )
                    .expect("created");
                }
            }
            for namespace in namespaces {
                let (all, _) = s.list(&cm, Some(namespace), None, None).expect("listed");
                for selector in selectors {
                    let parsed = LabelSelector::parse(selector).expect("parses");
                    let scanned: Vec<&str> = all
                        .iter()
                        .filter(|object| parsed.matches(object))
                        .map(meta::name)
                        .collect();
                    let (listed, _) = s
                        .list(&cm, Some(namespace), Some(selector), None)
                        .expect("listed");
                    let listed: Vec<&str> = listed.iter().map(meta::name).collect();
                    assert_eq!(listed, scanned, "change {change}, {namespace}, {selector}");
                }
            }
        }
        // Nothing stale is kept: each name indexed is an object carrying that label now.
        let state = s.lock();
        for ((storage, namespace, label, value), names) in &state.labelled {
            for name in names {
                let object = state
                    .objects
                    .get(storage)
                    .and_then(|objects| objects.get(&(namespace.clone(), name.clone())));
                assert_eq!(
                    object.and_then(|o| o["metadata"]["labels"][label].as_str()),
                    Some(value.as_str()),
                    "{namespace}/{name} {label}={value}"
                );
            }
        }
    }

    #[test]
    fn serves_answers_what_groups_lists() {
        let s = store();
        let groups = s.groups();
        let mut asked = vec![
            (String::new(), "v1".to_string()),
            ("apps".into(), "v2".into()),
            ("nope".into(), "v1".into()),
        ];
        for (group, versions) in &groups {
            asked.extend(versions.iter().map(|v| (group.clone(), v.clone())));
        }
        for (group, version) in asked {
            let listed = groups
                .iter()
                .any(|(g, v)| *g == group && v.contains(&version));
            assert_eq!(s.serves(&group, &version), listed, "{group}/{version}");
        }
    }

    #[test]
    fn create_fills_system_metadata_and_refuses_duplicates() {
        let s = store();
        let cm = rt(&s, "", "ConfigMap");
        let created = s
            .create(
                &cm,
                Some("default"),
                json!({"metadata": {"generateName": "web-"}, "data": {"a": "1"}}),
            )
            .expect("created");
        let name = meta::name(&created).to_string();
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        assert_eq!(created["apiVersion"], "v1");
        assert_eq!(created["kind"], "ConfigMap");
        assert!(!meta::uid(&created).is_empty());
        assert!(created["metadata"]["creationTimestamp"].is_string());
        assert!(created["metadata"].get("generation").is_none());
        let again = s.create(&cm, Some("default"), json!({"metadata": {"name": name}}));
        assert_eq!(again.expect_err("duplicate").reason, "AlreadyExists");
        let missing_ns = s.create(&cm, Some("nope"), json!({"metadata": {"name": "x"}}));
        assert_eq!(
            missing_ns.expect_err("no namespace").message,
            r#"namespaces "nope" not found"#
        );
    }

    #[test]
    fn updates_conflict_on_stale_versions_and_bump_generation_on_spec() {
        let s = store();
        let deploy = rt(&s, "apps", "Deployment");
        let created = s
            .create(
                &deploy,
                Some("default"),
                json!({"metadata": {"name": "web"}, "spec": {"replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
                    "status": {"replicas": 9}}),
            )
            .expect("created");
        assert_eq!(created["metadata"]["generation"], 1);
        assert_eq!(created["status"], json!({}), "status is reset on create");
        let mut relabelled = created.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        relabelled["status"] = json!({"replicas": 3});
        let updated = s
            .update(&deploy, Some("default"), relabelled)
            .expect("updated");
        assert_eq!(updated["metadata"]["generation"], 1);
        assert_eq!(
            updated["status"],
            json!({}),
            "status ignored on the main resource"
        );
        let stale = s.update(&deploy, Some("default"), created.clone());
        assert_eq!(stale.expect_err("stale").code, 409);
        let mut replaced = updated.clone();
        meta::set_metadata_field(&mut replaced, "uid", Some(json!("another")));
        let error = s
            .update(&deploy, Some("default"), replaced)
            .expect_err("uid precondition");
        assert!(
            error
                .message
                .contains("Precondition failed: UID in precondition: another"),
            "{}",
            error.message
        );
        let mut scaled = updated.clone();
        scaled["spec"]["replicas"] = json!(2);
        let scaled = s.update(&deploy, Some("default"), scaled).expect("scaled");
        assert_eq!(scaled["metadata"]["generation"], 2);
        let mut status = scaled.clone();
        status["status"] = json!({"replicas": 2});
        status["spec"]["replicas"] = json!(7);
        let with_status = s
            .update_status(&deploy, Some("default"), status)
            .expect("status");
        assert_eq!(with_status["status"]["replicas"], 2);
        assert_eq!(with_status["spec"]["replicas"], 2, "only status is taken");
        // An identical write is no write.
        let same = s
            .update(&deploy, Some("default"), with_status.clone())
            .expect("no-op");
        assert_eq!(
            meta::resource_version(&same),
            meta::resource_version(&with_status)
        );
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let s = store();
        let cm = rt(&s, "", "ConfigMap");
        s.create(
            &cm,
            Some("default"),
            json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )
        .expect("created");
        let pending = s
            .delete_with(&cm, Some("default"), "held", &DeleteOptions::default())
            .expect("deleting");
        let Deletion::Pending(object) = pending else {
            panic!("finalizer must hold the object")
        };
        assert!(meta::is_deleting(&object));
        let mut events = s.subscribe();
        let gone = s
            .modify(&cm, Some("default"), "held", Subresource::Main, |o| {
                meta::set_finalizers(o, &[])
            })
            .expect("finalized");
        assert!(meta::is_deleting(&gone));
        assert_eq!(
            s.get(&cm, Some("default"), "held").expect_err("gone").code,
            404
        );
        // Like kube-apiserver's deleteWithoutFinalizers: the emptying update is not written,
        // so watchers see the deletion only.
        let only = events.try_recv().expect("deleted");
        assert_eq!(only.event_type, EventType::Deleted);
        assert!(events.try_recv().is_err(), "no MODIFIED before the DELETED");
    }

    #[test]
    fn watch_resumes_from_history_and_expires_beyond_it() {
        let s = Store::new(StoreOptions {
            history_limit: 3,
            event_buffer: 16,
        });
        let cm = rt(&s, "", "ConfigMap");
        let start = s.resource_version();
        for i in 0..5 {
            s.create(
                &cm,
                Some("default"),
                json!({"metadata": {"name": format!("c{i}")}}),
            )
            .expect("created");
        }
        let error = s
            .watch(&cm, Some("default"), Some(start))
            .err()
            .expect("expired");
        assert_eq!(error.code, 410);
        assert!(error.message.starts_with("too old resource version"));
        let resumed = s
            .watch(&cm, Some("default"), Some(start + 3))
            .expect("kept");
        let names: Vec<&str> = resumed
            .backlog
            .iter()
            .map(|e| meta::name(&e.object))
            .collect();
        assert_eq!(names, ["c3", "c4"]);
        let initial = s.watch(&cm, Some("default"), None).expect("initial");
        assert_eq!(initial.initial.len(), 5);
    }

    #[test]
    fn pages_are_a_consistent_snapshot() {
        let s = store();
        let cm = rt(&s, "", "ConfigMap");
        for name in ["a", "b", "c"] {
            s.create(&cm, Some("default"), json!({"metadata": {"name": name}}))
                .expect("created");
        }
        let first = s
            .list_page(
                &cm,
                Some("default"),
                &ListOptions {
                    limit: Some(2),
                    ..ListOptions::default()
                },
            )
            .expect("page 1");
        assert_eq!(first.items.len(), 2);
        assert_eq!(first.remaining_item_count, Some(1));
        s.delete(&cm, Some("default"), "c", Propagation::Background)
            .expect("deleted");
        s.create(&cm, Some("default"), json!({"metadata": {"name": "d"}}))
            .expect("created");
        let second = s
            .list_page(
                &cm,
                Some("default"),
                &ListOptions {
                    limit: Some(2),
                    continue_token: first.continue_token.clone(),
                    ..ListOptions::default()
                },
            )
            .expect("page 2");
        let names: Vec<&str> = second.items.iter().map(|o| meta::name(o)).collect();
        assert_eq!(names, ["c"], "the snapshot of the first page");
        assert_eq!(second.resource_version, first.resource_version);
        assert!(second.continue_token.is_none());
    }

    #[test]
    fn crds_become_served_and_established() {
        let s = store();
        let crds = rt(&s, "apiextensions.k8s.io", "CustomResourceDefinition");
        let created = s
            .create(
                &crds,
                None,
                json!({"metadata": {"name": "combs.comb.internal"}, "spec": {
                    "group": "comb.internal", "scope": "Namespaced",
                    "names": {"kind": "Comb", "plural": "combs"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}),
            )
            .expect("created");
        assert_eq!(meta::finalizers(&created), [crd::CLEANUP_FINALIZER]);
        let stored = s.get(&crds, None, "combs.comb.internal").expect("stored");
        assert!(crd::is_established(&stored));
        let comb = s
            .resource_by_plural("comb.internal", "v1", "combs")
            .expect("served");
        assert!(comb.has_status());
        let object = s
            .create(
                &comb,
                Some("default"),
                json!({"metadata": {"name": "a"}, "spec": {"x": 1}}),
            )
            .expect("custom object");
        assert_eq!(object["apiVersion"], "comb.internal/v1");
        assert_eq!(object["metadata"]["generation"], 1);
    }
}
