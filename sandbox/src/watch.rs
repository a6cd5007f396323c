//! Watch streams: chunked JSON lines `{"type":...,"object":...}` from the store's events,
//! filtered by namespace and selectors (objects entering or leaving a label selector are seen
//! as ADDED/DELETED), with bookmarks, `timeoutSeconds`, `sendInitialEvents` and 410 Expired
//! as an ERROR event.

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

    /// The watch event a store event becomes for this watcher, if any.
    fn translate(&self, event: &StoreEvent) -> Option<(&'static str, Value)> {
        // Every watch of the cluster sees every change: the kind is told apart first, and
        // without allocating.
        if !event.resource.same_storage(&self.resource) {
            return None;
        }
        let now = self.matches(&event.object);
        let before = event.old_object.as_ref().is_some_and(|o| self.matches(o));
        match event.event_type {
            EventType::Added => now.then(|| ("ADDED", event.object.clone())),
            EventType::Deleted => before.then(|| ("DELETED", event.object.clone())),
            EventType::Modified => match (before, now) {
                (true, true) => Some(("MODIFIED", event.object.clone())),
                (false, true) => Some(("ADDED", event.object.clone())),
                // Leaving the selection: the previous state at this event's version.
                (true, false) => {
                    let mut old = event.old_object.clone().unwrap_or(Value::Null);
                    meta::set_metadata_field(
                        &mut old,
                        "resourceVersion",
                        Some(json!(event.resource_version.to_string())),
                    );
                    Some(("DELETED", old))
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
    fn line(&mut self, event_type: &str, object: Value) -> Bytes {
        let object = present(&self.rt, object);
        let object = match self.rendering {
            Rendering::Object => object,
            Rendering::Metadata => table::partial_metadata(&object),
            Rendering::Table => {
                let with_columns = !self.columns_sent;
                self.columns_sent = true;
                table::table(
                    &self.rt,
                    std::slice::from_ref(&object),
                    json!({"resourceVersion": meta::resource_version(&object)}),
                    self.include,
                    with_columns,
                )
            }
        };
        let mut line = json!({"type": event_type, "object": object}).to_string();
        line.push('\n');
        Bytes::from(line)
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
            for object in start.initial.into_iter().filter(|o| filter.matches(o)) {
                lines.push(encoder.line("ADDED", object));
            }
            if send_initial {
                lines.push(encoder.bookmark(last_rv, true));
            }
        }
        for event in &start.backlog {
            if let Some((kind, object)) = filter.translate(event) {
                lines.push(encoder.line(kind, object));
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
                            && sender.send(Ok(encoder.line(kind, object))).await.is_err()
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
                            Some((kind, object)) => encoder.line(kind, object),
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
