//! Kubernetes Events (core/v1) on Comb CRs: phase transitions, dependency cycles, prune notes,
//! cleanup. An Event that cannot be written is logged and counted, never a failed step, and
//! tried again by the next step.
//!
//! Events say what changed, once: [`Announced`] remembers per Comb what was said, so that the
//! same Event is not written again by every step (a cleanup that keeps failing, a transition
//! seen twice through a stale record) and each prune note is told the first time it comes.
//! Said means the API took it: an Event whose write failed is kept and tried again by the
//! Comb's next step, not lost.

use std::collections::VecDeque;

use comb_api::{Comb, KIND, Phase, Reason, VERSION};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};

/// `Normal` or `Warning`, as Events know them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    /// Warnings for the phases that need someone's attention.
    pub fn for_phase(phase: &Phase) -> EventType {
        match phase {
            Phase::Error | Phase::Blocked | Phase::NeedsConfig => EventType::Warning,
            _ => EventType::Normal,
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
        type_: Some(<&str>::from(kind).to_string()),
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

/// How many prune notes a Comb remembers having announced: more than a step makes (each note
/// is one orphan), and few enough to be nothing next to the Comb itself. Also how many Events
/// the API did not take a Comb keeps for its next step.
const NOTES_KEPT: usize = 32;

/// One Event about a Comb: what it says, and whether it tells a prune note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    pub kind: EventType,
    pub reason: Reason,
    pub message: String,
    /// A prune note: once the API took it, it is told.
    pub note: bool,
}

impl Announcement {
    pub fn new(kind: EventType, reason: Reason, message: &str) -> Announcement {
        Announcement {
            kind,
            reason,
            message: message.to_string(),
            note: false,
        }
    }

    /// The Event a prune note becomes ([`note_event`]).
    pub fn of_note(note: &str) -> Announcement {
        let (kind, reason) = note_event(note);
        Announcement {
            note: true,
            ..Announcement::new(kind, reason, note)
        }
    }
}

/// What was announced about one Comb by this run: the last Event the API took, the prune notes
/// told, and the Events the API did not take (tried again by the Comb's next step). An Event
/// counts as said only once the API took it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Announced {
    last: Option<(Reason, String)>,
    notes: VecDeque<String>,
    unsent: VecDeque<Announcement>,
}

impl Announced {
    /// Whether `event` says something new: not what the last Event of the Comb said, and not
    /// waiting to be tried again already.
    pub fn is_news(&self, event: &Announcement) -> bool {
        self.last
            .as_ref()
            .is_none_or(|(reason, message)| *reason != event.reason || *message != event.message)
            && !self.unsent.contains(event)
    }

    /// The API took `event`: it is the last said, and a note it tells is told.
    pub fn accepted(&mut self, event: &Announcement) {
        self.last = Some((event.reason.clone(), event.message.clone()));
        if event.note {
            self.told(event.message.clone());
        }
    }

    /// The API did not take `event`: kept for the next step (the oldest goes when too many
    /// wait; it was logged when it failed).
    pub fn refused(&mut self, event: Announcement) {
        keep(&mut self.unsent, event);
    }

    /// The Events to try again, oldest first; they are no longer kept.
    pub fn take_unsent(&mut self) -> Vec<Announcement> {
        self.unsent.drain(..).collect()
    }

    fn told(&mut self, note: String) {
        keep(&mut self.notes, note);
    }

    /// The notes of a step that were not announced before, in order: each becomes an Event,
    /// and counts as told once the API took it ([`Announced::accepted`]). A note in
    /// `previous_message` (the Ready message recorded before the step) was announced when it
    /// came, by this run or the one before it, unless its Event waits to be tried again.
    pub fn new_notes(&mut self, notes: &[String], previous_message: Option<&str>) -> Vec<String> {
        let recorded = |note: &str| {
            previous_message.is_some_and(|message| message.split("; ").any(|part| part == note))
        };
        let mut fresh = Vec::new();
        for note in notes {
            let waiting = self
                .unsent
                .iter()
                .any(|event| event.note && event.message == *note);
            if self.notes.contains(note) || waiting || fresh.contains(note) {
                continue;
            }
            if recorded(note) {
                self.told(note.clone());
            } else {
                fresh.push(note.clone());
            }
        }
        fresh
    }
}

/// Adds `item` to `kept` unless it is there, letting the oldest go beyond [`NOTES_KEPT`].
fn keep<T: PartialEq>(kept: &mut VecDeque<T>, item: T) {
    if kept.contains(&item) {
        return;
    }
    if kept.len() == NOTES_KEPT {
        kept.pop_front();
    }
    kept.push_back(item);
}

/// The Event a prune note becomes: its type and reason. Something left in place is a
/// decision (`Normal`, `PruneSkipped`); a delete or a check that failed needs a look
/// (`Warning`, `PruneFailed`), and is tried again by the next step.
pub fn note_event(note: &str) -> (EventType, Reason) {
    if note.starts_with("left ") {
        (EventType::Normal, Reason::PruneSkipped)
    } else {
        (EventType::Warning, Reason::PruneFailed)
    }
}

/// Writes `event`; the error says what failed, for the caller to log.
pub async fn publish(client: kube::Client, event: &Event) -> crate::error::Result<()> {
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Event> = Api::namespaced(client, namespace);
    api.create(&PostParams::default(), event)
        .await
        .map(drop)
        .map_err(|error| {
            crate::error::Error::kube(
                format!(
                    "create Event {}",
                    event.reason.as_deref().unwrap_or_default()
                ),
                error,
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
            EventType::for_phase(&Phase::Running),
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
        assert_eq!(EventType::for_phase(&Phase::Blocked), EventType::Warning);
    }

    /// Announces `events` as the controller does: news only, counted as said when `taken`.
    fn announce(announced: &mut Announced, event: Announcement, taken: bool) -> bool {
        if !announced.is_news(&event) {
            return false;
        }
        if taken {
            announced.accepted(&event);
        } else {
            announced.refused(event);
        }
        true
    }

    #[test]
    fn the_same_event_is_not_said_twice_in_a_row() {
        let mut announced = Announced::default();
        let steps = [
            ("CleanupFailed", "deleted 0 object(s); failed: x", true),
            ("CleanupFailed", "deleted 0 object(s); failed: x", false),
            ("CleanupFailed", "deleted 0 object(s); failed: y", true),
            (
                "Healthy",
                "Pending (Deployed) -> Running (Healthy): healthy",
                true,
            ),
            (
                "Deployed",
                "Running (Healthy) -> Pending (Deployed): applied",
                true,
            ),
            // A real transition again, after another one: said again.
            (
                "Healthy",
                "Pending (Deployed) -> Running (Healthy): healthy",
                true,
            ),
            (
                "Healthy",
                "Pending (Deployed) -> Running (Healthy): healthy",
                false,
            ),
        ];
        for (reason, message, news) in steps {
            let event = Announcement::new(EventType::Normal, Reason::from(reason), message);
            assert_eq!(
                announce(&mut announced, event, true),
                news,
                "{reason}: {message}"
            );
        }
    }

    #[test]
    fn an_event_the_api_refused_is_tried_again_not_counted_as_said() {
        let mut announced = Announced::default();
        let healthy = Announcement::new(
            EventType::Normal,
            Reason::Healthy,
            "Pending (Deployed) -> Running (Healthy): healthy",
        );
        assert!(announce(&mut announced, healthy.clone(), false));
        // Waiting for the next step: not news again meanwhile, and not said yet.
        assert!(!announced.is_news(&healthy));
        assert_eq!(announced.last, None);
        // The next step tries it again; refused again, it waits again.
        let retried = announced.take_unsent();
        assert_eq!(retried, std::slice::from_ref(&healthy));
        assert!(announced.is_news(&healthy));
        announced.refused(healthy.clone());
        announced.refused(healthy.clone());
        assert_eq!(announced.unsent.len(), 1);
        // Taken at last: said, so not news any more.
        for event in announced.take_unsent() {
            announce(&mut announced, event, true);
        }
        assert!(!announced.is_news(&healthy));
        assert!(announced.take_unsent().is_empty());
        // What waits stays bounded.
        for i in 0..NOTES_KEPT + 3 {
            announced.refused(Announcement::new(
                EventType::Warning,
                Reason::from("X"),
                &format!("{i}"),
            ));
        }
        let waiting = announced.take_unsent();
        assert_eq!(waiting.len(), NOTES_KEPT);
        assert_eq!(waiting[0].message, "3");
    }

    #[test]
    fn each_note_is_announced_once() {
        let left =
            "left Service old alone: it no longer carries comb.internal/comb=web".to_string();
        let failed = "deleting Service stuck failed: 500 boom".to_string();
        let scoped =
            "left Namespace team in place: cluster-scoped, never pruned automatically".to_string();
        let mut announced = Announced::default();
        let fresh = announced.new_notes(&[left.clone(), failed.clone()], Some("healthy"));
        assert_eq!(fresh, [left.clone(), failed.clone()]);
        // The API took the first Event and not the second.
        announce(&mut announced, Announcement::of_note(&left), true);
        announce(&mut announced, Announcement::of_note(&failed), false);
        // The failed delete is noted again by the next step (and written into the Ready
        // message): its Event waits to be tried again, so it is not new.
        let previous = format!("healthy; {failed}");
        assert!(
            announced
                .new_notes(&[left.clone(), failed.clone()], Some(&previous))
                .is_empty()
        );
        let retried = announced.take_unsent();
        assert_eq!(retried, [Announcement::of_note(&failed)]);
        announce(&mut announced, retried[0].clone(), true);
        assert!(
            announced
                .new_notes(std::slice::from_ref(&failed), None)
                .is_empty()
        );
        // A note the record already carries was told by the run that recorded it.
        let mut restarted = Announced::default();
        let previous = format!("applied 2 resource(s); {scoped}");
        assert!(
            restarted
                .new_notes(std::slice::from_ref(&scoped), Some(&previous))
                .is_empty()
        );
        assert!(restarted.notes.contains(&scoped));
        // Memory stays bounded; the oldest notes go first.
        let many: Vec<String> = (0..NOTES_KEPT + 5)
            .map(|i| format!("left Pod p{i} alone"))
            .collect();
        let fresh = announced.new_notes(&many, None);
        assert_eq!(fresh.len(), NOTES_KEPT + 5);
        for note in &fresh {
            announce(&mut announced, Announcement::of_note(note), true);
        }
        assert_eq!(announced.notes.len(), NOTES_KEPT);
        assert_eq!(announced.new_notes(&many[..1], None).len(), 1);
    }

    #[test]
    fn notes_become_events_by_what_they_say() {
        let cases = [
            (
                "left Service x alone: it no longer carries comb.internal/comb=a",
                (EventType::Normal, Reason::PruneSkipped),
            ),
            (
                "left ClusterRole r in place: cluster-scoped, never pruned automatically",
                (EventType::Normal, Reason::PruneSkipped),
            ),
            (
                "deleting Service x failed: Kubernetes API error (delete Service): 500 boom",
                (EventType::Warning, Reason::PruneFailed),
            ),
            (
                "could not check Service x for pruning: 503",
                (EventType::Warning, Reason::PruneFailed),
            ),
        ];
        for (note, event) in cases {
            assert_eq!(note_event(note), event, "{note}");
        }
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
