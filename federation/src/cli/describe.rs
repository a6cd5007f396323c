//! `comb describe REF`: everything about one Comb (reference §9 `describe`): who it is, what it
//! recorded, the endpoints it resolves now and what the cluster shows now.

use std::process::ExitCode;

use comb_api::{CombEndpoint, CombStatus, Phase, Reason};
use serde::Serialize;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::cli::output::{DataFormat, Table, fields, indent, list, serialize, upstream_line};
use crate::cli::status;
use crate::config::CombLocation;
use crate::engine::class::ClassRegistry;
use crate::engine::operations::Description;

#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<DataFormat>,
}

/// The engine's description of a Comb and the layer it was read from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Described {
    pub layer: String,
    pub context: String,
    #[serde(flatten)]
    pub description: Description,
}

impl Described {
    fn new(location: &CombLocation, description: Description) -> Described {
        Described {
            layer: location.layer.clone(),
            context: location.context.clone(),
            description,
        }
    }
}

/// The description for people: identity, the recorded status, endpoints, the live status.
pub fn render(described: &Described) -> String {
    let description = &described.description;
    let reference = format!(
        "{}:{}/{}",
        described.layer, description.namespace, description.name
    );
    let mut text = fields(&[
        ("Name", description.name.clone()),
        ("Namespace", description.namespace.clone()),
        (
            "Layer",
            format!("{} (context {})", described.layer, described.context),
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
        (
            "Phase",
            status
                .phase
                .as_ref()
                .map(Phase::to_string)
                .unwrap_or_default(),
        ),
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
            condition
                .reason
                .as_ref()
                .map(Reason::to_string)
                .unwrap_or_default(),
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
            Ok(opened) => opened.describe().await?,
            Err(error) => Description::unbuilt(&located.comb, crate::cli::output::one_line(&error)),
        };
        let described = Described::new(&located.location, description);
        print!(
            "{}",
            match args.output {
                None => render(&described),
                Some(format) => serialize(&described, format)?,
            }
        );
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::live_status::LiveStatus;
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
            namespace: "staging".into(),
            name: "db".into(),
            class: "Manifests".into(),
            stub_of: None,
            depends_on: Vec::new(),
            borrows_from: Some("K8s".into()),
            endpoints: recorded.endpoints.clone().unwrap(),
            recorded: Some(recorded),
            endpoints_error: None,
            status: Some(LiveStatus {
                phase: Phase::Running,
                healthy: true,
                reason: None,
                message: None,
                pods: Vec::new(),
                upstream: None,
                rolling_out: false,
            }),
            build_error: None,
        };
        let described = Described {
            layer: "staging".into(),
            context: "staging".into(),
            description,
        };
        let text = render(&described);
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
        let json = serde_json::to_value(&described).unwrap();
        assert_eq!(json["layer"], "staging");
        assert_eq!(json["borrowsFrom"], "K8s");
        assert_eq!(json["recorded"]["upstream"]["via"], json!(["prod"]));
    }
}
