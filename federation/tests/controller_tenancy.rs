//! A Comb cannot escape its layer (DESIGN.md §6, tenancy), as the controller runs it: manifests
//! land only where the layer allows, cleanup deletes only there, and with `serviceAccount` every
//! write of a Comb's resources impersonates that service account.
//!
//! The sandbox authorizes nothing, so these tests check which requests carried
//! `Impersonate-User`, not what the API server let through. A test against a real API server
//! (to be added) should check what RBAC makes of it: with a layer `serviceAccount` bound to a
//! Role that allows Deployments and Services in `apps` only, a Comb's Deployment and Service are
//! created, a manifest the Role does not cover ends in `Error`/`DeployFailed` with the server's
//! 403 in the message, the status is still written (the controller's identity), and the
//! controller's own ClusterRole needs `impersonate` on `serviceaccounts` for any of it to work.

use comb_kubeconfigs::ClientPool;
use comb_sandbox::controls::Controls;
use comb_testkit::controller::World;
use comb_testkit::fixtures::web;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::Api;
use serde_json::{Value, json};

/// The user the layer's `serviceAccount: deployer` is for Combs in `apps`.
const DEPLOYER: &str = "system:serviceaccount:apps:deployer";

/// A Deployment in the Comb's namespace and a ConfigMap in namespace `other`.
fn reaching_out() -> Value {
    json!({
        "class": "Manifests",
        "config": {"manifests": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                      "template": {"metadata": {"labels": {"app": "web"}},
                                   "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}}}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "other"},
             "data": {"a": "1"}}
        ]}
    })
}

fn config(layer_keys: &str) -> String {
    format!("resync: 1h\nlayers: [{{name: prod, context: prod, namespaces: [apps]{layer_keys}}}]")
}

/// Counted writes of anything but Combs (the CR, its finalizer and status) and Events.
fn resource_writes(controls: &Controls) -> Vec<String> {
    controls
        .requests()
        .into_keys()
        .filter(|request| {
            let (verb, resource) = request.split_once(' ').unwrap_or_default();
            matches!(
                verb,
                "create" | "update" | "patch" | "delete" | "deletecollection"
            ) && !resource.starts_with("combs.")
                && !resource.starts_with("events")
        })
        .collect()
}

async fn config_map_in(world: &World, namespace: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(world.client("prod").await, namespace)
        .get_opt(name)
        .await
        .expect("the read answers")
}

#[tokio::test]
async fn a_manifest_for_another_namespace_is_forbidden_and_nothing_is_written() {
    let world = World::start(&["prod"], &[], &[("prod", "apps"), ("prod", "other")]).await;
    let running = world.run(world.config(&config(""))).await;
    world.controls("prod").reset_requests();
    world
        .create_comb("prod", "apps", "web", reaching_out())
        .await;
    let comb = world
        .wait_phase("prod", "apps", "web", "Error", Some("ManifestForbidden"))
        .await;
    let ready = comb.status.as_ref().unwrap().ready().unwrap();
    assert_eq!(
        ready.message.as_deref(),
        Some(
            "ConfigMap other/cfg is in namespace other, not apps; layer prod does not allow it \
             (add other to layers[0].allowNamespaces)"
        )
    );
    assert_eq!(
        resource_writes(&world.controls("prod")),
        Vec::<String>::new(),
        "not even the Deployment it may write"
    );
    assert!(config_map_in(&world, "other", "cfg").await.is_none());
    running.stop().await;
}

#[tokio::test]
async fn another_namespace_is_written_when_the_layer_allows_it_and_cleanup_stays_inside() {
    let world = World::start(&["prod"], &[], &[("prod", "apps"), ("prod", "other")]).await;
    let running = world
        .run(world.config(&config(", allowNamespaces: [other]")))
        .await;
    world
        .create_comb("prod", "apps", "web", reaching_out())
        .await;
    world
        .wait_phase("prod", "apps", "web", "Running", None)
        .await;
    assert!(config_map_in(&world, "other", "cfg").await.is_some());
    running.stop().await;

    // The layer no longer allows namespace other: the Comb is refused, and its cleanup leaves
    // the ConfigMap there alone while it deletes what is in apps.
    let running = world.run(world.config(&config(""))).await;
    world
        .wait_phase("prod", "apps", "web", "Error", Some("ManifestForbidden"))
        .await;
    world.controls("prod").reset_requests();
    world.delete_comb("prod", "apps", "web").await;
    world.wait_gone("prod", "apps", "web").await;
    let deployments: Api<Deployment> = Api::namespaced(world.client("prod").await, "apps");
    assert!(deployments.get_opt("web").await.unwrap().is_none());
    assert!(
        config_map_in(&world, "other", "cfg").await.is_some(),
        "outside what the layer allows now"
    );
    assert_eq!(
        world.controls("prod").request_count("delete", "configmaps"),
        0
    );
    running.stop().await;
}

#[tokio::test]
async fn writes_of_a_combs_resources_impersonate_the_layers_service_account() {
    let world = World::start(&["prod"], &[], &[("prod", "apps")]).await;
    // What a real API server needs to let the service account write (the emulator authorizes
    // nothing): the built-in `edit` role in apps.
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "deployer-edit", "namespace": "apps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "apps"}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(world.client("prod").await, "apps")
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    let running = world
        .run(world.config(&config(", serviceAccount: deployer")))
        .await;
    world
        .create_comb("prod", "apps", "web", web("web", "nginx:1"))
        .await;
    world
        .wait_phase("prod", "apps", "web", "Running", None)
        .await;
    let controls = world.controls("prod");
    let impersonated = controls.requests_as(DEPLOYER);
    for write in ["patch deployments.apps", "patch services"] {
        assert!(
            impersonated.contains_key(write),
            "{write}: {impersonated:?}"
        );
    }
    let as_deployer: Vec<&String> = impersonated
        .keys()
        .filter(|request| {
            !["create ", "update ", "patch ", "delete"]
                .iter()
                .any(|verb| request.starts_with(verb))
                || request.contains("combs.")
        })
        .collect();
    assert!(
        as_deployer.is_empty(),
        "reads and the Comb's own writes keep the controller's identity: {as_deployer:?}"
    );
    assert!(controls.request_count("update", "combs.comb.internal/status") > 0);

    world.delete_comb("prod", "apps", "web").await;
    world.wait_gone("prod", "apps", "web").await;
    let impersonated = controls.requests_as(DEPLOYER);
    for write in ["delete deployments.apps", "delete services"] {
        assert!(
            impersonated.get(write) == Some(&1),
            "cleanup writes as the service account too: {impersonated:?}"
        );
    }
    running.stop().await;
}

/// On a real API server, RBAC decides what a layer's `serviceAccount` may write: bound to a
/// Role for Deployments only, the Comb's Service is refused with the server's 403 and the Comb
/// ends `Error`/`DeployFailed`, while its status is still written as the controller.
#[tokio::test]
async fn the_api_servers_rbac_decides_what_the_service_account_may_write() {
    if comb_sandbox::Backend::from_env() != comb_sandbox::Backend::Kube {
        comb_sandbox::real::record_skip(
            "controller_tenancy::the_api_servers_rbac_decides: runs on the real backend only (the emulator authorizes every request)",
        );
        return;
    }
    use k8s_openapi::api::rbac::v1::Role;
    let world = World::start(&["prod"], &[], &[("prod", "apps")]).await;
    let client = world.client("prod").await;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "deployments-only", "namespace": "apps"},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), "apps")
        .create(&Default::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "deployer-deployments", "namespace": "apps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployments-only"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "apps"}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client, "apps")
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    let running = world
        .run(world.config(&config(", serviceAccount: deployer")))
        .await;
    world
        .create_comb("prod", "apps", "web", web("web", "nginx:1"))
        .await;
    let failed = world
        .wait_phase("prod", "apps", "web", "Error", Some("DeployFailed"))
        .await;
    let message = failed
        .status
        .as_ref()
        .and_then(|s| s.ready())
        .and_then(|r| r.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("403") && message.contains(DEPLOYER) && message.contains("services"),
        "the server's refusal, in its words: {message}"
    );
    assert!(
        Api::<Deployment>::namespaced(world.client("prod").await, "apps")
            .get_opt("web")
            .await
            .unwrap()
            .is_some(),
        "what the Role allows was written"
    );
    running.stop().await;
}

/// A Comb whose writer cannot be made (the layer's `serviceAccount` impersonated through a
/// kubeconfig whose CA file is gone for a moment, as a mounted file is while it is rotated) is
/// `Error`/`BuildFailed` with the client's words, and runs again with backoff: once the file is
/// back it converges with no change to its CR. (It waited for its CR to change, or the resync.)
#[tokio::test]
async fn a_writer_that_cannot_be_made_is_retried_until_it_can() {
    use base64::Engine;
    let mut world = World::start(&["prod"], &[], &[("prod", "apps")]).await;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "deployer-edit", "namespace": "apps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "apps"}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(world.client("prod").await, "apps")
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    // The same kubeconfig with the cluster's CA in a file (an empty one where the emulator
    // serves plain HTTP and has none), as a kubeconfig mounted from a Secret names it.
    let files = tempfile::tempdir().unwrap();
    let ca_file = files.path().join("ca.crt");
    let mut kubeconfig = world.kit.kubeconfig();
    let mut ca = Vec::new();
    for named in &mut kubeconfig.clusters {
        let cluster = named.cluster.as_mut().unwrap();
        if let Some(data) = cluster.certificate_authority_data.take() {
            ca = base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap();
        }
        cluster.certificate_authority = Some(ca_file.display().to_string());
    }
    std::fs::write(&ca_file, &ca).unwrap();
    world.pool = ClientPool::from_kubeconfig(kubeconfig, "a kubeconfig with its CA in a file");
    let running = world
        .run(world.config(&config(", serviceAccount: deployer")))
        .await;
    world.client("prod").await; // the test's own client, made while the file is there

    std::fs::remove_file(&ca_file).unwrap();
    world
        .create_comb("prod", "apps", "web", web("web", "nginx:1"))
        .await;
    let failed = world
        .wait_phase("prod", "apps", "web", "Error", Some("BuildFailed"))
        .await;
    let message = failed
        .status
        .as_ref()
        .and_then(|status| status.ready())
        .and_then(|ready| ready.message.clone())
        .unwrap_or_default();
    assert!(
        message.starts_with("layer prod: ") && message.contains("ca.crt"),
        "names the layer and the file: {message}"
    );
    let generation = failed.metadata.generation;

    std::fs::write(&ca_file, &ca).unwrap();
    let running_comb = world
        .wait_phase("prod", "apps", "web", "Running", None)
        .await;
    assert_eq!(
        running_comb.metadata.generation, generation,
        "no edit woke it"
    );
    running.stop().await;
}
