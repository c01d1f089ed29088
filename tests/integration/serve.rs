//! The quick start and operations surface: `payonce serve` (every component in one process), the demo,
//! the config file's precedence and errors, the generated configuration reference, JSON logs, and
//! liveness/readiness/metrics on every deployable.

use crate::support::{payonce_bin, wait_for};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a process gets to print its banner or answer its first probe.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A fresh directory for one test's files (and the TLS provider reqwest needs, installed first).
fn scratch(name: &str) -> PathBuf {
    payonce_simulator::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("payonce-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `payonce ARGS` with a clean PAYONCE_ environment, run in `dir`.
fn payonce(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(payonce_bin());
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, _) in std::env::vars() {
        if k.starts_with("PAYONCE_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn sigterm_and_wait(child: &mut Child) -> std::process::ExitStatus {
    let pid = child.id().expect("still running").to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    tokio::time::timeout(Duration::from_secs(40), child.wait())
        .await
        .expect("exits within its shutdown grace")
        .unwrap()
}

async fn get(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

#[tokio::test]
async fn serve_runs_every_component_in_one_process_and_pays_once_on_sqlite() {
    serve_pays_once("serve-sqlite", "sqlite:serve.db").await;
}

#[tokio::test]
async fn serve_runs_every_component_in_one_process_and_pays_once_on_postgres() {
    let url = crate::support::postgres::fresh_database().await;
    serve_pays_once("serve-postgres", &url).await;
}

/// Starts `payonce serve` on `database_url`, pays one operation through it with the printed key, and
/// checks the one payment, the probes, the metrics, the JSON logs and a clean SIGTERM.
async fn serve_pays_once(name: &str, database_url: &str) {
    let dir = scratch(name);
    let metrics_listen = format!("127.0.0.1:{}", free_port());
    let mut child = payonce(
        &dir,
        &[
            "--log-format",
            "json",
            "serve",
            "--metrics-listen",
            &metrics_listen,
            "--database-url",
            database_url,
            "--listen",
            "127.0.0.1:0",
            "--simulator-listen",
            "127.0.0.1:0",
            "--tenant",
            "acme",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    tokio::time::timeout(START_DEADLINE, async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            let stop = line.starts_with("Stop with Ctrl-C");
            banner.push(line);
            if stop {
                break;
            }
        }
    })
    .await
    .expect("serve prints its banner");
    // Banner lines: "  api        URL  (…)", "  processor  URL  (…)", "  service key    (tenant) KEY".
    let line = |label: &str| -> Vec<String> {
        banner
            .iter()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label:?} line in {banner:#?}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let api = line("api ")[0].clone();
    let processor = line("processor ")[0].clone();
    let service = line("service key").last().unwrap().clone();
    assert!(
        banner.iter().any(|l| l.contains("built-in simulator")),
        "{banner:#?}"
    );
    let http = reqwest::Client::new();

    let created: serde_json::Value = http
        .post(format!("{api}/v1/operations"))
        .bearer_auth(&service)
        .json(&serde_json::json!({"business_key": "invoice:INV-7:pay",
            "details": {"amount": 700, "currency": "usd", "customer": "cus_7", "payment_method": "pm_card_visa", "invoice": "INV-7"}}))
        .send().await.unwrap().error_for_status().unwrap().json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let approved = http
        .post(format!("{api}/v1/operations/{id}/approve"))
        .bearer_auth(&service)
        .json(&serde_json::json!({"details_hash": created["details_hash"], "approved_by": "customer:cus_7"}))
        .send()
        .await
        .unwrap();
    assert!(approved.status().is_success(), "{approved:?}");

    // The in-process worker pays it through the built-in simulator.
    let op = wait_for("the operation to succeed", START_DEADLINE, || async {
        let op: serde_json::Value = http
            .get(format!("{api}/v1/operations/{id}"))
            .bearer_auth(&service)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (op["status"] == "succeeded").then_some(op)
    })
    .await;
    assert!(
        op["external_ref"].as_str().unwrap().starts_with("pi_"),
        "{op}"
    );
    let payments: serde_json::Value = reqwest::get(format!("{processor}/_sim/audit/payments"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ours = payments["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["payonce_operation_id"] == id.as_str())
        .count();
    assert_eq!(ours, 1, "exactly one payment at the processor");

    assert_eq!(get(&format!("{api}/healthz")).await.0, 200);
    assert_eq!(get(&format!("{api}/readyz")).await.0, 200);
    let (status, metrics) = get(&format!("{api}/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("payonce_operations{status=\"succeeded\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("payonce_api_responses_total{class=\"2xx\"}"),
        "{metrics}"
    );

    // The in-process worker paid it; its and the reconciler's counters are on metrics_listen.
    let (status, inner) = get(&format!("http://{metrics_listen}/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        inner.contains("payonce_worker_outcomes_total{outcome=\"succeeded\"} 1\n"),
        "{inner}"
    );
    assert!(
        inner.contains("payonce_reconciler_actions_total"),
        "{inner}"
    );

    let exit = sigterm_and_wait(&mut child).await;
    assert!(exit.success(), "serve exits cleanly on SIGTERM: {exit}");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "serve logged nothing");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("--log-format json wrote a non-JSON line ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    assert!(
        lines.iter().any(|l| l.contains("api listening")),
        "{stderr}"
    );
}

#[tokio::test]
async fn demo_tells_the_inv_2048_story_with_one_payment() {
    let dir = scratch("demo");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        payonce(&dir, &["demo", "--database", "demo.db"]).output(),
    )
    .await
    .expect("the demo finishes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        " 1/11 all-in-one stack up",
        "/confirm/",
        "crashed before recording it",
        "response lost on the way back (dropped)",
        "This is the same payment, not a new one",
        "reconciled: succeeded (pi_",
        "webhook deliveries accepted",
        "payments at the processor for this operation: 1",
        "11/11 assistant asks again",
        "processor_succeeded",
        "One approved intention, one payment.",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing from:\n{stdout}"
        );
    }
    // Not a terminal: plain lines, no spinner redraws.
    assert!(!stdout.contains('\r'), "{stdout:?}");
    assert!(dir.join("demo.db").exists());
}

#[tokio::test]
async fn demo_on_a_terminal_shows_a_spinner_with_elapsed_time() {
    // `script` (util-linux, on every Debian) gives the demo a pseudo-terminal.
    let dir = scratch("demo-tty");
    let bin = payonce_bin();
    let mut script = Command::new("script");
    script
        .args([
            "-qec",
            &format!("{bin} demo --database tty.db"),
            "/dev/null",
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, _) in std::env::vars() {
        if k.starts_with("PAYONCE_") {
            script.env_remove(k);
        }
    }
    let out = tokio::time::timeout(Duration::from_secs(120), script.output())
        .await
        .expect("the demo finishes")
        .expect("`script` is installed (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // Redrawn in place with a spinner frame and a running clock, then replaced by the finished step.
    assert!(text.contains("\r\x1b[2K"), "no in-place redraw: {text:?}");
    assert!(text.contains('⠋'), "no spinner frame: {text:?}");
    assert!(text.contains("(waited "), "{text:?}");
    assert!(
        text.contains("One approved intention, one payment."),
        "{text:?}"
    );
}

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
    let migrate = payonce(&dir, &["migrate", "--database-url", db])
        .output()
        .await
        .unwrap();
    assert!(migrate.status.success(), "{migrate:?}");
    let (api_port, worker_port, reconciler_port, sim_port) =
        (free_port(), free_port(), free_port(), free_port());
    let api_listen = format!("127.0.0.1:{api_port}");
    let worker_listen = format!("127.0.0.1:{worker_port}");
    let reconciler_listen = format!("127.0.0.1:{reconciler_port}");
    let sim_listen = format!("127.0.0.1:{sim_port}");
    let spawn = |args: Vec<&str>| {
        payonce(&dir, &args)
            .env("PAYONCE_DATABASE_URL", db)
            .env("PAYONCE_PROCESSOR_URL", format!("http://{sim_listen}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
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
    wait_for("simulator health", START_DEADLINE, || async {
        (get(&format!("http://{sim_listen}/_sim/health")).await.0 == 200).then_some(())
    })
    .await;
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
    use payonce_shared::ledger::{self, Recorded};
    let dir = scratch("sweep-codes");
    let db = format!("sqlite:{}", dir.join("sweep.db").display());
    let sweep = || async {
        payonce(&dir, &["reconciler", "sweep", "--once", "--json"])
            .env("PAYONCE_DATABASE_URL", &db)
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
    let now = payonce_shared::clock::Clock::now_ms(&payonce_shared::clock::SystemClock);
    crate::support::ready_operation(&ledger, "INV-3", "pm_card_visa", now).await;
    let claimed = ledger.claim("test", 1, 60_000, now).await.unwrap();
    let op = &claimed[0];
    let exhausted = Recorded::Exhausted {
        reason: "the processor refused every connection".into(),
    };
    ledger
        .record(&op.id, op.attempt, &exhausted, "test", now)
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
