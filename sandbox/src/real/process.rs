//! The processes of a real control plane: each runs under a small `sh` watchdog that ends it
//! when comb closes the watchdog's stdin, and so also when comb dies (the kernel closes the
//! pipe then), which `kill_on_drop` cannot promise; the data directory goes with it.
//!
//! Why a watchdog and not `PR_SET_PDEATHSIG`: setting that needs `pre_exec`, which is unsafe
//! code, and the workspace forbids it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, ChildStdin, Command};

use crate::error::{Error, Result};

/// Runs `"$@"`, and ends it (TERM, then KILL after 5 s) once stdin reads EOF; then removes `$1`
/// (a directory, may be empty). Stdin is kept on fd 3 because `sh` gives a background job
/// `/dev/null` as its stdin. The watchdog (its reader too) ignores INT, TERM and HUP from the
/// moment its component runs: a Ctrl-C (or `kill -TERM -PGID`, or `timeout`) signals the whole
/// process group, and the watchdog must outlive it, to kill a component that hangs in its
/// graceful shutdown and to keep the directory's fate its own. Before, its main shell died of
/// the group's signal while the reader lived on: the reader marked the directory as comb
/// removed it, nobody was left to remove it after, and the directory stayed (two stops of
/// three). The component itself is started before the trap, so it keeps the default actions.
///
/// The directory goes only when the stop came from comb (it asked, or it died): the reader marks
/// it before it signals. A component that ends on its own leaves it, with the log that says why
/// (etcd's log is in the directory its watchdog removes), for comb to read and then remove. The
/// reader is killed with KILL (it ignores TERM) so that it cannot mark a directory made later.
/// The removal is tried again for a while: when comb dies, every watchdog stops at once, and
/// the watchdogs of directories inside this one (a cluster's inside the sandbox's) write their
/// marks there while this one removes it, which a single `rm -rf` can lose to (it left the
/// emptied directory behind in the network test's SIGKILL check).
/// The mark is written by `true`, not `:`: a failed redirection of a special built-in such as
/// `:` ends a POSIX shell, and the directory may be gone already (comb removed it before it
/// closed stdin), which ended the reader before it signalled and left the component running.
const WATCHDOG: &str = r#"cleanup=$1; shift
exec 3<&0
"$@" </dev/null 3<&- &
child=$!
trap '' INT TERM HUP
( read -r _ <&3
  [ -n "$cleanup" ] && true 2>/dev/null >"$cleanup/.comb-stopping"
  kill -TERM "$child" 2>/dev/null; i=0
  while kill -0 "$child" 2>/dev/null && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$child" 2>/dev/null ) &
reader=$!
wait "$child"; status=$?
kill -KILL "$reader" 2>/dev/null
if [ -n "$cleanup" ] && [ -e "$cleanup/.comb-stopping" ]; then
  i=0
  while [ -e "$cleanup" ] && [ "$i" -lt 50 ]; do
    rm -rf "$cleanup" 2>/dev/null
    [ -e "$cleanup" ] && sleep 0.1
    i=$((i+1))
  done
fi
exit "$status""#;

/// One running component of a cluster.
pub struct Component {
    pub name: String,
    pub log: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl std::fmt::Debug for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Component")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Component {
    /// Starts `binary args` with its output in `log`; `cleanup` is removed when comb stops it
    /// (or dies), not when it ends on its own.
    pub fn spawn(
        name: &str,
        binary: &Path,
        args: &[String],
        log: &Path,
        cleanup: Option<&Path>,
    ) -> Result<Component> {
        let io = |what: &str| {
            let what = format!("{what} for {name}");
            move |source| Error::Io { what, source }
        };
        // A component started again (kube-apiserver after a test stopped it) adds to its log,
        // below a line that says so: what it wrote before is what a failure needs to show.
        let mut output = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(io("opening the log file"))?;
        if output.metadata().is_ok_and(|m| m.len() > 0) {
            writeln!(output, "--- comb: {name} started again ---")
                .map_err(io("writing the log file"))?;
        }
        let errors = output.try_clone().map_err(io("opening the log file"))?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("comb-watchdog")
            .arg(cleanup.map(Path::as_os_str).unwrap_or_default())
            .arg(binary)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(output)
            .stderr(errors)
            .spawn()
            .map_err(io("starting"))?;
        let stdin = child.stdin.take();
        Ok(Component {
            name: name.to_string(),
            log: log.to_path_buf(),
            child,
            stdin,
        })
    }

    /// Whether the process has ended already (a component that exits at start).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Asks the component to stop (its watchdog sends TERM).
    pub fn stop(&mut self) {
        self.stdin = None;
    }

    /// Stops it and waits until it is gone (at most `limit`, then it is killed).
    pub async fn stop_and_wait(&mut self, limit: Duration) {
        self.stop();
        if tokio::time::timeout(limit, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }

    /// The last lines of its log, for an error message.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        // Closing stdin is all it takes: the watchdog ends the process.
        self.stdin = None;
    }
}

/// The last `lines` lines of a file, joined with ` | ` to fit one message.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component that writes `words` and then runs `rest` (shell), with its log in and its
    /// cleanup of a directory of its own: the component, that directory, and what holds it.
    fn shell(words: &str, rest: &str) -> (Component, PathBuf, tempfile::TempDir) {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("cluster");
        std::fs::create_dir(&dir).unwrap();
        let component = Component::spawn(
            "test",
            Path::new("/bin/sh"),
            &["-c".to_string(), format!("echo {words}; {rest}")],
            &dir.join("test.log"),
            Some(&dir),
        )
        .unwrap();
        (component, dir, top)
    }

    /// A component that has started and said so (its output written), sleeping until stopped.
    async fn serving() -> (Component, PathBuf, tempfile::TempDir) {
        let (component, dir, top) = shell("serving", "exec sleep 600");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while component.log_tail(1) != "serving" {
            assert!(tokio::time::Instant::now() < deadline, "it never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (component, dir, top)
    }

    async fn ended(component: &mut Component) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(30), component.child.wait())
            .await
            .expect("the watchdog ends")
            .unwrap()
    }

    #[tokio::test]
    async fn a_component_that_fails_on_its_own_leaves_its_log_to_be_read() {
        let (mut component, dir, _top) = shell("bind: address already in use", "exit 1");
        assert!(!ended(&mut component).await.success());
        assert_eq!(component.log_tail(5), "bind: address already in use");
        // Stopped after it ended: nothing left to end, and the directory stays comb's to remove.
        component.stop_and_wait(Duration::from_secs(10)).await;
        assert!(dir.exists());
    }

    #[tokio::test]
    async fn a_component_started_again_adds_to_its_log() {
        let top = tempfile::tempdir().unwrap();
        let log = top.path().join("again.log");
        for words in ["first life", "second life"] {
            let args = ["-c".to_string(), format!("echo {words}")];
            let mut component =
                Component::spawn("again", Path::new("/bin/sh"), &args, &log, None).unwrap();
            assert!(ended(&mut component).await.success());
        }
        assert_eq!(
            log_tail(&log, 5),
            "first life | --- comb: again started again --- | second life"
        );
    }

    #[tokio::test]
    async fn a_component_whose_directory_is_gone_still_ends_when_stopped() {
        let (mut component, dir, _top) = serving().await;
        // Removed before the stop, as a sandbox that drops its data directory first does.
        std::fs::remove_dir_all(&dir).unwrap();
        component.stop();
        // The watchdog ends only once its component has: nothing is left running.
        ended(&mut component).await;
    }

    #[tokio::test]
    async fn a_component_comb_stops_takes_its_directory_with_it() {
        let (mut component, dir, _top) = serving().await;
        component.stop_and_wait(Duration::from_secs(30)).await;
        assert!(!dir.exists());
    }
}
