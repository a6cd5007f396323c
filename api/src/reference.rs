//! `[LAYER:][NAMESPACE/]NAME`: how the CLI and dependencies name a Comb.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// A reference to a Comb: an optional layer, an optional namespace and a name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CombRef {
    pub layer: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
}

impl CombRef {
    /// Parses `[LAYER:][NAMESPACE/]NAME`. Every part that is written must be non-empty and free
    /// of `:`, `/` and whitespace.
    pub fn parse(text: &str) -> Result<CombRef> {
        let problem = |why: &str| {
            Error::Reference(format!(
                "'{text}' is not a Comb reference ([LAYER:][NAMESPACE/]NAME): {why}"
            ))
        };
        let (layer, rest) = match text.split_once(':') {
            Some((layer, rest)) => (Some(layer), rest),
            None => (None, text),
        };
        let (namespace, name) = match rest.split_once('/') {
            Some((namespace, name)) => (Some(namespace), name),
            None => (None, rest),
        };
        for (what, part) in [
            ("layer", layer),
            ("namespace", namespace),
            ("name", Some(name)),
        ] {
            let Some(part) = part else { continue };
            if part.is_empty() {
                return Err(problem(&format!("the {what} is empty")));
            }
            if part.contains(|c: char| c == ':' || c == '/' || c.is_whitespace()) {
                return Err(problem(&format!(
                    "the {what} '{part}' holds ':', '/' or whitespace"
                )));
            }
        }
        Ok(CombRef {
            layer: layer.map(str::to_string),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        })
    }
}

impl FromStr for CombRef {
    type Err = Error;
    fn from_str(text: &str) -> Result<CombRef> {
        CombRef::parse(text)
    }
}

impl fmt::Display for CombRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(layer) = &self.layer {
            write!(f, "{layer}:")?;
        }
        if let Some(namespace) = &self.namespace {
            write!(f, "{namespace}/")?;
        }
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let cases = [
            ("nats", None, None, "nats"),
            ("platform/nats", None, Some("platform"), "nats"),
            ("dev:nats", Some("dev"), None, "nats"),
            ("dev:platform/nats", Some("dev"), Some("platform"), "nats"),
        ];
        for (text, layer, namespace, name) in cases {
            let parsed = CombRef::parse(text).unwrap();
            assert_eq!(parsed.layer.as_deref(), layer, "{text}");
            assert_eq!(parsed.namespace.as_deref(), namespace, "{text}");
            assert_eq!(parsed.name, name, "{text}");
            assert_eq!(parsed.to_string(), text);
        }
    }

    #[test]
    fn refuses_malformed() {
        let cases = [
            ("", "the name is empty"),
            ("dev:", "the name is empty"),
            (":nats", "the layer is empty"),
            ("/nats", "the namespace is empty"),
            ("a/b/c", "the name 'b/c' holds ':', '/' or whitespace"),
            ("a:b:c", "the name 'b:c' holds ':', '/' or whitespace"),
            ("na ts", "the name 'na ts' holds ':', '/' or whitespace"),
        ];
        for (text, why) in cases {
            assert_eq!(
                CombRef::parse(text).unwrap_err().to_string(),
                format!("'{text}' is not a Comb reference ([LAYER:][NAMESPACE/]NAME): {why}"),
            );
        }
    }
}
