//! The borrowing path of a Comb (reference §5.1, §6.6, §8.2): resolving its upstream, observing
//! it, redirecting the declared endpoints to it, the verdict, and the `status.upstream` record.
//!
//! Observation never fails: every problem is a [`Stop`] with the reference's phase, reason and
//! message, checked in the reference's order (status, reachability, loop, endpoints, addresses,
//! bridge). Reconcile (step 5b) then replicates, applies the bridge and prunes.

use std::collections::BTreeMap;
use std::sync::Arc;

use comb_api::{Address, CombResource, CombUpstreamStatus, Endpoint, Host, UpstreamSpec};
use comb_kubeconfigs::ClientPool;
use comb_upstreams::{Resolved, Upstream, UpstreamClasses, UpstreamContext, UpstreamStatus};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use serde_json::Value;

use crate::engine::class::CombInstance;
use crate::engine::endpoints::EndpointDecl;
use crate::engine::kinds::{ScopeLookup, Scopes};
use crate::engine::kube_ops::KubeOps;
use crate::engine::live_status::{LivePhase, LiveStatus, PodState, Problem};
use crate::engine::observe::{fetch_live, local_status};
use crate::engine::reconcile::UpstreamResolution;
use crate::engine::render::RenderedItem;
use crate::engine::status::clean_message;
use crate::error::{Error, Result};

/// The source name of `spec.upstream` in resolution errors.
pub const SPEC_SOURCE: &str = "spec.upstream";

/// The controlling code's answer about the upstream (reference §5.1, the first source): the
/// federation fills it from the layer's `borrow` / `local` configuration. While `answer` is
/// [`UpstreamSpec::Absent`] the controlling code has no say and the next source decides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Controlling {
    /// How errors name this source, e.g. `the borrow of layer staging`.
    pub source: String,
    pub answer: UpstreamSpec,
}

impl Controlling {
    /// The controlling code has no say.
    pub fn none() -> Controlling {
        Controlling::default()
    }

    /// The answer `answer` of the source named `source`.
    pub fn new(source: impl Into<String>, answer: UpstreamSpec) -> Controlling {
        Controlling {
            source: source.into(),
            answer,
        }
    }
}

/// What the engine needs to borrow for the Combs of one layer: the clients of every context,
/// the layer's own context, the layers (for `layer: NAME`) and the known upstream classes.
#[derive(Clone, Debug)]
pub struct BorrowEnv {
    pub pool: ClientPool,
    /// The kube context the Combs run in.
    pub context: String,
    /// Layer name -> kube context.
    pub layers: BTreeMap<String, String>,
    pub classes: UpstreamClasses,
}

impl BorrowEnv {
    /// Combs in `context` of `pool`, no layers, the built-in upstream classes.
    pub fn new(pool: ClientPool, context: impl Into<String>) -> BorrowEnv {
        BorrowEnv {
            pool,
            context: context.into(),
            layers: BTreeMap::new(),
            classes: UpstreamClasses::default(),
        }
    }

    /// What an upstream gets to know about `comb`.
    pub fn upstream_context(&self, comb: &CombInstance) -> UpstreamContext {
        let settings = comb.settings();
        UpstreamContext {
            name: comb.name().to_string(),
            namespace: comb.namespace().to_string(),
            context: self.context.clone(),
            pool: self.pool.clone(),
            group: settings.group.clone(),
            labels: settings.labels.clone(),
            managed_by: settings.managed_by.clone(),
            layers: self.layers.clone(),
            write_as: settings.tenancy.writer(comb.namespace()),
        }
    }
}

/// Resolves the upstream of `comb` (reference §5.1): the first source that has an answer
/// decides, even when it says local: the controlling code, then `spec.upstream` (explicit `null`
/// is local), then the class's `upstream`, else local. Failures are messages for
/// `resolving the upstream failed: <msg>`.
pub async fn resolve_upstream(
    comb: &CombInstance,
    controlling: &Controlling,
    env: &BorrowEnv,
) -> Result<Resolved> {
    let ctx = env.upstream_context(comb);
    let interpret = |source: &str, answer: &UpstreamSpec| {
        env.classes
            .interpret(source, answer, &ctx)
            .map_err(Error::from)
    };
    if controlling.answer.is_present() {
        return interpret(&controlling.source, &controlling.answer);
    }
    let spec = &comb.context().spec.upstream;
    if spec.is_present() {
        return interpret(SPEC_SOURCE, spec);
    }
    let answer = comb.upstream().await?;
    interpret(&format!("{}->upstream", comb.class_name()), &answer)
}

/// Where the upstream path stops, and as what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub phase: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Stop {
    fn new(phase: &'static str, reason: &'static str, message: String) -> Stop {
        Stop {
            phase,
            reason,
            message,
        }
    }
}

/// What observing the upstream found (the reference's `o`).
#[derive(Clone, Debug)]
pub struct UpstreamObservation {
    /// The upstream's class name.
    pub class: String,
    /// What the upstream said, with `via` cut to `maxUpstreamDepth`; `None` when asking failed.
    pub status: Option<UpstreamStatus>,
    /// The Comb's declared endpoints redirected to the upstream, when it offered an address for
    /// each.
    pub endpoints: Option<Vec<Endpoint>>,
    /// The rendered bridge.
    pub bridge: Vec<RenderedItem>,
    /// Set when the path cannot go on.
    pub stop: Option<Stop>,
}

impl UpstreamObservation {
    fn new(class: &str) -> UpstreamObservation {
        UpstreamObservation {
            class: class.to_string(),
            status: None,
            endpoints: None,
            bridge: Vec::new(),
            stop: None,
        }
    }

    fn stopped(mut self, phase: &'static str, reason: &'static str, message: String) -> Self {
        self.stop = Some(Stop::new(phase, reason, message));
        self
    }

    /// `upstream <Class>`, plus ` (context <ctx>)` when the status named one.
    pub fn label(&self) -> String {
        upstream_label(&self.class, self.status.as_ref())
    }

    /// `status.upstream` (reference `_upstream_record`): the class, and what the status said.
    pub fn record(&self, now: Timestamp) -> CombUpstreamStatus {
        let status = self.status.as_ref();
        CombUpstreamStatus {
            class: Some(self.class.clone()),
            context: status.and_then(|s| s.context.clone()),
            reachable: status.map(|s| s.reachable),
            phase: status.and_then(|s| s.phase.clone()),
            via: status.map(|s| s.via.clone().unwrap_or_default()),
            observed_at: Some(Time(now)),
        }
    }

    /// The verdict of a step whose bridge stands (reference `_borrowed_verdict`): Running /
    /// `Borrowed` while the upstream runs, else Pending / `UpstreamNotRunning`.
    pub fn verdict(&self) -> Stop {
        let label = self.label();
        let status = self.status.as_ref();
        match status.and_then(|s| s.phase.as_deref()) {
            Some("Running") => {
                let via = status.and_then(|s| s.via.as_deref()).unwrap_or_default();
                let through = if via.is_empty() {
                    String::new()
                } else {
                    format!(" via {}", via.join(", "))
                };
                Stop::new(
                    "Running",
                    "Borrowed",
                    format!("borrowed from {label}{through}"),
                )
            }
            phase => Stop::new(
                "Pending",
                "UpstreamNotRunning",
                format!(
                    "{label} is {}{}",
                    phase.unwrap_or("in no known phase"),
                    says(status, ": ")
                ),
            ),
        }
    }
}

/// `upstream <Class>`, plus ` (context <ctx>)` when the status named one.
fn upstream_label(class: &str, status: Option<&UpstreamStatus>) -> String {
    match status.and_then(|s| s.context.as_deref()) {
        Some(context) => format!("upstream {class} (context {context})"),
        None => format!("upstream {class}"),
    }
}

/// `glue` + the upstream's message when it has a non-empty one, else nothing.
fn says(status: Option<&UpstreamStatus>, glue: &str) -> String {
    status
        .and_then(|s| s.message.as_deref())
        .filter(|message| !message.trim().is_empty())
        .map(|message| format!("{glue}{}", clean_message(message)))
        .unwrap_or_default()
}

/// Observes `upstream` for `comb` (reference §6.6 `observe_upstream`), in the reference's order.
/// Never fails: problems are the observation's [`Stop`].
pub async fn observe_upstream(
    comb: &CombInstance,
    upstream: &dyn Upstream,
    ctx: &UpstreamContext,
    scopes: &dyn ScopeLookup,
) -> UpstreamObservation {
    let class = upstream.class_name().to_string();
    let mut observed = UpstreamObservation::new(&class);
    let mut status = match upstream.status(ctx).await {
        Ok(status) => status,
        Err(error) => {
            return observed.stopped(
                "Error",
                "UpstreamFailed",
                format!(
                    "reading the status of {class} failed: {}",
                    clean_message(&error.to_string())
                ),
            );
        }
    };
    let max = comb.settings().max_upstream_depth.get();
    let mut via = status.via.take().unwrap_or_default();
    let looped = via.len() > max;
    via.truncate(max);
    status.via = Some(via);
    observed.status = Some(status);
    let label = observed.label();
    let status = observed.status.as_ref();

    if !status.is_some_and(|s| s.reachable) {
        let message = format!("{label} is unreachable{}", says(status, ": "));
        return observed.stopped("Blocked", "UpstreamUnreachable", message);
    }
    if looped {
        let via = status
            .and_then(|s| s.via.as_deref())
            .unwrap_or_default()
            .join(", ");
        let message = format!("{label} leads through more than {max} layers, a loop? via {via}");
        return observed.stopped("Blocked", "UpstreamLoop", message);
    }
    let offered = match upstream.endpoints(ctx).await {
        Ok(offered) => offered,
        Err(error) => {
            let message = format!(
                "reading the endpoints of {label} failed: {}",
                clean_message(&error.to_string())
            );
            return observed.stopped("Error", "UpstreamFailed", message);
        }
    };
    let declared = match comb.declared_endpoints().await {
        Ok(declared) => declared,
        Err(error) => {
            let message = format!(
                "borrowing from {class} failed: {}",
                clean_message(&error.to_string())
            );
            return observed.stopped("Error", "UpstreamFailed", message);
        }
    };
    let redirected = match redirect(comb.class_name(), &declared, &offered) {
        Ok(redirected) => redirected,
        Err(Redirect::Missing(names)) => {
            let phase = status
                .and_then(|s| s.phase.as_deref())
                .filter(|phase| *phase != "Running")
                .map(|phase| format!(" (it is {phase})"))
                .unwrap_or_default();
            let message = format!(
                "{label} offers no reachable address for endpoint(s) {}{phase}{}",
                names.join(", "),
                says(status, "; ")
            );
            return observed.stopped("Blocked", "UpstreamEndpointsMissing", message);
        }
        Err(Redirect::Failed(error)) => {
            let message = format!(
                "borrowing from {class} failed: {}",
                clean_message(&error.to_string())
            );
            return observed.stopped("Error", "UpstreamFailed", message);
        }
    };
    let bridge = comb.render_bridge(&redirected, scopes).await;
    observed.endpoints = Some(redirected);
    match bridge {
        Ok(items) => {
            observed.bridge = items;
            observed
        }
        Err(error) if error.category() == "bridge" => {
            let message = format!(
                "the upstream cannot be bridged: {}",
                clean_message(&error.to_string())
            );
            observed.stopped("Blocked", "BridgeImpossible", message)
        }
        Err(error) => {
            let message = format!(
                "rendering the bridge failed: {}",
                clean_message(&error.to_string())
            );
            observed.stopped("Error", "BridgeFailed", message)
        }
    }
}

/// Why the declared endpoints could not be redirected.
#[derive(Debug)]
pub enum Redirect {
    /// The upstream offers no address for these declared endpoints.
    Missing(Vec<String>),
    /// A declaration does not hold (no port).
    Failed(Error),
}

/// The declared endpoints pointed at the upstream (reference `_redirect`), in declaration order:
/// the local name, port and protocol; `cluster` = the upstream endpoint's `cluster` (else its
/// `external`), with the upstream's port appended to a bare host; `external` = the upstream's.
/// Upstream endpoints the Comb does not declare are ignored. `class` names the Comb's class in
/// errors of its declarations.
pub fn redirect(
    class: &str,
    declared: &[EndpointDecl],
    offered: &[Endpoint],
) -> Result<Vec<Endpoint>, Redirect> {
    let mut redirected = Vec::new();
    let mut missing = Vec::new();
    for declaration in declared {
        let found = offered
            .iter()
            .find(|endpoint| endpoint.name() == declaration.name);
        let address = found.and_then(|upstream| {
            [upstream.cluster(), upstream.external()]
                .into_iter()
                .flatten()
                .find(|address| !address.is_empty())
                .map(|address| (upstream, with_port(address, upstream.port())))
        });
        let Some((upstream, address)) = address else {
            missing.push(declaration.name.clone());
            continue;
        };
        let port = declaration.port.ok_or_else(|| {
            Redirect::Failed(Error::Endpoints(format!(
                "{class}->endpoints: endpoint {} has no port",
                declaration.name
            )))
        })?;
        let mut endpoint = Endpoint::new(&declaration.name, port)
            .map_err(|error| Redirect::Failed(error.into()))?
            .with_cluster(address);
        if let Some(protocol) = &declaration.protocol {
            endpoint = endpoint.with_protocol(protocol.clone());
        }
        if let Some(external) = upstream.external() {
            endpoint = endpoint.with_external(external);
        }
        redirected.push(endpoint);
    }
    if missing.is_empty() {
        Ok(redirected)
    } else {
        Err(Redirect::Missing(missing))
    }
}

/// `address` with `port` appended when it is a host without one (an IPv6 literal in brackets);
/// anything else as it is (the bridge names what does not parse).
fn with_port(address: &str, port: i32) -> String {
    match Address::parse(address) {
        Some(Address { port: None, host }) => {
            if address.starts_with('[') || !matches!(host, Host::Ipv6(_)) {
                format!("{address}:{port}")
            } else {
                format!("[{address}]:{port}")
            }
        }
        _ => address.to_string(),
    }
}

/// An upstream a Comb borrows from, with what it is asked with: the outcome of step 1 when it
/// is not local.
#[derive(Clone, Debug)]
pub struct Borrowing {
    pub upstream: Arc<dyn Upstream>,
    pub ctx: UpstreamContext,
}

/// Step 1 for reconcile: [`resolve_upstream`] as the step takes it.
pub async fn resolution(
    comb: &CombInstance,
    controlling: &Controlling,
    env: &BorrowEnv,
) -> UpstreamResolution {
    match resolve_upstream(comb, controlling, env).await {
        Ok(Resolved::Local) => UpstreamResolution::Local,
        Ok(Resolved::Upstream(upstream)) => UpstreamResolution::Borrowed(Box::new(Borrowing {
            upstream,
            ctx: env.upstream_context(comb),
        })),
        Err(error) => UpstreamResolution::Failed(error.to_string()),
    }
}

/// `replicated Secret a, ConfigMap b`: what a borrowing step copied, by name only.
pub fn replication_note(replicas: &[CombResource]) -> Option<String> {
    (!replicas.is_empty()).then(|| {
        let names: Vec<String> = replicas
            .iter()
            .map(|replica| format!("{} {}", replica.kind, replica.name))
            .collect();
        format!("replicated {}", names.join(", "))
    })
}

/// What the cluster shows of a borrowing Comb (reference §8.2): `{phase, healthy, reason?,
/// message?, pods: [], upstream}`, the same shape as a local Comb's live status plus the
/// `status.upstream` record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BorrowedStatus {
    /// `Running`, `Pending`, `NotDeployed`, or the stop's `Blocked` / `Error`.
    pub phase: String,
    /// `phase == Running`: the bridge stands and the upstream runs.
    pub healthy: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Always empty: the pods are the upstream's.
    pub pods: Vec<PodState>,
    pub upstream: CombUpstreamStatus,
}

/// The status of a borrowing Comb from its observation and the live objects of its bridge
/// (`live[i]` belongs to `observed.bridge[i]`). A stop is the status; otherwise each missing
/// bridge object is a pending `ResourcesMissing`, and an upstream that does not run a pending
/// `UpstreamNotRunning`. Without problems it is Running; with no bridge object live NotDeployed;
/// else Pending.
pub fn derive_borrowed_status(
    observed: &UpstreamObservation,
    live: &[Option<Value>],
    now: Timestamp,
) -> BorrowedStatus {
    let upstream = observed.record(now);
    if let Some(stop) = &observed.stop {
        return BorrowedStatus {
            phase: stop.phase.to_string(),
            healthy: false,
            reason: Some(stop.reason.to_string()),
            message: Some(stop.message.clone()),
            pods: Vec::new(),
            upstream,
        };
    }
    let present = |index: usize| live.get(index).is_some_and(Option::is_some);
    let mut problems: Vec<Problem> = observed
        .bridge
        .iter()
        .enumerate()
        .filter(|(index, _)| !present(*index))
        .map(|(_, item)| {
            Problem::pending(
                "ResourcesMissing",
                format!("{} {} is missing", item.kind, item.name),
            )
        })
        .collect();
    let verdict = observed.verdict();
    if verdict.phase != "Running" {
        problems.push(Problem::pending(verdict.reason, verdict.message));
    }
    let summary = LiveStatus::from_problems(&problems, Vec::new());
    let nothing_live =
        !observed.bridge.is_empty() && (0..observed.bridge.len()).all(|i| !present(i));
    let phase = match (problems.is_empty(), nothing_live) {
        (true, _) => LivePhase::Running,
        (false, true) => LivePhase::NotDeployed,
        (false, false) => LivePhase::Pending,
    };
    BorrowedStatus {
        phase: phase.to_string(),
        healthy: phase == LivePhase::Running,
        reason: summary.reason,
        message: summary.message,
        pods: Vec::new(),
        upstream,
    }
}

/// The status of `comb` while it borrows from `upstream` (reference §8.2): observe the upstream,
/// then read the bridge's live objects (name label, as the local status reads them).
pub async fn borrowed_status(
    ops: &KubeOps,
    comb: &CombInstance,
    upstream: &dyn Upstream,
    ctx: &UpstreamContext,
) -> Result<BorrowedStatus> {
    let observed = observe_upstream(comb, upstream, ctx, ops).await;
    let live = if observed.stop.is_some() {
        Vec::new()
    } else {
        fetch_live(ops, comb.context(), &observed.bridge, |_| true).await?
    };
    Ok(derive_borrowed_status(&observed, &live, Timestamp::now()))
}

/// What the cluster shows of a Comb now (the reference's `status()`): the local live status, or
/// the status while borrowing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum CombLiveStatus {
    Local(LiveStatus),
    Borrowed(BorrowedStatus),
}

impl CombLiveStatus {
    /// Whether the Comb serves: its phase is Running. A borrowing Comb serves once its bridge
    /// stands and the upstream runs.
    pub fn healthy(&self) -> bool {
        match self {
            CombLiveStatus::Local(status) => status.healthy,
            CombLiveStatus::Borrowed(status) => status.healthy,
        }
    }
}

/// The live status of `comb`: borrowed when `borrowing` names its upstream, else local.
pub async fn live_status(
    ops: &KubeOps,
    comb: &CombInstance,
    borrowing: Option<&Borrowing>,
) -> Result<CombLiveStatus> {
    Ok(match borrowing {
        Some(b) => {
            CombLiveStatus::Borrowed(borrowed_status(ops, comb, b.upstream.as_ref(), &b.ctx).await?)
        }
        None => CombLiveStatus::Local(local_status(ops, comb).await?),
    })
}

/// The resolved endpoints of `comb`: redirected when `borrowing` names its upstream, else local.
pub async fn resolved_endpoints(
    comb: &CombInstance,
    borrowing: Option<&Borrowing>,
) -> Result<Vec<Endpoint>> {
    match borrowing {
        Some(b) => borrowed_endpoints(comb, b.upstream.as_ref(), &b.ctx).await,
        None => comb.local_endpoints().await,
    }
}

/// The endpoints of `comb` while it borrows from `upstream`: the redirected ones. Fails with the
/// stop message when the upstream offers none (`... is unreachable: vendor down`).
pub async fn borrowed_endpoints(
    comb: &CombInstance,
    upstream: &dyn Upstream,
    ctx: &UpstreamContext,
) -> Result<Vec<Endpoint>> {
    // Only the endpoints are used: where the bridge's objects would land does not matter.
    let observed = observe_upstream(comb, upstream, ctx, &Scopes::default()).await;
    match (observed.endpoints, observed.stop) {
        (Some(endpoints), _) => Ok(endpoints),
        (None, Some(stop)) => Err(Error::Endpoints(stop.message)),
        (None, None) => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::class::{ClassRegistry, Settings};
    use async_trait::async_trait;
    use comb_api::Comb;
    use comb_upstreams::Static;
    use kube::config::Kubeconfig;
    use serde_json::json;
    use std::sync::Arc;

    fn env() -> BorrowEnv {
        let kubeconfig = Kubeconfig::from_yaml(
            "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
             contexts: [{name: dev, context: {cluster: c}}, {name: prod, context: {cluster: c}}]\n",
        )
        .unwrap();
        let mut env = BorrowEnv::new(ClientPool::from_kubeconfig(kubeconfig, "test"), "dev");
        env.layers.insert("production".into(), "prod".into());
        env
    }

    async fn comb(spec: Value) -> CombInstance {
        let cr = Comb::new(
            "comb.internal",
            "platform",
            "db",
            serde_json::from_value(spec).unwrap(),
        );
        ClassRegistry::with_builtins()
            .build(&cr, &Settings::default(), &|_: &CombInstance| false)
            .await
            .unwrap()
    }

    /// A Comb declaring `postgres` (5432) and `metrics` (9187, Service db-metrics).
    async fn db() -> CombInstance {
        comb(json!({"class": "Manifests", "config": {"endpoints": [
            {"name": "postgres", "port": 5432},
            {"name": "metrics", "port": 9187, "service": "db-metrics", "protocol": "http"}
        ]}}))
        .await
    }

    fn endpoint(name: &str, port: i32, cluster: Option<&str>, external: Option<&str>) -> Endpoint {
        let mut endpoint = Endpoint::new(name, port).unwrap();
        if let Some(cluster) = cluster {
            endpoint = endpoint.with_cluster(cluster);
        }
        if let Some(external) = external {
            endpoint = endpoint.with_external(external);
        }
        endpoint
    }

    async fn observe(comb: &CombInstance, upstream: &dyn Upstream) -> UpstreamObservation {
        observe_upstream(
            comb,
            upstream,
            &env().upstream_context(comb),
            &Scopes::default(),
        )
        .await
    }

    fn stop(observed: &UpstreamObservation) -> (&str, &str, &str) {
        let stop = observed.stop.as_ref().unwrap();
        (stop.phase, stop.reason, stop.message.as_str())
    }

    #[tokio::test]
    async fn resolution_order_and_errors() {
        let env = env();
        let none = Controlling::none();
        let static_spec = |via: &str| {
            UpstreamSpec::Declared(
                json!({"class": "Static", "via": [via]})
                    .as_object()
                    .cloned()
                    .unwrap(),
            )
        };
        let via = |resolved: Resolved| match resolved {
            Resolved::Local => "local".to_string(),
            Resolved::Upstream(_) => "upstream".to_string(),
        };

        let local = comb(json!({"class": "Manifests"})).await;
        assert_eq!(
            via(resolve_upstream(&local, &none, &env).await.unwrap()),
            "local"
        );

        let declared = comb(
            json!({"class": "Manifests", "upstream": {"class": "K8s", "layer": "production"}}),
        )
        .await;
        let Resolved::Upstream(upstream) = resolve_upstream(&declared, &none, &env).await.unwrap()
        else {
            panic!("spec.upstream names K8s");
        };
        assert_eq!(upstream.class_name(), "Kubernetes::Comb::Upstream::K8s");

        // The controlling code decides first, even when it says local.
        let explicit_local = Controlling::new("the borrow of layer dev", UpstreamSpec::Local);
        assert_eq!(
            via(resolve_upstream(&declared, &explicit_local, &env)
                .await
                .unwrap()),
            "local"
        );
        let controlling = Controlling::new("the borrow of layer dev", static_spec("x"));
        assert_eq!(
            via(resolve_upstream(&local, &controlling, &env).await.unwrap()),
            "upstream"
        );
        // `upstream: null` is local and ends the resolution.
        let null = comb(json!({"class": "Manifests", "upstream": null})).await;
        assert_eq!(
            via(resolve_upstream(&null, &none, &env).await.unwrap()),
            "local"
        );

        let cases = [
            (
                comb(json!({"class": "Manifests", "upstream": {"context": "prod"}})).await,
                none.clone(),
                "spec.upstream names no class",
            ),
            (
                local.clone(),
                Controlling::new(
                    "the borrow of layer dev",
                    UpstreamSpec::Declared(
                        json!({"class": "K8s", "layer": "qa"})
                            .as_object()
                            .cloned()
                            .unwrap(),
                    ),
                ),
                "the borrow of layer dev: Kubernetes::Comb::Upstream::K8s: there is no layer qa (layers: production)",
            ),
        ];
        for (comb, controlling, message) in cases {
            let error = resolve_upstream(&comb, &controlling, &env)
                .await
                .unwrap_err();
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn redirect_keeps_local_ports_and_appends_upstream_ports() {
        let declared = [
            EndpointDecl::new("postgres", 5432),
            EndpointDecl::new("metrics", 9187).protocol("http"),
            EndpointDecl::new("v6", 53).protocol("udp"),
            EndpointDecl::new("bracketed", 80),
            EndpointDecl::new("external", 443),
        ];
        let offered = [
            endpoint("ignored", 1, Some("x:1"), None),
            endpoint(
                "postgres",
                15432,
                Some("db.prod.svc:15432"),
                Some("192.0.2.10:5432"),
            ),
            endpoint("metrics", 9000, Some("DB.Example.COM"), None),
            endpoint("v6", 5353, Some("2001:db8::7"), None),
            endpoint("bracketed", 8080, Some("[::1]"), None),
            endpoint("external", 8443, Some(""), Some("api.example.com:8443")),
        ];
        let redirected = redirect("C", &declared, &offered).unwrap();
        let rows: Vec<(String, i32, String, String, Option<String>)> = redirected
            .iter()
            .map(|e| {
                (
                    e.name().to_string(),
                    e.port(),
                    e.protocol().to_string(),
                    e.cluster().unwrap().to_string(),
                    e.external().map(str::to_string),
                )
            })
            .collect();
        let row = |n: &str, p: i32, proto: &str, c: &str, e: Option<&str>| {
            (
                n.to_string(),
                p,
                proto.to_string(),
                c.to_string(),
                e.map(str::to_string),
            )
        };
        assert_eq!(
            rows,
            [
                row(
                    "postgres",
                    5432,
                    "tcp",
                    "db.prod.svc:15432",
                    Some("192.0.2.10:5432")
                ),
                row("metrics", 9187, "http", "DB.Example.COM:9000", None),
                row("v6", 53, "udp", "[2001:db8::7]:5353", None),
                row("bracketed", 80, "tcp", "[::1]:8080", None),
                row(
                    "external",
                    443,
                    "tcp",
                    "api.example.com:8443",
                    Some("api.example.com:8443")
                ),
            ]
        );

        let Err(Redirect::Missing(missing)) = redirect(
            "C",
            &declared,
            &[
                endpoint("postgres", 1, None, None),
                endpoint("v6", 1, Some("a:1"), None),
            ],
        ) else {
            panic!("endpoints without addresses");
        };
        assert_eq!(missing, ["postgres", "metrics", "bracketed", "external"]);
        assert!(redirect("C", &[], &offered).unwrap().is_empty());
        let Err(Redirect::Failed(error)) = redirect(
            "C",
            &[EndpointDecl {
                name: "postgres".into(),
                ..EndpointDecl::default()
            }],
            &offered,
        ) else {
            panic!("a declaration without a port");
        };
        assert_eq!(
            error.to_string(),
            "C->endpoints: endpoint postgres has no port"
        );
    }

    #[tokio::test]
    async fn borrowed_through_an_external_name_bridge() {
        let comb = db().await;
        let upstream = Static::new(vec![
            endpoint(
                "postgres",
                5432,
                Some("db.platform.svc"),
                Some("192.0.2.10:5432"),
            ),
            endpoint("metrics", 9187, Some("db.platform.svc:9187"), None),
        ])
        .with_via(vec!["staging".into(), "prod".into()]);
        let observed = observe(&comb, &upstream).await;
        assert!(observed.stop.is_none(), "{:?}", observed.stop);
        let redirected: Vec<Value> = observed
            .endpoints
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| serde_json::to_value(e.to_crd()).unwrap())
            .collect();
        assert_eq!(
            redirected,
            [
                json!({"name": "postgres", "protocol": "tcp", "port": 5432, "cluster": "db.platform.svc:5432", "external": "192.0.2.10:5432"}),
                json!({"name": "metrics", "protocol": "http", "port": 9187, "cluster": "db.platform.svc:9187"}),
            ]
        );
        let bridge: Vec<(&str, &str, Option<&str>)> = observed
            .bridge
            .iter()
            .map(|item| {
                (
                    item.kind.as_str(),
                    item.name.as_str(),
                    item.manifest
                        .pointer("/spec/externalName")
                        .and_then(Value::as_str),
                )
            })
            .collect();
        assert_eq!(
            bridge,
            [
                ("Service", "db", Some("db.platform.svc.cluster.local")),
                (
                    "Service",
                    "db-metrics",
                    Some("db.platform.svc.cluster.local")
                ),
            ]
        );
        assert_eq!(
            observed.bridge[0]
                .manifest
                .pointer("/metadata/labels/comb.internal~1comb"),
            Some(&json!("db")),
            "the bridge is rendered like manifests"
        );
        let verdict = observed.verdict();
        assert_eq!(
            (verdict.phase, verdict.reason, verdict.message.as_str()),
            (
                "Running",
                "Borrowed",
                "borrowed from upstream Kubernetes::Comb::Upstream::Static via staging, prod"
            )
        );
        let now: Timestamp = "2026-09-26T12:00:00Z".parse().unwrap();
        assert_eq!(
            serde_json::to_value(observed.record(now)).unwrap(),
            json!({"class": "Kubernetes::Comb::Upstream::Static", "reachable": true, "phase": "Running",
                   "via": ["staging", "prod"], "observedAt": "2026-09-26T12:00:00Z"})
        );
    }

    #[tokio::test]
    async fn verdicts_name_the_phase_and_what_the_upstream_says() {
        let comb = comb(json!({"class": "Manifests"})).await;
        let cases = [
            (
                Static::new(vec![]),
                (
                    "Running",
                    "Borrowed",
                    "borrowed from upstream Kubernetes::Comb::Upstream::Static",
                ),
            ),
            (
                Static::new(vec![])
                    .with_phase("Pending")
                    .with_message("starting \n"),
                (
                    "Pending",
                    "UpstreamNotRunning",
                    "upstream Kubernetes::Comb::Upstream::Static is Pending: starting",
                ),
            ),
        ];
        for (upstream, (phase, reason, message)) in cases {
            let observed = observe(&comb, &upstream).await;
            assert!(observed.stop.is_none());
            assert!(observed.bridge.is_empty(), "no endpoints, an empty bridge");
            let verdict = observed.verdict();
            assert_eq!(
                (verdict.phase, verdict.reason, verdict.message.as_str()),
                (phase, reason, message)
            );
        }
        let mut no_phase = UpstreamObservation::new("K");
        no_phase.status = Some(UpstreamStatus {
            reachable: true,
            context: Some("c".into()),
            via: Some(vec!["c".into(), "c".into()]),
            ..UpstreamStatus::default()
        });
        assert_eq!(
            no_phase.verdict().message,
            "upstream K (context c) is in no known phase"
        );
        no_phase.status.as_mut().unwrap().phase = Some("Running".into());
        assert_eq!(
            no_phase.verdict().message,
            "borrowed from upstream K (context c) via c, c"
        );
    }

    /// An upstream whose answers fail, to reach the UpstreamFailed rows.
    #[derive(Debug)]
    struct Failing {
        status: bool,
    }

    #[async_trait]
    impl Upstream for Failing {
        fn class_name(&self) -> &str {
            "Test::Failing"
        }
        async fn status(&self, _ctx: &UpstreamContext) -> comb_upstreams::Result<UpstreamStatus> {
            if self.status {
                return Err(comb_upstreams::Error::Answer("vault sealed \n".into()));
            }
            Ok(UpstreamStatus {
                reachable: true,
                phase: Some("Running".into()),
                context: Some("prod".into()),
                ..UpstreamStatus::default()
            })
        }
        async fn endpoints(&self, _ctx: &UpstreamContext) -> comb_upstreams::Result<Vec<Endpoint>> {
            Err(comb_upstreams::Error::Unreachable(
                "connection reset".into(),
            ))
        }
    }

    #[tokio::test]
    async fn every_stop_in_order() {
        let db = db().await;
        let s = "upstream Kubernetes::Comb::Upstream::Static";
        let deep: Vec<String> = (0..17).map(|i| format!("l{i}")).collect();
        let cut = deep[..16].join(", ");
        type Case<'a> = (Box<dyn Upstream>, (&'a str, &'a str, String));
        let cases: Vec<Case> = vec![
            (
                Box::new(Failing { status: true }),
                ("Error", "UpstreamFailed", "reading the status of Test::Failing failed: vault sealed".into()),
            ),
            (
                Box::new(Static::new(vec![]).with_reachable(false).with_message("vendor down")),
                ("Blocked", "UpstreamUnreachable", format!("{s} is unreachable: vendor down")),
            ),
            (
                Box::new(Static::new(vec![]).with_reachable(false).with_via(deep.clone())),
                ("Blocked", "UpstreamUnreachable", format!("{s} is unreachable")),
            ),
            (
                Box::new(Static::new(vec![]).with_via(deep.clone())),
                ("Blocked", "UpstreamLoop", format!("{s} leads through more than 16 layers, a loop? via {cut}")),
            ),
            (
                Box::new(Failing { status: false }),
                (
                    "Error",
                    "UpstreamFailed",
                    "reading the endpoints of upstream Test::Failing (context prod) failed: connection reset".into(),
                ),
            ),
            (
                Box::new(
                    Static::new(vec![endpoint("postgres", 5432, Some("db:5432"), None)])
                        .with_phase("Pending")
                        .with_message("restoring a backup"),
                ),
                (
                    "Blocked",
                    "UpstreamEndpointsMissing",
                    format!("{s} offers no reachable address for endpoint(s) metrics (it is Pending); restoring a backup"),
                ),
            ),
        ];
        for (upstream, (phase, reason, message)) in cases {
            let observed = observe(&db, upstream.as_ref()).await;
            assert_eq!(stop(&observed), (phase, reason, message.as_str()));
            assert_eq!(observed.endpoints, None, "{reason} publishes no endpoints");
        }
        let portless =
            comb(json!({"class": "Manifests", "config": {"endpoints": [{"name": "postgres"}]}}))
                .await;
        let upstream = Static::new(vec![endpoint("postgres", 5432, Some("db:5432"), None)]);
        assert_eq!(
            stop(&observe(&portless, &upstream).await),
            (
                "Error",
                "UpstreamFailed",
                "borrowing from Kubernetes::Comb::Upstream::Static failed: Manifests->endpoints: endpoint postgres has no port"
            )
        );
    }

    #[tokio::test]
    async fn bridge_impossible_keeps_the_redirected_endpoints() {
        let comb = comb(json!({"class": "Manifests", "config": {"endpoints": [
            {"name": "postgres", "port": 5432}, {"name": "replica", "port": 5433}
        ]}}))
        .await;
        let mixed = Static::new(vec![
            endpoint("postgres", 5432, Some("db.example.com:5432"), None),
            endpoint("replica", 5433, Some("10.0.0.1"), None),
        ]);
        let observed = observe(&comb, &mixed).await;
        assert_eq!(
            stop(&observed),
            (
                "Blocked",
                "BridgeImpossible",
                "the upstream cannot be bridged: Service db: its endpoints point at both host names and IP \
                 addresses (postgres at db.example.com, replica at 10.0.0.1), one Service cannot bridge both"
            )
        );
        let published: Vec<&str> = observed
            .endpoints
            .as_ref()
            .unwrap()
            .iter()
            .filter_map(Endpoint::cluster)
            .collect();
        assert_eq!(published, ["db.example.com:5432", "10.0.0.1:5433"]);
        assert!(observed.bridge.is_empty());
    }

    /// A class whose bridge does not render.
    struct BadBridge;

    #[async_trait]
    impl crate::engine::class::CombClass for BadBridge {
        fn name(&self) -> &str {
            "BadBridge"
        }
        async fn bridge_manifests(
            &self,
            _ctx: &crate::engine::class::CombContext,
            _endpoints: &[Endpoint],
        ) -> Result<Vec<Value>> {
            Ok(vec![json!({"metadata": {"name": "x"}})])
        }
    }

    #[tokio::test]
    async fn a_bridge_that_does_not_render_is_an_error() {
        let mut registry = ClassRegistry::new();
        registry.register_shared(Arc::new(BadBridge));
        let cr = Comb::new(
            "comb.internal",
            "platform",
            "db",
            comb_api::CombSpec::of_class("BadBridge"),
        );
        let comb = registry
            .build(&cr, &Settings::default(), &|_: &CombInstance| false)
            .await
            .unwrap();
        let observed = observe(&comb, &Static::new(vec![])).await;
        assert_eq!(
            stop(&observed),
            (
                "Error",
                "BridgeFailed",
                "rendering the bridge failed: BadBridge: a manifest has no kind"
            )
        );
        assert_eq!(observed.endpoints, Some(vec![]));
    }

    #[tokio::test]
    async fn status_while_borrowing() {
        let db = db().await;
        let now: Timestamp = "2026-09-26T12:00:00Z".parse().unwrap();
        let offered = vec![
            endpoint("postgres", 5432, Some("db.platform.svc:5432"), None),
            endpoint("metrics", 9187, Some("db.platform.svc:9187"), None),
        ];
        let running = observe(&db, &Static::new(offered.clone())).await;
        let pending = observe(&db, &Static::new(offered).with_phase("Pending")).await;
        let live = Some(json!({"metadata": {"name": "x"}}));
        let row = |status: BorrowedStatus| {
            assert!(status.pods.is_empty());
            assert_eq!(
                status.upstream.class.as_deref(),
                Some("Kubernetes::Comb::Upstream::Static")
            );
            (status.phase, status.healthy, status.reason, status.message)
        };
        let s = |text: &str| Some(text.to_string());
        let cases = [
            (
                &running,
                vec![live.clone(), live.clone()],
                ("Running", true, None, None),
            ),
            (
                &running,
                vec![live.clone(), None],
                (
                    "Pending",
                    false,
                    s("ResourcesMissing"),
                    s("Service db-metrics is missing"),
                ),
            ),
            (
                &running,
                vec![None, None],
                (
                    "NotDeployed",
                    false,
                    s("ResourcesMissing"),
                    s("Service db is missing; Service db-metrics is missing"),
                ),
            ),
            (
                &pending,
                vec![live.clone(), live.clone()],
                (
                    "Pending",
                    false,
                    s("UpstreamNotRunning"),
                    s("upstream Kubernetes::Comb::Upstream::Static is Pending"),
                ),
            ),
        ];
        for (observed, live, (phase, healthy, reason, message)) in cases {
            assert_eq!(
                row(derive_borrowed_status(observed, &live, now)),
                (phase.to_string(), healthy, reason, message)
            );
        }

        let unreachable = observe(&db, &Static::new(vec![]).with_reachable(false)).await;
        let status = derive_borrowed_status(&unreachable, &[], now);
        assert_eq!(
            (
                status.phase.as_str(),
                status.reason.as_deref(),
                status.message.as_deref()
            ),
            (
                "Blocked",
                Some("UpstreamUnreachable"),
                Some("upstream Kubernetes::Comb::Upstream::Static is unreachable")
            )
        );
        assert_eq!(status.upstream.reachable, Some(false));

        // Nothing to bridge: only the upstream's phase counts.
        let plain = comb(json!({"class": "Manifests"})).await;
        let nothing = observe(&plain, &Static::new(vec![]).with_phase("Pending")).await;
        assert_eq!(derive_borrowed_status(&nothing, &[], now).phase, "Pending");
        let nothing = observe(&plain, &Static::new(vec![])).await;
        assert!(derive_borrowed_status(&nothing, &[], now).healthy);
    }

    #[tokio::test]
    async fn endpoints_while_borrowing_are_the_redirected_ones() {
        let db = db().await;
        let ctx = env().upstream_context(&db);
        let upstream = Static::new(vec![
            endpoint("postgres", 15432, Some("192.0.2.10"), None),
            endpoint("metrics", 9187, Some("192.0.2.10:9187"), None),
        ]);
        let endpoints = borrowed_endpoints(&db, &upstream, &ctx).await.unwrap();
        assert_eq!(endpoints[0].cluster(), Some("192.0.2.10:15432"));
        assert_eq!(endpoints[0].port(), 5432);
        let down = Static::new(vec![])
            .with_reachable(false)
            .with_message("vendor down");
        assert_eq!(
            borrowed_endpoints(&db, &down, &ctx)
                .await
                .unwrap_err()
                .to_string(),
            "upstream Kubernetes::Comb::Upstream::Static is unreachable: vendor down"
        );
    }
}
