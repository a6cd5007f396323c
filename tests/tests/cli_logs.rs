//! `comb logs` on the converged demo (either backend): `-c` picks a container (an unknown one is
//! one line naming the containers there), `-f` follows until the Pod goes, and a borrowing Comb
//! says where its service runs instead of printing nothing. The emulator writes container logs (kwok's fake
//! containers on the real backend have none, so only the emulator checks their text).

use std::process::Stdio;
use std::time::Duration;

use comb_testkit::Backend;
use comb_testkit::cli::ConvergedDemo;
use comb_testkit::process::{KillOnDrop, STOP_DEADLINE, stdout_lines, wait_within};

#[test]
fn logs_pick_containers_follow_and_point_borrowers_at_their_service() {
    let demo = ConvergedDemo::start();

    assert_eq!(
        demo.ok(&["logs", "dev:db"]),
        "dev:platform/db borrows its service, which runs as prod:platform/db: \
         comb logs prod:platform/db\n"
    );
    assert_eq!(
        demo.ok(&["logs", "dev:nats"]),
        "dev:platform/nats borrows its service, which runs as staging:staging/nats: \
         comb logs staging:staging/nats\n"
    );

    let (code, stdout, stderr) = demo.comb(&["logs", "prod:db", "-c", "pgbouncer"]);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(
        stderr,
        "comb: no container pgbouncer in the pods of platform/db (containers: postgres)\n"
    );

    let chosen = demo.ok(&["logs", "prod:db", "-c", "postgres"]);
    if Backend::from_env() == Backend::Emulator {
        assert!(
            chosen.contains("/postgres started image postgres:16"),
            "{chosen}"
        );
        follow_until_the_pod_goes(&demo);
    }
}

/// `comb logs prod:db -f` prints the log so far, then the lines the container writes while it
/// runs (a followed log stays open, as on a cluster), and ends by itself once the Pod is
/// deleted.
fn follow_until_the_pod_goes(demo: &ConvergedDemo) {
    let mut following = KillOnDrop(
        comb_testkit::comb()
            .args(["--config", &demo.config, "logs", "prod:db", "-f"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("comb logs -f starts"),
    );
    let lines = stdout_lines(&mut following.0);
    let next = |what: &str| {
        lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|error| panic!("comb logs -f printed no {what}: {error}"))
    };
    let started = next("first line");
    // `<time> <pod>/postgres started image postgres:16`
    let pod = started
        .split(' ')
        .nth(1)
        .and_then(|stream| stream.strip_suffix("/postgres"))
        .unwrap_or_else(|| panic!("a first line naming the pod: {started}"))
        .to_string();
    assert!(started.ends_with("started image postgres:16"), "{started}");
    let mut heartbeats = 0;
    while heartbeats < 2 {
        if next("line while the container runs").contains(" heartbeat ") {
            heartbeats += 1;
        }
    }
    assert!(
        following.0.try_wait().expect("its status").is_none(),
        "comb logs -f still follows"
    );

    let deleted = demo.delete("prod", &format!("/api/v1/namespaces/platform/pods/{pod}"));
    assert!(deleted.starts_with("HTTP/1.1 200"), "{deleted}");
    let status = wait_within(&mut following.0, STOP_DEADLINE)
        .unwrap_or_else(|| panic!("comb logs -f did not end with its pod"));
    assert!(status.success(), "{status}");
}
