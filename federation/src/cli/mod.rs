//! The `comb` command line: one module per subcommand, dispatched from [`main`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::engine::class::ClassRegistry;

mod common;
mod crd;
mod demo;
mod endpoints;
mod get;
mod output;
mod run;
mod sandbox;
mod via;

/// comb: a multi-cluster layered federation controller for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "comb", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    global: common::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The federation controller: reconcile every Comb of every layer.
    Run(run::RunArgs),
    /// Sandbox clusters, three layers, the example Combs and the controller, with every transition printed.
    Demo(demo::DemoArgs),
    /// Print the Comb CustomResourceDefinition as YAML.
    Crd(crd::CrdArgs),
    /// Every Comb of every layer: phase, reason, upstream and via chain.
    Get(get::GetArgs),
    /// The endpoints Combs published; `-o env` writes an env file.
    Endpoints(endpoints::EndpointsArgs),
    /// The upstream chain of a Comb, layer by layer, with each hop's phase.
    Via(via::ViaArgs),
    /// Kubernetes API emulator clusters on 127.0.0.1 and their kubeconfig, until stopped.
    Sandbox(sandbox::SandboxArgs),
}

/// Parses the command line and runs the subcommand. Exit codes: 0 success, 1 failure, 2 usage.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Run(args) => run::run(&cli.global, &ClassRegistry::with_builtins(), args),
        Command::Demo(args) => demo::run(args),
        Command::Crd(args) => crd::run(args),
        Command::Get(args) => get::run(&cli.global, args),
        Command::Endpoints(args) => endpoints::run(&cli.global, args),
        Command::Via(args) => via::run(&cli.global, args),
        Command::Sandbox(args) => sandbox::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("comb: {error:#}");
            ExitCode::from(1)
        }
    }
}
