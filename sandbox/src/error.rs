//! The crate's error type for starting and publishing sandboxes (API failures are
//! [`crate::ApiError`] values served to clients).

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the sandbox needs at least one cluster name")]
    NoClusters,

    #[error("cluster name {0:?} is used twice; give every cluster its own name")]
    DuplicateCluster(String),

    #[error(
        "context {context:?} names cluster {cluster:?}, which the sandbox does not start (clusters: {known})"
    )]
    UnknownContextCluster {
        context: String,
        cluster: String,
        known: String,
    },

    #[error("no cluster named {name:?} in this sandbox (clusters: {known})")]
    UnknownCluster { name: String, known: String },

    #[error("binding the API server of cluster {cluster:?} on 127.0.0.1 failed: {source}")]
    Bind {
        cluster: String,
        source: std::io::Error,
    },

    #[error("generating the sandbox's certificates failed: {0}")]
    Certificate(#[from] rcgen::Error),

    #[error("building the sandbox's TLS configuration failed: {0}")]
    Tls(#[from] rustls::Error),

    #[error("writing the kubeconfig {path} failed: {source}")]
    WriteKubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "the real-Kubernetes backend needs {binary} in {dir}, which is not there; build the binaries with tests/kube/build (Go 1.26 and the Go module proxy), or point COMB_KUBE_BIN at them"
    )]
    MissingBinary { binary: String, dir: PathBuf },

    #[error("{what} failed: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },

    #[error("the sandbox network cannot run here: {reason}")]
    NetworkUnavailable { reason: String },

    #[error("the real node cannot run here: {reason}")]
    RealNodeUnavailable { reason: String },

    #[error("the real backend places at most {max} clusters, and {count} were asked for")]
    TooManyClusters { count: usize, max: usize },

    #[error("{what} failed: {source}")]
    Netlink {
        what: String,
        source: rtnetlink::Error,
    },

    #[error("{component} of cluster {cluster:?} did not come up: {message} (its log: {log})")]
    ComponentFailed {
        cluster: String,
        component: String,
        message: String,
        log: PathBuf,
    },
}

impl Error {
    /// A short static label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Error::NoClusters
            | Error::DuplicateCluster(_)
            | Error::UnknownContextCluster { .. } => "options",
            Error::UnknownCluster { .. } => "unknown-cluster",
            Error::Bind { .. } => "bind",
            Error::Certificate(_) | Error::Tls(_) => "tls",
            Error::WriteKubeconfig { .. } => "kubeconfig",
            Error::MissingBinary { .. } => "missing-binary",
            Error::Io { .. } => "io",
            Error::NetworkUnavailable { .. } => "network-unavailable",
            Error::RealNodeUnavailable { .. } => "real-node-unavailable",
            Error::TooManyClusters { .. } => "options",
            Error::Netlink { .. } => "netlink",
            Error::ComponentFailed { .. } => "component",
        }
    }
}
