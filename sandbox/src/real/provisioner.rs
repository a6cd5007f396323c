//! A dynamic volume provisioner for the real backend, as kind's local-path provisioner is for
//! kind: the default StorageClass `standard`, and for each claim of it a `hostPath` volume
//! `pvc-<claim uid>` of the requested size, which kube-controller-manager then binds; a
//! released volume is deleted. The emulator binds claims the same way (`sim::volume`), so a
//! StatefulSet with volume claim templates becomes Ready on both backends.

use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::api_request;
use super::proxy::ApiClient;

pub const STORAGE_CLASS: &str = "standard";
const PROVISIONER: &str = "rancher.io/local-path";
/// How often claims are looked at: quick enough that a claim is bound before a test notices.
const EVERY: Duration = Duration::from_millis(250);

/// The default StorageClass the provisioner serves.
pub fn storage_class() -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS,
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate"
    })
}

/// The volume for `claim`, when it is one of ours and still waits for one.
pub fn volume_for(claim: &Value) -> Option<Value> {
    let spec = &claim["spec"];
    let unbound = spec["volumeName"].as_str().is_none_or(str::is_empty);
    let ours = spec["storageClassName"].as_str() == Some(STORAGE_CLASS);
    if !unbound || !ours || claim["metadata"]["deletionTimestamp"].is_string() {
        return None;
    }
    let uid = claim["metadata"]["uid"].as_str()?;
    let name = format!("pvc-{uid}");
    Some(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name,
                     "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"].clone()},
            "accessModes": spec["accessModes"].clone(),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS,
            "volumeMode": spec["volumeMode"].as_str().unwrap_or("Filesystem"),
            "hostPath": {"path": format!("/var/local-path-provisioner/{name}"), "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": claim["metadata"]["namespace"].clone(),
                         "name": claim["metadata"]["name"].clone(), "uid": uid}
        }
    }))
}

/// Provisions until `shutdown`. Failures are retried on the next round.
pub async fn run(client: ApiClient, token: String, api_url: String, shutdown: CancellationToken) {
    let request = |method: Method, path: &str, body: Option<Value>| {
        let (client, token, url) = (client.clone(), token.clone(), format!("{api_url}{path}"));
        async move { api_request(&client, &token, method, &url, body.as_ref()).await }
    };
    let _ = request(
        Method::POST,
        "/apis/storage.k8s.io/v1/storageclasses",
        Some(storage_class()),
    )
    .await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        if let Ok((StatusCode::OK, claims)) =
            request(Method::GET, "/api/v1/persistentvolumeclaims", None).await
        {
            for claim in claims["items"].as_array().into_iter().flatten() {
                if let Some(volume) = volume_for(claim) {
                    let _ = request(Method::POST, "/api/v1/persistentvolumes", Some(volume)).await;
                }
            }
        }
        if let Ok((StatusCode::OK, volumes)) =
            request(Method::GET, "/api/v1/persistentvolumes", None).await
        {
            for volume in volumes["items"].as_array().into_iter().flatten() {
                let released = volume["status"]["phase"] == "Released"
                    && volume["spec"]["storageClassName"] == STORAGE_CLASS;
                if let (true, Some(name)) = (released, volume["metadata"]["name"].as_str()) {
                    let path = format!("/api/v1/persistentvolumes/{name}");
                    let _ = request(Method::DELETE, &path, None).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_for_each_waiting_claim_of_the_class() {
        let claim = json!({
            "metadata": {"name": "data-db-0", "namespace": "platform", "uid": "u1"},
            "spec": {"storageClassName": "standard", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}
        });
        let volume = volume_for(&claim).expect("a volume");
        assert_eq!(volume["metadata"]["name"], "pvc-u1");
        assert_eq!(volume["spec"]["capacity"]["storage"], "1Gi");
        assert_eq!(volume["spec"]["claimRef"]["name"], "data-db-0");

        let mut bound = claim.clone();
        bound["spec"]["volumeName"] = json!("pvc-u1");
        assert_eq!(volume_for(&bound), None);
        let mut other = claim.clone();
        other["spec"]["storageClassName"] = json!("fast");
        assert_eq!(volume_for(&other), None);
    }
}
