//! `comb crd [--group G]`: prints the Comb and CombLayer CustomResourceDefinitions as YAML
//! documents, e.g. for `comb crd | kubectl apply -f -`. The Helm chart ships the output for the
//! default group.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CrdArgs {
    /// API group of the CRDs.
    #[arg(long, default_value = comb_api::DEFAULT_GROUP)]
    group: String,
}

pub fn run(args: CrdArgs) -> anyhow::Result<ExitCode> {
    let documents = comb_api::crds(&args.group)?
        .iter()
        .map(serde_saphyr::to_string)
        .collect::<Result<Vec<String>, _>>()?;
    print!("{}", documents.join("---\n"));
    Ok(ExitCode::SUCCESS)
}
