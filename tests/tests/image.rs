//! comb's container image, as `tests/image/build` writes it (an OCI archive, no registry, no
//! daemon): unpacked by umoci into an OCI runtime bundle and run by runc, with the root
//! filesystem read-only, as user 65532, it answers `comb --version`; and it carries no shell.
//!
//! Needs root, runc and umoci (Debian packages; `.ci/run` installs them and builds the image).
//! The archive is `$COMB_IMAGE`, else the last one `tests/image/build` wrote; without it, or
//! without root or the tools, the test skips and says why (`$COMB_SKIP_LOG`).

use std::path::{Path, PathBuf};
use std::process::Command;

use comb_sandbox::real::record_skip;
use serde_json::Value;

/// The image archive to test, or why there is none.
fn archive() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("COMB_IMAGE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("image/build");
    let output = Command::new(&script)
        .arg("--print")
        .output()
        .map_err(|error| format!("running {} failed: {error}", script.display()))?;
    let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !output.status.success() || path.is_empty() {
        return Err("no image archive: build it with tests/image/build, or set COMB_IMAGE".into());
    }
    Ok(PathBuf::from(path))
}

fn on_path(program: &str) -> bool {
    comb_sandbox::real::node::find_program(program).is_some()
}

/// Whether the test can run here, saying why not.
fn runnable(test: &str) -> Option<PathBuf> {
    let missing = ["runc", "umoci", "tar"]
        .into_iter()
        .find(|program| !on_path(program));
    let reason = if is_root() {
        missing
            .map(|program| format!("{program} is not on PATH (Debian: apt-get install {program})"))
    } else {
        Some("running a container needs root".to_string())
    };
    let archive = match reason {
        Some(reason) => Err(reason),
        None => archive(),
    };
    match archive {
        Ok(path) => Some(path),
        Err(reason) => {
            record_skip(&format!("{test}: skipped: {reason}"));
            None
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|line| line.starts_with("Uid:"))
            .is_some_and(|line| line.split_whitespace().nth(1) == Some("0"))
    })
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("the program starts");
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_image_runs_comb_as_65532_on_a_read_only_root_without_a_shell() {
    let Some(archive) =
        runnable("image::the_image_runs_comb_as_65532_on_a_read_only_root_without_a_shell")
    else {
        return;
    };
    let work = tempfile::tempdir().expect("a directory");
    let layout = work.path().join("layout");
    std::fs::create_dir(&layout).expect("a directory");
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));
    let index: Value = serde_json::from_slice(
        &std::fs::read(layout.join("index.json")).expect("the archive's index.json"),
    )
    .expect("an OCI index");
    let reference = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .expect("the image's name in its index")
        .to_string();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(reference, format!("localhost/comb:{version}"));

    let bundle = work.path().join("bundle");
    run(Command::new("umoci")
        .arg("unpack")
        .arg("--image")
        .arg(format!("{}:{reference}", layout.display()))
        .arg(&bundle));
    let rootfs = bundle.join("rootfs");
    assert!(rootfs.join("usr/local/bin/comb").is_file());
    for shell in ["bin/sh", "bin/bash", "usr/bin/sh", "bin/busybox"] {
        assert!(!rootfs.join(shell).exists(), "the image has {shell}");
    }
    assert!(rootfs.join("etc/ssl/certs/ca-certificates.crt").is_file());

    // The image's own configuration, as umoci made it the bundle's: user, entrypoint, command.
    let config_path = bundle.join("config.json");
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(&config_path).expect("config.json")).expect("JSON");
    assert_eq!(config["process"]["user"]["uid"], 65532);
    assert_eq!(config["process"]["user"]["gid"], 65532);
    assert_eq!(
        config["process"]["args"],
        serde_json::json!(["/usr/local/bin/comb", "run", "--config=/etc/comb/comb.yaml"])
    );
    // `comb --version` instead of the controller, on a read-only root, no terminal.
    config["process"]["args"] = serde_json::json!(["/usr/local/bin/comb", "--version"]);
    config["process"]["terminal"] = Value::Bool(false);
    config["root"]["readonly"] = Value::Bool(true);
    std::fs::write(&config_path, config.to_string()).expect("config.json written");

    let id = format!("comb-image-test-{}", std::process::id());
    let answer = run(Command::new("runc")
        .arg("run")
        .arg("--bundle")
        .arg(&bundle)
        .arg(&id));
    assert_eq!(answer.trim(), format!("comb {version}"));
}
