//! The short chaos soaks CI runs: a thousand operations, workers and the reconciler SIGKILLed at
//! random, failure points, processor faults, duplicate tool calls and webhooks, and refunds of a
//! quarter of the paid payments made under the same chaos; and a smaller one on Adyen's wire. The
//! long soak is the same code run by the `payonce-chaos` binary (docs/failure-injection.md).

use crate::support::cluster::Cluster;
use crate::support::{self, postgres};
use payonce_chaos::fleet::ContractRun;
use payonce_chaos::{DatabaseRestart, SoakConfig, run};
use std::time::Duration;

/// Operations in the CI soak.
const OPERATIONS: usize = 1_000;
/// Operations in the CI soak on Adyen's wire: enough for every card of the plan (two in 25 settle
/// only by notification), refunds of all three plans and kills landing mid-flight.
const ADYEN_OPERATIONS: usize = 150;

// Multi-threaded like the `payonce-chaos` binary: the in-process simulator must not share one
// thread with the chaos loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_chaos_soak_pays_nothing_twice_and_loses_nothing() {
    // A cluster of the soak's own: the chaos restarts it once (never the shared server).
    let cluster = std::sync::Arc::new(Cluster::initdb(
        postgres::postgres_bin_dir().expect("the soak needs the Postgres server binaries"),
        "-c max_connections=200",
    ));
    cluster.pg_ctl(&["start"]);
    cluster.create_database("soak").await;
    let url = cluster.url("soak");
    // A fixed seed by default so CI is repeatable; PAYONCE_CHAOS_SEED replays another plan.
    let seed = std::env::var("PAYONCE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_202);
    let mut config = SoakConfig::new(support::payonce_bin().into(), url.to_string(), seed);
    config.operations = OPERATIONS;
    config.kill_every = (Duration::from_millis(200), Duration::from_millis(700));
    // Each reconciler kill stalls sweeping for the fleet's 3 s sweep lease.
    config.reconciler_kills_max = 3;
    config.chaos_window = Duration::from_secs(30);
    let restarted = cluster.clone();
    config.database_restart = Some(DatabaseRestart(std::sync::Arc::new(move || {
        restarted.crash_restart()
    })));
    config.deadline = Duration::from_secs(150);
    // PAYONCE_CHAOS_REFUND_EVERY=0 measures the soak without refunds (the baseline of docs/failure-injection.md).
    if let Some(every) = std::env::var("PAYONCE_CHAOS_REFUND_EVERY")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        config.refund_every = every;
    }
    let refund_every = config.refund_every;
    let report = run(config).await.expect("the soak runs");
    eprintln!("{report}");
    assert!(report.converged, "every operation reached a final state");
    assert_eq!(report.duplicates, 0, "nothing paid twice");
    assert_eq!(report.lost, 0, "nothing lost");
    assert_eq!(report.mismatched, 0, "no silent contradiction");
    assert_eq!(report.unexplained, 0, "every history explains its state");
    assert_eq!(report.bad_tool_answers, 0);
    assert_eq!(report.approved + report.unapproved, OPERATIONS);
    assert_eq!(report.status_count("awaiting_approval"), report.unapproved);
    assert!(report.payments > 0, "payments happened");
    // The chaos really happened: processes were killed and operations were recovered after crashes.
    assert!(report.sigkills >= 5, "{report}");
    assert!(report.reconciler_sigkills >= 1, "{report}");
    assert!(report.recovered_after_crash > 0, "{report}");
    assert!(report.duplicate_tool_calls > 0, "{report}");
    // Postgres faults too: the server restarted once, every backend of the fleet terminated, round
    // after round.
    assert_eq!(report.database_restarts, 1, "{report}");
    assert!(report.backend_terminations >= 2, "{report}");
    assert!(report.backends_terminated > 0, "{report}");
    // Refunds ran under the same chaos: none made twice, no payment over-refunded, none lost.
    if refund_every == 0 {
        assert_eq!(report.refunds_created, 0, "{report}");
        return;
    }
    assert!(report.refunds_created > 0, "{report}");
    assert!(report.refunds.at_processor > 0, "{report}");
    assert_eq!(report.refunds.duplicated, 0, "no refund made twice");
    assert_eq!(report.refunds.over_refunded, 0, "no payment over-refunded");
    assert_eq!(report.refunds.lost, 0, "no refund lost");
    assert_eq!(report.refunds.mismatched, 0);
    assert_eq!(
        report.refunds.disagreements, 0,
        "ledger and processor agree on every refunded payment"
    );
    assert!(report.refund_refusals_expected > 0, "{report}");
    assert_eq!(
        report.refunds_refused_by_guard, report.refund_refusals_expected,
        "the guard refused exactly one of each racing pair"
    );
}

// The whole soak with every process on `--processor adyen` against the simulator on Adyen's wire:
// payments and refunds over `/v71`, HMAC-signed notifications (duplicated too) on
// `/v1/webhooks/adyen`, both audits read by Adyen's `reference`. On the shared server (no restart:
// the CI soak above restarts its own cluster on Stripe's wire; the ledger side does not change with
// the wire).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_chaos_soak_on_adyens_wire_pays_nothing_twice_and_loses_nothing() {
    let url = postgres::fresh_database().await;
    let seed = std::env::var("PAYONCE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_207);
    let mut config = SoakConfig::new(support::payonce_bin().into(), url.to_string(), seed);
    config.operations = ADYEN_OPERATIONS;
    config.contract = ContractRun {
        contract: payonce_simulator::Contract::Adyen,
        key_retention: None,
    };
    config.kill_every = (Duration::from_millis(200), Duration::from_millis(700));
    config.chaos_window = Duration::from_secs(20);
    config.deadline = Duration::from_secs(120);
    let report = run(config).await.expect("the soak runs");
    eprintln!("{report}");
    assert!(
        report.contract.starts_with("adyen on Adyen's wire"),
        "{report}"
    );
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.duplicates, 0, "nothing paid twice");
    assert_eq!(report.lost, 0, "nothing lost");
    assert_eq!(report.approved + report.unapproved, ADYEN_OPERATIONS);
    assert_eq!(report.status_count("awaiting_approval"), report.unapproved);
    assert!(report.payments > 0, "{report}");
    // Notifications reached payments and refunds: the api verified the simulator's HMAC signatures
    // (with a key the api does not hold, nothing is stored and none is reached).
    assert!(report.notified > 0, "{report}");
    assert!(report.refunds.notified > 0, "{report}");
    // An operation holding the reference Adyen answered with (`Received`, a received refund) waits
    // for its notification instead of being retried into a human's hands: what a human gets is
    // only what the contract cannot resolve (no reference).
    assert_eq!(report.sent_to_human_with_reference, 0, "{report}");
    assert_eq!(report.refunds.sent_to_human_with_reference, 0, "{report}");
    assert!(report.refunds.at_processor > 0, "{report}");
    assert_eq!(
        report.refunds_refused_by_guard, report.refund_refusals_expected,
        "{report}"
    );
    assert!(report.sigkills >= 3, "{report}");
    assert_eq!(report.bad_tool_answers, 0);
}
