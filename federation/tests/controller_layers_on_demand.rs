//! Layers on demand (issue 34, docs/adr/0005-layers-on-demand.md), on either backend
//! (`COMB_TEST_BACKEND`): a CombLayer made while the controller runs becomes a layer that
//! borrows staging's Combs but the one it runs itself; a change of it is taken at once; a bad
//! cluster or a wider ask than its template makes only that CombLayer not Ready, saying why;
//! the file's layer is never stepped for any of it; and when the layer expires everything comb
//! made for it goes, by its record, and nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use comb_api::{CombLayer, CombLayerStatus, LayerPhase, layer_api_resource};
use comb_sandbox::controls::Fault;
use comb_testkit::Setup;
use comb_testkit::controller::{OnDemand, Running, World};
use comb_testkit::fixtures::{config_map, db_spec, web};
use comb_testkit::wait_until;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use serde_json::{Value, json};

/// staging is the file's layer (namespace shop of cluster staging, where the CombLayers are
/// too); template dev lets a layer run in cluster dev (or the context `broken`, whose server
/// is gone) in namespaces dev-*, borrowing from staging, its namespaces made by comb.
const CONFIG: &str = "resync: 1h
layerContext: staging
layers:
  - {name: staging, context: staging, namespaces: [shop]}
layerTemplates:
  - name: dev
    contexts: [dev, broken]
    kubeconfigSecrets: [comb-system/dev-kubeconfig]
    namespaces: [dev-*]
    borrowFrom: [staging]
    createNamespaces: true
    maxTTL: 8h
";

async fn world() -> World {
    let world = World::from_setup(
        Setup::clusters(["staging", "dev"])
            .namespace("staging", "shop")
            .namespace("staging", "comb-system")
            .dead_context("broken"),
    )
    .await;
    world.kit.install_layer_crd("staging").await;
    world
}

/// The file's controller on [`CONFIG`] with staging's Combs Running, and the layers on demand
/// beside it.
async fn started() -> (World, Running, OnDemand) {
    let world = world().await;
    let config = world.config(CONFIG);
    let running = world.run(config.clone()).await;
    staging_combs(&world).await;
    let on_demand = world.run_layers_on_demand(config, &running);
    (world, running, on_demand)
}

/// staging's Combs: `db` (borrowable: it publishes an external address) and `api`.
async fn staging_combs(world: &World) {
    world
        .create_comb(
            "staging",
            "shop",
            "db",
            db_spec("ClusterIP", Some("192.0.2.10:5432")),
        )
        .await;
    world
        .create_comb("staging", "shop", "api", web("api", "nginx:1"))
        .await;
    for name in ["db", "api"] {
        world
            .wait_phase("staging", "shop", name, "Running", None)
            .await;
    }
}

/// staging's `cache`, borrowed like db: db's spec, its objects named cache.
fn cache_spec() -> Value {
    let cache = db_spec("ClusterIP", Some("192.0.2.11:5432"))
        .to_string()
        .replace("\"db\"", "\"cache\"");
    serde_json::from_str(&cache).expect("cache's spec")
}

/// Waits until the `db` of the layer's namespace `namespace` of dev has staging's db's spec.
async fn wait_db_follows_staging(world: &World, namespace: &str) {
    let staging_db = world
        .combs("staging", "shop")
        .await
        .get("db")
        .await
        .expect("staging's db")
        .spec;
    let combs = world.combs("dev", namespace).await;
    wait_until(format!("{namespace}/db to take staging's new spec"), || {
        let combs = combs.clone();
        let staging_db = staging_db.clone();
        async move {
            let db = combs.get_opt("db").await.ok().flatten()?;
            (db.spec == staging_db).then_some(())
        }
    })
    .await;
}

async fn layers(world: &World) -> Api<CombLayer> {
    Api::all_with(
        world.client("staging").await,
        &layer_api_resource(comb_api::DEFAULT_GROUP),
    )
}

/// Creates CombLayer `name` with `spec`.
async fn create_layer(world: &World, name: &str, spec: Value) -> CombLayer {
    let layer: CombLayer = serde_json::from_value(json!({
        "apiVersion": "comb.internal/v1", "kind": "CombLayer",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("a CombLayer");
    layers(world)
        .await
        .create(&PostParams::default(), &layer)
        .await
        .expect("the CombLayer is created")
}

/// Waits until CombLayer `name`'s status satisfies `test`.
async fn wait_layer(
    world: &World,
    name: &str,
    what: &str,
    test: impl Fn(&CombLayerStatus) -> bool,
) -> CombLayerStatus {
    let api = layers(world).await;
    wait_until(format!("CombLayer {name} {what}"), || {
        let api = api.clone();
        let test = &test;
        async move {
            let layer = api.get_opt(name).await.ok().flatten()?;
            let status = layer.status?;
            test(&status).then_some(status)
        }
    })
    .await
}

fn ready_reason(status: &CombLayerStatus) -> Option<String> {
    status
        .condition(comb_api::READY)
        .and_then(|ready| ready.reason.as_ref())
        .map(ToString::to_string)
}

fn ready_message(status: &CombLayerStatus) -> String {
    status
        .condition(comb_api::READY)
        .and_then(|ready| ready.message.clone())
        .unwrap_or_default()
}

/// The resourceVersions of staging's Combs: a step of theirs that wrote anything changes one.
async fn staging_versions(world: &World) -> BTreeMap<String, Option<String>> {
    world
        .combs("staging", "shop")
        .await
        .list(&ListParams::default())
        .await
        .expect("staging's Combs")
        .items
        .into_iter()
        .map(|comb| {
            (
                comb.metadata.name.clone().unwrap_or_default(),
                comb.metadata.resource_version.clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_layer_is_added_changed_and_refused_at_runtime_without_touching_the_others() {
    let world = world().await;
    let config = world.config(CONFIG);
    let running = world.run(config.clone()).await;
    staging_combs(&world).await;
    let before = staging_versions(&world).await;
    let started = std::time::Instant::now();
    let on_demand = world.run_layers_on_demand(config, &running);

    // alice: every Comb of staging, api run locally.
    create_layer(
        &world,
        "alice",
        json!({"template": "dev", "context": "dev", "namespaces": ["dev-alice"],
               "borrow": {"from": "staging", "namespace": "shop", "local": ["api"]}, "ttl": "2h"}),
    )
    .await;
    let status = wait_layer(&world, "alice", "to be Ready", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await;
    eprintln!("alice Ready {:?} after create", started.elapsed());
    let counts = status.combs.clone().expect("counts");
    assert_eq!((counts.total, counts.ready), (2, 2), "{status:?}");
    assert!(status.expires_at.is_some());
    assert_eq!(
        status
            .managed_resources
            .iter()
            .map(|made| format!("{} {}", made.kind, made.name))
            .collect::<Vec<_>>(),
        ["Namespace dev-alice", "Comb api", "Comb db"],
        "what comb made is recorded, each with its uid: {status:?}"
    );
    assert!(
        status
            .managed_resources
            .iter()
            .all(|made| made.uid.is_some())
    );
    world
        .wait_phase("dev", "dev-alice", "db", "Running", Some("Borrowed"))
        .await;
    world
        .wait_phase("dev", "dev-alice", "api", "Running", Some("Healthy"))
        .await;
    // Settled: alice's status is not written again while the others below come and go.
    let settled = layers(&world)
        .await
        .get("alice")
        .await
        .expect("alice")
        .metadata
        .resource_version;

    // A cluster whose server does not answer: only bob is not Ready, and says what to fix.
    create_layer(
        &world,
        "bob",
        json!({"template": "dev", "context": "broken", "namespaces": ["dev-bob"],
               "borrow": {"from": "staging", "namespace": "shop"}}),
    )
    .await;
    let bob = wait_layer(&world, "bob", "to be refused", |status| {
        status.phase == Some(LayerPhase::Error)
    })
    .await;
    assert_eq!(ready_reason(&bob).as_deref(), Some("CredentialsInvalid"));
    let message = ready_message(&bob);
    assert!(
        message
            .starts_with("the API server of context broken did not take the layer's credentials: ")
            && message.ends_with("; fix the user of context broken in the controller's kubeconfig"),
        "{message}"
    );

    // A wider ask than the template: refused with the key that would allow it.
    create_layer(
        &world,
        "mallory",
        json!({"template": "dev", "context": "dev", "namespaces": ["shop"]}),
    )
    .await;
    let mallory = wait_layer(&world, "mallory", "to be refused", |status| {
        status.phase == Some(LayerPhase::Error)
    })
    .await;
    assert_eq!(ready_reason(&mallory).as_deref(), Some("TemplateForbidden"));
    assert_eq!(
        ready_message(&mallory),
        "spec.namespaces[0] names namespace shop, which template dev does not allow (it allows \
         dev-*): add a pattern matching shop to layerTemplates[0].namespaces"
    );
    // A second layer on alice's namespace: refused, alice untouched.
    create_layer(
        &world,
        "eve",
        json!({"template": "dev", "context": "dev", "namespaces": ["dev-alice"]}),
    )
    .await;
    let eve = wait_layer(&world, "eve", "to be refused", |status| {
        status.phase == Some(LayerPhase::Error)
    })
    .await;
    assert!(
        ready_message(&eve).contains("layers alice and eve share context dev"),
        "{eve:?}"
    );

    assert_eq!(
        layers(&world)
            .await
            .get("alice")
            .await
            .expect("alice")
            .metadata
            .resource_version,
        settled,
        "a settled layer's CombLayer is not written"
    );

    // alice changed: db runs locally now; the change is taken without a restart.
    layers(&world)
        .await
        .patch(
            "alice",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"borrow": {"local": ["api", "db"]}}})),
        )
        .await
        .expect("alice is changed");
    world
        .wait_phase("dev", "dev-alice", "db", "Running", Some("Healthy"))
        .await;
    wait_layer(&world, "alice", "to be Ready again", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await;

    // carol's cluster is the one a Secret's kubeconfig names (dev's, as a developer's own
    // kubeconfig would): the layer runs there, under the Secret's name.
    let mut dev_only = world.kit.kubeconfig();
    dev_only.current_context = Some("dev".into());
    let yaml = serde_saphyr::to_string(&dev_only).expect("the kubeconfig as YAML");
    for name in ["dev-kubeconfig", "staging-kubeconfig"] {
        Api::<Secret>::namespaced(world.client("staging").await, "comb-system")
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "stringData": {"kubeconfig": yaml}
                }))
                .expect("a Secret"),
            )
            .await
            .expect("the kubeconfig Secret");
    }
    create_layer(
        &world,
        "carol",
        json!({"template": "dev", "namespaces": ["dev-carol"],
               "kubeconfigSecret": {"namespace": "comb-system", "name": "dev-kubeconfig"},
               "borrow": {"from": "staging", "namespace": "shop", "local": ["api"]}}),
    )
    .await;
    wait_layer(&world, "carol", "to be Ready", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await;
    world
        .wait_phase("dev", "dev-carol", "db", "Running", Some("Borrowed"))
        .await;
    // The Secret rotated to credentials that do not work: only carol says so, and what to fix;
    // rotated back, carol is Ready again. No restart, no change of the CombLayer.
    let secrets: Api<Secret> = Api::namespaced(world.client("staging").await, "comb-system");
    let rotate = |context: &'static str| {
        let mut kubeconfig = world.kit.kubeconfig();
        kubeconfig.current_context = Some(context.into());
        let yaml = serde_saphyr::to_string(&kubeconfig).expect("the kubeconfig as YAML");
        json!({"stringData": {"kubeconfig": yaml}})
    };
    secrets
        .patch(
            "dev-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(rotate("broken")),
        )
        .await
        .expect("the Secret rotated");
    let refused = wait_layer(
        &world,
        "carol",
        "to refuse the rotated credentials",
        |status| status.phase == Some(LayerPhase::Error),
    )
    .await;
    assert_eq!(
        ready_reason(&refused).as_deref(),
        Some("CredentialsInvalid")
    );
    assert!(
        ready_message(&refused)
            .ends_with("; fix the kubeconfig in Secret comb-system/dev-kubeconfig"),
        "{refused:?}"
    );
    assert_eq!(
        layers(&world)
            .await
            .get("alice")
            .await
            .expect("alice")
            .status
            .and_then(|s| s.phase),
        Some(LayerPhase::Ready),
        "alice is not disturbed"
    );
    secrets
        .patch(
            "dev-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(rotate("dev")),
        )
        .await
        .expect("the Secret rotated back");
    wait_layer(&world, "carol", "to be Ready again", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await;

    // Issue 19's attack through a CombLayer: another Secret (staging's credentials, say) is
    // refused before anything is read.
    create_layer(
        &world,
        "trudy",
        json!({"template": "dev", "namespaces": ["dev-trudy"],
               "kubeconfigSecret": {"namespace": "comb-system", "name": "staging-kubeconfig"}}),
    )
    .await;
    let trudy = wait_layer(&world, "trudy", "to be refused", |status| {
        status.phase == Some(LayerPhase::Error)
    })
    .await;
    assert_eq!(
        ready_message(&trudy),
        "spec.kubeconfigSecret names Secret comb-system/staging-kubeconfig, which template dev \
         does not allow: add comb-system/staging-kubeconfig to layerTemplates[0].kubeconfigSecrets"
    );

    // None of it stepped staging's Combs: not one of them was written.
    assert_eq!(staging_versions(&world).await, before);
    on_demand.stop().await;
    running.stop().await;
}

/// Every namespaced object in `namespace` of `context`, of every kind the server serves, as
/// `Kind name`.
/// Every cluster-scoped object of `context` (of every kind it lists) that carries a label of
/// comb's (`comb.internal/...`), as `Kind name`.
async fn cluster_scoped_of_combs(world: &World, context: &str) -> Vec<String> {
    let client = world.client(context).await;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            if capabilities.scope != Scope::Cluster
                || !capabilities.supports_operation(kube::discovery::verbs::LIST)
            {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            if let Ok(list) = api.list(&ListParams::default()).await {
                found.extend(
                    list.items
                        .into_iter()
                        .filter(|object| {
                            object.metadata.labels.as_ref().is_some_and(|labels| {
                                labels.keys().any(|key| key.starts_with("comb.internal/"))
                            })
                        })
                        .map(|object| {
                            format!(
                                "{} {}",
                                resource.kind,
                                object.metadata.name.unwrap_or_default()
                            )
                        }),
                );
            }
        }
    }
    found
}

async fn everything_in(world: &World, context: &str, namespace: &str) -> Vec<String> {
    let client = world.client(context).await;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            if capabilities.scope != Scope::Namespaced
                || !capabilities.supports_operation(kube::discovery::verbs::LIST)
                || resource.kind == "Event"
            {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            if let Ok(list) = api.list(&ListParams::default()).await {
                found.extend(list.items.into_iter().map(|object| {
                    format!(
                        "{} {}",
                        resource.kind,
                        object.metadata.name.unwrap_or_default()
                    )
                }));
            }
        }
    }
    found
}

#[tokio::test]
async fn at_expiry_everything_the_layer_made_goes_and_nothing_else() {
    let world = world().await;
    let config = world.config(CONFIG);
    let running = world.run(config.clone()).await;
    staging_combs(&world).await;
    // dev-kept exists before the layer: comb did not make it, so it stays, and so does what
    // someone else put there.
    let dev = world.client("dev").await;
    Api::<Namespace>::all(dev.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "dev-kept"}}))
                .expect("a Namespace"),
        )
        .await
        .expect("dev-kept");
    Api::<ConfigMap>::namespaced(dev.clone(), "dev-kept")
        .create(
            &PostParams::default(),
            &serde_json::from_value(config_map("someone-elses", json!({"a": "b"})))
                .expect("a ConfigMap"),
        )
        .await
        .expect("someone else's ConfigMap");
    let on_demand = world.run_layers_on_demand(config, &running);
    create_layer(
        &world,
        "alice",
        json!({"template": "dev", "context": "dev", "namespaces": ["dev-alice", "dev-kept"],
               "borrow": {"from": "staging", "namespace": "shop", "local": ["api"]}, "ttl": "1h"}),
    )
    .await;
    wait_layer(&world, "alice", "to be Ready", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await;
    let made = everything_in(&world, "dev", "dev-alice").await;
    assert!(
        made.iter().any(|object| object == "Deployment api"),
        "alice's local api runs in dev-alice: {made:?}"
    );
    assert!(made.iter().any(|object| object == "Service db"), "{made:?}");
    assert_eq!(
        cluster_scoped_of_combs(&world, "dev").await,
        ["Namespace dev-alice"],
        "the one cluster-scoped object comb made for the layer"
    );

    // Its time runs out: the expiry is moved to now, as `comb layer extend` moves it.
    let now = jiff::Timestamp::now().to_string();
    layers(&world)
        .await
        .patch(
            "alice",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ttl": null, "expiresAt": now}})),
        )
        .await
        .expect("alice's expiry moved");
    let expired = wait_layer(&world, "alice", "to be Expired", |status| {
        status.phase == Some(LayerPhase::Expired)
    })
    .await;
    assert!(expired.managed_resources.is_empty(), "{expired:?}");
    let said = ready_message(&expired);
    // Each local api made a Deployment and a Service; each borrowing db its bridge: a Service
    // without a selector and an EndpointSlice to staging's address.
    assert_eq!(
        said,
        "layer alice expired: removed 4 Comb (dev-alice/api, dev-alice/db, dev-kept/api, \
         dev-kept/db), 1 Namespace (dev-alice); with the Combs went what they made: 2 \
         Deployment, 2 EndpointSlice, 4 Service"
    );
    let namespaces: Api<Namespace> = Api::all(dev.clone());
    wait_until("dev-alice to be gone", async || {
        namespaces
            .get_opt("dev-alice")
            .await
            .expect("the read answers")
            .is_none()
    })
    .await;
    // Nothing is left in dev-alice, nothing of comb's cluster-wide, and in dev-kept only what
    // was there before the layer.
    assert_eq!(
        everything_in(&world, "dev", "dev-alice").await,
        Vec::<String>::new()
    );
    assert_eq!(
        cluster_scoped_of_combs(&world, "dev").await,
        Vec::<String>::new()
    );
    let left: Vec<String> = everything_in(&world, "dev", "dev-kept")
        .await
        .into_iter()
        .filter(|object| {
            !object.starts_with("ServiceAccount ") && object != "ConfigMap kube-root-ca.crt"
        })
        .collect();
    assert_eq!(left, ["ConfigMap someone-elses"]);
    // staging's Combs stand.
    for name in ["db", "api"] {
        world
            .wait_phase("staging", "shop", name, "Running", None)
            .await;
    }
    // The Event on the CombLayer says what went.
    let events: Api<Event> = Api::namespaced(world.client("staging").await, "default");
    let removed = wait_until("the Event on alice", async || {
        events
            .list(&ListParams::default())
            .await
            .expect("Events")
            .items
            .into_iter()
            .find(|event| {
                event.involved_object.kind.as_deref() == Some("CombLayer")
                    && event.reason.as_deref() == Some("LayerRemoved")
            })
    })
    .await;
    assert_eq!(removed.message.as_deref(), Some(said.as_str()));
    on_demand.stop().await;
    running.stop().await;
}

/// Creates CombLayer `name` of template dev in namespace `dev-<name>`, running staging's api
/// and borrowing the rest, and waits until it is Ready.
async fn ready_layer(world: &World, name: &str) -> CombLayerStatus {
    create_layer(
        world,
        name,
        json!({"template": "dev", "context": "dev", "namespaces": [format!("dev-{name}")],
               "borrow": {"from": "staging", "namespace": "shop", "local": ["api"]}}),
    )
    .await;
    wait_layer(world, name, "to be Ready", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await
}

/// Deletes CombLayer `name` and waits until it and its namespace `dev-<name>` are gone.
async fn delete_layer(world: &World, name: &str) {
    let api = layers(world).await;
    api.delete(name, &Default::default())
        .await
        .expect("the CombLayer is deleted");
    wait_until(format!("CombLayer {name} to be gone"), async || {
        api.get_opt(name).await.expect("the read answers").is_none()
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(world.client("dev").await);
    wait_until(format!("dev-{name} to be gone"), async || {
        namespaces
            .get_opt(&format!("dev-{name}"))
            .await
            .expect("the read answers")
            .is_none()
    })
    .await;
}

#[tokio::test]
async fn deleting_a_comblayer_removes_what_comb_made_then_the_comblayer() {
    let (world, running, on_demand) = started().await;
    ready_layer(&world, "dave").await;
    delete_layer(&world, "dave").await;
    assert_eq!(
        everything_in(&world, "dev", "dev-dave").await,
        Vec::<String>::new()
    );
    assert_eq!(
        staging_versions(&world).await.len(),
        2,
        "staging's Combs stand"
    );
    on_demand.stop().await;
    running.stop().await;
}

/// A create that fails halfway through making a layer loses nothing: what comb was about to
/// make is in the CombLayer's record before it is made, so the namespace made before the
/// failed Comb create is the layer's, and goes with it. Before, the record was written only
/// after everything was made: the namespace made before the failure was never recorded, the
/// next look found it existing and left it, and it outlived the layer.
#[tokio::test]
async fn a_create_that_fails_halfway_loses_nothing_the_layer_made() {
    let (world, running, on_demand) = started().await;
    world.controls("dev").inject(Fault::status(
        "POST",
        "/apis/comb.internal/v1/namespaces/dev-erin/combs",
        500,
        1,
    ));
    let ready = ready_layer(&world, "erin").await;
    let mut record: Vec<(String, String, bool)> = ready
        .managed_resources
        .iter()
        .map(|made| (made.kind.clone(), made.name.clone(), made.uid.is_some()))
        .collect();
    record.sort();
    let entry = |kind: &str, name: &str| (kind.to_string(), name.to_string(), true);
    assert_eq!(
        record,
        [
            entry("Comb", "api"),
            entry("Comb", "db"),
            entry("Namespace", "dev-erin")
        ],
        "every object made, recorded with its uid"
    );
    delete_layer(&world, "erin").await;
    on_demand.stop().await;
    running.stop().await;
}

/// A Comb someone makes under the name comb is about to create for a layer, labelled as the
/// layer's, never becomes the layer's: comb's create meets it (409), and the entry written
/// ahead for it leaves the record the server holds. Before, the write after the creates was
/// skipped when the layer's record came out as it started, so the intent stayed, and the next
/// look took the forged Comb as the layer's by its label (and its removal would delete it).
#[tokio::test]
async fn a_comb_made_under_the_layers_label_meanwhile_is_never_the_layers() {
    let (world, running, on_demand) = started().await;
    ready_layer(&world, "fay").await;
    world.controls("dev").inject(Fault::delay(
        "POST",
        "/apis/comb.internal/v1/namespaces/dev-fay/combs",
        Duration::from_secs(3),
        1,
    ));
    world
        .create_comb("staging", "shop", "cache", cache_spec())
        .await;
    let cache_entry = |status: &CombLayerStatus| {
        status
            .managed_resources
            .iter()
            .find(|made| made.kind == "Comb" && made.name == "cache")
            .cloned()
    };
    wait_layer(&world, "fay", "to write cache ahead", |status| {
        cache_entry(status).is_some_and(|made| made.uid.is_none())
    })
    .await;
    // While comb's create waits: someone's Comb of that name, with the layer's label.
    let mut forged = comb_api::Comb::new(
        comb_api::DEFAULT_GROUP,
        "dev-fay",
        "cache",
        serde_json::from_value(cache_spec()).expect("a spec"),
    );
    forged.metadata.labels = Some(BTreeMap::from([(
        "comb.internal/layer".to_string(),
        "fay".to_string(),
    )]));
    let forged = world
        .combs("dev", "dev-fay")
        .await
        .create(&PostParams::default(), &forged)
        .await
        .expect("someone's cache");
    wait_layer(&world, "fay", "to forget cache", |status| {
        cache_entry(status).is_none()
    })
    .await;
    // Looks go on (the layer follows its source): the record never takes the forged Comb.
    world
        .patch_spec("staging", "shop", "db", json!({"enabled": true}))
        .await;
    wait_db_follows_staging(&world, "dev-fay").await;
    let status = layers(&world)
        .await
        .get("fay")
        .await
        .expect("fay")
        .status
        .unwrap_or_default();
    assert_eq!(cache_entry(&status), None, "{status:?}");
    let still = world
        .combs("dev", "dev-fay")
        .await
        .get("cache")
        .await
        .expect("someone's cache stands");
    assert_eq!(still.metadata.uid, forged.metadata.uid);
    on_demand.stop().await;
    running.stop().await;
}

/// The template narrowed while the layer ran (a new configuration, a new controller): the
/// layer is refused and stops, what comb made for it stays; deleted, it is still cleaned up,
/// by its record, and the CombLayer goes.
#[tokio::test]
async fn a_layer_its_template_no_longer_allows_stops_and_is_still_cleaned_up() {
    let (world, running, on_demand) = started().await;
    create_layer(
        &world,
        "frank",
        json!({"template": "dev", "context": "dev", "namespaces": ["dev-frank"],
               "borrow": {"from": "staging", "namespace": "shop", "local": ["api"]}}),
    )
    .await;
    wait_layer(&world, "frank", "to be Ready", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await;
    on_demand.stop().await;

    let narrowed = world.config(&CONFIG.replace("namespaces: [dev-*]", "namespaces: [review-*]"));
    let on_demand = world.run_layers_on_demand(narrowed, &running);
    let refused = wait_layer(&world, "frank", "to be refused", |status| {
        status.phase == Some(LayerPhase::Error)
    })
    .await;
    assert_eq!(ready_reason(&refused).as_deref(), Some("TemplateForbidden"));
    assert_eq!(
        refused.managed_resources.len(),
        3,
        "the record stays: {refused:?}"
    );
    world
        .wait_phase("dev", "dev-frank", "api", "Running", None)
        .await;

    layers(&world)
        .await
        .delete("frank", &Default::default())
        .await
        .expect("frank is deleted");
    let api = layers(&world).await;
    wait_until("CombLayer frank to be gone", async || {
        api.get_opt("frank")
            .await
            .expect("the read answers")
            .is_none()
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(world.client("dev").await);
    wait_until("dev-frank to be gone", async || {
        namespaces
            .get_opt("dev-frank")
            .await
            .expect("the read answers")
            .is_none()
    })
    .await;
    assert_eq!(
        everything_in(&world, "dev", "dev-frank").await,
        Vec::<String>::new()
    );
    on_demand.stop().await;
    running.stop().await;
}

/// The watches the controller has opened on `cluster`, by resource (`watch deployments.apps`).
fn watches_opened(world: &World, cluster: &str) -> BTreeMap<String, u64> {
    world
        .kit
        .requests(cluster)
        .into_iter()
        .filter(|(request, _)| request.starts_with("watch "))
        .collect()
}

/// Layers on demand share their watches per cluster and kind (issue 34 item 3): the layers
/// after the first open no watch at all, on their own cluster or on their source's, and each
/// is handed what is in its namespaces (every one of them becomes Ready, its local Comb
/// Healthy from the shared watches' objects).
#[tokio::test]
async fn more_layers_open_no_more_watches_than_one() {
    let (world, running, on_demand) = started().await;
    let spec = |name: &str| {
        json!({"template": "dev", "context": "dev", "namespaces": [format!("dev-{name}")],
               "borrow": {"from": "staging", "namespace": "shop", "local": ["api"]}, "ttl": "2h"})
    };
    create_layer(&world, "alice", spec("alice")).await;
    wait_layer(&world, "alice", "to be Ready", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await;
    let with_one = (
        watches_opened(&world, "dev"),
        watches_opened(&world, "staging"),
    );
    assert!(
        with_one.0.len() >= 12,
        "alice's layer watches its Combs and the 11 managed kinds on dev: {with_one:?}"
    );
    let others = ["bob", "carol", "dave"];
    for name in others {
        create_layer(&world, name, spec(name)).await;
    }
    for name in others {
        wait_layer(&world, name, "to be Ready", |status| {
            status.phase == Some(LayerPhase::Ready)
        })
        .await;
        world
            .wait_phase(
                "dev",
                &format!("dev-{name}"),
                "api",
                "Running",
                Some("Healthy"),
            )
            .await;
    }
    let with_four = (
        watches_opened(&world, "dev"),
        watches_opened(&world, "staging"),
    );
    assert_eq!(
        with_four, with_one,
        "(dev, staging) watches opened with four layers, then with one"
    );
    on_demand.stop().await;
    running.stop().await;
}

/// A layer follows the layer it borrows from while it runs: a Comb added to staging is made
/// in the layer (and borrowed), a new spec of a Comb it borrows is taken, a Comb gone from
/// staging goes from the layer and from its record; the Comb it runs itself is the
/// developer's and follows nothing.
#[tokio::test]
async fn a_layer_follows_what_its_source_gains_changes_and_loses() {
    let (world, running, on_demand) = started().await;
    create_layer(
        &world,
        "alice",
        json!({"template": "dev", "context": "dev", "namespaces": ["dev-alice"],
               "borrow": {"from": "staging", "namespace": "shop", "local": ["api"]}, "ttl": "2h"}),
    )
    .await;
    wait_layer(&world, "alice", "to be Ready", |status| {
        status.phase == Some(LayerPhase::Ready)
    })
    .await;
    let recorded = |status: &CombLayerStatus| -> Vec<String> {
        status
            .managed_resources
            .iter()
            .filter(|made| made.kind == "Comb")
            .map(|made| made.name.clone())
            .collect()
    };

    // Gained: cache, borrowed like db (db's spec, its objects named cache).
    world
        .create_comb("staging", "shop", "cache", cache_spec())
        .await;
    world
        .wait_phase("staging", "shop", "cache", "Running", None)
        .await;
    world
        .wait_phase("dev", "dev-alice", "cache", "Running", Some("Borrowed"))
        .await;
    let status = wait_layer(&world, "alice", "to record cache", |status| {
        recorded(status).contains(&"cache".to_string())
    })
    .await;
    assert!(
        status
            .managed_resources
            .iter()
            .all(|made| made.uid.is_some()),
        "{status:?}"
    );

    // Changed: db's new spec is taken; api's is not (alice runs it).
    let api_before = world
        .combs("dev", "dev-alice")
        .await
        .get("api")
        .await
        .expect("alice's api")
        .spec;
    world
        .patch_spec("staging", "shop", "db", json!({"enabled": true}))
        .await;
    world
        .patch_spec("staging", "shop", "api", json!({"enabled": true}))
        .await;
    wait_db_follows_staging(&world, "dev-alice").await;
    let dev_combs = world.combs("dev", "dev-alice").await;
    assert_eq!(
        dev_combs.get("api").await.expect("alice's api").spec,
        api_before,
        "the Comb alice runs is hers: staging's edit is not taken"
    );

    // Lost: cache goes from staging, then from alice's layer and its record.
    world.delete_comb("staging", "shop", "cache").await;
    world.wait_gone("dev", "dev-alice", "cache").await;
    let status = wait_layer(&world, "alice", "to forget cache", |status| {
        !recorded(status).contains(&"cache".to_string())
    })
    .await;
    assert_eq!(recorded(&status), ["api", "db"], "{status:?}");
    world
        .wait_phase("dev", "dev-alice", "db", "Running", Some("Borrowed"))
        .await;
    on_demand.stop().await;
    running.stop().await;
}
