//! Conformance of object CRUD through a real `kube::Client`: what kube-apiserver returns for
//! creates, reads, lists, updates, patches (all four kinds), deletes and their errors.

mod api_support;

use api_support::{cluster, cluster_with, names, reason, until};
use comb_sandbox::SandboxOptions;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn config_map(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"key": "value"}
    }))
    .expect("config map")
}

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "app", "image": image, "env": [{"name": "A", "value": "1"}]},
                {"name": "sidecar", "image": "envoy"}
            ]}}
        }
    }))
    .expect("deployment")
}

#[tokio::test]
async fn create_get_list_replace_delete() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    let created = api
        .create(
            &PostParams::default(),
            &config_map("one", json!({"app": "a"})),
        )
        .await
        .expect("created");
    let meta = &created.metadata;
    assert!(meta.uid.as_ref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    let first_rv: u64 = meta
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("rv");

    let (code, why, message) = reason(
        api.create(&PostParams::default(), &config_map("one", json!({})))
            .await
            .expect_err("duplicate"),
    );
    assert_eq!(
        (code, why.as_str(), message.as_str()),
        (409, "AlreadyExists", r#"configmaps "one" already exists"#)
    );

    let mut fetched = api.get("one").await.expect("get");
    assert_eq!(fetched.data, created.data);
    fetched.data = Some([("key".to_string(), "changed".to_string())].into());
    let replaced = api
        .replace("one", &PostParams::default(), &fetched)
        .await
        .expect("replaced");
    let second_rv: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("rv");
    assert!(second_rv > first_rv);

    let list = api.list(&ListParams::default()).await.expect("list");
    assert_eq!(names(&list.items), ["one"]);
    assert!(list.metadata.resource_version.is_some());

    api.delete("one", &DeleteParams::default())
        .await
        .expect("deleted");
    let (code, why, message) = reason(api.get("one").await.expect_err("gone"));
    assert_eq!(
        (code, why.as_str(), message.as_str()),
        (404, "NotFound", r#"configmaps "one" not found"#)
    );
}

#[tokio::test]
async fn stale_resource_version_conflicts() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    let created = api
        .create(&PostParams::default(), &config_map("c", json!({})))
        .await
        .expect("created");
    let mut newer = created.clone();
    newer.data = Some([("key".to_string(), "2".to_string())].into());
    api.replace("c", &PostParams::default(), &newer)
        .await
        .expect("first update");
    let (code, why, message) = reason(
        api.replace("c", &PostParams::default(), &created)
            .await
            .expect_err("stale"),
    );
    assert_eq!(code, 409);
    assert_eq!(why, "Conflict");
    assert_eq!(
        message,
        r#"Operation cannot be fulfilled on configmaps "c": the object has been modified; please apply your changes to the latest version and try again"#
    );
}

#[tokio::test]
async fn generation_counts_spec_changes_and_status_is_its_own_subresource() {
    let (sandbox, client) = cluster().await;
    let api: Api<Deployment> = Api::namespaced(client, &sandbox.ns);
    let created = api
        .create(&PostParams::default(), &deployment("web", 1, "nginx"))
        .await
        .expect("created");
    assert_eq!(created.metadata.generation, Some(1));

    // A merge patch of metadata and status: a real cluster's deployment controller writes the
    // object meanwhile, so a whole replace would race it.
    let relabelled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"tier": "front"}}, "status": {"replicas": 9}}),
            ),
        )
        .await
        .expect("relabelled");
    assert_eq!(
        relabelled.metadata.generation,
        Some(1),
        "metadata changes keep the generation"
    );
    assert!(
        relabelled
            .status
            .as_ref()
            .is_none_or(|s| s.replicas != Some(9)),
        "status ignored on the main resource"
    );

    let scaled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scaled");
    assert_eq!(scaled.metadata.generation, Some(2));

    let status = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3, "observedGeneration": 2}, "spec": {"replicas": 7}})),
        )
        .await
        .expect("status");
    assert_eq!(status.status.as_ref().and_then(|s| s.replicas), Some(3));
    assert_eq!(
        status.spec.replicas,
        Some(3),
        "the status subresource takes only status"
    );
    assert_eq!(status.metadata.generation, Some(2));
    let fetched = api.get_status("web").await.expect("get status");
    assert_eq!(fetched.status.and_then(|s| s.observed_generation), Some(2));
}

#[tokio::test]
async fn namespaced_objects_need_their_namespace() {
    let (_sandbox, client) = cluster().await;
    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let (code, why, message) = reason(
        missing
            .create(&PostParams::default(), &config_map("x", json!({})))
            .await
            .expect_err("no namespace"),
    );
    assert_eq!(
        (code, why.as_str(), message.as_str()),
        (404, "NotFound", r#"namespaces "team-a" not found"#)
    );
    let namespaces: Api<Namespace> = Api::all(client);
    for system in ["default", "kube-system", "kube-public"] {
        namespaces
            .get(system)
            .await
            .expect("system namespaces exist");
    }
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-a"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    missing
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await
        .expect("now it works");
    let (code, why, _) = reason(
        namespaces
            .delete("default", &DeleteParams::default())
            .await
            .expect_err("protected"),
    );
    assert_eq!((code, why.as_str()), (403, "Forbidden"));
}

#[tokio::test]
async fn label_and_field_selectors() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    for (name, labels) in [
        ("a", json!({"app": "web", "tier": "front", "rank": "1"})),
        ("b", json!({"app": "web", "tier": "back", "rank": "5"})),
        ("c", json!({"app": "db"})),
        ("d", json!({})),
    ] {
        api.create(&PostParams::default(), &config_map(name, labels))
            .await
            .expect("created");
    }
    let cases = [
        ("app=web", vec!["a", "b"]),
        ("app==web", vec!["a", "b"]),
        ("app!=web", vec!["c", "d"]),
        ("app in (web,db)", vec!["a", "b", "c"]),
        ("app notin (web)", vec!["c", "d"]),
        ("tier", vec!["a", "b"]),
        ("!tier", vec!["c", "d"]),
        ("app=web,tier=back", vec!["b"]),
        ("rank>2", vec!["b"]),
    ];
    for (selector, expected) in cases {
        let list = api
            .list(&ListParams::default().labels(selector))
            .await
            .expect(selector);
        assert_eq!(names(&list.items), expected, "{selector}");
    }
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=c"))
        .await
        .expect("field selector");
    assert_eq!(by_name.items.len(), 1);
    let (code, why, _) = reason(
        api.list(&ListParams::default().labels("app in web"))
            .await
            .expect_err("bad selector"),
    );
    assert_eq!((code, why.as_str()), (400, "BadRequest"));
    let (code, _, message) = reason(
        api.list(&ListParams::default().fields("data.key=value"))
            .await
            .expect_err("bad field"),
    );
    assert_eq!(
        (code, message.as_str()),
        (
            400,
            r#""data.key" is not a known field selector: only "metadata.name", "metadata.namespace""#
        )
    );
}

#[tokio::test]
async fn paging_with_limit_and_continue() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    for i in 0..5 {
        api.create(
            &PostParams::default(),
            &config_map(&format!("cm-{i}"), json!({})),
        )
        .await
        .expect("created");
    }
    let mut listed = Vec::new();
    let mut params = ListParams::default().limit(2);
    let mut pages = 0;
    loop {
        let page = api.list(&params).await.expect("page");
        pages += 1;
        listed.extend(names(&page.items));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(listed, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
}

#[tokio::test]
async fn generate_name_and_dry_run() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    let mut template = config_map("", json!({}));
    template.metadata.name = None;
    template.metadata.generate_name = Some("gen-".into());
    let generated = api
        .create(&PostParams::default(), &template)
        .await
        .expect("generated");
    let name = generated.metadata.name.clone().expect("name");
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&dry, &config_map("dry", json!({})))
        .await
        .expect("dry run");
    let (code, _, _) = reason(api.get("dry").await.expect_err("not stored"));
    assert_eq!(code, 404);
}

#[tokio::test]
async fn patches_of_every_kind() {
    let (sandbox, client) = cluster().await;
    let api: Api<Deployment> = Api::namespaced(client, &sandbox.ns);
    api.create(&PostParams::default(), &deployment("web", 1, "nginx:1"))
        .await
        .expect("created");

    // Strategic merge: the container list merges by name; env merges by name.
    let strategic = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:2", "env": [{"name": "B", "value": "2"}]}
            ]}}}})),
        )
        .await
        .expect("strategic");
    let pod = strategic.spec.template.spec.clone().expect("pod spec");
    assert_eq!(pod.containers.len(), 2, "the sidecar stays");
    assert_eq!(pod.containers[0].image.as_deref(), Some("nginx:2"));
    let env: Vec<String> = pod.containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| e.name.clone())
        .collect();
    // Patched items first, then the live ones the patch did not name (kube's
    // mergeSortedSlice).
    assert_eq!(env, ["B", "A"]);

    // Strategic merge `$patch: delete` removes one container.
    let deleted = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}})),
        )
        .await
        .expect("delete directive");
    assert_eq!(
        deleted.spec.template.spec.map(|p| p.containers.len()),
        Some(1)
    );

    // JSON merge patch replaces lists whole.
    let merged = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .expect("merge");
    assert_eq!(
        merged
            .metadata
            .labels
            .and_then(|l| l.get("a").cloned())
            .as_deref(),
        Some("b")
    );

    // JSON patch, with a failing test operation as 422.
    let json_patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/replicas", "value": 4}
    ]))
    .expect("json patch");
    let patched = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::<()>::Json(json_patch),
        )
        .await
        .expect("json patch");
    assert_eq!(patched.spec.replicas, Some(4));
    let failing =
        serde_json::from_value(json!([{"op": "test", "path": "/spec/replicas", "value": 1}]))
            .expect("patch");
    let (code, _, _) = reason(
        api.patch("web", &PatchParams::default(), &Patch::<()>::Json(failing))
            .await
            .expect_err("test fails"),
    );
    assert_eq!(code, 422);
}

#[tokio::test]
async fn server_side_apply_owns_fields_and_conflicts() {
    let (sandbox, client) = cluster().await;
    let api: Api<Deployment> = Api::namespaced(client, &sandbox.ns);
    let config = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "ssa", "labels": {"owner": "alice"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "ssa"}},
                 "template": {"metadata": {"labels": {"app": "ssa"}},
                              "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}
    });
    let created = api
        .patch(
            "ssa",
            &PatchParams::apply("alice"),
            &Patch::Apply(config.clone()),
        )
        .await
        .expect("apply creates");
    let managers: Vec<String> = created
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["alice"]);
    assert_eq!(
        created
            .metadata
            .managed_fields
            .as_ref()
            .and_then(|m| m[0].operation.clone())
            .as_deref(),
        Some("Apply")
    );

    // The same apply again writes nothing.
    let again = api
        .patch(
            "ssa",
            &PatchParams::apply("alice"),
            &Patch::Apply(config.clone()),
        )
        .await
        .expect("no-op");
    // (A real cluster's deployment controller may write the status meanwhile, so the
    // resourceVersion can move; the spec and alice's entry cannot.)
    let alice = |d: &Deployment| {
        d.metadata
            .managed_fields
            .iter()
            .flatten()
            .find(|m| m.manager.as_deref() == Some("alice"))
            .cloned()
    };
    assert_eq!(again.metadata.generation, created.metadata.generation);
    assert_eq!(alice(&again), alice(&created));

    let takeover = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa"}, "spec": {"replicas": 5}});
    let (code, why, message) = reason(
        api.patch(
            "ssa",
            &PatchParams::apply("bob"),
            &Patch::Apply(takeover.clone()),
        )
        .await
        .expect_err("conflict"),
    );
    assert_eq!((code, why.as_str()), (409, "Conflict"));
    // An applier is named without its API version, as by kube-apiserver (see differential.rs).
    assert_eq!(
        message,
        r#"Apply failed with 1 conflict: conflict with "alice": .spec.replicas"#
    );
    let forced = api
        .patch(
            "ssa",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(takeover),
        )
        .await
        .expect("forced");
    assert_eq!(forced.spec.replicas, Some(5));

    // Alice drops her label from her configuration: the server removes it.
    let mut without_label = config.clone();
    without_label["metadata"]["labels"] = json!({});
    without_label["spec"]
        .as_object_mut()
        .map(|s| s.remove("replicas"));
    let pruned = api
        .patch(
            "ssa",
            &PatchParams::apply("alice"),
            &Patch::Apply(without_label),
        )
        .await
        .expect("apply");
    assert!(
        !pruned
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("owner")
    );
    assert_eq!(pruned.spec.replicas, Some(5), "bob's field stays");
}

#[tokio::test]
async fn invalid_objects_are_rejected_like_kube_apiserver() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    let (code, why, message) = reason(
        api.create(&PostParams::default(), &config_map("Not_Valid", json!({})))
            .await
            .expect_err("bad name"),
    );
    assert_eq!((code, why.as_str()), (422, "Invalid"));
    assert!(message.starts_with(r#"ConfigMap "Not_Valid" is invalid: metadata.name: Invalid value: "Not_Valid": a lowercase RFC 1123 subdomain"#), "{message}");
}

#[tokio::test]
async fn server_side_apply_of_status_and_delete_collection() {
    let (sandbox, client) = cluster().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &sandbox.ns);
    api.create(&PostParams::default(), &deployment("web", 1, "nginx"))
        .await
        .expect("created");
    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "status": {"replicas": 1, "readyReplicas": 1}, "spec": {"replicas": 9}});
    let applied = api
        .patch_status(
            "web",
            &PatchParams::apply("status-writer"),
            &Patch::Apply(status),
        )
        .await
        .expect("status applied");
    assert_eq!(
        applied.status.as_ref().and_then(|s| s.ready_replicas),
        Some(1)
    );
    assert_eq!(
        applied.spec.replicas,
        Some(1),
        "a status apply leaves spec alone"
    );
    let entry = applied
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.manager.as_deref() == Some("status-writer"))
        .expect("the status manager is recorded");
    assert_eq!(entry.subresource.as_deref(), Some("status"));

    let cms: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    for (name, app) in [("a", "x"), ("b", "x"), ("c", "y")] {
        cms.create(
            &PostParams::default(),
            &config_map(name, json!({"app": app})),
        )
        .await
        .expect("created");
    }
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=x"),
    )
    .await
    .expect("deleted");
    let left = cms.list(&ListParams::default()).await.expect("list").items;
    assert_eq!(names(&left), ["c"]);
}

#[tokio::test]
async fn built_in_objects_keep_only_their_api_fields() {
    let (sandbox, client) = cluster().await;
    let api: Api<Deployment> = Api::namespaced(client, &sandbox.ns);
    let mut body = serde_json::to_value(deployment("typo", 1, "nginx")).expect("json");
    body["spec"]["replica"] = json!(3);
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        api.clone().into_client(),
        &sandbox.ns,
        &kube::core::ApiResource::erase::<Deployment>(&()),
    );
    let object: kube::api::DynamicObject = serde_json::from_value(body.clone()).expect("object");
    let created = raw
        .create(&PostParams::default(), &object)
        .await
        .expect("created");
    assert!(
        created.data["spec"].get("replica").is_none(),
        "unknown fields are dropped, as by a real decode"
    );
    let strict = PatchParams::default().validation_strict();
    let (code, _, message) = reason(
        api.patch(
            "typo",
            &strict,
            &Patch::Merge(json!({"spec": {"replica": 3}})),
        )
        .await
        .expect_err("strict"),
    );
    // A patched object that does not decode is invalid on the field `patch`.
    assert_eq!(code, 422);
    assert!(
        message.starts_with(r#" "" is invalid: patch: Invalid value: "#),
        "{message}"
    );
    assert!(
        message.ends_with(r#"strict decoding error: unknown field "spec.replica""#),
        "{message}"
    );
    let (code, _, _) = reason(
        api.patch(
            "typo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "three"}})),
        )
        .await
        .expect_err("wrong type"),
    );
    assert_eq!(code, 422);
}

#[tokio::test]
async fn metadata_only_reads() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    api.create(
        &PostParams::default(),
        &config_map("m", json!({"app": "meta"})),
    )
    .await
    .expect("created");
    let one = api.get_metadata("m").await.expect("metadata");
    assert_eq!(
        one.metadata
            .labels
            .and_then(|l| l.get("app").cloned())
            .as_deref(),
        Some("meta")
    );
    let list = api
        .list_metadata(&ListParams::default().labels("app=meta"))
        .await
        .expect("metadata list");
    assert_eq!(list.items.len(), 1);
    assert!(list.items[0].metadata.uid.is_some());
}

#[tokio::test]
async fn service_addresses_are_allocated_by_the_write() {
    // A plain cluster runs no simulation: whatever the responses carry, the API server gave.
    let (sandbox, client) = cluster().await;
    let api: Api<Service> = Api::namespaced(client, &sandbox.ns);
    let service = |name: &str, spec: serde_json::Value| -> Service {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name}, "spec": spec}))
        .expect("service")
    };
    let post = PostParams::default();
    let mut ips = Vec::new();
    for name in ["a", "b", "c"] {
        let created = api
            .create(&post, &service(name, json!({"ports": [{"port": 80}]})))
            .await
            .expect("created");
        let spec = created.spec.expect("spec");
        let ip = spec
            .cluster_ip
            .expect("a cluster IP in the create response");
        assert_eq!(spec.cluster_ips, Some(vec![ip.clone()]));
        ips.push(ip);
    }
    let mut unique = ips.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3, "{ips:?}");

    let node_port = api
        .create(
            &post,
            &service("np", json!({"type": "NodePort", "ports": [{"port": 80}]})),
        )
        .await
        .expect("node port service")
        .spec
        .expect("spec");
    assert!(node_port.cluster_ip.is_some());
    let port = node_port.ports.expect("ports")[0].node_port;
    assert!(
        port.is_some_and(|p| (30000..=32767).contains(&p)),
        "{port:?}"
    );
    let headless = api
        .create(&post, &service("headless", json!({"clusterIP": "None"})))
        .await
        .expect("headless")
        .spec
        .expect("spec");
    assert_eq!(headless.cluster_ip.as_deref(), Some("None"));
    let external = api
        .create(
            &post,
            &service(
                "external",
                json!({"type": "ExternalName", "externalName": "db.example.com"}),
            ),
        )
        .await
        .expect("external")
        .spec
        .expect("spec");
    assert_eq!(external.cluster_ip, None);

    let taken = &ips[0];
    let (code, why, message) = reason(
        api.create(
            &post,
            &service("d", json!({"clusterIP": taken, "ports": [{"port": 80}]})),
        )
        .await
        .expect_err("taken"),
    );
    assert_eq!((code, why.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        format!(
            r#"Service "d" is invalid: spec.clusterIPs: Invalid value: ["{taken}"]: failed to allocate IP {taken}: provided IP is already allocated"#
        )
    );

    // A replace without the addresses keeps them; a switch to ExternalName releases them.
    let mut replaced = api.get("a").await.expect("a");
    let spec = replaced.spec.as_mut().expect("spec");
    spec.cluster_ip = None;
    spec.cluster_ips = None;
    let kept = api.replace("a", &post, &replaced).await.expect("replaced");
    assert_eq!(kept.spec.and_then(|s| s.cluster_ip).as_ref(), Some(taken));
    let to_external = json!({"spec": {"type": "ExternalName", "externalName": "a.example.com"}});
    let switched = api
        .patch("a", &PatchParams::default(), &Patch::Merge(&to_external))
        .await
        .expect("switched");
    assert_eq!(switched.spec.and_then(|s| s.cluster_ip), None);
    let reused = api
        .create(
            &post,
            &service("d", json!({"clusterIP": taken, "ports": [{"port": 80}]})),
        )
        .await
        .expect("the released IP is free");
    assert_eq!(reused.spec.and_then(|s| s.cluster_ip).as_ref(), Some(taken));
}

#[tokio::test]
async fn server_side_apply_takes_the_name_of_the_live_object() {
    // kube-apiserver checks the name of the applied object: without a name in the body, the
    // live object's; a create has none to take.
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"holder": "first"}});
    let apply = PatchParams::apply("holder");
    let (code, why, message) = reason(
        api.patch("lease", &apply, &Patch::Apply(&nameless))
            .await
            .expect_err("nothing to take the name from"),
    );
    assert_eq!((code, why.as_str()), (400, "BadRequest"));
    assert_eq!(
        message,
        "the name of the object (lease based on URL) was undeterminable: name must be provided"
    );

    api.create(&PostParams::default(), &config_map("lease", json!({})))
        .await
        .expect("created");
    let applied = api
        .patch("lease", &apply, &Patch::Apply(&nameless))
        .await
        .expect("applied to the live object");
    assert_eq!(applied.metadata.name.as_deref(), Some("lease"));
    assert_eq!(
        applied
            .data
            .and_then(|d| d.get("holder").cloned())
            .as_deref(),
        Some("first")
    );

    let renamed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}});
    let (code, why, message) = reason(
        api.patch("lease", &apply, &Patch::Apply(&renamed))
            .await
            .expect_err("a name that is not the URL's"),
    );
    assert_eq!((code, why.as_str()), (400, "BadRequest"));
    assert_eq!(
        message,
        "the name of the object (other) does not match the name on the URL (lease)"
    );
}

#[tokio::test]
async fn namespaces_get_the_default_service_account_and_the_cluster_ca() {
    // The simulation (the controller-manager) fills every namespace, with the CA that signs
    // the HTTPS cluster's certificate.
    let (sandbox, client) = cluster_with(SandboxOptions {
        https: true,
        ..SandboxOptions::clusters(["test"])
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let team: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "team"}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &team)
        .await
        .expect("created");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    let config_maps: Api<ConfigMap> = Api::namespaced(client, "team");
    until(&sandbox, "the namespace's defaults", || {
        let (accounts, config_maps) = (accounts.clone(), config_maps.clone());
        async move {
            accounts.get("default").await.is_ok()
                && config_maps.get("kube-root-ca.crt").await.is_ok()
        }
    })
    .await;
    let ca = config_maps
        .get("kube-root-ca.crt")
        .await
        .expect("CA bundle");
    let published = ca.data.and_then(|d| d.get("ca.crt").cloned());
    assert_eq!(published, sandbox.ca);
}

#[tokio::test]
async fn a_followed_log_grows_until_its_pod_is_deleted() {
    use futures::AsyncBufReadExt as _;
    use futures::StreamExt as _;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::LogParams;

    if !comb_sandbox::emulator_only(
        "api_objects::a_followed_log_grows_until_its_pod_is_deleted",
        "the emulator's simulated containers write logs; kwok's fake ones have none",
    ) {
        return;
    }
    let mut options = SandboxOptions::clusters(["test"]);
    options.server.log_interval = std::time::Duration::from_millis(100);
    let (sandbox, client) = cluster_with(options).await;
    let pods: Api<Pod> = Api::namespaced(client, &sandbox.ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("created");
    until(&sandbox, "the pod to run", || {
        let pods = pods.clone();
        async move {
            pods.get("web")
                .await
                .is_ok_and(|pod| pod.status.and_then(|s| s.phase).as_deref() == Some("Running"))
        }
    })
    .await;
    let follow = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let deadline = std::time::Duration::from_secs(20);

    // A few lines as they come, then the reader lets go.
    let mut lines = pods
        .log_stream("web", &follow)
        .await
        .expect("the log follows")
        .lines();
    let mut read = Vec::new();
    while read.len() < 4 {
        let line = tokio::time::timeout(deadline, lines.next())
            .await
            .expect("a line within the deadline")
            .expect("the stream stays open while the container runs")
            .expect("a line reads");
        read.push(line);
    }
    drop(lines);
    assert!(
        read[0].ends_with("web/main started image nginx:1.27"),
        "{read:?}"
    );
    for (number, line) in read.iter().enumerate().skip(1) {
        assert!(
            line.ends_with(&format!("web/main heartbeat {number}")),
            "{read:?}"
        );
    }

    // Followed again from its last line: the Pod's deletion ends the stream.
    let tail = LogParams {
        tail_lines: Some(1),
        ..follow
    };
    let mut lines = pods
        .log_stream("web", &tail)
        .await
        .expect("the log follows")
        .lines();
    tokio::time::timeout(deadline, lines.next())
        .await
        .expect("the last line within the deadline")
        .expect("a last line")
        .expect("a line reads");
    pods.delete("web", &DeleteParams::default())
        .await
        .expect("deleted");
    // Whatever was written before the deletion, then the end.
    tokio::time::timeout(deadline, lines.count())
        .await
        .expect("the stream ends with its pod");
}
