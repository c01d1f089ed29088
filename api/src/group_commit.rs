//! Group commit of single creates. Concurrent `POST /v1/operations` requests that carry their
//! approval are written together: each request queues its item and waits; a writer takes what is
//! queued (one tenant and key at a time, at most [`GROUP_ITEMS_MAX`]) and writes it as one ledger
//! batch (`create_batch`, the batch route's code path), then answers each request with its own
//! item's result. At most [`GROUP_WRITERS_MAX`] writers run at once, so the requests that arrive
//! while one writes form the next group; a lone request is written at once, alone.
//!
//! What a request is answered does not change: its item is written by the same statements as a
//! batch of one, answered as `create_or_get` then `approve` would answer it alone, and only after
//! the write committed. A group never holds two items of the same business key (the second waits
//! for the next group, and then reads the first's row as the single route would). A group whose
//! write fails for anything but an unavailable ledger is written again item by item, so one item
//! the database refuses fails only its own request.
//!
//! The queue holds one item per request in flight, so the listener's connection limit
//! (`CONNECTIONS_MAX_DEFAULT`, `connections_max`) bounds it. A request that times out or whose
//! client hangs up while queued is still written (creates are idempotent by business key: a retry
//! is answered from the row), as a single write already under way would have been. If its write
//! meets an unavailable ledger (a failover, a statement timeout) when nobody is left to hear the
//! `503`, it is queued again after [`ABANDONED_RETRY_PAUSE`], up to [`ABANDONED_RETRIES_MAX`] times
//! and [`ABANDONED_ITEMS_MAX`] items at once; past those bounds (or when the process stops) it is
//! dropped with an error in the log, and only its client's own retry (it heard nothing, so it
//! retries) writes it. A request still waiting hears the `503` and retries itself.
//!
//! Why: on Postgres most of a create's cost is per statement (the executor's start, the CHECK
//! constraints compiled for each statement, the audit and directory triggers, the commit), not per
//! row. Ten callers sending one create each now share those costs the way one batch request does.

use crate::errors::{ErrorCode, HttpError};
use payonce_core::clock::SharedClock;
use payonce_core::id::TenantId;
use payonce_core::metrics::Counter;
use payonce_ledger::intake::{Batch, BatchItem};
use payonce_ledger::{Created, LedgerError, TenantLedger};
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::oneshot;

/// How an approval given with a service key is recorded (`approvals.method`): by the single and
/// batch create routes and the approve route alike.
pub const SERVICE_APPROVAL: &str = "service";

/// Most single creates one group writes (one ledger batch). Past about 10 items a group's
/// statement costs mostly per row, so larger groups save little and lengthen every wait.
pub const GROUP_ITEMS_MAX: usize = 64;
/// Most groups one api process writes at once. One: the requests that arrive while a group is
/// written all wait for the next, so groups grow with the load. Measured with `payonce-bench
/// --only intake` (10 callers, one request each, four alternating runs): one writer 4.7 creates
/// per write and 0.22–0.34× plain inserts (median 0.30×), two writers 2.6 per write and
/// 0.24–0.28× (median 0.26×), four 1.5 per write and 0.21–0.22×.
pub const GROUP_WRITERS_MAX: usize = 1;

/// How long an item whose client went away waits before its write is tried again, after the
/// ledger was unavailable (the `Retry-After` the client would have heard).
pub const ABANDONED_RETRY_PAUSE: Duration = Duration::from_secs(2);
/// Most times such an item is tried again: with the pause and the statement timeout (15 s) about
/// three minutes of an unavailable ledger.
pub const ABANDONED_RETRIES_MAX: u32 = 10;
/// Most such items waiting to be tried again at once (the listener's default connection limit:
/// as many as were in flight).
pub const ABANDONED_ITEMS_MAX: usize = crate::config::CONNECTIONS_MAX_DEFAULT;

/// Who a group writes for: one tenant, one key's actor (a batch has one of each).
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupKey {
    tenant: TenantId,
    actor: String,
}

/// A request waiting for its item's answer (or, tried again, an item nobody waits for).
struct Waiting {
    key: GroupKey,
    item: BatchItem,
    answer: oneshot::Sender<Result<Created, HttpError>>,
    /// Times the item was queued again after its client went away.
    retries: u32,
}

/// A [`Waiting`] without its item, while the item is in a batch being written.
type Holder = (GroupKey, oneshot::Sender<Result<Created, HttpError>>, u32);

impl Waiting {
    fn into_parts(self) -> (BatchItem, Holder) {
        (self.item, (self.key, self.answer, self.retries))
    }

    fn from_parts(item: BatchItem, (key, answer, retries): Holder) -> Waiting {
        Waiting {
            key,
            item,
            answer,
            retries,
        }
    }
}

/// The requests waiting and the writers running.
#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    writers: usize,
    /// Items whose client went away, waiting out [`ABANDONED_RETRY_PAUSE`].
    abandoned: usize,
}

/// The single creates waiting to be written, shared by every request of one api process, and the
/// ledger and clock they are written with.
pub struct GroupCommit {
    queue: Mutex<Queue>,
    /// Where the groups are written.
    ledger: Arc<dyn TenantLedger>,
    /// Now, for the write and the approval's expiry.
    clock: SharedClock,
    /// How long an approval written in a group lasts (`ApiConfig::approval_ttl`).
    approval_ttl: Duration,
    /// Ledger batches written for grouped single creates.
    groups: Counter,
    /// Single creates written through a group.
    items: Counter,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("groups", &self.groups.get())
            .field("items", &self.items.get())
            .finish()
    }
}

/// Gives the queue's writer slot back when a writer stops, even if it panicked.
struct WriterSlot<'a>(&'a GroupCommit);

impl Drop for WriterSlot<'_> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.writers = queue.writers.saturating_sub(1);
    }
}

impl GroupCommit {
    /// An empty queue writing to `ledger`, approvals lasting `approval_ttl` from `clock`'s now.
    pub fn new(ledger: Arc<dyn TenantLedger>, clock: SharedClock, approval_ttl: Duration) -> Self {
        GroupCommit {
            queue: Mutex::default(),
            ledger,
            clock,
            approval_ttl,
            groups: Counter::default(),
            items: Counter::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ledger batches written for grouped single creates so far.
    pub fn groups(&self) -> &Counter {
        &self.groups
    }

    /// Single creates written through a group so far.
    pub fn items(&self) -> &Counter {
        &self.items
    }

    /// Single creates queued now, not yet taken by a writer.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Writes `item` (a payment with its approval) for `tenant` by `actor` with the requests
    /// queued beside it, and answers it as a batch of one would be answered.
    pub async fn create_approved(
        self: &Arc<Self>,
        tenant: TenantId,
        actor: String,
        item: BatchItem,
    ) -> Result<Created, HttpError> {
        let (answer, answered) = oneshot::channel();
        self.enqueue(vec![Waiting {
            key: GroupKey { tenant, actor },
            item,
            answer,
            retries: 0,
        }]);
        answered.await.map_err(|_| {
            HttpError::internal(std::io::Error::other(
                "the group writer stopped before answering",
            ))
        })?
    }

    /// Queues `items` and starts a writer if one may run.
    fn enqueue(self: &Arc<Self>, items: Vec<Waiting>) {
        let start_writer = {
            let mut queue = self.lock();
            queue.waiting.extend(items);
            let free = queue.writers < GROUP_WRITERS_MAX && !queue.waiting.is_empty();
            if free {
                queue.writers += 1;
            }
            free
        };
        if start_writer {
            // A task of its own: a request that goes away (its client hung up) never strands the
            // others queued behind it.
            tokio::spawn(Arc::clone(self).write_groups());
        }
    }

    /// Answers `waiting` with `result`; an item the ledger could not take (unavailable) whose
    /// client is gone (nobody received the answer) goes to `again`, to be written later.
    fn answer(waiting: Waiting, result: Result<Created, HttpError>, again: &mut Vec<Waiting>) {
        let Waiting {
            key,
            item,
            answer,
            retries,
        } = waiting;
        let unavailable = matches!(&result, Err(e) if e.code() == ErrorCode::Unavailable);
        if answer.send(result).is_err() && unavailable {
            let (answer, _nobody) = oneshot::channel();
            again.push(Waiting {
                key,
                item,
                answer,
                retries,
            });
        }
    }

    /// Queues `items` (their clients gone, the ledger unavailable) again after
    /// [`ABANDONED_RETRY_PAUSE`], within [`ABANDONED_RETRIES_MAX`] and [`ABANDONED_ITEMS_MAX`];
    /// the others are dropped, each with an error in the log.
    fn retry_later(self: &Arc<Self>, items: Vec<Waiting>) {
        if items.is_empty() {
            return;
        }
        let mut kept = Vec::with_capacity(items.len());
        {
            let mut queue = self.lock();
            for mut w in items {
                if w.retries < ABANDONED_RETRIES_MAX && queue.abandoned < ABANDONED_ITEMS_MAX {
                    w.retries += 1;
                    queue.abandoned += 1;
                    kept.push(w);
                } else {
                    tracing::error!(
                        tenant = w.key.tenant.as_str(),
                        business_key = w.item.new.business_key.as_str(),
                        retries = w.retries,
                        "a create whose client went away was not written (the ledger stayed \
                         unavailable); only the client's own retry writes it"
                    );
                }
            }
        }
        if kept.is_empty() {
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(ABANDONED_RETRY_PAUSE).await;
            this.lock().abandoned -= kept.len();
            this.enqueue(kept);
        });
    }

    /// A writer: writes groups until nothing is queued.
    async fn write_groups(self: Arc<Self>) {
        let _slot = WriterSlot(&self);
        loop {
            let group = take_group(&mut self.lock().waiting, GROUP_ITEMS_MAX, |w| {
                (&w.key, w.item.new.business_key.as_str())
            });
            if group.is_empty() {
                return;
            }
            self.groups.inc();
            self.items.inc_by(group.len() as u64);
            self.write_group(group).await;
        }
    }

    /// Writes one group as one ledger batch and answers every request in it. The items move into
    /// the batch and back out of it after the write (a retry needs them), never copied.
    async fn write_group(self: &Arc<Self>, group: Vec<Waiting>) {
        let key = group[0].key.clone();
        let count = group.len();
        let now = self.clock.now();
        let (items, holders): (Vec<BatchItem>, Vec<Holder>) =
            group.into_iter().map(Waiting::into_parts).unzip();
        let mut batch = Batch {
            tenant: key.tenant,
            items,
            actor: key.actor,
            method: SERVICE_APPROVAL.to_string(),
            // Each item keeps its own priority and `not_before` (its `NewOperation`); one scheduled
            // later keeps its approval as long after its `not_before` (`Batch::approval_expires_at`).
            approval_expires_at: now + self.approval_ttl,
        };
        let written = self.ledger.create_batch(&batch, now).await;
        let group = holders
            .into_iter()
            .zip(std::mem::take(&mut batch.items))
            .map(|(holder, item)| Waiting::from_parts(item, holder));
        let mut again = Vec::new();
        match written {
            Ok(results) if results.len() == count => {
                for (w, result) in group.zip(results) {
                    Self::answer(w, result.map_err(HttpError::from), &mut again);
                }
            }
            Ok(_) => {
                for w in group {
                    let e = HttpError::internal(std::io::Error::other(
                        "the ledger answered a group with another number of items",
                    ));
                    Self::answer(w, Err(e), &mut again);
                }
            }
            Err(e) if count == 1 || e.is_unavailable() => {
                let error = HttpError::from(e);
                for w in group {
                    Self::answer(w, Err(error.for_another()), &mut again);
                }
            }
            // Something in the group was refused by the database: each item alone, so it fails only
            // its own request.
            Err(_) => {
                for w in group {
                    let (item, holder) = w.into_parts();
                    batch.items.push(item);
                    let result = one(self.ledger.create_batch(&batch, now).await);
                    let item = batch
                        .items
                        .pop()
                        .unwrap_or_else(|| unreachable!("pushed above"));
                    Self::answer(Waiting::from_parts(item, holder), result, &mut again);
                }
            }
        }
        self.retry_later(again);
    }
}

/// Takes from `queue` the next group: the first item and, in order, those with its key and a
/// business key not yet in the group, up to `max`. The others stay queued, in order.
fn take_group<T>(
    queue: &mut VecDeque<T>,
    max: usize,
    key: impl Fn(&T) -> (&GroupKey, &str),
) -> Vec<T> {
    let Some(first) = queue.pop_front() else {
        return Vec::new();
    };
    let group_key = key(&first).0.clone();
    let mut business_keys: HashSet<String> = HashSet::from([key(&first).1.to_string()]);
    let mut group = vec![first];
    let mut left = VecDeque::with_capacity(queue.len());
    while let Some(next) = queue.pop_front() {
        let (k, business_key) = key(&next);
        if group.len() < max && *k == group_key && !business_keys.contains(business_key) {
            business_keys.insert(business_key.to_string());
            group.push(next);
        } else {
            left.push_back(next);
        }
    }
    *queue = left;
    group
}

/// The answer of a batch of one.
fn one(
    written: Result<Vec<Result<Created, LedgerError>>, LedgerError>,
) -> Result<Created, HttpError> {
    let mut results = written?;
    match (results.pop(), results.is_empty()) {
        (Some(result), true) => Ok(result?),
        _ => Err(HttpError::internal(std::io::Error::other(
            "the ledger answered a one-item batch with another number of items",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: &str, actor: &str) -> GroupKey {
        GroupKey {
            tenant: TenantId::parse(tenant).unwrap_or_else(|e| unreachable!("{e}")),
            actor: actor.to_string(),
        }
    }

    fn take(queue: &mut VecDeque<(GroupKey, &'static str)>, max: usize) -> Vec<&'static str> {
        take_group(queue, max, |(k, b)| (k, b))
            .into_iter()
            .map(|(_, b)| b)
            .collect()
    }

    #[test]
    fn a_group_holds_one_tenant_and_actor_and_each_business_key_once() {
        let (a, b, other_actor) = (
            key("acme", "key:x"),
            key("bolt", "key:x"),
            key("acme", "key:y"),
        );
        let mut queue = VecDeque::from([
            (a.clone(), "k1"),
            (b.clone(), "k2"),
            (a.clone(), "k1"),
            (other_actor.clone(), "k3"),
            (a.clone(), "k4"),
        ]);
        assert_eq!(take(&mut queue, GROUP_ITEMS_MAX), vec!["k1", "k4"]);
        let left: Vec<_> = queue.iter().map(|(k, b)| (k.clone(), *b)).collect();
        assert_eq!(left, vec![(b, "k2"), (a, "k1"), (other_actor, "k3")]);
        assert_eq!(take(&mut queue, GROUP_ITEMS_MAX), vec!["k2"]);
        assert_eq!(take(&mut queue, GROUP_ITEMS_MAX), vec!["k1"]);
        assert_eq!(take(&mut queue, GROUP_ITEMS_MAX), vec!["k3"]);
        assert!(take(&mut queue, GROUP_ITEMS_MAX).is_empty());
    }

    #[test]
    fn a_group_stops_at_its_limit_and_leaves_the_rest_in_order() {
        let a = key("acme", "key:x");
        let names: Vec<&'static str> = (0..GROUP_ITEMS_MAX + 3)
            .map(|i| &*Box::leak(format!("k{i}").into_boxed_str()))
            .collect();
        let mut queue: VecDeque<_> = names.iter().map(|n| (a.clone(), *n)).collect();
        assert_eq!(take(&mut queue, GROUP_ITEMS_MAX), names[..GROUP_ITEMS_MAX]);
        assert_eq!(take(&mut queue, GROUP_ITEMS_MAX), names[GROUP_ITEMS_MAX..]);
    }
}
