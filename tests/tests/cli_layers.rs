//! `comb layer create|list|extend|delete` and `comb get layers` through the binary, on the
//! kit's clusters (either backend): the CombLayer written or created, the list a developer
//! reads, an extension, a refused ask in the template's words and a failure in the API
//! server's, each one line with exit code 1.

use std::path::{Path, PathBuf};

use comb_api::{CombLayer, layer_api_resource};
use comb_testkit::cli::cells_without;
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};
use comb_testkit::{Setup, World};
use kube::api::Api;

const CONFIG: &str = "layerContext: staging
layers:
  - {name: staging, context: staging, namespaces: [shop]}
layerTemplates:
  - name: dev
    contexts: [dev]
    namespaces: [dev-*]
    borrowFrom: [staging]
    maxTTL: 12h
";

/// `comb --config <config> <args>` on a blocking thread: exit code, stdout, stderr.
async fn comb(config: &Path, args: &[&str]) -> (i32, String, String) {
    let (config, args): (PathBuf, Vec<String>) = (
        config.to_path_buf(),
        args.iter().map(|arg| arg.to_string()).collect(),
    );
    let output = tokio::task::spawn_blocking(move || {
        comb_testkit::comb()
            .arg("--config")
            .arg(config)
            .args(args)
            .env("RUST_LOG", "warn")
            .output_within(COMMAND_DEADLINE)
    })
    .await
    .expect("comb ran");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn ok(config: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = comb(config, args).await;
    assert_eq!(code, 0, "comb {args:?}: {stderr}");
    stdout
}

async fn world() -> (World, tempfile::TempDir, PathBuf) {
    let world = Setup::clusters(["staging", "dev"])
        .namespace("staging", "shop")
        .start()
        .await;
    world.install_layer_crd("staging").await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    world.write_kubeconfig(&dir.path().join("kubeconfig.yaml"));
    let config = dir.path().join("comb.yaml");
    std::fs::write(&config, format!("kubeconfig: kubeconfig.yaml\n{CONFIG}"))
        .expect("the configuration is written");
    (world, dir, config)
}

#[tokio::test]
async fn a_developers_layer_in_one_command() {
    let (world, _dir, config) = world().await;
    let create = [
        "layer",
        "create",
        "alice",
        "--template",
        "dev",
        "--from",
        "staging",
        "--local",
        "api",
        "--ttl",
        "8h",
    ];

    // -o yaml writes the CombLayer, with the defaults filled in, and creates nothing.
    let mut written = create.to_vec();
    written.extend(["-o", "yaml"]);
    let yaml: serde_json::Value =
        serde_saphyr::from_str(&ok(&config, &written).await).expect("the CombLayer as YAML");
    assert_eq!(
        yaml,
        serde_json::json!({
            "apiVersion": "comb.internal/v1", "kind": "CombLayer",
            "metadata": {"name": "alice"},
            "spec": {"template": "dev", "context": "dev", "namespaces": ["dev-alice"],
                     "borrow": {"from": "staging", "namespace": "shop", "local": ["api"]},
                     "ttl": "8h"}
        })
    );
    let layers: Api<CombLayer> = Api::all_with(
        world.client("staging").await,
        &layer_api_resource(comb_api::DEFAULT_GROUP),
    );
    assert!(layers.get_opt("alice").await.expect("a read").is_none());

    assert_eq!(
        ok(&config, &create).await,
        "comblayer alice created from template dev; `comb layer list` shows when it is Ready\n"
    );
    let made = layers.get("alice").await.expect("alice is there");
    assert_eq!(made.spec.borrow.expect("a borrow").local, ["api"]);

    let list = ok(&config, &["layer", "list"]).await;
    let mut lines = list.lines();
    assert_eq!(
        lines
            .next()
            .map(|line| line.split_whitespace().collect::<Vec<_>>()),
        Some(vec![
            "NAME",
            "TEMPLATE",
            "CONTEXT",
            "NAMESPACES",
            "PHASE",
            "EXPIRES",
            "COMBS",
            "AGE",
            "MESSAGE"
        ])
    );
    assert!(
        lines
            .next()
            .is_some_and(|row| row.starts_with("alice ")
                && row.split_whitespace().nth(3) == Some("dev-alice")),
        "{list}"
    );
    // The same table, but for AGE, which may tick between the two reads.
    assert_eq!(
        cells_without(&ok(&config, &["get", "layers"]).await, "AGE"),
        cells_without(&list, "AGE")
    );

    let extended = ok(&config, &["layer", "extend", "alice", "--ttl", "2h"]).await;
    assert!(
        extended.starts_with("comblayer alice now expires at "),
        "{extended}"
    );
    let after = layers.get("alice").await.expect("alice is there");
    assert!(
        after.spec.ttl.is_none() && after.spec.expires_at.is_some(),
        "{after:?}"
    );

    // A wider ask than the template: the controller's sentence, before anything is sent.
    let (code, stdout, stderr) = comb(
        &config,
        &[
            "layer",
            "create",
            "bob",
            "--template",
            "dev",
            "--ttl",
            "48h",
        ],
    )
    .await;
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert_eq!(
        stderr,
        "comb: layer bob: spec.ttl is 48h, longer than template dev allows: raise \
         layerTemplates[0].maxTTL (now 12h) or ask for less\n"
    );
    // What the API server refuses is one line in its words.
    let (code, _, stderr) = comb(&config, &create).await;
    assert_eq!(code, 1);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("comb: ") && stderr.contains("already exists"),
        "{stderr}"
    );

    assert_eq!(
        ok(&config, &["layer", "delete", "alice"]).await,
        "comblayer alice deleted; comb removes what it made for it, then the CombLayer goes\n"
    );
    let (code, _, stderr) = comb(&config, &["layer", "delete", "alice"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("not found"), "{stderr}");
    world.shutdown().await;
}

/// `comb run` serves the CombLayers of a configuration with templates: the layer `comb layer
/// create` made becomes Ready (staging has no Combs, so it has none to wait for), and
/// `comb get layers` lists it; SIGTERM stops it.
#[tokio::test]
async fn comb_run_serves_the_layers_comb_layer_creates() {
    let (world, dir, config) = world().await;
    let log = std::fs::File::create(dir.path().join("run.log")).expect("a log file");
    let mut child = comb_testkit::comb()
        .arg("--config")
        .arg(&config)
        .arg("run")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("comb run starts");
    ok(
        &config,
        &[
            "layer",
            "create",
            "erin",
            "--template",
            "dev",
            "--from",
            "staging",
        ],
    )
    .await;
    let layers: Api<CombLayer> = Api::all_with(
        world.client("staging").await,
        &layer_api_resource(comb_api::DEFAULT_GROUP),
    );
    comb_testkit::wait_until("erin to be Ready", async || {
        layers
            .get_opt("erin")
            .await
            .ok()
            .flatten()
            .and_then(|layer| layer.status)
            .is_some_and(|status| status.phase == Some(comb_api::LayerPhase::Ready))
    })
    .await;
    let list = ok(&config, &["get", "layers"]).await;
    assert!(list.lines().any(|line| line.starts_with("erin ")), "{list}");
    let stopped = tokio::task::spawn_blocking(move || {
        comb_testkit::process::stop_within(&mut child, "TERM", COMMAND_DEADLINE)
    })
    .await
    .expect("the stop ran");
    assert!(
        stopped.is_some_and(|status| status.success()),
        "{stopped:?}"
    );
    world.shutdown().await;
}
