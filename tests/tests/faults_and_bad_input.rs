//! The fault and bad-input suite, through the `comb run` binary on the demo's layers (either
//! backend: `COMB_TEST_BACKEND`): a layer down from the start while the others converge, 500s
//! on writes, 409s on status writes, a slow server, 410 Expired on watches, a partition healed,
//! and bad input (a Secret the server refuses, a manifest without a name). It ends with every
//! Comb in its expected phase, no managed object lost, no panic, no restart, and a known value
//! (in a replicated Secret and in a Secret manifest) in no log line of `comb run` (at
//! `RUST_LOG=trace`), no Comb status, no Event, no CLI output and no admin endpoint.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use comb_api::Comb;
use comb_federation::cli::demo::DemoWorld;
use comb_sandbox::Backend;
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The value that must not leak.
const CANARY: &str = "canary-7f3a9c2e-must-not-leak";

fn canary_forms() -> [String; 2] {
    [
        CANARY.to_string(),
        base64::engine::general_purpose::STANDARD.encode(CANARY),
    ]
}

fn leaks(text: &str) -> bool {
    canary_forms()
        .iter()
        .any(|form| text.contains(form.as_str()))
}

/// `METHOD path` on the plain-HTTP server of `url` with a JSON body; the response text.
fn http(url: &str, method: &str, path: &str, body: &str) -> String {
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(address).expect("the server accepts");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("the request is sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("the response reads");
    response
}

/// The demo's layers, with dev allowing its Combs' own `spec.upstream` to borrow from prod and
/// copy from there, as dev's vault asks.
fn allow_dev_to_copy_from_prod(world: &DemoWorld) {
    let path = world.config_path();
    let text = std::fs::read_to_string(&path).expect("the demo's configuration reads");
    let mut config: Value = serde_saphyr::from_str(&text).expect("the demo's configuration");
    let dev = config["layers"]
        .as_array_mut()
        .and_then(|layers| layers.iter_mut().find(|layer| layer["name"] == "dev"))
        .expect("the demo has a layer dev");
    dev["allowUpstreams"] = json!([{"layer": "prod", "replicate": true}]);
    std::fs::write(&path, config.to_string()).expect("the configuration is written");
}

fn fault(world: &DemoWorld, cluster: &str, fault: Value) {
    let controls = world.sandbox.controls(cluster).expect("controls");
    controls.inject(serde_json::from_value(fault).expect("a fault"));
}

fn comb_cli(world: &DemoWorld, args: &[&str]) -> String {
    let output = std::process::Command::new(comb_testkit::bin::comb_path())
        .arg("--config")
        .arg(world.config_path())
        .args(args)
        .output_within(COMMAND_DEADLINE);
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn manifests(extra: Vec<Value>) -> Value {
    json!({
        "class": "Manifests",
        "config": {"manifests": extra, "endpoints": [{"name": "http", "port": 8200, "external": "192.0.2.30:8200"}]}
    })
}

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
           "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8200}]}})
}

/// The namespace of the demo's layer `context`.
fn layer_namespace(context: &str) -> &'static str {
    if context == "staging" {
        "staging"
    } else {
        "platform"
    }
}

/// The Combs of each layer.
fn everything() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("prod", &["nats", "db", "mailer", "vault"]),
        ("staging", &["nats", "db", "mailer"]),
        (
            "dev",
            &["nats", "db", "mailer", "vault", "refused", "nameless"],
        ),
    ]
}

fn expected(context: &str, name: &str) -> (&'static str, Option<&'static str>) {
    match (context, name) {
        (_, "refused") => ("Error", Some("DeployFailed")),
        (_, "nameless") => ("Error", Some("ManifestsFailed")),
        ("dev", "vault") => ("Running", Some("Borrowed")),
        _ => ("Running", None),
    }
}

/// Waits until every named Comb records its expected phase.
async fn wait_for(world: &DemoWorld, what: &str, layers: &[(&str, &[&str])], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let mut missing = Vec::new();
        for (context, names) in layers {
            for name in names.iter() {
                let (want, reason) = expected(context, name);
                let got = phase(world, context, name).await;
                let ok = got
                    .as_ref()
                    .is_some_and(|(p, r)| p == want && reason.is_none_or(|reason| r == reason));
                if !ok {
                    missing.push(format!("{context}:{name} is {got:?}, not {want}"));
                }
            }
        }
        if missing.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {missing:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every object any Comb records in `managedResources` with its uid exists.
async fn assert_nothing_lost(world: &DemoWorld) {
    let mut checked = 0;
    for context in ["prod", "staging", "dev"] {
        let client = world
            .pool
            .client(context)
            .await
            .expect("a client of the context");
        let combs: Api<Comb> = Api::namespaced_with(
            client.clone(),
            layer_namespace(context),
            &comb_api::api_resource(comb_api::DEFAULT_GROUP),
        );
        for comb in combs
            .list(&ListParams::default())
            .await
            .expect("the list answers")
        {
            let running = comb.status.as_ref().and_then(|s| s.phase.as_ref())
                == Some(&comb_api::Phase::Running);
            for resource in comb
                .status
                .as_ref()
                .map(|s| s.managed())
                .unwrap_or_default()
            {
                if resource.uid.is_none() {
                    // Written ahead of a create that failed (docs/adr/0004-ownership.md): what
                    // the Comb was making, never on a Comb that runs.
                    assert!(
                        !running,
                        "{context}: {} {} of {:?} is recorded without a uid, yet it runs",
                        resource.kind, resource.name, comb.metadata.name
                    );
                    continue;
                }
                let gvk = kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
                    api_version: resource.api_version.clone(),
                    kind: resource.kind.clone(),
                })
                .expect("a group and version");
                let (api_resource, _) = kube::discovery::pinned_kind(&client, &gvk)
                    .await
                    .expect("discovery answers");
                let api: Api<kube::api::DynamicObject> = match &resource.namespace {
                    Some(namespace) => {
                        Api::namespaced_with(client.clone(), namespace, &api_resource)
                    }
                    None => Api::all_with(client.clone(), &api_resource),
                };
                assert!(
                    api.get_opt(&resource.name)
                        .await
                        .expect("the read answers")
                        .is_some(),
                    "{context}: {} {} of {:?} is lost",
                    resource.kind,
                    resource.name,
                    comb.metadata.name
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 10, "the Combs manage objects: {checked}");
}

async fn phase(world: &DemoWorld, context: &str, name: &str) -> Option<(String, String)> {
    let api: Api<Comb> = Api::namespaced_with(
        world.pool.client(context).await.ok()?,
        layer_namespace(context),
        &comb_api::api_resource(comb_api::DEFAULT_GROUP),
    );
    let status = api.get_opt(name).await.ok()??.status?;
    let reason = status
        .ready()?
        .reason
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default();
    Some((status.phase?.to_string(), reason))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_and_bad_input_end_converged_with_nothing_lost_and_no_secret_anywhere() {
    let world = DemoWorld::start_on(Backend::from_env(), None, Duration::from_millis(50))
        .await
        .expect("the demo's clusters start");
    world.apply_examples().await.expect("the examples apply");
    allow_dev_to_copy_from_prod(&world);
    let token = base64::engine::general_purpose::STANDARD.encode(CANARY);
    world
        .apply(
            "prod",
            &json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "api-token", "namespace": "platform",
                         "annotations": {"comb.internal/replicable": "true"}},
            "data": {"token": token}}),
        )
        .await
        .unwrap();
    let vault_secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "vault-token"}, "stringData": {"token": CANARY}});
    let comb = |context: &str, name: &str, spec: Value| {
        let object = json!({"apiVersion": "comb.internal/v1", "kind": "Comb",
            "metadata": {"name": name, "namespace": "platform"}, "spec": spec});
        let context = context.to_string();
        let world = &world;
        async move { world.apply(&context, &object).await.unwrap() }
    };
    comb(
        "prod",
        "vault",
        manifests(vec![vault_secret.clone(), service("vault")]),
    )
    .await;
    let mut borrowed = manifests(vec![vault_secret.clone(), service("vault")]);
    borrowed["upstream"] = json!({"class": "K8s", "layer": "prod", "namespace": "platform",
        "replicate": [{"kind": "Secret", "name": "api-token"}]});
    comb("dev", "vault", borrowed).await;
    // Bad input: a Secret the server refuses (its data is not base64), a nameless manifest.
    comb(
        "dev",
        "refused",
        manifests(vec![json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "refused"}, "data": {"token": CANARY}})]),
    )
    .await;
    comb(
        "dev",
        "nameless",
        manifests(vec![json!({"apiVersion": "v1", "kind": "Secret",
        "stringData": {"token": CANARY}})]),
    )
    .await;

    // Faults before the controller starts: dev is down (a layer that is down while the others
    // converge), prod answers 500s on writes, 409s on status writes, slowly, and expires its
    // watches; dev's writes fail once it is back.
    world.sandbox.controls("dev").unwrap().partition();
    for (cluster, rule) in [
        (
            "prod",
            json!({"method": "PATCH", "status": 500, "count": 3}),
        ),
        ("prod", json!({"method": "POST", "status": 500, "count": 2})),
        (
            "prod",
            json!({"method": "PUT", "path": "*/status", "status": 409, "count": 3}),
        ),
        ("prod", json!({"method": "GET", "delayMs": 300, "count": 3})),
        ("prod", json!({"verb": "watch", "status": 410, "count": 4})),
        ("dev", json!({"method": "PATCH", "status": 500, "count": 4})),
        ("dev", json!({"method": "POST", "status": 500, "count": 2})),
    ] {
        fault(&world, cluster, rule);
    }

    let admin = TcpListener::bind("127.0.0.1:0").unwrap();
    let admin_address = admin.local_addr().unwrap();
    drop(admin);
    let log_path = world.dir().join("controller.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut controller = tokio::process::Command::new(comb_testkit::bin::comb_path())
        .arg("--config")
        .arg(world.config_path())
        .args(["run", "--admin-address", &admin_address.to_string()])
        .env("RUST_LOG", "trace")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("comb run starts");

    let started = Instant::now();
    // prod converges while dev is down.
    let prod_combs = ["nats", "db", "mailer", "vault"];
    wait_for(
        &world,
        "prod to converge with dev down",
        &[("prod", &prod_combs)],
        Duration::from_secs(120),
    )
    .await;
    assert!(
        phase(&world, "dev", "vault").await.is_none(),
        "dev is partitioned: nothing was recorded there"
    );
    eprintln!("prod converged with dev down after {:?}", started.elapsed());
    world.sandbox.controls("dev").unwrap().heal();
    wait_for(
        &world,
        "every layer to converge",
        &everything(),
        Duration::from_secs(120),
    )
    .await;
    eprintln!("every layer converged after {:?}", started.elapsed());

    // A partition of prod, healed: dev's borrower loses and finds its upstream again.
    let controls = world.sandbox.controls("prod").unwrap();
    controls.partition();
    tokio::time::sleep(Duration::from_secs(2)).await;
    controls.heal();
    // Well inside the 60 s resync: a lost wake-up (a dependent left Blocked) fails here.
    wait_for(
        &world,
        "every layer to converge again",
        &everything(),
        Duration::from_secs(30),
    )
    .await;
    eprintln!(
        "converged again after the partition after {:?}",
        started.elapsed()
    );
    assert!(
        controller.try_wait().unwrap().is_none(),
        "the controller ran throughout: no restart"
    );
    assert_nothing_lost(&world).await;

    // The replicated Secret is there, with the value: the test looks where it could leak from.
    let replica = Api::<Secret>::namespaced(world.pool.client("dev").await.unwrap(), "platform")
        .get("api-token")
        .await
        .expect("the Secret was replicated into dev");
    assert!(replica.data.is_some_and(|data| data.contains_key("token")));

    // Every fault was met.
    for cluster in ["prod", "dev"] {
        let faults = world.sandbox.controls(cluster).unwrap().faults();
        assert!(faults.is_empty(), "{cluster}: {faults:?}");
    }

    let mut places: Vec<(String, String)> = Vec::new();
    for path in [
        "/metrics",
        "/healthz",
        "/readyz",
        "/debug/queue",
        "/debug/layers",
    ] {
        let url = format!("http://{admin_address}");
        places.push((format!("admin {path}"), http(&url, "GET", path, "")));
    }
    for args in [
        vec!["get"],
        vec!["get", "-o", "wide"],
        vec!["check"],
        vec!["describe", "dev:platform/vault"],
        vec!["describe", "dev:platform/refused"],
        vec!["describe", "dev:platform/nameless"],
        vec!["describe", "prod:platform/vault"],
        vec!["status", "dev:platform/vault"],
        vec!["status", "dev:platform/refused"],
        vec!["endpoints", "dev:platform/vault"],
        vec!["via", "dev:platform/vault"],
    ] {
        places.push((format!("comb {}", args.join(" ")), comb_cli(&world, &args)));
    }
    for context in ["prod", "dev"] {
        let client = world.pool.client(context).await.unwrap();
        let combs: Api<Comb> = Api::all_with(
            client.clone(),
            &comb_api::api_resource(comb_api::DEFAULT_GROUP),
        );
        for comb in combs.list(&ListParams::default()).await.unwrap() {
            places.push((
                format!(
                    "status of {context}:{}",
                    comb.metadata.name.unwrap_or_default()
                ),
                serde_json::to_string(&comb.status).unwrap(),
            ));
        }
        let events: Api<Event> = Api::all(client);
        let events = events.list(&ListParams::default()).await.unwrap();
        assert!(
            !events.items.is_empty(),
            "Events were recorded in {context}"
        );
        places.push((
            format!("Events of {context}"),
            serde_json::to_string(&events.items).unwrap(),
        ));
    }
    controller.kill().await.ok();
    controller.wait().await.ok();
    let logs = std::fs::read_to_string(&log_path).unwrap();
    assert!(!logs.contains("panicked"), "no panic");
    let lines = logs.lines().count();
    assert!(
        lines > 100,
        "the controller logged at trace level: {lines} lines"
    );
    places.push(("the controller's log".into(), logs));

    let leaked: Vec<String> = places
        .iter()
        .filter(|(_, text)| leaks(text))
        .map(|(place, text)| {
            let at = canary_forms()
                .iter()
                .filter_map(|form| text.find(form.as_str()))
                .min()
                .unwrap_or(0);
            let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
            format!("{place}: {}", &text[start..end.min(start + 400)])
        })
        .collect();
    eprintln!(
        "scanned {} places, {lines} controller log lines; {} leak(s)",
        places.len(),
        leaked.len()
    );
    assert!(
        leaked.is_empty(),
        "the value leaked:\n{}",
        leaked.join("\n")
    );
}
