//! The binaries of this workspace the end-to-end tests run: `comb`, and `comb-identity` for
//! the sandbox network.
//!
//! `CARGO_BIN_EXE_comb` is set only for the tests of comb-federation, the package that
//! defines the binary, and cargo has no stable way for another package to depend on a binary.
//! So the kit asks cargo itself, through escargot: `cargo build -p comb-federation --bin comb`
//! with this build's profile and target directory, once per test binary. After `cargo test
//! --workspace` built the binary already this is a no-op; a `cargo test -p comb-testkit`
//! alone gets a binary as fresh as the sources. Cargo's build lock is not held while tests
//! run, so the nested build does not wait on the outer one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The path of the freshly built `comb`, or of the binary `COMB_BIN` names (a benchmark
/// comparing two builds runs each in turn, in the same conditions).
pub fn comb_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| match std::env::var_os("COMB_BIN") {
        Some(binary) => PathBuf::from(binary),
        None => build("comb-federation", "comb"),
    })
}

/// The path of the freshly built `comb-identity`, the server every Pod of the sandbox network
/// runs (a tool of the test kit: `comb` itself does not ship it).
pub fn identity_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| build("comb-identity", "comb-identity"))
}

/// `cargo build -p <package> --bin <bin>` of this workspace, with this build's profile: the path
/// of the binary.
fn build(package: &str, bin: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("Cargo.toml");
    let mut build = escargot::CargoBuild::new()
        .manifest_path(manifest)
        .package(package)
        .bin(bin)
        .current_release();
    // What cargo sets for this test process describes this package, not the build: build
    // scripts that watch such a variable (ring watches CARGO_MANIFEST_DIR) would see it
    // change and rebuild half the tree, for the nested build and again for the next
    // outer one.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if SET_BY_CARGO_FOR_TESTS
            .iter()
            .any(|prefix| key.starts_with(prefix))
        {
            build = build.env_remove(key.as_ref());
        }
    }
    let built = build
        .run()
        .unwrap_or_else(|error| panic!("cargo build -p {package} --bin {bin}: {error}"));
    built.path().to_path_buf()
}

/// The variables cargo sets for a test binary (its package's, and the binaries' paths).
const SET_BY_CARGO_FOR_TESTS: [&str; 7] = [
    "CARGO_MANIFEST_",
    "CARGO_PKG_",
    "CARGO_CRATE_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_BIN_",
    "CARGO_RUSTC_CURRENT_DIR",
];

/// A command of the `comb` binary.
pub fn comb() -> Command {
    Command::new(comb_path())
}
