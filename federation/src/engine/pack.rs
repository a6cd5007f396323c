//! JSON text kept packed: what the controller holds for every Comb and every watched object
//! (a Comb's spec and status, the watches' copies) is LZ4 against a dictionary made of the
//! first text packed with it. Texts of one sort share most of their bytes (keys, labels, the
//! shapes of statuses and conditions), so each packs to what differs from the first: a
//! Deployment's 1.4 KiB to a few hundred bytes. Packing and unpacking take microseconds; a step
//! unpacks a handful of texts.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::error::{Error, Result};

/// How much of the first text becomes the dictionary (LZ4 looks back 64 KiB at most).
const DICTIONARY_MAX: usize = 16 * 1024;

/// The dictionary of one sort of text. Set by the first text packed and never changed: every
/// packed text needs the dictionary it was packed with.
#[derive(Debug, Default)]
pub struct Dictionary(OnceLock<Box<[u8]>>);

impl Dictionary {
    pub const fn new() -> Dictionary {
        Dictionary(OnceLock::new())
    }

    /// `text`, packed.
    pub fn pack(&self, text: &str) -> Box<[u8]> {
        let dictionary = self.0.get_or_init(|| {
            // Bytes to LZ4: a cut inside a character does no harm.
            Box::from(&text.as_bytes()[..text.len().min(DICTIONARY_MAX)])
        });
        lz4_flex::block::compress_prepend_size_with_dict(text.as_bytes(), dictionary)
            .into_boxed_slice()
    }

    /// The text of `packed`, which [`Dictionary::pack`] of this dictionary made; anything
    /// else is an [`Error::Undecodable`] saying what failed. It never fails for what this
    /// process packed, unless memory or the code is broken: exactly what must not pass for an
    /// empty copy.
    pub fn unpack(&self, packed: &[u8]) -> Result<String> {
        let dictionary = self
            .0
            .get()
            .ok_or_else(|| undecodable("nothing was packed with its dictionary".into()))?;
        let bytes = lz4_flex::block::decompress_size_prepended_with_dict(packed, dictionary)
            .map_err(|error| undecodable(format!("it does not decompress: {error}")))?;
        String::from_utf8(bytes)
            .map_err(|error| undecodable(format!("it is not UTF-8 text: {error}")))
    }

    /// The JSON value of `packed`.
    pub fn unpack_json<T: serde::de::DeserializeOwned>(&self, packed: &[u8]) -> Result<T> {
        serde_json::from_str(&self.unpack(packed)?)
            .map_err(|error| undecodable(format!("it is not the JSON of what was kept: {error}")))
    }
}

fn undecodable(message: String) -> Error {
    Error::Undecodable(message)
}

/// Counts kept copies that do not decode, by context and kind: the controller's metric.
pub trait CountUndecodable: Send + Sync {
    fn undecodable(&self, context: &str, kind: &str);
}

/// How many objects the log remembers having named (more than any cluster holds broken).
const LOGGED_MAX: usize = 4096;

/// Where a kept copy (a watched object, a Comb's spec or status) that does not decode is
/// reported: counted every time it is read ([`CountUndecodable`]), so that the count shows it
/// persists, and logged once per object with its kind, namespace and name (never its content).
/// The reader then does without the copy (asks the API server), never with an empty one.
#[derive(Default)]
pub struct UndecodableCopies {
    counter: Option<Arc<dyn CountUndecodable>>,
    logged: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for UndecodableCopies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UndecodableCopies").finish_non_exhaustive()
    }
}

impl UndecodableCopies {
    /// Counted by `counter`, and logged.
    pub fn counted_by(counter: Arc<dyn CountUndecodable>) -> UndecodableCopies {
        UndecodableCopies {
            counter: Some(counter),
            logged: Mutex::default(),
        }
    }

    /// Reports the copy of `kind` `namespace/name` (in kube context `context`) that does not
    /// decode; returns whether this was the first report of it (and so logged).
    pub fn report(
        &self,
        context: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        error: &dyn std::fmt::Display,
    ) -> bool {
        if let Some(counter) = &self.counter {
            counter.undecodable(context, kind);
        }
        let object = format!("{context}/{kind}/{namespace}/{name}");
        let first = {
            let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
            if logged.len() >= LOGGED_MAX {
                logged.clear();
            }
            logged.insert(object)
        };
        if first {
            tracing::error!(
                context,
                kind,
                namespace,
                name,
                "a kept copy of {kind} {namespace}/{name} does not decode ({error}); it is read \
                 from the API server instead (counted in comb_undecodable_copies_total)"
            );
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_come_back_and_alike_texts_pack_small() {
        let dictionary = Dictionary::new();
        assert_eq!(
            dictionary
                .unpack(b"nothing packed yet")
                .unwrap_err()
                .to_string(),
            "nothing was packed with its dictionary"
        );
        let texts: Vec<String> = (0..20)
            .map(|index| {
                format!(
                    r#"{{"phase":"Running","conditions":[{{"type":"Ready","status":"True","reason":"Deployed","message":"applied 2 resource(s) to web-{index}"}}],"observedGeneration":{index}}}"#
                )
            })
            .collect();
        let packed: Vec<Box<[u8]>> = texts.iter().map(|text| dictionary.pack(text)).collect();
        for (text, packed) in texts.iter().zip(&packed) {
            assert_eq!(dictionary.unpack(packed).unwrap(), *text);
        }
        // The first is the dictionary: the others pack to their differences.
        assert!(
            packed[1].len() * 4 < texts[1].len(),
            "{} bytes",
            packed[1].len()
        );
        // Text unlike the dictionary still comes back, whole.
        let other = "é".repeat(10_000);
        assert_eq!(dictionary.unpack(&dictionary.pack(&other)).unwrap(), other);
        let garbage = dictionary.unpack(b"\x05\0\0\0garbage").unwrap_err();
        assert!(
            garbage.to_string().starts_with("it does not decompress"),
            "{garbage}"
        );
        let cut = dictionary
            .unpack_json::<serde_json::Value>(&dictionary.pack("{\"cut"))
            .unwrap_err();
        assert!(
            cut.to_string()
                .starts_with("it is not the JSON of what was kept"),
            "{cut}"
        );
    }

    #[derive(Default)]
    struct Counted(Mutex<Vec<(String, String)>>);

    impl CountUndecodable for Counted {
        fn undecodable(&self, context: &str, kind: &str) {
            self.0.lock().unwrap().push((context.into(), kind.into()));
        }
    }

    #[test]
    fn undecodable_copies_are_counted_each_time_and_logged_once() {
        let counted = Arc::new(Counted::default());
        let copies = UndecodableCopies::counted_by(counted.clone());
        let error = Error::Undecodable("it does not decompress".into());
        assert!(copies.report("prod", "Deployment", "apps", "web", &error));
        assert!(!copies.report("prod", "Deployment", "apps", "web", &error));
        assert!(copies.report("prod", "Comb", "apps", "web", &error));
        assert_eq!(counted.0.lock().unwrap().len(), 3);
        assert_eq!(
            counted.0.lock().unwrap()[2],
            ("prod".to_string(), "Comb".to_string())
        );
    }

    #[test]
    fn a_first_text_longer_than_the_dictionary_still_packs() {
        let dictionary = Dictionary::new();
        let long = format!("a{}", "é".repeat(DICTIONARY_MAX));
        assert_eq!(dictionary.unpack(&dictionary.pack(&long)).unwrap(), long);
        assert!(dictionary.0.get().unwrap().len() <= DICTIONARY_MAX);
    }
}
