//! The operator's path (issue 39): flags anywhere after their command, a typo'd ledger refused
//! instead of reported "all clear", errors printed once without colour or internal detail and with
//! the fix where one is known, and `config show` output that cannot poison a config file.

use crate::serve::{free_port, payonce, scratch, serve_args};
use crate::support::rows;
use crate::support::{ready_operation, tenant};
use payonce_core::clock::{Clock, SystemClock};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// Runs `payonce ARGS` in `dir` (stdout and stderr piped: not a terminal) with `env`.
async fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = payonce(dir, args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env_remove("NO_COLOR");
    cmd.output().await.unwrap()
}

/// The `waited_ms` a connect error reports ("attempts: N in M ms"), to compare the rest exactly.
fn waited_ms(stderr: &str) -> String {
    stderr
        .split(" in ")
        .nth(1)
        .and_then(|rest| rest.split(" ms)").next())
        .unwrap_or_default()
        .to_string()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `payonce migrate` on a fresh SQLite file in `dir`; returns its URL.
async fn migrated(dir: &Path, file: &str) -> String {
    let url = format!("sqlite:{}", dir.join(file).display());
    let out = run(dir, &["migrate", "--database-url", &url], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    url
}

#[tokio::test]
async fn settings_flags_are_accepted_after_the_subcommand_and_by_their_key() {
    let dir = scratch("op-flags-anywhere");
    let url = migrated(&dir, "ledger.db").await;
    let sim = crate::support::processes::simulator(Default::default()).await;
    let sim_url = sim.base_url();
    let cases: [&[&str]; 5] = [
        &[
            "keys",
            "create",
            "--tenant",
            "acme",
            "--role",
            "on_call",
            "--database-url",
            &url,
        ],
        &["keys", "list", "--database-url", &url],
        &["reconciler", "list", "--database-url", &url],
        &[
            "reconciler",
            "sweep",
            "--once",
            "--processor-url",
            &sim_url,
            "--database-url",
            &url,
        ],
        // A setting's key as its flag (`lease_renew_ms`; the older flag is `--renew-ms`), after the
        // subcommand like any other (a worker setting is accepted only by the commands that use it).
        &[
            "config",
            "show",
            "--lease-renew-ms",
            "900",
            "--database-url",
            &url,
        ],
    ];
    for args in cases {
        let out = run(&dir, args, &[]).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    // The flag really reached the command: the key just created is listed from that ledger.
    let listed = run(
        &dir,
        &["keys", "list", "--json", "--database-url", &url],
        &[],
    )
    .await;
    assert!(text(&listed.stdout).contains("\"on_call\""), "{listed:?}");
    // Both spellings show in `config show` under the setting's key.
    let shown = run(&dir, &["config", "show", "--worker-batch", "9"], &[]).await;
    assert!(
        text(&shown.stdout).contains("worker_batch = \"9\"  # flag"),
        "{}",
        text(&shown.stdout)
    );
}

/// Every global setting (the ledger, processor and limiter settings `keys` takes) with a valid value
/// other than its default.
const GLOBAL_SETTINGS: [(&str, &str); 33] = [
    ("adyen_api_key", "adyen_test_other"),
    ("adyen_merchant_account", "OtherECOM"),
    ("adyen_url", "http://127.0.0.1:2"),
    ("database_url", "sqlite:elsewhere.db"),
    ("db_connect_timeout_ms", "5000"),
    ("db_max_connections", "3"),
    ("db_pooler", "session"),
    ("direct_database_url", "postgres://direct.invalid/payonce"),
    ("key_retention_s", "600"),
    ("key_secret", "a-secret-of-the-test"),
    ("limiter", "off"),
    ("limiter_account", "acct_test"),
    ("limiter_burst", "7"),
    ("limiter_expected_processes", "2"),
    ("limiter_global_per_second", "50"),
    ("limiter_key_prefix", "test:limiter"),
    ("limiter_read_per_second", "40"),
    ("limiter_read_reserved_percent", "10"),
    ("limiter_redis_ca_file", "/etc/payonce/redis-ca.pem"),
    ("limiter_redis_url", "redis://127.0.0.1:1"),
    ("limiter_timeout_ms", "250"),
    ("limiter_write_per_second", "30"),
    ("limiter_write_reserved_percent", "40"),
    ("metrics_listen", "127.0.0.1:0"),
    ("processor_connect_timeout_ms", "1500"),
    ("processor_contract", "no-lookup"),
    ("processor_http2", "true"),
    ("processor_idle_connections", "8"),
    ("processor_kind", "adyen"),
    ("processor_secret_key", "sk_test_other"),
    ("processor_timeout_ms", "9000"),
    ("processor_url", "http://127.0.0.1:1"),
    ("stripe_url", "http://127.0.0.1:3"),
];

#[tokio::test]
async fn global_settings_flags_are_accepted_before_the_command_as_after_it() {
    let dir = scratch("op-flags-before");
    // The global settings as the binary documents them: those `keys` takes (every ledger command
    // does). A new one fails here until the list above has it.
    let reference = run(&dir, &["config", "reference"], &[]).await;
    let mut documented: Vec<String> = text(&reference.stdout)
        .lines()
        .filter_map(|row| {
            let cells: Vec<&str> = row.split(" | ").collect();
            let commands = cells.get(4)?;
            commands.split(", ").any(|c| c == "keys").then(|| {
                cells[0]
                    .trim_start_matches("| ")
                    .trim_matches('`')
                    .to_string()
            })
        })
        .collect();
    documented.sort();
    let listed: Vec<String> = GLOBAL_SETTINGS.iter().map(|(k, _)| k.to_string()).collect();
    assert_eq!(documented, listed, "{}", text(&reference.stdout));

    // `config show` reports each setting's value and source: every flag before `config show`, then
    // every flag after it, give the same report, each value from the flag.
    let flags: Vec<String> = GLOBAL_SETTINGS
        .iter()
        .flat_map(|(k, v)| [format!("--{}", k.replace('_', "-")), v.to_string()])
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let before = run(&dir, &[&flags[..], &["config", "show"]].concat(), &[]).await;
    let after = run(&dir, &[&["config", "show"][..], &flags[..]].concat(), &[]).await;
    for out in [&before, &after] {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let shown = text(&before.stdout);
    assert_eq!(shown, text(&after.stdout));
    for (key, value) in GLOBAL_SETTINGS {
        let line = if [
            "adyen_api_key",
            "key_secret",
            "processor_secret_key",
            "limiter_redis_url",
        ]
        .contains(&key)
        {
            format!("# {key} = \"(set)\"  # flag; a secret, not shown")
        } else {
            format!("{key} = {value:?}  # flag")
        };
        assert!(shown.lines().any(|l| l == line), "{line} in\n{shown}");
    }

    // Real commands, the ledger flag before them: a key created there is listed from there.
    let url = migrated(&dir, "before.db").await;
    let create = run(
        &dir,
        &[
            "--database-url",
            &url,
            "keys",
            "create",
            "--tenant",
            "acme",
            "--role",
            "on_call",
        ],
        &[],
    )
    .await;
    assert_eq!(create.status.code(), Some(0), "{}", text(&create.stderr));
    let listed = run(
        &dir,
        &["--database-url", &url, "keys", "list", "--json"],
        &[],
    )
    .await;
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    assert!(text(&listed.stdout).contains("\"acme\""), "{listed:?}");
    let list = run(&dir, &["--database-url", &url, "reconciler", "list"], &[]).await;
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    // Before the command, a typo'd ledger is still refused (the flag reached the command).
    let typo = run(
        &dir,
        &["--database-url", "sqlite:ledgr.db", "keys", "list"],
        &[],
    )
    .await;
    assert_ne!(typo.status.code(), Some(0));
    assert!(text(&typo.stderr).contains("ledgr.db"), "{typo:?}");

    // A command that does not take the setting refuses it, before its name as after it.
    for args in [
        &["--database-url", &url, "probe", "http://127.0.0.1:1/"][..],
        &[
            "--processor-url",
            "http://127.0.0.1:1",
            "config",
            "reference",
        ][..],
        &["probe", "http://127.0.0.1:1/", "--database-url", &url][..],
    ] {
        let out = run(&dir, args, &[]).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(text(&out.stderr).contains("does not take --"), "{out:?}");
    }
}

#[tokio::test]
async fn a_sqlite_ledger_that_does_not_exist_is_refused_by_every_command_but_migrate_serve_and_demo()
 {
    let dir = scratch("op-typo-ledger");
    let url = "sqlite:ledgr.db";
    let sim = "http://127.0.0.1:1";
    let commands: [&[&str]; 10] = [
        &["keys", "list"],
        &["keys", "create", "--tenant", "acme", "--role", "service"],
        &["create-key", "--tenant", "acme", "--role", "service"],
        &["reconciler", "list"],
        &["reconciler", "show", "op_00000000000000000000000000000000"],
        &["reconciler", "sweep", "--once", "--processor-url", sim],
        &[
            "tenant",
            "set-verification",
            "--tenant",
            "acme",
            "--method",
            "signed-assertion",
            "--key-id",
            "k1",
        ],
        &["prune"],
        &["worker", "--processor-url", sim],
        &["api", "--listen", "127.0.0.1:0"],
    ];
    for args in commands {
        let mut args = args.to_vec();
        args.extend(["--database-url", url]);
        let out = run(&dir, &args, &[]).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let expected = format!("no ledger at {}", dir.join("ledgr.db").display());
        assert!(stderr.contains(&expected), "{args:?}: {stderr}");
        assert!(
            stderr.contains("payonce migrate --database-url sqlite:ledgr.db"),
            "{stderr}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "{args:?} created {left:?}");
    }
    // `migrate` creates it; then the same command finds it.
    let out = run(&dir, &["migrate", "--database-url", url], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&dir, &["reconciler", "list", "--database-url", url], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test]
async fn an_unreachable_postgres_fails_within_the_connect_timeout_naming_host_and_cause() {
    let dir = scratch("op-unreachable-pg");
    let port = free_port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/test");
    let out = tokio::time::timeout(
        // Liveness bound only: the command itself stops at its 1 s connect timeout.
        Duration::from_secs(30),
        run(
            &dir,
            &[
                "reconciler",
                "list",
                "--database-url",
                &url,
                "--db-connect-timeout-ms",
                "1000",
            ],
            &[],
        ),
    )
    .await
    .expect("gives up at its connect timeout");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(
        last.starts_with(&format!(
            "payonce: opening the ledger at postgres://…@127.0.0.1:{port}/test: could not connect to the database at 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
    assert!(last.contains("Connection refused"), "{stderr}");
    assert!(!stderr.contains("pool timed out"), "{stderr}");
}

#[tokio::test]
async fn an_error_prints_once_without_colour_or_internal_detail_and_suggests_the_fix() {
    let dir = scratch("op-errors");
    let url = migrated(&dir, "ledger.db").await;
    let cases: [(&[&str], &str); 3] = [
        (
            &["reconciler", "list", "--limit", "0"],
            "payonce: page size must be 1..=10000",
        ),
        (
            &["reconciler", "list", "--status", "needs-attention"],
            "payonce: unknown status \"needs-attention\" (did you mean `needs_attention`?); the states are awaiting_approval, ready, executing, succeeded, failed, rejected, unknown, needs_attention, cancelled",
        ),
        (
            &["keys", "create", "--tenant", "acme", "--role", "oncall"],
            "payonce: unknown role \"oncall\" (did you mean `on_call`?): a role is service, assistant or on_call",
        ),
    ];
    for (args, expected) in cases {
        let mut args = args.to_vec();
        args.extend(["--database-url", &url]);
        // RUST_LOG at info: a logged copy of the error would show.
        let out = run(&dir, &args, &[("RUST_LOG", "info")]).await;
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(text(&out.stderr), format!("{expected}\n"), "{args:?}");
    }
    // With --log-format json the one copy is the JSON line, for the log collector.
    let out = run(
        &dir,
        &[
            "reconciler",
            "list",
            "--limit",
            "0",
            "--log-format",
            "json",
            "--database-url",
            &url,
        ],
        &[],
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let line: serde_json::Value = serde_json::from_str(stderr.trim()).unwrap();
    assert_eq!(line["level"], "ERROR");
    assert_eq!(line["fields"]["message"], "page size must be 1..=10000");
    // Log lines of a process whose stderr is not a terminal carry no colour codes.
    let out = run(
        &dir,
        &[
            "reconciler",
            "list",
            "--database-url",
            "postgres://postgres@127.0.0.1:1/x",
            "--db-connect-timeout-ms",
            "1000",
        ],
        &[],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(stderr.contains("WARN"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    // A database refusal reads as the database's message, without the server's source line.
    let out = run(
        &dir,
        &[
            "keys",
            "list",
            "--database-url",
            "postgres://nobody_issue_39@127.0.0.1:5432/test",
        ],
        &[],
    )
    .await;
    assert_eq!(
        text(&out.stderr).lines().last().unwrap_or_default(),
        "payonce: opening the ledger at postgres://…@127.0.0.1:5432/test: could not connect to the \
         database at 127.0.0.1:5432 (attempts: 1 in 0 ms): error returned from database: role \
         \"nobody_issue_39\" does not exist"
            .replace("in 0 ms", &format!("in {} ms", waited_ms(&text(&out.stderr)))),
    );
    // clap's own suggestions for a misspelt flag or subcommand.
    let out = run(&dir, &["keys", "list", "--databse-url", &url], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("a similar argument exists: '--database-url'"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn the_cli_records_an_on_call_actor_as_the_console_does() {
    let dir = scratch("op-actor");
    let url = migrated(&dir, "ledger.db").await;
    let ledger = payonce_ledger::connect(&url, 1).await.unwrap();
    let now = SystemClock.now();
    let op = ready_operation(&ledger, "INV-39", "pm_card_visa", now).await;
    let worker = rows::holder("test-worker", Duration::from_secs(30));
    rows::unknown(&ledger, &op.id, &worker, now + Duration::from_secs(60), now).await;
    drop(ledger);
    let out = run(
        &dir,
        &[
            "reconciler",
            "resolve",
            op.id.as_str(),
            "--as",
            "failed",
            "--reason",
            "card issuer says no charge",
            "--actor",
            "ann",
            "--database-url",
            &url,
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ledger = payonce_ledger::connect(&url, 1).await.unwrap();
    let events = ledger.events(&tenant(), &op.id).await.unwrap();
    let resolved = events.last().unwrap();
    assert_eq!(resolved.actor, "on_call:ann", "{events:#?}");
}

#[tokio::test]
async fn config_show_output_saved_as_a_file_never_makes_a_placeholder_the_secret() {
    let dir = scratch("op-config-secret");
    let out = run(
        &dir,
        &["config", "show"],
        &[
            (
                "PAYONCE_KEY_SECRET",
                "a-real-secret-of-some-length-0123456789",
            ),
            ("PAYONCE_ADYEN_API_KEY", "AQE-a-real-adyen-api-key"),
            ("PAYONCE_ADYEN_HMAC_KEY", "44782def547aaa06c910c43932b1eb0c"),
        ],
    )
    .await;
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!shown.contains("a-real-secret"), "{shown}");
    // Adyen's API key and HMAC key are secrets too.
    assert!(
        !shown.contains("a-real-adyen-api-key") && !shown.contains("44782def"),
        "{shown}"
    );
    for key in ["adyen_api_key", "adyen_hmac_key"] {
        assert!(
            shown.contains(&format!("# {key} = \"(set)\"  # env; a secret, not shown")),
            "{shown}"
        );
    }
    assert!(
        shown.contains("# key_secret = \"(set)\"  # env; a secret, not shown"),
        "{shown}"
    );
    // Saved as is, the file parses and sets no secret: the key secret stays the environment's.
    std::fs::write(dir.join("saved.toml"), &shown).unwrap();
    let again = run(&dir, &["--config", "saved.toml", "config", "show"], &[]).await;
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).contains("key_secret = \"\"  # default"),
        "{}",
        text(&again.stdout)
    );
    // Uncommented by hand, the placeholder is refused, naming the key.
    std::fs::write(dir.join("edited.toml"), "key_secret = \"(set)\"\n").unwrap();
    let refused = run(&dir, &["--config", "edited.toml", "config", "show"], &[]).await;
    assert_eq!(refused.status.code(), Some(2));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains(
            "key `key_secret` has an invalid value \"(set)\": that is `config show`'s placeholder"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_payment_method_the_processor_does_not_know_fails_after_one_submission_with_its_message()
{
    for ledger in crate::support::every_store().await {
        let sim = crate::support::processes::simulator(Default::default()).await;
        let op = ready_operation(
            &ledger,
            "INV-39-PM",
            "pm_card_doesNotExist",
            SystemClock.now(),
        )
        .await;
        let worker = payonce_worker::Worker::new(
            ledger.clone(),
            crate::support::processes::stripe(&sim, None),
            std::sync::Arc::new(SystemClock),
            payonce_worker::WorkerConfig::new("op-invalid-request"),
        )
        .unwrap();
        assert_eq!(worker.run_once().await.unwrap(), 1);
        let after = ledger.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(after.status, payonce_core::state::Status::Failed);
        assert_eq!(after.submit_count, 1);
        assert_eq!(after.failure_code.as_deref(), Some("resource_missing"));
        assert_eq!(
            after.failure_message.as_deref(),
            Some("No such PaymentMethod: 'pm_card_doesNotExist'")
        );
        // Nothing is left for a worker or a human: no second claim, nothing needs attention.
        assert_eq!(worker.run_once().await.unwrap(), 0);
        assert_eq!(
            crate::support::processes::payments_for(&sim, op.id.as_str()).await,
            0
        );
    }
}

/// Creates `invoice`'s payment approved until `expires_at`; returns its id.
async fn approved_until(
    ledger: &payonce_ledger::SharedLedger,
    invoice: &str,
    expires_at: payonce_core::clock::Timestamp,
) -> payonce_core::id::OperationId {
    let now = SystemClock.now();
    let d = crate::support::details(invoice, 2048, "pm_card_visa");
    let row = rows::created(ledger, &tenant(), invoice, d, now)
        .await
        .operation;
    rows::approved(ledger, &row, expires_at, now).await.id
}

/// A worker of `ledger` whose submissions go to `processor`, retrying what could not reach it after
/// `retry_base` up to `retry_max`.
fn outage_worker(
    ledger: &payonce_ledger::SharedLedger,
    processor: std::sync::Arc<dyn payonce_processor::Processor>,
    retry_base: Duration,
    retry_max: Duration,
) -> payonce_worker::Worker {
    let mut config = payonce_worker::WorkerConfig::new("op-outage");
    config.submit.attempt_max = 2;
    config.submit.retry_base = retry_base;
    config.submit.retry_max = retry_max;
    payonce_worker::Worker::new(
        ledger.clone(),
        processor,
        std::sync::Arc::new(SystemClock),
        config,
    )
    .unwrap()
}

#[tokio::test]
async fn an_unreachable_processor_keeps_payments_waiting_until_their_approval_runs_out() {
    use payonce_core::state::Status;
    use payonce_processor::reachability;
    use payonce_processor::stripe::{StripeConfig, StripeProcessor};
    let port = free_port();
    let processor: std::sync::Arc<dyn payonce_processor::Processor> = std::sync::Arc::new(
        StripeProcessor::new(StripeConfig::new(
            format!("http://127.0.0.1:{port}"),
            "sk_test_payonce",
        ))
        .unwrap(),
    );
    let now = SystemClock.now();
    // A payment whose approval runs out (in 5 min) before its next try (10 min later) goes to a
    // human at once, with that reason.
    let short = crate::support::sqlite_ledger().await;
    let expires = approved_until(&short, "INV-39-EXPIRES", now + Duration::from_secs(300)).await;
    let slow = outage_worker(
        &short,
        processor.clone(),
        Duration::from_secs(600),
        Duration::from_secs(600),
    );
    assert_eq!(slow.run_once().await.unwrap(), 1);
    let human = short.get(&tenant(), &expires).await.unwrap();
    assert_eq!(human.status, Status::NeedsAttention, "{human:?}");
    let events = short.events(&tenant(), &expires).await.unwrap();
    let why = events.last().unwrap().detail.clone().unwrap_or_default();
    assert!(
        why.starts_with("the processor stayed unreachable until the approval's validity ran out"),
        "{events:#?}"
    );
    assert!(
        why.contains("nothing was sent: could not connect to the processor"),
        "{why}"
    );

    // One approved for an hour waits, claim after claim, past `attempt_max` (2).
    let ledger = crate::support::sqlite_ledger().await;
    let waits = approved_until(&ledger, "INV-39-WAIT", now + Duration::from_secs(3_600)).await;
    let worker = outage_worker(
        &ledger,
        processor,
        Duration::from_millis(20),
        Duration::from_millis(40),
    );
    crate::support::wait_for(
        "four claims of the waiting payment",
        Duration::from_secs(30),
        || async {
            worker.run_once().await.unwrap();
            let op = ledger.get(&tenant(), &waits).await.unwrap();
            (op.attempt >= 4).then_some(())
        },
    )
    .await;
    let op = ledger.get(&tenant(), &waits).await.unwrap();
    assert_eq!(op.status, Status::Ready, "{op:?}");
    assert!(reachability::process().down_since().is_some());
    let mut e = payonce_core::metrics::Exposition::default();
    reachability::process().render(&mut e);
    assert!(e.finish().contains("payonce_processor_reachable 0\n"));

    // The processor comes back on that address: the waiting payment is paid once, and the process
    // notes the recovery.
    let listen: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let sim = crate::support::processes::simulator(payonce_simulator::SimulatorConfig {
        listen,
        ..Default::default()
    })
    .await;
    crate::support::wait_for(
        "the waiting payment to be paid",
        Duration::from_secs(30),
        || async {
            worker.run_once().await.unwrap();
            let op = ledger.get(&tenant(), &waits).await.unwrap();
            (op.status == Status::Succeeded).then_some(())
        },
    )
    .await;
    assert_eq!(reachability::process().down_since(), None);
    assert_eq!(
        crate::support::processes::payments_for(&sim, waits.as_str()).await,
        1
    );
    assert_eq!(
        crate::support::processes::payments_for(&sim, expires.as_str()).await,
        0
    );
}

/// Runs `script` in `sh` with a clean environment but `PATH`; returns (exit code, stdout, stderr).
async fn shell(script: &str) -> (i32, String, String) {
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[tokio::test]
async fn the_serve_banners_commands_run_as_printed_from_needs_attention_to_paid() {
    let dir = scratch("op-banner");
    let mut child = crate::serve::serve_command(
        &dir,
        &[],
        "sqlite:banner.db",
        // As the README's walk-through: a lost outcome reaches on-call instead of a same-key retry.
        &["--key-retention-s", "1"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
    .spawn()
    .unwrap();
    let mut stdout = crate::serve::stdout_lines(&mut child);
    let banner = crate::serve::read_banner(&mut stdout, crate::serve::START_DEADLINE).await;
    let lines: Vec<&str> = banner.iter().map(|l| l.trim()).collect();
    let exports: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("export ") && !l.starts_with("export OP_ID"))
        .collect();
    assert_eq!(
        exports.len(),
        1,
        "one line sets every variable: {banner:#?}"
    );
    for variable in [
        "PAYONCE_API=",
        "PAYONCE_PROCESSOR_URL=",
        "PAYONCE_KEY_RETENTION_S=",
        "PAYONCE=",
        "PAYONCE_DATABASE_URL=",
        "SERVICE_KEY=",
        "ASSISTANT_KEY=",
        "ON_CALL_KEY=",
    ] {
        assert!(
            exports[0].contains(&format!(" {variable}\"")),
            "{variable}: {banner:#?}"
        );
    }
    let printed = |what: &str| -> &str {
        lines
            .iter()
            .copied()
            .find(|l| (l.starts_with("curl ") || l.starts_with("\"$PAYONCE\"")) && l.contains(what))
            .unwrap_or_else(|| panic!("no command with {what:?} in {banner:#?}"))
    };
    let fault = printed("/_sim/faults");
    let create = printed("\"$PAYONCE_API/v1/operations\"");
    let request = printed("/approval-requests");
    let status = printed("\"$PAYONCE_API/v1/operations/$OP_ID\"");
    let show = printed("reconciler show");
    let resolve = printed("reconciler resolve");
    let at = |command: &str| lines.iter().position(|l| *l == command).unwrap();
    assert!(at(fault) < at(create), "printed in the order they run");
    let prelude = exports.join("\n");
    let sh = |command: &str, prelude: &str| {
        let script = format!("{prelude}\n{command}");
        async move {
            let (code, out, err) = shell(&script).await;
            assert_eq!(code, 0, "{script}\n{out}{err}");
            out
        }
    };

    // The processor's next answer is a 500; then create and request approval, as printed.
    sh(fault, &prelude).await;
    let created: serde_json::Value = serde_json::from_str(&sh(create, &prelude).await).unwrap();
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["status"], "awaiting_approval");
    let prelude = format!("{prelude}\nexport OP_ID=\"{id}\"");
    let requested: serde_json::Value = serde_json::from_str(&sh(request, &prelude).await).unwrap();
    assert!(requested["expires_at_ms"].is_i64(), "{requested}");
    // The customer: the tenant app's marked line carries the link and its code.
    let sms = crate::serve::tenant_app_line(&mut stdout, crate::serve::START_DEADLINE).await;
    let words: Vec<&str> = sms.split_whitespace().collect();
    let link = words.iter().find(|w| w.contains("/confirm/")).unwrap();
    let otp = words.last().unwrap();
    let http = crate::api::http_client();
    let approved = http
        .post(*link)
        .form(&[
            ("details_hash", created["details_hash"].as_str().unwrap()),
            ("code", otp),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
    // The status, as printed: the 500 left the outcome unknown and the key's window shut, so the
    // reconciler hands it to a human.
    let status_is = |want: &'static str| {
        let prelude = prelude.clone();
        async move {
            crate::support::wait_for(want, crate::serve::START_DEADLINE, || {
                let prelude = prelude.clone();
                async move {
                    let op: serde_json::Value =
                        serde_json::from_str(&sh(status, &prelude).await).unwrap();
                    (op["status"] == want).then_some(op)
                }
            })
            .await
        }
    };
    status_is("needs_attention").await;
    // On-call checks first, as printed: the CLI looks it up at serve's simulator (at any other
    // processor the lookup is unavailable).
    let shown = sh(show, &prelude).await;
    assert!(shown.contains("no payment found"), "{shown}");
    // On-call resolves it as printed; the worker retries with the same key and it is paid once.
    sh(resolve, &prelude).await;
    let paid = status_is("succeeded").await;
    assert!(
        paid["external_ref"].as_str().unwrap().starts_with("pi_"),
        "{paid}"
    );
    let (_, processor, _) =
        shell(&format!("{prelude}\nprintf %s \"$PAYONCE_PROCESSOR_URL\"")).await;
    let ours = crate::support::processes::payments_at(&processor, id).await;
    assert_eq!(ours, 1, "one payment at the processor");
    // The CLI after the export line: `show` finds the payment and a cron sweep scans serve's simulator.
    let shown = sh(show, &prelude).await;
    assert!(shown.contains(" succeeded ("), "{shown}");
    let swept: serde_json::Value =
        serde_json::from_str(&sh("\"$PAYONCE\" reconciler sweep --once --json", &prelude).await)
            .unwrap();
    assert_eq!(swept["report"]["scan"]["complete"], true, "{swept}");
    assert!(
        swept["report"]["scan"]["scanned"].as_u64() >= Some(1),
        "{swept}"
    );

    // 4. The console at the printed address takes the printed on-call key.
    let console = banner
        .iter()
        .map(|l| l.trim())
        .find(|l| l.starts_with("http") && l.ends_with("/console"))
        .unwrap_or_else(|| panic!("{banner:#?}"))
        .to_string();
    let (_, on_call, _) = shell(&format!("{prelude}\nprintf %s \"$ON_CALL_KEY\"")).await;
    // A browser's sign-in: the form's token is both its cookie and its field.
    let cookie = |r: &reqwest::Response, name: &str| -> Option<String> {
        r.headers().get_all("set-cookie").iter().find_map(|v| {
            let v = v.to_str().ok()?;
            v.strip_prefix(&format!("{name}="))
                .map(|rest| rest.split(';').next().unwrap_or_default().to_string())
        })
    };
    let form = http.get(format!("{console}/sign-in")).send().await.unwrap();
    assert_eq!(form.status(), 200);
    let token = cookie(&form, "payonce_console_sign_in").unwrap();
    let signed_in = http
        .post(format!("{console}/sign-in"))
        .header("cookie", format!("payonce_console_sign_in={token}"))
        .form(&[("csrf", token.as_str()), ("key", on_call.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303, "the on-call key signs in");
    let session = cookie(&signed_in, "payonce_console").unwrap();
    let overview = http
        .get(&console)
        .header("cookie", format!("payonce_console={session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(overview.status(), 200);
    assert!(
        overview
            .text()
            .await
            .unwrap()
            .contains("Operations by state")
    );

    // The MCP client configuration: its server answers `initialize` with the key it carries.
    let mcp: serde_json::Value = serde_json::from_str(banner[banner.len() - 3].trim())
        .unwrap_or_else(|e| panic!("{e}: {banner:#?}"));
    let server = &mcp["mcpServers"]["payonce"];
    let init = http
        .post(server["url"].as_str().unwrap())
        .header(
            "authorization",
            server["headers"]["Authorization"].as_str().unwrap(),
        )
        .header("accept", "application/json, text/event-stream")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "banner", "version": "0"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(init.status(), 200);
    assert!(init.text().await.unwrap().contains("\"result\""));
    let exit = crate::serve::sigterm_and_wait(&mut child).await;
    assert!(exit.success(), "{exit}");
}

#[tokio::test]
async fn serve_exits_when_its_api_cannot_start() {
    let dir = scratch("op-serve-api-refused");
    for (flag, value, expected) in [
        (
            "--webhook-secrets",
            "whsec_payonce_simulator",
            "webhook_secrets contains the simulator's published default secret",
        ),
        (
            "--header-read-timeout-ms",
            "0",
            "header_read_timeout_ms must be greater than zero",
        ),
        (
            "--connections-max",
            "0",
            "connections_max must be greater than zero",
        ),
    ] {
        let out = tokio::time::timeout(
            crate::serve::START_DEADLINE,
            run(
                &dir,
                &[&serve_args("sqlite:refused.db")[..], &[flag, value]].concat(),
                &[],
            ),
        )
        .await
        .expect("serve exits instead of running without an api");
        assert_eq!(out.status.code(), Some(1), "{flag}");
        assert_eq!(text(&out.stdout), "", "{flag}: no banner, no keys");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "payonce: the api cannot start with these settings: {expected}"
            )),
            "{flag}: {stderr}"
        );
    }
}

#[tokio::test]
async fn the_simulator_takes_basic_auth_expands_on_retrieve_and_refuses_unknown_parameters() {
    let sim = crate::support::processes::simulator(Default::default()).await;
    let base = sim.base_url();
    let http = crate::api::http_client();
    // HTTP Basic with the key as the user and no password, as `curl -u sk_test_…:` sends it.
    let created: serde_json::Value = http
        .post(format!("{base}/v1/payment_intents"))
        .basic_auth("sk_test_payonce", Some(""))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(crate::simulator::create_form(
            2048,
            "pm_card_visa",
            "op_basic",
        ))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap();
    let charge = created["latest_charge"].as_str().unwrap();
    let wrong = http
        .get(format!("{base}/v1/payment_intents/{id}"))
        .basic_auth("sk_test_wrong", Some(""))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let get = |query: &'static str| {
        let http = http.clone();
        let url = format!("{base}/v1/payment_intents/{id}{query}");
        async move {
            let r = http
                .get(url)
                .bearer_auth("sk_test_payonce")
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let (status, plain) = get("").await;
    assert_eq!(
        (status, plain["latest_charge"].as_str()),
        (200, Some(charge))
    );
    let (status, expanded) = get("?expand[]=latest_charge").await;
    assert_eq!(status, 200);
    assert_eq!(expanded["latest_charge"]["id"], charge);
    assert_eq!(expanded["latest_charge"]["object"], "charge");
    assert_eq!(expanded["latest_charge"]["payment_intent"], id);
    let (status, unknown) = get("?expnd[]=latest_charge").await;
    assert_eq!(status, 400);
    assert_eq!(unknown["error"]["code"], "parameter_unknown");
    assert_eq!(unknown["error"]["param"], "expnd[]");
    let (status, refused) = get("?expand[]=customer").await;
    assert_eq!(status, 400);
    assert_eq!(
        refused["error"]["message"],
        "This property cannot be expanded (customer)."
    );
    // A refund expands the payment it gives money back from, and its charge.
    let refund: serde_json::Value = http
        .post(format!("{base}/v1/refunds"))
        .bearer_auth("sk_test_payonce")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("payment_intent={id}&amount=500"))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    let re = refund["id"].as_str().unwrap();
    let expanded: serde_json::Value = http
        .get(format!(
            "{base}/v1/refunds/{re}?expand[]=payment_intent&expand[]=charge"
        ))
        .bearer_auth("sk_test_payonce")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(expanded["payment_intent"]["id"], id, "{expanded}");
    assert_eq!(expanded["payment_intent"]["object"], "payment_intent");
    assert_eq!(expanded["charge"]["id"], charge);
    assert_eq!(expanded["charge"]["amount_refunded"], 500);
    sim.shutdown().await;
}

#[test]
fn a_sweep_that_did_and_found_nothing_is_idle_and_logs_at_debug() {
    use payonce_reconciler::sweep::SweepReport;
    assert!(SweepReport::default().is_idle());
    let acted = SweepReport {
        actions: vec!["op_… unknown → succeeded".into()],
        resolved_succeeded: 1,
        ..SweepReport::default()
    };
    assert!(!acted.is_idle());
    let failed = SweepReport {
        errors: 1,
        ..SweepReport::default()
    };
    assert!(!failed.is_idle(), "an error is never idle");
}
