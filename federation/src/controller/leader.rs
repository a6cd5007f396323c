//! Leader election by a Lease (kube-lease-manager), so that several replicas can run and one
//! reconciles.

use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};

/// Where the Lease lives and who this replica is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElection {
    /// The Lease's namespace (`POD_NAMESPACE`, else `default`).
    pub namespace: String,
    /// The Lease's name.
    pub lease: String,
    /// This replica's identity (the pod name, else host name and process id).
    pub identity: String,
    /// How long a lease holds without renewal, in seconds.
    pub duration_seconds: u64,
}

impl LeaderElection {
    /// The Lease `<managed_by>-controller` in `namespace`, held by `identity`, for 15 s.
    pub fn new(namespace: &str, managed_by: &str, identity: &str) -> LeaderElection {
        LeaderElection {
            namespace: namespace.to_string(),
            lease: format!("{managed_by}-controller"),
            identity: identity.to_string(),
            duration_seconds: 15,
        }
    }
}

/// The Lease duration and the renewal grace before it ends: a third of the duration, at least 1 s
/// and less than the duration (the lease manager refuses anything else).
fn lease_timing(duration_seconds: u64) -> (u64, u64) {
    let duration = duration_seconds.max(2);
    (duration, (duration / 3).clamp(1, duration - 1))
}

/// Leadership as it changes: `true` while this replica holds the Lease.
pub struct Leadership {
    pub changes: watch::Receiver<bool>,
    /// The task that keeps the Lease; dropping `changes` makes it release the Lease and end.
    pub task: JoinHandle<
        std::result::Result<
            kube_lease_manager::LeaseManager,
            kube_lease_manager::LeaseManagerError,
        >,
    >,
}

/// Starts competing for the Lease on `client`'s cluster.
pub async fn campaign(client: kube::Client, election: &LeaderElection) -> Result<Leadership> {
    let (duration, grace) = lease_timing(election.duration_seconds);
    let manager = LeaseManagerBuilder::new(client, &election.lease)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(duration)
        .with_grace(grace)
        .build()
        .await
        .map_err(|error| {
            Error::controller_from(
                format!(
                    "leader election with Lease {}/{} failed",
                    election.namespace, election.lease
                ),
                error,
            )
        })?;
    let (changes, task) = manager.watch().await;
    Ok(Leadership { changes, task })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_the_lease_manager_accepts() {
        for (asked, expected) in [
            (0, (2, 1)),
            (1, (2, 1)),
            (2, (2, 1)),
            (15, (15, 5)),
            (60, (60, 20)),
        ] {
            assert_eq!(lease_timing(asked), expected, "{asked}");
        }
        let election = LeaderElection::new("default", "comb", "pod-a");
        assert_eq!(election.lease, "comb-controller");
        assert_eq!(election.duration_seconds, 15);
    }
}
