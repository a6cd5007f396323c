//! `comb crd [--group G]`: prints the Comb CustomResourceDefinition as YAML, e.g. for
//! `comb crd | kubectl apply -f -`. The Helm chart ships the output for the default group.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CrdArgs {
    /// API group of the Comb CRD.
    #[arg(long, default_value = comb_api::DEFAULT_GROUP)]
    group: String,
}

pub fn run(args: CrdArgs) -> anyhow::Result<ExitCode> {
    let crd = comb_api::crd(&args.group)?;
    print!("{}", serde_saphyr::to_string(&crd)?);
    Ok(ExitCode::SUCCESS)
}
