//! The demo's packets (`comb demo --backend kube --network`): a client Pod in each layer calls
//! every service the layer's Combs offer, by the names a consumer uses (`db:5432`), through the
//! layer's cluster DNS, kube-proxy and the bridges comb wrote; each call is answered by the
//! identity server of the Pod that got it. The table says who answered, beside the via chain
//! comb recorded: the objects' story and the packets' must agree.

use std::time::Duration;

use comb_sandbox::Clusters;
use comb_sandbox::real::network::CallOutcome;
use serde_json::{Value, json};

use crate::cli::get::CombRow;
use crate::cli::output::Table;

/// The Pod every layer calls from.
pub const CLIENT: &str = "client";

/// How many calls each row makes once the first was answered as expected.
pub const CALLS_PER_ROW: usize = 20;

/// How long the data path may take to follow the objects (kube-proxy's next sync, a Pod's
/// network, CoreDNS's watch).
const CONVERGE_LIMIT: Duration = Duration::from_secs(60);

/// What each layer calls: the Comb, and the `service:port` a consumer of it uses.
pub const CALLS: [(&str, &str); 4] = [
    ("nats", "nats:4222"),
    ("nats", "nats:8222"),
    ("db", "db:5432"),
    ("mailer", "mailer:587"),
];

/// The client Pod of a layer's namespace: nothing listens in it, it only calls.
pub fn client_pod(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": CLIENT, "namespace": namespace, "labels": {"app": CLIENT}},
        "spec": {"containers": [{"name": CLIENT, "image": "busybox:1.36", "command": ["sleep", "infinity"]}]}
    })
}

/// One row of the table: a layer's calls of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRow {
    pub layer: String,
    pub call: String,
    /// Who answered (`cluster/namespace/pod:port`), each once.
    pub answered_by: Vec<String>,
    /// The `cluster/namespace/` the answers should come from.
    pub expected: String,
    /// comb's via chain of the Comb in this layer.
    pub via: Vec<String>,
    /// Calls answered from the expected place, of those made.
    pub answered: usize,
    pub made: usize,
    /// What went wrong with a call that was not answered as expected.
    pub failure: Option<String>,
}

impl CallRow {
    pub fn complete(&self) -> bool {
        self.made > 0 && self.answered == self.made
    }
}

/// `cluster/namespace/pod:port` of an answer.
fn answer_of(outcome: &CallOutcome) -> Option<String> {
    let by = outcome.answered_by.as_deref()?;
    Some(match outcome.port {
        Some(port) => format!("{by}:{port}"),
        None => by.to_string(),
    })
}

/// A layer's place: `(cluster, namespace)`.
pub type Place<'a> = (&'a str, &'a str);

/// Calls every service of [`CALLS`] from the client Pod of each layer in `places`
/// (`(layer, cluster, namespace)`), expecting the answers where `rows` (the Combs as `get`
/// reads them) say the service comes from: the last layer of its via chain, else its own.
pub async fn call_every_layer(
    sandbox: &Clusters,
    places: &[(&str, Place<'_>)],
    rows: &[CombRow],
) -> Vec<CallRow> {
    let place_of = |layer: &str| {
        places
            .iter()
            .find(|(name, _)| *name == layer)
            .map(|(_, (cluster, namespace))| format!("{cluster}/{namespace}/"))
            .unwrap_or_default()
    };
    let mut table = Vec::new();
    for (layer, (cluster, namespace)) in places {
        for (comb, call) in CALLS {
            let via = rows
                .iter()
                .find(|row| row.layer == *layer && row.name == comb)
                .map(|row| row.via.clone())
                .unwrap_or_default();
            let expected = place_of(via.last().map(String::as_str).unwrap_or(layer));
            let mut row = CallRow {
                layer: layer.to_string(),
                call: call.to_string(),
                answered_by: Vec::new(),
                expected: expected.clone(),
                via,
                answered: 0,
                made: 0,
                failure: None,
            };
            let Some(network) = sandbox.network(cluster) else {
                row.failure = Some(format!("cluster {cluster} has no network"));
                table.push(row);
                continue;
            };
            let from_expected = |outcome: &CallOutcome| {
                outcome
                    .answered_by
                    .as_deref()
                    .is_some_and(|by| by.starts_with(&expected))
            };
            let calls = network
                .calls_once_converged(
                    namespace,
                    CLIENT,
                    call,
                    CALLS_PER_ROW,
                    CONVERGE_LIMIT,
                    from_expected,
                )
                .await;
            row.made = if calls.converged {
                calls.outcomes.len()
            } else {
                0
            };
            row.answered = if calls.converged {
                calls.count(from_expected)
            } else {
                0
            };
            for outcome in &calls.outcomes {
                if let Some(answer) = answer_of(outcome).filter(|a| !row.answered_by.contains(a)) {
                    row.answered_by.push(answer);
                }
            }
            row.failure = calls
                .outcomes
                .iter()
                .find(|outcome| !from_expected(outcome))
                .map(|outcome| match (&outcome.message, &outcome.answered_by) {
                    (Some(message), _) => message.clone(),
                    (None, Some(by)) => format!("answered by {by}, not from {expected}"),
                    (None, None) => "no answer".to_string(),
                });
            table.push(row);
        }
    }
    table
}

/// The table of calls: LAYER, CALL, ANSWERED BY, VIA, CALLS.
pub fn table(rows: &[CallRow]) -> String {
    let mut table = Table::new(vec!["LAYER", "CALL", "ANSWERED BY", "VIA", "CALLS"]);
    for row in rows {
        let answered_by = if row.answered_by.is_empty() {
            format!("nobody ({})", row.failure.as_deref().unwrap_or("no answer"))
        } else {
            row.answered_by.join(", ")
        };
        let via = if row.via.is_empty() {
            "-".to_string()
        } else {
            row.via.join(", ")
        };
        let calls = if row.made == 0 {
            "0".to_string()
        } else {
            format!("{}/{}", row.answered, row.made)
        };
        table.row(vec![
            row.layer.clone(),
            row.call.clone(),
            answered_by,
            via,
            calls,
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_who_answered_and_how_many() {
        let rows = [
            CallRow {
                layer: "dev".into(),
                call: "db:5432".into(),
                answered_by: vec!["prod/platform/db-0:5432".into()],
                expected: "prod/platform/".into(),
                via: vec!["staging".into(), "prod".into()],
                answered: 20,
                made: 20,
                failure: None,
            },
            CallRow {
                layer: "dev".into(),
                call: "nats:4222".into(),
                answered_by: Vec::new(),
                expected: "prod/staging/".into(),
                via: vec!["staging".into()],
                answered: 0,
                made: 0,
                failure: Some("connecting to 10.96.0.9:4222: refused".into()),
            },
        ];
        assert!(rows[0].complete());
        assert!(!rows[1].complete());
        let text = table(&rows);
        assert!(text.contains("prod/platform/db-0:5432"), "{text}");
        assert!(text.contains("staging, prod"), "{text}");
        assert!(text.contains("20/20"), "{text}");
        assert!(
            text.contains("nobody (connecting to 10.96.0.9:4222: refused)"),
            "{text}"
        );
    }
}
