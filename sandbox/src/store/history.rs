//! Watches: from a resourceVersion in the kept history, or expired beyond it.

use super::*;

impl Store {
    /// Starts a watch: with `from` the kept events after that resourceVersion (410 Expired
    /// when older than the history), without it the current objects as initial ADDED events.
    pub fn watch(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let state = self.lock();
        let receiver = state.sender.subscribe();
        match from {
            Some(rv) => {
                if rv < state.compacted {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        state.compacted + 1
                    )));
                }
                let backlog = state
                    .history
                    .iter()
                    .filter(|e| e.resource_version > rv)
                    .cloned()
                    .collect();
                Ok(WatchStart {
                    initial: Vec::new(),
                    backlog,
                    receiver,
                    resource_version: state.resource_version,
                })
            }
            None => {
                let initial = state
                    .objects
                    .get(&rt.storage_key())
                    .map(|objects| {
                        objects
                            .iter()
                            .filter(|(k, _)| match namespace.filter(|_| rt.namespaced) {
                                Some(ns) => k.0 == ns,
                                None => true,
                            })
                            .map(|(_, v)| Arc::clone(v))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(WatchStart {
                    initial,
                    backlog: Vec::new(),
                    receiver,
                    resource_version: state.resource_version,
                })
            }
        }
    }
}
