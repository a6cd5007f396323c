//! The engine's modules form a one-way chain (docs/architecture.md): no module of
//! `federation/src/engine` reaches, through `crate::engine::...` or `super::...` paths, a module
//! that reaches it back. Within a directory module (`engine/borrow/`) the same holds for its
//! children. Test code (`#[cfg(test)]` items, `tests.rs`) may use anything and is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Module -> the modules it uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The paths a file names, as segment lists, outside test code.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl Paths {
    fn push_use(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.push_use(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => self.push_segments(prefix, &name.ident),
            syn::UseTree::Rename(rename) => self.push_segments(prefix, &rename.ident),
            syn::UseTree::Glob(_) => self.0.push(prefix.clone()),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.push_use(prefix, tree);
                }
            }
        }
    }

    fn push_segments(&mut self, prefix: &[String], last: &syn::Ident) {
        let mut segments = prefix.to_vec();
        segments.push(last.to_string());
        self.0.push(segments);
    }
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Meta>()
                .is_ok_and(|meta| meta.path().is_ident("test"))
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(item) => &item.attrs,
        syn::Item::Enum(item) => &item.attrs,
        syn::Item::Fn(item) => &item.attrs,
        syn::Item::Impl(item) => &item.attrs,
        syn::Item::Mod(item) => &item.attrs,
        syn::Item::Static(item) => &item.attrs,
        syn::Item::Struct(item) => &item.attrs,
        syn::Item::Trait(item) => &item.attrs,
        syn::Item::Type(item) => &item.attrs,
        syn::Item::Use(item) => &item.attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test_only(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.push_use(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.0.push(
            path.segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect(),
        );
        syn::visit::visit_path(self, path);
    }
}

/// The module a path names, seen from a file whose module is `at` (`["borrow", "observe"]`):
/// the first segment after `crate::engine`, or after `super` one level up.
fn target(at: &[String], segments: &[String]) -> Option<Vec<String>> {
    let rest = match segments {
        [krate, engine, rest @ ..] if krate == "crate" && engine == "engine" => rest.to_vec(),
        [first, rest @ ..] if first == "super" => {
            let parent = at.get(..at.len().checked_sub(1)?)?;
            parent.iter().chain(rest).cloned().collect()
        }
        _ => return None,
    };
    (!rest.is_empty()).then_some(rest)
}

/// The engine's files, each with its module path (`engine/borrow/mod.rs` is `["borrow"]`).
fn engine_files(dir: &Path, at: &[String]) -> Vec<(Vec<String>, PathBuf)> {
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let stem = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .expect("a UTF-8 file name")
            .to_string();
        if path.is_dir() {
            let mut inner = at.to_vec();
            inner.push(stem);
            files.extend(engine_files(&path, &inner));
        } else if path.extension().is_some_and(|ext| ext == "rs") && stem != "tests" {
            let mut module = at.to_vec();
            if stem != "mod" {
                module.push(stem);
            }
            files.push((module, path));
        }
    }
    files
}

/// The graph of the engine's modules at `depth` 1 (`borrow`, `render`, ...), and of each
/// directory module's children (`borrow::observe` -> `borrow::redirect`) at depth 2. A parent
/// declaring and re-exporting its children is not an edge.
fn engine_graphs(engine: &Path) -> Vec<Graph> {
    let mut top = Graph::new();
    let mut inner: BTreeMap<String, Graph> = BTreeMap::new();
    for (module, path) in engine_files(engine, &[]) {
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        let file = syn::parse_file(&text)
            .unwrap_or_else(|error| panic!("{} does not parse: {error}", path.display()));
        let mut paths = Paths::default();
        paths.visit_file(&file);
        let Some(first) = module.first() else {
            continue;
        };
        top.entry(first.clone()).or_default();
        for segments in &paths.0 {
            let Some(target) = target(&module, segments) else {
                continue;
            };
            if target[0] != *first {
                top.entry(first.clone())
                    .or_default()
                    .insert(target[0].clone());
            } else if let (Some(from), Some(to)) = (module.get(1), target.get(1))
                && from != to
            {
                inner
                    .entry(first.clone())
                    .or_default()
                    .entry(format!("{first}::{from}"))
                    .or_default()
                    .insert(format!("{first}::{to}"));
            }
        }
    }
    std::iter::once(top).chain(inner.into_values()).collect()
}

/// Every cycle found, each as `a -> b -> a`; empty when the graph is one-way.
fn cycles(graph: &Graph) -> Vec<String> {
    fn walk(
        graph: &Graph,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<String>,
    ) {
        if let Some(start) = path.iter().position(|seen| seen == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_string());
            found.push(cycle.join(" -> "));
            return;
        }
        if done.contains(node) {
            return;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            walk(graph, next, path, done, found);
        }
        path.pop();
        done.insert(node.to_string());
    }
    let mut done = BTreeSet::new();
    let mut found = Vec::new();
    for node in graph.keys() {
        walk(graph, node, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

#[test]
fn the_engine_modules_form_a_one_way_chain() {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let graphs = engine_graphs(&engine);
    let top = &graphs[0];
    // The parse saw the engine: the data path's modules and what they use.
    for (module, uses) in [
        ("reconcile", "borrow"),
        ("render", "context"),
        ("borrow", "observe"),
    ] {
        assert!(
            top.get(module).is_some_and(|used| used.contains(uses)),
            "{module} should use {uses}: {top:?}"
        );
    }
    let found: Vec<String> = graphs.iter().flat_map(cycles).collect();
    assert!(
        found.is_empty(),
        "the engine's modules have cycles:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn a_cycle_in_source_files_fails_by_name() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("architecture-cycle");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("borrow")).expect("a scratch directory");
    for (file, text) in [
        ("reconcile.rs", "use crate::engine::borrow::Borrowing;"),
        ("borrow/mod.rs", "pub mod observe;\npub mod resolve;"),
        ("borrow/resolve.rs", "use super::observe::Stop;"),
        (
            "borrow/observe.rs",
            "fn f(_: &crate::engine::reconcile::StepEnv) {}\nuse crate::engine::borrow::resolve::X;",
        ),
    ] {
        std::fs::write(dir.join(file), text).expect("a scratch file");
    }
    let found: Vec<String> = engine_graphs(&dir).iter().flat_map(cycles).collect();
    assert_eq!(
        found,
        [
            "borrow -> reconcile -> borrow",
            "borrow::observe -> borrow::resolve -> borrow::observe"
        ]
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let graph: Graph = [
        ("borrow", vec!["reconcile", "class"]),
        ("reconcile", vec!["borrow"]),
        ("class", vec!["render"]),
        ("render", vec![]),
    ]
    .into_iter()
    .map(|(from, to)| {
        (
            from.to_string(),
            to.into_iter().map(str::to_string).collect(),
        )
    })
    .collect();
    assert_eq!(cycles(&graph), ["borrow -> reconcile -> borrow"]);

    let file = syn::parse_file(
        "use crate::engine::render::{RenderedItem, render_manifest};\n\
         use super::redirect::redirect;\n\
         fn f(_: &crate::engine::class::CombInstance) {}\n\
         #[cfg(test)] mod tests { use crate::engine::status::clean_message; }",
    )
    .expect("parses");
    let mut paths = Paths::default();
    paths.visit_file(&file);
    let at = ["borrow".to_string(), "observe".to_string()];
    let targets: BTreeSet<Vec<String>> = paths
        .0
        .iter()
        .filter_map(|segments| target(&at, segments))
        .map(|target| target[..2.min(target.len())].to_vec())
        .collect();
    let expected: BTreeSet<Vec<String>> = [
        ["render", "RenderedItem"],
        ["render", "render_manifest"],
        ["borrow", "redirect"],
        ["class", "CombInstance"],
    ]
    .iter()
    .map(|pair| pair.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(targets, expected, "test code is not counted");
}
