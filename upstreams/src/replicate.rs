//! Replication (`replicate_into` of the K8s upstream): Secrets and ConfigMaps copied from the
//! peer's namespace into the borrowing Comb's, labelled as the Comb's, on every borrowing step.
//!
//! Opt-in per object, never implicit, on both sides: the Comb (or its layer) names what it
//! copies, and the source says it may be copied (`<labelPrefix>replicable: "true"`, as Linkerd's
//! `mirror.linkerd.io/exported`); a copy whose source stops saying so is removed. The source is
//! read as the borrowing layer's identity ([`UpstreamContext::source_reader`]), so that the
//! source cluster's RBAC decides, not the controller's own rights. Messages name objects, never
//! their values.
//!
//! An object of that name in the Comb's namespace that is not the Comb's by the ownership rule
//! ([`comb_api::ownership`], the one every write of comb's asks) is never written or deleted:
//! [`Error::NotOwned`] names it. A new copy is made by an apply that cannot take over an object
//! made meanwhile ([`create_only`]), an existing one written as that very object
//! ([`same_object_only`]).
//!
//! Copies are written as comb writes a Comb's resources (docs/writes.md, "How comb writes"): a forced
//! server-side apply as field manager [`FIELD_MANAGER`], only when the copy differs, and a copy
//! an older comb created or replaced is first taken over ([`takeover_patch`]), so that a key
//! the source no longer has leaves the copy too.

use comb_api::ManagedObject;
use comb_api::managed_fields::{FIELD_MANAGER, now_rfc3339, takeover_patch};
use comb_api::names::object_name_problem;
use comb_api::ownership::{
    Claimant, Holder, Ownership, create_only, managers_of, not_owned_message, ownership,
    recorded_in, same_object_only,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::ApiResource;
use serde_json::{Map, Value, json};

use crate::args::{check_keys, describe};
use crate::error::{Error, Result};
use crate::k8s::PEER_READ_TIMEOUT;
use crate::upstream::{SourceReader, UpstreamContext};
use comb_kubeconfigs::describe_error;

/// What can be replicated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaKind {
    Secret,
    ConfigMap,
}

impl ReplicaKind {
    /// The Kind, as manifests and messages write it.
    pub fn kind(self) -> &'static str {
        match self {
            ReplicaKind::Secret => "Secret",
            ReplicaKind::ConfigMap => "ConfigMap",
        }
    }

    fn api_resource(self) -> ApiResource {
        match self {
            ReplicaKind::Secret => ApiResource::erase::<Secret>(&()),
            ReplicaKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
        }
    }

    /// The fields that carry the content (what a refresh compares and copies).
    fn content_fields(self) -> &'static [&'static str] {
        match self {
            ReplicaKind::Secret => &["type", "data"],
            ReplicaKind::ConfigMap => &["data", "binaryData"],
        }
    }
}

/// One object to copy: `replicate: [{kind, name}]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    pub kind: ReplicaKind,
    pub name: String,
}

impl Replica {
    pub fn secret(name: impl Into<String>) -> Replica {
        Replica {
            kind: ReplicaKind::Secret,
            name: name.into(),
        }
    }

    pub fn config_map(name: impl Into<String>) -> Replica {
        Replica {
            kind: ReplicaKind::ConfigMap,
            name: name.into(),
        }
    }
}

/// The `replicate` argument of `class`: objects `{kind: Secret|ConfigMap, name}`, each once.
pub(crate) fn parse_replicas(class: &str, items: &[Value]) -> Result<Vec<Replica>> {
    let fail = |message: String| Error::Resolve(format!("{class}: {message}"));
    let mut replicas: Vec<Replica> = Vec::new();
    for item in items {
        let Value::Object(map) = item else {
            return Err(fail(format!(
                "a replicate entry is an object {{kind, name}}, got {}",
                describe(item)
            )));
        };
        check_keys(
            &format!("{class}: a replicate entry"),
            map,
            &["kind", "name"],
        )?;
        let kind = match map.get("kind").and_then(Value::as_str) {
            Some("Secret") => ReplicaKind::Secret,
            Some("ConfigMap") => ReplicaKind::ConfigMap,
            Some(other) => {
                return Err(fail(format!(
                    "a replicate entry has the kind {other}, but only Secret and ConfigMap are replicated"
                )));
            }
            None => {
                return Err(fail(
                    "a replicate entry has no kind (Secret or ConfigMap)".into(),
                ));
            }
        };
        let name = map
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty())
            .ok_or_else(|| {
                fail(format!(
                    "a replicate entry of kind {} has no name",
                    kind.kind()
                ))
            })?;
        // The name goes into the path of every request about the copy and its source.
        if let Some(problem) = object_name_problem("", name) {
            return Err(fail(format!(
                "a replicate entry of kind {}: {problem}",
                kind.kind()
            )));
        }
        let replica = Replica {
            kind,
            name: name.to_string(),
        };
        if replicas.contains(&replica) {
            return Err(fail(format!("{} {name} is replicated twice", kind.kind())));
        }
        replicas.push(replica);
    }
    Ok(replicas)
}

/// The copy of `source` for the Comb of `ctx`: its name, the Comb's namespace and labels, an
/// annotation saying where it comes from, and the source's content.
fn desired_copy(replica: &Replica, source: &Value, ctx: &UpstreamContext, origin: &str) -> Value {
    let mut copy = Map::new();
    copy.insert("apiVersion".into(), json!("v1"));
    copy.insert("kind".into(), json!(replica.kind.kind()));
    copy.insert(
        "metadata".into(),
        json!({
            "name": replica.name,
            "namespace": ctx.namespace,
            "labels": ctx.comb_labels(),
            "annotations": {replicated_from_key(ctx): origin},
        }),
    );
    for field in replica.kind.content_fields() {
        if let Some(value) = source.get(*field).filter(|value| !value.is_null()) {
            copy.insert((*field).to_string(), value.clone());
        }
    }
    Value::Object(copy)
}

fn replicated_from_key(ctx: &UpstreamContext) -> String {
    format!("{}replicated-from", ctx.labels.prefix())
}

/// Whether `source` (at `place`) opts in to being copied: its annotation
/// `<labelPrefix>replicable` is `"true"`. The refusal names the object and the missing opt-in.
fn check_replicable(source: &Value, ctx: &UpstreamContext, place: &str) -> Result<()> {
    let key = ctx.labels.replicable_annotation();
    let opted_in = source
        .pointer("/metadata/annotations")
        .and_then(|annotations| annotations.get(&key))
        .and_then(Value::as_str)
        == Some("true");
    if opted_in {
        return Ok(());
    }
    Err(Error::Replication(format!(
        "{place} is not replicable: annotate it {key}=true to allow copies"
    )))
}

/// What to do with the Comb's copy.
#[derive(Debug, PartialEq)]
enum Write {
    /// Apply the desired copy (it is missing or differs).
    Apply,
    /// It is up to date.
    Keep,
}

/// How many times a takeover is tried on a fresh read when someone else wrote the copy between
/// the read and the takeover (409), as client-go's RetryOnConflict.
const CONFLICT_ATTEMPTS: usize = 3;

/// Compares the live copy with the desired one. A live object that is not the Comb's by the
/// ownership rule (its record, an adoption: labels are what anyone who may label can put on an
/// object) is someone else's: an error naming whose it looks like, never overwritten.
fn plan_write(
    live: Option<&Value>,
    desired: &Value,
    ctx: &UpstreamContext,
    what: &str,
) -> Result<Write> {
    let Some(live) = live else {
        return Ok(Write::Apply);
    };
    if let Ownership::NotOwned(why) = copy_ownership(live, desired, ctx) {
        return Err(Error::NotOwned(not_owned_message(
            what,
            &why,
            &managers_of(live),
            &ctx.labels,
            &claimant(ctx),
        )));
    }
    let label = |object: &Value, key: &str| {
        object
            .pointer("/metadata/labels")
            .and_then(|labels| labels.get(key))
            .cloned()
    };
    let labels_kept = desired
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(key, value)| label(live, key).as_ref() == Some(value));
    let annotation = |object: &Value| {
        object
            .pointer("/metadata/annotations")
            .and_then(|annotations| annotations.get(replicated_from_key(ctx)))
            .cloned()
    };
    let content_same = ["type", "data", "binaryData"]
        .iter()
        .all(|field| live.get(*field).filter(|v| !v.is_null()) == desired.get(*field));
    if labels_kept && annotation(live) == annotation(desired) && content_same {
        return Ok(Write::Keep);
    }
    Ok(Write::Apply)
}

/// The Comb of `ctx`, as the ownership rule names it.
fn claimant(ctx: &UpstreamContext) -> Claimant<'_> {
    Claimant {
        namespace: &ctx.namespace,
        name: &ctx.name,
    }
}

/// Whether `live`, an object where the copy `desired` goes, is the Comb of `ctx`'s.
fn copy_ownership(live: &Value, desired: &Value, ctx: &UpstreamContext) -> Ownership {
    let text = |pointer: &str| desired.pointer(pointer).and_then(Value::as_str);
    let identity = ManagedObject::new(
        "v1",
        text("/kind").unwrap_or_default(),
        text("/metadata/namespace"),
        text("/metadata/name").unwrap_or_default(),
    );
    ownership(
        &Holder::of_object(live, &ctx.labels),
        recorded_in(&ctx.record, &identity),
        &claimant(ctx),
    )
}

/// Hands what an older comb wrote of the copy `live` to [`FIELD_MANAGER`] as applied (one
/// merge patch of `managedFields`, conditional on the resourceVersion read; a conflict reads
/// the copy again, a few times). Nothing when comb applied it before. The patch goes through
/// `writer` (the copies' writes), a read again through `reader` (the context's own user).
async fn take_over(
    reader: &Api<DynamicObject>,
    writer: &Api<DynamicObject>,
    name: &str,
    live: &Value,
    place: &str,
) -> std::result::Result<(), kube::Error> {
    let mut live = live.clone();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    for attempt in 1.. {
        let Some(patch) = takeover_patch(&live, &[], &now_rfc3339()) else {
            return Ok(());
        };
        match writer.patch(name, &params, &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < CONFLICT_ATTEMPTS => {
                let Some(fresh) = reader.get_opt(name).await? else {
                    return Ok(());
                };
                live = match serde_json::to_value(&fresh) {
                    Ok(fresh) => fresh,
                    // Unreadable as JSON: the apply that follows says what is wrong.
                    Err(_) => return Ok(()),
                };
                tracing::debug!(
                    place,
                    attempt,
                    "taking over the copy again after a conflict"
                );
            }
            other => return other.map(drop),
        }
    }
    Ok(())
}

/// Copies `replicas` from `from_namespace` in kube context `from_context` into the Comb's
/// namespace in its own context, applying each copy that differs, in order; the first failure
/// stops. Returns the copies, with their uids, for the Comb's managed resources. A source that
/// is not (or no longer) replicable is a failure, and the Comb's copy of it is removed.
pub(crate) async fn replicate(
    ctx: &UpstreamContext,
    from_context: &str,
    from_namespace: &str,
    replicas: &[Replica],
) -> Result<Vec<ManagedObject>> {
    if replicas.is_empty() {
        return Ok(Vec::new());
    }
    let fail = |message: String| Error::Replication(message);
    let same_server = ctx
        .pool
        .server_url(from_context)
        .map_err(|e| fail(e.to_string()))?
        == ctx
            .pool
            .server_url(&ctx.context)
            .map_err(|e| fail(e.to_string()))?;
    if same_server && from_namespace == ctx.namespace {
        return Err(fail(format!(
            "the upstream's namespace {from_namespace} in context {from_context} is this Comb's own \
             namespace on the same API server, so there is nothing to copy"
        )));
    }
    // The source is read as the borrowing layer's identity in the source's cluster, so that its
    // RBAC decides what may be copied; the copies are the Comb's resources, written as every
    // other one.
    let source_client = match &ctx.source_reader {
        SourceReader::Controller => ctx.pool.client(from_context).await,
        SourceReader::User(user) => ctx.pool.impersonating_client(from_context, user).await,
        SourceReader::Unnamed(why) => return Err(fail(why.clone())),
    }
    .map_err(|e| fail(e.to_string()))?;
    let writer_client = match &ctx.act_as {
        Some(user) => ctx.pool.impersonating_client(&ctx.context, user).await,
        None => ctx.pool.client(&ctx.context).await,
    }
    .map_err(|e| fail(e.to_string()))?;
    let target_client = ctx
        .pool
        .client(&ctx.context)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let reader = match &ctx.source_reader {
        SourceReader::User(user) => format!(" as {user}"),
        SourceReader::Controller | SourceReader::Unnamed(_) => String::new(),
    };

    let mut copied = Vec::with_capacity(replicas.len());
    for replica in replicas {
        let copy = copy_one(
            ctx,
            replica,
            &source_client,
            &target_client,
            &writer_client,
            &reader,
            from_context,
            from_namespace,
        )
        .await;
        match copy {
            Ok(made) => copied.push(made),
            Err(error) if copied.is_empty() => return Err(error),
            Err(error) => {
                return Err(Error::Partial {
                    made: copied,
                    error: Box::new(error),
                });
            }
        }
    }
    Ok(copied)
}

/// Copies one `replica` (see [`replicate`]): the source read through `source_client` (as
/// `reader` says), the copy read through `target_client` and written through `writer_client`.
#[allow(clippy::too_many_arguments)]
async fn copy_one(
    ctx: &UpstreamContext,
    replica: &Replica,
    source_client: &kube::Client,
    target_client: &kube::Client,
    writer_client: &kube::Client,
    reader: &str,
    from_context: &str,
    from_namespace: &str,
) -> Result<ManagedObject> {
    let fail = |message: String| Error::Replication(message);
    let origin = |replica: &Replica| format!("{from_context}/{from_namespace}/{}", replica.name);
    let kind = replica.kind.kind();
    let name = &replica.name;
    let resource = replica.kind.api_resource();
    let source_api: Api<DynamicObject> =
        Api::namespaced_with(source_client.clone(), from_namespace, &resource);
    let target = Target {
        reader: Api::namespaced_with(target_client.clone(), &ctx.namespace, &resource),
        writer: Api::namespaced_with(writer_client.clone(), &ctx.namespace, &resource),
        place: format!(
            "{kind} {name} in namespace {} of context {}",
            ctx.namespace, ctx.context
        ),
    };
    let source_place =
        format!("{kind} {name} in namespace {from_namespace} of context {from_context}");

    // The peer's server gets the same time bound as reading the peer Comb.
    let source = match tokio::time::timeout(PEER_READ_TIMEOUT, source_api.get(name)).await {
        Ok(Ok(object)) => to_value(&object, &source_place)?,
        Ok(Err(e)) => {
            let error = describe_error(&e);
            return Err(fail(format!(
                "reading {source_place}{reader} failed: {error}"
            )));
        }
        Err(_) => {
            let seconds = PEER_READ_TIMEOUT.as_secs();
            return Err(fail(format!(
                "reading {source_place}{reader} failed: no answer within {seconds}s"
            )));
        }
    };
    let desired = desired_copy(replica, &source, ctx, &origin(replica));
    if let Err(refusal) = check_replicable(&source, ctx, &source_place) {
        return Err(remove_copy(&target, &desired, ctx, refusal).await);
    }
    let uid = write_copy(&target, &desired, ctx, name, &source_place).await?;
    Ok(ManagedObject::new("v1", kind, Some(&ctx.namespace), name.clone()).with_uid(uid.as_deref()))
}

/// Where a copy goes: read as the context's own user, written as the Comb's writer.
struct Target {
    reader: Api<DynamicObject>,
    writer: Api<DynamicObject>,
    /// `Secret db-password in namespace team-a of context dev`, as messages name it.
    place: String,
}

/// Writes the copy `desired` of `name` where `target` says, if it differs and whatever stands
/// there is the Comb's; answers the copy's uid. A copy made meanwhile by someone else under the
/// name is not taken over: the create fails, and what is there is decided on, a few times.
async fn write_copy(
    target: &Target,
    desired: &Value,
    ctx: &UpstreamContext,
    name: &str,
    source_place: &str,
) -> Result<Option<String>> {
    let failed = |e: kube::Error| {
        Error::Replication(format!(
            "writing {} failed: {}",
            target.place,
            describe_error(&e)
        ))
    };
    // No resourceVersion: a write between the read and the apply costs no 409.
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for attempt in 1.. {
        let live = target
            .reader
            .get_opt(name)
            .await
            .map_err(|e| {
                Error::Replication(format!(
                    "reading {} failed: {}",
                    target.place,
                    describe_error(&e)
                ))
            })?
            .map(|object| to_value(&object, &target.place))
            .transpose()?;
        let uid = |object: &Value| {
            object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let write = plan_write(live.as_ref(), desired, ctx, &target.place)?;
        let body = match (&write, &live) {
            (Write::Keep, Some(live)) => return Ok(uid(live)),
            (_, Some(live)) => {
                take_over(&target.reader, &target.writer, name, live, &target.place)
                    .await
                    .map_err(failed)?;
                same_object_only(desired, uid(live).as_deref())
            }
            (_, None) => create_only(desired),
        };
        // Names only: the content of a Secret never goes into a log line.
        tracing::info!(
            kind = desired["kind"].as_str(),
            name,
            from = %source_place,
            to = %target.place,
            "replicating"
        );
        match target
            .writer
            .patch(name, &params, &Patch::Apply(&body))
            .await
        {
            Ok(written) => return Ok(written.metadata.uid),
            // Made meanwhile under the name: decided again on what is there.
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < CONFLICT_ATTEMPTS => {
                tracing::debug!(place = %target.place, attempt, "the copy's name was taken meanwhile; deciding again");
            }
            Err(e) => return Err(failed(e)),
        }
    }
    Ok(None)
}

/// Removes the Comb's copy where `target` says, if there is one and it is the Comb's (its
/// source is not replicable any more: a copy must not outlive the source's consent), and
/// answers `refusal` saying so. An object there that is not the Comb's is left alone.
async fn remove_copy(
    target: &Target,
    desired: &Value,
    ctx: &UpstreamContext,
    refusal: Error,
) -> Error {
    let name = desired["metadata"]["name"].as_str().unwrap_or_default();
    let live = match target.reader.get_opt(name).await {
        Ok(Some(object)) => to_value(&object, &target.place),
        Ok(None) => return refusal,
        Err(e) => {
            return Error::Replication(format!(
                "{refusal}; reading its copy, {}, failed: {}",
                target.place,
                describe_error(&e)
            ));
        }
    };
    let Ok(live) = live else {
        return refusal;
    };
    let labelled = live
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(ctx.labels.name_label()))
        .and_then(Value::as_str)
        == Some(ctx.name.as_str());
    if !labelled || !copy_ownership(&live, desired, ctx).is_owned() {
        return refusal;
    }
    // Conditional on the copy decided on: not one made anew since.
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: live
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match target.writer.delete(name, &params).await {
        Ok(_) => {
            tracing::info!(place = %target.place, "removed a copy whose source is not replicable");
            Error::Replication(format!(
                "{refusal}; its copy, {}, was removed",
                target.place
            ))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => refusal,
        Err(e) => Error::Replication(format!(
            "{refusal}; removing its copy, {}, failed: {}",
            target.place,
            describe_error(&e)
        )),
    }
}

fn to_value(object: &DynamicObject, place: &str) -> Result<Value> {
    serde_json::to_value(object)
        .map_err(|error| Error::Replication(format!("{place} is not an object: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::context;

    #[test]
    fn replicate_entries() {
        let parsed = parse_replicas(
            "K",
            &[
                json!({"kind": "Secret", "name": "db-credentials"}),
                json!({"kind": "ConfigMap", "name": "db-config"}),
            ],
        )
        .unwrap();
        assert_eq!(
            parsed,
            [
                Replica::secret("db-credentials"),
                Replica::config_map("db-config")
            ]
        );
        let cases = [
            (
                json!("db-credentials"),
                "K: a replicate entry is an object {kind, name}, got a string",
            ),
            (
                json!({"kind": "Secret", "name": "a", "namespace": "x"}),
                "K: a replicate entry: unknown key(s) namespace (known: kind, name)",
            ),
            (
                json!({"kind": "Pod", "name": "a"}),
                "K: a replicate entry has the kind Pod, but only Secret and ConfigMap are replicated",
            ),
            (
                json!({"name": "a"}),
                "K: a replicate entry has no kind (Secret or ConfigMap)",
            ),
            (
                json!({"kind": "ConfigMap"}),
                "K: a replicate entry of kind ConfigMap has no name",
            ),
            (
                json!({"kind": "Secret", "name": "db-password?x=1"}),
                "K: a replicate entry of kind Secret: 'db-password?x=1' is not a Kubernetes \
                 object name (a DNS-1123 subdomain: lowercase letters, digits, - and ., \
                 alphanumeric at both ends, at most 253 characters)",
            ),
        ];
        for (entry, message) in cases {
            assert_eq!(
                parse_replicas("K", &[entry]).unwrap_err().to_string(),
                message
            );
        }
        let twice = [
            json!({"kind": "Secret", "name": "a"}),
            json!({"kind": "Secret", "name": "a"}),
        ];
        assert_eq!(
            parse_replicas("K", &twice).unwrap_err().to_string(),
            "K: Secret a is replicated twice"
        );
    }

    fn secret_copy() -> Value {
        let source = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db-credentials", "namespace": "platform", "resourceVersion": "7",
                         "labels": {"team": "db"}, "uid": "u"},
            "type": "Opaque", "data": {"password": "c2VjcmV0"}, "immutable": true
        });
        desired_copy(
            &Replica::secret("db-credentials"),
            &source,
            &context(),
            "prod/platform/db-credentials",
        )
    }

    #[test]
    fn copies_carry_the_combs_labels_and_only_the_content() {
        assert_eq!(
            secret_copy(),
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": "db-credentials", "namespace": "platform",
                    "labels": {"app.kubernetes.io/managed-by": "comb", "comb.internal/comb": "db",
                               "comb.internal/comb-namespace": "platform"},
                    "annotations": {"comb.internal/replicated-from": "prod/platform/db-credentials"}
                },
                "type": "Opaque", "data": {"password": "c2VjcmV0"}
            })
        );
        let config = desired_copy(
            &Replica::config_map("c"),
            &json!({"data": {"a": "1"}, "binaryData": {"b": "AA=="}, "type": "x"}),
            &context(),
            "o",
        );
        assert_eq!(config["data"], json!({"a": "1"}));
        assert_eq!(config["binaryData"], json!({"b": "AA=="}));
        assert!(config.get("type").is_none());
    }

    #[test]
    fn only_a_source_that_opts_in_is_copied() {
        let ctx = context();
        let place = "Secret ledger-keys in namespace billing of context prod";
        let source = |annotations: Value| {
            json!({"metadata": {"name": "ledger-keys", "annotations": annotations},
                   "data": {"key": "c2VjcmV0"}})
        };
        let refusal = "Secret ledger-keys in namespace billing of context prod is not \
                       replicable: annotate it comb.internal/replicable=true to allow copies";
        let cases = [
            (source(json!({"comb.internal/replicable": "true"})), None),
            (
                source(json!({"comb.internal/replicable": "false"})),
                Some(refusal),
            ),
            (
                source(json!({"comb.internal/replicable": "yes"})),
                Some(refusal),
            ),
            (
                source(json!({"other.example/replicable": "true"})),
                Some(refusal),
            ),
            (source(Value::Null), Some(refusal)),
            (json!({"metadata": {"name": "ledger-keys"}}), Some(refusal)),
        ];
        for (source, expected) in cases {
            let got = check_replicable(&source, &ctx, place)
                .err()
                .map(|e| e.to_string());
            assert_eq!(got.as_deref(), expected, "{source}");
        }
        // The prefix is the controller's.
        let mut custom = context();
        custom.labels = comb_api::LabelKeys::new("example.com/");
        let opted = json!({"metadata": {"annotations": {"example.com/replicable": "true"}}});
        assert!(check_replicable(&opted, &custom, place).is_ok());
    }

    #[test]
    fn writes_only_what_differs_and_never_someone_elses() {
        let mut ctx = context();
        ctx.record = vec![
            ManagedObject::new("v1", "Secret", Some("platform"), "db-credentials")
                .with_uid(Some("u-copy")),
        ];
        let desired = secret_copy();
        let what = "Secret db-credentials in namespace platform of context dev";
        assert_eq!(
            plan_write(None, &desired, &ctx, what).unwrap(),
            Write::Apply
        );

        let mut live = desired.clone();
        live["metadata"]["resourceVersion"] = json!("42");
        live["metadata"]["uid"] = json!("u-copy");
        live["metadata"]["labels"]["extra"] = json!("kept");
        assert_eq!(
            plan_write(Some(&live), &desired, &ctx, what).unwrap(),
            Write::Keep
        );

        let mut changed = live.clone();
        changed["data"]["password"] = json!("bmV3");
        assert_eq!(
            plan_write(Some(&changed), &desired, &ctx, what).unwrap(),
            Write::Apply
        );
        let mut relabelled = live.clone();
        relabelled["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("helm");
        assert_eq!(
            plan_write(Some(&relabelled), &desired, &ctx, what).unwrap(),
            Write::Apply
        );

        // Someone else's Secret of that name, even one labelled as the Comb's: never written.
        let mut foreign = live.clone();
        foreign["metadata"]["uid"] = json!("u-theirs");
        foreign["metadata"]["labels"] = json!({"team": "db"});
        foreign["metadata"]["managedFields"] =
            json!([{"manager": "kubectl-create", "operation": "Update"}]);
        let error = plan_write(Some(&foreign), &desired, &ctx, what).unwrap_err();
        assert!(matches!(error, Error::NotOwned(_)));
        assert_eq!(
            error.to_string(),
            "Secret db-credentials in namespace platform of context dev exists and is not this \
             Comb's: the object comb made for this Comb is gone and this one was made since, by \
             someone else (written by kubectl-create); comb leaves it untouched (to hand it to \
             this Comb, annotate it comb.internal/adopt=platform/db)"
        );
        assert!(!error.to_string().contains("c2VjcmV0"));
        let mut forged = live.clone();
        forged["metadata"]["uid"] = json!("u-labelled");
        ctx.record.clear();
        assert!(matches!(
            plan_write(Some(&forged), &desired, &ctx, what),
            Err(Error::NotOwned(_))
        ));
        // Handed to the Comb by its owner: taken (as it stands, for it holds the copy already).
        forged["metadata"]["annotations"]["comb.internal/adopt"] = json!("platform/db");
        assert_eq!(
            plan_write(Some(&forged), &desired, &ctx, what).unwrap(),
            Write::Keep
        );
    }
}
