//! The cluster's collectors, as kube-controller-manager and kube-apiserver run them: the
//! garbage collector over ownerReferences (background, foreground and orphan deletion), the
//! namespace controller (a terminating namespace's contents go, then the namespace) and the
//! CRD cleanup (a deleted CRD's objects go, then the CRD). They run asynchronously, reacting
//! to store events, and write through the store like any other client.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::crd::CLEANUP_FINALIZER;
use crate::meta;
use crate::resources::ResourceType;
use crate::store::{
    DeleteOptions, EventType, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, Store,
    StoreEvent, Subresource,
};

/// Runs the collectors of one store until `shutdown`.
pub fn spawn(store: Store, shutdown: CancellationToken) -> JoinHandle<()> {
    let mut events = store.subscribe();
    tokio::spawn(async move {
        let collector = Collector { store };
        collector.resync();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                event = events.recv() => match event {
                    Ok(event) => collector.on_event(&event),
                    // Missed events: look at everything again.
                    Err(RecvError::Lagged(_)) => collector.resync(),
                    Err(RecvError::Closed) => break,
                },
            }
        }
    })
}

/// What an owner reference points at right now.
enum OwnerState {
    /// Exists and is not being deleted with a collector's finalizer.
    Solid,
    /// Being deleted in the foreground: its dependents must go first.
    Waiting,
    /// Being deleted with orphaning: its dependents stay (the orphan step unlinks them).
    Orphaning,
    /// Gone (or replaced by an object with another UID).
    Absent,
}

fn is_kind(rt: &ResourceType, group: &str, kind: &str) -> bool {
    rt.group == group && rt.kind == kind
}

fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    meta::finalizers(object).iter().any(|f| f == finalizer)
}

/// Borrowed, not copied: the collector looks at the references of every change.
fn owner_refs(object: &Value) -> &[Value] {
    object["metadata"]["ownerReferences"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

struct Collector {
    store: Store,
}

impl Collector {
    fn resync(&self) {
        for (rt, object) in self.store.all_objects() {
            self.on_object(&rt, &object);
            if !owner_refs(&object).is_empty() {
                self.collect_dependent(&rt, &object);
            }
        }
    }

    fn on_event(&self, event: &StoreEvent) {
        let rt = &event.resource;
        let object = &event.object;
        match event.event_type {
            EventType::Deleted => {
                for (dep_rt, dependent) in self.store.dependents_of(meta::uid(object)) {
                    self.collect_dependent(&dep_rt, &dependent);
                }
                // Owners waiting in the foreground may now be free.
                for owner in owner_refs(object) {
                    if let Some(uid) = owner["uid"].as_str() {
                        self.recheck_owner(uid);
                    }
                }
                if let Some(ns) = meta::namespace(object) {
                    self.namespace_step(ns);
                }
                if rt.is_custom() {
                    self.crd_step(&format!("{}.{}", rt.plural, rt.group));
                }
            }
            EventType::Added | EventType::Modified => {
                self.on_object(rt, object);
                let old_refs = event
                    .old_object
                    .as_deref()
                    .map(owner_refs)
                    .unwrap_or_default();
                let refs = owner_refs(object);
                if refs != old_refs {
                    if !refs.is_empty() {
                        self.collect_dependent(rt, object);
                    }
                    for owner in old_refs {
                        if let Some(uid) = owner["uid"].as_str() {
                            self.recheck_owner(uid);
                        }
                    }
                }
            }
        }
    }

    /// The stored state of an object seen in an event or a snapshot, if it still exists:
    /// decisions are taken on what is stored now, never on a stale copy.
    fn fresh(&self, rt: &ResourceType, seen: &Value) -> Option<Arc<Value>> {
        let current = self
            .store
            .get_shared(rt, meta::namespace(seen), meta::name(seen))
            .ok()?;
        (meta::uid(&current) == meta::uid(seen)).then_some(current)
    }

    /// The steps an object being deleted needs from the collectors.
    fn on_object(&self, rt: &ResourceType, seen: &Value) {
        if !meta::is_deleting(seen) {
            return;
        }
        let Some(object) = self.fresh(rt, seen) else {
            return;
        };
        let object = &object;
        if has_finalizer(object, ORPHAN_FINALIZER) {
            self.orphan_step(rt, object);
        } else if has_finalizer(object, FOREGROUND_FINALIZER) {
            self.foreground_step(rt, object);
        }
        if is_kind(rt, "", "Namespace") {
            self.namespace_step(meta::name(object));
        }
        if is_kind(rt, "apiextensions.k8s.io", "CustomResourceDefinition")
            && has_finalizer(object, CLEANUP_FINALIZER)
        {
            self.crd_step(meta::name(object));
        }
    }

    fn recheck_owner(&self, uid: &str) {
        if let Some((rt, owner)) = self.store.get_by_uid(uid) {
            self.on_object(&rt, &owner);
        }
    }

    fn owner_state(&self, owner_ref: &Value) -> OwnerState {
        let Some(uid) = owner_ref["uid"].as_str() else {
            return OwnerState::Absent;
        };
        let Some((rt, owner)) = self.store.get_by_uid(uid) else {
            return OwnerState::Absent;
        };
        let same = owner_ref["kind"].as_str() == Some(rt.kind.as_str())
            && owner_ref["name"].as_str() == Some(meta::name(&owner))
            && group_of(owner_ref["apiVersion"].as_str().unwrap_or_default()) == rt.group;
        if !same {
            return OwnerState::Absent;
        }
        if meta::is_deleting(&owner) {
            if has_finalizer(&owner, FOREGROUND_FINALIZER) {
                return OwnerState::Waiting;
            }
            if has_finalizer(&owner, ORPHAN_FINALIZER) {
                return OwnerState::Orphaning;
            }
        }
        OwnerState::Solid
    }

    /// A dependent whose owners are all gone is deleted (in the foreground when an owner
    /// waits for it); references to owners that are gone are dropped when others remain.
    fn collect_dependent(&self, rt: &ResourceType, seen: &Value) {
        let Some(object) = self.fresh(rt, seen) else {
            return;
        };
        let object = &object;
        let refs = owner_refs(object);
        if refs.is_empty() || meta::is_deleting(object) {
            return;
        }
        let states: Vec<OwnerState> = refs.iter().map(|r| self.owner_state(r)).collect();
        let solid = states
            .iter()
            .any(|s| matches!(s, OwnerState::Solid | OwnerState::Orphaning));
        let waiting = states.iter().any(|s| matches!(s, OwnerState::Waiting));
        let absent: Vec<&str> = refs
            .iter()
            .zip(&states)
            .filter(|(_, s)| matches!(s, OwnerState::Absent))
            .filter_map(|(r, _)| r["uid"].as_str())
            .collect();
        let ns = meta::namespace(object);
        let name = meta::name(object);
        if solid {
            if !absent.is_empty() {
                let absent: Vec<String> = absent.iter().map(|s| s.to_string()).collect();
                self.remove_owner_refs(rt, ns, name, &absent);
            }
            return;
        }
        let propagation = if waiting {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        let options = DeleteOptions {
            propagation: Some(propagation),
            precondition_uid: Some(meta::uid(object).to_string()),
            ..DeleteOptions::default()
        };
        if let Err(error) = self.store.delete_with(rt, ns, name, &options) {
            tracing::debug!(%error, name, "garbage collector could not delete a dependent");
        }
    }

    fn remove_owner_refs(&self, rt: &ResourceType, ns: Option<&str>, name: &str, uids: &[String]) {
        let result = self
            .store
            .modify(rt, ns, name, Subresource::Main, |object| {
                let kept: Vec<Value> = owner_refs(object)
                    .iter()
                    .filter(|r| {
                        !r["uid"]
                            .as_str()
                            .is_some_and(|u| uids.iter().any(|x| x == u))
                    })
                    .cloned()
                    .collect();
                let value = (!kept.is_empty()).then(|| Value::Array(kept));
                meta::set_metadata_field(object, "ownerReferences", value);
            });
        if let Err(error) = result {
            tracing::debug!(%error, name, "garbage collector could not drop owner references");
        }
    }

    fn remove_finalizer(&self, rt: &ResourceType, object: &Value, finalizer: &str) {
        let result = self.store.modify(
            rt,
            meta::namespace(object),
            meta::name(object),
            Subresource::Main,
            |o| {
                let mut finalizers = meta::finalizers(o);
                finalizers.retain(|f| f != finalizer);
                meta::set_finalizers(o, &finalizers);
            },
        );
        if let Err(error) = result {
            tracing::debug!(%error, finalizer, "collector could not remove a finalizer");
        }
    }

    /// Foreground: delete the dependents, and release the owner once none that blocks it is
    /// left.
    fn foreground_step(&self, rt: &ResourceType, owner: &Value) {
        let uid = meta::uid(owner);
        let dependents = self.store.dependents_of(uid);
        let mut blocking = false;
        for (dep_rt, dependent) in &dependents {
            if !meta::is_deleting(dependent) {
                self.collect_dependent(dep_rt, dependent);
            }
            blocking |= owner_refs(dependent).iter().any(|r| {
                r["uid"].as_str() == Some(uid) && r["blockOwnerDeletion"].as_bool() == Some(true)
            });
        }
        if !blocking {
            self.remove_finalizer(rt, owner, FOREGROUND_FINALIZER);
        }
    }

    /// Orphan: unlink every dependent, then release the owner.
    fn orphan_step(&self, rt: &ResourceType, owner: &Value) {
        let uid = meta::uid(owner).to_string();
        for (dep_rt, dependent) in self.store.dependents_of(&uid) {
            self.remove_owner_refs(
                &dep_rt,
                meta::namespace(&dependent),
                meta::name(&dependent),
                std::slice::from_ref(&uid),
            );
        }
        self.remove_finalizer(rt, owner, ORPHAN_FINALIZER);
    }

    /// A terminating namespace: delete what is in it; once empty, finalize it.
    fn namespace_step(&self, name: &str) {
        let Some(namespaces) = self.store.resource_type("", "Namespace") else {
            return;
        };
        let Ok(namespace) = self.store.get(&namespaces, None, name) else {
            return;
        };
        if !meta::is_deleting(&namespace) {
            return;
        }
        let contents = self.store.namespace_contents(name);
        for (rt, object) in &contents {
            if meta::is_deleting(object) {
                continue;
            }
            let options = DeleteOptions {
                propagation: Some(Propagation::Background),
                ..DeleteOptions::default()
            };
            if let Err(error) = self
                .store
                .delete_with(rt, Some(name), meta::name(object), &options)
            {
                tracing::debug!(%error, namespace = name, "namespace controller could not delete");
            }
        }
        if self.store.namespace_contents(name).is_empty()
            && let Err(error) = self.store.finalize_namespace(name)
        {
            tracing::debug!(%error, namespace = name, "namespace controller could not finalize");
        }
    }

    /// A deleted CRD: delete its objects; once none is left, let the CRD go.
    fn crd_step(&self, crd_name: &str) {
        let Some(crds) = self
            .store
            .resource_type("apiextensions.k8s.io", "CustomResourceDefinition")
        else {
            return;
        };
        let Ok(crd_object) = self.store.get(&crds, None, crd_name) else {
            return;
        };
        if !meta::is_deleting(&crd_object) {
            return;
        }
        let Some(rt) = self.store.crd_types(crd_name).into_iter().next() else {
            let _ = self.store.finalize_crd(crd_name);
            return;
        };
        let Ok((objects, _)) = self.store.list(&rt, None, None, None) else {
            return;
        };
        for object in &objects {
            if meta::is_deleting(object) {
                continue;
            }
            let options = DeleteOptions {
                propagation: Some(Propagation::Background),
                ..DeleteOptions::default()
            };
            if let Err(error) =
                self.store
                    .delete_with(&rt, meta::namespace(object), meta::name(object), &options)
            {
                tracing::debug!(%error, crd = crd_name, "CRD cleanup could not delete an object");
            }
        }
        let remaining = self
            .store
            .list(&rt, None, None, None)
            .map(|(o, _)| o.len())
            .unwrap_or(0);
        if remaining == 0
            && let Err(error) = self.store.finalize_crd(crd_name)
        {
            tracing::debug!(%error, crd = crd_name, "CRD cleanup could not finalize");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    /// Waits for `check` to hold, re-checking on every store change, up to a deadline.
    async fn until(store: &Store, what: &str, mut check: impl FnMut() -> bool) {
        let mut events = store.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !check() {
            let next = tokio::time::timeout_at(deadline, events.recv()).await;
            assert!(next.is_ok(), "timed out waiting for {what}");
        }
    }

    fn setup() -> (Store, ResourceType, ResourceType, Value, CancellationToken) {
        let store = Store::default();
        let deploy = store
            .resource_type("apps", "Deployment")
            .expect("deployments");
        let rs = store
            .resource_type("apps", "ReplicaSet")
            .expect("replicasets");
        let owner = store
            .create(
                &deploy,
                Some("default"),
                json!({"metadata": {"name": "web"}, "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
            )
            .expect("owner");
        let owner_ref = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
            "uid": meta::uid(&owner), "controller": true, "blockOwnerDeletion": true}]);
        store
            .create(
                &rs,
                Some("default"),
                json!({"metadata": {"name": "web-1", "ownerReferences": owner_ref}, "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
            )
            .expect("dependent");
        let shutdown = CancellationToken::new();
        spawn(store.clone(), shutdown.clone());
        (store, deploy, rs, owner, shutdown)
    }

    #[tokio::test]
    async fn background_deletes_dependents_after_the_owner() {
        let (store, deploy, rs, _, shutdown) = setup();
        store
            .delete(&deploy, Some("default"), "web", Propagation::Background)
            .expect("deleted");
        until(&store, "dependent collected", || {
            store.get(&rs, Some("default"), "web-1").is_err()
        })
        .await;
        shutdown.cancel();
    }

    #[tokio::test]
    async fn foreground_waits_for_blocking_dependents() {
        let (store, deploy, rs, _, shutdown) = setup();
        let pending = store
            .delete(&deploy, Some("default"), "web", Propagation::Foreground)
            .expect("deleting");
        assert!(has_finalizer(&pending, FOREGROUND_FINALIZER));
        until(&store, "owner released", || {
            store.get(&deploy, Some("default"), "web").is_err()
        })
        .await;
        assert!(
            store.get(&rs, Some("default"), "web-1").is_err(),
            "dependent went first"
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn orphan_keeps_dependents_without_the_reference() {
        let (store, deploy, rs, _, shutdown) = setup();
        store
            .delete(&deploy, Some("default"), "web", Propagation::Orphan)
            .expect("deleting");
        until(&store, "owner gone", || {
            store.get(&deploy, Some("default"), "web").is_err()
        })
        .await;
        let dependent = store
            .get(&rs, Some("default"), "web-1")
            .expect("orphan kept");
        assert!(owner_refs(&dependent).is_empty());
        shutdown.cancel();
    }

    #[tokio::test]
    async fn namespace_deletion_empties_it_first() {
        let store = Store::default();
        let shutdown = CancellationToken::new();
        spawn(store.clone(), shutdown.clone());
        let ns = store.resource_type("", "Namespace").expect("namespaces");
        let cm = store.resource_type("", "ConfigMap").expect("configmaps");
        store
            .create(&ns, None, json!({"metadata": {"name": "team"}}))
            .expect("namespace");
        store
            .create(&cm, Some("team"), json!({"metadata": {"name": "c"}}))
            .expect("content");
        let terminating = store
            .delete(&ns, None, "team", Propagation::Background)
            .expect("deleting");
        assert_eq!(terminating["status"]["phase"], "Terminating");
        until(&store, "namespace gone", || {
            store.get(&ns, None, "team").is_err()
        })
        .await;
        assert!(store.get(&cm, Some("team"), "c").is_err());
        shutdown.cancel();
    }
}
