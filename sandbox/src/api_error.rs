//! Errors of the Kubernetes API, rendered as `metav1.Status` exactly like kube-apiserver does.

use serde_json::{Value, json};

use crate::resources::ResourceType;

/// One failed API call: HTTP code, machine-readable reason, human message and optional details.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `BadRequest`, `Expired`, ...
    pub reason: String,
    pub message: String,
    /// `metav1.StatusDetails` (name, group, kind, causes).
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// One field error of an `Invalid` response (`metav1.StatusCause`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`, ...
    pub reason: &'static str,
    pub field: String,
    /// The message as kube-apiserver prints it after the field path.
    pub message: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {shown}: {detail}"),
        }
    }

    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        FieldError {
            reason: "FieldValueRequired",
            field: field.into(),
            message,
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        FieldError {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {detail}"),
        }
    }

    pub fn unsupported(field: impl Into<String>, value: &Value, allowed: &[&str]) -> Self {
        let quoted: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        FieldError {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!(
                "Unsupported value: {value}: supported values: {}",
                quoted.join(", ")
            ),
        }
    }
}

/// `configmaps` or `deployments.apps`: how kube-apiserver names a resource in messages.
pub fn qualified_resource(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    }
}

/// `ConfigMap` or `Deployment.apps`: how kube-apiserver names a kind in `Invalid` messages.
fn qualified_kind(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    }
}

fn resource_details(rt: &ResourceType, name: &str) -> Value {
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !rt.group.is_empty() {
        details.insert("group".into(), json!(rt.group));
    }
    details.insert("kind".into(), json!(rt.plural));
    Value::Object(details)
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", qualified_resource(rt)),
        )
        .with_details(resource_details(rt, name))
    }

    /// `namespaces "x" not found`, for objects created or listed in a missing namespace.
    pub fn namespace_not_found(namespace: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("namespaces {namespace:?} not found"),
        )
        .with_details(json!({"name": namespace, "kind": "namespaces"}))
    }

    /// The path names no resource this server serves.
    pub fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", qualified_resource(rt)),
        )
        .with_details(resource_details(rt, name))
    }

    /// The optimistic-concurrency failure of an update with a stale resourceVersion.
    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        Self::conflict_because(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn conflict_because(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                qualified_resource(rt)
            ),
        )
        .with_details(resource_details(rt, name))
    }

    /// 409 for a delete whose preconditions do not hold: kube-apiserver's `rest.BeforeDelete`
    /// names the Kind rather than the resource (`Operation cannot be fulfilled on ConfigMap
    /// "x": ...`, details `{name, group, kind: ConfigMap}`).
    pub fn precondition_failed(rt: &ResourceType, name: &str, why: &str) -> Self {
        let mut details = resource_details(rt, name);
        details["kind"] = json!(rt.kind);
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                qualified_kind(rt)
            ),
        )
        .with_details(details)
    }

    /// 422 with one cause per field error, worded like kube-apiserver's `NewInvalid`.
    pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        let joined = if errors.len() == 1 {
            format!("{}: {}", errors[0].field, errors[0].message)
        } else {
            let parts: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect();
            format!("[{}]", parts.join(", "))
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field}))
            .collect();
        let mut details = serde_json::Map::new();
        details.insert("name".into(), json!(name));
        if !rt.group.is_empty() {
            details.insert("group".into(), json!(rt.group));
        }
        details.insert("kind".into(), json!(rt.kind));
        details.insert("causes".into(), Value::Array(causes));
        Self::new(
            422,
            "Invalid",
            format!("{} {name:?} is invalid: {joined}", qualified_kind(rt)),
        )
        .with_details(Value::Object(details))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 410 Expired: the requested resourceVersion is older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn forbidden(rt: &ResourceType, name: &str, why: &str) -> Self {
        let subject = if name.is_empty() {
            qualified_resource(rt)
        } else {
            format!("{} {name:?}", qualified_resource(rt))
        };
        Self::new(403, "Forbidden", format!("{subject} is forbidden: {why}"))
            .with_details(resource_details(rt, name))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// A 415 as kube-apiserver's negotiation sends it: the message lists what it accepts, and
    /// no details.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// The `metav1.Status` body of this error.
    pub fn to_status(&self) -> Value {
        let mut status = serde_json::Map::new();
        status.insert("kind".into(), json!("Status"));
        status.insert("apiVersion".into(), json!("v1"));
        status.insert("metadata".into(), json!({}));
        status.insert("status".into(), json!("Failure"));
        status.insert("message".into(), json!(self.message));
        status.insert("reason".into(), json!(self.reason));
        if let Some(details) = &self.details {
            status.insert("details".into(), details.clone());
        }
        status.insert("code".into(), json!(self.code));
        Value::Object(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;

    #[test]
    fn messages_match_kube_apiserver() {
        let deploy = builtin("apps", "Deployment").expect("deployments are built in");
        let cm = builtin("", "ConfigMap").expect("configmaps are built in");
        let cases = [
            (
                ApiError::not_found(&deploy, "web"),
                404,
                "NotFound",
                r#"deployments.apps "web" not found"#,
            ),
            (
                ApiError::conflict(&cm, "x"),
                409,
                "Conflict",
                r#"Operation cannot be fulfilled on configmaps "x": the object has been modified; please apply your changes to the latest version and try again"#,
            ),
            (
                ApiError::already_exists(&cm, "x"),
                409,
                "AlreadyExists",
                r#"configmaps "x" already exists"#,
            ),
            (
                ApiError::namespace_not_found("nope"),
                404,
                "NotFound",
                r#"namespaces "nope" not found"#,
            ),
            (
                ApiError::invalid(
                    &deploy,
                    "web",
                    &[FieldError::invalid(
                        "spec.replicas",
                        &json!(-1),
                        "must be greater than or equal to 0",
                    )],
                ),
                422,
                "Invalid",
                r#"Deployment.apps "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"#,
            ),
        ];
        for (error, code, reason, message) in cases {
            assert_eq!(error.code, code);
            assert_eq!(error.reason, reason);
            assert_eq!(error.message, message);
            let status = error.to_status();
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["status"], "Failure");
            assert_eq!(status["code"], code);
        }
        assert_eq!(
            ApiError::not_found(&deploy, "web").to_status()["details"],
            json!({"name": "web", "group": "apps", "kind": "deployments"})
        );
    }
}
