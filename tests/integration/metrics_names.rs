//! What dashboards and alerts read from every deployable's `/metrics`: each family's name, type and
//! HELP text and each series' name and labels, compared with the golden files in `metrics_names/`
//! (values are left out). A renamed metric, a changed type or label, a lost series fails here.
//!
//! After a deliberate change, rewrite the golden files with `PAYONCE_BLESS_METRICS=1` and say in
//! the commit which dashboards it breaks.

use crate::serve::{START_DEADLINE, free_port, get, scratch, sigterm_and_wait};
use crate::support::wait_for;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;

/// Set to rewrite the golden files from what the deployables expose now.
const BLESS: &str = "PAYONCE_BLESS_METRICS";

/// The shape of one exposition, one line per fact, sorted: `HELP name text`, `TYPE name type` and
/// `SERIES name{label="value",…}` (labels sorted; values of samples dropped). Comments other than
/// HELP and TYPE, and blank lines, are ignored.
fn shape(exposition: &str) -> Vec<String> {
    let mut facts = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            facts.insert(format!("HELP {rest}"));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            facts.insert(format!("TYPE {rest}"));
        } else if line.starts_with('#') || line.trim().is_empty() {
            continue;
        } else {
            facts.insert(format!("SERIES {}", series(line)));
        }
    }
    facts.into_iter().collect()
}

/// `name{labels}` of a sample line, labels sorted, the value dropped.
fn series(line: &str) -> String {
    let (name, labels) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}').expect("a closing brace");
            (&line[..open], &line[open + 1..close])
        }
        None => (line.split_whitespace().next().expect("a name"), ""),
    };
    let mut pairs: Vec<&str> = split_labels(labels);
    pairs.sort_unstable();
    if pairs.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{}}}", pairs.join(","))
    }
}

/// `k="v"` pairs of a label list, commas inside quoted values kept.
fn split_labels(labels: &str) -> Vec<&str> {
    let mut pairs = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                pairs.push(labels[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = labels[start..].trim();
    if !last.is_empty() {
        pairs.push(last);
    }
    pairs
}

fn golden_path(process: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/integration/metrics_names")
        .join(format!("{process}.txt"))
}

/// Compares `exposition`'s shape with the golden file of `process` (or rewrites it under [`BLESS`]).
fn check_against_golden(process: &str, exposition: &str) {
    let now = shape(exposition);
    let path = golden_path(process);
    if std::env::var_os(BLESS).is_some() {
        std::fs::write(&path, now.join("\n") + "\n").unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; bless with {BLESS}=1", path.display()));
    let golden: BTreeSet<&str> = golden.lines().collect();
    let now_set: BTreeSet<&str> = now.iter().map(String::as_str).collect();
    let lost: Vec<&&str> = golden.difference(&now_set).collect();
    let new: Vec<&&str> = now_set.difference(&golden).collect();
    assert!(
        lost.is_empty() && new.is_empty(),
        "{process} /metrics no longer matches {}:\nlost: {lost:#?}\nnew: {new:#?}\n{exposition}",
        path.display()
    );
}

/// Waits for `base`'s readiness and answers its `/metrics` page.
async fn scrape(who: &str, base: &str) -> String {
    wait_for(&format!("{who} /readyz"), START_DEADLINE, || async {
        (get(&format!("http://{base}/readyz")).await.0 == 200).then_some(())
    })
    .await;
    let (status, page) = get(&format!("http://{base}/metrics")).await;
    assert_eq!(status, 200, "{who} /metrics: {page}");
    page
}

#[tokio::test]
async fn every_deployable_exposes_the_golden_metric_names_types_and_labels() {
    let dir = scratch("metric-names");
    let db = "sqlite:metric-names.db";
    // With the secret the processes run with: the ledger keeps its fingerprint.
    crate::serve::migrate(
        &dir,
        db,
        &[("PAYONCE_KEY_SECRET", crate::support::KEY_SECRET)],
    )
    .await;
    let listen = || format!("127.0.0.1:{}", free_port());
    let (api, worker, reconciler, sim, serve) = (listen(), listen(), listen(), listen(), listen());
    let processor_url = format!("http://{sim}");
    let spawn = |args: Vec<&str>| crate::serve::spawn_deployable(&dir, db, &processor_url, &args);
    let mut children = vec![
        spawn(vec!["simulator", "--listen", &sim]),
        spawn(vec!["api", "--listen", &api]),
        spawn(vec!["worker", "--metrics-listen", &worker]),
        spawn(vec!["reconciler", "--metrics-listen", &reconciler, "run"]),
        // Every component in one process, on a database of its own: its daemon endpoint carries
        // the worker's and the reconciler's series together.
        crate::serve::serve_command(
            &dir,
            &[],
            "sqlite:metric-names-serve.db",
            &[
                "--metrics-listen",
                &serve,
                "--key-secret",
                crate::support::KEY_SECRET,
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    ];
    for (process, base) in [
        ("api", &api),
        ("worker", &worker),
        ("reconciler", &reconciler),
        ("serve", &serve),
    ] {
        let page = scrape(process, base).await;
        check_against_golden(process, &page);
    }
    for child in &mut children {
        assert!(sigterm_and_wait(child).await.success());
    }
}

#[test]
fn the_shape_keeps_names_types_help_and_labels_and_drops_values() {
    let page = "# HELP payonce_x_total Things, counted.\n# TYPE payonce_x_total counter\n\
                payonce_x_total{b=\"2\",a=\"1,\\\"x\"} 7\npayonce_y 0.5\n# EOF\n";
    assert_eq!(
        shape(page),
        [
            "HELP payonce_x_total Things, counted.",
            "SERIES payonce_x_total{a=\"1,\\\"x\",b=\"2\"}",
            "SERIES payonce_y",
            "TYPE payonce_x_total counter",
        ]
    );
    // A renamed metric or a changed type is a different fact.
    let renamed = page.replace("payonce_x_total{", "payonce_x{");
    assert_ne!(shape(page), shape(&renamed));
    let retyped = page.replace(" counter", " gauge");
    assert_ne!(shape(page), shape(&retyped));
}
