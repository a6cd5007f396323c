//! The one error type of comb-federation, a variant per stage.
//!
//! Messages are the reference's (`comb-behavior.md`) wherever it names one; reconcile wraps them
//! into reasons (`rendering the manifests failed: <msg>` ...). [`Error::category`] is the
//! reference's failure category where it has one (`manifests`, `deploy`, `bridge`); the
//! variants are what code matches on (`Error::Bridge` is `BridgeImpossible`, any other a
//! `BridgeFailed`).

use comb_kubeconfigs::describe_error;

/// Everything that can go wrong in comb-federation.
///
/// A stage's error (build, manifests, endpoints, class) carries the whole sentence the reference
/// prints as its `message` (a wrapped error's words included, so the sentence reads the same
/// whether or not it wraps one) and the error it wraps as its typed `source`, so that code
/// matching on a cause ([`Error::status_code`]) finds it through the stages.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Error {
    /// A Comb that cannot be built from its CR: unknown class, no `spec.class`, a name that
    /// cannot be a label value, a stub that breaks its original's contract.
    #[error("{message}")]
    Build {
        message: String,
        #[source]
        source: Option<Box<Error>>,
    },

    /// Manifests that do not render or digest (reference category `manifests`).
    #[error("{message}")]
    Manifests {
        message: String,
        #[source]
        source: Option<Box<Error>>,
    },

    /// Endpoint declarations that do not resolve (`<Class>->endpoints: ...`).
    #[error("{message}")]
    Endpoints {
        message: String,
        #[source]
        source: Option<Box<Error>>,
    },

    /// A class's own lifecycle method failed (e.g. `check` could not look).
    #[error("{message}")]
    Class {
        message: String,
        #[source]
        source: Option<Box<Error>>,
    },

    /// An upstream that cannot be bridged (reference category `bridge`): Blocked, not Error.
    #[error("{0}")]
    Bridge(String),

    /// A deploy that failed (reference category `deploy`), with the objects (the first ones,
    /// in manifest order, with their uids) stored before it, and the error that stopped it.
    #[error("{message}")]
    Deploy {
        message: String,
        applied: Vec<comb_api::ManagedObject>,
        #[source]
        source: Option<Box<Error>>,
    },

    /// An object comb would write or delete exists and is not the Comb's
    /// ([`comb_api::ownership`]): left untouched. The message names it, who wrote it, and how
    /// its owner hands it over.
    #[error("{0}")]
    #[strum(serialize = "ownership")]
    NotOwned(String),

    /// A request an API server answered with a failure, or that could not reach it; `message`
    /// keeps the server's own words ([`describe_error`]), `source` the client's error.
    #[error("Kubernetes API error ({request}): {message}")]
    Kube {
        request: String,
        message: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// A request comb did not send, because what it would ask cannot be right (a namespaced
    /// object without a namespace, a delete of a cluster-scoped object), or whose answer it
    /// could not read; the API server said nothing.
    #[error("{request}: {message}")]
    Request { request: String, message: String },

    /// A value of comb-api that does not hold (an endpoint name, a reference, a CRD group).
    #[error(transparent)]
    #[strum(disabled)]
    Api(#[from] comb_api::Error),

    /// An upstream that cannot be resolved, asked or replicated from.
    #[error(transparent)]
    #[strum(disabled)]
    Upstream(#[from] comb_upstreams::Error),

    /// A Comb's own `spec.upstream` names what its layer does not let it read (another
    /// context or namespace, or copies); the message names the setting that would allow it.
    #[error("{0}")]
    #[strum(serialize = "forbidden")]
    UpstreamForbidden(String),

    /// A layer on demand whose cluster did not take its credentials, or did not answer: only
    /// that layer is not Ready (`CredentialsInvalid`); `fix` says what to change.
    #[error(
        "the API server of context {context} did not take the layer's credentials: {message}; {fix}"
    )]
    Credentials {
        context: String,
        message: String,
        fix: String,
        #[source]
        source: Box<Error>,
    },

    /// A value written on the command line or in the configuration that does not parse (a
    /// duration, a context, a Service's name); the message says what it should look like.
    #[error("{0}")]
    Value(String),

    /// A federation configuration that does not hold; the message names the file and each
    /// offending key (`comb.yaml: layers[2].borrow.from: unknown layer ...`).
    #[error("{0}")]
    Config(String),

    /// The controller could not start or keep running (admin address, leader election, ...),
    /// or an operation of the CLI found nothing to act on; `source` is the failure it wraps.
    #[error("{message}")]
    Controller {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// The admission webhook could not start: its address, its certificate; `source` is the
    /// failure it wraps.
    #[error("{message}")]
    Webhook {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// A kube context could not be turned into a client (`what` says which and why comb
    /// wanted it).
    #[error("{what}: {source}")]
    Kubeconfig {
        what: String,
        #[source]
        source: comb_kubeconfigs::Error,
    },

    /// The client that impersonates a layer's `serviceAccount` for a Comb's writes could not be
    /// made.
    #[error("layer {layer}: {source}")]
    #[strum(serialize = "impersonation")]
    Impersonation {
        layer: String,
        user: String,
        #[source]
        source: comb_kubeconfigs::Error,
    },

    /// An object whose fields comb reads hold something no reading gives a value to (an object
    /// where a number belongs): it is never read as if they were missing. Names the object and
    /// the field.
    #[error("{0}")]
    Unprojectable(String),
}

/// The constructors of the stage errors: one of comb's own sentences, or a wrapped error kept
/// as the source (its words are the message).
macro_rules! stage_constructors {
    ($($variant:ident: $own:ident, $wrapping:ident;)*) => {
        impl Error {
            $(
                #[doc = concat!("An [`Error::", stringify!($variant), "`] of comb's own words.")]
                pub fn $own(message: impl Into<String>) -> Error {
                    Error::$variant { message: message.into(), source: None }
                }

                #[doc = concat!("An [`Error::", stringify!($variant), "`] wrapping `source`, in its words.")]
                pub fn $wrapping(source: Error) -> Error {
                    Error::$variant { message: source.to_string(), source: Some(Box::new(source)) }
                }
            )*
        }
    };
}

stage_constructors! {
    Build: build, build_from;
    Manifests: manifests, manifests_from;
    Endpoints: endpoints, endpoints_from;
    Class: class, class_from;
}

/// The constructors of the errors that stop comb itself (the controller, the webhook): one of
/// comb's own sentences, or one followed by what a wrapped failure of any type says, keeping it.
macro_rules! running_constructors {
    ($($variant:ident: $own:ident, $wrapping:ident;)*) => {
        impl Error {
            $(
                #[doc = concat!("An [`Error::", stringify!($variant), "`] of comb's own words.")]
                pub fn $own(message: impl Into<String>) -> Error {
                    Error::$variant { message: message.into(), source: None }
                }

                #[doc = concat!("An [`Error::", stringify!($variant), "`] saying `message`, then what `source` says, and keeping it.")]
                pub fn $wrapping(
                    message: impl Into<String>,
                    source: impl std::error::Error + Send + Sync + 'static,
                ) -> Error {
                    Error::$variant {
                        message: format!("{}: {source}", message.into()),
                        source: Some(Box::new(source)),
                    }
                }
            )*
        }
    };
}

running_constructors! {
    Controller: controller, controller_from;
    Webhook: webhook, webhook_from;
}

impl Error {
    /// A failed request, in the server's words ([`describe_error`]), keeping the client's error.
    pub fn kube(request: impl Into<String>, error: kube::Error) -> Error {
        Error::Kube {
            request: request.into(),
            message: describe_error(&error),
            source: Box::new(error),
        }
    }

    /// A request comb did not send, or whose answer it could not read ([`Error::Request`]).
    pub fn request(request: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Request {
            request: request.into(),
            message: message.into(),
        }
    }

    /// The HTTP status code the API server answered a failed request with, if it answered,
    /// also where a stage wraps that request's error.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(status) => Some(status.code),
                _ => None,
            },
            Error::Build { source, .. }
            | Error::Manifests { source, .. }
            | Error::Endpoints { source, .. }
            | Error::Class { source, .. }
            | Error::Deploy { source, .. } => source.as_deref().and_then(Error::status_code),
            _ => None,
        }
    }

    /// A short static name of the stage, for metric labels, logs and the reference's
    /// categories: the variant's name in lower case (`forbidden` for an upstream the layer
    /// does not allow), or the wrapped crate's own category.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Api(inner) => inner.category(),
            Error::Upstream(inner) => inner.category(),
            other => other.into(),
        }
    }
}

/// The result type of comb-federation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    fn forbidden() -> Error {
        let status =
            kube::core::Status::failure("secrets is forbidden", "Forbidden").with_code(403);
        Error::kube("get Secret", kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn each_variant_names_its_category() {
        let cases = [
            (Error::build("b"), "build"),
            (Error::manifests("m"), "manifests"),
            (Error::endpoints("e"), "endpoints"),
            (Error::class("c"), "class"),
            (Error::Bridge("b".into()), "bridge"),
            (
                Error::Deploy {
                    message: "d".into(),
                    applied: Vec::new(),
                    source: None,
                },
                "deploy",
            ),
            (Error::NotOwned("n".into()), "ownership"),
            (forbidden(), "kube"),
            (Error::request("get Pod", "no namespace"), "request"),
            (Error::UpstreamForbidden("u".into()), "forbidden"),
            (
                Error::Credentials {
                    context: "dev".into(),
                    message: "401".into(),
                    fix: "fix it".into(),
                    source: Box::new(forbidden()),
                },
                "credentials",
            ),
            (Error::Config("c".into()), "config"),
            (Error::Value("v".into()), "value"),
            (Error::controller("c"), "controller"),
            (Error::webhook("w"), "webhook"),
            (
                Error::Impersonation {
                    layer: "dev".into(),
                    user: "system:serviceaccount:platform:writer".into(),
                    source: comb_kubeconfigs::Error::UnknownContext {
                        context: "dev".into(),
                        origin: "the kubeconfig".into(),
                    },
                },
                "impersonation",
            ),
            (Error::Unprojectable("u".into()), "unprojectable"),
            (
                Error::Upstream(comb_upstreams::Error::Unreachable("down".into())),
                "unreachable",
            ),
        ];
        for (error, category) in cases {
            assert_eq!(error.category(), category, "{error:?}");
        }
    }

    #[test]
    fn a_stage_keeps_the_error_it_wraps_and_its_words() {
        let wrapped = Error::class_from(forbidden());
        assert_eq!(wrapped.to_string(), forbidden().to_string());
        assert_eq!(wrapped.status_code(), Some(403));
        let source = wrapped.source().expect("the wrapped error is the source");
        assert_eq!(source.to_string(), forbidden().to_string());
        // Two stages deep: the build of a Comb whose class failed on a 403.
        assert_eq!(Error::build_from(wrapped).status_code(), Some(403));
        assert_eq!(Error::build("unknown class").status_code(), None);
    }

    #[test]
    fn a_request_comb_did_not_send_is_no_api_error() {
        let error = Error::request(
            "get ConfigMap",
            "ConfigMap nats is namespaced, but no namespace was given",
        );
        assert_eq!(
            error.to_string(),
            "get ConfigMap: ConfigMap nats is namespaced, but no namespace was given"
        );
        assert_eq!(error.status_code(), None);
    }
}
