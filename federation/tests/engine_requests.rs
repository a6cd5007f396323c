//! The request pattern of one Comb, counted by the sandbox (reference §12, DESIGN §10 "API
//! efficiency"): the first deploy, a settled step, a step after a change. The numbers are
//! printed for the record (`cargo test -p comb-federation --test engine_requests -- --nocapture`).

mod engine_support;

use std::collections::BTreeMap;

use engine_support::*;

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn report(what: &str, requests: &BTreeMap<String, u64>) {
    let reads: u64 = requests
        .iter()
        .filter(|(key, _)| key.starts_with("get ") || key.starts_with("list "))
        .map(|(_, n)| n)
        .sum();
    let total: u64 = requests.values().sum();
    println!(
        "{what}: {reads} read(s), {} write(s): {requests:?}",
        total - reads
    );
}

#[tokio::test]
async fn requests_per_step() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![deployment("nats", "nats:2"), service("nats", 4222)]),
        )
        .await;

    // First step: the live read (nothing there, so no Pod list), two creates, the status.
    cluster.reset_requests();
    cluster.reconcile(&mut comb).await;
    let first = cluster.requests();
    report("first deploy", &first);
    assert_eq!(
        first,
        counts(&[
            ("list deployments.apps", 1),
            ("list services", 1),
            ("create deployments.apps", 1),
            ("create services", 1),
            (STATUS_WRITE, 1),
        ])
    );

    // Settled: three lists (Deployments, Services, Pods) and the status write, nothing else.
    cluster.settle(&mut comb).await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(verdict(&status), expect("Running", "Healthy", "healthy"));
    let settled = cluster.requests();
    report("settled step", &settled);
    assert_eq!(
        settled,
        counts(&[
            ("list deployments.apps", 1),
            ("list services", 1),
            ("list pods", 1),
            (STATUS_WRITE, 1),
        ])
    );

    // A changed image: the same reads, two replaces carrying the live resourceVersion (no
    // extra get), the status.
    let mut comb = cluster
        .edit(
            &comb,
            manifests_spec(vec![deployment("nats", "nats:2.10"), service("nats", 4222)]),
        )
        .await;
    cluster.reset_requests();
    cluster.reconcile(&mut comb).await;
    let changed = cluster.requests();
    report("after a change", &changed);
    let writes: u64 = changed
        .iter()
        .filter(|(key, _)| key.starts_with("update ") && key.as_str() != STATUS_WRITE)
        .map(|(_, n)| n)
        .sum();
    assert!(writes >= 2, "{changed:?}");
    assert_eq!(changed.get(STATUS_WRITE), Some(&1));
    assert!(
        !changed
            .keys()
            .any(|key| key.starts_with("create ") || key.starts_with("delete "))
    );
}
