//! Operating payonce: the config file's precedence and errors, the generated configuration reference,
//! liveness/readiness/metrics and the container probe on every deployable, the scheduled sweep's exit
//! codes, and deploy/ naming only settings the binary reads.

use crate::serve::{START_DEADLINE, free_port, get, payonce, scratch, sigterm_and_wait};
use crate::support::{recording, wait_for};
use payonce_ledger::Fence;
use std::path::Path;
use std::time::Duration;

/// `payonce config show` in `dir` with `env`, returning stdout or panicking with stderr.
async fn config_show(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = payonce(dir, args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.unwrap()
}

#[tokio::test]
async fn config_file_sits_between_the_environment_and_the_defaults() {
    let dir = scratch("config");
    std::fs::write(
        dir.join("payonce.toml"),
        "db_max_connections = 7\nworker_concurrency = 9\napi_listen = \"127.0.0.1:9999\"\nresubmit_after_window = true\n",
    )
    .unwrap();
    let out = config_show(
        &dir,
        &[
            "--config",
            "payonce.toml",
            "config",
            "show",
            "--listen",
            "127.0.0.1:1",
        ],
        &[("PAYONCE_WORKER_CONCURRENCY", "11")],
    )
    .await;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    for line in [
        "api_listen = \"127.0.0.1:1\"  # flag",     // flag beats file
        "worker_concurrency = \"11\"  # env",       // env beats file
        "db_max_connections = \"7\"  # file",       // file beats default
        "resubmit_after_window = \"true\"  # file", // booleans too
        "sweep_batch = \"200\"  # default",         // default when nobody says
        "database_url = \"sqlite:payonce.db\"  # default",
        "log_format = \"text\"  # default", // global flags too
    ] {
        assert!(shown.contains(line), "{line:?} missing from:\n{shown}");
    }
    // PAYONCE_CONFIG names the file when --config does not.
    let out = config_show(
        &dir,
        &["config", "show"],
        &[("PAYONCE_CONFIG", "payonce.toml")],
    )
    .await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("db_max_connections = \"7\"  # file"));

    // Bad files are refused with status 2, naming the key.
    for (text, expected) in [
        ("db_max_conections = 7\n", "unknown key `db_max_conections`"),
        (
            "db_max_connections = \"many\"\n",
            "key `db_max_connections` has an invalid value \"many\"",
        ),
        (
            "api_listen = [\"a\"]\n",
            "key `api_listen` must be a string, an integer or a boolean",
        ),
        ("lease_ttl_ms = \n", "is not valid TOML"),
        // Named limits: a checked webhook is kept one day at least and ten years at most.
        ("webhook_retention_days = 0\n", "0 is not in 1..=3650"),
        ("webhook_retention_days = 3651\n", "3651 is not in 1..=3650"),
        // The worker's grouping and pipelining are internal, not settings.
        ("worker_pipelines = 2\n", "unknown key `worker_pipelines`"),
    ] {
        std::fs::write(dir.join("bad.toml"), text).unwrap();
        let out = config_show(&dir, &["--config", "bad.toml", "config", "show"], &[]).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {err}");
        assert!(err.contains(expected), "{text:?}: {err}");
    }
}

#[tokio::test]
async fn configuration_reference_in_docs_is_generated_from_the_binary() {
    let dir = scratch("reference");
    let out = payonce(&dir, &["config", "reference"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).unwrap();
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .unwrap();
    let begin = "<!-- BEGIN payonce config reference -->\n";
    let end = "<!-- END payonce config reference -->";
    let start = doc.find(begin).expect("begin marker") + begin.len();
    let stop = doc.find(end).expect("end marker");
    assert_eq!(
        &doc[start..stop],
        generated,
        "docs/configuration.md is stale: replace its table with `payonce config reference`"
    );
    // Every setting of every deployable is in it.
    for env in [
        "PAYONCE_DATABASE_URL",
        "PAYONCE_API_LISTEN",
        "PAYONCE_WORKER_CONCURRENCY",
        "PAYONCE_SWEEP_INTERVAL_MS",
        "PAYONCE_SIMULATOR_SEED",
        "PAYONCE_LOG_FORMAT",
        "PAYONCE_METRICS_LISTEN",
    ] {
        assert!(generated.contains(&format!("`{env}`")), "{env} missing");
    }
}

#[tokio::test]
async fn every_deployable_answers_liveness_readiness_and_metrics() {
    let dir = scratch("probes");
    let db = "sqlite:probes.db";
    // With the secret the processes run with: the ledger keeps its fingerprint.
    crate::serve::migrate(
        &dir,
        db,
        &[("PAYONCE_KEY_SECRET", crate::support::KEY_SECRET)],
    )
    .await;
    let (api_port, worker_port, reconciler_port, sim_port) =
        (free_port(), free_port(), free_port(), free_port());
    let api_listen = format!("127.0.0.1:{api_port}");
    let worker_listen = format!("127.0.0.1:{worker_port}");
    let reconciler_listen = format!("127.0.0.1:{reconciler_port}");
    let sim_listen = format!("127.0.0.1:{sim_port}");
    let processor_url = format!("http://{sim_listen}");
    let spawn = |args: Vec<&str>| crate::serve::spawn_deployable(&dir, db, &processor_url, &args);
    let mut children = vec![
        spawn(vec!["api", "--listen", &api_listen]),
        spawn(vec!["worker", "--metrics-listen", &worker_listen]),
        spawn(vec![
            "reconciler",
            "--metrics-listen",
            &reconciler_listen,
            "run",
        ]),
        spawn(vec!["simulator", "--listen", &sim_listen]),
    ];
    for (who, base, metric) in [
        ("api", &api_listen, "payonce_api_responses_total"),
        ("worker", &worker_listen, "payonce_worker_claimed_total"),
        (
            "reconciler",
            &reconciler_listen,
            "payonce_reconciler_actions_total",
        ),
    ] {
        for path in ["/healthz", "/readyz"] {
            wait_for(&format!("{who} {path}"), START_DEADLINE, || async {
                (get(&format!("http://{base}{path}")).await.0 == 200).then_some(())
            })
            .await;
        }
        let (status, page) = get(&format!("http://{base}/metrics")).await;
        assert_eq!(status, 200, "{who} /metrics");
        assert!(
            page.contains(metric),
            "{who} /metrics lacks {metric}: {page}"
        );
        assert!(page.contains("# TYPE "), "{who}: {page}");
    }
    for path in ["/healthz", "/readyz"] {
        wait_for(&format!("simulator {path}"), START_DEADLINE, || async {
            (get(&format!("http://{sim_listen}{path}")).await.0 == 200).then_some(())
        })
        .await;
    }
    // The container healthcheck: `payonce probe` succeeds on a ready deployable, fails on a closed port.
    let probe = |url: String| {
        let dir = dir.clone();
        async move {
            payonce(&dir, &["probe", &url])
                .status()
                .await
                .unwrap()
                .success()
        }
    };
    assert!(probe(format!("http://{api_listen}/readyz")).await);
    assert!(!probe(format!("http://127.0.0.1:{}/readyz", free_port())).await);
    // As the image's healthcheck runs it: the URL from the environment.
    let from_env = payonce(&dir, &["probe"])
        .env("PAYONCE_PROBE_URL", format!("http://{api_listen}/readyz"))
        .status()
        .await
        .unwrap();
    assert!(from_env.success());
    for child in &mut children {
        let exit = sigterm_and_wait(child).await;
        assert!(
            exit.success(),
            "a deployable exits cleanly on SIGTERM: {exit}"
        );
    }
}

/// Every `PAYONCE_…` name in `text`.
fn payonce_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("PAYONCE_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.push(name);
    }
    names
}

#[tokio::test]
async fn deploy_files_name_only_real_settings() {
    let dir = scratch("deploy-names");
    let out = payonce(&dir, &["config", "reference"])
        .output()
        .await
        .unwrap();
    let reference = String::from_utf8(out.stdout).unwrap();
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut files = vec![deploy.join("compose.yaml"), deploy.join("Dockerfile")];
    for sub in ["k8s", "systemd"] {
        for entry in std::fs::read_dir(deploy.join(sub)).unwrap() {
            files.push(entry.unwrap().path());
        }
    }
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for name in payonce_names(&text) {
            // Not settings: the config file's own variable, and the test-only failure points.
            if name == "PAYONCE_CONFIG" || name == "PAYONCE_FAILPOINTS" {
                continue;
            }
            assert!(
                reference.contains(&format!("`{name}`")),
                "{} names {name}, which no payonce command reads",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} settings found in deploy/");

    // The Kubernetes ConfigMap's payonce.toml is a config file every deployable accepts.
    let config = std::fs::read_to_string(deploy.join("k8s/config.yaml")).unwrap();
    let toml: String = config
        .split("payonce.toml: |\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    assert!(toml.contains("processor_url"), "{toml}");
    std::fs::write(dir.join("payonce.toml"), &toml).unwrap();
    let out = payonce(&dir, &["--config", "payonce.toml", "config", "show"])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the ConfigMap's payonce.toml is refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("lease_ttl_ms = \"30000\"  # file"),
        "{shown}"
    );

    // So is the systemd example.
    let out = payonce(
        &dir,
        &[
            "--config",
            deploy
                .join("systemd/payonce.toml.example")
                .to_str()
                .unwrap(),
            "config",
            "show",
        ],
    )
    .output()
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "payonce.toml.example is refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn scheduled_sweep_exit_codes_are_what_cron_and_the_runbook_expect() {
    use payonce_ledger::{self as ledger, LeaseHolder, Recorded};
    let dir = scratch("sweep-codes");
    let db = format!("sqlite:{}", dir.join("sweep.db").display());
    // Only `migrate`, `serve` and `demo` create a ledger; cron's sweep refuses a missing one.
    crate::serve::migrate(&dir, &db, &[]).await;
    // The processor it scans answers: one that cannot be reached is never "all clear" (exit 1).
    let sim =
        crate::support::processes::simulator(payonce_simulator::SimulatorConfig::default()).await;
    let sweep = || async {
        payonce(&dir, &["reconciler", "sweep", "--once", "--json"])
            .env("PAYONCE_DATABASE_URL", &db)
            .env("PAYONCE_PROCESSOR_URL", sim.base_url())
            .output()
            .await
            .unwrap()
    };
    let clean = sweep().await;
    assert_eq!(clean.status.code(), Some(0), "{clean:?}");
    let report: serde_json::Value = serde_json::from_slice(&clean.stdout).unwrap();
    assert_eq!(report["needs_attention"], 0, "{report}");

    // One operation whose attempts ran out without a request leaving: needs a human.
    let ledger = ledger::connect(&db, 1).await.unwrap();
    let now = payonce_core::clock::Clock::now(&payonce_core::clock::SystemClock);
    crate::support::ready_operation(&ledger, "INV-3", "pm_card_visa", now).await;
    let claimed = ledger
        .claim(
            &LeaseHolder {
                owner: "test",
                lease_ttl: Duration::from_millis(60_000),
            },
            1,
            now,
        )
        .await
        .unwrap();
    let op = &claimed[0];
    let exhausted = Recorded::Exhausted {
        reason: "the processor refused every connection".into(),
    };
    ledger
        .record(&recording(&Fence::of(op), &exhausted, "test"), now)
        .await
        .unwrap();
    drop(ledger);
    let attention = sweep().await;
    assert_eq!(attention.status.code(), Some(3), "{attention:?}");
    let report: serde_json::Value = serde_json::from_slice(&attention.stdout).unwrap();
    assert_eq!(report["needs_attention"], 1, "{report}");

    // `sweep` without --once is refused (the daemon is `reconciler run`); a ledger that cannot be
    // opened is an error: both exit 1, which cron reports as a failure.
    let no_once = payonce(&dir, &["reconciler", "sweep"])
        .env("PAYONCE_DATABASE_URL", &db)
        .output()
        .await
        .unwrap();
    assert_eq!(no_once.status.code(), Some(1), "{no_once:?}");
    let broken = payonce(&dir, &["reconciler", "sweep", "--once"])
        .env("PAYONCE_DATABASE_URL", "sqlite:/nonexistent/dir/sweep.db")
        .output()
        .await
        .unwrap();
    assert_eq!(broken.status.code(), Some(1), "{broken:?}");
}
