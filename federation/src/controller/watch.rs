//! The watches of a layer: its Comb CRs, and the resources Combs manage (by the Comb name
//! label), mapped back to their Comb by the name and namespace labels. What the resource watches
//! bring is kept in the context's [`ObjectCache`](crate::engine::cache::ObjectCache) before the
//! Comb is woken, so that the step it wakes reads at least that change from it.
//!
//! Watches resume after errors by themselves (kube's watcher re-lists after 410 Expired); we add
//! a backoff between failed attempts ([`paced`]) and tell the layer's health about transport
//! failures. In a controller of layers on demand they are shared with the other such
//! controllers of the process ([`SharedWatches`]).

use std::collections::HashSet;
use std::sync::Arc;

use comb_api::Comb;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::{PartialObjectMeta, TypeMeta};
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Shared;
use super::health::Failure;
use super::hub::{Deliveries, Delivery, SharedWatches, Unencodable, deliveries, paced};
use super::layer::LayerRuntime;
use super::triggers::{Source, comb_key, owner_of};
use crate::engine::cache::ObjectCache;
use crate::engine::keys::CombKey;

/// Objects per page of a watch's list: every watch of every layer lists at once when comb
/// starts, and each page is decoded whole before its objects are taken in; the process keeps
/// that peak as its size afterwards (the allocator returns little), so pages of 100 instead of
/// kube-runtime's 500.
const LIST_PAGE: u32 = 100;

/// The kinds whose changes wake their Comb: what Combs usually deploy, the bridges' kinds, and
/// Pods (a crash loop shows there first).
pub const WATCHED_KINDS: [(&str, &str, &str); 11] = [
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "StatefulSet"),
    ("apps", "v1", "DaemonSet"),
    ("", "v1", "Service"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Secret"),
    ("", "v1", "PersistentVolumeClaim"),
    ("", "v1", "Pod"),
    ("batch", "v1", "Job"),
    ("batch", "v1", "CronJob"),
    ("discovery.k8s.io", "v1", "EndpointSlice"),
];

/// Watches the Comb CRs of one scope (a namespace, or all) of `layer` until `cancel`.
pub async fn watch_combs(
    shared: Arc<Shared>,
    layer: Arc<LayerRuntime>,
    scope_index: usize,
    scope: Option<String>,
    cancel: CancellationToken,
) {
    let stream = comb_deliveries(&shared, &layer, scope.clone()).take_until(cancel.cancelled());
    futures::pin_mut!(stream);
    let mut listing: Option<HashSet<CombKey>> = None;
    while let Some(delivery) = stream.next().await {
        let event = match delivery {
            Delivery::Event(event) => event,
            Delivery::Failed(failed) => {
                let message = match failed.failure {
                    Failure::NotServed => format!(
                        "the Comb CRD (combs.{}) is not installed; install it with `comb crd | kubectl apply -f -` ({})",
                        shared.config.group, failed.message
                    ),
                    _ => failed.message,
                };
                shared
                    .health
                    .watch_failed(&layer, "Comb", failed.failure, &message);
                continue;
            }
            // A Comb that does not decode fails the watch instead.
            Delivery::Unencodable(_) => continue,
        };
        // kube's watcher yields `Init` before it lists, on every retry: only what the server
        // sent proves it answers (counting `Init` kept a failing watch retrying at its first,
        // shortest delay, and marked a partitioned layer back up several times a second).
        if !matches!(event, Event::Init) {
            shared.health.layer_answered(&layer);
        }
        match event {
            Event::Init => listing = Some(HashSet::new()),
            Event::InitApply(cr) => {
                if let (Some(seen), Some(key)) = (listing.as_mut(), comb_key(&cr)) {
                    seen.insert(key);
                }
                shared.fanout.cr_seen(&layer, cr, Source::Listed);
            }
            Event::InitDone => {
                let seen = listing.take().unwrap_or_default();
                for key in layer.keys_in(scope.as_deref()) {
                    if !seen.contains(&key) {
                        shared.fanout.cr_gone(&layer, &key);
                    }
                }
                if layer.mark_listed(scope_index) {
                    tracing::info!(
                        layer = layer.name(),
                        combs = layer.keys().len(),
                        "layer listed"
                    );
                }
            }
            Event::Apply(cr) => shared.fanout.cr_seen(&layer, cr, Source::Watched),
            Event::Delete(cr) => {
                if let Some(key) = comb_key(&cr) {
                    shared.fanout.cr_gone(&layer, &key);
                }
            }
        }
    }
}

/// Where a watch of `layer`'s `scope` comes from: its own, or one shared with the other
/// controllers of the process (their layers on demand). A layer made from a template shares the
/// watch of every namespace of its cluster, handed its `scope`; any other layer shares the
/// watch of its `scope` (its RBAC may stop there). `None`: its own.
fn shared_scope<'a>(
    shared: &'a Shared,
    layer: &LayerRuntime,
    scope: &Option<String>,
) -> Option<(&'a SharedWatches, Option<String>)> {
    let watches = shared.options.shared_watches.as_ref()?;
    let opened_in = if layer.layer.template.is_some() {
        None
    } else {
        scope.clone()
    };
    Some((watches, opened_in))
}

/// The Comb CRs of `scope` of `layer`, as its watch delivers them, paced after failures.
fn comb_deliveries(
    shared: &Shared,
    layer: &LayerRuntime,
    scope: Option<String>,
) -> Deliveries<Comb> {
    let resource = comb_api::api_resource(&shared.config.group);
    let client = layer.ops.client().clone();
    let backoff = shared.options.watch_backoff;
    let open = move |opened_in: Option<String>| {
        let api: Api<Comb> = match &opened_in {
            Some(namespace) => Api::namespaced_with(client, namespace, &resource),
            None => Api::all_with(client, &resource),
        };
        let events = watcher::watcher(api, watcher::Config::default().page_size(LIST_PAGE));
        paced(deliveries(events, Ok), backoff, false)
    };
    match shared_scope(shared, layer, &scope) {
        Some((watches, opened_in)) => {
            watches.combs(&layer.layer.context, opened_in.clone(), scope, || {
                open(opened_in)
            })
        }
        None => open(scope),
    }
}

/// Kinds whose objects the steps read only by their metadata (their data stays on the server):
/// watched as metadata.
pub const METADATA_KINDS: [&str; 2] = ["Secret", "ConfigMap"];

/// The events of one kind's watch as JSON objects with their `apiVersion` and `kind` (list
/// items come without). `managedFields` stay: the cache keeps them as one hash per manager,
/// which tells deploy that comb's applied fields still stand.
fn object_events(
    client: kube::Client,
    kind: &ApiResource,
    scope: Option<&str>,
    config: watcher::Config,
) -> Deliveries<Value> {
    let types = TypeMeta {
        api_version: kind.api_version.clone(),
        kind: kind.kind.clone(),
    };
    if METADATA_KINDS.contains(&kind.kind.as_str()) {
        let api: Api<PartialObjectMeta<DynamicObject>> = match scope {
            Some(namespace) => Api::namespaced_with(client, namespace, kind),
            None => Api::all_with(client, kind),
        };
        json_events(api, config, types, |object| &mut object.types)
    } else {
        let api: Api<DynamicObject> = match scope {
            Some(namespace) => Api::namespaced_with(client, namespace, kind),
            None => Api::all_with(client, kind),
        };
        json_events(api, config, types, |object| &mut object.types)
    }
}

/// A watch of `api` whose objects become JSON carrying `types` (set through `types_of`).
fn json_events<K>(
    api: Api<K>,
    config: watcher::Config,
    types: TypeMeta,
    types_of: fn(&mut K) -> &mut Option<TypeMeta>,
) -> Deliveries<Value>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
{
    deliveries(watcher::watcher(api, config), move |mut object: K| {
        *types_of(&mut object) = Some(types.clone());
        serde_json::to_value(&object).map_err(|error| Unencodable {
            namespace: object.meta().namespace.clone().unwrap_or_default(),
            name: object.meta().name.clone().unwrap_or_default(),
            error: error.to_string(),
        })
    })
}

/// Tells the cache, when dropped, that a watch of its scope ended.
struct Unwatched {
    cache: Arc<ObjectCache>,
    api_version: String,
    kind: String,
    scope: Option<String>,
}

impl Drop for Unwatched {
    fn drop(&mut self) {
        self.cache
            .unwatched(&self.api_version, &self.kind, self.scope.as_deref());
    }
}

/// Watches one managed kind in one scope of `layer`, keeps what it brings in the context's
/// cache (when the controller keeps one) and wakes the Comb of each changed or deleted object,
/// until `cancel` (or for good when the kind is not served).
pub async fn watch_managed(
    shared: Arc<Shared>,
    layer: Arc<LayerRuntime>,
    kind: ApiResource,
    scope: Option<String>,
    cancel: CancellationToken,
) {
    let keys = shared.config.label_keys();
    let stream =
        object_deliveries(&shared, &layer, &kind, scope.clone()).take_until(cancel.cancelled());
    futures::pin_mut!(stream);
    let cache = layer.ops.cache().cloned();
    let (api_version, kind_name) = (kind.api_version.clone(), kind.kind.clone());
    // However the watch ends, what it kept is no longer kept current.
    let _unwatched = cache.clone().map(|cache| Unwatched {
        cache,
        api_version: api_version.clone(),
        kind: kind_name.clone(),
        scope: scope.clone(),
    });
    let mut forbidden = Forbidden::default();
    while let Some(delivery) = stream.next().await {
        let event = match delivery {
            Delivery::Event(event) => event,
            Delivery::Failed(failed) => {
                match failed.failure {
                    Failure::NotServed => {
                        warn!(
                            layer = layer.name(),
                            kind = %kind.kind,
                            "not watching {}: the API server does not serve it ({})",
                            kind.kind,
                            failed.message
                        );
                        return;
                    }
                    // Said once; RBAC may be granted later, so the watch looks again, seldom.
                    Failure::Forbidden => {
                        forbidden.report(&layer, &kind, scope.as_deref(), &failed.message);
                        shared.metrics.api_error(layer.name(), "watch");
                    }
                    failure => {
                        shared
                            .health
                            .watch_failed(&layer, &kind.kind, failure, &failed.message);
                    }
                }
                continue;
            }
            Delivery::Unencodable(object) => {
                warn!(
                    layer = layer.name(),
                    kind = %kind.kind,
                    namespace = %object.namespace,
                    name = %object.name,
                    "{} {}/{} as watched does not encode as JSON ({}); its scope is read from \
                     the API server until the watch lists again",
                    kind.kind,
                    object.namespace,
                    object.name,
                    object.error
                );
                // Without it the scope's copies are not the server's: the steps read there
                // from the API server until the watch lists again.
                if let Some(cache) = &cache {
                    cache.unwatched(&api_version, &kind_name, scope.as_deref());
                }
                continue;
            }
        };
        // The cache first: the step the event wakes reads at least this change.
        let (owner, name) = match event {
            Event::Init => {
                if let Some(cache) = &cache {
                    cache.list_started(&api_version, &kind_name, scope.as_deref());
                }
                continue;
            }
            Event::InitDone => {
                if let Some(cache) = &cache {
                    cache.list_done(&api_version, &kind_name, scope.as_deref());
                }
                forbidden.granted(&layer, &kind, scope.as_deref());
                shared.health.layer_answered(&layer);
                continue;
            }
            Event::InitApply(object) => {
                let seen = owner_and_name(&object, &keys);
                if let Some(cache) = &cache {
                    cache.listed(&api_version, &kind_name, scope.as_deref(), object);
                }
                seen
            }
            Event::Apply(object) => {
                let seen = owner_and_name(&object, &keys);
                if let Some(cache) = &cache {
                    cache.applied(&api_version, &kind_name, object);
                }
                seen
            }
            Event::Delete(object) => {
                if let Some(cache) = &cache {
                    cache.deleted(&api_version, &kind_name, &object);
                }
                owner_and_name(&object, &keys)
            }
        };
        shared.health.layer_answered(&layer);
        if let Some(owner) = owner
            && layer.knows(&owner)
        {
            debug!(
                layer = layer.name(),
                namespace = %owner.namespace,
                comb = %owner.name,
                kind = %kind.kind,
                object = %name,
                "a managed resource changed"
            );
            shared.fanout.object_changed(&layer, &owner);
        }
    }
}

/// The objects of managed kind `kind` in `scope` of `layer` that carry a Comb's name label (a
/// superset of what the steps select by: the name label, or name and namespace labels, so that
/// the cache can answer their lists), as its watch delivers them, paced after failures; a kind
/// the server does not serve ends the watch.
fn object_deliveries(
    shared: &Shared,
    layer: &LayerRuntime,
    kind: &ApiResource,
    scope: Option<String>,
) -> Deliveries<Value> {
    let client = layer.ops.client().clone();
    let selector = shared.config.label_keys().name_label().to_string();
    let backoff = shared.options.watch_backoff;
    let resource = kind.clone();
    let open = move |opened_in: Option<String>| {
        let config = watcher::Config::default()
            .labels(&selector)
            .page_size(LIST_PAGE);
        paced(
            object_events(client, &resource, opened_in.as_deref(), config),
            backoff,
            true,
        )
    };
    match shared_scope(shared, layer, &scope) {
        Some((watches, opened_in)) => {
            let kind = format!("{}/{}", kind.api_version, kind.kind);
            watches.objects(&layer.layer.context, kind, opened_in.clone(), scope, || {
                open(opened_in)
            })
        }
        None => open(scope),
    }
}

/// Whether a managed kind's watch was refused (403), so that the refusal is said once, with
/// what to grant, and its end once too.
#[derive(Debug, Default)]
struct Forbidden {
    reported: bool,
}

impl Forbidden {
    fn report(
        &mut self,
        layer: &LayerRuntime,
        kind: &ApiResource,
        scope: Option<&str>,
        error: &str,
    ) {
        if std::mem::replace(&mut self.reported, true) {
            debug!(layer = layer.name(), kind = %kind.kind, "still not allowed to watch: {error}");
            return;
        }
        let place = match scope {
            Some(namespace) => format!("in namespace {namespace}"),
            None => "in any namespace".to_string(),
        };
        let chart = if kind.kind == "Secret" {
            " (the chart grants them where its values name replication, and in \
             rbac.secretNamespaces and rbac.secretReadNamespaces)"
        } else {
            ""
        };
        // Expected where RBAC keeps comb from Secrets it has no business with: the layer goes on.
        tracing::info!(
            layer = layer.name(),
            kind = %kind.kind,
            "not watching {plural} {place}: comb may not list and watch them ({error}); steps that \
             need one read it from the API server, which refuses as well unless allowed; grant \
             get, list and watch on {plural} there if Combs there deploy, require or replicate \
             them{chart}",
            plural = kind.plural,
        );
    }

    fn granted(&mut self, layer: &LayerRuntime, kind: &ApiResource, scope: Option<&str>) {
        if std::mem::take(&mut self.reported) {
            tracing::info!(
                layer = layer.name(),
                kind = %kind.kind,
                namespace = scope.unwrap_or("*"),
                "watching {} now: comb may list and watch them",
                kind.plural
            );
        }
    }
}

/// The Comb an object's labels name, and the object's name.
fn owner_and_name(object: &Value, keys: &comb_api::LabelKeys) -> (Option<CombKey>, String) {
    // Read as they are (label values are strings), not decoded: nothing to fail.
    let labels = object.pointer("/metadata/labels");
    let owner = owner_of(|key| labels?.get(key)?.as_str(), keys);
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    (owner, name)
}
