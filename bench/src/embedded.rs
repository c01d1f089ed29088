//! SQLite embedded mode: the same worker engine on a durable file (WAL, `synchronous=FULL`), one
//! connection, the in-process processor. The single-node figure.

use crate::database;
use crate::drive::{self, Fleet};
use crate::inprocess::InProcessProcessor;
use crate::load;
use crate::report::Rate;
use payonce_ledger::SharedLedger;
use std::sync::Arc;
use std::time::Duration;

/// Loads `operations` ready rows into a new SQLite file and drains them; checks each was paid once.
pub async fn throughput(
    fleet: &Fleet,
    operations: u64,
    deadline: Duration,
) -> anyhow::Result<Rate> {
    let (ledger, path) = database::sqlite_file().await?;
    let result = async {
        load::sqlite(
            ledger.pool(),
            1,
            i64::try_from(operations)?,
            crate::now_ms(),
        )
        .await?;
        let shared: SharedLedger = Arc::new(ledger.clone());
        let processor = Arc::new(InProcessProcessor::default());
        let rate =
            drive::until_recorded(&shared, processor.clone(), fleet, operations, deadline).await?;
        drive::check_all_succeeded(&shared, operations).await?;
        crate::check_paid_once(&processor, operations)?;
        Ok(rate)
    }
    .await;
    ledger.pool().close().await;
    database::remove_sqlite(&path);
    result
}
