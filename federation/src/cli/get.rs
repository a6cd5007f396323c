//! `comb get`: every Comb of every layer, one row each.

use std::process::ExitCode;

use comb_api::{Comb, CombEndpoint, CombStatus};
use jiff::Timestamp;
use serde::Serialize;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::cli::output::{DataFormat, Table, human_duration, list, serialize};
use crate::config::Layer;

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Only the Combs of this layer.
    #[arg(long, value_name = "LAYER")]
    layer: Option<String>,
    /// Only the Combs of this namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// `wide` adds the last step's message; `json` and `yaml` are for scripts.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<GetFormat>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum GetFormat {
    Wide,
    Json,
    Yaml,
}

/// The JSON/YAML document of `get`.
#[derive(Debug, Serialize)]
struct RowList<'a> {
    items: &'a [CombRow],
}

pub fn run(global: &GlobalArgs, args: GetArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let layers: Vec<_> = match &args.layer {
            Some(name) => vec![federation.layer(name)?],
            None => federation.config.layers.iter().collect(),
        };
        let (rows, failures) = collect_rows(&federation, &layers, args.namespace.as_deref()).await;
        let text = match args.output {
            None => table(&rows, false, Timestamp::now()),
            Some(GetFormat::Wide) => table(&rows, true, Timestamp::now()),
            Some(GetFormat::Json) => serialize(&RowList { items: &rows }, DataFormat::Json)?,
            Some(GetFormat::Yaml) => serialize(&RowList { items: &rows }, DataFormat::Yaml)?,
        };
        print!("{text}");
        for failure in &failures {
            eprintln!("comb: {failure}");
        }
        Ok(if failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// One Comb as `get` shows it; also the JSON/YAML item, so scripts see what people see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CombRow {
    pub layer: String,
    pub namespace: String,
    pub name: String,
    pub class: Option<String>,
    /// Its layer builds it as its class's stub (`stubs` in the configuration).
    pub stub: bool,
    pub phase: Option<String>,
    /// Reason and message of the `Ready` condition: the last step's verdict.
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Where it borrows from: the upstream's context, else its class (e.g. `Static`).
    pub upstream: Option<String>,
    /// The layers the service comes through, nearest first; empty when served here.
    pub via: Vec<String>,
    /// The published endpoints (the upstream's addresses while borrowing).
    pub endpoints: Vec<CombEndpoint>,
    pub creation_timestamp: Option<Timestamp>,
}

impl CombRow {
    /// The row of `comb` in `layer`.
    pub fn of(layer: &Layer, comb: &Comb) -> CombRow {
        let mut row = CombRow::new(&layer.name, comb);
        row.stub = layer.stubs_comb(&row.namespace, &row.name);
        row
    }

    fn new(layer: &str, comb: &Comb) -> CombRow {
        let status = comb.status.as_ref();
        let ready = status.and_then(CombStatus::ready);
        let upstream = status.and_then(|status| status.upstream.as_ref());
        CombRow {
            layer: layer.to_string(),
            namespace: comb.metadata.namespace.clone().unwrap_or_default(),
            name: comb.metadata.name.clone().unwrap_or_default(),
            class: comb.spec.class.clone(),
            stub: false,
            phase: status.and_then(|status| status.phase.clone()),
            reason: ready.and_then(|ready| ready.reason.clone()),
            message: ready.and_then(|ready| ready.message.clone()),
            upstream: upstream.and_then(|upstream| {
                upstream
                    .context
                    .clone()
                    .or_else(|| upstream.class.as_deref().map(short_upstream_class))
            }),
            via: upstream
                .and_then(|upstream| upstream.via.clone())
                .unwrap_or_default(),
            endpoints: status
                .map(|status| status.endpoint_list().to_vec())
                .unwrap_or_default(),
            creation_timestamp: comb.metadata.creation_timestamp.as_ref().map(|time| time.0),
        }
    }
}

/// The rows of every Comb of `layers` (in `namespace` only, if given), and a message for each
/// layer that could not be read: one layer that cannot be read must not hide the others.
pub async fn collect_rows(
    federation: &Federation,
    layers: &[&Layer],
    namespace: Option<&str>,
) -> (Vec<CombRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for layer in layers {
        match federation.list_combs(layer, namespace).await {
            Ok(combs) => rows.extend(combs.iter().map(|comb| CombRow::of(layer, comb))),
            Err(error) => failures.push(format!("{error:#}")),
        }
    }
    (rows, failures)
}

/// `Kubernetes::Comb::Upstream::Static` reads as `Static`; other names stay.
fn short_upstream_class(class: &str) -> String {
    class
        .strip_prefix("Kubernetes::Comb::Upstream::")
        .unwrap_or(class)
        .to_string()
}

/// The table of `get`; `wide` adds the Ready message.
pub fn table(rows: &[CombRow], wide: bool, now: Timestamp) -> String {
    let mut headers = vec![
        "LAYER",
        "NAMESPACE",
        "NAME",
        "CLASS",
        "PHASE",
        "REASON",
        "UPSTREAM",
        "VIA",
        "AGE",
    ];
    if wide {
        headers.push("MESSAGE");
    }
    let mut table = Table::new(headers);
    for row in rows {
        let age = row
            .creation_timestamp
            .map(|created| human_duration(now.as_second() - created.as_second()))
            .unwrap_or_default();
        let mut cells = vec![
            row.layer.clone(),
            row.namespace.clone(),
            row.name.clone(),
            match (&row.class, row.stub) {
                (Some(class), true) => format!("{class} (stub)"),
                (class, _) => class.clone().unwrap_or_default(),
            },
            row.phase.clone().unwrap_or_default(),
            row.reason.clone().unwrap_or_default(),
            row.upstream.clone().unwrap_or_default(),
            list(&row.via),
            age,
        ];
        if wide {
            cells.push(row.message.clone().unwrap_or_default());
        }
        table.row(cells);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn comb(value: serde_json::Value) -> Comb {
        Comb::from_value(value).unwrap()
    }

    fn rows() -> Vec<CombRow> {
        let borrowed = comb(json!({
            "apiVersion": "comb.internal/v1", "kind": "Comb",
            "metadata": {"name": "db", "namespace": "platform",
                         "creationTimestamp": "2026-01-01T12:00:00Z"},
            "spec": {"class": "Manifests"},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Borrowed",
                                "message": "borrowed from upstream K8s (context staging) via staging, prod"}],
                "upstream": {"class": "K8s", "context": "staging", "reachable": true,
                             "phase": "Running", "via": ["staging", "prod"]}}
        }));
        let fixed = comb(json!({
            "metadata": {"name": "cache", "namespace": "platform",
                         "creationTimestamp": "2026-01-01T11:00:00Z"},
            "spec": {"class": "Manifests"},
            "status": {"phase": "Running",
                "upstream": {"class": "Kubernetes::Comb::Upstream::Static", "via": []}}
        }));
        let fresh = comb(json!({
            "metadata": {"name": "nats", "namespace": "platform"},
            "spec": {"class": "Manifests"}
        }));
        let dev = crate::config::Config::from_yaml(
            "layers: [{name: dev, context: dev, stubs: [nats]}]",
            "test",
            None,
        )
        .unwrap()
        .layers
        .remove(0);
        vec![
            CombRow::of(&dev, &borrowed),
            CombRow::of(&dev, &fixed),
            CombRow::of(&dev, &fresh),
        ]
    }

    #[test]
    fn rows_from_recorded_status() {
        let rows = rows();
        assert_eq!(rows[0].upstream.as_deref(), Some("staging"));
        assert_eq!(rows[0].via, ["staging", "prod"]);
        assert_eq!(rows[0].reason.as_deref(), Some("Borrowed"));
        assert_eq!(rows[1].upstream.as_deref(), Some("Static"));
        assert_eq!(rows[2].phase, None);
        assert_eq!(rows[2].upstream, None);
        assert_eq!(
            serde_json::to_value(&rows[0]).unwrap(),
            json!({"layer": "dev", "namespace": "platform", "name": "db", "class": "Manifests",
                   "stub": false, "phase": "Running", "reason": "Borrowed",
                   "message": "borrowed from upstream K8s (context staging) via staging, prod",
                   "upstream": "staging", "via": ["staging", "prod"], "endpoints": [],
                   "creationTimestamp": "2026-01-01T12:00:00Z"})
        );
    }

    #[test]
    fn tables_for_people() {
        let now: Timestamp = "2026-01-01T12:05:30Z".parse().unwrap();
        assert_eq!(
            table(&rows(), false, now),
            "LAYER   NAMESPACE   NAME    CLASS              PHASE     REASON     UPSTREAM   VIA             AGE\n\
             dev     platform    db      Manifests          Running   Borrowed   staging    staging, prod   5m30s\n\
             dev     platform    cache   Manifests          Running   <none>     Static     <none>          65m\n\
             dev     platform    nats    Manifests (stub)   <none>    <none>     <none>     <none>          <none>\n"
        );
        let wide = table(&rows()[..1], true, now);
        assert!(
            wide.lines().next().unwrap().ends_with("AGE     MESSAGE"),
            "{wide}"
        );
        assert!(
            wide.contains("5m30s   borrowed from upstream K8s (context staging) via staging, prod")
        );
    }
}
