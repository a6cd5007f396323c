//! The hashes controllers use to name things: pod-template-hash, controller revisions, and
//! stable container and image ids.

use serde_json::Value;

/// The characters Kubernetes uses in generated names (no vowels, no confusable digits).
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

fn fnv1a_64(seed: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64 ^ seed, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// `pod-template-hash` / `controller-revision-hash`: FNV-32a of the template, printed in
/// decimal and mapped onto the safe alphabet, as `controller.ComputeHash` does.
pub fn template_hash(template: &Value) -> String {
    let decimal = fnv1a_32(template.to_string().as_bytes()).to_string();
    decimal
        .bytes()
        .map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()]))
        .collect()
}

/// A stable 64-hex-digit id (like a container or image digest) derived from `parts`.
pub fn hex_id(parts: &[&str]) -> String {
    let joined = parts.join("\u{0}");
    (0..4u64)
        .map(|seed| format!("{:016x}", fnv1a_64(seed, joined.as_bytes())))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn template_hash_is_stable_and_safe() {
        let a = json!({"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}});
        let b = json!({"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        let hash = template_hash(&a);
        assert!((1..=10).contains(&hash.len()), "{hash}");
        assert!(hash.bytes().all(|c| SAFE_ALPHABET.contains(&c)), "{hash}");
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a_64(0, b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn hex_ids_are_64_digits_and_differ_by_input() {
        let id = hex_id(&["pod-uid", "web", "0"]);
        assert_eq!(id.len(), 64);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(id, hex_id(&["pod-uid", "web", "1"]));
    }
}
