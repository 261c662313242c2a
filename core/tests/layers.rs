//! The layers of `core/src`: which top-level module names which (issue 39:
//! "no cycle among core's top-level modules, checked in `make test`", and
//! "no module below `api/` names `api`"). Dependencies run one way:
//! `broker → api → {core_state, txn, group, topics, security, …} → {log,
//! producer, batch, io, limits}`; a cycle means no layer can be read, tested
//! or changed without the ones above it.
//!
//! A module names another when its code (comments and strings left out)
//! says `crate::other` (also inside `use crate::{…}` groups) or reaches it
//! through `super::`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top of the layers, highest first: each may be named only by the
/// ones before it (and by `lib.rs`, which only declares and re-exports).
const TOP_LAYERS: &[&str] = &["broker", "api"];

type Graph = BTreeMap<String, BTreeMap<String, String>>;

#[test]
fn core_top_level_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    let on_cycles = edges_on_cycles(&graph);
    assert!(
        on_cycles.is_empty(),
        "core's top-level modules form a cycle (core/tests/layers.rs); every edge on one:\n{}",
        describe(&graph, &on_cycles)
    );
}

#[test]
fn nothing_below_api_names_the_layers_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    let report = names_of_upper_layers(&graph, TOP_LAYERS);
    assert!(
        report.is_empty(),
        "a lower module names a layer above it (core/tests/layers.rs):\n{report}"
    );
}

/// Each edge from a module to one of `tops` that does not come from a
/// higher one of them.
fn names_of_upper_layers(graph: &Graph, tops: &[&str]) -> String {
    let mut report = String::new();
    for (from, edges) in graph {
        let from_rank = tops.iter().position(|t| t == from);
        for (to, at) in edges {
            let Some(to_rank) = tops.iter().position(|t| t == to) else {
                continue;
            };
            if from_rank.is_none_or(|rank| rank > to_rank) {
                report.push_str(&format!("  {from} -> {to} (first at {at})\n"));
            }
        }
    }
    report
}

#[test]
fn the_checker_sees_a_cycle() {
    // A check that cannot fail is no check: a made-up graph with one cycle
    // (a → b → c → a) and one edge off it (c → d).
    let mut graph = Graph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(a.into())
            .or_default()
            .insert(b.into(), "test".into());
    }
    graph.entry("d".into()).or_default();
    let on: Vec<_> = edges_on_cycles(&graph).into_iter().collect();
    let want: Vec<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(on, want);
    // And a lower module naming an upper layer is seen: d names a.
    graph
        .entry("d".into())
        .or_default()
        .insert("a".into(), "test".into());
    let report = names_of_upper_layers(&graph, &["a", "b"]);
    assert!(
        report.contains("c -> a") && report.contains("d -> a"),
        "{report}"
    );
    assert!(!report.contains("a -> b"), "{report}");
    let code = strip_comments_and_strings(
        "use crate::{a, b::{X, Y}, c::z};\nlet q = \"crate::s\"; let c = '\\''; // crate::e\n",
    );
    let names = names_in(&code);
    assert_eq!(
        names.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
}

/// Each top-level module's edges to the others, with the first place
/// (file:line) that names each.
fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    walk(src, &mut files);
    let tops: BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_path(src, f).first().cloned())
        .collect();
    let mut graph = Graph::new();
    for file in &files {
        let path = module_path(src, file);
        let Some(top) = path.first() else { continue };
        let text = std::fs::read_to_string(file).expect("read a source file");
        let code = strip_comments_and_strings(&text);
        let entry = graph.entry(top.clone()).or_default();
        let mut named = names_in(&code);
        named.extend(supers_in(&code, &path));
        for (name, line) in named {
            if &name != top && tops.contains(&name) {
                let at = format!("{}:{line}", file.strip_prefix(src).unwrap().display());
                entry.entry(name).or_insert(at);
            }
        }
    }
    graph
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read core/src")
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is: `api/produce.rs` is `[api, produce]`, `api/mod.rs`
/// is `[api]`, `lib.rs` is `[]` (the root, which only declares).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// Top-level modules named as `crate::x` or in `crate::{x, y::…}`, with
/// their line numbers.
fn names_in(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && is_ident_byte(code.as_bytes()[at - 1]) {
            continue; // `doze_crate::`, not ours
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            for item in top_level_items(group) {
                let name = ident_at(item.trim_start());
                if !name.is_empty() && name != "self" {
                    out.push((name.to_owned(), line));
                }
            }
        } else {
            let name = ident_at(rest);
            if !name.is_empty() {
                out.push((name.to_owned(), line));
            }
        }
    }
    out
}

/// Modules reached through `super::…` from the module at `path`.
fn supers_in(code: &str, path: &[String]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("super::") {
        if at > 0 && (is_ident_byte(code.as_bytes()[at - 1]) || code[..at].ends_with("::")) {
            continue; // the tail of a `super::super::` chain, read from its head
        }
        let line = code[..at].matches('\n').count() + 1;
        let mut rest = &code[at..];
        let mut depth = path.len();
        while let Some(r) = rest.strip_prefix("super::") {
            depth = depth.saturating_sub(1);
            rest = r;
        }
        if depth == 0 {
            if let Some(group) = rest.strip_prefix('{') {
                for item in top_level_items(group) {
                    out.push((ident_at(item.trim_start()).to_owned(), line));
                }
            } else {
                out.push((ident_at(rest).to_owned(), line));
            }
        } else {
            out.push((path[0].clone(), line));
        }
    }
    out
}

/// The comma-separated items of a `{…}` group (the text after its `{`), up
/// to its closing brace.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

fn ident_at(s: &str) -> &str {
    let end = s.bytes().position(|b| !is_ident_byte(b)).unwrap_or(s.len());
    &s[..end]
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The code with comments and the insides of string and char literals
/// blanked (newlines kept, so line numbers hold): a doc comment that
/// mentions `crate::api` is not a dependency.
fn strip_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if b[i] == b'r'
            && (b[i + 1..].starts_with(b"\"") || b[i + 1..].starts_with(b"#"))
            && (i == 0 || !is_ident_byte(b[i - 1]))
        {
            // r"…" or r#"…"#
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            out.extend(std::iter::repeat_n(b' ', 2 + hashes));
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                out.push(blank(b[i]));
                i += 1;
            }
            out.extend(std::iter::repeat_n(b' ', close.len().min(b.len() - i)));
            i += close.len();
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    out.push(b' ');
                    i += 1;
                }
                out.push(blank(b[i]));
                i += 1;
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' && is_char_literal(&b[i..]) {
            let len = b[i + 1..].iter().position(|&c| c == b'\'').unwrap_or(0) + 2;
            let len = if b[i + 1] == b'\\' {
                b[i + 3..].iter().position(|&c| c == b'\'').unwrap_or(0) + 4
            } else {
                len
            };
            out.extend(std::iter::repeat_n(b' ', len));
            i += len;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out.truncate(b.len());
    String::from_utf8_lossy(&out).into_owned()
}

/// `'x'`, `'\n'`, `'\''`, `'\u{..}'`: a char literal, not a lifetime.
fn is_char_literal(b: &[u8]) -> bool {
    match b.get(1) {
        Some(b'\\') => true,
        Some(_) => {
            // one (possibly multi-byte) char, then a quote
            let len = std::str::from_utf8(&b[1..b.len().min(5)])
                .ok()
                .or_else(|| std::str::from_utf8(&b[1..2]).ok())
                .and_then(|s| s.chars().next())
                .map_or(1, char::len_utf8);
            b.get(1 + len) == Some(&b'\'')
        }
        None => false,
    }
}

/// Every edge whose two ends lie in one strongly connected component
/// (Tarjan's algorithm): exactly the edges that are on some cycle.
fn edges_on_cycles(graph: &Graph) -> BTreeSet<(String, String)> {
    let nodes: Vec<&String> = graph.keys().collect();
    let index_of: BTreeMap<&String, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let n = nodes.len();
    let succ: Vec<Vec<usize>> = nodes
        .iter()
        .map(|v| {
            graph[*v]
                .keys()
                .filter_map(|w| index_of.get(w).copied())
                .collect()
        })
        .collect();
    let mut state = Tarjan {
        index: vec![usize::MAX; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        component: vec![usize::MAX; n],
        components: 0,
    };
    for v in 0..n {
        if state.index[v] == usize::MAX {
            state.visit(v, &succ);
        }
    }
    let mut out = BTreeSet::new();
    for (v, ws) in succ.iter().enumerate() {
        for &w in ws {
            if state.component[v] == state.component[w] {
                out.insert((nodes[v].clone(), nodes[w].clone()));
            }
        }
    }
    out
}

struct Tarjan {
    index: Vec<usize>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    component: Vec<usize>,
    components: usize,
}

impl Tarjan {
    fn visit(&mut self, v: usize, succ: &[Vec<usize>]) {
        self.index[v] = self.next;
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &succ[v] {
            if self.index[w] == usize::MAX {
                self.visit(w, succ);
                self.low[v] = self.low[v].min(self.low[w]);
            } else if self.on_stack[w] {
                self.low[v] = self.low[v].min(self.index[w]);
            }
        }
        if self.low[v] == self.index[v] {
            loop {
                let w = self.stack.pop().unwrap();
                self.on_stack[w] = false;
                self.component[w] = self.components;
                if w == v {
                    break;
                }
            }
            self.components += 1;
        }
    }
}

fn describe(graph: &Graph, on_cycles: &BTreeSet<(String, String)>) -> String {
    let mut s = String::new();
    for (from, to) in on_cycles {
        s.push_str(&format!(
            "    (\"{from}\", \"{to}\"), // {}\n",
            graph[from][to]
        ));
    }
    s
}
