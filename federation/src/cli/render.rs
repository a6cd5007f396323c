//! `comb render REF`: the manifests a Comb would apply now, rendered as reconcile renders them
//! (labels, namespace, apiVersion, the applied digest): its own, or its bridge while it borrows.
//! YAML documents by default, ready for `kubectl apply -f -` or a diff.

use std::process::ExitCode;

use serde_json::{Value, json};

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::cli::output::{DataFormat, serialize};
use crate::engine::class::ClassRegistry;

#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
    /// `yaml` (the default): one document per manifest; `json`: a v1 List.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<DataFormat>,
}

/// The manifests as YAML documents under a comment saying what they are, or as a JSON List.
pub fn render(what: &str, manifests: &[Value], format: DataFormat) -> anyhow::Result<String> {
    Ok(match format {
        DataFormat::Yaml => format!("# {what}\n{}", serde_saphyr::to_string_multiple(manifests)?),
        DataFormat::Json => serialize(
            &json!({"apiVersion": "v1", "kind": "List", "items": manifests}),
            DataFormat::Json,
        )?,
    })
}

pub fn run(
    global: &GlobalArgs,
    registry: &ClassRegistry,
    args: RenderArgs,
) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let opened = federation.open_comb(registry, &args.reference).await?;
        let reference = opened.located.location.to_string();
        let (what, items) = match opened.borrowing()? {
            None => (
                format!("{reference}: its manifests"),
                opened.comb.render(&opened.ops).await?,
            ),
            Some(_) => (
                format!("{reference} borrows: the bridge to its upstream"),
                opened
                    .comb
                    .render_bridge(&opened.endpoints().await?, &opened.ops)
                    .await?,
            ),
        };
        let manifests: Vec<Value> = items.into_iter().map(|item| item.manifest).collect();
        print!(
            "{}",
            render(&what, &manifests, args.output.unwrap_or(DataFormat::Yaml))?
        );
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_or_a_list() {
        let manifests = [
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        ];
        let yaml = render(
            "prod:platform/db: its manifests",
            &manifests,
            DataFormat::Yaml,
        )
        .unwrap();
        assert!(
            yaml.starts_with("# prod:platform/db: its manifests\n"),
            "{yaml}"
        );
        let back: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        assert_eq!(back, manifests);
        let list: Value =
            serde_json::from_str(&render("x", &manifests, DataFormat::Json).unwrap()).unwrap();
        assert_eq!(list["kind"], "List");
        assert_eq!(list["items"][1]["kind"], "ConfigMap");
    }
}
