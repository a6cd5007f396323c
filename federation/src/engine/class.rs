//! The class contract (reference §3, §9), the registry of classes, and building a Comb from its
//! custom resource with the reference's construction checks.
//!
//! A class is a Rust type implementing [`CombClass`]. The binary registers its classes in a
//! [`ClassRegistry`] at start-up; [`ClassRegistry::build`] turns a `Comb` CR into a
//! [`CombInstance`]: the class plus everything the engine knows about this Comb.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use comb_api::{Comb, CombStatus, Endpoint, ManagedObject, UpstreamSpec, is_label_value};
use serde_json::Value;

use crate::engine::bridge::plan_bridge;
/// Class authors implement [`CombClass`] over these; one import path for them.
pub use crate::engine::context::{CombContext, Settings};
use crate::engine::endpoints::{EndpointDecl, resolve_local, validate};
use crate::engine::kinds::{ScopeLookup, Scopes};
use crate::engine::render::{RenderedItem, render_manifest};
use crate::error::{Error, Result};

/// Read-only lookups a class's `check` may need; the engine implements it over the client.
#[async_trait]
pub trait PrerequisiteLookup: Send + Sync {
    /// Whether Secret `name` exists in `namespace`.
    async fn secret_exists(&self, namespace: &str, name: &str) -> Result<bool>;
    /// Whether ConfigMap `name` exists in `namespace`.
    async fn config_map_exists(&self, namespace: &str, name: &str) -> Result<bool>;
}

/// The contract of a Comb class. Every method has the reference's default; a class overrides
/// what it needs. Methods never panic: failures are [`Error`] values, which reconcile turns into
/// phases and reasons.
#[async_trait]
pub trait CombClass: Send + Sync {
    /// The class name, as `spec.class` names it and messages show it (e.g. `Manifests`).
    fn name(&self) -> &str;

    /// The Combs this one needs, each `name` or `namespace/name`. Default: `spec.dependsOn`.
    fn depends_on(&self, ctx: &CombContext) -> Vec<String> {
        ctx.spec.dependencies().to_vec()
    }

    /// What the Comb offers. Default: nothing.
    async fn endpoints(&self, _ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
        Ok(Vec::new())
    }

    /// The resources the Comb consists of, as objects. Default: none.
    async fn manifests(&self, _ctx: &CombContext) -> Result<Vec<Value>> {
        Ok(Vec::new())
    }

    /// The prerequisites that are missing, as human-readable strings. Default: nothing missing.
    async fn check(
        &self,
        _ctx: &CombContext,
        _lookup: &dyn PrerequisiteLookup,
    ) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Whether the Comb stays off while `spec.enabled` is unset. Default: false.
    fn optional(&self, _ctx: &CombContext) -> bool {
        false
    }

    /// The resources that make the upstream reachable under the local names, for the redirected
    /// `endpoints`. Default: the reference's bridge ([`plan_bridge`]). Fail with
    /// [`Error::Bridge`] when the upstream cannot be bridged (Blocked); anything else is an Error.
    async fn bridge_manifests(
        &self,
        ctx: &CombContext,
        endpoints: &[Endpoint],
    ) -> Result<Vec<Value>> {
        let declared = self.endpoints(ctx).await?;
        validate(self.name(), &declared)?;
        plan_bridge(ctx, &declared, endpoints)
    }

    /// The class that stands in for this one when a stub is asked for. Default: `<name>::Stub`.
    /// A class the registry does not know counts as none.
    fn stub_class(&self, _ctx: &CombContext) -> Option<String> {
        Some(format!("{}::Stub", self.name()))
    }

    /// What the class says about its upstream. Default: [`UpstreamSpec::Absent`], the class has
    /// no say; `Local` is an explicit local; `Declared` names an upstream class and its arguments.
    async fn upstream(&self, _ctx: &CombContext) -> Result<UpstreamSpec> {
        Ok(UpstreamSpec::Absent)
    }

    /// Whether the class and all it answers (manifests, endpoints, upstream, bridge) are a
    /// function of the context alone: no clock, no environment, no other object. Then what was
    /// built and rendered for one generation of a Comb's CR is what a new build and render
    /// would give, and the controller keeps it for the Combs that depend on this one instead of
    /// building and rendering it again for each of their steps. Default: false (built and
    /// rendered anew each time).
    fn pure(&self) -> bool {
        false
    }
}

/// Makes a class for one Comb; it may read the context (e.g. to parse configuration) and fail.
pub type ClassFactory = Arc<dyn Fn(&CombContext) -> Result<Arc<dyn CombClass>> + Send + Sync>;

/// Decides whether a freshly built Comb is replaced by its stub (e.g. the layer's `stubs` list).
pub type StubSelector<'a> = dyn Fn(&CombInstance) -> bool + Send + Sync + 'a;

/// The classes a controller knows, by name, with aliases.
#[derive(Clone, Default)]
pub struct ClassRegistry {
    classes: BTreeMap<String, ClassFactory>,
    aliases: BTreeMap<String, String>,
}

impl fmt::Debug for ClassRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClassRegistry")
            .field("classes", &self.classes.keys().collect::<Vec<_>>())
            .field("aliases", &self.aliases)
            .finish()
    }
}

/// The prefix of construction errors that are not about a particular class.
const FROM_CRD: &str = "Comb->from_crd";

impl ClassRegistry {
    /// A registry without classes.
    pub fn new() -> ClassRegistry {
        ClassRegistry::default()
    }

    /// Registers a class under `name` (which should be what its [`CombClass::name`] says).
    pub fn register<F>(&mut self, name: &str, factory: F) -> &mut ClassRegistry
    where
        F: Fn(&CombContext) -> Result<Arc<dyn CombClass>> + Send + Sync + 'static,
    {
        self.classes.insert(name.to_string(), Arc::new(factory));
        self
    }

    /// Registers a stateless class: one instance serves every Comb of it.
    pub fn register_shared(&mut self, class: Arc<dyn CombClass>) -> &mut ClassRegistry {
        let name = class.name().to_string();
        self.register(&name, move |_| Ok(class.clone()))
    }

    /// Makes `alias` another name of the registered class `target`.
    pub fn alias(&mut self, alias: &str, target: &str) -> &mut ClassRegistry {
        self.aliases.insert(alias.to_string(), target.to_string());
        self
    }

    /// Every name `spec.class` may use, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .classes
            .keys()
            .chain(self.aliases.keys())
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        names
    }

    /// Whether `name` (or an alias of that name) is registered.
    pub fn knows(&self, name: &str) -> bool {
        self.resolve(name).is_some()
    }

    fn resolve(&self, name: &str) -> Option<(&str, &ClassFactory)> {
        let canonical = self.aliases.get(name).map_or(name, String::as_str);
        self.classes
            .get_key_value(canonical)
            .map(|(key, factory)| (key.as_str(), factory))
    }

    /// The stub class of a built Comb: what its class says, if registered.
    pub fn stub_class_of(&self, comb: &CombInstance) -> Option<String> {
        comb.class
            .stub_class(&comb.ctx)
            .filter(|stub| self.knows(stub))
    }

    /// Builds the Comb of a CR (the reference's `from_crd`): the class of `spec.class`, the
    /// construction checks, and the stub when `stub` asks for one. Every failure is an
    /// [`Error::Build`] whose message says what to fix.
    pub async fn build(
        &self,
        cr: &Comb,
        settings: &Settings,
        stub: &StubSelector<'_>,
    ) -> Result<CombInstance> {
        let built = async {
            if let Some(problem) = &cr.spec_error {
                return Err(Error::build(format!(
                    "{FROM_CRD}: the custom resource does not decode: {problem}"
                )));
            }
            let class = cr
                .spec
                .class
                .as_deref()
                .filter(|class| !class.is_empty())
                .ok_or_else(|| {
                    Error::build(format!("{FROM_CRD}: the custom resource has no spec.class"))
                })?;
            let comb = self.construct(class, cr, settings, None).await?;
            if !stub(&comb) {
                return Ok(comb);
            }
            let stub_class = self.stub_class_of(&comb).ok_or_else(|| {
                Error::build(format!(
                    "{FROM_CRD}: a stub was asked for {}, but {} has no stub class",
                    comb.name(),
                    comb.class_name()
                ))
            })?;
            self.construct(&stub_class, cr, settings, Some(&comb)).await
        };
        built.await.map_err(|error| match error {
            build @ Error::Build { .. } => build,
            other => Error::build_from(other),
        })
    }

    /// One class built and checked: against `stub_of` when given, else against `Foo` when this is
    /// `Foo`'s stub `Foo::Stub` named directly (that `Foo` is only built for the check).
    async fn construct(
        &self,
        class: &str,
        cr: &Comb,
        settings: &Settings,
        stub_of: Option<&CombInstance>,
    ) -> Result<CombInstance> {
        let comb =
            self.construct_unchecked(class, cr, settings, stub_of.map(CombInstance::class_name))?;
        match stub_of {
            Some(original) => check_contract(&comb, original).await?,
            None => {
                if let Some(original) = self.implied_original(&comb, cr, settings)? {
                    check_contract(&comb, &original).await?;
                }
            }
        }
        Ok(comb)
    }

    fn implied_original(
        &self,
        comb: &CombInstance,
        cr: &Comb,
        settings: &Settings,
    ) -> Result<Option<CombInstance>> {
        let Some(base) = comb.class_name().strip_suffix("::Stub") else {
            return Ok(None);
        };
        if !self.knows(base) {
            return Ok(None);
        }
        let original = self.construct_unchecked(base, cr, settings, None)?;
        let is_its_stub = self.stub_class_of(&original).is_some_and(|stub| {
            self.resolve(&stub).map(|(name, _)| name) == Some(comb.class_name())
        });
        Ok(is_its_stub.then_some(original))
    }

    fn construct_unchecked(
        &self,
        class: &str,
        cr: &Comb,
        settings: &Settings,
        stub_of: Option<&str>,
    ) -> Result<CombInstance> {
        let (canonical, factory) = self.resolve(class).ok_or_else(|| {
            Error::build(format!(
                "{FROM_CRD}: unknown class '{class}' (known: {})",
                self.names().join(", ")
            ))
        })?;
        let fail = Error::build;
        if let Some(types) = &cr.types {
            let expected = format!("{}/{}", settings.group, comb_api::VERSION);
            if types.api_version != expected || types.kind != comb_api::KIND {
                return Err(fail(format!(
                    "{canonical}: crd is a {} {}, not a {expected} {}",
                    types.api_version,
                    types.kind,
                    comb_api::KIND
                )));
            }
        }
        let name = cr
            .metadata
            .name
            .clone()
            .filter(|name| !name.is_empty())
            .ok_or_else(|| {
                fail(format!(
                    "{canonical} has no name: the custom resource has no metadata.name"
                ))
            })?;
        if !is_label_value(&name) {
            return Err(fail(format!(
                "{canonical}: the name '{name}' cannot be a label value, and it is one on every resource \
                 (at most 63 characters: letters, digits, -, _ and ., alphanumeric at both ends)"
            )));
        }
        let namespace = cr
            .metadata
            .namespace
            .clone()
            .filter(|namespace| !namespace.is_empty())
            .ok_or_else(|| {
                fail(format!(
                    "{canonical} has no namespace: the custom resource has no metadata.namespace"
                ))
            })?;
        let ctx = CombContext {
            name,
            namespace,
            config: cr.spec.config.clone().unwrap_or_default(),
            spec: cr.spec.clone(),
            settings: settings.clone(),
            stub_of: stub_of.map(str::to_string),
        };
        let class = factory(&ctx)?;
        Ok(CombInstance {
            class,
            ctx,
            cr: cr.clone(),
        })
    }
}

/// A stub must offer every endpoint name of its original; extra endpoints are fine.
async fn check_contract(stub: &CombInstance, original: &CombInstance) -> Result<()> {
    let offered = stub.declared_endpoints().await?;
    let offered: HashSet<&str> = offered.iter().map(|e| e.name.as_str()).collect();
    let missing: Vec<String> = original
        .declared_endpoints()
        .await?
        .into_iter()
        .map(|e| e.name)
        .filter(|name| !offered.contains(name.as_str()))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::build(format!(
            "{} does not keep the contract of {}: missing endpoint(s) {}",
            stub.class_name(),
            original.class_name(),
            missing.join(", ")
        )))
    }
}

/// A Comb built from its CR: the class and everything the engine knows about this Comb.
/// Cloning is cheap enough (the class is shared).
#[derive(Clone)]
pub struct CombInstance {
    class: Arc<dyn CombClass>,
    ctx: CombContext,
    cr: Comb,
}

impl fmt::Debug for CombInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CombInstance")
            .field("class", &self.class.name())
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl CombInstance {
    /// The class name, as messages show it.
    pub fn class_name(&self) -> &str {
        self.class.name()
    }
    /// What class methods get.
    pub fn context(&self) -> &CombContext {
        &self.ctx
    }
    pub fn name(&self) -> &str {
        &self.ctx.name
    }
    pub fn namespace(&self) -> &str {
        &self.ctx.namespace
    }
    pub fn settings(&self) -> &Settings {
        &self.ctx.settings
    }
    /// The CR as last read or written.
    pub fn cr(&self) -> &Comb {
        &self.cr
    }
    /// Adopts the CR the API server returned after a status write. The spec is what the Comb
    /// was built from; a changed spec needs a new build.
    pub fn adopt_cr(&mut self, cr: Comb) {
        self.cr = cr;
    }
    /// Stores a status into the in-memory CR (when writing it failed, the next step prunes
    /// against it).
    pub fn keep_status(&mut self, status: CombStatus) {
        self.cr.status = Some(status);
    }
    /// `status` of the CR: what the Comb last recorded. Reads nothing from a cluster.
    pub fn recorded_status(&self) -> Option<&CombStatus> {
        self.cr.status.as_ref()
    }
    /// The `managedResources` it last recorded: what is the Comb's ([`comb_api::ownership`]).
    pub fn recorded_managed(&self) -> &[ManagedObject] {
        self.recorded_status()
            .map(CombStatus::managed)
            .unwrap_or_default()
    }
    /// The class of the original when this Comb is a stub.
    pub fn stub_of(&self) -> Option<&str> {
        self.ctx.stub_of.as_deref()
    }
    /// The class's dependencies.
    pub fn depends_on(&self) -> Vec<String> {
        self.class.depends_on(&self.ctx)
    }
    /// Whether the class is [`CombClass::pure`].
    pub fn is_pure(&self) -> bool {
        self.class.pure()
    }
    /// Whether the class is optional.
    pub fn optional(&self) -> bool {
        self.class.optional(&self.ctx)
    }

    /// The class's endpoint declarations, checked (names, duplicates).
    pub async fn declared_endpoints(&self) -> Result<Vec<EndpointDecl>> {
        let declared = self.class.endpoints(&self.ctx).await?;
        validate(self.class_name(), &declared)?;
        Ok(declared)
    }

    /// The endpoints this Comb serves itself (reference §2, local resolution).
    pub async fn local_endpoints(&self) -> Result<Vec<Endpoint>> {
        let declared = self.class.endpoints(&self.ctx).await?;
        resolve_local(self.class_name(), &declared, self.name(), self.namespace())
    }

    /// The class's manifests, rendered (labels, namespace, apiVersion, digest), in order. The
    /// scope of a custom Kind is what `scopes` (the server's discovery) says.
    pub async fn render(&self, scopes: &dyn ScopeLookup) -> Result<Vec<RenderedItem>> {
        let manifests = self.class.manifests(&self.ctx).await?;
        self.render_all(&manifests, scopes).await
    }

    /// The bridge for the redirected `endpoints`, rendered like manifests. A failure of
    /// category `bridge` means the upstream cannot be bridged.
    pub async fn render_bridge(
        &self,
        endpoints: &[Endpoint],
        scopes: &dyn ScopeLookup,
    ) -> Result<Vec<RenderedItem>> {
        let manifests = self.class.bridge_manifests(&self.ctx, endpoints).await?;
        self.render_all(&manifests, scopes).await
    }

    async fn render_all(
        &self,
        manifests: &[Value],
        lookup: &dyn ScopeLookup,
    ) -> Result<Vec<RenderedItem>> {
        // A manifest without an apiVersion gets a built-in Kind's, whose scope the table knows.
        let types = manifests
            .iter()
            .filter_map(|manifest| {
                let field = |name: &str| manifest.get(name).and_then(Value::as_str);
                field("apiVersion")
                    .zip(field("kind"))
                    .map(|(api_version, kind)| (api_version.to_string(), kind.to_string()))
            })
            .collect();
        let scopes = Scopes::discover(lookup, types).await;
        manifests
            .iter()
            .map(|manifest| render_manifest(self.class_name(), manifest, &self.ctx, &scopes))
            .collect()
    }

    /// The missing prerequisites.
    pub async fn check(&self, lookup: &dyn PrerequisiteLookup) -> Result<Vec<String>> {
        self.class.check(&self.ctx, lookup).await
    }

    /// What the class says about its upstream.
    pub async fn upstream(&self) -> Result<UpstreamSpec> {
        self.class.upstream(&self.ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A class with fixed endpoints and stub class.
    struct Fixed {
        name: &'static str,
        endpoints: Vec<&'static str>,
        /// What `stub_class` answers (the trait's default is `<name>::Stub`).
        stub: &'static str,
    }

    #[async_trait]
    impl CombClass for Fixed {
        fn name(&self) -> &str {
            self.name
        }
        async fn endpoints(&self, _ctx: &CombContext) -> Result<Vec<EndpointDecl>> {
            Ok(self
                .endpoints
                .iter()
                .map(|name| EndpointDecl::new(name, 80))
                .collect())
        }
        fn stub_class(&self, _ctx: &CombContext) -> Option<String> {
            Some(self.stub.to_string())
        }
    }

    fn registry() -> ClassRegistry {
        let mut registry = ClassRegistry::with_builtins();
        for (name, endpoints, stub) in [
            ("Mailer", vec!["smtp", "web"], "Mailer::Stub"),
            (
                "Mailer::Stub",
                vec!["smtp", "web", "ui"],
                "Mailer::Stub::Stub",
            ),
            ("Broken", vec!["smtp"], "Broken::Stub"),
            ("Broken::Stub", vec!["ui"], "Broken::Stub::Stub"),
            ("Other", vec!["a"], "Mailer::Stub"),
            ("Other::Stub", vec![], "Other::Stub::Stub"),
        ] {
            registry.register_shared(Arc::new(Fixed {
                name,
                endpoints,
                stub,
            }));
        }
        registry
    }

    fn cr(name: &str, spec: Value) -> Comb {
        let mut comb = Comb::new(
            "comb.internal",
            "platform",
            name,
            serde_json::from_value(spec).unwrap(),
        );
        comb.metadata.generation = Some(2);
        comb
    }

    async fn build(cr: &Comb, stub: bool) -> Result<CombInstance> {
        registry()
            .build(cr, &Settings::default(), &|_: &CombInstance| stub)
            .await
    }

    #[tokio::test]
    async fn construction_errors() {
        let long = "x".repeat(64);
        let mut no_namespace = cr("nats", json!({"class": "Manifests"}));
        no_namespace.metadata.namespace = None;
        let mut other_group = cr("nats", json!({"class": "Manifests"}));
        other_group.types.as_mut().unwrap().api_version = "comb.example.com/v1".into();
        let label_rule = "cannot be a label value, and it is one on every resource (at most 63 characters: \
                          letters, digits, -, _ and ., alphanumeric at both ends)";
        let cases = [
            (cr("nats", json!({})), false, "Comb->from_crd: the custom resource has no spec.class".to_string()),
            (cr("nats", json!({"class": ""})), false, "Comb->from_crd: the custom resource has no spec.class".into()),
            (
                cr("nats", json!({"class": "Nope"})),
                false,
                "Comb->from_crd: unknown class 'Nope' (known: Broken, Broken::Stub, Kubernetes::Comb::Static, \
                 Mailer, Mailer::Stub, Manifests, Manifests::Stub, Other, Other::Stub)"
                    .into(),
            ),
            (cr(&long, json!({"class": "Manifests"})), false, format!("Manifests: the name '{long}' {label_rule}")),
            (cr("nats!", json!({"class": "Mailer"})), false, format!("Mailer: the name 'nats!' {label_rule}")),
            (
                no_namespace,
                false,
                "Manifests has no namespace: the custom resource has no metadata.namespace".into(),
            ),
            (
                other_group,
                false,
                "Manifests: crd is a comb.example.com/v1 Comb, not a comb.internal/v1 Comb".into(),
            ),
            (
                cr("mailer", json!({"class": "Manifests"})),
                true,
                "Comb->from_crd: a stub was asked for mailer, but Manifests has no stub class".into(),
            ),
            (
                cr("mailer", json!({"class": "Broken"})),
                true,
                "Broken::Stub does not keep the contract of Broken: missing endpoint(s) smtp".into(),
            ),
            (
                cr("mailer", json!({"class": "Broken::Stub"})),
                false,
                "Broken::Stub does not keep the contract of Broken: missing endpoint(s) smtp".into(),
            ),
            (
                cr("mailer", json!({"class": "Manifests", "config": {
                    "endpoints": [{"name": "smtp", "port": 25}, {"name": "web", "port": 80}],
                    "stub": {"endpoints": [{"name": "web", "port": 8025}]}}})),
                true,
                "Manifests::Stub does not keep the contract of Manifests: missing endpoint(s) smtp".into(),
            ),
        ];
        for (cr, stub, message) in cases {
            let error = build(&cr, stub).await.unwrap_err();
            assert_eq!(error.to_string(), message);
            assert_eq!(error.category(), "build");
        }
    }

    #[tokio::test]
    async fn builds_classes_stubs_and_aliases() {
        let comb = build(
            &cr(
                "nats",
                json!({"class": "Kubernetes::Comb::Static", "dependsOn": ["db", "infra/vault"]}),
            ),
            false,
        )
        .await
        .unwrap();
        assert_eq!(comb.class_name(), "Manifests");
        assert_eq!((comb.name(), comb.namespace()), ("nats", "platform"));
        assert_eq!(comb.depends_on(), ["db", "infra/vault"]);
        assert_eq!(comb.stub_of(), None);
        assert!(!comb.optional());

        let mailer = build(&cr("mailer", json!({"class": "Mailer"})), true)
            .await
            .unwrap();
        assert_eq!(
            mailer.class_name(),
            "Mailer::Stub",
            "the default stub class is <class>::Stub"
        );
        assert_eq!(mailer.stub_of(), Some("Mailer"));

        let direct = build(&cr("mailer", json!({"class": "Mailer::Stub"})), false)
            .await
            .unwrap();
        assert_eq!(
            direct.stub_of(),
            None,
            "a stub named directly is checked but keeps no original"
        );

        let other = build(&cr("o", json!({"class": "Other::Stub"})), false)
            .await
            .unwrap();
        assert_eq!(
            other.class_name(),
            "Other::Stub",
            "not Other's stub class: an ordinary class"
        );

        let manifests_stub = build(
            &cr("mailer", json!({"class": "Manifests", "config": {
                "endpoints": [{"name": "smtp", "port": 25}],
                "stub": {"endpoints": [{"name": "smtp", "port": 1025}, {"name": "web", "port": 8025}]}}})),
            true,
        )
        .await
        .unwrap();
        assert_eq!(manifests_stub.class_name(), "Manifests::Stub");
        assert_eq!(manifests_stub.stub_of(), Some("Manifests"));
        assert_eq!(
            manifests_stub.local_endpoints().await.unwrap()[1].cluster(),
            Some("mailer.platform.svc:8025")
        );
    }

    #[tokio::test]
    async fn the_config_is_a_copy() {
        let mut comb = build(
            &cr("nats", json!({"class": "Manifests", "config": {"a": 1}})),
            false,
        )
        .await
        .unwrap();
        assert_eq!(
            comb.context().config,
            json!({"a": 1}).as_object().cloned().unwrap()
        );
        let no_config = build(&cr("nats", json!({"class": "Manifests"})), false)
            .await
            .unwrap();
        assert!(no_config.context().config.is_empty());

        comb.keep_status(CombStatus {
            phase: Some("Running".into()),
            ..CombStatus::default()
        });
        assert_eq!(
            comb.recorded_status().unwrap().phase,
            Some(comb_api::Phase::Running)
        );
        assert_eq!(
            comb.cr().spec.config,
            Some(json!({"a": 1}).as_object().cloned().unwrap())
        );
    }

    #[test]
    fn settings_defaults() {
        let settings = Settings::default();
        assert_eq!(settings.group, "comb.internal");
        assert_eq!(settings.labels.prefix(), "comb.internal/");
        assert_eq!(settings.managed_by, "comb");
        assert_eq!(settings.max_upstream_depth.get(), 16);
        assert_eq!(settings.cluster_domain, "cluster.local");
    }
}
