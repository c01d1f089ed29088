//! The processor's reachability row (migration `processor_reachability`) on every store: a fresh
//! ledger says reachable; an outage keeps its first start however often it is recorded; reachable
//! again clears it; the time is the ledger's (Postgres's clock, the caller's on SQLite); and the
//! recorder a submitting process runs writes its changes there, a fresh process's first answer
//! included.

use crate::support::{every_store, wait_for};
use payonce_core::clock::{Clock, SystemClock, Timestamp};
use payonce_ledger::LedgerError;
use payonce_ledger::outage::{CHANGED_BY_LEN_MAX, OutageLedger, RecordedReachability};
use payonce_processor::SubmitOutcome;
use payonce_processor::reachability::{RECORD_RETRY, Reachability};
use std::time::Duration;

#[tokio::test]
async fn an_outage_keeps_its_start_until_the_processor_is_reachable_again() {
    for ledger in every_store().await {
        let store = ledger.store();
        let outage = ledger.outage();
        let fresh = outage.reachability().await.unwrap();
        assert_eq!(fresh.down_since, None, "{store}");
        assert_eq!(fresh.changed_at, Timestamp::from_millis(0), "{store}");
        // A caller's clock far in the past: Postgres stamps its own clock instead.
        let local = Timestamp::from_millis(1_000);
        let down = outage
            .record_reachability(true, "worker-a", local)
            .await
            .unwrap();
        let since = down.down_since.expect(store);
        if store == "sqlite" {
            assert_eq!(since, local, "SQLite has no clock of its own");
        } else {
            let now = SystemClock.now();
            assert!(
                since > now.saturating_sub_span(Duration::from_secs(600))
                    && since <= now + Duration::from_secs(600),
                "{store}: the database's clock, not the caller's ({since:?})"
            );
        }
        assert_eq!(down.changed_by, "worker-a");
        let again = outage
            .record_reachability(true, "worker-b", local + Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            again.down_since,
            Some(since),
            "{store}: an outage keeps its start"
        );
        assert_eq!(again.changed_by, "worker-b");
        let up = outage
            .record_reachability(false, "worker-b", local + Duration::from_secs(9))
            .await
            .unwrap();
        assert_eq!(up.down_since, None, "{store}");
        assert_eq!(outage.reachability().await.unwrap(), up);
        // A name past the limit is kept cut at it.
        let long = "w".repeat(CHANGED_BY_LEN_MAX + 1);
        let cut = outage
            .record_reachability(false, &long, local)
            .await
            .unwrap();
        assert_eq!(
            cut.changed_by.chars().count(),
            CHANGED_BY_LEN_MAX,
            "{store}"
        );
    }
}

#[tokio::test]
async fn the_recorder_writes_each_change_a_process_sees() {
    for ledger in every_store().await {
        let store = ledger.store();
        // A process that stopped mid-outage left the row saying unreachable.
        ledger
            .outage()
            .record_reachability(true, "worker-gone", SystemClock.now())
            .await
            .unwrap();
        let view: &'static Reachability = Box::leak(Box::new(Reachability::new()));
        let recorder = {
            let ledger = ledger.clone();
            tokio::spawn(async move {
                view.record_into(ledger.outage(), "worker-new", &SystemClock, RECORD_RETRY)
                    .await;
            })
        };
        let row_says = |down: bool, by: &'static str| {
            let ledger = ledger.clone();
            async move {
                let row = ledger.outage().reachability().await.ok()?;
                (row.down_since.is_some() == down && row.changed_by == by).then_some(())
            }
        };
        let deadline = Duration::from_secs(10);
        let declined = SubmitOutcome::Declined {
            code: "card_declined".into(),
            message: "declined".into(),
            reference: None,
        };
        let refused = SubmitOutcome::Unreachable {
            reason: "connection refused".into(),
        };
        // A fresh process's first answer corrects the stale row.
        view.observe(&declined, SystemClock.now());
        wait_for(&format!("{store}: reachable"), deadline, || {
            row_says(false, "worker-new")
        })
        .await;
        view.observe(&refused, SystemClock.now());
        wait_for(&format!("{store}: unreachable"), deadline, || {
            row_says(true, "worker-new")
        })
        .await;
        view.observe(&declined, SystemClock.now());
        wait_for(&format!("{store}: reachable again"), deadline, || {
            row_says(false, "worker-new")
        })
        .await;
        recorder.abort();
    }
}

/// A ledger whose first `failures` writes fail; keeps every write asked for.
struct Flaky {
    failures: usize,
    writes: std::sync::Mutex<Vec<bool>>,
}

#[async_trait::async_trait]
impl OutageLedger for Flaky {
    async fn record_reachability(
        &self,
        down: bool,
        by: &str,
        local: Timestamp,
    ) -> Result<RecordedReachability, LedgerError> {
        let mut writes = self.writes.lock().unwrap();
        writes.push(down);
        if writes.len() <= self.failures {
            return Err(LedgerError::Corrupt("the test refuses this write".into()));
        }
        Ok(RecordedReachability {
            down_since: down.then_some(local),
            changed_at: local,
            changed_by: by.to_string(),
        })
    }

    async fn reachability(&self) -> Result<RecordedReachability, LedgerError> {
        unreachable!("the recorder never reads the row")
    }
}

/// A recorder of a fresh view, already unreachable, into a ledger that refuses the first write.
fn refused_once(
    retry: Duration,
) -> (
    &'static Reachability,
    &'static Flaky,
    tokio::task::JoinHandle<()>,
) {
    let ledger: &'static Flaky = Box::leak(Box::new(Flaky {
        failures: 1,
        writes: Default::default(),
    }));
    let view: &'static Reachability = Box::leak(Box::new(Reachability::new()));
    view.observe(
        &SubmitOutcome::Unreachable {
            reason: "connection refused".into(),
        },
        SystemClock.now(),
    );
    let recorder = tokio::spawn(view.record_into(ledger, "w", &SystemClock, retry));
    (view, ledger, recorder)
}

#[tokio::test]
async fn a_refused_write_is_tried_again_after_the_pause_or_at_the_next_change() {
    let deadline = Duration::from_secs(10);
    let writes = |ledger: &'static Flaky| ledger.writes.lock().unwrap().clone();

    // A short pause: the refused write is written again without any further change.
    let (_, ledger, recorder) = refused_once(Duration::from_millis(20));
    wait_for("the write again after the pause", deadline, || async {
        (writes(ledger) == [true, true]).then_some(())
    })
    .await;
    recorder.abort();

    // A pause longer than the test: the next change is what wakes the recorder, and only the
    // latest state is written.
    let (view, ledger, recorder) = refused_once(Duration::from_secs(3_600));
    wait_for("the first, refused write", deadline, || async {
        (writes(ledger) == [true]).then_some(())
    })
    .await;
    view.observe(
        &SubmitOutcome::RateLimited {
            reason: "429".into(),
            retry_after_ms: None,
        },
        SystemClock.now(),
    );
    wait_for(
        "the latest state written at the change",
        deadline,
        || async { (writes(ledger) == [true, false]).then_some(()) },
    )
    .await;
    recorder.abort();
}
