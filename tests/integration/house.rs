//! The house's shape, checked on every run (issue 58): the crates depend downward only, no product
//! file is over [`FILE_LINES_MAX`] lines and no product function over [`FN_LINES_MAX`], and the api's
//! top-level modules import each other without a circle. Reads the source tree; builds nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest product source file, in lines (tests excepted).
const FILE_LINES_MAX: usize = 700;
/// Longest product function, in lines (tests excepted).
const FN_LINES_MAX: usize = 100;
/// The functions allowed over [`FN_LINES_MAX`]: the state machine's transition table is read
/// whole, one arm a line.
const FN_LENGTH_EXCEPTIONS: &[(&str, &str)] = &[("core/src/state.rs", "transition")];

/// The workspace's crates, lowest layer first: each may depend only on crates of a lower layer.
const LAYERS: &[(&str, u8)] = &[
    ("core", 0),
    ("simulator", 0),
    ("ledger", 1),
    ("processor", 2),
    ("execution", 3),
    ("worker", 4),
    ("reconciler", 4),
    ("api", 4),
    // The `payonce` binary (src/).
    ("", 5),
    ("chaos", 5),
    ("bench", 6),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layer of the crate a `payonce-…` package name names.
fn layer_of(package: &str) -> Option<u8> {
    let dir = if package == "payonce" {
        ""
    } else {
        package.strip_prefix("payonce-")?
    };
    LAYERS.iter().find(|(d, _)| *d == dir).map(|(_, l)| *l)
}

/// The `payonce-…` packages a manifest's `[dependencies]` table names (dev-dependencies excepted:
/// a test may use any crate).
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && line.starts_with("payonce-") {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            deps.push(name);
        }
    }
    deps
}

#[test]
fn every_crate_depends_only_on_lower_layers() {
    let mut seen = Vec::new();
    for (dir, layer) in LAYERS {
        let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{dir}/Cargo.toml: {e}"));
        for dep in workspace_dependencies(&manifest) {
            let dep_layer = layer_of(&dep)
                .unwrap_or_else(|| panic!("{dir}/Cargo.toml names {dep}, a crate of no layer"));
            assert!(
                dep_layer < *layer,
                "crate {dir:?} (layer {layer}) depends on {dep} (layer {dep_layer}): an arrow up"
            );
            seen.push(dep);
        }
    }
    // The layers are the whole workspace: no member is left out of the check.
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = workspace
        .lines()
        .find(|l| l.starts_with("members"))
        .expect("a members line");
    for member in members.split('"').skip(1).step_by(2) {
        assert!(
            LAYERS.iter().any(|(d, _)| d == &member),
            "workspace member {member} has no layer"
        );
    }
    assert!(seen.contains(&"payonce-core".to_string()));
    // The api never submits: it cannot reach the code that does.
    let api = std::fs::read_to_string(root().join("api/Cargo.toml")).expect("api/Cargo.toml");
    assert!(
        !workspace_dependencies(&api).contains(&"payonce-execution".to_string()),
        "the api depends on payonce-execution"
    );
}

/// Product source files: every `.rs` under a crate's `src/`, but not a `tests.rs` module.
fn product_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for (dir, _) in LAYERS {
        walk(&root().join(dir).join("src"), &mut files);
    }
    files.sort();
    assert!(files.len() > 100, "the product's sources were not found");
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// The text before its `#[cfg(test)]` module: what ships.
fn shipped(text: &str) -> &str {
    text.find("\n#[cfg(test)]").map_or(text, |i| &text[..i])
}

#[test]
fn no_product_file_is_over_the_line_limit() {
    let over: Vec<String> = product_files()
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            let lines = shipped(&text).lines().count();
            (lines > FILE_LINES_MAX).then(|| format!("{} ({lines} lines)", relative(path)))
        })
        .collect();
    assert!(
        over.is_empty(),
        "over {FILE_LINES_MAX} lines: {}",
        over.join(", ")
    );
}

/// Braces of one line, outside string and char literals and comments.
fn brace_balance(line: &str) -> (i64, bool) {
    let code = line.split("//").next().unwrap_or("");
    let (mut balance, mut opened, mut in_str) = (0, false, false);
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if in_str => {
                chars.next();
            }
            '"' => in_str = !in_str,
            '\'' if !in_str => {
                // A char literal ('{', '\'') is skipped whole; a lifetime has no closing quote.
                let rest: String = chars.clone().take(3).collect();
                if let Some(escaped) = rest.strip_prefix('\\') {
                    let skip = escaped.find('\'').map_or(0, |i| i + 2);
                    for _ in 0..skip {
                        chars.next();
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
            }
            '{' if !in_str => {
                balance += 1;
                opened = true;
            }
            '}' if !in_str => balance -= 1,
            _ => {}
        }
    }
    (balance, opened)
}

/// `fn` items of `text` (before its test module) and their length in lines.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = shipped(text).lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let words: Vec<&str> = lines[i].split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            i += 1;
            continue;
        };
        let before_ok = words[..at].iter().all(|w| {
            matches!(*w, "pub" | "async" | "const" | "unsafe" | "extern") || w.starts_with("pub(")
        });
        if !before_ok || at + 1 >= words.len() {
            i += 1;
            continue;
        }
        let name: String = words[at + 1]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let (mut depth, mut seen, mut j) = (0i64, false, i);
        while j < lines.len() {
            let (balance, opened) = brace_balance(lines[j]);
            depth += balance;
            seen |= opened;
            if (seen && depth <= 0) || (!seen && lines[j].trim_end().ends_with(';')) {
                break;
            }
            j += 1;
        }
        if seen {
            out.push((name, j - i + 1));
        }
        i = j + 1;
    }
    out
}

#[test]
fn the_function_measure_counts_what_it_should() {
    let text = "fn a() {\n    let s = \"}\";\n    let c = '{';\n}\n\npub(crate) async fn b(\n    x: u8,\n) -> u8 {\n    x\n}\n";
    assert_eq!(
        functions(text),
        vec![("a".to_string(), 4), ("b".to_string(), 5)]
    );
}

#[test]
fn no_product_function_is_over_the_line_limit() {
    let mut over = Vec::new();
    for path in product_files() {
        let file = relative(&path);
        let text = std::fs::read_to_string(&path).expect("readable source");
        for (name, lines) in functions(&text) {
            let excepted = FN_LENGTH_EXCEPTIONS.contains(&(file.as_str(), name.as_str()));
            if lines > FN_LINES_MAX && !excepted {
                over.push(format!("{file} {name} ({lines} lines)"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "functions over {FN_LINES_MAX} lines: {}",
        over.join(", ")
    );
}

/// Each top-level module of a crate's `src/` and the top-level modules its files name through
/// `crate::`.
fn module_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let top = rel
                .components()
                .next()
                .map(|c| {
                    c.as_os_str()
                        .to_string_lossy()
                        .trim_end_matches(".rs")
                        .to_string()
                })
                .unwrap_or_default();
            if path.extension().is_some_and(|e| e == "rs") && top != "lib" && top != "main" {
                files.entry(top).or_default().push(path);
            }
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, paths) in &files {
        let mut names = BTreeSet::new();
        for path in paths {
            let text = std::fs::read_to_string(path).expect("readable source");
            let text = code_of(shipped(&text), path.strip_prefix(src).expect("under src"));
            for (at, _) in text.match_indices("crate::") {
                let rest = &text[at + "crate::".len()..];
                let heads: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or("")
                        .split(',')
                        .map(|s| s.trim())
                        .collect(),
                    None => vec![rest],
                };
                for head in heads {
                    let name: String = head
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                        .collect();
                    if modules.contains(&name) && &name != module {
                        names.insert(name);
                    }
                }
            }
        }
        graph.insert(module.clone(), names);
    }
    graph
}

/// The code of a file at `rel` under `src/` with comments dropped (a doc link is no import) and
/// its parent paths written from the crate root: `super::` in a top-level module (or its
/// `mod.rs`) and `super::super::` one level down name the crate's modules.
fn code_of(text: &str, rel: &Path) -> String {
    let code: Vec<&str> = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect();
    let code = code.join("\n");
    let depth = rel.components().count();
    if depth == 1 || rel.ends_with("mod.rs") {
        code.replace("super::", "crate::")
    } else {
        code.replace("super::super::", "crate::")
    }
}

/// A circle in `graph`, if it has one (depth-first search, the path back to a module on the stack).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_cycle_finder_finds_a_circle_and_passes_a_tree() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(
        find_cycle(&graph(&[
            ("app", "errors"),
            ("errors", "auth"),
            ("auth", "app")
        ])),
        Some(vec![
            "app".into(),
            "errors".into(),
            "auth".into(),
            "app".into()
        ])
    );
    assert_eq!(
        find_cycle(&graph(&[
            ("app", "errors"),
            ("app", "auth"),
            ("auth", "errors")
        ])),
        None
    );
}

#[test]
fn no_crate_has_an_import_circle_among_its_modules() {
    // The ledger's modules each implement one of its traits for its `Store`, which holds them
    // all: one unit by design (docs/architecture.md).
    for crate_dir in [
        "api",
        "worker",
        "reconciler",
        "execution",
        "processor",
        "core",
        "simulator",
        "bench",
        "chaos",
        // The binary.
        "",
    ] {
        let graph = module_imports(&root().join(crate_dir).join("src"));
        assert!(graph.len() > 1, "{crate_dir}: no modules found");
        if let Some(cycle) = find_cycle(&graph) {
            panic!(
                "{crate_dir}: modules import each other in a circle: {}",
                cycle.join(" → ")
            );
        }
    }
}

/// Longest decision record, in lines.
const DECISION_LINES_MAX: usize = 120;

#[test]
fn each_decision_is_one_short_record_with_a_status() {
    let dir = root().join("docs/decisions");
    let mut records: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("docs/decisions/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    records.sort();
    assert!(records.len() >= 5, "docs/decisions/ holds the decisions");
    for (i, path) in records.iter().enumerate() {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let text = std::fs::read_to_string(path).expect("readable record");
        assert!(
            name.starts_with(&format!("{:03}-", i + 1)),
            "{name}: records are numbered NNN-title.md, one after another (expected {:03}-…)",
            i + 1
        );
        assert!(
            text.lines().count() <= DECISION_LINES_MAX,
            "{name} is over {DECISION_LINES_MAX} lines"
        );
        assert!(
            text.lines()
                .any(|l| l.trim_start_matches(['*', '-', ' ']).starts_with("Status")),
            "{name} says no status"
        );
    }
}
