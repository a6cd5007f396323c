//! Nothing that is not the Comb's (issue 31, DESIGN.md §11): an attacker who may create Combs
//! in a layer takes over no object someone else made, hijacks no Service, replaces no Job and
//! gets nothing deleted, as the controller runs it; on either backend (`COMB_TEST_BACKEND`).
//! Each test reproduces an attack of the issue (before the fix each went through: the objects
//! carried the attacker's labels and content, and were deleted when its manifests were
//! emptied) and holds that it is refused with the status saying why, and that nothing was
//! written or deleted. An object its owner hands over (`comb.internal/adopt`) is taken.

use std::time::Duration;

use comb_sandbox::controls::Fault;
use comb_testkit::controller::World;
use comb_testkit::fixtures::ready_message;
use comb_testkit::wait_until;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const CONFIG: &str = "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [team-a]}]";

/// What a person made with kubectl: created by field manager `kubectl-create`.
async fn made_by_a_person<K>(world: &World, namespace: &str, object: Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    let params = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..PostParams::default()
    };
    Api::<K>::namespaced(world.client("prod").await, namespace)
        .create(&params, &object)
        .await
        .expect("created")
}

/// The object as the server has it now, if it exists.
async fn now<K>(world: &World, namespace: &str, name: &str) -> Option<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(world.client("prod").await, namespace)
        .get_opt(name)
        .await
        .expect("the read answers")
}

/// Whether the object stands as it was made: the same object (uid), never written since
/// (resourceVersion).
async fn untouched<K>(world: &World, namespace: &str, before: &K) -> bool
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let meta = before.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    now::<K>(world, namespace, name).await.is_some_and(|after| {
        after.meta().uid == meta.uid && after.meta().resource_version == meta.resource_version
    })
}

fn manifests(manifests: Vec<Value>) -> Value {
    json!({"class": "Manifests", "config": {"manifests": manifests}})
}

/// The refusal of `object`, not the Comb `team-a/<comb>`'s for `why`.
fn refusal(object: &str, why: &str, comb: &str) -> String {
    format!(
        "{object} exists and is not this Comb's: {why}; comb leaves it untouched (to hand it to \
         this Comb, annotate it comb.internal/adopt=team-a/{comb})"
    )
}

/// Every `status.managedResources` Comb `team-a/name` of prod holds from `patch` of its spec
/// until it has recorded a step of the patched spec: each version the API server stored, by a
/// watch started before the patch.
async fn records_through_a_step(world: &World, name: &str, patch: Value) -> Vec<Vec<String>> {
    let api = world.combs("prod", "team-a").await;
    let before = api.get(name).await.expect("the Comb");
    let version = before.metadata.resource_version.clone().expect("a version");
    let generation = before.metadata.generation.expect("a generation") + 1;
    let watch = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = api.watch(&watch, &version).await.expect("a watch").boxed();
    world.patch_spec("prod", "team-a", name, patch).await;
    let mut records = Vec::new();
    let stepped = tokio::time::timeout(comb_testkit::deadline(), async {
        while let Some(event) = events.next().await {
            let WatchEvent::Modified(comb) = event.expect("the watch answers") else {
                continue;
            };
            let status = comb.status.unwrap_or_default();
            records.push(
                status
                    .managed()
                    .iter()
                    .map(|entry| entry.name.clone())
                    .collect(),
            );
            if status.observed_generation == Some(generation) {
                return;
            }
        }
        panic!("the watch of {name} ended");
    })
    .await;
    assert!(
        stepped.is_ok(),
        "{name} recorded no step of generation {generation}"
    );
    records
}

/// Attack 1: a Comb whose manifests render a person's Secret, a ConfigMap marked keep (twice)
/// and another Comb's copy of a Secret took all three over in one step, and deleted them once
/// its manifests were emptied. Now each is refused, named with whose it looks like, and stays
/// as it was through both steps.
#[tokio::test]
async fn manifests_take_over_nothing_and_prune_deletes_none_of_it() {
    let world = World::start(&["prod"], &[], &[("prod", "team-a")]).await;
    let tls: Secret = made_by_a_person(
        &world,
        "team-a",
        json!({"metadata": {"name": "tls-cert"}, "stringData": {"tls.key": "the real key"}}),
    )
    .await;
    let kept: ConfigMap = made_by_a_person(
        &world,
        "team-a",
        json!({"metadata": {"name": "kept-cm", "annotations": {
            "comb.internal/keep": "true", "helm.sh/resource-policy": "keep"}},
            "data": {"a": "1"}}),
    )
    .await;
    // Another Comb's copy: its labels and comb's field manager (both can be forged; the record
    // of the other Comb is what makes it that Comb's).
    let copy: Secret = {
        let labels = json!({"comb.internal/comb": "db", "comb.internal/comb-namespace": "team-a",
                            "app.kubernetes.io/managed-by": "comb"});
        let object: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db-password", "labels": labels},
            "stringData": {"password": "the real password"}}))
        .expect("a Secret");
        Api::<Secret>::namespaced(world.client("prod").await, "team-a")
            .patch(
                "db-password",
                &PatchParams::apply("comb").force(),
                &Patch::Apply(&object),
            )
            .await
            .expect("the copy")
    };
    let running = world.run(world.config(CONFIG)).await;
    let attacks = [
        (
            "thief-tls",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls-cert"},
                   "stringData": {"tls.key": "the attacker's key"}}),
            refusal(
                "Secret team-a/tls-cert",
                "it carries no Comb's labels (written by kubectl-create)",
                "thief-tls",
            ),
        ),
        (
            "thief-kept",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept-cm",
                   "annotations": {"comb.internal/keep": "false"}}, "data": {"a": "evil"}}),
            refusal(
                "ConfigMap team-a/kept-cm",
                "it carries no Comb's labels (written by kubectl-create)",
                "thief-kept",
            ),
        ),
        (
            "thief-copy",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-password"},
                   "stringData": {"password": "the attacker's"}}),
            refusal(
                "Secret team-a/db-password",
                "it is labelled as another Comb's (comb.internal/comb=db, \
                 comb.internal/comb-namespace=team-a) (written by comb)",
                "thief-copy",
            ),
        ),
    ];
    for (name, manifest, _) in &attacks {
        world
            .create_comb("prod", "team-a", name, manifests(vec![manifest.clone()]))
            .await;
    }
    for (name, _, expected) in &attacks {
        let refused = world
            .wait_phase("prod", "team-a", name, "Error", Some("ResourceNotOwned"))
            .await;
        assert_eq!(ready_message(&refused), *expected, "{name}");
        assert!(
            refused.status.unwrap().managed().is_empty(),
            "{name} records nothing"
        );
    }
    assert!(untouched(&world, "team-a", &tls).await, "tls-cert as made");
    assert!(untouched(&world, "team-a", &kept).await, "kept-cm as made");
    assert!(untouched(&world, "team-a", &copy).await, "the copy as made");
    // A step after the refusal never records the other's object, not even written ahead for
    // the moment before its create is refused (the record of every retry named it, CI saw one).
    let records = records_through_a_step(
        &world,
        "thief-copy",
        json!({"config": {"manifests": [{"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "db-password"}, "stringData": {"password": "again"}}]}}),
    )
    .await;
    assert!(
        records.iter().all(Vec::is_empty),
        "a retry recorded {records:?}"
    );

    // Emptied: the step that prunes has nothing of theirs to delete.
    for (name, _, _) in &attacks {
        world
            .patch_spec("prod", "team-a", name, json!({"config": {"manifests": []}}))
            .await;
    }
    for (name, _, _) in &attacks {
        world
            .wait_phase("prod", "team-a", name, "Running", Some("Healthy"))
            .await;
    }
    assert!(
        untouched(&world, "team-a", &tls).await,
        "tls-cert not pruned"
    );
    assert!(
        untouched(&world, "team-a", &kept).await,
        "kept-cm not pruned"
    );
    assert!(
        untouched(&world, "team-a", &copy).await,
        "the copy not pruned"
    );
    running.stop().await;
}

/// Attack 1 across namespaces: with `allowNamespaces: [shared]`, team-b's Comb overwrote and
/// then deleted team-a's object in `shared`. Now it is refused and the object stays.
#[tokio::test]
async fn a_shared_namespace_gives_no_comb_anothers_object() {
    let world = World::start(
        &["prod"],
        &[],
        &[("prod", "team-a"), ("prod", "team-b"), ("prod", "shared")],
    )
    .await;
    let theirs: ConfigMap = made_by_a_person(
        &world,
        "shared",
        json!({"metadata": {"name": "routes"}, "data": {"owner": "team-a"}}),
    )
    .await;
    let running = world
        .run(world.config(
            "resync: 1h\nlayers: [{name: prod, context: prod, namespaces: [team-a, team-b], \
             allowNamespaces: [shared]}]",
        ))
        .await;
    world
        .create_comb(
            "prod",
            "team-b",
            "routes",
            manifests(vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "routes", "namespace": "shared"}, "data": {"owner": "team-b"}})]),
        )
        .await;
    let refused = world
        .wait_phase(
            "prod",
            "team-b",
            "routes",
            "Error",
            Some("ResourceNotOwned"),
        )
        .await;
    assert_eq!(
        ready_message(&refused),
        "ConfigMap shared/routes exists and is not this Comb's: it carries no Comb's labels \
         (written by kubectl-create); comb leaves it untouched (to hand it to this Comb, annotate \
         it comb.internal/adopt=team-b/routes)"
    );
    world.delete_comb("prod", "team-b", "routes").await;
    world.wait_gone("prod", "team-b", "routes").await;
    assert!(untouched(&world, "shared", &theirs).await);
    running.stop().await;
}

/// Attack 2 (the pattern of CVE-2021-25740): a Static upstream whose endpoint names the
/// Service `payments` kubectl made for another app relabelled it as the Comb's, gave it an
/// EndpointSlice to the attacker's address beside the real one (kube-proxy then sent part of
/// its traffic there), and deleted it with the Comb. Now the Service is left as it is, gets
/// no EndpointSlice, and stays when the Comb goes; an EndpointSlice manifest for it is refused
/// before anything is written.
#[tokio::test]
async fn a_comb_hijacks_no_service() {
    let world = World::start(&["prod"], &[], &[("prod", "team-a")]).await;
    let payments: Service = made_by_a_person(
        &world,
        "team-a",
        json!({"metadata": {"name": "payments"},
               "spec": {"selector": {"app": "payments"}, "ports": [{"name": "http", "port": 80}]}}),
    )
    .await;
    let running = world.run(world.config(CONFIG)).await;
    world
        .create_comb(
            "prod",
            "team-a",
            "thief",
            json!({"class": "Manifests",
                   "config": {"endpoints": [{"name": "http", "port": 80, "service": "payments"}]},
                   "upstream": {"class": "Static", "endpoints": [
                       {"name": "http", "port": 80, "cluster": "203.0.113.66:8080"}]}}),
        )
        .await;
    let refused = world
        .wait_phase("prod", "team-a", "thief", "Error", Some("ResourceNotOwned"))
        .await;
    assert_eq!(
        ready_message(&refused),
        refusal(
            "Service team-a/payments",
            "it carries no Comb's labels (written by kubectl-create)",
            "thief"
        )
    );
    let slices: Api<EndpointSlice> = Api::namespaced(world.client("prod").await, "team-a");
    assert!(
        slices.get_opt("payments-1").await.unwrap().is_none(),
        "no EndpointSlice for payments"
    );

    // The same with an EndpointSlice written by hand: refused before anything is written.
    world
        .create_comb(
            "prod",
            "team-a",
            "slicer",
            manifests(vec![json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "payments-evil",
                             "labels": {"kubernetes.io/service-name": "payments"}},
                "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
                "endpoints": [{"addresses": ["203.0.113.66"]}]})]),
        )
        .await;
    let forbidden = world
        .wait_phase(
            "prod",
            "team-a",
            "slicer",
            "Error",
            Some("ManifestForbidden"),
        )
        .await;
    assert_eq!(
        ready_message(&forbidden),
        "EndpointSlice payments-evil gives endpoints to Service payments, which this Comb does not \
         render before it; a Comb gives endpoints only to its own Services"
    );
    assert!(slices.get_opt("payments-evil").await.unwrap().is_none());

    world.delete_comb("prod", "team-a", "thief").await;
    world.wait_gone("prod", "team-a", "thief").await;
    assert!(
        untouched(&world, "team-a", &payments).await,
        "payments as kubectl made it: not relabelled, not deleted"
    );
    running.stop().await;
}

/// Attack 3: a Job of a Comb's Job's name that did not run to success (failed, or not started)
/// was deleted and replaced by the Comb's, whoever made it. Now it is left as it is.
#[tokio::test]
async fn a_job_that_is_not_the_combs_is_never_replaced() {
    let world = World::start(&["prod"], &[], &[("prod", "team-a")]).await;
    // Suspended, so that it neither runs nor succeeds: a Job a Comb would create anew.
    let job = |image: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"},
               "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "migrate", "image": image}]}}}})
    };
    let theirs: Job = made_by_a_person(&world, "team-a", job("theirs:1")).await;
    let running = world.run(world.config(CONFIG)).await;
    world
        .create_comb("prod", "team-a", "thief", manifests(vec![job("evil:1")]))
        .await;
    let refused = world
        .wait_phase("prod", "team-a", "thief", "Error", Some("ResourceNotOwned"))
        .await;
    assert_eq!(
        ready_message(&refused),
        refusal(
            "Job team-a/migrate",
            "it carries no Comb's labels (written by kubectl-create)",
            "thief"
        )
    );
    let now: Job = now(&world, "team-a", "migrate").await.expect("still there");
    assert_eq!(now.metadata.uid, theirs.metadata.uid, "never made anew");
    let image = now.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("theirs:1"));
    running.stop().await;
}

/// What its owner hands over is taken: `comb.internal/adopt: team-a/web` on a ConfigMap a person
/// made lets the Comb apply to it (and record it, and prune it later); a keep mark the person
/// put on it wins over the manifest's own value.
#[tokio::test]
async fn an_object_handed_over_is_taken_and_its_keep_mark_stays() {
    let world = World::start(&["prod"], &[], &[("prod", "team-a")]).await;
    let handed: ConfigMap = made_by_a_person(
        &world,
        "team-a",
        json!({"metadata": {"name": "settings", "annotations": {
            "comb.internal/adopt": "team-a/web", "comb.internal/keep": "true"}},
            "data": {"mode": "old"}}),
    )
    .await;
    let running = world.run(world.config(CONFIG)).await;
    world
        .create_comb(
            "prod",
            "team-a",
            "web",
            manifests(vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "annotations": {"comb.internal/keep": "false"}},
                "data": {"mode": "new"}})]),
        )
        .await;
    let running_comb = world
        .wait_phase("prod", "team-a", "web", "Running", Some("Healthy"))
        .await;
    let recorded = running_comb.status.unwrap().managed().to_vec();
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        recorded[0].uid, handed.metadata.uid,
        "recorded as the Comb's, by the uid of the object handed over"
    );
    let now: ConfigMap = now(&world, "team-a", "settings").await.expect("there");
    assert_eq!(
        now.metadata.uid, handed.metadata.uid,
        "taken, not made anew"
    );
    assert_eq!(now.data.unwrap()["mode"], "new");
    let annotations = now.metadata.annotations.unwrap();
    assert_eq!(
        annotations["comb.internal/keep"], "true",
        "the keep mark on the object wins over the manifest's"
    );
    assert_eq!(
        now.metadata.labels.unwrap()["comb.internal/comb"],
        "web",
        "labelled as the Comb's"
    );
    // The keep mark holds when the Comb goes.
    world.delete_comb("prod", "team-a", "web").await;
    world.wait_gone("prod", "team-a", "web").await;
    assert!(
        now_exists::<ConfigMap>(&world, "settings").await,
        "kept: marked keep"
    );
    running.stop().await;
}

async fn now_exists<K>(world: &World, name: &str) -> bool
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    now::<K>(world, "team-a", name).await.is_some()
}

/// A controller stopped between making an object and recording it (killed, its Pod deleted,
/// its node gone) leaves that object to the next one, not `ResourceNotOwned`: what a deploy
/// makes is recorded in the Comb's status before it is made (the write-ahead), so the object
/// the next controller finds is the Comb's by that record, and its uid is recorded then.
/// Without the write-ahead the Comb stayed `ResourceNotOwned` ("comb has no record of making
/// it") until a person handed the object back: the handover test of issue 32 found it, three
/// Combs of 900 when a replica's container was killed.
#[tokio::test]
async fn an_object_made_just_before_the_controller_stopped_is_still_the_combs() {
    let world = World::start(&["prod"], &[], &[("prod", "team-a")]).await;
    let controls = world.controls("prod");
    // The object's create is held long enough to stop every status write meanwhile: the
    // controller then stops with the object made and its uid recorded nowhere.
    controls.inject(Fault::delay(
        "PATCH",
        "/api/v1/namespaces/team-a/configmaps/settings",
        Duration::from_secs(2),
        1,
    ));
    let running = world.run(world.config(CONFIG)).await;
    world
        .create_comb(
            "prod",
            "team-a",
            "web",
            manifests(vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"}, "data": {"mode": "new"}})]),
        )
        .await;
    let combs = world.combs("prod", "team-a").await;
    wait_until("the ConfigMap recorded before it is made", async || {
        let comb = combs.get("web").await.ok()?;
        comb.status?
            .managed()
            .iter()
            .any(|entry| entry.name == "settings" && entry.uid.is_none())
            .then_some(())
    })
    .await;
    controls.inject(Fault::status(
        "*",
        "/apis/comb.internal/v1/namespaces/team-a/combs/web/status",
        500,
        1_000,
    ));
    let made: ConfigMap = wait_until("the ConfigMap made", async || {
        now::<ConfigMap>(&world, "team-a", "settings").await
    })
    .await;
    running.stop().await;
    controls.clear_faults();

    let running = world.run(world.config(CONFIG)).await;
    let comb = world
        .wait_phase("prod", "team-a", "web", "Running", Some("Healthy"))
        .await;
    let recorded = comb.status.expect("a status").managed().to_vec();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(
        recorded[0].uid, made.metadata.uid,
        "the object made before the stop is recorded as the Comb's, by its uid"
    );
    running.stop().await;
}
