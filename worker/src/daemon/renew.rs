//! Renew and release: the leases this worker still drives are extended on a timer (through
//! shutdown, so in-flight submissions keep theirs); work not started is given back.

use super::Worker;
use payonce_core::id::OperationId;
use payonce_ledger::{Fence, Operation};
use tokio::sync::watch;

impl Worker {
    /// Renews the held leases every `renew_interval` until the task is aborted.
    pub(super) async fn renew_loop(&self, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.config.renew_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => {}
            }
            // Renewal continues through shutdown so in-flight submissions keep their leases.
            let held: Vec<OperationId> = self.held().iter().cloned().collect();
            let renewed = async {
                let now = self.clock.read().await?;
                self.ledger
                    .renew(&self.config.lease_holder(), &held, now)
                    .await
            };
            if let Err(error) = renewed.await {
                tracing::warn!(%error, "lease renewal failed");
            }
        }
    }

    /// Gives the leases of `claimed` back (nothing of them was sent).
    pub(super) async fn release_all(&self, claimed: &[Operation]) {
        self.let_go(claimed);
        if claimed.is_empty() {
            return;
        }
        let now = match self.clock.read().await {
            Ok(now) => now,
            Err(error) => {
                tracing::warn!(%error, n = claimed.len(), "could not release; the leases will lapse");
                return;
            }
        };
        for op in claimed {
            match self
                .ledger
                .release(&Fence::of(op), &self.config.owner, now)
                .await
            {
                Ok(()) => {
                    self.metrics.released.inc();
                }
                Err(error) => {
                    tracing::warn!(operation = %op.id, %error, "could not release; the lease will lapse")
                }
            }
        }
    }
}
