//! Tuning: how the daemon splits its in-flight slots into pipelines and how long claims and outcome
//! writes wait to form groups. Internal, not an operator's setting: `payonce worker` keeps
//! [`Tuning::default`] (chosen by measurement, docs/decisions.md, "The worker's tuning is
//! internal"); tests and the bench vary it with [`Worker::tuned`](super::Worker::tuned). Every field
//! is bounded, and [`Tuning::validate`] refuses a value outside its bound.

use std::time::Duration;

/// Default [`Tuning::claim_cooldown`].
pub const CLAIM_COOLDOWN_DEFAULT: Duration = Duration::from_millis(5);
/// Default [`Tuning::record_linger`].
pub const RECORD_LINGER_DEFAULT: Duration = Duration::from_millis(2);
/// Default [`Tuning::pipelines`].
pub const PIPELINES_DEFAULT: usize = 2;
/// Most [`Tuning::pipelines`]: each keeps a claim and an outcome write of its own running, so more
/// than a few per worker only adds statements competing for the same database.
pub const PIPELINES_MAX: usize = 16;
/// Default [`Tuning::record_writes`].
pub const RECORD_WRITES_DEFAULT: usize = 2;
/// Most [`Tuning::record_writes`]: each holds a database connection for its transaction, and a
/// worker's pool is shared by its pipelines, claims, renewals and writes.
pub const RECORD_WRITES_MAX: usize = 8;
/// Longest [`Tuning::claim_cooldown`] and [`Tuning::record_linger`]: each delays work that is
/// ready, so neither may approach a processor's own latency.
pub const BATCH_WAIT_MAX: Duration = Duration::from_millis(1_000);

/// The daemon's grouping and pipelining (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// Independent claim → submit → record loops the in-flight slots are split over (at most one
    /// per slot): each claims into its own share of `concurrency` and writes its own outcomes, so
    /// one worker keeps a claim and an outcome write of each running at once. The total in flight
    /// is still `concurrency`.
    pub pipelines: usize,
    /// With fewer than a full claim's worth of free slots, how long after the previous claim
    /// started the next one waits for more slots to free up. Zero claims at every free slot.
    pub claim_cooldown: Duration,
    /// How long an outcome waits for others to join its write (the write starts sooner when
    /// `record_batch_max` are queued). Zero writes what is queued at once.
    pub record_linger: Duration,
    /// Outcome writes one pipeline keeps under way at once (1 to [`RECORD_WRITES_MAX`]): outcomes
    /// that arrive during a write form the next group and start it, instead of waiting for that
    /// write's commit.
    pub record_writes: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            pipelines: PIPELINES_DEFAULT,
            claim_cooldown: CLAIM_COOLDOWN_DEFAULT,
            record_linger: RECORD_LINGER_DEFAULT,
            record_writes: RECORD_WRITES_DEFAULT,
        }
    }
}

impl Tuning {
    /// Each pipeline's share of `concurrency` in-flight slots: `pipelines` shares (fewer when there
    /// are fewer slots: a pipeline needs one), as even as they divide, together exactly
    /// `concurrency`.
    pub fn pipeline_slots(&self, concurrency: usize) -> Vec<usize> {
        let n = self.pipelines.clamp(1, concurrency.max(1));
        (0..n)
            .map(|i| concurrency / n + usize::from(i < concurrency % n))
            .collect()
    }

    /// Refuses a value outside its bound.
    pub fn validate(&self) -> Result<(), TuningError> {
        if self.pipelines == 0 || self.pipelines > PIPELINES_MAX {
            return Err(TuningError::Pipelines);
        }
        if self.record_writes == 0 || self.record_writes > RECORD_WRITES_MAX {
            return Err(TuningError::RecordWrites);
        }
        if self.claim_cooldown > BATCH_WAIT_MAX || self.record_linger > BATCH_WAIT_MAX {
            return Err(TuningError::BatchWaitTooLong);
        }
        Ok(())
    }
}

/// Tuning [`Tuning::validate`] refuses, one variant per bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TuningError {
    /// Zero pipelines would never claim; more than [`PIPELINES_MAX`] only add competing statements.
    #[error("pipelines must be between 1 and {max}", max = PIPELINES_MAX)]
    Pipelines,
    /// No outcome write at a time would never record; more than [`RECORD_WRITES_MAX`] would take
    /// the pool's connections from claims and renewals.
    #[error("record writes must be between 1 and {max}", max = RECORD_WRITES_MAX)]
    RecordWrites,
    /// A claim cooldown or record linger over [`BATCH_WAIT_MAX`] would hold ready work back.
    #[error("claim cooldown and record linger must be at most 1000 ms")]
    BatchWaitTooLong,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_validates_and_values_out_of_bounds_are_refused() {
        let ok = Tuning::default();
        assert!(ok.validate().is_ok());
        let refused = |change: fn(&mut Tuning)| {
            let mut bad = ok.clone();
            change(&mut bad);
            bad.validate().unwrap_err()
        };
        assert_eq!(
            refused(|t| t.claim_cooldown = BATCH_WAIT_MAX + Duration::from_millis(1)),
            TuningError::BatchWaitTooLong
        );
        assert_eq!(
            refused(|t| t.record_linger = BATCH_WAIT_MAX + Duration::from_millis(1)),
            TuningError::BatchWaitTooLong
        );
        assert_eq!(refused(|t| t.pipelines = 0), TuningError::Pipelines);
        assert_eq!(
            TuningError::Pipelines.to_string(),
            format!("pipelines must be between 1 and {PIPELINES_MAX}")
        );
        assert_eq!(
            refused(|t| t.pipelines = PIPELINES_MAX + 1),
            TuningError::Pipelines
        );
        assert_eq!(refused(|t| t.record_writes = 0), TuningError::RecordWrites);
        assert_eq!(
            TuningError::RecordWrites.to_string(),
            format!("record writes must be between 1 and {RECORD_WRITES_MAX}")
        );
        assert_eq!(
            refused(|t| t.record_writes = RECORD_WRITES_MAX + 1),
            TuningError::RecordWrites
        );
        let at_the_limit = Tuning {
            pipelines: PIPELINES_MAX,
            claim_cooldown: BATCH_WAIT_MAX,
            record_linger: BATCH_WAIT_MAX,
            record_writes: RECORD_WRITES_MAX,
        };
        assert!(at_the_limit.validate().is_ok());
    }

    #[test]
    fn the_slots_are_split_evenly_over_the_pipelines_one_slot_at_least_each() {
        let split = |concurrency: usize, pipelines: usize| {
            Tuning {
                pipelines,
                ..Tuning::default()
            }
            .pipeline_slots(concurrency)
        };
        assert_eq!(split(512, 2), vec![256, 256]);
        assert_eq!(split(64, 1), vec![64]);
        assert_eq!(split(7, 3), vec![3, 2, 2]);
        // Fewer slots than pipelines: one pipeline per slot.
        assert_eq!(split(1, PIPELINES_DEFAULT), vec![1]);
        assert_eq!(split(3, 16), vec![1, 1, 1]);
        for (concurrency, pipelines) in [(512, 2), (7, 3), (3, 16), (100, 16)] {
            assert_eq!(
                split(concurrency, pipelines).iter().sum::<usize>(),
                concurrency
            );
        }
    }
}
