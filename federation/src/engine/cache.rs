//! Reads answered from the watches the controller already holds (issue 12): the objects Combs
//! manage and their Pods, one store per kind per kube context, fed by the controller's watches
//! and read by [`KubeOps`](crate::engine::kube_ops::KubeOps) in place of a list or get.
//!
//! A store answers only what a watch covers: a kind whose watch has listed the namespace asked
//! for (or all namespaces), and only objects carrying the Comb name label (what the watch
//! selects). Anything else is `None`, and the caller asks the API server, as `comb run --once`
//! and the CLI always do (they have no cache).
//!
//! Read-your-writes: a step's own write (its stored object, or a delete) is kept beside the
//! store until the watch delivers that very version. A resourceVersion is opaque (the API
//! promises no order), so "later" is the watch's order, as for the Comb CRs
//! (`controller::triggers::Versions`): versions the watch delivers before ours are older, and
//! ours is dropped once the watch brings it, or after [`KEPT`] versions of the object without
//! it (the watch passed it unseen), or when a list replaces the store.
//!
//! A copy that does not come back from its packed form is never read as an empty one: it is
//! reported ([`UndecodableCopies`]: counted, logged once with its kind, namespace and name) and
//! the read goes to the API server.
//!
//! What is kept is slimmed to what a step reads ([`slim`]): `managedFields` as a hash per
//! manager (whether comb's applied fields still stand, without the sets), no last-applied
//! annotation, no `data` of Secrets and ConfigMaps (secret values stay out of the
//! controller's memory), no Pod `spec` and no Pod template `spec` of workloads (the live status
//! reads their status, replicas and strategies; changes are told by the applied digest). A
//! read that needs more asks the API server.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use comb_api::ManagedObject;

use super::pack::{Dictionary, UndecodableCopies};
use crate::error::{Error, Result};
use serde::Serialize;
use serde_json::Value;

/// How many versions of one object the watch may deliver before our write's version before
/// the write counts as passed unseen; also how many recent deliveries per kind are remembered
/// to tell a write the watch already brought (times the kind's objects, bounded below).
pub const KEPT: usize = 8;

/// Recent deliveries remembered per kind, at least.
const RECENT_MIN: usize = 1024;

/// `(namespace, name)`; the namespace is empty for a cluster-scoped object.
type ObjectKey = (String, String);

/// One kind's objects in one kube context.
#[derive(Debug, Default)]
struct KindStore {
    /// Scopes whose watch has listed: `None` is all namespaces.
    synced: HashSet<Option<String>>,
    objects: HashMap<ObjectKey, Stored>,
    /// `namespace/Comb name label` -> object names (sorted), for the step's selectors. A
    /// sorted `Vec` rather than a set: most Combs have one or two objects of a kind, and a
    /// B-tree node is ~300 bytes however few it holds.
    by_comb: HashMap<Box<str>, Vec<Box<str>>>,
    /// Our own writes the watch has not delivered yet.
    overlays: HashMap<ObjectKey, Overlay>,
    /// The latest deliveries ([`delivery_id`]), oldest first, and the same as a set.
    recent: VecDeque<u64>,
    recent_set: HashSet<u64>,
    /// Lists in progress per scope: what they brought so far.
    listing: HashMap<Option<String>, HashMap<ObjectKey, Stored>>,
    /// What this kind's copies are packed against.
    dictionary: Dictionary,
}

/// One delivery (an object's key and resourceVersion) as 8 bytes: the deliveries remembered
/// were the store's largest part as strings. Two deliveries hashing alike (odds of about one in
/// 2^64 per pair) would make a write count as delivered: its overlay is skipped and reads see
/// the watch's copy, which the next delivery replaces anyway.
fn delivery_id(key: &ObjectKey, version: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    version.hash(&mut hasher);
    hasher.finish()
}

/// The `by_comb` slot of a Comb's objects in `namespace`.
fn comb_slot(namespace: &str, comb: &str) -> String {
    format!("{namespace}/{comb}")
}

/// A watched object as the store keeps it: its slimmed JSON text packed against the kind's
/// dictionary ([`Dictionary`]), one allocation where a `serde_json::Value` makes one
/// per key and string and takes several times the bytes (the copies were most of the
/// controller's memory per Comb), and the Comb name label it is indexed by. A read unpacks and
/// parses it again: a step reads a handful of small objects, some microseconds each.
#[derive(Debug)]
struct Stored {
    comb: Option<Box<str>>,
    packed: Box<[u8]>,
}

#[derive(Debug)]
enum Overlay {
    Written {
        object: Stored,
        version: String,
        behind: usize,
    },
    Deleted {
        behind: usize,
    },
}

/// The watched objects of one kube context, by kind. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct ObjectCache {
    name_label: String,
    kinds: RwLock<HashMap<(String, String), Mutex<KindStore>>>,
    /// Per object ([`as_applied_key`]): the hash of comb's applied fields
    /// ([`applied_fields_hash`]) when comb last applied it or found it as rendered, and the
    /// applied digest it carried then. Forgotten when the object goes: comb's own delete, the
    /// watch's deletion, a list that no longer has it.
    as_applied: Mutex<HashMap<Box<str>, KeptAsApplied>>,
    /// The kube context the watches are of, for the reports of copies that do not decode.
    context: String,
    undecodable: Arc<UndecodableCopies>,
}

/// [`AsApplied`] as the cache keeps it, for every object comb applied.
#[derive(Debug)]
struct KeptAsApplied {
    digest: Box<str>,
    fields_hash: Box<str>,
}

/// One string for (apiVersion, kind, namespace, name), none of which holds a line break: four
/// strings per object were most of this map.
fn as_applied_key(api_version: &str, kind: &str, namespace: &str, name: &str) -> Box<str> {
    format!("{api_version}\n{kind}\n{namespace}\n{name}").into_boxed_str()
}

fn resource_as_applied_key(resource: &ManagedObject) -> Box<str> {
    as_applied_key(
        &resource.api_version,
        &resource.kind,
        resource.namespace.as_deref().unwrap_or_default(),
        &resource.name,
    )
}

/// What comb's fields and digest were when comb last knew an object stood as rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsApplied {
    pub digest: String,
    pub fields_hash: String,
}

fn key_of(object: &Value) -> Option<ObjectKey> {
    let name = object.pointer("/metadata/name")?.as_str()?;
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Some((namespace.to_string(), name.to_string()))
}

fn version_of(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(key))
        .and_then(Value::as_str)
}

/// The key a slimmed `managedFields` entry carries in place of its `fieldsV1`: a hash of it
/// ([`fields_hash`]), enough to tell that a manager's fields have not changed since comb saw
/// them (deploy's [`unchanged_since_apply`](crate::engine::deploy::unchanged_since_apply)).
pub const FIELDS_HASH: &str = "fieldsV1Hash";

/// A hash of a managed-fields set, for comparison within this process only (the server writes
/// a set in one order, so the same set hashes alike).
pub fn fields_hash(fields: &Value) -> String {
    let mut hasher = DefaultHasher::new();
    fields.to_string().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Whether `object` is a slimmed copy from a cache ([`slim`]): its managed fields are hashes,
/// and its Pod specs and Secret or ConfigMap data may be missing.
pub fn is_slim(object: &Value) -> bool {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| entries.iter().any(|entry| entry.get(FIELDS_HASH).is_some()))
}

/// The hash of what `manager` applied (its `Apply` entry, not of a subresource) of `object`,
/// slimmed or whole.
pub fn applied_fields_hash(object: &Value, manager: &str) -> Option<String> {
    let entry = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)?
        .iter()
        .find(|entry| {
            entry.get("manager").and_then(Value::as_str) == Some(manager)
                && entry.get("operation").and_then(Value::as_str) == Some("Apply")
                && entry
                    .get("subresource")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .is_empty()
        })?;
    match entry.get(FIELDS_HASH) {
        Some(hash) => hash.as_str().map(str::to_string),
        None => entry.get("fieldsV1").map(fields_hash),
    }
}

/// What the cache keeps of `object` of `kind`: managed fields as hashes ([`FIELDS_HASH`]), no
/// last-applied annotation, no Secret or ConfigMap data, no Pod spec, no Pod template spec of
/// a workload.
pub fn slim(kind: &str, mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(entries) = metadata
            .get_mut("managedFields")
            .and_then(Value::as_array_mut)
        {
            for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("time");
                let hash = entry
                    .remove("fieldsV1")
                    .map_or_else(String::new, |fields| fields_hash(&fields));
                entry.insert(FIELDS_HASH.to_string(), Value::String(hash));
            }
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    let template_spec = match kind {
        "Secret" | "ConfigMap" => {
            if let Some(fields) = object.as_object_mut() {
                for field in ["data", "stringData", "binaryData"] {
                    fields.remove(field);
                }
            }
            None
        }
        "Pod" => {
            if let Some(fields) = object.as_object_mut() {
                fields.remove("spec");
            }
            None
        }
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => Some("/spec/template"),
        "CronJob" => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    };
    if let Some(template) = template_spec
        .and_then(|pointer| object.pointer_mut(pointer))
        .and_then(Value::as_object_mut)
    {
        template.remove("spec");
    }
    object
}

/// `k=v,k=v` as pairs; `None` for anything else (set-based selectors are not answered here).
fn equalities(selector: &str) -> Option<Vec<(&str, &str)>> {
    selector
        .split(',')
        .map(str::trim)
        .filter(|term| !term.is_empty())
        .map(|term| {
            let (key, value) = term.split_once('=')?;
            let value = value.strip_prefix('=').unwrap_or(value);
            (!key.ends_with('!') && !key.is_empty()).then_some((key.trim(), value.trim()))
        })
        .collect()
}

fn matches(object: &Value, terms: &[(&str, &str)]) -> bool {
    terms
        .iter()
        .all(|(key, value)| label(object, key) == Some(*value))
}

impl KindStore {
    /// `object` as this store keeps it; the first object of the kind gives the dictionary.
    fn pack(&self, object: &Value, name_label: &str) -> Stored {
        Stored {
            comb: label(object, name_label).map(Box::from),
            packed: self.dictionary.pack(&object.to_string()),
        }
    }

    /// The object again (packed by this store from JSON it wrote, so it unpacks and parses
    /// unless something is broken, which the caller reports).
    fn unpack(&self, stored: &Stored) -> Result<Value> {
        self.dictionary.unpack_json(&stored.packed)
    }

    fn covers(&self, namespace: Option<&str>) -> bool {
        self.synced.contains(&None)
            || namespace.is_some_and(|namespace| self.synced.contains(&Some(namespace.to_string())))
    }

    fn index(&mut self, key: &ObjectKey, object: &Stored, add: bool) {
        let Some(comb) = object.comb.as_deref() else {
            return;
        };
        let slot = comb_slot(&key.0, comb);
        if add {
            let names = self.by_comb.entry(slot.into_boxed_str()).or_default();
            if let Err(place) = names.binary_search_by(|name| (**name).cmp(key.1.as_str())) {
                names.insert(place, Box::from(key.1.as_str()));
            }
        } else if let Some(names) = self.by_comb.get_mut(slot.as_str()) {
            if let Ok(place) = names.binary_search_by(|name| (**name).cmp(key.1.as_str())) {
                names.remove(place);
            }
            if names.is_empty() {
                self.by_comb.remove(slot.as_str());
            }
        }
    }

    fn put(&mut self, key: ObjectKey, object: Stored) {
        if let Some(old) = self.objects.remove(&key) {
            self.index(&key, &old, false);
        }
        self.index(&key, &object, true);
        self.objects.insert(key, object);
    }

    fn remove(&mut self, key: &ObjectKey) {
        if let Some(old) = self.objects.remove(key) {
            self.index(key, &old, false);
        }
    }

    /// Remembers a delivery, and settles an overlay waiting for it.
    fn delivered(&mut self, key: &ObjectKey, version: Option<&str>, deleted: bool) {
        if let Some(version) = version {
            let delivery = delivery_id(key, version);
            if self.recent_set.insert(delivery) {
                self.recent.push_back(delivery);
            }
            let bound = RECENT_MIN.max(self.objects.len() * 2);
            while self.recent.len() > bound {
                if let Some(old) = self.recent.pop_front() {
                    self.recent_set.remove(&old);
                }
            }
        }
        let done = match self.overlays.get_mut(key) {
            None => false,
            Some(Overlay::Written {
                version: ours,
                behind,
                ..
            }) => {
                *behind += 1;
                deleted || version == Some(ours.as_str()) || *behind >= KEPT
            }
            Some(Overlay::Deleted { behind }) => {
                *behind += 1;
                deleted || *behind >= KEPT
            }
        };
        if done {
            self.overlays.remove(key);
        }
    }

    /// The object `key` as a read should see it: ours while the watch has not brought it.
    fn view(&self, key: &ObjectKey) -> Option<&Stored> {
        match self.overlays.get(key) {
            Some(Overlay::Written { object, .. }) => Some(object),
            Some(Overlay::Deleted { .. }) => None,
            None => self.objects.get(key),
        }
    }
}

impl ObjectCache {
    /// An empty cache; `name_label` is the label carrying a Comb's name (what the watches select
    /// by, and the index of the step's selectors).
    pub fn new(name_label: impl Into<String>) -> ObjectCache {
        ObjectCache {
            name_label: name_label.into(),
            kinds: RwLock::new(HashMap::new()),
            as_applied: Mutex::new(HashMap::new()),
            context: String::new(),
            undecodable: Arc::new(UndecodableCopies::default()),
        }
    }

    /// The same cache, reporting a copy that does not decode to `undecodable` as one of kube
    /// context `context` (it is logged in any case, and the read goes to the API server).
    pub fn reporting_to(
        mut self,
        context: impl Into<String>,
        undecodable: Arc<UndecodableCopies>,
    ) -> ObjectCache {
        self.context = context.into();
        self.undecodable = undecodable;
        self
    }

    /// Reports a stored copy of `kind` that did not decode.
    fn report(&self, kind: &str, key: &ObjectKey, error: &Error) {
        self.undecodable
            .report(&self.context, kind, &key.0, &key.1, error);
    }

    /// Forgets what comb knew of `resource` as applied: the object is gone.
    fn forget_as_applied(&self, api_version: &str, kind: &str, key: &ObjectKey) {
        self.as_applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&as_applied_key(api_version, kind, &key.0, &key.1));
    }

    fn with_kind<T>(
        &self,
        api_version: &str,
        kind: &str,
        f: impl FnOnce(&mut KindStore) -> T,
    ) -> Option<T> {
        let kinds = self.kinds.read().unwrap_or_else(PoisonError::into_inner);
        let store = kinds.get(&(api_version.to_string(), kind.to_string()))?;
        let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
        Some(f(&mut store))
    }

    fn with_kind_or_new<T>(
        &self,
        api_version: &str,
        kind: &str,
        f: impl FnOnce(&mut KindStore) -> T,
    ) -> T {
        let key = (api_version.to_string(), kind.to_string());
        {
            let kinds = self.kinds.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(store) = kinds.get(&key) {
                return f(&mut store.lock().unwrap_or_else(PoisonError::into_inner));
            }
        }
        let mut kinds = self.kinds.write().unwrap_or_else(PoisonError::into_inner);
        let store = kinds.entry(key).or_default();
        f(store.get_mut().unwrap_or_else(PoisonError::into_inner))
    }

    /// A watch of `kind` in `scope` (a namespace, or all) starts listing.
    pub fn list_started(&self, api_version: &str, kind: &str, scope: Option<&str>) {
        self.with_kind_or_new(api_version, kind, |store| {
            store
                .listing
                .insert(scope.map(str::to_string), HashMap::new());
        });
    }

    /// The watch of `kind` in `scope` ended (its layer was stopped or handed to another
    /// replica, or the kind is not served): the scope is no longer answered from here, since
    /// nothing keeps it current; a new watch lists it again.
    pub fn unwatched(&self, api_version: &str, kind: &str, scope: Option<&str>) {
        self.with_kind(api_version, kind, |store| {
            let scope = scope.map(str::to_string);
            store.synced.remove(&scope);
            store.listing.remove(&scope);
        });
    }

    /// An object the list of `scope` brought.
    pub fn listed(&self, api_version: &str, kind: &str, scope: Option<&str>, object: Value) {
        let Some(key) = key_of(&object) else { return };
        let object = slim(kind, object);
        self.with_kind_or_new(api_version, kind, |store| {
            let object = store.pack(&object, &self.name_label);
            if let Some(listing) = store.listing.get_mut(&scope.map(str::to_string)) {
                listing.insert(key, object);
            }
        });
    }

    /// The list of `scope` is complete: it replaces what the store held there (what it no
    /// longer has was deleted meanwhile), our own writes there included, and the scope is
    /// answered from now on.
    pub fn list_done(&self, api_version: &str, kind: &str, scope: Option<&str>) {
        self.with_kind_or_new(api_version, kind, |store| {
            let scope = scope.map(str::to_string);
            let listed = store.listing.remove(&scope).unwrap_or_default();
            let in_scope = |key: &ObjectKey| scope.as_ref().is_none_or(|ns| &key.0 == ns);
            let gone: Vec<ObjectKey> = store
                .objects
                .keys()
                .filter(|key| in_scope(key) && !listed.contains_key(*key))
                .cloned()
                .collect();
            for key in gone {
                store.remove(&key);
                self.forget_as_applied(api_version, kind, &key);
            }
            store.overlays.retain(|key, _| !in_scope(key));
            for (key, object) in listed {
                store.put(key, object);
            }
            store.synced.insert(scope);
        });
    }

    /// A watched change (added or modified).
    pub fn applied(&self, api_version: &str, kind: &str, object: Value) {
        let Some(key) = key_of(&object) else { return };
        let object = slim(kind, object);
        self.with_kind_or_new(api_version, kind, |store| {
            store.delivered(&key, version_of(&object), false);
            let object = store.pack(&object, &self.name_label);
            store.put(key, object);
        });
    }

    /// A watched deletion: the object, our write of it and what comb knew of it as applied go.
    pub fn deleted(&self, api_version: &str, kind: &str, object: &Value) {
        let Some(key) = key_of(object) else { return };
        self.with_kind_or_new(api_version, kind, |store| {
            store.delivered(&key, version_of(object), true);
            store.remove(&key);
        });
        self.forget_as_applied(api_version, kind, &key);
    }

    /// The objects of `kind` in `namespace` (all namespaces for `None`) matching the equality
    /// `selector`, ordered by namespace and name as the API server lists them; `None` when no
    /// listed watch covers them (or the selector is not of the `k=v,...` kind).
    pub fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: &str,
    ) -> Option<Vec<Value>> {
        let terms = equalities(selector)?;
        // The watch selects by the name label: without it in the selector, objects without the
        // label would be missed.
        let comb = terms
            .iter()
            .find(|(key, _)| *key == self.name_label)
            .map(|(_, value)| *value)?;
        self.with_kind(api_version, kind, |store| {
            if !store.covers(namespace) {
                return None;
            }
            let mut keys: BTreeSet<ObjectKey> = BTreeSet::new();
            match namespace {
                Some(namespace) => {
                    if let Some(names) = store.by_comb.get(comb_slot(namespace, comb).as_str()) {
                        keys.extend(
                            names
                                .iter()
                                .map(|name| (namespace.to_string(), name.to_string())),
                        );
                    }
                }
                None => keys.extend(
                    store
                        .by_comb
                        .iter()
                        .filter_map(|(slot, names)| {
                            let (namespace, label) = slot.split_once('/')?;
                            (label == comb).then_some((namespace, names))
                        })
                        .flat_map(|(namespace, names)| {
                            names
                                .iter()
                                .map(move |name| (namespace.to_string(), name.to_string()))
                        }),
                ),
            }
            keys.extend(
                store
                    .overlays
                    .keys()
                    .filter(|key| namespace.is_none_or(|ns| key.0 == ns))
                    .cloned(),
            );
            let mut objects = Vec::with_capacity(keys.len());
            let mut undecodable = Vec::new();
            for key in &keys {
                let Some(stored) = store.view(key) else {
                    continue;
                };
                match store.unpack(stored) {
                    Ok(object) if matches(&object, &terms) => objects.push(object),
                    Ok(_) => {}
                    Err(error) => undecodable.push((key, error)),
                }
            }
            // A list missing an object is no answer: the API server lists instead.
            if !undecodable.is_empty() {
                for (key, error) in undecodable {
                    self.report(kind, key, &error);
                }
                return None;
            }
            Some(objects)
        })
        .flatten()
    }

    /// The object `resource` names when a listed watch covers it and holds it; `None` means
    /// "ask the API server" (the watch sees only labelled objects, so a miss proves nothing).
    pub fn get(&self, resource: &ManagedObject) -> Option<Value> {
        let namespace = resource.namespace.as_deref();
        self.with_kind(&resource.api_version, &resource.kind, |store| {
            if !store.covers(namespace) {
                return None;
            }
            let key = (
                namespace.unwrap_or_default().to_string(),
                resource.name.clone(),
            );
            match store.unpack(store.view(&key)?) {
                Ok(object) => Some(object),
                Err(error) => {
                    // The API server answers instead.
                    self.report(&resource.kind, &key, &error);
                    None
                }
            }
        })
        .flatten()
    }

    /// Our own write stored `object`: reads see it until the watch brings this version.
    pub fn wrote(&self, object: &Value) {
        let (Some(key), Some(version), Some(api_version), Some(kind)) = (
            key_of(object),
            version_of(object),
            object.get("apiVersion").and_then(Value::as_str),
            object.get("kind").and_then(Value::as_str),
        ) else {
            return;
        };
        let delivery = delivery_id(&key, version);
        let version = version.to_string();
        let object = slim(kind, object.clone());
        self.with_kind(api_version, kind, |store| {
            // Not answered from here anyway; or the watch brought it already (the store is as
            // new or newer).
            if !store.covers(Some(key.0.as_str())) || store.recent_set.contains(&delivery) {
                return;
            }
            let object = store.pack(&object, &self.name_label);
            store.overlays.insert(
                key,
                Overlay::Written {
                    object,
                    version,
                    behind: 0,
                },
            );
        });
    }

    /// `object` (whole, as the server returned it) stands as comb rendered it with `digest`:
    /// comb just applied it, or found every field as rendered. Remembered until comb's fields
    /// change, so that a later step can tell from the watch's slimmed copy that nothing did.
    pub fn stands_as_applied(&self, object: &Value, manager: &str, digest: &str) {
        let (Some(key), Some(api_version), Some(kind), Some(fields_hash)) = (
            key_of(object),
            object.get("apiVersion").and_then(Value::as_str),
            object.get("kind").and_then(Value::as_str),
            applied_fields_hash(object, manager),
        ) else {
            return;
        };
        self.as_applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                as_applied_key(api_version, kind, &key.0, &key.1),
                KeptAsApplied {
                    digest: Box::from(digest),
                    fields_hash: fields_hash.into_boxed_str(),
                },
            );
    }

    /// What [`ObjectCache::stands_as_applied`] last remembered of `resource`.
    pub fn as_applied(&self, resource: &ManagedObject) -> Option<AsApplied> {
        self.as_applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&resource_as_applied_key(resource))
            .map(|kept| AsApplied {
                digest: kept.digest.to_string(),
                fields_hash: kept.fields_hash.to_string(),
            })
    }

    /// Our own delete of `resource` succeeded: reads no longer see it.
    pub fn removed(&self, resource: &ManagedObject) {
        let key = (
            resource.namespace.clone().unwrap_or_default(),
            resource.name.clone(),
        );
        self.as_applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&resource_as_applied_key(resource));
        self.with_kind(&resource.api_version, &resource.kind, |store| {
            if store.objects.contains_key(&key) || store.overlays.contains_key(&key) {
                store.overlays.insert(key, Overlay::Deleted { behind: 0 });
            }
        });
    }
}

/// Where the reads of one step went: answered by the watches, or sent to the API server (and
/// which, by `<verb> <Kind>`): what `/debug/queue` shows for each Comb.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadSummary {
    /// Reads a watch answered.
    pub cached: u64,
    /// Reads sent to the API server because no watch covers them, by request.
    pub api: BTreeMap<String, u64>,
}

/// Counts the reads of one step (shared by the clones of its client).
#[derive(Debug, Default)]
pub struct ReadLog(Mutex<ReadSummary>);

impl ReadLog {
    pub fn cached(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).cached += 1;
    }

    pub fn api(&self, request: &str) {
        *self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .api
            .entry(request.to_string())
            .or_default() += 1;
    }

    pub fn summary(&self) -> ReadSummary {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const LABEL: &str = "comb.internal/comb";

    fn deployment(name: &str, comb: &str, version: &str, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "apps", "resourceVersion": version,
                         "labels": {LABEL: comb}, "managedFields": [{"manager": "x"}]},
            "spec": {"image": image},
        })
    }

    fn listed(cache: &ObjectCache, objects: &[Value]) {
        cache.list_started("apps/v1", "Deployment", Some("apps"));
        for object in objects {
            cache.listed("apps/v1", "Deployment", Some("apps"), object.clone());
        }
        cache.list_done("apps/v1", "Deployment", Some("apps"));
    }

    fn images(cache: &ObjectCache, comb: &str) -> Option<Vec<String>> {
        cache
            .list(
                "apps/v1",
                "Deployment",
                Some("apps"),
                &format!("{LABEL}={comb}"),
            )
            .map(|objects| {
                objects
                    .iter()
                    .map(|o| o["spec"]["image"].as_str().unwrap().to_string())
                    .collect()
            })
    }

    fn resource(name: &str) -> ManagedObject {
        ManagedObject {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("apps".into()),
            name: name.into(),
        }
    }

    /// A Deployment as the real API server returns it, slimmed, for comb's Comb `name`.
    fn full_deployment(name: &str, version: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": name, "namespace": "apps", "resourceVersion": version, "generation": 1,
                "uid": format!("a9c445c0-afb4-437f-93a0-{version:0>12}"),
                "creationTimestamp": "2026-12-01T21:34:27Z",
                "labels": {LABEL: name, "app.kubernetes.io/managed-by": "comb"},
                "annotations": {"comb.internal/applied-digest": format!("sha256:{version:0>64}"),
                                "deployment.kubernetes.io/revision": "1"}
            },
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}},
            "status": {"availableReplicas": 1, "readyReplicas": 1, "replicas": 1,
                       "updatedReplicas": 1, "observedGeneration": 1, "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                 "message": "Deployment has minimum availability.",
                 "lastTransitionTime": "2026-12-01T21:34:32Z"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                 "message": format!("ReplicaSet \"{name}-f6c87df9c\" has successfully progressed."),
                 "lastTransitionTime": "2026-12-01T21:34:27Z"}]}
        })
    }

    #[test]
    fn copies_come_back_whole_and_pack_small() {
        let cache = ObjectCache::new(LABEL);
        let objects: Vec<Value> = (0..50)
            .map(|index| full_deployment(&format!("web-{index}"), &(1000 + index).to_string()))
            .collect();
        listed(&cache, &objects);
        for object in &objects {
            let name = object["metadata"]["name"].as_str().unwrap();
            assert_eq!(cache.get(&resource(name)).as_ref(), Some(object));
            let selector = format!("{LABEL}={name}");
            assert_eq!(
                cache.list("apps/v1", "Deployment", None, &selector),
                None,
                "all namespaces were not listed"
            );
            assert_eq!(
                cache.list("apps/v1", "Deployment", Some("apps"), &selector),
                Some(vec![object.clone()])
            );
        }
        let text: usize = objects.iter().map(|object| object.to_string().len()).sum();
        let packed: usize = cache
            .with_kind("apps/v1", "Deployment", |store| {
                store
                    .objects
                    .values()
                    .map(|stored| stored.packed.len())
                    .sum()
            })
            .unwrap();
        // What differs between two Deployments of the kind is a fraction of their text.
        assert!(
            packed * 3 < text,
            "50 Deployments packed to {packed} bytes of {text}"
        );
    }

    #[test]
    fn answers_only_what_a_listed_watch_covers() {
        let cache = ObjectCache::new(LABEL);
        assert_eq!(images(&cache, "web"), None, "nothing watched yet");
        cache.list_started("apps/v1", "Deployment", Some("apps"));
        cache.listed(
            "apps/v1",
            "Deployment",
            Some("apps"),
            deployment("web", "web", "1", "a"),
        );
        assert_eq!(images(&cache, "web"), None, "still listing");
        cache.list_done("apps/v1", "Deployment", Some("apps"));
        assert_eq!(images(&cache, "web"), Some(vec!["a".into()]));
        assert_eq!(images(&cache, "db"), Some(vec![]));
        // Another namespace, another kind, a selector without the name label: not answered.
        assert_eq!(
            cache.list(
                "apps/v1",
                "Deployment",
                Some("other"),
                &format!("{LABEL}=web")
            ),
            None
        );
        assert_eq!(
            cache.list("v1", "Service", Some("apps"), &format!("{LABEL}=web")),
            None
        );
        assert_eq!(
            cache.list("apps/v1", "Deployment", Some("apps"), "app=web"),
            None
        );
        assert_eq!(
            cache.list(
                "apps/v1",
                "Deployment",
                Some("apps"),
                &format!("{LABEL}!=web")
            ),
            None
        );
        let stored = cache.get(&resource("web")).unwrap();
        // Managed fields are kept as one hash per manager, without the sets.
        assert!(
            stored["metadata"]["managedFields"]
                .as_array()
                .is_none_or(|entries| entries.iter().all(|entry| entry.get("fieldsV1").is_none()))
        );
        assert_eq!(cache.get(&resource("db")), None);
    }

    #[test]
    fn selectors_with_more_labels_filter() {
        let cache = ObjectCache::new(LABEL);
        let mut other = deployment("web-b", "web", "2", "b");
        other["metadata"]["labels"]["comb.internal/comb-namespace"] = json!("else");
        let mut own = deployment("web-a", "web", "1", "a");
        own["metadata"]["labels"]["comb.internal/comb-namespace"] = json!("apps");
        listed(&cache, &[other, own]);
        assert_eq!(images(&cache, "web"), Some(vec!["a".into(), "b".into()]));
        let both = cache
            .list(
                "apps/v1",
                "Deployment",
                Some("apps"),
                &format!("{LABEL}=web,comb.internal/comb-namespace=apps"),
            )
            .unwrap();
        assert_eq!(both.len(), 1);
        assert_eq!(both[0]["metadata"]["name"], "web-a");
    }

    #[test]
    fn our_write_wins_until_the_watch_brings_it() {
        let cache = ObjectCache::new(LABEL);
        listed(&cache, &[deployment("web", "web", "1", "a")]);
        cache.wrote(&deployment("web", "web", "5", "b"));
        assert_eq!(images(&cache, "web"), Some(vec!["b".into()]));
        // An older version the watch still had in flight changes nothing.
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "3", "a"));
        assert_eq!(images(&cache, "web"), Some(vec!["b".into()]));
        // Ours arrives, then a later one (a controller's status): the store answers.
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "5", "b"));
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "6", "c"));
        assert_eq!(images(&cache, "web"), Some(vec!["c".into()]));
    }

    #[test]
    fn a_write_the_watch_already_brought_hides_nothing_later() {
        let cache = ObjectCache::new(LABEL);
        listed(&cache, &[]);
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "5", "b"));
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "6", "c"));
        cache.wrote(&deployment("web", "web", "5", "b"));
        assert_eq!(images(&cache, "web"), Some(vec!["c".into()]));
    }

    #[test]
    fn a_created_object_is_seen_before_its_event() {
        let cache = ObjectCache::new(LABEL);
        listed(&cache, &[]);
        cache.wrote(&deployment("web", "web", "2", "a"));
        assert_eq!(images(&cache, "web"), Some(vec!["a".into()]));
        assert!(cache.get(&resource("web")).is_some());
    }

    #[test]
    fn an_unseen_write_gives_way_after_some_versions() {
        let cache = ObjectCache::new(LABEL);
        listed(&cache, &[deployment("web", "web", "1", "a")]);
        cache.wrote(&deployment("web", "web", "x", "ours"));
        for version in 0..KEPT {
            assert_eq!(images(&cache, "web"), Some(vec!["ours".into()]));
            cache.applied(
                "apps/v1",
                "Deployment",
                deployment("web", "web", &format!("v{version}"), "theirs"),
            );
        }
        assert_eq!(images(&cache, "web"), Some(vec!["theirs".into()]));
    }

    #[test]
    fn our_delete_hides_the_object_until_the_watch_deletes_it() {
        let cache = ObjectCache::new(LABEL);
        let web = deployment("web", "web", "1", "a");
        listed(&cache, std::slice::from_ref(&web));
        cache.removed(&resource("web"));
        assert_eq!(images(&cache, "web"), Some(vec![]));
        assert_eq!(cache.get(&resource("web")), None);
        cache.deleted("apps/v1", "Deployment", &web);
        assert_eq!(images(&cache, "web"), Some(vec![]));
        // Created again by someone: seen.
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "9", "z"));
        assert_eq!(images(&cache, "web"), Some(vec!["z".into()]));
    }

    #[test]
    fn a_list_replaces_the_scope() {
        let cache = ObjectCache::new(LABEL);
        listed(
            &cache,
            &[
                deployment("web", "web", "1", "a"),
                deployment("old", "web", "1", "o"),
            ],
        );
        cache.wrote(&deployment("web", "web", "7", "ours"));
        // The watch fell behind and listed again: the list is the server's state.
        listed(&cache, &[deployment("web", "web", "8", "listed")]);
        assert_eq!(images(&cache, "web"), Some(vec!["listed".into()]));
        assert_eq!(cache.get(&resource("old")), None);
    }

    /// A Deployment comb applied, as the server returns it (with comb's managed fields).
    fn applied_by_comb(name: &str, version: &str) -> Value {
        let mut object = deployment(name, name, version, "a");
        object["metadata"]["managedFields"] = json!([{"manager": "comb", "operation": "Apply",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:image": {}}}}]);
        object
    }

    fn as_applied_entries(cache: &ObjectCache) -> usize {
        cache.as_applied.lock().unwrap().len()
    }

    #[test]
    fn what_comb_knew_as_applied_goes_with_the_object() {
        let cache = ObjectCache::new(LABEL);
        let objects = ["web", "db", "mq"].map(|name| applied_by_comb(name, "1"));
        listed(&cache, &objects);
        for object in &objects {
            cache.stands_as_applied(object, "comb", "sha256:d");
        }
        assert_eq!(as_applied_entries(&cache), 3);
        assert!(cache.as_applied(&resource("web")).is_some());
        // Someone else deletes web: the watch says so.
        cache.deleted("apps/v1", "Deployment", &objects[0]);
        assert_eq!(cache.as_applied(&resource("web")), None);
        assert_eq!(as_applied_entries(&cache), 2);
        // db went while the watch was down: the list after it no longer has it.
        listed(&cache, &objects[2..]);
        assert_eq!(cache.as_applied(&resource("db")), None);
        assert_eq!(as_applied_entries(&cache), 1);
        assert!(cache.as_applied(&resource("mq")).is_some());
        // comb's own delete.
        cache.removed(&resource("mq"));
        assert_eq!(as_applied_entries(&cache), 0);
    }

    #[derive(Default)]
    struct Counted(Mutex<Vec<(String, String)>>);

    impl super::super::pack::CountUndecodable for Counted {
        fn undecodable(&self, context: &str, kind: &str) {
            self.0.lock().unwrap().push((context.into(), kind.into()));
        }
    }

    #[test]
    fn a_copy_that_does_not_decode_is_reported_and_never_read_as_empty() {
        let counted = Arc::new(Counted::default());
        let cache = ObjectCache::new(LABEL).reporting_to(
            "prod",
            Arc::new(UndecodableCopies::counted_by(counted.clone())),
        );
        listed(
            &cache,
            &[
                deployment("web", "web", "1", "a"),
                deployment("web-b", "web", "1", "b"),
            ],
        );
        cache.with_kind("apps/v1", "Deployment", |store| {
            let key = ("apps".to_string(), "web".to_string());
            if let Some(stored) = store.objects.get_mut(&key) {
                stored.packed = Box::from(&b"\x05\0\0\0broken"[..]);
            }
        });
        // Neither a null object nor a list without it: the API server is asked instead.
        assert_eq!(cache.get(&resource("web")), None);
        assert_eq!(images(&cache, "web"), None);
        assert!(cache.get(&resource("web-b")).is_some());
        assert_eq!(
            *counted.0.lock().unwrap(),
            [
                ("prod".to_string(), "Deployment".to_string()),
                ("prod".to_string(), "Deployment".to_string())
            ]
        );
        // The watch brings the object again: answered again.
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "2", "c"));
        assert_eq!(images(&cache, "web"), Some(vec!["c".into(), "b".into()]));
    }

    #[test]
    fn secrets_and_config_maps_are_kept_without_data() {
        let secret = json!({"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="},
                            "stringData": {"k": "v"}});
        assert_eq!(
            slim("Secret", secret),
            json!({"kind": "Secret", "metadata": {"name": "s"}})
        );
        let map = json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"},
                         "binaryData": {}});
        assert_eq!(
            slim("ConfigMap", map),
            json!({"kind": "ConfigMap", "metadata": {"name": "c"}})
        );
        let pod = json!({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1},
                         "status": {"phase": "Running"}});
        assert_eq!(
            slim("Pod", pod),
            json!({"kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Running"}})
        );
        let deployment = json!({"kind": "Deployment",
            "metadata": {"name": "d", "annotations": {"a": "1",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
            "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"r": "1"}},
                                                 "spec": {"containers": []}}},
            "status": {"readyReplicas": 2}});
        assert_eq!(
            slim("Deployment", deployment),
            json!({"kind": "Deployment", "metadata": {"name": "d", "annotations": {"a": "1"}},
                   "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"r": "1"}}}},
                   "status": {"readyReplicas": 2}})
        );
        let cron = json!({"kind": "CronJob", "spec": {"suspend": true, "jobTemplate": {"spec":
            {"template": {"metadata": {}, "spec": {"containers": []}}}}}});
        assert_eq!(
            slim("CronJob", cron),
            json!({"kind": "CronJob", "spec": {"suspend": true, "jobTemplate": {"spec":
                {"template": {"metadata": {}}}}}})
        );
    }

    #[test]
    fn equality_selectors() {
        assert_eq!(equalities("a=1,b==2"), Some(vec![("a", "1"), ("b", "2")]));
        assert_eq!(equalities("a!=1"), None);
        assert_eq!(equalities("a in (1)"), None);
        assert_eq!(equalities("a"), None);
        assert_eq!(equalities(""), Some(vec![]));
    }

    #[test]
    fn the_read_log_counts_by_source() {
        let log = ReadLog::default();
        log.cached();
        log.cached();
        log.api("list Pod");
        assert_eq!(
            log.summary(),
            ReadSummary {
                cached: 2,
                api: BTreeMap::from([("list Pod".to_string(), 1)]),
            }
        );
    }
}
