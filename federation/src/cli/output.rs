//! What the CLI prints: tables for people, JSON and YAML for scripts, env files for processes
//! next to the cluster. Pure functions from data to text; the commands print what they return.

use std::fmt::Write as _;

use comb_api::{CombEndpoint, CombUpstreamStatus, Phase};
use serde::Serialize;

/// `-o json|yaml`: the machine-readable formats every command offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DataFormat {
    Json,
    Yaml,
}

/// `value` as pretty JSON or as YAML, ending in a newline.
pub fn serialize<T: Serialize>(value: &T, format: DataFormat) -> anyhow::Result<String> {
    Ok(match format {
        DataFormat::Json => {
            let mut text = serde_json::to_string_pretty(value)?;
            text.push('\n');
            text
        }
        DataFormat::Yaml => {
            let text = serde_saphyr::to_string(value)?;
            if text.ends_with('\n') {
                text
            } else {
                text + "\n"
            }
        }
    })
}

/// A table as kubectl prints one: upper-case headers, left-aligned columns three spaces apart,
/// no trailing blanks. An empty cell shows as `<none>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

/// Shown for a cell without a value.
pub const NONE: &str = "<none>";

impl Table {
    pub fn new(headers: Vec<&'static str>) -> Table {
        Table {
            headers,
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells count as empty, extra cells are a programming error kept
    /// visible (they widen the table rather than vanish).
    pub fn row(&mut self, cells: Vec<String>) -> &mut Table {
        self.rows.push(cells);
        self
    }

    pub fn render(&self) -> String {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.headers.len()])
            .max()
            .unwrap_or_default();
        let cell = |row: &[String], column: usize| -> String {
            match row.get(column).map(String::as_str) {
                None | Some("") => NONE.to_string(),
                Some(text) => text.to_string(),
            }
        };
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        let lines: Vec<Vec<String>> = std::iter::once(headers)
            .chain(
                self.rows
                    .iter()
                    .map(|row| (0..columns).map(|column| cell(row, column)).collect()),
            )
            .collect();
        let widths: Vec<usize> = (0..columns)
            .map(|column| {
                lines
                    .iter()
                    .map(|line| line.get(column).map_or(0, |c| c.chars().count()))
                    .max()
                    .unwrap_or_default()
            })
            .collect();
        let mut text = String::new();
        for line in &lines {
            let mut out = String::new();
            for (column, value) in line.iter().enumerate() {
                if column + 1 == line.len() {
                    out.push_str(value);
                } else {
                    let width = widths.get(column).copied().unwrap_or_default();
                    let _ = write!(out, "{value:<width$}   ");
                }
            }
            text.push_str(out.trim_end());
            text.push('\n');
        }
        text
    }
}

/// A duration the way kubectl shows ages (`45s`, `5m30s`, `3h`, `2d4h`, `3y12d`): more precision
/// for young things, less for old ones. Negative durations (clock skew) show as `0s`.
pub fn human_duration(seconds: i64) -> String {
    let seconds = seconds.max(0);
    let minutes = seconds / 60;
    let hours = minutes / 60;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 60 * 2 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            rest => format!("{minutes}m{rest}s"),
        }
    } else if minutes < 60 * 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            rest => format!("{hours}h{rest}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            rest => format!("{days}d{rest}h"),
        }
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if years < 8 {
        match days % 365 {
            0 => format!("{years}y"),
            rest => format!("{years}y{rest}d"),
        }
    } else {
        format!("{years}y")
    }
}

/// `Key:   value` lines with the values aligned, as `kubectl describe` prints them; an empty
/// value shows as `<none>`.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(key, _)| key.chars().count() + 1)
        .max()
        .unwrap_or_default();
    let mut text = String::new();
    for (key, value) in pairs {
        let key = format!("{key}:");
        let value = if value.is_empty() { NONE } else { value };
        let _ = writeln!(text, "{key:<width$}  {value}");
    }
    text
}

/// Every line of `text` indented by `by` spaces (for a table under a heading).
pub fn indent(text: &str, by: usize) -> String {
    text.lines()
        .map(|line| format!("{:by$}{line}\n", ""))
        .collect()
}

/// What an upstream record says, in one line: `K8s (context staging): reachable, Running, via
/// staging, prod`.
pub fn upstream_line(upstream: &CombUpstreamStatus) -> String {
    let mut parts = Vec::new();
    if let Some(reachable) = upstream.reachable {
        parts.push(
            if reachable {
                "reachable"
            } else {
                "unreachable"
            }
            .to_string(),
        );
    }
    parts.push(
        upstream
            .phase
            .as_ref()
            .map_or_else(|| "in no known phase".to_string(), Phase::to_string),
    );
    if let Some(via) = upstream.via.as_ref().filter(|via| !via.is_empty()) {
        parts.push(format!("via {}", via.join(", ")));
    }
    let class = upstream.class.as_deref().unwrap_or("an upstream");
    match &upstream.context {
        Some(context) => format!("{class} (context {context}): {}", parts.join(", ")),
        None => format!("{class}: {}", parts.join(", ")),
    }
}

/// A list for a table cell: `a, b`, empty when there is nothing (the table shows `<none>`).
pub fn list(items: &[String]) -> String {
    items.join(", ")
}

/// The variable name of a Comb's endpoint in an env file: `<COMB>_<ENDPOINT>` upper-cased, every
/// run of characters outside `[A-Z0-9]` replaced by one `_` (the reference example's rule).
pub fn env_var(comb: &str, endpoint: &str) -> String {
    let upper = format!("{comb}_{endpoint}").to_uppercase();
    let mut var = String::with_capacity(upper.len());
    let mut in_run = false;
    for c in upper.chars() {
        if c.is_ascii_uppercase() || c.is_ascii_digit() {
            var.push(c);
            in_run = false;
        } else if !in_run {
            var.push('_');
            in_run = true;
        }
    }
    var
}

/// One Comb's part of an env file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvComb {
    /// How the Comb sorts: its full reference (`layer:namespace/name`).
    pub key: String,
    pub name: String,
    /// The recorded phase; a Comb without a recorded status is left out of the file.
    pub phase: Option<String>,
    pub endpoints: Vec<CombEndpoint>,
}

/// An env file as the reference example writes it: a header naming `place` and `writer`, then per
/// Comb (sorted by key, only those with a recorded status) `# <name>: <phase>` and its
/// `<VAR>_CLUSTER=` / `<VAR>_EXTERNAL=` lines, each where the address exists.
pub fn env_file(place: &str, writer: &str, combs: &[EnvComb]) -> String {
    let mut sorted: Vec<&EnvComb> = combs.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut text = format!("# Endpoints of the Combs in {place}, written by {writer}\n");
    for comb in sorted {
        let Some(phase) = &comb.phase else { continue };
        let _ = writeln!(text, "# {}: {phase}", comb.name);
        for endpoint in &comb.endpoints {
            let var = env_var(&comb.name, &endpoint.name);
            if let Some(cluster) = &endpoint.cluster {
                let _ = writeln!(text, "{var}_CLUSTER={cluster}");
            }
            if let Some(external) = &endpoint.external {
                let _ = writeln!(text, "{var}_EXTERNAL={external}");
            }
        }
    }
    text
}

/// The error and its causes on one line, as anyhow's `{:#}` prints them, but without the text
/// of a client error: the message above it already holds the server's words, and kube's own
/// Display appends a Debug dump of the server's Status.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        if cause.downcast_ref::<kube::Error>().is_some()
            || cause.downcast_ref::<Box<kube::Error>>().is_some()
        {
            break;
        }
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_one_line_without_the_clients_debug_dump() {
        let status = kube::core::Status {
            code: 503,
            reason: "ServiceUnavailable".into(),
            message: "the layer is partitioned".into(),
            ..Default::default()
        };
        let error = anyhow::Error::from(crate::error::Error::kube(
            "get Comb dev:platform/db",
            kube::Error::Api(Box::new(status)),
        ))
        .context("opening dev:db failed");
        assert_eq!(
            one_line(&error),
            "opening dev:db failed: Kubernetes API error (get Comb dev:platform/db): \
             503 ServiceUnavailable: the layer is partitioned"
        );
    }

    #[test]
    fn tables_align_and_mark_empty_cells() {
        let mut table = Table::new(vec!["LAYER", "NAME", "VIA"]);
        table
            .row(vec!["prod".into(), "db".into(), String::new()])
            .row(vec!["staging".into(), "nats-monitor".into(), "prod".into()]);
        assert_eq!(
            table.render(),
            "LAYER     NAME           VIA\n\
             prod      db             <none>\n\
             staging   nats-monitor   prod\n"
        );
        let empty = Table::new(vec!["A", "B"]);
        assert_eq!(empty.render(), "A   B\n");
        // A short row is padded with <none>, never shifted.
        let mut short = Table::new(vec!["A", "B"]);
        short.row(vec!["x".into()]);
        assert_eq!(short.render(), "A   B\nx   <none>\n");
    }

    #[test]
    fn fields_and_upstream_lines() {
        assert_eq!(
            fields(&[("Phase", "Running".into()), ("Upstream", String::new())]),
            "Phase:     Running\nUpstream:  <none>\n"
        );
        assert_eq!(indent("a\nb\n", 2), "  a\n  b\n");
        let upstream = CombUpstreamStatus {
            class: Some("K8s".into()),
            context: Some("staging".into()),
            reachable: Some(true),
            phase: Some("Running".into()),
            via: Some(vec!["staging".into(), "prod".into()]),
            observed_at: None,
        };
        assert_eq!(
            upstream_line(&upstream),
            "K8s (context staging): reachable, Running, via staging, prod"
        );
        let fixed = CombUpstreamStatus {
            class: Some("Static".into()),
            reachable: Some(false),
            ..CombUpstreamStatus::default()
        };
        assert_eq!(
            upstream_line(&fixed),
            "Static: unreachable, in no known phase"
        );
    }

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (-5, "0s"),
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (120, "2m"),
            (330, "5m30s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400 + 4 * 3600, "2d4h"),
            (8 * 86400, "8d"),
            (2 * 365 * 86400 + 12 * 86400, "2y12d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}");
        }
    }

    #[test]
    fn env_var_names() {
        let cases = [
            ("nats", "client", "NATS_CLIENT"),
            ("db", "postgres", "DB_POSTGRES"),
            ("nats-2", "monitor", "NATS_2_MONITOR"),
            ("My.comb__x", "web-ui", "MY_COMB_X_WEB_UI"),
            ("a", "b", "A_B"),
        ];
        for (comb, endpoint, expected) in cases {
            assert_eq!(env_var(comb, endpoint), expected);
        }
    }

    #[test]
    fn env_files_follow_the_reference_example() {
        let endpoint =
            |name: &str, port, cluster: Option<&str>, external: Option<&str>| CombEndpoint {
                name: name.into(),
                protocol: Some("tcp".into()),
                port,
                cluster: cluster.map(Into::into),
                external: external.map(Into::into),
            };
        let combs = [
            EnvComb {
                key: "dev:platform/nats".into(),
                name: "nats".into(),
                phase: Some("Running".into()),
                endpoints: vec![endpoint(
                    "client",
                    4222,
                    Some("192.0.2.20:4222"),
                    Some("192.0.2.20:4222"),
                )],
            },
            EnvComb {
                key: "dev:platform/db".into(),
                name: "db".into(),
                phase: Some("Pending".into()),
                endpoints: vec![endpoint(
                    "postgres",
                    5432,
                    Some("db.platform.svc:5432"),
                    None,
                )],
            },
            EnvComb {
                key: "dev:platform/mailer".into(),
                name: "mailer".into(),
                phase: None,
                endpoints: vec![endpoint("smtp", 587, Some("x:1"), None)],
            },
        ];
        assert_eq!(
            env_file("dev:platform", "comb", &combs),
            "# Endpoints of the Combs in dev:platform, written by comb\n\
             # db: Pending\n\
             DB_POSTGRES_CLUSTER=db.platform.svc:5432\n\
             # nats: Running\n\
             NATS_CLIENT_CLUSTER=192.0.2.20:4222\n\
             NATS_CLIENT_EXTERNAL=192.0.2.20:4222\n"
        );
        assert_eq!(
            env_file("x", "comb", &[]),
            "# Endpoints of the Combs in x, written by comb\n"
        );
    }

    #[test]
    fn serializes_for_scripts() {
        let value = serde_json::json!({"name": "db", "via": ["staging", "prod"]});
        assert_eq!(
            serialize(&value, DataFormat::Json).unwrap(),
            "{\n  \"name\": \"db\",\n  \"via\": [\n    \"staging\",\n    \"prod\"\n  ]\n}\n"
        );
        let yaml = serialize(&value, DataFormat::Yaml).unwrap();
        let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, value);
        assert!(yaml.ends_with('\n'));
    }
}
