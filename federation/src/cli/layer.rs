//! `comb layer create|list|extend|delete` and `comb get layers`: a developer's own layer in
//! one command (docs/layers.md). The CombLayer is checked against its template here first, with
//! the sentence the controller would record, so that a refused ask never reaches the cluster.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use comb_api::{CombLayer, CombLayerSpec, LayerBorrowSpec, READY, SecretRef, layer_api_resource};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};

use crate::cli::common::{GlobalArgs, block_on};
use crate::cli::output::{DataFormat, Table, human_duration, serialize};
use crate::config::{Config, duration_arg, layer_from_template};
use crate::error::Error;

#[derive(Debug, clap::Args)]
pub struct LayerArgs {
    #[command(subcommand)]
    command: LayerCommand,
}

#[derive(Debug, clap::Subcommand)]
enum LayerCommand {
    /// Make a layer from a template of the configuration: it borrows every Comb of --from but
    /// those it runs itself (--local), until its TTL runs out.
    Create(CreateArgs),
    /// Every CombLayer: template, phase, expiry, its Combs Running of all.
    List,
    /// Give a layer more time: its expiry moves by --ttl (from now, when it has expired).
    Extend(ExtendArgs),
    /// Delete a layer: comb removes what it made for it, then the CombLayer goes.
    Delete(DeleteArgs),
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// The layer's name (a label value: it labels the Combs made for it).
    name: String,
    /// The layerTemplates entry it is made from.
    #[arg(long)]
    template: String,
    /// The kube context it runs in (default: the template's first context).
    #[arg(long, conflicts_with = "kubeconfig_secret")]
    context: Option<String>,
    /// NAMESPACE/NAME of a Secret holding the kubeconfig of its cluster (one the template
    /// lists).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    kubeconfig_secret: Option<String>,
    /// Its namespaces (default: TEMPLATE-NAME).
    #[arg(short = 'n', long = "namespace", value_name = "NAMESPACE")]
    namespaces: Vec<String>,
    /// The layer it borrows from.
    #[arg(long, value_name = "LAYER")]
    from: Option<String>,
    /// The namespace of the peers in --from (default: its only namespace, when it has one).
    #[arg(long, value_name = "NAMESPACE", requires = "from")]
    from_namespace: Option<String>,
    /// Patterns of the Combs of --from it gets (default: all).
    #[arg(long = "combs", value_name = "PATTERN", requires = "from")]
    combs: Vec<String>,
    /// Patterns of the Combs it runs itself instead of borrowing.
    #[arg(long = "local", value_name = "PATTERN", requires = "from")]
    local: Vec<String>,
    /// How long it lives (default: the template's defaultTTL).
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    ttl: Option<Duration>,
    /// Write the CombLayer instead of creating it.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<WriteFormat>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum WriteFormat {
    Yaml,
    Json,
}

#[derive(Debug, clap::Args)]
struct ExtendArgs {
    name: String,
    /// How much longer it lives.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    ttl: Duration,
}

#[derive(Debug, clap::Args)]
struct DeleteArgs {
    name: String,
}

pub fn run(global: &GlobalArgs, args: LayerArgs) -> anyhow::Result<ExitCode> {
    block_on(async move {
        let config = Config::load(&global.config)?;
        let pool = crate::config::client_pool(&config)?;
        let context = config
            .layer_context()
            .context("the configuration has no layers, so no layerContext")?
            .to_string();
        let api: Api<CombLayer> = Api::all_with(
            pool.client(&context).await?,
            &layer_api_resource(&config.group),
        );
        match args.command {
            LayerCommand::Create(args) => create(&config, &api, args).await,
            LayerCommand::List => list(&api).await,
            LayerCommand::Extend(args) => extend(&config, &api, args).await,
            LayerCommand::Delete(args) => delete(&api, &args.name).await,
        }
    })
}

/// `comb get layers`: the list of `comb layer list`.
pub fn get_layers(global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    run(
        global,
        LayerArgs {
            command: LayerCommand::List,
        },
    )
}

async fn create(
    config: &Config,
    api: &Api<CombLayer>,
    args: CreateArgs,
) -> anyhow::Result<ExitCode> {
    let layer = comb_layer(config, &args)?;
    // The controller's judgement, here first: a refused ask never reaches the cluster.
    let now = Timestamp::now();
    if let Err(refusal) = layer_from_template(config, &args.name, &layer.spec, now, now) {
        anyhow::bail!("layer {}: {refusal}", args.name);
    }
    if let Some(format) = args.output {
        let format = match format {
            WriteFormat::Yaml => DataFormat::Yaml,
            WriteFormat::Json => DataFormat::Json,
        };
        print!("{}", serialize(&layer, format)?);
        return Ok(ExitCode::SUCCESS);
    }
    api.create(&PostParams::default(), &layer)
        .await
        .map_err(|error| Error::kube(format!("create CombLayer {}", args.name), error))?;
    println!(
        "comblayer {} created from template {}; `comb layer list` shows when it is Ready",
        args.name, args.template
    );
    Ok(ExitCode::SUCCESS)
}

/// The CombLayer `args` describe, with the defaults filled in from `config`.
fn comb_layer(config: &Config, args: &CreateArgs) -> anyhow::Result<CombLayer> {
    let (_, template) = config.template(&args.template).with_context(|| {
        let names: Vec<&str> = config
            .layer_templates
            .iter()
            .map(|template| template.name.as_str())
            .collect();
        format!(
            "unknown template {} (layerTemplates: {})",
            args.template,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )
    })?;
    let kubeconfig_secret = match &args.kubeconfig_secret {
        None => None,
        Some(text) => {
            let (namespace, name) = text
                .split_once('/')
                .with_context(|| format!("--kubeconfig-secret {text}: write NAMESPACE/NAME"))?;
            Some(SecretRef {
                namespace: namespace.to_string(),
                name: name.to_string(),
                key: None,
            })
        }
    };
    let context = match (&args.context, &kubeconfig_secret) {
        (Some(context), _) => Some(context.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(template.contexts.first().cloned().with_context(|| {
            format!(
                "template {} names no context; give --kubeconfig-secret",
                template.name
            )
        })?),
    };
    let namespaces = if args.namespaces.is_empty() {
        vec![format!("{}-{}", template.name, args.name)]
    } else {
        args.namespaces.clone()
    };
    let borrow = args.from.as_ref().map(|from| LayerBorrowSpec {
        from: from.clone(),
        namespace: args.from_namespace.clone().or_else(|| {
            config
                .layer(from)
                .and_then(|layer| layer.namespaces.as_ref())
                .filter(|namespaces| namespaces.len() == 1)
                .map(|namespaces| namespaces[0].clone())
        }),
        combs: args.combs.clone(),
        local: args.local.clone(),
        ..LayerBorrowSpec::default()
    });
    Ok(CombLayer::new(
        &config.group,
        &args.name,
        CombLayerSpec {
            template: args.template.clone(),
            context,
            kubeconfig_secret,
            namespaces,
            borrow,
            ttl: args.ttl.map(duration_words),
            ..CombLayerSpec::default()
        },
    ))
}

/// A duration as `--ttl` and `spec.ttl` write it: whole hours, minutes or seconds.
fn duration_words(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs > 0 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs > 0 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

async fn list(api: &Api<CombLayer>) -> anyhow::Result<ExitCode> {
    let layers = api
        .list(&ListParams::default())
        .await
        .map_err(|error| Error::kube("list CombLayers", error))?;
    print!("{}", table(&layers.items, Timestamp::now()));
    Ok(ExitCode::SUCCESS)
}

/// The table of `comb layer list`.
fn table(layers: &[CombLayer], now: Timestamp) -> String {
    let mut table = Table::new(vec![
        "NAME",
        "TEMPLATE",
        "CONTEXT",
        "NAMESPACES",
        "PHASE",
        "EXPIRES",
        "COMBS",
        "AGE",
        "MESSAGE",
    ]);
    let ago = |at: Timestamp| human_duration(now.duration_since(at).as_secs());
    for layer in layers {
        let status = layer.status.clone().unwrap_or_default();
        let expires = status.expires_at.as_ref().map_or("-".to_string(), |at| {
            let left = at.0.duration_since(now).as_secs();
            if left > 0 {
                format!("in {}", human_duration(left))
            } else {
                format!("{} ago", human_duration(-left))
            }
        });
        let combs = status.combs.as_ref().map_or("-".to_string(), |combs| {
            format!("{}/{}", combs.ready, combs.total)
        });
        let context = match (&layer.spec.context, &layer.spec.kubeconfig_secret) {
            (Some(context), _) => context.clone(),
            (None, Some(secret)) => format!("Secret {secret}"),
            (None, None) => "-".to_string(),
        };
        table.row(vec![
            layer.name().to_string(),
            layer.spec.template.clone(),
            context,
            layer.spec.namespaces.join(","),
            status
                .phase
                .map_or("-".to_string(), |phase| phase.as_str().to_string()),
            expires,
            combs,
            layer
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or("-".to_string(), |at| ago(at.0)),
            status
                .condition(READY)
                .and_then(|ready| ready.message.clone())
                .unwrap_or_default(),
        ]);
    }
    table.render()
}

async fn extend(
    config: &Config,
    api: &Api<CombLayer>,
    args: ExtendArgs,
) -> anyhow::Result<ExitCode> {
    let mut layer = api
        .get(&args.name)
        .await
        .map_err(|error| Error::kube(format!("get CombLayer {}", args.name), error))?;
    let now = Timestamp::now();
    let current = layer
        .status
        .as_ref()
        .and_then(|status| status.expires_at.as_ref())
        .map_or(now, |at| at.0)
        .max(now);
    let by = SignedDuration::try_from(args.ttl)?;
    let expires_at = current.checked_add(by)?;
    layer.spec.ttl = None;
    layer.spec.expires_at = Some(Time(expires_at));
    let created = layer
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |at| at.0);
    if let Err(refusal) = layer_from_template(config, &args.name, &layer.spec, created, now) {
        anyhow::bail!("layer {}: {refusal}", args.name);
    }
    let patch = serde_json::json!({"spec": {"ttl": null, "expiresAt": Time(expires_at)}});
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|error| Error::kube(format!("patch CombLayer {}", args.name), error))?;
    println!("comblayer {} now expires at {expires_at}", args.name);
    Ok(ExitCode::SUCCESS)
}

async fn delete(api: &Api<CombLayer>, name: &str) -> anyhow::Result<ExitCode> {
    api.delete(name, &DeleteParams::default())
        .await
        .map_err(|error| Error::kube(format!("delete CombLayer {name}"), error))?;
    println!("comblayer {name} deleted; comb removes what it made for it, then the CombLayer goes");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use comb_api::{CombCounts, CombLayerStatus, LayerPhase};

    #[test]
    fn the_list_shows_expiry_and_combs_ready_of_all() {
        let now: Timestamp = "2026-12-05T10:00:00Z".parse().unwrap();
        let mut layer = CombLayer::new(
            "comb.internal",
            "alice",
            CombLayerSpec {
                template: "dev".into(),
                context: Some("dev".into()),
                namespaces: vec!["dev-alice".into()],
                ..CombLayerSpec::default()
            },
        );
        layer.metadata.creation_timestamp = Some(Time("2026-12-05T09:00:00Z".parse().unwrap()));
        layer.status = Some(CombLayerStatus {
            phase: Some(LayerPhase::Ready),
            expires_at: Some(Time("2026-12-05T17:00:00Z".parse().unwrap())),
            combs: Some(CombCounts {
                total: 3,
                ready: 2,
                pending: 1,
                failed: 0,
            }),
            ..CombLayerStatus::default()
        });
        let table = table(&[layer], now);
        let mut lines = table.lines();
        assert!(
            lines
                .next()
                .unwrap()
                .starts_with("NAME    TEMPLATE   CONTEXT")
        );
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            row,
            [
                "alice",
                "dev",
                "dev",
                "dev-alice",
                "Ready",
                "in",
                "7h",
                "2/3",
                "60m",
                "<none>"
            ]
        );
    }

    #[test]
    fn durations_are_written_as_people_write_them() {
        for (seconds, words) in [(8 * 3600, "8h"), (90 * 60, "90m"), (45, "45s")] {
            assert_eq!(duration_words(Duration::from_secs(seconds)), words);
        }
    }
}
