//! Constructor arguments of upstream classes, read from the answer's map with errors that name
//! the class, the key and what was expected.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The JSON type of a value, as error messages name it.
pub(crate) fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `what: unknown key(s) a, b (known: c, d)` when `map` has keys outside `known`.
pub(crate) fn check_keys(what: &str, map: &Map<String, Value>, known: &[&str]) -> Result<()> {
    let mut unknown: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|key| !known.contains(key))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort_unstable();
    let mut known = known.to_vec();
    known.sort_unstable();
    Err(Error::Resolve(format!(
        "{what}: unknown key(s) {} (known: {})",
        unknown.join(", "),
        known.join(", ")
    )))
}

/// The arguments of one class: a map whose keys were checked. A `null` value counts as absent.
pub(crate) struct Args<'a> {
    class: &'a str,
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    /// The arguments in `map` for `class`, which takes the keys `known`.
    pub(crate) fn new(class: &'a str, map: &'a Map<String, Value>, known: &[&str]) -> Result<Self> {
        check_keys(class, map, known)?;
        Ok(Args { class, map })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|value| !value.is_null())
    }

    fn wrong(&self, key: &str, expected: &str, value: &Value) -> Error {
        Error::Resolve(format!(
            "{}: {key} is {expected}, got {}",
            self.class,
            describe(value)
        ))
    }

    /// A non-empty string.
    pub(crate) fn string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(text)) if !text.is_empty() => Ok(Some(text.clone())),
            Some(value) => Err(self.wrong(key, "a non-empty string", value)),
        }
    }

    /// `true` or `false`.
    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(value) => Err(self.wrong(key, "true or false", value)),
        }
    }

    /// An array of strings.
    pub(crate) fn strings(&self, key: &str) -> Result<Option<Vec<String>>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let strings = value.as_array().and_then(|items| {
            items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
        });
        strings
            .map(Some)
            .ok_or_else(|| self.wrong(key, "an array of strings", value))
    }

    /// An array of anything; the caller checks the items.
    pub(crate) fn array(&self, key: &str) -> Result<Option<&'a [Value]>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(value) => Err(self.wrong(key, "an array", value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn unknown_keys_are_named_sorted_with_the_known_ones() {
        let args = map(json!({"zz": 1, "contxt": "a", "name": "db"}));
        let error = Args::new("K", &args, &["namespace", "name", "context"])
            .err()
            .unwrap();
        assert_eq!(
            error.to_string(),
            "K: unknown key(s) contxt, zz (known: context, name, namespace)"
        );
    }

    #[test]
    fn typed_values() {
        let values = map(json!({
            "s": "x", "empty": "", "n": 1, "b": false, "list": ["a", "b"], "mixed": ["a", 1],
            "null": null
        }));
        let keys = ["s", "empty", "n", "b", "list", "mixed", "null", "absent"];
        let args = Args::new("C", &values, &keys).unwrap();
        assert_eq!(args.string("s").unwrap().as_deref(), Some("x"));
        assert_eq!(args.string("null").unwrap(), None);
        assert_eq!(args.string("absent").unwrap(), None);
        assert_eq!(args.boolean("b").unwrap(), Some(false));
        assert_eq!(args.strings("list").unwrap().unwrap(), ["a", "b"]);
        assert_eq!(args.array("mixed").unwrap().unwrap().len(), 2);
        let errors = [
            (
                args.string("empty").err(),
                "C: empty is a non-empty string, got a string",
            ),
            (
                args.string("n").err(),
                "C: n is a non-empty string, got a number",
            ),
            (
                args.boolean("s").err(),
                "C: s is true or false, got a string",
            ),
            (
                args.strings("mixed").err(),
                "C: mixed is an array of strings, got an array",
            ),
            (
                args.strings("s").err(),
                "C: s is an array of strings, got a string",
            ),
            (args.array("b").err(), "C: b is an array, got a boolean"),
        ];
        for (error, message) in errors {
            assert_eq!(error.unwrap().to_string(), message);
        }
    }
}
