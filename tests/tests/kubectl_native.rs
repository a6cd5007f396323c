//! Combs are native to kubectl: `kubectl get cmb` (the short name), `kubectl get comb` (the
//! category), the printer columns and their `-o wide` extras, and `kubectl comb` as a plugin,
//! on the converged demo, on either backend (`COMB_TEST_BACKEND`). Skipped with the reason where kubectl is not installed; in CI
//! (`CI` set) a missing kubectl fails.

use std::path::Path;
use std::process::Command;

use comb_testkit::cli::{ConvergedDemo, cells_without, row};
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};

fn kubectl_or_skip(test: &str) -> bool {
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok()
    {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI installs kubectl ({test})"
    );
    comb_sandbox::real::record_skip(&format!("{test}: kubectl is not installed"));
    false
}

fn kubectl(kubeconfig: &Path, context: &str, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--context", context])
        .args(args)
        .output_within(COMMAND_DEADLINE);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn kubectl_lists_combs_by_short_name_and_category_with_wide_columns() {
    if !kubectl_or_skip("kubectl_native::kubectl_lists_combs_by_short_name_and_category") {
        return;
    }
    let demo = ConvergedDemo::start();
    let kubeconfig = Path::new(&demo.config).with_file_name("sandbox.kubeconfig");

    let all = kubectl(&kubeconfig, "prod", &["get", "cmb", "-A"]);
    let header = row(&all, &["NAMESPACE"]);
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "PHASE", "REASON", "VIA", "AGE"],
        "{all}"
    );
    for (namespace, name) in [("platform", "db"), ("platform", "nats"), ("staging", "db")] {
        assert_eq!(row(&all, &[namespace, name])[2], "Running", "{all}");
    }

    let by_category = kubectl(&kubeconfig, "prod", &["get", "comb", "-n", "staging"]);
    assert_eq!(row(&by_category, &["db"])[1], "Running", "{by_category}");

    let wide = kubectl(
        &kubeconfig,
        "dev",
        &["get", "cmb", "-n", "platform", "-o", "wide"],
    );
    let header = row(&wide, &["NAME"]);
    assert_eq!(
        header,
        [
            "NAME", "PHASE", "REASON", "VIA", "AGE", "CLASS", "UPSTREAM", "MESSAGE"
        ],
        "{wide}"
    );
    let db = row(&wide, &["db"]);
    assert_eq!(db[1], "Running", "{wide}");
    assert_eq!(db[3], "[\"staging\",\"prod\"]", "{wide}");
    assert_eq!(db[6], "staging", "dev's db comes from staging:\n{wide}");
    // The narrow table keeps the wide-only columns out.
    let narrow = kubectl(&kubeconfig, "dev", &["get", "cmb", "-n", "platform"]);
    assert!(!narrow.contains("UPSTREAM"), "{narrow}");

    // `kubectl comb get`: kubectl finds `kubectl-comb` on PATH.
    let plugins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        // `kubectl-comb` (src/bin) is the same main as `comb`; kubectl only needs the name.
        comb_testkit::bin::comb_path(),
        plugins.path().join("kubectl-comb"),
    )
    .unwrap();
    let path = std::env::join_paths(std::iter::once(plugins.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let output = Command::new("kubectl")
        .env("PATH", path)
        .args(["comb", "--config", &demo.config, "get"])
        .output_within(COMMAND_DEADLINE);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl comb get: {table}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The same rows as `comb get`, but for AGE, which may tick between the two.
    assert_eq!(
        cells_without(&table, "AGE"),
        cells_without(&demo.ok(&["get"]), "AGE"),
        "kubectl comb get is comb get:\n{table}"
    );
}
