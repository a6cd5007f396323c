//! Rendering one manifest (reference §4.1); the digest it stamps is [`digest`](crate::engine::digest).
//!
//! Rendering works on a copy: the class's manifest is never changed. The result is a
//! [`RenderedItem`]: the object to apply (labelled, namespaced, apiVersion filled, digest
//! annotation set) and the record reconcile, prune and status work with.

use comb_api::names::{namespace_problem, object_name_problem};
use comb_api::{ManagedObject, group_of};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

use crate::engine::context::CombContext;
use crate::engine::digest::applied_digest;
use crate::engine::kinds::{Scopes, default_api_version, known_scope, workload_templates};
use crate::engine::values::describe_value;
use crate::error::{Error, Result};

/// When the change an EndpointSlice carries was triggered, as the EndpointSlice controller
/// stamps it: kube-proxy's `network_programming_duration_seconds` measures from it to the rules
/// being programmed. comb stamps the EndpointSlices it writes (its bridges') at render time,
/// after the digest, so an unchanged slice is neither rewritten nor re-stamped
/// ([`crate::engine::deploy::unchanged`] looks past it) and a changed one says when comb
/// wrote the change: kube-proxy's part of a switch, apart from comb's.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// One rendered manifest and what the engine needs to know about it.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedItem {
    /// The object to apply.
    pub manifest: Value,
    pub api_version: String,
    pub kind: String,
    /// `""` for the core group.
    pub group: String,
    pub name: String,
    /// `None` for cluster-scoped Kinds.
    pub namespace: Option<String>,
    /// `sha256:<hex>`, also in the manifest's digest annotation.
    pub digest: String,
    /// Whether the Kind has Pod templates (or is a Pod).
    pub workload: bool,
}

impl RenderedItem {
    /// `<apiVersion>/<Kind>`, e.g. `apps/v1/Deployment`: how requests and sorting key the type.
    pub fn resource_id(&self) -> String {
        format!("{}/{}", self.api_version, self.kind)
    }

    /// Whether the static table of built-in Kinds placed it: rendering asked discovery nothing
    /// for it, whose answer for a custom Kind may change (a CRD installed later).
    pub fn placed_without_discovery(&self) -> bool {
        known_scope(&self.group, &self.kind).is_some()
    }

    /// The entry of `status.managedResources` for this item.
    pub fn resource(&self) -> ManagedObject {
        ManagedObject {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: None,
        }
    }

    /// Whether `comb restart` annotates this item's Pod template (a Deployment, StatefulSet or
    /// DaemonSet): comb's apply leaves that annotation to the restart, including when it
    /// takes over an object an older comb replaced.
    pub fn keeps_restarts(&self) -> bool {
        self.group == "apps"
            && matches!(
                self.kind.as_str(),
                "Deployment" | "StatefulSet" | "DaemonSet"
            )
    }
}

/// Renders one manifest of `class` for the Comb of `ctx`: shape checks, the Comb's labels (they
/// win over the manifest's), apiVersion, labels on Pod templates, namespace (only for a Kind
/// `scopes` calls namespaced: a cluster-scoped object keeps none), digest.
pub fn render_manifest(
    class: &str,
    manifest: &Value,
    ctx: &CombContext,
    scopes: &Scopes,
) -> Result<RenderedItem> {
    let fail = |message: String| Error::manifests(format!("{class}: {message}"));
    let Value::Object(source) = manifest else {
        return Err(fail(format!(
            "a manifest is an object, got {}",
            describe_value(manifest)
        )));
    };
    let kind =
        non_empty_str(source.get("kind")).ok_or_else(|| fail("a manifest has no kind".into()))?;
    let name = non_empty_str(source.get("metadata").and_then(|m| m.get("name")))
        .ok_or_else(|| fail(format!("manifest {kind} has no metadata.name")))?;
    let (kind, name) = (kind.to_string(), name.to_string());

    let mut object = source.clone();
    let labels = ctx.comb_labels();
    merge_labels(&mut object, &labels);

    let api_version = match non_empty_str(object.get("apiVersion")) {
        Some(api_version) => api_version.to_string(),
        None => {
            let filled = default_api_version(&kind, &ctx.settings.group).ok_or_else(|| {
                fail(format!(
                    "manifest {kind} has no apiVersion, and {kind} is no Kind comb knows"
                ))
            })?;
            object.insert("apiVersion".into(), Value::String(filled.clone()));
            filled
        }
    };
    let group = group_of(&api_version).to_string();
    // The name goes into the path of every request about the object.
    if let Some(problem) = object_name_problem(&group, &name) {
        return Err(fail(format!("manifest {kind} {name}: the name {problem}")));
    }

    let templates = workload_templates(&group, &kind);
    for path in templates.unwrap_or_default() {
        if let Some(template) = object_at_path(&mut object, path) {
            merge_labels(template, &labels);
        }
    }

    let namespace = if scopes.is_namespaced(&api_version, &group, &kind) {
        // Its own namespace, else the Comb's.
        let namespace = non_empty_str(object.get("metadata").and_then(|m| m.get("namespace")))
            .unwrap_or(&ctx.namespace)
            .to_string();
        if let Some(problem) = namespace_problem(&namespace) {
            return Err(fail(format!(
                "manifest {kind} {name}: the namespace {problem}"
            )));
        }
        update_object(&mut object, "metadata", |metadata| {
            metadata.insert("namespace".into(), Value::String(namespace.clone()));
        });
        Some(namespace)
    } else {
        if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
            metadata.remove("namespace");
        }
        None
    };

    let digest_annotation = ctx.settings.labels.digest_annotation();
    let digest = applied_digest(&object, digest_annotation);
    let endpoint_slice = group == "discovery.k8s.io" && kind == "EndpointSlice";
    update_object(&mut object, "metadata", |metadata| {
        update_object(metadata, "annotations", |annotations| {
            annotations.insert(digest_annotation.to_string(), Value::String(digest.clone()));
            if endpoint_slice && !annotations.contains_key(TRIGGER_TIME_ANNOTATION) {
                annotations.insert(
                    TRIGGER_TIME_ANNOTATION.to_string(),
                    Value::String(trigger_time(jiff::Timestamp::now())),
                );
            }
        })
    });

    Ok(RenderedItem {
        manifest: Value::Object(object),
        api_version,
        kind,
        group,
        name,
        namespace,
        digest,
        workload: templates.is_some(),
    })
}

/// A trigger time as Kubernetes writes it (RFC 3339 with nanoseconds, UTC), which kube-proxy
/// parses.
pub fn trigger_time(at: jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S%.fZ").to_string()
}

fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    value
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
}

/// Runs `change` on `map[key]` as an object; a missing or non-object value starts as `{}`. The
/// key keeps its position.
fn update_object(
    map: &mut Map<String, Value>,
    key: &str,
    change: impl FnOnce(&mut Map<String, Value>),
) {
    let mut inner = match map.get_mut(key) {
        Some(Value::Object(inner)) => std::mem::take(inner),
        _ => Map::new(),
    };
    change(&mut inner);
    map.insert(key.to_string(), Value::Object(inner));
}

/// The object at `path`, or `None` when a step is missing or no object (left alone).
fn object_at_path<'a>(
    map: &'a mut Map<String, Value>,
    path: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let (first, rest) = path.split_first()?;
    let next = map.get_mut(*first)?.as_object_mut()?;
    if rest.is_empty() {
        Some(next)
    } else {
        object_at_path(next, rest)
    }
}

/// Merges `labels` into `object.metadata.labels`; the Comb's labels win over equal keys.
fn merge_labels(object: &mut Map<String, Value>, labels: &BTreeMap<String, String>) {
    update_object(object, "metadata", |metadata| {
        update_object(metadata, "labels", |target| {
            for (key, value) in labels {
                target.insert(key.clone(), Value::String(value.clone()));
            }
        })
    });
}

/// The rendered items as the tenancy's [`endpoint_refusals`] reads them: each identity with
/// its manifest, in manifest order.
///
/// [`endpoint_refusals`]: crate::engine::tenancy::endpoint_refusals
pub fn identified(items: &[RenderedItem]) -> Vec<(ManagedObject, &Value)> {
    items
        .iter()
        .map(|item| (item.resource(), &item.manifest))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::context::test_context;
    use crate::engine::digest::canonical_json;
    use crate::engine::kinds::Scopes;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nats"},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "nats"}},
                        "template": {"metadata": {"labels": {"app": "nats"}},
                                     "spec": {"containers": [{"name": "nats", "image": "nats:2.10"}]}}}})
    }

    fn with(mut manifest: Value, pointer: &str, value: Value) -> Value {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            &mut manifest
        } else {
            manifest.pointer_mut(parent).unwrap()
        };
        target
            .as_object_mut()
            .unwrap()
            .insert(key.to_string(), value);
        manifest
    }

    fn without(mut manifest: Value, key: &str) -> Value {
        manifest.as_object_mut().unwrap().remove(key);
        manifest
    }

    /// Expected digests computed by an independent implementation of §4.2 (Perl, JSON::PP
    /// canonical + Digest::SHA, every leaf stringified), not by this code.
    const BASE: &str = "sha256:f5dd8ae7502bb7ecc32f85072cb1af3bba0ed147c7a6732da4784efeab426116";

    #[test]
    fn digest_vectors() {
        let cases = [
            ("plain", deployment(), "platform", BASE),
            (
                "replicas as a string",
                with(deployment(), "/spec/replicas", json!("2")),
                "platform",
                BASE,
            ),
            (
                "a stale digest annotation",
                with(
                    deployment(),
                    "/metadata/annotations",
                    json!({"comb.internal/applied-digest": "sha256:stale"}),
                ),
                "platform",
                BASE,
            ),
            (
                "apiVersion filled in",
                without(deployment(), "apiVersion"),
                "platform",
                BASE,
            ),
            (
                "labels the manifest claims are overridden",
                with(
                    deployment(),
                    "/metadata/labels",
                    json!({"comb.internal/comb": "other", "app.kubernetes.io/managed-by": "helm"}),
                ),
                "platform",
                BASE,
            ),
            (
                "an added annotation",
                with(
                    deployment(),
                    "/metadata/annotations",
                    json!({"team": "core"}),
                ),
                "platform",
                "sha256:75f3d1364d4ba18a558102b139f760879e314a2d8c5b1541981415e2aeba78a0",
            ),
            (
                "another namespace",
                deployment(),
                "staging",
                "sha256:eb5722c6bb6013afeff1488be31778f7f33240339add4dd8689f2b70d027bd5e",
            ),
            (
                "another image",
                with(
                    deployment(),
                    "/spec/template/spec/containers",
                    json!([{"name": "nats", "image": "nats:2.11"}]),
                ),
                "platform",
                "sha256:98552ea8161125851f76d708e2cc5b4b1026bcccc5ef116904e5f312b2b93b03",
            ),
        ];
        for (what, manifest, namespace, digest) in cases {
            let item = render_manifest(
                "NATS",
                &manifest,
                &test_context("nats", namespace, json!({})),
                &Scopes::default(),
            )
            .unwrap();
            assert_eq!(item.digest, digest, "{what}");
            assert_eq!(
                item.manifest["metadata"]["annotations"]["comb.internal/applied-digest"], digest,
                "{what}"
            );
        }
    }

    #[test]
    fn canonical_json_escapes_and_numbers_like_json_xs() {
        let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "odd"},
            "spec": {"paused": false, "x": 0.5, "y": 1e20, "z": 1.25e-7, "n": null,
                     "s": "line\n\t\"q\" \\ / é ✓ \u{1}\u{1f}\u{8}\u{c}\r",
                     "k": {"b": 1, "a": [true, 2, "3"], "é": 1, "Z": 2}}});
        let item = render_manifest(
            "NATS",
            &manifest,
            &test_context("nats", "platform", json!({})),
            &Scopes::default(),
        )
        .unwrap();
        let mut digested = item.manifest.clone();
        digested["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert_eq!(
            canonical_json(&digested),
            concat!(
                r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"labels":{"app.kubernetes.io/managed-by":"comb","#,
                r#""comb.internal/comb":"nats","comb.internal/comb-namespace":"platform"},"name":"odd","namespace":"platform"},"#,
                r#""spec":{"k":{"Z":"2","a":[true,"2","3"],"b":"1","é":"1"},"n":null,"paused":false,"#,
                r#""s":"line\n\t\"q\" \\ / é ✓ \u0001\u001f\b\f\r","x":"0.5","y":"1e+20","z":"1.25e-07"}}"#
            )
        );
        assert_eq!(
            item.digest,
            "sha256:3c8bc1f17c685a4b5717efef3e4820e028b648e22899ac1697205858a5c7411f"
        );
    }

    #[test]
    fn labels_templates_and_namespaces() {
        let ctx = test_context("nats", "platform", json!({}));
        let comb_labels = json!({"comb.internal/comb": "nats", "comb.internal/comb-namespace": "platform", "app.kubernetes.io/managed-by": "comb"});
        let merged = json!({"app": "nats", "comb.internal/comb": "nats", "comb.internal/comb-namespace": "platform", "app.kubernetes.io/managed-by": "comb"});

        let item = render_manifest(
            "NATS",
            &without(deployment(), "apiVersion"),
            &ctx,
            &Scopes::default(),
        )
        .unwrap();
        assert_eq!(item.manifest["apiVersion"], "apps/v1");
        assert_eq!(item.manifest["metadata"]["labels"], comb_labels);
        assert_eq!(item.manifest["metadata"]["namespace"], "platform");
        assert_eq!(
            item.manifest["spec"]["template"]["metadata"]["labels"],
            merged
        );
        assert_eq!(
            item.manifest["spec"]["selector"],
            json!({"matchLabels": {"app": "nats"}})
        );
        assert!(
            item.manifest["spec"]["template"]["metadata"]
                .get("annotations")
                .is_none()
        );
        assert_eq!(
            (
                item.group.as_str(),
                item.namespace.as_deref(),
                item.workload,
                item.resource_id().as_str()
            ),
            ("apps", Some("platform"), true, "apps/v1/Deployment")
        );

        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "backup"},
                          "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        let item = render_manifest("NATS", &cron, &ctx, &Scopes::default()).unwrap();
        assert_eq!(
            item.manifest["spec"]["jobTemplate"]["metadata"]["labels"],
            comb_labels
        );
        assert_eq!(
            item.manifest["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"],
            comb_labels
        );

        let job_without_template =
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "init"}});
        let item =
            render_manifest("NATS", &job_without_template, &ctx, &Scopes::default()).unwrap();
        assert!(
            item.manifest.get("spec").is_none(),
            "a missing template path is left alone"
        );

        let cases = [
            (
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
                Some("platform"),
                true,
            ),
            (
                json!({"kind": "Service", "metadata": {"name": "s", "namespace": "other"}}),
                Some("other"),
                false,
            ),
            (
                json!({"kind": "Namespace", "metadata": {"name": "n"}}),
                None,
                false,
            ),
            (
                json!({"kind": "ClusterRoleBinding", "metadata": {"name": "c"}}),
                None,
                false,
            ),
            (
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
                Some("platform"),
                false,
            ),
            (
                json!({"kind": "Comb", "metadata": {"name": "child"}}),
                Some("platform"),
                false,
            ),
        ];
        for (manifest, namespace, workload) in cases {
            let item = render_manifest("NATS", &manifest, &ctx, &Scopes::default()).unwrap();
            assert_eq!(item.namespace.as_deref(), namespace, "{manifest}");
            assert_eq!(
                item.manifest["metadata"]
                    .get("namespace")
                    .and_then(Value::as_str),
                namespace,
                "{manifest}"
            );
            assert_eq!(item.workload, workload, "{manifest}");
            assert_eq!(
                item.manifest["metadata"]["labels"], comb_labels,
                "{manifest}"
            );
        }
        let comb = render_manifest(
            "NATS",
            &json!({"kind": "Comb", "metadata": {"name": "c"}}),
            &ctx,
            &Scopes::default(),
        )
        .unwrap();
        assert_eq!(comb.api_version, "comb.internal/v1");
    }

    #[test]
    fn the_class_manifest_is_not_changed_and_other_annotations_stay() {
        let manifest = with(
            deployment(),
            "/metadata/annotations",
            json!({"team": "core", "comb.internal/applied-digest": "sha256:stale"}),
        );
        let before = manifest.clone();
        let item = render_manifest(
            "NATS",
            &manifest,
            &test_context("nats", "platform", json!({})),
            &Scopes::default(),
        )
        .unwrap();
        assert_eq!(manifest, before);
        assert_eq!(
            item.manifest["metadata"]["annotations"],
            json!({"team": "core", "comb.internal/applied-digest": item.digest})
        );
    }

    #[test]
    fn only_custom_kinds_are_placed_by_discovery() {
        let ctx = test_context("nats", "platform", json!({}));
        let mut scopes = Scopes::default();
        scopes.insert("example.com/v1", "Widget", false);
        for (api_version, kind, without_discovery) in [
            ("apps/v1", "Deployment", true),
            ("v1", "Service", true),
            // Any version of a built-in group/Kind: the table knows it by group.
            ("apps/v1beta1", "Deployment", true),
            ("rbac.authorization.k8s.io/v1", "ClusterRole", true),
            ("example.com/v1", "Widget", false),
            // A Kind discovery could not tell, placed in the namespace for now.
            ("example.com/v1", "Gadget", false),
        ] {
            let manifest =
                json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
            let item = render_manifest("NATS", &manifest, &ctx, &scopes).unwrap();
            assert_eq!(
                item.placed_without_discovery(),
                without_discovery,
                "{api_version} {kind}"
            );
        }
    }

    #[test]
    fn shape_errors() {
        let ctx = test_context("nats", "platform", json!({}));
        let cases = [
            (
                json!("Deployment"),
                "NATS: a manifest is an object, got a plain scalar",
            ),
            (json!([1]), "NATS: a manifest is an object, got an array"),
            (
                json!({"metadata": {"name": "x"}}),
                "NATS: a manifest has no kind",
            ),
            (
                json!({"kind": "Deployment", "metadata": {}}),
                "NATS: manifest Deployment has no metadata.name",
            ),
            (
                json!({"kind": "Deployment"}),
                "NATS: manifest Deployment has no metadata.name",
            ),
            (
                json!({"kind": "Widget", "metadata": {"name": "w"}}),
                "NATS: manifest Widget has no apiVersion, and Widget is no Kind comb knows",
            ),
            // Names go into request paths: `db-password?x=1` would be read as `db-password`.
            (
                json!({"kind": "Secret", "metadata": {"name": "db-password?x=1"}}),
                "NATS: manifest Secret db-password?x=1: the name 'db-password?x=1' is not a \
                 Kubernetes object name (a DNS-1123 subdomain: lowercase letters, digits, - and \
                 ., alphanumeric at both ends, at most 253 characters)",
            ),
            (
                json!({"kind": "Secret", "metadata": {"name": "s", "namespace": "../kube-system"}}),
                "NATS: manifest Secret s: the namespace '../kube-system' is not a namespace name \
                 (a DNS-1123 label: lowercase letters, digits and -, alphanumeric at both ends, at \
                 most 63 characters)",
            ),
        ];
        for (manifest, message) in cases {
            let error = render_manifest("NATS", &manifest, &ctx, &Scopes::default()).unwrap_err();
            assert_eq!(error.to_string(), message);
            assert_eq!(error.category(), "manifests");
        }
    }
}
