//! The log filter every comb process uses: the operator's `RUST_LOG` (default `info`), with the
//! targets that would print request or response bodies capped, whatever `RUST_LOG` says.
//!
//! Why a cap and not trust: kube's client logs the whole response body at WARN when a response
//! does not decode (and at DEBUG/TRACE for error responses), and a body may hold Secrets; the
//! HTTP layers below it log headers (a bearer token) at TRACE; kube's watcher logs the response
//! of a refused list or watch (a 403's `Status`, Debug-printed) at WARN on every retry, which
//! the controller reports itself, once, in its own words. No level of comb's own logging may
//! carry those, so these targets are capped after the operator's directives.

use tracing_subscriber::EnvFilter;

/// Targets that log bodies or credentials, and the most they may log.
pub const BODY_SAFE_CAPS: [&str; 7] = [
    "kube_client::client=error",
    "kube_runtime::watcher=error",
    "h2=info",
    "hyper=info",
    "hyper_util=info",
    "rustls=info",
    "tower=info",
];

/// `directives` (e.g. `RUST_LOG`'s value) with [`BODY_SAFE_CAPS`] applied after them.
pub fn body_safe_filter(directives: &str) -> EnvFilter {
    let mut filter = EnvFilter::new(directives);
    for cap in BODY_SAFE_CAPS {
        if let Ok(directive) = cap.parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// The filter of `RUST_LOG`, default `info`, capped.
pub fn default_filter() -> EnvFilter {
    body_safe_filter(&std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_win_over_the_operators_directives() {
        let filter = body_safe_filter("trace,kube_client=trace,h2=trace").to_string();
        for cap in BODY_SAFE_CAPS {
            assert!(filter.contains(cap), "{filter} lacks {cap}");
        }
        // A later directive for the same target replaces the earlier one.
        assert!(!filter.contains("h2=trace"), "{filter}");
    }

    /// What kube's client does when a response does not decode: the body at WARN.
    #[test]
    fn a_body_kube_logs_at_warn_never_reaches_the_output() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .map_err(|_| std::io::Error::other("poisoned"))?
                    .extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(body_safe_filter("trace"))
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "kube_client::client", r#"{{"kind":"CombList","data":"c2VjcmV0"}}, Error"#);
            tracing::trace!(target: "h2::codec", "authorization: Bearer t0ken");
            tracing::warn!(target: "comb_federation::controller", "a line of comb's own");
        });
        let output = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert!(output.contains("a line of comb's own"), "{output}");
        assert!(!output.contains("c2VjcmV0"), "{output}");
        assert!(!output.contains("t0ken"), "{output}");
    }
}
