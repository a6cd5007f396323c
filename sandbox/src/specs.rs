//! Validation of built-in kinds' specs: the checks of kube-apiserver that a client is most
//! likely to trip (and that would make a real cluster refuse what the sandbox accepted).

use serde_json::{Value, json};

use crate::api_error::FieldError;
use crate::resources::ResourceType;
use crate::selectors::{LabelSelector, is_dns_label};

fn containers(spec: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let list = spec["containers"].as_array();
    if list.is_none_or(Vec::is_empty) {
        errors.push(FieldError::required(format!("{path}.containers"), ""));
    }
    for field in ["containers", "initContainers"] {
        for (i, container) in spec[field].as_array().into_iter().flatten().enumerate() {
            let at = format!("{path}.{field}[{i}]");
            match container["name"].as_str() {
                None | Some("") => errors.push(FieldError::required(format!("{at}.name"), "")),
                Some(name) if !is_dns_label(name) => errors.push(FieldError::invalid(
                    format!("{at}.name"),
                    &container["name"],
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                )),
                Some(_) => {}
            }
            if container["image"]
                .as_str()
                .is_none_or(|i| i.trim().is_empty())
            {
                errors.push(FieldError::required(format!("{at}.image"), ""));
            }
            for (j, port) in container["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let number = port["containerPort"].as_i64().unwrap_or(0);
                if !(1..=65535).contains(&number) {
                    errors.push(FieldError::invalid(
                        format!("{at}.ports[{j}].containerPort"),
                        &port["containerPort"],
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
    }
}

/// A workload's selector must exist and select its own template.
fn selector_matches_template(spec: &Value, errors: &mut Vec<FieldError>) {
    let selector = &spec["selector"];
    if selector.is_null() {
        errors.push(FieldError::required("spec.selector", ""));
        return;
    }
    let empty = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.is_empty())
        && selector["matchExpressions"]
            .as_array()
            .is_none_or(Vec::is_empty);
    if empty {
        errors.push(FieldError::invalid(
            "spec.selector",
            selector,
            "empty selector is invalid for deployment",
        ));
        return;
    }
    let template = json!({"metadata": {"labels": spec["template"]["metadata"]["labels"].clone()}});
    let matches =
        LabelSelector::from_label_selector_object(selector).is_ok_and(|s| s.matches(&template));
    if !matches {
        errors.push(FieldError::invalid(
            "spec.template.metadata.labels",
            &spec["template"]["metadata"]["labels"],
            "`selector` does not match template `labels`",
        ));
    }
}

fn non_negative(spec: &Value, field: &str, errors: &mut Vec<FieldError>) {
    if spec[field].as_i64().is_some_and(|n| n < 0) {
        errors.push(FieldError::invalid(
            format!("spec.{field}"),
            &spec[field],
            "must be greater than or equal to 0",
        ));
    }
}

fn service(spec: &Value, errors: &mut Vec<FieldError>) {
    let kind = spec["type"].as_str().unwrap_or("ClusterIP");
    let allowed = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    if !allowed.contains(&kind) {
        errors.push(FieldError::unsupported(
            "spec.type",
            &spec["type"],
            &allowed,
        ));
    }
    if kind == "ExternalName" {
        if spec["externalName"].as_str().is_none_or(str::is_empty) {
            errors.push(FieldError::required("spec.externalName", ""));
        }
        return;
    }
    let headless = spec["clusterIP"] == "None";
    let ports = spec["ports"].as_array();
    if ports.is_none_or(Vec::is_empty) && !headless {
        errors.push(FieldError::required("spec.ports", ""));
    }
    let several = ports.is_some_and(|p| p.len() > 1);
    for (i, port) in ports.into_iter().flatten().enumerate() {
        let number = port["port"].as_i64().unwrap_or(0);
        if !(1..=65535).contains(&number) {
            errors.push(FieldError::invalid(
                format!("spec.ports[{i}].port"),
                &port["port"],
                "must be between 1 and 65535, inclusive",
            ));
        }
        if several && port["name"].as_str().is_none_or(str::is_empty) {
            errors.push(FieldError::required(format!("spec.ports[{i}].name"), ""));
        }
    }
}

fn config_keys(object: &Value, field: &str, errors: &mut Vec<FieldError>) {
    for key in object[field].as_object().into_iter().flat_map(|m| m.keys()) {
        let valid = !key.is_empty()
            && key.len() <= 253
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            errors.push(FieldError::invalid(
                format!("{field}[{key}]"),
                &Value::String(key.clone()),
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            ));
        }
    }
}

/// Spec errors of a built-in object.
pub fn validate(rt: &ResourceType, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if rt.is_custom() {
        return errors;
    }
    let spec = &object["spec"];
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => containers(spec, "spec", &mut errors),
        ("", "Service") => service(spec, &mut errors),
        ("", "ConfigMap") => {
            config_keys(object, "data", &mut errors);
            config_keys(object, "binaryData", &mut errors);
        }
        ("", "Secret") => {
            config_keys(object, "data", &mut errors);
            config_keys(object, "stringData", &mut errors);
        }
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => {
            selector_matches_template(spec, &mut errors);
            non_negative(spec, "replicas", &mut errors);
            containers(&spec["template"]["spec"], "spec.template.spec", &mut errors);
        }
        ("batch", "Job") => {
            containers(&spec["template"]["spec"], "spec.template.spec", &mut errors);
            let policy = &spec["template"]["spec"]["restartPolicy"];
            if policy != "OnFailure" && policy != "Never" {
                errors.push(FieldError::unsupported(
                    "spec.template.spec.restartPolicy",
                    policy,
                    &["OnFailure", "Never"],
                ));
            }
            for field in ["parallelism", "completions", "backoffLimit"] {
                non_negative(spec, field, &mut errors);
            }
        }
        ("batch", "CronJob") => {
            if spec["schedule"].as_str().is_none_or(str::is_empty) {
                errors.push(FieldError::required("spec.schedule", ""));
            }
            let template = &spec["jobTemplate"]["spec"]["template"]["spec"];
            containers(template, "spec.jobTemplate.spec.template.spec", &mut errors);
        }
        _ => {}
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin;

    fn fields(rt: &ResourceType, object: Value) -> Vec<String> {
        validate(rt, &object).into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn workload_rules() {
        let deploy = builtin("apps", "Deployment").expect("deployments");
        let good = json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        assert!(fields(&deploy, good.clone()).is_empty());
        let mut mismatched = good.clone();
        mismatched["spec"]["template"]["metadata"]["labels"]["app"] = json!("b");
        assert_eq!(
            fields(&deploy, mismatched),
            ["spec.template.metadata.labels"]
        );
        let mut no_image = good;
        no_image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        no_image["spec"]["replicas"] = json!(-1);
        assert_eq!(
            fields(&deploy, no_image),
            ["spec.replicas", "spec.template.spec.containers[0].image"]
        );
    }

    #[test]
    fn service_and_config_rules() {
        let svc = builtin("", "Service").expect("services");
        assert_eq!(
            fields(&svc, json!({"spec": {"type": "ClusterIP"}})),
            ["spec.ports"]
        );
        assert!(fields(&svc, json!({"spec": {"clusterIP": "None"}})).is_empty());
        assert_eq!(
            fields(&svc, json!({"spec": {"type": "ExternalName"}})),
            ["spec.externalName"]
        );
        assert_eq!(
            fields(
                &svc,
                json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}})
            ),
            ["spec.ports[0].name", "spec.ports[1].name"]
        );
        let cm = builtin("", "ConfigMap").expect("configmaps");
        assert_eq!(
            fields(&cm, json!({"data": {"ok.key": "1", "bad key": "2"}})),
            ["data[bad key]"]
        );
        let job = builtin("batch", "Job").expect("jobs");
        assert_eq!(
            fields(
                &job,
                json!({"spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "a", "image": "x"}]}}}})
            ),
            ["spec.template.spec.restartPolicy"]
        );
    }
}
