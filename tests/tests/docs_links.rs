//! Every relative link of the README and of `docs/` resolves: the file it names exists, and the
//! heading its anchor names is in that file (GitHub's anchors: lower case, spaces to hyphens,
//! punctuation dropped, a repeated heading numbered). A guide moved or a heading renamed fails
//! here, not in a reader's browser.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The Markdown files whose links are checked: the README and every file under `docs/`.
fn documents() -> Vec<PathBuf> {
    let root = workspace();
    let mut found = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("docs/ is readable")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The text outside fenced code blocks and inline code spans, line by line.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code spans (`...`): a link-looking text inside one is not a link.
        let mut kept = String::new();
        for (index, part) in line.split('`').enumerate() {
            if index % 2 == 0 {
                kept.push_str(part);
            }
        }
        lines.push(kept);
    }
    lines
}

/// The targets of the inline links and images of `text` (`[label](target)`).
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            targets.push(target.to_string());
            rest = &after[end..];
        }
    }
    targets
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of the headings of `text`, a repeated one numbered as GitHub numbers it.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = (!fenced)
            .then(|| line.trim_start_matches('#'))
            .filter(|rest| line.starts_with('#') && rest.starts_with(' '))
        else {
            continue;
        };
        let base = slug(&heading.replace('`', ""));
        let mut anchor = base.clone();
        let mut n = 1;
        while seen.contains(&anchor) {
            anchor = format!("{base}-{n}");
            n += 1;
        }
        seen.insert(anchor);
    }
    seen
}

/// What is wrong with each relative link of `document`, as `file: target: why` lines.
fn broken_links(document: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(document).expect("a readable document");
    let dir = document.parent().expect("a directory");
    let shown = document
        .strip_prefix(workspace())
        .unwrap_or(document)
        .display()
        .to_string();
    let mut broken = Vec::new();
    for target in link_targets(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            document.to_path_buf()
        } else {
            dir.join(path)
        };
        if !file.exists() {
            broken.push(format!("{shown}: {target}: no such file"));
            continue;
        }
        if let Some(anchor) = anchor {
            let headings = if file.is_file() && file.extension().is_some_and(|e| e == "md") {
                anchors(&std::fs::read_to_string(&file).expect("a readable document"))
            } else {
                BTreeSet::new()
            };
            if !headings.contains(anchor) {
                broken.push(format!("{shown}: {target}: no heading #{anchor} there"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_readme_and_the_guides_resolves() {
    let documents = documents();
    assert!(
        documents.len() > 5,
        "the README and the guides: {documents:?}"
    );
    let broken: Vec<String> = documents
        .iter()
        .flat_map(|document| broken_links(document))
        .collect();
    assert!(
        broken.is_empty(),
        "links that do not resolve:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn anchors_are_read_as_github_makes_them() {
    let text = "# comb\n## Real Kubernetes: the `kube` backend\n### Today's figures\n\
                ```sh\n# not a heading\n```\n## Tests\n## Tests\n";
    assert_eq!(
        anchors(text),
        [
            "comb",
            "real-kubernetes-the-kube-backend",
            "todays-figures",
            "tests",
            "tests-1"
        ]
        .map(str::to_string)
        .into()
    );
    let links = "See [a](docs/a.md#x), `[not](a link)`, ![img](p.png) and [b](#y).\n\
                 ```\n[fenced](no.md)\n```";
    assert_eq!(link_targets(links), ["docs/a.md#x", "p.png", "#y"]);
}
