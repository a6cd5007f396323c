//! `comb check`: can the controller work? Every layer reachable, the CRD installed and
//! established, the permissions it needs (where the API server answers SelfSubjectAccessReview),
//! the layers borrowed from reachable, no dependency cycles, no upstream loops, every Comb able to
//! work as written (its dependencies there, its upstream's context or layer known and allowed,
//! its build not failed; Pending is fine). Exit code 1 when any check failed.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use comb_api::{Comb, ConditionStatus, Reason, UPSTREAM_FALLBACK};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use serde::Serialize;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::cli::output::{DataFormat, Table, serialize};
use crate::config::Layer;
use crate::controller::graph::{DependencyGraph, describe_cycles};
use crate::engine::borrow::Candidate;
use crate::engine::borrow::fallback::written_duration;
use crate::engine::keys::{CombKey, dependency_key};
use comb_kubeconfigs::describe_error;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<DataFormat>,
}

/// How one check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Failed,
    /// Could not be checked (the note says why); not a failure.
    Skipped,
}

/// One check of one layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub layer: String,
    pub outcome: Outcome,
    pub detail: String,
}

impl Check {
    fn new(check: &'static str, layer: &str, outcome: Outcome, detail: impl Into<String>) -> Check {
        Check {
            check,
            layer: layer.to_string(),
            outcome,
            detail: detail.into(),
        }
    }
}

/// What the controller does with the API, as (verb, group, resource) triples: the Combs and their
/// status, Events, the prerequisites `check` reads, and the kinds of the common Comb parts.
const PERMISSIONS: &[(&str, &str, &str)] = &[
    ("list", "", "combs"),
    ("watch", "", "combs"),
    ("update", "", "combs"),
    ("update", "", "combs/status"),
    ("create", "", "events"),
    ("get", "", "configmaps"),
    ("create", "", "services"),
    ("update", "", "services"),
    ("delete", "", "services"),
    ("create", "apps", "deployments"),
    ("update", "apps", "deployments"),
    ("delete", "apps", "deployments"),
    ("create", "apps", "statefulsets"),
    ("create", "discovery.k8s.io", "endpointslices"),
];

/// What a layer whose Combs get copies of Secrets needs besides (comb has no business with
/// Secrets elsewhere): reading the copies, writing them.
const SECRET_PERMISSIONS: &[(&str, &str, &str)] = &[
    ("get", "", "secrets"),
    ("create", "", "secrets"),
    ("patch", "", "secrets"),
];

/// The dependency cycles among the Combs of one layer, as `ns/a -> ns/b -> ns/a`.
pub fn dependency_cycles(combs: &[Comb]) -> String {
    let mut graph = DependencyGraph::default();
    for comb in combs {
        let (Some(namespace), Some(name)) = (&comb.metadata.namespace, &comb.metadata.name) else {
            continue;
        };
        let dependencies: BTreeSet<CombKey> = comb
            .spec
            .dependencies()
            .iter()
            .filter_map(|reference| dependency_key(reference, namespace))
            .collect();
        graph.set(&CombKey::new(namespace, name), dependencies);
    }
    describe_cycles(graph.cycles())
}

/// `ns/name: message` of each Comb whose status has a condition `pick` chooses.
fn combs_with(
    combs: &[Comb],
    pick: impl Fn(&comb_api::CombStatus) -> Option<&comb_api::CombCondition>,
) -> Vec<String> {
    combs
        .iter()
        .filter_map(|comb| {
            let condition = pick(comb.status.as_ref()?)?;
            Some(format!(
                "{}/{}: {}",
                comb.metadata.namespace.as_deref().unwrap_or_default(),
                comb.metadata.name.as_deref().unwrap_or_default(),
                condition.message.as_deref().unwrap_or_default()
            ))
        })
        .collect()
}

/// The Combs whose last step found an upstream loop (`UpstreamLoop`), with its message.
pub fn upstream_loops(combs: &[Comb]) -> Vec<String> {
    combs_with(combs, |status| {
        status
            .ready()
            .filter(|ready| ready.reason == Some(Reason::UpstreamLoop))
    })
}

/// What a layer's Combs may name: the kube contexts of the kubeconfig and the layers.
pub struct Names<'a> {
    pub contexts: &'a [String],
    pub layers: &'a [&'a str],
}

/// Why the layer's borrow may not be used for the Comb `namespace/name` (it would reach outside
/// its source layer, [`crate::config::Config::outside_the_source`]), if it may not.
pub type BorrowRefusal<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

/// Combs that cannot work as written: a dependency that is not a Comb of the layer, an upstream
/// whose context or layer does not exist, a borrow outside its source layer, a build that
/// failed. A Comb merely Pending is fine.
fn broken_combs(combs: &[Comb], names: &Names<'_>, borrow_refusal: BorrowRefusal) -> Vec<String> {
    let present: BTreeSet<CombKey> = combs
        .iter()
        .filter_map(|comb| {
            Some(CombKey::new(
                comb.metadata.namespace.as_deref()?,
                comb.metadata.name.as_deref()?,
            ))
        })
        .collect();
    let mut broken = Vec::new();
    for comb in combs {
        let (Some(namespace), Some(name)) = (&comb.metadata.namespace, &comb.metadata.name) else {
            continue;
        };
        let mut problems = Vec::new();
        for reference in comb.spec.dependencies() {
            if let Some(key) = dependency_key(reference, namespace)
                && !present.contains(&key)
            {
                problems.push(format!(
                    "depends on {key}, which is not a Comb of the layer"
                ));
            }
        }
        if let comb_api::UpstreamSpec::Declared(upstream) = &comb.spec.upstream {
            if let Some(context) = upstream.get("context").and_then(|v| v.as_str())
                && !names.contexts.iter().any(|known| known == context)
            {
                problems.push(format!(
                    "spec.upstream.context {context} is not a context of the kubeconfig (contexts: {})",
                    names.contexts.join(", ")
                ));
            }
            if let Some(layer) = upstream.get("layer").and_then(|v| v.as_str())
                && !names.layers.contains(&layer)
            {
                problems.push(format!(
                    "spec.upstream.layer {layer} is not a layer (layers: {})",
                    names.layers.join(", ")
                ));
            }
        }
        let mut recorded = None;
        if let Some(ready) = comb.status.as_ref().and_then(|status| status.ready())
            && let Some(
                reason @ (comb_api::Reason::BuildFailed | comb_api::Reason::UpstreamForbidden),
            ) = &ready.reason
        {
            let message = ready.message.as_deref().unwrap_or_default();
            recorded = Some(message);
            problems.push(format!("{reason}: {message}"));
        }
        // What the controller says once it steps the Comb, said before it has.
        if let Some(refusal) = borrow_refusal(namespace, name)
            && recorded != Some(refusal.as_str())
        {
            problems.push(format!(
                "{}: {refusal}",
                comb_api::Reason::UpstreamForbidden
            ));
        }
        broken.extend(
            problems
                .into_iter()
                .map(|problem| format!("{namespace}/{name}: {problem}")),
        );
    }
    broken
}

/// The checks a layer's Combs answer without asking the cluster again.
pub fn comb_checks(
    layer: &str,
    combs: &[Comb],
    names: &Names<'_>,
    borrow_refusal: BorrowRefusal,
) -> Vec<Check> {
    let cycles = dependency_cycles(combs);
    let loops = upstream_loops(combs);
    let on_fallback = on_fallback(combs);
    let mut checks = vec![
        if cycles.is_empty() {
            Check::new(
                "dependencies",
                layer,
                Outcome::Ok,
                format!("no cycle among {} Comb(s)", combs.len()),
            )
        } else {
            Check::new(
                "dependencies",
                layer,
                Outcome::Failed,
                format!("cycle: {cycles} (these stay Blocked)"),
            )
        },
        if loops.is_empty() {
            Check::new(
                "upstream loops",
                layer,
                Outcome::Ok,
                "no Comb reports UpstreamLoop",
            )
        } else {
            Check::new("upstream loops", layer, Outcome::Failed, loops.join("; "))
        },
        spec_check(layer, combs),
        match broken_combs(combs, names, borrow_refusal).as_slice() {
            [] => Check::new(
                "combs",
                layer,
                Outcome::Ok,
                format!("{} Comb(s) can work as written", combs.len()),
            ),
            broken => Check::new("combs", layer, Outcome::Failed, broken.join("; ")),
        },
    ];
    // Not a failure: the borrowers serve. The layer they prefer is what to look at (its own
    // `upstream layer` check, or its Comb).
    if !on_fallback.is_empty() {
        checks.push(Check::new(
            "on fallback",
            layer,
            Outcome::Ok,
            format!(
                "{} Comb(s) borrow from a fallback: {}",
                on_fallback.len(),
                on_fallback.join("; ")
            ),
        ));
    }
    checks
}

/// Every Comb's spec decodes (a CRD without a schema lets anything through).
fn spec_check(layer: &str, combs: &[Comb]) -> Check {
    let bad: Vec<String> = combs
        .iter()
        .filter_map(|comb| {
            let problem = comb.spec_error.as_deref()?;
            Some(format!(
                "{}/{}: {problem}",
                comb.metadata.namespace.as_deref().unwrap_or_default(),
                comb.metadata.name.as_deref().unwrap_or_default(),
            ))
        })
        .collect();
    if bad.is_empty() {
        Check::new("specs", layer, Outcome::Ok, "every Comb's spec decodes")
    } else {
        Check::new("specs", layer, Outcome::Failed, bad.join("; "))
    }
}

/// The checks as a table, in the order they ran.
pub fn table(checks: &[Check]) -> String {
    let mut table = Table::new(vec!["CHECK", "LAYER", "RESULT", "DETAIL"]);
    for check in checks {
        table.row(vec![
            check.check.to_string(),
            check.layer.clone(),
            match check.outcome {
                Outcome::Ok => "ok",
                Outcome::Failed => "FAILED",
                Outcome::Skipped => "skipped",
            }
            .to_string(),
            check.detail.clone(),
        ]);
    }
    table.render()
}

/// Whether the API of a layer answers, and with which version; a failure in one line, in the
/// API server's words.
async fn reachable(federation: &Federation, layer: &Layer) -> std::result::Result<String, Check> {
    let failed = |detail: String| Check::new("reachable", &layer.name, Outcome::Failed, detail);
    let client = federation
        .client(layer)
        .await
        .map_err(|error| failed(crate::cli::output::one_line(&error)))?;
    let version = client
        .apiserver_version()
        .await
        .map_err(|error| failed(describe_error(&error)))?;
    let server = federation
        .pool
        .server_url(&layer.context)
        .unwrap_or_default();
    Ok(format!(
        "context {} at {server}, Kubernetes {}",
        layer.context, version.git_version
    ))
}

async fn crd_check(federation: &Federation, layer: &Layer) -> Check {
    let name = format!("{}.{}", comb_api::PLURAL, federation.config.group);
    let found = match federation.client(layer).await {
        Ok(client) => Api::<CustomResourceDefinition>::all(client)
            .get_opt(&name)
            .await
            .map_err(|error| describe_error(&error)),
        Err(error) => Err(crate::cli::output::one_line(&error)),
    };
    match found {
        Ok(Some(crd)) => {
            let established = crd
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|condition| condition.type_ == "Established" && condition.status == "True");
            if established {
                Check::new(
                    "crd",
                    &layer.name,
                    Outcome::Ok,
                    format!("{name} is established"),
                )
            } else {
                Check::new(
                    "crd",
                    &layer.name,
                    Outcome::Failed,
                    format!("{name} exists but is not established yet"),
                )
            }
        }
        Ok(None) => Check::new(
            "crd",
            &layer.name,
            Outcome::Failed,
            format!(
                "{name} is not installed: comb crd --group {} | kubectl apply -f -",
                federation.config.group
            ),
        ),
        Err(error) => Check::new(
            "crd",
            &layer.name,
            Outcome::Failed,
            format!("reading {name} failed: {error}"),
        ),
    }
}

async fn permission_check(federation: &Federation, layer: &Layer) -> Check {
    let client = match federation.client(layer).await {
        Ok(client) => client,
        Err(error) => {
            return Check::new(
                "permissions",
                &layer.name,
                Outcome::Failed,
                crate::cli::output::one_line(&error),
            );
        }
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client);
    let namespaces: Vec<Option<String>> = match &layer.namespaces {
        Some(namespaces) => namespaces.iter().cloned().map(Some).collect(),
        None => vec![None],
    };
    let copies = if layer.replicates() {
        SECRET_PERMISSIONS
    } else {
        &[]
    };
    let permissions: Vec<&(&str, &str, &str)> = PERMISSIONS.iter().chain(copies).collect();
    let mut denied = Vec::new();
    for namespace in &namespaces {
        for (verb, group, resource) in permissions.iter().copied() {
            let (resource, subresource) = match resource.split_once('/') {
                Some((resource, sub)) => (resource, Some(sub.to_string())),
                None => (*resource, None),
            };
            let group = if resource == "combs" {
                federation.config.group.as_str()
            } else {
                group
            };
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        namespace: namespace.clone(),
                        verb: Some(verb.to_string()),
                        group: Some(group.to_string()),
                        resource: Some(resource.to_string()),
                        subresource: subresource.clone(),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            match reviews.create(&PostParams::default(), &review).await {
                Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {}
                Ok(_) => denied.push(format!(
                    "{verb} {resource}{} in {}",
                    subresource
                        .as_ref()
                        .map(|s| format!("/{s}"))
                        .unwrap_or_default(),
                    namespace.as_deref().unwrap_or("all namespaces")
                )),
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Check::new(
                        "permissions",
                        &layer.name,
                        Outcome::Skipped,
                        "the API server does not serve SelfSubjectAccessReview",
                    );
                }
                Err(error) => {
                    return Check::new(
                        "permissions",
                        &layer.name,
                        Outcome::Failed,
                        format!("asking failed: {}", describe_error(&error)),
                    );
                }
            }
        }
    }
    if denied.is_empty() {
        Check::new(
            "permissions",
            &layer.name,
            Outcome::Ok,
            format!("{} verb(s) allowed", permissions.len() * namespaces.len()),
        )
    } else {
        Check::new(
            "permissions",
            &layer.name,
            Outcome::Failed,
            format!("denied: {}", denied.join(", ")),
        )
    }
}

/// Where the borrowers of `layer` go while the layer they borrow from is unhealthy, and whether
/// they can get there: fine while some entry of its `fallback` is reachable (`local` always is).
/// `None` for a layer without a fallback. `up` says which layers answered.
pub fn fallback_check(layer: &Layer, up: &BTreeMap<&str, bool>) -> Option<Check> {
    let fallback = layer.borrow.as_ref()?.fallback.as_ref()?;
    let entries: Vec<(String, bool)> = fallback
        .to
        .iter()
        .map(|entry| match entry {
            Candidate::Layer(name) => {
                let reachable = up.get(name.as_str()).copied().unwrap_or(false);
                let state = if reachable {
                    "reachable"
                } else {
                    "not reachable"
                };
                (format!("{name} ({state})"), reachable)
            }
            Candidate::Local => ("local".to_string(), true),
        })
        .collect();
    let listed = entries
        .iter()
        .map(|(entry, _)| entry.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let policy = &fallback.policy;
    let timing = format!(
        "after {} unhealthy, back after {} healthy",
        written_duration(policy.unhealthy_after),
        written_duration(policy.healthy_after)
    );
    Some(if entries.iter().any(|(_, usable)| *usable) {
        Check::new(
            "fallback",
            &layer.name,
            Outcome::Ok,
            format!("falls back to {listed} {timing}"),
        )
    } else {
        Check::new(
            "fallback",
            &layer.name,
            Outcome::Failed,
            format!("falls back to {listed}: none is reachable"),
        )
    })
}

/// The Combs of a layer that borrow from a fallback (or run locally) now, with why.
fn on_fallback(combs: &[Comb]) -> Vec<String> {
    combs_with(combs, |status| {
        status
            .condition(UPSTREAM_FALLBACK)
            .filter(|condition| condition.status == ConditionStatus::True)
    })
}

/// Every check of every layer.
pub async fn run_checks(federation: &Federation) -> Vec<Check> {
    let contexts = federation.pool.contexts();
    let layer_names: Vec<&str> = federation
        .config
        .layers
        .iter()
        .map(|layer| layer.name.as_str())
        .collect();
    let names = Names {
        contexts: &contexts,
        layers: &layer_names,
    };
    let mut checks = Vec::new();
    let mut up: BTreeMap<&str, bool> = BTreeMap::new();
    for layer in &federation.config.layers {
        match reachable(federation, layer).await {
            Ok(detail) => {
                up.insert(&layer.name, true);
                checks.push(Check::new("reachable", &layer.name, Outcome::Ok, detail));
            }
            Err(failed) => {
                up.insert(&layer.name, false);
                checks.push(failed);
            }
        }
    }
    for layer in &federation.config.layers {
        if let Some(borrow) = &layer.borrow {
            checks.push(if up.get(borrow.from.as_str()).copied().unwrap_or(false) {
                Check::new(
                    "upstream layer",
                    &layer.name,
                    Outcome::Ok,
                    format!("borrows from {}, which is reachable", borrow.from),
                )
            } else {
                Check::new(
                    "upstream layer",
                    &layer.name,
                    Outcome::Failed,
                    format!("borrows from {}, which is not reachable", borrow.from),
                )
            });
        }
        if let Some(check) = fallback_check(layer, &up) {
            checks.push(check);
        }
        if !up.get(layer.name.as_str()).copied().unwrap_or(false) {
            checks.push(Check::new(
                "crd",
                &layer.name,
                Outcome::Skipped,
                "the layer is not reachable",
            ));
            continue;
        }
        checks.push(crd_check(federation, layer).await);
        checks.push(permission_check(federation, layer).await);
        match federation.list_combs(layer, None).await {
            Ok(combs) => {
                let config = &federation.config;
                let refusal = |namespace: &str, name: &str| {
                    config.controlling(layer, namespace, name).refusal
                };
                checks.extend(comb_checks(&layer.name, &combs, &names, &refusal));
            }
            Err(error) => checks.push(Check::new(
                "combs",
                &layer.name,
                Outcome::Failed,
                crate::cli::output::one_line(&error),
            )),
        }
    }
    checks
}

pub fn run(global: &GlobalArgs, args: CheckArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let checks = run_checks(&federation).await;
        print!(
            "{}",
            match args.output {
                None => table(&checks),
                Some(format) => serialize(&checks, format)?,
            }
        );
        Ok(
            if checks.iter().any(|check| check.outcome == Outcome::Failed) {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn comb(name: &str, depends_on: &[&str], reason: Option<&str>) -> Comb {
        let mut value = json!({"metadata": {"name": name, "namespace": "platform"},
                               "spec": {"class": "Manifests", "dependsOn": depends_on}});
        if let Some(reason) = reason {
            value["status"] = json!({"phase": "Blocked", "conditions": [
                {"type": "Ready", "status": "False", "reason": reason,
                 "message": "upstream K8s leads through more than 16 layers, a loop? via a, b"}]});
        }
        Comb::from_value(value).unwrap()
    }

    fn no_refusal(_: &str, _: &str) -> Option<String> {
        None
    }

    fn names() -> Names<'static> {
        static CONTEXTS: std::sync::LazyLock<Vec<String>> =
            std::sync::LazyLock::new(|| vec!["prod".to_string(), "dev".to_string()]);
        Names {
            contexts: &CONTEXTS,
            layers: &["prod", "dev"],
        }
    }

    #[test]
    fn combs_that_cannot_work_as_written_fail_the_combs_check_and_pending_ones_pass() {
        let mut pending = comb("waiting", &["db"], None);
        pending.status = Some(
            serde_json::from_value(json!({"phase": "Pending", "conditions": [
                {"type": "Ready", "status": "False", "reason": "Deployed", "message": "deployed"}]}))
            .unwrap(),
        );
        let fine = [comb("db", &[], None), pending];
        let checks = comb_checks("prod", &fine, &names(), &no_refusal);
        assert_eq!(checks[3].check, "combs");
        assert_eq!(checks[3].outcome, Outcome::Ok, "{checks:?}");
        assert_eq!(checks[3].detail, "2 Comb(s) can work as written");

        let mut unbuilt = comb("unbuilt", &[], None);
        unbuilt.status = Some(
            serde_json::from_value(json!({"phase": "Error", "conditions": [
                {"type": "Ready", "status": "False", "reason": "BuildFailed",
                 "message": "spec.class: Redis is not a known class"}]}))
            .unwrap(),
        );
        let far = Comb::from_value(json!({
            "metadata": {"name": "far", "namespace": "platform"},
            "spec": {"class": "Manifests", "upstream": {"class": "K8s", "context": "stagin"}}}))
        .unwrap();
        let lost = Comb::from_value(json!({
            "metadata": {"name": "lost", "namespace": "platform"},
            "spec": {"class": "Manifests", "upstream": {"class": "K8s", "layer": "qa"}}}))
        .unwrap();
        let mut forbidden = comb("copier", &[], None);
        forbidden.status = Some(
            serde_json::from_value(json!({"phase": "Error", "conditions": [
                {"type": "Ready", "status": "False", "reason": "UpstreamForbidden",
                 "message": "spec.upstream names context prod, namespace billing, which layer dev \
                             does not allow: add {layer: prod, namespaces: [billing]} to \
                             layers[1].allowUpstreams"}]}))
            .unwrap(),
        );
        let broken = [
            comb("orphan", &["cache", "apps/db"], None),
            unbuilt,
            far,
            lost,
            forbidden,
        ];
        let checks = comb_checks("prod", &broken, &names(), &no_refusal);
        assert_eq!(checks[3].outcome, Outcome::Failed);
        assert_eq!(
            checks[3].detail,
            "platform/orphan: depends on platform/cache, which is not a Comb of the layer; \
             platform/orphan: depends on apps/db, which is not a Comb of the layer; \
             platform/unbuilt: BuildFailed: spec.class: Redis is not a known class; \
             platform/far: spec.upstream.context stagin is not a context of the kubeconfig (contexts: prod, dev); \
             platform/lost: spec.upstream.layer qa is not a layer (layers: prod, dev); \
             platform/copier: UpstreamForbidden: spec.upstream names context prod, namespace \
             billing, which layer dev does not allow: add {layer: prod, namespaces: [billing]} to \
             layers[1].allowUpstreams"
        );
    }

    /// Issue 31, attack 4: a borrow outside its source layer fails the check with the sentence
    /// the status and the webhook say, before the controller has stepped the Comb, and once
    /// (not twice) after it has recorded it.
    #[test]
    fn a_borrow_outside_its_source_layer_fails_the_combs_check() {
        let config = crate::config::Config::from_yaml(
            "layers:\n - {name: prod, context: prod, namespaces: [platform]}\n \
             - {name: dev, context: dev, borrow: {from: prod, combs: [db]}}\n",
            "comb.yaml",
            None,
        )
        .unwrap();
        let dev = config.layer("dev").unwrap();
        let refusal =
            |namespace: &str, name: &str| config.controlling(dev, namespace, name).refusal;
        let sentence = "the borrow of layer dev names Comb billing/db in layer prod, which manages \
                        namespaces platform only: a borrow stays inside the namespaces of the layer \
                        it borrows from (set layers[1].borrow.namespace to one of them, or narrow \
                        layers[1].namespaces)";
        let in_billing = |status: Option<Value>| {
            let mut comb =
                Comb::from_value(json!({"metadata": {"name": "db", "namespace": "billing"},
                                                   "spec": {"class": "Manifests"}}))
                .unwrap();
            comb.status = status.map(|status| serde_json::from_value(status).unwrap());
            comb
        };
        let expected = format!("billing/db: UpstreamForbidden: {sentence}");
        let unstepped = comb_checks("dev", &[in_billing(None)], &names(), &refusal);
        assert_eq!(unstepped[3].outcome, Outcome::Failed);
        assert_eq!(unstepped[3].detail, expected);
        let recorded = in_billing(Some(json!({"phase": "Error", "conditions": [
            {"type": "Ready", "status": "False", "reason": "UpstreamForbidden", "message": sentence}]})));
        let stepped = comb_checks("dev", &[recorded], &names(), &refusal);
        assert_eq!(stepped[3].detail, expected);
        let inside = Comb::from_value(json!({"metadata": {"name": "db", "namespace": "platform"},
                                             "spec": {"class": "Manifests"}}))
        .unwrap();
        assert_eq!(
            comb_checks("dev", &[inside], &names(), &refusal)[3].outcome,
            Outcome::Ok
        );
    }

    #[test]
    fn a_spec_that_does_not_decode_fails_the_specs_check() {
        let checks = comb_checks("prod", &[comb("fine", &[], None)], &names(), &no_refusal);
        assert_eq!(checks[2].outcome, Outcome::Ok);
        let bad = Comb::from_value(json!({"metadata": {"name": "bad", "namespace": "apps"},
                                          "spec": {"class": 5}}))
        .unwrap();
        let checks = comb_checks(
            "prod",
            &[comb("fine", &[], None), bad],
            &names(),
            &no_refusal,
        );
        assert_eq!(checks[2].outcome, Outcome::Failed);
        assert_eq!(
            checks[2].detail,
            "apps/bad: spec.class: invalid type: integer `5`, expected a string"
        );
    }

    #[test]
    fn a_fallback_is_fine_while_some_entry_is_reachable() {
        let config = crate::config::Config::from_yaml(
            "layers:
  - {name: prod, context: prod}
  - {name: staging, context: staging, borrow: {from: prod}}
  - {name: dev, context: dev, borrow: {from: staging, fallback: [prod]}}
  - {name: qa, context: qa, borrow: {from: staging, fallback: [prod, local], unhealthyAfter: 10s}}",
            "test",
            None,
        )
        .unwrap();
        let up = BTreeMap::from([
            ("prod", false),
            ("staging", false),
            ("dev", true),
            ("qa", true),
        ]);
        assert_eq!(fallback_check(&config.layers[1], &up), None);
        let dev = fallback_check(&config.layers[2], &up).unwrap();
        assert_eq!(
            (dev.outcome, dev.detail.as_str()),
            (
                Outcome::Failed,
                "falls back to prod (not reachable): none is reachable"
            )
        );
        let qa = fallback_check(&config.layers[3], &up).unwrap();
        assert_eq!(
            (qa.outcome, qa.detail.as_str()),
            (
                Outcome::Ok,
                "falls back to prod (not reachable), local after 10s unhealthy, back after 1m healthy"
            )
        );
        let mut nats = comb("nats", &[], None);
        nats.status = Some(
            serde_json::from_value(json!({"phase": "Running", "conditions": [
                {"type": "UpstreamFallback", "status": "True", "reason": "UpstreamUnhealthy",
                 "message": "staging unhealthy for 30s (context unreachable); borrowing from prod"}]}))
            .unwrap(),
        );
        let checks = comb_checks("dev", &[nats, comb("db", &[], None)], &names(), &no_refusal);
        let last = checks.last().unwrap();
        assert_eq!(
            (last.check, last.outcome, last.detail.as_str()),
            (
                "on fallback",
                Outcome::Ok,
                "1 Comb(s) borrow from a fallback: platform/nats: staging unhealthy for 30s \
                 (context unreachable); borrowing from prod"
            )
        );
        assert!(comb_checks("dev", &[comb("db", &[], None)], &names(), &no_refusal).len() == 4);
    }

    #[test]
    fn cycles_and_loops_fail_their_checks() {
        let fine = [
            comb("mailer", &["nats", "db"], None),
            comb("db", &[], None),
            comb("nats", &[], None),
        ];
        let checks = comb_checks("prod", &fine, &names(), &no_refusal);
        assert!(
            checks.iter().all(|check| check.outcome == Outcome::Ok),
            "{checks:?}"
        );
        assert_eq!(checks[0].detail, "no cycle among 3 Comb(s)");

        let tangled = [
            comb("a", &["b"], None),
            comb("b", &["platform/a"], Some("UpstreamLoop")),
            comb("c", &["c"], None),
        ];
        let checks = comb_checks("dev", &tangled, &names(), &no_refusal);
        assert_eq!(checks[0].outcome, Outcome::Failed);
        assert_eq!(
            checks[0].detail,
            "cycle: platform/a -> platform/b -> platform/a; platform/c -> platform/c (these stay Blocked)"
        );
        assert_eq!(checks[1].outcome, Outcome::Failed);
        assert_eq!(
            checks[1].detail,
            "platform/b: upstream K8s leads through more than 16 layers, a loop? via a, b"
        );
        assert_eq!(
            table(&checks[..1]),
            "CHECK          LAYER   RESULT   DETAIL\n\
             dependencies   dev     FAILED   cycle: platform/a -> platform/b -> platform/a; platform/c -> platform/c (these stay Blocked)\n"
        );
    }
}
