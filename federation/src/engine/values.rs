//! Reading values the way the reference (Perl) reads them, so that `replicas: "2"` and
//! `replicas: 2` mean the same, and `0`, `""` and `"0"` are false; and the words every message
//! uses for a value ([`describe_value`]) and an error ([`clean_message`]). At the bottom of the
//! engine: every part may use it, it uses none.

use serde_json::{Map, Value};
use std::any::Any;

/// Perl's `value // default` in numeric context: missing or null gives `default`, numbers and
/// numeric strings their value, anything else 0.
pub fn number_or(value: Option<&Value>, default: i64) -> i64 {
    match value {
        None | Some(Value::Null) => default,
        Some(Value::Number(number)) => number
            .as_i64()
            .or_else(|| number.as_f64().map(|f| f as i64))
            .unwrap_or(0),
        Some(Value::String(text)) => text.trim().parse::<f64>().map_or(0, |f| f as i64),
        Some(Value::Bool(flag)) => i64::from(*flag),
        Some(_) => 0,
    }
}

/// Perl truthiness: missing, null, false, 0, `""` and `"0"` are false.
pub fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(flag)) => *flag,
        Some(Value::Number(number)) => number.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(text)) => !text.is_empty() && text != "0",
        Some(_) => true,
    }
}

/// `metadata.name` of an object.
pub fn object_name(object: &Value) -> Option<&str> {
    object.pointer("/metadata/name").and_then(Value::as_str)
}

/// How the reference names a value that is not what it wanted: `an array`, `null`, or
/// `a plain scalar` for strings, numbers and booleans.
pub fn describe_value(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
        Value::Null => "null",
        Value::Bool(_) | Value::Number(_) | Value::String(_) => "a plain scalar",
    }
}

/// The message of an error as every status text shows it: trailing whitespace removed; an empty
/// message reads `unknown error`.
pub fn clean_message(message: &str) -> String {
    let trimmed = message.trim_end();
    if trimmed.is_empty() {
        "unknown error".to_string()
    } else {
        trimmed.to_string()
    }
}

/// `unknown key(s) a, b (known: ...)` for the keys of `map` that `known` does not name (sorted);
/// `None` when it names them all.
pub fn unknown_keys(map: &Map<String, Value>, known: &[&str]) -> Option<String> {
    let mut unknown: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|key| !known.contains(key))
        .collect();
    unknown.sort_unstable();
    (!unknown.is_empty()).then(|| {
        let (unknown, known) = (unknown.join(", "), known.join(", "));
        format!("unknown key(s) {unknown} (known: {known})")
    })
}

/// The text of a panic payload.
pub fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        format!("panicked: {text}")
    } else if let Some(text) = panic.downcast_ref::<String>() {
        format!("panicked: {text}")
    } else {
        "panicked".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn perl_numbers_and_truth() {
        assert_eq!(number_or(None, 1), 1);
        assert_eq!(number_or(Some(&json!(null)), 1), 1);
        assert_eq!(number_or(Some(&json!("3")), 1), 3);
        assert_eq!(number_or(Some(&json!(0)), 1), 0);
        for falsy in [json!(null), json!(false), json!(0), json!(""), json!("0")] {
            assert!(!truthy(Some(&falsy)), "{falsy}");
        }
        for true_ in [json!(true), json!(1), json!("x"), json!({})] {
            assert!(truthy(Some(&true_)), "{true_}");
        }
    }
}
