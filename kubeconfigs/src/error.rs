//! The crate's one error type.

use std::path::PathBuf;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong between a kubeconfig and a client. Every message names the file or the
/// context concerned, so that the user knows where to look.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kubeconfig file could not be read or parsed.
    #[error("reading the kubeconfig {path} failed: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What kube said about it.
        message: String,
    },

    /// No kubeconfig was found and this process does not run in a cluster either.
    #[error(
        "no kubeconfig found: set $KUBECONFIG, create ~/.kube/config, or run inside a cluster ({in_cluster})"
    )]
    NoConfiguration {
        /// Why the in-cluster configuration could not be loaded.
        in_cluster: String,
    },

    /// A context was asked for that the configuration does not define.
    #[error("context {context} is not in {origin}")]
    UnknownContext {
        /// The context asked for.
        context: String,
        /// Where the contexts came from, e.g. `the kubeconfig /home/me/.kube/config`.
        origin: String,
    },

    /// A context names a cluster entry that does not exist or has no server.
    #[error("context {context} names the cluster {cluster}, which has no server in {origin}")]
    NoServer {
        /// The context.
        context: String,
        /// The cluster entry it names.
        cluster: String,
        /// Where the contexts came from.
        origin: String,
    },

    /// The configuration names no current context and none was given.
    #[error("{origin} names no current context: pass a context explicitly")]
    NoCurrentContext {
        /// Where the contexts came from.
        origin: String,
    },

    /// Building the client of a context failed (bad certificates, bad server URL, ...).
    #[error("building the client for context {context} failed: {message}")]
    Build {
        /// The context.
        context: String,
        /// What kube said.
        message: String,
    },
}

impl Error {
    /// A short static name of the error kind, for metric labels.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::NoConfiguration { .. } => "no-configuration",
            Error::UnknownContext { .. } => "unknown-context",
            Error::NoServer { .. } => "no-server",
            Error::NoCurrentContext { .. } => "no-current-context",
            Error::Build { .. } => "build",
        }
    }
}
