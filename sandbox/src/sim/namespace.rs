//! What the controller-manager puts into every namespace shortly after its creation: the
//! `default` ServiceAccount (serviceaccount controller) and the `kube-root-ca.crt` ConfigMap
//! with the cluster's CA bundle (root-ca-cert-publisher). Both come back when deleted, and the
//! ConfigMap's bundle is put back when changed, as on a real cluster.

use serde_json::{Value, json};

use super::{Action, Kind, Plan, object};

pub const SERVICE_ACCOUNT: &str = "default";
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
const CA_KEY: &str = "ca.crt";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// Whether a change of this object (of `kind`) is one the namespace's plan answers.
pub fn is_published(kind: Kind, name: &str) -> bool {
    match kind {
        Kind::ServiceAccount => name == SERVICE_ACCOUNT,
        Kind::ConfigMap => name == ROOT_CA_CONFIG_MAP,
        _ => false,
    }
}

/// The writes that give `namespace` its default ServiceAccount and CA bundle, given what it
/// has of them now.
pub fn plan(
    namespace: &Value,
    service_account: Option<&Value>,
    root_ca: Option<&Value>,
    ca_pem: &str,
) -> Plan {
    if object::is_deleting(namespace) {
        return Plan::default();
    }
    let ns = object::name(namespace);
    let mut actions = Vec::new();
    if service_account.is_none() {
        actions.push(Action::Create(
            Kind::ServiceAccount,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": SERVICE_ACCOUNT, "namespace": ns}}),
        ));
    }
    let data = json!({CA_KEY: ca_pem});
    match root_ca {
        None => actions.push(Action::Create(
            Kind::ConfigMap,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": ROOT_CA_CONFIG_MAP, "namespace": ns,
                                "annotations": {"kubernetes.io/description": DESCRIPTION}},
                   "data": data}),
        )),
        Some(current) if current["data"] != data => {
            let mut updated = current.clone();
            updated["data"] = data;
            if let Some(map) = updated.as_object_mut() {
                map.remove("binaryData");
            }
            actions.push(Action::Update(Kind::ConfigMap, updated));
        }
        Some(_) => {}
    }
    Plan::new(actions, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn created(plan: &Plan) -> Vec<(Kind, String)> {
        plan.actions
            .iter()
            .map(|a| match a {
                Action::Create(kind, o) | Action::Update(kind, o) => {
                    assert_eq!(object::namespace(o), "team");
                    (*kind, object::name(o).to_string())
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn every_namespace_gets_its_service_account_and_ca_bundle() {
        let ns = json!({"metadata": {"name": "team"}});
        let fresh = plan(&ns, None, None, PEM);
        assert_eq!(
            created(&fresh),
            [
                (Kind::ServiceAccount, "default".to_string()),
                (Kind::ConfigMap, "kube-root-ca.crt".to_string())
            ]
        );
        let Action::Create(_, config_map) = &fresh.actions[1] else {
            panic!("a create")
        };
        assert_eq!(config_map["data"]["ca.crt"], PEM);

        let sa = json!({"metadata": {"name": "default", "namespace": "team"}});
        let mut ca = config_map.clone();
        assert_eq!(plan(&ns, Some(&sa), Some(&ca), PEM), Plan::default());

        ca["data"]["ca.crt"] = json!("tampered");
        let repaired = plan(&ns, Some(&sa), Some(&ca), PEM);
        let [Action::Update(Kind::ConfigMap, updated)] = repaired.actions.as_slice() else {
            panic!("an update: {repaired:?}")
        };
        assert_eq!(updated["data"], json!({"ca.crt": PEM}));

        let terminating =
            json!({"metadata": {"name": "team", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(plan(&terminating, None, None, PEM), Plan::default());
    }
}
