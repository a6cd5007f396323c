//! A CombLayer made into a layer: its template's bounds, narrowed by the CR, never widened
//! (docs/adr/0005-layers-on-demand.md). Pure: the configuration, the CR's spec, when it was
//! made and the time now in; a [`Layer`] like one of the file, or the refusal that names the
//! template key that would allow it, out. The controller asks it at every look at a CombLayer,
//! so a template narrowed since refuses a layer it allowed before.

use std::fmt;
use std::time::Duration;

use comb_api::{CombLayerSpec, SecretRef, is_label_value};
use jiff::{SignedDuration, Timestamp};

use super::duration::parse_positive_duration;
use super::selector::pattern_problem;
use super::validate;
use super::{
    Borrow, Config, Fallback, Layer, LayerTemplate, Replicate, ReplicateKind, TemplateRef,
};
use crate::engine::borrow::fallback::{DEFAULT_HEALTHY_AFTER, DEFAULT_UNHEALTHY_AFTER};
use crate::engine::borrow::{Candidate, HealthPolicy};

/// A CombLayer admitted: the layer it is, and when it goes.
#[derive(Clone, Debug, PartialEq)]
pub struct Admitted {
    pub layer: Layer,
    pub expires_at: Timestamp,
    /// Whether comb creates the layer's namespaces that do not exist (the template's
    /// `createNamespaces`).
    pub create_namespaces: bool,
    /// The Secret holding the layer's kubeconfig, when the layer names one.
    pub kubeconfig_secret: Option<SecretRef>,
}

/// Why a CombLayer is not a layer: the reason its `Ready` condition records, and one sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub message: String,
}

/// The reason a [`Refusal`] records: an interface, as a Comb's reasons are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalReason {
    /// The CR asks for more than its template allows (or names no template there is).
    TemplateForbidden,
    /// Another layer has the CR's name.
    NameTaken,
    /// The CR does not make a layer at all (a bad namespace name, pattern, duration, a
    /// namespace another layer manages).
    InvalidSpec,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::TemplateForbidden => "TemplateForbidden",
            RefusalReason::NameTaken => "NameTaken",
            RefusalReason::InvalidSpec => "InvalidSpec",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

fn forbidden(message: String) -> Refusal {
    Refusal {
        reason: RefusalReason::TemplateForbidden,
        message,
    }
}

fn invalid(message: String) -> Refusal {
    Refusal {
        reason: RefusalReason::InvalidSpec,
        message,
    }
}

/// How the name comb gives the kube context of a cluster a kubeconfig Secret holds starts.
pub const SECRET_CONTEXT_PREFIX: &str = "secret/";

/// The name comb gives the kube context of a cluster whose kubeconfig a Secret holds.
pub fn secret_context(secret: &SecretRef) -> String {
    format!(
        "{SECRET_CONTEXT_PREFIX}{}/{}",
        secret.namespace, secret.name
    )
}

/// The layer CombLayer `name` with `spec` is, as its template in `config` allows; `created` is
/// when the CR was made (a `ttl` counts from then), `now` bounds an `expiresAt`. `config` holds
/// every layer there is now, those of other CombLayers included, so that a namespace another
/// layer manages is refused.
pub fn layer_from_template(
    config: &Config,
    name: &str,
    spec: &CombLayerSpec,
    created: Timestamp,
    now: Timestamp,
) -> Result<Admitted, Refusal> {
    if !is_label_value(name) {
        return Err(invalid(format!(
            "'{name}' cannot name a layer (letters, digits, -, _ and ., alphanumeric at both \
             ends, at most 63)"
        )));
    }
    if let Some(taken) = config
        .layers
        .iter()
        .find(|layer| layer.name == name && layer.template.is_none())
    {
        return Err(Refusal {
            reason: RefusalReason::NameTaken,
            message: format!(
                "layer {} is a layer of the configuration (context {}); give the CombLayer \
                 another name",
                taken.name, taken.context
            ),
        });
    }
    let Some((index, template)) = config.template(&spec.template) else {
        let names: Vec<&str> = config
            .layer_templates
            .iter()
            .map(|template| template.name.as_str())
            .collect();
        return Err(forbidden(format!(
            "spec.template names template {}, which the configuration does not define \
             (layerTemplates: {})",
            spec.template,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    let at = |key: &str| format!("layerTemplates[{index}].{key}");
    let who = format!("template {}", template.name);
    let context = cluster(spec, template, &who, &at)?;
    check_namespaces(spec, template, &who, &at)?;
    check_patterns("spec.stubs", &spec.stubs)?;
    let borrow = match &spec.borrow {
        None => None,
        Some(borrow) => Some(narrow_borrow(borrow, template, &who, &at)?),
    };
    let expires_at = expiry(spec, template, &who, &at, created, now)?;
    let layer = Layer {
        name: name.to_string(),
        context,
        namespaces: Some(spec.namespaces.clone()),
        borrow,
        stubs: spec.stubs.clone(),
        allow_namespaces: template.allow_namespaces.clone(),
        allow_cluster_scoped: template.allow_cluster_scoped.clone(),
        service_account: template.service_account.clone(),
        source_service_account: template.source_service_account.clone(),
        allow_upstreams: template.allow_upstreams.clone(),
        template: Some(TemplateRef {
            name: template.name.clone(),
            index,
        }),
    };
    beside_the_others(config, &layer)?;
    Ok(Admitted {
        layer,
        expires_at,
        create_namespaces: template.create_namespaces,
        kubeconfig_secret: spec.kubeconfig_secret.clone(),
    })
}

/// The layer's kube context: `spec.context` among the template's `contexts`, or
/// `spec.kubeconfigSecret` among its `kubeconfigSecrets` (the name [`secret_context`] gives).
fn cluster(
    spec: &CombLayerSpec,
    template: &LayerTemplate,
    who: &str,
    at: &impl Fn(&str) -> String,
) -> Result<String, Refusal> {
    match (&spec.context, &spec.kubeconfig_secret) {
        (Some(context), None) if template.contexts.contains(context) => Ok(context.clone()),
        (Some(context), None) => Err(forbidden(format!(
            "spec.context names context {context}, which {who} does not allow: add {context} to {}",
            at("contexts")
        ))),
        (None, Some(secret))
            if template.kubeconfig_secrets.iter().any(|allowed| {
                allowed.namespace == secret.namespace && allowed.name == secret.name
            }) =>
        {
            Ok(secret_context(secret))
        }
        (None, Some(secret)) => Err(forbidden(format!(
            "spec.kubeconfigSecret names Secret {secret}, which {who} does not allow: add {secret} \
             to {}",
            at("kubeconfigSecrets")
        ))),
        (Some(_), Some(_)) => Err(invalid(
            "spec names both context and kubeconfigSecret; name the layer's cluster once".into(),
        )),
        (None, None) => Err(invalid(
            "spec names no cluster; give context (a kube context of the controller) or \
             kubeconfigSecret (a Secret holding a kubeconfig)"
                .into(),
        )),
    }
}

/// Every namespace of the layer a namespace name matching a pattern of the template.
fn check_namespaces(
    spec: &CombLayerSpec,
    template: &LayerTemplate,
    who: &str,
    at: &impl Fn(&str) -> String,
) -> Result<(), Refusal> {
    if spec.namespaces.is_empty() {
        return Err(invalid(format!(
            "spec.namespaces is empty; a layer of {who} names its namespaces, each matching one \
             of {} ({})",
            at("namespaces"),
            template.namespaces.join(", ")
        )));
    }
    for (n, namespace) in spec.namespaces.iter().enumerate() {
        if !comb_api::names::is_dns1123_label(namespace) {
            return Err(invalid(format!(
                "spec.namespaces[{n}]: '{namespace}' is not a namespace name (a DNS-1123 label)"
            )));
        }
        if spec.namespaces[..n].contains(namespace) {
            return Err(invalid(format!(
                "spec.namespaces[{n}]: namespace '{namespace}' is listed twice"
            )));
        }
        if !super::matches_any(&template.namespaces, "", namespace) {
            return Err(forbidden(format!(
                "spec.namespaces[{n}] names namespace {namespace}, which {who} does not allow \
                 (it allows {}): add a pattern matching {namespace} to {}",
                template.namespaces.join(", "),
                at("namespaces")
            )));
        }
    }
    Ok(())
}

fn check_patterns(key: &str, patterns: &[String]) -> Result<(), Refusal> {
    for (n, pattern) in patterns.iter().enumerate() {
        if let Some(problem) = pattern_problem(pattern) {
            return Err(invalid(format!("{key}[{n}]: {problem}")));
        }
    }
    Ok(())
}

/// `spec.borrow` within the template's `borrowFrom`, `replicate` and `fallback`.
fn narrow_borrow(
    borrow: &comb_api::LayerBorrowSpec,
    template: &LayerTemplate,
    who: &str,
    at: &impl Fn(&str) -> String,
) -> Result<Borrow, Refusal> {
    if !template.borrow_from.contains(&borrow.from) {
        return Err(forbidden(format!(
            "spec.borrow.from names layer {}, which {who} does not allow: add {} to {}",
            borrow.from,
            borrow.from,
            at("borrowFrom")
        )));
    }
    if let Some(namespace) = &borrow.namespace
        && !comb_api::names::is_dns1123_label(namespace)
    {
        return Err(invalid(format!(
            "spec.borrow.namespace: '{namespace}' is not a namespace name (a DNS-1123 label)"
        )));
    }
    check_patterns("spec.borrow.combs", &borrow.combs)?;
    check_patterns("spec.borrow.local", &borrow.local)?;
    let mut replicate = Vec::new();
    for (n, item) in borrow.replicate.iter().enumerate() {
        let kind = match item.kind.as_str() {
            "Secret" => ReplicateKind::Secret,
            "ConfigMap" => ReplicateKind::ConfigMap,
            other => {
                return Err(invalid(format!(
                    "spec.borrow.replicate[{n}].kind: '{other}' cannot be replicated; Secret or \
                     ConfigMap"
                )));
            }
        };
        let wanted = Replicate {
            kind,
            name: item.name.clone(),
        };
        if !template.replicate.contains(&wanted) {
            return Err(forbidden(format!(
                "spec.borrow.replicate[{n}] copies {} {}, which {who} does not allow: add \
                 {{kind: {}, name: {}}} to {}",
                item.kind,
                item.name,
                item.kind,
                item.name,
                at("replicate")
            )));
        }
        replicate.push(wanted);
    }
    let mut to = Vec::new();
    for (n, entry) in borrow.fallback.iter().enumerate() {
        let candidate = match entry.as_str() {
            "local" => Candidate::Local,
            layer => Candidate::Layer(layer.to_string()),
        };
        if !template.fallback.contains(&candidate) {
            return Err(forbidden(format!(
                "spec.borrow.fallback[{n}] names {entry}, which {who} does not allow: add {entry} \
                 to {}",
                at("fallback")
            )));
        }
        to.push(candidate);
    }
    Ok(Borrow {
        from: borrow.from.clone(),
        namespace: borrow.namespace.clone(),
        combs: if borrow.combs.is_empty() {
            vec!["*".to_string()]
        } else {
            borrow.combs.clone()
        },
        local: borrow.local.clone(),
        replicate,
        fallback: (!to.is_empty()).then_some(Fallback {
            to,
            policy: HealthPolicy {
                unhealthy_after: DEFAULT_UNHEALTHY_AFTER,
                healthy_after: DEFAULT_HEALTHY_AFTER,
            },
            probe: None,
        }),
    })
}

/// When the layer goes: `created` plus `spec.ttl` (at most `maxTTL`), `spec.expiresAt` (at
/// most `maxTTL` from `now`), else `created` plus `defaultTTL`.
fn expiry(
    spec: &CombLayerSpec,
    template: &LayerTemplate,
    who: &str,
    at: &impl Fn(&str) -> String,
    created: Timestamp,
    now: Timestamp,
) -> Result<Timestamp, Refusal> {
    let longer = |what: String| {
        forbidden(format!(
            "{what}, longer than {who} allows: raise {} (now {}) or ask for less",
            at("maxTTL"),
            words(template.max_ttl)
        ))
    };
    let after = |from: Timestamp, duration: Duration| {
        SignedDuration::try_from(duration)
            .ok()
            .and_then(|duration| from.checked_add(duration).ok())
            .ok_or_else(|| {
                invalid(format!(
                    "{} after {from} is past the end of time",
                    words(duration)
                ))
            })
    };
    let whole_seconds = |at: Timestamp| Timestamp::from_second(at.as_second()).unwrap_or(at);
    // Whole seconds: a status records times to the second, and a look that compared a finer
    // expiry with the recorded one would write the status again each time.
    let created = whole_seconds(created);
    match (&spec.ttl, &spec.expires_at) {
        (Some(_), Some(_)) => Err(invalid("spec gives ttl and expiresAt; give one".into())),
        (Some(ttl), None) => {
            let ttl = parse_positive_duration(ttl)
                .map_err(|error| invalid(format!("spec.ttl: {error}")))?;
            if ttl > template.max_ttl {
                return Err(longer(format!("spec.ttl is {}", words(ttl))));
            }
            after(created, ttl)
        }
        (None, Some(expires_at)) => {
            let from_now = expires_at.0.duration_since(now);
            let max = SignedDuration::try_from(template.max_ttl).unwrap_or(SignedDuration::MAX);
            if from_now > max {
                let secs = u64::try_from(from_now.as_secs()).unwrap_or(u64::MAX);
                return Err(longer(format!(
                    "spec.expiresAt is {} from now",
                    words(Duration::from_secs(secs))
                )));
            }
            Ok(whole_seconds(expires_at.0))
        }
        (None, None) => after(created, template.default_ttl),
    }
}

/// A duration as a person writes it: `8h`, `90m`, `45s`.
fn words(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs > 0 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs > 0 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// The checks of the configuration that concern `layer` beside the layers there are: a
/// namespace another layer of its cluster manages, a `borrow.namespace` outside the layer it
/// borrows from, a fallback that is not further up the chain. Said with `spec.` for the key.
fn beside_the_others(config: &Config, layer: &Layer) -> Result<(), Refusal> {
    let mut together = config.clone();
    together.layers.retain(|other| other.name != layer.name);
    let index = together.layers.len();
    together.layers.push(layer.clone());
    let prefix = format!("layers[{index}].");
    let problem = validate::check(&together)
        .into_iter()
        .find(|problem| problem.key.starts_with(&prefix));
    match problem {
        Some(problem) => Err(invalid(format!(
            "spec.{}: {}",
            problem.key.trim_start_matches(&prefix),
            problem.message
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
