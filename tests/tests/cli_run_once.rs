//! `comb run --once` through the binary: against the demo's sandbox clusters (set up in-process
//! with the example Combs) and against the kit's clusters: exit 0 when every Comb settled
//! without an Error, exit 1 when one ended in Error or the timeout hit; a bad configuration is
//! one line naming the key.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use comb_federation::cli::demo::DemoWorld;
use comb_testkit::fixtures::{held_web, release_held_pods, web};
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};
use comb_testkit::{Setup, World, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::json;

async fn run_once(world: &DemoWorld, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["--settle", "2s"];
    args.extend_from_slice(extra);
    let output = comb_run_once(&world.config_path(), &args).await;
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `comb run --once <args> --config <config>` (logging warnings only), on a blocking thread.
async fn comb_run_once(config: &Path, args: &[&str]) -> Output {
    let (config, args) = (
        config.to_path_buf(),
        args.iter().map(|arg| arg.to_string()).collect::<Vec<_>>(),
    );
    tokio::task::spawn_blocking(move || {
        comb_testkit::comb()
            .args(["run", "--once"])
            .args(args)
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "warn")
            .output_within(COMMAND_DEADLINE)
    })
    .await
    .expect("comb run --once ran")
}

/// Clusters with one layer, prod (namespace platform), its configuration ([`prod_config`]), and
/// Comb `web` running `image` in it.
async fn web_in_prod(image: &str) -> (World, tempfile::TempDir, PathBuf) {
    let world = Setup::clusters(["prod"])
        .namespace("prod", "platform")
        .start()
        .await;
    let (dir, config) = prod_config(&world);
    world
        .create_comb("prod", "platform", "web", web("web", image))
        .await;
    (world, dir, config)
}

/// A configuration of one layer, prod (`CONFIG`), on `world`'s cluster, in a directory that
/// lives as long as the returned guard.
fn prod_config(world: &World) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    world.write_kubeconfig(&dir.path().join("kubeconfig.yaml"));
    let config = dir.path().join("comb.yaml");
    std::fs::write(&config, format!("kubeconfig: kubeconfig.yaml\n{CONFIG}\n"))
        .expect("the configuration is written");
    (dir, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_exit_codes() {
    let world = DemoWorld::start_on(
        comb_sandbox::Backend::from_env(),
        None,
        Duration::from_millis(50),
    )
    .await
    .expect("the demo's clusters start");
    world.apply_examples().await.expect("the examples apply");

    // A timeout shorter than any Pod takes to become Ready: exit 1.
    let (code, _, stderr) = run_once(&world, &["--timeout", "1ms"]).await;
    assert_eq!(code, 1, "{stderr}");

    // Every Comb settles Running: exit 0.
    let (code, stdout, stderr) = run_once(&world, &["--timeout", "60s"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");

    // A Comb of a class nobody registered ends in Error (BuildFailed): exit 1.
    world
        .apply(
            "dev",
            &json!({"apiVersion": "comb.internal/v1", "kind": "Comb",
                    "metadata": {"name": "cache", "namespace": "platform"},
                    "spec": {"class": "Redis"}}),
        )
        .await
        .expect("the broken Comb applies");
    let (code, stdout, stderr) = run_once(&world, &["--timeout", "60s"]).await;
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("cache"), "{stdout}");
}

const CONFIG: &str = "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [platform]}]";

#[tokio::test]
async fn the_binary_exits_0_then_1() {
    let (world, _dir, config) = web_in_prod("nginx:1").await;
    let run = |config: PathBuf| async move {
        comb_run_once(&config, &["--settle", "30s", "--timeout", "60s"]).await
    };
    let output = run(config.clone()).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout, "prod:platform/web Running (Healthy): healthy\n");

    world
        .create_comb("prod", "platform", "odd", json!({"class": "NoSuchClass"}))
        .await;
    let output = run(config).await;
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("prod:platform/odd Error (BuildFailed): Comb->from_crd: unknown class"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_bad_config_is_one_line_naming_the_key_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("comb.yaml");
    std::fs::write(
        &config,
        "layers:\n - {name: prod, context: prod}\n - {name: dev, context: dev, borrow: {from: stagin}}\n",
    )
    .unwrap();
    let output = comb_run_once(&config, &[]).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.trim_end().ends_with(
            "comb.yaml: layers[1].borrow.from: unknown layer \"stagin\" (layers: prod, dev)"
        ),
        "{stderr}"
    );
}

/// A crash-looping image through the binary: the Comb ends `Error (CrashLoopBackOff)`, named on
/// stdout, and `comb run --once` exits 1, so a CI gate fails the broken rollout.
#[tokio::test]
async fn a_crash_loop_exits_1() {
    let (_world, _dir, config) = web_in_prod("crashloop:1").await;
    let output = comb_run_once(&config, &["--settle", "2s", "--timeout", "120s"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.starts_with("prod:platform/web Error (CrashLoopBackOff): "),
        "{stdout}"
    );
}

/// A fix of a crash-looping image through the binary (issue 19): while the Deployment rolls
/// the fix out, the old Pod's crash loop is not the verdict, so `comb run --once` settles on
/// `Pending (Deployed)` and exits 0 instead of 1; once the new Pod runs, `Running`. The new Pod
/// is held by a scheduling gate until the test releases it, the same on both backends.
#[tokio::test]
async fn fixing_a_crash_loop_is_pending_until_the_new_pod_runs() {
    let (world, _dir, config) = web_in_prod("crashloop:1").await;
    let run = |settle: &'static str| {
        let config = config.clone();
        async move {
            let output = comb_run_once(&config, &["--settle", settle, "--timeout", "120s"]).await;
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
    };
    let (code, stdout, stderr) = run("2s").await;
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("prod:platform/web Error (CrashLoopBackOff): "),
        "{stdout}"
    );

    world
        .patch_comb_spec("prod", "platform", "web", held_web("web", "nginx:1"))
        .await;
    // Settled past the 5 s within which progress alone is not written.
    let (code, stdout, stderr) = run("10s").await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with(
            "prod:platform/web Pending (Deployed): applied 2 resource(s), not healthy yet (Pod web-"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(": SchedulingGated: Scheduling is blocked due to non-empty scheduling gates; Deployment web: 1 of 1 updated, 0 ready)"),
        "the new Pod held, the old one's crash loop left to the rollout: {stdout}"
    );

    let client = world.client("prod").await;
    let released = release_held_pods(&client, "platform", "app=web").await;
    assert_eq!(released.len(), 1, "{released:?}");
    let deployments: Api<Deployment> = Api::namespaced(client, "platform");
    wait_until("the fix to roll out", async || {
        let Some(status) = deployments.get("web").await.ok().and_then(|d| d.status) else {
            return false;
        };
        (
            status.replicas,
            status.updated_replicas,
            status.ready_replicas,
        ) == (Some(1), Some(1), Some(1))
    })
    .await;
    let (code, stdout, stderr) = run("10s").await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "prod:platform/web Running (Healthy): healthy\n");
}
