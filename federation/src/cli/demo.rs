//! `comb demo`: the README's first command.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the clusters and the controller running after the demo settles.
    #[arg(long)]
    follow: bool,
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let _ = args.follow;
    eprintln!(
        "comb demo: the demo is not built yet (issue 5, the federation controller); \
         run `cargo test --workspace` to exercise what exists"
    );
    Ok(ExitCode::from(1))
}
