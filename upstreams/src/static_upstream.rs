//! `Kubernetes::Comb::Upstream::Static` (reference §5.3): fixed endpoints and a fixed status,
//! for services outside any Comb (a managed database, a vendor API) and for tests.

use async_trait::async_trait;
use comb_api::{Endpoint, Phase, Reason, name_problem};
use serde_json::{Map, Value};

use crate::args::{Args, check_keys, describe};
use crate::error::{Error, Result};
use crate::upstream::{Reads, Upstream, UpstreamContext, UpstreamStatus};

/// The canonical class name.
pub const STATIC_CLASS: &str = "Kubernetes::Comb::Upstream::Static";

/// The keys of an endpoint of a Static upstream.
const ENDPOINT_KEYS: [&str; 5] = ["cluster", "external", "name", "port", "protocol"];

/// An upstream whose endpoints and status are what it was built with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Static {
    endpoints: Vec<Endpoint>,
    status: UpstreamStatus,
}

impl Static {
    /// Running, reachable, via nobody, offering `endpoints`.
    pub fn new(endpoints: Vec<Endpoint>) -> Static {
        Static {
            endpoints,
            status: UpstreamStatus {
                reachable: true,
                phase: Some(Phase::Running),
                via: Some(Vec::new()),
                context: None,
                message: None,
                reason: None,
            },
        }
    }

    /// The same upstream in `phase`.
    pub fn with_phase(mut self, phase: impl Into<Phase>) -> Static {
        self.status.phase = Some(phase.into());
        self
    }

    /// The same upstream reached through the layers `via`, nearest first.
    pub fn with_via(mut self, via: Vec<String>) -> Static {
        self.status.via = Some(via);
        self
    }

    /// The same upstream, reachable or not.
    pub fn with_reachable(mut self, reachable: bool) -> Static {
        self.status.reachable = reachable;
        self
    }

    /// The same upstream in its phase for `reason`.
    pub fn with_reason(mut self, reason: impl Into<Reason>) -> Static {
        self.status.reason = Some(reason.into());
        self
    }

    /// The same upstream saying `message`.
    pub fn with_message(mut self, message: impl Into<String>) -> Static {
        self.status.message = Some(message.into());
        self
    }

    /// Builds it from constructor arguments (`spec.upstream` without `class`): `endpoints`
    /// (objects with `name`, `port`, `protocol`, `cluster`, `external`), `phase` (default
    /// `Running`), `via` (default `[]`), `reachable` (default true) and `message`.
    pub fn from_args(args: &Map<String, Value>) -> Result<Static> {
        let args = Args::new(
            STATIC_CLASS,
            args,
            &["endpoints", "message", "phase", "reachable", "via"],
        )?;
        let endpoints = args
            .array("endpoints")?
            .unwrap_or_default()
            .iter()
            .map(endpoint_from_value)
            .collect::<Result<Vec<_>>>()?;
        let mut upstream = Static::new(endpoints);
        if let Some(phase) = args.string("phase")? {
            upstream = upstream.with_phase(phase);
        }
        if let Some(via) = args.strings("via")? {
            upstream = upstream.with_via(via);
        }
        if let Some(reachable) = args.boolean("reachable")? {
            upstream = upstream.with_reachable(reachable);
        }
        if let Some(message) = args.string("message")? {
            upstream = upstream.with_message(message);
        }
        Ok(upstream)
    }
}

/// One endpoint of the arguments.
fn endpoint_from_value(value: &Value) -> Result<Endpoint> {
    let fail = |message: String| Error::Resolve(format!("{STATIC_CLASS}: {message}"));
    let Value::Object(map) = value else {
        return Err(fail(format!(
            "an endpoint is an object, got {}",
            describe(value)
        )));
    };
    check_keys(&format!("{STATIC_CLASS}: an endpoint"), map, &ENDPOINT_KEYS)?;
    let text = |key: &str| -> Result<Option<String>> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(other) => Err(fail(format!(
                "an endpoint's {key} is a string, got {}",
                describe(other)
            ))),
        }
    };
    let name = text("name")?
        .filter(|name| !name.is_empty())
        .ok_or_else(|| fail("an endpoint has no name".to_string()))?;
    if let Some(problem) = name_problem(&name) {
        return Err(fail(problem));
    }
    let port = match map.get("port") {
        None | Some(Value::Null) => return Err(fail(format!("endpoint {name} has no port"))),
        Some(port) => port_number(port).ok_or_else(|| {
            fail(format!(
                "endpoint {name} has the port {port}, not an integer"
            ))
        })?,
    };
    let mut endpoint = Endpoint::new(&name, port).map_err(|error| fail(error.to_string()))?;
    if let Some(protocol) = text("protocol")? {
        endpoint = endpoint.with_protocol(protocol);
    }
    if let Some(cluster) = text("cluster")? {
        endpoint = endpoint.with_cluster(cluster);
    }
    if let Some(external) = text("external")? {
        endpoint = endpoint.with_external(external);
    }
    Ok(endpoint)
}

/// An integer, or a string of one (`"5432"`), as a port.
fn port_number(value: &Value) -> Option<i32> {
    match value {
        Value::Number(number) => number.as_i64().and_then(|n| i32::try_from(n).ok()),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

#[async_trait]
impl Upstream for Static {
    fn class_name(&self) -> &str {
        STATIC_CLASS
    }

    async fn status(&self, _ctx: &UpstreamContext) -> Result<UpstreamStatus> {
        Ok(self.status.clone())
    }

    async fn endpoints(&self, _ctx: &UpstreamContext) -> Result<Vec<Endpoint>> {
        Ok(self.endpoints.clone())
    }

    /// Its answers are its arguments: it reads nothing, so any Comb may name it.
    fn reads(&self, _ctx: &UpstreamContext) -> Reads {
        Reads::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::context;
    use serde_json::json;

    fn build(args: Value) -> Result<Static> {
        Static::from_args(args.as_object().unwrap())
    }

    #[tokio::test]
    async fn defaults_are_running_reachable_via_nobody() {
        let upstream = build(json!({})).unwrap();
        let status = upstream.status(&context()).await.unwrap();
        assert_eq!(
            status,
            UpstreamStatus {
                reachable: true,
                phase: Some("Running".into()),
                via: Some(vec![]),
                context: None,
                message: None,
                reason: None,
            }
        );
        assert!(upstream.endpoints(&context()).await.unwrap().is_empty());
        assert_eq!(upstream.class_name(), STATIC_CLASS);
        assert!(
            upstream
                .replicate_into(&context())
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(upstream.reads(&context()), Reads::Nothing);
    }

    #[tokio::test]
    async fn everything_given() {
        let upstream = build(json!({
            "endpoints": [
                {"name": "postgres", "port": 5432, "cluster": "postgres.shared.svc:5432"},
                {"name": "dns", "port": "53", "protocol": "udp", "external": "10.0.0.1:53"},
            ],
            "phase": "Pending", "via": ["static"], "reachable": false, "message": "vendor down",
        }))
        .unwrap();
        let status = upstream.status(&context()).await.unwrap();
        assert_eq!(
            status,
            UpstreamStatus {
                reachable: false,
                phase: Some("Pending".into()),
                via: Some(vec!["static".into()]),
                context: None,
                message: Some("vendor down".into()),
                reason: None,
            }
        );
        let endpoints = upstream.endpoints(&context()).await.unwrap();
        assert_eq!(
            endpoints,
            [
                Endpoint::new("postgres", 5432)
                    .unwrap()
                    .with_cluster("postgres.shared.svc:5432"),
                Endpoint::new("dns", 53)
                    .unwrap()
                    .with_protocol("udp")
                    .with_external("10.0.0.1:53"),
            ]
        );
        assert_eq!(endpoints[0].protocol(), "tcp");
    }

    #[test]
    fn bad_arguments() {
        let s = STATIC_CLASS;
        let cases = [
            (
                json!({"endpoint": []}),
                format!(
                    "{s}: unknown key(s) endpoint (known: endpoints, message, phase, reachable, via)"
                ),
            ),
            (
                json!({"endpoints": {"name": "a"}}),
                format!("{s}: endpoints is an array, got an object"),
            ),
            (
                json!({"endpoints": ["postgres:5432"]}),
                format!("{s}: an endpoint is an object, got a string"),
            ),
            (
                json!({"endpoints": [{"name": "a", "port": 1, "sevice": "x"}]}),
                format!(
                    "{s}: an endpoint: unknown key(s) sevice (known: cluster, external, name, port, protocol)"
                ),
            ),
            (
                json!({"endpoints": [{"port": 1}]}),
                format!("{s}: an endpoint has no name"),
            ),
            (
                json!({"endpoints": [{"name": "Web_UI", "port": 1}]}),
                format!(
                    "{s}: the name 'Web_UI' is not a DNS-1123 label (lowercase letters, digits and -, \
                     alphanumeric at both ends, at most 63 characters), as the name of a Service port must be"
                ),
            ),
            (
                json!({"endpoints": [{"name": "postgres"}]}),
                format!("{s}: endpoint postgres has no port"),
            ),
            (
                json!({"endpoints": [{"name": "postgres", "port": "pg"}]}),
                format!("{s}: endpoint postgres has the port \"pg\", not an integer"),
            ),
            (
                json!({"endpoints": [{"name": "postgres", "port": 1, "cluster": 5}]}),
                format!("{s}: an endpoint's cluster is a string, got a number"),
            ),
            (
                json!({"via": "prod"}),
                format!("{s}: via is an array of strings, got a string"),
            ),
            (
                json!({"reachable": "yes"}),
                format!("{s}: reachable is true or false, got a string"),
            ),
            (
                json!({"phase": 1}),
                format!("{s}: phase is a non-empty string, got a number"),
            ),
        ];
        for (args, message) in cases {
            let error = build(args).unwrap_err();
            assert_eq!(error.to_string(), message);
            assert_eq!(error.category(), "resolve");
        }
    }
}
