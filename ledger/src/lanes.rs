//! Lanes: the ready work of one tenant at one priority. Workers find the lanes that hold due work
//! ([`Queue::ready_lanes`](super::Queue::ready_lanes)) and claim from the lanes they choose, so much
//! from each ([`Queue::claim_lanes`](super::Queue::claim_lanes)): the order across tenants and
//! classes is the worker's scheduler's (`payonce_worker`'s `fair`), the order within a lane the
//! oldest first. Tenants' shares are kept here too (`payonce tenant set-share`).

use super::dialect::Dialect;
use super::intake::JsonColumn;
use super::queue::lease_checked;
use super::record::decode_operation;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use super::{CLAIM_BATCH_MAX, Claimed, LeaseHolder, LedgerError, LimitError, bounded};
use payonce_core::clock::Timestamp;
use payonce_core::id::TenantId;
use payonce_core::priority::{Priority, SHARE_DEFAULT, check_cap, check_share};
use payonce_core::queue_depth::{
    ClassDepth, QUEUE_TENANTS_SHOWN, QueueDepth, TenantDepth, every_class,
};
use serde_json::{Value, json};

/// Most lanes one discovery returns: more tenants than this with ready work at once are served
/// in the order of the index (priority, then tenant), the rest at the next discovery.
pub const LANES_MAX: u32 = 10_000;

/// The columns of a claim's plan, as [`plan_rows`] writes them.
pub(crate) const PLAN_COLUMNS: [(&str, JsonColumn); 3] = [
    ("priority", JsonColumn::Int),
    ("tenant_id", JsonColumn::Text),
    ("n", JsonColumn::Int),
];

/// The ready work of one tenant at one priority.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lane {
    /// Interactive or bulk.
    pub priority: Priority,
    /// Whose.
    pub tenant: TenantId,
}

/// A lane that holds ready rows, as a discovery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyLane {
    /// Which.
    pub lane: Lane,
    /// The earliest `available_at` among its ready rows: due now, or when its first scheduled or
    /// deferred row becomes due.
    pub oldest: Timestamp,
    /// Its tenant's share ([`SHARE_DEFAULT`] without one set).
    pub share: u32,
    /// Its tenant's own cap of the fleet's submissions a second, if one is set.
    pub cap_per_second: Option<u32>,
}

/// How many rows a claim takes from one lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take {
    /// Which.
    pub lane: Lane,
    /// At most this many (≥ 1).
    pub n: u32,
}

/// What a claim that rides on an outcome write takes (`Queue::record_and_claim`).
#[derive(Debug, Clone, Copy)]
pub enum Pick<'a> {
    /// Up to this many due rows, interactive first, then the oldest (0: none).
    Oldest(u32),
    /// By lanes (empty: none).
    Lanes(&'a [Take]),
}

impl Pick<'_> {
    /// Whether it takes nothing.
    pub fn is_empty(&self) -> bool {
        match self {
            Pick::Oldest(n) => *n == 0,
            Pick::Lanes(takes) => takes.is_empty(),
        }
    }
}

/// How a store claims by lanes (`Dialect::claim_lanes`).
pub enum LanesClaim {
    /// One statement over the whole plan: `$1` now, `$2` the plan (a JSON array of
    /// [`PLAN_COLUMNS`]), `$3` owner, `$4` lease expiry.
    Once(&'static str),
    /// One statement per lane, in one transaction: `$1` now, `$2` n, `$3` owner, `$4` lease
    /// expiry, `$5` priority, `$6` tenant.
    PerLane(&'static str),
}

/// The lanes' discovery: `$1` most lanes. Postgres walks `operations_lanes_idx` one descent per
/// lane (a loose index scan), whatever the number of ready rows; SQLite groups its ready rows.
pub(crate) const READY_LANES_POSTGRES: &str = "WITH RECURSIVE lanes AS ( \
       (SELECT priority, tenant_id FROM operations WHERE status = 'ready' \
        ORDER BY priority, tenant_id LIMIT 1) \
       UNION ALL \
       SELECT n.priority, n.tenant_id FROM lanes l CROSS JOIN LATERAL ( \
         SELECT priority, tenant_id FROM operations WHERE status = 'ready' \
         AND (priority, tenant_id) > (l.priority, l.tenant_id) \
         ORDER BY priority, tenant_id LIMIT 1) n) \
     SELECT l.priority, l.tenant_id, \
       (SELECT min(available_at) FROM operations o WHERE o.status = 'ready' \
        AND o.priority = l.priority AND o.tenant_id = l.tenant_id) AS oldest, s.share, \
       c.per_second AS cap \
     FROM (SELECT * FROM lanes LIMIT $1) l LEFT JOIN tenant_shares s ON s.tenant_id = l.tenant_id \
     LEFT JOIN tenant_caps c ON c.tenant_id = l.tenant_id \
     ORDER BY l.priority, l.tenant_id";
pub(crate) const READY_LANES_SQLITE: &str = "SELECT o.priority, o.tenant_id, min(o.available_at) AS oldest, \
       (SELECT s.share FROM tenant_shares s WHERE s.tenant_id = o.tenant_id) AS share, \
       (SELECT c.per_second FROM tenant_caps c WHERE c.tenant_id = o.tenant_id) AS cap \
     FROM operations o WHERE o.status = 'ready' GROUP BY o.priority, o.tenant_id \
     ORDER BY o.priority, o.tenant_id LIMIT $1";
const SET_SHARE: &str = "INSERT INTO tenant_shares (tenant_id, share, updated_at, updated_by) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id) DO UPDATE SET share = excluded.share, \
     updated_at = excluded.updated_at, updated_by = excluded.updated_by";
const CLEAR_SHARE: &str = "DELETE FROM tenant_shares WHERE tenant_id = $1";
const SHARES: &str = "SELECT tenant_id, share FROM tenant_shares ORDER BY tenant_id";
const SET_CAP: &str = "INSERT INTO tenant_caps (tenant_id, per_second, updated_at, updated_by) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id) DO UPDATE SET per_second = excluded.per_second, \
     updated_at = excluded.updated_at, updated_by = excluded.updated_by";
const CLEAR_CAP: &str = "DELETE FROM tenant_caps WHERE tenant_id = $1";
const CAPS: &str = "SELECT tenant_id, per_second FROM tenant_caps ORDER BY tenant_id";

/// The ready queue by class and tenant (metrics): `$1` now, `$2` most tenants named. One pass over
/// the ready rows in the order of `operations_lanes_idx` (priority, tenant, available_at), which
/// holds every column read: an index-only scan on a vacuumed Postgres table (0.15–0.5 s at a
/// million ready rows), whatever the number of settled rows. One row per class and named tenant, and
/// one per class for the rest (`tenant_id` NULL): at most 2 × (`$2` + 1) rows.
const QUEUE_DEPTH: &str = "WITH lanes AS ( \
       SELECT priority, tenant_id, COUNT(*) AS n, \
         COUNT(*) FILTER (WHERE available_at <= $1) AS due, \
         MIN(available_at) FILTER (WHERE available_at <= $1) AS oldest_due \
       FROM operations WHERE status = 'ready' GROUP BY priority, tenant_id), \
     shown AS (SELECT tenant_id FROM lanes GROUP BY tenant_id \
       ORDER BY SUM(n) DESC, tenant_id LIMIT $2) \
     SELECT l.priority, s.tenant_id, CAST(SUM(l.n) AS BIGINT) AS n, \
       CAST(SUM(l.due) AS BIGINT) AS due, MIN(l.oldest_due) AS oldest_due \
     FROM lanes l LEFT JOIN shown s ON s.tenant_id = l.tenant_id \
     GROUP BY l.priority, s.tenant_id";
/// One tenant's ready queue by class (the console's overview): `$1` tenant, `$2` now. The classes
/// are spelled out (the stored numbers of `Priority`) so each is one range of `operations_lanes_idx`.
const TENANT_QUEUE: &str = "SELECT priority, COUNT(*) AS n, \
       COUNT(*) FILTER (WHERE available_at <= $2) AS due, \
       MIN(available_at) FILTER (WHERE available_at <= $2) AS oldest_due \
     FROM operations WHERE status = 'ready' AND priority IN (0, 1) AND tenant_id = $1 \
     GROUP BY priority";

/// The queue depth's statements, for the plan tests: across tenants ([`QUEUE_DEPTH`]: `$1` now,
/// `$2` most tenants named) and of one tenant ([`TENANT_QUEUE`]: `$1` tenant, `$2` now).
pub fn queue_depth_statements() -> [&'static str; 2] {
    [QUEUE_DEPTH, TENANT_QUEUE]
}

/// The class a stored priority names (an unknown one is a corrupt row).
fn priority_of(row: &impl LedgerRow) -> Result<Priority, LedgerError> {
    let stored: i64 = row.get("priority")?;
    Priority::from_stored(stored).ok_or_else(|| {
        LedgerError::Corrupt(format!("a ready row has an unknown priority {stored}"))
    })
}

/// A class's figures from a row of [`QUEUE_DEPTH`] or [`TENANT_QUEUE`].
fn decode_class(row: &impl LedgerRow) -> Result<ClassDepth, LedgerError> {
    Ok(ClassDepth {
        priority: priority_of(row)?,
        ready: row.get("n")?,
        due: row.get("due")?,
        oldest_due: row.get("oldest_due")?,
    })
}

/// Folds the tenants' rows of one class into the class's figures.
fn add_to(classes: &mut Vec<ClassDepth>, row: &ClassDepth) {
    match classes.iter_mut().find(|c| c.priority == row.priority) {
        Some(c) => {
            c.ready += row.ready;
            c.due += row.due;
            c.oldest_due = match (c.oldest_due, row.oldest_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        None => classes.push(row.clone()),
    }
}

/// A tenant's setting kept in a table of its own: `set` (`$1` tenant, `$2` value, `$3` now, `$4`
/// actor) and `clear` (`$1` tenant).
struct TenantSetting {
    set: &'static str,
    clear: &'static str,
}

/// The plan of a claim, as the JSON array its statement reads.
fn plan_rows(takes: &[Take]) -> String {
    let rows: Vec<Value> = takes
        .iter()
        .map(|t| {
            json!({
                "priority": t.lane.priority.stored(),
                "tenant_id": t.lane.tenant.as_str(),
                "n": i64::from(t.n),
            })
        })
        .collect();
    Value::Array(rows).to_string()
}

/// Checks a plan: at least one lane, each taking at least one row, together at most
/// [`CLAIM_BATCH_MAX`].
fn checked(takes: &[Take]) -> Result<(), LedgerError> {
    let total: u64 = takes.iter().map(|t| u64::from(t.n)).sum();
    if takes.is_empty() || takes.iter().any(|t| t.n == 0) || total > u64::from(CLAIM_BATCH_MAX) {
        return Err(LimitError::ClaimBatch.into());
    }
    Ok(())
}

/// Claims by `takes` on `conn` (the caller's transaction when the store runs one statement per
/// lane), each claimed row's submission start recorded as `claim_to_submit` records it.
pub(crate) async fn claim_lanes_on<DB: Dialect>(
    conn: &mut DB::Connection,
    holder: &LeaseHolder<'_>,
    takes: &[Take],
    now: Timestamp,
) -> Result<Vec<Claimed>, LedgerError> {
    checked(takes)?;
    lease_checked(holder)?;
    let expiry = now + holder.lease_ttl;
    let rows = match DB::claim_lanes() {
        LanesClaim::Once(sql) => {
            let stmt = Stmt::new(sql).bind(now).bind(plan_rows(takes));
            DB::fetch_all(&mut *conn, stmt.bind(holder.owner).bind(expiry)).await?
        }
        LanesClaim::PerLane(sql) => {
            let mut rows = Vec::new();
            for take in takes {
                let stmt = Stmt::new(sql).bind(now).bind(i64::from(take.n));
                let stmt = stmt.bind(holder.owner).bind(expiry);
                let stmt = stmt.bind(take.lane.priority.stored());
                rows.extend(DB::fetch_all(&mut *conn, stmt.bind(&take.lane.tenant)).await?);
            }
            rows
        }
    };
    rows.iter().map(decode_operation).collect()
}

impl<DB: Dialect> Store<DB> {
    /// `Queue::claim_lanes`: one statement on a store that claims a plan at once, else one
    /// transaction.
    pub(crate) async fn claim_lanes_now(
        &self,
        holder: &LeaseHolder<'_>,
        takes: &[Take],
        now: Timestamp,
    ) -> Result<Vec<Claimed>, LedgerError> {
        match DB::claim_lanes() {
            LanesClaim::Once(_) => {
                let mut one = super::statement::Single::take(&self.pool).await?;
                let claimed = claim_lanes_on::<DB>(one.conn(), holder, takes, now).await?;
                one.done().await?;
                Ok(claimed)
            }
            LanesClaim::PerLane(_) => {
                let mut tx = self.begin().await?;
                let claimed = claim_lanes_on::<DB>(&mut tx, holder, takes, now).await?;
                tx.commit().await?;
                Ok(claimed)
            }
        }
    }

    /// `Queue::ready_lanes`.
    pub(crate) async fn ready_lanes_now(&self, limit: u32) -> Result<Vec<ReadyLane>, LedgerError> {
        let stmt = Stmt::new(DB::READY_LANES).bind(i64::from(limit.clamp(1, LANES_MAX)));
        self.all(stmt, |r| {
            let stored: i64 = r.get("priority")?;
            let share: Option<i64> = r.get("share")?;
            let cap: Option<i64> = r.get("cap")?;
            Ok(ReadyLane {
                lane: Lane {
                    priority: Priority::from_stored(stored).ok_or_else(|| {
                        LedgerError::Corrupt(format!("a lane has an unknown priority {stored}"))
                    })?,
                    tenant: r.get("tenant_id")?,
                },
                oldest: r.get("oldest")?,
                share: share.map_or(SHARE_DEFAULT, |s| u32::try_from(s).unwrap_or(SHARE_DEFAULT)),
                cap_per_second: cap.and_then(|c| u32::try_from(c).ok()),
            })
        })
        .await
    }

    /// `Operations::queue_depth`.
    pub(crate) async fn queue_depth_now(&self, now: Timestamp) -> Result<QueueDepth, LedgerError> {
        let stmt = Stmt::new(QUEUE_DEPTH).bind(now);
        let rows = self
            .all(stmt.bind(i64::from(QUEUE_TENANTS_SHOWN)), |r| {
                let tenant: Option<String> = r.get("tenant_id")?;
                let tenant = tenant
                    .map(|t| TenantId::parse(&t).map_err(super::row::corrupt))
                    .transpose()?;
                Ok((tenant, decode_class(r)?))
            })
            .await?;
        let mut classes = Vec::new();
        for (_, class) in &rows {
            add_to(&mut classes, class);
        }
        let mut tenants: Vec<TenantDepth> = rows
            .into_iter()
            .map(|(tenant, c)| TenantDepth {
                tenant,
                priority: c.priority,
                ready: c.ready,
                due: c.due,
            })
            .collect();
        // The stores order NULL differently: the rest comes last on both.
        tenants.sort_by(|a, b| {
            (a.tenant.is_none(), &a.tenant, a.priority).cmp(&(
                b.tenant.is_none(),
                &b.tenant,
                b.priority,
            ))
        });
        Ok(QueueDepth {
            classes: every_class(&classes),
            tenants,
        })
    }

    /// One tenant's ready queue by class, every class listed (`ConsoleLedger::overview`).
    pub(crate) async fn tenant_queue_now(
        &self,
        tenant: &TenantId,
        now: Timestamp,
    ) -> Result<Vec<ClassDepth>, LedgerError> {
        let stmt = Stmt::new(TENANT_QUEUE).bind(tenant).bind(now);
        Ok(every_class(&self.all(stmt, decode_class).await?))
    }

    /// `ProfileLedger::set_share`.
    pub(crate) async fn set_share_now(
        &self,
        tenant: &TenantId,
        share: Option<u32>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let share = share.map(check_share).transpose();
        let setting = TenantSetting {
            set: SET_SHARE,
            clear: CLEAR_SHARE,
        };
        self.set_tenant(
            setting,
            tenant,
            share.map_err(LimitError::Share)?,
            actor,
            now,
        )
        .await
    }

    /// `ProfileLedger::set_cap`.
    pub(crate) async fn set_cap_now(
        &self,
        tenant: &TenantId,
        per_second: Option<u32>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let cap = per_second.map(check_cap).transpose();
        let setting = TenantSetting {
            set: SET_CAP,
            clear: CLEAR_CAP,
        };
        self.set_tenant(setting, tenant, cap.map_err(LimitError::Share)?, actor, now)
            .await
    }

    /// Sets (`Some`, checked) or clears a tenant's row of `setting`.
    async fn set_tenant(
        &self,
        setting: TenantSetting,
        tenant: &TenantId,
        value: Option<u32>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let stmt = match value {
            Some(value) => Stmt::new(setting.set)
                .bind(tenant)
                .bind(i64::from(value))
                .bind(now)
                .bind(bounded(actor)),
            None => Stmt::new(setting.clear).bind(tenant),
        };
        self.execute(stmt).await.map(|_| ())
    }

    /// `ProfileLedger::caps`.
    pub(crate) async fn caps_now(&self) -> Result<Vec<(TenantId, u32)>, LedgerError> {
        self.all(Stmt::new(CAPS), |r| {
            let cap: i64 = r.get("per_second")?;
            Ok((r.get("tenant_id")?, u32::try_from(cap).unwrap_or(u32::MAX)))
        })
        .await
    }

    /// `ProfileLedger::shares`.
    pub(crate) async fn shares_now(&self) -> Result<Vec<(TenantId, u32)>, LedgerError> {
        self.all(Stmt::new(SHARES), |r| {
            let share: i64 = r.get("share")?;
            Ok((
                r.get("tenant_id")?,
                u32::try_from(share).unwrap_or(SHARE_DEFAULT),
            ))
        })
        .await
    }
}
