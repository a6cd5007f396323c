//! `comb demo` end to end through the binary: it converges with the expected via chains, prints
//! every transition in its format, and `--follow` keeps the clusters up for the CLI until
//! interrupted.

use std::process::Command;

use comb_testkit::cli::{ConvergedDemo, comb, row};
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};

/// Whether `line` reads `HH:MM:SS layer:ns/name: <old> -> <Phase> (<Reason>)[: message]`.
fn is_transition(line: &str) -> bool {
    let Some((time, rest)) = line.split_once(' ') else {
        return false;
    };
    let time_ok = time.len() == 8
        && time.char_indices().all(|(i, c)| {
            if i == 2 || i == 5 {
                c == ':'
            } else {
                c.is_ascii_digit()
            }
        });
    let Some((comb, change)) = rest.split_once(": ") else {
        return false;
    };
    let comb_ok = comb.contains(':') && comb.contains('/');
    let Some((old, new)) = change.split_once(" -> ") else {
        return false;
    };
    let new_state = new.split(": ").next().unwrap_or_default();
    let state_ok = |state: &str| match state.split_once(" (") {
        Some((phase, reason)) => {
            phase.chars().all(|c| c.is_ascii_alphabetic()) && reason.ends_with(')')
        }
        None => state.chars().all(|c| c.is_ascii_alphabetic()),
    };
    time_ok && comb_ok && (old == "new" || state_ok(old)) && state_ok(new_state)
}

#[test]
fn the_demo_converges_with_the_expected_via_chains() {
    let output = comb()
        .args([
            "demo",
            "--backend",
            comb_testkit::cli::backend(),
            "--timeout",
            "180s",
        ])
        .output_within(COMMAND_DEADLINE);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("Every Comb reached its expected phase"),
        "{stdout}"
    );

    // Every Comb appears first as `new`, and every transition line has the demo's format.
    let transitions: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains(" -> "))
        .collect();
    assert!(
        transitions.iter().all(|line| is_transition(line)),
        "{transitions:#?}"
    );
    for comb in [
        "prod:platform/nats",
        "prod:platform/db",
        "prod:platform/mailer",
        "staging:staging/nats",
        "staging:staging/db",
        "staging:staging/mailer",
        "dev:platform/nats",
        "dev:platform/db",
        "dev:platform/mailer",
    ] {
        assert!(
            transitions
                .iter()
                .any(|line| line.contains(&format!(" {comb}: new -> "))),
            "{comb} has no first transition in\n{stdout}"
        );
    }
    assert!(
        transitions
            .iter()
            .any(|line| line.contains(" dev:platform/db: ") && line.ends_with("-> Running (Borrowed): borrowed from upstream Kubernetes::Comb::Upstream::K8s (context staging) via staging, prod")),
        "{stdout}"
    );

    // The table: everything Running; staging's db through prod, dev's db through staging and
    // prod, dev's nats through staging; the stubbed mailers marked.
    let cases = [
        (
            "prod",
            "platform",
            "db",
            "Manifests",
            "Healthy",
            "<none>",
            "<none>",
        ),
        (
            "prod",
            "platform",
            "mailer",
            "Manifests",
            "Healthy",
            "<none>",
            "<none>",
        ),
        (
            "staging",
            "staging",
            "nats",
            "Manifests",
            "Healthy",
            "<none>",
            "<none>",
        ),
        (
            "staging",
            "staging",
            "db",
            "Manifests",
            "Borrowed",
            "prod",
            "prod",
        ),
        (
            "staging",
            "staging",
            "mailer",
            "Manifests (stub)",
            "Healthy",
            "<none>",
            "<none>",
        ),
        (
            "dev",
            "platform",
            "db",
            "Manifests",
            "Borrowed",
            "staging",
            "staging, prod",
        ),
        (
            "dev",
            "platform",
            "nats",
            "Manifests",
            "Borrowed",
            "staging",
            "staging",
        ),
        (
            "dev",
            "platform",
            "mailer",
            "Manifests (stub)",
            "Healthy",
            "<none>",
            "<none>",
        ),
    ];
    for (layer, namespace, name, class, reason, upstream, via) in cases {
        let cells = row(&stdout, &[layer, namespace, name]);
        assert_eq!(
            &cells[3..8],
            [class, "Running", reason, upstream, via],
            "{layer}:{namespace}/{name}"
        );
    }

    // What the borrowers publish: staging's db at prod's cluster address (same API server, an
    // ExternalName bridge), dev's db and nats at the external addresses (EndpointSlices).
    for line in [
        "staging:staging/db   postgres   tcp        5432   db.platform.svc:5432   192.0.2.10:5432",
        "dev:platform/db      postgres   tcp        5432   192.0.2.10:5432        192.0.2.10:5432",
        "dev:platform/nats    client     tcp        4222   192.0.2.20:4222        192.0.2.20:4222",
    ] {
        assert!(stdout.contains(line), "{line}\nmissing in\n{stdout}");
    }
}

#[test]
fn follow_keeps_the_layers_up_for_the_cli_until_interrupted() {
    let demo = ConvergedDemo::start();
    let kubeconfig = std::path::Path::new(&demo.config).with_file_name("sandbox.kubeconfig");
    assert!(kubeconfig.is_file(), "{}", kubeconfig.display());

    let chain: serde_json::Value =
        serde_json::from_str(&demo.ok(&["via", "dev:db", "-o", "json"])).expect("via prints JSON");
    let hops: Vec<&str> = chain["hops"]
        .as_array()
        .expect("hops")
        .iter()
        .map(|hop| hop["comb"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        hops,
        ["dev:platform/db", "staging:staging/db", "prod:platform/db"]
    );
    assert_eq!(chain["end"], "served");

    // Ctrl-C ends it cleanly, and its temporary directory goes with it.
    let mut demo = demo;
    let interrupted = Command::new("kill")
        .args(["-INT", &demo.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupted.success());
    assert!(demo.wait().success());
    assert!(
        !kubeconfig.exists(),
        "{} is left behind",
        kubeconfig.display()
    );
}

#[test]
fn the_demo_fails_with_the_reasons_when_its_time_is_up() {
    // Pods never become Ready within the run, so no Comb can reach Running however slow the
    // machine is (a 300ms delay raced the 1ms deadline on a loaded CI machine).
    let output = comb()
        .args(["demo", "--timeout", "1ms", "--pod-ready-delay", "1h"])
        .output_within(COMMAND_DEADLINE);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("comb: not every Comb reached its expected phase within 1ms: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("dev:platform/db: expected Running via staging, prod, "),
        "{stderr}"
    );
}

/// The README's first command is `cargo run --release -- demo`: in a workspace whose default
/// member builds two binaries (`comb` and the kubectl plugin), `cargo run` picks one only by
/// `default-run`; without it the command fails before the demo starts.
#[test]
fn cargo_run_runs_comb() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        // From the workspace's root, as the README runs it: inside a member's directory that
        // member is the default.
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output_within(COMMAND_DEADLINE);
    assert!(output.status.success(), "cargo metadata: {output:?}");
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let workspace_default: Vec<&str> = metadata["workspace_default_members"]
        .as_array()
        .expect("the default members")
        .iter()
        .filter_map(|id| id.as_str())
        .collect();
    let runnable: Vec<(&str, Option<&str>, usize)> = metadata["packages"]
        .as_array()
        .expect("the packages")
        .iter()
        .filter(|package| {
            package["id"]
                .as_str()
                .is_some_and(|id| workspace_default.contains(&id))
        })
        .map(|package| {
            let binaries = package["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|target| {
                    target["kind"]
                        .as_array()
                        .is_some_and(|k| k.contains(&"bin".into()))
                })
                .count();
            (
                package["name"].as_str().unwrap_or_default(),
                package["default_run"].as_str(),
                binaries,
            )
        })
        .filter(|(_, _, binaries)| *binaries > 0)
        .collect();
    assert_eq!(
        runnable,
        [("comb-federation", Some("comb"), 2)],
        "`cargo run` in the workspace must run the comb binary"
    );
}
