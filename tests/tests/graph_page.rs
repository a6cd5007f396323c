//! `comb graph` on the converged demo (either backend): DOT and Mermaid hold every layer, Comb
//! and borrow edge; the admin address's status page `/` (the demo's controller serving it),
//! rendered by headless Chromium, shows every layer and Comb name (the text of the rendered
//! page, printed to PDF, is read back with `pdftotext`). Chromium
//! and pdftotext are Debian's `chromium` and `poppler-utils`, which `.ci/run` installs; elsewhere
//! the browser part skips with the reason.

use std::path::Path;
use std::process::Command;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;

use comb_testkit::cli::{ConvergedDemo, backend, comb};
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};

/// `GET path` on `address`, the whole answer (status line, headers, body) as text.
fn http_get(address: &str, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(address).expect("the admin address answers");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("the request is sent");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .expect("the answer is read");
    answer
}

const LAYERS: [&str; 3] = ["prod", "staging", "dev"];
const COMBS: [&str; 6] = [
    "platform/db",
    "platform/nats",
    "platform/mailer",
    "staging/db",
    "staging/nats",
    "staging/mailer",
];

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|output| output.status.success())
}

fn chromium(args: &[&str], page: &Path) -> std::process::Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args(["--window-size=1200,520"])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output_within(COMMAND_DEADLINE)
}

#[test]
fn the_graph_shows_every_layer_comb_and_borrow() {
    let demo = ConvergedDemo::start();

    let dot = demo.ok(&["graph"]);
    for layer in LAYERS {
        assert!(
            dot.contains(&format!("label=\"{layer} (context {layer})\"")),
            "{dot}"
        );
    }
    for edge in [
        "\"staging/staging/db\" -> \"prod/platform/db\"",
        "\"dev/platform/db\" -> \"staging/staging/db\"",
        "\"dev/platform/nats\" -> \"staging/staging/nats\"",
    ] {
        assert!(dot.contains(edge), "{edge} in\n{dot}");
    }
    assert_eq!(dot.matches(" -> ").count(), 3, "three borrows:\n{dot}");
    assert!(dot.contains("via staging, prod"), "{dot}");

    let mermaid = demo.ok(&["graph", "-o", "mermaid"]);
    assert!(mermaid.starts_with("flowchart RL\n"), "{mermaid}");
    assert_eq!(mermaid.matches("-->|borrows|").count(), 3, "{mermaid}");

    let html = demo.ok(&["graph", "-o", "html"]);
    for name in LAYERS.iter().chain(&COMBS) {
        assert!(html.contains(&format!(">{name}<")), "{name} in the page");
    }
    drop(demo);

    // The page the admin address serves, from the controller's own view of the Combs.
    let mut served = comb()
        .args([
            "demo",
            "--follow",
            "--pod-ready-delay",
            "50ms",
            "--timeout",
            "180s",
        ])
        .args(["--backend", backend(), "--admin-address", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("comb demo --follow starts");
    let lines = BufReader::new(served.stdout.take().expect("piped")).lines();
    let address = lines
        .map_while(Result::ok)
        .find_map(|line| {
            line.trim()
                .strip_prefix("open http://")
                .and_then(|rest| rest.split('/').next())
                .map(str::to_string)
        })
        .expect("the demo prints the status page's address");
    let html = http_get(&address, "/");
    let _ = served.kill();
    let _ = served.wait();
    assert!(html.starts_with("HTTP/1.1 200"), "{html}");
    assert!(html.contains("content-type: text/html"), "{html}");
    for name in LAYERS.iter().chain(&COMBS) {
        assert!(
            html.contains(&format!(">{name}<")),
            "{name} on the served page"
        );
    }
    assert_eq!(html.matches("<path class=\"borrow\"").count(), 3, "{html}");
    let html = html
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap();

    let ci = std::env::var_os("CI").is_some();
    let missing: Vec<&str> = ["chromium", "pdftotext"]
        .into_iter()
        .filter(|program| !installed(program))
        .collect();
    if !missing.is_empty() {
        assert!(!ci, "CI installs {missing:?}");
        comb_sandbox::real::record_skip(&format!(
            "graph_page::the_graph_shows_every_layer_comb_and_borrow (the browser part): {} not installed",
            missing.join(" and ")
        ));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("federation.html");
    std::fs::write(&page, &html).unwrap();
    let screenshot = dir.path().join("federation.png");
    let shot = chromium(&[&format!("--screenshot={}", screenshot.display())], &page);
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let png = std::fs::read(&screenshot).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let (width, height) = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    assert_eq!((width, height), (1200, 520));
    // The same rendering as text: what the browser laid out, not what the HTML says.
    let pdf = dir.path().join("federation.pdf");
    let printed = chromium(
        &[
            &format!("--print-to-pdf={}", pdf.display()),
            "--no-pdf-header-footer",
        ],
        &page,
    );
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let text = Command::new("pdftotext")
        .arg(&pdf)
        .arg("-")
        .output_within(COMMAND_DEADLINE);
    let text = String::from_utf8_lossy(&text.stdout);
    for name in LAYERS.iter().chain(&COMBS) {
        assert!(
            text.contains(name),
            "the rendered page shows {name}:\n{text}"
        );
    }
    assert!(text.contains("via staging, prod"), "{text}");
}
