//! `comb graph`: the federation as a picture (layers, Combs, borrow edges with phases and via
//! chains) in Graphviz DOT, Mermaid or the admin page's HTML.

use std::process::ExitCode;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::picture::{LayerCombs, Picture, to_dot, to_html, to_mermaid};

#[derive(Debug, clap::Args)]
pub struct GraphArgs {
    /// `dot` (Graphviz: `comb graph | dot -Tsvg > federation.svg`), `mermaid` (for Markdown),
    /// or `html` (the page the admin address serves at `/`).
    #[arg(
        short = 'o',
        long,
        value_enum,
        default_value = "dot",
        value_name = "FORMAT"
    )]
    output: GraphFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum GraphFormat {
    Dot,
    Mermaid,
    Html,
}

pub fn run(global: &GlobalArgs, args: GraphArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let mut listed = Vec::new();
        for layer in &federation.config.layers {
            listed.push(match federation.list_combs(layer, None).await {
                Ok(combs) => LayerCombs::Read(combs),
                Err(error) => LayerCombs::Unread(crate::cli::output::one_line(&error)),
            });
        }
        let picture = Picture::build(&federation.config, &listed);
        print!(
            "{}",
            match args.output {
                GraphFormat::Dot => to_dot(&picture),
                GraphFormat::Mermaid => to_mermaid(&picture),
                GraphFormat::Html => to_html(
                    &picture,
                    &jiff::Timestamp::now()
                        .strftime("%Y-%m-%d %H:%M:%S UTC")
                        .to_string(),
                    5
                ),
            }
        );
        // The picture shows an unread layer; the exit code says so too.
        let unread: Vec<&str> = listed
            .iter()
            .filter_map(|layer| match layer {
                LayerCombs::Unread(why) => Some(why.as_str()),
                LayerCombs::Read(_) => None,
            })
            .collect();
        for why in &unread {
            eprintln!("comb: {why}");
        }
        Ok(if unread.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}
