//! The endpoints and EndpointSlice controllers: a Service with a selector gets an Endpoints
//! object of its name and one EndpointSlice (`<service>-<random>`, owned by the Service) listing
//! the addresses of the Pods it selects, ready or not. Services without a selector are left to
//! whoever manages their endpoints (comb's bridges do).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use super::{Action, Kind, Plan, object, pod};

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// The selector of a Service, when it has one the controllers act on.
pub fn selector(service: &Value) -> Option<&Map<String, Value>> {
    if service["spec"]["type"] == "ExternalName" {
        return None;
    }
    service["spec"]["selector"]
        .as_object()
        .filter(|s| !s.is_empty())
}

/// Whether `labels` satisfy a Service selector (every key equal).
pub fn selects(selector: &Map<String, Value>, labels: &Value) -> bool {
    selector
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value))
}

/// The Services of one namespace that have a selector, indexed so that a Pod's change finds the
/// Services selecting it without a scan of all of them: every Service is filed under the first
/// pair of its selector, which any Pod it selects must carry. With a scan, each Pod change in a
/// namespace of thousands of Services visited all of them, and the emulator's time grew with
/// their square.
#[derive(Debug, Default)]
pub struct SelectorIndex {
    selectors: BTreeMap<String, Map<String, Value>>,
    /// `(label key, label value)` -> the Services whose selector's first pair it is.
    by_first_pair: HashMap<(String, String), BTreeSet<String>>,
}

/// A label value as the index files it: a selector's values are strings (validation refuses
/// others), and anything else is filed by its JSON text so that it still only meets its equal.
fn label_text(value: &Value) -> Cow<'_, str> {
    match value.as_str() {
        Some(text) => Cow::Borrowed(text),
        None => Cow::Owned(value.to_string()),
    }
}

fn first_pair(selector: &Map<String, Value>) -> Option<(String, String)> {
    let (key, value) = selector.iter().next()?;
    Some((key.clone(), label_text(value).into_owned()))
}

impl SelectorIndex {
    /// Records the selector of Service `service` (`None`: it has none, or is gone).
    pub fn set(&mut self, service: &str, selector: Option<&Map<String, Value>>) {
        if let Some(old) = self.selectors.remove(service)
            && let Some(pair) = first_pair(&old)
            && let Some(services) = self.by_first_pair.get_mut(&pair)
        {
            services.remove(service);
            if services.is_empty() {
                self.by_first_pair.remove(&pair);
            }
        }
        let Some(selector) = selector else {
            return;
        };
        if let Some(pair) = first_pair(selector) {
            self.by_first_pair
                .entry(pair)
                .or_default()
                .insert(service.to_string());
        }
        self.selectors.insert(service.to_string(), selector.clone());
    }

    /// The names of the Services whose selector `labels` (a Pod's `metadata.labels`) satisfy.
    pub fn selecting<'a>(&'a self, labels: &'a Value) -> impl Iterator<Item = &'a str> + 'a {
        labels
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(key, value)| {
                self.by_first_pair
                    .get(&(key.clone(), label_text(value).into_owned()))
            })
            .flatten()
            .filter(|service| {
                self.selectors
                    .get(*service)
                    .is_some_and(|selector| selects(selector, labels))
            })
            .map(String::as_str)
    }
}

/// The selector as a label-selector string for a list (`app=web,tier=front`).
pub fn selector_string(selector: &Map<String, Value>) -> String {
    selector
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The label selector of the slices the controller manages for the Service `name`.
pub fn slice_selector(name: &str) -> String {
    format!("{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// A Pod's port named `name`, from its containers.
fn named_port(pod: &Value, name: &str) -> Option<i64> {
    pod["spec"]["containers"]
        .as_array()?
        .iter()
        .flat_map(|c| c["ports"].as_array().map(Vec::as_slice).unwrap_or_default())
        .find(|p| p["name"] == name)?["containerPort"]
        .as_i64()
}

/// The Service's ports as endpoint ports: the target port, resolved by name on the Pods.
fn ports(service: &Value, pods: &[&Value]) -> Vec<Value> {
    let service_ports = service["spec"]["ports"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    service_ports
        .iter()
        .filter_map(|p| {
            let port = match &p["targetPort"] {
                Value::Number(n) => n.as_i64(),
                Value::String(name) => match name.parse::<i64>() {
                    Ok(number) => Some(number),
                    Err(_) => pods.iter().find_map(|pod| named_port(pod, name)),
                },
                _ => p["port"].as_i64(),
            }?;
            let mut entry = Map::new();
            if let Some(name) = p["name"].as_str().filter(|n| !n.is_empty()) {
                entry.insert("name".into(), json!(name));
            }
            entry.insert("port".into(), json!(port));
            entry.insert(
                "protocol".into(),
                json!(p["protocol"].as_str().unwrap_or("TCP")),
            );
            if let Some(app) = p.get("appProtocol") {
                entry.insert("appProtocol".into(), app.clone());
            }
            Some(Value::Object(entry))
        })
        .collect()
}

fn target(pod: &Value) -> Value {
    json!({
        "kind": "Pod",
        "namespace": object::namespace(pod),
        "name": object::name(pod),
        "uid": object::uid(pod),
    })
}

/// What the controllers write for `service`, given the Pods it selects in its namespace, the
/// slices they manage for it, and its Endpoints object. `service` is `None` once it is gone.
pub fn plan(
    namespace: &str,
    name: &str,
    service: Option<&Value>,
    selected: &[&Value],
    slices: &[&Value],
    endpoints: Option<&Value>,
) -> Plan {
    let Some(service) = service.filter(|s| !object::is_deleting(s)) else {
        // The Service is gone: so is its Endpoints object (slices go with their owner).
        return Plan::new(
            endpoints
                .map(|e| Action::delete(Kind::Endpoints, e))
                .into_iter()
                .collect(),
            None,
        );
    };
    if selector(service).is_none() {
        return Plan::default();
    }
    let mut pods: Vec<&Value> = selected
        .iter()
        .copied()
        .filter(|p| {
            pod::is_active(p)
                && p["status"]["podIP"]
                    .as_str()
                    .is_some_and(|ip| !ip.is_empty())
        })
        .collect();
    pods.sort_by_key(|p| object::name(p).to_string());
    let ports = ports(service, &pods);
    let mut plan = Plan::default();

    // The Endpoints object.
    let address = |p: &Value| json!({"ip": p["status"]["podIP"], "nodeName": pod::NODE_NAME, "targetRef": target(p)});
    let ready: Vec<Value> = pods
        .iter()
        .filter(|p| pod::is_ready(p))
        .map(|p| address(p))
        .collect();
    let not_ready: Vec<Value> = pods
        .iter()
        .filter(|p| !pod::is_ready(p))
        .map(|p| address(p))
        .collect();
    let mut subset = Map::new();
    if !ready.is_empty() {
        subset.insert("addresses".into(), Value::Array(ready));
    }
    if !not_ready.is_empty() {
        subset.insert("notReadyAddresses".into(), Value::Array(not_ready));
    }
    if !ports.is_empty() {
        subset.insert("ports".into(), Value::Array(ports.clone()));
    }
    let subsets = if pods.is_empty() {
        None
    } else {
        Some(json!([subset]))
    };
    match endpoints {
        Some(current) if current.get("subsets") == subsets.as_ref() => {}
        Some(current) => {
            let mut updated = current.clone();
            match &subsets {
                Some(subsets) => updated["subsets"] = subsets.clone(),
                None => {
                    if let Some(map) = updated.as_object_mut() {
                        map.remove("subsets");
                    }
                }
            }
            plan.actions.push(Action::Update(Kind::Endpoints, updated));
        }
        None => {
            let mut created = json!({
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": name, "namespace": namespace},
            });
            if let Some(labels) = service["metadata"].get("labels").filter(|l| l.is_object()) {
                created["metadata"]["labels"] = labels.clone();
            }
            if let Some(subsets) = subsets {
                created["subsets"] = subsets;
            }
            plan.actions.push(Action::Create(Kind::Endpoints, created));
        }
    }

    // The EndpointSlice.
    let slice_endpoints: Vec<Value> = pods
        .iter()
        .map(|p| {
            let ready = pod::is_ready(p);
            json!({
                "addresses": [p["status"]["podIP"]],
                "conditions": {"ready": ready, "serving": ready, "terminating": false},
                "nodeName": pod::NODE_NAME,
                "targetRef": target(p),
            })
        })
        .collect();
    let mut slices: Vec<&Value> = slices
        .iter()
        .copied()
        .filter(|s| !object::is_deleting(s))
        .collect();
    slices.sort_by_key(|s| object::name(s).to_string());
    match slices.split_first() {
        Some((kept, extra)) => {
            if kept["endpoints"] != json!(slice_endpoints) || kept["ports"] != json!(ports) {
                let mut updated = (*kept).clone();
                updated["endpoints"] = json!(slice_endpoints);
                updated["ports"] = json!(ports);
                plan.actions
                    .push(Action::Update(Kind::EndpointSlice, updated));
            }
            plan.actions
                .extend(extra.iter().map(|s| Action::delete(Kind::EndpointSlice, s)));
        }
        None => {
            let mut metadata = object::child_metadata(service, Kind::Service, &json!({}));
            metadata.insert("generateName".into(), json!(format!("{name}-")));
            let mut labels = service["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            labels.insert(SERVICE_NAME_LABEL.into(), json!(name));
            labels.insert(MANAGED_BY_LABEL.into(), json!(MANAGED_BY));
            metadata.insert("labels".into(), Value::Object(labels));
            plan.actions.push(Action::Create(
                Kind::EndpointSlice,
                json!({
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": metadata,
                    "addressType": "IPv4",
                    "endpoints": slice_endpoints,
                    "ports": ports,
                }),
            ));
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_index_finds_what_a_scan_of_the_selectors_finds() {
        let selectors = [
            ("web", json!({"app": "web"})),
            ("web-front", json!({"app": "web", "tier": "front"})),
            ("front", json!({"tier": "front", "app": "web"})),
            ("db", json!({"app": "db"})),
            ("odd", json!({"port": 80})),
        ];
        let pods = [
            json!({"app": "web"}),
            json!({"app": "web", "tier": "front"}),
            json!({"tier": "front"}),
            json!({"app": "db", "tier": "front"}),
            json!({"port": "80"}),
            json!({}),
            Value::Null,
        ];
        let mut index = SelectorIndex::default();
        let mut kept: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
        // Every Service added, then each changed or removed in turn, checked after each step.
        let mut steps: Vec<(&str, Option<Value>)> = selectors
            .iter()
            .map(|(name, selector)| (*name, Some(selector.clone())))
            .collect();
        steps.push(("web", Some(json!({"tier": "front"}))));
        steps.push(("db", None));
        steps.push(("front", None));
        steps.push(("front", Some(json!({"app": "db"}))));
        for (service, selector) in steps {
            let selector = selector.as_ref().and_then(Value::as_object);
            index.set(service, selector);
            match selector {
                Some(selector) => kept.insert(service, selector.clone()),
                None => kept.remove(service),
            };
            for labels in &pods {
                let scanned: BTreeSet<&str> = kept
                    .iter()
                    .filter(|(_, selector)| selects(selector, labels))
                    .map(|(name, _)| *name)
                    .collect();
                let found: BTreeSet<&str> = index.selecting(labels).collect();
                assert_eq!(found, scanned, "labels {labels} after setting {service}");
            }
        }
    }

    fn service(selector: Value) -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "svc-uid", "labels": {"app": "web"}},
            "spec": {"selector": selector, "ports": [
                {"name": "http", "port": 80, "targetPort": "http"},
                {"name": "metrics", "port": 9090, "targetPort": 9100, "protocol": "TCP"},
            ]},
        })
    }

    fn member(name: &str, ip: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "shop", "uid": format!("{name}-uid"), "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    #[test]
    fn selected_pods_become_endpoints_and_a_slice() {
        let svc = service(json!({"app": "web"}));
        let a = member("web-a", "10.244.0.2", true);
        let b = member("web-b", "10.244.0.3", false);
        let pending = json!({"metadata": {"name": "web-c"}, "status": {"phase": "Pending"}});
        let plan = plan("shop", "web", Some(&svc), &[&b, &a, &pending], &[], None);
        let [
            Action::Create(Kind::Endpoints, endpoints),
            Action::Create(Kind::EndpointSlice, slice),
        ] = plan.actions.as_slice()
        else {
            panic!("expected an Endpoints and a slice: {:?}", plan.actions);
        };
        assert_eq!(
            endpoints["metadata"],
            json!({"name": "web", "namespace": "shop", "labels": {"app": "web"}})
        );
        let subset = &endpoints["subsets"][0];
        assert_eq!(subset["addresses"][0]["ip"], "10.244.0.2");
        assert_eq!(subset["addresses"][0]["targetRef"]["name"], "web-a");
        assert_eq!(subset["notReadyAddresses"][0]["ip"], "10.244.0.3");
        assert_eq!(
            subset["ports"],
            json!([{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "metrics", "port": 9100, "protocol": "TCP"}])
        );
        assert_eq!(slice["metadata"]["generateName"], "web-");
        assert_eq!(slice["metadata"]["labels"][SERVICE_NAME_LABEL], "web");
        assert_eq!(slice["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Service");
        assert_eq!(slice["addressType"], "IPv4");
        assert_eq!(slice["endpoints"][0]["addresses"], json!(["10.244.0.2"]));
        assert_eq!(
            slice["endpoints"][1]["conditions"],
            json!({"ready": false, "serving": false, "terminating": false})
        );

        // Written once, nothing changes.
        let mut slice = slice.clone();
        slice["metadata"]["name"] = json!("web-x7k2p");
        let settled = super::plan(
            "shop",
            "web",
            Some(&svc),
            &[&a, &b],
            &[&slice],
            Some(endpoints),
        );
        assert_eq!(settled, Plan::default());
    }

    #[test]
    fn services_without_selectors_are_left_alone_and_gone_ones_lose_their_endpoints() {
        let manual = service(json!({}));
        let endpoints = json!({"metadata": {"name": "web", "namespace": "shop"}});
        assert_eq!(
            plan("shop", "web", Some(&manual), &[], &[], Some(&endpoints)),
            Plan::default()
        );
        assert_eq!(
            plan("shop", "web", None, &[], &[], Some(&endpoints)).actions,
            vec![Action::Delete {
                kind: Kind::Endpoints,
                namespace: "shop".into(),
                name: "web".into()
            }]
        );
        assert_eq!(plan("shop", "web", None, &[], &[], None), Plan::default());
    }

    #[test]
    fn an_emptied_service_keeps_empty_endpoints() {
        let svc = service(json!({"app": "web"}));
        let endpoints = json!({"metadata": {"name": "web", "namespace": "shop"}, "subsets": [{"addresses": []}]});
        let slice = json!({"metadata": {"name": "web-a"}, "endpoints": [{"addresses": ["10.244.0.9"]}], "ports": []});
        let extra = json!({"metadata": {"name": "web-b"}});
        let plan = plan(
            "shop",
            "web",
            Some(&svc),
            &[],
            &[&slice, &extra],
            Some(&endpoints),
        );
        let [
            Action::Update(Kind::Endpoints, e),
            Action::Update(Kind::EndpointSlice, s),
            Action::Delete { name, .. },
        ] = plan.actions.as_slice()
        else {
            panic!("unexpected {:?}", plan.actions);
        };
        assert!(e.get("subsets").is_none());
        assert_eq!(s["endpoints"], json!([]));
        assert_eq!(name, "web-b");
    }

    #[test]
    fn selectors() {
        let svc = service(json!({"app": "web", "tier": "front"}));
        let wanted = selector(&svc).expect("a selector");
        assert_eq!(selector_string(wanted), "app=web,tier=front");
        assert!(selects(
            wanted,
            &json!({"app": "web", "tier": "front", "x": "y"})
        ));
        assert!(!selects(wanted, &json!({"app": "web"})));
        let mut external = svc.clone();
        external["spec"]["type"] = json!("ExternalName");
        assert!(selector(&external).is_none());
    }
}
