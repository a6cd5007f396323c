//! OpenAPI v3 documents (`/openapi/v3` and one per group version). They describe every
//! served path with its operations, `x-kubernetes-group-version-kind` and the query
//! parameters (kubectl looks for `fieldValidation` on PATCH to use server-side validation),
//! and the schemas of custom resources. Built-in kinds carry no component schema, so kubectl
//! computes their patches from its compiled-in types, as it does when a schema is missing.

use serde_json::{Map, Value, json};

use crate::resources::ResourceType;

/// A short stable hash (FNV-1a) of a document, for `serverRelativeURL`'s `hash` parameter.
fn hash(text: &str) -> String {
    let value = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{value:016X}")
}

/// The path prefix of a group version: `api/v1` or `apis/apps/v1`.
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The group versions served, as `(group, version)` pairs with their document path.
pub fn group_versions(types: &[ResourceType]) -> Vec<(String, String, String)> {
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for rt in types {
        if !seen
            .iter()
            .any(|(g, v, _)| *g == rt.group && *v == rt.version)
        {
            seen.push((
                rt.group.clone(),
                rt.version.clone(),
                group_version_path(&rt.group, &rt.version),
            ));
        }
    }
    seen
}

/// The `/openapi/v3` index: one entry per group version, with a hash that changes when
/// its resource types do (so kubectl's cache notices new CRD versions and schemas).
pub fn root(types: &[ResourceType]) -> Value {
    let mut paths = Map::new();
    for (group, version, path) in group_versions(types) {
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", version_hash(types, &group, &version))}),
        );
    }
    json!({"paths": paths})
}

fn version_hash(types: &[ResourceType], group: &str, version: &str) -> String {
    let fingerprint: String = types
        .iter()
        .filter(|rt| rt.group == group && rt.version == version)
        .map(|rt| format!("{rt:?}"))
        .collect();
    hash(&fingerprint)
}

/// The hash the index gives the document at `path`, if it is served: a request with
/// another `hash` is redirected to this one, as kube-apiserver does.
pub fn document_hash(types: &[ResourceType], path: &str) -> Option<String> {
    group_versions(types)
        .into_iter()
        .find(|(_, _, p)| p == path)
        .map(|(group, version, _)| version_hash(types, &group, &version))
}

/// The content type kube-apiserver answers `/openapi/v2` with when asked for protobuf (gnostic's
/// `openapi_v2.Document`, what kubectl asks for).
pub const V2_PROTOBUF_ANSWER: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The `/openapi/v2` document as JSON: no definitions, so kubectl's client-side validation
/// (which `kubectl create -f` of a `kind: List` uses) finds no schema and leaves the checking
/// to the server, and patches fall back to its compiled-in types, as with v3.
pub fn v2_json() -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::GIT_VERSION},
        "paths": {},
        "definitions": {},
    })
}

/// The same document as protobuf: `swagger` (1) and `info` (2: `title` 1, `version` 2).
pub fn v2_protobuf() -> Vec<u8> {
    fn string(number: u8, text: &str) -> Vec<u8> {
        let mut out = vec![(number << 3) | 2];
        out.extend(varint(text.len()));
        out.extend_from_slice(text.as_bytes());
        out
    }
    fn varint(mut value: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let low = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(low);
                return out;
            }
            out.push(low | 0x80);
        }
    }
    let info = [
        string(1, "Kubernetes"),
        string(2, crate::discovery::GIT_VERSION),
    ]
    .concat();
    let mut document = string(1, "2.0");
    document.push((2 << 3) | 2);
    document.extend(varint(info.len()));
    document.extend(info);
    document
}

/// The document at a path of the index (`apis/apps/v1`), if it is served.
pub fn document(types: &[ResourceType], path: &str) -> Option<Value> {
    group_versions(types)
        .into_iter()
        .find(|(_, _, p)| p == path)
        .map(|(group, version, _)| group_version_document(&group, &version, types))
}

/// The schema name kube-apiserver uses for a kind.
pub fn schema_name(rt: &ResourceType) -> String {
    if rt.is_custom() {
        let reversed: Vec<&str> = rt.group.split('.').rev().collect();
        return format!("{}.{}.{}", reversed.join("."), rt.version, rt.kind);
    }
    match rt.group.as_str() {
        "apiextensions.k8s.io" => format!(
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{}.{}",
            rt.version, rt.kind
        ),
        "" => format!("io.k8s.api.core.{}.{}", rt.version, rt.kind),
        group => {
            let short = group.split('.').next().unwrap_or(group);
            format!("io.k8s.api.{short}.{}.{}", rt.version, rt.kind)
        }
    }
}

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

fn operation(
    rt: &ResourceType,
    action: &str,
    verb: &str,
    params: Vec<Value>,
    body: Option<Value>,
) -> Value {
    let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let reference = json!({"$ref": format!("#/components/schemas/{}", schema_name(rt))});
    let mut op = json!({
        "description": format!("{action} {}", rt.kind),
        "operationId": format!("{verb}{}{}", rt.kind, rt.version),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    });
    if let Some(body) = body {
        op["requestBody"] = body;
    }
    op
}

fn write_params() -> Vec<Value> {
    vec![
        query(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ),
        query(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
        ),
    ]
}

fn with(mut params: Vec<Value>, more: Vec<Value>) -> Vec<Value> {
    params.extend(more);
    params
}

/// What a write's body may be: custom resources take JSON and YAML (no protobuf).
fn write_types(rt: &ResourceType) -> &'static [&'static str] {
    if rt.is_custom() {
        &["application/json", "application/yaml"]
    } else {
        &["*/*"]
    }
}

/// The patch types an item takes. Custom resources take no strategic merge patch, and their
/// documents say so: kubectl reads this list (`gvkSupportsPatchOpenAPIV3`) and sends a JSON
/// merge patch for `kubectl apply` when strategic merge is missing.
fn patch_types(rt: &ResourceType) -> &'static [&'static str] {
    if rt.is_custom() {
        &[
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
        ]
    } else {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ]
    }
}

/// The body of an item's DELETE: DeleteOptions, as kube-apiserver documents it for CRDs.
fn delete_options_body(types: &[&str]) -> Value {
    let schema =
        json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"});
    let content: Map<String, Value> = types
        .iter()
        .map(|t| (t.to_string(), json!({"schema": schema})))
        .collect();
    json!({"content": content})
}

fn body(rt: &ResourceType, types: &[&str]) -> Value {
    let schema = if types.iter().any(|t| t.contains("patch")) {
        json!({"type": "object"})
    } else {
        json!({"$ref": format!("#/components/schemas/{}", schema_name(rt))})
    };
    let content: Map<String, Value> = types
        .iter()
        .map(|t| (t.to_string(), json!({"schema": schema})))
        .collect();
    json!({"content": content, "required": true})
}

/// Paths and operations of one resource type.
fn resource_paths(rt: &ResourceType, paths: &mut Map<String, Value>) {
    let base = format!("/{}", group_version_path(&rt.group, &rt.version));
    let (collection, mut scope_params) = if rt.namespaced {
        (
            format!("{base}/namespaces/{{namespace}}/{}", rt.plural),
            vec![path_param("namespace")],
        )
    } else {
        (format!("{base}/{}", rt.plural), Vec::new())
    };
    let item = format!("{collection}/{{name}}");
    let item_params = with(scope_params.clone(), vec![path_param("name")]);
    let patch_types = patch_types(rt);
    let write_types = write_types(rt);
    let list_params = vec![
        query(
            "labelSelector",
            "A selector to restrict the list of returned objects by their labels.",
        ),
        query(
            "fieldSelector",
            "A selector to restrict the list of returned objects by their fields.",
        ),
        query(
            "limit",
            "limit is a maximum number of responses to return for a list call.",
        ),
        query(
            "continue",
            "The continue option should be set when retrieving more results from the server.",
        ),
        query(
            "resourceVersion",
            "resourceVersion sets a constraint on what resource versions a request may be served from.",
        ),
        query(
            "watch",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
        ),
        query(
            "allowWatchBookmarks",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\".",
        ),
        query("timeoutSeconds", "Timeout for the list/watch call."),
    ];
    if rt.namespaced {
        // Every namespaced kind is also listed across namespaces.
        paths.insert(
            format!("{base}/{}", rt.plural),
            json!({"get": operation(rt, "list", "listAllNamespaces", list_params.clone(), None)}),
        );
    }
    paths.insert(
        collection.clone(),
        json!({
            "get": operation(rt, "list", "list", with(scope_params.clone(), list_params.clone()), None),
            "post": operation(rt, "post", "create", with(scope_params.clone(), write_params()), Some(body(rt, write_types))),
            "delete": operation(rt, "deletecollection", "deleteCollection", with(scope_params.clone(), list_params), None),
        }),
    );
    let mut patch_params = with(item_params.clone(), write_params());
    patch_params.push(query(
        "force",
        "Force is going to \"force\" Apply requests.",
    ));
    paths.insert(
        item.clone(),
        json!({
            "get": operation(rt, "get", "read", item_params.clone(), None),
            "put": operation(rt, "put", "replace", with(item_params.clone(), write_params()), Some(body(rt, write_types))),
            "patch": operation(rt, "patch", "patch", patch_params.clone(), Some(body(rt, patch_types))),
            "delete": operation(rt, "delete", "delete", with(item_params.clone(), vec![
                query("gracePeriodSeconds", "The duration in seconds before the object should be deleted."),
                query("propagationPolicy", "Whether and how garbage collection will be performed."),
            ]), rt.is_custom().then(|| delete_options_body(write_types))),
        }),
    );
    if rt.has_status() {
        paths.insert(
            format!("{item}/status"),
            json!({
                "get": operation(rt, "get", "readStatus", item_params.clone(), None),
                "put": operation(rt, "put", "replaceStatus", with(item_params.clone(), write_params()), Some(body(rt, write_types))),
                "patch": operation(rt, "patch", "patchStatus", patch_params, Some(body(rt, patch_types))),
            }),
        );
    }
    scope_params.clear();
}

/// The schema of a custom resource: the CRD's, with apiVersion, kind and metadata filled in.
fn custom_schema(rt: &ResourceType) -> Option<Value> {
    let mut schema = rt.schema.as_deref()?.clone();
    if !schema.is_object() {
        return None;
    }
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    schema["properties"]["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."});
    schema["properties"]["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."});
    schema["properties"]["metadata"] = json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"});
    schema["x-kubernetes-group-version-kind"] =
        json!([{"group": rt.group, "version": rt.version, "kind": rt.kind}]);
    Some(schema)
}

/// The document of one group version.
pub fn group_version_document(group: &str, version: &str, types: &[ResourceType]) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for rt in types
        .iter()
        .filter(|rt| rt.group == group && rt.version == version)
    {
        resource_paths(rt, &mut paths);
        if let Some(schema) = custom_schema(rt) {
            schemas.insert(schema_name(rt), schema);
        }
    }
    if !schemas.is_empty() {
        schemas.insert(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(),
            json!({"type": "object", "description": "ObjectMeta is metadata that all persisted resources must have.",
                   "x-kubernetes-preserve-unknown-fields": true}),
        );
        schemas.insert(
            "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions".into(),
            json!({"type": "object", "description": "DeleteOptions may be provided when deleting an API object.",
                   "x-kubernetes-preserve-unknown-fields": true}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    #[test]
    fn patch_operations_announce_field_validation() {
        let types = builtins();
        let doc = group_version_document("apps", "v1", &types);
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "Deployment"
        );
        let params = patch["parameters"].as_array().expect("parameters");
        assert!(
            params
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert!(doc["components"]["schemas"].is_object());
        let index = root(&types);
        assert!(
            index["paths"]["apis/apps/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.starts_with("/openapi/v3/apis/apps/v1?hash="))
        );
    }

    #[test]
    fn v2_protobuf_is_a_document() {
        let bytes = v2_protobuf();
        assert_eq!(&bytes[..5], b"\x0a\x032.0");
        assert_eq!(bytes[5], 0x12);
        assert_eq!(usize::from(bytes[6]), bytes.len() - 7);
    }

    #[test]
    fn schema_names() {
        let types = builtins();
        let find = |kind: &str| types.iter().find(|t| t.kind == kind).cloned().expect(kind);
        assert_eq!(schema_name(&find("Pod")), "io.k8s.api.core.v1.Pod");
        assert_eq!(
            schema_name(&find("Ingress")),
            "io.k8s.api.networking.v1.Ingress"
        );
    }
}
