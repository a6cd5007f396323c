//! `comb endpoints REF...`: the endpoints Combs published (already resolved: the upstream's
//! addresses where they borrow), as a table, JSON/YAML, or an env file for `docker run
//! --env-file` and friends, exactly as the reference example writes it.

use std::collections::BTreeSet;
use std::process::ExitCode;

use comb_api::{CombEndpoint, Phase};
use serde::Serialize;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::cli::get::CombRow;
use crate::cli::output::{DataFormat, EnvComb, Table, env_file, serialize};
use crate::config::LocatedComb;

#[derive(Debug, clap::Args)]
pub struct EndpointsArgs {
    /// The Combs, each `[LAYER:][NAMESPACE/]NAME`.
    #[arg(required = true, value_name = "REF")]
    references: Vec<String>,
    /// `env` writes `<COMB>_<ENDPOINT>_CLUSTER=...` and `..._EXTERNAL=...` lines.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<EndpointsFormat>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EndpointsFormat {
    Json,
    Yaml,
    Env,
}

/// One Comb's published endpoints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Published {
    /// `layer:namespace/name`.
    pub comb: String,
    pub layer: String,
    pub namespace: String,
    pub name: String,
    /// The recorded phase; `None` before the first reconcile.
    pub phase: Option<String>,
    pub endpoints: Vec<CombEndpoint>,
}

impl Published {
    pub fn new(located: &LocatedComb) -> Published {
        let status = located.comb.status.as_ref();
        Published {
            comb: located.location.to_string(),
            layer: located.location.layer.clone(),
            namespace: located.location.namespace.clone(),
            name: located.location.name.clone(),
            phase: status.and_then(|status| status.phase.as_ref().map(Phase::to_string)),
            endpoints: status
                .map(|status| status.endpoint_list().to_vec())
                .unwrap_or_default(),
        }
    }
}

impl From<&CombRow> for Published {
    fn from(row: &CombRow) -> Published {
        Published {
            comb: format!("{}:{}/{}", row.layer, row.namespace, row.name),
            layer: row.layer.clone(),
            namespace: row.namespace.clone(),
            name: row.name.clone(),
            phase: row.phase.clone(),
            endpoints: row.endpoints.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
struct PublishedList<'a> {
    items: &'a [Published],
}

/// The table: one row per endpoint.
pub fn table(published: &[Published]) -> String {
    let mut table = Table::new(vec![
        "COMB", "ENDPOINT", "PROTOCOL", "PORT", "CLUSTER", "EXTERNAL",
    ]);
    for comb in published {
        for endpoint in &comb.endpoints {
            table.row(vec![
                comb.comb.clone(),
                endpoint.name.clone(),
                endpoint.protocol.clone().unwrap_or_default(),
                endpoint.port.to_string(),
                endpoint.cluster.clone().unwrap_or_default(),
                endpoint.external.clone().unwrap_or_default(),
            ]);
        }
    }
    table.render()
}

/// The env file of these Combs; the header names the `layer:namespace` places they are in.
pub fn env(published: &[Published]) -> String {
    let places: BTreeSet<String> = published
        .iter()
        .map(|comb| format!("{}:{}", comb.layer, comb.namespace))
        .collect();
    let combs: Vec<EnvComb> = published
        .iter()
        .map(|comb| EnvComb {
            key: comb.comb.clone(),
            name: comb.name.clone(),
            phase: comb.phase.clone(),
            endpoints: comb.endpoints.clone(),
        })
        .collect();
    env_file(
        &places.into_iter().collect::<Vec<_>>().join(", "),
        "comb endpoints",
        &combs,
    )
}

pub fn run(global: &GlobalArgs, args: EndpointsArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let mut published = Vec::new();
        for reference in &args.references {
            published.push(Published::new(&federation.locate(reference).await?));
        }
        let text = match args.output {
            None => table(&published),
            Some(EndpointsFormat::Env) => env(&published),
            Some(EndpointsFormat::Json) => {
                serialize(&PublishedList { items: &published }, DataFormat::Json)?
            }
            Some(EndpointsFormat::Yaml) => {
                serialize(&PublishedList { items: &published }, DataFormat::Yaml)?
            }
        };
        print!("{text}");
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CombLocation;
    use comb_api::Comb;
    use serde_json::json;

    fn located(layer: &str, status: serde_json::Value) -> LocatedComb {
        LocatedComb {
            location: CombLocation {
                layer: layer.into(),
                context: layer.into(),
                namespace: "platform".into(),
                name: "db".into(),
            },
            comb: Comb::from_value(json!({
                "metadata": {"name": "db", "namespace": "platform"},
                "spec": {"class": "Manifests"},
                "status": status
            }))
            .unwrap(),
        }
    }

    #[test]
    fn published_endpoints_as_table_and_env() {
        let dev = Published::new(&located(
            "dev",
            json!({"phase": "Running", "endpoints": [
                {"name": "postgres", "protocol": "tcp", "port": 5432,
                 "cluster": "192.0.2.10:5432", "external": "192.0.2.10:5432"}]}),
        ));
        let prod = Published::new(&located(
            "prod",
            json!({"phase": "Running", "endpoints": [
                {"name": "postgres", "port": 5432, "cluster": "db.platform.svc:5432"}]}),
        ));
        assert_eq!(
            table(&[dev.clone(), prod.clone()]),
            "COMB               ENDPOINT   PROTOCOL   PORT   CLUSTER                EXTERNAL\n\
             dev:platform/db    postgres   tcp        5432   192.0.2.10:5432        192.0.2.10:5432\n\
             prod:platform/db   postgres   <none>     5432   db.platform.svc:5432   <none>\n"
        );
        assert_eq!(
            env(&[prod, dev]),
            "# Endpoints of the Combs in dev:platform, prod:platform, written by comb endpoints\n\
             # db: Running\n\
             DB_POSTGRES_CLUSTER=192.0.2.10:5432\n\
             DB_POSTGRES_EXTERNAL=192.0.2.10:5432\n\
             # db: Running\n\
             DB_POSTGRES_CLUSTER=db.platform.svc:5432\n"
        );
    }
}
