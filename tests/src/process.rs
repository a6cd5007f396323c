//! The tests' child processes, each waited on with a deadline: a process that does not end
//! fails its test, saying what it printed, instead of holding the whole suite (and CI) until
//! something outside kills it; and none outlives its test.

use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// How long a command of the tests may run: far above what any takes on a loaded machine.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(300);

/// How long a process may take to end after it was asked to stop.
pub const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// [`Command::output`] with a deadline.
pub trait OutputWithin {
    /// Runs the command (stdin closed) and collects its output; past `limit` it is killed and
    /// the test fails with what it printed until then.
    fn output_within(&mut self, limit: Duration) -> Output;
}

impl OutputWithin for Command {
    fn output_within(&mut self, limit: Duration) -> Output {
        let mut child = self
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("{self:?} does not start: {error}"));
        // Read while it runs: a child blocked on a full pipe would never end.
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let status = match wait_within(&mut child, limit) {
            Some(status) => status,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{self:?} did not end within {limit:?}; it printed:\n{}\n{}",
                    String::from_utf8_lossy(&collect(&stdout)),
                    String::from_utf8_lossy(&collect(&stderr)),
                );
            }
        };
        Output {
            status,
            stdout: collect(&stdout),
            stderr: collect(&stderr),
        }
    }
}

/// Waits up to `limit` for `child` to end: its exit status, None if it still runs.
///
/// Polls `try_wait` (every 20 ms), as a test's wait on a condition does: a blocking wait with
/// a timeout needs a SIGCHLD handler of the whole test process, beside tokio's.
pub fn wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Reads a pipe to its end on a thread of its own.
fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> Receiver<Vec<u8>> {
    let (send, receive) = channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        let _ = send.send(bytes);
    });
    receive
}

/// What a drained pipe held, once the process ended: a process it started may still hold the
/// pipe open, so this waits a little, then takes nothing.
fn collect(drained: &Receiver<Vec<u8>>) -> Vec<u8> {
    drained
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| b"(its output stayed open: a process it started holds it)".to_vec())
}

/// Sends `signal` (`INT`, `TERM`) to `child` and waits up to `limit` for it to end, then kills
/// it: its exit status, or None when it had to be killed (or had ended and been waited for).
pub fn stop_within(child: &mut Child, signal: &str, limit: Duration) -> Option<ExitStatus> {
    if !matches!(child.try_wait(), Ok(None)) {
        // Ended and waited for: its id may belong to another process by now.
        return None;
    }
    let _ = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match wait_within(child, limit) {
        Some(status) => Some(status),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// The lines `child` prints on its (piped) stdout, read on a thread of their own, so that a
/// test waits for each with a deadline (`recv_timeout`); the channel closes when it ends.
pub fn stdout_lines(child: &mut Child) -> Receiver<String> {
    use std::io::{BufRead as _, BufReader};
    let stdout = child.stdout.take().expect("the child's stdout is piped");
    let (send, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// A child killed and waited for when dropped: when its test fails before stopping it, it
/// does not live on.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
