//! The operating commands of the CLI through the `comb` binary, on the converged demo (whose
//! controller keeps running): logs, restart, stop; and how the CLI fails: one line, exit 1, or
//! exit 2 for usage.

use comb_testkit::cli::{ConvergedDemo, run};

#[test]
fn logs_restart_and_stop_on_the_converged_demo() {
    if !comb_sandbox::emulator_only(
        "cli_operate::logs_restart_and_stop_on_the_converged_demo",
        "container logs are the emulator's (kwok serves none)",
    ) {
        return;
    }
    let mut demo = ConvergedDemo::start();

    let logs = demo.ok(&["logs", "prod:nats", "--lines", "5"]);
    assert!(logs.contains("started image nats:2.10"), "{logs}");
    // A borrowing Comb runs no containers here: it says where its service runs.
    assert_eq!(
        demo.ok(&["logs", "dev:db"]),
        "dev:platform/db borrows its service, which runs as prod:platform/db: \
         comb logs prod:platform/db\n"
    );

    assert_eq!(
        demo.ok(&["restart", "prod:db"]),
        "prod:platform/db: restarted StatefulSet/db\n"
    );
    assert_eq!(
        demo.ok(&["restart", "dev:db"]),
        "dev:platform/db: nothing to be restarted\n"
    );

    // Stopped, until the controller deploys it again.
    assert_eq!(
        demo.ok(&["stop", "staging:nats"]),
        "staging:staging/nats: stopped Deployment/nats\n"
    );
    demo.wait_for_line("staging:staging/nats: Running (Healthy) -> Pending (Deployed)");
    // Running again, through Pending (Deployed) and, where the deployment controller takes its
    // time, Pending (RolloutInProgress).
    demo.wait_for_transition("staging:staging/nats", "Running (Healthy)");
}

#[test]
fn a_comb_that_cannot_be_built_is_described_by_what_it_recorded() {
    let mut demo = ConvergedDemo::start();
    let created = demo.post(
        "dev",
        "/apis/comb.internal/v1/namespaces/platform/combs",
        r#"{"apiVersion": "comb.internal/v1", "kind": "Comb",
            "metadata": {"name": "cache", "namespace": "platform"}, "spec": {"class": "Redis"}}"#,
    );
    assert!(created.starts_with("HTTP/1.1 201"), "{created}");
    demo.wait_for_line("dev:platform/cache: new -> Error (BuildFailed)");

    let described = demo.ok(&["describe", "dev:cache"]);
    assert!(described.contains("Class:         Redis\n"), "{described}");
    assert!(
        described.contains("  Phase:                Error\n"),
        "{described}"
    );
    assert!(
        described.contains(
            "Build:\n  dev:platform/cache cannot be built: Comb->from_crd: unknown class 'Redis'"
        ),
        "{described}"
    );
    let (code, _, stderr) = demo.comb(&["status", "dev:cache"]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("comb: dev:platform/cache cannot be built: Comb->from_crd: unknown class 'Redis' (known: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn failures_are_one_line_with_exit_code_1_and_usage_errors_2() {
    let demo = ConvergedDemo::start();
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["describe", "nats"],
            1,
            "comb: nats names a Comb in more than one layer (prod:platform/nats, staging:staging/nats, dev:platform/nats); name the layer, e.g. prod:platform/nats\n",
        ),
        (
            &["status", "dev:nosuch"],
            1,
            "comb: dev:nosuch: no such Comb in layer dev\n",
        ),
        (
            &["get", "--layer", "qa"],
            1,
            "comb: unknown layer qa (layers: prod, staging, dev)\n",
        ),
        (
            &["via", "dev:a/b/c"],
            1,
            "comb: 'dev:a/b/c' is not a Comb reference ([LAYER:][NAMESPACE/]NAME): the name 'b/c' holds ':', '/' or whitespace\n",
        ),
        (&["get", "-o", "xml"], 2, ""),
        (&["logs"], 2, ""),
    ];
    for (args, code, stderr) in cases {
        let (got_code, _, got_stderr) = demo.comb(args);
        assert_eq!(got_code, code, "comb {args:?}: {got_stderr}");
        if code == 1 {
            assert_eq!(got_stderr, stderr, "comb {args:?}");
        } else {
            assert!(
                got_stderr.starts_with("error: "),
                "comb {args:?}: {got_stderr}"
            );
        }
    }

    let (code, _, stderr) = run(&["--config", "/nonexistent/comb.yaml", "get"]);
    assert_eq!(code, 1);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("comb: reading the configuration /nonexistent/comb.yaml failed: "),
        "{stderr}"
    );
}
