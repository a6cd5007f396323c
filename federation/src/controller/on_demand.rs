//! Layers on demand (docs/adr/0005-layers-on-demand.md): the CombLayers of the `layerContext`
//! cluster, each admitted by its template ([`layer_from_template`]) and run as a layer beside
//! those of the file, added, changed and removed while the controller runs.
//!
//! Each admitted layer runs in a controller of its own that steps that layer only
//! (`ControllerOptions::steps_only`) and watches the Combs of the layers it borrows from: adding,
//! changing or removing it starts or stops that controller alone, so the file's layers are
//! never relisted nor stepped for it. comb creates the layer's namespaces (when its template
//! says so) and a Comb for each Comb of the layer it borrows from that its `borrow.combs` or
//! `borrow.local` names, and records each one's uid in the CombLayer's
//! `status.managedResources`. When the layer expires or its CombLayer is deleted, exactly
//! those go: the Combs first (their finalizers, served by the layer's controller, remove their
//! bridges, copies and objects by their own records), then the namespaces, each delete
//! conditional on the recorded uid; an Event on the CombLayer says what was removed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use comb_api::{
    Comb, CombCondition, CombCounts, CombLayer, CombLayerStatus, CombSpec, ConditionStatus,
    EXPIRED, LAYER_KIND, LayerPhase, ManagedObject, Phase, READY, Reason, SecretRef, VERSION,
    layer_api_resource,
};
use comb_kubeconfigs::ClientPool;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, Namespace, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::gate::LayerGate;
use super::layer::Origin;
use super::once::CombOutcome;
use super::run::Controller;
use super::{ControllerHandle, ControllerOptions, RunOutcome};
use crate::config::{Admitted, Config, Layer, layer_from_template, matches_any};
use crate::engine::class::ClassRegistry;
use crate::engine::keys::CombKey;
use crate::error::{Error, Result};

/// The finalizer comb puts on a CombLayer: its removal waits until what comb made for it went.
fn finalizer(group: &str) -> String {
    format!("{group}/layer-cleanup")
}

/// How often the CombLayers held are looked at (their expiry, their Combs' phases). A look at
/// a settled layer sends nothing.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The CombLayers of a federation, run as layers. Build it beside the [`Controller`] of the
/// file's layers and [`run`](LayersOnDemand::run) it.
pub struct LayersOnDemand {
    config: Arc<Config>,
    pool: ClientPool,
    registry: ClassRegistry,
    options: ControllerOptions,
    /// The controller of the file's layers: layers on demand run only while it reconciles
    /// (with leader election, while it holds the Lease).
    leader: Option<ControllerHandle>,
    /// Sharded: which CombLayers this replica may run (the coordinator holds their Leases).
    gate: Option<LayerGate>,
}

/// A layer admitted and running.
struct Running {
    uid: String,
    /// When the layer goes, as admitted.
    expires_at: Timestamp,
    /// The resourceVersion of the kubeconfig Secret the layer's clients were built from.
    secret_version: Option<String>,
    /// The clients of the layer's controller: the controller's, and the layer's cluster's
    /// when a Secret holds its kubeconfig.
    pool: ClientPool,
    generation: Option<i64>,
    layer: Layer,
    handle: ControllerHandle,
    /// What the source layer's and the layer's Combs were (their uids and generations) when
    /// [`LayersOnDemand::follow`] last found nothing to do.
    followed: Option<Followed>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<RunOutcome>>,
}

/// What the looks keep between them.
#[derive(Default)]
struct State {
    running: BTreeMap<String, Running>,
    /// CombLayers whose cluster refused them, by name: not asked again before `at`, unless
    /// the CombLayer changes.
    retries: BTreeMap<String, Retry>,
    /// The resourceVersion of each kubeconfig Secret a template lists, as its watch shows it:
    /// a layer built from an older one is built again (a rotated credential).
    secrets: BTreeMap<String, String>,
    /// While a layer is removed: what each of its Combs recorded making, by Comb, read before
    /// it is deleted, for the Event that says what went.
    made_by_combs: BTreeMap<String, BTreeMap<String, Vec<ManagedObject>>>,
}

/// When a CombLayer whose cluster refused it is asked again.
struct Retry {
    uid: String,
    generation: Option<i64>,
    /// The kubeconfig Secret's resourceVersion then: a rotated Secret is tried at once.
    secret_version: Option<String>,
    at: tokio::time::Instant,
    delay: Duration,
}

/// The first wait after a refused credential, and the longest.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

impl LayersOnDemand {
    /// Layers on demand of `config` (its `layerTemplates` and `layerContext`), with the clients
    /// of `pool` and the classes of `registry`; `options` is how each layer's controller runs
    /// (its servers, leader election and sharding are the file's controller's, never repeated).
    pub fn new(
        config: Config,
        pool: ClientPool,
        registry: ClassRegistry,
        options: ControllerOptions,
    ) -> LayersOnDemand {
        LayersOnDemand {
            config: Arc::new(config),
            pool,
            registry,
            options: ControllerOptions {
                admin_address: None,
                leader_election: None,
                sharding: None,
                once: None,
                webhook: None,
                shared_watches: Some(options.shared_watches.clone().unwrap_or_default()),
                layer_gate: None,
                fence: None,
                ..options
            },
            leader: None,
            gate: options.layer_gate.clone(),
        }
    }

    /// Runs the layers only while `controller` reconciles: with leader election, in the replica
    /// holding the Lease alone. When it stops, the layers' controllers stop (what they made
    /// stays) until it reconciles again.
    pub fn while_reconciling(mut self, controller: ControllerHandle) -> LayersOnDemand {
        self.leader = Some(controller);
        self
    }

    /// Watches the CombLayers until `shutdown`, adding, changing and removing their layers.
    /// The layers still running when it ends stop with it; what they made stays (it is removed
    /// when they expire or their CombLayer is deleted, by whichever run sees it).
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let context = self
            .config
            .layer_context()
            .ok_or_else(|| Error::Config("no layers, so no layerContext".to_string()))?
            .to_string();
        let client = self
            .pool
            .client(&context)
            .await
            .map_err(|source| Error::Kubeconfig {
                what: format!("the CombLayers of layerContext {context}"),
                source,
            })?;
        let api: Api<CombLayer> =
            Api::all_with(client.clone(), &layer_api_resource(&self.config.group));
        let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
        let mut secrets = self.secret_watches(&client);
        let mut held = Held::default();
        let mut state = State::default();
        let mut tick = tokio::time::interval(LOOK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        info!(context = %context, "layers on demand: watching CombLayers");
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                event = events.next() => match event {
                    Some(Ok(event)) => held.take(event),
                    Some(Err(error)) => {
                        warn!(%error, "the CombLayer watch failed; it starts again");
                        tokio::time::sleep(LOOK_EVERY).await;
                    }
                    None => break,
                },
                Some((secret, event)) = secrets.next() => match event {
                    Ok(watcher::Event::Apply(seen) | watcher::Event::InitApply(seen)) => {
                        if let Some(version) = seen.metadata.resource_version {
                            state.secrets.insert(secret, version);
                        }
                    }
                    Ok(watcher::Event::Delete(_)) => {
                        state.secrets.remove(&secret);
                    }
                    Ok(_) => {}
                    Err(error) => {
                        warn!(secret = %secret, %error, "the watch of a kubeconfig Secret failed; it starts again");
                    }
                },
                _ = tick.tick() => {
                    self.tick(&api, &client, &held, &mut state).await;
                    if let Some(gate) = &self.gate {
                        gate.set_running(state.running.keys().cloned().collect());
                    }
                }
            }
        }
        for (_, run) in std::mem::take(&mut state.running) {
            stop(run).await;
        }
        if let Some(gate) = &self.gate {
            gate.set_running(BTreeSet::new());
        }
        Ok(())
    }

    /// One look at every CombLayer held: the layers of those gone, of those not granted here
    /// (sharded) and all of them while the controller does not reconcile are stopped; the others
    /// are looked at.
    async fn tick(&self, api: &Api<CombLayer>, client: &Client, held: &Held, state: &mut State) {
        if self
            .leader
            .as_ref()
            .is_some_and(|leader| !leader.is_reconciling())
        {
            for (_, run) in std::mem::take(&mut state.running) {
                stop(run).await;
            }
            return;
        }
        if let Some(gate) = &self.gate {
            gate.want(
                held.layers
                    .keys()
                    .filter(|name| self.config.layer(name).is_none())
                    .cloned()
                    .collect(),
            );
        }
        let here = |name: &str| {
            held.layers.contains_key(name)
                && self
                    .gate
                    .as_ref()
                    .is_none_or(|gate| gate.granted(name).is_some())
        };
        let gone: Vec<String> = state
            .running
            .keys()
            .filter(|name| !here(name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(run) = state.running.remove(&name) {
                stop(run).await;
            }
        }
        state
            .retries
            .retain(|name, _| held.layers.contains_key(name));
        // Sharded, what the look writes (the record, the layer's Combs, its namespaces) waits
        // while the Lease's renewal is late, as the layer's steps do: past the soft deadline
        // another replica may soon hold it.
        // A CombLayer named like a layer of the file has no Lease of its own (the name is the
        // layer's): every replica looks at it, and the look only refuses it (`NameTaken`),
        // each writing the same status.
        let may_write = |name: &str| {
            self.config.layer(name).is_some()
                || self.gate.as_ref().is_none_or(|gate| {
                    gate.granted(name).is_some_and(|fence| {
                        fence
                            .borrow()
                            .is_none_or(|(soft, _)| tokio::time::Instant::now() < soft)
                    })
                })
        };
        for cr in held.layers.values().filter(|cr| may_write(cr.name())) {
            if let Err(error) = self.look(api, client, cr, state).await {
                warn!(layer = cr.name(), %error, "looking at the CombLayer failed; the next look tries again");
            }
        }
    }

    /// A watch of each kubeconfig Secret the templates list (by name: nothing else is read),
    /// each event with the Secret's `NAMESPACE/NAME`.
    fn secret_watches(
        &self,
        client: &Client,
    ) -> futures::stream::SelectAll<
        futures::stream::BoxStream<'static, (String, watcher::Result<watcher::Event<Secret>>)>,
    > {
        let listed: BTreeSet<crate::config::SecretName> = self
            .config
            .layer_templates
            .iter()
            .flat_map(|template| template.kubeconfig_secrets.iter().cloned())
            .collect();
        futures::stream::select_all(listed.into_iter().map(|secret| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
            let config =
                watcher::Config::default().fields(&format!("metadata.name={}", secret.name));
            let named = secret.to_string();
            watcher::watcher(api, config)
                .map(move |event| (named.clone(), event))
                .boxed()
        }))
    }

    /// One look at CombLayer `cr`: remove its layer when it expired or is deleted, else admit
    /// it (again, when its spec changed) and record how its Combs stand.
    async fn look(
        &self,
        api: &Api<CombLayer>,
        client: &Client,
        cr: &CombLayer,
        state: &mut State,
    ) -> Result<()> {
        let running = &mut state.running;
        let name = cr.name().to_string();
        let now = Timestamp::now();
        let created = cr
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |time| time.0);
        let status = cr.status.clone().unwrap_or_default();
        if cr.metadata.deletion_timestamp.is_some() {
            return self.remove(api, client, cr, state).await;
        }
        let uid = cr.metadata.uid.clone().unwrap_or_default();
        let secret_version = cr
            .spec
            .kubeconfig_secret
            .as_ref()
            .and_then(|secret| state.secrets.get(&secret.to_string()));
        let current = running.get(&name).is_some_and(|run| {
            run.uid == uid
                && run.generation == cr.metadata.generation
                && (secret_version.is_none() || run.secret_version.as_ref() == secret_version)
        });
        if current {
            // Admitted for this spec: only its expiry and its Combs' phases are looked at,
            // which costs no request while nothing changes.
            if running.get(&name).is_some_and(|run| run.expires_at <= now) {
                return self.remove(api, client, cr, state).await;
            }
            let Some(run) = state.running.get_mut(&name) else {
                return Ok(());
            };
            if self.follow(api, cr, run).await? {
                // The counts wait for the next look, on the copy with this record.
                return Ok(());
            }
            return record_progress(api, cr, &status, run, now).await;
        }
        let others = self.with_others(running, &name);
        let admission = layer_from_template(&others, &name, &cr.spec, created, now);
        let expires_at = match &admission {
            Ok(admitted) => Some(admitted.expires_at),
            Err(_) => status.expires_at.as_ref().map(|at| at.0),
        };
        if expires_at.is_some_and(|at| at <= now) {
            // Removed once; `comb layer extend` gives it a new expiry, and a new life.
            if status.phase == Some(LayerPhase::Expired) {
                return Ok(());
            }
            return self.remove(api, client, cr, state).await;
        }
        let admitted = match admission {
            Ok(admitted) => admitted,
            Err(refusal) => {
                if let Some(run) = running.remove(&name) {
                    stop(run).await;
                }
                let mut next = status.clone();
                next.phase = Some(LayerPhase::Error);
                set_condition(
                    &mut next,
                    READY,
                    false,
                    refusal.reason.as_str(),
                    &refusal.message,
                    now,
                );
                next.observed_generation = cr.metadata.generation;
                return write_status(api, cr, &status, next, true).await;
            }
        };
        if let Some(retry) = state.retries.get(&name)
            && retry.uid == uid
            && retry.generation == cr.metadata.generation
            && retry.secret_version.as_ref() == secret_version
            && tokio::time::Instant::now() < retry.at
        {
            return Ok(());
        }
        if let Some(run) = running.remove(&name) {
            stop(run).await;
        }
        let mut next = status.clone();
        let checked = match self.layer_pool(client, &admitted).await {
            Ok(built) => self.credentials(&built.0, &admitted).await.map(|()| built),
            Err(refused) => Err(refused),
        };
        let (pool, secret_version) = match checked {
            Ok(built) => {
                state.retries.remove(&name);
                built
            }
            Err(refused) => {
                // Asked again after a backoff, or at once when the CombLayer changes.
                let delay = state
                    .retries
                    .get(&name)
                    .filter(|retry| retry.uid == uid && retry.generation == cr.metadata.generation)
                    .map_or(RETRY_FIRST, |retry| (retry.delay * 2).min(RETRY_MAX));
                state.retries.insert(
                    name.clone(),
                    Retry {
                        uid: uid.clone(),
                        generation: cr.metadata.generation,
                        secret_version: secret_version.cloned(),
                        at: tokio::time::Instant::now() + delay,
                        delay,
                    },
                );
                next.phase = Some(LayerPhase::Error);
                let message = refused.to_string();
                set_condition(&mut next, READY, false, "CredentialsInvalid", &message, now);
                next.observed_generation = cr.metadata.generation;
                return write_status(api, cr, &status, next, true).await;
            }
        };
        {
            // The record is written on the copy the server holds now: what is made below is
            // the layer's only once it is recorded, so this write is not conditional.
            let fresh = self.add_finalizer(api, cr).await?;
            let status = fresh.status.clone().unwrap_or_default();
            let mut next = status.clone();
            let mut written = status.clone();
            let notes = self
                .make(api, &fresh, &pool, &admitted, &mut next, &mut written)
                .await?;
            next.expires_at = Some(Time(admitted.expires_at));
            next.observed_generation = cr.metadata.generation;
            if next.phase != Some(LayerPhase::Ready) {
                next.phase = Some(LayerPhase::Pending);
            }
            set_condition(&mut next, EXPIRED, false, "Admitted", "", now);
            let mut message = format!(
                "added as a layer of template {}, until {}",
                cr.spec.template, admitted.expires_at
            );
            for note in &notes {
                message.push_str("; ");
                message.push_str(note);
            }
            set_condition(&mut next, READY, false, "Admitted", &message, now);
            write_status(api, &fresh, &written, next, false).await?;
            let run = self
                .start(
                    pool,
                    cr,
                    &uid,
                    admitted.layer.clone(),
                    admitted.expires_at,
                    secret_version,
                )
                .await?;
            info!(layer = %name, context = %admitted.layer.context, "layer on demand added");
            running.insert(name.clone(), run);
            Ok(())
        }
    }

    /// The configuration with the layers on demand running now (but `name`'s), so that a
    /// CombLayer cannot take a namespace another one manages.
    fn with_others(&self, running: &BTreeMap<String, Running>, name: &str) -> Config {
        let mut config = (*self.config).clone();
        config.layers.extend(
            running
                .iter()
                .filter(|(other, _)| other.as_str() != name)
                .map(|(_, run)| run.layer.clone()),
        );
        config
    }

    /// The clients the layer's controller uses: the controller's own, and, for a layer whose
    /// kubeconfig a Secret holds, that cluster's too (read now: a rotated Secret is taken when
    /// the layer is admitted again).
    async fn layer_pool(
        &self,
        client: &Client,
        admitted: &Admitted,
    ) -> Result<(ClientPool, Option<String>)> {
        match &admitted.kubeconfig_secret {
            None => Ok((self.pool.clone(), None)),
            Some(secret) => self
                .secret_pool(client, secret)
                .await
                .map(|(pool, version)| (pool, Some(version)))
                .map_err(|source| Error::Credentials {
                    context: admitted.layer.context.clone(),
                    message: source.to_string(),
                    fix: format!("fix the kubeconfig in Secret {secret}"),
                    source: Box::new(source),
                }),
        }
    }

    /// The controller's clients and the cluster of the kubeconfig Secret `secret` holds (key
    /// `kubeconfig` unless it names another), read in the `layerContext` cluster; and the
    /// Secret's resourceVersion.
    async fn secret_pool(
        &self,
        client: &Client,
        secret: &SecretRef,
    ) -> Result<(ClientPool, String)> {
        let key = secret.key.as_deref().unwrap_or("kubeconfig");
        let read = Api::<Secret>::namespaced(client.clone(), &secret.namespace)
            .get(&secret.name)
            .await
            .map_err(|error| Error::kube(format!("get Secret {secret}"), error))?;
        let text = read
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned())
            .ok_or_else(|| Error::Value(format!("Secret {secret} has no key {key}")))?;
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).map_err(|error| {
            Error::Value(format!(
                "key {key} of Secret {secret} is not a kubeconfig: {error}"
            ))
        })?;
        let pool = self
            .pool
            .with_context(
                &crate::config::secret_context(secret),
                kubeconfig,
                &format!("Secret {secret}"),
            )
            .map_err(|source| Error::Kubeconfig {
                what: format!("Secret {secret}"),
                source,
            })?;
        Ok((pool, read.metadata.resource_version.unwrap_or_default()))
    }

    /// Whether the layer's cluster takes its credentials: one read of Combs in its first
    /// namespace. The refusal ([`Error::Credentials`]) says what to fix.
    async fn credentials(&self, pool: &ClientPool, admitted: &Admitted) -> Result<()> {
        let layer = &admitted.layer;
        let fix = match &admitted.kubeconfig_secret {
            Some(secret) => format!("fix the kubeconfig in Secret {secret}"),
            None => format!(
                "fix the user of context {} in the controller's kubeconfig",
                layer.context
            ),
        };
        let refused = |source: Error| Error::Credentials {
            context: layer.context.clone(),
            message: match &source {
                Error::Kube { message, .. } => message.clone(),
                other => other.to_string(),
            },
            fix: fix.clone(),
            source: Box::new(source),
        };
        let client = pool.client(&layer.context).await.map_err(|source| {
            refused(Error::Kubeconfig {
                what: format!("layer {}", layer.name),
                source,
            })
        })?;
        let namespace = layer
            .namespaces
            .as_ref()
            .and_then(|namespaces| namespaces.first())
            .cloned()
            .unwrap_or_default();
        let combs: Api<Comb> = Api::namespaced_with(
            client,
            &namespace,
            &comb_api::api_resource(&self.config.group),
        );
        combs
            .list(&ListParams::default().limit(1))
            .await
            .map(drop)
            .map_err(|error| refused(Error::kube(format!("list Combs in {namespace}"), error)))
    }

    /// Puts comb's finalizer on `cr`; the CombLayer as the server holds it after.
    async fn add_finalizer(&self, api: &Api<CombLayer>, cr: &CombLayer) -> Result<CombLayer> {
        let finalizer = finalizer(&self.config.group);
        let mut finalizers = cr.metadata.finalizers.clone().unwrap_or_default();
        if finalizers.contains(&finalizer) {
            return api
                .get(cr.name())
                .await
                .map_err(|error| Error::kube(format!("get CombLayer {}", cr.name()), error));
        }
        finalizers.push(finalizer);
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": cr.metadata.resource_version,
        }});
        api.patch(cr.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|error| {
                Error::kube(
                    format!("add the finalizer of CombLayer {}", cr.name()),
                    error,
                )
            })
    }

    /// Makes what the layer needs and records it in `status`: its namespaces (when the template
    /// creates them) and a Comb for each Comb of the layer it borrows from that it takes.
    /// What it is about to make is written into the record first, without uids (`fresh` is the
    /// CombLayer as the server holds it; `written` its status, kept as the server holds it
    /// after this write): a create whose uid never reached the record (a failure further on, a
    /// controller stopped) is then still the layer's, and goes with it
    /// ([`LayersOnDemand::settle`]). Returns notes on what it left alone.
    async fn make(
        &self,
        api: &Api<CombLayer>,
        fresh: &CombLayer,
        pool: &ClientPool,
        admitted: &Admitted,
        status: &mut CombLayerStatus,
        written: &mut CombLayerStatus,
    ) -> Result<Vec<String>> {
        let layer = &admitted.layer;
        let name = fresh.name();
        let client = pool
            .client(&layer.context)
            .await
            .map_err(|source| Error::Kubeconfig {
                what: format!("layer {name}"),
                source,
            })?;
        self.settle(&client, name, status).await?;
        let namespaces = layer.namespaces.clone().unwrap_or_default();
        let mut new_namespaces = Vec::new();
        if admitted.create_namespaces {
            let api: Api<Namespace> = Api::all(client.clone());
            for namespace in &namespaces {
                if api
                    .get_opt(namespace)
                    .await
                    .map_err(|error| Error::kube(format!("get Namespace {namespace}"), error))?
                    .is_some()
                {
                    continue;
                }
                new_namespaces.push(namespace.clone());
            }
        }
        let mut new_combs = Vec::new();
        if let Some(borrow) = &layer.borrow
            && let Some(from) = self.config.layer(&borrow.from)
        {
            let source_client =
                pool.client(&from.context)
                    .await
                    .map_err(|source| Error::Kubeconfig {
                        what: format!("layer {}", from.name),
                        source,
                    })?;
            let resource = comb_api::api_resource(&self.config.group);
            for namespace in &namespaces {
                let peer_namespace = borrow.namespace.as_deref().unwrap_or(namespace);
                let sources: Api<Comb> =
                    Api::namespaced_with(source_client.clone(), peer_namespace, &resource);
                let listed = sources
                    .list(&ListParams::default())
                    .await
                    .map_err(|error| {
                        Error::kube(
                            format!("list Combs of layer {} in {peer_namespace}", from.name),
                            error,
                        )
                    })?;
                for source in listed.items {
                    let Some(comb_name) = source.metadata.name.clone() else {
                        continue;
                    };
                    let taken = matches_any(&borrow.combs, peer_namespace, &comb_name)
                        || matches_any(&borrow.local, namespace, &comb_name);
                    if taken && !recorded(status, comb_api::KIND, Some(namespace), &comb_name) {
                        new_combs.push((namespace.clone(), comb_name, source.spec));
                    }
                }
            }
        }
        if new_namespaces.is_empty() && new_combs.is_empty() {
            return Ok(Vec::new());
        }
        for namespace in &new_namespaces {
            record(status, namespace_made(namespace, None));
        }
        for (namespace, comb_name, _) in &new_combs {
            record(status, self.comb_made(namespace, comb_name, None));
        }
        write_status(api, fresh, written, status.clone(), false).await?;
        // The status write after the creates compares with this: an intent dropped again (its
        // create refused) must leave the record the server holds too.
        *written = status.clone();

        let mut notes = Vec::new();
        let namespace_api: Api<Namespace> = Api::all(client.clone());
        for namespace in &new_namespaces {
            let made = namespace_api
                .create(
                    &PostParams::default(),
                    &Namespace {
                        metadata: ObjectMeta {
                            name: Some(namespace.clone()),
                            labels: Some(BTreeMap::from([(self.layer_label(), name.to_string())])),
                            ..ObjectMeta::default()
                        },
                        ..Namespace::default()
                    },
                )
                .await;
            match made {
                Ok(made) => record(
                    status,
                    namespace_made(namespace, made.metadata.uid.as_deref()),
                ),
                // Made by someone else since it was looked up: not the layer's.
                Err(kube::Error::Api(answer)) if answer.code == 409 => {
                    forget(status, &namespace_made(namespace, None));
                }
                Err(error) => {
                    return Err(Error::kube(format!("create Namespace {namespace}"), error));
                }
            }
        }
        let resource = comb_api::api_resource(&self.config.group);
        for (namespace, comb_name, spec) in new_combs {
            let ours: Api<Comb> = Api::namespaced_with(client.clone(), &namespace, &resource);
            if let Some(note) = self
                .create_comb(&ours, &namespace, &comb_name, spec, name, status)
                .await?
            {
                notes.push(note);
            }
        }
        Ok(notes)
    }

    /// The record's entry for Comb `namespace/name` made for a layer.
    fn comb_made(&self, namespace: &str, name: &str, uid: Option<&str>) -> ManagedObject {
        ManagedObject::new(
            format!("{}/{VERSION}", self.config.group),
            comb_api::KIND,
            Some(namespace),
            name,
        )
        .with_uid(uid)
    }

    /// Creates Comb `namespace/name` with `spec` for layer `layer` and records its uid in
    /// `status` (over the entry written ahead for it); a note instead, and no entry, when a
    /// Comb of that name exists and is not the layer's.
    async fn create_comb(
        &self,
        ours: &Api<Comb>,
        namespace: &str,
        name: &str,
        spec: CombSpec,
        layer: &str,
        status: &mut CombLayerStatus,
    ) -> Result<Option<String>> {
        let mut comb = Comb::new(&self.config.group, namespace, name, spec);
        comb.metadata.labels = Some(BTreeMap::from([(self.layer_label(), layer.to_string())]));
        match ours.create(&PostParams::default(), &comb).await {
            Ok(made) => {
                record(
                    status,
                    self.comb_made(namespace, name, made.metadata.uid.as_deref()),
                );
                Ok(None)
            }
            Err(kube::Error::Api(answer)) if answer.code == 409 => {
                forget(status, &self.comb_made(namespace, name, None));
                Ok(Some(format!(
                    "Comb {namespace}/{name} exists and is not this layer's; comb leaves it alone"
                )))
            }
            Err(error) => Err(Error::kube(
                format!("create Comb {namespace}/{name}"),
                error,
            )),
        }
    }

    /// Settles what `status` records without a uid: identities written ahead of their create
    /// ([`LayersOnDemand::make`]) whose uid was never recorded. The object of that name made
    /// for layer `layer` (it carries the layer's label) is the layer's: its uid is recorded.
    /// Any other, or none, leaves the record: the label alone never makes an object the
    /// layer's, the record written ahead by comb does (as ADR 0004 rule 3 for a Comb's).
    async fn settle(
        &self,
        client: &Client,
        layer: &str,
        status: &mut CombLayerStatus,
    ) -> Result<()> {
        if status
            .managed_resources
            .iter()
            .all(|made| made.uid.is_some())
        {
            return Ok(());
        }
        let label = self.layer_label();
        let resource = comb_api::api_resource(&self.config.group);
        let mut settled = Vec::with_capacity(status.managed_resources.len());
        for made in &status.managed_resources {
            if made.uid.is_some() {
                settled.push(made.clone());
                continue;
            }
            let what = format!(
                "get {} {}{}",
                made.kind,
                made.namespace
                    .as_deref()
                    .map(|namespace| format!("{namespace}/"))
                    .unwrap_or_default(),
                made.name
            );
            let found = if made.kind == "Namespace" {
                Api::<Namespace>::all(client.clone())
                    .get_opt(&made.name)
                    .await
                    .map(|found| found.map(|namespace| namespace.metadata))
            } else {
                let namespace = made.namespace.as_deref().unwrap_or_default();
                Api::<Comb>::namespaced_with(client.clone(), namespace, &resource)
                    .get_opt(&made.name)
                    .await
                    .map(|found| found.map(|comb| comb.metadata))
            }
            .map_err(|error| Error::kube(what, error))?;
            if let Some(uid) = made_for_layer(found.as_ref(), &label, layer) {
                settled.push(made.clone().with_uid(Some(uid)));
            }
        }
        status.managed_resources = settled;
        Ok(())
    }

    /// Keeps the Combs comb made for the running layer of `cr` those of the layer it borrows
    /// from, as its controller's watches show both: a Comb added there is made here, a
    /// borrowing Comb whose source's spec changed gets that spec, and one whose source went
    /// goes (each by its recorded uid); a Comb the layer runs locally is the developer's once
    /// made. Sends nothing while neither layer's Combs came, went or got a new spec; true
    /// when it wrote the record.
    async fn follow(
        &self,
        api: &Api<CombLayer>,
        cr: &CombLayer,
        run: &mut Running,
    ) -> Result<bool> {
        let Some(borrow) = run.layer.borrow.clone() else {
            return Ok(false);
        };
        let seen = (
            run.handle.listed_origins(&borrow.from),
            run.handle.listed_origins(&run.layer.name),
        );
        let (Some(_), Some(_)) = &seen else {
            return Ok(false);
        };
        if run.followed.as_ref() == Some(&seen) {
            return Ok(false);
        }
        let (Some(sources), Some(ours)) = (
            run.handle.listed_combs(&borrow.from),
            run.handle.listed_combs(&run.layer.name),
        ) else {
            return Ok(false);
        };
        let stale = cr.status.clone().unwrap_or_default();
        let unsettled = stale
            .managed_resources
            .iter()
            .any(|made| made.uid.is_none());
        if !unsettled && following(&run.layer, &sources, &ours, &stale).is_empty() {
            run.followed = Some(seen);
            return Ok(false);
        }
        // Decided on the record as the server holds it: the watch's copy may predate comb's
        // last write of it.
        let fresh = api
            .get(cr.name())
            .await
            .map_err(|error| Error::kube(format!("get CombLayer {}", cr.name()), error))?;
        let status = fresh.status.clone().unwrap_or_default();
        let client = run
            .pool
            .client(&run.layer.context)
            .await
            .map_err(|source| Error::Kubeconfig {
                what: format!("layer {}", run.layer.name),
                source,
            })?;
        let mut next = status.clone();
        // What the server holds: the last write below compares with it.
        let mut written = status.clone();
        self.settle(&client, &run.layer.name, &mut next).await?;
        let plan = following(&run.layer, &sources, &ours, &next);
        if plan.is_empty() {
            if next == status {
                run.followed = Some(seen);
                return Ok(false);
            }
            write_status(api, &fresh, &status, next, false).await?;
            return Ok(true);
        }
        let resource = comb_api::api_resource(&self.config.group);
        let combs = |namespace: &str| -> Api<Comb> {
            Api::namespaced_with(client.clone(), namespace, &resource)
        };
        if !plan.make.is_empty() {
            // Written ahead, as at admission (`make` says why).
            for (namespace, source) in &plan.make {
                record(
                    &mut next,
                    self.comb_made(namespace, &source.name_any(), None),
                );
            }
            write_status(api, &fresh, &status, next.clone(), false).await?;
            written = next.clone();
        }
        for (namespace, source) in plan.make {
            let name = source.name_any();
            if let Some(note) = self
                .create_comb(
                    &combs(&namespace),
                    &namespace,
                    &name,
                    source.spec,
                    &run.layer.name,
                    &mut next,
                )
                .await?
            {
                info!(layer = %run.layer.name, "{note}");
            }
        }
        for (mut comb, spec) in plan.respec {
            // A replace of the copy the watch holds: refused (409) when the Comb changed
            // meanwhile, or is another one by now (its uid); the next look sees it again.
            let key = format!(
                "{}/{}",
                comb.namespace().unwrap_or_default(),
                comb.name_any()
            );
            comb.spec = spec;
            comb.status = None;
            combs(&comb.namespace().unwrap_or_default())
                .replace(&comb.name_any(), &PostParams::default(), &comb)
                .await
                .map_err(|error| Error::kube(format!("replace the spec of Comb {key}"), error))?;
        }
        for (key, uid) in plan.remove {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match combs(&key.namespace).delete(&key.name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(answer)) if answer.code == 404 => {}
                Err(error) => {
                    return Err(Error::kube(format!("delete Comb {key}"), error));
                }
            }
            next.managed_resources.retain(|made| {
                !(made.kind == comb_api::KIND
                    && made.namespace.as_deref() == Some(key.namespace.as_str())
                    && made.name == key.name)
            });
        }
        // The record is comb's alone: written over the copy just read.
        write_status(api, &fresh, &written, next, false).await?;
        Ok(true)
    }

    fn layer_label(&self) -> String {
        format!("{}layer", self.config.label_prefix)
    }

    /// Starts the controller of `layer`: it steps that layer alone, watching through the
    /// watches the layers on demand share. A cluster a kubeconfig Secret holds is another one
    /// for each version of the Secret (another client), and the layer's own when the version
    /// is not known.
    async fn start(
        &self,
        pool: ClientPool,
        cr: &CombLayer,
        uid: &str,
        layer: Layer,
        expires_at: Timestamp,
        secret_version: Option<String>,
    ) -> Result<Running> {
        let mut config = (*self.config).clone();
        config.layers.push(layer.clone());
        let mut watches = self.options.shared_watches.clone().unwrap_or_default();
        if layer
            .context
            .starts_with(crate::config::SECRET_CONTEXT_PREFIX)
        {
            let version = match &secret_version {
                Some(version) => format!("version {version}"),
                None => format!("layer {uid}"),
            };
            watches = watches.with_cluster(&layer.context, format!("{} {version}", layer.context));
        }
        let options = ControllerOptions {
            steps_only: Some(vec![layer.name.clone()]),
            shared_watches: Some(watches),
            // Sharded, the layer's steps run under its CombLayer's Lease.
            fence: self
                .gate
                .as_ref()
                .and_then(|gate| gate.granted(&layer.name)),
            ..self.options.clone()
        };
        let controller =
            Controller::with_pool(config, pool.clone(), self.registry.clone(), options).await?;
        let handle = controller.handle();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(controller.run(shutdown.clone()));
        Ok(Running {
            uid: uid.to_string(),
            expires_at,
            secret_version,
            pool,
            generation: cr.metadata.generation,
            layer,
            handle,
            followed: None,
            shutdown,
            task,
        })
    }

    /// Removes what comb made for the layer of `cr`, by its record: its Combs first (the
    /// layer's controller runs their cleanup), then, once they are gone, the namespaces it
    /// created; says so in an Event, records the layer Expired, and lets a deleted CombLayer go.
    async fn remove(
        &self,
        api: &Api<CombLayer>,
        client: &Client,
        cr: &CombLayer,
        state: &mut State,
    ) -> Result<()> {
        let running = &mut state.running;
        let name = cr.name().to_string();
        let status = cr.status.clone().unwrap_or_default();
        let pool = match running.get(&name) {
            Some(run) => run.pool.clone(),
            None => match &cr.spec.kubeconfig_secret {
                Some(secret) => self.secret_pool(client, secret).await?.0,
                None => self.pool.clone(),
            },
        };
        let context = running
            .get(&name)
            .map(|run| run.layer.context.clone())
            .or_else(|| self.layer_context_of(cr));
        let layer_client = match &context {
            Some(context) => {
                Some(
                    pool.client(context)
                        .await
                        .map_err(|source| Error::Kubeconfig {
                            what: format!("layer {name}"),
                            source,
                        })?,
                )
            }
            None => None,
        };
        // What was written ahead and never settled is the layer's when its object says so; the
        // rest of such entries name nothing comb made, and are never deleted by name.
        let mut settled = status.clone();
        if let Some(layer_client) = &layer_client {
            self.settle(layer_client, &name, &mut settled).await?;
        }
        let record = &settled.managed_resources;
        let combs: Vec<&ManagedObject> = record
            .iter()
            .filter(|o| o.kind == comb_api::KIND && o.uid.is_some())
            .collect();
        if let Some(layer_client) = &layer_client {
            if !combs.is_empty() && !running.contains_key(&name) {
                // The Combs' cleanup needs the layer's controller.
                if let Some(layer) = self.layer_of(cr, running) {
                    let uid = cr.metadata.uid.clone().unwrap_or_default();
                    let expires_at = Timestamp::now();
                    let run = self
                        .start(pool.clone(), cr, &uid, layer, expires_at, None)
                        .await?;
                    running.insert(name.clone(), run);
                }
            }
            let mut waiting = false;
            let resource = comb_api::api_resource(&self.config.group);
            for comb in &combs {
                let namespace = comb.namespace.as_deref().unwrap_or_default();
                let api: Api<Comb> =
                    Api::namespaced_with(layer_client.clone(), namespace, &resource);
                let live = api.get_opt(&comb.name).await.map_err(|error| {
                    Error::kube(format!("get Comb {namespace}/{}", comb.name), error)
                })?;
                let Some(live) = live.filter(|live| live.metadata.uid == comb.uid) else {
                    continue;
                };
                waiting = true;
                state
                    .made_by_combs
                    .entry(name.clone())
                    .or_default()
                    .entry(format!("{namespace}/{}", comb.name))
                    .or_insert_with(|| {
                        live.status
                            .as_ref()
                            .map(|status| status.managed().to_vec())
                            .unwrap_or_default()
                    });
                if live.metadata.deletion_timestamp.is_none() {
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: comb.uid.clone(),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    match api.delete(&comb.name, &params).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(answer)) if matches!(answer.code, 404 | 409) => {}
                        Err(error) => {
                            return Err(Error::kube(
                                format!("delete Comb {namespace}/{}", comb.name),
                                error,
                            ));
                        }
                    }
                }
            }
            if waiting {
                return Ok(());
            }
        }
        if let Some(run) = running.remove(&name) {
            stop(run).await;
        }
        let namespaces: Vec<&ManagedObject> = record
            .iter()
            .filter(|o| o.kind == "Namespace" && o.uid.is_some())
            .collect();
        if let Some(layer_client) = &layer_client {
            let api: Api<Namespace> = Api::all(layer_client.clone());
            for namespace in &namespaces {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: namespace.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(&namespace.name, &params).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(answer)) if matches!(answer.code, 404 | 409) => {}
                    Err(error) => {
                        return Err(Error::kube(
                            format!("delete Namespace {}", namespace.name),
                            error,
                        ));
                    }
                }
            }
        }
        let deleting = cr.metadata.deletion_timestamp.is_some();
        let message = removal_message(
            &name,
            deleting,
            record,
            &state.made_by_combs.get(&name).cloned().unwrap_or_default(),
        );
        if !record.is_empty() {
            info!(layer = %name, "{message}");
            let event = layer_event(
                &self.config.group,
                cr,
                "LayerRemoved",
                &message,
                &self.options.identity,
            );
            if let Err(error) = super::events::publish(client.clone(), &event).await {
                warn!(layer = %name, %error, "the Event on the CombLayer was not written");
            }
        }
        if deleting {
            let finalizer = finalizer(&self.config.group);
            let finalizers: Vec<String> = cr
                .metadata
                .finalizers
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|other| *other != finalizer)
                .collect();
            let patch = json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": cr.metadata.resource_version,
            }});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|error| {
                    Error::kube(format!("remove the finalizer of CombLayer {name}"), error)
                })?;
            state.made_by_combs.remove(&name);
            return Ok(());
        }
        let now = Timestamp::now();
        let mut next = status.clone();
        next.phase = Some(LayerPhase::Expired);
        next.managed_resources = Vec::new();
        next.combs = None;
        let message = if record.is_empty() {
            "the layer's TTL ran out".to_string()
        } else {
            message
        };
        set_condition(&mut next, EXPIRED, true, "TTLExpired", &message, now);
        set_condition(&mut next, READY, false, "Expired", &message, now);
        write_status(api, cr, &status, next, true).await?;
        state.made_by_combs.remove(&name);
        Ok(())
    }

    /// The kube context of the layer of `cr` without admitting it: its `context`, or the name
    /// its kubeconfig Secret's cluster goes by.
    fn layer_context_of(&self, cr: &CombLayer) -> Option<String> {
        cr.spec.context.clone().or_else(|| {
            cr.spec
                .kubeconfig_secret
                .as_ref()
                .map(crate::config::secret_context)
        })
    }

    /// The layer of `cr` for its cleanup: as its template makes it, with the expiry left out
    /// of the judgement (an expired layer is still cleaned up); when the template refuses it
    /// now (narrowed since), the narrowest layer there is, its namespaces and the default
    /// tenancy, so that its Combs' cleanup still runs, and runs no wider than before.
    fn layer_of(&self, cr: &CombLayer, running: &BTreeMap<String, Running>) -> Option<Layer> {
        let created = cr
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(Timestamp::now, |time| time.0);
        let mut spec = cr.spec.clone();
        spec.ttl = None;
        spec.expires_at = None;
        match layer_from_template(
            &self.with_others(running, cr.name()),
            cr.name(),
            &spec,
            created,
            created,
        ) {
            Ok(admitted) => Some(admitted.layer),
            Err(_) => self
                .layer_context_of(cr)
                .map(|context| Layer::plain(cr.name(), &context, Some(cr.spec.namespaces.clone()))),
        }
    }
}

/// How the Combs of the running layer of `cr` stand, recorded when it changed.
async fn record_progress(
    api: &Api<CombLayer>,
    cr: &CombLayer,
    status: &CombLayerStatus,
    run: &Running,
    now: Timestamp,
) -> Result<()> {
    let counts = count(&run.handle.combs(), &run.layer.name);
    let mut next = status.clone();
    next.combs = Some(counts.clone());
    next.expires_at = Some(Time(run.expires_at));
    // Every Comb Running, once the layer's Combs were listed (before, none is seen yet).
    let listed = run
        .handle
        .layer(&run.layer.name)
        .is_some_and(|layer| layer.listed);
    let ready = listed && counts.ready == counts.total;
    next.phase = Some(if ready {
        LayerPhase::Ready
    } else {
        LayerPhase::Pending
    });
    let message = format!(
        "{} of {} Combs Running, until {}",
        counts.ready, counts.total, run.expires_at
    );
    let reason = if ready {
        "CombsRunning"
    } else {
        "CombsPending"
    };
    set_condition(&mut next, READY, ready, reason, &message, now);
    write_status(api, cr, status, next, true).await
}

/// Stops a layer's controller and waits for its running steps.
async fn stop(run: Running) {
    run.shutdown.cancel();
    match run.task.await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => warn!(layer = %run.layer.name, %error, "the layer's controller failed"),
        Err(error) => warn!(layer = %run.layer.name, %error, "the layer's controller panicked"),
    }
}

/// The CombLayers as the watch shows them; a relist replaces them once it is whole, so that
/// no layer seems gone while it runs.
#[derive(Default)]
struct Held {
    layers: BTreeMap<String, CombLayer>,
    relisting: Option<BTreeMap<String, CombLayer>>,
}

impl Held {
    fn take(&mut self, event: watcher::Event<CombLayer>) {
        match event {
            watcher::Event::Apply(cr) => {
                self.layers.insert(cr.name().to_string(), cr);
            }
            watcher::Event::Delete(cr) => {
                self.layers.remove(cr.name());
            }
            watcher::Event::Init => self.relisting = Some(BTreeMap::new()),
            watcher::Event::InitApply(cr) => {
                self.relisting
                    .get_or_insert_with(BTreeMap::new)
                    .insert(cr.name().to_string(), cr);
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.relisting.take() {
                    self.layers = listed;
                }
            }
        }
    }
}

/// What [`LayersOnDemand::follow`] compares between looks: the uids and generations of the
/// source layer's Combs and of the layer's.
type Followed = (
    Option<BTreeMap<CombKey, Origin>>,
    Option<BTreeMap<CombKey, Origin>>,
);

/// What keeps a layer's Combs those of the layer it borrows from.
#[derive(Debug, Default)]
struct Following {
    /// Combs of the source the layer takes and has none of, with the namespace each is made in.
    make: Vec<(String, Comb)>,
    /// Borrowing Combs comb made, as the layer holds them, whose source has another spec; with
    /// that spec.
    respec: Vec<(Comb, CombSpec)>,
    /// Borrowing Combs comb made whose source is gone, with their recorded uid.
    remove: Vec<(CombKey, String)>,
}

impl Following {
    fn is_empty(&self) -> bool {
        self.make.is_empty() && self.respec.is_empty() && self.remove.is_empty()
    }
}

/// What keeps the Combs of `layer` (`ours`, as its watch holds them; `status`, what comb
/// recorded making) those of the layer it borrows from (`sources`): a Comb of the source the
/// layer takes is made unless the layer has one of that name (comb's or not); a borrowing Comb
/// comb made follows its source's spec, and goes with its source. A Comb the layer runs
/// locally is the developer's once made: neither its spec nor its end follow the source.
fn following(
    layer: &Layer,
    sources: &[Comb],
    ours: &[Comb],
    status: &CombLayerStatus,
) -> Following {
    let mut plan = Following::default();
    let Some(borrow) = &layer.borrow else {
        return plan;
    };
    for namespace in layer.namespaces.iter().flatten() {
        let peer = borrow.namespace.as_deref().unwrap_or(namespace);
        let in_namespace = |combs: &'_ [Comb], namespace: &str, name: &str| {
            combs
                .iter()
                .find(|comb| {
                    comb.namespace().as_deref() == Some(namespace) && comb.name_any() == name
                })
                .cloned()
        };
        let local = |name: &str| matches_any(&borrow.local, namespace, name);
        for source in sources
            .iter()
            .filter(|source| source.namespace().as_deref() == Some(peer))
        {
            let name = source.name_any();
            let taken = matches_any(&borrow.combs, peer, &name) || local(&name);
            if taken
                && !recorded(status, comb_api::KIND, Some(namespace), &name)
                && in_namespace(ours, namespace, &name).is_none()
            {
                plan.make.push((namespace.clone(), source.clone()));
            }
        }
        for made in &status.managed_resources {
            if made.kind != comb_api::KIND
                || made.namespace.as_deref() != Some(namespace.as_str())
                || local(&made.name)
            {
                continue;
            }
            let Some(uid) = &made.uid else { continue };
            match in_namespace(sources, peer, &made.name) {
                None => plan
                    .remove
                    .push((CombKey::new(namespace, &made.name), uid.clone())),
                Some(source) => {
                    if let Some(mine) = in_namespace(ours, namespace, &made.name)
                        && mine.metadata.uid.as_ref() == Some(uid)
                        && mine.spec != source.spec
                    {
                        plan.respec.push((mine, source.spec));
                    }
                }
            }
        }
    }
    plan
}

/// Whether `status` records `kind` `namespace/name` as made for the layer.
fn recorded(status: &CombLayerStatus, kind: &str, namespace: Option<&str>, name: &str) -> bool {
    status.managed_resources.iter().any(|made| {
        made.kind == kind && made.namespace.as_deref() == namespace && made.name == name
    })
}

/// Records `made` in `status`, over an entry of the same identity (one written ahead).
fn record(status: &mut CombLayerStatus, made: ManagedObject) {
    forget(status, &made);
    status.managed_resources.push(made);
}

/// Drops the entry of `made`'s identity from `status`.
fn forget(status: &mut CombLayerStatus, made: &ManagedObject) {
    status.managed_resources.retain(|entry| {
        !(entry.kind == made.kind && entry.namespace == made.namespace && entry.name == made.name)
    });
}

/// The record's entry for Namespace `name` made for a layer.
fn namespace_made(name: &str, uid: Option<&str>) -> ManagedObject {
    ManagedObject::new("v1", "Namespace", None, name).with_uid(uid)
}

/// The uid of `found` when it was made for layer `layer` (its `label` says so): an identity
/// written ahead whose object is that one is the layer's. None for any other object, or none.
fn made_for_layer<'a>(found: Option<&'a ObjectMeta>, label: &str, layer: &str) -> Option<&'a str> {
    let found = found?;
    let labelled = found
        .labels
        .as_ref()
        .and_then(|labels| labels.get(label))
        .is_some_and(|value| value == layer);
    labelled.then_some(found.uid.as_deref()).flatten()
}

/// The Combs of layer `name` among `combs`, counted by phase.
fn count(combs: &[CombOutcome], name: &str) -> CombCounts {
    let mut counts = CombCounts::default();
    for comb in combs.iter().filter(|comb| comb.layer == name) {
        counts.total += 1;
        match &comb.phase {
            Some(Phase::Running) => counts.ready += 1,
            Some(Phase::Error | Phase::Blocked | Phase::NeedsConfig) => counts.failed += 1,
            _ => counts.pending += 1,
        }
    }
    counts
}

/// What an Event and the status say when the layer's things went: each kind comb made for the
/// layer with its names, then what its Combs had made, counted by kind.
fn removal_message(
    name: &str,
    deleted: bool,
    record: &[ManagedObject],
    made_by_combs: &BTreeMap<String, Vec<ManagedObject>>,
) -> String {
    let mut by_kind: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for made in record {
        let named = match &made.namespace {
            Some(namespace) => format!("{namespace}/{}", made.name),
            None => made.name.clone(),
        };
        by_kind.entry(made.kind.as_str()).or_default().insert(named);
    }
    let listed: Vec<String> = by_kind
        .iter()
        .map(|(kind, names)| {
            format!(
                "{} {kind} ({})",
                names.len(),
                names.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
    for made in made_by_combs.values().flatten() {
        *counted.entry(made.kind.as_str()).or_default() += 1;
    }
    let theirs = if counted.is_empty() {
        String::new()
    } else {
        let counts: Vec<String> = counted
            .iter()
            .map(|(kind, count)| format!("{count} {kind}"))
            .collect();
        format!(
            "; with the Combs went what they made: {}",
            counts.join(", ")
        )
    };
    format!(
        "layer {name} {}: removed {}{theirs}",
        if deleted { "was deleted" } else { "expired" },
        listed.join(", ")
    )
}

/// Sets condition `kind` of `status`, keeping its transition time while its status stays.
fn set_condition(
    status: &mut CombLayerStatus,
    kind: &str,
    value: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let value = ConditionStatus::from(value);
    let kept = status
        .condition(kind)
        .filter(|old| old.status == value)
        .and_then(|old| old.last_transition_time.clone());
    let condition = CombCondition {
        type_: kind.to_string(),
        status: value,
        reason: Some(Reason::from(reason)),
        message: (!message.is_empty()).then(|| message.to_string()),
        last_transition_time: Some(kept.unwrap_or(Time(now))),
    };
    match status.conditions.iter_mut().find(|old| old.type_ == kind) {
        Some(old) => *old = condition,
        None => status.conditions.push(condition),
    }
    status
        .conditions
        .sort_by_key(|condition| (condition.type_ != READY, condition.type_.clone()));
}

/// Writes `next` as the status of `cr` when it differs from `before`: a settled layer costs no
/// request.
async fn write_status(
    api: &Api<CombLayer>,
    cr: &CombLayer,
    before: &CombLayerStatus,
    next: CombLayerStatus,
    conditional: bool,
) -> Result<()> {
    if *before == next && cr.status.is_some() {
        return Ok(());
    }
    // A merge patch leaves out what it does not name: the record and the counts are named
    // even when empty, so that what went is gone from the status too.
    let mut status = serde_json::to_value(&next)
        .map_err(|error| Error::request(format!("CombLayer {}", cr.name()), error.to_string()))?;
    status["managedResources"] = json!(next.managed_resources);
    status["combs"] = json!(next.combs);
    // Conditional on the copy it was built on: a look at a copy older than the status comb
    // wrote last must not put an older record back. The watch brings the newer copy.
    let mut patch = json!({ "status": status });
    if conditional {
        patch["metadata"] = json!({"resourceVersion": cr.metadata.resource_version});
    }
    match api
        .patch_status(cr.name(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(answer)) if answer.code == 409 => Ok(()),
        Err(error) => Err(Error::kube(
            format!("write the status of CombLayer {}", cr.name()),
            error,
        )),
    }
}

/// An Event about CombLayer `cr` (cluster-scoped: the Event is in namespace default).
fn layer_event(group: &str, cr: &CombLayer, reason: &str, message: &str, instance: &str) -> Event {
    let name = cr.name().to_string();
    let now = Time(Timestamp::now());
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:016x}", rand::random::<u64>())),
            namespace: Some("default".to_string()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(format!("{group}/{VERSION}")),
            kind: Some(LAYER_KIND.to_string()),
            name: Some(name),
            uid: cr.metadata.uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some("Normal".to_string()),
        source: Some(EventSource {
            component: Some(super::events::COMPONENT.to_string()),
            host: None,
        }),
        reporting_component: Some(super::events::COMPONENT.to_string()),
        reporting_instance: Some(instance.to_string()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layers_combs_are_counted_by_phase() {
        let comb = |layer: &str, phase: Option<Phase>| CombOutcome {
            layer: layer.into(),
            namespace: "dev-alice".into(),
            name: "x".into(),
            phase,
            reason: None,
            message: None,
        };
        let combs = [
            comb("alice", Some(Phase::Running)),
            comb("alice", Some(Phase::Running)),
            comb("alice", Some(Phase::Pending)),
            comb("alice", None),
            comb("alice", Some(Phase::Error)),
            comb("alice", Some(Phase::Blocked)),
            comb("staging", Some(Phase::Running)),
        ];
        assert_eq!(
            count(&combs, "alice"),
            CombCounts {
                total: 6,
                ready: 2,
                pending: 2,
                failed: 2
            }
        );
    }

    /// The layer of the table: alice in dev-alice, borrowing every Comb of staging's `shop`,
    /// running `api` itself.
    fn alice() -> Layer {
        Layer {
            borrow: Some(crate::config::Borrow {
                from: "staging".into(),
                namespace: Some("shop".into()),
                combs: vec!["*".into()],
                local: vec!["api".into()],
                replicate: Vec::new(),
                fallback: None,
            }),
            ..Layer::plain("alice", "dev", Some(vec!["dev-alice".into()]))
        }
    }

    fn comb(namespace: &str, name: &str, uid: &str, class: &str) -> Comb {
        let mut comb = Comb::new("comb.internal", namespace, name, CombSpec::of_class(class));
        comb.metadata.uid = Some(uid.into());
        comb
    }

    fn made(name: &str, uid: &str) -> ManagedObject {
        ManagedObject::new("comb.internal/v1", "Comb", Some("dev-alice"), name).with_uid(Some(uid))
    }

    /// What keeps a layer's Combs its source's: `(case, source's Combs, the layer's, the
    /// record, what is made, respecified, removed)`.
    #[test]
    fn a_layer_follows_the_combs_of_its_source_but_those_it_runs() {
        let shop = |name: &str, class: &str| comb("shop", name, &format!("s-{name}"), class);
        let ours = |name: &str, uid: &str, class: &str| comb("dev-alice", name, uid, class);
        type Case = (
            &'static str,
            Vec<Comb>,
            Vec<Comb>,
            Vec<ManagedObject>,
            Vec<&'static str>,
            Vec<&'static str>,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "as made: nothing to do",
                vec![shop("db", "A"), shop("api", "A")],
                vec![ours("db", "1", "A"), ours("api", "2", "A")],
                vec![made("db", "1"), made("api", "2")],
                vec![],
                vec![],
                vec![],
            ),
            (
                "a Comb added to the source is made",
                vec![shop("db", "A"), shop("cache", "A")],
                vec![ours("db", "1", "A")],
                vec![made("db", "1")],
                vec!["dev-alice/cache"],
                vec![],
                vec![],
            ),
            (
                "one of that name that is not comb's is left alone",
                vec![shop("cache", "A")],
                vec![ours("cache", "9", "B")],
                vec![],
                vec![],
                vec![],
                vec![],
            ),
            (
                "a borrowing Comb takes its source's new spec, a local one does not",
                vec![shop("db", "B"), shop("api", "B")],
                vec![ours("db", "1", "A"), ours("api", "2", "A")],
                vec![made("db", "1"), made("api", "2")],
                vec![],
                vec!["dev-alice/db"],
                vec![],
            ),
            (
                "a Comb another made under comb's recorded name is not respecified",
                vec![shop("db", "B")],
                vec![ours("db", "other", "A")],
                vec![made("db", "1")],
                vec![],
                vec![],
                vec![],
            ),
            (
                "a borrowing Comb goes with its source, a local one stays",
                vec![],
                vec![ours("db", "1", "A"), ours("api", "2", "A")],
                vec![made("db", "1"), made("api", "2")],
                vec![],
                vec![],
                vec!["dev-alice/db 1"],
            ),
        ];
        for (case, sources, combs, record, make, respec, remove) in cases {
            let status = CombLayerStatus {
                managed_resources: record,
                ..CombLayerStatus::default()
            };
            let plan = following(&alice(), &sources, &combs, &status);
            let made: Vec<String> = plan
                .make
                .iter()
                .map(|(namespace, source)| format!("{namespace}/{}", source.name_any()))
                .collect();
            let respecified: Vec<String> = plan
                .respec
                .iter()
                .map(|(comb, spec)| {
                    assert_eq!(
                        sources
                            .iter()
                            .find(|source| source.name_any() == comb.name_any())
                            .map(|source| &source.spec),
                        Some(spec),
                        "{case}: the source's spec"
                    );
                    format!(
                        "{}/{}",
                        comb.namespace().unwrap_or_default(),
                        comb.name_any()
                    )
                })
                .collect();
            let removed: Vec<String> = plan
                .remove
                .iter()
                .map(|(key, uid)| format!("{key} {uid}"))
                .collect();
            assert_eq!(
                (made, respecified, removed),
                (
                    make.iter().map(ToString::to_string).collect(),
                    respec.iter().map(ToString::to_string).collect(),
                    remove.iter().map(ToString::to_string).collect()
                ),
                "{case}"
            );
        }
    }

    #[test]
    fn what_was_written_ahead_is_the_layers_when_its_object_was_made_for_it() {
        let meta = |labels: &[(&str, &str)], uid: Option<&str>| ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(key, value)| (key.to_string(), value.to_string()))
                    .collect(),
            ),
            uid: uid.map(str::to_string),
            ..ObjectMeta::default()
        };
        let label = "comb.internal/layer";
        let cases = [
            (
                "made for alice",
                Some(meta(&[(label, "alice")], Some("u1"))),
                Some("u1"),
            ),
            ("never made", None, None),
            (
                "made for bob",
                Some(meta(&[(label, "bob")], Some("u2"))),
                None,
            ),
            ("made by someone else", Some(meta(&[], Some("u3"))), None),
            (
                "another prefix's label",
                Some(meta(&[("other.io/layer", "alice")], Some("u4"))),
                None,
            ),
        ];
        for (case, found, uid) in cases {
            assert_eq!(
                made_for_layer(found.as_ref(), label, "alice"),
                uid,
                "{case}"
            );
        }
    }

    #[test]
    fn the_removal_says_what_went_by_kind() {
        let record = [
            ManagedObject::new("comb.internal/v1", "Comb", Some("dev-alice"), "db")
                .with_uid(Some("1")),
            ManagedObject::new("comb.internal/v1", "Comb", Some("dev-alice"), "api")
                .with_uid(Some("2")),
            ManagedObject::new("v1", "Namespace", None, "dev-alice").with_uid(Some("3")),
        ];
        let made = BTreeMap::from([
            (
                "dev-alice/api".to_string(),
                vec![
                    ManagedObject::new("apps/v1", "Deployment", Some("dev-alice"), "api"),
                    ManagedObject::new("v1", "Service", Some("dev-alice"), "api"),
                ],
            ),
            (
                "dev-alice/db".to_string(),
                vec![ManagedObject::new("v1", "Service", Some("dev-alice"), "db")],
            ),
        ]);
        assert_eq!(
            removal_message("alice", false, &record, &made),
            "layer alice expired: removed 2 Comb (dev-alice/api, dev-alice/db), 1 Namespace \
             (dev-alice); with the Combs went what they made: 1 Deployment, 2 Service"
        );
        assert_eq!(
            removal_message("alice", true, &record, &BTreeMap::new()),
            "layer alice was deleted: removed 2 Comb (dev-alice/api, dev-alice/db), 1 Namespace \
             (dev-alice)"
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_it_holds() {
        let mut status = CombLayerStatus::default();
        let first: Timestamp = "2026-12-05T08:00:00Z".parse().unwrap();
        let later: Timestamp = "2026-12-05T09:00:00Z".parse().unwrap();
        set_condition(&mut status, EXPIRED, false, "Admitted", "", first);
        set_condition(&mut status, READY, false, "CombsPending", "0 of 2", first);
        set_condition(&mut status, READY, false, "CombsPending", "1 of 2", later);
        assert_eq!(status.conditions[0].type_, READY);
        assert_eq!(status.conditions[0].last_transition_time, Some(Time(first)));
        set_condition(&mut status, READY, true, "CombsRunning", "2 of 2", later);
        assert_eq!(status.conditions[0].last_transition_time, Some(Time(later)));
        assert_eq!(status.conditions[1].type_, EXPIRED);
    }
}
