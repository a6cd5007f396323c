//! Network namespaces of the sandbox, held only by file descriptors of this process and by the
//! processes inside them: none is named in `/run/netns` (`ip netns add` bind-mounts one there,
//! and a bind mount outlives a killed process), so when the sandbox stops, or dies even by
//! SIGKILL, the kernel closes its descriptors, the processes inside end (their watchdogs see
//! their pipes close, [`crate::real::process`]), and the namespaces go with everything in them:
//! interfaces, addresses, routes, nftables rules.
//!
//! A namespace is a property of a thread: a thread of its own enters one, does what must happen
//! inside (create a socket, start a process, open a netlink connection) and ends. What it made
//! keeps the namespace it was made in: a socket bound inside is served by the sandbox's runtime
//! in the host's namespace, a process started inside runs there. The calling thread never
//! changes namespace, so nothing of the sandbox's own runtime is moved by accident.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use nix::sched::{CloneFlags, setns, unshare};

use crate::error::{Error, Result};

/// One anonymous network namespace; clones share it, the last one dropped lets it go (once no
/// process or socket inside holds it either).
#[derive(Clone)]
pub struct Netns {
    name: Arc<str>,
    fd: Arc<OwnedFd>,
}

impl std::fmt::Debug for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Netns").field(&self.name).finish()
    }
}

impl Netns {
    /// A new, empty network namespace (only `lo`, down). `name` says what it is for, in errors.
    pub fn create(name: &str) -> Result<Netns> {
        let what = format!("creating the network namespace of {name}");
        let fd = on_thread(&what, || {
            unshare(CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            // The thread's own namespace: /proc/self names the main thread's.
            File::open("/proc/thread-self/ns/net").map(OwnedFd::from)
        })?;
        Ok(Netns {
            name: name.into(),
            fd: Arc::new(fd),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The descriptor that holds the namespace (to move an interface into it).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Runs `inside` on a thread of its own that has entered this namespace, and waits for it:
    /// for what takes microseconds (a socket, a process started). `what` names it in errors.
    pub fn run<T: Send>(
        &self,
        what: &str,
        inside: impl FnOnce() -> std::io::Result<T> + Send,
    ) -> Result<T> {
        let what = format!("{what} in the network namespace of {}", self.name);
        on_thread(&what, || {
            setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            inside()
        })
    }
}

/// Runs `work` on a new thread and waits for it; the thread ends with whatever namespace it
/// entered.
fn on_thread<T: Send>(what: &str, work: impl FnOnce() -> std::io::Result<T> + Send) -> Result<T> {
    let outcome = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("comb-netns".into())
            .spawn_scoped(scope, work)
            .map(|thread| thread.join())
    });
    let io = |source| Error::Io {
        what: what.to_string(),
        source,
    };
    match outcome {
        Ok(Ok(result)) => result.map_err(io),
        Ok(Err(_)) => Err(io(std::io::Error::other("its thread panicked"))),
        Err(source) => Err(io(source)),
    }
}
