//! `comb run --sharded` through the binary, three replicas on three layers (either backend):
//! every layer is held by exactly one replica; a replica killed with SIGKILL has its layer taken
//! over by a survivor within about the Lease duration; a Comb edited while its holder was dead
//! converges; and the request log shows that no layer was written by two replicas at once (each
//! replica impersonates a user of its own, so every request names who made it). And a holder
//! whose renewals fail holds its layer's steps back before its Lease could expire, and takes it
//! anew once it can write it again.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Instant;

use comb_api::Comb;
use comb_sandbox::controls::LoggedRequest;
use comb_testkit::fixtures::web;
use comb_testkit::process::STOP_DEADLINE;
use comb_testkit::{Setup, World, wait_until};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LAYERS: [&str; 3] = ["alpha", "beta", "gamma"];
const REPLICAS: [&str; 3] = ["comb-replica-0", "comb-replica-1", "comb-replica-2"];
const LEASE_SECONDS: u64 = 3;

fn config(kubeconfig: &str) -> String {
    let mut text = format!("kubeconfig: {kubeconfig}\nresync: 1h\nlayers:\n");
    for layer in LAYERS {
        text.push_str(&format!(
            "  - {{name: {layer}, context: home, namespaces: [{layer}]}}\n"
        ));
    }
    text
}

/// With a template: CombLayers in namespaces `dev-*` of home, borrowing from alpha.
fn config_with_templates(kubeconfig: &str) -> String {
    config(kubeconfig)
        + "layerTemplates:\n  - {name: dev, contexts: [home], namespaces: [\"dev-*\"], \
           borrowFrom: [alpha], createNamespaces: true, maxTTL: 1h}\n"
}

/// A replica: the process and its admin address.
struct Replica {
    id: &'static str,
    child: Child,
    admin: String,
}

impl Replica {
    fn start(world: &World, dir: &Path, id: &'static str) -> Replica {
        Replica::start_with(world, dir, id, config)
    }

    fn start_with(
        world: &World,
        dir: &Path,
        id: &'static str,
        config: fn(&str) -> String,
    ) -> Replica {
        // Its own kubeconfig, impersonating a user of its own: the request log names it.
        let mut kubeconfig = world.kubeconfig();
        for named in &mut kubeconfig.auth_infos {
            if let Some(auth) = named.auth_info.as_mut() {
                auth.impersonate = Some(id.to_string());
                auth.impersonate_groups = Some(vec!["system:masters".into()]);
            }
        }
        let kubeconfig_path = dir.join(format!("{id}.kubeconfig"));
        std::fs::write(
            &kubeconfig_path,
            serde_saphyr::to_string(&kubeconfig).expect("the kubeconfig as YAML"),
        )
        .expect("the replica's kubeconfig is written");
        let config_path = dir.join(format!("{id}.yaml"));
        std::fs::write(&config_path, config(&format!("{id}.kubeconfig")))
            .expect("the replica's configuration is written");
        let admin = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .to_string();
        let log = std::fs::File::create(dir.join(format!("{id}.log"))).expect("a log file");
        let child = comb_testkit::comb()
            .arg("--config")
            .arg(&config_path)
            .args(["run", "--sharded", "--replica-id", id])
            .args(["--lease-duration", &format!("{LEASE_SECONDS}s")])
            .args(["--admin-address", &admin])
            .env("POD_NAMESPACE", "default")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("comb run --sharded starts");
        Replica { id, child, admin }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then the exit status; fails if it does not end within a deadline.
    fn stop(&mut self) -> std::process::ExitStatus {
        comb_testkit::process::stop_within(&mut self.child, "TERM", STOP_DEADLINE)
            .unwrap_or_else(|| panic!("replica {} did not end on SIGTERM", self.id))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// `GET path` on the admin address: the status code and body, or `None` when nobody answers.
async fn get(address: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.get(9..12)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

/// `/debug/shards` of a replica: layer -> its state there (`stepping`, `elsewhere`, ...).
async fn shard_states(replica: &Replica) -> Option<BTreeMap<String, String>> {
    let (code, body) = get(&replica.admin, "/debug/shards").await?;
    if code != 200 {
        return None;
    }
    let view: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(
        view["layers"]
            .as_array()?
            .iter()
            .map(|layer| {
                (
                    layer["layer"].as_str().unwrap_or_default().to_string(),
                    layer["state"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
    )
}

/// The holder and transitions of every layer's Lease, read as the observer.
async fn holders(world: &World) -> BTreeMap<String, (Option<String>, i32)> {
    let leases: Api<Lease> = Api::namespaced(world.observer("home").await, "default");
    let mut holders = BTreeMap::new();
    for layer in LAYERS {
        if let Ok(Some(lease)) = leases.get_opt(&format!("comb-shard-{layer}")).await {
            let spec = lease.spec.unwrap_or_default();
            holders.insert(
                layer.to_string(),
                (
                    spec.holder_identity.filter(|h| !h.is_empty()),
                    spec.lease_transitions.unwrap_or(0),
                ),
            );
        }
    }
    holders
}

/// Who steps which layer: held by the Lease and `stepping` in the holder's own view.
async fn stepping(
    world: &World,
    replicas: &[&Replica],
) -> Result<BTreeMap<String, String>, String> {
    let holders = holders(world).await;
    let mut by_layer = BTreeMap::new();
    for layer in LAYERS {
        let Some((Some(holder), _)) = holders.get(layer) else {
            return Err(format!("{layer}: no holder in {holders:?}"));
        };
        let Some(replica) = replicas.iter().find(|r| r.id == holder) else {
            return Err(format!("{layer}: held by {holder}, not a live replica"));
        };
        let states = shard_states(replica).await.unwrap_or_default();
        if states.get(layer).map(String::as_str) != Some("stepping") {
            return Err(format!("{layer}: {holder} says {states:?}"));
        }
        // Nobody else steps it.
        for other in replicas.iter().filter(|r| r.id != holder) {
            let states = shard_states(other).await.unwrap_or_default();
            if states.get(layer).map(String::as_str) == Some("stepping") {
                return Err(format!("{layer}: {} steps it too", other.id));
            }
        }
        by_layer.insert(layer.to_string(), holder.clone());
    }
    Ok(by_layer)
}

/// Whether Comb `namespace/name` is Running for its current generation.
async fn converged(world: &World, namespace: &str, name: &str) -> Result<(), String> {
    let combs: Api<Comb> = Api::namespaced_with(
        world.observer("home").await,
        namespace,
        &comb_api::api_resource(comb_api::DEFAULT_GROUP),
    );
    let comb = combs.get(name).await.map_err(|error| error.to_string())?;
    let status = comb.status.as_ref().ok_or("no status")?;
    let phase = status.phase.as_ref().map(ToString::to_string);
    if phase.as_deref() == Some("Running") && status.observed_generation == comb.metadata.generation
    {
        Ok(())
    } else {
        Err(format!(
            "{namespace}/{name}: {phase:?} at generation {:?} of {:?}",
            status.observed_generation, comb.metadata.generation
        ))
    }
}

/// The writers of each layer's namespace in the order they wrote (the replicas' writes but
/// their Leases'), with runs of one writer merged: `[a]`, or `[a, b]` after a takeover.
fn writers(log: &[LoggedRequest]) -> BTreeMap<String, Vec<String>> {
    let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for request in log {
        let Some(user) = &request.user else { continue };
        if !REPLICAS.contains(&user.as_str())
            || !matches!(
                request.verb.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
            || request.resource.starts_with("leases")
            || !LAYERS.contains(&request.namespace.as_str())
        {
            continue;
        }
        let run = runs.entry(request.namespace.clone()).or_default();
        if run.last() != Some(user) {
            run.push(user.clone());
        }
    }
    runs
}

/// The cluster every replica shares, a namespace per layer, and a directory for the replicas'
/// files; the binary is built before the clock of any wait starts.
async fn home_cluster() -> (World, tempfile::TempDir) {
    let mut setup = Setup::clusters(["home"]);
    for layer in LAYERS {
        setup = setup.namespace("home", layer);
    }
    let world = setup.start().await;
    let _ = comb_testkit::bin::comb_path();
    (world, tempfile::tempdir().expect("a temporary directory"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_the_layers_and_take_over_a_killed_one() {
    let (world, dir) = home_cluster().await;
    let mut replicas: Vec<Replica> = REPLICAS
        .iter()
        .map(|id| Replica::start(&world, dir.path(), id))
        .collect();

    // Every layer held by exactly one replica, one layer each.
    let all: Vec<&Replica> = replicas.iter().collect();
    let balanced = async || {
        wait_until("every layer stepped by one replica, one each", async || {
            let held = stepping(&world, &all).await?;
            let mut owners: Vec<&String> = held.values().collect();
            owners.sort();
            owners.dedup();
            if owners.len() == 3 {
                Ok(held)
            } else {
                Err(format!("not balanced yet: {held:?}"))
            }
        })
        .await
    };
    balanced().await;
    world.controls("home").record_requests(true);
    world.reset_requests("home");
    let at_reset = holders(&world).await;

    for layer in LAYERS {
        for name in ["web-0", "web-1"] {
            world
                .create_comb("home", layer, name, web(name, "nginx:1"))
                .await;
        }
    }
    for layer in LAYERS {
        for name in ["web-0", "web-1"] {
            wait_until(format!("{layer}/{name} Running"), async || {
                converged(&world, layer, name).await
            })
            .await;
        }
    }
    // The gauge is the membership the replica saw at its last renewal: a renewal that came
    // late on a loaded machine drops a member for a moment, so it is waited for.
    wait_until(
        "replica 0 to count 3 members and hold a layer",
        async || {
            let (code, metrics) = get(&replicas[0].admin, "/metrics").await.expect("metrics");
            if code == 200
                && metrics.contains("comb_shard_members 3")
                && metrics.contains("comb_shard_held{layer=")
            {
                Ok(())
            } else {
                Err(format!("{code}: {metrics}"))
            }
        },
    )
    .await;

    // Kill the holder of alpha (as it is now), and edit one of its Combs while nobody steps it.
    let held = balanced().await;
    let before_kill = holders(&world).await;
    let victim_id = held["alpha"].clone();
    let victim = replicas
        .iter()
        .position(|r| r.id == victim_id)
        .expect("the holder is a replica");
    let mut victim = replicas.remove(victim);
    victim.kill();
    let killed_at = Instant::now();
    world
        .patch_comb_spec("home", "alpha", "web-0", web("web-0", "nginx:2"))
        .await;

    let survivors: Vec<&Replica> = replicas.iter().collect();
    let after = wait_until("alpha taken over by a survivor", async || {
        let held = stepping(&world, &survivors).await?;
        if held["alpha"] == victim_id {
            return Err("still the victim".to_string());
        }
        Ok(held)
    })
    .await;
    let takeover = killed_at.elapsed();
    println!(
        "takeover of layer alpha after SIGKILL of {victim_id}: {} ms (Lease duration {LEASE_SECONDS} s) on {:?}",
        takeover.as_millis(),
        world.backend()
    );
    let after_takeover = holders(&world).await;
    assert!(
        after_takeover["alpha"].1 > before_kill["alpha"].1,
        "the takeover is a new transition (fencing token): {before_kill:?} -> {after_takeover:?}"
    );
    // The other layers stayed where they were (unless their Leases changed hands meanwhile: a
    // replica starved of CPU for a Lease duration counts as gone, rightly).
    for layer in ["beta", "gamma"] {
        if after_takeover[layer].1 == before_kill[layer].1 {
            assert_eq!(after[layer], held[layer], "{layer} did not move");
        }
    }

    // Nothing lost: the edit made while the holder was dead converges, and the rest stays.
    wait_until("alpha/web-0 runs nginx:2", async || {
        if image(&world, "alpha", "web-0").await.as_deref() == Some("nginx:2") {
            converged(&world, "alpha", "web-0").await
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    for layer in LAYERS {
        for name in ["web-0", "web-1"] {
            wait_until(format!("{layer}/{name} Running"), async || {
                converged(&world, layer, name).await
            })
            .await;
        }
    }

    // The request log: the writers of a layer change only when its Lease changes hands (the
    // fencing token), never in turns; without other moves, each layer was written by its
    // holder alone, and alpha by the victim, then by the taker.
    let log = world.controls("home").request_log();
    let runs = writers(&log);
    let at_end = holders(&world).await;
    let mut moves = 0;
    for layer in LAYERS {
        let switches = runs[layer].len() - 1;
        let transitions = at_end[layer].1 - at_reset[layer].1;
        assert!(
            i32::try_from(switches).unwrap() <= transitions,
            "{layer}: writers {:?} switched {switches} times over {transitions} Lease transitions",
            runs[layer]
        );
        moves += transitions;
    }
    if moves == 1 {
        for layer in ["beta", "gamma"] {
            assert_eq!(runs[layer], vec![held[layer].clone()], "{layer}'s writers");
        }
        assert_eq!(
            runs["alpha"],
            vec![victim_id.clone(), after["alpha"].clone()],
            "alpha's writers, in order"
        );
    }
    println!(
        "request log: {} requests; writers by layer {runs:?}; Lease transitions since the Combs were created: {moves}",
        log.len()
    );

    // A graceful stop releases the Leases: the last survivor takes everything at once.
    let mut leaving = replicas.remove(0);
    let status = leaving.stop();
    assert!(status.success(), "{status:?}");
    let last: Vec<&Replica> = replicas.iter().collect();
    let left_at = Instant::now();
    wait_until("the last replica steps every layer", async || {
        let held = stepping(&world, &last).await?;
        if held.values().all(|holder| holder == last[0].id) {
            Ok(())
        } else {
            Err(format!("{held:?}"))
        }
    })
    .await;
    println!(
        "handover after a graceful stop: {} ms",
        left_at.elapsed().as_millis()
    );
    let status = replicas[0].stop();
    assert!(status.success(), "{status:?}");
    drop(replicas);
    world.shutdown().await;
}

/// The image of Deployment `namespace/name`, as the observer reads it.
async fn image(world: &World, namespace: &str, name: &str) -> Option<String> {
    world
        .peek("home", "apps/v1", "Deployment", namespace, name)
        .await
        .and_then(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .map(str::to_string)
        })
}

/// The state of `layer` in the replica's `/debug/shards`.
async fn state_of(replica: &Replica, layer: &str) -> Option<String> {
    shard_states(replica).await?.get(layer).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_renew_stops_stepping_before_its_lease_ends() {
    let (world, dir) = home_cluster().await;
    let mut replica = Replica::start(&world, dir.path(), REPLICAS[0]);
    wait_until("the only replica steps every layer", async || {
        stepping(&world, &[&replica]).await
    })
    .await;
    for layer in ["alpha", "beta"] {
        world
            .create_comb("home", layer, "web-0", web("web-0", "nginx:1"))
            .await;
        wait_until(format!("{layer}/web-0 Running"), async || {
            converged(&world, layer, "web-0").await
        })
        .await;
    }
    let transitions_before = holders(&world).await["alpha"].1;

    // Every write of alpha's Lease fails from now on: the holder cannot renew it (nor could
    // anyone take it).
    let controls = world.controls("home");
    controls.record_requests(true);
    controls.inject(comb_sandbox::controls::Fault::status(
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/comb-shard-alpha",
        503,
        1_000_000,
    ));
    let faulted_at = Instant::now();
    wait_until("alpha held back", async || {
        let state = state_of(&replica, "alpha").await;
        match state.as_deref() {
            Some("holding-back" | "waiting") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    println!(
        "held back {} ms after the renewals began to fail (Lease duration {LEASE_SECONDS} s)",
        faulted_at.elapsed().as_millis()
    );
    let held_back_from = controls.request_log().last().map_or(0, |r| r.seq);

    // Edits now: beta's is stepped as usual, alpha's waits for the Lease.
    for layer in ["alpha", "beta"] {
        world
            .patch_comb_spec("home", layer, "web-0", web("web-0", "nginx:2"))
            .await;
    }
    wait_until("beta/web-0 runs nginx:2", async || {
        if image(&world, "beta", "web-0").await.as_deref() == Some("nginx:2") {
            converged(&world, "beta", "web-0").await
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    wait_until("alpha's Lease given up", async || {
        state_of(&replica, "alpha").await.as_deref() == Some("waiting")
    })
    .await;
    println!(
        "gave alpha up {} ms after the renewals began to fail",
        faulted_at.elapsed().as_millis()
    );
    let log = controls.request_log();
    let written: Vec<&LoggedRequest> = log
        .iter()
        .filter(|r| r.seq > held_back_from && r.namespace == "alpha")
        .filter(|r| r.user.as_deref() == Some(REPLICAS[0]))
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .collect();
    assert!(
        written.is_empty(),
        "alpha written while held back: {written:?}"
    );
    assert_eq!(
        image(&world, "alpha", "web-0").await.as_deref(),
        Some("nginx:1")
    );

    // The Lease writable again: taken anew (a new transition), and the edit converges.
    controls.clear_faults();
    wait_until("alpha/web-0 runs nginx:2", async || {
        if image(&world, "alpha", "web-0").await.as_deref() == Some("nginx:2") {
            converged(&world, "alpha", "web-0").await
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    assert_eq!(
        state_of(&replica, "alpha").await.as_deref(),
        Some("stepping")
    );
    assert!(holders(&world).await["alpha"].1 > transitions_before);
    let status = replica.stop();
    assert!(status.success(), "{status:?}");
    world.shutdown().await;
}

const COMB_LAYERS: [&str; 4] = ["l0", "l1", "l2", "l3"];

/// The holder and transitions of each of `names`' shard Leases, read as the observer (`None`:
/// no Lease).
async fn lease_holders(
    world: &World,
    names: &[&str],
) -> BTreeMap<String, Option<(Option<String>, i32)>> {
    let leases: Api<Lease> = Api::namespaced(world.observer("home").await, "default");
    let mut holders = BTreeMap::new();
    for name in names {
        let lease = leases
            .get_opt(&format!("comb-shard-{name}"))
            .await
            .ok()
            .flatten()
            .map(|lease| {
                let spec = lease.spec.unwrap_or_default();
                (
                    spec.holder_identity.filter(|h| !h.is_empty()),
                    spec.lease_transitions.unwrap_or(0),
                )
            });
        holders.insert(name.to_string(), lease);
    }
    holders
}

async fn create_comb_layer(world: &World, name: &str) {
    let layers: Api<comb_api::CombLayer> = Api::all_with(
        world.client("home").await,
        &comb_api::layer_api_resource(comb_api::DEFAULT_GROUP),
    );
    let layer: comb_api::CombLayer = serde_json::from_value(serde_json::json!({
        "apiVersion": "comb.internal/v1", "kind": "CombLayer", "metadata": {"name": name},
        "spec": {"template": "dev", "context": "home", "namespaces": [format!("dev-{name}")],
                 "borrow": {"from": "alpha", "namespace": "alpha"}, "ttl": "1h"}
    }))
    .expect("a CombLayer");
    layers
        .create(&Default::default(), &layer)
        .await
        .expect("the CombLayer is created");
}

/// Whether every CombLayer of `names` is Ready, held by one live replica of `replicas`.
async fn comb_layers_held(
    world: &World,
    names: &[&str],
    replicas: &[&str],
) -> Result<BTreeMap<String, (String, i32)>, String> {
    let layers: Api<comb_api::CombLayer> = Api::all_with(
        world.observer("home").await,
        &comb_api::layer_api_resource(comb_api::DEFAULT_GROUP),
    );
    let mut held = BTreeMap::new();
    for (name, lease) in lease_holders(world, names).await {
        let Some((Some(holder), transitions)) = lease else {
            return Err(format!("{name}: no holder"));
        };
        if !replicas.contains(&holder.as_str()) {
            return Err(format!("{name}: held by {holder}, not a live replica"));
        }
        let layer = layers.get(&name).await.map_err(|error| error.to_string())?;
        let phase = layer.status.and_then(|status| status.phase);
        if phase != Some(comb_api::LayerPhase::Ready) {
            return Err(format!("{name}: {phase:?}"));
        }
        held.insert(name, (holder, transitions));
    }
    Ok(held)
}

/// Who wrote each CombLayer's status or finalizer, in the order they wrote, runs of one writer
/// merged.
fn comb_layer_writers(log: &[LoggedRequest]) -> BTreeMap<String, Vec<String>> {
    let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for request in log {
        let Some(user) = &request.user else { continue };
        if !REPLICAS.contains(&user.as_str())
            || !matches!(request.verb.as_str(), "update" | "patch")
            || !request.resource.starts_with("comblayers")
        {
            continue;
        }
        let run = runs.entry(request.name.clone()).or_default();
        if run.last() != Some(user) {
            run.push(user.clone());
        }
    }
    runs
}

/// Sharded, CombLayers are shared between the replicas like the file's layers (issue 34 item
/// 5): each is run by the one replica holding its Lease (the only one writing its status), a
/// CombLayer made or deleted moves no other one (their Leases keep holder and transitions; a
/// deleted one's Lease goes), and a killed replica's CombLayers are taken over by a survivor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comblayers_are_shared_by_their_leases_and_one_made_or_gone_moves_no_other() {
    let (world, dir) = home_cluster().await;
    world.install_layer_crd("home").await;
    world.controls("home").record_requests(true);
    let mut replicas: Vec<Replica> = REPLICAS[..2]
        .iter()
        .map(|id| Replica::start_with(&world, dir.path(), id, config_with_templates))
        .collect();
    let ids: Vec<&str> = replicas.iter().map(|replica| replica.id).collect();
    for name in COMB_LAYERS {
        create_comb_layer(&world, name).await;
    }
    let held = wait_until("every CombLayer Ready, held by one replica", async || {
        comb_layers_held(&world, &COMB_LAYERS, &ids).await
    })
    .await;
    let writers = comb_layer_writers(&world.controls("home").request_log());
    for (name, (holder, _)) in &held {
        assert_eq!(
            writers.get(name),
            Some(&vec![holder.clone()]),
            "{name}'s status is written by its holder alone: {writers:?}"
        );
    }

    // One made and one deleted: no other moves.
    create_comb_layer(&world, "l4").await;
    let layers: Api<comb_api::CombLayer> = Api::all_with(
        world.client("home").await,
        &comb_api::layer_api_resource(comb_api::DEFAULT_GROUP),
    );
    layers
        .delete("l0", &Default::default())
        .await
        .expect("l0 deleted");
    let kept = ["l1", "l2", "l3"];
    wait_until("l4 Ready, l0 and its Lease gone", async || {
        comb_layers_held(&world, &["l4"], &ids).await?;
        let l0 = lease_holders(&world, &["l0"]).await;
        if layers.get_opt("l0").await.ok().flatten().is_some() || l0["l0"].is_some() {
            return Err(format!("l0 still there: {l0:?}"));
        }
        Ok(())
    })
    .await;
    let after = comb_layers_held(&world, &kept, &ids)
        .await
        .expect("the others still held");
    for name in kept {
        assert_eq!(after[name], held[name], "{name} moved");
    }

    // One named like a layer of the file has no Lease of its own: it is refused all the same.
    create_comb_layer(&world, "alpha").await;
    wait_until("the CombLayer alpha refused as NameTaken", async || {
        let alpha = layers
            .get("alpha")
            .await
            .map_err(|error| error.to_string())?;
        let reason = alpha
            .status
            .as_ref()
            .and_then(|status| status.condition(comb_api::READY))
            .and_then(|ready| ready.reason.clone());
        if reason.as_ref().map(ToString::to_string).as_deref() == Some("NameTaken") {
            Ok(())
        } else {
            Err(format!("{:?}", alpha.status))
        }
    })
    .await;

    // A replica killed: its CombLayers go to the survivor, a transition each.
    let victim_id = held["l1"].0.clone();
    let victim = replicas
        .iter()
        .position(|replica| replica.id == victim_id)
        .expect("the holder is a replica");
    let mut victim = replicas.remove(victim);
    victim.kill();
    let survivor = replicas[0].id;
    let taken = wait_until(
        "the victim's CombLayers taken by the survivor",
        async || {
            let held = comb_layers_held(&world, &["l1", "l2", "l3", "l4"], &[survivor]).await?;
            Ok::<_, String>(held)
        },
    )
    .await;
    assert!(
        taken["l1"].1 > held["l1"].1,
        "l1 changed hands with a transition: {taken:?} after {held:?}"
    );
    for mut replica in replicas {
        assert!(replica.stop().success(), "{} ends cleanly", replica.id);
    }
}
