//! Issue 13, defects 3 and 5: a webhook is a hint. A signed event is stored once and changes
//! nothing; the reconciler retrieves the object it names from the processor (the simulator over
//! real HTTP), checks amount, currency, customer and operation id against the operation, and applies
//! only what the processor holds. Money that moved without an approval is the loudest alert.

use crate::support::now;
use crate::support::processes::{self, payments_for};
use crate::support::reconciler;
use crate::support::rows;
use crate::support::{self, details, every_store, recording, tenant};
use payonce_core::id::{BusinessKey, OperationId};
use payonce_core::metrics::Exposition;
use payonce_core::state::Status;
use payonce_ledger::{
    Applied, ApplyReport, Cancel, Declined, LeaseHolder, LedgerError, NewOperation, Operation,
    Paid, Recorded, Report, Resolution, SharedLedger,
};
use payonce_ledger::{Fence, Resolve};
use payonce_processor::Processor;
use payonce_processor::ingest as webhooks;
use payonce_processor::stripe::webhook::sign;
use payonce_reconciler::Reconciler;
use payonce_simulator::SimulatorConfig;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const SECRET: &str = "whsec_evidence_test";

fn reconciler(ledger: &SharedLedger, processor: Arc<dyn Processor>) -> Reconciler {
    // Short backoff: a deferred hint is due again at once in these tests (the clock is real).
    reconciler::build(
        ledger,
        processor,
        "rec-evidence",
        reconciler::immediate_rechecks,
    )
}

/// A signed delivery of `event_type` about `object` (as a forger with the secret, or Stripe).
fn delivery(event_id: &str, event_type: &str, object: Value) -> (String, String) {
    let body =
        json!({"id": event_id, "object": "event", "type": event_type, "created": now().as_millis() / 1000,
        "data": {"object": object}})
        .to_string();
    let t = now().as_millis() / 1000;
    (
        format!("t={t},v1={}", sign(SECRET, t, body.as_bytes())),
        body,
    )
}

async fn deliver(
    ledger: &SharedLedger,
    (header, body): &(String, String),
) -> webhooks::IngestOutcome {
    webhooks::ingest(
        ledger.as_ref(),
        &[SECRET.to_string()],
        Some(header),
        body.as_bytes(),
        now(),
    )
    .await
    .unwrap()
}

/// An executing operation whose submission reached the processor (the response is not recorded):
/// the worker still holds its lease.
async fn executing(ledger: &SharedLedger, invoice: &str) -> (Operation, i64) {
    let (op, c) = rows::ready_executing(ledger, invoice, "pm_card_visa", now()).await;
    (ledger.get(&tenant(), &op.id).await.unwrap(), c.attempt)
}

fn slim(pi: &Value) -> Value {
    json!({"id": pi["id"], "object": "payment_intent", "status": pi["status"], "amount": pi["amount"],
        "currency": "usd", "metadata": pi["metadata"]})
}

async fn metrics_of(rec: &Reconciler, ledger: &SharedLedger) -> String {
    let mut e = Exposition::default();
    rec.metrics()
        .render(ledger.as_ref(), now(), &mut e)
        .await
        .unwrap();
    e.finish()
}

#[tokio::test]
async fn a_webhook_is_a_hint_applied_only_from_the_retrieved_object() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let rec = reconciler(&ledger, processes::stripe(&sim, None));

    // A genuine payment: the hint is stored, nothing changes until the object is retrieved.
    let (paid, attempt) = executing(&ledger, "INV-E1").await;
    let pi = processes::pay_directly(&sim, &paid.id, 2048, "cus_test").await;
    let pi_id = pi["id"].as_str().unwrap().to_string();
    let genuine = delivery("evt_e1", "payment_intent.succeeded", slim(&pi));
    let first = deliver(&ledger, &genuine).await;
    assert!(first.pending_check && !first.duplicate);
    assert_eq!(
        ledger.get(&tenant(), &paid.id).await.unwrap().status,
        Status::Executing,
        "a webhook alone changes nothing"
    );
    assert!(deliver(&ledger, &genuine).await.duplicate, "stored once");
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(
        (pass.applied, pass.mismatched, pass.unproven),
        (1, 0, 0),
        "{pass:?}"
    );
    let row = ledger.get(&tenant(), &paid.id).await.unwrap();
    assert_eq!(
        (row.status, row.external_ref.as_deref()),
        (Status::Succeeded, Some(pi_id.as_str()))
    );
    assert_eq!(
        row.result.as_ref().unwrap()["client_secret"],
        pi["client_secret"],
        "the stored result is the retrieved object, not the webhook's"
    );
    let into = ledger
        .events_unscoped(&paid.id)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(
        into.actor.contains("webhook evt_e1") && into.actor.contains(&pi_id),
        "{into:?}"
    );
    assert_eq!(
        rec.check_hints_once().await.unwrap().applied,
        0,
        "checked once"
    );
    // The worker's late record loses to the stored truth.
    let late = Recorded::Succeeded(Paid {
        reference: pi_id.clone(),
        result: json!({}),
    });
    assert!(matches!(
        ledger
            .record(
                &recording(
                    &Fence {
                        id: paid.id.clone(),
                        attempt
                    },
                    &late,
                    "w"
                ),
                now()
            )
            .await,
        Err(LedgerError::Fenced { .. })
    ));
    // A signed "failed" about a payment that succeeded: the processor's object says succeeded, so
    // nothing contradicts the row (the hint's own claim is never applied).
    let mut lie = slim(&pi);
    lie["status"] = json!("requires_payment_method");
    deliver(
        &ledger,
        &delivery("evt_e1_lie", "payment_intent.payment_failed", lie),
    )
    .await;
    rec.check_hints_once().await.unwrap();
    assert_eq!(
        ledger.get(&tenant(), &paid.id).await.unwrap().status,
        Status::Succeeded
    );

    // Forged: signed "succeeded" of amount 1 with no payment behind it. Nothing applied.
    let (forged_op, forged_attempt) = executing(&ledger, "INV-E2").await;
    let forged = json!({"id": "pi_forged_e2", "object": "payment_intent", "status": "succeeded", "amount": 1,
        "currency": "usd", "metadata": {"payonce_operation_id": forged_op.id.as_str()}});
    deliver(
        &ledger,
        &delivery("evt_e2", "payment_intent.succeeded", forged),
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.unproven, 1, "{pass:?}");
    let row = ledger.get(&tenant(), &forged_op.id).await.unwrap();
    assert_eq!(
        (row.status, row.external_ref),
        (Status::Executing, None),
        "no payment, no change"
    );
    assert_eq!(payments_for(&sim, forged_op.id.as_str()).await, 0);
    // The worker still records its own outcome.
    let declined = Recorded::Failed(Declined {
        code: "card_declined".into(),
        message: "declined".into(),
        reference: None,
    });
    ledger
        .record(
            &recording(
                &Fence {
                    id: forged_op.id.clone(),
                    attempt: forged_attempt,
                },
                &declined,
                "w",
            ),
            now(),
        )
        .await
        .unwrap();

    // A real object naming the operation but not its approved details (amount 1): both facts, a
    // human, and the worker's record is fenced.
    let (odd, odd_attempt) = executing(&ledger, "INV-E3").await;
    let wrong = processes::pay_directly(&sim, &odd.id, 1, "cus_test").await;
    deliver(
        &ledger,
        &delivery("evt_e3", "payment_intent.succeeded", slim(&wrong)),
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.mismatched, 1, "{pass:?}");
    let row = ledger.get(&tenant(), &odd.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let why = row.failure_message.unwrap();
    assert!(
        why.contains("amount Some(1) at the processor, 2048 approved"),
        "{why}"
    );
    assert!(why.contains(wrong["id"].as_str().unwrap()), "{why}");
    assert!(
        ledger
            .record(
                &recording(
                    &Fence {
                        id: odd.id.clone(),
                        attempt: odd_attempt
                    },
                    &declined,
                    "w"
                ),
                now()
            )
            .await
            .is_err()
    );
    // Another customer's payment carrying the operation id: the same.
    let (other, _) = executing(&ledger, "INV-E4").await;
    let theirs = processes::pay_directly(&sim, &other.id, 2048, "cus_someone_else").await;
    deliver(
        &ledger,
        &delivery("evt_e4", "payment_intent.succeeded", slim(&theirs)),
    )
    .await;
    assert_eq!(rec.check_hints_once().await.unwrap().mismatched, 1);
    let row = ledger.get(&tenant(), &other.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    assert!(
        row.failure_message
            .unwrap()
            .contains("customer Some(\"cus_someone_else\")")
    );

    let page = metrics_of(&rec, &ledger).await;
    assert!(
        page.contains("payonce_webhook_evidence_mismatch_total 3\n"),
        "{page}"
    );
    assert!(
        page.contains("payonce_payment_without_approval_total 0\n"),
        "{page}"
    );
}

#[tokio::test]
async fn an_unreachable_processor_keeps_the_hint_and_applies_nothing() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (op, _) = executing(&ledger, "INV-E5").await;
    let pi = processes::pay_directly(&sim, &op.id, 2048, "cus_test").await;
    deliver(
        &ledger,
        &delivery("evt_e5", "payment_intent.succeeded", slim(&pi)),
    )
    .await;
    // Nothing listens on port 9: the retrieve fails before anything is known.
    let dead = Arc::new(
        payonce_processor::stripe::StripeProcessor::new(
            payonce_processor::stripe::StripeConfig::new("http://127.0.0.1:9", "sk_test_payonce"),
        )
        .unwrap(),
    );
    let cut_off = reconciler(&ledger, dead);
    for _ in 0..2 {
        let pass = cut_off.check_hints_once().await.unwrap();
        assert_eq!((pass.deferred, pass.applied), (1, 0), "{pass:?}");
        assert_eq!(
            ledger.get(&tenant(), &op.id).await.unwrap().status,
            Status::Executing
        );
    }
    let pending = ledger
        .pending_processor_events(now() + Duration::from_millis(1), 10)
        .await
        .unwrap();
    assert_eq!(
        (pending.len(), pending[0].checks),
        (1, 2),
        "kept, tries counted"
    );
    let rec = reconciler(&ledger, processes::stripe(&sim, None));
    assert_eq!(rec.check_hints_once().await.unwrap().applied, 1);
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Succeeded
    );
    assert!(
        ledger
            .pending_processor_events(now() + Duration::from_millis(1), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// An operation created and never approved.
async fn unapproved(ledger: &SharedLedger, invoice: &str) -> Operation {
    ledger
        .create_or_get(
            NewOperation::keyed(
                &crate::support::key_secret(),
                tenant(),
                BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap(),
                details(invoice, 2048, "pm_card_visa"),
                "service:test".into(),
            ),
            now(),
        )
        .await
        .unwrap()
        .operation
}

#[tokio::test]
async fn a_payment_nobody_approved_needs_attention_loudly_on_every_store() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    for ledger in every_store().await {
        eprintln!("store: {}", ledger.store());
        let rec = reconciler(&ledger, processes::stripe(&sim, None));
        // Cancelled before approval, then money moved anyway.
        let cancelled = unapproved(&ledger, "INV-E6").await;
        ledger
            .cancel(
                &tenant(),
                &Cancel {
                    id: &cancelled.id,
                    actor: "service:test",
                },
                now(),
            )
            .await
            .unwrap();
        // Still awaiting approval, and money moved.
        let waiting = unapproved(&ledger, "INV-E7").await;
        for (i, op) in [&cancelled, &waiting].into_iter().enumerate() {
            let pi = processes::pay_directly(&sim, &op.id, 2048, "cus_test").await;
            let event_id = format!("evt_e6_{i}_{}", ledger.store());
            let outcome = deliver(
                &ledger,
                &delivery(&event_id, "payment_intent.succeeded", slim(&pi)),
            )
            .await;
            assert!(outcome.pending_check, "stored and acknowledged");
        }
        let pass = rec.check_hints_once().await.unwrap();
        assert_eq!((pass.without_approval, pass.errors), (2, 0), "{pass:?}");
        for op in [&cancelled, &waiting] {
            let row = ledger.get(&tenant(), &op.id).await.unwrap();
            assert_eq!(row.status, Status::NeedsAttention, "{}", op.id);
            let why = row.failure_message.unwrap();
            assert!(why.starts_with("PAYMENT WITHOUT APPROVAL: "), "{why}");
            assert!(why.contains("row says"), "both facts: {why}");
            let last = ledger.events_unscoped(&op.id).await.unwrap().pop().unwrap();
            assert_eq!(last.event, "conflicting_report");
        }
        let page = metrics_of(&rec, &ledger).await;
        assert!(
            page.contains("payonce_payment_without_approval_total 2\n"),
            "{page}"
        );
        // A retry would run an unapproved payment: refused. Resolving by hand works.
        assert!(matches!(
            ledger
                .resolve(
                    &Resolve {
                        id: &cancelled.id,
                        resolution: &Resolution::RetrySameKey,
                        actor: "oncall:ann",
                        reason: "try"
                    },
                    now()
                )
                .await,
            Err(LedgerError::WrongState { .. })
        ));
        let fixed = ledger
            .resolve(
                &Resolve {
                    id: &cancelled.id,
                    resolution: &Resolution::Failed,
                    actor: "oncall:ann",
                    reason: "refunded at Stripe",
                },
                now(),
            )
            .await
            .unwrap();
        assert_eq!(fixed.status, Status::Failed);
    }
}

#[tokio::test]
async fn the_ledger_keeps_a_payment_reported_for_a_cancelled_unapproved_operation() {
    for ledger in every_store().await {
        let op = unapproved(&ledger, "INV-E8").await;
        ledger
            .cancel(
                &tenant(),
                &Cancel {
                    id: &op.id,
                    actor: "service:test",
                },
                now(),
            )
            .await
            .unwrap();
        let paid = Report::Succeeded(Paid {
            reference: "pi_e8".into(),
            result: json!({"id": "pi_e8"}),
        });
        let applied = ledger
            .apply_report(
                &ApplyReport {
                    id: &op.id,
                    report: &paid,
                    source: "lookup",
                },
                now(),
            )
            .await;
        assert_eq!(
            applied.unwrap(),
            Applied::PaymentWithoutApproval,
            "{}",
            ledger.store()
        );
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(
            (row.status, row.approved_hash),
            (Status::NeedsAttention, None)
        );
    }
}

#[tokio::test]
async fn a_lookup_applies_a_found_payment_only_if_it_is_the_approved_one() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let rec = reconciler(&ledger, processes::stripe(&sim, None));
    // Unknown outcome; the processor holds a payment carrying the operation id, for amount 1.
    let (op, attempt) = executing(&ledger, "INV-E9").await;
    let unknown = rows::unknown_outcome("timeout", None, now());
    ledger
        .record(
            &recording(
                &Fence {
                    id: op.id.clone(),
                    attempt,
                },
                &unknown,
                "w",
            ),
            now(),
        )
        .await
        .unwrap();
    let wrong = processes::pay_directly(&sim, &op.id, 1, "cus_test").await;
    // And one whose payment is the approved one: a dry run names it by its summary only (on-call
    // output never carries the client secret).
    let (fine, fine_attempt) = executing(&ledger, "INV-E10").await;
    ledger
        .record(
            &recording(
                &Fence {
                    id: fine.id.clone(),
                    attempt: fine_attempt,
                },
                &unknown,
                "w",
            ),
            now(),
        )
        .await
        .unwrap();
    processes::pay_directly(&sim, &fine.id, 2048, "cus_test").await;
    let dry = rec.sweep_once(true).await.unwrap();
    let actions = dry.actions.join("\n");
    assert!(actions.contains("Record(Succeeded"), "{actions}");
    assert!(actions.contains("Mismatch"), "{actions}");
    assert!(!actions.contains("secret"), "{actions}");
    let sweep = rec.sweep_once(false).await.unwrap();
    assert_eq!(
        (sweep.resolved_succeeded, sweep.escalated),
        (1, 1),
        "{sweep:?}"
    );
    assert_eq!(
        ledger.get(&tenant(), &fine.id).await.unwrap().status,
        Status::Succeeded
    );
    let row = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let why = row.failure_message.unwrap();
    assert!(
        why.contains("amount Some(1) at the processor, 2048 approved")
            && why.contains(wrong["id"].as_str().unwrap()),
        "{why}"
    );
}

/// Migration 0003 rebuilds SQLite's operations table (a CHECK cannot be altered there): rows,
/// their approvals and audit trail survive, the audit triggers still fire, and the relaxed CHECK
/// holds for the states that run a payment.
#[tokio::test]
async fn migration_0003_keeps_sqlite_rows_references_and_triggers() {
    use sqlx::Connection;
    use std::str::FromStr;
    let file = support::SqliteFile::new("0003");
    let url = file.url.clone();
    let id = OperationId::generate();
    let hash = details("INV-M1", 2048, "pm_card_visa").hash();
    {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(&url)
            .unwrap()
            .create_if_missing(true)
            .foreign_keys(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap();
        sqlx::raw_sql(include_str!("../../migrations/sqlite/0001_ledger.sql"))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE TABLE payonce_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
             applied_at BIGINT NOT NULL); INSERT INTO payonce_migrations VALUES (1, 'ledger', 0)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer, \
             payment_method, invoice, details_hash, status, attempt, idempotency_key, external_ref, available_at, \
             approved_hash, approved_by, approval_expires_at, last_event, last_actor, created_at, updated_at) \
             VALUES ($1, 'acme', 'invoice:INV-M1:pay', 'payment', 2048, 'usd', 'cus_test', 'pm_card_visa', \
             'INV-M1', $2, 'succeeded', 1, $3, 'pi_m1', 1, $2, 'customer:cus_test', 2, 'create', 'service:test', 1, 1)",
        )
        .bind(id.as_str())
        .bind(hash.as_str())
        .bind(format!("payonce-{}", id.as_str()))
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO approvals (id, operation_id, details_hash, approved_by, method, approved_at, expires_at) \
             VALUES ('apr_m1', $1, $2, 'customer:cus_test', 'test', 1, 2)",
        )
        .bind(id.as_str())
        .bind(hash.as_str())
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    }
    let ledger = payonce_ledger::connect(&url, 1).await.unwrap();
    let row = ledger.get_unscoped(&id).await.unwrap();
    assert_eq!(
        (row.status, row.external_ref.as_deref()),
        (Status::Succeeded, Some("pi_m1"))
    );
    assert_eq!(
        ledger.events_unscoped(&id).await.unwrap().len(),
        1,
        "the audit trail survives"
    );
    assert!(
        ledger
            .latest_approval(&tenant(), &id)
            .await
            .unwrap()
            .is_some(),
        "approvals still reference it"
    );
    // The triggers were recreated: a new operation and its cancel are both logged.
    let new = unapproved(&ledger, "INV-M2").await;
    ledger
        .cancel(
            &tenant(),
            &Cancel {
                id: &new.id,
                actor: "service:test",
            },
            now(),
        )
        .await
        .unwrap();
    let events: Vec<String> = ledger
        .events_unscoped(&new.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event.to_string())
        .collect();
    assert_eq!(events, ["create", "cancel"]);
    // Nothing runs without an approval: claiming finds nothing, and the CHECK refuses a forced move.
    assert!(
        ledger
            .claim(
                &LeaseHolder {
                    owner: "w",
                    lease_ttl: Duration::from_millis(1_000)
                },
                10,
                now()
            )
            .await
            .unwrap()
            .is_empty()
    );
    drop(ledger);
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(&url).unwrap();
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    let forced = sqlx::query("UPDATE operations SET status = 'ready' WHERE id = $1")
        .bind(new.id.as_str())
        .execute(&mut conn)
        .await;
    assert!(
        forced.is_err(),
        "ready without an approval must violate the CHECK"
    );
    let dangling = sqlx::query("PRAGMA foreign_key_check")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert!(dangling.is_empty());
    conn.close().await.unwrap();
}

/// A retrieval is a read: it draws from the fleet limiter's read budget like every lookup, so a
/// burst of webhooks cannot crowd out submissions. No permit in time keeps the hint for a later pass,
/// sends nothing and applies nothing.
#[tokio::test]
async fn a_hint_without_a_read_permit_is_kept_and_nothing_is_sent() {
    use payonce_processor::limiter::{Budget, Decision, Limiter, LocalLimiter, Rates};
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (op, _) = executing(&ledger, "INV-E9").await;
    let pi = processes::pay_directly(&sim, &op.id, 2048, "cus_test").await;
    deliver(
        &ledger,
        &delivery("evt_e9", "payment_intent.succeeded", slim(&pi)),
    )
    .await;

    let spent = Arc::new(LocalLimiter::new(Rates {
        write_per_second: 1,
        read_per_second: 1,
        global_per_second: None,
        read_reserved_percent: 0,
        write_reserved_percent: 0,
        burst: 1,
    }));
    assert_eq!(spent.try_acquire(Budget::Read).await, Decision::Granted);
    let rec = reconciler::build(
        &ledger,
        processes::stripe(&sim, None),
        "rec-evidence-limited",
        |c| {
            c.lookup_permit_wait_max = Duration::from_millis(1);
            reconciler::immediate_rechecks(c);
            c.retry.limiter = spent.clone();
        },
    );
    let requests_before = processes::requests_served(&sim).await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!((pass.deferred, pass.applied), (1, 0), "{pass:?}");
    assert_eq!(
        processes::requests_served(&sim).await,
        requests_before,
        "no retrieval was sent"
    );
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Executing
    );
    // With a permit the same hint is checked and applied.
    let rec = reconciler(&ledger, processes::stripe(&sim, None));
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.applied, 1, "{pass:?}");
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Succeeded
    );
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
    sim.shutdown().await;
}

/// An unknown operation whose stored reference names another operation's payment: the lookup by
/// reference retrieves it, and the same rule as a webhook's (`evidence::report_of`) sends the
/// operation to a human with both facts, instead of deferring the check forever.
#[tokio::test]
async fn a_lookup_finding_another_operations_payment_by_reference_needs_attention() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let rec = reconciler(&ledger, processes::stripe(&sim, None));
    let (op, attempt) = executing(&ledger, "INV-E11").await;
    // The same amount, currency and customer: only the operation it belongs to differs.
    let other = OperationId::generate();
    let theirs = processes::pay_directly(&sim, &other, 2048, "cus_test").await;
    let pi = theirs["id"].as_str().unwrap();
    let unknown = Recorded::Unknown {
        reason: "timeout".into(),
        reference: Some(pi.to_string()),
        next_check_at: now(),
    };
    let fence = Fence {
        id: op.id.clone(),
        attempt,
    };
    ledger
        .record(&recording(&fence, &unknown, "w"), now())
        .await
        .unwrap();
    let sweep = rec.sweep_once(false).await.unwrap();
    assert_eq!((sweep.escalated, sweep.deferred), (1, 0), "{sweep:?}");
    let row = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let why = row.failure_message.unwrap();
    assert!(
        why.contains(&format!(
            "operation id Some({:?}) at the processor, {} approved",
            other.as_str(),
            op.id
        )),
        "{why}"
    );
    assert!(
        why.contains(&format!("row says unknown (reference {pi})")),
        "both facts: {why}"
    );
    let last = ledger.events_unscoped(&op.id).await.unwrap().pop().unwrap();
    assert_eq!(last.event, "conflicting_report");
    // Nothing is left to look up.
    let again = rec.sweep_once(false).await.unwrap();
    assert_eq!((again.escalated, again.deferred), (0, 0), "{again:?}");
}

/// A signed webhook whose metadata names operation A about a payment the processor holds for
/// operation B: the retrieved object's metadata says whose it is. B is checked and settled; A, which
/// nobody approved, is not sent to a human as a payment without approval (the runbook would refund
/// B's legitimate payment); the hint is closed saying it named the wrong operation.
#[tokio::test]
async fn a_webhook_naming_the_wrong_operation_is_applied_to_the_operation_the_object_belongs_to() {
    let (ledger, url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let rec = reconciler(&ledger, processes::stripe(&sim, None));
    let named = unapproved(&ledger, "INV-E12").await;
    let (owner, _) = executing(&ledger, "INV-E13").await;
    let pi = processes::pay_directly(&sim, &owner.id, 2048, "cus_test").await;
    let mut misnamed = slim(&pi);
    misnamed["metadata"]["payonce_operation_id"] = json!(named.id.as_str());
    let events_before = ledger.events_unscoped(&named.id).await.unwrap().len();
    let stored = deliver(
        &ledger,
        &delivery("evt_e12", "payment_intent.succeeded", misnamed),
    )
    .await;
    assert!(stored.pending_check, "{stored:?}");

    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(
        (pass.applied, pass.without_approval, pass.mismatched),
        (1, 0, 0),
        "{pass:?}"
    );
    let a = ledger.get(&tenant(), &named.id).await.unwrap();
    assert_eq!(
        (a.status, a.external_ref),
        (Status::AwaitingApproval, None),
        "the named operation is untouched"
    );
    assert_eq!(
        ledger.events_unscoped(&named.id).await.unwrap().len(),
        events_before
    );
    let b = ledger.get(&tenant(), &owner.id).await.unwrap();
    assert_eq!(
        (b.status, b.external_ref.as_deref()),
        (Status::Succeeded, pi["id"].as_str())
    );
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let outcome: Option<String> =
        sqlx::query_scalar("SELECT outcome FROM processor_events WHERE event_id = 'evt_e12'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let outcome = outcome.unwrap();
    assert!(
        outcome.contains(named.id.as_str()) && outcome.contains(owner.id.as_str()),
        "{outcome}"
    );
    // An object carrying an operation id this ledger does not have: nothing is applied anywhere.
    let foreign = processes::pay_directly(&sim, &OperationId::generate(), 2048, "cus_test").await;
    let mut misnamed = slim(&foreign);
    misnamed["metadata"]["payonce_operation_id"] = json!(named.id.as_str());
    deliver(
        &ledger,
        &delivery("evt_e12_foreign", "payment_intent.succeeded", misnamed),
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(
        (pass.closed, pass.misnamed, pass.without_approval),
        (1, 1, 0),
        "{pass:?}"
    );
    assert_eq!(
        ledger.get(&tenant(), &named.id).await.unwrap().status,
        Status::AwaitingApproval
    );
    let page = metrics_of(&rec, &ledger).await;
    assert!(
        page.contains("payonce_payment_without_approval_total 0\n")
            && page.contains("payonce_webhook_evidence_mismatch_total 2\n"),
        "the wrong name is an alert: {page}"
    );
}

/// A hint that says what the row already says (succeeded, the same object) is closed without a
/// processor read; its duplicate too. The backlog gauge says what is left.
#[tokio::test]
async fn a_hint_the_row_already_agrees_with_costs_no_processor_read() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (op, _) = executing(&ledger, "INV-E10").await;
    let pi = processes::pay_directly(&sim, &op.id, 2048, "cus_test").await;
    let rec = reconciler(&ledger, processes::stripe(&sim, None));
    deliver(
        &ledger,
        &delivery("evt_e10a", "payment_intent.succeeded", slim(&pi)),
    )
    .await;
    // The first hint is checked against the processor and applied.
    let first = rec.check_hints_once().await.unwrap();
    assert_eq!((first.applied, first.known), (1, 0), "{first:?}");
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Succeeded
    );
    // A later delivery of the same news: no read.
    deliver(
        &ledger,
        &delivery("evt_e10b", "payment_intent.succeeded", slim(&pi)),
    )
    .await;
    let requests_before = processes::requests_served(&sim).await;
    let second = rec.check_hints_once().await.unwrap();
    assert_eq!((second.known, second.applied), (1, 0), "{second:?}");
    assert_eq!(
        processes::requests_served(&sim).await,
        requests_before,
        "no retrieval"
    );
    let metrics = metrics_of(&rec, &ledger).await;
    assert!(
        metrics.contains("payonce_webhook_hint_backlog 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("payonce_webhook_hints_total{result=\"known\"} 1"),
        "{metrics}"
    );
    // A hint that contradicts the row is still checked (a read is spent).
    let mut failed = slim(&pi);
    failed["status"] = json!("requires_payment_method");
    deliver(
        &ledger,
        &delivery("evt_e10c", "payment_intent.payment_failed", failed),
    )
    .await;
    let third = rec.check_hints_once().await.unwrap();
    assert_eq!(third.known, 0, "{third:?}");
    assert!(processes::requests_served(&sim).await > requests_before);
    sim.shutdown().await;
}

/// A backlog bigger than one batch is worked down in one pass (full batches one after another),
/// not one batch a sweep: one batch per 5 s interval capped the checks at 40/s, behind for good at
/// 50 payments/s. The pass stops at the first short batch.
#[tokio::test]
async fn a_backlog_of_several_batches_is_checked_in_one_pass() {
    const BATCH: u32 = 4;
    const HINTS: u32 = 3 * BATCH + 1;
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (op, _) = executing(&ledger, "INV-E11").await;
    let pi = processes::pay_directly(&sim, &op.id, 2048, "cus_test").await;
    let rec = reconciler::build(
        &ledger,
        processes::stripe(&sim, None),
        "rec-evidence",
        |c| {
            c.batch_size = BATCH;
        },
    );
    deliver(
        &ledger,
        &delivery("evt_e11_first", "payment_intent.succeeded", slim(&pi)),
    )
    .await;
    assert_eq!(rec.check_hints_once().await.unwrap().applied, 1);
    // Hints whose object does not say what the row says (`processing`, under new event ids): none
    // is closed in bulk; each is checked on its own (a read), in batches of BATCH.
    let mut processing = slim(&pi);
    processing["status"] = json!("processing");
    for i in 0..HINTS {
        deliver(
            &ledger,
            &delivery(
                &format!("evt_e11_{i}"),
                "payment_intent.succeeded",
                processing.clone(),
            ),
        )
        .await;
    }
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(
        (pass.known, pass.errors, pass.deferred),
        (0, 0, 0),
        "{pass:?}"
    );
    assert_eq!(ledger.processor_event_backlog().await.unwrap().0, 0);
    // Agreeing news in bulk: closed as known, with no read.
    for i in 0..HINTS {
        deliver(
            &ledger,
            &delivery(
                &format!("evt_e11_again_{i}"),
                "payment_intent.succeeded",
                slim(&pi),
            ),
        )
        .await;
    }
    let requests_before = processes::requests_served(&sim).await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.known, HINTS, "{pass:?}");
    assert_eq!(
        processes::requests_served(&sim).await,
        requests_before,
        "no read"
    );
    assert_eq!(ledger.processor_event_backlog().await.unwrap().0, 0);
    sim.shutdown().await;
}
