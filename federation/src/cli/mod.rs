//! The `comb` command line: one module per subcommand, dispatched from [`main`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::engine::class::ClassRegistry;

mod check;
mod common;
mod crd;
#[cfg(feature = "sandbox")]
pub mod demo;
mod describe;
mod endpoints;
mod get;
mod graph;
#[cfg(feature = "sandbox")]
pub mod in_cluster;
mod layer;
mod logs;
mod output;
#[cfg(feature = "sandbox")]
pub mod packets;
mod render;
mod restart;
mod run;
#[cfg(feature = "sandbox")]
mod sandbox;
mod status;
mod stop;
mod via;

/// comb: a multi-cluster layered federation controller for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "comb", version, long_about = None)]
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
    #[cfg(feature = "sandbox")]
    /// Sandbox clusters, three layers, the example Combs and the controller, with every transition printed.
    Demo(demo::DemoArgs),
    /// Print the Comb CustomResourceDefinition as YAML.
    Crd(crd::CrdArgs),
    /// Every Comb of every layer: phase, reason, upstream and via chain.
    Get(get::GetArgs),
    Layer(layer::LayerArgs),
    /// The layers, their Combs and every borrow edge, as Graphviz DOT, Mermaid or an HTML page.
    Graph(graph::GraphArgs),
    /// The endpoints Combs published; `-o env` writes an env file.
    Endpoints(endpoints::EndpointsArgs),
    /// The upstream chain of a Comb, layer by layer, with each hop's phase.
    Via(via::ViaArgs),
    /// Everything about one Comb: identity, recorded status, endpoints, live status.
    Describe(describe::DescribeArgs),
    /// What the cluster shows of a Comb now: phase, reasons, pods, upstream.
    Status(status::StatusArgs),
    /// The logs of a Comb's containers.
    Logs(logs::LogsArgs),
    /// Rolling restart of a Comb's workloads; its Jobs run again.
    Restart(restart::RestartArgs),
    /// Scale a Comb's workloads to 0 until the next reconcile.
    Stop(stop::StopArgs),
    /// The manifests a Comb would apply now (its bridge while it borrows), as YAML.
    Render(render::RenderArgs),
    /// Can the controller work? Layers, CRD, permissions, upstream layers, cycles, loops.
    Check(check::CheckArgs),
    #[cfg(feature = "sandbox")]
    /// Kubernetes API emulator clusters on 127.0.0.1 and their kubeconfig, until stopped.
    Sandbox(sandbox::SandboxArgs),
    /// `demo` and `sandbox` in a comb built without the emulator: they say so.
    #[cfg(not(feature = "sandbox"))]
    #[command(
        name = "sandbox",
        alias = "demo",
        hide = true,
        disable_help_flag = true
    )]
    WithoutSandbox {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
}

impl Command {
    /// What the subcommand reads instead, when it never reads the federation configuration.
    fn ignores_config(&self) -> Option<&'static str> {
        match self {
            #[cfg(feature = "sandbox")]
            Command::Demo(_) => Some("comb demo writes and reads a configuration of its own"),
            #[cfg(feature = "sandbox")]
            Command::Sandbox(_) => Some("comb sandbox starts clusters from its own flags"),
            Command::Crd(_) => Some("comb crd prints the CRD for --group"),
            _ => None,
        }
    }
}

/// Parses the command line and runs the subcommand. Exit codes: 0 success, 1 failure, 2 usage.
pub fn main() -> ExitCode {
    main_with(ClassRegistry::with_builtins())
}

/// The CLI of a program that registers its own Comb classes in `registry`.
pub fn main_with(registry: ClassRegistry) -> ExitCode {
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    if matches.value_source("config") == Some(clap::parser::ValueSource::CommandLine)
        && let Some(why) = cli.command.ignores_config()
    {
        eprintln!("comb: {why}, not --config; leave it out");
        return ExitCode::from(2);
    }
    let outcome = match cli.command {
        Command::Run(args) => run::run(&cli.global, &registry, args),
        #[cfg(feature = "sandbox")]
        Command::Demo(args) if args.in_cluster => in_cluster::run(args),
        #[cfg(feature = "sandbox")]
        Command::Demo(args) => demo::run(args, &registry),
        Command::Crd(args) => crd::run(args),
        Command::Get(args) if args.lists_layers() => layer::get_layers(&cli.global),
        Command::Get(args) => get::run(&cli.global, args),
        Command::Layer(args) => layer::run(&cli.global, args),
        Command::Graph(args) => graph::run(&cli.global, args),
        Command::Endpoints(args) => endpoints::run(&cli.global, args),
        Command::Via(args) => via::run(&cli.global, args),
        Command::Describe(args) => describe::run(&cli.global, &registry, args),
        Command::Status(args) => status::run(&cli.global, &registry, args),
        Command::Logs(args) => logs::run(&cli.global, &registry, args),
        Command::Restart(args) => restart::run(&cli.global, &registry, args),
        Command::Stop(args) => stop::run(&cli.global, &registry, args),
        Command::Render(args) => render::run(&cli.global, &registry, args),
        Command::Check(args) => check::run(&cli.global, args),
        #[cfg(feature = "sandbox")]
        Command::Sandbox(args) => sandbox::run(args),
        #[cfg(not(feature = "sandbox"))]
        Command::WithoutSandbox { .. } => Err(anyhow::anyhow!(
            "this comb was built without the emulator (cargo feature `sandbox`): `comb sandbox` and `comb demo` are not in it"
        )),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("comb: {}", output::one_line(&error));
            ExitCode::from(1)
        }
    }
}
