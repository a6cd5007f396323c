//! Kubernetes Events (core/v1) on Comb CRs: phase transitions, dependency cycles, cleanup.
//! An Event that cannot be written is logged and counted, never a failed step.

use comb_api::{Comb, KIND, VERSION};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};

/// `Normal` or `Warning`, as Events know them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    /// Warnings for the phases that need someone's attention.
    pub fn for_phase(phase: &str) -> EventType {
        match phase {
            "Error" | "Blocked" | "NeedsConfig" => EventType::Warning,
            _ => EventType::Normal,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The component Events name as their source.
pub const COMPONENT: &str = "comb";

/// Kubernetes limits an Event message to 1 KiB.
const MAX_MESSAGE: usize = 1024;

/// The Event about `comb` (which must have a namespace and a name).
pub fn event_for(
    group: &str,
    comb: &Comb,
    kind: EventType,
    reason: &str,
    message: &str,
    instance: &str,
) -> Event {
    let name = comb.metadata.name.clone().unwrap_or_default();
    let now = Time(jiff::Timestamp::now());
    Event {
        metadata: ObjectMeta {
            // Unique like kubectl's `<object>.<hex>`, without relying on generateName.
            name: Some(format!("{name}.{:016x}", rand::random::<u64>())),
            namespace: comb.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(format!("{group}/{VERSION}")),
            kind: Some(KIND.to_string()),
            name: Some(name),
            namespace: comb.metadata.namespace.clone(),
            uid: comb.metadata.uid.clone(),
            resource_version: comb.metadata.resource_version.clone(),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_string()),
        message: Some(truncate(message, MAX_MESSAGE)),
        type_: Some(kind.as_str().to_string()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_string()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(instance.to_string()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    }
}

/// Writes `event`; the error says what failed, for the caller to log.
pub async fn publish(client: kube::Client, event: &Event) -> Result<(), String> {
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Event> = Api::namespaced(client, namespace);
    api.create(&PostParams::default(), event)
        .await
        .map(drop)
        .map_err(|error| {
            format!(
                "writing Event {} failed: {error}",
                event.reason.as_deref().unwrap_or_default()
            )
        })
}

/// At most `max` bytes, cut at a character boundary, marked when cut.
fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use comb_api::CombSpec;

    #[test]
    fn events_point_at_the_comb() {
        let mut comb = Comb::new(
            "comb.internal",
            "platform",
            "nats",
            CombSpec::of_class("Manifests"),
        );
        comb.metadata.uid = Some("u-1".into());
        let event = event_for(
            "comb.internal",
            &comb,
            EventType::for_phase("Running"),
            "Healthy",
            "Pending (Deployed) -> Running (Healthy): healthy",
            "comb-0",
        );
        assert!(event.metadata.name.as_deref().unwrap().starts_with("nats."));
        assert_eq!(event.metadata.namespace.as_deref(), Some("platform"));
        let object = &event.involved_object;
        assert_eq!(object.api_version.as_deref(), Some("comb.internal/v1"));
        assert_eq!(object.kind.as_deref(), Some("Comb"));
        assert_eq!(object.uid.as_deref(), Some("u-1"));
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(event.reason.as_deref(), Some("Healthy"));
        assert_eq!(EventType::for_phase("Blocked"), EventType::Warning);
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "é".repeat(600);
        let cut = truncate(&long, MAX_MESSAGE);
        assert!(cut.len() <= MAX_MESSAGE);
        assert!(cut.ends_with("..."));
        assert_eq!(truncate("short", MAX_MESSAGE), "short");
    }
}
