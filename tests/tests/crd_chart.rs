//! The Helm chart ships the CRD that `comb crd` prints; this test fails when they drift.
//! Regenerate with `cargo run -- crd > charts/comb/crds/comb.yaml`.

use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};
use std::process::Command;

const CHART_CRD: &str = include_str!("../../charts/comb/crds/comb.yaml");

fn comb_crd(args: &[&str]) -> std::process::Output {
    Command::new(comb_testkit::bin::comb_path())
        .arg("crd")
        .args(args)
        .output_within(COMMAND_DEADLINE)
}

#[test]
fn the_chart_crd_is_what_comb_crd_prints() {
    let output = comb_crd(&[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8(output.stdout).unwrap() == CHART_CRD,
        "charts/comb/crds/comb.yaml differs from `comb crd`: regenerate it with \
         `cargo run -- crd > charts/comb/crds/comb.yaml`"
    );
}

#[test]
fn the_printed_yaml_is_the_crd() {
    let parsed: serde_json::Value = serde_saphyr::from_str(CHART_CRD).unwrap();
    assert_eq!(parsed, comb_api::crd(comb_api::DEFAULT_GROUP).unwrap());

    let output = comb_crd(&["--group", "comb.example.com"]);
    let parsed: serde_json::Value =
        serde_saphyr::from_str(&String::from_utf8(output.stdout).unwrap()).unwrap();
    assert_eq!(parsed, comb_api::crd("comb.example.com").unwrap());
    assert_eq!(parsed["metadata"]["name"], "combs.comb.example.com");
}

#[test]
fn a_bad_group_is_one_clear_line_and_exit_code_1() {
    let output = comb_crd(&["--group", "Comb"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "comb: crd: the group 'Comb' is not a DNS subdomain with a dot (e.g. comb.internal), as the API server requires of a CRD group\n"
    );
}
