//! What comb knows of the objects of one kube context: the projections ([`Projection`]) of the
//! objects Combs manage and of their Pods, one store per kind, fed by the controller's watches
//! and read by [`KubeOps`](crate::engine::kube_ops::KubeOps) in place of a list or get (issue
//! 12); and what comb itself applied of each object ([`AsApplied`]).
//!
//! A store answers only what a watch covers: a kind whose watch has listed the namespace asked
//! for (or all namespaces), and only objects carrying the Comb name label (what the watch
//! selects). Anything else is `None`, and the caller asks the API server, as `comb run --once`
//! and the CLI always do (no watch feeds their stores; they keep only what comb applied).
//!
//! Each object is projected once, when the watch delivers it; reads hand out the projection.
//! An object that does not project (a field the steps read holds something no reading gives a
//! value to) is never read as an empty or default one: it is reported
//! ([`UnprojectableObjects`]: counted, logged once with its kind, namespace and name) and
//! reads of it go to the API server until the watch brings a version that projects.
//!
//! No read-your-writes for these objects: a step reads what the watch delivered. Applies carry
//! no resourceVersion, so a step that reads a copy older than its own last write applies the
//! same fields again or finds them unchanged, and the watch catches up within the step's
//! pacing; measured without it (ADR 0003), convergence and an edit wrote and read as many
//! requests as with it. (The Comb CRs keep theirs: `Shared::own_write`, whose status writes
//! carry a resourceVersion.)

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use comb_api::{LabelKeys, ManagedObject};
use serde::Serialize;
use serde_json::Value;

use crate::engine::projection::{CombSelector, Fingerprint, Projection, Unprojectable};

/// `(namespace, name)`; the namespace is empty for a cluster-scoped object.
type ObjectKey = (String, String);

/// One kind's objects in one kube context.
#[derive(Debug, Default)]
struct KindStore {
    /// Scopes whose watch has listed: `None` is all namespaces.
    synced: HashSet<Option<String>>,
    objects: HashMap<ObjectKey, Kept>,
    /// Namespace -> Comb name label -> object names (sorted), for the steps' selectors. A
    /// sorted `Vec` rather than a set: most Combs have one or two objects of a kind, and a
    /// B-tree node is ~300 bytes however few it holds.
    by_comb: HashMap<Box<str>, NamesByComb>,
    /// Lists in progress per scope: what they brought so far.
    listing: HashMap<Option<String>, HashMap<ObjectKey, Kept>>,
    /// What comb applied of each object ([`AsApplied`]), until the object goes.
    applied: HashMap<ObjectKey, AsApplied>,
}

/// The objects of one namespace by their Comb name label: object names, sorted.
type NamesByComb = HashMap<Box<str>, Vec<Box<str>>>;

/// A delivered object as the store keeps it.
#[derive(Debug)]
enum Kept {
    Projected(Projection),
    /// It does not project (reported when delivered): reads of it go to the API server. Its
    /// Comb name label keeps it in the index, so that a list of that Comb's objects is not
    /// answered without it.
    Unprojectable {
        comb: Option<Box<str>>,
    },
}

impl Kept {
    fn comb(&self) -> Option<&str> {
        match self {
            Kept::Projected(projection) => projection.comb.as_deref(),
            Kept::Unprojectable { comb } => comb.as_deref(),
        }
    }
}

/// What comb's fields and digest were when comb last knew an object stood as rendered: it
/// applied it, or read it whole and found every field as rendered. While the object carries
/// that digest and comb's applied fields are that very set, it still stands so (a field
/// another manager changed since is that manager's now, so comb's set is smaller), and
/// deploy writes nothing without asking the server (`deploy::unchanged_since_apply`): what
/// keeps a settled resync at no request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsApplied {
    pub digest: Fingerprint,
    pub fields: Fingerprint,
}

/// The objects comb knows of one kube context, by kind. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct ObjectCache {
    keys: LabelKeys,
    kinds: RwLock<HashMap<(String, String), Mutex<KindStore>>>,
    /// The kube context the watches are of, for the reports of objects that do not project.
    context: String,
    unprojectable: Arc<UnprojectableObjects>,
}

fn key_of(object: &Value) -> Option<ObjectKey> {
    let name = object.pointer("/metadata/name")?.as_str()?;
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Some((namespace.to_string(), name.to_string()))
}

fn key_of_resource(resource: &ManagedObject) -> ObjectKey {
    (
        resource.namespace.clone().unwrap_or_default(),
        resource.name.clone(),
    )
}

impl KindStore {
    fn covers(&self, namespace: Option<&str>) -> bool {
        self.synced.contains(&None)
            || namespace.is_some_and(|namespace| self.synced.contains(&Some(namespace.to_string())))
    }

    fn index(&mut self, key: &ObjectKey, object: &Kept, add: bool) {
        let Some(comb) = object.comb() else {
            return;
        };
        if add {
            let names = self
                .by_comb
                .entry(Box::from(key.0.as_str()))
                .or_default()
                .entry(Box::from(comb))
                .or_default();
            if let Err(place) = names.binary_search_by(|name| (**name).cmp(key.1.as_str())) {
                names.insert(place, Box::from(key.1.as_str()));
            }
        } else if let Some(combs) = self.by_comb.get_mut(key.0.as_str()) {
            if let Some(names) = combs.get_mut(comb) {
                if let Ok(place) = names.binary_search_by(|name| (**name).cmp(key.1.as_str())) {
                    names.remove(place);
                }
                if names.is_empty() {
                    combs.remove(comb);
                }
            }
            if combs.is_empty() {
                self.by_comb.remove(key.0.as_str());
            }
        }
    }

    fn put(&mut self, key: ObjectKey, object: Kept) {
        if let Some(old) = self.objects.remove(&key) {
            self.index(&key, &old, false);
        }
        self.index(&key, &object, true);
        self.objects.insert(key, object);
    }

    /// Drops the copies of namespaces that no watch covers any more (listed or listing), with
    /// what comb applied of them: nothing keeps them current.
    fn forget_unwatched(&mut self) {
        let watched = |namespace: &str| {
            self.synced
                .iter()
                .chain(self.listing.keys())
                .any(|scope| scope.as_deref().is_none_or(|covered| covered == namespace))
        };
        let unwatched: Vec<ObjectKey> = self
            .objects
            .keys()
            .chain(self.applied.keys())
            .filter(|(namespace, _)| !watched(namespace))
            .cloned()
            .collect();
        for key in unwatched {
            self.remove(&key);
        }
    }

    /// The object is gone: what comb applied of it goes too.
    fn remove(&mut self, key: &ObjectKey) {
        if let Some(old) = self.objects.remove(key) {
            self.index(key, &old, false);
        }
        self.applied.remove(key);
    }

    /// The object `key` as the watch delivered it; `Err` for one that does not project.
    fn view(&self, key: &ObjectKey) -> Option<Result<&Projection, ()>> {
        match self.objects.get(key)? {
            Kept::Projected(projection) => Some(Ok(projection)),
            Kept::Unprojectable { .. } => Some(Err(())),
        }
    }
}

impl ObjectCache {
    /// An empty store; `keys` name comb's labels and annotations (the watches select by the
    /// name label, the steps' selectors by it and the namespace label).
    pub fn new(keys: LabelKeys) -> ObjectCache {
        ObjectCache {
            keys,
            kinds: RwLock::new(HashMap::new()),
            context: String::new(),
            unprojectable: Arc::new(UnprojectableObjects::default()),
        }
    }

    /// The same store, reporting an object that does not project to `unprojectable` as one of
    /// kube context `context` (it is logged in any case, and reads of it go to the API server).
    pub fn reporting_to(
        mut self,
        context: impl Into<String>,
        unprojectable: Arc<UnprojectableObjects>,
    ) -> ObjectCache {
        self.context = context.into();
        self.unprojectable = unprojectable;
        self
    }

    /// The label keys objects are projected with.
    pub fn keys(&self) -> &LabelKeys {
        &self.keys
    }

    /// `object` of `api_version`/`kind` as the store keeps it; one that does not project is
    /// reported here, where it arrives.
    fn kept(&self, api_version: &str, kind: &str, key: &ObjectKey, object: &Value) -> Kept {
        match Projection::of(api_version, kind, object, &self.keys) {
            Ok(projection) => Kept::Projected(projection),
            Err(error) => {
                self.unprojectable
                    .report(&self.context, kind, &key.0, &key.1, &error);
                let comb = object
                    .pointer("/metadata/labels")
                    .and_then(|labels| labels.get(self.keys.name_label()))
                    .and_then(Value::as_str)
                    .map(Box::from);
                Kept::Unprojectable { comb }
            }
        }
    }

    /// Runs `f` on the store of `kind` (an empty one the first time the kind is named).
    fn with_kind<T>(
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
        self.with_kind(api_version, kind, |store| {
            store
                .listing
                .insert(scope.map(str::to_string), HashMap::new());
        });
    }

    /// The watch of `kind` in `scope` ended (its layer was stopped or handed to another
    /// replica, or the kind is not served): the scope is no longer answered from here, since
    /// nothing keeps it current, and its copies go unless another watch keeps them current (a
    /// layer handed away holds no memory); a new watch lists it again.
    pub fn unwatched(&self, api_version: &str, kind: &str, scope: Option<&str>) {
        self.with_kind(api_version, kind, |store| {
            let scope = scope.map(str::to_string);
            store.synced.remove(&scope);
            store.listing.remove(&scope);
            store.forget_unwatched();
        });
    }

    /// An object the list of `scope` brought.
    pub fn listed(&self, api_version: &str, kind: &str, scope: Option<&str>, object: Value) {
        let Some(key) = key_of(&object) else { return };
        let kept = self.kept(api_version, kind, &key, &object);
        self.with_kind(api_version, kind, |store| {
            if let Some(listing) = store.listing.get_mut(&scope.map(str::to_string)) {
                listing.insert(key, kept);
            }
        });
    }

    /// The list of `scope` is complete: it replaces what the store held there (what it no
    /// longer has was deleted meanwhile), our own writes there included, and the scope is
    /// answered from now on.
    pub fn list_done(&self, api_version: &str, kind: &str, scope: Option<&str>) {
        self.with_kind(api_version, kind, |store| {
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
            }
            for (key, object) in listed {
                store.put(key, object);
            }
            store.synced.insert(scope);
        });
    }

    /// A watched change (added or modified).
    pub fn applied(&self, api_version: &str, kind: &str, object: Value) {
        let Some(key) = key_of(&object) else { return };
        let kept = self.kept(api_version, kind, &key, &object);
        self.with_kind(api_version, kind, |store| {
            store.put(key, kept);
        });
    }

    /// A watched deletion: the object, our write of it and what comb applied of it go.
    pub fn deleted(&self, api_version: &str, kind: &str, object: &Value) {
        let Some(key) = key_of(object) else { return };
        self.with_kind(api_version, kind, |store| {
            store.remove(&key);
        });
    }

    /// What the store knows of the objects of `kind` in `namespace` (all namespaces for
    /// `None`) that `selector` selects, ordered by namespace and name as the API server lists
    /// them; `None` when no listed watch covers them, or one of them does not project.
    pub fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: &CombSelector,
    ) -> Option<Vec<Projection>> {
        self.with_kind(api_version, kind, |store| {
            if !store.covers(namespace) {
                return None;
            }
            let mut keys: BTreeSet<ObjectKey> = BTreeSet::new();
            for (object_namespace, combs) in &store.by_comb {
                if namespace.is_some_and(|namespace| namespace != &**object_namespace) {
                    continue;
                }
                if let Some(names) = combs.get(selector.name.as_str()) {
                    keys.extend(
                        names
                            .iter()
                            .map(|name| (object_namespace.to_string(), name.to_string())),
                    );
                }
            }
            let mut objects = Vec::with_capacity(keys.len());
            for key in &keys {
                match store.view(key) {
                    None => {}
                    Some(Ok(object)) if selector.selects(object) => objects.push(object.clone()),
                    Some(Ok(_)) => {}
                    // A list missing an object is no answer: the API server lists instead.
                    Some(Err(())) => return None,
                }
            }
            Some(objects)
        })
    }

    /// What the store knows of the object `resource` names when a listed watch covers it and
    /// holds it; `None` means "ask the API server" (the watch sees only labelled objects, so a
    /// miss proves nothing; an object that does not project is the server's to answer).
    pub fn get(&self, resource: &ManagedObject) -> Option<Projection> {
        let namespace = resource.namespace.as_deref();
        self.with_kind(&resource.api_version, &resource.kind, |store| {
            if !store.covers(namespace) {
                return None;
            }
            store.view(&key_of_resource(resource))?.ok().cloned()
        })
    }

    /// `resource` stands as comb rendered it with `digest`, comb's applied fields being
    /// `fields`: comb just applied it, or found every field as rendered. Remembered until the
    /// object goes, so that a later step can tell from its projection that nothing changed.
    pub fn stands_as_applied(&self, resource: &ManagedObject, applied: AsApplied) {
        self.with_kind(&resource.api_version, &resource.kind, |store| {
            store.applied.insert(key_of_resource(resource), applied);
        });
    }

    /// What [`ObjectCache::stands_as_applied`] last remembered of `resource`.
    pub fn as_applied(&self, resource: &ManagedObject) -> Option<AsApplied> {
        self.with_kind(&resource.api_version, &resource.kind, |store| {
            store.applied.get(&key_of_resource(resource)).copied()
        })
    }

    /// Our own delete of `resource` succeeded: what comb applied of it goes (the watch's
    /// deletion takes the copy).
    pub fn removed(&self, resource: &ManagedObject) {
        self.with_kind(&resource.api_version, &resource.kind, |store| {
            store.applied.remove(&key_of_resource(resource));
        });
    }
}

/// Counts watched objects that do not project, by context and kind: the controller's metric
/// (`comb_undecodable_copies_total`).
pub trait CountUnprojectable: Send + Sync {
    fn unprojectable(&self, context: &str, kind: &str);
}

/// How many objects the log remembers having named (more than any cluster holds broken).
const LOGGED_MAX: usize = 4096;

/// Where a watched object that does not project is reported: counted every time the watch
/// delivers it ([`CountUnprojectable`]), so that the count shows it persists, and logged once
/// per object with its kind, namespace and name and the field that does not project (never
/// its content). Reads of it go to the API server.
#[derive(Default)]
pub struct UnprojectableObjects {
    counter: Option<Arc<dyn CountUnprojectable>>,
    logged: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for UnprojectableObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnprojectableObjects")
            .finish_non_exhaustive()
    }
}

impl UnprojectableObjects {
    /// Counted by `counter`, and logged.
    pub fn counted_by(counter: Arc<dyn CountUnprojectable>) -> UnprojectableObjects {
        UnprojectableObjects {
            counter: Some(counter),
            logged: Mutex::default(),
        }
    }

    /// Reports the object of `kind` `namespace/name` (in kube context `context`) that does not
    /// project; returns whether this was the first report of it (and so logged).
    pub fn report(
        &self,
        context: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        error: &Unprojectable,
    ) -> bool {
        if let Some(counter) = &self.counter {
            counter.unprojectable(context, kind);
        }
        let object = format!("{context}/{kind}/{namespace}/{name}");
        let first = {
            let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
            if logged.len() >= LOGGED_MAX {
                logged.clear();
            }
            logged.insert(object)
        };
        if first {
            tracing::error!(
                context,
                kind,
                namespace,
                name,
                "{kind} {namespace}/{name} as watched cannot be read: {error}; it is read from \
                 the API server instead (counted in comb_undecodable_copies_total)"
            );
        }
        first
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
    use crate::engine::projection::State;
    use serde_json::json;

    const LABEL: &str = "comb.internal/comb";

    fn deployment(name: &str, comb: &str, version: &str, replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "apps", "resourceVersion": version,
                         "labels": {LABEL: comb}, "managedFields": [{"manager": "x"}]},
            "spec": {"replicas": replicas},
        })
    }

    fn cache() -> ObjectCache {
        ObjectCache::new(LabelKeys::default())
    }

    fn listed(cache: &ObjectCache, objects: &[Value]) {
        cache.list_started("apps/v1", "Deployment", Some("apps"));
        for object in objects {
            cache.listed("apps/v1", "Deployment", Some("apps"), object.clone());
        }
        cache.list_done("apps/v1", "Deployment", Some("apps"));
    }

    fn selector(comb: &str) -> CombSelector {
        CombSelector {
            name: comb.into(),
            namespace: None,
        }
    }

    /// The `spec.replicas` of the Comb's Deployments, as the store answers.
    fn replicas(cache: &ObjectCache, comb: &str) -> Option<Vec<i64>> {
        cache
            .list("apps/v1", "Deployment", Some("apps"), &selector(comb))
            .map(|objects| {
                objects
                    .iter()
                    .map(|o| match &o.state {
                        State::Replicated(replicated) => replicated.replicas.unwrap(),
                        other => panic!("{other:?}"),
                    })
                    .collect()
            })
    }

    fn resource(name: &str) -> ManagedObject {
        ManagedObject {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("apps".into()),
            name: name.into(),
            uid: None,
        }
    }

    fn projected(object: &Value) -> Projection {
        Projection::of("apps/v1", "Deployment", object, &LabelKeys::default()).unwrap()
    }

    /// How many objects, and records of what comb applied, the Deployment store holds.
    fn held(cache: &ObjectCache) -> (usize, usize) {
        cache.with_kind("apps/v1", "Deployment", |store| {
            (store.objects.len(), store.applied.len())
        })
    }

    #[test]
    fn an_unwatched_scope_keeps_no_copies_unless_another_watch_covers_them() {
        let cache = cache();
        listed(&cache, &[deployment("web", "web", "1", 1)]);
        let applied = AsApplied {
            digest: Fingerprint::of("digest"),
            fields: Fingerprint::of("fields"),
        };
        cache.stands_as_applied(&resource("web"), applied);
        cache.list_started("apps/v1", "Deployment", None);
        cache.listed(
            "apps/v1",
            "Deployment",
            None,
            deployment("web", "web", "1", 1),
        );
        cache.list_done("apps/v1", "Deployment", None);
        assert_eq!(held(&cache), (1, 1));
        // The namespace's watch ends; the all-namespaces watch still keeps the copy current.
        cache.unwatched("apps/v1", "Deployment", Some("apps"));
        assert_eq!(held(&cache), (1, 1));
        assert_eq!(replicas(&cache, "web"), Some(vec![1]));
        // The last watch ends: nothing is kept.
        cache.unwatched("apps/v1", "Deployment", None);
        assert_eq!(held(&cache), (0, 0));
        assert_eq!(replicas(&cache, "web"), None);
        assert_eq!(cache.as_applied(&resource("web")), None);
    }

    #[test]
    fn answers_only_what_a_listed_watch_covers() {
        let cache = cache();
        assert_eq!(replicas(&cache, "web"), None, "nothing watched yet");
        cache.list_started("apps/v1", "Deployment", Some("apps"));
        cache.listed(
            "apps/v1",
            "Deployment",
            Some("apps"),
            deployment("web", "web", "1", 1),
        );
        assert_eq!(replicas(&cache, "web"), None, "still listing");
        cache.list_done("apps/v1", "Deployment", Some("apps"));
        assert_eq!(replicas(&cache, "web"), Some(vec![1]));
        assert_eq!(replicas(&cache, "db"), Some(vec![]));
        // Another namespace, another kind: not answered.
        assert_eq!(
            cache.list("apps/v1", "Deployment", Some("other"), &selector("web")),
            None
        );
        assert_eq!(
            cache.list("v1", "Service", Some("apps"), &selector("web")),
            None
        );
        assert_eq!(
            cache.list("apps/v1", "Deployment", None, &selector("web")),
            None,
            "all namespaces were not listed"
        );
        assert_eq!(
            cache.get(&resource("web")),
            Some(projected(&deployment("web", "web", "1", 1)))
        );
        assert_eq!(cache.get(&resource("db")), None);
    }

    #[test]
    fn selectors_with_the_namespace_label_filter() {
        let cache = cache();
        let mut other = deployment("web-b", "web", "2", 2);
        other["metadata"]["labels"]["comb.internal/comb-namespace"] = json!("else");
        let mut own = deployment("web-a", "web", "1", 1);
        own["metadata"]["labels"]["comb.internal/comb-namespace"] = json!("apps");
        listed(&cache, &[other, own]);
        assert_eq!(replicas(&cache, "web"), Some(vec![1, 2]));
        let both = CombSelector {
            name: "web".into(),
            namespace: Some("apps".into()),
        };
        let listed = cache
            .list("apps/v1", "Deployment", Some("apps"), &both)
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(&*listed[0].name, "web-a");
    }

    #[test]
    fn reads_are_the_watchs_and_our_delete_forgets_only_what_comb_applied() {
        let cache = cache();
        let web = deployment("web", "web", "1", 1);
        listed(&cache, std::slice::from_ref(&web));
        cache.stands_as_applied(&resource("web"), applied("sha256:d"));
        cache.removed(&resource("web"));
        assert_eq!(cache.as_applied(&resource("web")), None);
        // The copy is the watch's until it delivers the deletion.
        assert_eq!(replicas(&cache, "web"), Some(vec![1]));
        cache.deleted("apps/v1", "Deployment", &web);
        assert_eq!(replicas(&cache, "web"), Some(vec![]));
        assert_eq!(cache.get(&resource("web")), None);
        // Created again by someone: seen.
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "9", 9));
        assert_eq!(replicas(&cache, "web"), Some(vec![9]));
    }

    #[test]
    fn a_list_replaces_the_scope() {
        let cache = cache();
        listed(
            &cache,
            &[
                deployment("web", "web", "1", 1),
                deployment("old", "web", "1", 0),
            ],
        );
        // The watch fell behind and listed again: the list is the server's state.
        listed(&cache, &[deployment("web", "web", "8", 8)]);
        assert_eq!(replicas(&cache, "web"), Some(vec![8]));
        assert_eq!(cache.get(&resource("old")), None);
    }

    fn applied(digest: &str) -> AsApplied {
        AsApplied {
            digest: Fingerprint::of(digest),
            fields: Fingerprint::of("{}"),
        }
    }

    #[test]
    fn what_comb_knew_as_applied_goes_with_the_object() {
        let cache = cache();
        let objects = ["web", "db", "mq"].map(|name| deployment(name, name, "1", 1));
        listed(&cache, &objects);
        for name in ["web", "db", "mq"] {
            cache.stands_as_applied(&resource(name), applied("sha256:d"));
        }
        assert_eq!(
            cache.as_applied(&resource("web")),
            Some(applied("sha256:d"))
        );
        // Someone else deletes web: the watch says so.
        cache.deleted("apps/v1", "Deployment", &objects[0]);
        assert_eq!(cache.as_applied(&resource("web")), None);
        // db went while the watch was down: the list after it no longer has it.
        listed(&cache, &objects[2..]);
        assert_eq!(cache.as_applied(&resource("db")), None);
        assert!(cache.as_applied(&resource("mq")).is_some());
        // comb's own delete.
        cache.removed(&resource("mq"));
        assert_eq!(cache.as_applied(&resource("mq")), None);
    }

    #[test]
    fn without_watches_only_what_comb_applied_is_kept() {
        let cache = cache();
        cache.stands_as_applied(&resource("web"), applied("sha256:d"));
        assert_eq!(
            cache.as_applied(&resource("web")),
            Some(applied("sha256:d"))
        );
        assert_eq!(replicas(&cache, "web"), None, "reads go to the API server");
        assert_eq!(cache.get(&resource("web")), None);
    }

    #[derive(Default)]
    struct Counted(Mutex<Vec<(String, String)>>);

    impl CountUnprojectable for Counted {
        fn unprojectable(&self, context: &str, kind: &str) {
            self.0.lock().unwrap().push((context.into(), kind.into()));
        }
    }

    #[test]
    fn an_object_that_does_not_project_is_reported_and_never_read_as_empty() {
        let counted = Arc::new(Counted::default());
        let cache = cache().reporting_to(
            "prod",
            Arc::new(UnprojectableObjects::counted_by(counted.clone())),
        );
        let mut broken = deployment("web", "web", "1", 1);
        broken["status"] = json!({"readyReplicas": {"not": "a number"}});
        listed(
            &cache,
            &[broken.clone(), deployment("web-b", "web", "1", 2)],
        );
        // Neither a default object nor a list without it: the API server is asked instead.
        assert_eq!(cache.get(&resource("web")), None);
        assert_eq!(replicas(&cache, "web"), None);
        assert!(cache.get(&resource("web-b")).is_some());
        // Counted at each delivery (logged once).
        broken["metadata"]["resourceVersion"] = json!("2");
        cache.applied("apps/v1", "Deployment", broken);
        assert_eq!(
            *counted.0.lock().unwrap(),
            [
                ("prod".to_string(), "Deployment".to_string()),
                ("prod".to_string(), "Deployment".to_string())
            ]
        );
        // The watch brings a version that projects: answered again.
        cache.applied("apps/v1", "Deployment", deployment("web", "web", "3", 3));
        assert_eq!(replicas(&cache, "web"), Some(vec![3, 2]));
    }

    #[test]
    fn unprojectable_objects_are_logged_once() {
        let counted = Arc::new(Counted::default());
        let objects = UnprojectableObjects::counted_by(counted.clone());
        let error = Unprojectable {
            field: "status.readyReplicas".into(),
            found: "an object",
            wanted: "a number",
        };
        assert!(objects.report("prod", "Deployment", "apps", "web", &error));
        assert!(!objects.report("prod", "Deployment", "apps", "web", &error));
        assert!(objects.report("prod", "Pod", "apps", "web", &error));
        assert_eq!(counted.0.lock().unwrap().len(), 3);
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
