//! What the webhook refuses: a pure function over the decoded Comb, the controller's class
//! registry and the federation configuration, with the controller's own checks (the build, the
//! rendering, the layer's tenancy, what `spec.upstream` may name), so that a refusal at the door
//! says what the status would.

use comb_api::Comb;
use comb_kubeconfigs::ClientPool;
use kube::config::Kubeconfig;

use crate::config::{Config, Layer, RefusalReason};
use crate::engine::borrow::spec_upstream;
use crate::engine::class::{ClassRegistry, CombInstance};
use crate::engine::keys::{CombKey, dependency_key};
use crate::engine::kinds::Scopes;
use crate::engine::render::{RenderedItem, identified};
use crate::engine::tenancy::endpoint_refusals;
use crate::error::Error;

/// Why a Comb is refused: the HTTP-like code and reason of the admission `status`, and one
/// sentence that says what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// 422 for a Comb that cannot be built, 403 for one its layer does not allow.
    pub code: u16,
    /// `Invalid` or `Forbidden`, as the API server's own refusals say.
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
    fn invalid(message: String) -> Refusal {
        Refusal {
            code: 422,
            reason: "Invalid",
            message,
        }
    }

    fn forbidden(message: String) -> Refusal {
        Refusal {
            code: 403,
            reason: "Forbidden",
            message,
        }
    }
}

/// Why the controller would not run CombLayer `layer`: its template's refusal, in the sentence
/// its status would record (403 for an ask wider than the template or a name taken, 422 for a
/// spec that makes no layer), or `None`. Judged at `now`, as if made now; another CombLayer's
/// namespaces are the controller's to weigh, as it runs them.
pub fn layer_refusal(
    layer: &comb_api::CombLayer,
    config: &Config,
    now: jiff::Timestamp,
) -> Option<Refusal> {
    let created = layer
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |time| time.0);
    let refusal =
        crate::config::layer_from_template(config, layer.name(), &layer.spec, created, now)
            .err()?;
    Some(match refusal.reason {
        RefusalReason::InvalidSpec => Refusal::invalid(refusal.message),
        RefusalReason::TemplateForbidden | RefusalReason::NameTaken => {
            Refusal::forbidden(refusal.message)
        }
    })
}

/// The layers that manage a Comb in `namespace`: those whose namespaces contain it.
pub fn layers_of<'a>(config: &'a Config, namespace: &str) -> Vec<&'a Layer> {
    config
        .layers
        .iter()
        .filter(|layer| layer.manages(namespace))
        .collect()
}

/// Why the controller would fail `comb`, or `None` when it would take it. A Comb in no layer is
/// taken: the controller does not manage it. A Comb that several layers manage (the webhook
/// cannot tell which cluster asks) must suit each of them.
pub async fn refusal(comb: &Comb, config: &Config, registry: &ClassRegistry) -> Option<Refusal> {
    let namespace = comb.metadata.namespace.as_deref().unwrap_or_default();
    let layers = layers_of(config, namespace);
    if layers.is_empty() {
        return None;
    }
    if let Some(problem) = &comb.spec_error {
        return Some(Refusal::invalid(format!(
            "the spec does not decode: {problem}"
        )));
    }
    let known = || registry.names().join(", ");
    match comb.spec.class.as_deref().filter(|class| !class.is_empty()) {
        None => {
            return Some(Refusal::invalid(format!(
                "spec.class is required; known classes: {}",
                known()
            )));
        }
        Some(class) if !registry.knows(class) => {
            return Some(Refusal::invalid(format!(
                "spec.class: {class} is not a known class; known classes: {}",
                known()
            )));
        }
        Some(_) => {}
    }
    if let Some(name) = comb.metadata.name.as_deref() {
        let own = CombKey::new(namespace, name);
        let itself = comb
            .spec
            .dependencies()
            .iter()
            .find(|reference| dependency_key(reference, namespace).as_ref() == Some(&own));
        if let Some(reference) = itself {
            return Some(Refusal::invalid(format!(
                "spec.dependsOn: {reference} is this Comb itself, and a Comb cannot depend on itself"
            )));
        }
    }
    for layer in layers {
        if let Some(refusal) = refusal_in(comb, config, registry, layer).await {
            return Some(refusal);
        }
    }
    None
}

/// What `layer` would make of `comb`: its build (stubs included), its rendering, its tenancy,
/// the upstream its `spec.upstream` names.
async fn refusal_in(
    comb: &Comb,
    config: &Config,
    registry: &ClassRegistry,
    layer: &Layer,
) -> Option<Refusal> {
    let settings = config.settings(layer);
    let stubs = |built: &CombInstance| layer.stubs_comb(built.namespace(), built.name());
    let built = match registry.build(comb, &settings, &stubs).await {
        Ok(built) => built,
        Err(error) => return Some(Refusal::invalid(error.to_string())),
    };
    // The static table of built-in Kinds answers without a server: a custom Kind counts as
    // namespaced here, so a cluster-scoped custom Kind is left to the controller's own check.
    let items = match built.render(&Scopes::default()).await {
        Ok(items) => items,
        Err(error) => {
            return Some(Refusal::invalid(format!(
                "rendering the manifests failed: {error}"
            )));
        }
    };
    let mut refusals = settings
        .tenancy
        .refusals(items.iter().map(RenderedItem::resource), built.namespace());
    refusals.extend(endpoint_refusals(&identified(&items)));
    match upstream_refusal(&built, config, layer) {
        Some(Refusal {
            reason: "Forbidden",
            message,
            ..
        }) => refusals.push(message),
        Some(invalid) => return Some(invalid),
        None => {}
    }
    (!refusals.is_empty()).then(|| Refusal::forbidden(refusals.join("; ")))
}

/// What `layer` makes of `built`'s upstream: a borrow of the layer that would reach outside the
/// namespaces of its source layer is forbidden; where the borrow has no say (when it has, the
/// CR's word is not used), its own `spec.upstream`: one the layer does not allow is forbidden,
/// one that does not resolve invalid, as the status would say. Nothing is read: resolving an
/// upstream connects nowhere.
fn upstream_refusal(built: &CombInstance, config: &Config, layer: &Layer) -> Option<Refusal> {
    let controlling = config.controlling(layer, built.namespace(), built.name());
    if let Some(refusal) = controlling.refusal {
        return Some(Refusal::forbidden(refusal));
    }
    if controlling.answer.is_present() {
        return None;
    }
    let unconnected = ClientPool::from_kubeconfig(Kubeconfig::default(), "the webhook");
    match spec_upstream(built, &config.borrow_env(&unconnected, layer)) {
        Ok(_) => None,
        Err(Error::UpstreamForbidden(message)) => Some(Refusal::forbidden(message)),
        Err(error) => Some(Refusal::invalid(format!(
            "resolving the upstream failed: {error}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const CONFIG: &str = r#"
layers:
  - name: prod
    context: prod
    namespaces: [platform, apps, billing]
    stubs: [mailer]
    allowNamespaces: [shared]
  - name: dev
    context: dev
    namespaces: [dev]
    allowUpstreams: [{layer: prod, namespaces: [platform]}]
  - name: qa
    context: qa
    namespaces: [qa]
    borrow: {from: prod, namespace: platform, combs: [db]}
  - name: team
    context: team
    namespaces: [ledger]
    borrow: {from: prod, combs: [db]}
"#;

    fn comb(namespace: &str, name: &str, spec: Value) -> Comb {
        Comb::from_value(json!({
            "apiVersion": "comb.internal/v1",
            "kind": "Comb",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }))
        .unwrap()
    }

    fn config_map(namespace: Option<&str>) -> Value {
        let mut manifest =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}});
        if let Some(namespace) = namespace {
            manifest["metadata"]["namespace"] = json!(namespace);
        }
        manifest
    }

    /// What a case is about, the Comb, and the code and sentence it is refused with.
    type Case = (&'static str, Comb, Option<(u16, &'static str)>);

    #[tokio::test]
    async fn what_the_webhook_refuses_and_how_it_says_so() {
        let config = Config::from_yaml(CONFIG, "comb.yaml", None).unwrap();
        let registry = ClassRegistry::with_builtins();
        let manifests =
            |items: Vec<Value>| json!({"class": "Manifests", "config": {"manifests": items}});
        let cases: Vec<Case> = vec![
            (
                "a Comb its layer takes",
                comb("platform", "api", manifests(vec![config_map(None)])),
                None,
            ),
            (
                "an alias of a known class",
                comb(
                    "platform",
                    "api",
                    json!({"class": "Kubernetes::Comb::Static"}),
                ),
                None,
            ),
            (
                "a namespace the layer allows",
                comb(
                    "platform",
                    "api",
                    manifests(vec![config_map(Some("shared"))]),
                ),
                None,
            ),
            (
                "a Comb in no layer, whatever it says",
                comb(
                    "elsewhere",
                    "api",
                    json!({"class": "Redis", "dependsOn": ["api"]}),
                ),
                None,
            ),
            (
                "an unknown class",
                comb("platform", "api", json!({"class": "Redis"})),
                Some((
                    422,
                    "spec.class: Redis is not a known class; known classes: Kubernetes::Comb::Static, \
                     Manifests, Manifests::Stub",
                )),
            ),
            (
                "no class",
                comb("platform", "api", json!({"config": {}})),
                Some((
                    422,
                    "spec.class is required; known classes: Kubernetes::Comb::Static, Manifests, \
                     Manifests::Stub",
                )),
            ),
            (
                "a spec that does not decode",
                comb(
                    "platform",
                    "api",
                    json!({"class": "Manifests", "dependsOn": "db"}),
                ),
                Some((
                    422,
                    "the spec does not decode: spec.dependsOn: invalid type: a string, expected a sequence",
                )),
            ),
            (
                "a dependency on itself",
                comb(
                    "platform",
                    "api",
                    json!({"class": "Manifests", "dependsOn": ["db", "api"]}),
                ),
                Some((
                    422,
                    "spec.dependsOn: api is this Comb itself, and a Comb cannot depend on itself",
                )),
            ),
            (
                "a dependency on itself, namespaced",
                comb(
                    "apps",
                    "api",
                    json!({"class": "Manifests", "dependsOn": ["apps/api"]}),
                ),
                Some((
                    422,
                    "spec.dependsOn: apps/api is this Comb itself, and a Comb cannot depend on itself",
                )),
            ),
            (
                "a namesake in another namespace is another Comb",
                comb(
                    "apps",
                    "api",
                    json!({"class": "Manifests", "dependsOn": ["platform/api"]}),
                ),
                None,
            ),
            (
                "a stub that breaks its original's endpoints",
                comb(
                    "platform",
                    "mailer",
                    json!({"class": "Manifests", "config": {
                        "endpoints": [{"name": "smtp", "port": 25}, {"name": "imap", "port": 143}],
                        "stub": {"endpoints": [{"name": "smtp", "port": 1025}]}}}),
                ),
                Some((
                    422,
                    "Manifests::Stub does not keep the contract of Manifests: missing endpoint(s) imap",
                )),
            ),
            (
                "a stub that keeps them",
                comb(
                    "platform",
                    "mailer",
                    json!({"class": "Manifests", "config": {
                        "endpoints": [{"name": "smtp", "port": 25}],
                        "stub": {"endpoints": [{"name": "smtp", "port": 1025}]}}}),
                ),
                None,
            ),
            (
                "a manifest in a namespace the layer does not allow",
                comb(
                    "platform",
                    "api",
                    manifests(vec![config_map(Some("kube-system"))]),
                ),
                Some((
                    403,
                    "ConfigMap kube-system/cfg is in namespace kube-system, not platform; layer prod does \
                     not allow it (add kube-system to layers[0].allowNamespaces)",
                )),
            ),
            (
                "a cluster-scoped manifest, in the second layer",
                comb(
                    "dev",
                    "api",
                    manifests(vec![
                        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                               "metadata": {"name": "all"}}),
                        config_map(Some("shared")),
                    ]),
                ),
                Some((
                    403,
                    "ClusterRole all is cluster-scoped; layer dev allows no cluster-scoped kinds (add \
                     ClusterRole to layers[1].allowClusterScoped); ConfigMap shared/cfg is in namespace \
                     shared, not dev; layer dev does not allow it (add shared to layers[1].allowNamespaces)",
                )),
            ),
            (
                "the attack of issue 19: a Secret of another layer's namespace",
                comb(
                    "dev",
                    "ledger",
                    json!({"class": "Manifests", "upstream": {"class": "K8s", "context": "prod",
                        "namespace": "billing", "name": "ledger",
                        "replicate": [{"kind": "Secret", "name": "ledger-keys"}]}}),
                ),
                Some((
                    403,
                    "spec.upstream names context prod, namespace billing and copies Secret \
                     ledger-keys from it, which layer dev does not allow: add {layer: prod, \
                     namespaces: [billing], replicate: true} to layers[1].allowUpstreams",
                )),
            ),
            (
                "an upstream the layer allows, named by its layer",
                comb(
                    "dev",
                    "db",
                    json!({"class": "Manifests", "upstream": {"class": "K8s", "layer": "prod",
                        "namespace": "platform"}}),
                ),
                None,
            ),
            (
                "copies from where the layer allows reading only",
                comb(
                    "dev",
                    "db",
                    json!({"class": "Manifests", "upstream": {"class": "K8s", "layer": "prod",
                        "namespace": "platform", "replicate": [{"kind": "ConfigMap", "name": "db"}]}}),
                ),
                Some((
                    403,
                    "spec.upstream names context prod, namespace platform and copies ConfigMap db \
                     from it, which layer dev does not allow: add {layer: prod, namespaces: \
                     [platform], replicate: true} to layers[1].allowUpstreams",
                )),
            ),
            (
                "a peer in the Comb's own context and namespace, and a Static upstream",
                comb(
                    "apps",
                    "api",
                    json!({"class": "Manifests", "upstream": {"class": "K8s", "context": "prod",
                        "name": "api-v2"}}),
                ),
                None,
            ),
            (
                "a Static upstream reads nothing",
                comb(
                    "dev",
                    "db",
                    json!({"class": "Manifests", "upstream": {"class": "Static",
                        "endpoints": [{"name": "pg", "port": 5432, "external": "192.0.2.1:5432"}]}}),
                ),
                None,
            ),
            (
                // Issue 31, attack 4: the peer's namespace, the Comb's own, is not one the
                // source layer manages.
                "a borrow outside the namespaces of its source layer",
                comb("ledger", "db", json!({"class": "Manifests"})),
                Some((
                    403,
                    "the borrow of layer team names Comb ledger/db in layer prod, which manages \
                     namespaces platform, apps, billing only: a borrow stays inside the namespaces \
                     of the layer it borrows from (set layers[3].borrow.namespace to one of them, \
                     or narrow layers[3].namespaces)",
                )),
            ),
            (
                "where the layer's borrow decides, the CR's upstream is not used",
                comb(
                    "qa",
                    "db",
                    json!({"class": "Manifests", "upstream": {"class": "K8s", "context": "prod",
                        "namespace": "billing", "replicate": [{"kind": "Secret", "name": "x"}]}}),
                ),
                None,
            ),
            (
                "an upstream that does not resolve",
                comb(
                    "dev",
                    "db",
                    json!({"class": "Manifests", "upstream": {"class": "K8s", "layer": "stage"}}),
                ),
                Some((
                    422,
                    "resolving the upstream failed: spec.upstream: Kubernetes::Comb::Upstream::K8s: \
                     there is no layer stage (layers: dev, prod, qa, team)",
                )),
            ),
            (
                "a forbidden manifest and a forbidden upstream, both named",
                comb(
                    "dev",
                    "api",
                    json!({"class": "Manifests",
                        "config": {"manifests": [config_map(Some("shared"))]},
                        "upstream": {"class": "K8s", "context": "prod", "namespace": "apps"}}),
                ),
                Some((
                    403,
                    "ConfigMap shared/cfg is in namespace shared, not dev; layer dev does not allow \
                     it (add shared to layers[1].allowNamespaces); spec.upstream names context \
                     prod, namespace apps, which layer dev does not allow: add {layer: prod, \
                     namespaces: [apps]} to layers[1].allowUpstreams",
                )),
            ),
        ];
        for (what, comb, expected) in cases {
            let got = refusal(&comb, &config, &registry).await;
            let got = got.as_ref().map(|r| (r.code, r.message.as_str()));
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn a_comb_belongs_to_the_layers_whose_namespaces_hold_it() {
        let config = Config::from_yaml(
            "layers:\n  - {name: prod, context: prod, namespaces: [platform]}\n  - {name: all, context: dev}\n",
            "comb.yaml",
            None,
        )
        .unwrap();
        let names = |namespace| {
            layers_of(&config, namespace)
                .iter()
                .map(|layer| layer.name.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("platform"), ["prod", "all"]);
        assert_eq!(names("other"), ["all"]);
    }

    #[test]
    fn a_comblayer_is_refused_at_the_door_as_its_template_refuses_it() {
        let config = Config::from_yaml(
            "layers:\n  - {name: staging, context: prod, namespaces: [staging]}\nlayerTemplates:\n  - {name: dev, contexts: [dev], namespaces: [dev-*], borrowFrom: [staging]}\n",
            "comb.yaml",
            None,
        )
        .unwrap();
        let layer = |name: &str, spec: Value| -> comb_api::CombLayer {
            serde_json::from_value(json!({
                "apiVersion": "comb.internal/v1", "kind": "CombLayer",
                "metadata": {"name": name}, "spec": spec
            }))
            .unwrap()
        };
        let now: jiff::Timestamp = "2026-12-05T08:00:00Z".parse().unwrap();
        let cases = [
            (
                layer(
                    "alice",
                    json!({"template": "dev", "context": "dev", "namespaces": ["dev-alice"]}),
                ),
                None,
            ),
            (
                layer(
                    "alice",
                    json!({"template": "dev", "context": "prod", "namespaces": ["dev-alice"]}),
                ),
                Some((
                    403,
                    "spec.context names context prod, which template dev does not allow: add prod to layerTemplates[0].contexts",
                )),
            ),
            (
                layer(
                    "staging",
                    json!({"template": "dev", "context": "dev", "namespaces": ["dev-x"]}),
                ),
                Some((
                    403,
                    "layer staging is a layer of the configuration (context prod); give the CombLayer another name",
                )),
            ),
            (
                layer(
                    "alice",
                    json!({"template": "dev", "context": "dev", "namespaces": ["Dev"]}),
                ),
                Some((
                    422,
                    "spec.namespaces[0]: 'Dev' is not a namespace name (a DNS-1123 label)",
                )),
            ),
        ];
        for (asked, want) in cases {
            let got =
                layer_refusal(&asked, &config, now).map(|refusal| (refusal.code, refusal.message));
            assert_eq!(
                got,
                want.map(|(code, message)| (code, message.to_string())),
                "{asked:?}"
            );
        }
    }
}
