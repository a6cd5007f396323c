//! `comb-identity IDENTITY ADDRESS:PORT...`: what stands for a container in the sandbox network
//! (`comb sandbox --backend kube --network`). It listens on every address given and answers each
//! connection with one line, `IDENTITY PORT` (the identity is `cluster/namespace/pod`, the port
//! the one that was called), then closes it; what the caller sent is not read, so any protocol's
//! client gets the line. It prints `ready` once every address is bound, and exits when its
//! standard input ends: the sandbox holds the other end, so it goes when the sandbox stops it or
//! dies (the kernel closes the pipe then), which nothing else promises to a process that a
//! killed parent leaves behind.
//!
//! Dependency-free on purpose: it is built beside `comb` (`cargo build -p comb-identity`) and
//! started once per Pod.

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(identity), addresses) = (args.next(), args.collect::<Vec<_>>()) else {
        eprintln!("usage: comb-identity CLUSTER/NAMESPACE/POD ADDRESS:PORT...");
        return ExitCode::from(2);
    };
    let mut listeners = Vec::new();
    for address in &addresses {
        let parsed: SocketAddr = match address.parse() {
            Ok(parsed) => parsed,
            Err(error) => {
                eprintln!("comb-identity: {address} is not ADDRESS:PORT: {error}");
                return ExitCode::from(2);
            }
        };
        match TcpListener::bind(parsed) {
            Ok(listener) => listeners.push(listener),
            Err(error) => {
                eprintln!("comb-identity: cannot listen on {address}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    for listener in listeners {
        let identity = identity.clone();
        std::thread::spawn(move || serve(&listener, &identity));
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    // Until the sandbox closes our stdin (or is gone).
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    ExitCode::SUCCESS
}

/// Answers every connection of `listener` with `identity` and the port that was called.
fn serve(listener: &TcpListener, identity: &str) {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let line = format!("{identity} {port}\n");
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        // A caller that does not read must not hold the others up.
        let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = stream.write_all(line.as_bytes());
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
}
