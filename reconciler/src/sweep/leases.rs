//! Expired leases: the first step of every sweep.

use super::{Reconciler, SweepReport, Tally};
use futures_util::stream::{self, StreamExt};
use payonce_core::state::Status;
use payonce_ledger::{ExpireLeases, ExpiredLease, LedgerError};

impl Reconciler {
    /// Expired leases, one page: nothing submitted → `ready`, a submission recorded → `unknown`;
    /// each group one fenced statement.
    pub(crate) async fn sweep_leases(&self, report: &mut SweepReport) -> Result<(), LedgerError> {
        // One read for the page and its writes: a lease expired at `now` stays expired.
        let now = self.clock.read().await?;
        let leases = self
            .ledger
            .expired_leases(now, self.config.batch_size)
            .await?;
        for lease in &leases {
            let target = if lease.submitted { "unknown" } else { "ready" };
            report.actions.push(format!(
                "{}: lease of {} expired -> {target}",
                lease.id, lease.lease_owner
            ));
        }
        if report.dry_run {
            return Ok(());
        }
        // Each group is one fenced statement; `buffered` overlaps the groups and keeps their order.
        // Owned items and `move` blocks: a stream over borrowed items would make the sweep's
        // future not provably `Send` (rustc's higher-ranked lifetime limitation).
        let groups: Vec<Vec<ExpiredLease>> = leases
            .chunks(self.write_batch())
            .map(<[ExpiredLease]>::to_vec)
            .collect();
        let mut writes = stream::iter(groups)
            .map(move |group| async move {
                let moved = self
                    .ledger
                    .expire_leases(
                        &ExpireLeases {
                            leases: &group,
                            actor: &self.config.owner,
                            next_check_at: now,
                        },
                        now,
                    )
                    .await;
                (group.len(), moved)
            })
            .buffered(self.concurrency());
        while let Some((n, moved)) = writes.next().await {
            let moved = match moved {
                Ok(moved) => moved,
                Err(error) => {
                    // Nothing of the group was written; the next sweep finds the same leases.
                    report.errors += u32::try_from(n).unwrap_or(u32::MAX);
                    tracing::warn!(%error, leases = n, "could not expire a group of leases");
                    continue;
                }
            };
            for to in moved {
                let tally = match to {
                    Some(Status::Unknown) => Tally::MarkedUnknown,
                    Some(_) => Tally::Requeued,
                    None => Tally::Fenced,
                };
                report.tally(tally, &self.metrics);
            }
        }
        Ok(())
    }
}
