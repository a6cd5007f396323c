//! Deletion: preconditions, finalizers and propagation, and deleting a collection.

use super::*;

impl Store {
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
        // Checked as kube-apiserver's `rest.BeforeDelete` does, before anything else: a
        // conflict naming the Kind (`ConfigMap`, `Deployment.apps`), uid first.
        if let Some(uid) = &options.precondition_uid
            && uid != meta::uid(&old)
        {
            return Err(ApiError::precondition_failed(
                rt,
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). \
                     The object might have been deleted and then recreated",
                    meta::uid(&old)
                ),
            ));
        }
        if let Some(rv) = &options.precondition_resource_version
            && rv != meta::resource_version(&old)
        {
            return Err(ApiError::precondition_failed(
                rt,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the \
                     ResourceVersion in record ({}). The object might have been modified",
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
                return Ok(Deletion::Pending(Arc::unwrap_or_clone(old)));
            };
            finalizers.retain(|f| f != FOREGROUND_FINALIZER && f != ORPHAN_FINALIZER);
            finalizers.push(wanted.to_string());
            let mut next = Value::clone(&old);
            meta::set_finalizers(&mut next, &finalizers);
            if options.dry_run {
                return Ok(Deletion::Pending(next));
            }
            return Ok(Deletion::Pending(Arc::unwrap_or_clone(state.put(rt, next))));
        }
        if let Some(wanted) = wanted
            && !finalizers.iter().any(|f| f == wanted)
        {
            finalizers.push(wanted.to_string());
        }
        if finalizers.is_empty() && !Self::holds_namespace_finalizer(rt, &old) {
            if options.dry_run {
                return Ok(Deletion::Deleted(Arc::unwrap_or_clone(old)));
            }
            let removed = state
                .remove(rt, &ns, name)
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
                state.registry.unregister_crd(name);
            }
            return Ok(Deletion::Deleted(Arc::unwrap_or_clone(removed)));
        }
        let mut next = Value::clone(&old);
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
        Ok(Deletion::Pending(Arc::unwrap_or_clone(state.put(rt, next))))
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
}
