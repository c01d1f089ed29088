//! The claim's plan and budget: the worker reads the lanes with due work into its [`Fair`]
//! scheduler, takes write permits before it claims (so work waits for the processor's budget in
//! the ledger, in the scheduler's order, not in a line of claimed work), and claims the plan.

use super::Worker;
use crate::fair::Fair;
use payonce_ledger::lanes::{LANES_MAX, Take};
use payonce_ledger::{LedgerError, Operation};
use payonce_processor::limiter::{Budget, Decision, acquire_up_to, take_ready};
use std::time::Instant;

impl Worker {
    /// Whether any lane holds due work, reading the lanes first when the scheduler's read is stale.
    /// One read at a time per process, and the scheduler is not locked during it: while lanes are
    /// known, a caller that finds a read under way goes on with them; with none known, it waits
    /// for that read.
    pub(super) async fn lanes_known(&self) -> Result<bool, LedgerError> {
        let known = {
            let fair = self.fair.lock().await;
            if !fair.stale(Instant::now()) {
                return Ok(fair.has_work());
            }
            fair.has_work()
        };
        let reading = match self.lane_read.try_lock() {
            Ok(reading) => reading,
            Err(_) if known => return Ok(true),
            Err(_) => {
                let reading = self.lane_read.lock().await;
                let fair = self.fair.lock().await;
                if !fair.stale(Instant::now()) {
                    return Ok(fair.has_work());
                }
                drop(fair);
                reading
            }
        };
        let now = self.clock.read().await?;
        let read = self.ledger.ready_lanes(LANES_MAX).await?;
        let mut fair = self.fair.lock().await;
        fair.refresh(read, now, Instant::now());
        drop(reading);
        self.metrics.lane_reads.inc();
        Ok(fair.has_work())
    }

    /// The next plan reads the lanes first.
    pub(super) async fn forget_lanes(&self) {
        self.fair.lock().await.forget();
    }

    /// Up to `want` write permits: waits for the first (within the policy's wait bound), then
    /// takes those granted at once. `None`: none within the bound.
    pub(super) async fn permits(&self, want: u32) -> Option<u32> {
        let policy = &self.config.submit;
        if !policy.limiter.paces() {
            return Some(want);
        }
        acquire_up_to(
            policy.limiter.as_ref(),
            Budget::Write,
            want,
            policy.rate_limit_wait_max,
        )
        .await
        .ok()
        .map(|(granted, _)| granted)
    }

    /// Up to `want` write permits granted without waiting (an outcome write's refill).
    pub(super) async fn permits_ready(&self, want: u32) -> u32 {
        if !self.config.submit.limiter.paces() {
            return want;
        }
        take_ready(self.config.submit.limiter.as_ref(), Budget::Write, want).await
    }

    /// The plan of a claim of up to `want` rows (empty: no lane known), each capped tenant's part
    /// cut to the permits its cap grants now (its lane held back until the next read if cut).
    pub(super) async fn plan(&self, want: u32) -> Vec<Take> {
        if want == 0 {
            return Vec::new();
        }
        let mut fair = self.fair.lock().await;
        let mut takes = fair.plan(want);
        let limiter = self.config.submit.limiter.as_ref();
        for take in &mut takes {
            let Some(cap) = fair.cap(&take.lane) else {
                continue;
            };
            let mut granted = 0;
            while granted < take.n
                && limiter
                    .try_acquire_cap(take.lane.tenant.as_str(), cap)
                    .await
                    == Decision::Granted
            {
                granted += 1;
            }
            if granted < take.n {
                fair.hold_back(&take.lane, take.n - granted);
                take.n = granted;
            }
        }
        takes.retain(|t| t.n > 0);
        takes
    }

    /// Tells the scheduler what a claim of `takes` returned.
    pub(super) async fn settle(&self, takes: &[Take], claimed: &[Operation]) {
        if !takes.is_empty() {
            self.fair.lock().await.settle(takes, claimed);
        }
    }

    /// Claims by the scheduler's plan of up to `want` rows, on the database's time. A plan left
    /// empty by another pipeline's claim (it found the lanes dry meanwhile) reads the lanes again
    /// first.
    pub(super) async fn claim_fair(&self, want: u32) -> Result<Vec<Operation>, LedgerError> {
        let now = self.clock.read().await?;
        let mut takes = self.plan(want).await;
        if takes.is_empty() {
            self.forget_lanes().await;
            if !self.lanes_known().await? {
                return Ok(Vec::new());
            }
            takes = self.plan(want).await;
            if takes.is_empty() {
                return Ok(Vec::new());
            }
        }
        let claimed = self
            .ledger
            .claim_lanes(&self.config.lease_holder(), &takes, now)
            .await;
        self.settle(&takes, claimed.as_deref().unwrap_or_default())
            .await;
        claimed
    }
}

/// The scheduler a worker process's pipelines share.
pub(super) type SharedFair = tokio::sync::Mutex<Fair>;
