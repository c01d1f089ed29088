//! Every contract the simulator runs, against the simulator running it: first the case where a
//! naive retry with the same key pays twice (or believes the wrong payment), shown on the
//! simulator itself; then payonce's worker and reconciler on the same case, paying once.

use crate::support::now;
use crate::support::processes::{self, payments_for};
use crate::support::reconciler;
use crate::support::rows;
use crate::support::{self, details, tenant};
use payonce_core::clock::{ManualClock, SystemClock};
use payonce_core::id::IdempotencyKey;
use payonce_core::state::Status;
use payonce_execution::submit::submit;
use payonce_ledger::{Operation, SharedLedger};
use payonce_processor::stripe::{StripeConfig, StripeProcessor};
use payonce_processor::{Processor, SubmitOutcome, contract};
use payonce_simulator::{Contract, Simulator, SimulatorConfig};
use payonce_worker::{Worker, WorkerConfig};
use std::sync::Arc;
use std::time::Duration;

/// Longest one submission of these tests may take.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The simulator running `contract` with `retention`, and the Stripe adapter declaring the same.
async fn pair(contract: Contract, retention: Option<Duration>) -> (Simulator, Arc<dyn Processor>) {
    let mut config = SimulatorConfig::for_contract(contract);
    if let Some(r) = retention {
        config.key_retention = r;
    }
    let sim = processes::simulator(config).await;
    let mut declared = contract::by_name(contract.name()).expect("registered");
    if let Some(r) = retention {
        declared = declared.with_key_retention(r);
    }
    let adapter = StripeProcessor::new(StripeConfig::new(sim.base_url(), "sk_test_payonce"))
        .unwrap()
        .with_contract(declared)
        .unwrap();
    (sim, Arc::new(adapter))
}

/// An approved payment of `amount` for `invoice`, in `ready`.
async fn approved(ledger: &SharedLedger, invoice: &str, amount: i64) -> Operation {
    let now = now();
    let d = details(invoice, amount, "pm_card_visa");
    let row = rows::created(ledger, &tenant(), invoice, d, now)
        .await
        .operation;
    rows::approved(ledger, &row, now + Duration::from_secs(3 * 86_400), now).await
}

/// Arms `fault` once for `op`'s key.
async fn fault_once(sim: &Simulator, op: &Operation, fault: &str) {
    processes::arm_faults(
        sim,
        serde_json::json!([{"match": op.idempotency_key.as_str(), "fault": fault, "times": 1}]),
    )
    .await;
}

/// A naive client: submits `op` with its key, and after the ambiguous answer (the armed fault)
/// and `meanwhile`, simply submits it again with the same key. Returns the second answer.
async fn naive_retry(
    sim: &Simulator,
    processor: &dyn Processor,
    op: &Operation,
    fault: &str,
    meanwhile: Duration,
) -> SubmitOutcome {
    fault_once(sim, op, fault).await;
    let first = submit(processor, op, SUBMIT_TIMEOUT).await;
    assert!(
        matches!(first, SubmitOutcome::Unknown { .. }),
        "the fault leaves the outcome ambiguous: {first:?}"
    );
    if !meanwhile.is_zero() {
        processes::advance_clock(sim, meanwhile).await;
    }
    submit(processor, op, SUBMIT_TIMEOUT).await
}

/// payonce on the same case: the worker submits `op` (the fault armed), the reconciler's clock
/// is moved `meanwhile` on with the simulator's, and the reconciler sweeps until the row is final
/// or with a human. Returns the row.
async fn payonce_on(
    ledger: &SharedLedger,
    sim: &Simulator,
    processor: Arc<dyn Processor>,
    op: &Operation,
    fault: &str,
    meanwhile: Duration,
) -> Operation {
    fault_once(sim, op, fault).await;
    let worker = Worker::new(
        ledger.clone(),
        processor.clone(),
        Arc::new(SystemClock),
        WorkerConfig::new("contract-worker"),
    )
    .unwrap();
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let row = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(row.status, Status::Unknown, "{:?}", row.failure_message);
    let clock = ManualClock::new(now());
    // Past the first check, and past whatever the case needs.
    clock.advance(meanwhile + Duration::from_secs(3));
    if !meanwhile.is_zero() {
        processes::advance_clock(sim, meanwhile).await;
    }
    let rec = reconciler::build_on(
        ledger,
        processor,
        clock.clone(),
        "contract-reconciler",
        |c| {
            reconciler::quick_rechecks(c);
            c.retention_margin = Duration::from_millis(200);
        },
    );
    support::wait_for("reconciled", Duration::from_secs(20), || async {
        rec.sweep_once(false).await.unwrap();
        clock.advance(Duration::from_secs(1));
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        (row.status.is_terminal() || row.status == Status::NeedsAttention).then_some(row)
    })
    .await
}

/// Past the key's 24 hours a retry with it pays again; payonce finds the payment by lookup.
#[tokio::test]
async fn stripe_past_the_retention_a_retry_pays_again_and_payonce_looks_it_up() {
    let (sim, processor) = pair(Contract::Stripe, None).await;
    let (ledger, naive_ledger) = (
        support::sqlite_ledger().await,
        support::sqlite_ledger().await,
    );
    let past = contract::DAY + Duration::from_secs(60);
    let naive = approved(&naive_ledger, "INV-S1", 2048).await;
    let again = naive_retry(&sim, processor.as_ref(), &naive, "drop_after_commit", past).await;
    assert!(
        matches!(
            again,
            SubmitOutcome::Succeeded {
                replayed: false,
                ..
            }
        ),
        "{again:?}"
    );
    assert_eq!(
        payments_for(&sim, naive.id.as_str()).await,
        2,
        "charged twice"
    );

    let op = approved(&ledger, "INV-S2", 2048).await;
    let row = payonce_on(&ledger, &sim, processor, &op, "drop_after_commit", past).await;
    assert_eq!(row.status, Status::Succeeded);
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
}

/// Qonto-like 30 minutes, shortened to 2 s: the same, on a clock a reconciler crosses quickly.
#[tokio::test]
async fn short_retention_a_retry_after_it_pays_again_and_payonce_looks_it_up() {
    let retention = Duration::from_secs(2);
    let (sim, processor) = pair(Contract::ShortRetention, Some(retention)).await;
    assert_eq!(processor.contract().key_retention, Some(retention));
    let (ledger, naive_ledger) = (
        support::sqlite_ledger().await,
        support::sqlite_ledger().await,
    );
    let past = retention + Duration::from_secs(1);
    let naive = approved(&naive_ledger, "INV-Q1", 2048).await;
    let again = naive_retry(&sim, processor.as_ref(), &naive, "drop_after_commit", past).await;
    assert!(
        matches!(
            again,
            SubmitOutcome::Succeeded {
                replayed: false,
                ..
            }
        ),
        "{again:?}"
    );
    assert_eq!(
        payments_for(&sim, naive.id.as_str()).await,
        2,
        "charged twice"
    );

    let op = approved(&ledger, "INV-Q2", 2048).await;
    let row = payonce_on(&ledger, &sim, processor, &op, "drop_after_commit", past).await;
    assert_eq!(row.status, Status::Succeeded);
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
}

/// Checkout.com-like: the 500 of a request that executed is not saved, so a retry with the same
/// key executes it again. payonce never retries it before a lookup: the lookup finds it.
#[tokio::test]
async fn only_2xx_saved_a_retry_after_a_500_pays_again_and_payonce_looks_it_up() {
    let (sim, processor) = pair(Contract::Only2xxSaved, None).await;
    let (ledger, naive_ledger) = (
        support::sqlite_ledger().await,
        support::sqlite_ledger().await,
    );
    let naive = approved(&naive_ledger, "INV-C1", 2048).await;
    let again = naive_retry(
        &sim,
        processor.as_ref(),
        &naive,
        "error_500_after_commit",
        Duration::ZERO,
    )
    .await;
    assert!(
        matches!(
            again,
            SubmitOutcome::Succeeded {
                replayed: false,
                ..
            }
        ),
        "{again:?}"
    );
    assert_eq!(
        payments_for(&sim, naive.id.as_str()).await,
        2,
        "charged twice"
    );

    let op = approved(&ledger, "INV-C2", 2048).await;
    let row = payonce_on(
        &ledger,
        &sim,
        processor,
        &op,
        "error_500_after_commit",
        Duration::ZERO,
    )
    .await;
    assert_eq!(row.status, Status::Succeeded);
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
}

/// Without a lookup, past the retention nothing can tell whether the first request paid: a retry
/// pays again, payonce asks a human. Inside the retention, payonce's same-key retry replays.
#[tokio::test]
async fn no_lookup_past_the_retention_a_retry_pays_again_and_payonce_asks_a_human() {
    let (sim, processor) = pair(Contract::NoLookup, None).await;
    let (ledger, naive_ledger) = (
        support::sqlite_ledger().await,
        support::sqlite_ledger().await,
    );
    let past = contract::DAY + Duration::from_secs(60);
    // The adapter does not even ask.
    let naive = approved(&naive_ledger, "INV-N1", 2048).await;
    let found = payonce_processor::operation::lookup(processor.as_ref(), &naive, now()).await;
    assert!(
        matches!(&found, payonce_processor::LookupOutcome::Unavailable { reason } if reason.contains("no-lookup")),
        "{found:?}"
    );
    // Inside the retention, payonce's same-key retry gets the first payment back.
    let inside = approved(&ledger, "INV-N0", 2048).await;
    let row = payonce_on(
        &ledger,
        &sim,
        processor.clone(),
        &inside,
        "drop_after_commit",
        Duration::ZERO,
    )
    .await;
    assert_eq!(row.status, Status::Succeeded);
    assert_eq!(payments_for(&sim, inside.id.as_str()).await, 1);
    let history = ledger.events_unscoped(&inside.id).await.unwrap();
    assert!(
        history.iter().any(|e| e.event == "claim"
            && e.detail
                .as_deref()
                .is_some_and(|d| d.contains("no lookup can find it"))),
        "the retry says why it is safe: {history:?}"
    );
    // Nothing to scan without a list: the sweep does not ask.
    let rec = reconciler::build(&ledger, processor.clone(), "scan-check", |_| {});
    assert!(rec.sweep_once(false).await.unwrap().scan.is_none());

    let again = naive_retry(&sim, processor.as_ref(), &naive, "drop_after_commit", past).await;
    assert!(
        matches!(
            again,
            SubmitOutcome::Succeeded {
                replayed: false,
                ..
            }
        ),
        "{again:?}"
    );
    assert_eq!(
        payments_for(&sim, naive.id.as_str()).await,
        2,
        "charged twice"
    );

    let op = approved(&ledger, "INV-N2", 2048).await;
    let row = payonce_on(&ledger, &sim, processor, &op, "drop_after_commit", past).await;
    assert_eq!(row.status, Status::NeedsAttention);
    assert!(
        row.failure_message
            .as_deref()
            .is_some_and(|m| m.contains("offers no lookup")),
        "{:?}",
        row.failure_message
    );
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
}

/// The Stripe adapter with every submission sent under one fixed key: a key collision, which
/// payonce's derivation never makes, forced to see what a replaying processor answers.
struct UnderKey {
    inner: Arc<dyn Processor>,
    key: IdempotencyKey,
}

#[async_trait::async_trait]
impl Processor for UnderKey {
    fn contract(&self) -> &payonce_processor::Contract {
        self.inner.contract()
    }
    async fn submit(&self, request: &payonce_processor::SubmitRequest<'_>) -> SubmitOutcome {
        let mut forced = request.clone();
        forced.idempotency_key = &self.key;
        self.inner.submit(&forced).await
    }
    async fn lookup(
        &self,
        query: &payonce_processor::LookupQuery<'_>,
    ) -> payonce_processor::LookupOutcome {
        self.inner.lookup(query).await
    }
    async fn submit_refund(&self, request: &payonce_processor::RefundRequest<'_>) -> SubmitOutcome {
        self.inner.submit_refund(request).await
    }
    async fn lookup_refund(
        &self,
        query: &payonce_processor::RefundLookupQuery<'_>,
    ) -> payonce_processor::LookupOutcome {
        self.inner.lookup_refund(query).await
    }
    fn facts(
        &self,
        reference: &str,
        object: &serde_json::Value,
    ) -> Option<payonce_processor::ProcessorObject> {
        self.inner.facts(reference, object)
    }
}

/// Worldline-like: the same key with another amount replays the first payment instead of an
/// error, so a client that counts on the refusal records the wrong payment as its own. payonce
/// never counts on it: a success answer whose amount differs goes to a human, nothing recorded
/// as paid.
#[tokio::test]
async fn replay_any_payload_answers_another_amount_and_payonce_asks_a_human() {
    let (sim, processor) = pair(Contract::ReplayAnyPayload, None).await;
    let (ledger, naive_ledger) = (
        support::sqlite_ledger().await,
        support::sqlite_ledger().await,
    );
    let first = approved(&naive_ledger, "INV-W1", 2048).await;
    let paid = submit(processor.as_ref(), &first, SUBMIT_TIMEOUT).await;
    assert!(matches!(paid, SubmitOutcome::Succeeded { .. }), "{paid:?}");
    // The amended invoice under the first one's key: Stripe would answer 400 idempotency_error.
    let amended = approved(&naive_ledger, "INV-W2", 3000).await;
    let forced = UnderKey {
        inner: processor.clone(),
        key: first.idempotency_key.clone(),
    };
    match submit(&forced, &amended, SUBMIT_TIMEOUT).await {
        SubmitOutcome::Succeeded {
            result, replayed, ..
        } => {
            assert!(replayed);
            assert_eq!(
                result["amount"], 2048,
                "the first payment, not the amended one"
            );
        }
        other => panic!("a replay of the first payment, got {other:?}"),
    }
    let stripe = pair(Contract::Stripe, None).await;
    let refused = {
        let first = approved(&naive_ledger, "INV-W3", 2048).await;
        assert!(matches!(
            submit(stripe.1.as_ref(), &first, SUBMIT_TIMEOUT).await,
            SubmitOutcome::Succeeded { .. }
        ));
        let amended = approved(&naive_ledger, "INV-W4", 3000).await;
        let forced = UnderKey {
            inner: stripe.1.clone(),
            key: first.idempotency_key.clone(),
        };
        submit(&forced, &amended, SUBMIT_TIMEOUT).await
    };
    assert!(
        matches!(&refused, SubmitOutcome::KeyReused { reason } if reason.contains("idempotency_error")),
        "Stripe refuses it: {refused:?}"
    );

    // payonce's worker on the same collision (its own ledger holds only the amended invoice).
    let amended = approved(&ledger, "INV-W2", 3000).await;
    let worker = Worker::new(
        ledger.clone(),
        Arc::new(UnderKey {
            inner: processor,
            key: first.idempotency_key.clone(),
        }),
        Arc::new(SystemClock),
        WorkerConfig::new("contract-worker"),
    )
    .unwrap();
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let row = ledger.get(&tenant(), &amended.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let why = row.failure_message.unwrap_or_default();
    assert!(
        why.contains("amount Some(2048) answered, 3000 approved")
            && why.contains(first.id.as_str()),
        "both facts: {why}"
    );
    assert_eq!(payments_for(&sim, amended.id.as_str()).await, 0);
    assert_eq!(payments_for(&sim, first.id.as_str()).await, 1);
}

/// docs/processor-contract.md holds the table of documented contracts as the constants render it.
#[test]
fn the_documented_table_is_the_constants() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/processor-contract.md"),
    )
    .unwrap();
    assert!(
        doc.contains(&contract::documented_table()),
        "docs/processor-contract.md must hold:\n{}",
        contract::documented_table()
    );
}
