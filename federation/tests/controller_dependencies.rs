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
    for name in ["a", "b"] {
        world
            .wait_phase(
                "prod",
                "platform",
                name,
                "Blocked",
                Some("DependencyNotReady"),
            )
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
            e.involved_object.name.as_deref() == Some("a")
                && e.reason.as_deref() == Some("DependencyNotReady")
        })
        .expect("an Event of a's transition");
    assert_eq!(blocked.type_.as_deref(), Some("Warning"));
    assert!(
        blocked
            .message
            .as_deref()
            .unwrap()
            .ends_with("-> Blocked (DependencyNotReady): dependency b is not healthy"),
        "{blocked:?}"
    );
    running.stop().await;
}
