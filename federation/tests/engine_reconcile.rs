//! One reconcile step against a sandbox cluster, outcome by outcome (reference §6, steps 1-4,
//! 5a, 6): Disabled, Blocked, NeedsConfig, the local path, maintenance.

use std::collections::BTreeMap;

use comb_api::{CONFIG_READY, ConditionStatus, DEPENDENCIES_READY};
use comb_federation::engine::reconcile::{Dependencies, DependencyVerdict};
use comb_testkit::engine::*;
use comb_testkit::fixtures::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, TypeMeta};
use serde_json::{Value, json};

const RESTARTED_AT: &str = "comb.internal/restartedAt";

#[tokio::test]
async fn a_disabled_comb_makes_no_request_but_the_status_write() {
    let cluster = Cluster::start_own().await;
    let mut spec = manifests_spec(vec![deployment("nats", "nats:2"), service("nats", 4222)]);
    spec["enabled"] = json!(false);
    let mut comb = cluster.comb("nats", spec).await;
    cluster.reset_requests();

    let status = cluster.reconcile(&mut comb).await;

    assert_eq!(
        verdict(&status),
        expect("Disabled", "Disabled", "spec.enabled is false")
    );
    assert_eq!(
        cluster.requests(),
        BTreeMap::from([(STATUS_WRITE.to_string(), 1)])
    );
    assert!(cluster.get("apps/v1", "Deployment", "nats").await.is_none());
    // The written status is the CR's, conditions in order, nothing checked.
    let cr = cluster.cr("nats").await;
    assert_eq!(cr.status.as_ref(), Some(&status));
    let types: Vec<&str> = status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, ["Ready", "DependenciesReady", "ConfigReady"]);
    assert_eq!(
        status
            .condition(CONFIG_READY)
            .unwrap()
            .reason
            .as_ref()
            .map(|r| r.as_str()),
        Some("NotChecked")
    );
    assert_eq!(status.observed_generation, cr.metadata.generation);
    // The very first step of a local Comb publishes its own endpoints even when it stops early.
    assert_eq!(
        status.endpoint_list()[0].cluster.as_deref(),
        Some("nats.platform.svc:4222")
    );
}

#[tokio::test]
async fn an_optional_class_without_spec_enabled_is_disabled() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .comb(
            "extra",
            json!({"class": "Manifests", "config": {"optional": true}}),
        )
        .await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Disabled",
            "Disabled",
            "Manifests is optional and spec.enabled is not set"
        )
    );
}

#[tokio::test]
async fn blocked_for_each_dependency_reason() {
    let cluster = Cluster::start().await;
    let spec = |depends_on: &[&str]| {
        let mut spec = manifests_spec(vec![config_map("mailer", json!({"a": "b"}))]);
        spec["dependsOn"] = json!(depends_on);
        spec
    };

    // Dependencies but no resolver.
    let mut comb = cluster.comb("mailer", spec(&["db", "other/cache"])).await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Blocked",
            "NoResolver",
            "depends on db, other/cache, but there is no resolver to find them"
        )
    );
    let deps = status.condition(DEPENDENCIES_READY).unwrap();
    assert_eq!(
        (deps.status, deps.reason.as_ref().map(|r| r.as_str())),
        (ConditionStatus::False, Some("NoResolver"))
    );
    assert_eq!(
        status
            .condition(CONFIG_READY)
            .unwrap()
            .reason
            .as_ref()
            .map(|r| r.as_str()),
        Some("NotChecked")
    );

    let found = dependencies(&[
        ("db", DependencyVerdict::Healthy),
        ("nats", DependencyVerdict::NotHealthy(None)),
        (
            "vault",
            DependencyVerdict::NotHealthy(Some("vault sealed\n".into())),
        ),
        (
            "ldap",
            DependencyVerdict::LookupFailed("the directory is down".into()),
        ),
    ]);
    let failed = Dependencies::Failed("panicked: the resolver broke".into());
    let cases = [
        (
            vec!["db", "other/cache"],
            "Blocked",
            "DependencyNotFound",
            "dependency other/cache not found",
        ),
        (
            vec!["nats"],
            "Blocked",
            "DependencyNotReady",
            "dependency nats is not healthy",
        ),
        (
            vec!["vault"],
            "Blocked",
            "DependencyNotReady",
            "dependency vault is not healthy: vault sealed",
        ),
        (
            vec!["ldap"],
            "Blocked",
            "ResolverFailed",
            "looking up ldap failed: the directory is down",
        ),
        (
            vec!["gone", "nats", "ldap"],
            "Blocked",
            "DependencyNotFound",
            "dependency gone not found; dependency nats is not healthy; looking up ldap failed: the directory is down",
        ),
        (
            vec!["broken"],
            "Error",
            "DependenciesFailed",
            "reading the dependencies failed: panicked: the resolver broke",
        ),
    ];
    for (index, (depends_on, phase, reason, message)) in cases.into_iter().enumerate() {
        let mut comb = cluster
            .comb(&format!("mailer-{index}"), spec(&depends_on))
            .await;
        let looked = if depends_on == ["broken"] {
            &failed
        } else {
            &found
        };
        let status = cluster.reconcile_with(&mut comb, looked).await;
        assert_eq!(
            verdict(&status),
            expect(phase, reason, message),
            "{depends_on:?}"
        );
    }
    // Nothing was deployed by a blocked Comb.
    assert!(cluster.get("v1", "ConfigMap", "mailer").await.is_none());

    // Healthy dependencies let the step go on.
    let mut comb = cluster.comb("mailer-ok", spec(&["db"])).await;
    let status = cluster.reconcile_with(&mut comb, &found).await;
    let deps = status.condition(DEPENDENCIES_READY).unwrap();
    assert_eq!(
        (
            deps.status,
            deps.reason.as_ref().map(|r| r.as_str()),
            deps.message.as_deref()
        ),
        (
            ConditionStatus::True,
            Some("Healthy"),
            Some("all dependencies are healthy")
        )
    );
    assert_eq!(
        verdict(&status),
        expect(
            "Pending",
            "Deployed",
            "applied 1 resource(s), not healthy yet"
        )
    );
}

#[tokio::test]
async fn needs_config_until_the_prerequisites_exist() {
    let cluster = Cluster::start_own().await;
    let spec = json!({"class": "Manifests", "config": {
        "manifests": [config_map("mailer", json!({"relay": "smtp"}))],
        "requires": {"secrets": ["mailer-relay"], "config": ["relay_host"]}
    }});
    let mut comb = cluster.comb("mailer", spec).await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "NeedsConfig",
            "MissingPrerequisites",
            "missing: secret mailer-relay; config key relay_host"
        )
    );
    let config = status.condition(CONFIG_READY).unwrap();
    assert_eq!(
        (config.status, config.reason.as_ref().map(|r| r.as_str())),
        (ConditionStatus::False, Some("MissingPrerequisites"))
    );
    assert!(cluster.get("v1", "ConfigMap", "mailer").await.is_none());

    cluster
        .write_as(
            "kubectl",
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mailer-relay", "namespace": NS}}),
        )
        .await;
    let mut comb = cluster
        .edit(&comb, json!({"config": {"relay_host": "smtp.example"}}))
        .await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Pending",
            "Deployed",
            "applied 1 resource(s), not healthy yet"
        )
    );
    let config = status.condition(CONFIG_READY).unwrap();
    assert_eq!(
        (
            config.reason.as_ref().map(|r| r.as_str()),
            config.message.as_deref()
        ),
        (Some("Complete"), Some("nothing missing"))
    );
}

#[tokio::test]
async fn a_comb_deploys_then_runs_healthy() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![deployment("nats", "nats:2"), service("nats", 4222)]),
        )
        .await;

    let first = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&first),
        expect(
            "Pending",
            "Deployed",
            "applied 2 resource(s), not healthy yet"
        )
    );
    assert_eq!(managed(&first), ["Deployment/nats", "Service/nats"]);
    assert_eq!(
        first.endpoint_list()[0].cluster.as_deref(),
        Some("nats.platform.svc:4222")
    );
    let live = cluster.get("apps/v1", "Deployment", "nats").await.unwrap();
    assert_eq!(live["metadata"]["labels"]["comb.internal/comb"], "nats");
    assert_eq!(
        live["spec"]["template"]["metadata"]["labels"]["comb.internal/comb-namespace"],
        NS
    );
    assert!(
        live["metadata"]["annotations"]["comb.internal/applied-digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    let settled = cluster.settle(&mut comb).await;
    assert_eq!(verdict(&settled), expect("Running", "Healthy", "healthy"));
    assert_eq!(managed(&settled), ["Deployment/nats", "Service/nats"]);
    // Ready became True at some step; its transition time stays while it stays True.
    let ready_since = settled.ready().unwrap().last_transition_time.clone();
    let again = cluster.reconcile(&mut comb).await;
    assert_eq!(again.ready().unwrap().last_transition_time, ready_since);
    assert_eq!(cluster.cr("nats").await.status, Some(again));
}

#[tokio::test]
async fn a_changed_manifest_is_redeployed() {
    let cluster = Cluster::start().await;
    let comb = cluster
        .settled(
            "nats",
            vec![deployment("nats", "nats:2"), service("nats", 4222)],
        )
        .await;

    let mut comb = cluster
        .edit(
            &comb,
            manifests_spec(vec![deployment("nats", "nats:2.10"), service("nats", 4222)]),
        )
        .await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Pending",
            "Deployed",
            "applied 2 resource(s), rendered differently now: Deployment nats"
        )
    );
    let live = cluster.get("apps/v1", "Deployment", "nats").await.unwrap();
    assert_eq!(*first_image(&live), "nats:2.10");
    assert_eq!(
        verdict(&cluster.settle(&mut comb).await),
        expect("Running", "Healthy", "healthy")
    );
}

/// A bare Pod of one container `probe` running `image`, with `env`.
fn bare_pod(image: &str, env: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
           "spec": {"containers": [{"name": "probe", "image": image, "env": env}]}})
}

/// kube-apiserver lets an update of a Pod change its images and little else: comb's apply of a
/// bound bare Pod keeps its node (set by the scheduler's binding, not in the manifest) and takes
/// a new image; any other change of its spec is the server's refusal, in its words (its first
/// line).
#[tokio::test]
async fn a_bare_pod_takes_a_new_image_and_no_other_change_of_its_spec() {
    let cluster = Cluster::start().await;
    let comb = cluster
        .settled("probe", vec![bare_pod("busybox:1", json!([]))])
        .await;
    cluster
        .wait_until("the Pod bound to a node", async |cluster| {
            let pod = cluster.get("v1", "Pod", "probe").await;
            pod.is_some_and(|pod| {
                pod["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty())
            })
        })
        .await;

    let mut comb = cluster
        .edit(
            &comb,
            manifests_spec(vec![bare_pod("busybox:2", json!([]))]),
        )
        .await;
    let (phase, ..) = verdict(&cluster.reconcile(&mut comb).await);
    assert_ne!(phase, "Error");
    let live = cluster.get("v1", "Pod", "probe").await.unwrap();
    assert_eq!(live["spec"]["containers"][0]["image"], "busybox:2");

    let env = json!([{"name": "TOKEN", "value": "s3cret-token"}]);
    let mut comb = cluster
        .edit(&comb, manifests_spec(vec![bare_pod("busybox:2", env)]))
        .await;
    let (phase, reason, message) = verdict(&cluster.reconcile(&mut comb).await);
    assert_eq!((phase.as_str(), reason.as_str()), ("Error", "DeployFailed"));
    assert!(
        message.contains(
            "Pod \"probe\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
        ),
        "{message}"
    );
    // kube-apiserver follows that line with a diff of the whole Pod spec: not in a status.
    assert!(
        !message.contains('\n') && !message.contains("s3cret"),
        "{message}"
    );
    let live = cluster.get("v1", "Pod", "probe").await.unwrap();
    assert_eq!(live["spec"]["containers"][0].get("env"), None);
}

#[tokio::test]
async fn an_object_applied_without_a_digest_is_redeployed() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .settled("nats", vec![config_map("nats", json!({"a": "1"}))])
        .await;
    // Someone replaced it by hand, keeping our labels but not the digest (as comb's field
    // manager, so that the digest comb applied goes).
    let live = cluster.get("v1", "ConfigMap", "nats").await.unwrap();
    let replaced = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "nats", "labels": live["metadata"]["labels"]}, "data": live["data"]});
    cluster.write_as("comb", &replaced).await;

    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Pending",
            "Deployed",
            "applied 1 resource(s), applied without a digest: ConfigMap nats"
        )
    );
}

#[tokio::test]
async fn a_record_that_differs_from_the_manifests_is_settled() {
    let cluster = Cluster::start_own().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![deployment("nats", "nats:2"), service("nats", 4222)]),
        )
        .await;
    let settled = cluster.settle(&mut comb).await;

    // The recorded status names the Deployment as an older comb recorded it (without its
    // uid), keeps the Service as recorded, and names a ConfigMap that never existed.
    let service = settled.managed()[1].clone();
    assert_eq!(service.kind, "Service");
    let record = vec![
        resource("apps/v1", "Deployment", "nats"),
        resource("v1", "ConfigMap", "ghost"),
        service,
    ];
    comb.adopt_cr(cluster.record_managed("nats", record).await);

    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Running",
            "Healthy",
            "healthy; the record differed from the manifests: applied 2 resource(s)"
        )
    );
    assert_eq!(managed(&status), ["Deployment/nats", "Service/nats"]);
    assert_eq!(
        verdict(&cluster.reconcile(&mut comb).await),
        expect("Running", "Healthy", "healthy")
    );
}

#[tokio::test]
async fn maintenance_applies_and_prunes_nothing() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .comb(
            "nats",
            manifests_spec(vec![
                deployment("nats", "nats:2"),
                config_map("nats", json!({"a": "1"})),
            ]),
        )
        .await;
    let settled = cluster.settle(&mut comb).await;

    // In maintenance the ConfigMap is dropped and the image changed: nothing happens.
    let mut spec = manifests_spec(vec![deployment("nats", "nats:3")]);
    spec["maintenance"] = json!("NoResourceReconciliation");
    let mut comb = cluster.edit(&comb, spec).await;
    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Maintenance",
            "Maintenance",
            "resources are not reconciled while in maintenance (spec.maintenance: NoResourceReconciliation); remove spec.maintenance to resume"
        )
    );
    assert_eq!(
        cluster.requests(),
        BTreeMap::from([(STATUS_WRITE.to_string(), 1)])
    );
    assert!(cluster.get("v1", "ConfigMap", "nats").await.is_some());
    let live = cluster.get("apps/v1", "Deployment", "nats").await.unwrap();
    assert_eq!(*first_image(&live), "nats:2");
    assert_eq!(status.managed(), settled.managed());
    assert_eq!(status.endpoints, settled.endpoints);

    // Leaving maintenance resumes: the change is applied and the ConfigMap pruned.
    let mut comb = cluster.edit(&comb, json!({"maintenance": null})).await;
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(
        verdict(&status),
        expect(
            "Pending",
            "Deployed",
            "applied 1 resource(s), rendered differently now: Deployment nats"
        )
    );
    assert!(cluster.get("v1", "ConfigMap", "nats").await.is_none());
    assert_eq!(managed(&status), ["Deployment/nats"]);
}

/// What an older comb left: objects it created and replaced whole, without a field manager, and
/// a restart annotation it merged in. The first step of this comb takes them over: what the
/// manifest no longer has goes (as a replace did), the restart and the deployment controller's
/// revision stay, and from then on an unchanged object is not written.
#[tokio::test]
async fn objects_an_older_comb_replaced_are_taken_over_once() {
    let cluster = Cluster::start().await;
    let with_env = |image: &str, env: Value| {
        let mut manifest = deployment("nats", image);
        manifest["spec"]["template"]["spec"]["containers"][0]["env"] = env;
        manifest
    };
    let old = manifests_spec(vec![
        with_env("nats:2", json!([{"name": "OLD", "value": "1"}])),
        service("nats", 4222),
    ]);
    let comb = cluster.comb("nats", old).await;
    // As an older comb wrote them: plain creates, then a restart by merge patch.
    for item in comb.render(&cluster.ops).await.unwrap() {
        let resource = ApiResource::from_gvk(
            &GroupVersionKind::try_from(&TypeMeta {
                api_version: item.api_version.clone(),
                kind: item.kind.clone(),
            })
            .unwrap(),
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(cluster.client.clone(), cluster.ns(), &resource);
        let object: DynamicObject = serde_json::from_value(item.manifest.clone()).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    // ... and recorded them by identity, as it did (no uids).
    let record = vec![
        cluster.resource("apps/v1", "Deployment", "nats"),
        cluster.resource("v1", "Service", "nats"),
    ];
    cluster.record_managed("nats", record).await;
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        cluster.ns(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    deployments
        .patch(
            "nats",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
                RESTARTED_AT: "2026-01-01T00:00:00Z"}}}}})),
        )
        .await
        .unwrap();

    let mut comb = cluster
        .edit(
            &comb,
            manifests_spec(vec![
                with_env("nats:2.10", json!([{"name": "NEW", "value": "1"}])),
                service("nats", 4222),
            ]),
        )
        .await;
    cluster.reconcile(&mut comb).await;
    let live = cluster.peek("apps/v1", "Deployment", "nats").await.unwrap();
    let container = &live["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nats:2.10");
    assert_eq!(
        container["env"],
        json!([{"name": "NEW", "value": "1"}]),
        "what the manifest no longer has is gone"
    );
    assert_eq!(
        live["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT], "2026-01-01T00:00:00Z",
        "the restart stays"
    );
    for kind in [("apps/v1", "Deployment"), ("v1", "Service")] {
        let live = cluster.peek(kind.0, kind.1, "nats").await.unwrap();
        assert!(
            comb_federation::engine::kube_ops::applied_by(&live, "comb"),
            "{kind:?} applied by comb: {:#}",
            live["metadata"]["managedFields"]
        );
    }

    cluster.settle(&mut comb).await;
    cluster.reset_requests();
    cluster.reconcile(&mut comb).await;
    let requests = cluster.requests();
    assert!(
        requests
            .keys()
            .all(|request| request.starts_with("list ") || request.starts_with("get ")),
        "a settled step after the takeover writes nothing: {requests:?}"
    );
}

/// The upgrade (issue 31, docs/adr/0004-ownership.md): an older comb recorded its objects by
/// identity only. Their labels and that record make them the Comb's once: the next step records
/// their uids (a status write, no write of an object), and from then on the record alone says.
#[tokio::test]
async fn an_older_combs_record_is_taken_once_and_held_by_uid_from_then_on() {
    let cluster = Cluster::start().await;
    let mut comb = cluster
        .settled("nats", vec![config_map("nats", json!({"a": "1"}))])
        .await;
    let settled = comb.recorded_status().cloned().expect("a status");
    let uid = settled.managed()[0].uid.clone();
    assert!(uid.is_some(), "recorded with its uid: {settled:?}");

    let older = vec![cluster.resource("v1", "ConfigMap", "nats")];
    comb.adopt_cr(cluster.record_managed("nats", older).await);

    cluster.reset_requests();
    let status = cluster.reconcile(&mut comb).await;
    assert_eq!(verdict(&status), expect("Running", "Healthy", "healthy"));
    assert_eq!(status.managed()[0].uid, uid, "the uid recorded again");
    cluster.assert_only_status_written();
    assert_eq!(cluster.requests().get(STATUS_WRITE), Some(&1));
    // Settled: nothing more to record.
    cluster.reset_requests();
    cluster.reconcile(&mut comb).await;
    assert!(
        cluster.writes_but_status().is_empty() && !cluster.requests().contains_key(STATUS_WRITE)
    );
}
