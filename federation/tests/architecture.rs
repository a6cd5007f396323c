//! The architecture of docs/architecture.md, checked on the source.
//!
//! - **No cycle in any folder.** The modules of `federation/src` are read from `lib.rs` down
//!   through their `mod` declarations; each module's paths (`use` trees, and paths in types and
//!   expressions) that name a module of the crate (`crate::...`, `super::...`, `self::...`, a
//!   child module) are its edges. Within each folder (the crate root, `controller/`, `engine/`,
//!   `engine/borrow/`, ...) the children, and the folder's own items (its `mod.rs`), must form a
//!   one-way graph: the test fails naming each cycle. A folder re-exporting its children is not
//!   an edge; a path through a re-export counts for the module it names. Test code
//!   (`#[cfg(test)]` items, `tests.rs`) may use anything and is not read; a doc comment's link is
//!   not a path.
//! - **Who may call whom**: the top-level modules of comb-federation use only what the table of
//!   docs/architecture.md allows, and each crate of the workspace depends only on the crates its
//!   table allows (`cargo metadata`).
//! - **Errors typed to the edge**: no `Result<_, String>` in the crates the controller ships
//!   (comb-federation, comb-api, comb-upstreams, comb-kubeconfigs; the emulator, comb-sandbox,
//!   is not in the image): a failure keeps its type and its source until the edge that prints it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module's path from the crate root (`["engine", "borrow", "observe"]`; the root is `[]`).
type ModulePath = Vec<String>;

/// Node -> the nodes it uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// One module of the crate as its source says it.
#[derive(Debug, Default)]
struct Module {
    /// Its child modules (declared with `mod`, test-only ones left out).
    children: BTreeSet<String>,
    /// The paths it names outside test code and outside its re-exports: what it uses.
    paths: Vec<Vec<String>>,
    /// What it imports (`use a::b::C as D;`): the name `D` -> the path `a::b::C`.
    imports: BTreeMap<String, Vec<String>>,
    /// What it re-exports (`pub use a::b::C as D;`), the same way. A re-export alone is not a
    /// use: a path through it counts for the module the re-exported item is in.
    reexports: BTreeMap<String, Vec<String>>,
    /// The types it defines (structs, enums, unions, type aliases, traits).
    types: BTreeSet<String>,
    /// Its inherent impls (`impl Type { ... }`, no trait): the type's name and the functions
    /// each defines, with whether each is a method (takes `self`).
    impls: Vec<(String, Vec<(String, bool)>)>,
    /// The fields of the structs it defines: struct -> field -> the field's type (its name,
    /// seen through `&`, `Arc`, `Rc` and `Box`).
    fields: BTreeMap<String, BTreeMap<String, String>>,
    /// The methods it calls on a receiver whose type it declares: `shared.health.pause()` in a
    /// function taking `shared: &Shared` is `(Shared, [health], pause)`.
    typed_calls: BTreeSet<TypedCall>,
}

/// A method call on a receiver of a declared type, through its fields.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct TypedCall {
    root: String,
    fields: Vec<String>,
    method: String,
}

/// The name of a type as methods are called on it: `&Shared`, `Arc<Shared>`, `Box<Shared>` and
/// `crate::controller::Shared` are `Shared`; `None` for what has no name (tuples, `impl Trait`).
fn type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Reference(reference) => type_name(&reference.elem),
        syn::Type::Paren(inner) => type_name(&inner.elem),
        syn::Type::Group(inner) => type_name(&inner.elem),
        syn::Type::Path(path) => {
            let last = path.path.segments.last()?;
            let ident = last.ident.to_string();
            if ["Arc", "Rc", "Box"].contains(&ident.as_str())
                && let syn::PathArguments::AngleBracketed(arguments) = &last.arguments
                && let Some(syn::GenericArgument::Type(inner)) = arguments.args.first()
            {
                return type_name(inner);
            }
            Some(ident)
        }
        _ => None,
    }
}

/// The paths of one `use` tree, each with the name it binds (`None` for a glob).
fn use_paths(
    prefix: &mut Vec<String>,
    tree: &syn::UseTree,
    out: &mut Vec<(Option<String>, Vec<String>)>,
) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(prefix, &path.tree, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let mut segments = prefix.clone();
            if name.ident != "self" {
                segments.push(name.ident.to_string());
            }
            let bound = segments.last().cloned();
            out.push((bound, segments));
        }
        syn::UseTree::Rename(rename) => {
            let mut segments = prefix.clone();
            if rename.ident != "self" {
                segments.push(rename.ident.to_string());
            }
            out.push((Some(rename.rename.to_string()), segments));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix.clone())),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                use_paths(prefix, tree, out);
            }
        }
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
        syn::Item::Macro(item) => &item.attrs,
        _ => &[],
    }
}

/// The paths of one module's own items (not of its inline child modules, read as modules of
/// their own).
#[derive(Default)]
struct Reader<'ast> {
    module: Module,
    /// The type of the impl being read, for `self`.
    self_type: Option<String>,
    /// The declared types of the bindings in scope (a function's parameters, typed `let`s).
    bindings: Vec<BTreeMap<String, String>>,
    /// Inline child modules (`mod name { ... }`) with their items.
    inline: Vec<(String, &'ast [syn::Item])>,
    /// File child modules (`mod name;`).
    files: Vec<String>,
}

impl<'ast> Visit<'ast> for Reader<'ast> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test_only(item_attrs(item)) {
            return;
        }
        match item {
            syn::Item::Mod(module) => {
                let name = module.ident.to_string();
                self.module.children.insert(name.clone());
                match &module.content {
                    Some((_, items)) => self.inline.push((name, items)),
                    None => self.files.push(name),
                }
            }
            syn::Item::Use(item) => {
                let mut found = Vec::new();
                use_paths(&mut Vec::new(), &item.tree, &mut found);
                let reexport = !matches!(item.vis, syn::Visibility::Inherited);
                for (bound, segments) in found {
                    match (bound, reexport) {
                        (Some(name), true) => {
                            self.module.reexports.insert(name, segments);
                        }
                        (Some(name), false) => {
                            self.module.imports.insert(name, segments.clone());
                            self.module.paths.push(segments);
                        }
                        // A glob re-export is not followed; a glob import is a use.
                        (None, true) => {}
                        (None, false) => self.module.paths.push(segments),
                    }
                }
            }
            syn::Item::Impl(implementation) => {
                let self_type = type_name(&implementation.self_ty);
                if implementation.trait_.is_none()
                    && let Some(type_name) = &self_type
                {
                    let methods = implementation
                        .items
                        .iter()
                        .filter_map(|item| match item {
                            syn::ImplItem::Fn(function) => Some((
                                function.sig.ident.to_string(),
                                function.sig.receiver().is_some(),
                            )),
                            _ => None,
                        })
                        .collect();
                    self.module.impls.push((type_name.clone(), methods));
                }
                let outer = std::mem::replace(&mut self.self_type, self_type);
                syn::visit::visit_item(self, item);
                self.self_type = outer;
            }
            syn::Item::Struct(definition) => {
                let name = definition.ident.to_string();
                let fields = definition
                    .fields
                    .iter()
                    .filter_map(|field| {
                        Some((field.ident.as_ref()?.to_string(), type_name(&field.ty)?))
                    })
                    .collect();
                self.module.fields.insert(name.clone(), fields);
                self.module.types.insert(name);
                syn::visit::visit_item(self, item);
            }
            _ => {
                let defined = match item {
                    syn::Item::Struct(item) => Some(&item.ident),
                    syn::Item::Enum(item) => Some(&item.ident),
                    syn::Item::Union(item) => Some(&item.ident),
                    syn::Item::Type(item) => Some(&item.ident),
                    syn::Item::Trait(item) => Some(&item.ident),
                    _ => None,
                };
                if let Some(name) = defined {
                    self.module.types.insert(name.to_string());
                }
                syn::visit::visit_item(self, item);
            }
        }
    }

    fn visit_signature(&mut self, signature: &'ast syn::Signature) {
        let mut bound = BTreeMap::new();
        for input in &signature.inputs {
            match input {
                syn::FnArg::Receiver(_) => {
                    if let Some(self_type) = &self.self_type {
                        bound.insert("self".to_string(), self_type.clone());
                    }
                }
                syn::FnArg::Typed(typed) => {
                    if let (syn::Pat::Ident(ident), Some(ty)) = (&*typed.pat, type_name(&typed.ty))
                    {
                        bound.insert(ident.ident.to_string(), ty);
                    }
                }
            }
        }
        // The function's body follows its signature: its bindings start here.
        self.bindings.push(bound);
        syn::visit::visit_signature(self, signature);
    }

    fn visit_item_fn(&mut self, function: &'ast syn::ItemFn) {
        let depth = self.bindings.len();
        syn::visit::visit_item_fn(self, function);
        self.bindings.truncate(depth);
    }

    fn visit_impl_item_fn(&mut self, function: &'ast syn::ImplItemFn) {
        let depth = self.bindings.len();
        syn::visit::visit_impl_item_fn(self, function);
        self.bindings.truncate(depth);
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        syn::visit::visit_local(self, local);
        if let syn::Pat::Type(typed) = &local.pat
            && let (syn::Pat::Ident(ident), Some(ty)) = (&*typed.pat, type_name(&typed.ty))
            && let Some(scope) = self.bindings.last_mut()
        {
            scope.insert(ident.ident.to_string(), ty);
        }
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        if let Some((root, fields)) = self.receiver(&call.receiver) {
            self.module.typed_calls.insert(TypedCall {
                root,
                fields,
                method: call.method.to_string(),
            });
        }
        syn::visit::visit_expr_method_call(self, call);
    }

    /// A macro's arguments are tokens to syn; those that read as expressions (`format!`,
    /// `assert!`, `tracing::info!`'s values) are read as such.
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        syn::visit::visit_macro(self, mac);
        let arguments = mac.parse_body_with(
            syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated,
        );
        if let Ok(arguments) = arguments {
            let mut inner = Reader {
                self_type: self.self_type.clone(),
                bindings: self.bindings.clone(),
                ..Reader::default()
            };
            for argument in &arguments {
                inner.visit_expr(argument);
            }
            self.module.paths.extend(inner.module.paths);
            self.module.typed_calls.extend(inner.module.typed_calls);
        }
    }

    /// `pub(crate)` names no module it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.module.paths.push(
            path.segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect(),
        );
        syn::visit::visit_path(self, path);
    }
}

impl Reader<'_> {
    /// The declared type of a receiver and the fields it goes through (`shared.health`, with
    /// `shared: &Shared`, is `(Shared, [health])`); `None` when nothing declares it.
    fn receiver(&self, expr: &syn::Expr) -> Option<(String, Vec<String>)> {
        match expr {
            syn::Expr::Path(path) => {
                let ident = path.path.get_ident()?.to_string();
                let ty = self
                    .bindings
                    .iter()
                    .rev()
                    .find_map(|scope| scope.get(&ident))?;
                Some((ty.clone(), Vec::new()))
            }
            syn::Expr::Field(field) => {
                let syn::Member::Named(name) = &field.member else {
                    return None;
                };
                let (root, mut fields) = self.receiver(&field.base)?;
                fields.push(name.to_string());
                Some((root, fields))
            }
            syn::Expr::Reference(reference) => self.receiver(&reference.expr),
            syn::Expr::Paren(paren) => self.receiver(&paren.expr),
            _ => None,
        }
    }
}

/// A crate's modules, read from its root file down its `mod` declarations.
#[derive(Debug, Default)]
struct Crate {
    modules: BTreeMap<ModulePath, Module>,
}

impl Crate {
    /// Reads the crate whose root is `root` (`src/lib.rs`).
    fn read(root: &Path) -> Crate {
        let mut krate = Crate::default();
        let dir = root
            .parent()
            .expect("the root file's directory")
            .to_path_buf();
        krate.read_file(Vec::new(), root, &dir);
        krate
    }

    /// Reads the module `at` from `file`; its file children are in `dir`.
    fn read_file(&mut self, at: ModulePath, file: &Path, dir: &Path) {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|error| panic!("reading {}: {error}", file.display()));
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|error| panic!("{} does not parse: {error}", file.display()));
        self.read_items(at, &parsed.items, dir);
    }

    fn read_items(&mut self, at: ModulePath, items: &[syn::Item], dir: &Path) {
        let mut reader = Reader::default();
        for item in items {
            reader.visit_item(item);
        }
        let Reader {
            module,
            inline,
            files,
            ..
        } = reader;
        self.modules.insert(at.clone(), module);
        for name in files {
            let mut child = at.clone();
            child.push(name.clone());
            let (file, child_dir) = child_file(dir, &name);
            self.read_file(child, &file, &child_dir);
        }
        for (name, items) in inline {
            let mut child = at.clone();
            child.push(name.clone());
            self.read_items(child, items, &dir.join(&name));
        }
    }

    fn is_module(&self, path: &[String]) -> bool {
        self.modules.contains_key(path)
    }

    /// The absolute path a path of module `at` names, when it starts at the crate root, at
    /// `self`, at `super` or at a child module of `at`; `None` for anything else (another crate,
    /// a local name).
    fn absolute(&self, at: &[String], segments: &[String]) -> Option<Vec<String>> {
        let (mut base, mut rest) = match segments.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &segments[1..]),
            Some("self") => (at.to_vec(), &segments[1..]),
            Some("super") => (at.to_vec(), segments),
            Some(first)
                if self
                    .modules
                    .get(at)
                    .is_some_and(|m| m.children.contains(first)) =>
            {
                (at.to_vec(), segments)
            }
            _ => return None,
        };
        while let Some(("super", after)) = rest.split_first().map(|(s, r)| (s.as_str(), r)) {
            base.pop()?;
            rest = after;
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module an absolute path names or names an item of, following re-exports to where
    /// the item is defined.
    fn module_of(&self, path: &[String]) -> ModulePath {
        let mut path = path.to_vec();
        // Re-exports chain through a few modules at most; the bound ends a cycle of them.
        for _ in 0..16 {
            let mut at = Vec::new();
            let mut followed = None;
            for (index, segment) in path.iter().enumerate() {
                let mut next = at.clone();
                next.push(segment.clone());
                if self.is_module(&next) {
                    at = next;
                    continue;
                }
                if let Some(target) = self.modules[&at].reexports.get(segment)
                    && let Some(mut target) = self.absolute(&at, target)
                {
                    target.extend(path[index + 1..].iter().cloned());
                    followed = Some(target);
                }
                break;
            }
            match followed {
                Some(target) if target != path => path = target,
                _ => return at,
            }
        }
        Vec::new()
    }

    /// The type of field `field` of the struct named `owner`, as some module defines it.
    fn field_type(&self, owner: &str, field: &str) -> Option<&str> {
        self.modules
            .values()
            .find_map(|module| module.fields.get(owner)?.get(field))
            .map(String::as_str)
    }

    /// The modules whose inherent impls of the type named `owner` define the function
    /// `function` (a method or an associated function).
    fn homes_of(&self, owner: &str, function: &str) -> Vec<&ModulePath> {
        self.modules
            .iter()
            .filter(|(_, module)| {
                module.impls.iter().any(|(ty, functions)| {
                    ty == owner && functions.iter().any(|(name, _)| name == function)
                })
            })
            .map(|(at, _)| at)
            .collect()
    }

    /// The modules a typed call goes to: its receiver's type followed through the fields, and
    /// the impls of that type that define the method.
    fn call_targets(&self, call: &TypedCall) -> Vec<&ModulePath> {
        let mut owner = call.root.as_str();
        for field in &call.fields {
            match self.field_type(owner, field) {
                Some(ty) => owner = ty,
                None => return Vec::new(),
            }
        }
        self.homes_of(owner, &call.method)
    }

    /// Inherent methods of a type in a module that does not define it, as `impl Type in module`
    /// lines: a call of one (`x.method()`, whose receiver the caller may not even name) would
    /// hide a dependency behind the type's own module. Associated functions elsewhere (a
    /// constructor beside what it needs) are called by paths, which the uses follow.
    fn misplaced_impls(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (at, module) in &self.modules {
            for (type_name, functions) in &module.impls {
                let methods = functions.iter().any(|(_, method)| *method);
                if methods && !module.types.contains(type_name) {
                    found.push(format!("impl {type_name} in {}", name(at)));
                }
            }
        }
        found
    }

    /// Each module -> the modules of the crate it uses (itself left out): by the paths it names,
    /// and by the methods it calls on receivers whose type it declares (a parameter, `self`, a
    /// typed `let`, and their fields): `shared.health.pause()` uses the module of `Health`'s
    /// impl. A call on a receiver of unknown type counts for nothing.
    fn uses(&self) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
        let mut uses: BTreeMap<ModulePath, BTreeSet<ModulePath>> = BTreeMap::new();
        for (at, module) in &self.modules {
            let used = uses.entry(at.clone()).or_default();
            for call in &module.typed_calls {
                for home in self.call_targets(call) {
                    if home != at {
                        used.insert(home.clone());
                    }
                }
            }
            for segments in &module.paths {
                // A path starting with a name the module imports or re-exports starts where
                // that name comes from.
                let expanded: Vec<String>;
                let segments = match segments.split_first().and_then(|(first, rest)| {
                    let imported = module.imports.get(first).or(module.reexports.get(first))?;
                    Some((imported, rest))
                }) {
                    Some((imported, rest)) => {
                        expanded = imported.iter().chain(rest).cloned().collect();
                        &expanded
                    }
                    _ => segments,
                };
                let Some(absolute) = self.absolute(at, segments) else {
                    continue;
                };
                let target = self.module_of(&absolute);
                // `Type::function`: the function may be defined beside what it needs, in an
                // impl of the type in another module.
                if let [.., owner, function] = &segments[..] {
                    for home in self.homes_of(owner, function) {
                        if home != at {
                            used.insert(home.clone());
                        }
                    }
                }
                if target != *at {
                    used.insert(target);
                }
            }
        }
        uses
    }

    /// For each folder (a module with children), the graph among its children and its own
    /// items (named `folder (own items)`), keyed by the folder (`crate`, `controller`, ...).
    fn folder_graphs(&self) -> BTreeMap<String, Graph> {
        let uses = self.uses();
        let mut graphs: BTreeMap<String, Graph> = BTreeMap::new();
        for (folder, module) in &self.modules {
            if module.children.is_empty() {
                continue;
            }
            let folder_name = name(folder);
            let own = format!("{folder_name} (own items)");
            let node = |path: &ModulePath| -> Option<String> {
                let rest = path.strip_prefix(folder.as_slice())?;
                Some(match rest.first() {
                    None => own.clone(),
                    Some(child) => {
                        let mut child_path = folder.clone();
                        child_path.push(child.clone());
                        name(&child_path)
                    }
                })
            };
            let graph = graphs.entry(folder_name.clone()).or_default();
            for child in &module.children {
                let mut child_path = folder.clone();
                child_path.push(child.clone());
                graph.entry(name(&child_path)).or_default();
            }
            for (from, targets) in &uses {
                let Some(from_node) = node(from) else {
                    continue;
                };
                for target in targets {
                    if let Some(to_node) = node(target)
                        && to_node != from_node
                    {
                        graph.entry(from_node.clone()).or_default().insert(to_node);
                    }
                }
            }
        }
        graphs
    }
}

/// `controller::run`; the crate root is `crate`.
fn name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// The file of child module `name` of a module whose children live in `dir`, and the directory
/// of the child's own children.
fn child_file(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name).join("mod.rs");
    let file = if flat.exists() { flat } else { nested };
    (file, dir.join(name))
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

/// Every cycle of every folder's graph.
fn all_cycles(krate: &Crate) -> Vec<String> {
    krate.folder_graphs().values().flat_map(cycles).collect()
}

fn federation() -> Crate {
    Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
}

#[test]
fn no_folder_of_the_crate_has_a_cycle() {
    let krate = federation();
    let graphs = krate.folder_graphs();
    // The parse saw the crate: every folder, and the data path's modules with what they use.
    for folder in [
        "crate",
        "controller",
        "engine",
        "engine::borrow",
        "webhook",
        "cli",
    ] {
        assert!(
            graphs.contains_key(folder),
            "no folder {folder}: {:?}",
            graphs.keys()
        );
    }
    for (folder, module, uses) in [
        ("engine", "engine::reconcile", "engine::borrow"),
        ("engine", "engine::render", "engine::context"),
        (
            "engine::borrow",
            "engine::borrow::observe",
            "engine::borrow::redirect",
        ),
        ("controller", "controller::step", "controller::layer"),
        ("crate", "controller", "engine"),
    ] {
        assert!(
            graphs[folder]
                .get(module)
                .is_some_and(|used| used.contains(uses)),
            "{module} should use {uses}: {:?}",
            graphs[folder]
        );
    }
    let found = all_cycles(&krate);
    assert!(
        found.is_empty(),
        "federation/src has cycles:\n  {}",
        found.join("\n  ")
    );
}

/// The top-level modules of comb-federation and what each may use (docs/architecture.md, "Inside
/// comb-federation"); `error` and `logging` are for everyone.
const MAY_USE: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("logging", &[]),
    ("engine", &[]),
    ("config", &["engine"]),
    ("picture", &["engine", "config"]),
    ("webhook", &["engine", "config"]),
    ("controller", &["engine", "config", "webhook", "picture"]),
    (
        "cli",
        &["engine", "config", "controller", "webhook", "picture"],
    ),
];

/// What a top-level module uses outside what it may, as `from -> to` lines.
fn forbidden_uses(krate: &Crate) -> Vec<String> {
    let graphs = krate.folder_graphs();
    let mut found = Vec::new();
    for (from, uses) in &graphs["crate"] {
        let allowed = MAY_USE
            .iter()
            .find(|(module, _)| module == from)
            .map(|(_, allowed)| *allowed);
        let Some(allowed) = allowed else {
            found.push(format!("{from}: not in the table of docs/architecture.md"));
            continue;
        };
        for to in uses {
            let everyone = ["error", "logging"].contains(&to.as_str());
            if !everyone && !allowed.contains(&to.as_str()) {
                found.push(format!("{from} -> {to}"));
            }
        }
    }
    found
}

#[test]
fn the_crate_modules_use_only_what_the_table_allows() {
    let found = forbidden_uses(&federation());
    assert!(
        found.is_empty(),
        "uses docs/architecture.md does not allow:\n  {}",
        found.join("\n  ")
    );
}

/// The workspace's crates and the crates of the workspace each may depend on (normal
/// dependencies; tests may use the test kit and the emulator).
const CRATES_MAY_USE: &[(&str, &[&str])] = &[
    ("comb-api", &[]),
    ("comb-kubeconfigs", &["comb-api"]),
    ("comb-upstreams", &["comb-api", "comb-kubeconfigs"]),
    ("comb-sandbox", &["comb-api", "comb-kubeconfigs"]),
    // comb-federation behind the `federation` feature, which only comb-federation's tests use.
    (
        "comb-testkit",
        &[
            "comb-api",
            "comb-kubeconfigs",
            "comb-sandbox",
            "comb-federation",
        ],
    ),
    // The server each Pod of the sandbox network runs: dependency-free on purpose.
    ("comb-identity", &[]),
    (
        "comb-federation",
        &[
            "comb-api",
            "comb-kubeconfigs",
            "comb-upstreams",
            "comb-sandbox",
        ],
    ),
];

/// Crates that give a client or an async runtime, which `comb-api` stays without.
const CLIENT_OR_RUNTIME: &[&str] = &["kube", "kube-client", "kube-runtime", "tokio", "hyper"];

#[test]
fn the_crates_depend_only_on_what_the_table_allows() {
    let metadata = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        metadata.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&metadata.stdout).expect("cargo metadata prints JSON");
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("a package name");
        let allowed = CRATES_MAY_USE
            .iter()
            .find(|(krate, _)| *krate == name)
            .map(|(_, allowed)| *allowed)
            .unwrap_or_else(|| panic!("{name} is not in the table of docs/architecture.md"));
        seen.insert(name);
        for dependency in package["dependencies"].as_array().expect("dependencies") {
            let dependency_name = dependency["name"].as_str().expect("a dependency name");
            let normal = dependency["kind"].is_null();
            if normal && dependency_name.starts_with("comb-") && !allowed.contains(&dependency_name)
            {
                found.push(format!("{name} -> {dependency_name}"));
            }
            if normal && name == "comb-api" && CLIENT_OR_RUNTIME.contains(&dependency_name) {
                found.push(format!("{name} -> {dependency_name} (a client or runtime)"));
            }
        }
    }
    assert_eq!(
        seen.len(),
        CRATES_MAY_USE.len(),
        "every crate read: {seen:?}"
    );
    assert!(
        found.is_empty(),
        "dependencies docs/architecture.md does not allow:\n  {}",
        found.join("\n  ")
    );
}

/// Writes `files` (path under `src/`, text) as a scratch crate and reads it.
fn scratch_crate(name: &str, files: &[(&str, &str)]) -> Crate {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    for (file, text) in files {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a scratch directory");
        std::fs::write(&path, text).expect("a scratch file");
    }
    Crate::read(&dir.join("lib.rs"))
}

#[test]
fn a_cycle_in_any_folder_fails_by_name() {
    let krate = scratch_crate(
        "architecture-cycles",
        &[
            (
                "lib.rs",
                "pub mod controller;\npub mod engine;\npub mod webhook;",
            ),
            // The crate root: controller <-> webhook through a re-export of controller's.
            (
                "webhook.rs",
                "use crate::controller::CombKey;\nuse crate::engine::Env;",
            ),
            (
                "controller/mod.rs",
                "mod run;\nmod shards;\npub mod queue;\npub use queue::CombKey;\n\
                 pub struct Shared;\nfn serve(_: crate::webhook::Webhook) {}",
            ),
            ("controller/queue.rs", "pub struct CombKey;"),
            // Two siblings: a type one way, a function the other.
            (
                "controller/run.rs",
                "use super::shards::{Fence, coordinate};\npub struct LayerWork;",
            ),
            (
                "controller/shards.rs",
                "pub struct Fence;\nfn coordinate(_: &super::run::LayerWork) {}\n\
                 fn share(_: &super::Shared) {}",
            ),
            // A folder's own items and a child.
            (
                "engine/mod.rs",
                "pub mod borrow;\npub mod reconcile;\npub struct Env(reconcile::Step);",
            ),
            (
                "engine/reconcile.rs",
                "pub struct Step;\nfn f(_: &super::Env) {}",
            ),
            // A nested folder, through `self::` and `super::super::`.
            (
                "engine/borrow/mod.rs",
                "pub mod observe;\npub mod resolve;\npub use self::resolve::resolve;",
            ),
            (
                "engine/borrow/resolve.rs",
                "pub fn resolve() { super::observe::observe() }",
            ),
            (
                "engine/borrow/observe.rs",
                "/// Not an import: [`super::super::reconcile`], [`crate::webhook`].\n\
                 pub fn observe() { super::resolve() }\n\
                 #[cfg(test)] mod tests { use crate::engine::borrow::resolve; }",
            ),
        ],
    );
    assert_eq!(
        all_cycles(&krate),
        [
            "controller::run -> controller::shards -> controller::run",
            "controller -> webhook -> controller",
            "engine (own items) -> engine::reconcile -> engine (own items)",
            "engine::borrow::observe -> engine::borrow::resolve -> engine::borrow::observe",
        ]
    );
    // The re-export of `queue::CombKey` is followed to `queue`: the controller's own items are
    // not a node in a cycle with `shards` because of it; `Shared` is.
    let graphs = krate.folder_graphs();
    assert_eq!(
        graphs["controller"]["controller::shards"],
        ["controller (own items)", "controller::run"]
            .map(str::to_string)
            .into()
    );
    // The table allows the controller the webhook, not the other way.
    assert_eq!(forbidden_uses(&krate), ["webhook -> controller"]);
}

#[test]
fn a_module_that_breaks_the_table_is_named() {
    let krate = scratch_crate(
        "architecture-table",
        &[
            (
                "lib.rs",
                "pub mod engine;\npub mod controller;\npub mod extra;",
            ),
            ("engine.rs", "fn f(_: crate::controller::Shared) {}"),
            ("controller.rs", "pub struct Shared;"),
            ("extra.rs", ""),
        ],
    );
    assert_eq!(
        forbidden_uses(&krate),
        [
            "engine -> controller",
            "extra: not in the table of docs/architecture.md"
        ]
    );
}

#[test]
fn paths_are_read_as_rust_resolves_them() {
    let krate = scratch_crate(
        "architecture-paths",
        &[
            (
                "lib.rs",
                "pub mod a;\npub mod b;\npub use b::inner::Deep as Shallow;",
            ),
            (
                "a.rs",
                "fn f(_: crate::Shallow, _: &b_alias::X) {}\nuse crate::b as b_alias;",
            ),
            ("b/mod.rs", "pub mod inner;"),
            ("b/inner.rs", "pub struct Deep;"),
        ],
    );
    let uses = krate.uses();
    let of = |path: &[&str]| -> BTreeSet<String> {
        uses[&path.iter().map(|s| s.to_string()).collect::<Vec<_>>()]
            .iter()
            .map(|target| name(target))
            .collect()
    };
    // Through the root's re-export to where `Deep` is defined; the alias is the module `b`.
    assert_eq!(of(&["a"]), ["b", "b::inner"].map(str::to_string).into());
    // The root re-exporting a descendant's item is not a use.
    assert_eq!(of(&[]), BTreeSet::new());
}

#[test]
fn every_type_has_its_methods_in_its_own_module() {
    let found = federation().misplaced_impls();
    assert!(
        found.is_empty(),
        "inherent impls outside the module that defines the type (move them, or make the part \
         a type of its own module):\n  {}",
        found.join("\n  ")
    );
}

/// The controller as it stood before its context was split: `Shared` defined in `mod.rs`, its
/// health methods in `health.rs` (which names `watch::Failure`), and `watch.rs` calling them on
/// a `Shared`. The paths alone show no cycle; the methods do, and the impl is misplaced.
#[test]
fn a_cycle_through_methods_and_a_misplaced_impl_are_named() {
    let krate = scratch_crate(
        "architecture-methods",
        &[
            ("lib.rs", "pub mod controller;"),
            (
                "controller/mod.rs",
                "mod health;\nmod watch;\npub struct Shared;",
            ),
            (
                "controller/health.rs",
                "use super::Shared;\nuse super::watch::Failure;\n\
                 impl Shared {\n    pub fn watch_failed(&self, _: Failure) {}\n    \
                 pub fn layer_answered(&self) {}\n}",
            ),
            (
                "controller/watch.rs",
                "use super::Shared;\npub enum Failure { Expired }\n\
                 fn watch(shared: &Shared) {\n    shared.layer_answered();\n    \
                 shared.watch_failed(Failure::Expired);\n    format!(\"{:?}\", shared.len());\n}",
            ),
            // A method of another type, of the same name as one called on `Shared`: no edge.
            (
                "controller/queue.rs",
                "pub struct Queue;\nimpl Queue { pub fn len(&self) -> usize { 0 } }",
            ),
        ],
    );
    assert_eq!(
        all_cycles(&krate),
        ["controller::health -> controller::watch -> controller::health"]
    );
    assert_eq!(
        krate.misplaced_impls(),
        ["impl Shared in controller::health"]
    );
}

/// Finds `Result<_, String>` outside test code.
#[derive(Default)]
struct StringErrors {
    file: String,
    /// The function being read (line numbers need proc-macro2's span locations).
    function: String,
    found: Vec<String>,
}

impl<'ast> Visit<'ast> for StringErrors {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test_only(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.function = item.sig.ident.to_string();
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            self.function = item.sig.ident.to_string();
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_type_path(&mut self, path: &'ast syn::TypePath) {
        if let Some(last) = path.path.segments.last()
            && last.ident == "Result"
            && let syn::PathArguments::AngleBracketed(arguments) = &last.arguments
            && let Some(syn::GenericArgument::Type(syn::Type::Path(error))) =
                arguments.args.iter().nth(1)
            && error.path.is_ident("String")
        {
            self.found
                .push(format!("{}: fn {}", self.file, self.function));
        }
        syn::visit::visit_type_path(self, path);
    }
}

fn string_errors_under(dir: &Path, found: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a source folder")
        .map(|entry| entry.expect("a folder entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            string_errors_under(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && path.file_name().is_some_and(|name| name != "tests.rs")
        {
            let text = std::fs::read_to_string(&path).expect("a source file");
            let file = syn::parse_file(&text).expect("Rust source");
            let mut visitor = StringErrors {
                file: path.display().to_string(),
                ..StringErrors::default()
            };
            visitor.visit_file(&file);
            found.extend(visitor.found);
        }
    }
}

#[test]
fn no_result_with_a_string_error_in_the_shipped_crates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace");
    let mut found = Vec::new();
    for krate in ["federation", "api", "upstreams", "kubeconfigs"] {
        string_errors_under(&root.join(krate).join("src"), &mut found);
    }
    assert!(
        found.is_empty(),
        "Result<_, String> in production code (keep the error's type and source; render it at \
         the edge):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn a_string_error_is_found_and_test_code_is_not_read() {
    let file = syn::parse_file(
        "fn bad() -> Result<u8, String> { Ok(1) }\n\
         #[cfg(test)] mod tests { fn fine() -> Result<u8, String> { Ok(1) } }\n\
         fn good() -> Result<u8, std::io::Error> { Ok(1) }",
    )
    .expect("Rust source");
    let mut visitor = StringErrors {
        file: "f.rs".into(),
        ..StringErrors::default()
    };
    visitor.visit_file(&file);
    assert_eq!(visitor.found, ["f.rs: fn bad"]);
}
