//! `comb run --once`: run until every Comb is settled, exit 1 when one ended in Error or the
//! timeout hit, through the library (through the `comb` binary: tests/tests/cli_run_once.rs).

use std::time::Duration;

use comb_federation::controller::{ControllerOptions, OnceOptions};
use comb_testkit::controller::{World, test_options};
use comb_testkit::fixtures::web;
use serde_json::json;

const CONFIG: &str = "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [platform]}]";

fn once(settle: Duration, timeout: Duration) -> ControllerOptions {
    ControllerOptions {
        once: Some(OnceOptions { settle, timeout }),
        ..test_options()
    }
}

#[tokio::test]
async fn settled_combs_exit_0() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    world
        .create_comb("prod", "platform", "web", web("web", "nginx:1"))
        .await;
    world
        .create_comb(
            "prod",
            "platform",
            "off",
            json!({"class": "Manifests", "enabled": false}),
        )
        .await;
    let mut running = world
        .run_options(
            world.config(CONFIG),
            once(Duration::from_secs(30), Duration::from_secs(60)),
        )
        .await;
    let outcome = running.finish().await;
    assert!(!outcome.timed_out);
    let phases: Vec<(String, Option<String>)> = outcome
        .combs
        .iter()
        .map(|c| (c.name.clone(), c.phase.as_ref().map(ToString::to_string)))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("off".to_string(), Some("Disabled".to_string())),
            ("web".to_string(), Some("Running".to_string())),
        ]
    );
    assert_eq!(outcome.exit_code(), 0);
}

#[tokio::test]
async fn a_comb_in_error_exits_1() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    world
        .create_comb("prod", "platform", "web", web("web", "nginx:1"))
        .await;
    world
        .create_comb("prod", "platform", "odd", json!({"class": "NoSuchClass"}))
        .await;
    let mut running = world
        .run_options(
            world.config(CONFIG),
            once(Duration::from_secs(30), Duration::from_secs(60)),
        )
        .await;
    let outcome = running.finish().await;
    assert!(!outcome.timed_out);
    let odd = outcome.combs.iter().find(|c| c.name == "odd").unwrap();
    assert_eq!(odd.phase, Some(comb_api::Phase::Error));
    assert_eq!(odd.reason, Some(comb_api::Reason::BuildFailed));
    assert!(
        odd.message
            .as_deref()
            .unwrap()
            .starts_with("Comb->from_crd: unknown class 'NoSuchClass' (known: "),
        "{odd:?}"
    );
    assert_eq!(outcome.exit_code(), 1);
    // The BuildFailed status is recorded in the CR.
    world
        .wait_phase("prod", "platform", "odd", "Error", Some("BuildFailed"))
        .await;
}

/// A crash-looping image ends `Error` with the cluster's reason: nothing applied again could
/// change it, so the run settles at once and exits 1 (a CI gate fails the broken rollout).
#[tokio::test]
async fn a_crash_loop_ends_in_error_and_exits_1() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    world
        .create_comb("prod", "platform", "web", web("web", "crashloop:1"))
        .await;
    let mut running = world
        .run_options(
            world.config(CONFIG),
            once(Duration::from_secs(2), Duration::from_secs(120)),
        )
        .await;
    let outcome = running.finish().await;
    assert!(!outcome.timed_out, "{outcome:?}");
    let web = outcome.combs.iter().find(|c| c.name == "web").unwrap();
    assert_eq!(web.phase, Some(comb_api::Phase::Error), "{web:?}");
    assert_eq!(
        web.reason.as_ref().map(comb_api::Reason::as_str),
        Some("CrashLoopBackOff"),
        "{web:?}"
    );
    assert_eq!(outcome.exit_code(), 1);
    world
        .wait_phase("prod", "platform", "web", "Error", Some("CrashLoopBackOff"))
        .await;
}

#[tokio::test]
async fn the_timeout_exits_1() {
    let world = World::start(&["prod"], &[], &[("prod", "platform")]).await;
    // Never ready and no error: no node matches the Pod, so the Comb stays Pending, and
    // settling takes longer than the run may.
    let mut unschedulable = web("web", "nginx:1");
    unschedulable["config"]["manifests"][0]["spec"]["template"]["spec"]["nodeSelector"] =
        json!({"disk": "no-node-has-this"});
    world
        .create_comb("prod", "platform", "web", unschedulable)
        .await;
    let mut running = world
        .run_options(
            world.config(CONFIG),
            once(Duration::from_secs(3600), Duration::from_millis(500)),
        )
        .await;
    let outcome = running.finish().await;
    assert!(outcome.timed_out);
    assert_eq!(outcome.exit_code(), 1);
}
