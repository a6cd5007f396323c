//! The HTTP face of one cluster: kube-apiserver's REST paths over the store, with its
//! content negotiation (JSON, YAML bodies, Tables, PartialObjectMetadata) and its errors.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderMap, Method, StatusCode, header};
use serde::Serialize;
use serde::ser::{SerializeMap as _, Serializer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api_error::{ApiError, FieldError};
use crate::discovery;
use crate::managed;
use crate::meta;
use crate::openapi;
use crate::patch::{PatchKind, apply_patch};
use crate::resources::ResourceType;
use crate::schema;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{
    DeleteOptions, Deletion, ListOptions, Propagation, Store, Subresource, WriteOptions,
    parse_resource_version,
};
use crate::table::{self, IncludeObject};
use crate::watch;

/// Largest request body kube-apiserver accepts (3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Timing knobs of the API server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Watch length when the client gives no timeoutSeconds.
    pub default_watch_timeout: Duration,
    /// How often a simulated running container writes a log line.
    pub log_interval: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(1800),
            log_interval: Duration::from_secs(2),
        }
    }
}

/// What the handlers of one cluster share.
pub struct ApiServer {
    pub store: Store,
    pub options: ServerOptions,
    /// `host:port` clients reach this server at (discovery's serverAddressByClientCIDRs).
    pub address: String,
    /// Ends open watches when the cluster stops.
    pub shutdown: CancellationToken,
}

/// The router of one cluster's API. Middleware (request counters, faults) wraps it.
pub fn router(server: Arc<ApiServer>) -> Router {
    Router::new().fallback(handle).with_state(server)
}

/// Query parameters in request order.
pub struct Query(Vec<(String, String)>);

impl Query {
    fn parse(uri: &http::Uri) -> Query {
        let pairs = uri
            .query()
            .map(|q| {
                q.split('&')
                    .filter(|p| !p.is_empty())
                    .map(|pair| {
                        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                        (decode(k), decode(v))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Query(pairs)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "1"))
    }
}

/// Percent-decoding of a query component (`+` is a space).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// How the client wants objects rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendering {
    Object,
    Table,
    Metadata,
}

pub fn rendering(headers: &HeaderMap) -> Rendering {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .unwrap_or_default();
    // The first acceptable media type wins, as in kube-apiserver's negotiation.
    for media in accept.split(',') {
        let media = media.replace(' ', "");
        if media.contains("as=Table") && media.contains("g=meta.k8s.io") {
            return Rendering::Table;
        }
        if media.contains("as=PartialObjectMetadata") && media.contains("g=meta.k8s.io") {
            return Rendering::Metadata;
        }
        if media.starts_with("application/json") && !media.contains("as=")
            || media.starts_with("*/*")
        {
            return Rendering::Object;
        }
    }
    Rendering::Object
}

pub fn json_response(status: StatusCode, body: &Value) -> Response {
    json_response_of(status, body)
}

/// [`json_response`] of anything that serializes as JSON.
fn json_response_of(status: StatusCode, body: &impl Serialize) -> Response {
    // Values and the list above only have string keys: serializing them cannot fail.
    let text = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(text))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

pub fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, &error.to_status())
}

/// The object as the requested version shows it (conversion by apiVersion only).
pub fn present(rt: &ResourceType, mut object: Value) -> Value {
    if rt.version != rt.storage_version
        && let Some(map) = object.as_object_mut()
    {
        map.insert("apiVersion".into(), json!(rt.api_version()));
    }
    object
}

/// What a resource path names.
struct Target {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

async fn handle(State(server): State<Arc<ApiServer>>, request: Request) -> Response {
    match dispatch(&server, request).await {
        Ok(response) => response,
        Err(error) => error_response(&error),
    }
}

async fn dispatch(server: &Arc<ApiServer>, request: Request) -> Result<Response, ApiError> {
    let path = request.uri().path().to_string();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let store = &server.store;
    let method = request.method().clone();
    let is_get = method == Method::GET;
    match segments.as_slice() {
        [] if is_get => Ok(json_response(StatusCode::OK, &root_paths(store))),
        ["version"] if is_get => Ok(json_response(StatusCode::OK, &discovery::version())),
        ["healthz" | "livez" | "readyz"] if is_get => Ok(Response::builder()
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Body::from("ok"))
            .unwrap_or_default()),
        ["api"] if is_get => Ok(json_response(
            StatusCode::OK,
            &discovery::core_versions(&server.address),
        )),
        ["apis"] if is_get => Ok(json_response(
            StatusCode::OK,
            &discovery::group_list(&store.groups()),
        )),
        ["api", "v1"] if is_get => Ok(json_response(
            StatusCode::OK,
            &resource_list(store, "", "v1"),
        )),
        ["apis", group] if is_get => {
            let groups = store.groups();
            let Some((_, versions)) = groups.iter().find(|(g, _)| g == group) else {
                return Ok(page_not_found());
            };
            Ok(json_response(
                StatusCode::OK,
                &discovery::group(group, versions),
            ))
        }
        ["apis", group, version] if is_get => {
            if !serves(store, group, version) {
                return Ok(page_not_found());
            }
            Ok(json_response(
                StatusCode::OK,
                &resource_list(store, group, version),
            ))
        }
        ["openapi", "v2"] if is_get => {
            let accept = request
                .headers()
                .get(header::ACCEPT)
                .and_then(|a| a.to_str().ok())
                .unwrap_or_default();
            if accept.contains("protobuf") {
                Ok(Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, openapi::V2_PROTOBUF_ANSWER)
                    .body(Body::from(openapi::v2_protobuf()))
                    .unwrap_or_else(|_| Response::new(Body::empty())))
            } else {
                Ok(json_response(StatusCode::OK, &openapi::v2_json()))
            }
        }
        ["openapi", "v3"] if is_get => Ok(json_response(
            StatusCode::OK,
            &openapi::root(&store.resource_types()),
        )),
        ["openapi", "v3", rest @ ..] if is_get => {
            let types = store.resource_types();
            let path = rest.join("/");
            let asked = Query::parse(request.uri()).get("hash").map(str::to_string);
            if let (Some(asked), Some(current)) = (asked, openapi::document_hash(&types, &path))
                && asked != current
            {
                return Ok(Response::builder()
                    .status(StatusCode::MOVED_PERMANENTLY)
                    .header(header::CONTENT_TYPE, "application/json")
                    .header(
                        header::LOCATION,
                        format!("/openapi/v3/{path}?hash={current}"),
                    )
                    .body(Body::empty())
                    .unwrap_or_else(|_| Response::new(Body::empty())));
            }
            openapi::document(&types, &path)
                .map(|doc| json_response(StatusCode::OK, &doc))
                .ok_or_else(ApiError::unknown_path)
        }
        ["api", "v1", rest @ ..] => {
            let target = resolve(store, "", "v1", rest)?;
            serve_resource(server, target, request).await
        }
        ["apis", group, version, rest @ ..] => {
            if !serves(store, group, version) {
                return Ok(page_not_found());
            }
            let target = resolve(store, group, version, rest)?;
            serve_resource(server, target, request).await
        }
        _ => Err(ApiError::unknown_path()),
    }
}

fn root_paths(store: &Store) -> Value {
    let mut paths = vec!["/api".to_string(), "/api/v1".into(), "/apis".into()];
    for (group, versions) in store.groups() {
        paths.push(format!("/apis/{group}"));
        paths.extend(versions.iter().map(|v| format!("/apis/{group}/{v}")));
    }
    paths.extend([
        "/healthz".into(),
        "/livez".into(),
        "/openapi/v2".into(),
        "/openapi/v3".into(),
        "/readyz".into(),
        "/version".into(),
    ]);
    json!({"paths": paths})
}

fn resource_list(store: &Store, group: &str, version: &str) -> Value {
    let types: Vec<ResourceType> = store
        .resource_types()
        .into_iter()
        .filter(|rt| rt.group == group && rt.version == version)
        .collect();
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    discovery::resource_list(&group_version, &types)
}

fn serves(store: &Store, group: &str, version: &str) -> bool {
    store.serves(group, version)
}

/// What kube-apiserver answers for a group version nobody serves: its mux's plain 404, not
/// a Status (that is for unknown resources of a served group).
fn page_not_found() -> Response {
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
        .body(Body::from("404 page not found\n"))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn resolve(store: &Store, group: &str, version: &str, rest: &[&str]) -> Result<Target, ApiError> {
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") => {
            (Some(ns.to_string()), [&[*plural][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let (plural, name, subresource) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(ApiError::unknown_path()),
    };
    let rt = store
        .resource_by_plural(group, version, plural)
        .ok_or_else(ApiError::unknown_path)?;
    if namespace.is_some() && !rt.namespaced {
        return Err(ApiError::unknown_path());
    }
    if rt.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::unknown_path());
    }
    if let Some(sub) = &subresource {
        let namespace_finalize = rt.group.is_empty() && rt.kind == "Namespace" && sub == "finalize";
        if !rt.subresources.contains(sub) && !namespace_finalize {
            return Err(ApiError::unknown_path());
        }
    }
    Ok(Target {
        rt,
        namespace,
        name,
        subresource,
    })
}

fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed("the server does not allow this method on the requested resource")
}

async fn read_body(request: Request) -> Result<(HeaderMap, Vec<u8>), ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            "the request body is too large",
        )
    })?;
    Ok((parts.headers, bytes.to_vec()))
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("application/json")
        .to_string()
}

/// What a write of a built-in kind accepts; custom resources take no protobuf.
const BUILTIN_MEDIA: &[&str] = &[
    "application/json",
    "application/yaml",
    crate::proto::MEDIA_TYPE,
];
const CUSTOM_MEDIA: &[&str] = &["application/json", "application/yaml"];

fn write_media(rt: &ResourceType) -> &'static [&'static str] {
    if rt.is_custom() {
        CUSTOM_MEDIA
    } else {
        BUILTIN_MEDIA
    }
}

/// Decodes a JSON or YAML body; a 415 names the `accepted` media types.
pub fn decode_body(content_type: &str, body: &[u8], accepted: &[&str]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if media == crate::proto::MEDIA_TYPE
        && let Some(object) = crate::proto::decode(body)
    {
        return Ok(object);
    }
    let known =
        media.is_empty() || media.ends_with("json") || media.ends_with("yaml") || media == "*/*";
    if !known {
        // Protobuf beyond the kinds `proto` reads, and CBOR, are not spoken here.
        return Err(ApiError::unsupported_media_type(accepted));
    }
    let yaml = content_type.contains("yaml");
    let parsed: Result<Value, String> = if yaml {
        std::str::from_utf8(body)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_saphyr::from_str::<Value>(text).map_err(|e| e.to_string()))
    } else {
        serde_json::from_slice::<Value>(body).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): {e}",
            if yaml { "yaml" } else { "json" }
        ))
    })
}

/// The body's apiVersion and kind must be the URL's, when given.
fn check_type(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
    if let Some(api_version) = object["apiVersion"].as_str().filter(|v| !v.is_empty())
        && api_version != rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if let Some(kind) = object["kind"].as_str().filter(|k| !k.is_empty())
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {:?} cannot be handled as a {}: the kind in the data does not match the expected kind",
            rt.version, rt.kind
        )));
    }
    Ok(())
}

/// The field manager of a write: `fieldManager`, else the user agent's first word, else
/// `unknown`, as kube-apiserver defaults it (every write is recorded in managedFields).
fn field_manager(query: &Query, headers: &HeaderMap) -> Option<String> {
    if let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return Some(manager.to_string());
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|a| a.to_str().ok())
        .unwrap_or_default();
    let prefix = agent.split('/').next().unwrap_or(agent).trim();
    if prefix.is_empty() {
        return Some("unknown".into());
    }
    Some(prefix.chars().take(128).collect())
}

fn write_options(query: &Query, headers: &HeaderMap) -> Result<WriteOptions, ApiError> {
    let dry_run = match query.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\""
            )));
        }
    };
    Ok(WriteOptions {
        dry_run,
        field_manager: field_manager(query, headers),
    })
}

/// Field validation of a written body (see [`check_fields`]): a strict failure is a 400.
fn validate_fields(
    rt: &ResourceType,
    object: &Value,
    query: &Query,
) -> Result<Vec<String>, ApiError> {
    check_fields(rt, object, query).map_err(|error| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {error}",
            kind = rt.kind,
            version = rt.version,
        ))
    })
}

/// kube-apiserver's answer when a patched object does not decode: a 422 on the field
/// `patch`, quoting the patched object.
fn patch_invalid(object: &Value, error: &str) -> ApiError {
    let value = format!("Invalid value: {:?}: {error}", object.to_string());
    let mut invalid = ApiError::new(422, "Invalid", format!(" \"\" is invalid: patch: {value}"));
    invalid.details = Some(
        json!({"causes": [{"reason": "FieldValueInvalid", "message": value, "field": "patch"}]}),
    );
    invalid
}

/// Field validation of a write (`fieldValidation`): `Strict` refuses unknown fields (the
/// error text), `Warn` (the default) answers with a warning for each, `Ignore` says nothing.
/// Answers the warnings.
fn check_fields(rt: &ResourceType, object: &Value, query: &Query) -> Result<Vec<String>, String> {
    let mode = query.get("fieldValidation").unwrap_or("Warn");
    if mode == "Ignore" {
        return Ok(Vec::new());
    }
    let unknown = if rt.is_custom() {
        schema::unknown_fields(rt, object)
    } else {
        crate::typed::unknown_fields(rt, object)
    };
    let listed: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    if listed.is_empty() || mode != "Strict" {
        return Ok(listed);
    }
    Err(format!("strict decoding error: {}", listed.join(", ")))
}

/// The response with a `Warning: 299 - "..."` header per warning, as kube-apiserver sends them.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        if let Ok(value) = header::HeaderValue::from_str(&format!("299 - {warning:?}")) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

async fn serve_resource(
    server: &Arc<ApiServer>,
    target: Target,
    request: Request,
) -> Result<Response, ApiError> {
    let query = Query::parse(request.uri());
    let method = request.method().clone();
    let render = rendering(request.headers());
    let store = &server.store;
    let rt = &target.rt;
    let ns = target.namespace.as_deref();
    match (
        &method,
        target.name.as_deref(),
        target.subresource.as_deref(),
    ) {
        (&Method::GET, None, None) => {
            if query.flag("watch") {
                return watch::serve(server, rt, ns, None, &query, render);
            }
            list(store, rt, ns, &query, render)
        }
        (&Method::GET, Some(name), None) => {
            if query.flag("watch") {
                return watch::serve(server, rt, ns, Some(name), &query, render);
            }
            let object = store.get_shared(rt, ns, name)?;
            Ok(render_one(rt, &object, render, StatusCode::OK, &query))
        }
        (&Method::GET, Some(name), Some("status")) => {
            let object = store.get_shared(rt, ns, name)?;
            Ok(render_one(rt, &object, render, StatusCode::OK, &query))
        }
        (&Method::GET, Some(name), Some("log")) => pod_log(server, ns, name, &query),
        (&Method::GET, Some(name), Some("scale")) => {
            let object = store.get_shared(rt, ns, name)?;
            Ok(json_response(StatusCode::OK, &scale_of(&object)))
        }
        (&Method::POST, None, None) => {
            if !rt.verbs.iter().any(|v| v == "create") {
                return Err(method_not_allowed());
            }
            let (headers, body) = read_body(request).await?;
            let object = decode_body(&content_type(&headers), &body, write_media(rt))?;
            check_type(rt, &object)?;
            let warnings = validate_fields(rt, &object, &query)?;
            let options = write_options(&query, &headers)?;
            let created = store.create_with(rt, ns, object, &options)?;
            let response = render_one(rt, &created, render, StatusCode::CREATED, &query);
            Ok(with_warnings(response, &warnings))
        }
        (&Method::PUT, Some(name), sub) => {
            let (headers, body) = read_body(request).await?;
            let object = decode_body(&content_type(&headers), &body, write_media(rt))?;
            let options = write_options(&query, &headers)?;
            match sub {
                Some("scale") => {
                    let replicas = object["spec"]["replicas"].clone();
                    let updated =
                        store.try_modify(rt, ns, name, Subresource::Main, &options, |current| {
                            let mut next = current.clone();
                            let wanted_rv = meta::resource_version(&object);
                            if !wanted_rv.is_empty() {
                                meta::set_metadata_field(
                                    &mut next,
                                    "resourceVersion",
                                    Some(json!(wanted_rv)),
                                );
                            }
                            next["spec"]["replicas"] = replicas;
                            Ok(next)
                        })?;
                    return Ok(json_response(StatusCode::OK, &scale_of(&updated)));
                }
                Some("finalize") => {
                    let finalizers = object["spec"]["finalizers"].clone();
                    if finalizers.as_array().is_none_or(Vec::is_empty) {
                        store.finalize_namespace(name)?;
                    }
                    let current = store.get(rt, ns, name).unwrap_or(object);
                    return Ok(json_response(StatusCode::OK, &present(rt, current)));
                }
                _ => {}
            }
            check_type(rt, &object)?;
            if meta::name(&object) != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta::name(&object)
                )));
            }
            let warnings = validate_fields(rt, &object, &query)?;
            let existed = store.get_shared(rt, ns, name).is_ok();
            let subresource = match sub {
                Some("status") => Subresource::Status,
                _ => Subresource::Main,
            };
            let updated = store.update_with(rt, ns, object, subresource, &options)?;
            let status = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(with_warnings(
                render_one(rt, &updated, render, status, &query),
                &warnings,
            ))
        }
        (&Method::PATCH, Some(name), sub) => {
            let name = name.to_string();
            let (headers, body) = read_body(request).await?;
            patch(store, rt, ns, &name, sub, &query, &headers, &body, render)
        }
        (&Method::DELETE, Some(name), None) => {
            let (headers, body) = read_body(request).await?;
            let options = delete_options(&query, &headers, &body)?;
            match store.delete_with(rt, ns, name, &options)? {
                Deletion::Pending(object) => {
                    Ok(json_response(StatusCode::OK, &present(rt, object)))
                }
                Deletion::Deleted(object) => {
                    Ok(json_response(StatusCode::OK, &deleted_body(rt, object)))
                }
            }
        }
        (&Method::DELETE, None, None) => {
            if !rt.verbs.iter().any(|v| v == "deletecollection") {
                return Err(method_not_allowed());
            }
            let list_options = list_options(rt, &query)?;
            let (headers, body) = read_body(request).await?;
            let options = delete_options(&query, &headers, &body)?;
            let deleted = store.delete_collection(rt, ns, &list_options, &options)?;
            let items: Vec<Value> = deleted.into_iter().map(|o| list_item(rt, o)).collect();
            Ok(json_response(
                StatusCode::OK,
                &json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": {}, "items": items}),
            ))
        }
        _ => Err(method_not_allowed()),
    }
}

/// Immediately deleted objects: custom resources and pods come back whole, the rest as a
/// success Status, as kube-apiserver's registries do.
fn deleted_body(rt: &ResourceType, object: Value) -> Value {
    if rt.is_custom() || (rt.group.is_empty() && rt.kind == "Pod") {
        return present(rt, object);
    }
    let mut details = json!({"name": meta::name(&object)});
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    details["kind"] = json!(rt.plural);
    details["uid"] = json!(meta::uid(&object));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

fn delete_options(
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<DeleteOptions, ApiError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        decode_body(&content_type(headers), body, CUSTOM_MEDIA)?
    };
    let policy = body["propagationPolicy"]
        .as_str()
        .map(String::from)
        .or_else(|| query.get("propagationPolicy").map(String::from));
    let orphan = body["orphanDependents"]
        .as_bool()
        .or_else(|| query.get("orphanDependents").map(|v| v == "true"));
    let propagation = match (policy.as_deref(), orphan) {
        (Some("Background"), _) => Some(Propagation::Background),
        (Some("Foreground"), _) => Some(Propagation::Foreground),
        (Some("Orphan"), _) => Some(Propagation::Orphan),
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            )));
        }
        (None, Some(true)) => Some(Propagation::Orphan),
        (None, Some(false)) => Some(Propagation::Background),
        (None, None) => None,
    };
    let dry_run = body["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|x| x == "All"))
        || query.get("dryRun") == Some("All");
    Ok(DeleteOptions {
        propagation,
        precondition_uid: body["preconditions"]["uid"].as_str().map(String::from),
        precondition_resource_version: body["preconditions"]["resourceVersion"]
            .as_str()
            .map(String::from),
        dry_run,
    })
}

fn list_options(rt: &ResourceType, query: &Query) -> Result<ListOptions, ApiError> {
    let label_selector = query
        .get("labelSelector")
        .map(LabelSelector::parse)
        .transpose()?;
    let field_selector = query
        .get("fieldSelector")
        .map(|f| FieldSelector::parse(f, rt))
        .transpose()?;
    let limit = match query.get("limit") {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {text:?}")))?,
        ),
    };
    Ok(ListOptions {
        label_selector,
        field_selector,
        limit,
        continue_token: query
            .get("continue")
            .filter(|c| !c.is_empty())
            .map(String::from),
    })
}

/// A list item as kube-apiserver returns it: built-in items carry no apiVersion/kind.
fn list_item(rt: &ResourceType, object: Value) -> Value {
    let mut object = present(rt, object);
    if !rt.is_custom()
        && let Some(map) = object.as_object_mut()
    {
        map.remove("apiVersion");
        map.remove("kind");
    }
    object
}

fn list(
    store: &Store,
    rt: &ResourceType,
    ns: Option<&str>,
    query: &Query,
    render: Rendering,
) -> Result<Response, ApiError> {
    let options = list_options(rt, query)?;
    parse_resource_version(query.get("resourceVersion"))?;
    let page = store.list_page(rt, ns, &options)?;
    let mut metadata = json!({"resourceVersion": page.resource_version});
    if let Some(token) = &page.continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(remaining) = page.remaining_item_count {
        metadata["remainingItemCount"] = json!(remaining);
    }
    let body = match render {
        Rendering::Table => {
            let objects: Vec<Value> = page
                .items
                .into_iter()
                .map(|o| present(rt, Arc::unwrap_or_clone(o)))
                .collect();
            table::table(
                rt,
                &objects,
                metadata,
                IncludeObject::parse(query.get("includeObject")),
                true,
            )
        }
        Rendering::Metadata => {
            let items: Vec<Value> = page
                .items
                .iter()
                .map(|o| table::partial_metadata(o))
                .collect();
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items})
        }
        Rendering::Object => {
            // Written straight from the stored objects: a copy of each to drop its type
            // fields was most of a list's cost.
            let body = ObjectList {
                kind: rt.list_kind(),
                api_version: rt.api_version(),
                metadata,
                items: page
                    .items
                    .iter()
                    .map(|object| ListItem { rt, object })
                    .collect(),
            };
            return Ok(json_response_of(StatusCode::OK, &body));
        }
    };
    Ok(json_response(StatusCode::OK, &body))
}

/// A list of objects as kube-apiserver writes it.
#[derive(Serialize)]
struct ObjectList<'a> {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    metadata: Value,
    items: Vec<ListItem<'a>>,
}

/// A stored object written as [`list_item`] shows it, without copying it.
struct ListItem<'a> {
    rt: &'a ResourceType,
    object: &'a Value,
}

impl Serialize for ListItem<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(fields) = self.object.as_object() else {
            return self.object.serialize(serializer);
        };
        let api_version =
            (self.rt.version != self.rt.storage_version).then(|| self.rt.api_version());
        let keeps_type_meta = self.rt.is_custom();
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in fields {
            match key.as_str() {
                "apiVersion" | "kind" if !keeps_type_meta => {}
                "apiVersion" => match &api_version {
                    Some(version) => map.serialize_entry(key, version)?,
                    None => map.serialize_entry(key, value)?,
                },
                _ => map.serialize_entry(key, value)?,
            }
        }
        if let Some(version) =
            api_version.filter(|_| keeps_type_meta && !fields.contains_key("apiVersion"))
        {
            map.serialize_entry("apiVersion", &version)?;
        }
        map.end()
    }
}

fn render_one(
    rt: &ResourceType,
    object: &Value,
    render: Rendering,
    status: StatusCode,
    query: &Query,
) -> Response {
    // Stored objects are answered as they are unless another version shows them: a copy of
    // each answered object was a good part of a read.
    let presented;
    let object = if rt.version == rt.storage_version {
        object
    } else {
        presented = present(rt, object.clone());
        &presented
    };
    let body = match render {
        Rendering::Object => return json_response(status, object),
        Rendering::Metadata => table::partial_metadata(object),
        Rendering::Table => table::table(
            rt,
            std::slice::from_ref(object),
            json!({"resourceVersion": meta::resource_version(object)}),
            IncludeObject::parse(query.get("includeObject")),
            true,
        ),
    };
    json_response(status, &body)
}

/// What kube-apiserver makes of a `resourceVersion` or `uid` in an applied configuration:
/// preconditions on the object the apply meets. A resourceVersion other than the live one is a
/// 409 Conflict, and an apply that creates ignores it; a uid other than the live one is a 422
/// (the uid is immutable), and an apply that would create refuses it (409, no object has it).
/// What clients build "create, but never take over" and "only this very object" on.
fn apply_preconditions(
    rt: &ResourceType,
    name: &str,
    live: Option<&Value>,
    config: &Value,
) -> Result<(), ApiError> {
    let field = |key: &str| {
        config
            .pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
    };
    match (live, field("uid"), field("resourceVersion")) {
        (None, Some(uid), _) => Err(ApiError::conflict_because(
            rt,
            name,
            &format!(
                "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
            ),
        )),
        (Some(live), _, Some(rv)) if rv != meta::resource_version(live) => {
            Err(ApiError::conflict(rt, name))
        }
        (Some(live), Some(uid), _) if uid != meta::uid(live) => Err(ApiError::invalid(
            rt,
            name,
            &[FieldError::invalid(
                "metadata.uid",
                &json!(uid),
                "field is immutable",
            )],
        )),
        _ => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
fn patch(
    store: &Store,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
    render: Rendering,
) -> Result<Response, ApiError> {
    let content_type = content_type(headers);
    let kind = PatchKind::from_content_type(&content_type).ok_or_else(|| {
        ApiError::unsupported_media_type(&[
            crate::patch::JSON_PATCH,
            crate::patch::MERGE_PATCH,
            crate::patch::APPLY_PATCH,
            crate::patch::STRATEGIC_PATCH,
        ])
    })?;
    let patch_body = decode_body(
        if kind == PatchKind::Apply {
            "application/yaml"
        } else {
            "application/json"
        },
        body,
        CUSTOM_MEDIA,
    )?;
    let options = write_options(query, headers)?;
    let subresource = match sub {
        None => Subresource::Main,
        Some("status") => Subresource::Status,
        Some("scale") => {
            let patched =
                store.try_modify(rt, ns, name, Subresource::Main, &options, |current| {
                    let scale = apply_patch(kind, &scale_of(current), &patch_body, None, false)?;
                    let mut next = current.clone();
                    next["spec"]["replicas"] = scale["spec"]["replicas"].clone();
                    Ok(next)
                })?;
            return Ok(json_response(StatusCode::OK, &scale_of(&patched)));
        }
        Some(_) => return Err(method_not_allowed()),
    };
    if kind == PatchKind::Apply {
        let manager = query
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                ApiError::new(
                    422,
                    "Invalid",
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                )
            })?
            .to_string();
        check_type(rt, &patch_body)?;
        if patch_body["apiVersion"].as_str().is_none_or(str::is_empty)
            || patch_body["kind"].as_str().is_none_or(str::is_empty)
        {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an apply patch",
            ));
        }
        // Like kube-apiserver's checkName, on the applied object: a body without a name takes
        // the live object's, so only a create needs one.
        let body_name = meta::name(&patch_body);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let warnings = validate_fields(rt, &patch_body, query)?;
        let force = query.flag("force");
        if subresource == Subresource::Status {
            let applied = store.try_modify(rt, ns, name, subresource, &options, |live| {
                managed::apply(Some(live), &patch_body, &manager, rt, subresource, force)
            })?;
            let response = render_one(rt, &applied, render, StatusCode::OK, query);
            return Ok(with_warnings(response, &warnings));
        }
        let mut created = false;
        let applied = store.upsert(
            rt,
            ns,
            name,
            &WriteOptions {
                field_manager: None,
                ..options
            },
            |live| {
                apply_preconditions(rt, name, live, &patch_body)?;
                created = live.is_none();
                if created && meta::name(&patch_body).is_empty() {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({name} based on URL) was undeterminable: name must be provided"
                    )));
                }
                let mut config = patch_body.clone();
                if let Some(ns) = ns.filter(|_| rt.namespaced) {
                    config["metadata"]["namespace"] = json!(ns);
                }
                managed::apply(live, &config, &manager, rt, subresource, force)
            },
        )?;
        let status = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        let response = render_one(rt, &applied, render, status, query);
        return Ok(with_warnings(response, &warnings));
    }
    let custom = rt.is_custom();
    let schema = rt.schema.as_deref();
    let mut warnings = Vec::new();
    let patched = store.try_modify(rt, ns, name, subresource, &options, |current| {
        let next = apply_patch(kind, current, &patch_body, schema, custom)?;
        warnings = check_fields(rt, &next, query).map_err(|e| patch_invalid(&next, &e))?;
        if let Some(Err(error)) = crate::typed::decode(rt, &next) {
            return Err(patch_invalid(&next, &error));
        }
        Ok(next)
    })?;
    let response = render_one(rt, &patched, render, StatusCode::OK, query);
    Ok(with_warnings(response, &warnings))
}

/// The autoscaling/v1 Scale of a workload.
fn scale_of(object: &Value) -> Value {
    let selector: Vec<String> = object["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let metadata = &object["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
            "resourceVersion": metadata["resourceVersion"],
            "creationTimestamp": metadata["creationTimestamp"],
        },
        // Go's omitempty: a Scale of 0 replicas has an empty spec.
        "spec": match object["spec"]["replicas"].as_i64().unwrap_or(1) {
            0 => json!({}),
            replicas => json!({"replicas": replicas}),
        },
        "status": {"replicas": object["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector.join(",")},
    })
}

fn pod_log(
    server: &ApiServer,
    ns: Option<&str>,
    name: &str,
    query: &Query,
) -> Result<Response, ApiError> {
    let tail_lines = match query.get("tailLines") {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid tailLines: {text:?}")))?,
        ),
    };
    let request = crate::logs::LogRequest {
        container: query.get("container").map(str::to_string),
        previous: query.flag("previous"),
        tail_lines,
    };
    let (namespace, interval) = (ns.unwrap_or_default(), server.options.log_interval);
    let response = Response::builder().header(header::CONTENT_TYPE, "text/plain");
    let body = if query.flag("follow") {
        let lines = crate::logs::follow(
            &server.store,
            namespace,
            name,
            &request,
            interval,
            server.shutdown.clone(),
        )?;
        Body::from_stream(lines)
    } else {
        Body::from(crate::logs::read(
            &server.store,
            namespace,
            name,
            &request,
            interval,
        )?)
    };
    Ok(response.body(body).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_items_are_written_as_list_item_shows_them_in_the_stored_order() {
        let pods = crate::resources::builtin("", "Pod").expect("pods");
        let custom = |version: &str| ResourceType {
            group: "comb.internal".into(),
            version: version.into(),
            kind: "Comb".into(),
            plural: "combs".into(),
            storage_version: "v1".into(),
            schema: Some(Arc::new(json!({"type": "object"}))),
            ..pods.clone()
        };
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
        let comb = json!({"apiVersion": "comb.internal/v1", "kind": "Comb",
            "metadata": {"name": "c"}, "spec": {"x": 1}});
        let untyped = json!({"kind": "Comb", "metadata": {"name": "c"}});
        let cases = [
            // Built-in items lose their type fields, the rest keeps its order (kube-apiserver's).
            (
                pods.clone(),
                pod.clone(),
                r#"{"metadata":{"name":"p"},"spec":{"nodeName":"n"},"status":{"phase":"Running"}}"#,
            ),
            (
                custom("v1"),
                comb.clone(),
                r#"{"apiVersion":"comb.internal/v1","kind":"Comb","metadata":{"name":"c"},"spec":{"x":1}}"#,
            ),
            // Another served version shows its apiVersion in place.
            (
                custom("v2"),
                comb,
                r#"{"apiVersion":"comb.internal/v2","kind":"Comb","metadata":{"name":"c"},"spec":{"x":1}}"#,
            ),
            (
                custom("v2"),
                untyped,
                r#"{"kind":"Comb","metadata":{"name":"c"},"apiVersion":"comb.internal/v2"}"#,
            ),
        ];
        for (rt, object, expected) in cases {
            let written = serde_json::to_string(&ListItem {
                rt: &rt,
                object: &object,
            })
            .expect("serializes");
            assert_eq!(written, expected);
            let parsed: Value = serde_json::from_str(&written).expect("parses");
            assert_eq!(parsed, list_item(&rt, object), "{expected}");
        }
    }

    #[test]
    fn query_strings_are_decoded() {
        let uri: http::Uri = "/api/v1/pods?labelSelector=app%20in%20(a%2Cb)&watch=1&x=a+b"
            .parse()
            .expect("uri");
        let query = Query::parse(&uri);
        assert_eq!(query.get("labelSelector"), Some("app in (a,b)"));
        assert!(query.flag("watch"));
        assert_eq!(query.get("x"), Some("a b"));
    }

    #[test]
    fn accept_headers_choose_the_rendering() {
        let cases = [
            (
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
                Rendering::Table,
            ),
            ("application/json", Rendering::Object),
            (
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                Rendering::Metadata,
            ),
            (
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
                Rendering::Object,
            ),
            ("", Rendering::Object),
        ];
        for (accept, expected) in cases {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, accept.parse().expect("header"));
            assert_eq!(rendering(&headers), expected, "{accept}");
        }
    }
}
