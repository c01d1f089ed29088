//! Reads shared by the requests that arrive together, never by one that arrives later. A request
//! that needs a read (an API key by its digest) while the same read is in flight does not start
//! its own: it waits for the **next** one, which starts after the flight in progress lands, so
//! every request is answered from a read taken after it arrived. A revocation committed before a
//! request arrives is therefore seen by that request's read, as if each request read alone; under
//! load the requests of one key share one statement instead of sending one each.

use crate::errors::HttpError;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

/// The requests waiting for the next read of a key.
type Waiting<V> = Vec<oneshot::Sender<Result<V, HttpError>>>;

/// The reads in flight, by key; each holds the requests waiting for its next read.
pub struct SharedReads<V> {
    flights: Mutex<HashMap<String, Waiting<V>>>,
}

impl<V> Default for SharedReads<V> {
    fn default() -> Self {
        SharedReads {
            flights: Mutex::new(HashMap::new()),
        }
    }
}

impl<V> std::fmt::Debug for SharedReads<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReads")
            .field("in_flight", &self.lock().len())
            .finish()
    }
}

/// Removes a flight whose reader stopped without landing (it panicked), so its key's next
/// request starts a new one; the requests it held are answered with an error.
struct Landing<'a, V> {
    reads: &'a SharedReads<V>,
    key: &'a str,
    landed: bool,
}

impl<V> Drop for Landing<'_, V> {
    fn drop(&mut self) {
        if !self.landed {
            self.reads.lock().remove(self.key);
        }
    }
}

impl<V> SharedReads<V> {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Waiting<V>>> {
        self.flights.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<V: Clone + Send + 'static> SharedReads<V> {
    /// `read()`'s answer for `key`, from a read that starts after this call: its own, or the
    /// next one of the flight in progress.
    pub async fn read<F, Fut>(self: &Arc<Self>, key: String, read: F) -> Result<V, HttpError>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, HttpError>> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let lead = match self.lock().entry(key.clone()) {
            Entry::Occupied(mut flight) => {
                flight.get_mut().push(answer);
                false
            }
            Entry::Vacant(free) => {
                free.insert(vec![answer]);
                true
            }
        };
        if lead {
            // A task of its own: a request that goes away never strands those waiting on it.
            tokio::spawn(Arc::clone(self).fly(key, read));
        }
        answered.await.map_err(|_| {
            HttpError::internal(std::io::Error::other(
                "a shared read stopped before answering",
            ))
        })?
    }

    /// Reads for everyone waiting on `key`, again while more arrived during the read.
    async fn fly<F, Fut>(self: Arc<Self>, key: String, read: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<V, HttpError>>,
    {
        let mut landing = Landing {
            reads: &self,
            key: &key,
            landed: false,
        };
        loop {
            let waiting = {
                let mut flights = self.lock();
                match flights.get_mut(&key) {
                    Some(waiting) if !waiting.is_empty() => std::mem::take(waiting),
                    _ => {
                        flights.remove(&key);
                        landing.landed = true;
                        return;
                    }
                }
            };
            let result = read().await;
            for answer in waiting {
                let _ = answer.send(match &result {
                    Ok(value) => Ok(value.clone()),
                    Err(e) => Err(e.for_another()),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::sync::Notify;

    /// A read that counts itself, answers which read it was, and waits for `gate` to land.
    fn counted(
        reads: Arc<AtomicU32>,
        gate: Arc<Notify>,
    ) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Result<u32, HttpError>> + Send>>
    + Send
    + 'static {
        move || {
            let (reads, gate) = (Arc::clone(&reads), Arc::clone(&gate));
            Box::pin(async move {
                let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
                gate.notified().await;
                Ok(n)
            })
        }
    }

    #[tokio::test]
    async fn a_request_that_arrives_during_a_read_is_answered_by_the_next_read() {
        let shared = Arc::new(SharedReads::<u32>::default());
        let (reads, gate) = (Arc::new(AtomicU32::new(0)), Arc::new(Notify::new()));
        let first = tokio::spawn({
            let (shared, read) = (Arc::clone(&shared), counted(reads.clone(), gate.clone()));
            async move { shared.read("k".into(), read).await }
        });
        while reads.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
        // Read 1 is in flight: these three arrive after it started, so none may get its answer.
        let late: Vec<_> = (0..3)
            .map(|_| {
                let (shared, read) = (Arc::clone(&shared), counted(reads.clone(), gate.clone()));
                tokio::spawn(async move { shared.read("k".into(), read).await })
            })
            .collect();
        while shared.lock().get("k").map_or(0, Vec::len) < 3 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        assert_eq!(first.await.unwrap().unwrap(), 1);
        while reads.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        for request in late {
            assert_eq!(
                request.await.unwrap().unwrap(),
                2,
                "one shared read, taken after they arrived"
            );
        }
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        assert!(shared.lock().is_empty(), "the flight landed");
    }

    #[tokio::test]
    async fn other_keys_read_apart_and_a_failed_read_fails_each_waiting_request() {
        let shared = Arc::new(SharedReads::<u32>::default());
        let a = shared.read("a".into(), || async { Ok(7) });
        let b = shared.read("b".into(), || async {
            Err(HttpError::internal(std::io::Error::other("down")))
        });
        let (a, b) = tokio::join!(a, b);
        assert_eq!(a.unwrap(), 7);
        assert_eq!(b.unwrap_err().code(), crate::errors::ErrorCode::Internal);
        assert!(shared.lock().is_empty());
    }
}
