//! comb-kubeconfigs: one kube client per context, built lazily and kept.
//!
//! [`ClientPool`] reads a kubeconfig (a file, `$KUBECONFIG` and `~/.kube/config`, or the
//! in-cluster service account) and hands out one `kube::Client` per context. Everything a caller
//! needs to know about a context without talking to it (its server URL for same-API-server
//! detection, its default namespace) is answered from the configuration.

mod error;
mod pool;
mod words;
pub mod write;

pub use error::{Error, Result};
pub use pool::{ClientPool, IN_CLUSTER_CONTEXT};
pub use words::describe_error;
