//! What comb decided is visible (issue 11): each prune note becomes an Event on the Comb the
//! first time it comes, not only a Ready message the next step overwrites, and no Event is
//! written again by the steps that repeat it.

use comb_sandbox::controls::Fault;
use comb_testkit::controller::{World, comb_events};
use comb_testkit::wait_until;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const CONFIG: &str = "resync: 1h
layers: [{name: prod, context: prod, namespaces: [platform], allowClusterScoped: [Namespace]}]";

/// web with the extra Services and Namespace given.
fn web(services: &[&str], namespace: bool) -> Value {
    let mut manifests = vec![json!(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}},
                               "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}}
    )];
    for name in services {
        manifests.push(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}}),
        );
    }
    if namespace {
        manifests.push(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "notes-team"}}),
        );
    }
    json!({"class": "Manifests", "config": {"manifests": manifests}})
}

/// The Events on Comb web, as (type, reason, message), oldest first.
async fn events_of_web(events: &Api<Event>) -> Vec<(String, String, String)> {
    comb_events(events, "web").await
}

fn notes(events: &[(String, String, String)]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter(|(_, reason, _)| reason.starts_with("Prune"))
        .cloned()
        .collect()
}

#[tokio::test]
async fn each_prune_note_is_an_event_once() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let running = world.run(world.config(CONFIG)).await;
    world
        .create_comb(
            "prod",
            "platform",
            "web",
            web(&["web", "old", "stuck"], true),
        )
        .await;
    world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await;
    // What follows happens while no controller runs: a step between the relabelling and the
    // edit would find Service old gone from the Comb's objects and apply it again, taking it
    // back. The next controller starts from the recorded status, as after a restart.
    running.stop().await;
    let client = world.client("prod").await;
    // Someone takes Service old over: it loses the Comb's name label.
    let services: Api<Service> = Api::namespaced(client.clone(), "platform");
    services
        .patch(
            "old",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"comb.internal/comb": null}}})),
        )
        .await
        .expect("Service old relabelled");
    // Deleting Service stuck fails, step after step.
    world.controls("prod").inject(Fault::status(
        "DELETE",
        "/api/v1/namespaces/platform/services/stuck",
        500,
        1_000,
    ));
    // The edit drops both Services and the Namespace.
    world
        .patch_spec(
            "prod",
            "platform",
            "web",
            json!({"config": web(&["web"], false)["config"]}),
        )
        .await;
    let running = world.run(world.config(CONFIG)).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "platform");
    let selector = "comb.internal/comb=web,comb.internal/comb-namespace=platform";
    let expected = [
        (
            "Normal",
            "PruneSkipped",
            "left Namespace notes-team in place: cluster-scoped, never pruned automatically"
                .to_string(),
        ),
        (
            "Normal",
            "PruneSkipped",
            format!("left Service old alone: it no longer carries {selector}"),
        ),
    ];
    let told = wait_until("an Event for each note", || {
        let events = events.clone();
        async move {
            let told = notes(&events_of_web(&events).await);
            (told.len() >= 3).then_some(told)
        }
    })
    .await;
    for (kind, reason, message) in &expected {
        assert!(
            told.iter()
                .any(|(k, r, m)| (k.as_str(), r.as_str(), m.as_str()) == (*kind, *reason, message)),
            "no {reason} Event {message:?} in {told:?}"
        );
    }
    let failed: Vec<_> = told
        .iter()
        .filter(|(kind, reason, message)| {
            kind == "Warning"
                && reason == "PruneFailed"
                && message.starts_with("deleting Service stuck failed: ")
        })
        .collect();
    assert_eq!(failed.len(), 1, "{told:?}");
    assert_eq!(told.len(), 3, "{told:?}");

    // More steps try the delete again and note it again (each such step applies again, as the
    // record differs from the manifests, and its own writes wake it): nothing is told twice.
    for round in 0..3 {
        let before = last_step(&running.handle);
        world
            .combs("prod", "platform")
            .await
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"example.com/nudge": round.to_string()}}}),
                ),
            )
            .await
            .expect("web annotated");
        let handle = running.handle.clone();
        wait_until("another step of web", || {
            let handle = handle.clone();
            async move { (last_step(&handle) != before).then_some(()) }
        })
        .await;
    }
    let message = world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await
        .status
        .and_then(|status| status.ready().and_then(|ready| ready.message.clone()))
        .unwrap_or_default();
    assert!(
        message.contains("deleting Service stuck failed: "),
        "the step still notes it: {message}"
    );
    assert_eq!(notes(&events_of_web(&events).await), told);
    running.stop().await;
}

fn last_step(handle: &comb_federation::controller::ControllerHandle) -> Option<jiff::Timestamp> {
    handle
        .queue()
        .iter()
        .flat_map(|layer| layer.combs.iter())
        .find(|comb| comb.name == "web")
        .and_then(|comb| comb.last_step_at)
}

#[tokio::test]
async fn an_event_the_api_refused_is_written_by_the_next_step() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    // The first Event about web (its first transition) is refused. web is one ConfigMap, so
    // that no other component writes an Event in the namespace meanwhile.
    world.controls("prod").inject(Fault::status(
        "POST",
        "/api/v1/namespaces/platform/events",
        500,
        1,
    ));
    let running = world.run(world.config(CONFIG)).await;
    let settings = json!({"class": "Manifests", "config": {"manifests": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-settings"},
         "data": {"mode": "fast"}}
    ]}});
    world.create_comb("prod", "platform", "web", settings).await;
    world
        .wait_phase("prod", "platform", "web", "Running", None)
        .await;
    let client = world.client("prod").await;
    let events: Api<Event> = Api::namespaced(client, "platform");
    // The step after it wrote it, with its own: both transitions are told, once each.
    let told = wait_until("the refused Event written after all", || {
        let events = events.clone();
        async move {
            let told = events_of_web(&events).await;
            (told.len() >= 2).then_some(told)
        }
    })
    .await;
    let mut transitions: Vec<&str> = told
        .iter()
        .map(|(_, _, message)| message.split(':').next().unwrap_or_default())
        .collect();
    transitions.sort_unstable();
    assert_eq!(
        transitions,
        [
            "Pending (Deployed) -> Running (Healthy)",
            "new -> Pending (Deployed)"
        ],
        "{told:?}"
    );
    running.stop().await;
}
