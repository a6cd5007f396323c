//! The one error type of comb-federation, a variant per stage.
//!
//! Messages are the reference's (`comb-behavior.md`) wherever it names one; reconcile wraps them
//! into reasons (`rendering the manifests failed: <msg>` ...). [`Error::category`] is the
//! reference's failure category where it has one (`manifests`, `deploy`, `bridge`); the
//! variants are what code matches on (`Error::Bridge` is `BridgeImpossible`, any other a
//! `BridgeFailed`).

use comb_kubeconfigs::describe_error;

/// Everything that can go wrong in comb-federation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Comb that cannot be built from its CR: unknown class, no `spec.class`, a name that
    /// cannot be a label value, a stub that breaks its original's contract.
    #[error("{0}")]
    Build(String),

    /// Manifests that do not render or digest (reference category `manifests`).
    #[error("{0}")]
    Manifests(String),

    /// Endpoint declarations that do not resolve (`<Class>->endpoints: ...`).
    #[error("{0}")]
    Endpoints(String),

    /// A class's own lifecycle method failed (e.g. `check` could not look).
    #[error("{0}")]
    Class(String),

    /// An upstream that cannot be bridged (reference category `bridge`): Blocked, not Error.
    #[error("{0}")]
    Bridge(String),

    /// A deploy that failed (reference category `deploy`), with how many objects (the first
    /// ones, in manifest order) were stored before it.
    #[error("{message}")]
    Deploy { message: String, applied: usize },

    /// Reading or writing the status failed.
    #[error("{0}")]
    Status(String),

    /// A request to an API server failed; `message` keeps the server's own words, `source` the
    /// client's error (`None` when the request could not be made at all).
    #[error("Kubernetes API error ({request}): {message}")]
    Kube {
        request: String,
        message: String,
        #[source]
        source: Option<Box<kube::Error>>,
    },

    /// A value of comb-api that does not hold (an endpoint name, a reference, a CRD group).
    #[error(transparent)]
    Api(#[from] comb_api::Error),

    /// An upstream that cannot be resolved, asked or replicated from.
    #[error(transparent)]
    Upstream(#[from] comb_upstreams::Error),

    /// A Comb's own `spec.upstream` names what its layer does not let it read (another
    /// context or namespace, or copies); the message names the setting that would allow it.
    #[error("{0}")]
    UpstreamForbidden(String),

    /// A federation configuration that does not hold; the message names the file and each
    /// offending key (`comb.yaml: layers[2].borrow.from: unknown layer ...`).
    #[error("{0}")]
    Config(String),

    /// The controller could not start or keep running (admin address, leader election, ...).
    #[error("{0}")]
    Controller(String),

    /// The admission webhook could not start: its address, its certificate.
    #[error("{0}")]
    Webhook(String),

    /// An object whose fields comb reads hold something no reading gives a value to (an object
    /// where a number belongs): it is never read as if they were missing. Names the object and
    /// the field.
    #[error("{0}")]
    Unprojectable(String),
}

impl Error {
    /// A failed request, in the server's words ([`describe_error`]), keeping the client's error.
    pub fn kube(request: impl Into<String>, error: kube::Error) -> Error {
        Error::Kube {
            request: request.into(),
            message: describe_error(&error),
            source: Some(Box::new(error)),
        }
    }

    /// The HTTP status code the API server answered a failed request with, if it answered.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Kube {
                source: Some(source),
                ..
            } => match source.as_ref() {
                kube::Error::Api(status) => Some(status.code),
                _ => None,
            },
            _ => None,
        }
    }

    /// A short static name of the stage, for metric labels, logs and the reference's categories.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Build(_) => "build",
            Error::Manifests(_) => "manifests",
            Error::Endpoints(_) => "endpoints",
            Error::Class(_) => "class",
            Error::Bridge(_) => "bridge",
            Error::Deploy { .. } => "deploy",
            Error::Status(_) => "status",
            Error::Kube { .. } => "kube",
            Error::Api(inner) => inner.category(),
            Error::Upstream(inner) => inner.category(),
            Error::UpstreamForbidden(_) => "forbidden",
            Error::Config(_) => "config",
            Error::Controller(_) => "controller",
            Error::Webhook(_) => "webhook",
            Error::Unprojectable(_) => "unprojectable",
        }
    }
}

/// The result type of comb-federation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
