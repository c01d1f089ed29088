//! Fair claims at scale (issue 51): the same number of ready operations loaded once for one tenant
//! and once spread over many (1,000 tenants and 1,000,000 rows in the full run). On each: the
//! lanes' read (`Queue::ready_lanes`), one claim of the worker's full batch by the fair
//! scheduler's plan (`Queue::claim_lanes`: one row from each of 128 lanes where there are many
//! tenants, 128 from the one lane otherwise), and the real worker engines' end-to-end drain of a
//! part of the rows with full bookkeeping. If the claim stays one index descent per lane, the
//! figures with tenants are close to those without.

use crate::database::ScratchDatabase;
use crate::drive::{self, Fleet};
use crate::inprocess::InProcessProcessor;
use crate::load::{self, Kind};
use crate::report::Rate;
use payonce_core::clock::Timestamp;
use payonce_ledger::lanes::LANES_MAX;
use payonce_ledger::{LeaseHolder, SharedLedger};
use payonce_worker::fair::Fair;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections of the measuring ledger.
const CONNECTIONS: u32 = 10;
/// Reads of the lanes measured, and claims.
const SAMPLES: usize = 25;

/// One load's figures.
#[derive(Debug, Clone)]
pub struct LaneCost {
    /// Tenants the rows are spread over.
    pub tenants: i64,
    /// Ready rows loaded.
    pub rows: i64,
    /// Lanes the read found.
    pub lanes: usize,
    /// Median time of one read of the lanes.
    pub read: Duration,
    /// Median time of one claim of the worker's batch by the scheduler's plan.
    pub claim: Duration,
    /// Lanes one claim took from (the plan's length).
    pub claim_lanes: usize,
    /// The engines' drain of a part of the rows.
    pub drain: Rate,
}

/// Loads `rows` ready rows over `tenants` tenants on a fresh database and measures it (see the
/// module's doc); the drain pays `drained` of them, each checked paid exactly once.
pub async fn measure(
    admin_url: &str,
    tenants: i64,
    rows: i64,
    fleet: &Fleet,
    drained: u64,
    deadline: Duration,
) -> anyhow::Result<LaneCost> {
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger: SharedLedger = Arc::new(db.ledger(CONNECTIONS).await?);
    let kind = if tenants > 1 {
        Kind::ReadyTenants(tenants)
    } else {
        Kind::Ready
    };
    load::postgres(&db.url, kind, 1, rows, crate::now_ms()).await?;
    let mut reads = Vec::with_capacity(SAMPLES);
    let mut lanes = Vec::new();
    for _ in 0..SAMPLES {
        let started = Instant::now();
        lanes = ledger.ready_lanes(LANES_MAX).await?;
        reads.push(started.elapsed());
    }
    let found = lanes.len();
    anyhow::ensure!(
        found == usize::try_from(tenants)?,
        "the read found {found} lanes, not {tenants}"
    );
    let mut fair = Fair::default();
    let now = Timestamp::from_millis(crate::now_ms());
    let holder = LeaseHolder {
        owner: "bench-claimer",
        lease_ttl: Duration::from_secs(600),
    };
    let mut claims = Vec::with_capacity(SAMPLES);
    let mut claim_lanes = 0;
    let batch = fleet.config.batch_size;
    for _ in 0..SAMPLES {
        fair.refresh(lanes.clone(), now, Instant::now());
        let takes = fair.plan(batch);
        claim_lanes = takes.len();
        let started = Instant::now();
        let claimed = ledger.claim_lanes(&holder, &takes, now).await?;
        claims.push(started.elapsed());
        anyhow::ensure!(
            claimed.len() == batch as usize,
            "a claim of {batch} took {}",
            claimed.len()
        );
        fair.settle(&takes, &claimed);
    }
    // The claimed rows stay under the measuring lease: the drain pays others.
    let processor = Arc::new(InProcessProcessor::default());
    let drain = drive::until_recorded(&ledger, processor.clone(), fleet, drained, deadline).await?;
    anyhow::ensure!(
        processor.payments() >= drained,
        "the processor holds fewer payments than were recorded"
    );
    crate::check_paid_once(&processor, processor.payments())?;
    db.drop_now().await?;
    Ok(LaneCost {
        tenants,
        rows,
        lanes: found,
        read: median(&mut reads),
        claim: median(&mut claims),
        claim_lanes,
        drain,
    })
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}
