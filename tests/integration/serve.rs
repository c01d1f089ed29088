//! The quick start: `payonce serve` (every component in one process, on SQLite and on Postgres) and
//! `payonce demo` (the INV-2048 story on it, with its progress display). Also the process helpers the
//! `deployables` module shares.

use crate::support::{payonce_bin, wait_for};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a process gets to print its banner or answer its first probe.
pub(crate) const START_DEADLINE: Duration = Duration::from_secs(30);

/// A fresh directory for one test's files (and the TLS provider reqwest needs, installed first).
pub(crate) fn scratch(name: &str) -> PathBuf {
    payonce_simulator::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("payonce-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `payonce ARGS` with a clean PAYONCE_ environment, run in `dir`.
pub(crate) fn payonce(dir: &Path, args: &[&str]) -> Command {
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

/// Runs `payonce migrate` in `dir` on `database_url` with `env` set; asserts it succeeds.
pub(crate) async fn migrate(dir: &Path, database_url: &str, env: &[(&str, &str)]) {
    let migrated = payonce(dir, &["migrate", "--database-url", database_url])
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    assert!(migrated.status.success(), "{migrated:?}");
}

/// Spawns `payonce ARGS` in `dir` as a deployable runs: on `database_url` with the test key
/// secret, its processor at `processor_url`, output discarded.
pub(crate) fn spawn_deployable(
    dir: &Path,
    database_url: &str,
    processor_url: &str,
    args: &[&str],
) -> Child {
    payonce(dir, args)
        .env("PAYONCE_DATABASE_URL", database_url)
        .env("PAYONCE_KEY_SECRET", crate::support::KEY_SECRET)
        .env("PAYONCE_PROCESSOR_URL", processor_url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    payonce_chaos::fleet::free_port().expect("a free loopback port")
}

/// Sends SIGTERM and waits (bounded) for the exit status.
pub(crate) async fn sigterm_and_wait(child: &mut Child) -> std::process::ExitStatus {
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

/// GETs `url`: (status, body), or (0, "") when nothing answers.
pub(crate) async fn get(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// `serve` on `database_url`, its api and simulator on free loopback ports, for tenant acme.
pub(crate) fn serve_args(database_url: &str) -> [&str; 9] {
    [
        "serve",
        "--database-url",
        database_url,
        "--listen",
        "127.0.0.1:0",
        "--simulator-listen",
        "127.0.0.1:0",
        "--tenant",
        "acme",
    ]
}

/// `payonce BEFORE` and [`serve_args`] in `dir`, then `after` (more `serve` flags).
pub(crate) fn serve_command(
    dir: &Path,
    before: &[&str],
    database_url: &str,
    after: &[&str],
) -> Command {
    payonce(
        dir,
        &[before, &serve_args(database_url)[..], after].concat(),
    )
}

/// Waits (up to `deadline`) until operation `id` reads `succeeded` through the api at `api`
/// (with `key`); the operation's JSON.
pub(crate) async fn succeeded_over_http(
    http: &reqwest::Client,
    api: &str,
    key: &str,
    id: &str,
    deadline: Duration,
) -> serde_json::Value {
    wait_for(&format!("{id} succeeded"), deadline, || async {
        let op: serde_json::Value = http
            .get(format!("{api}/v1/operations/{id}"))
            .bearer_auth(key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (op["status"] == "succeeded").then_some(op)
    })
    .await
}

/// A spawned process's piped stdout, line by line.
pub(crate) type StdoutLines = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// Takes `child`'s piped stdout to read it line by line.
pub(crate) fn stdout_lines(child: &mut Child) -> StdoutLines {
    BufReader::new(child.stdout.take().expect("stdout is piped")).lines()
}

/// Reads `payonce serve`'s banner from `stdout`: every line up to and including "Stop with
/// Ctrl-C"; panics if it has not come within `deadline`.
pub(crate) async fn read_banner(stdout: &mut StdoutLines, deadline: Duration) -> Vec<String> {
    let mut banner = Vec::new();
    tokio::time::timeout(deadline, async {
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
    banner
}

/// The next line the in-process tenant app prints to `stdout` (its "SMS": ">>> [tenant app] to
/// customer …: please confirm … at URL with code N"); panics if none comes within `deadline`.
pub(crate) async fn tenant_app_line(stdout: &mut StdoutLines, deadline: Duration) -> String {
    tokio::time::timeout(deadline, async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            if line.starts_with(">>> [tenant app]") {
                return line;
            }
        }
        panic!("serve's stdout ended")
    })
    .await
    .expect("the tenant app prints the request")
}

/// The URL on the banner's "api" line (its first word).
pub(crate) fn banner_api(banner: &[String]) -> String {
    banner
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("api "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no api line in {banner:#?}"))
        .to_string()
}

#[tokio::test]
async fn serve_runs_every_component_in_one_process_and_pays_once_on_sqlite() {
    serve_pays_once("serve-sqlite", "sqlite:serve.db").await;
}

#[tokio::test]
async fn serve_runs_every_component_in_one_process_and_pays_once_on_postgres() {
    // `payonce serve` on Postgres, like every serving process there, never migrates (issue 56).
    let url = crate::support::postgres::migrated_database().await;
    serve_pays_once("serve-postgres", &url).await;
}

/// Starts `payonce serve` on `database_url`, pays one operation through it with the printed key, and
/// checks the one payment, the probes, the metrics, the JSON logs and a clean SIGTERM.
async fn serve_pays_once(name: &str, database_url: &str) {
    let dir = scratch(name);
    let metrics_listen = format!("127.0.0.1:{}", free_port());
    let mut child = serve_command(
        &dir,
        &["--log-format", "json"],
        database_url,
        &[
            "--metrics-listen",
            &metrics_listen,
            // Postgres needs it configured (a SQLite file keeps one beside it).
            "--key-secret",
            crate::support::KEY_SECRET,
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdout = stdout_lines(&mut child);
    let banner = read_banner(&mut stdout, START_DEADLINE).await;
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
    let op = succeeded_over_http(&http, &api, &service, &id, START_DEADLINE).await;
    assert!(
        op["external_ref"].as_str().unwrap().starts_with("pi_"),
        "{op}"
    );
    let ours = crate::support::processes::payments_at(&processor, &id).await;
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

    // The in-process worker paid it; its and the reconciler's counters are on metrics_listen. The
    // worker counts an outcome once its write returned, so the row can read succeeded just before.
    let inner = wait_for("the worker counts the outcome", START_DEADLINE, || async {
        let (status, inner) = get(&format!("http://{metrics_listen}/metrics")).await;
        (status == 200
            && inner.contains("payonce_worker_outcomes_total{outcome=\"succeeded\"} 1\n"))
        .then_some(inner)
    })
    .await;
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
    // On Stripe's wire, then on Adyen's (no lookup by id: the same key replays the saved result).
    for (processor, reconciled, resolved) in [
        (
            "stripe",
            "reconciled: succeeded (pi_",
            "resolved by looking the payment up",
        ),
        (
            "adyen",
            "reconciled: succeeded (",
            "resubmitted with the SAME key",
        ),
    ] {
        let dir = scratch(&format!("demo-{processor}"));
        let out = tokio::time::timeout(
            Duration::from_secs(120),
            payonce(
                &dir,
                &["demo", "--database", "demo.db", "--processor", processor],
            )
            .output(),
        )
        .await
        .expect("the demo finishes")
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{processor} demo failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for expected in [
            " 1/11 all-in-one stack up",
            "/confirm/",
            "crashed before recording it",
            "response lost on the way back (dropped)",
            "This is the same payment, not a new one",
            reconciled,
            resolved,
            "webhook deliveries accepted",
            "payments at the processor for this operation: 1",
            "11/11 assistant asks again",
            "processor_succeeded",
            "One approved intention, one payment.",
        ] {
            assert!(
                stdout.contains(expected),
                "{processor}: {expected:?} missing from:\n{stdout}"
            );
        }
        // Times as RFC 3339, never a raw epoch; the last line is the next step.
        let expired = stdout
            .lines()
            .find(|l| l.contains("lease_expired_submitted"))
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(
            expired.contains(" expired at 20") && expired.trim_end().ends_with('Z'),
            "{expired}"
        );
        assert!(
            !stdout
                .split_whitespace()
                .any(|w| w.len() >= 12 && w.bytes().all(|b| b.is_ascii_digit())),
            "a raw epoch in:\n{stdout}"
        );
        let last = stdout.trim_end().lines().last().unwrap();
        assert!(last.starts_with("Next: `payonce serve`"), "{last}");
        // Not a terminal: plain lines, no spinner redraws.
        assert!(!stdout.contains('\r'), "{stdout:?}");
        assert!(dir.join("demo.db").exists());
    }
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

/// Starts `payonce serve` in `dir` on `database_url` and returns it with its banner lines.
async fn serve_banner(dir: &Path, database_url: &str) -> (Child, Vec<String>) {
    let mut child = serve_command(dir, &[], database_url, &[])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = stdout_lines(&mut child);
    let banner = read_banner(&mut stdout, START_DEADLINE).await;
    (child, banner)
}

/// The last word of the banner line starting with `label`.
pub(crate) fn banner_word(banner: &[String], label: &str) -> String {
    banner
        .iter()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} line in {banner:#?}"))
        .split_whitespace()
        .last()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn serve_keeps_its_keys_across_restarts() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("serve-restart");
    let database_url = format!("sqlite:{}", dir.join("keep.db").display());
    let mut keys_seen = Vec::new();
    for start in 0..2 {
        let (mut child, banner) = serve_banner(&dir, &database_url).await;
        let api = banner_api(&banner);
        let service = banner_word(&banner, "service key");
        let assistant = banner_word(&banner, "assistant key");
        assert!(service.starts_with("po_service_"), "{banner:#?}");
        assert!(assistant.starts_with("po_assistant_"), "{banner:#?}");
        // The printed keys are accepted: the service reads (an unknown id is a 404, not a 401).
        let r = reqwest::Client::new()
            .get(format!(
                "{api}/v1/operations/op_00000000000000000000000000000000"
            ))
            .bearer_auth(&service)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            404,
            "start {start}: the service key is accepted"
        );
        let r = reqwest::Client::new()
            .get(format!("{api}/v1/tools?format=mcp"))
            .bearer_auth(&assistant)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            200,
            "start {start}: the assistant key is accepted"
        );
        keys_seen.push((service, assistant));
        let status = sigterm_and_wait(&mut child).await;
        assert!(
            status.success(),
            "{status}: {}",
            std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
        );
    }
    assert_eq!(
        keys_seen[0], keys_seen[1],
        "the second start reuses the keys"
    );
    let file = dir.join("keep.db.serve-keys.json");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the keys file is private");
    let ledger = payonce_ledger::connect(&database_url, 1).await.unwrap();
    let rows = ledger.list_api_keys(None, 100).await.unwrap();
    assert_eq!(
        rows.len(),
        3,
        "service, assistant and on-call; no new key rows on restart: {rows:#?}"
    );

    // Without the file (as on Postgres) a restart names the existing keys and adds none.
    std::fs::remove_file(&file).unwrap();
    let (mut child, banner) = serve_banner(&dir, &database_url).await;
    let line = banner
        .iter()
        .find(|l| l.trim_start().starts_with("service key"))
        .unwrap();
    assert!(
        line.contains(
            &rows
                .iter()
                .find(|k| k.role == payonce_ledger::Role::Service)
                .unwrap()
                .key_id
        ) && line.contains(&format!(
            "payonce keys create --tenant acme --role service --label 'payonce serve' --database-url \"{database_url}\""
        )),
        "{banner:#?}"
    );
    let status = sigterm_and_wait(&mut child).await;
    assert!(
        status.success(),
        "{status}: {}",
        std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
    );
    assert_eq!(ledger.list_api_keys(None, 100).await.unwrap().len(), 3);
}

#[tokio::test]
async fn an_mcp_session_logs_no_rmcp_info_line_at_the_default_filter() {
    let dir = scratch("serve-mcp-log");
    let log = dir.join("serve.log");
    let mut child = serve_command(&dir, &[], "sqlite:mcp-log.db", &[])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = stdout_lines(&mut child);
    let banner = read_banner(&mut stdout, START_DEADLINE).await;
    let mcp: serde_json::Value = banner
        .iter()
        .find_map(|l| serde_json::from_str(l.trim()).ok())
        .unwrap_or_else(|| panic!("{banner:#?}"));
    let server = &mcp["mcpServers"]["payonce"];
    let (url, auth) = (
        server["url"].as_str().unwrap(),
        server["headers"]["Authorization"].as_str().unwrap(),
    );
    // A whole session as a client makes one: initialize, initialized, a request, its end.
    let http = crate::api::http_client();
    let post = |session: Option<String>, body: serde_json::Value| {
        let mut request = http
            .post(url)
            .header("authorization", auth)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body);
        if let Some(id) = session {
            request = request.header("mcp-session-id", id);
        }
        request.send()
    };
    let init = post(
        None,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "log", "version": "0"}}}),
    )
    .await
    .unwrap();
    assert_eq!(init.status(), 200);
    let session = init
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let _ = init.text().await.unwrap();
    let initialized = post(
        session.clone(),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await
    .unwrap();
    assert!(initialized.status().is_success(), "{initialized:?}");
    let tools = post(
        session.clone(),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await
    .unwrap();
    assert_eq!(tools.status(), 200);
    assert!(tools.text().await.unwrap().contains("pay_invoice"));
    if let Some(id) = session {
        let mut end = http.delete(url).header("authorization", auth);
        end = end.header("mcp-session-id", id);
        let _ = end.send().await.unwrap();
    }
    // Once serve has exited its log is whole: whatever the session logged is in it.
    let exit = sigterm_and_wait(&mut child).await;
    assert!(exit.success(), "{exit}");
    let text = std::fs::read_to_string(&log).unwrap();
    let info = |l: &&str| l.contains(" INFO ");
    assert!(
        text.lines().any(|l| info(&l)),
        "serve still logs at info: {text}"
    );
    let rmcp: Vec<&str> = text
        .lines()
        .filter(info)
        .filter(|l| l.contains("rmcp"))
        .collect();
    assert!(rmcp.is_empty(), "{rmcp:#?}");
}
