//! comb-upstreams: the places a Comb can borrow its service from (reference §5).
//!
//! - [`Upstream`]: the contract (status, endpoints, optional replication), with
//!   [`UpstreamStatus`] and the [`UpstreamContext`] an upstream gets;
//! - [`UpstreamClasses`]: resolution of an answer (`spec.upstream`, a class's `upstream`, the
//!   layer configuration) into [`Resolved::Local`] or an upstream, with the reference's errors;
//! - [`Static`] (`Kubernetes::Comb::Upstream::Static`): fixed endpoints and status;
//! - [`K8s`] (`Kubernetes::Comb::Upstream::K8s`): the peer Comb in another kube context, read
//!   through the client pool, with replication of Secrets and ConfigMaps ([`Replica`]).
//!
//! Upstream classes are reported by their canonical, reference-compatible names
//! (`Kubernetes::Comb::Upstream::K8s`), which is what `status.upstream.class` records and what
//! CRs written for the Perl library name; the short names `K8s` and `Static` are accepted too.

mod args;
mod error;
mod k8s;
mod replicate;
mod resolve;
mod static_upstream;
mod upstream;

pub use error::{Error, Result};
pub use k8s::{K8S_CLASS, K8s, PEER_READ_TIMEOUT, usable_address};
pub use replicate::{Replica, ReplicaKind};
pub use resolve::{Resolved, UPSTREAM_NAMESPACE, UpstreamClasses, UpstreamFactory};
pub use static_upstream::{STATIC_CLASS, Static};
pub use upstream::{
    PeerCombs, PeerReads, Reads, SourceReader, Upstream, UpstreamContext, UpstreamStatus,
};

/// A context for unit tests: Comb `platform/db` running in context `dev`, with contexts `prod`,
/// `staging` (prod's server) and `dev` (its own), and layers `production` and `development`.
#[cfg(test)]
pub(crate) mod testing {
    use comb_api::LabelKeys;
    use comb_kubeconfigs::ClientPool;
    use kube::config::Kubeconfig;

    use crate::{SourceReader, UpstreamContext};

    const KUBECONFIG: &str = r#"
clusters:
  - name: prod
    cluster: {server: "http://127.0.0.1:1"}
  - name: dev
    cluster: {server: "http://127.0.0.1:2"}
contexts:
  - name: prod
    context: {cluster: prod}
  - name: staging
    context: {cluster: prod, namespace: staging}
  - name: dev
    context: {cluster: dev}
"#;

    pub(crate) fn context() -> UpstreamContext {
        let kubeconfig = Kubeconfig::from_yaml(KUBECONFIG).expect("test kubeconfig");
        UpstreamContext {
            name: "db".into(),
            namespace: "platform".into(),
            context: "dev".into(),
            pool: ClientPool::from_kubeconfig(kubeconfig, "test kubeconfig"),
            group: comb_api::DEFAULT_GROUP.into(),
            labels: LabelKeys::default(),
            managed_by: "comb".into(),
            layers: [("production", "prod"), ("development", "dev")]
                .into_iter()
                .map(|(layer, context)| (layer.to_string(), context.to_string()))
                .collect(),
            act_as: None,
            source_reader: SourceReader::Controller,
            record: Vec::new(),
            peers: None,
        }
    }
}
