//! Dependencies inside a layer: a Comb waits for the Combs it depends on and goes on as soon as
//! they are healthy; dependency cycles are reported and their Combs stay Blocked.

mod controller_support;

use controller_support::{World, eventually, web};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

const CONFIG: &str = "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [platform]}]";

fn depending(spec: Value, on: &[&str]) -> Value {
    let mut spec = spec;
    spec["dependsOn"] = json!(on);
    spec
}

#[tokio::test]
async fn a_comb_goes_on_as_soon_as_its_dependency_is_healthy() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let mut running = world.run(world.config(CONFIG)).await;
    world
        .create_comb(
            "prod",
            "platform",
            "api",
            depending(web("api", "api:1"), &["db"]),
        )
        .await;
    let blocked = world
        .wait_phase(
            "prod",
            "platform",
            "api",
            "Blocked",
            Some("DependencyNotFound"),
        )
        .await;
    assert_eq!(
        blocked.status.unwrap().ready().unwrap().message.as_deref(),
        Some("dependency db not found")
    );
    world
        .create_comb("prod", "platform", "db", web("db", "postgres:16"))
        .await;
    running
        .transition("db Running", |t| t.name == "db" && t.new.phase == "Running")
        .await;
    running
        .transition("api Running", |t| {
            t.name == "api" && t.new.phase == "Running"
        })
        .await;
    running.stop().await;
}

#[tokio::test]
async fn a_dependency_cycle_is_reported_and_stays_blocked() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let running = world.run(world.config(CONFIG)).await;
    world
        .create_comb("prod", "platform", "a", depending(web("a", "a:1"), &["b"]))
        .await;
    world
        .create_comb(
            "prod",
            "platform",
            "b",
            depending(web("b", "b:1"), &["platform/a"]),
        )
        .await;
    // Each says so in its Blocked message, the loop read from itself.
    let combs = world.combs("prod", "platform").await;
    for (name, cycle) in [
        ("a", "platform/a -> platform/b -> platform/a"),
        ("b", "platform/b -> platform/a -> platform/b"),
    ] {
        let expected = format!("dependency cycle: {cycle}");
        eventually(&format!("{name} Blocked by the cycle"), || {
            let (combs, expected) = (combs.clone(), expected.clone());
            async move {
                let comb = combs.get(name).await.ok()?;
                let status = comb.status?;
                let ready = status.ready()?;
                (status.phase.as_ref().map(ToString::to_string).as_deref() == Some("Blocked")
                    && ready.reason.as_ref().map(ToString::to_string).as_deref()
                        == Some("DependencyNotReady")
                    && ready.message.as_deref() == Some(expected.as_str()))
                .then_some(())
            }
        })
        .await;
    }
    let events: Api<Event> = Api::namespaced(world.client("prod").await, "platform");
    let cycle_events = eventually("an Event on each Comb of the cycle", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            let mut named: Vec<(String, String)> = list
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("DependencyCycle"))
                .map(|e| {
                    (
                        e.involved_object.name.unwrap_or_default(),
                        e.message.unwrap_or_default(),
                    )
                })
                .collect();
            named.sort();
            (named.len() == 2).then_some(named)
        }
    })
    .await;
    let message =
        "dependency cycle: platform/a -> platform/b -> platform/a (these stay Blocked)".to_string();
    assert_eq!(
        cycle_events,
        vec![
            ("a".to_string(), message.clone()),
            ("b".to_string(), message)
        ]
    );
    // Phase changes are Events too, with the Ready reason.
    let list = events.list(&ListParams::default()).await.unwrap();
    let blocked = list
        .items
        .iter()
        .find(|e| {
            e.involved_object.name.as_deref() == Some("b")
                && e.reason.as_deref() == Some("DependencyNotReady")
        })
        .expect("an Event of b's transition");
    assert_eq!(blocked.type_.as_deref(), Some("Warning"));
    assert!(
        blocked.message.as_deref().unwrap().ends_with(
            "-> Blocked (DependencyNotReady): dependency cycle: platform/b -> platform/a -> platform/b"
        ),
        "{blocked:?}"
    );
    running.stop().await;
}
