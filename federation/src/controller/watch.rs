//! The watches of a layer: its Comb CRs, and the resources Combs manage (by the managed-by
//! label), mapped back to their Comb by the name and namespace labels.
//!
//! Watches resume after errors by themselves (kube's watcher re-lists after 410 Expired); we add
//! a backoff between failed attempts and tell the layer's health about transport failures.

use std::collections::HashSet;
use std::sync::Arc;

use comb_api::{Comb, MANAGED_BY_LABEL};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Shared;
use super::backoff::Retries;
use super::layer::LayerRuntime;
use super::queue::Trigger;
use super::triggers::{Source, comb_key, owner_of};

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

/// How a watch failure counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API server does not answer (refused, timed out, 5xx): the layer is down.
    Unavailable,
    /// The resource is not served (404): this watch ends.
    NotServed,
    /// The watch fell behind the server's history (410 Gone): it lists again, as it should.
    Expired,
    /// Anything else (403, a bad object): retried.
    Other,
}

/// Classifies a watcher error.
pub fn classify(error: &watcher::Error) -> Failure {
    let client_error = match error {
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => error,
        watcher::Error::WatchError(status) => {
            return match status.code {
                410 => Failure::Expired,
                code if code >= 500 || code == 429 => Failure::Unavailable,
                _ => Failure::Other,
            };
        }
        watcher::Error::NoResourceVersion => return Failure::Other,
    };
    match client_error {
        kube::Error::Api(status) if status.code == 404 => Failure::NotServed,
        kube::Error::Api(status) if status.code == 410 => Failure::Expired,
        kube::Error::Api(status) if status.code >= 500 || status.code == 429 => {
            Failure::Unavailable
        }
        kube::Error::Api(_) | kube::Error::SerdeError(_) => Failure::Other,
        _ => Failure::Unavailable,
    }
}

/// Reports a failed watch and waits before it tries again (an expired one lists again at
/// once); false when stopping.
async fn after_error(
    shared: &Arc<Shared>,
    layer: &Arc<LayerRuntime>,
    what: &str,
    failure: Failure,
    message: &str,
    retries: &mut Retries,
    cancel: &CancellationToken,
) -> bool {
    shared.watch_failed(layer, what, failure, message);
    if failure == Failure::Expired {
        return true;
    }
    shared.pause(retries.next_delay(), cancel).await
}

/// Watches the Comb CRs of one scope (a namespace, or all) of `layer` until `cancel`.
pub async fn watch_combs(
    shared: Arc<Shared>,
    layer: Arc<LayerRuntime>,
    scope_index: usize,
    scope: Option<String>,
    cancel: CancellationToken,
) {
    let resource = comb_api::api_resource(&shared.config.group);
    let client = layer.ops.client().clone();
    let api: Api<Comb> = match &scope {
        Some(namespace) => Api::namespaced_with(client, namespace, &resource),
        None => Api::all_with(client, &resource),
    };
    let stream = watcher::watcher(api, watcher::Config::default());
    futures::pin_mut!(stream);
    let mut retries = shared.watch_retries();
    let mut listing: Option<HashSet<super::queue::CombKey>> = None;
    loop {
        let item = tokio::select! {
            () = cancel.cancelled() => return,
            item = stream.next() => item,
        };
        let Some(item) = item else { return };
        let event = match item {
            Ok(event) => event,
            Err(error) => {
                let message = match classify(&error) {
                    Failure::NotServed => format!(
                        "the Comb CRD (combs.{}) is not installed; install it with `comb crd | kubectl apply -f -` ({error})",
                        shared.config.group
                    ),
                    _ => error.to_string(),
                };
                if !after_error(
                    &shared,
                    &layer,
                    "Comb",
                    classify(&error),
                    &message,
                    &mut retries,
                    &cancel,
                )
                .await
                {
                    return;
                }
                continue;
            }
        };
        // kube's watcher yields `Init` before it lists, on every retry: only what the server
        // sent proves it answers (counting `Init` kept a failing watch retrying at its first,
        // shortest delay, and marked a partitioned layer back up several times a second).
        if !matches!(event, Event::Init) {
            retries.reset();
            shared.layer_answered(&layer);
        }
        match event {
            Event::Init => listing = Some(HashSet::new()),
            Event::InitApply(cr) => {
                if let (Some(seen), Some(key)) = (listing.as_mut(), comb_key(&cr)) {
                    seen.insert(key);
                }
                shared.cr_seen(&layer, cr, Source::Listed);
            }
            Event::InitDone => {
                let seen = listing.take().unwrap_or_default();
                for key in layer.keys_in(scope.as_deref()) {
                    if !seen.contains(&key) {
                        shared.cr_gone(&layer, &key);
                    }
                }
                if layer.mark_listed(scope_index) {
                    tracing::info!(
                        layer = layer.name(),
                        combs = layer.keys().len(),
                        "layer listed"
                    );
                    shared.listed.notify_waiters();
                }
            }
            Event::Apply(cr) => shared.cr_seen(&layer, cr, Source::Watched),
            Event::Delete(cr) => {
                if let Some(key) = comb_key(&cr) {
                    shared.cr_gone(&layer, &key);
                }
            }
        }
    }
}

/// Watches one managed kind in one scope of `layer` and wakes the Comb of each changed or
/// deleted object, until `cancel` (or for good when the kind is not served).
pub async fn watch_managed(
    shared: Arc<Shared>,
    layer: Arc<LayerRuntime>,
    kind: ApiResource,
    scope: Option<String>,
    cancel: CancellationToken,
) {
    let client = layer.ops.client().clone();
    // Metadata only: labels are all that is looked at.
    let api: Api<PartialObjectMeta<DynamicObject>> = match &scope {
        Some(namespace) => Api::namespaced_with(client, namespace, &kind),
        None => Api::all_with(client, &kind),
    };
    let selector = format!("{MANAGED_BY_LABEL}={}", shared.config.managed_by);
    let stream = watcher::watcher(api, watcher::Config::default().labels(&selector));
    futures::pin_mut!(stream);
    let keys = shared.config.label_keys();
    let mut retries = shared.watch_retries();
    loop {
        let item = tokio::select! {
            () = cancel.cancelled() => return,
            item = stream.next() => item,
        };
        let Some(item) = item else { return };
        let object: PartialObjectMeta<DynamicObject> = match item {
            Ok(Event::Apply(object) | Event::InitApply(object) | Event::Delete(object)) => object,
            Ok(Event::Init | Event::InitDone) => continue,
            Err(error) => {
                let failure = classify(&error);
                if failure == Failure::NotServed {
                    warn!(
                        layer = layer.name(),
                        kind = %kind.kind,
                        "not watching {}: the API server does not serve it ({error})",
                        kind.kind
                    );
                    return;
                }
                if !after_error(
                    &shared,
                    &layer,
                    &kind.kind,
                    failure,
                    &error.to_string(),
                    &mut retries,
                    &cancel,
                )
                .await
                {
                    return;
                }
                continue;
            }
        };
        retries.reset();
        shared.layer_answered(&layer);
        if let Some(owner) = owner_of(object.metadata.labels.as_ref(), &keys)
            && layer.knows(&owner)
        {
            debug!(
                layer = layer.name(),
                namespace = %owner.namespace,
                comb = %owner.name,
                kind = %kind.kind,
                object = object.metadata.name.as_deref().unwrap_or_default(),
                "a managed resource changed"
            );
            layer.queue.enqueue(&owner, Trigger::Resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("x", "y").with_code(code)))
    }

    #[test]
    fn failures() {
        let cases = [
            (
                watcher::Error::InitialListFailed(api(503)),
                Failure::Unavailable,
            ),
            (
                watcher::Error::WatchStartFailed(api(404)),
                Failure::NotServed,
            ),
            (watcher::Error::WatchFailed(api(403)), Failure::Other),
            (
                watcher::Error::InitialListFailed(api(429)),
                Failure::Unavailable,
            ),
            (
                watcher::Error::WatchError(Box::new(
                    Status::failure("gone", "Expired").with_code(410),
                )),
                Failure::Expired,
            ),
            (
                watcher::Error::InitialListFailed(api(410)),
                Failure::Expired,
            ),
            (watcher::Error::NoResourceVersion, Failure::Other),
            (
                watcher::Error::InitialListFailed(kube::Error::LinesCodecMaxLineLengthExceeded),
                Failure::Unavailable,
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(classify(&error), expected, "{error}");
        }
    }
}
