//! `cargo xtask cycles`: the module graph of each crate in the workspace,
//! read from its paths (`crate::a::...`, `super::b`), and the cycles in it.
//!
//! Two levels are checked: the top-level modules of a crate, and the
//! modules inside each top-level module. An arrow `a -> b` means some file
//! of `a` names `b`, outside comments and `#[cfg(test)] mod tests`. A cycle
//! means neither module can be read, moved or tested without the other.
//!
//! A cycle that cannot be broken at once may be listed in [`KNOWN`]: the
//! check fails on any other cycle, and on a listed one that has shrunk or
//! gone (so that the list only ever gets shorter). It is empty: every crate
//! is free of cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The cycles allowed to stand for now: (crate directory, modules). A
/// module inside a top-level one is written `parent/child`.
const KNOWN: &[(&str, &[&str])] = &[];

/// The crates checked: every `src/` of the workspace.
fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for group in ["crates", "examples"] {
        for entry in sorted(&root.join(group)) {
            if entry.join("src").is_dir() {
                dirs.push(entry);
            }
        }
    }
    for single in ["xtask", "bench"] {
        if root.join(single).join("src").is_dir() {
            dirs.push(root.join(single));
        }
    }
    dirs
}

fn sorted(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .map(|read| read.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

/// Every cycle of the workspace, as (crate directory, sorted modules).
pub(crate) fn find(root: &Path) -> Vec<(String, Vec<String>)> {
    let mut cycles = Vec::new();
    for dir in crate_dirs(root) {
        let name = dir
            .strip_prefix(root)
            .unwrap_or(&dir)
            .to_string_lossy()
            .into_owned();
        let src = dir.join("src");
        let top = modules_in(&src, true);
        let arrows = graph(&top, |_: &ModuleFile, text: &str| crate_paths(text));
        cycles.extend(
            strongly_connected(&arrows)
                .into_iter()
                .map(|c| (name.clone(), c)),
        );
        for (parent, _) in top.iter().filter(|(_, files)| files.len() > 1) {
            let inner = modules_in(&src.join(parent), false);
            if inner.is_empty() {
                continue;
            }
            let arrows = graph(&inner, |file: &ModuleFile, text: &str| {
                let mut names = nested_paths(text, parent);
                if file.direct {
                    names.extend(super_paths(text));
                }
                names
            });
            cycles.extend(strongly_connected(&arrows).into_iter().map(|c| {
                let c = c.into_iter().map(|m| format!("{parent}/{m}")).collect();
                (name.clone(), c)
            }));
        }
    }
    cycles
}

/// A file, and whether it is the module's own file (whose `super` is the
/// module's parent) rather than one nested deeper.
struct ModuleFile {
    path: PathBuf,
    direct: bool,
}

/// The modules in `dir` and their files. At the crate root, `lib.rs` and
/// `main.rs` are the root itself and `bin/` holds other crates.
fn modules_in(dir: &Path, root: bool) -> BTreeMap<String, Vec<ModuleFile>> {
    let mut modules: BTreeMap<String, Vec<ModuleFile>> = BTreeMap::new();
    for entry in sorted(dir) {
        let Some(stem) = entry
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_owned)
        else {
            continue;
        };
        if entry.is_dir() {
            if root && stem == "bin" {
                continue;
            }
            let mut files = Vec::new();
            rust_files(&entry, &mut files);
            let own = entry.join("mod.rs");
            modules
                .entry(stem)
                .or_default()
                .extend(files.into_iter().map(|path| {
                    let direct = path == own;
                    ModuleFile { path, direct }
                }));
        } else if entry.extension().is_some_and(|e| e == "rs") {
            if (root && (stem == "lib" || stem == "main")) || (!root && stem == "mod") {
                continue;
            }
            modules.entry(stem).or_default().push(ModuleFile {
                path: entry,
                direct: true,
            });
        }
    }
    modules
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in sorted(dir) {
        if entry.is_dir() {
            rust_files(&entry, files);
        } else if entry.extension().is_some_and(|e| e == "rs") {
            files.push(entry);
        }
    }
}

/// The arrows between `modules`: the names each one's files take, by
/// `names`, that are other modules of the same set.
fn graph(
    modules: &BTreeMap<String, Vec<ModuleFile>>,
    names: impl Fn(&ModuleFile, &str) -> Vec<String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, files) in modules {
        let arrows = graph.entry(module.clone()).or_default();
        for file in files {
            let text = code(&fs::read_to_string(&file.path).unwrap_or_default());
            for name in names(file, &text) {
                if &name != module && modules.contains_key(&name) {
                    arrows.insert(name);
                }
            }
        }
    }
    graph
}

/// `source` without comments and without its test module.
fn code(source: &str) -> String {
    let source = source
        .split("\n#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .map(|line| match line.find(" //") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first name after each `crate::`, including every name of a
/// `crate::{a, b::c}` group.
fn crate_paths(text: &str) -> Vec<String> {
    after_prefix(text, "crate::")
}

/// The name after each `crate::<parent>::`.
fn nested_paths(text: &str, parent: &str) -> Vec<String> {
    let mut names = after_prefix(text, &format!("crate::{parent}::"));
    // `use crate::{parent::{a, b}}` is rare; `crate::parent::{a, b}` is
    // covered by the group reading.
    names.retain(|name| !name.is_empty());
    names
}

/// The name after each `super::` that is not `super::super`.
fn super_paths(text: &str) -> Vec<String> {
    after_prefix(text, "super::")
        .into_iter()
        .filter(|name| name != "super")
        .collect()
}

fn after_prefix(text: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        // `$crate::` in a macro, or a longer identifier ending in `crate`.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            names.extend(group_heads(group));
        } else {
            names.push(ident(rest));
        }
    }
    names
}

/// The first name of each item of a `{...}` group (its text starting just
/// after the brace).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut start = true;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if start && (c.is_alphanumeric() || c == '_') => {
                heads.push(ident(&group[at..]));
                start = false;
            }
            _ => {}
        }
    }
    heads
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The cycles of `graph`: its strongly connected parts of two or more
/// modules (Tarjan's algorithm), each sorted.
fn strongly_connected(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) {
            let number = self.index.len();
            self.index.insert(node, number);
            self.low.insert(node, number);
            self.stack.push(node);
            self.on_stack.insert(node);
            let graph = self.graph;
            for next in graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut part = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    part.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.found.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

/// The check `cargo xtask ci` runs: every cycle found is a listed one, and
/// every listed one is still there, whole.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let found = find(root);
    let mut problems = Vec::new();
    for (krate, cycle) in &found {
        let known = KNOWN
            .iter()
            .any(|(k, modules)| k == krate && cycle.iter().all(|m| modules.contains(&m.as_str())));
        if !known {
            problems.push(format!(
                "new module cycle in {krate}: {} (break it: move what both need into a module of its own, or pass it in)",
                cycle.join(" <-> ")
            ));
        }
    }
    for (krate, modules) in KNOWN {
        let still = found.iter().any(|(k, cycle)| {
            k == krate
                && cycle.len() == modules.len()
                && modules.iter().all(|m| cycle.iter().any(|c| c == m))
        });
        if !still {
            problems.push(format!(
                "the known cycle in {krate} ({}) has shrunk or gone: update KNOWN in xtask/src/cycles.rs to what `cargo xtask cycles` prints",
                modules.join(", ")
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// `cargo xtask cycles`: every cycle, one line each.
pub(crate) fn print(root: &Path) {
    let found = find(root);
    if found.is_empty() {
        println!("no module cycles");
    }
    for (krate, cycle) in found {
        println!("{krate}: {} modules: {}", cycle.len(), cycle.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_and_plain_crate_paths_name_their_first_module() {
        let text = "use crate::a::X;\nuse crate::{b, c::{D, E}, d::F};\nlet _ = $crate::z::Q; my_crate::y;";
        assert_eq!(crate_paths(text), ["a", "b", "c", "d"]);
    }

    #[test]
    fn comments_and_test_modules_are_not_read() {
        let text = code(
            "/// see [x](crate::docs)\nuse crate::a; // crate::b\n#[cfg(test)]\nmod tests {\n use crate::c;\n}",
        );
        assert_eq!(crate_paths(&text), ["a"]);
    }

    #[test]
    fn a_crate_whose_modules_name_each_other_has_a_cycle_and_check_refuses_it() {
        let root = std::env::temp_dir().join(format!("xtask-cycles-{}", std::process::id()));
        let src = root.join("crates/demo/src");
        fs::create_dir_all(src.join("b")).expect("a scratch crate");
        fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").expect("lib.rs");
        fs::write(src.join("a.rs"), "use crate::b::Thing;\n").expect("a.rs");
        fs::write(src.join("b/mod.rs"), "mod inner;\n").expect("b/mod.rs");
        fs::write(src.join("b/inner.rs"), "use crate::{c, a::Other};\n").expect("inner.rs");
        fs::write(src.join("c.rs"), "// crate::a is only a comment\n").expect("c.rs");
        let found = find(&root);
        let problem = check(&root).expect_err("an unlisted cycle fails the check");
        fs::remove_dir_all(&root).expect("scratch crate removed");
        assert_eq!(
            found,
            [(
                "crates/demo".to_owned(),
                vec!["a".to_owned(), "b".to_owned()]
            )]
        );
        assert!(
            problem.contains("new module cycle in crates/demo: a <-> b"),
            "{problem}"
        );
    }

    #[test]
    fn a_cycle_is_found_and_a_chain_is_not() {
        let graph = |arrows: &[(&str, &str)]| {
            let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (from, to) in arrows {
                graph
                    .entry((*from).to_owned())
                    .or_default()
                    .insert((*to).to_owned());
                graph.entry((*to).to_owned()).or_default();
            }
            graph
        };
        assert!(strongly_connected(&graph(&[("a", "b"), ("b", "c")])).is_empty());
        assert_eq!(
            strongly_connected(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
            [["a", "b", "c"]]
        );
    }
}
