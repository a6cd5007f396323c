//! Legacy discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{g}`,
//! `/apis/{g}/{v}`), built from the served resource types.

use serde_json::{Value, json};

use crate::resources::ResourceType;

/// The Kubernetes version the sandbox presents itself as.
pub const KUBERNETES_MINOR: &str = "32";
pub const GIT_VERSION: &str = "v1.32.0";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBERNETES_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z",
        "goVersion": "go1.23.3",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_versions(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": entries, "preferredVersion": preferred})
}

pub fn group_list(groups: &[(String, Vec<String>)]) -> Value {
    let groups: Vec<Value> = groups.iter().map(|(g, v)| group_versions(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(group: &str, versions: &[String]) -> Value {
    let mut doc = group_versions(group, versions);
    if let Some(map) = doc.as_object_mut() {
        let mut ordered = serde_json::Map::new();
        ordered.insert("kind".into(), json!("APIGroup"));
        ordered.insert("apiVersion".into(), json!("v1"));
        ordered.extend(std::mem::take(map));
        *map = ordered;
    }
    doc
}

fn subresource_verbs(subresource: &str) -> Vec<&'static str> {
    match subresource {
        "log" => vec!["get"],
        _ => vec!["get", "patch", "update"],
    }
}

/// The APIResourceList of one group version.
pub fn resource_list(group_version: &str, types: &[ResourceType]) -> Value {
    let mut resources = Vec::new();
    for rt in types {
        let mut entry = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": rt.verbs,
        });
        if !rt.short_names.is_empty() {
            entry["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            entry["categories"] = json!(rt.categories);
        }
        resources.push(entry);
        for sub in &rt.subresources {
            let mut entry = json!({
                "name": format!("{}/{sub}", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": subresource_verbs(sub),
            });
            if sub == "scale" {
                entry["group"] = json!("autoscaling");
                entry["version"] = json!("v1");
                entry["kind"] = json!("Scale");
            }
            resources.push(entry);
        }
    }
    let mut doc = json!({"kind": "APIResourceList"});
    if group_version != "v1" {
        doc["apiVersion"] = json!("v1");
    }
    doc["groupVersion"] = json!(group_version);
    doc["resources"] = Value::Array(resources);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    #[test]
    fn core_resource_list_has_short_names_and_subresources() {
        let core: Vec<ResourceType> = builtins()
            .into_iter()
            .filter(|r| r.group.is_empty())
            .collect();
        let doc = resource_list("v1", &core);
        let resources = doc["resources"].as_array().expect("resources");
        let find = |name: &str| {
            resources
                .iter()
                .find(|r| r["name"] == name)
                .cloned()
                .expect(name)
        };
        assert_eq!(find("configmaps")["shortNames"], json!(["cm"]));
        assert_eq!(find("pods/log")["verbs"], json!(["get"]));
        assert_eq!(
            find("services/status")["verbs"],
            json!(["get", "patch", "update"])
        );
        assert!(doc.get("apiVersion").is_none());
    }

    #[test]
    fn groups_prefer_their_first_version() {
        let doc = group_list(&[("apps".into(), vec!["v1".into()])]);
        assert_eq!(
            doc["groups"][0]["preferredVersion"]["groupVersion"],
            "apps/v1"
        );
        assert_eq!(group("apps", &["v1".into()])["kind"], "APIGroup");
    }
}
