//! Writes: create, update (main resource and status), modify and upsert, with the checks,
//! defaults and field-manager bookkeeping each goes through.

use rand::Rng as _;

use super::*;

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

impl Store {
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
            .map(Arc::unwrap_or_clone)
    }

    pub(super) fn create_locked(
        state: &mut State,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
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
        crate::typed::as_stored(rt, &mut object);
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
            return Ok(Arc::new(object));
        }
        let stored = state.put(rt, object);
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            state.establish_crd(rt, &stored);
        }
        Ok(stored)
    }

    /// Replaces the main resource; `status` is kept from the stored object when the type has
    /// a status subresource.
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.update_with(
            rt,
            namespace,
            object,
            Subresource::Main,
            &WriteOptions::default(),
        )
    }

    /// Writes only `status` (the status subresource).
    pub fn update_status(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.update_with(
            rt,
            namespace,
            object,
            Subresource::Status,
            &WriteOptions::default(),
        )
    }

    /// A PUT of the main resource or of `status`, as the request's `options` say.
    pub fn update_with(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        object: Value,
        subresource: Subresource,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        Self::update_locked(
            &mut self.lock(),
            rt,
            namespace,
            object,
            subresource,
            options,
        )
        .map(Arc::unwrap_or_clone)
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
            .map(|stored| Value::clone(stored))
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
        .map(Arc::unwrap_or_clone)
    }

    /// The scheduler's binding of a Pod to `node` (`pods/binding`): the only way a Pod's
    /// `spec.nodeName` is set, since no update of a Pod may change it. Like kube-apiserver's
    /// binding it writes the stored Pod directly (no update validation, no managedFields entry),
    /// and refuses a Pod that is being deleted, already bound or held by scheduling gates.
    pub fn bind_pod(&self, namespace: &str, name: &str, node: &str) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let rt = state
            .registry
            .by_kind("", "Pod")
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        let mut pod = state
            .get(&rt, namespace, name)
            .map(|stored| Value::clone(stored))
            .ok_or_else(|| ApiError::not_found(&rt, name))?;
        let bound_to = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let refusal = if meta::is_deleting(&pod) {
            Some(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            ))
        } else if !bound_to.is_empty() {
            Some(format!(
                "pod {name} is already assigned to node {bound_to:?}"
            ))
        } else if pod["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|gates| !gates.is_empty())
        {
            Some(format!("pod {name} has non-empty .spec.schedulingGates"))
        } else {
            None
        };
        if let Some(why) = refusal {
            return Err(ApiError::conflict_because(&rt, name, &why));
        }
        pod["spec"]["nodeName"] = Value::String(node.to_string());
        Ok(Arc::unwrap_or_clone(state.put(&rt, pod)))
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
            .map(Arc::unwrap_or_clone)
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
        let changed = change(current.as_deref())?;
        let written = match current {
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
                // A resourceVersion in an apply that creates is a precondition that had nothing
                // to meet: kube-apiserver ignores it (the uid, refused before, is its own).
                let mut changed = changed;
                meta::set_metadata_field(&mut changed, "resourceVersion", None);
                Self::create_locked(&mut state, rt, namespace, changed, &create_options)
            }
        };
        written.map(Arc::unwrap_or_clone)
    }

    fn update_locked(
        state: &mut State,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        subresource: Subresource,
        options: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
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
                let mut next = Value::clone(&old);
                match object.get("status") {
                    Some(status) => next["status"] = status.clone(),
                    None => {
                        if let Some(map) = next.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
                crate::schema::default_and_prune(rt, &mut next);
                strategy::status_keeps_metadata(rt, &object, &mut next);
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
        crate::typed::as_stored(rt, &mut next);
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
        if subresource == Subresource::Main {
            strategy::count_template_changes(rt, &old, &mut next);
        }
        // A status update never makes a new generation (the status strategies keep the spec).
        if rt.tracks_generation()
            && subresource == Subresource::Main
            && strategy::generation_changed(rt, &old, &next)
        {
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
        // With the old resourceVersion set, an update that changes nothing equals the old
        // object (compared in place: copies of both without it were a good part of a write).
        if next == *old {
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
            return Ok(Arc::new(next));
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
            return Ok(Arc::new(next));
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
}
