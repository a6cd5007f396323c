//! The request pattern of one Comb, counted by the sandbox (reference §12, DESIGN §10 "API
//! efficiency"): the first deploy, a settled step, a step after a change; and along the chain
//! prod <- staging <- dev, a settled step of each layer and one image edit of prod's Comb
//! (issue 12: a settled step writes nothing, an edit stays within its write budget). The
//! numbers are printed for the record
//! (`cargo test -p comb-federation --test engine_requests -- --nocapture`).

use std::collections::BTreeMap;

use comb_api::CombStatus;
use comb_federation::engine::borrow::Controlling;
use comb_testkit::engine::*;
use comb_testkit::fixtures::db_spec;
use comb_testkit::fixtures::*;
use comb_testkit::upstream::{DbChain, Layers};
use serde_json::{Value, json};

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Whether `request` (`<verb> <resource>`, maybe after `<cluster>: `) only read.
fn is_read(request: &str) -> bool {
    let request = request.rsplit(": ").next().unwrap_or(request);
    request.starts_with("get ") || request.starts_with("list ") || request.starts_with("watch ")
}

/// The requests that wrote (or tried to write) something.
fn writes(requests: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    requests
        .iter()
        .filter(|(request, _)| !is_read(request))
        .map(|(request, n)| (request.clone(), *n))
        .collect()
}

fn report(what: &str, requests: &BTreeMap<String, u64>) {
    let reads: u64 = requests
        .iter()
        .filter(|(key, _)| is_read(key))
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

    // First step: the live read (nothing there, so no Pod list), the write-ahead of the two
    // objects it makes (docs/adr/0004-ownership.md), two applies, the status.
    cluster.reset_requests();
    cluster.reconcile(&mut comb).await;
    let first = cluster.requests();
    report("first deploy", &first);
    assert_eq!(
        first,
        counts(&[
            ("list deployments.apps", 1),
            ("list services", 1),
            ("patch deployments.apps", 1),
            ("patch services", 1),
            (STATUS_WRITE, 2),
        ])
    );

    // Settled: three lists (Deployments, Services, Pods) and nothing else: the status found is
    // the one recorded, so it is not written again.
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
        ])
    );

    // A changed image: the same reads, one apply of the Deployment (the Service is as
    // rendered, so it is not written), the status.
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
    assert_eq!(
        writes(&changed),
        counts(&[("patch deployments.apps", 1), (STATUS_WRITE, 1)])
    );
}

fn running(status: &CombStatus) -> bool {
    let (phase, reason, _) = comb_testkit::fixtures::verdict(status);
    phase == "Running" && (reason == "Healthy" || reason == "Borrowed")
}

/// What the API servers of the chain were asked, both clusters together.
fn chain_requests(layers: &Layers) -> BTreeMap<String, u64> {
    let mut all = BTreeMap::new();
    for cluster in ["prod", "dev"] {
        for (request, n) in layers.requests(cluster) {
            *all.entry(format!("{cluster}: {request}")).or_default() += n;
        }
    }
    all
}

/// The write budget of one image edit of prod's Comb, along the whole chain.
const EDIT_WRITE_BUDGET: u64 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_chain_writes_nothing_and_an_edit_stays_within_budget() {
    let layers = Layers::start().await;
    let local = Controlling::none();
    let DbChain {
        mut prod,
        mut staging,
        mut dev,
        staging_borrows,
        dev_borrows,
    } = layers.db_chain().await;

    // prod runs and publishes its LoadBalancer address; staging bridges with an ExternalName
    // Service, dev (another server) with a Service and an EndpointSlice.
    layers.settle("prod", &mut prod, &local, running).await;
    layers
        .provide_load_balancer("prod", "platform", "db", "198.51.100.7")
        .await;
    let ip = layers
        .peek("prod", "v1", "Service", "platform", "db")
        .await
        .and_then(|service| {
            service
                .pointer("/status/loadBalancer/ingress/0/ip")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .expect("a LoadBalancer Service gets an ingress IP");
    let external = json!({"config": {"endpoints": [{"name": "postgres", "port": 5432, "external": format!("{ip}:5432")}]}});
    prod = layers.edit("prod", &prod, external).await;
    layers.settle("prod", &mut prod, &local, running).await;
    layers
        .settle("staging", &mut staging, &staging_borrows, running)
        .await;
    layers.settle("dev", &mut dev, &dev_borrows, running).await;

    // Settled: a step of each layer writes nothing anywhere.
    let mut verdicts = Vec::new();
    for (context, comb, controlling) in [
        ("prod", &mut prod, &local),
        ("staging", &mut staging, &staging_borrows),
        ("dev", &mut dev, &dev_borrows),
    ] {
        layers.reset_requests();
        let status = layers.step(context, comb, controlling).await;
        assert!(running(&status), "{context}: {status:#?}");
        verdicts.push((context, comb_testkit::fixtures::verdict(&status)));
        let requests = chain_requests(&layers);
        report(&format!("settled step of {context}"), &requests);
        assert_eq!(writes(&requests), BTreeMap::new(), "{context}");
    }

    // One image edit of prod's Comb (the CR edit itself is the user's), carried through the
    // chain as a controller woken by the edit and by the end of the rollout would: a step of
    // prod, the rollout, prod until it runs again, then staging and dev. Each step that finds
    // another verdict writes its status once; the rest writes nothing.
    let mut manifests = db_spec("LoadBalancer", Some(&format!("{ip}:5432")));
    manifests["config"]["manifests"][0]["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("postgres:17.1");
    prod = layers
        .edit("prod", &prod, json!({"config": manifests["config"]}))
        .await;
    layers.reset_requests();
    let mut transitions = 0;
    let mut step = async |context: &'static str,
                          comb: &mut comb_federation::engine::class::CombInstance,
                          controlling: &Controlling| {
        let status = layers.step(context, comb, controlling).await;
        let verdict = (context, comb_testkit::fixtures::verdict(&status));
        let before = verdicts.iter().rev().find(|(c, _)| *c == context);
        if before != Some(&verdict) {
            transitions += 1;
            verdicts.push(verdict);
        }
        status
    };
    step("prod", &mut prod, &local).await;
    comb_testkit::wait_until("prod's rollout to finish", async || {
        match layers
            .peek("prod", "apps/v1", "Deployment", "platform", "db")
            .await
        {
            Some(deployment) if rolled_out(&deployment) => Ok(()),
            other => Err(other),
        }
    })
    .await;
    for (context, comb, controlling) in [
        ("prod", &mut prod, &local),
        ("staging", &mut staging, &staging_borrows),
        ("dev", &mut dev, &dev_borrows),
    ] {
        let step = &mut step;
        comb_testkit::wait_until(format!("{context} to run again"), async || {
            let status = step(context, comb, controlling).await;
            if running(&status) {
                Ok(())
            } else {
                Err(status)
            }
        })
        .await;
    }
    let edit = chain_requests(&layers);
    report("one image edit along the chain", &edit);
    println!("the verdicts along the chain, from the settled ones on: {verdicts:#?}");
    let written = writes(&edit);
    assert_eq!(
        written
            .get("prod: update combs.comb.internal/status")
            .copied()
            .unwrap_or(0)
            + written
                .get("dev: update combs.comb.internal/status")
                .copied()
                .unwrap_or(0),
        transitions,
        "one status write per new verdict: {written:?}"
    );
    let total: u64 = written.values().sum();
    assert!(
        total <= EDIT_WRITE_BUDGET,
        "{total} writes for one edit (budget {EDIT_WRITE_BUDGET}): {written:?}"
    );
    let image = layers
        .peek("prod", "apps/v1", "Deployment", "platform", "db")
        .await
        .map(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].clone());
    assert_eq!(image, Some(json!("postgres:17.1")));
}

/// Whether a Deployment's controller is through with its spec: every replica updated and
/// available, and no old one left.
fn rolled_out(deployment: &Value) -> bool {
    let number = |pointer: &str| deployment.pointer(pointer).and_then(Value::as_i64);
    let wanted = number("/spec/replicas").unwrap_or(1);
    number("/status/observedGeneration") >= number("/metadata/generation")
        && number("/status/updatedReplicas") == Some(wanted)
        && number("/status/availableReplicas") == Some(wanted)
        && number("/status/replicas") == Some(wanted)
}
