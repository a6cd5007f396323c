//! The [`Upstream`] contract (reference §5.2) and what an upstream gets to know about its Comb.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use comb_api::{Comb, Endpoint, LabelKeys, ManagedObject, Phase, Reason};
use comb_kubeconfigs::ClientPool;

use crate::error::Result;

/// Where a Comb borrows its service from.
///
/// Upstreams report that they cannot be reached with `reachable: false` in their status, never
/// with an error: an error from [`Upstream::status`] is a fault of the upstream itself (the Comb
/// becomes Error), unreachability only blocks the Comb.
#[async_trait]
pub trait Upstream: Send + Sync + fmt::Debug {
    /// The class name, as the status records it and messages show it
    /// (`Kubernetes::Comb::Upstream::K8s`).
    fn class_name(&self) -> &str;

    /// What the upstream says about itself now.
    async fn status(&self, ctx: &UpstreamContext) -> Result<UpstreamStatus>;

    /// What it offers: `cluster` is the address to use from inside the Comb's cluster, `external`
    /// the one from elsewhere (used when there is no `cluster`).
    async fn endpoints(&self, ctx: &UpstreamContext) -> Result<Vec<Endpoint>>;

    /// Copies what the Comb needs from the upstream into the Comb's namespace before the bridge
    /// is deployed, on every borrowing step, and returns the objects written (the Comb records
    /// them as its own, so they are pruned when borrowing ends). Default: nothing to copy.
    async fn replicate_into(&self, _ctx: &UpstreamContext) -> Result<Vec<ManagedObject>> {
        Ok(Vec::new())
    }

    /// What the upstream makes the controller read on the Comb's behalf, for the layer to judge
    /// when a Comb's own `spec.upstream` names it (its author is not trusted the way the layer
    /// configuration and the classes' code are). Default: [`Reads::Undeclared`], which only
    /// trusted sources may use; an upstream class a CR may name says what it reads.
    fn reads(&self, _ctx: &UpstreamContext) -> Reads {
        Reads::Undeclared
    }
}

/// What an upstream reads on its Comb's behalf ([`Upstream::reads`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Nothing in any cluster: its answers are its arguments (Static).
    Nothing,
    /// A peer Comb, and what is copied from its namespace.
    Peer(PeerReads),
    /// The upstream class does not say.
    Undeclared,
}

/// The peer Comb a K8s upstream reads and the objects it copies from the peer's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerReads {
    /// The kube context of the peer.
    pub context: String,
    /// The peer's namespace, where the copies come from.
    pub namespace: String,
    /// The objects copied into the Comb's namespace.
    pub replicas: Vec<crate::Replica>,
}

/// What [`Upstream::status`] answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamStatus {
    /// `false` blocks the Comb (`UpstreamUnreachable`).
    pub reachable: bool,
    /// The Comb is Running only while this is `Running`; `None` when the upstream has none yet.
    pub phase: Option<Phase>,
    /// The layers (kube contexts) the service comes through, nearest first.
    pub via: Option<Vec<String>>,
    /// The kube context of the upstream, recorded in the status and shown in messages.
    pub context: Option<String>,
    /// Why it is unreachable, or what else the Comb should say about it.
    pub message: Option<String>,
    /// Why it is in its phase (a peer Comb's Ready reason): tells a rollout (`Deployed`,
    /// `RolloutInProgress`) from an upstream that is Pending for other reasons.
    pub reason: Option<Reason>,
}

/// What an upstream needs to know about the Comb that borrows and where it runs.
#[derive(Clone)]
pub struct UpstreamContext {
    /// The Comb's name (also the default name of a K8s peer).
    pub name: String,
    /// The Comb's namespace (also the default namespace of a K8s peer, and where replicas go).
    pub namespace: String,
    /// The kube context the Comb runs in.
    pub context: String,
    /// One client per kube context; the Comb's own context is among them.
    pub pool: ClientPool,
    /// The API group of the Comb CRD (peers are read as Combs of this group).
    pub group: String,
    /// Label keys of the controller, for the labels of replicated objects.
    pub labels: LabelKeys,
    /// Value of `app.kubernetes.io/managed-by` on replicated objects.
    pub managed_by: String,
    /// The federation's layers: name -> kube context, for `layer: NAME` (empty outside one).
    pub layers: BTreeMap<String, String>,
    /// The user the copies are written as in the Comb's own context (its layer's
    /// `serviceAccount`, `system:serviceaccount:<namespace>:<name>`), as every write of the
    /// Comb's resources; `None`: the context's own user.
    pub act_as: Option<String>,
    /// Who reads the sources in the peer's cluster ([`SourceReader`]). Peer Combs are read as
    /// the context's own user (their status is what every Comb publishes).
    pub source_reader: SourceReader,
    /// The Comb's `status.managedResources`: what it made or took, by uid, which says whether
    /// a copy already in its namespace is its own ([`comb_api::ownership`]).
    pub record: Vec<ManagedObject>,
    /// Peer Comb CRs as a watch holds them (the federation controller's layers): a K8s
    /// upstream asks here first and reads the API server only for a peer no watch covers.
    pub peers: Option<Arc<dyn PeerCombs>>,
}

/// Who replication reads a source as, in the source's cluster: never an identity derived from
/// a namespace a Comb's author chose (a namespace of the same name in another cluster is
/// another tenant's, and its service account that tenant's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SourceReader {
    /// The source context's own user (the layer names no `serviceAccount`).
    #[default]
    Controller,
    /// This user, the borrowing layer's fixed identity (`system:serviceaccount:NS:NAME`).
    User(String),
    /// No identity may read sources: the layer's `serviceAccount` names an account in each
    /// Comb's own namespace, and nothing names one for the source's cluster. Says why and
    /// what to set.
    Unnamed(String),
}

/// Comb CRs a watch already holds, by kube context: what saves a borrowing step its read of
/// the peer (issue 12).
pub trait PeerCombs: Send + Sync + fmt::Debug {
    /// The CR `namespace/name` in kube context `context`, when a watch that has listed covers
    /// it and holds it; `None` means "read it from the API server" (the peer may still exist).
    fn peer(&self, context: &str, namespace: &str, name: &str) -> Option<Comb>;
}

impl fmt::Debug for UpstreamContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamContext")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("context", &self.context)
            .field("group", &self.group)
            .field("layers", &self.layers)
            .field("act_as", &self.act_as)
            .field("source_reader", &self.source_reader)
            .field("peers", &self.peers.is_some())
            .finish_non_exhaustive()
    }
}

impl UpstreamContext {
    /// The labels every object of the Comb carries.
    pub fn comb_labels(&self) -> BTreeMap<String, String> {
        self.labels
            .comb_labels(&self.name, &self.namespace, &self.managed_by)
    }
}
