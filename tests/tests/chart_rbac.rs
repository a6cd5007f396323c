//! The chart on a real API server: `helm template` of `charts/comb` applied to the demo's real
//! clusters, then `comb run --once` authenticated as the chart's ServiceAccount (a token of
//! it per cluster) converges the demo's three layers, which proves the RBAC is enough; and a
//! write comb must never make (a ClusterRole, a Namespace's deletion) is forbidden to it,
//! which proves it is no broader than needed. Needs the real backend (tests/kube/build).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use comb_federation::cli::demo::DemoWorld;
use comb_sandbox::Backend;
use comb_sandbox::real::{available_or_skip, default_bin_dir};

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
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/comb");
    let rendered = Command::new(&helm)
        .args(["template", "comb", chart, "--namespace", RELEASE_NAMESPACE])
        .output()
        .expect("helm runs");
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let rendered = String::from_utf8(rendered.stdout).unwrap();
    assert!(
        !rendered.contains("comb-comb"),
        "names do not stutter:\n{rendered}"
    );

    let mut tokens = Vec::new();
    for cluster in ["prod", "dev"] {
        let (ok, out) = kubectl(
            &admin,
            cluster,
            &["create", "namespace", RELEASE_NAMESPACE],
            None,
        );
        assert!(ok, "{out}");
        let (ok, out) = kubectl(&admin, cluster, &["apply", "-f", "-"], Some(&rendered));
        assert!(ok, "the rendered chart applies to {cluster}: {out}");
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
    let config = std::fs::read_to_string(world.config_path())
        .unwrap()
        .replace("sandbox.kubeconfig", "service-account.kubeconfig");
    let config_path = world.dir().join("service-account.yaml");
    std::fs::write(&config_path, config).unwrap();

    world.apply_examples().await.expect("the examples apply");
    let output = tokio::process::Command::new(comb_testkit::bin::comb_path())
        .arg("--config")
        .arg(&config_path)
        .args(["run", "--once", "--settle", "3s", "--timeout", "120s"])
        .output()
        .await
        .expect("comb run runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let forbidden: Vec<&str> = stderr.lines().filter(|l| l.contains("forbidden")).collect();
    assert!(
        forbidden.is_empty(),
        "the chart's RBAC is enough:\n{}",
        forbidden.join("\n")
    );
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
    ] {
        let (allowed, answer) = kubectl(&service_account, "prod", &args, None);
        assert!(
            !allowed && answer.lines().any(|line| line.trim() == "no"),
            "the chart's ServiceAccount may not {what}: {answer}"
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

fn comb_cli(config: &Path, args: &[&str]) -> String {
    let output = Command::new(comb_testkit::bin::comb_path())
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .expect("comb runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}
