//! What the collectors and controllers ask of the store: objects by UID, dependents,
//! namespace contents, and finalizing namespaces and CRDs.

use super::*;

impl Store {
    /// The object with this UID and its resource type, if it exists.
    pub fn get_by_uid(&self, uid: &str) -> Option<(ResourceType, Arc<Value>)> {
        let state = self.lock();
        let (key, ns, name) = state.by_uid.get(uid)?;
        let rt = state.registry.by_storage_key(key)?;
        let object = state
            .objects
            .get(key)?
            .get(&(ns.clone(), name.clone()))
            .cloned()?;
        Some((rt, object))
    }

    /// Objects whose ownerReferences name this UID.
    pub fn dependents_of(&self, uid: &str) -> Vec<(ResourceType, Arc<Value>)> {
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
                    .get(&(ns.clone(), name.clone()))
                    .cloned()?;
                Some((rt, object))
            })
            .collect()
    }

    /// Every stored object of every type (for the collectors' full resyncs).
    pub fn all_objects(&self) -> Vec<(ResourceType, Arc<Value>)> {
        let state = self.lock();
        let mut all = Vec::new();
        for (key, objects) in &state.objects {
            if let Some(rt) = state.registry.by_storage_key(key) {
                all.extend(objects.values().map(|o| (rt.clone(), Arc::clone(o))));
            }
        }
        all
    }

    /// Objects of every namespaced type in one namespace.
    pub fn namespace_contents(&self, namespace: &str) -> Vec<(ResourceType, Arc<Value>)> {
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
                    .map(|(_, v)| (rt.clone(), Arc::clone(v))),
            );
        }
        contents
    }

    /// The namespace controller's last step: drop `spec.finalizers` of a terminating, empty
    /// namespace, which removes it.
    pub fn finalize_namespace(&self, name: &str) -> Result<(), ApiError> {
        let mut state = self.lock();
        let Some((namespaces, namespace)) =
            state.terminating(("", "Namespace", "namespaces"), name)?
        else {
            return Ok(());
        };
        if meta::finalizers(&namespace).is_empty() {
            state.remove(&namespaces, "", name);
        } else {
            let mut next = Arc::unwrap_or_clone(namespace);
            next["spec"] = json!({});
            state.put(&namespaces, next);
        }
        Ok(())
    }

    /// The CRD controller's last step: forget the types of a CRD whose objects are gone and
    /// drop its cleanup finalizer.
    pub fn finalize_crd(&self, name: &str) -> Result<(), ApiError> {
        let mut state = self.lock();
        let Some((crds, crd_object)) = state.terminating(
            ("apiextensions.k8s.io", "CustomResourceDefinition", "CRDs"),
            name,
        )?
        else {
            return Ok(());
        };
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
            let mut next = Arc::unwrap_or_clone(crd_object);
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

impl State {
    /// The cluster-scoped object `name` of `(group, kind, plural for messages)` and its type,
    /// if it exists and is being deleted: what a finalizing controller works on.
    fn terminating(
        &self,
        (group, kind, plural): (&str, &str, &str),
        name: &str,
    ) -> Result<Option<(ResourceType, Arc<Value>)>, ApiError> {
        let rt = self
            .registry
            .by_kind(group, kind)
            .ok_or_else(|| ApiError::internal(format!("{plural} are not served")))?;
        Ok(self
            .get(&rt, "", name)
            .filter(|object| meta::is_deleting(object))
            .cloned()
            .map(|object| (rt, object)))
    }
}
