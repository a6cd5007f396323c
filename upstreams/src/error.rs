//! The one error type of comb-upstreams.

/// What can go wrong with an upstream. Messages are complete sentences for a Comb's status:
/// the engine wraps them into its reasons (`resolving the upstream failed: <msg>`,
/// `reading the endpoints of <label> failed: <msg>`, `replicating from <label> failed: <msg>`).
/// They name objects and keys, never the values of Secrets or ConfigMaps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An answer of a resolution source that names no usable upstream: no or an unknown class,
    /// unknown keys, values of the wrong type (`spec.upstream names no class`).
    #[error("{0}")]
    Resolve(String),

    /// The peer could not be read, so there is nothing to borrow (the K8s upstream's endpoints
    /// while it is unreachable; its status reports the same as `reachable: false`).
    #[error("{0}")]
    Unreachable(String),

    /// An upstream answered something that does not hold (e.g. an endpoint with an invalid name).
    #[error("{0}")]
    Answer(String),

    /// Copying a Secret or ConfigMap from the upstream into the Comb's namespace failed.
    #[error("{0}")]
    Replication(String),

    /// An object of the copy's name in the Comb's namespace is not the Comb's
    /// ([`comb_api::ownership`]): left untouched. The message names it and whose it looks like.
    #[error("{0}")]
    NotOwned(String),

    /// Copying stopped at `error` after the copies `made` were written: those are the Comb's,
    /// and its record must hold them (with their uids), or the next step would find them
    /// not the Comb's.
    #[error("{error}")]
    Partial {
        made: Vec<comb_api::ManagedObject>,
        error: Box<Error>,
    },
}

impl Error {
    /// A short static name of the variant, for metric labels and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Resolve(_) => "resolve",
            Error::Unreachable(_) => "unreachable",
            Error::Answer(_) => "answer",
            Error::Replication(_) => "replication",
            Error::NotOwned(_) => "ownership",
            Error::Partial { error, .. } => error.category(),
        }
    }
}

impl Error {
    /// The copies written before the error, and the error itself.
    pub fn split_made(self) -> (Vec<comb_api::ManagedObject>, Error) {
        match self {
            Error::Partial { made, error } => (made, *error),
            other => (Vec::new(), other),
        }
    }
}

/// The result type of comb-upstreams.
pub type Result<T, E = Error> = std::result::Result<T, E>;
