//! Step 1 of the borrowing path (reference §5.1): which upstream, if any, a Comb borrows from.
//! The first source with an answer decides: the controlling code (the layer's `borrow` /
//! `local`), then `spec.upstream`, then the class.

use std::collections::BTreeMap;
use std::sync::Arc;

use comb_api::UpstreamSpec;
use comb_kubeconfigs::ClientPool;
use comb_upstreams::{PeerCombs, Resolved, Upstream, UpstreamClasses, UpstreamContext};

use crate::engine::class::CombInstance;
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
    /// Why the answer must not be used: the borrow names a peer outside the namespaces its
    /// source layer manages. The step is `Error`/`UpstreamForbidden` with it, before anything is
    /// read.
    pub refusal: Option<String>,
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
            refusal: None,
        }
    }

    /// The answer of `source` that must not be used, for the reason `refusal` gives.
    pub fn refused(source: impl Into<String>, refusal: impl Into<String>) -> Controlling {
        Controlling {
            source: source.into(),
            answer: UpstreamSpec::Absent,
            refusal: Some(refusal.into()),
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
    /// Peer Combs the controller's watches hold; `None`: peers are read from the API server.
    pub peers: Option<Arc<dyn PeerCombs>>,
}

impl BorrowEnv {
    /// Combs in `context` of `pool`, no layers, the built-in upstream classes.
    pub fn new(pool: ClientPool, context: impl Into<String>) -> BorrowEnv {
        BorrowEnv {
            pool,
            context: context.into(),
            layers: BTreeMap::new(),
            classes: UpstreamClasses::default(),
            peers: None,
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
            act_as: settings.tenancy.writer(comb.namespace()),
            source_reader: settings.tenancy.source_reader(),
            record: comb.recorded_managed().to_vec(),
            peers: self.peers.clone(),
        }
    }
}

/// Resolves the upstream of `comb` (reference §5.1): the first source that has an answer
/// decides, even when it says local: the controlling code, then `spec.upstream` (explicit `null`
/// is local), then the class's `upstream`, else local. Failures are messages for
/// `resolving the upstream failed: <msg>`, but for [`Error::UpstreamForbidden`]: what
/// `spec.upstream` names and the layer does not allow ([`spec_upstream`]), and a borrow the
/// configuration refuses ([`Controlling::refusal`]).
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
    if let Some(refusal) = &controlling.refusal {
        return Err(Error::UpstreamForbidden(refusal.clone()));
    }
    // The layer's configuration and the classes' code are trusted: what they name is read.
    if controlling.answer.is_present() {
        return interpret(&controlling.source, &controlling.answer);
    }
    if let Some(resolved) = spec_upstream(comb, env)? {
        return Ok(resolved);
    }
    let answer = comb.upstream().await?;
    interpret(&format!("{}->upstream", comb.class_name()), &answer)
}

/// What `spec.upstream` of `comb` names, as its layer lets it: `None` when it has no answer.
/// It is the Comb author's word, not the layer's, so an upstream that would read outside the
/// Comb's own context and namespace, or copy anything, is [`Error::UpstreamForbidden`] unless
/// the layer's `allowUpstreams` allows it (the message names the entry that would). Used only
/// where the controlling code has no say.
pub fn spec_upstream(comb: &CombInstance, env: &BorrowEnv) -> Result<Option<Resolved>> {
    let spec = &comb.context().spec.upstream;
    if !spec.is_present() {
        return Ok(None);
    }
    let ctx = env.upstream_context(comb);
    let resolved = env.classes.interpret(SPEC_SOURCE, spec, &ctx)?;
    if let Resolved::Upstream(upstream) = &resolved
        && let Some(refusal) = comb.settings().tenancy.upstream_refusal(
            SPEC_SOURCE,
            upstream.class_name(),
            &upstream.reads(&ctx),
            &env.context,
            comb.namespace(),
        )
    {
        return Err(Error::UpstreamForbidden(refusal));
    }
    Ok(Some(resolved))
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
        Err(Error::UpstreamForbidden(message)) => UpstreamResolution::Forbidden(message),
        Err(error) => UpstreamResolution::Failed(error.to_string()),
    }
}

/// The answer of step 1 (reference §5.1), decided before the step by whoever knows the
/// upstream sources (the layer configuration, `spec.upstream`, the class): [`resolution`].
#[derive(Clone, Debug)]
pub enum UpstreamResolution {
    /// The Comb runs its service itself: the local path (5a).
    Local,
    /// The Comb borrows its service from an upstream: the upstream path (5b).
    Borrowed(Box<Borrowing>),
    /// Resolving failed with this message: Error / `UpstreamFailed`.
    Failed(String),
    /// `spec.upstream` names what the layer does not allow, as this message says: Error /
    /// `UpstreamForbidden`, before anything is read or written.
    Forbidden(String),
}

impl UpstreamResolution {
    /// Why there is no upstream to use, as a sentence: `None` when local or borrowing.
    pub fn failure(&self) -> Option<String> {
        match self {
            UpstreamResolution::Local | UpstreamResolution::Borrowed(_) => None,
            UpstreamResolution::Failed(message) => {
                Some(format!("resolving the upstream failed: {message}"))
            }
            UpstreamResolution::Forbidden(message) => Some(message.clone()),
        }
    }
}
