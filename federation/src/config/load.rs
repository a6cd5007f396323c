//! Reading a configuration: the file, its YAML, its shape (every value that does not fit, with
//! its key, all at once), then the checks of `validate.rs`; and checking the kubeconfig's
//! contexts against the layers.

use std::path::Path;

use comb_kubeconfigs::ClientPool;
use serde_json::Value;

use super::Config;
use super::raw::RawConfig;
use super::validate::{self, KubeContext, Problem, check_contexts};
use crate::error::{Error, Result};

impl Config {
    /// Reads and checks the configuration file at `path`. A relative `kubeconfig` in it is taken
    /// relative to the file's directory.
    pub fn load(path: &Path) -> Result<Config> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| {
            Error::Config(format!(
                "reading the configuration {origin} failed: {error}"
            ))
        })?;
        Config::from_yaml(&text, &origin, path.parent())
    }

    /// Parses and checks a configuration; `origin` names it in messages and `base_dir` anchors a
    /// relative `kubeconfig`.
    pub fn from_yaml(text: &str, origin: &str, base_dir: Option<&Path>) -> Result<Config> {
        // YAML syntax first (its message names line and column), then the shape, every
        // misfit at once with its key path.
        let document: Value = serde_saphyr::from_str(text).map_err(|error| {
            Error::Config(format!("{origin}: {}", first_line(&error.to_string())))
        })?;
        let (raw, mut problems) = decode(document);
        // What decoded is checked too, so one run lists every problem of the file; a key whose
        // value did not fit is reported once, as the misfit.
        match raw.map(|raw| validate::from_raw(raw, origin, base_dir)) {
            Some(Ok(config)) if problems.is_empty() => return Ok(config),
            Some(Err(more)) => {
                let more: Vec<Problem> = more
                    .into_iter()
                    .filter(|problem| {
                        !problems
                            .iter()
                            .any(|misfit| problem.key.starts_with(&misfit.key))
                    })
                    .collect();
                problems.extend(more);
            }
            _ => {}
        }
        Err(problems_error(origin, &problems))
    }
}

/// Checks a configuration built by hand (everything [`Config::from_yaml`] checks but the
/// syntax). Free functions rather than methods: they need the checks of `validate`, which
/// itself builds a [`Config`], and a method beside the type would make its module use them.
pub fn check(config: &Config) -> Result<()> {
    let problems = validate::check(config);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems_error(&config.origin, &problems))
    }
}

/// Opens the kubeconfig (the configured file, else `$KUBECONFIG`, `~/.kube/config`,
/// in-cluster) and checks every layer's context against it.
pub fn client_pool(config: &Config) -> Result<ClientPool> {
    let pool = match &config.kubeconfig {
        Some(path) => ClientPool::from_path(path),
        None => ClientPool::from_environment(),
    }
    .map_err(|source| Error::Kubeconfig {
        what: config.origin.clone(),
        source,
    })?;
    check_pool(config, &pool)?;
    Ok(pool)
}

/// Checks the layers' contexts against a pool built elsewhere (e.g. by the demo).
pub fn check_pool(config: &Config, pool: &ClientPool) -> Result<()> {
    let contexts: Vec<KubeContext> = pool
        .contexts()
        .into_iter()
        .map(|name| KubeContext {
            server: pool.server_url(&name).unwrap_or_default(),
            name,
        })
        .collect();
    let problems = check_contexts(config, &contexts, pool.origin());
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems_error(&config.origin, &problems))
    }
}

fn problems_error(origin: &str, problems: &[Problem]) -> Error {
    let listed: Vec<String> = problems.iter().map(Problem::to_string).collect();
    Error::Config(format!("{origin}: {}", listed.join("; ")))
}

/// The configuration's shape: a [`Problem`] per value of the wrong type or key comb does not
/// know, each with its key path (`layers[0].namespaces`), all of them, not only the first.
/// serde stops at the first, so each misfit is taken out of the document and it is decoded
/// again (bounded: a document has only so many keys).
fn decode(mut document: Value) -> (Option<RawConfig>, Vec<Problem>) {
    let mut problems: Vec<Problem> = Vec::new();
    let mut nulled: Option<String> = None;
    for _ in 0..256 {
        let error = match serde_path_to_error::deserialize::<_, RawConfig>(&document) {
            Ok(raw) => return (Some(raw), problems),
            Err(error) => error,
        };
        let key = error.path().to_string();
        let segments: Vec<serde_path_to_error::Segment> = error.path().iter().cloned().collect();
        if nulled.as_deref() == Some(key.as_str()) {
            // null did not fit either (an unknown key, a list item): drop its nearest key.
            if !remove_nearest_key(&mut document, &segments) {
                break;
            }
            nulled = None;
            continue;
        }
        problems.push(Problem {
            key: if key == "." {
                String::new()
            } else {
                key.clone()
            },
            message: first_line(&error.inner().to_string()).to_string(),
        });
        match value_at(&mut document, &segments) {
            // Every optional key reads null as absent: decode the rest.
            Some(value) => *value = Value::Null,
            None => break,
        }
        nulled = Some(key);
    }
    if problems.is_empty() {
        problems.push(Problem {
            key: String::new(),
            message: "the configuration does not decode".into(),
        });
    }
    (None, problems)
}

fn value_at<'a>(
    document: &'a mut Value,
    segments: &[serde_path_to_error::Segment],
) -> Option<&'a mut Value> {
    use serde_path_to_error::Segment;
    let mut value = document;
    for segment in segments {
        value = match segment {
            Segment::Seq { index } => value.get_mut(*index)?,
            Segment::Map { key } | Segment::Enum { variant: key } => value.get_mut(key.as_str())?,
            Segment::Unknown => return None,
        };
    }
    Some(value)
}

/// Removes the deepest map key on `segments` from its map; false when there is none.
fn remove_nearest_key(document: &mut Value, segments: &[serde_path_to_error::Segment]) -> bool {
    use serde_path_to_error::Segment;
    let Some(last_key) = segments
        .iter()
        .rposition(|segment| matches!(segment, Segment::Map { .. }))
    else {
        return false;
    };
    let Segment::Map { key } = &segments[last_key] else {
        return false;
    };
    value_at(document, &segments[..last_key])
        .and_then(Value::as_object_mut)
        .is_some_and(|map| map.remove(key.as_str()).is_some())
}

/// The parser's message without the snippet of the file that follows it: errors here are one
/// line, and the message already names line and column.
fn first_line(message: &str) -> &str {
    let line = message.lines().next().unwrap_or_default().trim();
    line.strip_prefix("error: ").unwrap_or(line)
}
