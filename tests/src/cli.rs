//! Running the `comb` binary in the end-to-end tests, and a converged demo to run it against.

use std::process::{Child, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

pub use crate::bin::comb;
use crate::process::{
    COMMAND_DEADLINE, OutputWithin as _, STOP_DEADLINE, stdout_lines, stop_within, wait_within,
};

/// The longest a test waits for the demo to print something.
const DEADLINE: Duration = Duration::from_secs(60);

/// `--backend`'s value for the backend `COMB_TEST_BACKEND` names.
pub fn backend() -> &'static str {
    match comb_sandbox::Backend::from_env() {
        comb_sandbox::Backend::Kube => "kube",
        comb_sandbox::Backend::Emulator => "emulator",
    }
}

/// `comb <args>`: its exit code, stdout and stderr.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = comb().args(args).output_within(COMMAND_DEADLINE);
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// `comb demo --follow`, once every Comb reached its phase: the layers of the demo, converged,
/// for as long as this value lives (dropping it interrupts the demo and waits for it).
pub struct ConvergedDemo {
    child: Child,
    /// The demo's output lines, read by a thread so that waits have a deadline.
    lines: Receiver<String>,
    /// The federation configuration of the demo's layers.
    pub config: String,
}

impl ConvergedDemo {
    /// `comb demo --follow` on the backend `COMB_TEST_BACKEND` names (the emulator by default).
    pub fn start() -> ConvergedDemo {
        let mut child = comb()
            .args([
                "demo",
                "--follow",
                "--pod-ready-delay",
                "50ms",
                "--backend",
                backend(),
            ])
            .args(["--timeout", "180s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("comb demo --follow starts");
        let lines = stdout_lines(&mut child);
        let mut demo = ConvergedDemo {
            child,
            lines,
            config: String::new(),
        };
        let hint = demo.wait_for_line("comb --config ");
        demo.config = hint
            .trim()
            .trim_start_matches("comb --config ")
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_string();
        demo
    }

    /// `comb --config <demo> <args>`: exit code, stdout, stderr.
    pub fn comb(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = vec!["--config", self.config.as_str()];
        all.extend_from_slice(args);
        run(&all)
    }

    /// `comb --config <demo> <args>`, which must succeed: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.comb(args);
        assert_eq!(code, 0, "comb {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }

    /// The API server URL of a context of the demo's kubeconfig (`http://127.0.0.1:PORT`).
    pub fn server(&self, context: &str) -> String {
        let path = std::path::Path::new(&self.config).with_file_name("sandbox.kubeconfig");
        let text = std::fs::read_to_string(&path).expect("the demo's kubeconfig reads");
        let kubeconfig: serde_json::Value =
            serde_saphyr::from_str(&text).expect("the demo's kubeconfig parses");
        let named = |list: &str, name: &str| {
            kubeconfig[list]
                .as_array()
                .and_then(|items| items.iter().find(|item| item["name"] == name))
                .cloned()
                .unwrap_or_else(|| panic!("no {list} entry {name} in {text}"))
        };
        let cluster = named("contexts", context)["context"]["cluster"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        named("clusters", &cluster)["cluster"]["server"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// `POST <path>` (a sandbox test control, e.g. `/_sandbox/partition`) on a context's server.
    pub fn control(&self, context: &str, path: &str) {
        let response = self.post(context, path, "");
        assert!(response.starts_with("HTTP/1.1 200"), "{path}: {response}");
    }

    /// `POST <path>` with a JSON body on a context's server (e.g. creating an object), through
    /// a kube client of the demo's kubeconfig, so on either backend: the response, status line
    /// first.
    pub fn post(&self, context: &str, path: &str, body: &str) -> String {
        self.send(http::Method::POST, context, path, body)
    }

    /// `DELETE <path>` on a context's server (e.g. a Pod), as [`ConvergedDemo::post`] sends.
    pub fn delete(&self, context: &str, path: &str) -> String {
        self.send(http::Method::DELETE, context, path, "")
    }

    fn send(&self, method: http::Method, context: &str, path: &str, body: &str) -> String {
        let path_of_kubeconfig =
            std::path::Path::new(&self.config).with_file_name("sandbox.kubeconfig");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&path_of_kubeconfig).expect("the kubeconfig");
            let options = kube::config::KubeConfigOptions {
                context: Some(context.to_string()),
                ..Default::default()
            };
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .expect("a client configuration");
            let client = kube::Client::try_from(config).expect("a client");
            let request = http::Request::builder()
                .method(method)
                .uri(path)
                .header("Content-Type", "application/json")
                .body(body.as_bytes().to_vec())
                .expect("a request");
            match client.send(request.map(kube::client::Body::from)).await {
                Ok(response) => {
                    let status = response.status();
                    let bytes = http_body_util::BodyExt::collect(response.into_body())
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    format!(
                        "HTTP/1.1 {} {}\r\n\r\n{}",
                        status.as_u16(),
                        status.canonical_reason().unwrap_or_default(),
                        String::from_utf8_lossy(&bytes)
                    )
                }
                Err(error) => format!("HTTP/1.1 000 no answer: {error}"),
            }
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the demo to end (after it was interrupted); fails after a deadline.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        wait_within(&mut self.child, STOP_DEADLINE)
            .unwrap_or_else(|| panic!("the demo did not end within {STOP_DEADLINE:?}"))
    }

    /// Reads the demo's output until a line contains `text`; fails after a deadline.
    pub fn wait_for_line(&mut self, text: &str) -> String {
        self.wait_for(text, |line| line.contains(text))
    }

    /// Reads the demo's output until `comb` (`layer:namespace/name`) changes to `to` (`Running
    /// (Healthy)`), from whichever phase; fails after a deadline.
    pub fn wait_for_transition(&mut self, comb: &str, to: &str) -> String {
        let what = format!("{comb}: ... -> {to}");
        self.wait_for(&what, |line| {
            line.contains(&format!(" {comb}: ")) && line.contains(&format!(" -> {to}"))
        })
    }

    fn wait_for(&mut self, text: &str, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + DEADLINE;
        // What it printed meanwhile, for the failure message.
        let mut passed = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if matches(&line) => return line,
                Ok(line) => passed.push(line),
                Err(error) => panic!(
                    "the demo printed no line with {text:?}: {error}; it printed meanwhile:\n{}",
                    passed.join("\n")
                ),
            }
        }
    }
}

impl Drop for ConvergedDemo {
    fn drop(&mut self) {
        // Interrupted, so that it stops its clusters; killed if that takes too long.
        stop_within(&mut self.child, "INT", STOP_DEADLINE);
    }
}

/// The row of a table whose first cells are `first`, split into its columns.
pub fn row<'a>(table: &'a str, first: &[&str]) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| {
            line.split("   ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.len() >= first.len() && cells[..first.len()] == *first)
        .unwrap_or_else(|| panic!("no row {first:?} in\n{table}"))
}

/// A table's cells without the column headed `column`: two reads of one table compare equal
/// though AGE ticked between them. Cells are split on whitespace, so the column must come
/// before any cell that holds a space (MESSAGE is last where it exists).
pub fn cells_without(table: &str, column: &str) -> Vec<Vec<String>> {
    let at = table
        .lines()
        .next()
        .and_then(|header| header.split_whitespace().position(|cell| cell == column))
        .unwrap_or_else(|| panic!("no column {column} in\n{table}"));
    table
        .lines()
        .map(|line| {
            line.split_whitespace()
                .enumerate()
                .filter(|(index, _)| *index != at)
                .map(|(_, cell)| cell.to_string())
                .collect()
        })
        .collect()
}
