//! The built-in class `Manifests` (DESIGN §4), so that users need no Rust: everything comes from
//! `spec.config`:
//!
//! ```yaml
//! config:
//!   manifests: [ {apiVersion: apps/v1, kind: Deployment, ...}, ... ]
//!   endpoints: [ {name: postgres, port: 5432, external: "192.0.2.10:5432"} ]
//!   requires: {secrets: [mailer-relay], configMaps: [x], config: [relay_host]}
//!   optional: true
//!   stub: {manifests: [...], endpoints: [...]}
//! ```
//!
//! Its stub `Manifests::Stub` is the same class reading `config.stub` instead; it is checked
//! against the original's endpoints like any stub. `Kubernetes::Comb::Static` is an alias.

use std::sync::Arc;

use async_trait::async_trait;
use comb_api::names::object_name_problem;
use serde_json::{Map, Value};

use crate::engine::class::{ClassRegistry, CombClass, PrerequisiteLookup};
use crate::engine::context::CombContext;
use crate::engine::endpoints::EndpointDecl;
use crate::engine::values::{describe_value, unknown_keys};
use crate::error::{Error, Result};

/// The class name.
pub const MANIFESTS: &str = "Manifests";
/// The class name of its stub.
pub const MANIFESTS_STUB: &str = "Manifests::Stub";
/// The Perl name, an alias of [`MANIFESTS`].
pub const STATIC_ALIAS: &str = "Kubernetes::Comb::Static";

/// The keys of `config.requires`.
const REQUIRES_KEYS: [&str; 3] = ["config", "configMaps", "secrets"];

// The registry's constructor of the built-ins lives beside them, so that the class contract
// (class.rs) never depends on a class that implements it.
impl ClassRegistry {
    /// The built-in classes: `Manifests` (alias `Kubernetes::Comb::Static`) and its stub
    /// `Manifests::Stub`.
    pub fn with_builtins() -> ClassRegistry {
        let mut registry = ClassRegistry::new();
        ManifestsClass::register(&mut registry);
        registry
    }
}

/// `Manifests`, or its stub `Manifests::Stub` (which reads `config.stub`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManifestsClass {
    stub: bool,
}

impl ManifestsClass {
    /// Registers `Manifests`, `Manifests::Stub` and the alias `Kubernetes::Comb::Static`.
    pub fn register(registry: &mut ClassRegistry) {
        registry
            .register_shared(Arc::new(ManifestsClass { stub: false }))
            .register_shared(Arc::new(ManifestsClass { stub: true }))
            .alias(STATIC_ALIAS, MANIFESTS);
    }

    /// Where this class reads its settings: `config`, or `config.stub` for the stub (absent: {}).
    fn root<'a>(&self, ctx: &'a CombContext) -> Result<Option<&'a Map<String, Value>>> {
        if !self.stub {
            return Ok(Some(&ctx.config));
        }
        match ctx.config.get("stub") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(stub)) => Ok(Some(stub)),
            Some(other) => Err(Error::class(format!(
                "{MANIFESTS_STUB}: config.stub must be an object ({{manifests, endpoints}}), got {}",
                describe_value(other)
            ))),
        }
    }

    /// `config[.stub].<key>` as a list, empty when absent.
    fn list<'a>(&self, ctx: &'a CombContext, key: &str) -> Result<&'a [Value]> {
        let path = if self.stub {
            format!("config.stub.{key}")
        } else {
            format!("config.{key}")
        };
        let value = self.root(ctx)?.and_then(|root| root.get(key));
        match value {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(Error::class(format!(
                "{}: {path} must be a list, got {}",
                self.name(),
                describe_value(other)
            ))),
        }
    }
}

#[async_trait]
impl CombClass for ManifestsClass {
    fn name(&self) -> &str {
        if self.stub { MANIFESTS_STUB } else { MANIFESTS }
    }

    /// Everything it answers is read from `spec.config`.
    fn pure(&self) -> bool {
        true
    }

    async fn endpoints(&self, ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
        let entries = self.list(ctx, "endpoints").map_err(Error::endpoints_from)?;
        entries
            .iter()
            .map(|entry| EndpointDecl::from_value(self.name(), entry))
            .collect()
    }

    async fn manifests(&self, ctx: &CombContext) -> Result<Vec<Value>> {
        let manifests = self.list(ctx, "manifests").map_err(Error::manifests_from)?;
        Ok(manifests.to_vec())
    }

    async fn check(
        &self,
        ctx: &CombContext,
        lookup: &dyn PrerequisiteLookup,
    ) -> Result<Vec<String>> {
        let requires = match self.root(ctx)?.and_then(|root| root.get("requires")) {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Object(requires)) => requires,
            Some(other) => {
                return Err(Error::class(format!(
                    "{}: config.requires must be an object ({{secrets, configMaps, config}}), got {}",
                    self.name(),
                    describe_value(other)
                )));
            }
        };
        if let Some(unknown) = unknown_keys(requires, &REQUIRES_KEYS) {
            let class = self.name();
            return Err(Error::class(format!(
                "{class}: config.requires has {unknown}"
            )));
        }
        let names = |key: &str| -> Result<Vec<String>> {
            match requires.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| match item {
                        Value::String(name) => Ok(name.clone()),
                        other => Err(Error::class(format!(
                            "{}: config.requires.{key} must be a list of names, got {} in it",
                            self.name(),
                            describe_value(other)
                        ))),
                    })
                    .collect(),
                Some(other) => Err(Error::class(format!(
                    "{}: config.requires.{key} must be a list of names, got {}",
                    self.name(),
                    describe_value(other)
                ))),
            }
        };
        // A Secret's or ConfigMap's name goes into the path of the request that looks it up.
        let object_names = |key: &str| -> Result<Vec<String>> {
            let listed = names(key)?;
            match listed.iter().find_map(|name| object_name_problem("", name)) {
                Some(problem) => Err(Error::class(format!(
                    "{}: config.requires.{key}: {problem}",
                    self.name()
                ))),
                None => Ok(listed),
            }
        };
        let mut missing = Vec::new();
        for secret in object_names("secrets")? {
            let exists = lookup
                .secret_exists(&ctx.namespace, &secret)
                .await
                .map_err(|error| match error.status_code() {
                    // Comb has no Secret rights where nothing names them (least privilege).
                    Some(403) => Error::Class {
                        message: format!(
                            "comb may not read Secrets in namespace {} to see whether secret \
                             {secret} exists ({error}); grant it get on secrets there (the \
                             chart: rbac.secretReadNamespaces)",
                            ctx.namespace
                        ),
                        source: Some(Box::new(error)),
                    },
                    _ => error,
                })?;
            if !exists {
                missing.push(format!("secret {secret}"));
            }
        }
        for config_map in object_names("configMaps")? {
            if !lookup
                .config_map_exists(&ctx.namespace, &config_map)
                .await?
            {
                missing.push(format!("configMap {config_map}"));
            }
        }
        for key in names("config")? {
            if ctx.config.get(&key).is_none_or(Value::is_null) {
                missing.push(format!("config key {key}"));
            }
        }
        Ok(missing)
    }

    fn optional(&self, ctx: &CombContext) -> bool {
        matches!(self.root(ctx), Ok(Some(root)) if root.get("optional") == Some(&Value::Bool(true)))
    }

    fn stub_class(&self, ctx: &CombContext) -> Option<String> {
        (!self.stub && ctx.config.get("stub").is_some_and(|stub| !stub.is_null()))
            .then(|| MANIFESTS_STUB.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::engine::context::test_context;
    use serde_json::json;

    /// Secrets and ConfigMaps that exist; anything named `broken` fails to look up.
    struct Cluster {
        secrets: HashSet<&'static str>,
        config_maps: HashSet<&'static str>,
    }

    #[async_trait]
    impl PrerequisiteLookup for Cluster {
        async fn secret_exists(&self, namespace: &str, name: &str) -> Result<bool> {
            assert_eq!(namespace, "platform");
            if name == "broken" {
                let status = kube::core::Status::failure("", "boom").with_code(500);
                return Err(Error::kube(
                    "get Secret",
                    kube::Error::Api(Box::new(status)),
                ));
            }
            if name == "unreadable" {
                let status = kube::core::Status::failure(
                    "secrets \"unreadable\" is forbidden: User \"comb\" cannot get resource \"secrets\"",
                    "Forbidden",
                )
                .with_code(403);
                return Err(Error::kube(
                    "get Secret",
                    kube::Error::Api(Box::new(status)),
                ));
            }
            Ok(self.secrets.contains(name))
        }
        async fn config_map_exists(&self, namespace: &str, name: &str) -> Result<bool> {
            assert_eq!(namespace, "platform");
            Ok(self.config_maps.contains(name))
        }
    }

    fn cluster() -> Cluster {
        Cluster {
            secrets: HashSet::from(["present"]),
            config_maps: HashSet::from(["settings"]),
        }
    }

    const CLASS: ManifestsClass = ManifestsClass { stub: false };
    const STUB: ManifestsClass = ManifestsClass { stub: true };

    #[tokio::test]
    async fn check_names_what_is_missing() {
        let ctx = test_context(
            "mailer",
            "platform",
            json!({
                "relay_host": "smtp.example.com", "empty": null,
                "requires": {"secrets": ["present", "mailer-relay"], "configMaps": ["settings", "x"],
                             "config": ["relay_host", "relay_port", "empty"]}
            }),
        );
        assert_eq!(
            CLASS.check(&ctx, &cluster()).await.unwrap(),
            [
                "secret mailer-relay",
                "configMap x",
                "config key relay_port",
                "config key empty"
            ]
        );
        let nothing = test_context("mailer", "platform", json!({}));
        assert!(CLASS.check(&nothing, &cluster()).await.unwrap().is_empty());
    }

    /// The built-in class has no say on the upstream, whatever `spec.config` holds: a CR's
    /// author reaches an upstream only through `spec.upstream`, which the layer judges.
    #[tokio::test]
    async fn the_config_cannot_name_an_upstream() {
        let ctx = test_context(
            "thief",
            "platform",
            json!({"upstream": {"class": "K8s", "context": "prod", "namespace": "billing",
                                "replicate": [{"kind": "Secret", "name": "ledger-keys"}]}}),
        );
        for class in [CLASS, STUB] {
            assert_eq!(
                class.upstream(&ctx).await.unwrap(),
                comb_api::UpstreamSpec::Absent
            );
        }
    }

    #[tokio::test]
    async fn check_failures() {
        let cases = [
            (
                json!({"requires": {"secrets": ["broken"]}}),
                "Kubernetes API error (get Secret): 500 boom",
            ),
            (
                json!({"requires": {"secrets": ["unreadable"]}}),
                "comb may not read Secrets in namespace platform to see whether secret unreadable \
                 exists (Kubernetes API error (get Secret): 403 Forbidden: secrets \"unreadable\" is \
                 forbidden: User \"comb\" cannot get resource \"secrets\"); grant it get on secrets \
                 there (the chart: rbac.secretReadNamespaces)",
            ),
            (
                json!({"requires": ["x"]}),
                "Manifests: config.requires must be an object ({secrets, configMaps, config}), got an array",
            ),
            (
                json!({"requires": {"secret": ["x"]}}),
                "Manifests: config.requires has unknown key(s) secret (known: config, configMaps, secrets)",
            ),
            (
                json!({"requires": {"secrets": "x"}}),
                "Manifests: config.requires.secrets must be a list of names, got a plain scalar",
            ),
            (
                json!({"requires": {"config": [1]}}),
                "Manifests: config.requires.config must be a list of names, got a plain scalar in it",
            ),
            (
                json!({"requires": {"configMaps": ["settings?x=1"]}}),
                "Manifests: config.requires.configMaps: 'settings?x=1' is not a Kubernetes object \
                 name (a DNS-1123 subdomain: lowercase letters, digits, - and ., alphanumeric at \
                 both ends, at most 253 characters)",
            ),
        ];
        for (config, message) in cases {
            let ctx = test_context("mailer", "platform", config);
            assert_eq!(
                CLASS.check(&ctx, &cluster()).await.unwrap_err().to_string(),
                message
            );
        }
    }

    #[tokio::test]
    async fn manifests_endpoints_optional_and_stub() {
        let ctx = test_context(
            "mailer",
            "platform",
            json!({
                "manifests": [{"kind": "Service", "metadata": {"name": "mailer"}}],
                "endpoints": [{"name": "smtp", "port": 25}],
                "optional": true,
                "stub": {"manifests": [{"kind": "ConfigMap", "metadata": {"name": "m"}}],
                         "endpoints": [{"name": "smtp", "port": 1025}], "requires": {"config": ["nope"]}}
            }),
        );
        assert_eq!(CLASS.manifests(&ctx).await.unwrap()[0]["kind"], "Service");
        assert_eq!(STUB.manifests(&ctx).await.unwrap()[0]["kind"], "ConfigMap");
        assert_eq!(CLASS.endpoints(&ctx).await.unwrap()[0].port, Some(25));
        assert_eq!(STUB.endpoints(&ctx).await.unwrap()[0].port, Some(1025));
        assert!(CLASS.optional(&ctx));
        assert!(!STUB.optional(&ctx));
        assert_eq!(
            STUB.check(&ctx, &cluster()).await.unwrap(),
            ["config key nope"]
        );
        assert_eq!(CLASS.stub_class(&ctx).as_deref(), Some("Manifests::Stub"));
        assert_eq!(STUB.stub_class(&ctx), None);

        let plain = test_context("x", "platform", json!({"optional": "yes"}));
        assert_eq!(CLASS.stub_class(&plain), None);
        assert!(!CLASS.optional(&plain));
        assert!(STUB.manifests(&plain).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn config_shape_errors_carry_their_stage() {
        let ctx = test_context(
            "x",
            "platform",
            json!({"manifests": "nope", "endpoints": {"a": 1}, "stub": 5}),
        );
        let error = CLASS.manifests(&ctx).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "Manifests: config.manifests must be a list, got a plain scalar"
        );
        assert_eq!(error.category(), "manifests");
        let error = CLASS.endpoints(&ctx).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "Manifests: config.endpoints must be a list, got an object"
        );
        assert_eq!(error.category(), "endpoints");
        assert_eq!(
            STUB.manifests(&ctx).await.unwrap_err().to_string(),
            "Manifests::Stub: config.stub must be an object ({manifests, endpoints}), got a plain scalar"
        );
        let typo = test_context(
            "x",
            "platform",
            json!({"endpoints": [{"name": "a", "port": 1, "sevice": "b"}]}),
        );
        assert_eq!(
            CLASS.endpoints(&typo).await.unwrap_err().to_string(),
            "Manifests->endpoints: unknown key(s) sevice (known: cluster, external, name, port, protocol, service)"
        );
    }
}
