//! The library's import direction, checked from its sources: every
//! `crate::` and `super::` path in `src/**/*.rs` (comments aside) must point
//! down the layer order
//!
//! `job → dest → copy → {plan, source} → header → {store, location} → kernels → error → dtype`
//!
//! (the crate root and the binaries sit above all of it: the root
//! re-exports, the binaries import through the public API), and no group
//! of modules may import one another in a circle, whether counted file by
//! file or folder by folder (each top-level module of `src/` one node).
//! A layer is a list of whole top-level modules: every top-level module
//! is in exactly one, and an unlisted one fails. There are no exceptions,
//! not even between a module and its own parent or children: a module that
//! needs something from above moves it down, or is handed it by its caller.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first, each a list of top-level modules of `src/`.
const LAYERS: &[(&str, &[&str])] = &[
    ("dtype", &["dtype"]),
    ("error", &["error"]),
    (
        "kernels",
        &[
            "cast",
            "transform",
            "dequant",
            "io_util",
            "block_cache",
            "units",
            "setters",
            "limits",
        ],
    ),
    ("location", &["store", "folder", "location"]),
    ("header", &["header", "index"]),
    ("plan+source", &["plan", "source"]),
    ("copy", &["copy", "sink", "observe"]),
    ("dest", &["dest"]),
    ("job", &["convert", "writer", "array", "inspect"]),
];

#[test]
fn every_module_has_one_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: Vec<String> = library_modules(&src).into_keys().collect();
    assert_eq!(
        unlisted(&modules),
        Vec::<String>::new(),
        "modules in no layer"
    );
    let tops: BTreeSet<&str> = modules.iter().map(|m| top(m)).collect();
    let mut listed = BTreeSet::new();
    for (_, members) in LAYERS {
        for m in *members {
            assert!(listed.insert(*m), "{m} is listed twice");
            assert!(tops.contains(m), "{m} is listed but is no module of src/");
        }
    }
}

#[test]
fn imports_point_down_and_form_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let texts: BTreeMap<String, String> = library_modules(&src)
        .into_iter()
        .map(|(module, file)| (module, std::fs::read_to_string(file).unwrap()))
        .collect();
    let edges = import_edges(&texts);
    assert!(
        edges.len() > 100,
        "the parser found too few imports: {edges:?}"
    );
    let upward = upward(&edges);
    assert!(
        upward.is_empty(),
        "imports pointing up the layer order {:?}: {upward:#?}",
        LAYERS.iter().map(|(n, _)| *n).collect::<Vec<_>>()
    );
    let files = circles(&edges);
    assert!(
        files.is_empty(),
        "modules importing in a circle: {files:#?}"
    );
    let folders = circles(&folder_edges(&edges));
    assert!(
        folders.is_empty(),
        "folders importing in a circle: {folders:#?}"
    );
}

#[test]
fn the_checker_catches_an_upward_import_and_a_circle() {
    let texts: BTreeMap<String, String> = [
        ("", "pub use error::Error;\npub mod header;"),
        ("error", ""),
        (
            "header::read",
            "use crate::source::detect::{detect, Format};",
        ),
        ("source", "use crate::header::Header;"),
        ("source::detect", "use crate::Error;"),
        // A child naming its parent and the parent naming it back through
        // a sibling: npy -> source::input -> npy.
        ("source::npy", "let (f, n) = super::input::spool(r, None);"),
        (
            "source::input",
            "use super::{detect::detect, npy::NpySource};",
        ),
        // A parent and its own child: no longer exempt.
        ("dest", "use crate::dest::files::FileSet;"),
        ("dest::files", "use super::WrittenFile;"),
    ]
    .iter()
    .map(|(m, t)| (m.to_string(), t.to_string()))
    .collect();
    let edges = import_edges(&texts);
    assert!(edges.contains(&("source::detect".into(), "error".into())));
    assert!(!edges.iter().any(|(from, _)| from.is_empty()));
    assert_eq!(upward(&edges), ["header::read -> source::detect"]);
    assert_eq!(
        circles(&edges),
        ["dest dest::files", "source::input source::npy"]
    );
}

#[test]
fn the_checker_catches_a_circle_of_folders() {
    // No two files import each other, but the folders do: plan -> source
    // by one file, source -> plan by another. Same layer, so no edge is
    // upward; only the folder count sees the circle.
    let texts: BTreeMap<String, String> = [
        ("plan::id", "use crate::source::Listed;"),
        ("source", ""),
        ("source::quantized", "use crate::plan::layout::Part;"),
        ("plan::layout", ""),
        ("header", ""),
        ("source::npy", "use crate::header::Header;"),
    ]
    .iter()
    .map(|(m, t)| (m.to_string(), t.to_string()))
    .collect();
    let edges = import_edges(&texts);
    assert!(upward(&edges).is_empty());
    assert!(circles(&edges).is_empty());
    assert_eq!(circles(&folder_edges(&edges)), ["plan source"]);
}

#[test]
fn a_module_in_no_layer_is_caught() {
    let modules = ["", "dtype", "source::npy", "mystery", "mystery::deep"].map(String::from);
    assert_eq!(unlisted(&modules), ["mystery", "mystery::deep"]);
    assert_eq!(layer("mystery"), None);
    assert_eq!(layer("source::npy"), layer("plan"));
}

/// The modules whose top-level module is in no layer (the root aside).
fn unlisted(modules: &[String]) -> Vec<String> {
    let unlisted = modules
        .iter()
        .filter(|m| !m.is_empty() && layer(m).is_none());
    unlisted.cloned().collect()
}

/// The top-level module a module path is in: its first segment.
fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The edges between top-level modules (folders, or single files at the
/// top of `src/`) that the file edges make.
fn folder_edges(edges: &BTreeSet<(String, String)>) -> BTreeSet<(String, String)> {
    edges
        .iter()
        .map(|(from, to)| (top(from).to_string(), top(to).to_string()))
        .filter(|(from, to)| from != to)
        .collect()
}

/// Every import between two library modules, as `(importer, imported)`:
/// the crate root's left out (it re-exports: it is the top), and a
/// module's imports of itself.
fn import_edges(texts: &BTreeMap<String, String>) -> BTreeSet<(String, String)> {
    let known: BTreeSet<String> = texts.keys().cloned().collect();
    let reexports = root_reexports(texts.get("").map_or("", String::as_str));
    let mut edges = BTreeSet::new();
    for (module, text) in texts.iter().filter(|(m, _)| !m.is_empty()) {
        for path in imported_paths(&strip_comments(text), module) {
            let Some(to) = resolve(&path, &known, &reexports) else {
                continue;
            };
            if to != *module {
                edges.insert((module.clone(), to));
            }
        }
    }
    edges
}

/// The edges that point up the layer order, as `importer -> imported`
/// (a module in no layer is above every layer).
fn upward(edges: &BTreeSet<(String, String)>) -> Vec<String> {
    let rank = |m: &str| layer(m).unwrap_or(LAYERS.len());
    edges
        .iter()
        .filter(|(from, to)| rank(from) < rank(to))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect()
}

#[test]
fn the_parser_reads_nested_use_trees_and_super() {
    let text = "use crate::{Error, sink::{elements::Crc, Sink}};\nuse super::gather::x;\nlet e = crate::output::target::resolve(p);";
    let paths = imported_paths(text, "sink::fast");
    assert_eq!(
        paths,
        [
            "Error",
            "sink::elements::Crc",
            "sink::Sink",
            "sink::gather::x",
            "output::target::resolve",
        ]
    );
    let known: BTreeSet<String> = ["sink", "sink::elements", "output", "output::target"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let reexports = root_reexports("pub use error::{Error, Result};");
    let resolved = |p: &str| resolve(p, &known, &reexports);
    assert_eq!(
        resolved("sink::elements::Crc").as_deref(),
        Some("sink::elements")
    );
    assert_eq!(resolved("Error").as_deref(), Some("error"));
    assert_eq!(
        resolved("output::target::resolve").as_deref(),
        Some("output::target")
    );
    assert!(layer("sink::fast") < layer("dest::files"));
    assert!(layer("store") < layer("source::object"));
}

/// Every module file of the library (not the binaries), by module path
/// (`""` for the root).
fn library_modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(src).unwrap().to_path_buf();
            if path.is_dir() {
                if rel != Path::new("bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let mut parts: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The crate root's `pub use m::{A, B}` / `pub use m::A`: item name to module.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for path in imported_paths(&lib.replace("pub use ", "use crate::"), "") {
        if let Some((module, item)) = path.rsplit_once("::") {
            map.insert(item.to_string(), module.to_string());
        }
    }
    map
}

/// The module a path names: the longest prefix that is a module file, or,
/// for an item of the root, the module the root re-exports it from.
fn resolve(
    path: &str,
    known: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    for n in (1..=parts.len()).rev() {
        let prefix = parts[..n].join("::");
        if known.contains(&prefix) {
            return Some(prefix);
        }
    }
    let module = reexports.get(parts[0])?;
    resolve(module, known, reexports).or(Some(module.clone()))
}

/// The rank of a module's layer: the one its top-level module is listed in.
fn layer(module: &str) -> Option<usize> {
    let top = top(module);
    LAYERS
        .iter()
        .position(|(_, members)| members.contains(&top))
}

/// The text without `//` comments (doc comments name modules in links).
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path after `crate::` or `super::` in `text`, use trees expanded,
/// as paths from the crate root.
fn imported_paths(text: &str, module: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let boundary = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b':';
        let (base, skip) = if boundary && rest.starts_with(b"crate::") {
            (String::new(), "crate::".len())
        } else if boundary && rest.starts_with(b"super::") {
            let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
            (parent.to_string(), "super::".len())
        } else {
            i += 1;
            continue;
        };
        let mut at = i + skip;
        parse_tree(text, &mut at, &base, &mut out);
        i = at.max(i + 1);
    }
    out
}

/// Parses `a::b::{c, d::e}` (or `a::b::C`) at `at`, pushing full paths.
fn parse_tree(text: &str, at: &mut usize, base: &str, out: &mut Vec<String>) {
    let bytes = text.as_bytes();
    let join = |base: &str, seg: &str| match base {
        "" => seg.to_string(),
        b => format!("{b}::{seg}"),
    };
    let mut path = base.to_string();
    loop {
        skip_space(bytes, at);
        if *at < bytes.len() && bytes[*at] == b'{' {
            *at += 1;
            loop {
                skip_space(bytes, at);
                if *at >= bytes.len() {
                    return;
                }
                if bytes[*at] == b'}' {
                    *at += 1;
                    return;
                }
                if bytes[*at] == b',' {
                    *at += 1;
                    continue;
                }
                let before = *at;
                parse_tree(text, at, &path, out);
                if *at == before {
                    *at += 1; // `self`, `*` or anything else: skip it
                }
            }
        }
        let start = *at;
        while *at < bytes.len() && is_ident(bytes[*at]) {
            *at += 1;
        }
        if *at == start {
            if path != base {
                out.push(path);
            }
            return;
        }
        let seg = &text[start..*at];
        if seg == "self" {
            if !path.is_empty() {
                out.push(path);
            }
            return;
        }
        path = join(&path, seg);
        if bytes[*at..].starts_with(b"::") {
            *at += 2;
        } else {
            out.push(path);
            return;
        }
    }
}

fn skip_space(bytes: &[u8], at: &mut usize) {
    while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
        *at += 1;
    }
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The strongly connected components of more than one module, each as its
/// sorted members joined by spaces (Tarjan's algorithm).
fn circles(edges: &BTreeSet<(String, String)>) -> Vec<String> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        graph.entry(a).or_default().push(b);
        graph.entry(b).or_default();
    }
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<String>,
    }
    fn visit<'a>(v: &'a str, graph: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in &graph[v] {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut members = Vec::new();
            loop {
                let w = s.stack.pop().expect("on the stack");
                s.on_stack.remove(w);
                members.push(w);
                if w == v {
                    break;
                }
            }
            if members.len() > 1 {
                members.sort_unstable();
                s.found.push(members.join(" "));
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, &graph, &mut s);
        }
    }
    s.found
}
