//! The words a Comb's status speaks: its [`Phase`] and the [`Reason`] of a condition or a live
//! status, each serialised to the reference's exact string (§1.3, §6.9, §8).
//!
//! Both are open: a word this version does not know (a status written by a newer comb, a reason
//! Kubernetes gives a pod) decodes as `Other` and serialises back unchanged, so reading a status
//! never fails on its words. [`From<&str>`] always picks the named variant when there is one, so
//! `Other` never holds a known word.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An open set of words: named variants, each with its exact string, and `Other` for the rest.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A word this version does not know, kept as it was read.
            Other(String),
        }

        impl $name {
            /// The exact string the reference writes.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                    $name::Other(word) => word,
                }
            }
        }

        impl From<&str> for $name {
            fn from(word: &str) -> Self {
                match word {
                    $(stringify!($variant) => $name::$variant,)+
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl From<String> for $name {
            fn from(word: String) -> Self {
                match $name::from(word.as_str()) {
                    $name::Other(_) => $name::Other(word),
                    known => known,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                String::deserialize(deserializer).map($name::from)
            }
        }
    };
}

words! {
    /// The phase of a Comb. Reconcile records the first seven in `status.phase`; `Stopped` and
    /// `NotDeployed` are only what the cluster shows now (reference §8), never recorded.
    Phase {
        Running,
        Pending,
        Blocked,
        NeedsConfig,
        Disabled,
        Error,
        /// `spec.maintenance` stops reconciliation.
        Maintenance,
        /// As `stop` leaves a Comb.
        Stopped,
        /// None of the rendered resources exists.
        NotDeployed,
    }
}

words! {
    /// Why a Comb is in its phase: the reason of its `Ready` condition (and of the other
    /// conditions), or of its live status. The reference's catalogue (§6.9) plus what the live
    /// status (§8) and the federation (build, tenancy, maintenance) add; a pod's or a Job's own
    /// reason from Kubernetes (`CrashLoopBackOff`, `BackoffLimitExceeded`) is `Other`.
    Reason {
        // Reconcile (§6.9).
        UpstreamFailed,
        Disabled,
        NoResolver,
        DependencyNotFound,
        DependencyInvalid,
        DependencyNotReady,
        ResolverFailed,
        DependenciesFailed,
        MissingPrerequisites,
        CheckFailed,
        ManifestsFailed,
        StatusFailed,
        DeployFailed,
        Deployed,
        Healthy,
        UpstreamUnreachable,
        UpstreamLoop,
        UpstreamEndpointsMissing,
        BridgeImpossible,
        BridgeFailed,
        ReplicationFailed,
        Borrowed,
        UpstreamNotRunning,
        /// Pending while the upstream rolls out (it is Pending `Deployed` or
        /// `RolloutInProgress`, or its own upstream rolls out).
        UpstreamRollingOut,
        EndpointsFailed,
        ReconcileFailed,
        // Conditions other than Ready.
        NotChecked,
        Complete,
        WriteFailed,
        /// `UpstreamFallback` True: the preferred upstream is unhealthy.
        UpstreamUnhealthy,
        /// `UpstreamFallback` False: borrowing from the preferred upstream.
        PreferredUpstream,
        // The federation's own.
        BuildFailed,
        ManifestForbidden,
        /// `spec.upstream` names a peer or copies its layer's `allowUpstreams` does not allow,
        /// or the layer's borrow names a peer outside the namespaces its source layer manages.
        UpstreamForbidden,
        /// An object the Comb would write (or a copy it would make) exists and is not the
        /// Comb's: it is left untouched.
        ResourceNotOwned,
        Maintenance,
        // The controller's own: steps that record no status, and its Events.
        /// Adding or removing comb's finalizer failed.
        FinalizerFailed,
        /// Deleting a Comb's objects failed; the finalizer stays.
        CleanupFailed,
        /// Cleanup waits for the other finalizers of the CR.
        OtherFinalizers,
        /// Cleanup done, the finalizer removed.
        CleanedUp,
        /// The CR was gone when its step came.
        Gone,
        /// The layer's shard Lease ended while the step ran: it is dropped.
        ShardLost,
        /// The Comb is in a dependency cycle (an Event).
        DependencyCycle,
        /// A prune left an object in place (an Event).
        PruneSkipped,
        /// A prune failed (an Event).
        PruneFailed,
        /// A borrower switched to a fallback (an Event).
        UpstreamFallback,
        /// A borrower on a fallback switched back to its preferred upstream (an Event).
        UpstreamRecovered,
        // The live status (§8).
        NotDeployed,
        Stopped,
        ResourcesMissing,
        ReplicasNotReady,
        RolloutInProgress,
        JobNotComplete,
        JobFailed,
    }
}

impl Reason {
    /// Whether a Pending Comb with this Ready reason is rolling out a change: it deployed one and
    /// waits for it (`Deployed`), its workload controllers carry one out (`RolloutInProgress`),
    /// or it borrows from an upstream that rolls out (`UpstreamRollingOut`).
    pub fn rolls_out(&self) -> bool {
        matches!(
            self,
            Reason::Deployed | Reason::RolloutInProgress | Reason::UpstreamRollingOut
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn known_words_are_their_variants_and_unknown_ones_survive_a_round_trip() {
        assert_eq!(Phase::from("NeedsConfig"), Phase::NeedsConfig);
        assert_eq!(Phase::NotDeployed.as_str(), "NotDeployed");
        assert_eq!(
            Reason::from("UpstreamNotRunning".to_string()),
            Reason::UpstreamNotRunning
        );
        assert_eq!(
            Reason::from("CrashLoopBackOff"),
            Reason::Other("CrashLoopBackOff".into())
        );

        let newer: Phase = serde_json::from_str(r#""Hibernating""#).unwrap();
        assert_eq!(newer, Phase::Other("Hibernating".into()));
        assert_eq!(serde_json::to_string(&newer).unwrap(), r#""Hibernating""#);
        assert_eq!(
            serde_json::to_string(&Reason::WriteFailed).unwrap(),
            r#""WriteFailed""#
        );
        assert!(Phase::Blocked == "Blocked");
    }
}
