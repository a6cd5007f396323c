//! `comb status REF`: what the cluster shows of a Comb now (reference §8): its phase, the
//! problems' reason and message, its pods, and while it borrows the upstream.

use std::process::ExitCode;

use comb_api::Reason;

use crate::cli::common::{Federation, GlobalArgs, block_on};
use crate::cli::output::{DataFormat, Table, fields, indent, serialize, upstream_line};
use crate::engine::class::ClassRegistry;
use crate::engine::live_status::{LiveStatus, PodState};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The Comb, `[LAYER:][NAMESPACE/]NAME`.
    #[arg(value_name = "REF")]
    reference: String,
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<DataFormat>,
}

/// The pods of a live status as a table.
pub fn pods_table(pods: &[PodState]) -> String {
    let mut table = Table::new(vec![
        "NAME", "PHASE", "READY", "RESTARTS", "REASON", "MESSAGE",
    ]);
    for pod in pods {
        table.row(vec![
            pod.name.clone(),
            pod.phase.clone(),
            pod.ready.to_string(),
            pod.restarts.to_string(),
            pod.reason.clone().unwrap_or_default(),
            pod.message.clone().unwrap_or_default(),
        ]);
    }
    table.render()
}

/// The live status for people.
pub fn render(reference: &str, live: &LiveStatus) -> String {
    let mut pairs = vec![
        ("Comb", reference.to_string()),
        ("Phase", live.phase.to_string()),
        ("Healthy", live.healthy.to_string()),
        (
            "Reason",
            live.reason
                .as_ref()
                .map(Reason::to_string)
                .unwrap_or_default(),
        ),
        ("Message", live.message.clone().unwrap_or_default()),
    ];
    if let Some(upstream) = &live.upstream {
        pairs.push(("Upstream", upstream_line(upstream)));
    }
    if live.pods.is_empty() {
        pairs.push(("Pods", String::new()));
        return fields(&pairs);
    }
    let mut text = fields(&pairs);
    text.push_str("Pods:\n");
    text.push_str(&indent(&pods_table(&live.pods), 2));
    text
}

pub fn run(
    global: &GlobalArgs,
    registry: &ClassRegistry,
    args: StatusArgs,
) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let opened = federation.open_comb(registry, &args.reference).await?;
        let live = opened.live().await?;
        print!(
            "{}",
            match args.output {
                None => render(&opened.located.location.to_string(), &live),
                Some(format) => serialize(&live, format)?,
            }
        );
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use comb_api::{CombUpstreamStatus, Phase};

    #[test]
    fn live_status_for_people() {
        let local = LiveStatus {
            phase: Phase::Error,
            healthy: false,
            reason: Some(Reason::from("CrashLoopBackOff")),
            message: Some("Pod nats-a: CrashLoopBackOff (7 restarts)".into()),
            pods: vec![PodState {
                name: "nats-a".into(),
                phase: "Running".into(),
                ready: false,
                restarts: 7,
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            }],
            upstream: None,
            rolling_out: false,
        };
        assert_eq!(
            render("prod:platform/nats", &local),
            "Comb:     prod:platform/nats\n\
             Phase:    Error\n\
             Healthy:  false\n\
             Reason:   CrashLoopBackOff\n\
             Message:  Pod nats-a: CrashLoopBackOff (7 restarts)\n\
             Pods:\n  \
             NAME     PHASE     READY   RESTARTS   REASON             MESSAGE\n  \
             nats-a   Running   false   7          CrashLoopBackOff   <none>\n"
        );
        let borrowed = LiveStatus {
            phase: Phase::Running,
            healthy: true,
            reason: None,
            message: None,
            pods: Vec::new(),
            upstream: Some(CombUpstreamStatus {
                class: Some("K8s".into()),
                context: Some("prod".into()),
                reachable: Some(true),
                phase: Some(Phase::Running),
                via: Some(vec!["prod".into()]),
                observed_at: None,
            }),
            rolling_out: false,
        };
        assert_eq!(
            render("staging:staging/db", &borrowed),
            "Comb:      staging:staging/db\n\
             Phase:     Running\n\
             Healthy:   true\n\
             Reason:    <none>\n\
             Message:   <none>\n\
             Upstream:  K8s (context prod): reachable, Running, via prod\n\
             Pods:      <none>\n"
        );
    }
}
