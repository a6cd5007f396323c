//! The `comb` command line: one module per subcommand, dispatched from [`main`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod crd;
mod demo;

/// comb: a multi-cluster layered federation controller for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "comb", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sandbox clusters, three layers, the example Combs and the controller, with every transition printed.
    Demo(demo::DemoArgs),
    /// Print the Comb CustomResourceDefinition as YAML.
    Crd(crd::CrdArgs),
}

/// Parses the command line and runs the subcommand. Exit codes: 0 success, 1 failure, 2 usage.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Crd(args) => crd::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("comb: {error:#}");
            ExitCode::from(1)
        }
    }
}
