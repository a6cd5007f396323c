//! Interpreting an answer about the upstream (reference §5.1): from the controlling code (the
//! layer configuration), `spec.upstream` or a class's `upstream`, into local or an [`Upstream`].
//!
//! The answer forms that make sense for data: absent or `null` (local), or a map with `class`
//! and the class's constructor arguments. Classes are looked up in [`UpstreamClasses`]; a name
//! without `::` may leave out the `Kubernetes::Comb::Upstream::` namespace, as in the reference's
//! `Name => (...)` form.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use comb_api::UpstreamSpec;
use serde_json::{Map, Value};

use crate::args::describe;
use crate::error::{Error, Result};
use crate::k8s::{K8S_CLASS, K8s};
use crate::static_upstream::{STATIC_CLASS, Static};
use crate::upstream::{Upstream, UpstreamContext};

/// The namespace of the built-in upstream classes; a short name means a class in it.
pub const UPSTREAM_NAMESPACE: &str = "Kubernetes::Comb::Upstream::";

/// Builds an upstream from its constructor arguments (the answer's map without `class`).
pub type UpstreamFactory =
    Arc<dyn Fn(&Map<String, Value>, &UpstreamContext) -> Result<Arc<dyn Upstream>> + Send + Sync>;

/// The outcome of resolution.
#[derive(Clone, Debug)]
pub enum Resolved {
    /// The Comb runs its service itself.
    Local,
    /// The Comb borrows from this upstream.
    Upstream(Arc<dyn Upstream>),
}

/// The upstream classes a controller knows, by canonical name. Default: the built-in
/// `Kubernetes::Comb::Upstream::K8s` and `Kubernetes::Comb::Upstream::Static`, also known as
/// `K8s` and `Static`. Library users register their own.
#[derive(Clone)]
pub struct UpstreamClasses {
    classes: BTreeMap<String, UpstreamFactory>,
}

impl fmt::Debug for UpstreamClasses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamClasses")
            .field("classes", &self.classes.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Default for UpstreamClasses {
    fn default() -> Self {
        let mut classes = UpstreamClasses {
            classes: BTreeMap::new(),
        };
        classes
            .register(K8S_CLASS, |args, ctx| {
                Ok(Arc::new(K8s::from_args(args, ctx)?))
            })
            .register(STATIC_CLASS, |args, _| {
                Ok(Arc::new(Static::from_args(args)?))
            });
        classes
    }
}

impl UpstreamClasses {
    /// Registers an upstream class under its canonical name (what its `class_name` says).
    pub fn register<F>(&mut self, class: &str, factory: F) -> &mut UpstreamClasses
    where
        F: Fn(&Map<String, Value>, &UpstreamContext) -> Result<Arc<dyn Upstream>>
            + Send
            + Sync
            + 'static,
    {
        self.classes.insert(class.to_string(), Arc::new(factory));
        self
    }

    /// Every name `class` may use, sorted: canonical names, and the short names of classes in
    /// [`UPSTREAM_NAMESPACE`].
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .classes
            .keys()
            .flat_map(|name| [Some(name.as_str()), name.strip_prefix(UPSTREAM_NAMESPACE)])
            .flatten()
            .collect();
        names.sort_unstable();
        names
    }

    fn lookup(&self, class: &str) -> Option<&UpstreamFactory> {
        self.classes.get(class).or_else(|| {
            (!class.contains("::"))
                .then(|| self.classes.get(&format!("{UPSTREAM_NAMESPACE}{class}")))
                .flatten()
        })
    }

    /// Interprets the answer of `source` (`spec.upstream`, `<Class>->upstream`, the layer
    /// configuration): absent or `null` is local; a map names its `class` and the class's
    /// arguments. Errors start with the source, so the user knows where to fix them.
    pub fn interpret(
        &self,
        source: &str,
        answer: &UpstreamSpec,
        ctx: &UpstreamContext,
    ) -> Result<Resolved> {
        let map = match answer {
            UpstreamSpec::Absent | UpstreamSpec::Local => return Ok(Resolved::Local),
            UpstreamSpec::Declared(map) => map,
        };
        let class = match map.get("class") {
            None | Some(Value::Null) => None,
            Some(Value::String(class)) => Some(class.as_str()).filter(|class| !class.is_empty()),
            Some(other) => {
                return Err(Error::Resolve(format!(
                    "{source}: class is a string naming an upstream class, got {}",
                    describe(other)
                )));
            }
        };
        let class = class.ok_or_else(|| Error::Resolve(format!("{source} names no class")))?;
        let factory = self.lookup(class).ok_or_else(|| {
            Error::Resolve(format!(
                "{source}: unknown upstream class '{class}' (known: {})",
                self.names().join(", ")
            ))
        })?;
        let mut args = map.clone();
        args.remove("class");
        factory(&args, ctx)
            .map(Resolved::Upstream)
            .map_err(|error| Error::Resolve(format!("{source}: {error}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::context;
    use serde_json::json;

    fn interpret(answer: UpstreamSpec) -> Result<Resolved> {
        UpstreamClasses::default().interpret("spec.upstream", &answer, &context())
    }

    fn declared(value: Value) -> UpstreamSpec {
        UpstreamSpec::Declared(value.as_object().cloned().unwrap())
    }

    #[test]
    fn absent_and_null_are_local() {
        assert!(matches!(
            interpret(UpstreamSpec::Absent).unwrap(),
            Resolved::Local
        ));
        assert!(matches!(
            interpret(UpstreamSpec::Local).unwrap(),
            Resolved::Local
        ));
    }

    /// The CRD's CEL rule refuses any other upstream class at the door.
    #[test]
    fn the_crd_allows_exactly_the_built_in_names() {
        let mut allowed = comb_api::UPSTREAM_CLASSES.to_vec();
        allowed.sort_unstable();
        assert_eq!(UpstreamClasses::default().names(), allowed);
    }

    #[test]
    fn short_and_perl_names_build_the_same_classes() {
        for (class, canonical) in [
            ("K8s", K8S_CLASS),
            ("Kubernetes::Comb::Upstream::K8s", K8S_CLASS),
            ("Static", STATIC_CLASS),
            ("Kubernetes::Comb::Upstream::Static", STATIC_CLASS),
        ] {
            let Resolved::Upstream(upstream) =
                interpret(declared(json!({"class": class, "context": "prod"})))
                    .or_else(|_| interpret(declared(json!({"class": class}))))
                    .unwrap()
            else {
                panic!("{class} is local");
            };
            assert_eq!(upstream.class_name(), canonical);
        }
    }

    #[test]
    fn errors_name_the_source_and_what_to_fix() {
        let known =
            "K8s, Kubernetes::Comb::Upstream::K8s, Kubernetes::Comb::Upstream::Static, Static";
        let cases = [
            (json!({"context": "prod"}), "spec.upstream names no class".to_string()),
            (json!({"class": null}), "spec.upstream names no class".into()),
            (json!({"class": ""}), "spec.upstream names no class".into()),
            (
                json!({"class": ["K8s"]}),
                "spec.upstream: class is a string naming an upstream class, got an array".into(),
            ),
            (
                json!({"class": "Probe"}),
                format!("spec.upstream: unknown upstream class 'Probe' (known: {known})"),
            ),
            (
                json!({"class": "My::K8s"}),
                format!("spec.upstream: unknown upstream class 'My::K8s' (known: {known})"),
            ),
            (
                json!({"class": "K8s", "contxt": "prod"}),
                "spec.upstream: Kubernetes::Comb::Upstream::K8s: unknown key(s) contxt \
                 (known: context, layer, name, namespace, replicate)"
                    .into(),
            ),
            (
                json!({"class": "Static", "via": "prod"}),
                "spec.upstream: Kubernetes::Comb::Upstream::Static: via is an array of strings, got a string"
                    .into(),
            ),
        ];
        for (answer, message) in cases {
            let error = interpret(declared(answer)).unwrap_err();
            assert_eq!(error.to_string(), message);
            assert_eq!(error.category(), "resolve");
        }
    }

    #[derive(Debug)]
    struct Probe;

    #[async_trait::async_trait]
    impl Upstream for Probe {
        fn class_name(&self) -> &str {
            "My::Probe"
        }
        async fn status(&self, _ctx: &UpstreamContext) -> Result<crate::UpstreamStatus> {
            Ok(crate::UpstreamStatus::default())
        }
        async fn endpoints(&self, _ctx: &UpstreamContext) -> Result<Vec<comb_api::Endpoint>> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn registered_classes_are_known_by_their_full_name() {
        let mut classes = UpstreamClasses::default();
        classes.register("My::Probe", |_, _| Ok(Arc::new(Probe)));
        assert_eq!(
            classes.names(),
            [
                "K8s",
                "Kubernetes::Comb::Upstream::K8s",
                "Kubernetes::Comb::Upstream::Static",
                "My::Probe",
                "Static"
            ]
        );
        let resolved = classes
            .interpret(
                "Nats->upstream",
                &declared(json!({"class": "My::Probe"})),
                &context(),
            )
            .unwrap();
        assert!(matches!(resolved, Resolved::Upstream(u) if u.class_name() == "My::Probe"));
        assert!(
            classes
                .interpret("x", &declared(json!({"class": "Probe"})), &context())
                .is_err(),
            "a short name only reaches the built-in namespace"
        );
    }
}
