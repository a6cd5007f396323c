use std::collections::BTreeMap;
use std::time::Duration;

use comb_api::{Comb, CombStatus, Phase};
use comb_kubeconfigs::ClientPool;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use kube::config::Kubeconfig;
use serde_json::json;

use super::*;
use crate::config::Config;
use crate::controller::backoff::BackoffPolicy;
use crate::engine::class::ClassRegistry;

/// A layer `prod` on a server nobody answers (nothing here asks it), watching `namespaces`.
async fn layer(namespaces: &[&str]) -> LayerRuntime {
    let config = Config::from_yaml(
        &format!("layers:\n  - name: prod\n    context: prod\n    namespaces: {namespaces:?}\n"),
        "test",
        None,
    )
    .expect("a valid configuration");
    let kubeconfig = Kubeconfig::from_yaml(
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
         contexts: [{name: prod, context: {cluster: c}}]\n",
    )
    .expect("a kubeconfig");
    let pool = ClientPool::from_kubeconfig(kubeconfig, "test");
    let client = pool.client("prod").await.expect("a client");
    let layer = &config.layers[0];
    let policy = BackoffPolicy {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(100),
    };
    LayerRuntime::new(
        0,
        layer.clone(),
        config.settings(layer),
        KubeOps::new(client, config.label_keys()),
        config.borrow_env(&pool, layer),
        WorkQueue::new(Duration::from_secs(60), policy, policy),
    )
}

/// The dependency cycles of a layer, when they are told.
type Cycles = Option<Vec<Vec<CombKey>>>;

fn key(name: &str) -> CombKey {
    CombKey::new("platform", name)
}

/// Version `version` of CR `platform/<name>` (object `uid`, spec generation `generation`) with
/// `phase` recorded, if any.
fn cr(name: &str, uid: &str, version: &str, generation: i64, phase: Option<Phase>) -> Comb {
    let mut cr = Comb::new(
        "comb.internal",
        "platform",
        name,
        serde_json::from_value(json!({"class": "Manifests"})).expect("a spec"),
    );
    cr.metadata.uid = Some(uid.to_string());
    cr.metadata.resource_version = Some(version.to_string());
    cr.metadata.generation = Some(generation);
    cr.status = phase.map(|phase| CombStatus {
        phase: Some(phase),
        ..CombStatus::default()
    });
    cr
}

fn change(trigger: Option<Trigger>, status_changed: bool) -> CrChange {
    CrChange {
        trigger,
        status_changed,
    }
}

#[tokio::test]
async fn a_crs_versions_go_by_the_watchs_order_and_say_what_they_call_for() {
    let layer = layer(&["platform"]).await;
    let deleting = {
        let mut cr = cr("db", "u1", "7", 2, Some(Phase::Running));
        cr.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        cr
    };
    let cases: Vec<(&str, Comb, Source, CrChange)> = vec![
        (
            "listed: a new Comb",
            cr("db", "u1", "1", 1, None),
            Source::Listed,
            change(Some(Trigger::Created), true),
        ),
        (
            "the same version again",
            cr("db", "u1", "1", 1, None),
            Source::Watched,
            change(None, false),
        ),
        (
            "our status write: no step, but the status changed",
            cr("db", "u1", "2", 1, Some(Phase::Pending)),
            Source::OwnWrite,
            change(None, true),
        ),
        (
            "the watch brings our write: nothing new",
            cr("db", "u1", "2", 1, Some(Phase::Pending)),
            Source::Watched,
            change(None, false),
        ),
        (
            "a user edits the spec",
            cr("db", "u1", "3", 2, Some(Phase::Pending)),
            Source::Watched,
            change(Some(Trigger::Changed), false),
        ),
        (
            "our next status write",
            cr("db", "u1", "4", 2, Some(Phase::Running)),
            Source::OwnWrite,
            change(None, true),
        ),
        (
            "a version the watch brings before ours is older",
            cr("db", "u1", "3b", 2, Some(Phase::Pending)),
            Source::Watched,
            change(None, false),
        ),
        (
            "the watch reaches ours",
            cr("db", "u1", "4", 2, Some(Phase::Running)),
            Source::Watched,
            change(None, false),
        ),
        (
            "deleted",
            deleting,
            Source::Watched,
            change(Some(Trigger::Deleting), false),
        ),
        (
            "another object under the same name",
            cr("db", "u2", "9", 1, None),
            Source::Watched,
            change(Some(Trigger::Created), true),
        ),
    ];
    for (what, cr, source, expected) in cases {
        let version = cr.metadata.resource_version.clone();
        assert_eq!(layer.observe_cr(&key("db"), cr, source), expected, "{what}");
        let kept = layer.cr(&key("db")).expect("kept");
        if expected != change(None, false) {
            assert_eq!(kept.metadata.resource_version, version, "{what}: kept");
        }
    }
    assert_eq!(
        layer.cr(&key("db")).and_then(|cr| cr.metadata.uid),
        Some("u2".to_string())
    );
}

#[tokio::test]
async fn an_own_write_of_a_comb_gone_meanwhile_is_not_kept() {
    let layer = layer(&["platform"]).await;
    assert_eq!(
        layer.observe_cr(&key("db"), cr("db", "u1", "2", 1, None), Source::OwnWrite),
        CrChange::default()
    );
    assert!(!layer.knows(&key("db")));
}

#[tokio::test]
async fn what_is_kept_of_a_cr_leaves_out_its_managed_fields_and_kubectls_copy() {
    let layer = layer(&["platform"]).await;
    let mut applied = cr("db", "u1", "1", 1, Some(Phase::Running));
    applied.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
    applied.metadata.annotations = Some(BTreeMap::from([
        (LAST_APPLIED.to_string(), "{\"spec\":{}}".to_string()),
        ("team".to_string(), "storage".to_string()),
    ]));
    layer.observe_cr(&key("db"), applied.clone(), Source::Listed);
    let kept = layer.cr(&key("db")).expect("kept");
    assert_eq!(kept.metadata.managed_fields, None);
    assert_eq!(
        kept.metadata.annotations,
        Some(BTreeMap::from([(
            "team".to_string(),
            "storage".to_string()
        )]))
    );
    assert_eq!(kept.spec, applied.spec);
    assert_eq!(kept.status, applied.status);
    assert_eq!(
        layer.recorded_status(&key("db")).and_then(|s| s.phase),
        Some(Phase::Running)
    );
    assert_eq!(layer.recorded_combs(), [kept]);
}

#[tokio::test]
async fn combs_are_listed_by_scope_and_forgotten_when_gone() {
    let layer = layer(&["platform", "infra"]).await;
    for (namespace, name) in [("platform", "db"), ("platform", "mq"), ("infra", "vault")] {
        let mut cr = cr(name, name, "1", 1, None);
        cr.metadata.namespace = Some(namespace.to_string());
        layer.observe_cr(&CombKey::new(namespace, name), cr, Source::Listed);
    }
    let mut platform = layer.keys_in(Some("platform"));
    platform.sort();
    assert_eq!(platform, [key("db"), key("mq")]);
    assert_eq!(layer.keys().len(), 3);
    assert_eq!(layer.status().combs, 3);
    assert!(layer.remove_cr(&key("db")));
    assert!(!layer.remove_cr(&key("db")), "forgotten once");
    assert!(!layer.knows(&key("db")));
    assert_eq!(layer.cr(&key("db")), None);
    assert_eq!(layer.keys_in(Some("platform")), [key("mq")]);
}

#[tokio::test]
async fn dependency_cycles_are_told_when_they_change() {
    let layer = layer(&["platform"]).await;
    let refs = |names: &[&str]| -> Vec<String> { names.iter().map(|n| n.to_string()).collect() };
    let cycle = |names: &[&str]| -> Vec<CombKey> { names.iter().map(|n| key(n)).collect() };
    // (what, Comb, its dependsOn, the cycles told)
    let cases: Vec<(&str, &str, Vec<String>, Cycles)> = vec![
        ("no cycle", "api", refs(&["db", "a/b/c"]), None),
        (
            "the first cycle",
            "db",
            refs(&["api"]),
            Some(vec![cycle(&["api", "db", "api"])]),
        ),
        ("the same dependencies", "db", refs(&["api"]), None),
        (
            "more dependencies, the same cycles",
            "mq",
            refs(&["platform/api"]),
            None,
        ),
        (
            "another cycle",
            "web",
            refs(&["web"]),
            Some(vec![cycle(&["api", "db", "api"]), cycle(&["web", "web"])]),
        ),
        (
            "a cycle broken",
            "db",
            refs(&[]),
            Some(vec![cycle(&["web", "web"])]),
        ),
    ];
    for (what, comb, references, expected) in cases {
        assert_eq!(
            layer.set_dependencies(&key(comb), &references),
            expected,
            "{what}"
        );
    }
    layer.set_dependencies(&key("db"), &refs(&["mq"]));
    // api -> db -> mq -> api: told from the Comb asked about.
    assert_eq!(
        layer.cycle_of(&key("mq")),
        Some(cycle(&["mq", "api", "db", "mq"]))
    );
    assert_eq!(layer.cycle_of(&key("web")), Some(cycle(&["web", "web"])));
    assert_eq!(layer.cycle_of(&key("nobody")), None);
    assert_eq!(layer.dependents_of(&key("api")), [key("mq")]);
    layer.remove_cr(&key("mq"));
    assert_eq!(layer.cycle_of(&key("api")), None, "gone with its Comb");
}

/// What the layer's health does: a call and what it returns, then the state.
enum Health {
    Listed(usize),
    Down(&'static str),
    Up,
}

#[tokio::test]
async fn a_layer_is_up_once_every_watch_listed_and_down_until_its_server_answers() {
    let layer = layer(&["platform", "infra"]).await;
    assert_eq!(layer.state(), LayerState::Starting);
    let steps = [
        (
            "one watch of two listed",
            Health::Listed(0),
            false,
            LayerState::Starting,
        ),
        (
            "the same one again",
            Health::Listed(0),
            false,
            LayerState::Starting,
        ),
        (
            "down before it listed",
            Health::Down("connection refused"),
            true,
            LayerState::Down,
        ),
        (
            "down again",
            Health::Down("timed out"),
            false,
            LayerState::Down,
        ),
        (
            "back, still not listed",
            Health::Up,
            true,
            LayerState::Starting,
        ),
        ("both listed", Health::Listed(1), true, LayerState::Up),
        (
            "listed again after a relist",
            Health::Listed(1),
            false,
            LayerState::Up,
        ),
        ("up while up", Health::Up, false, LayerState::Up),
        (
            "down",
            Health::Down("connection refused"),
            true,
            LayerState::Down,
        ),
        ("back", Health::Up, true, LayerState::Up),
    ];
    for (what, call, returns, state) in steps {
        let returned = match call {
            Health::Listed(scope) => layer.mark_listed(scope),
            Health::Down(error) => layer.mark_down(error),
            Health::Up => layer.mark_up(),
        };
        assert_eq!((returned, layer.state()), (returns, state), "{what}");
        let status = layer.status();
        assert_eq!(status.state, state, "{what}");
        // A layer that is down pauses its queue, and says why.
        assert_eq!(layer.queue.is_paused(), state == LayerState::Down, "{what}");
        assert_eq!(status.error.is_some(), state == LayerState::Down, "{what}");
    }
    assert!(layer.is_listed());
    assert!(layer.status().listed);
}

#[tokio::test]
async fn what_a_comb_recorded_last_is_its_unwritten_status_while_there_is_one() {
    let layer = layer(&["platform"]).await;
    let stored = cr("db", "u1", "1", 1, Some(Phase::Running));
    layer.observe_cr(&key("db"), stored.clone(), Source::Listed);
    assert_eq!(layer.recorded_phase(&key("db")), Some(Phase::Running));

    let comb = ClassRegistry::with_builtins()
        .build(&stored, &layer.settings, &|_: &CombInstance| false)
        .await
        .expect("the Comb builds");
    let built = Built {
        origin: Origin::of(&stored),
        comb,
    };
    assert!(built.is_of(&stored));
    assert!(
        !built.is_of(&cr("db", "u1", "2", 2, None)),
        "another generation"
    );
    assert!(
        !built.is_of(&cr("db", "u2", "1", 1, None)),
        "another object"
    );
    // A step whose status write failed: memory holds its status.
    let failed = StepOutcome {
        status: CombStatus {
            phase: Some(Phase::Error),
            ..CombStatus::default()
        },
        stored: stored.clone(),
        write_failed: true,
        notes: Vec::new(),
        progress_due: None,
        status_written: false,
    };
    layer.record_step(&key("db"), built, &failed);
    assert_eq!(layer.recorded_phase(&key("db")), Some(Phase::Error));
    let (unwritten, _) = layer.starting_point(&key("db"));
    assert!(
        unwritten.is_some(),
        "the next step starts from the unwritten Comb"
    );
    assert_eq!(
        layer.recorded_status(&key("db")).and_then(|s| s.phase),
        Some(Phase::Error)
    );
    assert_eq!(
        layer.recorded_combs()[0]
            .status
            .as_ref()
            .and_then(|s| s.phase.clone()),
        Some(Phase::Error),
        "the CR as last seen, with what it recorded"
    );
}

/// The Comb of `cr`, built as the layer builds it.
async fn built(layer: &LayerRuntime, cr: &Comb) -> CombInstance {
    ClassRegistry::with_builtins()
        .build(cr, &layer.settings, &|_: &CombInstance| false)
        .await
        .expect("the Comb builds")
}

/// A Manifests Comb `platform/db` of `manifests` (object u1, generation `generation`).
fn manifests_cr(generation: Option<i64>, manifests: serde_json::Value) -> Comb {
    let mut cr = cr("db", "u1", "1", generation.unwrap_or(1), None);
    cr.metadata.generation = generation;
    cr.spec.config = serde_json::from_value(json!({"manifests": manifests})).ok();
    cr
}

#[tokio::test]
async fn what_dependents_judge_a_comb_by_is_kept_while_something_depends_on_it() {
    let layer = layer(&["platform"]).await;
    let db = manifests_cr(Some(1), json!([]));
    layer.observe_cr(&key("db"), db.clone(), Source::Listed);
    let origin = Origin::of(&db);
    let judged = Arc::new(Judged::new(built(&layer, &db).await, origin.clone()));
    let kept = |layer: &LayerRuntime| layer.judged(&key("db"), &origin).is_some();

    layer.keep_judged(&key("db"), &judged);
    assert!(!kept(&layer), "nothing depends on db");

    layer.set_dependencies(&key("api"), &["db".to_string()]);
    layer.set_dependencies(&key("web"), &["platform/db".to_string()]);
    layer.keep_judged(&key("db"), &judged);
    assert!(kept(&layer), "api and web depend on it");
    assert_eq!(layer.origin(&key("db")), Some(origin.clone()));
    let newer = Origin {
        generation: Some(2),
        ..origin.clone()
    };
    assert!(
        layer.judged(&key("db"), &newer).is_none(),
        "an edit not judged yet is built anew"
    );

    layer.set_dependencies(&key("api"), &[]);
    assert!(kept(&layer), "web still depends on it");
    layer.remove_cr(&key("web"));
    assert!(!kept(&layer), "nothing depends on it any more");

    layer.set_dependencies(&key("api"), &["db".to_string()]);
    layer.keep_judged(&key("db"), &judged);
    assert!(kept(&layer));
    layer.remove_cr(&key("db"));
    assert!(!kept(&layer), "db is gone");
    layer.keep_judged(&key("db"), &judged);
    assert!(
        !kept(&layer),
        "a step that judged it meanwhile keeps nothing"
    );

    let unversioned = manifests_cr(None, json!([]));
    layer.observe_cr(&key("db"), unversioned.clone(), Source::Listed);
    let without_generation = Arc::new(Judged::new(
        built(&layer, &unversioned).await,
        Origin::of(&unversioned),
    ));
    layer.keep_judged(&key("db"), &without_generation);
    assert!(
        layer
            .judged(&key("db"), &Origin::of(&unversioned))
            .is_none(),
        "without a generation an edit would not tell"
    );
}

#[tokio::test]
async fn a_rendering_is_kept_unless_discovery_placed_an_object() {
    let layer = layer(&["platform"]).await;
    let deployment =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db"}});
    let widget =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "db"}});
    let scopes = crate::engine::kinds::Scopes::default();
    for (manifests, kept) in [
        (json!([]), true),
        (json!([deployment.clone()]), true),
        (json!([deployment, widget]), false),
    ] {
        let cr = manifests_cr(Some(1), manifests.clone());
        let judged = Judged::new(built(&layer, &cr).await, Origin::of(&cr));
        let first = judged.rendered(&scopes).await.expect("it renders");
        let second = judged.rendered(&scopes).await.expect("it renders");
        assert_eq!(first, second, "{manifests}");
        assert_eq!(Arc::ptr_eq(&first, &second), kept, "{manifests}");
    }
    let broken = manifests_cr(Some(1), json!([{"kind": "Deployment"}]));
    let judged = Judged::new(built(&layer, &broken).await, Origin::of(&broken));
    assert_eq!(
        judged.rendered(&scopes).await.unwrap_err().to_string(),
        "Manifests: manifest Deployment has no metadata.name"
    );
}
