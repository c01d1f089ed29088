//! The API key lifecycle: the ledger's key methods on both stores, expired and revoked keys refused
//! over HTTP, and `payonce keys …` revoking a key in two running `payonce api` processes on one
//! Postgres database within one second.

use super::processes::two_api_processes;
use super::{T0, http_client, spawn, tenant};
use crate::support::processes::terminate;
use crate::support::{every_store, payonce_bin, postgres_ledger, sqlite_ledger, wait_for};
use payonce_api::auth::{LAST_USED_RESOLUTION, sha256_hex};
use payonce_api::keys::{self, KeyError};
use payonce_core::clock::Timestamp;
use payonce_core::id::TenantId;
use payonce_ledger::{LedgerError, Role};
use payonce_ledger::{RevokeKey, RotateKey};
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long a revocation may take to reach every api process (issue 13).
const REVOCATION_DEADLINE: Duration = Duration::from_secs(1);
/// How long a process may take to start.
const START_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn keys_expire_revoke_and_rotate_on_every_store() {
    for ledger in every_store().await {
        let store = ledger.store();
        let t0 = T0;
        let forever = keys::issue(
            ledger.as_ref(),
            &tenant(),
            Role::Service,
            "billing",
            None,
            t0,
        )
        .await
        .unwrap();
        let brief = keys::issue(
            ledger.as_ref(),
            &tenant(),
            Role::Assistant,
            "bot",
            Some(Duration::from_secs(10)),
            t0,
        )
        .await
        .unwrap();
        let find = |secret: &str, at: Timestamp| {
            let (ledger, digest) = (ledger.clone(), sha256_hex(secret));
            async move { ledger.find_api_key(&digest, at).await.unwrap() }
        };
        let found = find(&forever.secret, t0).await.expect("a new key is found");
        assert_eq!(found, forever.record, "{store}: stored as issued");
        assert!(
            find(&brief.secret, t0 + Duration::from_millis(9_999))
                .await
                .is_some(),
            "{store}"
        );
        assert!(
            find(&brief.secret, t0 + Duration::from_millis(10_000))
                .await
                .is_none(),
            "{store}: refused from its expiry on"
        );
        assert!(find("po_service_unknown", t0).await.is_none());

        // Listing: newest first, by tenant, with the public id and never the secret.
        let other = TenantId::parse("globex").unwrap();
        keys::issue(
            ledger.as_ref(),
            &other,
            Role::OnCall,
            "bob",
            None,
            t0 + Duration::from_millis(1),
        )
        .await
        .unwrap();
        let ours = ledger.list_api_keys(Some(&tenant()), 100).await.unwrap();
        assert_eq!(ours.len(), 2, "{store}");
        assert_eq!(ledger.list_api_keys(None, 100).await.unwrap().len(), 3);
        assert_eq!(
            ledger.list_api_keys(None, 1).await.unwrap()[0].tenant,
            other
        );

        // Revocation: immediate, idempotent, unknown ids named.
        assert!(
            keys::revoke(
                ledger.as_ref(),
                &brief.key_id,
                "oncall:alice",
                "leaked",
                t0 + Duration::from_millis(1)
            )
            .await
            .unwrap()
        );
        assert!(
            find(&brief.secret, t0 + Duration::from_millis(1))
                .await
                .is_none(),
            "{store}"
        );
        assert!(
            !keys::revoke(
                ledger.as_ref(),
                &brief.key_id,
                "oncall:alice",
                "again",
                t0 + Duration::from_millis(2)
            )
            .await
            .unwrap(),
            "{store}: revoking twice changes nothing"
        );
        let revoked = ledger.api_key(&brief.key_id).await.unwrap().unwrap();
        assert_eq!(revoked.revoked_at, Some(t0 + Duration::from_millis(1)));
        assert_eq!(revoked.revoked_by.as_deref(), Some("oncall:alice"));
        assert_eq!(revoked.revoked_reason.as_deref(), Some("leaked"));
        assert!(matches!(
            keys::revoke(ledger.as_ref(), "key_0000000000000000", "a", "b", t0).await,
            Err(KeyError::UnknownKey(_))
        ));
        assert!(matches!(
            ledger
                .revoke_api_key(
                    &RevokeKey {
                        key_id: "key_nope",
                        revoked_by: "a",
                        reason: "b"
                    },
                    t0
                )
                .await,
            Err(LedgerError::NotFound)
        ));

        // Rotation: a new key like the old; the old one works through the grace period only.
        let grace = Duration::from_secs(60);
        let rotated = keys::rotate(
            ledger.as_ref(),
            &forever.key_id,
            None,
            grace,
            t0 + Duration::from_millis(100),
        )
        .await
        .unwrap();
        let new = &rotated.new.record;
        assert_ne!(rotated.new.key_id, forever.key_id);
        assert_eq!(
            (&new.tenant, new.role, new.label.as_str()),
            (&tenant(), Role::Service, "billing")
        );
        assert_eq!(rotated.old_until, t0 + Duration::from_millis(100 + 60_000));
        assert!(
            find(&rotated.new.secret, t0 + Duration::from_millis(100))
                .await
                .is_some()
        );
        assert!(
            find(&forever.secret, t0 + Duration::from_millis(60_099))
                .await
                .is_some(),
            "{store}"
        );
        assert!(
            find(&forever.secret, t0 + Duration::from_millis(60_100))
                .await
                .is_none(),
            "{store}"
        );
        let old = ledger.api_key(&forever.key_id).await.unwrap().unwrap();
        assert_eq!(
            old.replaced_by.as_deref(),
            Some(rotated.new.key_id.as_str())
        );
        assert!(
            matches!(
                keys::rotate(
                    ledger.as_ref(),
                    &forever.key_id,
                    None,
                    grace,
                    t0 + Duration::from_millis(200)
                )
                .await,
                Err(KeyError::NotActive(_))
            ),
            "{store}: a key is rotated once"
        );
        assert!(matches!(
            keys::rotate(
                ledger.as_ref(),
                &brief.key_id,
                None,
                grace,
                t0 + Duration::from_millis(200)
            )
            .await,
            Err(KeyError::NotActive(_))
        ));
        // The ledger refuses a second rotation on its own (two racing `keys rotate`), adding no key.
        let before = ledger.list_api_keys(None, 100).await.unwrap().len();
        let spare = keys::issue(ledger.as_ref(), &tenant(), Role::Service, "spare", None, t0)
            .await
            .unwrap();
        assert!(
            !ledger
                .rotate_api_key(
                    &RotateKey {
                        old_id: &forever.key_id,
                        new: &spare.record,
                        old_until: t0 + Duration::from_millis(500)
                    },
                    t0 + Duration::from_millis(300)
                )
                .await
                .unwrap()
        );
        assert_eq!(
            ledger.list_api_keys(None, 100).await.unwrap().len(),
            before + 1
        );
        // Zero grace ends the old key at once; a shorter existing expiry is kept.
        let zero = keys::rotate(
            ledger.as_ref(),
            &rotated.new.key_id,
            Some(Duration::from_secs(5)),
            Duration::ZERO,
            t0 + Duration::from_millis(1_000),
        )
        .await
        .unwrap();
        assert!(
            find(&rotated.new.secret, t0 + Duration::from_millis(1_000))
                .await
                .is_none()
        );
        assert_eq!(
            zero.new.record.expires_at,
            Some(t0 + Duration::from_millis(6_000))
        );
        let short = keys::rotate(
            ledger.as_ref(),
            &zero.new.key_id,
            None,
            grace,
            t0 + Duration::from_millis(2_000),
        )
        .await
        .unwrap();
        assert_eq!(
            short.old_until,
            t0 + Duration::from_millis(6_000),
            "{store}: never extended"
        );

        // Last use: written at most once per resolution.
        let id = &short.new.key_id;
        ledger
            .touch_api_key(id, t0 + Duration::from_millis(3_000), LAST_USED_RESOLUTION)
            .await
            .unwrap();
        ledger
            .touch_api_key(id, t0 + Duration::from_millis(4_000), LAST_USED_RESOLUTION)
            .await
            .unwrap();
        let used = |ledger: &payonce_ledger::SharedLedger| {
            let (ledger, id) = (ledger.clone(), id.clone());
            async move { ledger.api_key(&id).await.unwrap().unwrap().last_used_at }
        };
        assert_eq!(
            used(&ledger).await,
            Some(t0 + Duration::from_millis(3_000)),
            "{store}"
        );
        let later = t0 + Duration::from_millis(3_000) + LAST_USED_RESOLUTION;
        ledger
            .touch_api_key(id, later, LAST_USED_RESOLUTION)
            .await
            .unwrap();
        assert_eq!(used(&ledger).await, Some(later), "{store}");
    }
}

#[tokio::test]
async fn expired_and_revoked_keys_are_refused_with_401() {
    let api = spawn(sqlite_ledger().await).await;
    let expiring = keys::issue(
        api.ledger.as_ref(),
        &tenant(),
        Role::Service,
        "expiring",
        Some(Duration::from_secs(60)),
        T0,
    )
    .await
    .unwrap();
    let doomed = keys::issue(
        api.ledger.as_ref(),
        &tenant(),
        Role::Assistant,
        "doomed",
        None,
        T0,
    )
    .await
    .unwrap();
    let tools = "/v1/tools?format=mcp";
    assert_eq!(api.get(tools, &expiring.secret).await.status, 200);
    assert_eq!(api.get(tools, &doomed.secret).await.status, 200);
    let used = api.ledger.api_key(&doomed.key_id).await.unwrap().unwrap();
    assert_eq!(
        used.last_used_at,
        Some(T0),
        "an accepted request is recorded"
    );

    api.clock.advance(std::time::Duration::from_millis(60_000));
    let expired = api.get(tools, &expiring.secret).await;
    assert_eq!(expired.status, 401, "{}", expired.text);
    assert_eq!(expired.code(), "unauthorized");
    keys::revoke(
        api.ledger.as_ref(),
        &doomed.key_id,
        "oncall:alice",
        "test",
        payonce_core::clock::Clock::now(api.clock.as_ref()),
    )
    .await
    .unwrap();
    let revoked = api.get(tools, &doomed.secret).await;
    assert_eq!(revoked.status, 401);
    // Unknown, revoked and expired keys get one answer.
    let unknown = api.get(tools, "po_assistant_nope").await;
    assert_eq!(revoked.text, unknown.text);
    assert_eq!(expired.text, unknown.text);
    // Nothing else stopped working.
    assert_eq!(api.get(tools, &api.assistant).await.status, 200);
    api.stop().await;
}

/// Runs `payonce ARGS` on `database_url` and returns its stdout as JSON (it must succeed).
async fn keys_cli(database_url: &str, args: &[&str]) -> Value {
    let out = tokio::process::Command::new(payonce_bin())
        .args(args)
        .env("PAYONCE_DATABASE_URL", database_url)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "payonce {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The status every api process answers `key` with, on a route any role may call.
async fn statuses(http: &reqwest::Client, bases: &[String], key: &str) -> Vec<u16> {
    let mut out = Vec::new();
    for base in bases {
        let r = http
            .get(format!(
                "{base}/v1/operations/op_00000000000000000000000000000000"
            ))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        out.push(r.status().as_u16());
    }
    out
}

#[tokio::test]
async fn a_key_revoked_with_the_cli_is_refused_by_every_api_process_within_a_second() {
    let (ledger, url) = postgres_ledger().await;
    let created = keys_cli(
        &url,
        &[
            "keys",
            "create",
            "--tenant",
            "acme",
            "--role",
            "service",
            "--label",
            "billing",
            "--expires-in",
            "90d",
            "--json",
        ],
    )
    .await;
    let id = created["id"].as_str().unwrap().to_string();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert!(id.starts_with("key_") && secret.starts_with("po_service_"));
    let listed = ledger.api_key(&id).await.unwrap().unwrap();
    assert_eq!(listed.key_hash, sha256_hex(&secret), "stored hashed");
    assert!(listed.expires_at.unwrap() > listed.created_at + Duration::from_secs(89 * 86_400));

    let http = http_client();
    let (mut apis, bases) = two_api_processes(&url, &http, START_DEADLINE).await;
    // Authenticated: an unknown operation id is a 404, not a 401.
    assert_eq!(statuses(&http, &bases, &secret).await, [404, 404]);

    // Rotation with no grace: the new secret works everywhere, the old one nowhere.
    let rotated = keys_cli(&url, &["keys", "rotate", &id, "--grace", "0s", "--json"]).await;
    let new_id = rotated["id"].as_str().unwrap().to_string();
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    assert_eq!(rotated["replaces"], id.as_str());
    assert_eq!(
        (rotated["role"].as_str(), rotated["label"].as_str()),
        (Some("service"), Some("billing"))
    );
    assert_eq!(statuses(&http, &bases, &secret).await, [401, 401]);
    assert_eq!(statuses(&http, &bases, &new_secret).await, [404, 404]);

    // Revoke the new key with the CLI; from then on both processes refuse it within a second.
    let revoked = keys_cli(
        &url,
        &["keys", "revoke", &new_id, "--reason", "leaked", "--json"],
    )
    .await;
    assert_eq!(revoked["revoked"], true);
    let start = Instant::now();
    wait_for(
        "both api processes refuse the revoked key",
        REVOCATION_DEADLINE,
        || {
            let (http, bases, key) = (http.clone(), bases.clone(), new_secret.clone());
            async move { (statuses(&http, &bases, &key).await == [401, 401]).then_some(()) }
        },
    )
    .await;
    assert!(start.elapsed() < REVOCATION_DEADLINE);

    // The listing names both keys by id with their states, and never shows a secret or hash.
    let list = keys_cli(&url, &["keys", "list", "--tenant", "acme", "--json"]).await;
    let text = list.to_string();
    for secret_text in [&secret, &new_secret, &listed.key_hash] {
        assert!(!text.contains(secret_text.as_str()), "{text}");
    }
    let state_of = |id: &str| {
        list["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed: {text}"))
            .clone()
    };
    assert_eq!(state_of(&id)["state"], "expired");
    assert_eq!(state_of(&id)["replaced_by"], new_id.as_str());
    assert_eq!(state_of(&new_id)["state"], "revoked");
    assert_eq!(state_of(&new_id)["revoked_reason"], "leaked");
    assert!(state_of(&id)["last_used_at_ms"].is_i64(), "{text}");

    for api in &mut apis {
        assert!(terminate(api).await.success());
    }
}

/// A key issued before migration 0004: the 0001 schema, a raw row, then the current migrations.
async fn legacy_key_survives_migration<C: sqlx::Connection>(
    conn: &mut C,
    schema: &'static str,
    url: &str,
) where
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
{
    sqlx::raw_sql(schema).execute(&mut *conn).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE payonce_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL);
         INSERT INTO payonce_migrations VALUES (1, 'ledger', 0);",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    let secret = "po_service_legacy";
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO api_keys (key_hash, tenant_id, role, label, created_at) \
         VALUES ('{}', 'acme', 'service', 'old', 1)",
        sha256_hex(secret)
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    let ledger = payonce_ledger::connect(url, 2).await.unwrap();
    let key = ledger
        .find_api_key(&sha256_hex(secret), T0)
        .await
        .unwrap()
        .expect("the old key still works");
    assert_eq!(key.key_id, format!("key_{}", &sha256_hex(secret)[..16]));
    assert_eq!(key.expires_at, None);
    assert!(
        keys::revoke(ledger.as_ref(), &key.key_id, "oncall:a", "old", T0)
            .await
            .unwrap()
    );
    assert!(
        ledger
            .find_api_key(&sha256_hex(secret), T0)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn keys_issued_before_migration_0004_get_an_id_and_keep_working() {
    let url = crate::support::postgres::fresh_database().await;
    let mut pg = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    legacy_key_survives_migration(
        &mut pg,
        include_str!("../../../migrations/postgres/0001_ledger.sql"),
        &url,
    )
    .await;
    let dir = crate::serve::scratch("legacy-keys");
    let url = format!("sqlite:{}?mode=rwc", dir.join("old.db").display());
    let mut lite = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    legacy_key_survives_migration(
        &mut lite,
        include_str!("../../../migrations/sqlite/0001_ledger.sql"),
        &url,
    )
    .await;
}
