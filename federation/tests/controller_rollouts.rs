//! What one image edit looks like along a chain prod <- staging <- dev (issue 11): the edited
//! Comb and each borrower go Pending once and are Running again once the rollout is over, for a
//! Deployment and for a StatefulSet, with the real workload controllers' timing on the real
//! backend; and an edit that fixes a crash loop is Pending while it rolls out, not Error
//! (issue 19). Phases are counted as the controller records them (its transitions: one per
//! status write that changes the phase or the Ready reason).

mod controller_support;

use std::collections::BTreeMap;

use comb_federation::controller::{ControllerHandle, Transition};
use comb_testkit::fixtures::{held_web, release_held_pods, web};
use controller_support::World;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// prod and staging (namespace staging) share a server, as in the demo; dev is another one and
/// reaches the upstream by its external address.
const CONFIG: &str = "resync: 1h
layers:
 - {name: prod, context: prod, namespaces: [platform]}
 - {name: staging, context: prod, namespaces: [staging], borrow: {from: prod, namespace: platform}}
 - {name: dev, context: dev, namespaces: [platform], borrow: {from: staging, namespace: staging}}";

/// `kind` (Deployment or StatefulSet) `web` running `image`, with a Service and an endpoint
/// that other servers can reach.
fn workload(kind: &str, image: &str) -> Value {
    let mut spec = json!({"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "web", "image": image}]}}});
    if kind == "StatefulSet" {
        spec["serviceName"] = json!("web");
    }
    json!({
        "class": "Manifests",
        "config": {
            "manifests": [
                {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "web"}, "spec": spec},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                 "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}}
            ],
            "endpoints": [{"name": "http", "port": 80, "external": "192.0.2.20:80"}]
        }
    })
}

/// Whether every Comb's step is over and nothing is queued: no transition is on its way.
fn quiet(handle: &ControllerHandle) -> bool {
    handle
        .queue()
        .iter()
        .flat_map(|layer| layer.combs.iter())
        .all(|comb| comb.state == "idle" && comb.pending.is_none())
}

/// The phases each layer's `web` records from now until all three are Running and the
/// controller is quiet.
async fn phases_until_running(
    handle: &ControllerHandle,
    transitions: &mut broadcast::Receiver<Transition>,
) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let deadline = tokio::time::Instant::now() + comb_testkit::deadline();
    let mut phases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut log = Vec::new();
    loop {
        let running = ["prod", "staging", "dev"].iter().all(|layer| {
            phases
                .get(*layer)
                .and_then(|seen| seen.last())
                .is_some_and(|phase| phase == "Running")
        });
        if running && quiet(handle) {
            // What came in meanwhile counts too.
            while let Ok(transition) = transitions.try_recv() {
                record(&mut phases, &mut log, &transition);
            }
            return (phases, log);
        }
        let poll = (tokio::time::Instant::now() + comb_testkit::POLL).min(deadline);
        match tokio::time::timeout_at(poll, transitions.recv()).await {
            Ok(Ok(transition)) => record(&mut phases, &mut log, &transition),
            Ok(Err(error)) => panic!("the transitions: {error}"),
            Err(_) if tokio::time::Instant::now() >= deadline => {
                panic!(
                    "not all Running again; transitions so far:\n{}",
                    log.join("\n")
                )
            }
            Err(_) => {}
        }
    }
}

fn record(phases: &mut BTreeMap<String, Vec<String>>, log: &mut Vec<String>, t: &Transition) {
    log.push(t.to_string());
    let seen = phases.entry(t.layer.clone()).or_default();
    // A new Ready reason in the same phase is no phase change.
    if seen.last() != Some(&t.new.phase) {
        seen.push(t.new.phase.clone());
    }
}

async fn one_pending_per_comb_for_an_image_edit(kind: &str) {
    let world = World::start(
        &["prod", "dev"],
        &[],
        &[
            ("prod", "platform"),
            ("prod", "staging"),
            ("dev", "platform"),
        ],
    )
    .await;
    let mut running = world.run(world.config(CONFIG)).await;
    for (context, namespace) in [
        ("prod", "platform"),
        ("prod", "staging"),
        ("dev", "platform"),
    ] {
        world
            .create_comb(context, namespace, "web", workload(kind, "nginx:1"))
            .await;
    }
    let handle = running.handle.clone();
    phases_until_running(&handle, &mut running.transitions).await;

    world
        .patch_spec(
            "prod",
            "platform",
            "web",
            json!({"config": workload(kind, "nginx:2")["config"]}),
        )
        .await;
    let (phases, log) = phases_until_running(&handle, &mut running.transitions).await;
    eprintln!("{kind}, one image edit:\n{}", log.join("\n"));
    let once: Vec<String> = vec!["Pending".into(), "Running".into()];
    let expected: BTreeMap<String, Vec<String>> = ["dev", "prod", "staging"]
        .iter()
        .map(|layer| (layer.to_string(), once.clone()))
        .collect();
    assert_eq!(
        phases, expected,
        "{kind}: the phases each layer's web recorded"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_edit_of_a_deployment_is_one_pending_along_the_chain() {
    one_pending_per_comb_for_an_image_edit("Deployment").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_edit_of_a_statefulset_is_one_pending_along_the_chain() {
    one_pending_per_comb_for_an_image_edit("StatefulSet").await;
}

/// One layer, prod (namespace platform), its controller running, and Comb `web` running
/// `image` in it.
async fn web_in_prod(image: &str) -> (World, controller_support::Running) {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let running =
        world
            .run(world.config(
                "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [platform]}]",
            ))
            .await;
    world
        .create_comb("prod", "platform", "web", web("web", image))
        .await;
    (world, running)
}

/// A fix of a crash-looping image (issue 19): while the Deployment rolls the fix out, the old
/// Pod's crash loop is not the Comb's verdict: it goes from `Error (CrashLoopBackOff)` to
/// `Pending` (comb's own deploy started the rollout: `Deployed`) and stays there while the new
/// Pod waits (held by a scheduling gate the test removes, the same on both backends), then
/// `Running`; never `Error` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixing_a_crash_loop_is_pending_then_running_never_error() {
    let (world, mut running) = web_in_prod("crashloop:1").await;
    let crashing = running
        .transition("web to crash-loop", |t| {
            t.new.phase == "Error" && t.new.reason.as_deref() == Some("CrashLoopBackOff")
        })
        .await;
    let handle = running.handle.clone();
    let mut log = vec![format!("before the fix: {crashing}")];

    world
        .patch_spec("prod", "platform", "web", held_web("web", "nginx:1"))
        .await;
    // The controller has looked at the rollout held in the middle: the old Pod crash-looping,
    // the new one unscheduled, and has nothing left to do.
    let combs = world.combs("prod", "platform").await;
    comb_testkit::wait_until("web to record the held rollout, Pending", async || {
        let (phase, message) = combs
            .get("web")
            .await
            .ok()
            .and_then(|comb| {
                let status = comb.status?;
                let message = status.ready()?.message.clone().unwrap_or_default();
                Some((status.phase?.to_string(), message))
            })
            .unwrap_or_default();
        if phase == "Pending" && message.contains(": SchedulingGated: ") && quiet(&handle) {
            Ok(())
        } else {
            Err(format!("{phase}: {message}"))
        }
    })
    .await;

    let released = release_held_pods(&world.client("prod").await, "platform", "app=web").await;
    assert_eq!(released.len(), 1, "{released:?}");
    // Every transition since the fix, until Running.
    let mut phases = Vec::new();
    while phases
        .last()
        .is_none_or(|phase: &String| !phase.starts_with("Running"))
    {
        let transition = running.transition("web's next transition", |_| true).await;
        log.push(transition.to_string());
        phases.push(format!(
            "{} ({})",
            transition.new.phase,
            transition.new.reason.unwrap_or_default()
        ));
    }
    assert_eq!(
        phases,
        ["Pending (Deployed)", "Running (Healthy)"],
        "the transitions:\n{}",
        log.join("\n")
    );
    running.stop().await;
}

/// The other side (issue 19): an edit whose new Pods crash is `Error`, naming the new Pod,
/// though the rollout is still in progress (the old Pod keeps serving, so it never ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_whose_new_pods_crash_is_error() {
    let (world, mut running) = web_in_prod("nginx:1").await;
    running
        .transition("web to run", |t| t.new.phase == "Running")
        .await;
    let pods: Api<Pod> = Api::namespaced(world.client("prod").await, "platform");
    let serving: Vec<String> = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("the pods list")
        .items
        .into_iter()
        .filter_map(|pod| pod.metadata.name)
        .collect();

    world
        .patch_spec("prod", "platform", "web", web("web", "crashloop:2"))
        .await;
    let crashing = running
        .transition("web to crash-loop", |t| t.new.phase == "Error")
        .await;
    assert_eq!(
        crashing.new.reason.as_deref(),
        Some("CrashLoopBackOff"),
        "{crashing}"
    );
    let message = crashing.message.unwrap_or_default();
    let named = message
        .strip_prefix("Pod ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_default();
    assert!(
        !named.is_empty() && !serving.iter().any(|pod| pod == named),
        "the new Pod is named, not one of {serving:?}: {message}"
    );
    // How many Pods the Deployment's status counts as updated depends on when its controller
    // last wrote it (a real one may not have counted the new Pod yet); the old one serving does not.
    assert!(
        message.contains("Deployment web: ") && message.contains(" of 1 updated, 1 ready"),
        "the rollout is still in progress, the old Pod serving: {message}"
    );
    running.stop().await;
}
