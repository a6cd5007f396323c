//! `comb sandbox --backend kube` stopped the ways people stop it (SIGTERM to comb, Ctrl-C or
//! SIGTERM to its process group, SIGKILL to comb) leaves nothing behind: no process of its
//! group and no data directory. Each sandbox runs in a process group of its own, with a
//! `TMPDIR` of the test's own, so that what is left can be counted. Skipped, with the reason,
//! where `tests/kube/build` has not built the binaries.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use comb_sandbox::real::available_or_skip;
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _, STOP_DEADLINE, wait_within};
use comb_testkit::wait_until;

/// How a sandbox is stopped.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// `kill PID`, as a supervisor or a person with its PID does.
    TermToComb,
    /// Ctrl-C in its terminal: SIGINT to the whole foreground process group.
    IntToGroup,
    /// `kill -TERM -PGID`, as `timeout` and job control do.
    TermToGroup,
    /// `kill -9 PID`: comb cannot clean up; its watchdogs must.
    KillComb,
}

impl Stop {
    /// The `kill` arguments that stop the sandbox whose comb is `pid` (and leads its group).
    fn kill_args(self, pid: u32) -> Vec<String> {
        match self {
            Stop::TermToComb => vec!["-TERM".into(), pid.to_string()],
            Stop::IntToGroup => vec!["-INT".into(), "--".into(), format!("-{pid}")],
            Stop::TermToGroup => vec!["-TERM".into(), "--".into(), format!("-{pid}")],
            Stop::KillComb => vec!["-KILL".into(), pid.to_string()],
        }
    }
}

/// The processes of process group `group`, as `pid command` lines.
fn processes_of_group(group: u32) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid pgrp ...`: the command may hold spaces and parentheses.
            let (head, fields) = stat.rsplit_once(')')?;
            let pgrp: u32 = fields.split_whitespace().nth(2)?.parse().ok()?;
            let comm = head.split_once('(')?.1;
            (pgrp == group).then(|| format!("{pid} {comm}"))
        })
        .collect()
}

/// What is left in `dir`, as paths relative to it.
fn left_in(dir: &Path) -> Vec<String> {
    let mut left = Vec::new();
    let mut queue = vec![dir.to_path_buf()];
    while let Some(next) = queue.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            let path = entry.path();
            left.push(
                path.strip_prefix(dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string(),
            );
            if path.is_dir() {
                queue.push(path);
            }
        }
    }
    left
}

async fn stopped_leaves_nothing(stop: Stop) {
    let test = format!("sandbox_stops::{stop:?}");
    if !available_or_skip(&test) {
        return;
    }
    let temp = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = temp.path().join("kubeconfig");
    let data = temp.path().join("data");
    std::fs::create_dir(&data).expect("the sandbox's TMPDIR");
    let mut sandbox = Command::new(comb_testkit::bin::comb_path())
        .args(["sandbox", "--backend", "kube", "--clusters", "prod"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("TMPDIR", &data)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("comb sandbox starts");
    let group = sandbox.id();
    let stdout = sandbox.stdout.take().expect("a stdout");
    // Read on a thread of its own: a sandbox that never says `ready` ends at the deadline below.
    let (ready, said_ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        if lines.any(|line| line == "ready") {
            let _ = ready.send(());
        }
        // Read on to the end, so that comb never writes into a closed or full pipe.
        lines.for_each(drop);
    });
    if said_ready.recv_timeout(COMMAND_DEADLINE).is_err() {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status();
        panic!("{test}: comb sandbox did not say ready");
    }
    assert!(
        !left_in(&data).is_empty(),
        "the sandbox keeps its data directory under TMPDIR"
    );

    let killed = Command::new("kill")
        .args(stop.kill_args(group))
        .output_within(COMMAND_DEADLINE);
    assert!(killed.status.success(), "{killed:?}");
    let ended = wait_within(&mut sandbox, STOP_DEADLINE);
    assert!(ended.is_some(), "{test}: comb did not end");

    wait_until(
        format!("{test}: every process of the sandbox's group gone"),
        async || {
            let left = processes_of_group(group);
            if left.is_empty() { Ok(()) } else { Err(left) }
        },
    )
    .await;
    wait_until(
        format!("{test}: the sandbox's data directory gone"),
        async || {
            let left = left_in(&data);
            if left.is_empty() { Ok(()) } else { Err(left) }
        },
    )
    .await;
}

#[tokio::test]
async fn sigterm_to_comb_leaves_nothing() {
    stopped_leaves_nothing(Stop::TermToComb).await;
}

#[tokio::test]
async fn ctrl_c_to_the_group_leaves_nothing() {
    stopped_leaves_nothing(Stop::IntToGroup).await;
}

#[tokio::test]
async fn sigterm_to_the_group_leaves_nothing() {
    stopped_leaves_nothing(Stop::TermToGroup).await;
}

#[tokio::test]
async fn sigkill_to_comb_leaves_nothing() {
    stopped_leaves_nothing(Stop::KillComb).await;
}
