//! `comb logs REF [--lines N] [-c CONTAINER] [-f]`: the logs of a Comb's containers (reference
//! §9 `logs`): the previous container of a crash loop, headers where there is more than one
//! stream; `-f` follows them. A Comb that borrows runs no pods: it says where its service runs.

use std::process::ExitCode;

use crate::cli::common::{Federation, GlobalArgs, StopSignals, block_on};
use crate::cli::via::{End, walk_federation};
use crate::engine::class::ClassRegistry;
use crate::engine::operations::{follow_logs, logs};

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
    /// Lines from the end of each container's log.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
    lines: i64,
    /// Only this container of each pod.
    #[arg(short = 'c', long, value_name = "CONTAINER")]
    container: Option<String>,
    /// Keep printing lines as they are written, until interrupted or the pods are gone.
    #[arg(short = 'f', long)]
    follow: bool,
}

pub fn run(
    global: &GlobalArgs,
    registry: &ClassRegistry,
    args: LogsArgs,
) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let opened = federation.open_comb(registry, &args.reference).await?;
        if opened.borrowing()?.is_some() {
            let location = opened.located.location.clone();
            let chain = walk_federation(&federation, location.clone()).await;
            let served_by = chain.hops.last().map(|hop| hop.comb.clone());
            println!(
                "{}",
                match (&chain.end, served_by) {
                    (End::Served, Some(served_by)) if chain.hops.len() > 1 => format!(
                        "{location} borrows its service, which runs as {served_by}: \
                         comb logs {served_by}"
                    ),
                    (End::Outside { upstream }, _) => format!(
                        "{location} borrows its service from {upstream}, outside the layers: \
                         no logs here"
                    ),
                    _ => format!(
                        "{location} borrows its service and runs no pods here; \
                         comb via {location} shows where it comes from"
                    ),
                }
            );
            return Ok(ExitCode::SUCCESS);
        }
        let container = args.container.as_deref();
        if args.follow {
            let follow = follow_logs(
                &opened.ops,
                opened.comb.context(),
                args.lines,
                container,
                |line| println!("{line}"),
            );
            let mut stop_signals = StopSignals::listen()?;
            tokio::select! {
                followed = follow => followed?,
                () = stop_signals.recv() => {}
            }
        } else {
            print!(
                "{}",
                logs(&opened.ops, opened.comb.context(), args.lines, container).await?
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}
