//! JSON text kept packed: what the controller holds for every Comb and every watched object
//! (a Comb's spec and status, the watches' copies) is LZ4 against a dictionary made of the
//! first text packed with it. Texts of one sort share most of their bytes (keys, labels, the
//! shapes of statuses and conditions), so each packs to what differs from the first: a
//! Deployment's 1.4 KiB to a few hundred bytes. Packing and unpacking take microseconds; a step
//! unpacks a handful of texts.

use std::sync::OnceLock;

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

    /// The text of `packed`, which [`Dictionary::pack`] of this dictionary made (anything
    /// else is `None`).
    pub fn unpack(&self, packed: &[u8]) -> Option<String> {
        let dictionary = self.0.get()?;
        let bytes =
            lz4_flex::block::decompress_size_prepended_with_dict(packed, dictionary).ok()?;
        String::from_utf8(bytes).ok()
    }

    /// The JSON value of `packed`.
    pub fn unpack_json<T: serde::de::DeserializeOwned>(&self, packed: &[u8]) -> Option<T> {
        serde_json::from_str(&self.unpack(packed)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_come_back_and_alike_texts_pack_small() {
        let dictionary = Dictionary::new();
        assert_eq!(dictionary.unpack(b"nothing packed yet"), None);
        let texts: Vec<String> = (0..20)
            .map(|index| {
                format!(
                    r#"{{"phase":"Running","conditions":[{{"type":"Ready","status":"True","reason":"Deployed","message":"applied 2 resource(s) to web-{index}"}}],"observedGeneration":{index}}}"#
                )
            })
            .collect();
        let packed: Vec<Box<[u8]>> = texts.iter().map(|text| dictionary.pack(text)).collect();
        for (text, packed) in texts.iter().zip(&packed) {
            assert_eq!(dictionary.unpack(packed).as_deref(), Some(text.as_str()));
        }
        // The first is the dictionary: the others pack to their differences.
        assert!(
            packed[1].len() * 4 < texts[1].len(),
            "{} bytes",
            packed[1].len()
        );
        // Text unlike the dictionary still comes back, whole.
        let other = "é".repeat(10_000);
        assert_eq!(dictionary.unpack(&dictionary.pack(&other)), Some(other));
        assert_eq!(dictionary.unpack(b"\x05\0\0\0garbage"), None);
    }

    #[test]
    fn a_first_text_longer_than_the_dictionary_still_packs() {
        let dictionary = Dictionary::new();
        let long = format!("a{}", "é".repeat(DICTIONARY_MAX));
        assert_eq!(dictionary.unpack(&dictionary.pack(&long)), Some(long));
        assert!(dictionary.0.get().unwrap().len() <= DICTIONARY_MAX);
    }
}
