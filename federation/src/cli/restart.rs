//! `comb restart REF`: a rolling restart of a Comb's Deployments, StatefulSets and DaemonSets,
//! and its Jobs run again (reference §9 `restart`).

use std::process::ExitCode;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::engine::class::ClassRegistry;
use crate::engine::operations::restart;

#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
}

pub fn run(
    global: &GlobalArgs,
    registry: &ClassRegistry,
    args: RestartArgs,
) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let opened = federation.open_comb(registry, &args.reference).await?;
        let touched = restart(
            &opened.ops,
            opened.comb.context(),
            opened.comb.recorded_managed(),
        )
        .await?;
        print!(
            "{}",
            touched_lines(&opened.located.location.to_string(), "restarted", &touched)
        );
        Ok(ExitCode::SUCCESS)
    })
}

/// `<comb>: restarted Deployment/nats` per resource, or one line saying there was none.
pub fn touched_lines(reference: &str, done: &str, touched: &[String]) -> String {
    if touched.is_empty() {
        return format!("{reference}: nothing to be {done}\n");
    }
    touched
        .iter()
        .map(|resource| format!("{reference}: {done} {resource}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_resource() {
        assert_eq!(
            touched_lines(
                "prod:platform/nats",
                "restarted",
                &["Deployment/nats".into(), "Job/nats-init".into()]
            ),
            "prod:platform/nats: restarted Deployment/nats\nprod:platform/nats: restarted Job/nats-init\n"
        );
        assert_eq!(
            touched_lines("dev:platform/db", "stopped", &[]),
            "dev:platform/db: nothing to be stopped\n"
        );
    }
}
