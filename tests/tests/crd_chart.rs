//! The Helm chart ships the CRDs (Comb, CombLayer) that `comb crd` prints; this test fails when they drift.
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

/// The YAML documents of `text`, parsed.
fn documents(text: &str) -> Vec<serde_json::Value> {
    text.split("---\n")
        .map(serde_saphyr::from_str)
        .collect::<Result<_, _>>()
        .unwrap_or_else(|error| panic!("the CRDs do not parse: {error}"))
}

#[test]
fn the_printed_yaml_is_the_comb_and_comblayer_crds() {
    assert_eq!(
        documents(CHART_CRD),
        comb_api::crds(comb_api::DEFAULT_GROUP).unwrap()
    );

    let output = comb_crd(&["--group", "comb.example.com"]);
    let parsed = documents(&String::from_utf8(output.stdout).unwrap());
    assert_eq!(parsed, comb_api::crds("comb.example.com").unwrap());
    assert_eq!(parsed[0]["metadata"]["name"], "combs.comb.example.com");
    assert_eq!(parsed[1]["metadata"]["name"], "comblayers.comb.example.com");
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
