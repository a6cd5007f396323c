use std::path::Path;

use super::*;

const FULL: &str = r#"
kubeconfig: kubeconfigs/sandbox.yaml
group: comb.internal
labelPrefix: comb.internal/
managedBy: comb
maxUpstreamDepth: 16
clusterDomain: cluster.local
resync: 60s
layers:
  - name: prod
    context: prod
    namespaces: [platform]
  - name: staging
    context: prod
    namespaces: [staging]
    borrow: { from: prod, namespace: platform, combs: ["*"], local: [api] }
    stubs: [mailer]
  - name: dev
    context: dev
    borrow: { from: staging, namespace: staging, replicate: [{kind: Secret, name: db-credentials}] }
"#;

fn parse(text: &str) -> Result<Config> {
    Config::from_yaml(text, "comb.yaml", Some(Path::new("/etc/comb")))
}

fn error_of(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn reads_the_design_example() {
    let config = parse(FULL).unwrap();
    assert_eq!(
        config.kubeconfig.as_deref(),
        Some(Path::new("/etc/comb/kubeconfigs/sandbox.yaml"))
    );
    assert_eq!(config.resync, Duration::from_secs(60));
    assert_eq!(config.max_upstream_depth.get(), 16);
    assert_eq!(config.layers.len(), 3);
    let staging = config.layer("staging").unwrap();
    let borrow = staging.borrow.as_ref().unwrap();
    assert_eq!(borrow.from, "prod");
    assert_eq!(borrow.namespace.as_deref(), Some("platform"));
    assert_eq!(borrow.local, vec!["api"]);
    let dev = config.layer("dev").unwrap();
    assert_eq!(dev.namespaces, None);
    assert_eq!(dev.borrow.as_ref().unwrap().combs, vec!["*"]);
    assert_eq!(
        dev.borrow.as_ref().unwrap().replicate,
        vec![Replicate {
            kind: ReplicateKind::Secret,
            name: "db-credentials".into()
        }]
    );
    let borrowers: Vec<&str> = config
        .borrowers_of("staging")
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(borrowers, vec!["dev"]);
}

#[test]
fn reads_the_tenancy_keys() {
    let config = parse(
        r#"
layers:
  - name: prod
    context: prod
    namespaces: [platform]
    allowNamespaces: [shared]
    allowClusterScoped: [Namespace, rbac.authorization.k8s.io/ClusterRole, example.com/ClusterWidget]
    serviceAccount: deployer
  - name: dev
    context: dev
    serviceAccount: comb-system/writer
"#,
    )
    .unwrap();
    let prod = config.layer("prod").unwrap();
    assert_eq!(prod.allow_namespaces, ["shared"]);
    assert_eq!(
        prod.allow_cluster_scoped,
        [
            GroupKind::new("", "Namespace"),
            GroupKind::new("rbac.authorization.k8s.io", "ClusterRole"),
            GroupKind::new("example.com", "ClusterWidget"),
        ]
    );
    let tenancy = config.settings(prod).tenancy;
    assert_eq!(
        tenancy.origin,
        PolicyOrigin::Layer {
            name: "prod".into(),
            index: 0
        }
    );
    assert_eq!(
        tenancy.writer("platform").as_deref(),
        Some("system:serviceaccount:platform:deployer"),
        "a bare name is the service account in the Comb's own namespace"
    );
    let dev = config.tenancy(config.layer("dev").unwrap());
    assert_eq!(
        dev.origin,
        PolicyOrigin::Layer {
            name: "dev".into(),
            index: 1
        }
    );
    assert_eq!(
        dev.writer("team").as_deref(),
        Some("system:serviceaccount:comb-system:writer")
    );
    assert!(dev.allow_namespaces.is_empty() && dev.allow_cluster_scoped.is_empty());
}

/// `allowUpstreams`: a layer's entry takes that layer's context and, unless it names some, its
/// namespaces (any when it manages all); a context's entry any namespace unless it names some;
/// `replicate` is false unless set.
#[test]
fn reads_allow_upstreams() {
    let config = parse(
        r#"
layers:
  - {name: prod, context: prod, namespaces: [platform, billing]}
  - {name: edge, context: edge}
  - name: dev
    context: dev
    namespaces: [team-a]
    allowUpstreams:
      - {layer: prod}
      - {layer: prod, namespaces: [billing], replicate: true}
      - {layer: edge}
      - {context: vendor, namespaces: [shared]}
      - {context: vendor}
"#,
    )
    .unwrap();
    let dev = config.layer("dev").unwrap();
    assert_eq!(
        dev.allow_upstreams[1],
        AllowUpstream {
            target: UpstreamTarget::Layer("prod".into()),
            namespaces: Some(vec!["billing".into()]),
            replicate: true,
        }
    );
    let grant = |context: &str, namespaces: Option<&[&str]>, replicate: bool| UpstreamGrant {
        context: context.into(),
        namespaces: namespaces.map(|n| n.iter().map(|n| n.to_string()).collect()),
        replicate,
    };
    let tenancy = config.tenancy(dev);
    assert_eq!(
        tenancy.upstreams.grants,
        [
            grant("prod", Some(&["platform", "billing"]), false),
            grant("prod", Some(&["billing"]), true),
            grant("edge", None, false),
            grant("vendor", Some(&["shared"]), false),
            grant("vendor", None, false),
        ]
    );
    assert_eq!(
        tenancy.upstreams.layers[0],
        LayerScope {
            name: "prod".into(),
            context: "prod".into(),
            namespaces: Some(vec!["platform".into(), "billing".into()]),
        }
    );
    let prod = config.tenancy(config.layer("prod").unwrap());
    assert!(prod.upstreams.grants.is_empty(), "none by default");
}

#[test]
fn bad_allow_upstreams_name_their_key() {
    let layers = "layers:\n - {name: prod, context: prod, namespaces: [platform]}\n - {name: dev, context: dev, allowUpstreams: ";
    let cases = [
        (
            "[{layer: prod, context: prod}]",
            "comb.yaml: layers[1].allowUpstreams[0]: names both a layer and a context; give one \
             (layer: NAME takes that layer's context)",
        ),
        (
            "[{namespaces: [platform]}]",
            "comb.yaml: layers[1].allowUpstreams[0]: names no upstream; give layer: NAME (that \
             layer's context and namespaces) or context: NAME (a kube context)",
        ),
        (
            "[{layer: prd}]",
            "comb.yaml: layers[1].allowUpstreams[0].layer: unknown layer \"prd\" (layers: prod, dev)",
        ),
        (
            "[{layer: prod, namespaces: [billing]}]",
            "comb.yaml: layers[1].allowUpstreams[0].namespaces[0]: layer prod manages namespaces \
             platform only, not billing; name its context instead (context: prod) to allow a \
             namespace outside the layer",
        ),
        (
            "[{context: prod, namespaces: []}]",
            "comb.yaml: layers[1].allowUpstreams[0].namespaces: an empty list allows nothing; leave \
             the key out for every namespace the entry names, or remove the entry",
        ),
        (
            "[{context: prod, namespaces: [Billing, a, a]}]",
            "comb.yaml: layers[1].allowUpstreams[0].namespaces[0]: 'Billing' is not a namespace name \
             (a DNS-1123 label); layers[1].allowUpstreams[0].namespaces[2]: namespace 'a' is listed twice",
        ),
        (
            "[{context: ''}]",
            "comb.yaml: layers[1].allowUpstreams[0].context: empty; name a kube context of the kubeconfig",
        ),
        (
            "[{layer: prod, replicate: 'true'}]",
            "comb.yaml: layers[1].allowUpstreams[0].replicate: invalid type: string \"true\", expected a boolean",
        ),
        (
            "[{layer: prod, secrets: true}]",
            "comb.yaml: layers[1].allowUpstreams[0].secrets: unknown field `secrets`, expected one of \
             `layer`, `context`, `namespaces`, `replicate`",
        ),
    ];
    for (entries, expected) in cases {
        let text = format!("{layers}{entries}}}");
        assert_eq!(error_of(&text), expected, "for\n{text}");
    }
}

#[test]
fn allowed_upstream_contexts_must_exist() {
    let config = parse(
        "layers: [{name: dev, context: dev, allowUpstreams: [{context: dev}, {context: vendr}]}]",
    )
    .unwrap();
    let problems = check_contexts(&config, &contexts(&[("dev", "http://a")]), "k.yaml");
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec![
            "layers[0].allowUpstreams[1].context: context \"vendr\" is not in k.yaml (contexts: dev)"
        ]
    );
}

#[test]
fn defaults() {
    let config = parse("layers: [{name: prod, context: prod}]").unwrap();
    assert_eq!(config.kubeconfig, None);
    assert_eq!(config.group, "comb.internal");
    assert_eq!(config.label_prefix, "comb.internal/");
    assert_eq!(config.managed_by, "comb");
    assert_eq!(config.max_upstream_depth.get(), 16);
    assert_eq!(config.cluster_domain, "cluster.local");
    assert_eq!(config.resync, Duration::from_secs(60));
    let settings = config.settings(&config.layers[0]);
    assert_eq!(settings.labels.name_label(), "comb.internal/comb");
    assert_eq!(settings.managed_by, "comb");
    let prod = &config.layers[0];
    assert!(
        prod.allow_namespaces.is_empty(),
        "only a Comb's own namespace"
    );
    assert!(
        prod.allow_cluster_scoped.is_empty(),
        "nothing cluster-scoped"
    );
    assert_eq!(prod.service_account, None, "writes as the controller");
}

#[test]
fn every_bad_value_names_its_key() {
    let layers = "layers: [{name: prod, context: prod}]";
    let cases: Vec<(String, &str)> = vec![
        (
            "layers:\n - {name: prod, context: prod}\n - {name: staging, context: prod, namespaces: [s]}\n - {name: dev, context: dev, borrow: {from: stagin}}".into(),
            "comb.yaml: layers[1].namespaces: layers prod and staging share context prod and would both manage every namespace (a layer without namespaces manages all); give each layer its own namespaces; layers[2].borrow.from: unknown layer \"stagin\" (layers: prod, staging, dev)",
        ),
        (
            "layers:\n - {name: prod, context: prod, borrow: {from: dev}}\n - {name: dev, context: dev, borrow: {from: prod}}".into(),
            "comb.yaml: layers[0].borrow.from: borrow cycle prod -> dev -> prod; borrowing must lead to a layer that borrows from none",
        ),
        (
            "layers:\n - {name: a, context: a, borrow: {from: b}}\n - {name: b, context: b, borrow: {from: c}}\n - {name: c, context: c, borrow: {from: b}}".into(),
            "comb.yaml: layers[1].borrow.from: borrow cycle b -> c -> b; borrowing must lead to a layer that borrows from none",
        ),
        (
            "layers: [{name: prod, context: prod, borrow: {from: prod}}]".into(),
            "comb.yaml: layers[0].borrow.from: layer 'prod' cannot borrow from itself; name a layer above it",
        ),
        (
            format!("resync: 60x\n{layers}"),
            "comb.yaml: resync: '60x' is not a duration (unknown unit 'x'); write e.g. 500ms, 60s, 5m, 1h or 1m30s",
        ),
        (
            format!("resync: 60\n{layers}"),
            "comb.yaml: resync: '60' has no unit; write e.g. 60s",
        ),
        (
            format!("resync: 0s\n{layers}"),
            "comb.yaml: resync: '0s' is zero; it must be longer than that",
        ),
        (
            "layers:\n - {name: prod, context: prod}\n - {name: prod, context: dev}".into(),
            "comb.yaml: layers[1].name: layer 'prod' is already defined by layers[0]; layer names are unique",
        ),
        (
            format!("maxUpstreamDepth: 0\n{layers}"),
            "comb.yaml: maxUpstreamDepth: must be a positive integer (at least 1); the default is 16",
        ),
        (
            format!("maxUpstreamDepth: many\n{layers}"),
            "comb.yaml: maxUpstreamDepth: 'many' is not a positive integer",
        ),
        ("group: comb\nlayers: [{name: p, context: p}]".into(),
            "comb.yaml: group: 'comb' is not an API group; write a DNS subdomain with a dot, e.g. comb.internal"),
        ("labelPrefix: comb.internal\nlayers: [{name: p, context: p}]".into(),
            "comb.yaml: labelPrefix: 'comb.internal' is not a label prefix; write a DNS subdomain followed by '/', e.g. comb.internal/"),
        ("managedBy: 'my tool'\nlayers: [{name: p, context: p}]".into(),
            "comb.yaml: managedBy: 'my tool' cannot be a label value (at most 63 characters: letters, digits, -, _ and ., alphanumeric at both ends)"),
        ("clusterDomain: Cluster_Local\nlayers: [{name: p, context: p}]".into(),
            "comb.yaml: clusterDomain: 'Cluster_Local' is not a DNS domain, e.g. cluster.local"),
        ("group: comb.internal".into(), "comb.yaml: layers: no layers; name at least one (name and context)"),
        (
            "layers: [{context: prod}, {name: dev}]".into(),
            "comb.yaml: layers[0].name: missing; every layer needs a name; layers[1].context: missing; name the kube context of the layer (in-cluster inside a cluster)",
        ),
        (
            "layers: [{name: 'a b', context: p}]".into(),
            "comb.yaml: layers[0].name: 'a b' cannot name a layer (letters, digits, -, _ and ., alphanumeric at both ends, at most 63)",
        ),
        (
            "layers: [{name: p, context: p, namespaces: []}]".into(),
            "comb.yaml: layers[0].namespaces: an empty list; leave the key out to manage every namespace",
        ),
        (
            "layers: [{name: p, context: p, namespaces: [Platform, a, a]}]".into(),
            "comb.yaml: layers[0].namespaces[0]: 'Platform' is not a namespace name (a DNS-1123 label); layers[0].namespaces[2]: namespace 'a' is listed twice",
        ),
        (
            "layers:\n - {name: p, context: p, namespaces: [a, b]}\n - {name: q, context: p, namespaces: [c, b]}".into(),
            "comb.yaml: layers[1].namespaces: layers p and q share context p and would both manage namespace b; give each layer its own namespaces",
        ),
        (
            "layers:\n - {name: p, context: p}\n - {name: d, context: d, borrow: {from: p, namespace: X, combs: ['a/b/c'], local: ['']}, stubs: ['x y']}".into(),
            "comb.yaml: layers[1].borrow.combs[0]: 'a/b/c' has more than one '/'; write NAME or NAMESPACE/NAME; layers[1].borrow.local[0]: an empty pattern; write a Comb name, NAMESPACE/NAME or *; layers[1].borrow.namespace: 'X' is not a namespace name (a DNS-1123 label); layers[1].stubs[0]: 'x y' holds characters a Comb name cannot have (letters, digits, -, _, . and the wildcard *)",
        ),
        (
            "layers:\n - {name: p, context: p}\n - {name: d, context: d, borrow: {from: p, replicate: [{kind: Pod, name: x}, {kind: Secret}]}}".into(),
            "comb.yaml: layers[1].borrow.replicate[0].kind: 'Pod' cannot be replicated; Secret or ConfigMap; layers[1].borrow.replicate[1].name: missing; the name of the object to copy",
        ),
        (
            "layers: [{name: d, context: d, borrow: {}}]".into(),
            "comb.yaml: layers[0].borrow.from: missing; name the layer to borrow from",
        ),
        (
            "layers: [{name: p, context: p, allowNamespaces: [Other, a, a]}]".into(),
            "comb.yaml: layers[0].allowNamespaces[0]: 'Other' is not a namespace name (a DNS-1123 label); \
             layers[0].allowNamespaces[2]: namespace 'a' is listed twice",
        ),
        (
            "layers: [{name: p, context: p, allowClusterScoped: [ConfigMap, apps/Deployment, ClusterWidget]}]".into(),
            "comb.yaml: layers[0].allowClusterScoped[0]: 'ConfigMap' is namespaced; allowClusterScoped names \
             cluster-scoped Kinds (allowNamespaces says where namespaced ones may go); \
             layers[0].allowClusterScoped[1]: 'Deployment' is namespaced; allowClusterScoped names cluster-scoped \
             Kinds (allowNamespaces says where namespaced ones may go); layers[0].allowClusterScoped[2]: \
             'ClusterWidget' is not a built-in Kind; write a custom resource's Kind with its API group, e.g. \
             example.com/ClusterWidget",
        ),
        (
            "layers: [{name: p, context: p, allowClusterScoped: [rbac.authorization.k8s.io/v1/ClusterRole, v1/Namespace, example.com/widget, '', Namespace, Namespace]}]".into(),
            "comb.yaml: layers[0].allowClusterScoped[0]: 'rbac.authorization.k8s.io/v1/ClusterRole' has more than \
             one '/'; write a Kind (ClusterRole) or group/Kind (example.com/ClusterWidget), without a version; \
             layers[0].allowClusterScoped[1]: 'v1/Namespace' names no built-in Kind, and 'v1' is not an API group of \
             a custom resource (a DNS subdomain with a dot, e.g. example.com); write a Kind (ClusterRole) or \
             group/Kind (example.com/ClusterWidget), without a version; layers[0].allowClusterScoped[2]: 'widget' \
             is not a Kind (a capitalised name of letters and digits, e.g. ClusterRole); \
             layers[0].allowClusterScoped[3]: '' is not a Kind (a capitalised name of letters and digits, e.g. \
             ClusterRole); layers[0].allowClusterScoped[5]: 'Namespace' is listed twice",
        ),
        (
            "layers:\n - {name: p, context: p, serviceAccount: a/b/c}\n - {name: q, context: q, serviceAccount: X/Deployer}".into(),
            "comb.yaml: layers[0].serviceAccount: 'a/b/c' has more than one '/'; write NAME (in each Comb's own \
             namespace) or NAMESPACE/NAME; layers[1].serviceAccount: 'X' is not a namespace name (a DNS-1123 label); \
             layers[1].serviceAccount: 'Deployer' is not a service account name (a DNS-1123 subdomain)",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(error_of(&text), expected, "for\n{text}");
    }
}

#[test]
fn unknown_keys_and_wrong_types_are_refused() {
    for (text, expected) in [
        (
            "layers: [{name: p, context: p}]\nresyncc: 5s",
            "comb.yaml: resyncc: unknown field `resyncc`, expected one of",
        ),
        (
            "layers: [{name: p, context: p, borow: {from: q}}]",
            "comb.yaml: layers[0].borow: unknown field `borow`",
        ),
        (
            "layers: {name: p}",
            "comb.yaml: layers: invalid type: map, expected a sequence",
        ),
        ("layers: [{name: p, context: p]", "comb.yaml: line 1 column"),
    ] {
        let message = error_of(text);
        assert!(message.starts_with("comb.yaml: "), "{message}");
        assert!(
            message.contains(expected),
            "{message} should name {expected}"
        );
        assert!(!message.contains('\n'), "one line: {message}");
        assert!(!message.contains("-->"), "no snippet: {message}");
    }
}

#[test]
fn every_problem_of_a_file_is_listed_at_once_with_its_key() {
    let text = "resync: 60
maxUpstreamDepth: deep
layers:
  - {name: prod, context: prod, namespaces: platform}
  - {name: dev, context: dev, colour: blue, stubs: [mailer, 5], borrow: {from: stagin}}
";
    assert_eq!(
        error_of(text),
        "comb.yaml: layers[0].namespaces: invalid type: string \"platform\", expected a sequence; \
         layers[1].colour: unknown field `colour`, expected one of `name`, `context`, `namespaces`, \
         `borrow`, `stubs`, `allowNamespaces`, `allowClusterScoped`, `serviceAccount`, \
         `sourceServiceAccount`, `allowUpstreams`; \
         layers[1].stubs[1]: invalid type: integer `5`, expected a string; \
         layers[1].borrow.from: unknown layer \"stagin\" (layers: prod, dev); \
         maxUpstreamDepth: 'deep' is not a positive integer; resync: '60' has no unit; write e.g. 60s"
    );
}

fn contexts(list: &[(&str, &str)]) -> Vec<KubeContext> {
    list.iter()
        .map(|(name, server)| KubeContext {
            name: name.to_string(),
            server: server.to_string(),
        })
        .collect()
}

#[test]
fn contexts_must_exist_and_layers_on_one_server_must_not_overlap() {
    let config = parse(FULL).unwrap();
    let origin = "the kubeconfig k.yaml";
    assert_eq!(
        check_contexts(
            &config,
            &contexts(&[("prod", "http://a"), ("dev", "http://b")]),
            origin
        ),
        vec![]
    );
    let problems = check_contexts(&config, &contexts(&[("prod", "http://a")]), origin);
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec!["layers[2].context: context \"dev\" is not in the kubeconfig k.yaml (contexts: prod)"]
    );
    let shared = parse(
        "layers:\n - {name: prod, context: prod}\n - {name: staging, context: staging, namespaces: [staging]}",
    )
    .unwrap();
    let problems = check_contexts(
        &shared,
        &contexts(&[("prod", "http://a"), ("staging", "http://a")]),
        origin,
    );
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec![
            "layers[1].namespaces: layers prod and staging share the API server http://a (contexts prod and staging) and would both manage every namespace (a layer without namespaces manages all); give each layer its own namespaces"
        ]
    );
}

#[test]
fn borrow_decisions() {
    let config = parse(FULL).unwrap();
    let staging = config.layer("staging").unwrap();
    match staging.borrow_decision(&config, "staging", "db") {
        BorrowDecision::Borrow {
            from,
            namespace,
            name,
            ..
        } => {
            assert_eq!(from.name, "prod");
            assert_eq!(namespace, "platform");
            assert_eq!(name, "db");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        staging.borrow_decision(&config, "staging", "api"),
        BorrowDecision::Local
    );
    assert_eq!(
        config
            .layer("prod")
            .unwrap()
            .borrow_decision(&config, "platform", "db"),
        BorrowDecision::NoSay
    );
    let dev = config.layer("dev").unwrap();
    let spec = dev
        .borrow_decision(&config, "team", "db")
        .upstream_spec()
        .unwrap()
        .unwrap();
    assert_eq!(
        Value::Object(spec),
        json!({"class": "K8s", "context": "prod", "namespace": "staging", "name": "db",
               "replicate": [{"kind": "Secret", "name": "db-credentials"}]})
    );
    assert_eq!(BorrowDecision::Local.upstream_spec(), Some(None));
    let controlling = config.controlling(staging, "staging", "api");
    assert_eq!(controlling.source, "borrow.local of layer staging");
    assert_eq!(controlling.answer, comb_api::UpstreamSpec::Local);
    let controlling = config.controlling(dev, "team", "db");
    assert_eq!(controlling.source, "the borrow of layer dev");
    assert!(matches!(
        controlling.answer,
        comb_api::UpstreamSpec::Declared(_)
    ));
    assert!(
        !config
            .controlling(config.layer("prod").unwrap(), "platform", "db")
            .answer
            .is_present()
    );
    assert_eq!(BorrowDecision::NoSay.upstream_spec(), None);
    assert!(staging.stubs_comb("staging", "mailer"));
    assert!(!staging.stubs_comb("staging", "db"));
    assert!(staging.manages("staging"));
    assert!(!staging.manages("platform"));
    assert!(dev.manages("anything"));
}

/// Attack 4 of issue 31: dev (every namespace) borrows `db` from prod (namespace platform); a
/// dev user makes a namespace `billing` (another tenant's in prod's cluster) and a Comb `db`
/// there, whose peer would be prod's `billing/db`, read as billing's own account.
const OUTSIDE: &str = r#"
layers:
  - {name: prod, context: prod, namespaces: [platform]}
  - {name: billing, context: prod, namespaces: [billing]}
  - name: dev
    context: dev
    serviceAccount: comb-writer
    sourceServiceAccount: comb-system/dev-reader
    borrow: {from: prod, combs: [db], replicate: [{kind: Secret, name: db-password}]}
"#;

#[test]
fn a_borrow_stays_inside_its_source_layer() {
    let config = parse(OUTSIDE).unwrap();
    let dev = config.layer("dev").unwrap();
    let refused = config.controlling(dev, "billing", "db");
    assert_eq!(
        refused.refusal.as_deref(),
        Some(
            "the borrow of layer dev names Comb billing/db in layer prod, which manages \
             namespaces platform only: a borrow stays inside the namespaces of the layer it \
             borrows from (set layers[2].borrow.namespace to one of them, or narrow \
             layers[2].namespaces)"
        )
    );
    assert!(!refused.answer.is_present(), "nothing of it is used");
    let inside = config.controlling(dev, "platform", "db");
    assert_eq!(inside.refusal, None);
    assert!(inside.answer.is_present());
    assert_eq!(
        config.controlling(dev, "billing", "web").refusal,
        None,
        "not a borrower: the layer has no say"
    );
    // The source is read as the layer's fixed account, never billing's.
    assert_eq!(
        config.tenancy(dev).source_reader(),
        comb_upstreams::SourceReader::User("system:serviceaccount:comb-system:dev-reader".into())
    );
    // A fallback along the chain is held to the same rule.
    let chain = r#"
layers:
  - {name: prod, context: prod, namespaces: [platform]}
  - {name: staging, context: staging, borrow: {from: prod, namespace: platform}}
  - {name: dev, context: dev, borrow: {from: staging, fallback: [prod]}}
"#;
    let config = parse(chain).unwrap();
    let dev = config.layer("dev").unwrap();
    let prod = Candidate::Layer("prod".into());
    assert_eq!(
        config.controlling_on(dev, "team", "db", &prod).refusal,
        None,
        "staging's borrow.namespace takes it to platform"
    );
}

#[test]
fn a_configuration_that_would_leave_the_source_layer_is_refused() {
    let cases = [
        (
            OUTSIDE.replace("    sourceServiceAccount: comb-system/dev-reader\n", ""),
            "comb.yaml: layers[2].sourceServiceAccount: missing; the layer copies Secrets or \
             ConfigMaps and writes as serviceAccount comb-writer, an account in each Comb's own \
             namespace, which names no account in the source's cluster: name the account that \
             reads copies there (NAMESPACE/NAME), or make serviceAccount NAMESPACE/NAME",
        ),
        (
            OUTSIDE.replace("comb-system/dev-reader", "dev-reader"),
            "comb.yaml: layers[2].sourceServiceAccount: 'dev-reader' names no namespace; write \
             NAMESPACE/NAME, the account that reads copies in the source's cluster",
        ),
        (
            OUTSIDE.replace(
                "{from: prod, combs",
                "{from: prod, namespace: billing, combs",
            ),
            "comb.yaml: layers[2].borrow.namespace: layer prod manages namespaces platform \
             only, not billing; a borrow stays inside the namespaces of the layer it borrows from",
        ),
        (
            OUTSIDE.replace("name: db-password}", "name: \"db-password?x=1\"}"),
            "comb.yaml: layers[2].borrow.replicate[0].name: 'db-password?x=1' is not a \
             Kubernetes object name (a DNS-1123 subdomain: lowercase letters, digits, - and ., \
             alphanumeric at both ends, at most 253 characters)",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(error_of(&text), expected, "{text}");
    }
    // A fixed serviceAccount reads the sources itself.
    let fixed = OUTSIDE
        .replace("    sourceServiceAccount: comb-system/dev-reader\n", "")
        .replace(
            "serviceAccount: comb-writer",
            "serviceAccount: comb-system/dev-writer",
        );
    let config = parse(&fixed).unwrap();
    assert_eq!(
        config.tenancy(config.layer("dev").unwrap()).source_reader(),
        comb_upstreams::SourceReader::User("system:serviceaccount:comb-system:dev-writer".into())
    );
}

#[test]
fn references_resolve_to_candidate_layers() {
    let config = parse(FULL).unwrap();
    let default_ns = |layer: &Layer| format!("{}-default", layer.name);
    let names = |reference: &str| -> Result<Vec<String>> {
        Ok(config
            .candidates(&CombRef::parse(reference).unwrap(), default_ns)?
            .iter()
            .map(ToString::to_string)
            .collect())
    };
    assert_eq!(
        names("db").unwrap(),
        vec![
            "prod:platform/db",
            "staging:staging/db",
            "dev:dev-default/db"
        ]
    );
    assert_eq!(
        names("platform/db").unwrap(),
        vec!["prod:platform/db", "dev:platform/db"]
    );
    assert_eq!(names("dev:db").unwrap(), vec!["dev:dev-default/db"]);
    assert_eq!(
        names("staging:platform/db").unwrap_err().to_string(),
        "staging:platform/db: layer staging manages namespaces staging only, not platform"
    );
    assert_eq!(
        names("qa:db").unwrap_err().to_string(),
        "qa:db: unknown layer \"qa\" (layers: prod, staging, dev)"
    );
    let prod_only = parse("layers: [{name: prod, context: prod, namespaces: [platform]}]").unwrap();
    assert_eq!(
        prod_only
            .candidates(&CombRef::parse("team/db").unwrap(), default_ns)
            .unwrap_err()
            .to_string(),
        "team/db: no layer manages namespace team"
    );
}

#[test]
fn hand_built_configs_are_checked() {
    let mut config = parse(FULL).unwrap();
    super::check(&config).unwrap();
    config.layers[2].borrow.as_mut().unwrap().from = "qa".into();
    assert_eq!(
        super::check(&config).unwrap_err().to_string(),
        "comb.yaml: layers[2].borrow.from: unknown layer \"qa\" (layers: prod, staging, dev)"
    );
    let mut config = parse(FULL).unwrap();
    config.layers[0].allow_cluster_scoped = vec![GroupKind::new("", "ConfigMap")];
    config.layers[1].service_account = Some(ServiceAccountRef {
        namespace: None,
        name: "Writer".into(),
    });
    assert_eq!(
        super::check(&config).unwrap_err().to_string(),
        "comb.yaml: layers[0].allowClusterScoped[0]: 'ConfigMap' is namespaced; allowClusterScoped names \
         cluster-scoped Kinds (allowNamespaces says where namespaced ones may go); \
         layers[1].serviceAccount: 'Writer' is not a service account name (a DNS-1123 subdomain)"
    );
}

const CHAIN: &str = r#"
layers:
  - { name: prod, context: prod, namespaces: [platform] }
  - name: staging
    context: staging
    namespaces: [staging]
    borrow: { from: prod, namespace: platform }
  - name: dev
    context: dev
    borrow:
      from: staging
      namespace: staging
      fallback: [prod, local]
      unhealthyAfter: 10s
      healthyAfter: 1m
      probe: tcp
"#;

#[test]
fn reads_a_fallback_with_its_timing() {
    let config = parse(CHAIN).unwrap();
    let dev = config.layer("dev").unwrap();
    let fallback = dev.borrow.as_ref().unwrap().fallback.as_ref().unwrap();
    assert_eq!(
        fallback,
        &Fallback {
            to: vec![Candidate::Layer("prod".into()), Candidate::Local],
            policy: HealthPolicy {
                unhealthy_after: Duration::from_secs(10),
                healthy_after: Duration::from_secs(60),
            },
            probe: Some(Probe::Tcp),
        }
    );
    let defaults = parse(
        "layers:\n - {name: prod, context: prod}\n - {name: dev, context: dev, borrow: {from: prod, fallback: [local]}}",
    )
    .unwrap();
    let fallback = defaults.layers[1]
        .borrow
        .as_ref()
        .unwrap()
        .fallback
        .clone()
        .unwrap();
    assert_eq!(fallback.policy, HealthPolicy::default());
    assert_eq!(fallback.policy.unhealthy_after, Duration::from_secs(30));
    assert_eq!(fallback.policy.healthy_after, Duration::from_secs(60));
    assert_eq!(fallback.probe, None);
    assert_eq!(
        parse(FULL).unwrap().layers[2]
            .borrow
            .as_ref()
            .unwrap()
            .fallback,
        None,
        "no fallback unless asked"
    );
}

#[test]
fn a_fallback_is_further_up_the_chain_or_local_last() {
    let base = "layers:\n - {name: prod, context: prod}\n - {name: side, context: side}\n - {name: staging, context: staging, borrow: {from: prod}}\n";
    let dev = |borrow: &str| format!("{base} - {{name: dev, context: dev, borrow: {borrow}}}");
    let cases = [
        (
            dev("{from: staging, fallback: [qa]}"),
            "comb.yaml: layers[3].borrow.fallback[0]: unknown layer \"qa\" (layers: prod, side, staging, dev)",
        ),
        (
            dev("{from: staging, fallback: [staging]}"),
            "comb.yaml: layers[3].borrow.fallback[0]: 'staging' is borrow.from itself; a fallback is a layer further up the chain, or local",
        ),
        (
            dev("{from: staging, fallback: [side]}"),
            "comb.yaml: layers[3].borrow.fallback[0]: 'side' is not further up the chain than staging (above it: prod); a fallback is a layer staging borrows from, directly or through others, or local",
        ),
        (
            dev("{from: prod, fallback: [side]}"),
            "comb.yaml: layers[3].borrow.fallback[0]: 'side' is not further up the chain: prod borrows from no layer, so the one fallback there is is local",
        ),
        (
            dev("{from: staging, fallback: [local, prod, prod]}"),
            "comb.yaml: layers[3].borrow.fallback[0]: local comes last: it is always healthy, so the entries after it would never be used; layers[3].borrow.fallback[2]: 'prod' is listed twice",
        ),
        (
            dev("{from: staging, fallback: []}"),
            "comb.yaml: layers[3].borrow.fallback: an empty list; leave the key out for no fallback",
        ),
        (
            dev("{from: staging, unhealthyAfter: 5s, probe: tcp}"),
            "comb.yaml: layers[3].borrow.probe: does nothing without borrow.fallback; name the layers to fall back to (e.g. fallback: [prod, local]) or remove it; layers[3].borrow.unhealthyAfter: does nothing without borrow.fallback; name the layers to fall back to (e.g. fallback: [prod, local]) or remove it",
        ),
        (
            dev(
                "{from: staging, fallback: [prod], unhealthyAfter: 30, healthyAfter: 0s, probe: http}",
            ),
            "comb.yaml: layers[3].borrow.healthyAfter: '0s' is zero; it must be longer than that; layers[3].borrow.probe: 'http' is not a probe; the one there is is tcp (a TCP connect to each address the bridge uses); layers[3].borrow.unhealthyAfter: '30' has no unit; write e.g. 30s",
        ),
        (
            dev("{from: staging, fallback: prod}"),
            "comb.yaml: layers[3].borrow.fallback: invalid type: string \"prod\", expected a sequence",
        ),
    ];
    for (text, message) in cases {
        assert_eq!(error_of(&text), message, "{text}");
    }
    parse(&dev("{from: staging, fallback: [prod, local]}")).unwrap();
}

#[test]
fn the_peer_up_the_chain_takes_each_hops_namespace() {
    let config = parse(CHAIN).unwrap();
    let dev = config.layer("dev").unwrap();
    let peer = |target: &str| {
        config
            .peer_up_the_chain(dev, "team", target)
            .map(|(layer, namespace)| (layer.name.clone(), namespace))
    };
    assert_eq!(peer("staging"), Some(("staging".into(), "staging".into())));
    assert_eq!(peer("prod"), Some(("prod".into(), "platform".into())));
    assert_eq!(peer("dev"), None);
    let (candidates, _) = config.fallback_of(dev, "team", "nats").unwrap();
    assert_eq!(
        candidates,
        [
            Candidate::Layer("staging".into()),
            Candidate::Layer("prod".into()),
            Candidate::Local
        ]
    );
    assert_eq!(
        config.fallback_of(config.layer("staging").unwrap(), "staging", "nats"),
        None,
        "staging's borrow has no fallback"
    );
    let on = |candidate: &Candidate| config.controlling_on(dev, "team", "nats", candidate);
    assert_eq!(on(&candidates[0]), config.controlling(dev, "team", "nats"));
    assert_eq!(on(&candidates[1]).source, "borrow.fallback of layer dev");
    assert_eq!(
        on(&candidates[1]).answer,
        comb_api::UpstreamSpec::Declared(
            json!({"class": "K8s", "context": "prod", "namespace": "platform", "name": "nats"})
                .as_object()
                .unwrap()
                .clone()
        )
    );
    assert_eq!(on(&Candidate::Local).answer, comb_api::UpstreamSpec::Local);
}

#[test]
fn the_recorded_status_tells_which_entry_is_in_use() {
    let config = parse(CHAIN).unwrap();
    let (candidates, _) = config
        .fallback_of(config.layer("dev").unwrap(), "team", "nats")
        .unwrap();
    let status = |fallback: &str, context: Option<&str>| -> comb_api::CombStatus {
        let mut value = json!({"phase": "Running", "conditions": [
            {"type": "UpstreamFallback", "status": fallback}]});
        if let Some(context) = context {
            value["upstream"] = json!({"class": "K8s", "context": context});
        }
        serde_json::from_value(value).unwrap()
    };
    let cases = [
        (None, 0),
        (Some(status("False", Some("staging"))), 0),
        (Some(status("True", Some("prod"))), 1),
        (Some(status("True", None)), 2),
        (Some(status("True", Some("elsewhere"))), 0),
    ];
    for (status, entry) in cases {
        assert_eq!(
            config.recorded_entry(&candidates, status.as_ref()),
            entry,
            "{status:?}"
        );
    }
    let dev = config.layer("dev").unwrap();
    let on_prod = status("True", Some("prod"));
    assert_eq!(
        config.controlling_as_recorded(dev, "team", "nats", Some(&on_prod)),
        config.controlling_on(dev, "team", "nats", &candidates[1]),
        "the CLI reads a borrower on fallback where it borrows from"
    );
    assert_eq!(
        config.controlling_as_recorded(dev, "team", "nats", None),
        config.controlling(dev, "team", "nats")
    );
}
