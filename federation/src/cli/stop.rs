//! `comb stop REF`: scales a Comb's Deployments and StatefulSets to 0, suspends its CronJobs and
//! deletes its Jobs (reference §9 `stop`). The next reconcile deploys it again.

use std::process::ExitCode;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::cli::restart::touched_lines;
use crate::engine::class::ClassRegistry;
use crate::engine::operations::stop;

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
}

pub fn run(
    global: &GlobalArgs,
    registry: &ClassRegistry,
    args: StopArgs,
) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let opened = federation.open_comb(registry, &args.reference).await?;
        let touched = stop(
            &opened.ops,
            opened.comb.context(),
            opened.comb.recorded_managed(),
        )
        .await?;
        print!(
            "{}",
            touched_lines(&opened.located.location.to_string(), "stopped", &touched)
        );
        Ok(ExitCode::SUCCESS)
    })
}
