//! `comb logs` on the converged demo (either backend): `-c` picks a container (an unknown one is
//! one line naming the containers there), `-f` follows, and a borrowing Comb says where its
//! service runs instead of printing nothing. The emulator writes container logs (kwok's fake
//! containers on the real backend have none, so only the emulator checks their text).

use comb_testkit::Backend;
use comb_testkit::cli::ConvergedDemo;

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
    // The emulator stops a followed log where it ends; kube-apiserver keeps it open, so `-f`
    // is run where it ends by itself.
    if Backend::from_env() == Backend::Emulator {
        assert!(
            chosen.contains("/postgres started image postgres:16"),
            "{chosen}"
        );
        let followed = demo.ok(&["logs", "prod:db", "-f"]);
        assert!(
            followed.contains("/postgres started image postgres:16"),
            "{followed}"
        );
    }
}
