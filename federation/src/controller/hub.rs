//! What a watch delivers to the loops that take it in ([`Delivery`]), paced after failures, and
//! watches shared between the controllers of one process ([`SharedWatches`]).
//!
//! Each layer on demand runs in a controller of its own (`on_demand.rs`). Were each to open its
//! own watches, 200 layers in namespaces of one cluster would open 200 times the watches of
//! one (12 on the layer's cluster, one or two on its source's). Instead every layer made from a
//! template watches through one watch per cluster, kind and scope: the first layer that asks
//! opens it, every later one joins it, and it ends when the last one leaves. A layer's own
//! Combs and managed objects are watched in every namespace of its cluster and each layer is
//! handed what is in its namespaces; the Combs of the file's layers it borrows from are
//! watched in their own scope, as their layer watches them.
//!
//! A layer that joins a watch already listed is handed what the watch holds as a list of its
//! own (`Init`, one `InitApply` per object in its namespace, `InitDone`), so the loops that
//! take a watch in cannot tell a shared watch from their own: the watch keeps the objects it
//! delivered for that. kube's reflector store would keep them too, but hands no joiner the
//! `Init`..`InitDone` frame its cache and its layer's "listed" count are built on, and its
//! delivery to many readers is a broadcast of every event to each of them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use comb_api::Comb;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::backoff::{BackoffPolicy, Retries};
use super::health::{Failure, classify};

/// One thing a watch delivered: an event, the failure of an attempt, or an object that does
/// not encode as JSON (a managed kind's; its maps have string keys, so it should not happen,
/// and when it does it is reported, never kept as `null`).
#[derive(Clone, Debug)]
pub enum Delivery<O> {
    Event(Event<O>),
    Failed(Failed),
    Unencodable(Unencodable),
}

/// A failed attempt of a watch, as the health of its layers takes it.
#[derive(Clone, Debug)]
pub struct Failed {
    pub failure: Failure,
    pub message: String,
}

impl Failed {
    pub fn of(error: &watcher::Error) -> Failed {
        Failed {
            failure: classify(error),
            message: error.to_string(),
        }
    }
}

/// An object a watch delivered that does not encode as JSON, by its name.
#[derive(Clone, Debug)]
pub struct Unencodable {
    pub namespace: String,
    pub name: String,
    pub error: String,
}

/// A watch's deliveries.
pub type Deliveries<O> = BoxStream<'static, Delivery<O>>;

/// `deliveries` with a wait after each failure before the watch is asked again (kube's
/// watcher tries again when it is next polled): the next delay of `backoff` after a failure in
/// a row, the longest after a refusal (RBAC may be granted later: look seldom), none after an
/// expiry (it lists again at once). Whatever the server sends but `Init` starts the delays
/// over. A watch that is not served ends after saying so when `end_when_not_served`.
pub fn paced<O: Send + 'static>(
    deliveries: Deliveries<O>,
    backoff: BackoffPolicy,
    end_when_not_served: bool,
) -> Deliveries<O> {
    struct Pacing<O> {
        deliveries: Deliveries<O>,
        retries: Retries,
        wait: Option<Duration>,
        ended: bool,
    }
    let start = Pacing {
        deliveries,
        retries: Retries::new(backoff),
        wait: None,
        ended: false,
    };
    futures::stream::unfold(start, move |mut pacing| async move {
        if pacing.ended {
            return None;
        }
        if let Some(delay) = pacing.wait.take() {
            tokio::time::sleep(delay).await;
        }
        let delivery = pacing.deliveries.next().await?;
        match &delivery {
            Delivery::Failed(failed) => match failed.failure {
                Failure::Expired => {}
                Failure::NotServed if end_when_not_served => pacing.ended = true,
                Failure::Forbidden => pacing.wait = Some(backoff.max),
                _ => pacing.wait = Some(pacing.retries.next_delay()),
            },
            Delivery::Event(Event::Init) => {}
            _ => pacing.retries.reset(),
        }
        Some((delivery, pacing))
    })
    .boxed()
}

/// The deliveries of kube's watcher `events`, each object mapped by `encode`.
pub fn deliveries<K, O>(
    events: impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
    encode: impl Fn(K) -> Result<O, Unencodable> + Send + Sync + 'static,
) -> Deliveries<O>
where
    K: Send + 'static,
    O: Send + 'static,
{
    events
        .map(move |item| match item {
            Err(error) => Delivery::Failed(Failed::of(&error)),
            Ok(event) => match try_map_event(event, &encode) {
                Ok(event) => Delivery::Event(event),
                Err(unencodable) => Delivery::Unencodable(unencodable),
            },
        })
        .boxed()
}

fn try_map_event<K, T, E>(
    event: Event<K>,
    f: impl FnOnce(K) -> Result<T, E>,
) -> Result<Event<T>, E> {
    Ok(match event {
        Event::Apply(object) => Event::Apply(f(object)?),
        Event::Delete(object) => Event::Delete(f(object)?),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(f(object)?),
        Event::InitDone => Event::InitDone,
    })
}

/// Where an object a shared watch delivers lives: its namespace and name.
pub trait Placed {
    fn place(&self) -> (String, String);
}

/// What a shared watch delivers: placed, cloned for each subscriber it concerns, kept as JSON.
pub trait Watched:
    Placed + Clone + serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static
{
}

impl<O> Watched for O where
    O: Placed + Clone + serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static
{
}

impl Placed for Comb {
    fn place(&self) -> (String, String) {
        (self.namespace().unwrap_or_default(), self.name_any())
    }
}

impl Placed for Value {
    fn place(&self) -> (String, String) {
        let text = |pointer| {
            self.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        (text("/metadata/namespace"), text("/metadata/name"))
    }
}

/// Which shared watch: a cluster (as [`SharedWatches::cluster`] names it), a kind (its
/// `apiVersion` and kind) and a scope (a namespace, or `None` for all).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HubKey {
    cluster: String,
    kind: String,
    scope: Option<String>,
}

/// One shared watch: what it delivered and who takes it.
struct Hub<O> {
    state: Mutex<HubState<O>>,
    /// Ends the watch: the last subscriber left.
    stop: CancellationToken,
}

struct HubState<O> {
    /// What the watch holds, once it listed.
    held: Option<BTreeMap<(String, String), Kept>>,
    /// While it lists: what the list brought so far.
    listing: Option<BTreeMap<(String, String), Kept>>,
    subscribers: BTreeMap<u64, Subscriber<O>>,
    next_id: u64,
}

struct Subscriber<O> {
    /// The namespace it is handed (`None`: every one).
    namespace: Option<String>,
    sender: mpsc::UnboundedSender<Delivery<O>>,
}

impl<O> Subscriber<O> {
    fn takes(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|own| own == namespace)
    }
}

/// What a shared watch keeps of an object for the subscribers that join later: its JSON text,
/// a fraction of what the decoded object takes (serde_json's maps and strings), decoded again
/// only for a joiner.
type Kept = Box<str>;

impl<O: Watched> HubState<O> {
    /// Hands `delivery` to those it concerns, and keeps what it says. A subscriber whose
    /// receiver is gone is left for its guard to remove.
    fn deliver(&mut self, delivery: Delivery<O>) {
        // Keeps `object` in `objects` (when there are), and says its namespace.
        fn keep<O: Watched>(
            objects: Option<&mut BTreeMap<(String, String), Kept>>,
            object: &O,
        ) -> Option<String> {
            let place = object.place();
            let namespace = place.0.clone();
            if let Some(objects) = objects {
                match serde_json::to_string(object) {
                    Ok(text) => {
                        objects.insert(place, text.into_boxed_str());
                    }
                    // A JSON value or a decoded Comb always encodes; were one not to, a later
                    // subscriber would miss it, so it is said.
                    Err(error) => warn!(
                        namespace = %place.0, name = %place.1, %error,
                        "a watched object does not encode: subscribers that join later miss it"
                    ),
                }
            }
            Some(namespace)
        }
        let namespace = match &delivery {
            Delivery::Event(Event::Init) => {
                self.listing = Some(BTreeMap::new());
                None
            }
            Delivery::Event(Event::InitApply(object)) => keep(self.listing.as_mut(), object),
            Delivery::Event(Event::InitDone) => {
                self.held = Some(self.listing.take().unwrap_or_default());
                None
            }
            Delivery::Event(Event::Apply(object)) => keep(self.held.as_mut(), object),
            Delivery::Event(Event::Delete(object)) => {
                let place = object.place();
                let namespace = place.0.clone();
                if let Some(held) = self.held.as_mut() {
                    held.remove(&place);
                }
                Some(namespace)
            }
            Delivery::Unencodable(object) => Some(object.namespace.clone()),
            Delivery::Failed(_) => None,
        };
        for subscriber in self.subscribers.values() {
            if namespace
                .as_deref()
                .is_none_or(|namespace| subscriber.takes(namespace))
            {
                let _ = subscriber.sender.send(delivery.clone());
            }
        }
    }

    /// Adds a subscriber, handed at once what the watch holds in its namespace as a list of
    /// its own (the part listed so far while the watch lists; nothing before it started).
    fn subscribe(&mut self, subscriber: Subscriber<O>) -> u64 {
        let (objects, done) = match (&self.listing, &self.held) {
            (Some(listing), _) => (Some(listing), false),
            (None, Some(held)) => (Some(held), true),
            (None, None) => (None, false),
        };
        if let Some(objects) = objects {
            let mut frame = vec![Event::Init];
            frame.extend(
                objects
                    .iter()
                    .filter(|((namespace, _), _)| subscriber.takes(namespace))
                    .filter_map(|(_, kept)| serde_json::from_str(kept).ok())
                    .map(Event::InitApply),
            );
            if done {
                frame.push(Event::InitDone);
            }
            for event in frame {
                let _ = subscriber.sender.send(Delivery::Event(event));
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.subscribers.insert(id, subscriber);
        id
    }
}

/// The shared watches of one object type, by key.
struct Hubs<O> {
    hubs: Mutex<HashMap<HubKey, Arc<Hub<O>>>>,
}

impl<O> Default for Hubs<O> {
    fn default() -> Self {
        Hubs {
            hubs: Mutex::new(HashMap::new()),
        }
    }
}

impl<O: Watched> Hubs<O> {
    /// Joins the watch of `key` (opened with `open` if none is), handed what is in `namespace`.
    fn subscribe(
        self: &Arc<Self>,
        key: HubKey,
        namespace: Option<String>,
        open: impl FnOnce() -> Deliveries<O>,
    ) -> Deliveries<O> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut hubs = self.hubs.lock();
        let hub = hubs
            .entry(key.clone())
            .or_insert_with(|| {
                let hub = Arc::new(Hub {
                    state: Mutex::new(HubState {
                        held: None,
                        listing: None,
                        subscribers: BTreeMap::new(),
                        next_id: 0,
                    }),
                    stop: CancellationToken::new(),
                });
                tokio::spawn(run_hub(self.clone(), key.clone(), hub.clone(), open()));
                hub
            })
            .clone();
        let id = hub.state.lock().subscribe(Subscriber { namespace, sender });
        drop(hubs);
        let left = Leaving {
            hubs: self.clone(),
            key,
            hub,
            id,
        };
        let mut receiver = receiver;
        futures::stream::poll_fn(move |context| {
            let _given_back_when_the_stream_is_dropped = &left;
            receiver.poll_recv(context)
        })
        .boxed()
    }

    /// The watch of `key` ended: a later subscriber opens another.
    fn ended(&self, key: &HubKey, hub: &Arc<Hub<O>>) {
        let mut hubs = self.hubs.lock();
        if hubs.get(key).is_some_and(|held| Arc::ptr_eq(held, hub)) {
            hubs.remove(key);
        }
    }

    fn open(&self) -> usize {
        self.hubs.lock().len()
    }
}

/// Takes the watch in until it ends (not served) or its last subscriber leaves; then its
/// subscribers' streams end with it.
async fn run_hub<O: Watched>(
    hubs: Arc<Hubs<O>>,
    key: HubKey,
    hub: Arc<Hub<O>>,
    deliveries: Deliveries<O>,
) {
    let deliveries = deliveries.take_until(hub.stop.clone().cancelled_owned());
    futures::pin_mut!(deliveries);
    while let Some(delivery) = deliveries.next().await {
        hub.state.lock().deliver(delivery);
    }
    hubs.ended(&key, &hub);
    hub.state.lock().subscribers.clear();
}

/// A subscriber's place in a shared watch, given back when its stream is dropped: the watch
/// ends with its last subscriber.
struct Leaving<O> {
    hubs: Arc<Hubs<O>>,
    key: HubKey,
    hub: Arc<Hub<O>>,
    id: u64,
}

impl<O> Drop for Leaving<O> {
    fn drop(&mut self) {
        let mut hubs = self.hubs.hubs.lock();
        let mut state = self.hub.state.lock();
        state.subscribers.remove(&self.id);
        if state.subscribers.is_empty() {
            self.hub.stop.cancel();
            if hubs
                .get(&self.key)
                .is_some_and(|held| Arc::ptr_eq(held, &self.hub))
            {
                hubs.remove(&self.key);
            }
        }
    }
}

/// Watches shared by the controllers of one process: the layers on demand's. Cloning shares
/// them.
#[derive(Clone, Default)]
pub struct SharedWatches {
    combs: Arc<Hubs<Comb>>,
    objects: Arc<Hubs<Value>>,
    /// Contexts whose cluster is named otherwise than by the context's name: the context a
    /// kubeconfig Secret makes, named with the Secret's version (a rotated Secret is another
    /// client, so another watch).
    clusters: BTreeMap<String, String>,
}

impl fmt::Debug for SharedWatches {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SharedWatches")
            .field("open", &self.open())
            .field("clusters", &self.clusters)
            .finish()
    }
}

impl SharedWatches {
    /// The same watches, with context `context`'s cluster named `cluster`.
    pub fn with_cluster(&self, context: &str, cluster: String) -> SharedWatches {
        let mut shared = self.clone();
        shared.clusters.insert(context.to_string(), cluster);
        shared
    }

    /// How many watches are open.
    pub fn open(&self) -> usize {
        self.combs.open() + self.objects.open()
    }

    fn key(&self, context: &str, kind: String, scope: Option<String>) -> HubKey {
        HubKey {
            cluster: self
                .clusters
                .get(context)
                .cloned()
                .unwrap_or_else(|| context.to_string()),
            kind,
            scope,
        }
    }

    /// The Comb watch of `scope` in context `context`'s cluster, handed what is in
    /// `namespace`; `open` opens it when no one has.
    pub fn combs(
        &self,
        context: &str,
        scope: Option<String>,
        namespace: Option<String>,
        open: impl FnOnce() -> Deliveries<Comb>,
    ) -> Deliveries<Comb> {
        let key = self.key(context, comb_api::KIND.to_string(), scope);
        self.combs.subscribe(key, namespace, open)
    }

    /// The watch of managed kind `kind` (`apiVersion/kind`) of `scope` in context `context`'s
    /// cluster, handed what is in `namespace`; `open` opens it when no one has.
    pub fn objects(
        &self,
        context: &str,
        kind: String,
        scope: Option<String>,
        namespace: Option<String>,
        open: impl FnOnce() -> Deliveries<Value>,
    ) -> Deliveries<Value> {
        let key = self.key(context, kind, scope);
        self.objects.subscribe(key, namespace, open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(namespace: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": namespace, "name": name}})
    }

    fn names(deliveries: &[Delivery<Value>]) -> Vec<String> {
        deliveries
            .iter()
            .map(|delivery| match delivery {
                Delivery::Event(Event::Init) => "Init".to_string(),
                Delivery::Event(Event::InitDone) => "InitDone".to_string(),
                Delivery::Event(Event::InitApply(object)) => {
                    format!("InitApply {:?}", object.place())
                }
                Delivery::Event(Event::Apply(object)) => format!("Apply {:?}", object.place()),
                Delivery::Event(Event::Delete(object)) => format!("Delete {:?}", object.place()),
                Delivery::Failed(failed) => format!("Failed {:?}", failed.failure),
                Delivery::Unencodable(object) => format!("Unencodable {}", object.name),
            })
            .collect()
    }

    fn drain(receiver: &mut mpsc::UnboundedReceiver<Delivery<Value>>) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(delivery) = receiver.try_recv() {
            seen.push(delivery);
        }
        names(&seen)
    }

    fn subscriber(
        namespace: Option<&str>,
    ) -> (Subscriber<Value>, mpsc::UnboundedReceiver<Delivery<Value>>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let subscriber = Subscriber {
            namespace: namespace.map(str::to_string),
            sender,
        };
        (subscriber, receiver)
    }

    fn state() -> HubState<Value> {
        HubState {
            held: None,
            listing: None,
            subscribers: BTreeMap::new(),
            next_id: 0,
        }
    }

    /// Each subscriber is handed what is in its namespace, and one that joins late (while the
    /// watch lists, or after) a list of its own of what the watch holds there.
    #[test]
    fn a_shared_watch_hands_each_subscriber_its_namespace_as_a_list_of_its_own() {
        let mut hub = state();
        let (alice, mut to_alice) = subscriber(Some("dev-alice"));
        hub.subscribe(alice);
        hub.deliver(Delivery::Event(Event::Init));
        hub.deliver(Delivery::Event(Event::InitApply(object(
            "dev-alice",
            "api",
        ))));
        hub.deliver(Delivery::Event(Event::InitApply(object("dev-bob", "api"))));
        let (bob, mut to_bob) = subscriber(Some("dev-bob"));
        hub.subscribe(bob);
        hub.deliver(Delivery::Event(Event::InitApply(object("dev-bob", "db"))));
        hub.deliver(Delivery::Event(Event::InitDone));
        hub.deliver(Delivery::Event(Event::Apply(object("dev-alice", "db"))));
        hub.deliver(Delivery::Event(Event::Delete(object("dev-bob", "api"))));
        let (carol, mut to_carol) = subscriber(Some("dev-bob"));
        hub.subscribe(carol);
        let (all, mut to_all) = subscriber(None);
        hub.subscribe(all);
        hub.deliver(Delivery::Failed(Failed {
            failure: Failure::Unavailable,
            message: "gone".into(),
        }));
        let cases = [
            (
                "alice, from the start",
                drain(&mut to_alice),
                vec![
                    "Init",
                    r#"InitApply ("dev-alice", "api")"#,
                    "InitDone",
                    r#"Apply ("dev-alice", "db")"#,
                    "Failed Unavailable",
                ],
            ),
            (
                "bob, while it listed",
                drain(&mut to_bob),
                vec![
                    "Init",
                    r#"InitApply ("dev-bob", "api")"#,
                    r#"InitApply ("dev-bob", "db")"#,
                    "InitDone",
                    r#"Delete ("dev-bob", "api")"#,
                    "Failed Unavailable",
                ],
            ),
            (
                "carol, after it listed",
                drain(&mut to_carol),
                vec![
                    "Init",
                    r#"InitApply ("dev-bob", "db")"#,
                    "InitDone",
                    "Failed Unavailable",
                ],
            ),
            (
                "every namespace, after it listed",
                drain(&mut to_all),
                vec![
                    "Init",
                    r#"InitApply ("dev-alice", "api")"#,
                    r#"InitApply ("dev-alice", "db")"#,
                    r#"InitApply ("dev-bob", "db")"#,
                    "InitDone",
                    "Failed Unavailable",
                ],
            ),
        ];
        for (who, seen, expected) in cases {
            assert_eq!(seen, expected, "{who}");
        }
    }

    /// A watch is opened by the first subscriber, joined by the others of its key, and ended
    /// by the last that leaves; another key is another watch.
    #[tokio::test]
    async fn a_shared_watch_is_opened_once_per_key_and_ends_with_its_last_subscriber() {
        let watches = SharedWatches::default();
        let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let open = || {
            opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            futures::stream::pending().boxed()
        };
        let kind = || "v1/Service".to_string();
        let alice = watches.objects("dev", kind(), None, Some("dev-alice".into()), open);
        let bob = watches.objects("dev", kind(), None, Some("dev-bob".into()), open);
        let rotated = watches.with_cluster("dev", "dev@2".into());
        let other = rotated.objects("dev", kind(), None, Some("dev-carol".into()), open);
        assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(watches.open(), 2);
        drop(alice);
        assert_eq!(watches.open(), 2, "bob still takes it");
        drop(bob);
        drop(other);
        assert_eq!(watches.open(), 0);
        let again = watches.objects("dev", kind(), None, None, open);
        assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), 3);
        drop(again);
    }
    fn failed(failure: Failure) -> Delivery<Value> {
        Delivery::Failed(Failed {
            failure,
            message: format!("{failure:?}"),
        })
    }

    /// The wait before the watch is asked again after each delivery: the backoff's next delay
    /// after a failure in a row, none after an expiry, the longest after a refusal, and the
    /// delays start over once the server sends something; a kind not served ends the watch.
    #[tokio::test(start_paused = true)]
    async fn a_watch_waits_after_failures_as_the_backoff_says() {
        let backoff = BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let sent = vec![
            Delivery::Event(Event::Init),
            failed(Failure::Unavailable),
            failed(Failure::Unavailable),
            Delivery::Event(Event::Init),
            failed(Failure::Unavailable),
            Delivery::Event(Event::Apply(object("a", "b"))),
            failed(Failure::Unavailable),
            failed(Failure::Expired),
            failed(Failure::Forbidden),
            failed(Failure::NotServed),
            Delivery::Event(Event::InitDone),
        ];
        let mut paced_deliveries = paced(futures::stream::iter(sent).boxed(), backoff, true);
        let mut seen = Vec::new();
        let mut last = tokio::time::Instant::now();
        while let Some(delivery) = paced_deliveries.next().await {
            let now = tokio::time::Instant::now();
            seen.push((names(&[delivery]).remove(0), (now - last).as_millis()));
            last = now;
        }
        let millis = |from: u128, to: u128| from..=to;
        // What came, and the wait before it: the upper half of 100, 200, 400 ms for failures
        // in a row (`Init` is not an answer), none after what the server sent.
        let expected = [
            ("Init", millis(0, 0)),
            ("Failed Unavailable", millis(0, 0)),
            ("Failed Unavailable", millis(50, 101)),
            ("Init", millis(100, 201)),
            ("Failed Unavailable", millis(0, 0)),
            (r#"Apply ("a", "b")"#, millis(200, 401)),
            ("Failed Unavailable", millis(0, 0)),
            ("Failed Expired", millis(50, 101)),
            ("Failed Forbidden", millis(0, 0)),
            ("Failed NotServed", millis(1000, 1000)),
        ];
        assert_eq!(seen.len(), expected.len(), "{seen:?}");
        for ((name, waited), (expected_name, bounds)) in seen.iter().zip(expected) {
            assert_eq!(name, expected_name, "{seen:?}");
            assert!(
                bounds.contains(waited),
                "{name} after {waited} ms: {seen:?}"
            );
        }
    }
}
