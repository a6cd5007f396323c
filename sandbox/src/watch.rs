//! Watch streams: chunked JSON lines `{"type":...,"object":...}` from the store's events,
//! filtered by namespace and selectors (objects entering or leaving a label selector are seen
//! as ADDED/DELETED), with bookmarks, `timeoutSeconds`, `sendInitialEvents` and 410 Expired
//! as an ERROR event.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc;
use http::{StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::api_error::ApiError;
use crate::meta;
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::{ApiServer, Query, Rendering, present};
use crate::store::{EventType, StoreEvent, parse_resource_version};
use crate::table::{self, IncludeObject};

/// Which objects a watch sees.
struct Filter {
    resource: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
}

impl Filter {
    fn matches(&self, object: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && meta::namespace(object) != Some(ns.as_str())
        {
            return false;
        }
        if let Some(name) = &self.name
            && meta::name(object) != name
        {
            return false;
        }
        self.labels.as_ref().is_none_or(|s| s.matches(object))
            && self.fields.as_ref().is_none_or(|s| s.matches(object))
    }

    /// The watch event a store event becomes for this watcher, if any: the event's object as
    /// stored (borrowed, so that its encoding can be shared), or, for an object leaving the
    /// selection, its previous state.
    fn translate<'e>(&self, event: &'e StoreEvent) -> Option<(&'static str, Cow<'e, Value>)> {
        // Every watch of the cluster sees every change: the kind is told apart first, and
        // without allocating.
        if !event.resource.same_storage(&self.resource) {
            return None;
        }
        let now = self.matches(&event.object);
        let before = event.old_object.as_ref().is_some_and(|o| self.matches(o));
        let object = Cow::Borrowed(&*event.object);
        match event.event_type {
            EventType::Added => now.then_some(("ADDED", object)),
            EventType::Deleted => before.then_some(("DELETED", object)),
            EventType::Modified => match (before, now) {
                (true, true) => Some(("MODIFIED", object)),
                (false, true) => Some(("ADDED", object)),
                // Leaving the selection: the previous state at this event's version.
                (true, false) => {
                    let mut old = event.old_object.as_deref().cloned().unwrap_or(Value::Null);
                    meta::set_metadata_field(
                        &mut old,
                        "resourceVersion",
                        Some(json!(event.resource_version.to_string())),
                    );
                    Some(("DELETED", Cow::Owned(old)))
                }
                (false, false) => None,
            },
        }
    }
}

/// How each event's object is written.
struct Encoder {
    rt: ResourceType,
    rendering: Rendering,
    include: IncludeObject,
    columns_sent: bool,
}

impl Encoder {
    /// The line of a translated store event. Every watch of a cluster is sent each change it
    /// selects, often several watches the same one: when this watch shows the stored object as
    /// it is, its encoding is the one kept on the event, made once for all of them.
    fn event_line(
        &mut self,
        event_type: &str,
        object: Cow<'_, Value>,
        event: &StoreEvent,
    ) -> Bytes {
        let as_stored = matches!(object, Cow::Borrowed(_))
            && self.rendering == Rendering::Object
            && self.rt.version == self.rt.storage_version;
        if as_stored {
            event_frame(event_type, event.encoded_object())
        } else {
            self.line(event_type, &object)
        }
    }

    fn line(&mut self, event_type: &str, object: &Value) -> Bytes {
        let presented;
        let object = if self.rt.version == self.rt.storage_version {
            object
        } else {
            presented = present(&self.rt, object.clone());
            &presented
        };
        let rendered = match self.rendering {
            Rendering::Object => None,
            Rendering::Metadata => Some(table::partial_metadata(object)),
            Rendering::Table => {
                let with_columns = !self.columns_sent;
                self.columns_sent = true;
                Some(table::table(
                    &self.rt,
                    std::slice::from_ref(object),
                    json!({"resourceVersion": meta::resource_version(object)}),
                    self.include,
                    with_columns,
                ))
            }
        };
        // Serializing a Value with string keys cannot fail.
        let encoded = serde_json::to_vec(rendered.as_ref().unwrap_or(object)).unwrap_or_default();
        event_frame(event_type, &encoded)
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": metadata});
        let mut line = json!({"type": "BOOKMARK", "object": object}).to_string();
        line.push('\n');
        Bytes::from(line)
    }
}

/// `{"type":...,"object":...}` and a newline, around an object's JSON: the bytes
/// `json!({"type": event_type, "object": object}).to_string()` makes, without building it.
fn event_frame(event_type: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + event_type.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(event_type.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn error_line(error: &ApiError) -> Bytes {
    let mut line = json!({"type": "ERROR", "object": error.to_status()}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn stream_response(receiver: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(receiver))
        .unwrap_or_default()
}

/// Serves a watch request (`?watch=1`) on a collection, or on one object by name.
pub fn serve(
    server: &Arc<ApiServer>,
    rt: &ResourceType,
    namespace: Option<&str>,
    name: Option<&str>,
    query: &Query,
    rendering: Rendering,
) -> Result<Response, ApiError> {
    let labels = query
        .get("labelSelector")
        .map(LabelSelector::parse)
        .transpose()?;
    let fields = query
        .get("fieldSelector")
        .map(|f| FieldSelector::parse(f, rt))
        .transpose()?;
    let from = parse_resource_version(query.get("resourceVersion"))?;
    let send_initial = query.flag("sendInitialEvents");
    let bookmarks = query.flag("allowWatchBookmarks");
    let timeout = match query.get("timeoutSeconds") {
        None | Some("") => server.options.default_watch_timeout,
        Some(text) => Duration::from_secs(
            text.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {text:?}")))?,
        ),
    };
    let filter = Filter {
        resource: rt.clone(),
        namespace: namespace.filter(|_| rt.namespaced).map(String::from),
        name: name.map(String::from),
        labels,
        fields,
    };
    let mut encoder = Encoder {
        rt: rt.clone(),
        rendering,
        include: IncludeObject::parse(query.get("includeObject")),
        columns_sent: false,
    };
    let (mut sender, receiver) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    // With sendInitialEvents, a resourceVersion bounds staleness only: start from now.
    let start_from = if send_initial { None } else { from };
    let start = match server.store.watch(rt, namespace, start_from) {
        Ok(start) => start,
        Err(error) if error.code == 410 => {
            // kube-apiserver answers an expired resourceVersion inside the stream.
            tokio::spawn(async move {
                let _ = sender.send(Ok(error_line(&error))).await;
            });
            return Ok(stream_response(receiver));
        }
        Err(error) => return Err(error),
    };
    let shutdown = server.shutdown.clone();
    let bookmark_interval = server.options.bookmark_interval;
    // Without a resourceVersion a watch starts with the current objects, like the real one.
    let initial_objects = from.is_none() || send_initial;
    tokio::spawn(async move {
        let mut events = start.receiver;
        let mut last_rv = start.resource_version;
        let mut lines = Vec::new();
        if initial_objects {
            for object in start.initial.iter().filter(|o| filter.matches(o)) {
                lines.push(encoder.line("ADDED", object));
            }
            if send_initial {
                lines.push(encoder.bookmark(last_rv, true));
            }
        }
        for event in &start.backlog {
            if let Some((kind, object)) = filter.translate(event) {
                lines.push(encoder.event_line(kind, object, event));
            }
        }
        for line in lines {
            if sender.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + bookmark_interval,
            bookmark_interval,
        );
        loop {
            let line = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => return,
                _ = ticker.tick() => {
                    if !bookmarks {
                        continue;
                    }
                    // Everything up to the newest version received has been sent.
                    while let Ok(event) = events.try_recv() {
                        last_rv = event.resource_version;
                        if let Some((kind, object)) = filter.translate(&event)
                            && sender.send(Ok(encoder.event_line(kind, object, &event))).await.is_err()
                        {
                            return;
                        }
                    }
                    encoder.bookmark(last_rv, false)
                }
                event = events.recv() => match event {
                    Ok(event) => {
                        last_rv = last_rv.max(event.resource_version);
                        match filter.translate(&event) {
                            Some((kind, object)) => encoder.event_line(kind, object, &event),
                            None => continue,
                        }
                    }
                    // Too far behind to be exact: end the watch; the client resumes from its
                    // last resourceVersion (or relists after 410).
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                },
            };
            if sender.send(Ok(line)).await.is_err() {
                return;
            }
        }
    });
    Ok(stream_response(receiver))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_frame_is_the_line_json_makes() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
                "data": {"k": "line\nbreak \"quoted\" \u{e9}"}}),
            json!({}),
            Value::Null,
        ];
        for event_type in ["ADDED", "MODIFIED", "DELETED"] {
            for object in &objects {
                let encoded = serde_json::to_vec(object).expect("serializes");
                let mut expected = json!({"type": event_type, "object": object}).to_string();
                expected.push('\n');
                assert_eq!(event_frame(event_type, &encoded), expected.as_bytes());
            }
        }
    }
}
