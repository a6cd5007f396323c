//! The one error type of comb-api.

/// Everything that can go wrong in comb-api: malformed values handed to constructors and parsers.
/// The messages are meant for users and say what a valid value looks like.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An endpoint name that cannot be a Service port name; the text is [`crate::name_problem`].
    #[error("Endpoint: {0}")]
    EndpointName(String),

    /// A `[LAYER:][NAMESPACE/]NAME` reference that does not parse.
    #[error("{0}")]
    Reference(String),

    /// A CRD argument (group) that cannot be used.
    #[error("crd: {0}")]
    CrdArgument(String),

    /// A Comb custom resource that does not parse as one.
    #[error("the custom resource is not a Comb: {0}")]
    Parse(#[from] serde_json::Error),
}

impl Error {
    /// A short static name of the variant, for metric labels and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Error::EndpointName(_) => "endpoint",
            Error::Reference(_) => "reference",
            Error::CrdArgument(_) => "crd",
            Error::Parse(_) => "parse",
        }
    }
}

/// The result type of comb-api.
pub type Result<T, E = Error> = std::result::Result<T, E>;
