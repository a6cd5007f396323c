//! One cluster's object store: the etcd and registry layer of kube-apiserver.
//!
//! Every change takes the next resourceVersion of the cluster, is kept in a bounded history
//! (for watch resume and consistent paging) and is broadcast to subscribers in order. Methods
//! are synchronous and never await while holding the lock; the HTTP layer, the garbage
//! collector and the simulated controllers all write through them.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine;
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::api_error::{ApiError, FieldError};
use crate::crd;
use crate::meta;
use crate::resources::{Registry, ResourceType, crd_resource_types};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::service_addresses::Allocator;
use crate::strategy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change of one object.
#[derive(Debug, Clone)]
pub struct StoreEvent {
    pub event_type: EventType,
    /// The resource type in its storage version.
    pub resource: ResourceType,
    /// The object after the change (for `Deleted`, its last state at the deletion's version).
    pub object: Value,
    /// The object before the change (`None` for `Added`).
    pub old_object: Option<Value>,
    pub resource_version: u64,
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
    pub items: Vec<Value>,
    pub resource_version: String,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<u64>,
}

/// What a watch starts from: synthetic ADDED objects (no resourceVersion given) or the kept
/// history after the given resourceVersion, then live events.
pub struct WatchStart {
    pub initial: Vec<Value>,
    pub backlog: Vec<StoreEvent>,
    pub receiver: broadcast::Receiver<StoreEvent>,
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

struct State {
    resource_version: u64,
    objects: HashMap<String, BTreeMap<ObjectKey, Value>>,
    by_uid: HashMap<String, Location>,
    dependents: HashMap<String, BTreeSet<Location>>,
    history: VecDeque<StoreEvent>,
    /// Events after this resourceVersion are all in `history`.
    compacted: u64,
    registry: Registry,
    sender: broadcast::Sender<StoreEvent>,
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

/// `prefix` and five random characters of kube's `rand.String` alphabet (no vowels, no
/// confusable digits), as generateName and the token volume get them.
pub(crate) fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// The namespace of a request must agree with the object's, which it fills in when absent.
fn settle_namespace(
    rt: &ResourceType,
    namespace: Option<&str>,
    object: &mut Value,
) -> Result<(), ApiError> {
    if rt.namespaced {
        let Some(ns) = namespace.filter(|n| !n.is_empty()) else {
            return Err(ApiError::bad_request(
                "the server could not find the requested resource (namespace required)",
            ));
        };
        match meta::namespace(object) {
            Some(body) if !body.is_empty() && body != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => meta::set_metadata_field(object, "namespace", Some(json!(ns))),
        }
    } else {
        meta::set_metadata_field(object, "namespace", None);
    }
    Ok(())
}

fn is_service(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.kind == "Service"
}

fn require_object(object: &Value) -> Result<(), ApiError> {
    if !object.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    if !object["metadata"].is_object() && !object["metadata"].is_null() {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    Ok(())
}

fn set_type_meta(rt: &ResourceType, object: &mut Value) {
    let api_version = if rt.group.is_empty() {
        rt.storage_version.clone()
    } else {
        format!("{}/{}", rt.group, rt.storage_version)
    };
    if let Some(map) = object.as_object_mut() {
        // Keep apiVersion and kind first, as kube-apiserver prints them.
        let rest: Vec<(String, Value)> = std::mem::take(map)
            .into_iter()
            .filter(|(k, _)| k != "apiVersion" && k != "kind")
            .collect();
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(rt.kind));
        map.extend(rest);
        if !map.get("metadata").is_some_and(Value::is_object) {
            map.insert("metadata".into(), json!({}));
        }
    }
}

/// A built-in object as its typed form keeps it (unknown fields dropped); a body that does
/// not decode is a 400 like kube-apiserver's.
fn decode_typed(rt: &ResourceType, object: Value) -> Result<Value, ApiError> {
    match crate::typed::decode(rt, &object) {
        None => Ok(object),
        Some(Ok(decoded)) => Ok(decoded),
        Some(Err(error)) => Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {error}",
            kind = rt.kind,
            version = rt.version,
        ))),
    }
}

/// The object without its resourceVersion, to detect no-op updates.
fn comparable(object: &Value) -> Value {
    let mut copy = object.clone();
    meta::set_metadata_field(&mut copy, "resourceVersion", None);
    copy
}

impl State {
    fn location(rt: &ResourceType, ns: &str, name: &str) -> Location {
        (rt.storage_key(), ns.to_string(), name.to_string())
    }

    fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&rt.storage_key())
            .and_then(|objects| objects.get(&(ns.to_string(), name.to_string())))
    }

    fn next_rv(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn emit(&mut self, event: StoreEvent) {
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
    }

    /// Stores an object (new or replacing) at a fresh resourceVersion and emits the event.
    fn put(&mut self, rt: &ResourceType, mut object: Value) -> Value {
        let rv = self.next_rv();
        meta::set_metadata_field(&mut object, "resourceVersion", Some(json!(rv.to_string())));
        let ns = meta::namespace(&object).unwrap_or_default().to_string();
        let name = meta::name(&object).to_string();
        let location = Self::location(rt, &ns, &name);
        let old = self
            .objects
            .entry(rt.storage_key())
            .or_default()
            .insert((ns, name), object.clone());
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
        self.emit(StoreEvent {
            event_type,
            resource: rt.clone(),
            object: object.clone(),
            old_object: old,
            resource_version: rv,
        });
        object
    }

    /// Removes an object at a fresh resourceVersion and emits the event.
    fn remove(&mut self, rt: &ResourceType, ns: &str, name: &str) -> Option<Value> {
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
        let mut last = old.clone();
        meta::set_metadata_field(&mut last, "resourceVersion", Some(json!(rv.to_string())));
        self.emit(StoreEvent {
            event_type: EventType::Deleted,
            resource: rt.clone(),
            object: last.clone(),
            old_object: Some(old),
            resource_version: rv,
        });
        Some(last)
    }

    fn crd_of(&self, rt: &ResourceType) -> Option<&Value> {
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
        let mut updated = crd_object.clone();
        updated["status"] = crd::served_status(crd_object, conflict.as_deref());
        if meta::is_deleting(crd_object) {
            crd::set_terminating(&mut updated);
        }
        if comparable(&updated) != comparable(crd_object) {
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

    /// The cluster's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// Every change from now on, in resourceVersion order.
    pub fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.lock().sender.subscribe()
    }

    pub fn create(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.create_with(rt, namespace, object, &WriteOptions::default())
    }

    pub fn create_with(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        Self::create_locked(&mut self.lock(), rt, namespace, object, options)
    }

    fn create_locked(
        state: &mut State,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        require_object(&object)?;
        set_type_meta(rt, &mut object);
        settle_namespace(rt, namespace, &mut object)?;
        if !meta::resource_version(&object).is_empty() {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let metadata = &object["metadata"];
        if metadata["name"].as_str().is_none_or(str::is_empty)
            && let Some(prefix) = metadata["generateName"].as_str().filter(|p| !p.is_empty())
        {
            let name = generated_name(prefix);
            meta::set_metadata_field(&mut object, "name", Some(json!(name)));
        }
        let ns = namespace_key(rt, namespace);
        let name = meta::name(&object).to_string();
        if rt.is_custom()
            && let Some(crd) = state.crd_of(rt)
            && meta::is_deleting(crd)
        {
            return Err(ApiError::method_not_allowed(
                "create not allowed while custom resource definition is terminating",
            ));
        }
        state.check_namespace(rt, &ns, &name)?;
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta::set_metadata_field(&mut object, field, None);
        }
        meta::set_metadata_field(
            &mut object,
            "uid",
            Some(json!(uuid::Uuid::new_v4().to_string())),
        );
        meta::set_metadata_field(&mut object, "creationTimestamp", Some(json!(meta::now())));
        let generation = rt.tracks_generation().then(|| json!(1));
        meta::set_metadata_field(&mut object, "generation", generation);
        strategy::decode_defaults(rt, &mut object);
        // The field manager sees the decoded, defaulted object: not what admission, the
        // strategy and the address allocator add after it.
        let mut tracked = decode_typed(rt, object.clone())?;
        strategy::prepare_for_create(rt, &mut object);
        Self::allocate_service_addresses(state, rt, None, &mut object)?;
        let mut object = decode_typed(rt, object)?;
        let errors = strategy::validate(rt, &object, None);
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, &name, &errors));
        }
        if state.get(rt, &ns, &name).is_some() {
            return Err(ApiError::already_exists(rt, &name));
        }
        if let Some(manager) = &options.field_manager {
            crate::managed::record_update(None, &mut tracked, manager, rt, Subresource::Main);
            let fields = tracked["metadata"].get("managedFields").cloned();
            meta::set_metadata_field(&mut object, "managedFields", fields);
        }
        if options.dry_run {
            return Ok(object);
        }
        let stored = state.put(rt, object);
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            state.establish_crd(rt, &stored);
        }
        Ok(stored)
    }

    pub fn get(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let state = self.lock();
        state
            .get(rt, &namespace_key(rt, namespace), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// The objects of a type in a namespace (all namespaces with `None`), sorted by
    /// namespace and name, with the list's resourceVersion.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<(Vec<Value>, String), ApiError> {
        let options = ListOptions {
            label_selector: label_selector.map(LabelSelector::parse).transpose()?,
            field_selector: field_selector
                .map(|f| FieldSelector::parse(f, rt))
                .transpose()?,
            limit: None,
            continue_token: None,
        };
        let page = self.list_page(rt, namespace, &options)?;
        Ok((page.items, page.resource_version))
    }

    /// One page of a list; pages after the first are a consistent snapshot at the first
    /// page's resourceVersion while the history still holds it (410 Expired after that).
    pub fn list_page(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<ListPage, ApiError> {
        let state = self.lock();
        let (at, start) = match &options.continue_token {
            Some(token) => {
                let (rv, start) = decode_continue(token)?;
                if rv < state.compacted {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                    ));
                }
                (rv, Some(start))
            }
            None => (state.resource_version, None),
        };
        let key = rt.storage_key();
        let in_scope = |object_key: &ObjectKey| match namespace.filter(|_| rt.namespaced) {
            Some(ns) => object_key.0 == ns,
            None => true,
        };
        let selected = |object: &Value| {
            options
                .label_selector
                .as_ref()
                .is_none_or(|s| s.matches(object))
                && options
                    .field_selector
                    .as_ref()
                    .is_none_or(|s| s.matches(object))
        };
        let changed_since = state
            .history
            .iter()
            .rev()
            .take_while(|e| e.resource_version > at)
            .any(|e| e.resource.storage_key() == key);
        let snapshot: BTreeMap<ObjectKey, Value> = if changed_since {
            let mut objects: BTreeMap<ObjectKey, Value> = state
                .objects
                .get(&key)
                .map(|o| {
                    o.iter()
                        .filter(|(k, _)| in_scope(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            for event in state
                .history
                .iter()
                .rev()
                .take_while(|e| e.resource_version > at)
            {
                if event.resource.storage_key() != key {
                    continue;
                }
                let object_key = (
                    meta::namespace(&event.object)
                        .unwrap_or_default()
                        .to_string(),
                    meta::name(&event.object).to_string(),
                );
                if !in_scope(&object_key) {
                    continue;
                }
                match (&event.event_type, &event.old_object) {
                    (EventType::Added, _) => {
                        objects.remove(&object_key);
                    }
                    (_, Some(old)) => {
                        objects.insert(object_key, old.clone());
                    }
                    (_, None) => {}
                }
            }
            objects
        } else {
            BTreeMap::new()
        };
        let current = state.objects.get(&key);
        let source: Box<dyn Iterator<Item = (&ObjectKey, &Value)>> = if changed_since {
            Box::new(snapshot.iter())
        } else {
            match current {
                Some(objects) => Box::new(objects.iter()),
                None => Box::new(std::iter::empty()),
            }
        };
        let limit = options.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut last_key = None;
        let mut remaining: u64 = 0;
        for (object_key, object) in source {
            if !in_scope(object_key) {
                continue;
            }
            if let Some(start) = &start
                && object_key <= start
            {
                continue;
            }
            if !selected(object) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                remaining += 1;
                continue;
            }
            items.push(object.clone());
            last_key = Some(object_key.clone());
        }
        let (continue_token, remaining_item_count) = match (remaining, last_key) {
            (0, _) | (_, None) => (None, None),
            (n, Some(last)) => {
                let unselective = options
                    .label_selector
                    .as_ref()
                    .is_none_or(LabelSelector::is_empty)
                    && options
                        .field_selector
                        .as_ref()
                        .is_none_or(FieldSelector::is_empty);
                (Some(encode_continue(at, &last)), unselective.then_some(n))
            }
        };
        Ok(ListPage {
            items,
            resource_version: at.to_string(),
            continue_token,
            remaining_item_count,
        })
    }

    /// Starts a watch: with `from` the kept events after that resourceVersion (410 Expired
    /// when older than the history), without it the current objects as initial ADDED events.
    pub fn watch(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let state = self.lock();
        let receiver = state.sender.subscribe();
        match from {
            Some(rv) => {
                if rv < state.compacted {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        state.compacted + 1
                    )));
                }
                let backlog = state
                    .history
                    .iter()
                    .filter(|e| e.resource_version > rv)
                    .cloned()
                    .collect();
                Ok(WatchStart {
                    initial: Vec::new(),
                    backlog,
                    receiver,
                    resource_version: state.resource_version,
                })
            }
            None => {
                let initial = state
                    .objects
                    .get(&rt.storage_key())
                    .map(|objects| {
                        objects
                            .iter()
                            .filter(|(k, _)| match namespace.filter(|_| rt.namespaced) {
                                Some(ns) => k.0 == ns,
                                None => true,
                            })
                            .map(|(_, v)| v.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(WatchStart {
                    initial,
                    backlog: Vec::new(),
                    receiver,
                    resource_version: state.resource_version,
                })
            }
        }
    }

    /// Replaces the main resource; `status` is kept from the stored object when the type has
    /// a status subresource.
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.update_with(rt, namespace, object, &WriteOptions::default())
    }

    pub fn update_with(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        Self::update_locked(
            &mut self.lock(),
            rt,
            namespace,
            object,
            Subresource::Main,
            options,
        )
    }

    /// Writes only `status` (the status subresource).
    pub fn update_status(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.update_status_with(rt, namespace, object, &WriteOptions::default())
    }

    pub fn update_status_with(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        Self::update_locked(
            &mut self.lock(),
            rt,
            namespace,
            object,
            Subresource::Status,
            options,
        )
    }

    /// Read-modify-write of one object under the store's lock: never a conflict.
    pub fn modify(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        subresource: Subresource,
        change: impl FnOnce(&mut Value),
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let mut object = state
            .get(rt, &namespace_key(rt, namespace), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        change(&mut object);
        Self::update_locked(
            &mut state,
            rt,
            namespace,
            object,
            subresource,
            &WriteOptions::default(),
        )
    }

    /// Read-modify-write whose change may fail (patches), with write options.
    pub fn try_modify(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        subresource: Subresource,
        options: &WriteOptions,
        change: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let current = state
            .get(rt, &namespace_key(rt, namespace), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let changed = change(&current)?;
        if meta::name(&changed) != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta::name(&changed)
            )));
        }
        Self::update_locked(&mut state, rt, namespace, changed, subresource, options)
    }

    /// Read-modify-write that may also create (server-side apply): `change` gets the stored
    /// object if there is one and returns the object to write.
    pub fn upsert(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &WriteOptions,
        change: impl FnOnce(Option<&Value>) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let current = state.get(rt, &namespace_key(rt, namespace), name).cloned();
        let changed = change(current.as_ref())?;
        match current {
            Some(_) => Self::update_locked(
                &mut state,
                rt,
                namespace,
                changed,
                Subresource::Main,
                options,
            ),
            None => {
                // The manager's fields were recorded by `change` already.
                let mut create_options = options.clone();
                create_options.field_manager = None;
                Self::create_locked(&mut state, rt, namespace, changed, &create_options)
            }
        }
    }

    fn update_locked(
        state: &mut State,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        subresource: Subresource,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        require_object(&object)?;
        set_type_meta(rt, &mut object);
        settle_namespace(rt, namespace, &mut object)?;
        let ns = namespace_key(rt, namespace);
        let name = meta::name(&object).to_string();
        if name.is_empty() {
            return Err(ApiError::invalid(
                rt,
                "",
                &[FieldError::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            ));
        }
        let Some(old) = state.get(rt, &ns, &name).cloned() else {
            if rt.allows_create_on_update() && subresource == Subresource::Main {
                meta::set_metadata_field(&mut object, "resourceVersion", None);
                return Self::create_locked(state, rt, namespace, object, options);
            }
            return Err(ApiError::not_found(rt, &name));
        };
        let requested_rv = meta::resource_version(&object);
        if !requested_rv.is_empty() && requested_rv != meta::resource_version(&old) {
            return Err(ApiError::conflict(rt, &name));
        }
        // A UID in the body is a precondition: the object must not have been replaced.
        let requested_uid = meta::uid(&object);
        if !requested_uid.is_empty() && requested_uid != meta::uid(&old) {
            return Err(ApiError::conflict_because(
                rt,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {requested_uid}, UID in object meta: {}",
                    meta::uid(&old)
                ),
            ));
        }
        // What the field manager compares with the live object (see create_locked).
        let mut tracked = None;
        let next = match subresource {
            Subresource::Main => {
                strategy::decode_defaults(rt, &mut object);
                tracked = Some(decode_typed(rt, object.clone())?);
                strategy::prepare_for_update(rt, &old, &mut object);
                Self::allocate_service_addresses(state, rt, Some(&old), &mut object)?;
                object
            }
            Subresource::Status => {
                let mut next = old.clone();
                match object.get("status") {
                    Some(status) => next["status"] = status.clone(),
                    None => {
                        if let Some(map) = next.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
                crate::schema::default_and_prune(rt, &mut next);
                // A status apply brings its own managedFields entry.
                if let Some(fields) = object["metadata"]
                    .get("managedFields")
                    .filter(|f| f.is_array())
                {
                    meta::set_metadata_field(&mut next, "managedFields", Some(fields.clone()));
                }
                next
            }
        };
        let mut next = decode_typed(rt, next)?;
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            meta::set_metadata_field(&mut next, field, old["metadata"].get(field).cloned());
        }
        meta::set_metadata_field(&mut next, "selfLink", None);
        if next["metadata"]
            .get("managedFields")
            .is_none_or(Value::is_null)
        {
            meta::set_metadata_field(
                &mut next,
                "managedFields",
                old["metadata"].get("managedFields").cloned(),
            );
        }
        if meta::is_deleting(&old) {
            let before = meta::finalizers(&old);
            if meta::finalizers(&next).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    rt,
                    &name,
                    &[FieldError::forbidden(
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted",
                    )],
                ));
            }
        }
        if rt.tracks_generation() && strategy::generation_changed(rt, &old, &next) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta::set_metadata_field(&mut next, "generation", Some(json!(generation)));
        }
        let errors = strategy::validate(rt, &next, Some(&old));
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, &name, &errors));
        }
        meta::set_metadata_field(
            &mut next,
            "resourceVersion",
            Some(old["metadata"]["resourceVersion"].clone()),
        );
        if comparable(&next) == comparable(&old) {
            return Ok(old);
        }
        if let Some(manager) = &options.field_manager {
            let mut tracked = tracked.unwrap_or_else(|| next.clone());
            let fields = next["metadata"].get("managedFields").cloned();
            meta::set_metadata_field(&mut tracked, "managedFields", fields);
            crate::managed::record_update(Some(&old), &mut tracked, manager, rt, subresource);
            let fields = tracked["metadata"].get("managedFields").cloned();
            meta::set_metadata_field(&mut next, "managedFields", fields);
        }
        if options.dry_run {
            return Ok(next);
        }
        if meta::is_deleting(&next)
            && meta::finalizers(&next).is_empty()
            && !Self::holds_namespace_finalizer(rt, &next)
        {
            // Like kube-apiserver's deleteWithoutFinalizers: the update is not written, the
            // object goes, and the answer is the update at the version it replaced.
            state
                .remove(rt, &ns, &name)
                .ok_or_else(|| ApiError::not_found(rt, &name))?;
            return Ok(next);
        }
        let stored = state.put(rt, next);
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            state.establish_crd(rt, &stored);
        }
        Ok(stored)
    }

    /// kube-apiserver allocates a Service's cluster IP and node ports inside its create or
    /// update (before validation), so the response already carries them.
    fn allocate_service_addresses(
        state: &mut State,
        rt: &ResourceType,
        old: Option<&Value>,
        object: &mut Value,
    ) -> Result<(), ApiError> {
        if !is_service(rt) {
            return Ok(());
        }
        let errors = state.service_addresses.allocate(old, object);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(rt, meta::name(object), &errors))
        }
    }

    fn holds_namespace_finalizer(rt: &ResourceType, object: &Value) -> bool {
        rt.group.is_empty()
            && rt.kind == "Namespace"
            && object["spec"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
    }

    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        propagation: Propagation,
    ) -> Result<Value, ApiError> {
        let options = DeleteOptions {
            propagation: Some(propagation),
            ..DeleteOptions::default()
        };
        self.delete_with(rt, namespace, name, &options)
            .map(Deletion::into_object)
    }

    pub fn delete_with(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Deletion, ApiError> {
        Self::delete_locked(&mut self.lock(), rt, namespace, name, options)
    }

    fn delete_locked(
        state: &mut State,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Deletion, ApiError> {
        let ns = namespace_key(rt, namespace);
        let old = state
            .get(rt, &ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        if let Some(uid) = &options.precondition_uid
            && uid != meta::uid(&old)
        {
            return Err(ApiError::conflict_because(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::uid(&old)
                ),
            ));
        }
        if let Some(rv) = &options.precondition_resource_version
            && rv != meta::resource_version(&old)
        {
            return Err(ApiError::conflict_because(
                rt,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta::resource_version(&old)
                ),
            ));
        }
        let is_namespace = rt.group.is_empty() && rt.kind == "Namespace";
        if is_namespace && SYSTEM_NAMESPACES[..3].contains(&name) {
            return Err(ApiError::forbidden(
                rt,
                name,
                "this namespace may not be deleted",
            ));
        }
        let mut finalizers = meta::finalizers(&old);
        let wanted = match options.propagation.unwrap_or_default() {
            Propagation::Background => None,
            Propagation::Foreground => Some(FOREGROUND_FINALIZER),
            Propagation::Orphan => Some(ORPHAN_FINALIZER),
        };
        if meta::is_deleting(&old) {
            // A second delete may switch to orphaning or foreground, like the real registry.
            let Some(wanted) = wanted.filter(|w| !finalizers.iter().any(|f| f == w)) else {
                return Ok(Deletion::Pending(old));
            };
            finalizers.retain(|f| f != FOREGROUND_FINALIZER && f != ORPHAN_FINALIZER);
            finalizers.push(wanted.to_string());
            let mut next = old.clone();
            meta::set_finalizers(&mut next, &finalizers);
            if options.dry_run {
                return Ok(Deletion::Pending(next));
            }
            return Ok(Deletion::Pending(state.put(rt, next)));
        }
        if let Some(wanted) = wanted
            && !finalizers.iter().any(|f| f == wanted)
        {
            finalizers.push(wanted.to_string());
        }
        if finalizers.is_empty() && !Self::holds_namespace_finalizer(rt, &old) {
            if options.dry_run {
                return Ok(Deletion::Deleted(old));
            }
            let removed = state
                .remove(rt, &ns, name)
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
                state.registry.unregister_crd(name);
            }
            return Ok(Deletion::Deleted(removed));
        }
        let mut next = old.clone();
        meta::set_finalizers(&mut next, &finalizers);
        meta::set_metadata_field(&mut next, "deletionTimestamp", Some(json!(meta::now())));
        // The namespace registry's own delete sets no grace period; the generic one sets 0.
        if !is_namespace {
            meta::set_metadata_field(&mut next, "deletionGracePeriodSeconds", Some(json!(0)));
        }
        if rt.tracks_generation() {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta::set_metadata_field(&mut next, "generation", Some(json!(generation)));
        }
        if is_namespace {
            next["status"] = json!({"phase": "Terminating"});
        }
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            crd::set_terminating(&mut next);
        }
        if options.dry_run {
            return Ok(Deletion::Pending(next));
        }
        Ok(Deletion::Pending(state.put(rt, next)))
    }

    /// Deletes every object of a type in a namespace that the selectors match.
    pub fn delete_collection(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        list: &ListOptions,
        options: &DeleteOptions,
    ) -> Result<Vec<Value>, ApiError> {
        let mut state = self.lock();
        let ns = namespace.filter(|_| rt.namespaced);
        let targets: Vec<(String, String)> = state
            .objects
            .get(&rt.storage_key())
            .map(|objects| {
                objects
                    .iter()
                    .filter(|(k, _)| ns.is_none_or(|ns| k.0 == ns))
                    .filter(|(_, v)| {
                        list.label_selector.as_ref().is_none_or(|s| s.matches(v))
                            && list.field_selector.as_ref().is_none_or(|s| s.matches(v))
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut deleted = Vec::new();
        for (object_ns, name) in targets {
            let object_ns = (!object_ns.is_empty()).then_some(object_ns);
            match Self::delete_locked(&mut state, rt, object_ns.as_deref(), &name, options) {
                Ok(outcome) => deleted.push(outcome.into_object()),
                Err(error) if error.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        Ok(deleted)
    }

    /// The object with this UID and its resource type, if it exists.
    pub fn get_by_uid(&self, uid: &str) -> Option<(ResourceType, Value)> {
        let state = self.lock();
        let (key, ns, name) = state.by_uid.get(uid)?;
        let rt = state.registry.by_storage_key(key)?;
        let object = state
            .objects
            .get(key)?
            .get(&(ns.clone(), name.clone()))?
            .clone();
        Some((rt, object))
    }

    /// Objects whose ownerReferences name this UID.
    pub fn dependents_of(&self, uid: &str) -> Vec<(ResourceType, Value)> {
        let state = self.lock();
        let Some(locations) = state.dependents.get(uid) else {
            return Vec::new();
        };
        locations
            .iter()
            .filter_map(|(key, ns, name)| {
                let rt = state.registry.by_storage_key(key)?;
                let object = state
                    .objects
                    .get(key)?
                    .get(&(ns.clone(), name.clone()))?
                    .clone();
                Some((rt, object))
            })
            .collect()
    }

    /// Every stored object of every type (for the collectors' full resyncs).
    pub fn all_objects(&self) -> Vec<(ResourceType, Value)> {
        let state = self.lock();
        let mut all = Vec::new();
        for (key, objects) in &state.objects {
            if let Some(rt) = state.registry.by_storage_key(key) {
                all.extend(objects.values().map(|o| (rt.clone(), o.clone())));
            }
        }
        all
    }

    /// Objects of every namespaced type in one namespace.
    pub fn namespace_contents(&self, namespace: &str) -> Vec<(ResourceType, Value)> {
        let state = self.lock();
        let mut contents = Vec::new();
        for (key, objects) in &state.objects {
            let Some(rt) = state.registry.by_storage_key(key) else {
                continue;
            };
            if !rt.namespaced {
                continue;
            }
            contents.extend(
                objects
                    .iter()
                    .filter(|(k, _)| k.0 == namespace)
                    .map(|(_, v)| (rt.clone(), v.clone())),
            );
        }
        contents
    }

    /// The namespace controller's last step: drop `spec.finalizers` of a terminating, empty
    /// namespace, which removes it.
    pub fn finalize_namespace(&self, name: &str) -> Result<(), ApiError> {
        let mut state = self.lock();
        let namespaces = state
            .registry
            .by_kind("", "Namespace")
            .ok_or_else(|| ApiError::internal("namespaces are not served"))?;
        let Some(namespace) = state.get(&namespaces, "", name).cloned() else {
            return Ok(());
        };
        if !meta::is_deleting(&namespace) {
            return Ok(());
        }
        if meta::finalizers(&namespace).is_empty() {
            state.remove(&namespaces, "", name);
        } else {
            let mut next = namespace;
            next["spec"] = json!({});
            state.put(&namespaces, next);
        }
        Ok(())
    }

    /// The CRD controller's last step: forget the types of a CRD whose objects are gone and
    /// drop its cleanup finalizer.
    pub fn finalize_crd(&self, name: &str) -> Result<(), ApiError> {
        let mut state = self.lock();
        let crds = state
            .registry
            .by_kind("apiextensions.k8s.io", "CustomResourceDefinition")
            .ok_or_else(|| ApiError::internal("CRDs are not served"))?;
        let Some(crd_object) = state.get(&crds, "", name).cloned() else {
            return Ok(());
        };
        if !meta::is_deleting(&crd_object) {
            return Ok(());
        }
        if let Some(types) = state
            .registry
            .custom_types(name)
            .map(<[ResourceType]>::to_vec)
            && let Some(first) = types.first()
        {
            let key = first.storage_key();
            if state.objects.get(&key).is_some_and(|o| !o.is_empty()) {
                return Err(ApiError::conflict_because(
                    &crds,
                    name,
                    "custom resources remain",
                ));
            }
            state.objects.remove(&key);
        }
        state.registry.unregister_crd(name);
        let mut finalizers = meta::finalizers(&crd_object);
        finalizers.retain(|f| f != crd::CLEANUP_FINALIZER);
        if finalizers.is_empty() {
            state.remove(&crds, "", name);
        } else {
            let mut next = crd_object;
            meta::set_finalizers(&mut next, &finalizers);
            state.put(&crds, next);
        }
        Ok(())
    }

    /// The served types of a CRD (by its object name), while it is registered.
    pub fn crd_types(&self, crd_name: &str) -> Vec<ResourceType> {
        self.lock()
            .registry
            .custom_types(crd_name)
            .map(<[ResourceType]>::to_vec)
            .unwrap_or_default()
    }
}

/// Which part of an object an update writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

fn encode_continue(rv: u64, last: &ObjectKey) -> String {
    let token =
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{}/{}\u{0}", last.0, last.1)});
    base64::engine::general_purpose::STANDARD.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, ObjectKey), ApiError> {
    let invalid = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(token)
        .map_err(|_| invalid())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let rv = value["rv"].as_u64().ok_or_else(invalid)?;
    let start = value["start"].as_str().ok_or_else(invalid)?;
    let start = start.trim_end_matches('\u{0}');
    let (ns, name) = start.split_once('/').ok_or_else(invalid)?;
    Ok((rv, (ns.to_string(), name.to_string())))
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
        let names: Vec<&str> = second.items.iter().map(meta::name).collect();
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
