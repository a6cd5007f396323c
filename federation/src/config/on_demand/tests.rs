use std::path::Path;

use comb_api::{CombLayerSpec, LayerBorrowSpec, ReplicateSpec, SecretRef};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

/// prod and staging in one cluster, dev in its own; template `dev` lets a developer's layer run
/// in context dev (or the cluster of Secret comb-system/dev-kubeconfig) in namespaces dev-*,
/// borrowing from staging, falling back to prod or local, copying Secret db-password.
const CONFIG: &str = r#"
layers:
  - name: prod
    context: prod
    namespaces: [platform]
  - name: staging
    context: prod
    namespaces: [staging]
    borrow: { from: prod, namespace: platform }
    allowUpstreams: [{layer: prod}]
  - name: team
    context: dev
    namespaces: [team]
    borrow: { from: staging }
layerTemplates:
  - name: dev
    contexts: [dev]
    kubeconfigSecrets: [comb-system/dev-kubeconfig]
    namespaces: ["dev-*"]
    borrowFrom: [staging]
    fallback: [prod, local]
    replicate: [{kind: Secret, name: db-password}]
    allowNamespaces: [shared]
    serviceAccount: comb-system/dev-writer
    maxTTL: 12h
    defaultTTL: 4h
    createNamespaces: true
  - name: review
    contexts: [dev]
    namespaces: ["review-*"]
"#;

fn config() -> Config {
    Config::from_yaml(CONFIG, "comb.yaml", Some(Path::new("/etc/comb"))).unwrap()
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// alice's layer: context dev, namespace dev-alice, borrowing from staging with api local.
fn alice() -> CombLayerSpec {
    CombLayerSpec {
        template: "dev".into(),
        context: Some("dev".into()),
        namespaces: vec!["dev-alice".into()],
        borrow: Some(LayerBorrowSpec {
            from: "staging".into(),
            local: vec!["api".into()],
            ..LayerBorrowSpec::default()
        }),
        ttl: Some("8h".into()),
        ..CombLayerSpec::default()
    }
}

const CREATED: &str = "2026-12-05T08:00:00Z";
const NOW: &str = "2026-12-05T09:00:00Z";

fn admit(name: &str, spec: &CombLayerSpec) -> Result<Admitted, Refusal> {
    layer_from_template(&config(), name, spec, at(CREATED), at(NOW))
}

#[test]
fn a_layer_within_its_template_is_a_layer_like_one_of_the_file() {
    let admitted = admit("alice", &alice()).unwrap();
    let layer = &admitted.layer;
    assert_eq!(layer.name, "alice");
    assert_eq!(layer.context, "dev");
    assert_eq!(
        layer.namespaces.as_deref(),
        Some(&["dev-alice".to_string()][..])
    );
    let borrow = layer.borrow.as_ref().unwrap();
    assert_eq!(borrow.from, "staging");
    assert_eq!(borrow.combs, ["*"]);
    assert_eq!(borrow.local, ["api"]);
    // The tenancy keys are the template's.
    assert_eq!(layer.allow_namespaces, ["shared"]);
    assert_eq!(
        layer
            .service_account
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("comb-system/dev-writer")
    );
    assert_eq!(
        layer.template,
        Some(TemplateRef {
            name: "dev".into(),
            index: 0
        })
    );
    assert_eq!(admitted.expires_at, at("2026-12-05T16:00:00Z"));
    assert!(admitted.create_namespaces);
    // Its tenancy names the template's keys.
    let mut together = config();
    together.layers.push(layer.clone());
    let tenancy = together.tenancy(layer);
    assert_eq!(
        tenancy.disallowed_namespace("prod"),
        "layer alice (template dev) does not allow namespace prod"
    );
}

#[test]
fn every_widening_is_refused_with_the_template_key_that_would_allow_it() {
    type Change = fn(&mut CombLayerSpec);
    let cases: Vec<(&str, Change, RefusalReason, &str)> = vec![
        (
            "a context the template does not list",
            |spec| spec.context = Some("prod".into()),
            RefusalReason::TemplateForbidden,
            "spec.context names context prod, which template dev does not allow: add prod to \
             layerTemplates[0].contexts",
        ),
        (
            "a namespace outside the template's patterns",
            |spec| spec.namespaces = vec!["dev-alice".into(), "staging".into()],
            RefusalReason::TemplateForbidden,
            "spec.namespaces[1] names namespace staging, which template dev does not allow (it \
             allows dev-*): add a pattern matching staging to layerTemplates[0].namespaces",
        ),
        (
            "no namespaces (every namespace would be a widening)",
            |spec| spec.namespaces = Vec::new(),
            RefusalReason::InvalidSpec,
            "spec.namespaces is empty; a layer of template dev names its namespaces, each \
             matching one of layerTemplates[0].namespaces (dev-*)",
        ),
        (
            "a layer to borrow from the template does not list",
            |spec| spec.borrow.as_mut().unwrap().from = "prod".into(),
            RefusalReason::TemplateForbidden,
            "spec.borrow.from names layer prod, which template dev does not allow: add prod to \
             layerTemplates[0].borrowFrom",
        ),
        (
            "a copy the template does not list",
            |spec| {
                spec.borrow.as_mut().unwrap().replicate = vec![ReplicateSpec {
                    kind: "Secret".into(),
                    name: "ledger-keys".into(),
                }]
            },
            RefusalReason::TemplateForbidden,
            "spec.borrow.replicate[0] copies Secret ledger-keys, which template dev does not \
             allow: add {kind: Secret, name: ledger-keys} to layerTemplates[0].replicate",
        ),
        (
            "a fallback the template does not list",
            |spec| spec.borrow.as_mut().unwrap().fallback = vec!["team".into()],
            RefusalReason::TemplateForbidden,
            "spec.borrow.fallback[0] names team, which template dev does not allow: add team to \
             layerTemplates[0].fallback",
        ),
        (
            "a TTL above maxTTL",
            |spec| spec.ttl = Some("48h".into()),
            RefusalReason::TemplateForbidden,
            "spec.ttl is 48h, longer than template dev allows: raise layerTemplates[0].maxTTL \
             (now 12h) or ask for less",
        ),
        (
            "an expiry further than maxTTL from now",
            |spec| {
                spec.ttl = None;
                spec.expires_at = Some(Time(at("2026-12-06T09:00:00Z")));
            },
            RefusalReason::TemplateForbidden,
            "spec.expiresAt is 24h from now, longer than template dev allows: raise \
             layerTemplates[0].maxTTL (now 12h) or ask for less",
        ),
        (
            "a template there is not",
            |spec| spec.template = "ops".into(),
            RefusalReason::TemplateForbidden,
            "spec.template names template ops, which the configuration does not define \
             (layerTemplates: dev, review)",
        ),
        (
            "a bad ttl",
            |spec| spec.ttl = Some("soon".into()),
            RefusalReason::InvalidSpec,
            "spec.ttl: ",
        ),
        (
            "a borrow namespace outside the layer borrowed from",
            |spec| spec.borrow.as_mut().unwrap().namespace = Some("billing".into()),
            RefusalReason::InvalidSpec,
            "spec.borrow.namespace: layer staging manages namespaces staging only, not billing; \
             a borrow stays inside the namespaces of the layer it borrows from",
        ),
    ];
    for (case, change, reason, message) in cases {
        let mut spec = alice();
        change(&mut spec);
        match admit("alice", &spec) {
            Ok(admitted) => panic!("{case}: admitted {admitted:?}"),
            Err(refusal) => {
                assert_eq!(refusal.reason, reason, "{case}: {refusal}");
                assert!(
                    refusal.message.starts_with(message),
                    "{case}:\n  got:  {}\n  want: {message}",
                    refusal.message
                );
            }
        }
    }
}

#[test]
fn a_namespace_another_layer_manages_is_refused() {
    // team manages namespace team of context dev; a layer of a template allowing team-* there
    // cannot take it.
    let mut config = config();
    config.layer_templates[1].namespaces = vec!["team*".into()];
    let spec = CombLayerSpec {
        template: "review".into(),
        context: Some("dev".into()),
        namespaces: vec!["team".into()],
        ..CombLayerSpec::default()
    };
    let refusal = layer_from_template(&config, "bob", &spec, at(CREATED), at(NOW)).unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::InvalidSpec);
    assert_eq!(
        refusal.message,
        "spec.namespaces: layers team and bob share context dev and would both manage namespace \
         team; give each layer its own namespaces"
    );
    // And a second CombLayer on a namespace the first one took.
    let mut config = self::config();
    config.layers.push(admit("alice", &alice()).unwrap().layer);
    let refusal = layer_from_template(&config, "bob", &alice(), at(CREATED), at(NOW)).unwrap_err();
    assert!(
        refusal.message.contains(
            "layers alice and bob share context dev and would both manage namespace dev-alice"
        ),
        "{refusal}"
    );
}

/// Issue 19's attack through a CombLayer: a developer's layer naming the Secret that holds
/// another cluster's (or another layer's) credentials is refused before anything is read; a
/// layer naming a namespace of another tenant is refused the same way.
#[test]
fn a_layer_cannot_reach_another_layers_credentials_or_namespaces() {
    let mut spec = alice();
    spec.context = None;
    spec.kubeconfig_secret = Some(SecretRef {
        namespace: "comb-system".into(),
        name: "prod-kubeconfig".into(),
        key: None,
    });
    let refusal = admit("mallory", &spec).unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::TemplateForbidden);
    assert_eq!(
        refusal.message,
        "spec.kubeconfigSecret names Secret comb-system/prod-kubeconfig, which template dev does \
         not allow: add comb-system/prod-kubeconfig to layerTemplates[0].kubeconfigSecrets"
    );
    // The Secret the template lists is the layer's cluster, under its own context name.
    spec.kubeconfig_secret = Some(SecretRef {
        namespace: "comb-system".into(),
        name: "dev-kubeconfig".into(),
        key: None,
    });
    let admitted = admit("mallory", &spec).unwrap();
    assert_eq!(admitted.layer.context, "secret/comb-system/dev-kubeconfig");

    // Another tenant's namespace, and the name of a layer of the file.
    let mut spec = alice();
    spec.namespaces = vec!["platform".into()];
    assert_eq!(
        admit("mallory", &spec).unwrap_err().reason,
        RefusalReason::TemplateForbidden
    );
    let refusal = admit("prod", &alice()).unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::NameTaken);
    assert_eq!(
        refusal.message,
        "layer prod is a layer of the configuration (context prod); give the CombLayer another \
         name"
    );
}

#[test]
fn the_ttl_counts_from_creation_and_the_default_applies() {
    let mut spec = alice();
    spec.ttl = None;
    assert_eq!(
        admit("alice", &spec).unwrap().expires_at,
        at("2026-12-05T12:00:00Z"),
        "defaultTTL 4h from creation"
    );
    spec.expires_at = Some(Time(at("2026-12-05T20:00:00Z")));
    assert_eq!(
        admit("alice", &spec).unwrap().expires_at,
        at("2026-12-05T20:00:00Z"),
        "11h from now is within maxTTL 12h"
    );
    spec.ttl = Some("1h".into());
    assert_eq!(
        admit("alice", &spec).unwrap_err().message,
        "spec gives ttl and expiresAt; give one"
    );
}

#[test]
fn templates_are_checked_when_the_configuration_is_read() {
    let error = |yaml: &str| {
        Config::from_yaml(yaml, "comb.yaml", None)
            .unwrap_err()
            .to_string()
    };
    let base = "layers:\n  - {name: prod, context: prod}\nlayerTemplates:\n";
    let cases = [
        (
            "  - {name: dev, namespaces: [dev-*]}",
            "layerTemplates[0]: names no cluster; list the kube contexts (contexts) or the \
             Secrets holding a kubeconfig (kubeconfigSecrets) a layer from it may run in",
        ),
        (
            "  - {name: dev, contexts: [dev]}",
            "layerTemplates[0].namespaces: missing; a layer from a template names its \
             namespaces, each matching a pattern listed here (e.g. dev-*)",
        ),
        (
            "  - {name: dev, contexts: [dev], namespaces: [Dev]}",
            "layerTemplates[0].namespaces[0]: 'Dev' is not a namespace pattern",
        ),
        (
            "  - {name: dev, contexts: [dev], namespaces: [d-*], borrowFrom: [stagin]}",
            "layerTemplates[0].borrowFrom[0]: unknown layer \"stagin\" (layers: prod)",
        ),
        (
            "  - {name: dev, contexts: [dev], namespaces: [d-*], maxTTL: 1h, defaultTTL: 2h}",
            "layerTemplates[0].defaultTTL: 7200s is longer than maxTTL (3600s)",
        ),
        (
            "  - {name: dev, contexts: [dev], namespaces: [d-*], kubeconfigSecrets: [dev]}",
            "layerTemplates[0].kubeconfigSecrets[0]: 'dev' is not NAMESPACE/NAME",
        ),
        (
            "  - {name: dev, contexts: [dev], namespaces: [d-*], allowClusterScoped: [ConfigMap]}",
            "layerTemplates[0].allowClusterScoped[0]: 'ConfigMap' is namespaced",
        ),
        (
            "  - {name: dev, contexts: [dev], namespaces: [d-*], maxTTL: 5}",
            "layerTemplates[0].maxTTL: '5' has no unit",
        ),
        (
            "  - {name: dev, contexts: [dev], namespaces: [d-*]}\n  - {name: dev, contexts: [dev], namespaces: [e-*]}",
            "layerTemplates[1].name: template 'dev' is already defined by layerTemplates[0]",
        ),
        (
            "  - {name: dev, contexts: [dev], namespaces: [d-*], replicate: [{kind: Pod, name: x}]}",
            "layerTemplates[0].replicate[0].kind: 'Pod' cannot be replicated",
        ),
    ];
    for (template, want) in cases {
        let got = error(&format!("{base}{template}\n"));
        assert!(
            got.contains(want),
            "{template}:\n  got:  {got}\n  want: {want}"
        );
    }
    let config = config();
    assert_eq!(config.layer_context(), Some("prod"));
    assert_eq!(
        config.layer_templates[1].max_ttl,
        Duration::from_secs(24 * 3600)
    );
    assert_eq!(
        config.layer_templates[1].default_ttl,
        Duration::from_secs(8 * 3600)
    );
    assert!(!config.layer_templates[1].create_namespaces);
}
