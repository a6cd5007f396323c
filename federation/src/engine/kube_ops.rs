//! The client edge (reference §7, "client role"): every request a Comb makes, over a
//! `kube::Client` with dynamic resources and objects as JSON values.
//!
//! Every method returns a value, never panics, and fails with [`Error::Kube`], whose message
//! names the request and keeps the API server's own words (`Kubernetes API error (get Pod):
//! 404 NotFound: pods "nats-0" not found`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use comb_api::{Comb, CombStatus, ManagedObject};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use kube::core::{ApiResource, GroupVersion, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::Value;

use crate::engine::cache::{ObjectCache, ReadLog, ReadSummary};
use crate::engine::class::PrerequisiteLookup;
use crate::engine::kinds::{ExistingTreatment, KNOWN_KINDS, ScopeLookup, existing_treatment};
use crate::error::{Error, Result};

/// A resource type as requests need it: where it is served and whether it lives in namespaces.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceType {
    pub api_resource: ApiResource,
    pub namespaced: bool,
}

/// The requests of one client (one kube context). Cloning is cheap and shares the discovery
/// cache, so that each kind is looked up at most once per client.
///
/// Writes of a Comb's resources (create, replace, patch, delete) may go through another client
/// than everything else ([`KubeOps::writing_as`]): one that impersonates the layer's service
/// account, so that the API server's RBAC bounds what a Comb can do. Reads, discovery and the
/// Comb's own status keep the controller's identity.
#[derive(Clone)]
pub struct KubeOps {
    client: Client,
    writer: Writer,
    kinds: Arc<Mutex<HashMap<(String, String), ResourceType>>>,
    /// The controller's watches of this context, answering lists and gets they cover; `None`
    /// (`comb run --once`, the CLI, the tests of the engine): every read goes to the server.
    cache: Option<Arc<ObjectCache>>,
    /// Where the reads of one step went ([`KubeOps::logging_reads`]).
    reads: Option<Arc<ReadLog>>,
}

/// The client of a Comb's writes, and the user it impersonates (`None`: the controller's own).
#[derive(Clone)]
struct Writer {
    client: Client,
    user: Option<String>,
}

/// Which client a request goes through.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}

impl std::fmt::Debug for KubeOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeOps")
            .field("writes_as", &self.writer.user)
            .finish_non_exhaustive()
    }
}

impl KubeOps {
    pub fn new(client: Client) -> Self {
        KubeOps {
            writer: Writer {
                client: client.clone(),
                user: None,
            },
            client,
            kinds: Arc::new(Mutex::new(HashMap::new())),
            cache: None,
            reads: None,
        }
    }

    /// The same requests, with lists and gets answered from `cache` where its watches cover
    /// them, and the results of this client's writes kept there (read-your-writes).
    pub fn with_cache(mut self, cache: Arc<ObjectCache>) -> KubeOps {
        self.cache = Some(cache);
        self
    }

    /// The watched objects reads are answered from, if any.
    pub fn cache(&self) -> Option<&Arc<ObjectCache>> {
        self.cache.as_ref()
    }

    /// The same client, counting its reads (and its clones') afresh: one step's.
    pub fn logging_reads(&self) -> KubeOps {
        let mut ops = self.clone();
        ops.reads = Some(Arc::new(ReadLog::default()));
        ops
    }

    /// The log of [`KubeOps::logging_reads`], for reads made beside this client (a peer's).
    pub fn read_log(&self) -> Option<&Arc<ReadLog>> {
        self.reads.as_ref()
    }

    /// Where the reads went since [`KubeOps::logging_reads`].
    pub fn read_summary(&self) -> Option<ReadSummary> {
        self.reads.as_ref().map(|log| log.summary())
    }

    fn read_from_cache(&self) {
        if let Some(log) = &self.reads {
            log.cached();
        }
    }

    fn read_from_api(&self, request: &str) {
        if let Some(log) = &self.reads {
            log.api(request);
        }
    }

    /// Keeps what a write stored, so that the next read sees it before the watch brings it.
    fn remember(&self, stored: &Value) {
        if let Some(cache) = &self.cache {
            cache.wrote(stored);
        }
    }

    /// The same requests, but writes of a Comb's resources go through `writer`, a client of the
    /// same API server that impersonates `user` (e.g. `system:serviceaccount:apps:deployer`).
    /// The discovery cache is shared.
    pub fn writing_as(&self, user: &str, writer: Client) -> KubeOps {
        KubeOps {
            client: self.client.clone(),
            writer: Writer {
                client: writer,
                user: Some(user.to_string()),
            },
            kinds: self.kinds.clone(),
            cache: self.cache.clone(),
            reads: self.reads.clone(),
        }
    }

    /// The user writes impersonate; `None` when they go out as the controller.
    pub fn writes_as(&self) -> Option<&str> {
        self.writer.user.as_deref()
    }

    /// The underlying client (the controller's identity), for watches and other requests outside
    /// a Comb's own.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn client_for(&self, access: Access) -> &Client {
        match access {
            Access::Read => &self.client,
            Access::Write => &self.writer.client,
        }
    }

    /// Where `apiVersion`/`kind` is served and its scope: built-in kinds from the static table,
    /// anything else from the API server's discovery (once per client).
    pub async fn resource_type(&self, api_version: &str, kind: &str) -> Result<ResourceType> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(known) = self.lock_kinds().get(&key) {
            return Ok(known.clone());
        }
        let resolved = self.discover(api_version, kind).await?;
        self.lock_kinds().insert(key, resolved.clone());
        Ok(resolved)
    }

    fn lock_kinds(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ResourceType>> {
        // Entries are inserted whole, so a panic elsewhere never leaves the cache inconsistent.
        self.kinds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn discover(&self, api_version: &str, kind: &str) -> Result<ResourceType> {
        let request = format!("discover {api_version} {kind}");
        let group_version: GroupVersion = api_version
            .parse()
            .map_err(|error| kube_error(&request, format!("{error}")))?;
        let gvk: GroupVersionKind = group_version.with_kind(kind);
        if let Some(known) = KNOWN_KINDS
            .iter()
            .find(|known| known.api_version == api_version && known.kind == kind)
        {
            // Built-in plurals are all regular, so kube's guess is right for every one of them.
            return Ok(ResourceType {
                api_resource: ApiResource::from_gvk(&gvk),
                namespaced: known.namespaced,
            });
        }
        let (api_resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|error| api_error(&request, error))?;
        Ok(ResourceType {
            api_resource,
            namespaced: capabilities.scope == Scope::Namespaced,
        })
    }

    async fn api(
        &self,
        access: Access,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>> {
        let resource = self.resource_type(api_version, kind).await?;
        let client = self.client_for(access).clone();
        Ok(match (resource.namespaced, namespace) {
            (true, Some(namespace)) => {
                Api::namespaced_with(client, namespace, &resource.api_resource)
            }
            // Cluster-scoped kinds ignore a namespace; a namespaced kind without one means
            // "across all namespaces", as for list.
            _ => Api::all_with(client, &resource.api_resource),
        })
    }

    /// The API of one object: a namespaced one needs its namespace. A write of a cluster-scoped
    /// object that names a namespace is refused: it was placed (and checked against the
    /// layer's tenancy) as namespaced while discovery could not tell, and must not land
    /// cluster-wide now that it can.
    async fn object_api(
        &self,
        access: Access,
        request: &str,
        resource: &ManagedObject,
    ) -> Result<Api<DynamicObject>> {
        let resource_type = self
            .resource_type(&resource.api_version, &resource.kind)
            .await?;
        match (
            resource_type.namespaced,
            resource.namespace.as_deref(),
            access,
        ) {
            (true, None, _) => Err(kube_error(
                request,
                format!(
                    "{} {} is namespaced, but no namespace was given",
                    resource.kind, resource.name
                ),
            )),
            (false, Some(namespace), Access::Write) => Err(kube_error(
                request,
                format!(
                    "{} {} is cluster-scoped, but it was placed in namespace {namespace}; render it \
                     again so that the layer's tenancy is checked for what it is",
                    resource.kind, resource.name
                ),
            )),
            (_, namespace, _) => {
                self.api(access, &resource.api_version, &resource.kind, namespace)
                    .await
            }
        }
    }

    /// The object `resource` names.
    pub async fn get(&self, resource: &ManagedObject) -> Result<Value> {
        if let Some(object) = self.cache.as_ref().and_then(|cache| cache.get(resource)) {
            self.read_from_cache();
            return Ok(object);
        }
        self.get_from_server(resource).await
    }

    /// The object as the API server has it now, never the watch's copy: what a conflict calls
    /// for (the watch may not have brought the version that conflicted yet).
    async fn get_from_server(&self, resource: &ManagedObject) -> Result<Value> {
        let request = format!("get {}", resource.kind);
        self.read_from_api(&request);
        let api = self.object_api(Access::Read, &request, resource).await?;
        let object = api
            .get(&resource.name)
            .await
            .map_err(|error| api_error(&request, error))?;
        to_value(&request, &object)
    }

    /// The object `resource` names, or `None` when the server says it does not exist.
    pub async fn get_opt(&self, resource: &ManagedObject) -> Result<Option<Value>> {
        let request = format!("get {}", resource.kind);
        if let Some(object) = self.cache.as_ref().and_then(|cache| cache.get(resource)) {
            self.read_from_cache();
            return Ok(Some(object));
        }
        self.read_from_api(&request);
        let api = self.object_api(Access::Read, &request, resource).await?;
        match api.get_opt(&resource.name).await {
            Ok(Some(object)) => to_value(&request, &object).map(Some),
            Ok(None) => Ok(None),
            Err(error) => Err(api_error(&request, error)),
        }
    }

    /// The objects of a kind matching `label_selector`, in `namespace` (all namespaces without
    /// one; cluster-scoped kinds ignore it), as the server orders them.
    pub async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Value>> {
        let request = format!("list {kind}");
        if let Some(objects) = self
            .cache
            .as_ref()
            .and_then(|cache| cache.list(api_version, kind, namespace, label_selector))
        {
            self.read_from_cache();
            return Ok(objects);
        }
        self.read_from_api(&request);
        let api = self.api(Access::Read, api_version, kind, namespace).await?;
        let list = api
            .list(&ListParams::default().labels(label_selector))
            .await
            .map_err(|error| api_error(&request, error))?;
        list.items
            .iter()
            .map(|object| to_value(&request, object))
            .collect()
    }

    /// Creates `manifest` or replaces the object of its name entirely, and returns the stored
    /// object. Never writes `status`. `live` is the object as last read, if the caller has it:
    /// it saves the read (a stale one only costs a conflict and a fresh read).
    ///
    /// Objects `ensure` leaves alone: an existing `v1` PersistentVolumeClaim (its spec is
    /// immutable), and an existing `batch/v1` Job that is active or has succeeded (a Job's pod
    /// template is immutable, and a running or done Job must not start again). Any other existing
    /// Job (failed, or without status yet) is deleted with its pods and created anew.
    pub async fn ensure(&self, manifest: &Value, live: Option<&Value>) -> Result<Value> {
        let target = identity(manifest)?;
        let mut body = manifest.clone();
        if let Some(object) = body.as_object_mut() {
            object.remove("status");
        }
        let live = match live {
            Some(live) => live.clone(),
            None => match self.create(&target, &body).await? {
                Created::Stored(stored) => return Ok(stored),
                Created::AlreadyExists => self.get(&target).await?,
            },
        };
        // A stale `live`, or a workload controller writing status between our read and our
        // replace (a Deployment scaling does, several times a second), costs a conflict and a
        // fresh read; as client-go's RetryOnConflict, a few times before it counts as failed.
        let mut live = live;
        let mut attempts = 1;
        loop {
            match self.onto_existing(&target, &body, &live).await {
                Err(error) if is_conflict(&error) && attempts < CONFLICT_ATTEMPTS => {
                    attempts += 1;
                    live = self.get_from_server(&target).await?;
                }
                other => return other,
            }
        }
    }

    async fn onto_existing(
        &self,
        target: &ManagedObject,
        body: &Value,
        live: &Value,
    ) -> Result<Value> {
        match existing_treatment(&target.api_version, &target.kind, live) {
            ExistingTreatment::Keep => Ok(live.clone()),
            ExistingTreatment::Recreate => {
                self.delete(target).await?;
                match self.create(target, body).await? {
                    Created::Stored(stored) => Ok(stored),
                    Created::AlreadyExists => Err(kube_error(
                        &format!("create {}", target.kind),
                        format!(
                            "{} {} still exists after its deletion",
                            target.kind, target.name
                        ),
                    )),
                }
            }
            ExistingTreatment::Replace => self.replace(target, body, live).await,
        }
    }

    async fn create(&self, target: &ManagedObject, body: &Value) -> Result<Created> {
        let request = format!("create {}", target.kind);
        let api = self.object_api(Access::Write, &request, target).await?;
        let mut object = from_value(&request, body)?;
        // A manifest copied from a live object may carry one; the server refuses it on create.
        object.metadata.resource_version = None;
        match api.create(&PostParams::default(), &object).await {
            Ok(stored) => {
                let stored = to_value(&request, &stored)?;
                self.remember(&stored);
                Ok(Created::Stored(stored))
            }
            Err(kube::Error::Api(status))
                if status.code == 409 && status.reason == "AlreadyExists" =>
            {
                Ok(Created::AlreadyExists)
            }
            Err(error) => Err(api_error(&request, error)),
        }
    }

    async fn replace(&self, target: &ManagedObject, body: &Value, live: &Value) -> Result<Value> {
        let request = format!("replace {}", target.kind);
        let api = self.object_api(Access::Write, &request, target).await?;
        let mut object = from_value(&request, body)?;
        object.metadata.resource_version = live
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        let stored = api
            .replace(&target.name, &PostParams::default(), &object)
            .await
            .map_err(|error| api_error(&request, error))?;
        let stored = to_value(&request, &stored)?;
        self.remember(&stored);
        Ok(stored)
    }

    /// Deletes the object with propagation `Background`, so that dependents (a Job's pods) go
    /// too; without it the API server would orphan them.
    ///
    /// A cluster-scoped object is never deleted, whatever the caller recorded of it: the
    /// server's discovery decides, and the refusal is an error naming the object.
    pub async fn delete(&self, resource: &ManagedObject) -> Result<()> {
        let request = format!("delete {}", resource.kind);
        if !self
            .resource_type(&resource.api_version, &resource.kind)
            .await?
            .namespaced
        {
            return Err(kube_error(
                &request,
                format!(
                    "{} {} is cluster-scoped: comb never deletes cluster-scoped objects",
                    resource.kind, resource.name
                ),
            ));
        }
        let api = self.object_api(Access::Write, &request, resource).await?;
        api.delete(&resource.name, &DeleteParams::background())
            .await
            .map_err(|error| api_error(&request, error))?;
        if let Some(cache) = &self.cache {
            cache.removed(resource);
        }
        Ok(())
    }

    /// A JSON merge patch of the main resource; returns the patched object.
    pub async fn merge_patch(&self, resource: &ManagedObject, patch: &Value) -> Result<Value> {
        let request = format!("patch {}", resource.kind);
        let api = self.object_api(Access::Write, &request, resource).await?;
        let patched = api
            .patch(
                &resource.name,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map_err(|error| api_error(&request, error))?;
        let patched = to_value(&request, &patched)?;
        self.remember(&patched);
        Ok(patched)
    }

    fn combs(&self, group: &str, namespace: &str) -> Api<Comb> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &comb_api::api_resource(group),
        )
    }

    /// The Comb custom resource `namespace/name` of API group `group`.
    pub async fn get_comb(&self, group: &str, namespace: &str, name: &str) -> Result<Comb> {
        self.read_from_api("get Comb");
        self.combs(group, namespace)
            .get(name)
            .await
            .map_err(|error| api_error("get Comb", error))
    }

    /// Replaces the status subresource of `comb` (which must carry the resourceVersion it was
    /// read with) and returns the CR as the server stored it.
    pub async fn update_comb_status(&self, group: &str, comb: &Comb) -> Result<Comb> {
        let request = "update status of Comb";
        let (Some(namespace), Some(name)) = (
            comb.metadata.namespace.as_deref(),
            comb.metadata.name.as_deref(),
        ) else {
            return Err(kube_error(
                request,
                "the custom resource has no namespace or name".into(),
            ));
        };
        self.combs(group, namespace)
            .replace_status(name, &PostParams::default(), comb)
            .await
            .map_err(|error| api_error(request, error))
    }

    /// Writes `status` into the CR `cr`, and once more on a freshly read CR when the first write
    /// fails (a conflict looks like any other failure): the one way every status is recorded.
    /// `cr` becomes the freshly read CR when it was read again, so that a caller keeping it in
    /// memory prunes against what the server has. Returns the CR as the server stored it; the
    /// error is the last failure.
    pub async fn write_comb_status(
        &self,
        group: &str,
        cr: &mut Comb,
        status: &CombStatus,
    ) -> Result<Comb> {
        let mut with_status = cr.clone();
        with_status.status = Some(status.clone());
        let first = match self.update_comb_status(group, &with_status).await {
            Ok(stored) => return Ok(stored),
            Err(error) => error,
        };
        tracing::debug!(
            namespace = cr.metadata.namespace.as_deref(),
            comb = cr.metadata.name.as_deref(),
            error = %first,
            "writing the status failed; reading the custom resource again"
        );
        let (namespace, name) = (
            cr.metadata.namespace.clone().unwrap_or_default(),
            cr.metadata.name.clone().unwrap_or_default(),
        );
        *cr = self.get_comb(group, &namespace, &name).await?;
        let mut fresh = cr.clone();
        fresh.status = Some(status.clone());
        self.update_comb_status(group, &fresh).await
    }

    /// The last `tail_lines` lines of one container's log; `previous` reads the instance before
    /// the last restart (what a crash-looping container said before it died).
    pub async fn pod_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
        tail_lines: i64,
    ) -> Result<String> {
        let params = LogParams {
            container: Some(container.to_string()),
            previous,
            tail_lines: Some(tail_lines),
            ..LogParams::default()
        };
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .logs(pod, &params)
            .await
            .map_err(|error| api_error("log Pod", error))
    }
}

impl KubeOps {
    /// A container's log from its last `tail_lines` lines on, followed as it grows.
    pub async fn follow_pod_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        tail_lines: i64,
    ) -> Result<impl futures::AsyncBufRead + Unpin + Send + 'static> {
        let params = LogParams {
            container: Some(container.to_string()),
            follow: true,
            tail_lines: Some(tail_lines),
            ..LogParams::default()
        };
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .log_stream(pod, &params)
            .await
            .map_err(|error| Error::kube("log Pod", error))
    }
}

/// Rendering places custom Kinds by the server's discovery (cached per client).
#[async_trait]
impl ScopeLookup for KubeOps {
    async fn is_namespaced(&self, api_version: &str, kind: &str) -> Result<bool> {
        Ok(self.resource_type(api_version, kind).await?.namespaced)
    }
}

/// `check` of a class looks prerequisites up through the Comb's own client.
#[async_trait]
impl PrerequisiteLookup for KubeOps {
    async fn secret_exists(&self, namespace: &str, name: &str) -> Result<bool> {
        self.exists("v1", "Secret", namespace, name).await
    }

    async fn config_map_exists(&self, namespace: &str, name: &str) -> Result<bool> {
        self.exists("v1", "ConfigMap", namespace, name).await
    }
}

impl KubeOps {
    async fn exists(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<bool> {
        let resource = ManagedObject {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        };
        Ok(self.get_opt(&resource).await?.is_some())
    }
}

enum Created {
    Stored(Value),
    AlreadyExists,
}

/// The identity of a manifest: apiVersion, kind, namespace and name.
fn identity(manifest: &Value) -> Result<ManagedObject> {
    let field = |pointer: &str| manifest.pointer(pointer).and_then(Value::as_str);
    let kind = field("/kind").unwrap_or_default();
    match (field("/apiVersion"), field("/metadata/name")) {
        (Some(api_version), Some(name)) if !kind.is_empty() => Ok(ManagedObject {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: field("/metadata/namespace").map(str::to_string),
            name: name.to_string(),
        }),
        _ => Err(kube_error(
            &format!("ensure {kind}"),
            "the manifest lacks apiVersion, kind or metadata.name".into(),
        )),
    }
}

fn to_value(request: &str, object: &DynamicObject) -> Result<Value> {
    serde_json::to_value(object)
        .map_err(|error| kube_error(request, format!("the answer is not an object: {error}")))
}

fn from_value(request: &str, value: &Value) -> Result<DynamicObject> {
    serde_json::from_value(value.clone())
        .map_err(|error| kube_error(request, format!("the manifest is not an object: {error}")))
}

fn kube_error(request: &str, message: String) -> Error {
    Error::Kube {
        request: request.to_string(),
        message,
        source: None,
    }
}

/// The server's words for a failed request (one rule for every crate:
/// [`describe_error`](comb_kubeconfigs::describe_error)), with
/// the client's error kept so callers can tell a conflict from other failures.
fn api_error(request: &str, error: kube::Error) -> Error {
    Error::kube(request, error)
}

/// How often `ensure` writes an object that keeps changing under it (client-go's
/// `retry.DefaultRetry` has 5 steps).
const CONFLICT_ATTEMPTS: u32 = 5;

fn is_conflict(error: &Error) -> bool {
    error.status_code() == Some(409)
}
