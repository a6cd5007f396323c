//! Resource quantities (`500m`, `2`, `128Mi`, `1e3`) as numbers, for the scheduler's fit check.

use serde_json::Value;

/// The value of a quantity in base units (cores, bytes), or `None` when it is not one.
/// Integers are accepted as well as strings, as the API server does.
pub fn parse(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => parse_str(s.trim()),
        _ => None,
    }
}

fn parse_str(text: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    const LONG_DECIMAL: [(&str, f64); 2] = [("P", 1e15), ("E", 1e18)];
    let (number, scale) = SUFFIXES
        .iter()
        .chain(LONG_DECIMAL.iter())
        .find_map(|(suffix, scale)| text.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((text, 1.0));
    let plain = number
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E'));
    if number.is_empty() || !plain {
        return None;
    }
    number.parse::<f64>().ok().map(|n| n * scale)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn quantities() {
        let cases = [
            (json!("500m"), Some(0.5)),
            (json!("2"), Some(2.0)),
            (json!(3), Some(3.0)),
            (json!("1.5"), Some(1.5)),
            (json!("128Mi"), Some(134_217_728.0)),
            (json!("1G"), Some(1e9)),
            (json!("1e3"), Some(1000.0)),
            (json!("1E"), Some(1e18)),
            (json!("99999999999999999999999"), Some(1e23)),
            (json!("lots"), None),
            (json!(""), None),
            (json!(null), None),
        ];
        for (input, expected) in cases {
            assert_eq!(parse(&input), expected, "{input}");
        }
    }
}
