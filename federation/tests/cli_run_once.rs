//! `comb run --once` through the binary against the demo's sandbox clusters (set up in-process
//! with the example Combs): exit 0 when every Comb settled without an Error, exit 1 when one
//! ended in Error or the timeout hit.
// It runs `comb demo`/`comb sandbox` or the demo's clusters: only with the emulator inside.
#![cfg(feature = "sandbox")]

use std::time::Duration;

use comb_federation::cli::demo::DemoWorld;
use serde_json::json;
use tokio::process::Command;

async fn run_once(world: &DemoWorld, extra: &[&str]) -> (i32, String, String) {
    let config = world.config_path();
    let output = Command::new(env!("CARGO_BIN_EXE_comb"))
        .arg("--config")
        .arg(&config)
        .args(["run", "--once", "--settle", "2s"])
        .args(extra)
        .output()
        .await
        .expect("comb run runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
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
