//! `comb describe REF`: everything about one Comb (reference §9 `describe`): who it is, what it
//! recorded, the endpoints it resolves now and what the cluster shows now.

use std::process::ExitCode;

use comb_api::{CombEndpoint, CombStatus, Endpoint};
use serde::Serialize;

use crate::cli::common::{Federation, GlobalArgs, Live, Opened, block_on};
use crate::cli::output::{DataFormat, Table, fields, indent, list, serialize, upstream_line};
use crate::cli::status;
use crate::config::LocatedComb;
use crate::engine::class::ClassRegistry;

#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<DataFormat>,
}

/// Everything about one Comb.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Description {
    pub layer: String,
    pub context: String,
    pub namespace: String,
    pub name: String,
    /// The class it is built as (the stub's, where its layer stubs it).
    pub class: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stub_of: Option<String>,
    pub depends_on: Vec<String>,
    /// The upstream class it borrows from now; `None` when it runs its service itself.
    pub borrows_from: Option<String>,
    /// The status recorded in the CR.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<CombStatus>,
    /// The endpoints it resolves now (redirected to the upstream while borrowing).
    pub endpoints: Vec<CombEndpoint>,
    /// Why the endpoints could not be resolved (e.g. an unreachable upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoints_error: Option<String>,
    /// What the cluster shows now; `None` when the Comb cannot be built.
    pub status: Option<Live>,
    /// Why the Comb cannot be built (what its status records as BuildFailed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_error: Option<String>,
}

impl Description {
    async fn of(opened: &Opened) -> anyhow::Result<Description> {
        let borrowing = opened.borrowing()?;
        let (endpoints, endpoints_error) = match opened.endpoints().await {
            Ok(endpoints) => (endpoints.iter().map(Endpoint::to_crd).collect(), None),
            Err(error) => (Vec::new(), Some(format!("{error:#}"))),
        };
        let location = &opened.located.location;
        Ok(Description {
            layer: location.layer.clone(),
            context: location.context.clone(),
            namespace: location.namespace.clone(),
            name: location.name.clone(),
            class: opened.comb.class_name().to_string(),
            stub_of: opened.comb.stub_of().map(str::to_string),
            depends_on: opened.comb.depends_on(),
            borrows_from: borrowing.map(|b| b.upstream.class_name().to_string()),
            recorded: opened.comb.recorded_status().cloned(),
            endpoints,
            endpoints_error,
            status: Some(opened.live().await?),
            build_error: None,
        })
    }

    /// What can be said of a Comb that cannot be built: who it is and what it recorded.
    fn unbuilt(located: &LocatedComb, error: &anyhow::Error) -> Description {
        let location = &located.location;
        Description {
            layer: location.layer.clone(),
            context: location.context.clone(),
            namespace: location.namespace.clone(),
            name: location.name.clone(),
            class: located.comb.spec.class.clone().unwrap_or_default(),
            stub_of: None,
            depends_on: located.comb.spec.dependencies().to_vec(),
            borrows_from: None,
            recorded: located.comb.status.clone(),
            endpoints: Vec::new(),
            endpoints_error: None,
            status: None,
            build_error: Some(format!("{error:#}")),
        }
    }
}

/// The description for people: identity, the recorded status, endpoints, the live status.
pub fn render(description: &Description) -> String {
    let reference = format!(
        "{}:{}/{}",
        description.layer, description.namespace, description.name
    );
    let mut text = fields(&[
        ("Name", description.name.clone()),
        ("Namespace", description.namespace.clone()),
        (
            "Layer",
            format!("{} (context {})", description.layer, description.context),
        ),
        ("Class", description.class.clone()),
        ("Stub of", description.stub_of.clone().unwrap_or_default()),
        ("Depends on", list(&description.depends_on)),
        (
            "Borrows from",
            description
                .borrows_from
                .clone()
                .unwrap_or_else(|| "nothing, it runs its service itself".to_string()),
        ),
    ]);
    text.push_str("Recorded:\n");
    text.push_str(&indent(&render_recorded(description.recorded.as_ref()), 2));
    let (Some(live), None) = (&description.status, &description.build_error) else {
        text.push_str(&format!(
            "Build:\n  {}\n",
            description
                .build_error
                .as_deref()
                .unwrap_or("it was not built")
        ));
        return text;
    };
    text.push_str("Endpoints:\n");
    let endpoints = match &description.endpoints_error {
        Some(error) => format!("cannot be resolved: {error}\n"),
        None => endpoints_table(&description.endpoints),
    };
    text.push_str(&indent(&endpoints, 2));
    text.push_str("Live:\n");
    text.push_str(&indent(&status::render(&reference, live), 2));
    text
}

fn render_recorded(recorded: Option<&CombStatus>) -> String {
    let Some(status) = recorded else {
        return "nothing yet: the controller has not reconciled it\n".to_string();
    };
    let mut pairs = vec![
        ("Phase", status.phase.clone().unwrap_or_default()),
        (
            "Observed generation",
            status
                .observed_generation
                .map(|g| g.to_string())
                .unwrap_or_default(),
        ),
    ];
    if let Some(upstream) = &status.upstream {
        pairs.push(("Upstream", upstream_line(upstream)));
    }
    let mut text = fields(&pairs);
    let mut conditions = Table::new(vec![
        "TYPE",
        "STATUS",
        "REASON",
        "MESSAGE",
        "LAST TRANSITION",
    ]);
    for condition in status.conditions.iter().flatten() {
        conditions.row(vec![
            condition.type_.clone(),
            condition.status.to_string(),
            condition.reason.clone().unwrap_or_default(),
            condition.message.clone().unwrap_or_default(),
            condition
                .last_transition_time
                .as_ref()
                .map(|time| time.0.to_string())
                .unwrap_or_default(),
        ]);
    }
    text.push_str("Conditions:\n");
    text.push_str(&indent(&conditions.render(), 2));
    let mut managed = Table::new(vec!["API VERSION", "KIND", "NAMESPACE", "NAME"]);
    for resource in status.managed() {
        managed.row(vec![
            resource.api_version.clone(),
            resource.kind.clone(),
            resource.namespace.clone().unwrap_or_default(),
            resource.name.clone(),
        ]);
    }
    text.push_str("Managed resources:\n");
    text.push_str(&indent(&managed.render(), 2));
    text.push_str("Published endpoints:\n");
    text.push_str(&indent(&endpoints_table(status.endpoint_list()), 2));
    text
}

fn endpoints_table(endpoints: &[CombEndpoint]) -> String {
    let mut table = Table::new(vec!["NAME", "PROTOCOL", "PORT", "CLUSTER", "EXTERNAL"]);
    for endpoint in endpoints {
        table.row(vec![
            endpoint.name.clone(),
            endpoint.protocol.clone().unwrap_or_default(),
            endpoint.port.to_string(),
            endpoint.cluster.clone().unwrap_or_default(),
            endpoint.external.clone().unwrap_or_default(),
        ]);
    }
    table.render()
}

pub fn run(
    global: &GlobalArgs,
    registry: &ClassRegistry,
    args: DescribeArgs,
) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let located = federation.locate(&args.reference).await?;
        // A Comb that cannot be built is described all the same: what it recorded says why.
        let description = match federation.build(registry, located.clone()).await {
            Ok(opened) => Description::of(&opened).await?,
            Err(error) => Description::unbuilt(&located, &error),
        };
        print!(
            "{}",
            match args.output {
                None => render(&description),
                Some(format) => serialize(&description, format)?,
            }
        );
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn describes_for_people() {
        let recorded: CombStatus = serde_json::from_value(json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Borrowed",
                            "message": "borrowed from upstream K8s (context prod) via prod",
                            "lastTransitionTime": "2026-01-01T12:00:00Z"}],
            "managedResources": [{"apiVersion": "v1", "kind": "Service",
                                  "namespace": "staging", "name": "db"}],
            "endpoints": [{"name": "postgres", "port": 5432, "cluster": "db.platform.svc:5432"}],
            "upstream": {"class": "K8s", "context": "prod", "reachable": true,
                         "phase": "Running", "via": ["prod"]},
            "observedGeneration": 1
        }))
        .unwrap();
        let description = Description {
            layer: "staging".into(),
            context: "staging".into(),
            namespace: "staging".into(),
            name: "db".into(),
            class: "Manifests".into(),
            stub_of: None,
            depends_on: Vec::new(),
            borrows_from: Some("K8s".into()),
            endpoints: recorded.endpoints.clone().unwrap(),
            recorded: Some(recorded),
            endpoints_error: None,
            status: Some(Live {
                phase: "Running".into(),
                healthy: true,
                reason: None,
                message: None,
                pods: Vec::new(),
                upstream: None,
            }),
            build_error: None,
        };
        let text = render(&description);
        let expected_start = "\
Name:          db
Namespace:     staging
Layer:         staging (context staging)
Class:         Manifests
Stub of:       <none>
Depends on:    <none>
Borrows from:  K8s
Recorded:
  Phase:                Running
  Observed generation:  1
  Upstream:             K8s (context prod): reachable, Running, via prod
  Conditions:
    TYPE    STATUS   REASON     MESSAGE                                              LAST TRANSITION
    Ready   True     Borrowed   borrowed from upstream K8s (context prod) via prod   2026-01-01T12:00:00Z
  Managed resources:
    API VERSION   KIND      NAMESPACE   NAME
    v1            Service   staging     db
  Published endpoints:
    NAME       PROTOCOL   PORT   CLUSTER                EXTERNAL
    postgres   <none>     5432   db.platform.svc:5432   <none>
Endpoints:
    NAME       PROTOCOL   PORT   CLUSTER                EXTERNAL
";
        assert!(
            text.starts_with(&expected_start.replace("Endpoints:\n    NAME", "Endpoints:\n  NAME")),
            "{text}"
        );
        assert!(text.contains("Live:\n  Comb:     staging:staging/db\n  Phase:    Running\n"));
        let json = serde_json::to_value(&description).unwrap();
        assert_eq!(json["borrowsFrom"], "K8s");
        assert_eq!(json["recorded"]["upstream"]["via"], json!(["prod"]));
    }
}
