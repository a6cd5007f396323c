//! Reads of many: lists, pages and their continue tokens.

use base64::Engine as _;

use super::*;

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

impl Store {
    /// The objects of a type in a namespace (all namespaces with `None`), sorted by
    /// namespace and name, with the list's resourceVersion.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<(Vec<Value>, String), ApiError> {
        let (items, resource_version) =
            self.list_shared(rt, namespace, label_selector, field_selector)?;
        Ok((
            items.into_iter().map(Arc::unwrap_or_clone).collect(),
            resource_version,
        ))
    }

    /// [`Store::list`] of the stored objects themselves, shared rather than copied, for
    /// readers that do not change them (the simulated controllers list on every change).
    pub fn list_shared(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<(Vec<Arc<Value>>, String), ApiError> {
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
        let snapshot: BTreeMap<ObjectKey, Arc<Value>> = if changed_since {
            let mut objects: BTreeMap<ObjectKey, Arc<Value>> = state
                .objects
                .get(&key)
                .map(|o| {
                    o.iter()
                        .filter(|(k, _)| in_scope(k))
                        .map(|(k, v)| (k.clone(), Arc::clone(v)))
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
                        objects.insert(object_key, Arc::clone(old));
                    }
                    (_, None) => {}
                }
            }
            objects
        } else {
            BTreeMap::new()
        };
        let current = state.objects.get(&key);
        let narrowed = match (namespace.filter(|_| rt.namespaced), &options.label_selector) {
            (Some(ns), Some(selector)) if !changed_since => state.labelled(&key, ns, selector),
            _ => None,
        };
        let source: Box<dyn Iterator<Item = (&ObjectKey, &Arc<Value>)>> = if changed_since {
            Box::new(snapshot.iter())
        } else if let Some(narrowed) = narrowed {
            Box::new(narrowed.into_iter())
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
            items.push(Arc::clone(object));
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
}
