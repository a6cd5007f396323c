//! Test controls of one cluster's API server, under `/_sandbox/` on its port and in-process
//! through [`Controls`]:
//!
//! | request | does |
//! |---|---|
//! | `GET /_sandbox/requests` | API requests counted by verb and resource: `{"list deployments.apps": 3, "get /version": 1}` |
//! | `GET /_sandbox/requests/impersonated` | the same counts of the requests that carried `Impersonate-User`, by that user: `{"system:serviceaccount:apps:deployer": {"create configmaps": 1}}` |
//! | `POST /_sandbox/requests/reset` | zeroes the counts (and empties the request log) |
//! | `POST /_sandbox/requests/log` | starts recording every API request (time, verb, resource, namespace, name, impersonated user, status code) |
//! | `GET /_sandbox/requests/log` | the recorded requests: `[{"atMicros": 1764590000000000, "verb": "list", "resource": "pods", "namespace": "apps", "code": 200}]` |
//! | `DELETE /_sandbox/requests/log` | stops recording and drops the log |
//! | `POST /_sandbox/faults` | `{"method": "GET", "path": "/apis/apps/v1/*", "verb": "list", "status": 500, "count": 2, "delayMs": 100}`: the next `count` matching API requests are delayed and/or answered with `status` as a `metav1.Status` |
//! | `GET /_sandbox/faults` | the faults still armed |
//! | `DELETE /_sandbox/faults` | disarms every fault |
//! | `POST /_sandbox/partition` | every API request is refused (503, connection closed) and open watches are cut, until healed; with `{"mode": "hang"}`, requests are taken and not answered and open watches go quiet until healed (then they are served, as a network that dropped packets delivers them when it comes back) |
//! | `GET /_sandbox/partition` | `{"partitioned": true, "mode": "hang"}` |
//! | `POST /_sandbox/heal` | ends the partition |
//!
//! Verbs are kube-apiserver's (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
//! `deletecollection`); resources are `plural[.group][/subresource]` (`pods`,
//! `deployments.apps/status`, `pods/log`); requests that name no resource (discovery,
//! `/version`, `/openapi/v3`) count as `<verb> <path>`. Requests to `/_sandbox/` are not API
//! requests: never counted, faulted or refused.
//!
//! The log is off unless asked for (it grows with every request): benchmarks turn it on to see
//! when requests came (a resync's burst) and where they went (a layer's namespace), which the
//! counts do not tell.
//!
//! The API server accepts `Impersonate-User` and serves the request as usual: the sandbox has no
//! authorization, so the header is only counted, for tests that check who a client writes as.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::Stream;
use futures::future::BoxFuture;
use http::{HeaderValue, Method, Request, StatusCode, header};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;
use tower::{Service, ServiceExt};

use crate::api_error::ApiError;
use crate::sandbox::{ClusterExtension, ClusterHandle};

const PREFIX: &str = "/_sandbox/";
/// The header a client impersonates a user with (kube-apiserver's).
const IMPERSONATE_USER: &str = "impersonate-user";
/// The largest fault description accepted.
const MAX_BODY: usize = 64 * 1024;

/// One armed fault: which requests it catches and what it does to them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// HTTP method (`GET`, `POST`, ...); absent or `*` for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// A glob over the URL path (`*` any run of characters, `?` one); absent for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A Kubernetes verb (`list`, `watch`, ...) the request must have; absent for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<String>,
    /// The HTTP status to answer with; absent to only delay the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How many requests it catches.
    #[serde(default = "one")]
    pub count: u64,
    /// How long each caught request waits first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// The Status message, instead of kube-apiserver's usual one for the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn one() -> u64 {
    1
}

impl Fault {
    /// A fault answering the next `count` requests matching `method` and `path` with `status`.
    pub fn status(method: &str, path: &str, status: u16, count: u64) -> Fault {
        Fault {
            method: Some(method.to_string()),
            path: Some(path.to_string()),
            verb: None,
            status: Some(status),
            count,
            delay_ms: None,
            message: None,
        }
    }

    /// A fault delaying the next `count` requests matching `method` and `path`.
    pub fn delay(method: &str, path: &str, delay: Duration, count: u64) -> Fault {
        Fault {
            delay_ms: Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
            status: None,
            ..Fault::status(method, path, 0, count)
        }
    }

    fn catches(&self, method: &Method, path: &str, info: &RequestInfo) -> bool {
        let method_ok = self
            .method
            .as_deref()
            .is_none_or(|m| m == "*" || m.eq_ignore_ascii_case(method.as_str()));
        let path_ok = self
            .path
            .as_deref()
            .is_none_or(|glob| glob_matches(glob, path));
        let verb_ok = self.verb.as_deref().is_none_or(|v| v == info.verb);
        method_ok && path_ok && verb_ok
    }
}

/// `*` matches any run of characters (slashes included), `?` any one character.
pub fn glob_matches(glob: &str, text: &str) -> bool {
    let pattern: Vec<char> = glob.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // Iterative matching with backtracking to the last `*`.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(c) if *c == '?' || *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// What kube-apiserver's RequestInfo resolver makes of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    pub verb: String,
    /// `plural[.group][/subresource]`, or the path of a non-resource request.
    pub resource: String,
    pub name: String,
    pub namespace: String,
    pub is_resource_request: bool,
}

impl RequestInfo {
    /// The counter key: `list deployments.apps`, `get /version`.
    pub fn key(&self) -> String {
        format!("{} {}", self.verb, self.resource)
    }

    /// Resolves `method` on `path` with the query string `query`, as kube-apiserver does.
    pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let method_verb = match *method {
            Method::POST => "create",
            Method::GET | Method::HEAD => "get",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "",
        };
        let non_resource = || RequestInfo {
            verb: method.as_str().to_ascii_lowercase(),
            resource: path.to_string(),
            name: String::new(),
            namespace: String::new(),
            is_resource_request: false,
        };
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, mut rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return non_resource(),
        };
        if rest.is_empty() || method_verb.is_empty() {
            return non_resource();
        }
        let mut verb = method_verb.to_string();
        if rest[0] == "watch" {
            verb = "watch".into();
            rest = &rest[1..];
        }
        let mut namespace = String::new();
        if rest.first() == Some(&"namespaces") && rest.len() > 1 {
            namespace = rest[1].to_string();
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        let Some(plural) = rest.first() else {
            return non_resource();
        };
        let name = rest.get(1).copied().unwrap_or_default().to_string();
        let subresource = rest.get(2).copied().unwrap_or_default();
        if name.is_empty() && verb == "get" {
            let watching = query_param(query, "watch")
                .is_some_and(|v| matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"));
            verb = if watching { "watch" } else { "list" }.into();
        }
        if name.is_empty() && verb == "delete" {
            verb = "deletecollection".into();
        }
        let mut resource = (*plural).to_string();
        if !group.is_empty() {
            resource = format!("{resource}.{group}");
        }
        if !subresource.is_empty() {
            resource = format!("{resource}/{subresource}");
        }
        RequestInfo {
            verb,
            resource,
            name,
            namespace,
            is_resource_request: true,
        }
    }
}

fn query_param<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The Status kube-apiserver sends with `code`, for the request described by `info`.
fn fault_error(code: u16, info: &RequestInfo, message: Option<&str>) -> ApiError {
    let target = format!(
        "{} {:?}",
        info.resource.split('/').next().unwrap_or_default(),
        info.name
    );
    let (reason, usual) = match code {
        400 => (
            "BadRequest",
            "the request is invalid (injected fault)".to_string(),
        ),
        401 => ("Unauthorized", "Unauthorized".to_string()),
        403 => (
            "Forbidden",
            format!("{target} is forbidden (injected fault)"),
        ),
        404 => ("NotFound", format!("{target} not found")),
        409 => (
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {target}: the object has been modified; please apply your changes to the latest version and try again"
            ),
        ),
        410 => (
            "Expired",
            "The resourceVersion for the provided watch is too old.".to_string(),
        ),
        422 => ("Invalid", format!("{target} is invalid (injected fault)")),
        429 => (
            "TooManyRequests",
            "Too many requests, please try again later.".to_string(),
        ),
        500 => (
            "InternalError",
            "Internal error occurred: injected fault".to_string(),
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request".to_string(),
        ),
        504 => (
            "Timeout",
            "Timeout: request did not complete within the allotted timeout".to_string(),
        ),
        _ => ("", format!("injected fault: HTTP {code}")),
    };
    ApiError::new(code, reason, message.map_or(usual, str::to_string))
}

fn status_response(error: &ApiError) -> Response {
    let mut response = Response::new(Body::from(error.to_status().to_string()));
    *response.status_mut() =
        StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// One API request as the request log records it ([`Controls::record_requests`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedRequest {
    /// Its place in the order the requests were answered, from 0 when recording started or at
    /// the last reset.
    pub seq: u64,
    /// When it arrived, in microseconds since the Unix epoch (comparable across processes).
    pub at_micros: u64,
    /// As in the counts: `list`, `watch`, `update`, ... (for a non-resource request the method).
    pub verb: String,
    /// As in the counts: `deployments.apps`, `combs.comb.internal/status`, or the path.
    pub resource: String,
    /// Empty for a cluster-wide or non-resource request.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Empty for a list, a collection watch or a create.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The `Impersonate-User` it carried, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The HTTP status answered (a watch: the one it opened with).
    pub code: u16,
}

impl LoggedRequest {
    /// The counter key: `list deployments.apps`.
    pub fn key(&self) -> String {
        format!("{} {}", self.verb, self.resource)
    }
}

/// Microseconds since the Unix epoch at `at`, the request log's clock.
pub fn epoch_micros(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

struct State {
    requests: BTreeMap<String, u64>,
    next_seq: u64,
    /// The counts of the requests with `Impersonate-User`, by that user.
    impersonated: BTreeMap<String, BTreeMap<String, u64>>,
    faults: Vec<Fault>,
    /// The request log while recording.
    log: Option<Vec<LoggedRequest>>,
}

/// How a partitioned cluster treats API requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionMode {
    /// Refused (503, connection closed), open watches cut: a peer that is down.
    #[default]
    Refuse,
    /// Taken and not answered, open watches quiet: a network that drops packets without
    /// closing connections. Healing serves what waited.
    Hang,
}

/// The body of `POST /_sandbox/partition` (empty: refuse).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionRequest {
    #[serde(default)]
    mode: PartitionMode,
}

/// The controls of one cluster; clones share them.
#[derive(Clone)]
pub struct Controls {
    state: Arc<Mutex<State>>,
    /// `None` while healed.
    partition: Arc<watch::Sender<Option<PartitionMode>>>,
}

impl std::fmt::Debug for Controls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controls")
            .field("partitioned", &self.is_partitioned())
            .finish_non_exhaustive()
    }
}

impl Default for Controls {
    fn default() -> Self {
        Controls::new()
    }
}

impl Controls {
    pub fn new() -> Controls {
        Controls {
            state: Arc::new(Mutex::new(State {
                requests: BTreeMap::new(),
                next_seq: 0,
                impersonated: BTreeMap::new(),
                faults: Vec::new(),
                log: None,
            })),
            partition: Arc::new(watch::Sender::new(None)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a single insert or removal, so a poisoned lock holds consistent data.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// API requests so far, by `<verb> <resource>`.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.lock().requests.clone()
    }

    /// How many `verb` requests on `resource` (`list`, `deployments.apps`) were made.
    pub fn request_count(&self, verb: &str, resource: &str) -> u64 {
        self.lock()
            .requests
            .get(&format!("{verb} {resource}"))
            .copied()
            .unwrap_or(0)
    }

    /// Every API request counted so far.
    pub fn total_requests(&self) -> u64 {
        self.lock().requests.values().sum()
    }

    /// The API requests so far that impersonated `user` (header `Impersonate-User`), by
    /// `<verb> <resource>`; they are in [`Controls::requests`] too.
    pub fn requests_as(&self, user: &str) -> BTreeMap<String, u64> {
        self.lock()
            .impersonated
            .get(user)
            .cloned()
            .unwrap_or_default()
    }

    /// Zeroes every count, impersonated ones included, and empties the request log (recording
    /// goes on if it was on).
    pub fn reset_requests(&self) {
        let mut state = self.lock();
        state.requests.clear();
        state.next_seq = 0;
        state.impersonated.clear();
        if let Some(log) = state.log.as_mut() {
            log.clear();
        }
    }

    /// Starts recording every API request in the request log (already recording: it goes on
    /// with what it has), or stops and drops the log.
    pub fn record_requests(&self, on: bool) {
        let mut state = self.lock();
        match (on, state.log.is_some()) {
            (true, false) => {
                state.log = Some(Vec::new());
                state.next_seq = 0;
            }
            (false, _) => state.log = None,
            (true, true) => {}
        }
    }

    /// The requests recorded since recording started or the last [`Controls::reset_requests`],
    /// in the order they were answered; empty when not recording.
    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.lock().log.clone().unwrap_or_default()
    }

    /// Arms a fault; faults are tried in the order they were armed.
    pub fn inject(&self, fault: Fault) {
        if fault.count > 0 {
            self.lock().faults.push(fault);
        }
    }

    /// The faults still armed, with their remaining counts.
    pub fn faults(&self) -> Vec<Fault> {
        self.lock().faults.clone()
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Refuses every API request and cuts open watches until [`Controls::heal`].
    pub fn partition(&self) {
        self.partition_as(PartitionMode::Refuse);
    }

    /// Partitions the cluster in `mode` until [`Controls::heal`].
    pub fn partition_as(&self, mode: PartitionMode) {
        self.partition.send_replace(Some(mode));
    }

    pub fn heal(&self) {
        self.partition.send_replace(None);
    }

    pub fn is_partitioned(&self) -> bool {
        self.partition.borrow().is_some()
    }

    /// The partition's mode, `None` while healed.
    pub fn partition_mode(&self) -> Option<PartitionMode> {
        *self.partition.borrow()
    }

    /// Wraps a cluster's API router: `/_sandbox/` served here, every other request counted,
    /// faulted or refused as the controls say.
    pub fn wrap(&self, api: Router) -> Router {
        Router::new().fallback_service(ControlsService {
            controls: self.clone(),
            api,
        })
    }

    fn count(&self, info: &RequestInfo, impersonated: Option<&str>) {
        let mut state = self.lock();
        *state.requests.entry(info.key()).or_default() += 1;
        if let Some(user) = impersonated {
            *state
                .impersonated
                .entry(user.to_string())
                .or_default()
                .entry(info.key())
                .or_default() += 1;
        }
    }

    fn log(&self, info: &RequestInfo, impersonated: Option<&str>, at: SystemTime, code: u16) {
        let mut state = self.lock();
        let seq = state.next_seq;
        if let Some(log) = state.log.as_mut() {
            log.push(LoggedRequest {
                seq,
                at_micros: epoch_micros(at),
                verb: info.verb.clone(),
                resource: info.resource.clone(),
                namespace: info.namespace.clone(),
                name: info.name.clone(),
                user: impersonated.map(str::to_string),
                code,
            });
            state.next_seq += 1;
        }
    }

    /// Consumes one catch of the first fault that catches this request.
    fn take_fault(&self, method: &Method, path: &str, info: &RequestInfo) -> Option<Fault> {
        let mut state = self.lock();
        let index = state
            .faults
            .iter()
            .position(|f| f.catches(method, path, info))?;
        let fault = &mut state.faults[index];
        fault.count -= 1;
        let caught = fault.clone();
        if fault.count == 0 {
            state.faults.remove(index);
        }
        Some(caught)
    }

    async fn serve_control(&self, request: Request<Body>) -> Response {
        let method = request.method().clone();
        let path = request
            .uri()
            .path()
            .trim_start_matches(PREFIX)
            .trim_end_matches('/')
            .to_string();
        match (method, path.as_str()) {
            (Method::GET, "requests") => json_response(StatusCode::OK, &json!(self.requests())),
            (Method::GET, "requests/impersonated") => {
                json_response(StatusCode::OK, &json!(self.lock().impersonated.clone()))
            }
            (Method::POST, "requests/reset") => {
                self.reset_requests();
                json_response(StatusCode::OK, &json!({}))
            }
            (Method::GET, "requests/log") => {
                json_response(StatusCode::OK, &json!(self.request_log()))
            }
            (Method::POST, "requests/log") => {
                self.record_requests(true);
                json_response(StatusCode::OK, &json!({"recording": true}))
            }
            (Method::DELETE, "requests/log") => {
                self.record_requests(false);
                json_response(StatusCode::OK, &json!({"recording": false}))
            }
            (Method::GET, "faults") => json_response(StatusCode::OK, &json!(self.faults())),
            (Method::POST, "faults") => {
                let body = match axum::body::to_bytes(request.into_body(), MAX_BODY).await {
                    Ok(body) => body,
                    Err(error) => {
                        return status_response(&ApiError::bad_request(format!(
                            "unreadable body: {error}"
                        )));
                    }
                };
                match serde_json::from_slice::<Fault>(&body) {
                    Ok(fault) => {
                        self.inject(fault.clone());
                        json_response(StatusCode::CREATED, &json!(fault))
                    }
                    Err(error) => status_response(&ApiError::bad_request(format!(
                        "a fault is {{\"method\", \"path\", \"verb\", \"status\", \"count\", \"delayMs\", \"message\"}}: {error}"
                    ))),
                }
            }
            (Method::DELETE, "faults") => {
                self.clear_faults();
                json_response(StatusCode::OK, &json!({}))
            }
            (Method::POST, "partition") => {
                let body = match axum::body::to_bytes(request.into_body(), MAX_BODY).await {
                    Ok(body) => body,
                    Err(error) => {
                        return status_response(&ApiError::bad_request(format!(
                            "unreadable body: {error}"
                        )));
                    }
                };
                let asked = if body.iter().all(u8::is_ascii_whitespace) {
                    Ok(PartitionRequest::default())
                } else {
                    serde_json::from_slice::<PartitionRequest>(&body)
                };
                match asked {
                    Ok(asked) => {
                        self.partition_as(asked.mode);
                        json_response(
                            StatusCode::OK,
                            &json!({"partitioned": true, "mode": asked.mode}),
                        )
                    }
                    Err(error) => status_response(&ApiError::bad_request(format!(
                        "a partition is {{\"mode\": \"refuse\"|\"hang\"}} (empty: refuse): {error}"
                    ))),
                }
            }
            (Method::POST, "heal") => {
                self.heal();
                json_response(StatusCode::OK, &json!({"partitioned": false}))
            }
            (Method::GET, "partition") => json_response(
                StatusCode::OK,
                &match self.partition_mode() {
                    Some(mode) => json!({"partitioned": true, "mode": mode}),
                    None => json!({"partitioned": false}),
                },
            ),
            (method, other) => status_response(&ApiError::new(
                404,
                "NotFound",
                format!(
                    "no sandbox control {method} {PREFIX}{other}; there are GET requests, GET requests/impersonated, POST requests/reset, GET|POST|DELETE requests/log, GET|POST|DELETE faults, POST partition, POST heal"
                ),
            )),
        }
    }

    async fn serve_api(&self, api: Router, request: Request<Body>) -> Response {
        // A hanging partition takes the request and answers once healed (or refuses it, if the
        // partition turned into a refusing one meanwhile).
        let mut partition = self.partition.subscribe();
        if partition
            .wait_for(|mode| *mode != Some(PartitionMode::Hang))
            .await
            .is_err()
        {
            // The controls are gone: so is the partition.
        }
        if self.is_partitioned() {
            let mut refused = status_response(&ApiError::new(
                503,
                "ServiceUnavailable",
                "the sandbox cluster is partitioned (POST /_sandbox/heal ends it)",
            ));
            refused
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return refused;
        }
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let info = RequestInfo::parse(&method, &path, request.uri().query());
        let impersonated = request
            .headers()
            .get(IMPERSONATE_USER)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        let arrived = SystemTime::now();
        self.count(&info, impersonated.as_deref());
        if let Some(fault) = self.take_fault(&method, &path, &info) {
            if let Some(delay) = fault.delay_ms {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if let Some(code) = fault.status {
                let mut response =
                    status_response(&fault_error(code, &info, fault.message.as_deref()));
                if code == 429 {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                }
                self.log(&info, impersonated.as_deref(), arrived, code);
                return response;
            }
        }
        let response = match api.oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        self.log(
            &info,
            impersonated.as_deref(),
            arrived,
            response.status().as_u16(),
        );
        if info.verb != "watch" {
            return response;
        }
        // A partition cuts the streams that are already open, or holds them quiet while it
        // hangs, as a network partition would.
        response.map(|body| Body::from_stream(WatchUnderPartition::new(body, partition)))
    }
}

/// The body of a watch under the controls: ended with an error when the cluster is partitioned
/// (refusing), held back while a partition hangs.
struct WatchUnderPartition {
    body: axum::body::BodyDataStream,
    partition: watch::Receiver<Option<PartitionMode>>,
    /// Resolves at the next change of the partition.
    changed: BoxFuture<'static, ()>,
    cut: bool,
}

impl WatchUnderPartition {
    fn new(body: Body, partition: watch::Receiver<Option<PartitionMode>>) -> WatchUnderPartition {
        WatchUnderPartition {
            body: body.into_data_stream(),
            changed: next_change(partition.clone()),
            partition,
            cut: false,
        }
    }
}

/// Resolves when `partition` changes; never, once the controls are gone (no partition can come).
fn next_change(mut partition: watch::Receiver<Option<PartitionMode>>) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        if partition.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
}

impl Stream for WatchUnderPartition {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.cut {
            return Poll::Ready(None);
        }
        // Registers for the next change whatever the mode is now, so a hang that heals wakes
        // the stream.
        while self.changed.as_mut().poll(cx).is_ready() {
            // Seen here, so that the next future waits for the change after this one.
            self.partition.borrow_and_update();
            self.changed = next_change(self.partition.clone());
        }
        let mode = *self.partition.borrow();
        match mode {
            Some(PartitionMode::Refuse) => {
                self.cut = true;
                return Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "the sandbox cluster is partitioned",
                ))));
            }
            Some(PartitionMode::Hang) => return Poll::Pending,
            None => {}
        }
        Pin::new(&mut self.body)
            .poll_next(cx)
            .map(|item| item.map(|chunk| chunk.map_err(std::io::Error::other)))
    }
}

/// Test controls for every cluster of a sandbox, as a sandbox extension; keep a clone of the
/// `Arc` to reach a cluster's [`Controls`] in-process.
#[derive(Debug, Default)]
pub struct ClusterControls {
    by_cluster: Mutex<BTreeMap<String, Controls>>,
}

impl ClusterControls {
    /// The controls of the cluster named `cluster`, once the sandbox has started it.
    pub fn get(&self, cluster: &str) -> Option<Controls> {
        self.by_cluster
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(cluster)
            .cloned()
    }
}

impl ClusterExtension for ClusterControls {
    fn layer(&self, cluster: &ClusterHandle, router: Router) -> Router {
        let controls = Controls::new();
        let wrapped = controls.wrap(router);
        self.by_cluster
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(cluster.name().to_string(), controls);
        wrapped
    }

    fn controls(&self, cluster: &str) -> Option<Controls> {
        self.get(cluster)
    }
}

/// The controls in front of a cluster's API router.
#[derive(Clone)]
struct ControlsService {
    controls: Controls,
    api: Router,
}

impl Service<Request<Body>> for ControlsService {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let controls = self.controls.clone();
        let api = self.api.clone();
        Box::pin(async move {
            if request.uri().path().starts_with(PREFIX) {
                Ok(controls.serve_control(request).await)
            } else {
                Ok(controls.serve_api(api, request).await)
            }
        })
    }
}

#[cfg(test)]
mod tests;
