//! A dynamic provisioner: every PersistentVolumeClaim is bound at once to a volume
//! `pvc-<claim uid>` of the requested size in the default `standard` storage class.

use serde_json::{Value, json};

use super::{Action, Kind, Plan, object};

const DEFAULT_STORAGE_CLASS: &str = "standard";

pub fn plan(claim: &Value) -> Plan {
    if object::is_deleting(claim) {
        return Plan::default();
    }
    let spec = &claim["spec"];
    if spec["volumeName"].as_str().is_none_or(str::is_empty) {
        let mut bound = claim.clone();
        bound["spec"]["volumeName"] = json!(format!("pvc-{}", object::uid(claim)));
        if bound["spec"]["storageClassName"].is_null() {
            bound["spec"]["storageClassName"] = json!(DEFAULT_STORAGE_CLASS);
        }
        let annotations = &mut bound["metadata"]["annotations"];
        annotations["pv.kubernetes.io/bind-completed"] = json!("yes");
        annotations["pv.kubernetes.io/bound-by-controller"] = json!("yes");
        annotations["volume.kubernetes.io/storage-provisioner"] = json!("rancher.io/local-path");
        return Plan::new(
            vec![Action::Update(Kind::PersistentVolumeClaim, bound)],
            None,
        );
    }
    let status = json!({
        "phase": "Bound",
        "accessModes": spec["accessModes"],
        "capacity": {"storage": spec["resources"]["requests"]["storage"]},
    });
    Plan::new(
        Action::status_change(Kind::PersistentVolumeClaim, claim, status)
            .into_iter()
            .collect(),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_bound_then_reported_bound() {
        let claim = json!({
            "metadata": {"name": "data-db-0", "namespace": "default", "uid": "c1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        });
        let Plan { actions, .. } = plan(&claim);
        let [Action::Update(Kind::PersistentVolumeClaim, bound)] = actions.as_slice() else {
            panic!("expected a binding, got {actions:?}");
        };
        assert_eq!(bound["spec"]["volumeName"], "pvc-c1");
        assert_eq!(bound["spec"]["storageClassName"], "standard");
        let Plan { actions, .. } = plan(bound);
        let [Action::UpdateStatus(Kind::PersistentVolumeClaim, reported)] = actions.as_slice()
        else {
            panic!("expected a status, got {actions:?}");
        };
        assert_eq!(
            reported["status"],
            json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}})
        );
        let mut settled = bound.clone();
        settled["status"] = reported["status"].clone();
        assert_eq!(plan(&settled), Plan::default());
    }
}
