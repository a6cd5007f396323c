//! `comb get` as a kubectl user reaches for it, on the converged demo (either backend):
//! references, `-A`, `-l`, `-o name`, and `-w` printing a line per change.

use std::process::Stdio;
use std::time::Duration;

use comb_testkit::cli::{ConvergedDemo, comb};
use comb_testkit::process::{
    COMMAND_DEADLINE, KillOnDrop, OutputWithin as _, STOP_DEADLINE, stdout_lines, stop_within,
};

fn names(table: &str) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            format!("{}:{}/{}", cells[0], cells[1], cells[2])
        })
        .collect()
}

#[test]
fn get_takes_references_selectors_and_name_output() {
    let demo = ConvergedDemo::start();
    assert_eq!(
        names(&demo.ok(&["get", "db"])),
        ["prod:platform/db", "staging:staging/db", "dev:platform/db"]
    );
    assert_eq!(
        names(&demo.ok(&["get", "dev:nats", "staging:staging/db"])),
        ["staging:staging/db", "dev:platform/nats"]
    );
    assert_eq!(
        names(&demo.ok(&["get", "-A", "-l", "tier=data"])),
        ["prod:platform/db", "staging:staging/db", "dev:platform/db"]
    );
    assert_eq!(
        demo.ok(&[
            "get",
            "-l",
            "tier in (edge, messaging)",
            "--layer",
            "dev",
            "-o",
            "name"
        ]),
        "dev:platform/mailer\ndev:platform/nats\n"
    );
    let (code, _, stderr) = demo.comb(&["get", "nowhere:db"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("nowhere"), "{stderr}");
}

#[test]
fn get_watch_prints_a_line_per_change() {
    let demo = ConvergedDemo::start();
    let mut watching = KillOnDrop(
        comb()
            .args(["--config", &demo.config, "get", "-w", "staging:nats"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("comb get -w starts"),
    );
    let lines = stdout_lines(&mut watching.0);
    let next = |what: &str| {
        lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("comb get -w printed no {what}"))
    };
    assert!(next("header").starts_with("LAYER"));
    assert!(next("first row").contains(" Running "));
    demo.ok(&["stop", "staging:nats"]);
    // Every change shows, without the header, until it runs again (a stop makes a handful).
    let mut seen = Vec::new();
    loop {
        assert!(seen.len() < 50, "it never runs again: {seen:#?}");
        let line = next("change");
        assert!(line.starts_with("staging "), "{line}");
        let running = line.contains(" Running ");
        seen.push(line);
        if running {
            break;
        }
    }
    assert!(
        seen.iter().any(|line| line.contains(" Pending ")),
        "{seen:#?}"
    );
    // SIGINT ends it cleanly.
    assert_eq!(
        stop_within(&mut watching.0, "INT", STOP_DEADLINE).and_then(|status| status.code()),
        Some(0)
    );
}

/// A command that never reads the configuration refuses `--config` instead of ignoring it.
#[test]
fn config_is_refused_where_it_is_not_read() {
    for (args, says) in [
        (
            ["--config", "mine.yaml", "crd"],
            "comb: comb crd prints the CRD for --group, not --config; leave it out\n",
        ),
        (
            ["demo", "--config", "mine.yaml"],
            "comb: comb demo writes and reads a configuration of its own, not --config; leave it out\n",
        ),
    ] {
        let output = comb().args(args).output_within(COMMAND_DEADLINE);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&output.stderr), says);
    }
    // COMB_CONFIG in the environment is not a choice made for this command.
    let output = comb()
        .env("COMB_CONFIG", "mine.yaml")
        .arg("crd")
        .output_within(COMMAND_DEADLINE);
    assert!(output.status.success());
}
