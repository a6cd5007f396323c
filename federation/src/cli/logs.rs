//! `comb logs REF [--lines N]`: the logs of a Comb's containers (reference §9 `logs`): the
//! previous container of a crash loop, headers where there is more than one stream.

use std::process::ExitCode;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::engine::class::ClassRegistry;
use crate::engine::operations::logs;

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
    /// Lines from the end of each container's log.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
    lines: i64,
}

pub fn run(
    global: &GlobalArgs,
    registry: &ClassRegistry,
    args: LogsArgs,
) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let opened = federation.open_comb(registry, &args.reference).await?;
        print!(
            "{}",
            logs(&opened.ops, opened.comb.context(), args.lines).await?
        );
        Ok(ExitCode::SUCCESS)
    })
}
