//! The shape of the source tree, checked: dependencies point down.
//!
//! Every `.rs` file under `src/` is a node; a file depends on another when
//! it names a path into it (a `use`, or an inline `crate::...`, `super::...`
//! or child-module path). The rules (see CONTRIBUTING.md, "Layout"):
//!
//! * no import loops: no file depends, directly or through others, on a file
//!   that depends on it. A folder's `mod.rs` counts as a file like any
//!   other, so a part importing from its `mod.rs` while the `mod.rs`
//!   re-exports the part is a loop too.
//! * layers: the log never names the broker.
//!
//! Two more rules keep the tree readable (CONTRIBUTING.md, "Layout"):
//!
//! * the Layout table names every source file of `src/`, `ffi/src/` and
//!   `nats/src/` in the row of its folder ([`layout_problems`]);
//! * no source file has over [`MAX_CODE_LINES`] lines of code unless it
//!   says why ([`size_problems`]; [`PENDING_CUTS`] lists those being cut).
//!
//! The checkers are plain text processing (comments, strings and `mod tests`
//! blocks left out), so they are tested themselves on small made-up trees
//! and tables that must fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root: `["broker", "subscription", "core"]`.
type ModPath = Vec<String>;

/// The module path of a file relative to `src/`.
fn module_of(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The file's code without comments, string literals or a trailing
/// `mod tests { .. }` (whose `super` is the file itself).
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("mod tests {") {
            break;
        }
        push_code(line, &mut out);
        out.push('\n');
    }
    out
}

/// Pushes `line`'s code onto `out`: the line without a `//` comment and
/// without the insides of string literals (a string on one line).
fn push_code(line: &str, out: &mut String) {
    let mut in_str = false;
    let mut prev = ' ';
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            if c == '"' && prev != '\\' {
                in_str = false;
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
            continue;
        }
        if c == '/' && chars.peek() == Some(&'/') {
            break;
        }
        if c == '"' {
            in_str = true;
            prev = ' ';
            continue;
        }
        out.push(c);
    }
}

/// Splits a `use` tree (`a::{b, c::{d, e}}`) into its full paths.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    // Drop renames (`X as Y`), keeping the punctuation after the new name.
    let mut plain = String::new();
    let mut tokens = tree.split_whitespace();
    while let Some(t) = tokens.next() {
        if t == "as" {
            let renamed = tokens.next().unwrap_or("");
            plain.extend(renamed.chars().filter(|c| !(c.is_alphanumeric() || *c == '_')));
        } else {
            plain.push_str(t);
        }
    }
    let tree = plain;
    let mut out = Vec::new();
    expand_into(&tree, Vec::new(), &mut out);
    out
}

fn expand_into(tree: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    // Split at top-level commas.
    let mut depth = 0;
    let mut start = 0;
    let bytes = tree.as_bytes();
    let mut items = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            b',' if depth == 0 => {
                items.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&tree[start..]);
    for item in items.into_iter().filter(|i| !i.is_empty()) {
        match item.find('{') {
            Some(open) => {
                let head = item[..open].trim_end_matches("::");
                let inner = &item[open + 1..item.rfind('}').expect("balanced braces")];
                let mut p = prefix.clone();
                p.extend(head.split("::").filter(|s| !s.is_empty()).map(str::to_owned));
                expand_into(inner, p, out);
            }
            None => {
                let mut p = prefix.clone();
                p.extend(item.split("::").filter(|s| !s.is_empty()).map(str::to_owned));
                out.push(p);
            }
        }
    }
}

/// Every path the code names: the paths of its `use` items and the inline
/// `a::b::c` paths elsewhere.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = String::new();
    // `use` items first (they may span lines and hold braces).
    let mut s = code;
    while let Some(pos) = find_use(s) {
        rest.push_str(&s[..pos]);
        let after = &s[pos..];
        let end = after.find(';').map_or(after.len(), |e| e + 1);
        let item = &after[after.find("use ").expect("found a use") + 4..end.saturating_sub(1)];
        paths.extend(expand_use(item.trim_start_matches("::")));
        s = &after[end..];
    }
    rest.push_str(s);
    // Inline paths.
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if is_ident(chars[i]) && (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':')) {
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let start = j;
                while j < chars.len() && is_ident(chars[j]) {
                    j += 1;
                }
                segs.push(chars[start..j].iter().collect::<String>());
                if j + 2 < chars.len() && chars[j] == ':' && chars[j + 1] == ':' && is_ident(chars[j + 2]) {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                paths.push(segs);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    paths
}

/// Where the next `use` item starts (at a statement start, with any
/// visibility), if any.
fn find_use(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = s[from..].find("use ") {
        let at = from + p;
        let before = s[..at].trim_end();
        let starts_item = before.is_empty()
            || before.ends_with(';')
            || before.ends_with('{')
            || before.ends_with('}')
            || before.ends_with(']')
            || before.ends_with("pub")
            || before.ends_with(')') && before.rsplit_once("pub(").is_some_and(|(_, v)| !v.contains(' '));
        let word_start = at == 0 || !s[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        if starts_item && word_start {
            // Back up over a visibility so the caller skips it.
            let vis = ["pub(crate) ", "pub(super) ", "pub "].iter().find(|v| s[..at].ends_with(*v));
            return Some(at - vis.map_or(0, |v| v.len()));
        }
        from = at + 4;
    }
    None
}

/// Resolves `path`, named in module `here`, to the file that defines it.
fn resolve(here: &ModPath, path: &[String], files: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    let mut abs: ModPath;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            abs = Vec::new();
            rest = &path[1..];
        }
        Some("self") => {
            abs = here.clone();
            rest = &path[1..];
        }
        Some("super") => {
            abs = here.clone();
            while rest.first().map(String::as_str) == Some("super") {
                abs.pop()?;
                rest = &rest[1..];
            }
        }
        Some(first) => {
            let mut child = here.clone();
            child.push(first.to_owned());
            if !files.contains_key(&child) {
                return None;
            }
            abs = here.clone();
        }
        None => return None,
    }
    // The deepest module on the path is the file the name lives in.
    for seg in rest {
        let mut next = abs.clone();
        next.push(seg.clone());
        if files.contains_key(&next) {
            abs = next;
        } else {
            break;
        }
    }
    files.contains_key(&abs).then_some(abs)
}

/// The file-to-file dependency graph of the tree under `src`.
fn graph(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable src dir") {
            let path = entry.expect("a dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).expect("under src").to_path_buf();
                // A `main.rs` beside a `lib.rs` is a crate of its own, which
                // names the library by its crate name, never `crate::`.
                if rel == Path::new("main.rs") && src.join("lib.rs").exists() {
                    continue;
                }
                files.insert(module_of(&rel), path);
            }
        }
    }
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (module, path) in &files {
        let code = code_of(&std::fs::read_to_string(path).expect("readable source"));
        let deps = edges.entry(module.clone()).or_default();
        for p in paths_in(&code) {
            if let Some(target) = resolve(module, &p, &files)
                && &target != module
            {
                deps.insert(target);
            }
        }
    }
    edges
}

/// A dependency loop, if there is one, as the files around it.
fn find_loop(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Option<Vec<ModPath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        n: &ModPath,
        edges: &BTreeMap<ModPath, BTreeSet<ModPath>>,
        marks: &mut BTreeMap<ModPath, Mark>,
        stack: &mut Vec<ModPath>,
    ) -> Option<Vec<ModPath>> {
        marks.insert(n.clone(), Mark::Open);
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            match marks.get(m).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let from = stack.iter().position(|s| s == m).expect("open nodes are on the stack");
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(m, edges, marks, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(n.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for n in edges.keys() {
        if marks.get(n).copied().unwrap_or(Mark::New) == Mark::New {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, edges, &mut marks, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

fn show(cycle: &[ModPath]) -> String {
    cycle.iter().map(|m| format!("crate::{}", m.join("::"))).collect::<Vec<_>>().join(" -> ")
}

/// The graphs between the parts of each folder: a part is a file or a sub-folder
/// directly inside it, and part `a` depends on part `b` when any file in `a`
/// depends on any file in `b`. A file-level check misses two folders that
/// each import the other through different files; this one does not. The
/// folder's own `mod.rs` is left out: it declares and re-exports its parts
/// (a part importing from it is already a file-level loop).
fn folder_graphs(
    edges: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<ModPath>>> {
    // Per folder, its parts' graph; a node is the folder's path plus the part.
    let mut folders: BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<ModPath>>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // one of them is the folder's own file, or its ancestor's
            }
            let folder = from[..common].to_vec();
            let part = |m: &ModPath| m[..=common].to_vec();
            folders.entry(folder).or_default().entry(part(from)).or_default().insert(part(to));
        }
    }
    folders
}

/// Edges from the log to the broker (the log is the layer below).
fn upward(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (from, tos) in edges {
        if from.first().map(String::as_str) == Some("log") {
            for to in tos.iter().filter(|t| t.first().map(String::as_str) == Some("broker")) {
                bad.push(format!("crate::{} -> crate::{}", from.join("::"), to.join("::")));
            }
        }
    }
    bad
}

/// Edges of a loop not yet taken apart, each with whose it is to remove.
/// An entry that no longer matches an edge fails the test, so it is deleted
/// when the loop goes. None is left.
const KNOWN: &[(&str, &str, &str)] = &[];

/// Edges between the parts of a folder that close a loop not yet taken
/// apart, as (from part, to part, whose it is to remove). An entry that no
/// longer matches an edge fails the test, so it is deleted when the loop goes.
/// None is left.
const KNOWN_FOLDER_EDGES: &[(&str, &str, &str)] = &[];

/// The other crates whose `src/` the loop checks cover.
const CRATES: &[&str] = &["ffi/src", "nats/src", "benches/rill-bench/src"];

#[test]
fn no_folder_imports_a_folder_that_imports_it_in_any_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let parse = |m: &str| m.split("::").map(str::to_owned).collect::<ModPath>();
    for src in std::iter::once("src").chain(CRATES.iter().copied()) {
        let mut folders = folder_graphs(&graph(&root.join(src)));
        if src == "src" {
            for (from, to, why) in KNOWN_FOLDER_EDGES {
                let (from, to) = (parse(from), parse(to));
                let folder = from[..from.len() - 1].to_vec();
                let removed =
                    folders.get_mut(&folder).and_then(|g| g.get_mut(&from)).is_some_and(|tos| tos.remove(&to));
                assert!(removed, "the known folder edge {from:?} -> {to:?} ({why}) is gone: delete it");
            }
        }
        let loops: Vec<String> = folders.values().filter_map(find_loop).map(|c| show(&c)).collect();
        assert!(loops.is_empty(), "loops between the parts of a folder in {src}/: {loops:#?}");
    }
}

#[test]
fn the_other_crates_have_no_import_loops() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in CRATES {
        let edges = graph(&root.join(src));
        assert!(edges.len() > 3, "found only {} files under {src}/", edges.len());
        if let Some(cycle) = find_loop(&edges) {
            panic!("an import loop in {src}/: {}", show(&cycle));
        }
    }
}

#[test]
fn src_has_no_import_loops_and_the_log_never_names_the_broker() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges = graph(&src);
    let parse = |m: &str| m.split("::").map(str::to_owned).collect::<ModPath>();
    for (from, to, why) in KNOWN {
        let removed = edges.get_mut(&parse(from)).is_some_and(|tos| tos.remove(&parse(to)));
        assert!(removed, "the known loop edge {from} -> {to} ({why}) is gone: delete it from KNOWN");
    }
    // The checker sees the files it should: a sanity check that it parsed.
    let broker = edges.get(&vec!["broker".to_owned()]).expect("src/broker/mod.rs");
    assert!(broker.contains(&vec!["broker".into(), "topic".into()]), "broker/mod.rs uses topic.rs: {broker:?}");
    let topic = &edges[&vec!["broker".to_owned(), "topic".to_owned()]];
    assert!(topic.contains(&vec!["log".into()]), "topic.rs uses the log: {topic:?}");
    if let Some(cycle) = find_loop(&edges) {
        panic!("an import loop in src/: {}", show(&cycle));
    }
    let up = upward(&edges);
    assert!(up.is_empty(), "the log names the broker: {up:?}");
}

/// What only `src/sync.rs` may name from std (clippy cannot check these: the
/// shim re-exports std's own items, and clippy sees through re-exports).
const SHIM_ONLY: &[&[&str]] = &[
    &["std", "sync", "atomic"],
    &["std", "thread"],
    &["std", "cell", "UnsafeCell"],
    &["std", "sync", "Mutex"],
    &["std", "sync", "Condvar"],
    &["std", "sync", "RwLock"],
];

/// The std paths in `code` that only the sync shim may name.
fn shim_only_paths(code: &str) -> Vec<String> {
    paths_in(code)
        .into_iter()
        .filter(|p| SHIM_ONLY.iter().any(|bad| p.len() >= bad.len() && p.iter().zip(bad.iter()).all(|(a, b)| a == b)))
        .map(|p| p.join("::"))
        .collect()
}

#[test]
fn only_the_sync_shim_names_std_threads_atomics_locks_and_cells() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![src.clone()];
    let mut bad = Vec::new();
    let mut checked = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable src dir") {
            let path = entry.expect("a dir entry").path();
            let name = path.file_name().expect("a name").to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".rs") && path != src.join("sync.rs") && !name.ends_with("tests.rs") {
                // Unit tests (`tests.rs`, `*_tests.rs`, `mod tests`) may use std directly.
                checked += 1;
                for p in shim_only_paths(&code_of(&std::fs::read_to_string(&path).expect("readable source"))) {
                    bad.push(format!("{}: {p}", path.strip_prefix(&src).expect("under src").display()));
                }
            }
        }
    }
    assert!(checked > 10, "found only {checked} files under src/");
    assert!(bad.is_empty(), "name these through crate::sync instead: {bad:#?}");
}

#[test]
fn the_shim_check_sees_grouped_inline_and_renamed_uses() {
    let code = code_of(
        "use std::sync::{Arc, atomic::{AtomicU64 as A, Ordering}};\n\
         // std::thread::spawn in a comment is fine\n\
         fn f() { let s = \"std::thread::park\"; std::thread::yield_now(); }\n\
         use std::sync::OnceLock;\n",
    );
    assert_eq!(
        shim_only_paths(&code),
        vec!["std::sync::atomic::AtomicU64", "std::sync::atomic::Ordering", "std::thread::yield_now"]
    );
}

/// Writes `files` (path under `src/`, contents) to a fresh directory.
fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rill-structure-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("create dirs");
        std::fs::write(p, text).expect("write a source file");
    }
    dir
}

#[test]
fn the_checker_finds_loops_of_every_kind_it_must() {
    // Two siblings importing each other (topic.rs <-> subscription.rs, as it was).
    let siblings = tree(
        "siblings",
        &[
            ("lib.rs", "pub mod broker;\n"),
            ("broker/mod.rs", "mod topic;\nmod subscription;\n"),
            ("broker/topic.rs", "use super::subscription::{Mark, SubCore};\n"),
            ("broker/subscription.rs", "use super::topic::{Partition};\n"),
        ],
    );
    let cycle = find_loop(&graph(&siblings)).expect("a sibling loop is found");
    assert!(show(&cycle).contains("crate::broker::topic"), "{}", show(&cycle));
    // A child using its parent's item while the parent re-exports the child
    // (consumer.rs using `super::BrokerInner`), through an inline path.
    let parent = tree(
        "parent",
        &[
            ("lib.rs", "pub mod broker;\n"),
            ("broker/mod.rs", "mod consumer;\npub use consumer::Consumer;\npub(crate) struct BrokerInner;\n"),
            ("broker/consumer.rs", "pub struct Consumer { broker: std::sync::Arc<super::BrokerInner> }\n"),
        ],
    );
    assert!(find_loop(&graph(&parent)).is_some(), "a child-parent loop is found");
    // A longer loop through a folder, by `crate::` paths in a grouped use.
    let folder = tree(
        "folder",
        &[
            ("lib.rs", "mod a;\n"),
            ("a/mod.rs", "pub(crate) mod b;\npub(crate) mod c;\n"),
            ("a/b.rs", "use crate::a::{c::{X, Y as Z}};\n"),
            ("a/c.rs", "// use crate::a::b::W; (a comment, not a use)\nfn f() { crate::a::d::g(); }\n"),
            ("a/d.rs", "pub(crate) use super::b::W;\n"),
        ],
    );
    let edges = graph(&folder);
    assert!(find_loop(&edges).is_some(), "a three-file loop is found: {edges:?}");
    // The same tree without the last edge has no loop, and a comment is not a use.
    let fixed = tree(
        "fixed",
        &[
            ("lib.rs", "mod a;\n"),
            ("a/mod.rs", "pub(crate) mod b;\npub(crate) mod c;\n"),
            ("a/b.rs", "use crate::a::{c::{X, Y as Z}};\n"),
            ("a/c.rs", "// use crate::a::b::W;\nfn f() { let s = \"crate::a::b\"; crate::a::d::g(); }\n"),
            ("a/d.rs", "pub(crate) fn g() {}\n"),
        ],
    );
    assert_eq!(find_loop(&graph(&fixed)), None);
    // The log naming the broker.
    let up = tree(
        "upward",
        &[
            ("lib.rs", "mod log;\nmod broker;\n"),
            ("log/mod.rs", "use crate::broker::Topic;\n"),
            ("broker/mod.rs", "use crate::log::Log;\n"),
        ],
    );
    let edges = graph(&up);
    assert_eq!(upward(&edges), vec!["crate::log -> crate::broker".to_owned()]);
    // Two folders importing each other through different files: no file
    // loop, but a loop between the parts of `broker`.
    let folders = tree(
        "folders",
        &[
            ("lib.rs", "mod broker;\n"),
            ("broker/mod.rs", "mod topic;\nmod subscription;\n"),
            ("broker/topic/mod.rs", "mod partition;\n"),
            ("broker/topic/partition.rs", "use crate::broker::subscription::signal::notify;\n"),
            ("broker/subscription/mod.rs", "mod signal;\nmod core;\n"),
            ("broker/subscription/signal.rs", "pub fn notify() {}\n"),
            ("broker/subscription/core.rs", "use crate::broker::topic::partition::Partition;\n"),
        ],
    );
    let edges = graph(&folders);
    assert_eq!(find_loop(&edges), None, "no file loop: {edges:?}");
    let loops: Vec<_> = folder_graphs(&edges).values().filter_map(find_loop).collect();
    assert_eq!(loops.len(), 1, "one folder loop: {loops:?}");
    assert!(show(&loops[0]).contains("crate::broker::topic -> crate::broker::subscription"), "{}", show(&loops[0]));
    for dir in [siblings, parent, folder, fixed, up, folders] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Every `.rs` file under `root`'s folders `roots`, as paths from `root`
/// with `/` between folders, sorted.
fn source_files(root: &Path, roots: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    for dir in roots {
        let mut stack = vec![root.join(dir)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("readable source dir") {
                let path = entry.expect("a dir entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(root).expect("under the root");
                    files.push(rel.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join("/"));
                }
            }
        }
    }
    files.sort();
    files
}

// The Layout table.

/// The folders whose files CONTRIBUTING.md's Layout table names, each in the
/// row of its folder: the library and the two crates shipped beside it.
/// rill-bench's `src/` is a measuring tool, left out: its `main.rs` and
/// `lib.rs` say what each of its modules measures.
const LAYOUT_ROOTS: &[&str] = &["src", "ffi/src", "nats/src"];

/// A row of the Layout table: the folders its first cell names (backticked
/// paths ending in `/`) and every backticked word in the row.
struct LayoutRow {
    folders: Vec<String>,
    words: BTreeSet<String>,
}

/// The rows of the first table after `## Layout`, without its header.
fn layout_rows(contributing: &str) -> Vec<LayoutRow> {
    let ticked = |s: &str| s.split('`').skip(1).step_by(2).map(str::to_owned).collect::<Vec<_>>();
    let section = contributing.split_once("\n## Layout\n").map_or("", |(_, rest)| rest);
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|line| {
            let first = line.trim_start_matches('|').split('|').next().unwrap_or("");
            LayoutRow {
                folders: ticked(first).into_iter().filter(|t| t.ends_with('/')).collect(),
                words: ticked(line).into_iter().collect(),
            }
        })
        .collect()
}

/// What the Layout table (`contributing`, CONTRIBUTING.md's text) gets
/// wrong about `files` (paths from the repository root, every `.rs` file
/// of [`LAYOUT_ROOTS`]). A file's row is the row of the deepest folder
/// holding it that has one, and the row names it by its path from that
/// folder, in backticks (`store.rs`, or `control/mod.rs` in a sub-folder
/// without a row of its own). Each problem says which file and which row
/// to edit: a file not named, a file no row covers, and a `.rs` name in a
/// row of those folders that is no file there (moved or deleted).
fn layout_problems(contributing: &str, files: &[String]) -> Vec<String> {
    let rows = layout_rows(contributing);
    let mut problems = Vec::new();
    for file in files {
        let row = rows
            .iter()
            .flat_map(|r| r.folders.iter().map(move |f| (r, f)))
            .filter(|(_, folder)| file.starts_with(folder.as_str()))
            .max_by_key(|(_, folder)| folder.len());
        match row {
            Some((row, folder)) => {
                let name = &file[folder.len()..];
                if !row.words.contains(name) {
                    let or_row = match name.rsplit_once('/') {
                        Some((sub, _)) => format!(", or give `{folder}{sub}/` a row of its own"),
                        None => String::new(),
                    };
                    problems.push(format!(
                        "{file}: name `{name}` in the Layout table's row for `{folder}` (CONTRIBUTING.md), with what \
                         it holds{or_row}"
                    ));
                }
            }
            None => {
                let folder = file.rsplit_once('/').map_or("", |(f, _)| f);
                problems.push(format!(
                    "{file}: no row of the Layout table (CONTRIBUTING.md) covers it: add one for `{folder}/`"
                ));
            }
        }
    }
    let covered = |folder: &str| LAYOUT_ROOTS.iter().any(|r| folder.starts_with(&format!("{r}/")));
    for row in &rows {
        let folders: Vec<&String> = row.folders.iter().filter(|f| covered(f)).collect();
        if folders.is_empty() {
            continue;
        }
        // A `.rs` word names a file of the row's folder when it is a bare
        // name or a path through a sub-folder there; other paths
        // (`tests/structure.rs`) are from the repository's root.
        let in_row = |f: &str, word: &str| {
            word.split_once('/').is_none_or(|(sub, _)| files.iter().any(|p| p.starts_with(&format!("{f}{sub}/"))))
        };
        for word in row.words.iter().filter(|w| w.ends_with(".rs")) {
            let here: Vec<&&String> = folders.iter().filter(|f| in_row(f, word)).collect();
            if !here.is_empty() && !here.iter().any(|f| files.contains(&format!("{f}{word}"))) {
                problems.push(format!(
                    "the Layout table's row for `{}` (CONTRIBUTING.md) names `{word}`, which is no file there: \
                     remove it or name where it went",
                    folders[0]
                ));
            }
        }
    }
    problems
}

#[test]
fn the_layout_table_names_every_source_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let contributing = std::fs::read_to_string(root.join("CONTRIBUTING.md")).expect("CONTRIBUTING.md");
    let files = source_files(root, LAYOUT_ROOTS);
    assert!(files.len() > 50, "found only {} source files", files.len());
    let problems = layout_problems(&contributing, &files);
    assert!(problems.is_empty(), "CONTRIBUTING.md's Layout table is out of date: {problems:#?}");
}

// The size rule.

/// The most lines of code a source file holds without a reason written in
/// it. A line of code is a line that is neither blank nor a comment (one
/// whose first characters are `//`: doc comments and their examples
/// included), outside an item marked `#[cfg(test)]` or `#[cfg(all(test,
/// ..))]` (a `mod tests { .. }`, a test-only helper; it runs from the
/// attribute to the brace that closes the item, or to its `;`). Unit-test
/// files (`tests.rs`, `*_tests.rs`) are not counted at all.
const MAX_CODE_LINES: usize = 700;

/// The folders the size rule covers.
const SIZE_ROOTS: &[&str] = &["src", "ffi/src", "nats/src", "benches/rill-bench/src"];

/// The reason a file gives for being over [`MAX_CODE_LINES`]: a line of its
/// opening `//!` comment that starts so and goes on with the reason, ending
/// in a full stop.
const OVER_LIMIT: &str = "//! Over 700 lines: ";

/// Files over the limit that issue 44's restructure is cutting now, each
/// with who cuts it. An entry whose file no longer fails (cut, or given a
/// reason), or is gone, fails the test: delete it then, so the list
/// shrinks to empty as the cuts land.
const PENDING_CUTS: &[(&str, &str)] = &[];

/// Whether `line` is a test-only `cfg` attribute.
fn is_test_cfg(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test,")
}

/// The lines of code in `text`, counted as [`MAX_CODE_LINES`] says.
fn code_lines(text: &str) -> usize {
    let mut count = 0;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if is_test_cfg(line) {
            // Skip the item, from its attribute to its closing brace or `;`.
            let (mut depth, mut opened) = (0i64, false);
            let mut item = Some(line);
            while let Some(l) = item {
                let mut code = String::new();
                push_code(l, &mut code);
                depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
                opened |= code.contains('{');
                if (opened && depth <= 0) || (!opened && code.trim_end().ends_with(';')) {
                    break;
                }
                item = lines.next();
            }
            continue;
        }
        let t = line.trim_start();
        if !t.is_empty() && !t.starts_with("//") {
            count += 1;
        }
    }
    count
}

/// Whether the file's opening `//!` comment gives a reason for its size.
fn size_reason(text: &str) -> bool {
    text.lines()
        .take_while(|l| l.starts_with("//!"))
        .any(|l| l.strip_prefix(OVER_LIMIT).is_some_and(|why| why.trim().len() > 1 && why.trim_end().ends_with('.')))
}

/// What breaks the size rule among the files of `roots` under `root`, with
/// `pending` the files being cut (see [`PENDING_CUTS`]).
fn size_problems(root: &Path, roots: &[&str], pending: &[(&str, &str)]) -> Vec<String> {
    let files = source_files(root, roots);
    let mut problems = Vec::new();
    for (file, why) in pending {
        if !files.iter().any(|f| f == file) {
            problems.push(format!("PENDING_CUTS names {file} ({why}), which is gone: delete its entry"));
        }
    }
    for file in &files {
        let name = file.rsplit('/').next().expect("a file name");
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(root.join(file)).expect("readable source");
        let (lines, reason) = (code_lines(&text), size_reason(&text));
        let over = lines > MAX_CODE_LINES;
        match pending.iter().find(|(f, _)| f == file) {
            Some((_, why)) if !over || reason => problems.push(format!(
                "{file} is in PENDING_CUTS ({why}) but passes now ({lines} lines of code{}): delete its entry",
                if reason { ", and a reason" } else { "" }
            )),
            Some(_) => {}
            None if over && !reason => problems.push(format!(
                "{file}: {lines} lines of code, over {MAX_CODE_LINES} (see MAX_CODE_LINES in tests/structure.rs): \
                 cut it into parts, or start it with `{OVER_LIMIT}<why it is one file>.`"
            )),
            None if !over && reason => problems
                .push(format!("{file}: {lines} lines of code, within {MAX_CODE_LINES}: drop its `{OVER_LIMIT}` line")),
            None => {}
        }
    }
    problems
}

#[test]
fn no_source_file_is_over_700_lines_of_code_without_a_reason() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(source_files(root, SIZE_ROOTS).len() > 80, "found too few source files");
    let problems = size_problems(root, SIZE_ROOTS, PENDING_CUTS);
    assert!(problems.is_empty(), "the size rule: {problems:#?}");
}

#[test]
fn the_layout_and_size_checks_fail_where_they_must() {
    // The Layout table: a new file, a file in a folder without a row, a
    // name left behind by a move, and a file of a sub-folder named by its
    // path from the folder's row.
    let table = "# C\n\n## Layout\n\n| path | what |\n| --- | --- |\n\
                 | `src/` | the root: `lib.rs`, `sync.rs` (checked by `tests/structure.rs`) |\n\
                 | `src/log/` | the log: `mod.rs`, `gone.rs`, `part/a.rs`, `part/gone.rs` |\n\
                 | `tests/` | `structure.rs` (not a source folder) |\n\n## Next\n\n| `src/b/` | `x.rs` |\n";
    let files = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let fine = files(&[
        "src/lib.rs",
        "src/sync.rs",
        "src/log/mod.rs",
        "src/log/gone.rs",
        "src/log/part/a.rs",
        "src/log/part/gone.rs",
    ]);
    assert_eq!(layout_problems(table, &fine), Vec::<String>::new());
    let moved =
        files(&["src/lib.rs", "src/sync.rs", "src/log/mod.rs", "src/log/new.rs", "src/log/part/a.rs", "src/b/x.rs"]);
    let problems = layout_problems(table, &moved);
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(problems[0].starts_with("src/log/new.rs: name `new.rs` in the Layout table's row for `src/log/`"));
    // A table after the Layout one does not count: `src/b/` has no row.
    assert!(problems[1].starts_with("src/b/x.rs: name `b/x.rs` in the Layout table's row for `src/`"));
    assert!(problems[1].ends_with("or give `src/b/` a row of its own"), "{}", problems[1]);
    assert!(problems[2].contains("row for `src/log/` (CONTRIBUTING.md) names `gone.rs`, which is no file there"));
    assert!(problems[3].contains("names `part/gone.rs`, which is no file there"));
    // A file outside every row's folder.
    let outside = layout_problems(table, &files(&["ffi/src/lib.rs"]));
    assert!(outside[0].starts_with("ffi/src/lib.rs: no row"), "{outside:#?}");

    // Counting lines of code.
    let body = "fn f() {\n    let s = \"{ not a brace\";\n}\n";
    assert_eq!(code_lines(body), 3);
    let commented =
        format!("//! Module docs.\n\n/// An item.\n/// ```\n/// let x = 1;\n/// ```\n{body}  // trailing\n\n");
    assert_eq!(code_lines(&commented), 3, "comments, doc examples and blank lines are not code");
    let tested = format!(
        "{body}#[cfg(test)]\nmod tests;\n#[cfg(all(test, not(loom)))]\nmod tests {{\n    fn g() {{\n        let s = \"}}\";\n    }}\n}}\n\
         #[cfg(any(test, loom))]\nfn h() {{}}\n#[cfg(test)]\n#[derive(Debug)]\nstruct T {{\n    a: u8,\n}}\n{body}"
    );
    assert_eq!(code_lines(&tested), 3 + 2 + 3, "test-only items are left out, `any(test, ..)` ones are not");

    // The size rule on a made-up tree.
    let over = "fn f() {}\n".repeat(MAX_CODE_LINES + 1);
    let at_limit = format!("//! A part.\n{}{}", "fn f() {}\n".repeat(MAX_CODE_LINES), "// a comment\n".repeat(50));
    let reason =
        format!("//! A part.\n//!\n{OVER_LIMIT}one state machine, cut it and the transitions scatter.\n{over}");
    let unreasoned = format!("//! A part.\n{OVER_LIMIT}\n{over}");
    let dir = tree(
        "size",
        &[
            ("src/lib.rs", "mod a;\n"),
            ("src/over.rs", &over),
            ("src/at_limit.rs", &at_limit),
            ("src/reason.rs", &reason),
            ("src/unreasoned.rs", &unreasoned),
            ("src/stale_reason.rs", &format!("{OVER_LIMIT}it was long.\nfn f() {{}}\n")),
            ("src/a/tests.rs", &over),
            ("src/a/big_tests.rs", &over),
            ("src/a/cut.rs", &over),
            ("src/a/was_cut.rs", "fn f() {}\n"),
            ("tools/big.rs", &over),
        ],
    );
    let pending = [("src/a/cut.rs", "being cut"), ("src/a/was_cut.rs", "being cut"), ("src/a/moved.rs", "being cut")];
    let problems = size_problems(&dir, &["src"], &pending);
    let flagged: Vec<&str> = problems.iter().map(|p| p.split([':', ' ']).next().unwrap_or("")).collect();
    assert_eq!(
        flagged,
        ["PENDING_CUTS", "src/a/was_cut.rs", "src/over.rs", "src/stale_reason.rs", "src/unreasoned.rs"],
        "{problems:#?}"
    );
    assert!(problems[0].contains("src/a/moved.rs"), "{}", problems[0]);
    let _ = std::fs::remove_dir_all(dir);
}
