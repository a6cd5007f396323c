//! The applied digest of a rendered manifest, bit for bit as the reference computes it (§4.2):
//! canonical JSON with every leaf a string, hashed with SHA-256. Deploy compares it with the
//! live object's annotation to tell a changed manifest from an unchanged one.

use serde_json::{Map, Number, Value};
use sha2::{Digest as _, Sha256};

/// The applied digest of a rendered manifest (§4.2): a stale `digest_annotation` (and then
/// empty annotations) removed, canonical JSON with every number and string as a string,
/// `sha256:` + lowercase hex.
pub fn applied_digest(manifest: &Map<String, Value>, digest_annotation: &str) -> String {
    let mut copy = manifest.clone();
    if let Some(Value::Object(metadata)) = copy.get_mut("metadata")
        && let Some(Value::Object(annotations)) = metadata.get_mut("annotations")
    {
        annotations.remove(digest_annotation);
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
    let canonical = canonical_json(&Value::Object(copy));
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    )
}

/// Canonical JSON as the digest needs it: keys sorted by codepoint, no whitespace, every number
/// and string a JSON string, booleans and null as themselves; JSON::XS escaping (`"` and `\`,
/// control characters as `\n \t \r \b \f` or `\u00xx`, `/` and non-ASCII unescaped).
pub fn canonical_json(value: &Value) -> String {
    // serde_json's compact writer escapes exactly as JSON::XS does; only the key order and the
    // numbers (strings to Perl) are the reference's own.
    perl_leaves(value).to_string()
}

/// `value` with every number as Perl's text of it and every object's keys sorted.
fn perl_leaves(value: &Value) -> Value {
    match value {
        Value::Number(number) => Value::String(number_text(number)),
        Value::Array(items) => Value::Array(items.iter().map(perl_leaves).collect()),
        Value::Object(map) => {
            let mut sorted: Map<String, Value> = map
                .iter()
                .map(|(key, item)| (key.clone(), perl_leaves(item)))
                .collect();
            sorted.sort_keys();
            Value::Object(sorted)
        }
        leaf => leaf.clone(),
    }
}

/// The textual form Perl gives a number: integers as they are, other floats like `%.15g`.
fn number_text(number: &Number) -> String {
    match number.as_f64() {
        Some(float) if !number.is_i64() && !number.is_u64() => perl_float(float),
        _ => number.to_string(),
    }
}

fn perl_float(float: f64) -> String {
    if float.fract() == 0.0 && float.abs() < 1e15 {
        return format!("{}", float as i64);
    }
    // 15 significant digits, then the shorter of fixed and exponent notation as %g picks it.
    let scientific = format!("{float:.14e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..15).contains(&exponent) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = usize::try_from(14 - exponent).unwrap_or(0);
        trim_fraction(&format!("{float:.decimals$}")).to_string()
    }
}

fn trim_fraction(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_number_text() {
        let cases = [
            (2.0, "2"),
            (-3.0, "-3"),
            (0.1, "0.1"),
            (1.5e15, "1.5e+15"),
            (1e-5, "1e-05"),
            (123.456, "123.456"),
            (1.0 / 3.0, "0.333333333333333"),
        ];
        for (float, text) in cases {
            assert_eq!(perl_float(float), text, "{float}");
        }
    }
}
