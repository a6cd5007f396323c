//! The client edge (reference §7, "client role"): every request a Comb makes, over a
//! `kube::Client` with dynamic resources and objects as JSON values.
//!
//! Every method returns a value, never panics, and fails with [`Error::Kube`] where the API
//! server answered with a failure (its message names the request and keeps the server's own
//! words: `Kubernetes API error (get Pod): 404 NotFound: pods "nats-0" not found`), or with
//! [`Error::Request`] for a request comb would not send or whose answer it could not read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use comb_api::ownership::{Ownership, create_only, same_object_only};
use comb_api::{Comb, CombAnswer, CombStatus, LabelKeys, ManagedObject};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::Resource as _;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use kube::core::{ApiResource, GroupVersion, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::{Value, json};

use crate::engine::cache::{AsApplied, ObjectCache, ReadLog, ReadSummary};
// What comb's field managers own and the one-time takeover of what an older comb replaced are
// comb-api's, shared with the replication of upstreams.
use crate::engine::class::PrerequisiteLookup;
use crate::engine::kinds::{ExistingTreatment, KNOWN_KINDS, ScopeLookup, existing_treatment};
use crate::engine::ownership::{Claim, refusal, with_live_keep_marks};
pub use crate::engine::projection::STOP_MANAGER;
use crate::engine::projection::{CombSelector, Fingerprint, Projection};
use crate::engine::values::object_name;
use crate::error::{Error, Result};
pub use comb_api::managed_fields::{
    FIELD_MANAGER, LEGACY_MANAGERS, applied_by, migrated_managed_fields, now_rfc3339,
};

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
    /// The client of a Comb's writes, and the user it impersonates (`None`: the controller's
    /// own).
    writer: Client,
    writes_as: Option<String>,
    kinds: Arc<Mutex<HashMap<(String, String), ResourceType>>>,
    /// What comb knows of this context's objects: under `comb run` the controller's watches
    /// feed it (`watched`) and it answers the lists and gets they cover; otherwise (`comb run
    /// --once`, the CLI, the tests of the engine) every read goes to the server, and it keeps
    /// only what comb applied.
    objects: Arc<ObjectCache>,
    watched: bool,
    /// Where the reads of one step went ([`KubeOps::logging_reads`]).
    reads: Option<Arc<ReadLog>>,
}

/// Which client a request goes through.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
    /// A write that deletes: never of a cluster-scoped object.
    Delete,
}

impl std::fmt::Debug for KubeOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeOps")
            .field("writes_as", &self.writes_as)
            .finish_non_exhaustive()
    }
}

impl KubeOps {
    /// The requests of `client`; `keys` name comb's labels and annotations, which the
    /// projections of what it reads keep.
    pub fn new(client: Client, keys: LabelKeys) -> Self {
        KubeOps {
            writer: client.clone(),
            writes_as: None,
            client,
            kinds: Arc::new(Mutex::new(HashMap::new())),
            objects: Arc::new(ObjectCache::new(keys)),
            watched: false,
            reads: None,
        }
    }

    /// The same requests, with lists and gets answered from `cache` where the watches feeding
    /// it cover them, and the results of this client's writes kept there (read-your-writes).
    pub fn with_cache(mut self, cache: Arc<ObjectCache>) -> KubeOps {
        self.objects = cache;
        self.watched = true;
        self
    }

    /// The store the watches feed, if reads are answered from watches.
    pub fn cache(&self) -> Option<&Arc<ObjectCache>> {
        self.watched.then_some(&self.objects)
    }

    /// The label keys of comb's labels and annotations.
    pub fn keys(&self) -> &LabelKeys {
        self.objects.keys()
    }

    /// What comb reads of `object` of `api_version`/`kind` (as the API server sent it).
    pub fn project(&self, api_version: &str, kind: &str, object: &Value) -> Result<Projection> {
        Projection::of(api_version, kind, object, self.keys()).map_err(|error| {
            let place = match object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
            {
                Some(namespace) if !namespace.is_empty() => format!("{namespace}/"),
                _ => String::new(),
            };
            let name = object_name(object).unwrap_or_default();
            Error::Unprojectable(format!("{kind} {place}{name} cannot be read: {error}"))
        })
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

    /// Remembers that `resource` (`object` as the server has it) stands as comb rendered it
    /// with `digest` (see [`ObjectCache::stands_as_applied`]); nothing when comb applied none
    /// of its fields.
    pub fn stands_as_applied(&self, resource: &ManagedObject, object: &Projection, digest: &str) {
        if let Some(fields) = object.managed.comb {
            let applied = AsApplied {
                digest: Fingerprint::of(digest),
                fields,
            };
            self.objects.stands_as_applied(resource, applied);
        }
    }

    /// What comb's applied fields and digest were when it last knew `resource` stood as
    /// rendered, if it remembers.
    pub fn as_applied(&self, resource: &ManagedObject) -> Option<AsApplied> {
        self.objects.as_applied(resource)
    }

    /// The same requests, but writes of a Comb's resources go through `writer`, a client of the
    /// same API server that impersonates `user` (e.g. `system:serviceaccount:apps:deployer`).
    /// The discovery cache is shared.
    pub fn writing_as(&self, user: &str, writer: Client) -> KubeOps {
        KubeOps {
            writer,
            writes_as: Some(user.to_string()),
            ..self.clone()
        }
    }

    /// The underlying client (the controller's identity), for watches and other requests outside
    /// a Comb's own.
    pub fn client(&self) -> &Client {
        &self.client
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
            .map_err(|error| Error::request(&request, format!("{error}")))?;
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
            .map_err(|error| Error::kube(&request, error))?;
        Ok(ResourceType {
            api_resource,
            namespaced: capabilities.scope == Scope::Namespaced,
        })
    }

    /// The API of a resource type in `namespace`, through the client `access` goes by.
    fn api(
        &self,
        access: Access,
        resource: &ResourceType,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        let client = match access {
            Access::Read => self.client.clone(),
            Access::Write | Access::Delete => self.writer.clone(),
        };
        match (resource.namespaced, namespace) {
            (true, Some(namespace)) => {
                Api::namespaced_with(client, namespace, &resource.api_resource)
            }
            // Cluster-scoped kinds ignore a namespace; a namespaced kind without one means
            // "across all namespaces", as for list.
            _ => Api::all_with(client, &resource.api_resource),
        }
    }

    /// The API of one object: a namespaced one needs its namespace. A write of a cluster-scoped
    /// object that names a namespace is refused: it was placed (and checked against the
    /// layer's tenancy) as namespaced while discovery could not tell, and must not land
    /// cluster-wide now that it can. A delete of a cluster-scoped object is refused whatever it
    /// names.
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
            (true, None, _) => Err(Error::request(
                request,
                format!(
                    "{} {} is namespaced, but no namespace was given",
                    resource.kind, resource.name
                ),
            )),
            (false, _, Access::Delete) => Err(Error::request(
                request,
                format!(
                    "{} {} is cluster-scoped: comb never deletes cluster-scoped objects",
                    resource.kind, resource.name
                ),
            )),
            (false, Some(namespace), Access::Write) => Err(Error::request(
                request,
                format!(
                    "{} {} is cluster-scoped, but it was placed in namespace {namespace}; render it \
                     again so that the layer's tenancy is checked for what it is",
                    resource.kind, resource.name
                ),
            )),
            (_, namespace, _) => Ok(self.api(access, &resource_type, namespace)),
        }
    }

    /// What comb knows of the object `resource` names, or `None` when the server says it does
    /// not exist.
    pub async fn get_opt(&self, resource: &ManagedObject) -> Result<Option<Projection>> {
        if let Some(object) = self.objects.get(resource) {
            self.read_from_cache();
            return Ok(Some(object));
        }
        self.get_fresh(resource).await
    }

    /// [`KubeOps::get_opt`] asking the API server, never the watch's copy: what a conflict
    /// calls for (the watch may not have brought the version that conflicted yet).
    pub async fn get_fresh(&self, resource: &ManagedObject) -> Result<Option<Projection>> {
        self.get_whole(resource)
            .await?
            .map(|whole| self.project(&resource.api_version, &resource.kind, &whole))
            .transpose()
    }

    /// The whole object as the API server has it now (every field, `managedFields` with their
    /// sets), or `None` when it does not exist: what deploy compares a manifest with when it
    /// does not know comb's fields to stand, and what a takeover of older writes rewrites.
    pub async fn get_whole(&self, resource: &ManagedObject) -> Result<Option<Value>> {
        let request = format!("get {}", resource.kind);
        self.read_from_api(&request);
        let api = self.object_api(Access::Read, &request, resource).await?;
        match api.get_opt(&resource.name).await {
            Ok(Some(object)) => to_value(&request, &object).map(Some),
            Ok(None) => Ok(None),
            Err(error) => Err(Error::kube(&request, error)),
        }
    }

    /// What comb knows of the objects of a kind that `selector` selects, in `namespace` (all
    /// namespaces without one; cluster-scoped kinds ignore it), as the server orders them.
    pub async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: &CombSelector,
    ) -> Result<Vec<Projection>> {
        if let Some(objects) = self.objects.list(api_version, kind, namespace, selector) {
            self.read_from_cache();
            return Ok(objects);
        }
        self.list_whole(
            api_version,
            kind,
            namespace,
            &selector.label_selector(self.keys()),
        )
        .await?
        .iter()
        .map(|object| self.project(api_version, kind, object))
        .collect()
    }

    /// The whole objects of a kind matching `label_selector`, always from the API server: for
    /// what reads more than a step (`comb logs` reads the containers of the Pods' specs).
    pub async fn list_whole(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Value>> {
        let request = format!("list {kind}");
        self.read_from_api(&request);
        let resource = self.resource_type(api_version, kind).await?;
        let api = self.api(Access::Read, &resource, namespace);
        let list = api
            .list(&ListParams::default().labels(label_selector))
            .await
            .map_err(|error| Error::kube(&request, error))?;
        list.items
            .iter()
            .map(|object| to_value(&request, object))
            .collect()
    }

    /// Server-side applies `manifest` as field manager [`FIELD_MANAGER`] (forced) and returns the
    /// stored object, for the Comb of `claim` and only if the object is that Comb's
    /// ([`comb_api::ownership`]). Never writes `status`. `live` is the object as last read, if
    /// the caller has it; without it the apply creates the object or meets one.
    ///
    /// Ownership first: an object that exists (`live`, or one the create meets) and is not the
    /// Comb's is left untouched, and the answer is [`Error::NotOwned`] naming it and who wrote
    /// it. A new object is made by an apply that cannot take over an existing one
    /// ([`create_only`]): one made meanwhile by someone else makes the create fail, and what is
    /// there is read and decided on. An existing object the Comb's is applied to as that very
    /// object ([`same_object_only`]): one deleted and made anew since it was decided on is
    /// refused by the API server, not taken over.
    ///
    /// Applying leaves the fields other managers own alone (the deployment controller's revision
    /// annotation, the restart annotation [`RESTART_MANAGER`] writes, what the server defaulted),
    /// removes what comb applied before and no longer renders, and writes nothing when nothing
    /// changes: the server keeps the object and its resourceVersion. An apply carries no
    /// resourceVersion, so a workload controller writing status meanwhile costs no conflict; and
    /// being forced, it takes fields another manager changed back, as a replace did.
    ///
    /// An object last written by an older comb (full replaces, no apply of its own) is migrated
    /// once before the apply ([`migrated_managed_fields`]): what the older comb's writes own
    /// becomes comb's applied fields, so that the apply removes what the manifest no longer
    /// has, as a replace would. `kept` names fields (paths of field names) left to their
    /// previous owner (the restart annotation, whoever wrote it).
    ///
    /// What [`FIELD_MANAGER`]'s apply leaves to a stop ([`STOP_MANAGER`]) is given back once the
    /// apply is through, so that the server's defaults return (a Deployment without
    /// `replicas` runs one again, a CronJob without `suspend` runs again).
    ///
    /// Objects `ensure` leaves alone: an existing `v1` PersistentVolumeClaim (its spec is
    /// immutable), and an existing `batch/v1` Job that is active or has succeeded (a Job's pod
    /// template is immutable, and a running or done Job must not start again). Any other existing
    /// Job (failed, or without status yet) is deleted with its pods and created anew.
    pub async fn ensure(
        &self,
        manifest: &Value,
        live: Option<&Projection>,
        kept: &[Vec<String>],
        claim: &Claim<'_>,
    ) -> Result<Projection> {
        let target = identity(manifest)?;
        let body = apply_body(manifest);
        // Whether a PVC or a Job exists decides what happens to it, so it is looked up.
        let mut live = match live {
            Some(live) => Some(live.clone()),
            None if existence_matters(&target) => self.get_opt(&target).await?,
            None => None,
        };
        let mut attempts = 1;
        let existing = loop {
            if let Some(existing) = live {
                break existing;
            }
            match self
                .apply_as(&target, &create_only(&body), FIELD_MANAGER)
                .await
            {
                // Something stands under that name (made meanwhile, not labelled as the Comb's,
                // or not in the watch's copy yet): what it is decides.
                Err(error) if is_conflict(&error) && attempts < CONFLICT_ATTEMPTS => {
                    attempts += 1;
                    live = self.get_fresh(&target).await?;
                }
                other => return other,
            }
        };
        if let Ownership::NotOwned(why) = claim.decide(&existing) {
            // Who wrote it is in the whole object only; the refusal is worth the read.
            let whole = self.get_whole(&target).await.ok().flatten();
            return Err(Error::NotOwned(refusal(
                &target,
                &why,
                whole.as_ref(),
                self.keys(),
                claim,
            )));
        }
        // The keep marks on the object win over the manifest's own.
        let body = with_live_keep_marks(&body, &existing, self.keys()).unwrap_or(body);
        match existing_treatment(&target.api_version, &target.kind, &existing) {
            ExistingTreatment::Keep => return Ok(existing),
            ExistingTreatment::Recreate => {
                return self.recreate(&target, &existing, &body).await;
            }
            ExistingTreatment::Replace => self.migrate(&target, &existing, kept).await?,
        }
        let uid = existing.uid.as_deref();
        let applied = self
            .apply_as(&target, &same_object_only(&body, uid), FIELD_MANAGER)
            .await?;
        if applied.managed.stopped {
            let bare = same_object_only(&bare(manifest), applied.uid.as_deref());
            return self.apply_as(&target, &bare, STOP_MANAGER).await;
        }
        Ok(applied)
    }

    /// Takes over what an older comb wrote by replace (see [`migrated_managed_fields`]): one
    /// merge patch of `managedFields`, conditional on the resourceVersion read; a conflict
    /// reads the object again, as client-go's RetryOnConflict, a few times. Nothing when comb
    /// applied the object before or no older write of comb's owns anything.
    async fn migrate(
        &self,
        target: &ManagedObject,
        live: &Projection,
        kept: &[Vec<String>],
    ) -> Result<()> {
        if live.applied_by_comb() {
            return Ok(());
        }
        // Taking over needs the older writes' sets of fields, which only the whole object has.
        let Some(mut live) = self.get_whole(target).await? else {
            return Ok(());
        };
        let mut attempts = 1;
        loop {
            let Some(fields) = migrated_managed_fields(&live, kept, &now_rfc3339()) else {
                return Ok(());
            };
            let patch = json!({"metadata": {
                "resourceVersion": live.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null),
                "managedFields": fields,
            }});
            match self.merge_patch(target, &patch, Some(FIELD_MANAGER)).await {
                Err(error) if is_conflict(&error) && attempts < CONFLICT_ATTEMPTS => {
                    attempts += 1;
                    // The watch may not have brought the version that conflicted yet.
                    match self.get_whole(target).await? {
                        Some(fresh) => live = fresh,
                        None => return Ok(()),
                    }
                }
                other => return other.map(drop),
            }
        }
    }

    /// A forced server-side apply of the partial object `body` as field manager `manager` (e.g.
    /// [`STOP_MANAGER`] scaling to zero); returns the stored object. Unlike a patch, what
    /// `manager` applies can be given back by applying without it.
    pub async fn apply_as(
        &self,
        target: &ManagedObject,
        body: &Value,
        manager: &str,
    ) -> Result<Projection> {
        let request = format!("apply {}", target.kind);
        let api = self.object_api(Access::Write, &request, target).await?;
        let stored = api
            .patch(
                &target.name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(|error| Error::kube(&request, error))?;
        self.project(
            &target.api_version,
            &target.kind,
            &to_value(&request, &stored)?,
        )
    }

    /// Deletes the object and creates it anew (a Job that failed or has not started, as
    /// `live` shows it: a Job that started since is not deleted, and the next step decides
    /// again). The create cannot take over an object someone made under the name in between
    /// ([`create_only`]): the API server refuses it, and the next step decides on what is there.
    async fn recreate(
        &self,
        target: &ManagedObject,
        live: &Projection,
        body: &Value,
    ) -> Result<Projection> {
        self.delete(target, unchanged_since(live)).await?;
        self.apply_as(target, &create_only(body), FIELD_MANAGER)
            .await
            .map_err(|error| {
                if is_conflict(&error) {
                    let still = format!(
                        "{} {} exists again after its deletion (made anew by someone else, or not \
                         gone yet); the next step decides again",
                        target.kind, target.name
                    );
                    Error::request(format!("create {}", target.kind), still)
                } else {
                    error
                }
            })
    }

    /// Deletes the object with propagation `Background`, so that dependents (a Job's pods) go
    /// too; without it the API server would orphan them. The delete carries `preconditions`
    /// (see [`unchanged_since`], [`same_object`]): the API server refuses it with 409 Conflict
    /// when the object is not the one the caller decided on, and the caller decides again.
    ///
    /// A cluster-scoped object is never deleted, whatever the caller recorded of it: the
    /// server's discovery decides, and the refusal is an error naming the object.
    pub async fn delete(
        &self,
        resource: &ManagedObject,
        preconditions: Preconditions,
    ) -> Result<()> {
        let request = format!("delete {}", resource.kind);
        let api = self.object_api(Access::Delete, &request, resource).await?;
        let params = DeleteParams {
            preconditions: Some(preconditions),
            ..DeleteParams::background()
        };
        api.delete(&resource.name, &params)
            .await
            .map_err(|error| Error::kube(&request, error))?;
        self.objects.removed(resource);
        Ok(())
    }

    /// A JSON merge patch of the main resource, by field manager `manager` when given, who then
    /// owns what it changed (e.g. [`RESTART_MANAGER`] the restart annotation, which comb's apply
    /// leaves alone); returns the patched object.
    pub async fn merge_patch(
        &self,
        resource: &ManagedObject,
        patch: &Value,
        manager: Option<&str>,
    ) -> Result<Value> {
        let request = format!("patch {}", resource.kind);
        let api = self.object_api(Access::Write, &request, resource).await?;
        let params = PatchParams {
            field_manager: manager.map(str::to_string),
            ..PatchParams::default()
        };
        let patched = api
            .patch(&resource.name, &params, &Patch::Merge(patch))
            .await
            .map_err(|error| Error::kube(&request, error))?;
        to_value(&request, &patched)
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
            .map_err(|error| Error::kube("get Comb", error))
    }

    /// Replaces the status subresource of `comb` (which must carry the resourceVersion it was
    /// read with) and returns the CR as the server stored it.
    pub async fn update_comb_status(&self, group: &str, comb: Comb) -> Result<Comb> {
        let what = "update status of Comb";
        let (namespace, name) = comb_namespace_and_name(what, &comb)?;
        let body = serde_json::to_vec(&comb)
            .map_err(|error| Error::kube(what, kube::Error::SerdeError(error)))?;
        let request = comb_request(group, namespace).replace_subresource(
            "status",
            name,
            &PostParams::default(),
            body,
        );
        self.write_comb_keeping_spec(what, request, comb).await
    }

    /// Sets the finalizers of `cr` to `finalizers` (conditional on the resourceVersion `cr` was
    /// read with) and returns the CR as the server stored it.
    pub async fn set_comb_finalizers(
        &self,
        group: &str,
        cr: &Comb,
        finalizers: &[String],
    ) -> Result<Comb> {
        let what = "patch finalizers of Comb";
        let (namespace, name) = comb_namespace_and_name(what, cr)?;
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": cr.metadata.resource_version,
        }});
        let request = comb_request(group, namespace).patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        );
        self.write_comb_keeping_spec(what, request, cr.clone())
            .await
    }

    /// Sends `request`, a write of `sent` that leaves its spec alone, and returns the CR as the
    /// server stored it, its spec `sent`'s ([`CombAnswer`]: the answer's is not built again).
    async fn write_comb_keeping_spec(
        &self,
        what: &str,
        request: std::result::Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        sent: Comb,
    ) -> Result<Comb> {
        let request =
            request.map_err(|error| Error::kube(what, kube::Error::BuildRequest(error)))?;
        let answer: CombAnswer = self
            .client
            .request(request)
            .await
            .map_err(|error| Error::kube(what, error))?;
        Ok(sent.answered(answer))
    }

    /// Writes `status` into the CR `cr` (conditional on the resourceVersion `cr` was read
    /// with): the one way every status is recorded. Returns the CR as the server stored it.
    ///
    /// When the write fails, the CR is read again and the status is built again on it by
    /// `rebuild`, never written as it was built for the older copy: a conflict means someone
    /// wrote the CR since (another replica's status, a spec edit, a label), and what that
    /// write recorded counts. `rebuild` answers `None` when the fresh CR's status is newer
    /// truth than the step's (it observed a later generation): it stands, unwritten over. A
    /// conflict may repeat this up to [`CONFLICT_ATTEMPTS`] writes; any other failure gets one
    /// more write, as the reference's (a failed read means no second write). `cr` becomes the
    /// freshly read CR when it was read again, so that a caller keeping it in memory prunes
    /// against what the server has; the error is the last failure.
    ///
    /// A status equal to the one the CR records is not written: `cr` is what the server has
    /// (as far as the caller knows), and it is returned as it is.
    pub async fn write_comb_status(
        &self,
        group: &str,
        cr: &mut Comb,
        status: &CombStatus,
        rebuild: impl Fn(&Comb) -> Option<CombStatus>,
    ) -> Result<Comb> {
        let mut status = status.clone();
        let mut attempts = 1;
        loop {
            if cr.status.as_ref() == Some(&status) {
                return Ok(cr.clone());
            }
            let mut with_status = cr.clone();
            with_status.status = Some(status);
            let error = match self.update_comb_status(group, with_status).await {
                Ok(stored) => return Ok(stored),
                Err(error) => error,
            };
            if attempts == CONFLICT_ATTEMPTS || (attempts > 1 && !is_conflict(&error)) {
                return Err(error);
            }
            attempts += 1;
            tracing::debug!(
                namespace = cr.metadata.namespace.as_deref(),
                comb = cr.metadata.name.as_deref(),
                error = %error,
                "writing the status failed; reading the custom resource again to build it anew"
            );
            let (namespace, name) = (
                cr.metadata.namespace.clone().unwrap_or_default(),
                cr.metadata.name.clone().unwrap_or_default(),
            );
            *cr = self.get_comb(group, &namespace, &name).await?;
            match rebuild(cr) {
                Some(rebuilt) => status = rebuilt,
                None => return Ok(cr.clone()),
            }
        }
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
            .map_err(|error| Error::kube("log Pod", error))
    }

    /// Whether the core object `kind` `namespace/name` exists.
    async fn exists(&self, kind: &str, namespace: &str, name: &str) -> Result<bool> {
        let resource = ManagedObject {
            api_version: "v1".to_string(),
            kind: kind.to_string(),
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
            uid: None,
        };
        Ok(self.get_opt(&resource).await?.is_some())
    }

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
        self.exists("Secret", namespace, name).await
    }

    async fn config_map_exists(&self, namespace: &str, name: &str) -> Result<bool> {
        self.exists("ConfigMap", namespace, name).await
    }
}

/// The preconditions of a delete decided on `copy`: that very object (its uid), as it was
/// then (its resourceVersion). Any write in between (relabelled, marked keep, replaced, or a
/// controller's status) makes the API server refuse the delete with 409 Conflict; the caller
/// reads the object again and decides again. A copy without them (not read from a server)
/// sets none of them.
pub fn unchanged_since(copy: &Projection) -> Preconditions {
    Preconditions {
        uid: copy.uid.as_deref().map(str::to_string),
        resource_version: copy.resource_version.as_deref().map(str::to_string),
    }
}

/// The precondition of a delete that holds whatever the object went through, as long as it
/// is the object decided on (its uid): not one created anew under the same name.
pub fn same_object(copy: &Projection) -> Preconditions {
    Preconditions {
        resource_version: None,
        ..unchanged_since(copy)
    }
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
            uid: None,
        }),
        _ => Err(Error::request(
            format!("ensure {kind}"),
            "the manifest lacks apiVersion, kind or metadata.name",
        )),
    }
}

fn to_value(request: &str, object: &DynamicObject) -> Result<Value> {
    serde_json::to_value(object)
        .map_err(|error| Error::request(request, format!("the answer is not an object: {error}")))
}

/// How often a conditional write is decided again on a fresh read when it meets a conflict
/// (client-go's `retry.DefaultRetry` has 5 steps): a migration of `managedFields`
/// ([`KubeOps::ensure`]), a delete decided on a copy, a status. The apply itself carries no
/// resourceVersion and is forced, so it meets no conflict to retry.
pub const CONFLICT_ATTEMPTS: u32 = 5;

/// The field manager of the restart annotation (`comb restart`): comb's apply leaves it.
pub const RESTART_MANAGER: &str = "comb-restart";

/// What an apply sends of a manifest: everything but `status` and the server's own metadata
/// (a manifest copied from a live object carries them; an apply refuses `managedFields`, and a
/// resourceVersion would make it conditional).
fn apply_body(manifest: &Value) -> Value {
    let mut body = manifest.clone();
    if let Some(object) = body.as_object_mut() {
        object.remove("status");
    }
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        for system in [
            "resourceVersion",
            "managedFields",
            "uid",
            "creationTimestamp",
            "generation",
            "selfLink",
        ] {
            metadata.remove(system);
        }
    }
    body
}

/// The object's identity alone: applied by a manager, it gives back every field that manager
/// applied before.
fn bare(manifest: &Value) -> Value {
    let mut metadata = serde_json::Map::new();
    for key in ["name", "namespace"] {
        if let Some(value) = manifest.pointer(&format!("/metadata/{key}")) {
            metadata.insert(key.to_string(), value.clone());
        }
    }
    json!({
        "apiVersion": manifest.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": manifest.get("kind").cloned().unwrap_or(Value::Null),
        "metadata": metadata,
    })
}

/// Kinds whose existing objects `ensure` treats apart ([`existing_treatment`]).
fn existence_matters(target: &ManagedObject) -> bool {
    matches!(
        (target.api_version.as_str(), target.kind.as_str()),
        ("v1", "PersistentVolumeClaim") | ("batch/v1", "Job")
    )
}

pub fn is_conflict(error: &Error) -> bool {
    error.status_code() == Some(409)
}

/// The requests of Combs of API group `group` in `namespace`.
fn comb_request(group: &str, namespace: &str) -> kube::core::Request {
    kube::core::Request::new(Comb::url_path(
        &comb_api::api_resource(group),
        Some(namespace),
    ))
}

/// The namespace and name of the CR `comb`, which a request `what` about it needs.
fn comb_namespace_and_name<'a>(what: &str, comb: &'a Comb) -> Result<(&'a str, &'a str)> {
    match (
        comb.metadata.namespace.as_deref(),
        comb.metadata.name.as_deref(),
    ) {
        (Some(namespace), Some(name)) => Ok((namespace, name)),
        _ => Err(Error::request(
            what,
            "the custom resource has no namespace or name",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, operation: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "apps/v1",
               "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    fn restart() -> Vec<String> {
        [
            "spec",
            "template",
            "metadata",
            "annotations",
            "comb.internal/restartedAt",
        ]
        .iter()
        .map(|name| name.to_string())
        .collect()
    }

    #[test]
    fn older_writes_are_handed_to_comb_as_applied() {
        let legacy = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {
                "f:metadata": {"f:annotations": {".": {}, "f:comb.internal/restartedAt": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}},
        });
        let controller = entry(
            "kube-controller-manager",
            "Update",
            json!({"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}}),
        );
        let live = json!({"apiVersion": "apps/v1", "metadata": {"managedFields": [
            entry("unknown", "Update", legacy), controller.clone(),
        ]}});
        let migrated =
            migrated_managed_fields(&live, &[restart()], "2026-02-02T00:00:00Z").expect("migrated");
        assert_eq!(
            migrated,
            json!([
                entry("unknown", "Update", json!({"f:spec": {"f:template": {"f:metadata": {
                    "f:annotations": {"f:comb.internal/restartedAt": {}}}}}})),
                controller,
                {"manager": "comb", "operation": "Apply", "apiVersion": "apps/v1",
                 "time": "2026-02-02T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
                     "f:metadata": {"f:labels": {"f:app": {}}},
                     "f:spec": {"f:replicas": {}, "f:template": {
                         "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}},
                 }},
            ])
        );
    }

    #[test]
    fn nothing_to_migrate() {
        let applied = json!({"metadata": {"managedFields": [
            entry("comb", "Apply", json!({"f:spec": {}})),
            entry("unknown", "Update", json!({"f:spec": {"f:replicas": {}}})),
        ]}});
        let others = json!({"metadata": {"managedFields": [
            entry("kubectl", "Update", json!({"f:spec": {"f:replicas": {}}})),
        ]}});
        let only_kept = json!({"metadata": {"managedFields": [
            entry("", "Update", json!({"f:spec": {"f:template": {"f:metadata": {"f:annotations": {
                "f:comb.internal/restartedAt": {}}}}}})),
        ]}});
        for (what, live) in [
            ("comb applied it", applied),
            ("no older comb wrote it", others),
            ("only kept fields", only_kept),
            ("no managedFields", json!({"metadata": {}})),
        ] {
            assert_eq!(
                migrated_managed_fields(&live, &[restart()], "now"),
                None,
                "{what}"
            );
        }
    }

    #[test]
    fn apply_bodies() {
        let manifest = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "db", "namespace": "apps", "resourceVersion": "7", "uid": "u",
                         "managedFields": [], "labels": {"a": "b"}},
            "spec": {"ports": []}, "status": {"loadBalancer": {}}});
        assert_eq!(
            apply_body(&manifest),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "db", "namespace": "apps", "labels": {"a": "b"}},
                   "spec": {"ports": []}})
        );
        assert_eq!(
            bare(&manifest),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": "apps"}})
        );
    }
}
