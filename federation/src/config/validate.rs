//! Turning the file as written into a [`Config`], and every check a configuration must pass.
//! Pure: the one check that needs the kubeconfig takes its contexts as data.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use comb_api::names::{
    is_dns1123_label as is_dns_label, is_dns1123_subdomain as is_dns_subdomain, object_name_problem,
};
use comb_api::{DEFAULT_GROUP, DEFAULT_PREFIX, is_label_value};

use super::duration::parse_positive_duration;
use super::raw::{
    RawAllowUpstream, RawBorrow, RawConfig, RawLayer, RawLayerTemplate, RawReplicate, Scalar,
};
use super::selector::pattern_problem;
use super::{
    AllowUpstream, Borrow, Config, Fallback, Layer, LayerTemplate, Probe, Replicate, ReplicateKind,
    SecretName, UpstreamTarget,
};
use crate::engine::borrow::fallback::{DEFAULT_HEALTHY_AFTER, DEFAULT_UNHEALTHY_AFTER};
use crate::engine::borrow::{Candidate, HealthPolicy};
use crate::engine::kinds::{builtin_kind, known_scope};
use crate::engine::tenancy::{GroupKind, ServiceAccountRef};

/// The default `managedBy`.
pub const DEFAULT_MANAGED_BY: &str = "comb";
/// The default `maxUpstreamDepth` (the reference's).
pub const DEFAULT_MAX_UPSTREAM_DEPTH: usize = 16;
/// The default `clusterDomain`.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// The default `resync`.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(60);

/// One thing wrong with a configuration: the key (`layers[2].borrow.from`) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

impl Problem {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// A kube context as the kubeconfig defines it: its name and its API server URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeContext {
    pub name: String,
    pub server: String,
}

/// Converts the file as written into a [`Config`] and checks it, collecting every problem.
/// A relative `kubeconfig` is taken relative to `base_dir` (the config file's directory).
pub fn from_raw(
    raw: RawConfig,
    origin: &str,
    base_dir: Option<&Path>,
) -> Result<Config, Vec<Problem>> {
    let mut problems = Vec::new();
    let max_upstream_depth = match raw.max_upstream_depth {
        None => NonZeroUsize::new(DEFAULT_MAX_UPSTREAM_DEPTH),
        Some(Scalar::Integer(depth)) => {
            let depth = usize::try_from(depth).ok().and_then(NonZeroUsize::new);
            if depth.is_none() {
                problems.push(Problem::new(
                    "maxUpstreamDepth",
                    "must be a positive integer (at least 1); the default is 16",
                ));
            }
            depth
        }
        Some(other) => {
            problems.push(Problem::new(
                "maxUpstreamDepth",
                format!("'{}' is not a positive integer", other.text()),
            ));
            None
        }
    };
    let resync = match raw.resync {
        None => Some(DEFAULT_RESYNC),
        Some(scalar) => duration_from_raw("resync", scalar, &mut problems),
    };
    let layers = raw.layers.unwrap_or_default();
    let layers: Vec<Layer> = layers
        .into_iter()
        .enumerate()
        .map(|(index, layer)| layer_from_raw(index, layer, &mut problems))
        .collect();
    let layer_templates: Vec<LayerTemplate> = raw
        .layer_templates
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(index, template)| template_from_raw(index, template, &mut problems))
        .collect();
    let kubeconfig = raw.kubeconfig.map(|path| match base_dir {
        Some(base) => base.join(path),
        None => path.into(),
    });
    // A bad depth or resync is reported above; the defaults stand in so the layers are checked
    // in the same run.
    let max_upstream_depth = max_upstream_depth
        .or(NonZeroUsize::new(DEFAULT_MAX_UPSTREAM_DEPTH))
        .unwrap_or(NonZeroUsize::MIN);
    let resync = resync.unwrap_or(DEFAULT_RESYNC);
    let config = Config {
        origin: origin.to_string(),
        kubeconfig,
        group: raw.group.unwrap_or_else(|| DEFAULT_GROUP.to_string()),
        label_prefix: raw
            .label_prefix
            .unwrap_or_else(|| DEFAULT_PREFIX.to_string()),
        managed_by: raw
            .managed_by
            .unwrap_or_else(|| DEFAULT_MANAGED_BY.to_string()),
        max_upstream_depth,
        cluster_domain: raw
            .cluster_domain
            .unwrap_or_else(|| DEFAULT_CLUSTER_DOMAIN.to_string()),
        resync,
        layers,
        layer_context: raw.layer_context,
        layer_templates,
    };
    problems.extend(check(&config));
    if problems.is_empty() {
        Ok(config)
    } else {
        sort_by_key_path(&mut problems);
        Err(problems)
    }
}

/// Orders problems by key, with indices compared as numbers (`layers[2]` before `layers[10]`),
/// so that they read in the order of the file's layers.
fn sort_by_key_path(problems: &mut [Problem]) {
    fn path(key: &str) -> Vec<(u64, String)> {
        key.split('[')
            .map(|part| match part.split_once(']') {
                Some((index, rest)) => (index.parse().unwrap_or(u64::MAX), rest.to_string()),
                None => (0, part.to_string()),
            })
            .collect()
    }
    problems.sort_by_cached_key(|problem| path(&problem.key));
}

fn layer_from_raw(index: usize, raw: RawLayer, problems: &mut Vec<Problem>) -> Layer {
    let key = format!("layers[{index}]");
    let name = raw.name.unwrap_or_else(|| {
        problems.push(Problem::new(
            format!("{key}.name"),
            "missing; every layer needs a name",
        ));
        String::new()
    });
    let context = raw.context.unwrap_or_else(|| {
        problems.push(Problem::new(
            format!("{key}.context"),
            "missing; name the kube context of the layer (in-cluster inside a cluster)",
        ));
        String::new()
    });
    Layer {
        name,
        context,
        namespaces: raw.namespaces,
        borrow: raw
            .borrow
            .map(|borrow| borrow_from_raw(&format!("{key}.borrow"), borrow, problems)),
        stubs: raw.stubs.unwrap_or_default(),
        allow_namespaces: raw.allow_namespaces.unwrap_or_default(),
        allow_cluster_scoped: raw
            .allow_cluster_scoped
            .unwrap_or_default()
            .iter()
            .map(|entry| group_kind_from_raw(entry))
            .collect(),
        service_account: raw.service_account.and_then(|text| {
            service_account_from_raw(&format!("{key}.serviceAccount"), &text, problems)
        }),
        source_service_account: raw.source_service_account.and_then(|text| {
            service_account_from_raw(&format!("{key}.sourceServiceAccount"), &text, problems)
        }),
        allow_upstreams: raw
            .allow_upstreams
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .filter_map(|(n, entry)| {
                allow_upstream_from_raw(&format!("{key}.allowUpstreams[{n}]"), entry, problems)
            })
            .collect(),
        template: None,
    }
}

/// The default `maxTTL` of a layer template.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The default `defaultTTL` of a layer template.
pub const DEFAULT_TTL: Duration = Duration::from_secs(8 * 3600);

/// `layerTemplates[index]` as written; what needs the rest of the configuration is checked by
/// [`check`].
fn template_from_raw(
    index: usize,
    raw: RawLayerTemplate,
    problems: &mut Vec<Problem>,
) -> LayerTemplate {
    let key = format!("layerTemplates[{index}]");
    let name = raw.name.unwrap_or_else(|| {
        problems.push(Problem::new(
            format!("{key}.name"),
            "missing; a CombLayer names its template by it",
        ));
        String::new()
    });
    let kubeconfig_secrets = raw
        .kubeconfig_secrets
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .filter_map(|(n, text)| {
            let skey = format!("{key}.kubeconfigSecrets[{n}]");
            match text.split_once('/') {
                Some((namespace, name)) if is_dns_label(namespace) && is_dns_subdomain(name) => {
                    Some(SecretName {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                    })
                }
                _ => {
                    problems.push(Problem::new(
                        skey,
                        format!(
                            "'{text}' is not NAMESPACE/NAME of a Secret (in the cluster of \
                             layerContext) holding a kubeconfig"
                        ),
                    ));
                    None
                }
            }
        })
        .collect();
    let max_ttl = raw
        .max_ttl
        .and_then(|value| duration_from_raw(&format!("{key}.maxTTL"), value, problems))
        .unwrap_or(DEFAULT_MAX_TTL);
    let default_ttl = raw
        .default_ttl
        .and_then(|value| duration_from_raw(&format!("{key}.defaultTTL"), value, problems))
        .unwrap_or(DEFAULT_TTL.min(max_ttl));
    LayerTemplate {
        name,
        contexts: raw.contexts.unwrap_or_default(),
        kubeconfig_secrets,
        namespaces: raw.namespaces.unwrap_or_default(),
        borrow_from: raw.borrow_from.unwrap_or_default(),
        fallback: raw
            .fallback
            .unwrap_or_default()
            .into_iter()
            .map(|entry| match entry.as_str() {
                "local" => Candidate::Local,
                _ => Candidate::Layer(entry),
            })
            .collect(),
        replicate: replicate_from_raw(&key, raw.replicate.unwrap_or_default(), problems),
        allow_upstreams: raw
            .allow_upstreams
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .filter_map(|(n, entry)| {
                allow_upstream_from_raw(&format!("{key}.allowUpstreams[{n}]"), entry, problems)
            })
            .collect(),
        allow_namespaces: raw.allow_namespaces.unwrap_or_default(),
        allow_cluster_scoped: raw
            .allow_cluster_scoped
            .unwrap_or_default()
            .iter()
            .map(|entry| group_kind_from_raw(entry))
            .collect(),
        service_account: raw.service_account.and_then(|text| {
            service_account_from_raw(&format!("{key}.serviceAccount"), &text, problems)
        }),
        source_service_account: raw.source_service_account.and_then(|text| {
            service_account_from_raw(&format!("{key}.sourceServiceAccount"), &text, problems)
        }),
        max_ttl,
        default_ttl,
        create_namespaces: raw.create_namespaces.unwrap_or(false),
    }
}

/// An `allowUpstreams` entry: `layer` or `context` (one of them), `namespaces`, `replicate`.
fn allow_upstream_from_raw(
    key: &str,
    raw: RawAllowUpstream,
    problems: &mut Vec<Problem>,
) -> Option<AllowUpstream> {
    let target = match (raw.layer, raw.context) {
        (Some(layer), None) => UpstreamTarget::Layer(layer),
        (None, Some(context)) => UpstreamTarget::Context(context),
        (Some(_), Some(_)) => {
            problems.push(Problem::new(
                key,
                "names both a layer and a context; give one (layer: NAME takes that layer's context)",
            ));
            return None;
        }
        (None, None) => {
            problems.push(Problem::new(
                key,
                "names no upstream; give layer: NAME (that layer's context and namespaces) or \
                 context: NAME (a kube context)",
            ));
            return None;
        }
    };
    Some(AllowUpstream {
        target,
        namespaces: raw.namespaces,
        replicate: raw.replicate.unwrap_or(false),
    })
}

/// An `allowClusterScoped` entry: a built-in Kind alone (its group is the one comb knows for it,
/// `ClusterRole` is `rbac.authorization.k8s.io/ClusterRole`), or `group/Kind` for any Kind, a
/// custom resource's included. Every entry is kept, so that [`check`] reports each at its own
/// index (a `/` too many shows in the group).
fn group_kind_from_raw(text: &str) -> GroupKind {
    match text.rsplit_once('/') {
        Some((group, kind)) => GroupKind::new(group, kind),
        None => GroupKind::new(builtin_kind(text).map_or("", |known| known.group), text),
    }
}

/// `serviceAccount` (at `key`): `NAME` (in each Comb's own namespace) or `NAMESPACE/NAME`.
fn service_account_from_raw(
    key: &str,
    text: &str,
    problems: &mut Vec<Problem>,
) -> Option<ServiceAccountRef> {
    match text.split_once('/') {
        None => Some(ServiceAccountRef {
            namespace: None,
            name: text.to_string(),
        }),
        Some((namespace, name)) if !name.contains('/') => Some(ServiceAccountRef {
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        }),
        Some(_) => {
            problems.push(Problem::new(
                key,
                format!(
                    "'{text}' has more than one '/'; write NAME (in each Comb's own namespace) or \
                     NAMESPACE/NAME"
                ),
            ));
            None
        }
    }
}

/// A positive duration as written (`30s`); a bare number is refused for its missing unit.
fn duration_from_raw(key: &str, raw: Scalar, problems: &mut Vec<Problem>) -> Option<Duration> {
    match raw {
        Scalar::Text(text) => parse_positive_duration(&text)
            .map_err(|error| problems.push(Problem::new(key, error.to_string())))
            .ok(),
        number => {
            problems.push(Problem::new(
                key,
                format!(
                    "'{}' has no unit; write e.g. {}s",
                    number.text(),
                    number.text()
                ),
            ));
            None
        }
    }
}

/// `fallback`, `unhealthyAfter`, `healthyAfter` and `probe` of the borrow at `key`; the timing
/// keys without `fallback` are refused, as they would do nothing.
fn fallback_from_raw(
    key: &str,
    raw: &mut RawBorrow,
    problems: &mut Vec<Problem>,
) -> Option<Fallback> {
    let mut timing = |name: &str, value: Option<Scalar>, default: Duration| {
        value
            .and_then(|value| duration_from_raw(&format!("{key}.{name}"), value, problems))
            .unwrap_or(default)
    };
    let policy = HealthPolicy {
        unhealthy_after: timing(
            "unhealthyAfter",
            raw.unhealthy_after.clone(),
            DEFAULT_UNHEALTHY_AFTER,
        ),
        healthy_after: timing(
            "healthyAfter",
            raw.healthy_after.clone(),
            DEFAULT_HEALTHY_AFTER,
        ),
    };
    let probe = match raw.probe.as_deref() {
        None => None,
        Some("tcp") => Some(Probe::Tcp),
        Some(other) => {
            problems.push(Problem::new(
                format!("{key}.probe"),
                format!("'{other}' is not a probe; the one there is is tcp (a TCP connect to each address the bridge uses)"),
            ));
            None
        }
    };
    let Some(entries) = raw.fallback.take() else {
        for (name, given) in [
            ("unhealthyAfter", raw.unhealthy_after.is_some()),
            ("healthyAfter", raw.healthy_after.is_some()),
            ("probe", raw.probe.is_some()),
        ] {
            if given {
                problems.push(Problem::new(
                    format!("{key}.{name}"),
                    "does nothing without borrow.fallback; name the layers to fall back to \
                     (e.g. fallback: [prod, local]) or remove it",
                ));
            }
        }
        return None;
    };
    if entries.is_empty() {
        problems.push(Problem::new(
            format!("{key}.fallback"),
            "an empty list; leave the key out for no fallback",
        ));
    }
    Some(Fallback {
        to: entries
            .into_iter()
            .map(|entry| match entry.as_str() {
                "local" => Candidate::Local,
                _ => Candidate::Layer(entry),
            })
            .collect(),
        policy,
        probe,
    })
}

/// The `replicate` entries at `key`: a kind comb copies and an object name each.
fn replicate_from_raw(
    key: &str,
    raw: Vec<RawReplicate>,
    problems: &mut Vec<Problem>,
) -> Vec<Replicate> {
    raw.into_iter()
        .enumerate()
        .filter_map(|(index, item)| {
            let key = format!("{key}.replicate[{index}]");
            let kind = match item.kind.as_deref() {
                Some("Secret") => Some(ReplicateKind::Secret),
                Some("ConfigMap") => Some(ReplicateKind::ConfigMap),
                Some(other) => {
                    problems.push(Problem::new(
                        format!("{key}.kind"),
                        format!("'{other}' cannot be replicated; Secret or ConfigMap"),
                    ));
                    None
                }
                None => {
                    problems.push(Problem::new(
                        format!("{key}.kind"),
                        "missing; Secret or ConfigMap",
                    ));
                    None
                }
            };
            let name = item.name.filter(|name| !name.is_empty());
            match name.as_deref().map(|name| object_name_problem("", name)) {
                None => problems.push(Problem::new(
                    format!("{key}.name"),
                    "missing; the name of the object to copy",
                )),
                Some(Some(problem)) => problems.push(Problem::new(format!("{key}.name"), problem)),
                Some(None) => {}
            }
            Some(Replicate {
                kind: kind?,
                name: name?,
            })
        })
        .collect()
}

fn borrow_from_raw(key: &str, mut raw: RawBorrow, problems: &mut Vec<Problem>) -> Borrow {
    let fallback = fallback_from_raw(key, &mut raw, problems);
    let from = raw.from.unwrap_or_else(|| {
        problems.push(Problem::new(
            format!("{key}.from"),
            "missing; name the layer to borrow from",
        ));
        String::new()
    });
    let replicate = replicate_from_raw(key, raw.replicate.unwrap_or_default(), problems);
    Borrow {
        from,
        namespace: raw.namespace,
        combs: raw.combs.unwrap_or_else(|| vec!["*".to_string()]),
        local: raw.local.unwrap_or_default(),
        replicate,
        fallback,
    }
}

/// Every check of a configuration that needs nothing but the configuration.
pub fn check(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    if !is_dns_subdomain(&config.group) || !config.group.contains('.') {
        problems.push(Problem::new(
            "group",
            format!(
                "'{}' is not an API group; write a DNS subdomain with a dot, e.g. {DEFAULT_GROUP}",
                config.group
            ),
        ));
    }
    if !config
        .label_prefix
        .strip_suffix('/')
        .is_some_and(is_dns_subdomain)
    {
        problems.push(Problem::new(
            "labelPrefix",
            format!(
                "'{}' is not a label prefix; write a DNS subdomain followed by '/', e.g. {DEFAULT_PREFIX}",
                config.label_prefix
            ),
        ));
    }
    if !is_label_value(&config.managed_by) {
        problems.push(Problem::new(
            "managedBy",
            format!(
                "'{}' cannot be a label value (at most 63 characters: letters, digits, -, _ and ., alphanumeric at both ends)",
                config.managed_by
            ),
        ));
    }
    if !is_dns_subdomain(&config.cluster_domain) {
        problems.push(Problem::new(
            "clusterDomain",
            format!(
                "'{}' is not a DNS domain, e.g. {DEFAULT_CLUSTER_DOMAIN}",
                config.cluster_domain
            ),
        ));
    }
    if config.layers.is_empty() {
        problems.push(Problem::new(
            "layers",
            "no layers; name at least one (name and context)",
        ));
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, layer) in config.layers.iter().enumerate() {
        check_layer(config, index, layer, &mut seen, &mut problems);
    }
    let mut templates: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, template) in config.layer_templates.iter().enumerate() {
        check_template(config, index, template, &mut templates, &mut problems);
    }
    problems.extend(borrow_cycles(config));
    problems.extend(overlaps(config, |a, b| {
        (a.context == b.context).then(|| format!("context {}", a.context))
    }));
    sort_by_key_path(&mut problems);
    problems
}

fn check_layer<'a>(
    config: &Config,
    index: usize,
    layer: &'a Layer,
    seen: &mut BTreeMap<&'a str, usize>,
    problems: &mut Vec<Problem>,
) {
    let key = format!("layers[{index}]");
    if !layer.name.is_empty() {
        if !is_label_value(&layer.name) {
            problems.push(Problem::new(
                format!("{key}.name"),
                format!(
                    "'{}' cannot name a layer (letters, digits, -, _ and ., alphanumeric at both ends, at most 63)",
                    layer.name
                ),
            ));
        } else if let Some(first) = seen.insert(&layer.name, index) {
            seen.insert(&layer.name, first);
            problems.push(Problem::new(
                format!("{key}.name"),
                format!(
                    "layer '{}' is already defined by layers[{first}]; layer names are unique",
                    layer.name
                ),
            ));
        }
    }
    if let Some(namespaces) = &layer.namespaces {
        if namespaces.is_empty() {
            problems.push(Problem::new(
                format!("{key}.namespaces"),
                "an empty list; leave the key out to manage every namespace",
            ));
        }
        check_namespaces(&format!("{key}.namespaces"), namespaces, problems);
    }
    check_patterns(&format!("{key}.stubs"), &layer.stubs, problems);
    check_tenancy(&key, layer, problems);
    check_allow_upstreams(config, &key, layer, problems);
    let Some(borrow) = &layer.borrow else { return };
    let bkey = format!("{key}.borrow");
    if !borrow.from.is_empty() {
        if borrow.from == layer.name {
            problems.push(Problem::new(
                format!("{bkey}.from"),
                format!(
                    "layer '{}' cannot borrow from itself; name a layer above it",
                    layer.name
                ),
            ));
        } else if config.layer(&borrow.from).is_none() {
            problems.push(Problem::new(
                format!("{bkey}.from"),
                format!(
                    "unknown layer \"{}\" (layers: {})",
                    borrow.from,
                    layer_names(config)
                ),
            ));
        }
    }
    if let Some(namespace) = &borrow.namespace {
        if !is_dns_label(namespace) {
            problems.push(Problem::new(
                format!("{bkey}.namespace"),
                format!("'{namespace}' is not a namespace name (a DNS-1123 label)"),
            ));
        } else if let Some(from) = config.layer(&borrow.from)
            && !from.manages(namespace)
        {
            problems.push(Problem::new(
                format!("{bkey}.namespace"),
                format!(
                    "layer {} manages namespaces {} only, not {namespace}; a borrow stays inside \
                     the namespaces of the layer it borrows from",
                    from.name,
                    from.namespaces.as_deref().unwrap_or_default().join(", ")
                ),
            ));
        }
    }
    check_patterns(&format!("{bkey}.combs"), &borrow.combs, problems);
    check_patterns(&format!("{bkey}.local"), &borrow.local, problems);
    if let Some(fallback) = &borrow.fallback {
        check_fallback(config, &bkey, &borrow.from, fallback, problems);
    }
}

/// `layerTemplates[index]`: a unique name, a cluster, namespace patterns, layers that exist,
/// a default TTL within the maximum, and the tenancy keys as a layer's are checked.
fn check_template<'a>(
    config: &Config,
    index: usize,
    template: &'a LayerTemplate,
    seen: &mut BTreeMap<&'a str, usize>,
    problems: &mut Vec<Problem>,
) {
    let key = format!("layerTemplates[{index}]");
    if !template.name.is_empty() {
        if !is_label_value(&template.name) {
            problems.push(Problem::new(
                format!("{key}.name"),
                format!(
                    "'{}' cannot name a template (letters, digits, -, _ and ., alphanumeric at both ends, at most 63)",
                    template.name
                ),
            ));
        } else if let Some(first) = seen.insert(&template.name, index) {
            seen.insert(&template.name, first);
            problems.push(Problem::new(
                format!("{key}.name"),
                format!(
                    "template '{}' is already defined by layerTemplates[{first}]; template names are unique",
                    template.name
                ),
            ));
        }
    }
    if template.contexts.is_empty() && template.kubeconfig_secrets.is_empty() {
        problems.push(Problem::new(
            &key,
            "names no cluster; list the kube contexts (contexts) or the Secrets holding a \
             kubeconfig (kubeconfigSecrets) a layer from it may run in",
        ));
    }
    if template.namespaces.is_empty() {
        problems.push(Problem::new(
            format!("{key}.namespaces"),
            "missing; a layer from a template names its namespaces, each matching a pattern \
             listed here (e.g. dev-*)",
        ));
    }
    for (n, pattern) in template.namespaces.iter().enumerate() {
        let fits = !pattern.is_empty()
            && pattern.len() <= 63
            && pattern
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '*');
        if !fits {
            problems.push(Problem::new(
                format!("{key}.namespaces[{n}]"),
                format!(
                    "'{pattern}' is not a namespace pattern (lowercase letters, digits, - and the \
                     wildcard *)"
                ),
            ));
        }
    }
    for (n, from) in template.borrow_from.iter().enumerate() {
        if config.layer(from).is_none() {
            problems.push(Problem::new(
                format!("{key}.borrowFrom[{n}]"),
                format!("unknown layer \"{from}\" (layers: {})", layer_names(config)),
            ));
        }
    }
    for (n, entry) in template.fallback.iter().enumerate() {
        if let Candidate::Layer(name) = entry
            && config.layer(name).is_none()
        {
            problems.push(Problem::new(
                format!("{key}.fallback[{n}]"),
                format!(
                    "unknown layer \"{name}\" (layers: {}); a fallback is a layer or local",
                    layer_names(config)
                ),
            ));
        }
    }
    if template.default_ttl > template.max_ttl {
        problems.push(Problem::new(
            format!("{key}.defaultTTL"),
            format!(
                "{}s is longer than maxTTL ({}s); a layer never lives longer than maxTTL",
                template.default_ttl.as_secs(),
                template.max_ttl.as_secs()
            ),
        ));
    }
    // The tenancy keys are a layer's, given to every layer of the template as they are.
    let bounds = Layer {
        name: template.name.clone(),
        context: String::new(),
        namespaces: None,
        borrow: (!template.replicate.is_empty()).then(|| Borrow {
            from: String::new(),
            namespace: None,
            combs: Vec::new(),
            local: Vec::new(),
            replicate: template.replicate.clone(),
            fallback: None,
        }),
        stubs: Vec::new(),
        allow_namespaces: template.allow_namespaces.clone(),
        allow_cluster_scoped: template.allow_cluster_scoped.clone(),
        service_account: template.service_account.clone(),
        source_service_account: template.source_service_account.clone(),
        allow_upstreams: template.allow_upstreams.clone(),
        template: None,
    };
    check_tenancy(&key, &bounds, problems);
    check_allow_upstreams(config, &key, &bounds, problems);
}

/// The entries of `fallback` (of the borrow at `key`, from layer `from`): each a layer further
/// up the chain than `from` (one `from` borrows from, directly or through others), or `local`,
/// last; none twice.
fn check_fallback(
    config: &Config,
    key: &str,
    from: &str,
    fallback: &Fallback,
    problems: &mut Vec<Problem>,
) {
    let above: Vec<&str> = config
        .chain_above(from)
        .iter()
        .map(|layer| layer.name.as_str())
        .collect();
    let mut listed = BTreeSet::new();
    for (n, entry) in fallback.to.iter().enumerate() {
        let ekey = format!("{key}.fallback[{n}]");
        if !listed.insert(entry) {
            problems.push(Problem::new(ekey, format!("'{entry}' is listed twice")));
            continue;
        }
        let problem = match entry {
            Candidate::Local if n + 1 < fallback.to.len() => Some(
                "local comes last: it is always healthy, so the entries after it would never be \
                 used"
                    .to_string(),
            ),
            Candidate::Local => None,
            Candidate::Layer(name) if above.contains(&name.as_str()) => None,
            Candidate::Layer(name) if config.layer(name).is_none() => Some(format!(
                "unknown layer \"{name}\" (layers: {})",
                layer_names(config)
            )),
            Candidate::Layer(name) if name == from => Some(format!(
                "'{name}' is borrow.from itself; a fallback is a layer further up the chain, or \
                 local"
            )),
            Candidate::Layer(name) if above.is_empty() => Some(format!(
                "'{name}' is not further up the chain: {from} borrows from no layer, so the one \
                 fallback there is is local"
            )),
            Candidate::Layer(name) => Some(format!(
                "'{name}' is not further up the chain than {from} (above it: {}); a fallback is a \
                 layer {from} borrows from, directly or through others, or local",
                above.join(", ")
            )),
        };
        if let Some(problem) = problem {
            problems.push(Problem::new(ekey, problem));
        }
    }
}

/// Each entry a namespace name, none twice.
fn check_namespaces(key: &str, namespaces: &[String], problems: &mut Vec<Problem>) {
    let mut listed = BTreeSet::new();
    for (n, namespace) in namespaces.iter().enumerate() {
        if !is_dns_label(namespace) {
            problems.push(Problem::new(
                format!("{key}[{n}]"),
                format!("'{namespace}' is not a namespace name (a DNS-1123 label)"),
            ));
        } else if !listed.insert(namespace) {
            problems.push(Problem::new(
                format!("{key}[{n}]"),
                format!("namespace '{namespace}' is listed twice"),
            ));
        }
    }
}

/// `allowNamespaces`, `allowClusterScoped` and `serviceAccount` of the layer at `key`.
fn check_tenancy(key: &str, layer: &Layer, problems: &mut Vec<Problem>) {
    check_namespaces(
        &format!("{key}.allowNamespaces"),
        &layer.allow_namespaces,
        problems,
    );
    let mut listed = BTreeSet::new();
    for (n, kind) in layer.allow_cluster_scoped.iter().enumerate() {
        let problem = cluster_scoped_kind_problem(kind)
            .or_else(|| (!listed.insert(kind)).then(|| format!("'{kind}' is listed twice")));
        if let Some(problem) = problem {
            problems.push(Problem::new(
                format!("{key}.allowClusterScoped[{n}]"),
                problem,
            ));
        }
    }
    for (account, akey) in [
        (&layer.service_account, format!("{key}.serviceAccount")),
        (
            &layer.source_service_account,
            format!("{key}.sourceServiceAccount"),
        ),
    ] {
        let Some(account) = account else { continue };
        if let Some(namespace) = &account.namespace
            && !is_dns_label(namespace)
        {
            problems.push(Problem::new(
                &akey,
                format!("'{namespace}' is not a namespace name (a DNS-1123 label)"),
            ));
        }
        if !is_dns_subdomain(&account.name) {
            problems.push(Problem::new(
                &akey,
                format!(
                    "'{}' is not a service account name (a DNS-1123 subdomain)",
                    account.name
                ),
            ));
        }
    }
    if let Some(account) = &layer.source_service_account
        && account.namespace.is_none()
    {
        problems.push(Problem::new(
            format!("{key}.sourceServiceAccount"),
            format!(
                "'{account}' names no namespace; write NAMESPACE/NAME, the account that reads \
                 copies in the source's cluster"
            ),
        ));
    }
    // A source in another cluster must not be read as the account of a namespace a Comb's
    // author chose: there, a namespace of that name may be another tenant's.
    if layer.replicates()
        && layer.source_service_account.is_none()
        && let Some(account) = &layer.service_account
        && account.namespace.is_none()
    {
        problems.push(Problem::new(
            format!("{key}.sourceServiceAccount"),
            format!(
                "missing; the layer copies Secrets or ConfigMaps and writes as serviceAccount \
                 {account}, an account in each Comb's own namespace, which names no account in \
                 the source's cluster: name the account that reads copies there \
                 (NAMESPACE/NAME), or make serviceAccount NAMESPACE/NAME"
            ),
        ));
    }
}

/// `allowUpstreams` of the layer at `key`: a layer that exists, a context that is not empty,
/// namespace names, and for a layer only namespaces it manages (a namespace no layer manages is
/// named with `context:`, so that the entry says what it reaches).
fn check_allow_upstreams(config: &Config, key: &str, layer: &Layer, problems: &mut Vec<Problem>) {
    for (n, allowed) in layer.allow_upstreams.iter().enumerate() {
        let ekey = format!("{key}.allowUpstreams[{n}]");
        let upstream_layer = match &allowed.target {
            UpstreamTarget::Layer(name) => match config.layer(name) {
                Some(found) => Some(found),
                None => {
                    problems.push(Problem::new(
                        format!("{ekey}.layer"),
                        format!("unknown layer \"{name}\" (layers: {})", layer_names(config)),
                    ));
                    None
                }
            },
            UpstreamTarget::Context(context) => {
                if context.is_empty() {
                    problems.push(Problem::new(
                        format!("{ekey}.context"),
                        "empty; name a kube context of the kubeconfig",
                    ));
                }
                None
            }
        };
        let Some(namespaces) = &allowed.namespaces else {
            continue;
        };
        let nkey = format!("{ekey}.namespaces");
        if namespaces.is_empty() {
            problems.push(Problem::new(
                &nkey,
                "an empty list allows nothing; leave the key out for every namespace the entry \
                 names, or remove the entry",
            ));
        }
        check_namespaces(&nkey, namespaces, problems);
        let Some(upstream_layer) = upstream_layer else {
            continue;
        };
        for (index, namespace) in namespaces.iter().enumerate() {
            if !upstream_layer.manages(namespace) {
                problems.push(Problem::new(
                    format!("{nkey}[{index}]"),
                    format!(
                        "layer {} manages namespaces {} only, not {namespace}; name its context \
                         instead (context: {}) to allow a namespace outside the layer",
                        upstream_layer.name,
                        upstream_layer
                            .namespaces
                            .as_deref()
                            .unwrap_or_default()
                            .join(", "),
                        upstream_layer.context
                    ),
                ));
            }
        }
    }
}

/// What is wrong with `kind` as an `allowClusterScoped` entry, if anything: it must name a
/// built-in cluster-scoped Kind, or a Kind of a custom resource's API group (those have a dot).
fn cluster_scoped_kind_problem(kind: &GroupKind) -> Option<String> {
    let name = &kind.kind;
    if kind.group.contains('/') {
        return Some(format!(
            "'{}/{name}' has more than one '/'; write a Kind (ClusterRole) or group/Kind \
             (example.com/ClusterWidget), without a version",
            kind.group
        ));
    }
    let is_kind_name = name.starts_with(|c: char| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric());
    if !is_kind_name {
        return Some(format!(
            "'{name}' is not a Kind (a capitalised name of letters and digits, e.g. ClusterRole)"
        ));
    }
    match known_scope(&kind.group, name) {
        Some(false) => None,
        Some(true) => Some(format!(
            "'{kind}' is namespaced; allowClusterScoped names cluster-scoped Kinds \
             (allowNamespaces says where namespaced ones may go)"
        )),
        None if kind.group.is_empty() => Some(format!(
            "'{name}' is not a built-in Kind; write a custom resource's Kind with its API group, \
             e.g. example.com/{name}"
        )),
        None if kind.group.contains('.') && is_dns_subdomain(&kind.group) => None,
        None => Some(format!(
            "'{}/{name}' names no built-in Kind, and '{}' is not an API group of a custom resource \
             (a DNS subdomain with a dot, e.g. example.com); write a Kind (ClusterRole) or \
             group/Kind (example.com/ClusterWidget), without a version",
            kind.group, kind.group
        )),
    }
}

fn check_patterns(key: &str, patterns: &[String], problems: &mut Vec<Problem>) {
    for (index, pattern) in patterns.iter().enumerate() {
        if let Some(problem) = pattern_problem(pattern) {
            problems.push(Problem::new(format!("{key}[{index}]"), problem));
        }
    }
}

fn layer_names(config: &Config) -> String {
    config
        .layers
        .iter()
        .map(|layer| layer.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Borrowing must lead upwards: following `borrow.from` never comes back. Each cycle is
/// reported once, at the first layer of the file that is on it.
fn borrow_cycles(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut reported: BTreeSet<Vec<String>> = BTreeSet::new();
    for (index, start) in config.layers.iter().enumerate() {
        let mut path = vec![start.name.clone()];
        let mut current = start;
        while let Some(next) = current
            .borrow
            .as_ref()
            .filter(|borrow| borrow.from != current.name)
            .and_then(|borrow| config.layer(&borrow.from))
        {
            if let Some(at) = path.iter().position(|name| *name == next.name) {
                let mut cycle: Vec<String> = path[at..].to_vec();
                let mut members = cycle.clone();
                members.sort();
                if at == 0 && reported.insert(members) {
                    cycle.push(next.name.clone());
                    problems.push(Problem::new(
                        format!("layers[{index}].borrow.from"),
                        format!(
                            "borrow cycle {}; borrowing must lead to a layer that borrows from none",
                            cycle.join(" -> ")
                        ),
                    ));
                }
                break;
            }
            path.push(next.name.clone());
            current = next;
        }
    }
    problems
}

/// Two layers on one API server must not manage the same namespace, or they would fight over
/// its Combs. `shared` says what two layers share (a context, an API server), if anything.
fn overlaps(config: &Config, shared: impl Fn(&Layer, &Layer) -> Option<String>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (index, layer) in config.layers.iter().enumerate() {
        for other in &config.layers[..index] {
            let Some(server) = shared(other, layer) else {
                continue;
            };
            let namespaces = match (&layer.namespaces, &other.namespaces) {
                (Some(mine), Some(theirs)) => mine
                    .iter()
                    .find(|namespace| theirs.contains(namespace))
                    .map(|namespace| format!("namespace {namespace}")),
                _ => Some("every namespace (a layer without namespaces manages all)".to_string()),
            };
            if let Some(namespaces) = namespaces {
                problems.push(Problem::new(
                    format!("layers[{index}].namespaces"),
                    format!(
                        "layers {} and {} share {server} and would both manage {namespaces}; give each layer its own namespaces",
                        other.name, layer.name
                    ),
                ));
            }
        }
    }
    problems
}

/// The checks that need the kubeconfig: every layer's context exists, and layers whose
/// different contexts reach one API server (same URL) do not manage the same namespaces.
pub fn check_contexts(config: &Config, contexts: &[KubeContext], origin: &str) -> Vec<Problem> {
    let names: Vec<&str> = contexts.iter().map(|c| c.name.as_str()).collect();
    let missing = |key: String, context: &str| {
        (!names.contains(&context)).then(|| {
            Problem::new(
                key,
                format!(
                    "context \"{context}\" is not in {origin} (contexts: {})",
                    names.join(", ")
                ),
            )
        })
    };
    let mut problems: Vec<Problem> = Vec::new();
    if let Some(context) = &config.layer_context {
        problems.extend(missing("layerContext".to_string(), context));
    }
    for (index, template) in config.layer_templates.iter().enumerate() {
        for (n, context) in template.contexts.iter().enumerate() {
            problems.extend(missing(
                format!("layerTemplates[{index}].contexts[{n}]"),
                context,
            ));
        }
    }
    for (index, layer) in config.layers.iter().enumerate() {
        if layer.template.is_some() {
            // A layer from a CombLayer is checked against its template when it is admitted.
            continue;
        }
        problems.extend(missing(format!("layers[{index}].context"), &layer.context));
        for (n, allowed) in layer.allow_upstreams.iter().enumerate() {
            if let UpstreamTarget::Context(context) = &allowed.target {
                problems.extend(missing(
                    format!("layers[{index}].allowUpstreams[{n}].context"),
                    context,
                ));
            }
        }
    }
    if !problems.is_empty() {
        return problems;
    }
    let server_of = |layer: &Layer| {
        contexts
            .iter()
            .find(|c| c.name == layer.context)
            .map(|c| c.server.as_str())
    };
    overlaps(config, |a, b| {
        (a.context != b.context && server_of(a) == server_of(b)).then(|| {
            format!(
                "the API server {} (contexts {} and {})",
                server_of(a).unwrap_or_default(),
                a.context,
                b.context
            )
        })
    })
}
