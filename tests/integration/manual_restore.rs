//! Restores done by hand (issue 49): what people do around a restore must not pay twice, and the
//! alarm must not stay silent.
//!
//! - daemons started with another key secret after a restore refuse to run (the ledger keeps the
//!   secret's fingerprint), and a SQLite ledger copied without its secret file is refused, as is
//!   a secret file that is a link to nothing;
//! - upstream re-sending a lost invoice with a recomputed amount reaches the processor under the
//!   business action's key: one payment, and a human sees both with the first one's reference;
//! - the same intention re-sent to a row the scan recreated settles it, without a human;
//! - `reconciler sweep --once` never says all clear when it could not look (processor down, sweep
//!   lease held by a reconciler that is gone).
//!
//! The backup and the restore are real (`pg_dump`, `psql`), as are the `payonce` processes.

use crate::lost_ledger::{backup, create_and_approve_amount, paid, restore, work};
use crate::support::processes::{self};
use crate::support::{self, KEY_SECRET, details, key_secret, tenant};
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::id::BusinessKey;
use payonce_core::state::Status;
use payonce_ledger::{
    self as ledger, LOST_ROW_RECREATED, NewOperation, intake::Batch, intake::BatchApproval,
    intake::BatchItem,
};
use payonce_simulator::SimulatorConfig;
use std::time::Duration;

/// A valid secret that is not the one the tests' ledgers were used with.
const OTHER_SECRET: &str = "another-vault-entry-0123456789-abcdefghijklmnop";
/// Longest a refusing process may take to exit (it refuses before serving anything).
const REFUSAL_WITHIN: Duration = Duration::from_secs(60);

/// Runs `payonce args…` on `database_url` with `secret` and returns (exit code, stdout, stderr).
async fn payonce(
    args: &[&str],
    database_url: &str,
    secret: &str,
    processor_url: &str,
) -> (Option<i32>, String, String) {
    let mut cmd = tokio::process::Command::new(support::payonce_bin());
    cmd.args(args)
        .env("PAYONCE_DATABASE_URL", database_url)
        .env("PAYONCE_PROCESSOR_URL", processor_url)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    if !secret.is_empty() {
        cmd.env("PAYONCE_KEY_SECRET", secret);
    }
    let out = tokio::time::timeout(REFUSAL_WITHIN, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("payonce {args:?} did not exit within {REFUSAL_WITHIN:?}"))
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `payonce migrate` with the tests' secret: the ledger records its fingerprint.
async fn migrate(url: &str, processor_url: &str) {
    let (code, stdout, stderr) = payonce(&["migrate"], url, KEY_SECRET, processor_url).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&key_secret().fingerprint()),
        "migrate names the secret's fingerprint: {stdout}"
    );
}

#[tokio::test]
async fn another_key_secret_after_a_restore_stops_every_process_and_pays_nothing() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    migrate(&url, &sim.base_url()).await;
    let dump = backup(&url);
    let lost = create_and_approve_amount(&ledger, "INV-4901", 2048).await;
    work(&ledger, &sim).await;
    assert_eq!(paid(&sim).await.len(), 1);

    let restored = restore(&dump).await;
    let port = crate::serve::free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    for args in [
        vec!["api", "--listen", &listen],
        vec!["worker"],
        vec!["reconciler", "run"],
        vec!["reconciler", "sweep", "--once"],
        vec!["migrate"],
    ] {
        let (code, stdout, stderr) = payonce(&args, &restored, OTHER_SECRET, &sim.base_url()).await;
        assert!(
            code.is_some_and(|c| c != 0),
            "payonce {args:?} must refuse: {code:?}\n{stdout}\n{stderr}"
        );
        assert!(
            stderr.contains("is not this ledger's")
                && stderr.contains(&key_secret().fingerprint())
                && !stderr.contains(OTHER_SECRET),
            "payonce {args:?} says why, naming fingerprints and never the secret: {stderr}"
        );
    }
    // Nothing was created, claimed or paid: the lost invoice's only payment is the first one.
    let restored_ledger = ledger::connect(&restored, 2).await.unwrap();
    assert!(matches!(
        restored_ledger.get(&tenant(), &lost.id).await,
        Err(ledger::LedgerError::NotFound)
    ));
    assert_eq!(paid(&sim).await.len(), 1);

    // The right secret still works on the same restored ledger.
    let (code, stdout, stderr) = payonce(
        &["reconciler", "sweep", "--once"],
        &restored,
        KEY_SECRET,
        &sim.base_url(),
    )
    .await;
    assert_eq!(
        code,
        Some(3),
        "it finds the lost payment: {stdout}\n{stderr}"
    );
}

/// A ledger from before fingerprints is checked against its own derived operation ids, once.
#[tokio::test]
async fn a_ledger_without_a_fingerprint_is_checked_against_its_derived_ids() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    create_and_approve_amount(&ledger, "INV-4902", 2048).await;
    let (code, _, stderr) = payonce(&["worker"], &url, OTHER_SECRET, &sim.base_url()).await;
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("was not derived with it"),
        "the derived id tells: {stderr}"
    );
    // Nothing was recorded by the refusal: the right secret is then taken and recorded.
    migrate(&url, &sim.base_url()).await;
    let evidence = ledger.identity().secret_evidence().await.unwrap();
    assert_eq!(evidence.fingerprint, Some(key_secret().fingerprint()));
}

#[tokio::test]
async fn a_sqlite_ledger_copied_without_its_secret_file_is_refused() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let dir = std::env::temp_dir().join(format!(
        "payonce-copied-{}",
        payonce_core::id::random_hex(6)
    ));
    std::fs::create_dir_all(dir.join("copy")).unwrap();
    let original = format!("sqlite:{}/ledger.db", dir.display());
    // The quick start's way: no secret configured, the file beside the ledger keeps one.
    let (code, stdout, stderr) = payonce(&["migrate"], &original, "", &sim.base_url()).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(dir.join("ledger.db.key-secret").exists());

    // Every file of the ledger (its write-ahead log too), but not the secret beside it.
    for file in ["ledger.db", "ledger.db-wal", "ledger.db-shm"] {
        if dir.join(file).exists() {
            std::fs::copy(dir.join(file), dir.join("copy").join(file)).unwrap();
        }
    }
    let copy = format!("sqlite:{}/copy/ledger.db", dir.display());
    for args in [vec!["worker"], vec!["reconciler", "sweep", "--once"]] {
        let (code, stdout, stderr) = payonce(&args, &copy, "", &sim.base_url()).await;
        assert!(
            code.is_some_and(|c| c != 0),
            "payonce {args:?} on a copy without its secret: {code:?}\n{stdout}\n{stderr}"
        );
        assert!(
            stderr.contains("key secret file") && stderr.contains("is missing"),
            "{stderr}"
        );
    }
    assert!(
        !dir.join("copy/ledger.db.key-secret").exists(),
        "no secret is made up for a ledger in use"
    );
    // With the file copied too, it is the same ledger.
    std::fs::copy(
        dir.join("ledger.db.key-secret"),
        dir.join("copy/ledger.db.key-secret"),
    )
    .unwrap();
    let (code, stdout, stderr) = payonce(&["migrate"], &copy, "", &sim.base_url()).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 53, item 7: a key secret file that is a link to nothing (a volume not mounted, a secret
/// not restored) is refused with a sentence naming it, by every process, on the real binary; it
/// used to overflow the stack (reading said "not found", creating said "exists", for ever).
#[tokio::test]
async fn a_key_secret_link_to_nothing_is_refused_with_a_sentence() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let dir = std::env::temp_dir().join(format!(
        "payonce-dangling-{}",
        payonce_core::id::random_hex(6)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("ledger.db.key-secret");
    std::os::unix::fs::symlink(dir.join("vault/not-mounted"), &link).unwrap();
    let url = format!("sqlite:{}/ledger.db", dir.display());
    for args in [vec!["migrate"], vec!["reconciler", "sweep", "--once"]] {
        let (code, stdout, stderr) = payonce(&args, &url, "", &sim.base_url()).await;
        assert!(
            code.is_some_and(|c| c != 0),
            "payonce {args:?} with a dangling key secret link: exit {code:?} (a signal: none)\n\
             {stdout}\n{stderr}"
        );
        assert!(
            stderr.contains("is a symbolic link to")
                && stderr.contains("not-mounted")
                && stderr.contains("does not exist"),
            "{stderr}"
        );
    }
    assert!(
        std::fs::symlink_metadata(&link).unwrap().is_symlink()
            && !dir.join("vault/not-mounted").exists(),
        "the link is left as it was, and nothing is written through it"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_recomputed_resend_after_a_restore_pays_once_and_names_the_first_payment() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    let dump = backup(&url);
    let first = create_and_approve_amount(&ledger, "INV-4903", 2048).await;
    work(&ledger, &sim).await;
    let first_ref = ledger
        .get(&tenant(), &first.id)
        .await
        .unwrap()
        .external_ref
        .unwrap();

    // The restore loses the row; upstream re-sends the invoice with a recomputed total, approved.
    let restored_db = restore(&dump).await;
    let restored = ledger::connect(&restored_db, 4).await.unwrap();
    let resent = create_and_approve_amount(&restored, "INV-4903", 2049).await;
    assert_eq!(resent.id, first.id, "the id names the business action");
    assert_eq!(
        resent.idempotency_key, first.idempotency_key,
        "so does the processor key"
    );
    work(&restored, &sim).await;

    let row = restored.get(&tenant(), &resent.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let why = row.failure_message.unwrap_or_default();
    assert!(
        why.starts_with(payonce_execution::KEY_REUSED_HEAD)
            && why.contains(&format!(
                "the first payment is {first_ref} (paid, 2048 usd)"
            ))
            && why.contains("2049 usd"),
        "both payments' facts: {why}"
    );
    // The processor's side: exactly one payment for the invoice, the first one.
    let payments = paid(&sim).await;
    assert_eq!(payments.len(), 1, "{payments:?}");
    assert_eq!(payments[0]["id"], first_ref.as_str());
    assert_eq!(payments[0]["amount"], 2048);
}

/// Upstream re-sends the same intention with its approval (the batch route's way) to a row the
/// scan recreated: it is the payment the scan found, settled without a human; other details
/// under the business key stay a conflict.
#[tokio::test]
async fn the_same_intention_resent_to_a_recreated_row_settles_it_without_a_human() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    let dump = backup(&url);
    let lost = create_and_approve_amount(&ledger, "INV-4904", 2048).await;
    let also_lost = create_and_approve_amount(&ledger, "INV-4905", 2048).await;
    crate::lost_ledger::work_counting_replays(&ledger, &sim).await;
    let restored_url = restore(&dump).await;
    let restored = ledger::connect(&restored_url, 4).await.unwrap();

    let (code, stdout, stderr) = payonce(
        &["reconciler", "sweep", "--once"],
        &restored_url,
        KEY_SECRET,
        &sim.base_url(),
    )
    .await;
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    for op in [&lost, &also_lost] {
        let row = restored.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(
            (row.status, row.failure_code.as_deref()),
            (Status::NeedsAttention, Some(LOST_ROW_RECREATED))
        );
        let detail = row.failure_message.unwrap_or_default();
        assert!(
            detail.starts_with(payonce_ledger::report::RECREATED_HEAD)
                && detail.contains("do not refund it")
                && !detail.contains("PAYMENT WITHOUT APPROVAL"),
            "one alert, one instruction: {detail}"
        );
    }
    assert!(
        !stderr.contains("payment_without_approval"),
        "no second, contrary alert: {stderr}"
    );

    // The same intention again, with its approval: settled as the payment found.
    let batch = |invoice: &str, amount: i64| {
        let d = details(invoice, amount, "pm_card_visa");
        BatchItem {
            approval: Some(BatchApproval {
                details_hash: d.hash(),
                approved_by: "mandate:upstream".into(),
            }),
            new: NewOperation::keyed(
                &key_secret(),
                tenant(),
                BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap(),
                d,
                "service:test".into(),
            ),
        }
    };
    let answers = restored
        .create_batch(
            &Batch {
                tenant: tenant(),
                items: vec![batch("INV-4904", 2048), batch("INV-4905", 4096)],
                actor: "service:test".into(),
                method: "service".into(),
                approval_expires_at: SystemClock.now() + Duration::from_secs(3_600),
            },
            SystemClock.now(),
        )
        .await
        .unwrap();
    let settled = answers[0].as_ref().unwrap();
    assert_eq!(settled.operation.status, Status::Succeeded);
    assert!(settled.operation.external_ref.is_some());
    assert!(
        matches!(&answers[1], Err(ledger::LedgerError::Conflict { existing }) if existing == &also_lost.id),
        "other details under the business key: {:?}",
        answers[1]
    );
    assert_eq!(
        restored.get(&tenant(), &also_lost.id).await.unwrap().status,
        Status::NeedsAttention
    );
    // Nothing new reached the processor: one payment per invoice.
    assert_eq!(paid(&sim).await.len(), 2);
}

/// `sweep --once` exits non-zero when it could not look: the processor down, or a sweep lease
/// held by a reconciler that is gone (here: written by "the dead primary's reconciler", as an
/// asynchronous failover replicates it), which it waits out within the lease's length.
#[tokio::test]
async fn sweep_once_never_says_all_clear_when_it_could_not_look() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    migrate(&url, &sim.base_url()).await;

    // The processor is down: nothing listens at its address.
    let down = format!("http://127.0.0.1:{}", crate::serve::free_port());
    let (code, stdout, stderr) = payonce(
        &["reconciler", "sweep", "--once", "--json"],
        &url,
        KEY_SECRET,
        &down,
    )
    .await;
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["report"]["scan"]["complete"], false, "{json}");
    assert!(json["report"]["errors"].as_u64() >= Some(1), "{json}");
    let (code, stdout, _) =
        payonce(&["reconciler", "sweep", "--once"], &url, KEY_SECRET, &down).await;
    assert_eq!(code, Some(1));
    assert!(stdout.contains("NOT CLEAR"), "the text says so: {stdout}");

    // The dead primary's reconciler held the sweep lease; a payment was lost meanwhile.
    let lease_ttl = Duration::from_secs(3);
    let sim_url = sim.base_url();
    let dump = backup(&url);
    create_and_approve_amount(&ledger, "INV-4906", 2048).await;
    work(&ledger, &sim).await;
    let restored = restore(&dump).await;
    let pool = sqlx::PgPool::connect(&restored).await.unwrap();
    // The sweep lease as `owner` left it, expiring `ahead` after the database's now.
    let hold_lease = |owner: &'static str, ahead: Duration| {
        sqlx::query(
            "INSERT INTO maintenance_leases (name, owner, expires_at) VALUES ('sweep', $1, \
             (extract(epoch from clock_timestamp()) * 1000)::bigint + $2) \
             ON CONFLICT (name) DO UPDATE SET owner = $1, expires_at = EXCLUDED.expires_at",
        )
        .bind(owner)
        .bind(i64::try_from(ahead.as_millis()).unwrap())
        .execute(&pool)
    };
    let ttl_ms = lease_ttl.as_millis().to_string();
    let args = [
        "reconciler",
        "sweep",
        "--once",
        "--sweep-lease-ttl-ms",
        ttl_ms.as_str(),
    ];
    let sweep = || payonce(&args, &restored, KEY_SECRET, &sim_url);
    hold_lease("reconciler-on-the-dead-primary", lease_ttl)
        .await
        .unwrap();
    let (code, stdout, stderr) = sweep().await;
    assert_eq!(
        code,
        Some(3),
        "swept and found the lost payment: {stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("waited") && stdout.contains("which the ledger had lost"),
        "{stdout}"
    );

    // A lease set further ahead than one length (another clock's) does not hold anyone off.
    hold_lease("ahead", Duration::from_secs(3_600))
        .await
        .unwrap();
    let (code, stdout, stderr) = sweep().await;
    assert!(
        code == Some(3) && !stdout.contains("waited"),
        "swept at once; the recreated row still needs a human: {code:?}\n{stdout}\n{stderr}"
    );
}

/// Upstream re-drives a lost invoice before any sweep: the processor replays the first payment (the
/// money is right), and the rows then agree with the processor, so no scan would call it lost.
/// The worker's record of the replay makes the next sweep raise the lost-money alert once, note it
/// on the operation, and `reconciler list` show it.
#[tokio::test]
async fn a_replayed_first_submission_is_alerted_once_noted_and_listed() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    migrate(&url, &sim.base_url()).await;
    let dump = backup(&url);
    let lost = create_and_approve_amount(&ledger, "INV-4907", 2048).await;
    work(&ledger, &sim).await;
    let restored_url = restore(&dump).await;
    let restored = ledger::connect(&restored_url, 4).await.unwrap();
    let again = create_and_approve_amount(&restored, "INV-4907", 2048).await;
    let (ran, replays) = crate::lost_ledger::work_counting_replays(&restored, &sim).await;
    assert_eq!((ran, replays), (1, 1));
    let row = restored.get(&tenant(), &again.id).await.unwrap();
    assert_eq!((row.id, row.status), (lost.id.clone(), Status::Succeeded));
    let reference = row.external_ref.unwrap();

    let sim_url = sim.base_url();
    let sweep = || {
        payonce(
            &["reconciler", "sweep", "--once"],
            &restored_url,
            KEY_SECRET,
            &sim_url,
        )
    };
    let (code, stdout, stderr) = sweep().await;
    assert_eq!(code, Some(3), "the lost-money alert: {stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "{reference}: paid for {} by a request of a row the ledger had lost",
            lost.id
        )) && stdout.contains("unknown_payments=1"),
        "{stdout}"
    );
    let events = restored.events(&tenant(), &lost.id).await.unwrap();
    assert!(
        events.iter().any(|e| e.event.as_str() == "lost_row"
            && e.detail.as_deref().unwrap_or("").starts_with("LOST ROW:")
            && e.detail.as_deref().unwrap_or("").contains(&reference)),
        "noted on the operation: {events:?}"
    );
    let (code, listed, stderr) = payonce(
        &["reconciler", "list"],
        &restored_url,
        KEY_SECRET,
        &sim.base_url(),
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        listed.contains("Paid by a row the ledger had lost")
            && listed.contains(lost.id.as_str())
            && listed.contains(&reference),
        "{listed}"
    );
    // The console's overview shows it to the tenant's on-call, and no other tenant's.
    let chart = payonce_ledger::console::Chart {
        bucket: Duration::from_secs(300),
        buckets: 12,
    };
    let overview = restored
        .console()
        .overview(&tenant(), chart, SystemClock.now())
        .await
        .unwrap();
    assert_eq!(
        overview
            .lost_rows
            .iter()
            .map(|l| (&l.operation, l.reference.as_str()))
            .collect::<Vec<_>>(),
        vec![(&lost.id, reference.as_str())]
    );
    let page =
        payonce_api::console::views::overview("csrf", &overview, SystemClock.now().as_millis(), 0)
            .into_string();
    assert!(
        page.contains("Paid by a row the ledger had lost") && page.contains(lost.id.as_str()),
        "{page}"
    );
    let other = payonce_core::id::TenantId::parse("another-tenant").unwrap();
    let theirs = restored
        .console()
        .overview(&other, chart, SystemClock.now())
        .await
        .unwrap();
    assert!(theirs.lost_rows.is_empty());
    // Alerted once: the next sweep is clear.
    let (code, stdout, stderr) = sweep().await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("unknown_payments=0"), "{stdout}");
    assert_eq!(paid(&sim).await.len(), 1);
}
