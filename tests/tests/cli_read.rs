//! The reading commands of the CLI through the `comb` binary, on the converged demo: get,
//! via, endpoints, describe, status, render and check, as tables and as JSON/YAML.

use comb_testkit::cli::{ConvergedDemo, row};
use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|error| panic!("{error}: not JSON:\n{text}"))
}

#[test]
fn reading_commands_on_the_converged_demo() {
    let demo = ConvergedDemo::start();

    // get: every Comb of every layer, with filters and for scripts.
    let table = demo.ok(&["get"]);
    assert_eq!(
        table.lines().next(),
        Some(
            "LAYER     NAMESPACE   NAME     CLASS              PHASE     REASON     UPSTREAM   VIA             AGE"
        )
    );
    assert_eq!(table.lines().count(), 10, "{table}");
    assert_eq!(
        row(&table, &["dev", "platform", "db"])[3..8],
        [
            "Manifests",
            "Running",
            "Borrowed",
            "staging",
            "staging, prod"
        ]
    );
    let staging = demo.ok(&["get", "--layer", "staging"]);
    assert!(
        staging
            .lines()
            .skip(1)
            .all(|line| line.starts_with("staging ")),
        "{staging}"
    );
    assert_eq!(staging.lines().count(), 4);
    let platform = demo.ok(&["get", "-n", "platform"]);
    assert!(!platform.contains("staging   staging"), "{platform}");
    assert_eq!(platform.lines().count(), 7);
    let wide = demo.ok(&["get", "-o", "wide", "--layer", "dev"]);
    assert!(wide.contains("borrowed from upstream Kubernetes::Comb::Upstream::K8s (context staging) via staging, prod"), "{wide}");
    let items = json(&demo.ok(&["get", "-o", "json"]));
    let items = items["items"].as_array().expect("items");
    assert_eq!(items.len(), 9);
    let dev_db = items
        .iter()
        .find(|item| item["layer"] == "dev" && item["name"] == "db")
        .expect("dev's db");
    assert_eq!(dev_db["phase"], "Running");
    assert_eq!(dev_db["via"], serde_json::json!(["staging", "prod"]));
    assert_eq!(dev_db["endpoints"][0]["cluster"], "192.0.2.10:5432");
    let yaml: Value = serde_saphyr::from_str(&demo.ok(&["get", "-o", "yaml", "--layer", "prod"]))
        .expect("get -o yaml parses");
    assert_eq!(yaml["items"].as_array().map(Vec::len), Some(3));

    // via: the chain layer by layer, each hop with its phase.
    assert_eq!(
        demo.ok(&["via", "dev:db"]),
        "LAYER     COMB          PHASE     REASON     VIA\n\
         dev       platform/db   Running   Borrowed   staging, prod\n\
         staging   staging/db    Running   Borrowed   prod\n\
         prod      platform/db   Running   Healthy    <none>\n\
         served by prod:platform/db (Running)\n"
    );
    assert_eq!(
        demo.ok(&["via", "staging:nats"]).lines().last(),
        Some("served by staging:staging/nats (Running)")
    );

    // endpoints: the env file of the reference example, and JSON.
    assert_eq!(
        demo.ok(&["endpoints", "dev:db", "dev:nats", "dev:mailer", "-o", "env"]),
        "# Endpoints of the Combs in dev:platform, written by comb endpoints\n\
         # db: Running\n\
         DB_POSTGRES_CLUSTER=192.0.2.10:5432\n\
         DB_POSTGRES_EXTERNAL=192.0.2.10:5432\n\
         # mailer: Running\n\
         MAILER_SMTP_CLUSTER=mailer.platform.svc:587\n\
         MAILER_WEB_CLUSTER=mailer.platform.svc:8025\n\
         # nats: Running\n\
         NATS_CLIENT_CLUSTER=192.0.2.20:4222\n\
         NATS_CLIENT_EXTERNAL=192.0.2.20:4222\n\
         NATS_MONITOR_CLUSTER=192.0.2.20:8222\n\
         NATS_MONITOR_EXTERNAL=192.0.2.20:8222\n"
    );
    let published = json(&demo.ok(&["endpoints", "staging:db", "-o", "json"]));
    assert_eq!(published["items"][0]["comb"], "staging:staging/db");
    assert_eq!(
        published["items"][0]["endpoints"][0]["cluster"],
        "db.platform.svc:5432"
    );
    let table = demo.ok(&["endpoints", "prod:db"]);
    assert_eq!(
        row(&table, &["prod:platform/db"])[1..],
        [
            "postgres",
            "tcp",
            "5432",
            "db.platform.svc:5432",
            "192.0.2.10:5432"
        ]
    );

    // describe: identity, what it recorded, what it resolves and shows now.
    let described = demo.ok(&["describe", "staging:mailer"]);
    for line in [
        "Class:         Manifests::Stub",
        "Stub of:       Manifests",
        "Depends on:    nats, db",
        "Borrows from:  nothing, it runs its service itself",
        "  Phase:                Running",
    ] {
        assert!(described.contains(line), "{line:?} missing in\n{described}");
    }
    let described = json(&demo.ok(&["describe", "dev:db", "-o", "json"]));
    assert_eq!(described["borrowsFrom"], "Kubernetes::Comb::Upstream::K8s");
    assert_eq!(described["endpoints"][0]["cluster"], "192.0.2.10:5432");
    assert_eq!(
        described["recorded"]["upstream"]["via"],
        serde_json::json!(["staging", "prod"])
    );
    assert_eq!(described["status"]["phase"], "Running");

    // status: the live view, pods for a local Comb, the upstream for a borrowing one.
    let status = demo.ok(&["status", "prod:db"]);
    assert!(status.contains("Phase:    Running\n"), "{status}");
    assert_eq!(row(&status, &["db-0"])[1..4], ["Running", "true", "0"]);
    let status = json(&demo.ok(&["status", "dev:nats", "-o", "json"]));
    assert_eq!(status["healthy"], true);
    assert_eq!(status["pods"], serde_json::json!([]));
    assert_eq!(status["upstream"]["via"], serde_json::json!(["staging"]));

    // render: labelled and digested manifests, or the bridge while borrowing.
    let rendered = demo.ok(&["render", "prod:nats"]);
    assert!(
        rendered.starts_with("# prod:platform/nats: its manifests\n"),
        "{rendered}"
    );
    let documents: Vec<Value> = serde_saphyr::from_multiple(&rendered).expect("render prints YAML");
    // The Deployment, the Service, and the load balancer at the address nats publishes.
    assert_eq!(documents.len(), 3);
    assert_eq!(documents[2]["spec"]["type"], "LoadBalancer");
    assert_eq!(
        documents[2]["metadata"]["annotations"]["metallb.io/loadBalancerIPs"],
        "192.0.2.11"
    );
    assert_eq!(
        documents[0]["metadata"]["labels"]["comb.internal/comb"],
        "nats"
    );
    assert!(
        documents[0]["metadata"]["annotations"]["comb.internal/applied-digest"]
            .as_str()
            .is_some_and(|digest| digest.starts_with("sha256:"))
    );
    let bridge = json(&demo.ok(&["render", "staging:db", "-o", "json"]));
    assert_eq!(bridge["items"][0]["spec"]["type"], "ExternalName");
    assert_eq!(
        bridge["items"][0]["spec"]["externalName"],
        "db.platform.svc.cluster.local"
    );
    let bridge = json(&demo.ok(&["render", "dev:db", "-o", "json"]));
    let kinds: Vec<&str> = bridge["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["Service", "EndpointSlice"]);

    // check: everything reachable and installed; permissions cannot be asked here.
    let checks = demo.ok(&["check"]);
    assert!(!checks.contains("FAILED"), "{checks}");
    assert_eq!(row(&checks, &["crd", "dev"])[2], "ok");
    assert_eq!(
        row(&checks, &["upstream layer", "dev"])[3],
        "borrows from staging, which is reachable"
    );
    let checks = json(&demo.ok(&["check", "-o", "json"]));
    let outcomes: Vec<(&str, &str, &str)> = checks
        .as_array()
        .expect("a list of checks")
        .iter()
        .map(|check| {
            (
                check["check"].as_str().unwrap_or_default(),
                check["layer"].as_str().unwrap_or_default(),
                check["outcome"].as_str().unwrap_or_default(),
            )
        })
        .filter(|(check, _, _)| *check == "reachable" || *check == "dependencies")
        .collect();
    assert_eq!(
        outcomes,
        [
            ("reachable", "prod", "ok"),
            ("reachable", "staging", "ok"),
            ("reachable", "dev", "ok"),
            ("dependencies", "prod", "ok"),
            ("dependencies", "staging", "ok"),
            ("dependencies", "dev", "ok"),
        ]
    );
}
