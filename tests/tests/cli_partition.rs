//! A layer whose API server is partitioned: `comb check` and `comb get` report it (exit 1)
//! while the other layers answer and keep reconciling, and every command about one of its Combs
//! fails in one line; after healing everything passes again.

use comb_testkit::cli::{ConvergedDemo, row};

#[test]
fn a_partitioned_layer_shows_as_down_while_the_others_go_on() {
    let mut demo = ConvergedDemo::start();
    let (code, checks, _) = demo.comb(&["check"]);
    assert_eq!(code, 0, "{checks}");

    demo.control("dev", "/_sandbox/partition");

    let (code, checks, _) = demo.comb(&["check"]);
    assert_eq!(code, 1, "{checks}");
    assert_eq!(
        row(&checks, &["reachable", "dev"])[2..],
        [
            "FAILED",
            "503 ServiceUnavailable: the sandbox cluster is partitioned (POST /_sandbox/heal ends it)"
        ]
    );
    assert_eq!(
        row(&checks, &["crd", "dev"])[2..],
        ["skipped", "the layer is not reachable"]
    );
    for layer in ["prod", "staging"] {
        assert_eq!(row(&checks, &["reachable", layer])[2], "ok", "{checks}");
        assert_eq!(row(&checks, &["crd", layer])[2], "ok", "{checks}");
    }

    let (code, table, stderr) = demo.comb(&["get"]);
    assert_eq!(code, 1);
    assert_eq!(table.lines().count(), 7, "{table}");
    assert!(
        !table.lines().any(|line| line.starts_with("dev ")),
        "{table}"
    );
    assert_eq!(
        stderr,
        "comb: listing the Combs of layer dev (context dev) failed: 503 ServiceUnavailable: \
         the sandbox cluster is partitioned (POST /_sandbox/heal ends it)\n"
    );

    // Every command about one Comb of the partitioned layer fails in one line, in the API
    // server's words, with no Debug dump of kube's Status.
    for command in [
        "describe",
        "status",
        "via",
        "logs",
        "endpoints",
        "render",
        "restart",
        "stop",
    ] {
        let (code, stdout, stderr) = demo.comb(&[command, "dev:nats"]);
        assert_eq!(code, 1, "comb {command}: {stdout}{stderr}");
        assert_eq!(
            stderr,
            "comb: Kubernetes API error (get Comb dev:platform/nats): 503 ServiceUnavailable: \
             the sandbox cluster is partitioned (POST /_sandbox/heal ends it)\n",
            "comb {command}"
        );
    }
    let (code, _, stderr) = demo.comb(&["graph"]);
    assert_eq!(code, 1);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    // staging keeps reconciling: stopped, it is deployed again.
    demo.ok(&["stop", "staging:nats"]);
    demo.wait_for_line("staging:staging/nats: Running (Healthy) -> Pending (Deployed)");
    // Running again, through Pending (Deployed) and, where the deployment controller takes its
    // time, Pending (RolloutInProgress).
    demo.wait_for_transition("staging:staging/nats", "Running (Healthy)");

    demo.control("dev", "/_sandbox/heal");
    let (code, checks, _) = demo.comb(&["check"]);
    assert_eq!(code, 0, "{checks}");
    assert_eq!(demo.ok(&["get", "--layer", "dev"]).lines().count(), 4);
}
