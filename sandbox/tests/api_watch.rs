//! Watch conformance through a real client: `kube::runtime::watcher` (including its
//! recovery from 410 Expired by relisting), resume from a resourceVersion, 410 for one older
//! than the kept history, selector transitions, bookmarks and `timeoutSeconds`.

mod api_support;

use std::collections::BTreeSet;
use std::time::Duration;

use api_support::{DEADLINE, client, cluster, plain, start};
use comb_sandbox::emulator_only;
use comb_sandbox::{ServerOptions, StoreOptions};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use serde_json::json;

fn named(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("config map")
}

/// The resourceVersion of a list of the ConfigMaps: where a watch from "now" starts.
async fn list_version(api: &Api<ConfigMap>) -> String {
    api.list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv")
}

fn name_of(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

/// The next item of a stream, failing the test after the deadline.
async fn next<S: futures::Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(DEADLINE, stream.next())
        .await
        .expect("an event before the deadline")
        .expect("the stream goes on")
}

/// The next watch event that is not a bookmark (a server may send one whenever the watch
/// asked for them, as kube's `WatchParams` do by default).
async fn next_change<S>(stream: &mut S) -> S::Item
where
    S: futures::Stream<Item = Result<WatchEvent<ConfigMap>, kube::Error>> + Unpin,
{
    loop {
        match next(stream).await {
            Ok(WatchEvent::Bookmark(_)) => continue,
            other => return other,
        }
    }
}

/// A watcher of the test's ConfigMaps, without the one kube-controller-manager publishes.
fn own_config_maps() -> watcher::Config {
    watcher::Config::default().fields("metadata.name!=kube-root-ca.crt")
}

#[tokio::test]
async fn watcher_lists_then_follows_changes() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    api.create(&PostParams::default(), &named("before"))
        .await
        .expect("created");
    let mut events = watcher(api.clone(), own_config_maps()).boxed();
    assert!(matches!(
        next(&mut events).await.expect("event"),
        watcher::Event::Init
    ));
    let initial = next(&mut events).await.expect("event");
    assert!(matches!(&initial, watcher::Event::InitApply(cm) if name_of(cm) == "before"));
    assert!(matches!(
        next(&mut events).await.expect("event"),
        watcher::Event::InitDone
    ));

    api.create(&PostParams::default(), &named("after"))
        .await
        .expect("created");
    assert!(
        matches!(next(&mut events).await.expect("event"), watcher::Event::Apply(cm) if name_of(&cm) == "after")
    );
    api.delete("before", &DeleteParams::default())
        .await
        .expect("deleted");
    assert!(
        matches!(next(&mut events).await.expect("event"), watcher::Event::Delete(cm) if name_of(&cm) == "before")
    );
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    api.create(&PostParams::default(), &named("a"))
        .await
        .expect("created");
    let list = api.list(&ListParams::default()).await.expect("list");
    let from = list
        .metadata
        .resource_version
        .expect("list resourceVersion");
    api.create(&PostParams::default(), &named("b"))
        .await
        .expect("created");
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .expect("patched");
    api.delete("b", &DeleteParams::default())
        .await
        .expect("deleted");

    let mut stream = api
        .watch(
            &WatchParams::default().fields("metadata.name!=kube-root-ca.crt"),
            &from,
        )
        .await
        .expect("watch")
        .boxed();
    let mut seen = Vec::new();
    let mut last = 0u64;
    for _ in 0..3 {
        let (kind, cm) = match next_change(&mut stream).await.expect("event") {
            WatchEvent::Added(cm) => ("ADDED", cm),
            WatchEvent::Modified(cm) => ("MODIFIED", cm),
            WatchEvent::Deleted(cm) => ("DELETED", cm),
            other => panic!("unexpected {other:?}"),
        };
        let rv: u64 = cm
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .expect("every event carries its resourceVersion");
        assert!(rv > last, "events come in resourceVersion order");
        last = rv;
        seen.push(format!("{kind} {}", name_of(&cm)));
    }
    assert_eq!(seen, ["ADDED b", "MODIFIED a", "DELETED b"]);
}

#[tokio::test]
async fn a_resource_version_older_than_the_history_is_expired() {
    if !emulator_only(
        "api_watch::a_resource_version_older_than_the_history_is_expired",
        "it shrinks the emulator's watch history to 4 events (kube-apiserver's watch cache and etcd compaction are not test knobs)",
    ) {
        return;
    }
    let options = comb_sandbox::SandboxOptions {
        store: StoreOptions {
            history_limit: 4,
            ..StoreOptions::default()
        },
        ..plain(&["w"])
    };
    let sandbox = start(options).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sandbox, "w").await, "default");
    let from = list_version(&api).await;
    for i in 0..10 {
        api.create(&PostParams::default(), &named(&format!("c{i}")))
            .await
            .expect("created");
    }
    let mut stream = api
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();
    match next(&mut stream).await.expect("event") {
        WatchEvent::Error(status) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
            assert!(
                status.message.starts_with("too old resource version"),
                "{}",
                status.message
            );
        }
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

#[tokio::test]
async fn watcher_relists_after_410_and_catches_up() {
    if !emulator_only(
        "api_watch::watcher_relists_after_410_and_catches_up",
        "it shrinks the emulator's watch history and event buffer and writes into its store directly",
    ) {
        return;
    }
    let options = comb_sandbox::SandboxOptions {
        store: StoreOptions {
            history_limit: 8,
            event_buffer: 16,
        },
        ..plain(&["w"])
    };
    let sandbox = start(options).await;
    let store = sandbox.clusters()[0].store().clone();
    let api: Api<ConfigMap> = Api::namespaced(client(&sandbox, "w").await, "default");
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    loop {
        if let Ok(watcher::Event::InitDone) = next(&mut events).await {
            break;
        }
    }
    // A burst the watch cannot follow: its server side lags behind the event buffer and
    // ends, and resuming from the last seen version hits 410 (only 8 events are kept).
    let cms = store.resource_type("", "ConfigMap").expect("configmaps");
    for i in 0..100 {
        store
            .create(
                &cms,
                Some("default"),
                json!({"metadata": {"name": format!("burst-{i}")}}),
            )
            .expect("created");
    }
    let mut relisted = false;
    let mut known = BTreeSet::new();
    loop {
        match next(&mut events).await {
            Ok(watcher::Event::Init) => {
                relisted = true;
                known.clear();
            }
            Ok(watcher::Event::InitApply(cm) | watcher::Event::Apply(cm)) => {
                known.insert(name_of(&cm));
            }
            Ok(watcher::Event::InitDone) if relisted => break,
            Ok(_) => {}
            // The 410 itself surfaces as an error item before the relist.
            Err(_) => {}
        }
    }
    assert!(relisted, "the watcher relisted after 410 Expired");
    assert_eq!(known.len(), 100, "the relist caught every object");
}

#[tokio::test]
async fn objects_entering_and_leaving_a_selector() {
    let (sandbox, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client, &sandbox.ns);
    let stream = api
        .watch(&WatchParams::default().labels("app=web"), "0")
        .await
        .expect("watch");
    let mut stream = stream.boxed();
    let labelled: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "x", "labels": {"app": "db"}}}))
            .expect("cm");
    api.create(&PostParams::default(), &labelled)
        .await
        .expect("created");
    let relabel = |app: &str| Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    api.patch("x", &PatchParams::default(), &relabel("web"))
        .await
        .expect("into the selector");
    api.patch("x", &PatchParams::default(), &relabel("web2"))
        .await
        .expect("out of the selector");
    api.delete("x", &DeleteParams::default())
        .await
        .expect("deleted");
    let entered = next_change(&mut stream).await.expect("event");
    assert!(matches!(entered, WatchEvent::Added(_)), "{entered:?}");
    let left = next_change(&mut stream).await.expect("event");
    assert!(matches!(left, WatchEvent::Deleted(_)), "{left:?}");
    let marker: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "marker", "labels": {"app": "web"}}}))
            .expect("cm");
    api.create(&PostParams::default(), &marker)
        .await
        .expect("created");
    let last = next_change(&mut stream).await.expect("event");
    assert!(
        matches!(&last, WatchEvent::Added(cm) if name_of(cm) == "marker"),
        "the delete outside the selector was not seen: {last:?}"
    );
}

#[tokio::test]
async fn bookmarks_and_timeouts() {
    if !emulator_only(
        "api_watch::bookmarks_and_timeouts",
        "it sets the emulator's bookmark interval to 20 ms (kube-apiserver sends one about a minute)",
    ) {
        return;
    }
    let options = comb_sandbox::SandboxOptions {
        server: ServerOptions {
            bookmark_interval: Duration::from_millis(20),
            ..ServerOptions::default()
        },
        ..plain(&["w"])
    };
    let sandbox = start(options).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sandbox, "w").await, "default");
    let current = list_version(&api).await;
    let mut stream = api
        .watch(
            &WatchParams {
                bookmarks: true,
                ..WatchParams::default()
            }
            .timeout(1),
            &current,
        )
        .await
        .expect("watch")
        .boxed();
    match next(&mut stream).await.expect("event") {
        WatchEvent::Bookmark(bookmark) => {
            assert_eq!(bookmark.metadata.resource_version, current);
            assert_eq!(bookmark.types.kind, "ConfigMap");
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // After timeoutSeconds the server ends the stream.
    let ended = tokio::time::timeout(DEADLINE, async {
        while stream.try_next().await.expect("watch").is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the watch ended at its timeout");
}
