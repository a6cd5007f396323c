//! The copies a step reads, fed by a real watch (as the controller feeds them): what comb
//! remembers of an object as applied goes when the object goes, whoever deletes it.

use std::sync::Arc;

use comb_api::LabelKeys;
use comb_federation::engine::cache::ObjectCache;
use comb_federation::engine::projection::CombSelector;
use comb_federation::engine::reconcile::{Dependencies, StepEnv, UpstreamResolution, reconcile};
use comb_testkit::engine::*;
use comb_testkit::fixtures::*;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

/// A watch of the test namespace's ConfigMaps carrying a Comb name label, kept in `cache` as
/// the controller's watches keep theirs; ends with the test.
fn watch_config_maps(cluster: &Cluster, cache: Arc<ObjectCache>) -> tokio::task::JoinHandle<()> {
    let kind = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), cluster.ns(), &kind);
    let scope = Some(cluster.ns().to_string());
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default().labels("comb.internal/comb"));
        futures::pin_mut!(stream);
        let scope = scope.as_deref();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            let json = |object: DynamicObject| {
                let mut value = serde_json::to_value(object).expect("an object encodes");
                value["apiVersion"] = json!("v1");
                value["kind"] = json!("ConfigMap");
                value
            };
            match event {
                Event::Init => cache.list_started("v1", "ConfigMap", scope),
                Event::InitApply(object) => cache.listed("v1", "ConfigMap", scope, json(object)),
                Event::InitDone => cache.list_done("v1", "ConfigMap", scope),
                Event::Apply(object) => cache.applied("v1", "ConfigMap", json(object)),
                Event::Delete(object) => cache.deleted("v1", "ConfigMap", &json(object)),
            }
        }
    })
}

#[tokio::test]
async fn what_comb_knew_as_applied_goes_when_someone_else_deletes_the_object() {
    let cluster = Cluster::start().await;
    let cache = Arc::new(ObjectCache::new(LabelKeys::default()));
    let watch = watch_config_maps(&cluster, cache.clone());
    let ops = cluster.ops.clone().with_cache(cache.clone());
    let resource = cluster.resource("v1", "ConfigMap", "nats-settings");
    let comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![config_map("nats-settings", json!({"a": "1"}))]),
        )
        .await;
    let env = StepEnv {
        ops: &ops,
        dependencies: &Dependencies::Unknown,
        fallback: None,
        hold_progress_until: None,
    };
    // The watch has listed (an empty namespace) before the step writes.
    cluster
        .wait_until("the watch to list", async |_| {
            cache
                .list(
                    "v1",
                    "ConfigMap",
                    Some(cluster.ns()),
                    &CombSelector {
                        name: "nats".into(),
                        namespace: None,
                    },
                )
                .is_some()
        })
        .await;
    reconcile(&comb, env, UpstreamResolution::Local).await;
    assert!(
        ops.as_applied(&resource).is_some(),
        "the step remembers what it applied"
    );

    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(cluster.client.clone(), cluster.ns())
        .delete("nats-settings", &DeleteParams::default())
        .await
        .expect("deleted by someone else");
    cluster
        .wait_until("the watch to bring the deletion", async |_| {
            ops.as_applied(&resource).is_none()
        })
        .await;
    watch.abort();
}
