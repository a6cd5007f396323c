//! Dependencies inside a layer: a Comb waits for the Combs it depends on and goes on as soon as
//! they are healthy; dependency cycles are reported and their Combs stay Blocked.

use std::time::Duration;

use comb_federation::controller::{ControllerHandle, ControllerOptions, Transition};
use comb_testkit::controller::{World, test_options};
use comb_testkit::fixtures::{deployment_image, web};
use comb_testkit::wait_until;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::broadcast;

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
        wait_until(&format!("{name} Blocked by the cycle"), || {
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
    let cycle_events = wait_until("an Event on each Comb of the cycle", || {
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
    // Phase changes are Events too, with the Ready reason. The step writes that Event after
    // the status it announces, and the cycle's Events come from a task of their own, so on a
    // real server it can land after both were seen.
    let blocked = wait_until("an Event of b's transition", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.involved_object.name.as_deref() == Some("b")
                    && e.reason.as_deref() == Some("DependencyNotReady")
            })
        }
    })
    .await;
    assert_eq!(blocked.type_.as_deref(), Some("Warning"));
    assert!(
        blocked.message.as_deref().unwrap().ends_with(
            "-> Blocked (DependencyNotReady): dependency cycle: platform/b -> platform/a -> platform/b"
        ),
        "{blocked:?}"
    );
    running.stop().await;
}

/// The image of the Deployment `name` runs, once it exists.
async fn deployed_image(world: &World, name: &str) -> Option<String> {
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "platform");
    deployment_image(deployments.get_opt(name).await.ok()?.as_ref())
}

/// Sets the image of api's Deployment: a step of api that deploys only if db is healthy.
async fn edit_api(world: &World, image: &str) {
    let api = depending(web("api", image), &["db"]);
    world
        .patch_spec("prod", "platform", "api", json!({"config": api["config"]}))
        .await;
}

/// Waits until a step of `name` that started after `since` is over.
async fn stepped_since(handle: &ControllerHandle, name: &str, since: jiff::Timestamp) {
    wait_until(&format!("a step of {name} after {since}"), || async move {
        let queue = handle.queue();
        let comb = queue[0].combs.iter().find(|comb| comb.name == name)?;
        (comb.state == "idle" && comb.last_step_at.is_some_and(|at| at > since)).then_some(())
    })
    .await;
}

/// prod's db, and api depending on it, both deployed and api Running.
async fn db_and_api_running(world: &World) {
    world
        .create_comb("prod", "platform", "db", web("db", "postgres:16"))
        .await;
    world
        .create_comb(
            "prod",
            "platform",
            "api",
            depending(web("api", "api:1"), &["db"]),
        )
        .await;
    world
        .wait_phase("prod", "platform", "api", "Running", None)
        .await;
}

/// api Blocked on db (`dependency db is not healthy`), its Deployment still at `image`.
async fn blocked_on_db_keeping(world: &World, image: &str) {
    let blocked = world
        .wait_phase(
            "prod",
            "platform",
            "api",
            "Blocked",
            Some("DependencyNotReady"),
        )
        .await;
    let ready = blocked.status.as_ref().and_then(|status| status.ready());
    assert_eq!(
        ready.and_then(|ready| ready.message.as_deref()),
        Some("dependency db is not healthy")
    );
    assert_eq!(deployed_image(world, "api").await.as_deref(), Some(image));
}

/// A dependency is judged by its objects as they run now against its spec as it is now, not by
/// what it recorded, nor by a rendering of an older spec that the layer kept: Disabled with its
/// objects running it serves; scaled by hand below its manifest it does not; edited so that
/// what runs falls short of the new manifest it does not, before any step of its own renders it.
#[tokio::test]
async fn a_dependency_is_judged_by_what_runs_against_its_spec_as_it_is_now() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let running = world.run(world.config(CONFIG)).await;
    db_and_api_running(&world).await;

    // Disabled, db's objects keep running: it serves, and api deploys its edit.
    world
        .patch_spec("prod", "platform", "db", json!({"enabled": false}))
        .await;
    world
        .wait_phase("prod", "platform", "db", "Disabled", None)
        .await;
    edit_api(&world, "api:2").await;
    wait_until("api:2 deployed behind a Disabled db", || async {
        (deployed_image(&world, "api").await.as_deref() == Some("api:2")).then_some(())
    })
    .await;
    world
        .wait_phase("prod", "platform", "api", "Running", None)
        .await;

    // Scaled to 0 by hand while db is in maintenance (nothing of its own undoes it): Stopped
    // against its manifest, not healthy, though db still records what it recorded.
    world
        .patch_spec(
            "prod",
            "platform",
            "db",
            json!({"enabled": true, "maintenance": "NoResourceReconciliation"}),
        )
        .await;
    world
        .wait_phase("prod", "platform", "db", "Maintenance", None)
        .await;
    let scaled_at = jiff::Timestamp::now();
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "platform");
    deployments
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("db scaled");
    // The scale woke db: once a step of it after the scale is over, the controller has seen it.
    stepped_since(&running.handle, "db", scaled_at).await;
    edit_api(&world, "api:3").await;
    blocked_on_db_keeping(&world, "api:2").await;

    // Scaled back by hand: db serves again as it runs, and api, Blocked on it, goes on by
    // itself with the edit it held back. db's status does not change when its Pod is ready (in
    // maintenance nothing of db's is reconciled); its objects' changes wake api (the resync is
    // an hour away).
    deployments
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("db scaled back");
    wait_until("api:3 deployed once db runs again", || async {
        (deployed_image(&world, "api").await.as_deref() == Some("api:3")).then_some(())
    })
    .await;
    world
        .wait_phase("prod", "platform", "api", "Running", None)
        .await;
    world
        .wait_phase("prod", "platform", "db", "Maintenance", None)
        .await;
    edit_api(&world, "api:4").await;
    wait_until("api:4 deployed", || async {
        (deployed_image(&world, "api").await.as_deref() == Some("api:4")).then_some(())
    })
    .await;
    world
        .wait_phase("prod", "platform", "api", "Running", None)
        .await;

    // A new spec of db asks for 2 replicas; in maintenance no step of db renders or applies it.
    // api is judged on it at once: 1 of 2 ready, not healthy.
    let mut db = web("db", "postgres:16");
    db["config"]["manifests"][0]["spec"]["replicas"] = json!(2);
    world
        .patch_spec("prod", "platform", "db", json!({"config": db["config"]}))
        .await;
    edit_api(&world, "api:5").await;
    blocked_on_db_keeping(&world, "api:4").await;
    running.stop().await;
}

/// How long a dependent may stay Blocked after its dependency records Running (issue 11).
const WAKE_BOUND: Duration = Duration::from_secs(1);

/// Stop/start rounds, the same on both backends (a round takes about a second on each).
const ROUNDS: usize = 50;

/// Whether `name`'s step is over and nothing is queued for it: no step of it can record an
/// older verdict after this.
fn settled(handle: &ControllerHandle, name: &str) -> bool {
    handle
        .queue()
        .iter()
        .flat_map(|layer| layer.combs.iter())
        .find(|comb| comb.name == name)
        .is_some_and(|comb| comb.state == "idle" && comb.pending.is_none())
}

/// The next transition, `None` at `deadline`.
async fn next_transition(
    transitions: &mut broadcast::Receiver<Transition>,
    deadline: tokio::time::Instant,
) -> Option<Transition> {
    match tokio::time::timeout_at(deadline, transitions.recv()).await {
        Ok(Ok(transition)) => Some(transition),
        Ok(Err(error)) => panic!("the transitions: {error}"),
        Err(_) => None,
    }
}

/// Sets the image of db's Deployment (its Comb's spec).
async fn set_db_image(world: &World, image: &str) {
    let db = web("db", image);
    world
        .patch_spec("prod", "platform", "db", json!({"config": db["config"]}))
        .await;
}

/// A dependent is never left Blocked behind its dependency (issue 11, no lost wake-ups): db is
/// stopped and started 50 times, and api, which depends on it, is never still Blocked a second
/// after db records Running again.
///
/// What api's dependency check observes is db's live health. `comb stop` while the controller
/// runs is undone by db's next step before api could look (the emulator does not even get to
/// delete the Pod), so each round stops db's service by rolling it out to a crash-looping image
/// (db Error, api Blocked) and starts it again by rolling back (db Running, and api must follow
/// at once). Each round waits for api to be Blocked, so that every one tests the wake-up.
#[tokio::test]
async fn no_wake_up_is_lost_over_fifty_stops_and_starts_of_a_dependency() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    // The pacing of reruns as shipped (up to 10 s): a wake-up must not wait behind it.
    let options = ControllerOptions {
        pacing: ControllerOptions::default().pacing,
        ..test_options()
    };
    let mut running = world.run_options(world.config(CONFIG), options).await;
    db_and_api_running(&world).await;
    let handle = running.handle.clone();
    let mut api_phase = comb_api::Phase::Running;
    for round in 0..ROUNDS {
        // Stopped: api finds db unhealthy.
        set_db_image(&world, &format!("crashloop:{round}")).await;
        let deadline = tokio::time::Instant::now() + comb_testkit::deadline();
        while api_phase != "Blocked" {
            let Some(transition) = next_transition(&mut running.transitions, deadline).await else {
                panic!("round {round}: api was not Blocked by db's stop (api is {api_phase})");
            };
            if transition.name == "api" {
                api_phase = transition.new.phase.clone();
            }
        }
        // Started again: from db's Running on, api has WAKE_BOUND to leave Blocked.
        set_db_image(&world, "postgres:16").await;
        let db_running_at = loop {
            let Some(transition) = next_transition(&mut running.transitions, deadline).await else {
                panic!("round {round}: db did not run again");
            };
            match transition.name.as_str() {
                "api" => api_phase = transition.new.phase.clone(),
                "db" if transition.new.phase == "Running" => break transition.at,
                _ => {}
            }
        };
        let bound = db_running_at + WAKE_BOUND;
        let left = Duration::try_from(bound.duration_since(jiff::Timestamp::now()))
            .unwrap_or(Duration::ZERO);
        let wake_deadline = tokio::time::Instant::now() + left;
        // api's verdicts in between are read as they come, a late Blocked included.
        loop {
            if api_phase != "Blocked" && settled(&handle, "api") {
                break;
            }
            let poll = (tokio::time::Instant::now() + comb_testkit::POLL).min(wake_deadline);
            match next_transition(&mut running.transitions, poll).await {
                Some(transition) if transition.name == "api" => {
                    api_phase = transition.new.phase.clone();
                }
                Some(_) => {}
                None if tokio::time::Instant::now() < wake_deadline => {}
                None if api_phase == "Blocked" => panic!(
                    "round {round}: api still Blocked {WAKE_BOUND:?} after db was Running again"
                ),
                // Not Blocked at the bound, though a step of it runs: the next round looks on.
                None => break,
            }
        }
    }
    running.stop().await;
}

/// The count of `comb_dependency_verdicts_total{layer="prod",how=...}`.
fn verdicts(handle: &ControllerHandle, how: &str) -> u64 {
    let text = handle.metrics_text().expect("the metrics");
    let prefix = format!("comb_dependency_verdicts_total{{layer=\"prod\",how=\"{how}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |count| count.parse().expect("a count"))
}

/// Four Combs depend on db: while db stays as it is, it is judged (built, rendered, observed)
/// once, and the other dependents' steps take that verdict (issue 33 item 3).
#[tokio::test]
async fn a_dependency_is_judged_once_for_all_its_dependents_while_it_stays_as_it_is() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    let running = world.run(world.config(CONFIG)).await;
    world
        .create_comb("prod", "platform", "db", web("db", "postgres:16"))
        .await;
    world
        .wait_phase("prod", "platform", "db", "Running", Some("Healthy"))
        .await;
    let dependents = ["a1", "a2", "a3", "a4"];
    for name in dependents {
        world
            .create_comb(
                "prod",
                "platform",
                name,
                depending(web(name, "app:1"), &["db"]),
            )
            .await;
    }
    for name in dependents {
        world
            .wait_phase("prod", "platform", name, "Running", Some("Healthy"))
            .await;
    }
    let handle = &running.handle;
    let (judged, kept) = (verdicts(handle, "judged"), verdicts(handle, "kept"));
    // Each dependent steps again (its spec changed); db does not change meanwhile.
    for name in dependents {
        world
            .create_comb(
                "prod",
                "platform",
                &format!("{name}-edit"),
                depending(web(&format!("{name}-edit"), "app:1"), &["db"]),
            )
            .await;
    }
    for name in dependents {
        world
            .wait_phase(
                "prod",
                "platform",
                &format!("{name}-edit"),
                "Running",
                Some("Healthy"),
            )
            .await;
    }
    let judged_since = verdicts(handle, "judged") - judged;
    let kept_since = verdicts(handle, "kept") - kept;
    assert!(
        judged_since <= 1,
        "db judged {judged_since} times for 4 new dependents (kept {kept_since})"
    );
    assert!(kept_since >= 3, "kept {kept_since}, judged {judged_since}");
    running.stop().await;
}
