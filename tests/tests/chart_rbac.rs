//! The chart on a real API server: `charts/comb` installed by helm on the demo's real
//! clusters, then `comb run --once` authenticated as the chart's ServiceAccount (a token of
//! it per cluster) converges the demo's three layers, staging copying prod's `mailer-relay`,
//! which proves the RBAC is enough; and a write comb must never make (a ClusterRole, a
//! Namespace's deletion, anything outside the layers' namespaces) is forbidden to it, and so
//! is a Secret where the values name no replication, which proves it is no broader than needed.
//! Needs the real backend (tests/kube/build).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use comb_federation::cli::demo::DemoWorld;
use comb_sandbox::Backend;
use comb_sandbox::real::{available_or_skip, default_bin_dir};
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};

const RELEASE_NAMESPACE: &str = "comb-system";

fn kubectl(kubeconfig: &Path, context: &str, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--context", context])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(input.as_bytes())
            .expect("kubectl reads its input");
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().expect("the command runs");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comb_run_as_the_charts_service_account_converges_the_demo_and_may_do_no_more() {
    let test = "chart_rbac::comb_run_as_the_charts_service_account";
    if !available_or_skip(test) || comb_testkit::kubectl(test).is_none() {
        return;
    }
    let helm = default_bin_dir().join("helm");
    let world = DemoWorld::start_on(Backend::Kube, None, Duration::ZERO)
        .await
        .expect("the demo's real clusters start");
    let admin = world.kubeconfig_path();
    // The demo's layers as the chart's configuration: every layer names its namespaces, so the
    // RBAC is Roles there, not a ClusterRole. prod's server holds prod's and staging's
    // namespaces, which the chart derives from the layers; dev's holds only `platform`, which
    // `rbac.namespaces` says (the override for clusters that hold some of the layers).
    // staging's borrowed db also copies prod's mailer-relay (which opts in), so that Secrets
    // are granted where the copies land (staging) and come from (platform), and nowhere else.
    let mut demo_config: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(world.config_path()).unwrap()).unwrap();
    let staging = demo_config["layers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|layer| layer["name"] == "staging")
        .unwrap();
    staging["borrow"]["replicate"] =
        serde_json::json!([{"kind": "Secret", "name": "mailer-relay"}]);
    let layers = serde_json::to_string(&demo_config["layers"]).unwrap();
    // Each cluster's install names the layers it holds; prod's mailer checks `requires.secrets`.
    let values = |cluster: &str| -> Vec<String> {
        let mut values = vec!["--set-json".to_string(), format!("config.layers={layers}")];
        let contexts = if cluster == "dev" {
            r#"rbac.contexts=["dev"]"#
        } else {
            r#"rbac.contexts=["prod","staging"]"#
        };
        values.extend(["--set-json".to_string(), contexts.to_string()]);
        if cluster == "prod" {
            values.extend([
                "--set-json".to_string(),
                r#"rbac.secretReadNamespaces=["platform"]"#.to_string(),
            ]);
        }
        values
    };
    let render = |cluster: &str| {
        let rendered = helm_template(values(cluster));
        assert!(
            !rendered.contains("comb-comb"),
            "names do not stutter:\n{rendered}"
        );
        assert!(
            !rendered.contains("kind: ClusterRole"),
            "layers that name namespaces get Roles only:\n{rendered}"
        );
        rendered
    };
    let for_prod = render("prod");
    let roles = |rendered: &str, name: &str, namespace: &str| {
        rendered
            .matches(&format!(
                "kind: Role\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
            ))
            .count()
    };
    for (namespace, count) in [("platform", 1), ("staging", 1), ("default", 0)] {
        assert_eq!(
            roles(&for_prod, "comb", namespace),
            count,
            "a Role for prod's layers in {namespace}:\n{for_prod}"
        );
    }
    let for_dev = render("dev");
    for (rendered, name, namespace, count) in [
        (&for_prod, "comb-secrets", "staging", 1),
        (&for_prod, "comb-secret-reader", "platform", 1),
        (&for_prod, "comb-secrets", "platform", 0),
        (&for_dev, "comb-secrets", "platform", 0),
        (&for_dev, "comb-secret-reader", "platform", 0),
    ] {
        assert_eq!(
            roles(rendered, name, namespace),
            count,
            "Role {name} in {namespace}:\n{rendered}"
        );
    }

    let mut tokens = Vec::new();
    for cluster in ["prod", "dev"] {
        // Installed as a user would: the release's NOTES say where the RBAC applies.
        let installed = Command::new(&helm)
            .args(["install", "comb", CHART, "--namespace", RELEASE_NAMESPACE])
            .args([
                "--create-namespace",
                "--wait=false",
                "--kube-context",
                cluster,
            ])
            .arg("--kubeconfig")
            .arg(&admin)
            .args(values(cluster))
            .output_within(COMMAND_DEADLINE);
        let notes = String::from_utf8_lossy(&installed.stdout);
        assert!(
            installed.status.success(),
            "the chart installs on {cluster}: {notes}{}",
            String::from_utf8_lossy(&installed.stderr)
        );
        let expected = if cluster == "prod" {
            "RBAC: Roles in platform, staging.\nSecrets: read and written in staging; read by name \
             in platform."
        } else {
            "RBAC: Roles in platform.\nSecrets: none (no layer replicates them; \
             rbac.secretNamespaces and rbac.secretReadNamespaces grant more)."
        };
        assert!(notes.contains(expected), "{notes}");
        assert!(
            notes.contains("  - dev: context dev, namespaces platform, borrows from staging"),
            "{notes}"
        );
        let (ok, token) = kubectl(
            &admin,
            cluster,
            &[
                "create",
                "token",
                "comb",
                "-n",
                RELEASE_NAMESPACE,
                "--duration",
                "1h",
            ],
            None,
        );
        assert!(ok, "{token}");
        tokens.push((cluster, token.trim().to_string()));
    }

    // The demo's kubeconfig, with the chart's ServiceAccount as the user of every context.
    let mut kubeconfig: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&admin).unwrap()).unwrap();
    kubeconfig["users"] = serde_json::json!(tokens
        .iter()
        .map(|(cluster, token)| serde_json::json!({"name": format!("comb-{cluster}"), "user": {"token": token}}))
        .collect::<Vec<_>>());
    for context in kubeconfig["contexts"].as_array_mut().unwrap() {
        let cluster = context["context"]["cluster"].as_str().unwrap().to_string();
        context["context"]["user"] = serde_json::json!(format!("comb-{cluster}"));
    }
    let service_account = world.dir().join("service-account.kubeconfig");
    std::fs::write(
        &service_account,
        serde_json::to_string(&kubeconfig).unwrap(),
    )
    .unwrap();
    demo_config["kubeconfig"] = serde_json::json!("service-account.kubeconfig");
    let config_path = world.dir().join("service-account.yaml");
    std::fs::write(&config_path, serde_json::to_string(&demo_config).unwrap()).unwrap();

    world.apply_examples().await.expect("the examples apply");
    let (ok, annotated) = kubectl(
        &admin,
        "prod",
        &[
            "annotate",
            "secret",
            "mailer-relay",
            "-n",
            "platform",
            "comb.internal/replicable=true",
        ],
        None,
    );
    assert!(ok, "{annotated}");
    let output = tokio::process::Command::new(comb_testkit::bin::comb_path())
        .arg("--config")
        .arg(&config_path)
        .args(["run", "--once", "--settle", "3s", "--timeout", "120s"])
        .output()
        .await
        .expect("comb run runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Where comb has no Secret rights it says so once per watch, and goes on.
    let (notices, forbidden): (Vec<&str>, Vec<&str>) = stderr
        .lines()
        .filter(|l| l.contains("forbidden"))
        .partition(|l| l.contains("not watching secrets in namespace"));
    assert!(
        forbidden.is_empty(),
        "the chart's RBAC is enough:\n{}",
        forbidden.join("\n")
    );
    for (layer, namespace) in [("prod", "platform"), ("dev", "platform")] {
        let said = notices
            .iter()
            .filter(|l| {
                (l.contains(&format!("layer=\"{layer}\"")) || l.contains(&format!("layer={layer}")))
                    && l.contains(&format!("not watching secrets in namespace {namespace}:"))
            })
            .count();
        assert_eq!(said, 1, "{layer}'s Secrets in {namespace}:\n{stderr}");
    }
    assert_eq!(notices.len(), 2, "{}", notices.join("\n"));
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    let (ok, table) = (true, comb_cli(&config_path, &["get"]));
    assert!(ok);
    for (layer, name) in [
        ("staging", "db"),
        ("dev", "db"),
        ("dev", "nats"),
        ("prod", "mailer"),
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(layer) && l.split_whitespace().nth(2) == Some(name))
            .unwrap_or_else(|| panic!("no {layer} {name} in\n{table}"));
        assert!(row.contains("Running"), "{row}");
    }
    let (ok, copy) = kubectl(
        &admin,
        "prod",
        &[
            "get",
            "secret",
            "mailer-relay",
            "-n",
            "staging",
            "-o",
            "jsonpath={.metadata.labels.comb\\.internal/comb}",
        ],
        None,
    );
    assert!(
        ok && copy.trim() == "db",
        "staging's db copied mailer-relay: {copy}"
    );

    // No broader than needed.
    for (args, what) in [
        (
            vec!["auth", "can-i", "create", "clusterroles"],
            "create ClusterRoles",
        ),
        (
            vec!["auth", "can-i", "delete", "namespaces"],
            "delete Namespaces",
        ),
        (
            vec!["auth", "can-i", "create", "customresourcedefinitions"],
            "create CRDs",
        ),
        (vec!["auth", "can-i", "delete", "nodes"], "delete Nodes"),
        (
            vec!["auth", "can-i", "list", "deployments", "--all-namespaces"],
            "list Deployments in every namespace",
        ),
        (
            vec!["auth", "can-i", "create", "deployments", "-n", "default"],
            "create Deployments outside the layers' namespaces",
        ),
        (
            vec![
                "auth",
                "can-i",
                "list",
                "combs.comb.internal",
                "-n",
                "default",
            ],
            "list Combs outside the layers' namespaces",
        ),
        (
            vec!["auth", "can-i", "create", "secrets", "-n", "platform"],
            "write Secrets where no copy lands",
        ),
        (
            vec!["auth", "can-i", "list", "secrets", "-n", "platform"],
            "list Secrets where copies come from",
        ),
        (
            vec!["auth", "can-i", "get", "secrets", "-n", "default"],
            "read Secrets where no replication is named",
        ),
        (
            vec!["auth", "can-i", "get", "secrets", "-n", "dev:platform"],
            "read Secrets on dev's cluster, where no replication is named",
        ),
    ] {
        // `dev:NAMESPACE` asks dev's cluster.
        let mut args = args;
        let last = args.pop().unwrap_or_default();
        let cluster = match last.strip_prefix("dev:") {
            Some(namespace) => {
                args.push(namespace);
                "dev"
            }
            None => {
                args.push(last);
                "prod"
            }
        };
        let (allowed, answer) = kubectl(&service_account, cluster, &args, None);
        assert!(
            !allowed && answer.lines().any(|line| line.trim() == "no"),
            "the chart's ServiceAccount may not {what}: {answer}"
        );
    }
    for (verb, namespace) in [
        ("get", "platform"),
        ("get", "staging"),
        ("patch", "staging"),
    ] {
        let (allowed, answer) = kubectl(
            &service_account,
            "prod",
            &["auth", "can-i", verb, "secrets", "-n", namespace],
            None,
        );
        assert!(
            allowed,
            "the chart's ServiceAccount may {verb} Secrets in {namespace}: {answer}"
        );
    }
    for namespace in ["platform", "staging"] {
        let (allowed, answer) = kubectl(
            &service_account,
            "prod",
            &["auth", "can-i", "create", "deployments", "-n", namespace],
            None,
        );
        assert!(
            allowed,
            "the chart's ServiceAccount deploys into {namespace}: {answer}"
        );
    }
    let (ok, refused) = kubectl(
        &service_account,
        "prod",
        &[
            "create",
            "clusterrole",
            "escalate",
            "--verb=*",
            "--resource=*",
        ],
        None,
    );
    assert!(!ok && refused.contains("forbidden"), "{refused}");
}

/// `helm template comb charts/comb -n comb-system <args>`, which must succeed: the manifests.
fn helm_template<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    let rendered = Command::new(default_bin_dir().join("helm"))
        .args(["template", "comb", CHART, "--namespace", RELEASE_NAMESPACE])
        .args(args)
        .output_within(COMMAND_DEADLINE);
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    String::from_utf8(rendered.stdout).expect("helm writes UTF-8")
}

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/comb");

fn comb_cli(config: &Path, args: &[&str]) -> String {
    let output = Command::new(comb_testkit::bin::comb_path())
        .arg("--config")
        .arg(config)
        .args(args)
        .output_within(COMMAND_DEADLINE);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A layer without `namespaces` takes every namespace: only a ClusterRole serves it.
#[test]
fn a_layer_that_takes_every_namespace_gets_a_cluster_role() {
    if !available_or_skip("chart_rbac::a_layer_that_takes_every_namespace_gets_a_cluster_role") {
        return;
    }
    let rendered = helm_template([
        "--set-json",
        r#"config.layers=[{"name":"prod","context":"in-cluster"},{"name":"dev","context":"dev","namespaces":["dev"]}]"#,
    ]);
    assert!(rendered.contains("kind: ClusterRole\n"), "{rendered}");
    assert!(
        rendered.contains("kind: ClusterRoleBinding\n"),
        "{rendered}"
    );
    // The leader-election Lease is the only namespaced grant.
    assert_eq!(rendered.matches("\nkind: Role\n").count(), 1, "{rendered}");
}

/// Secrets are written only in the namespaces of the layers that replicate them, and read (by
/// name) only where copies come from.
#[test]
fn secrets_are_granted_only_where_the_values_name_replication() {
    if !available_or_skip("chart_rbac::secrets_are_granted_only_where_the_values_name_replication")
    {
        return;
    }
    let render =
        |layers: &str| helm_template(["--set-json".to_string(), format!("config.layers={layers}")]);
    let roles_named = |rendered: &str, name: &str| -> Vec<String> {
        rendered
            .split("\n---")
            .filter(|doc| {
                doc.contains("\nkind: Role\n") && doc.contains(&format!("  name: {name}\n"))
            })
            .filter_map(|doc| doc.lines().find_map(|l| l.strip_prefix("  namespace: ")))
            .map(str::to_string)
            .collect()
    };
    let secret_writers = |rendered: &str| roles_named(rendered, "comb-secrets");
    let secret_readers = |rendered: &str| roles_named(rendered, "comb-secret-reader");
    let nothing = render(r#"[{"name":"prod","context":"prod","namespaces":["platform"]}]"#);
    assert!(
        !nothing.contains("secrets"),
        "no Secret rule at all:\n{nothing}"
    );
    let replicating = render(
        r#"[{"name":"prod","context":"prod","namespaces":["platform"]},
            {"name":"dev","context":"dev","namespaces":["dev-a","dev-b"],
             "borrow":{"from":"prod","replicate":[{"kind":"Secret","name":"db-password"}]}}]"#,
    );
    assert_eq!(
        secret_writers(&replicating),
        ["dev-a", "dev-b"],
        "{replicating}"
    );
    assert!(
        secret_readers(&replicating).is_empty(),
        "the sources (the Combs' own namespaces, in prod) are granted already, as one cluster\n{replicating}"
    );
    // A layer's sourceServiceAccount reads the sources; a Comb's own spec.upstream copies only where
    // allowUpstreams says, from the namespaces it names.
    let allowed = render(
        r#"[{"name":"prod","context":"prod","namespaces":["platform","billing"]},
            {"name":"dev","context":"dev","namespaces":["team-a"],"serviceAccount":"copier",
             "sourceServiceAccount":"team-a/copier",
             "borrow":{"from":"prod","namespace":"platform","replicate":[{"kind":"Secret","name":"x"}]}},
            {"name":"qa","context":"qa","namespaces":["qa"],
             "allowUpstreams":[{"layer":"prod","namespaces":["billing"],"replicate":true},{"layer":"prod"}]}]"#,
    );
    assert_eq!(secret_writers(&allowed), ["qa", "team-a"], "{allowed}");
    assert_eq!(secret_readers(&allowed), ["billing"], "{allowed}");
    let config_maps_only = render(
        r#"[{"name":"prod","context":"prod","namespaces":["platform"]},
            {"name":"dev","context":"dev","namespaces":["dev"],
             "borrow":{"from":"prod","replicate":[{"kind":"ConfigMap","name":"settings"}]}}]"#,
    );
    assert!(
        !config_maps_only.contains("comb-secrets"),
        "{config_maps_only}"
    );
    let every_namespace = render(
        r#"[{"name":"prod","context":"prod"},
            {"name":"dev","context":"dev",
             "borrow":{"from":"prod","replicate":[{"kind":"Secret","name":"db-password"}]}}]"#,
    );
    assert!(
        every_namespace.contains("kind: ClusterRole\nmetadata:\n  name: comb-secrets\n"),
        "{every_namespace}"
    );
}

/// `sharding.enabled` runs `comb run --sharded` (no leader election), gives every replica its
/// pod name as identity, and lets it list the Leases and delete its member Lease; without it
/// the Lease grant stays what leader election needs.
#[test]
fn sharding_runs_the_sharded_mode_with_the_lease_grants_it_needs() {
    if !available_or_skip(
        "chart_rbac::sharding_runs_the_sharded_mode_with_the_lease_grants_it_needs",
    ) {
        return;
    }
    let sharded = helm_template([
        "--values",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../charts/comb/ci/sharded-values.yaml"
        ),
    ]);
    assert!(sharded.contains("replicas: 3\n"), "{sharded}");
    assert!(sharded.contains("- --sharded\n"), "{sharded}");
    assert!(sharded.contains("- --lease-duration=10s\n"), "{sharded}");
    assert!(!sharded.contains("--leader-elect"), "{sharded}");
    assert!(sharded.contains("fieldPath: metadata.name"), "{sharded}");
    assert!(
        sharded.contains("verbs: [get, list, create, update, patch, delete]"),
        "{sharded}"
    );
    let elected = helm_template(["--set", "replicas=2"]);
    assert!(elected.contains("- --leader-elect\n"), "{elected}");
    assert!(!elected.contains("--sharded"), "{elected}");
    assert!(
        elected.contains("resources: [leases]\n    verbs: [get, create, update, patch]\n"),
        "{elected}"
    );
}
