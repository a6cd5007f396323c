//! Calls from inside Pods of the sandbox network (`--backend kube --network`), for the tests that
//! prove a data path by traffic: each check repeats its call and requires the expected answer
//! [`CALLS`] times in a row, once the data path followed the objects (kube-proxy syncs at most
//! once a second, and during a switch both sides may answer for a moment).

use std::time::Duration;

use comb_sandbox::real::network::{
    CallOutcome, ClusterNetwork, Failure, NetworkOptions, ProxyMode,
};
use comb_sandbox::real::{network_available_or_skip, record_skip};

use crate::Backend;

/// How many calls a check makes once the first was answered as expected.
pub const CALLS: usize = 20;

/// The network options of a test, when the network can run here: on the real backend
/// (`COMB_TEST_BACKEND=kube`), as root, with kube-proxy, CoreDNS and the proxy mode's tool. Else
/// `None`, and the test says why it skips (on stderr and in `$COMB_SKIP_LOG`).
pub fn options_or_skip(
    test: &str,
    proxy_mode: ProxyMode,
    clusters: usize,
) -> Option<NetworkOptions> {
    if Backend::from_env() != Backend::Kube {
        record_skip(&format!(
            "{test}: skipped: the sandbox network runs on the real backend (COMB_TEST_BACKEND=kube)"
        ));
        return None;
    }
    let options = NetworkOptions {
        identity_bin: Some(crate::bin::identity_path().to_path_buf()),
        proxy_mode,
    };
    network_available_or_skip(test, &options, clusters).then_some(options)
}

fn limit() -> Duration {
    crate::deadline()
}

/// Calls `target` from Pod `namespace/pod` until it is answered [`CALLS`] times in a row by a
/// Pod whose identity starts with `answered_by` (`cluster/namespace/` or a whole
/// `cluster/namespace/pod`), within the kit's deadline: those calls.
pub async fn expect_answers(
    network: &ClusterNetwork,
    namespace: &str,
    pod: &str,
    target: &str,
    answered_by: &str,
) -> Vec<CallOutcome> {
    let expected = |outcome: &CallOutcome| {
        outcome
            .answered_by
            .as_deref()
            .is_some_and(|by| by.starts_with(answered_by))
    };
    let calls = network
        .calls_once_converged(namespace, pod, target, CALLS, limit(), expected)
        .await;
    assert!(
        calls.converged,
        "{namespace}/{pod} -> {target}: never answered by {answered_by}* within {:?}; the last call: {:?}",
        limit(),
        calls.outcomes
    );
    let wrong: Vec<&CallOutcome> = calls.outcomes.iter().filter(|o| !expected(o)).collect();
    assert!(
        wrong.is_empty(),
        "{namespace}/{pod} -> {target}: {} of {CALLS} calls not answered by {answered_by}*: {wrong:?}",
        wrong.len()
    );
    calls.outcomes
}

/// Calls `target` from Pod `namespace/pod` until it fails with `failure` [`CALLS`] times in a
/// row (nothing answers), within the kit's deadline: those calls.
pub async fn expect_failures(
    network: &ClusterNetwork,
    namespace: &str,
    pod: &str,
    target: &str,
    failure: Failure,
) -> Vec<CallOutcome> {
    let expected = |outcome: &CallOutcome| outcome.failure == Some(failure);
    let calls = network
        .calls_once_converged(namespace, pod, target, CALLS, limit(), expected)
        .await;
    assert!(
        calls.converged,
        "{namespace}/{pod} -> {target}: never failed with {failure:?} within {:?}; the last call: {:?}",
        limit(),
        calls.outcomes
    );
    let wrong: Vec<&CallOutcome> = calls.outcomes.iter().filter(|o| !expected(o)).collect();
    assert!(
        wrong.is_empty(),
        "{namespace}/{pod} -> {target}: {} of {CALLS} calls did not fail with {failure:?}: {wrong:?}",
        wrong.len()
    );
    calls.outcomes
}
