//! What a long thread's deletion leaves: [`super::WriteOp::DeleteThread`]
//! stamps the thread deleted at once and, past
//! [`super::checks::DELETE_AT_ONCE`] rows, leaves its messages, events and
//! calls to be removed here, [`PURGE_CHUNK`] rows of each table per
//! transaction with a pause between, so the writer's batches go on
//! meanwhile instead of waiting for one large delete. Nothing reads them
//! in between: a deleted thread is gone to every route (`410`). A process
//! stopped before it finished leaves them to the next start
//! ([`Purger::resume`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{DynStore, StoreResult};

/// Rows of each of the purged tables removed per transaction.
pub const PURGE_CHUNK: i64 = 500;

/// Failures in a row after which a purge stops until the next start.
const GIVE_UP_AFTER: u32 = 10;

/// Purges deleted threads' rows in the background, one task per thread.
#[derive(Clone)]
pub struct Purger {
    store: DynStore,
    shutdown: CancellationToken,
    pause: Duration,
    running: Arc<Mutex<HashSet<String>>>,
}

impl Purger {
    /// Purges through `store` until `shutdown`, pausing `pause` between
    /// chunks.
    pub fn new(store: DynStore, shutdown: CancellationToken, pause: Duration) -> Purger {
        Purger {
            store,
            shutdown,
            pause,
            running: Arc::default(),
        }
    }

    /// Remove what the deletion of `thread_id` left, in the background: a
    /// thread whose rows are gone (or that is not deleted) costs one look.
    pub fn purge(&self, thread_id: &str) {
        if !self.lock().insert(thread_id.to_string()) {
            return;
        }
        let purger = self.clone();
        let thread_id = thread_id.to_string();
        tokio::spawn(async move {
            purger.run(&thread_id).await;
            purger.lock().remove(&thread_id);
        });
    }

    /// At start-up: purge every deleted thread whose rows are still there.
    /// How many there were.
    pub async fn resume(&self) -> StoreResult<usize> {
        let threads = self.store.unpurged_threads().await?;
        for thread_id in &threads {
            self.purge(thread_id);
        }
        Ok(threads.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn run(&self, thread_id: &str) {
        let mut failures = 0;
        let mut chunks = 0u64;
        loop {
            let step = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                step = self.store.purge_deleted(thread_id, PURGE_CHUNK) => step,
            };
            let wait = match step {
                Ok(true) => {
                    failures = 0;
                    chunks += 1;
                    self.pause
                }
                Ok(false) => {
                    if chunks > 0 {
                        tracing::info!(thread = %thread_id, chunks = chunks + 1, "a deleted thread's rows are purged");
                    }
                    return;
                }
                Err(e) => {
                    failures += 1;
                    if failures >= GIVE_UP_AFTER {
                        tracing::warn!(thread = %thread_id, error = %e, "a deleted thread's rows could not be purged; the next start purges them");
                        return;
                    }
                    if failures == 1 {
                        tracing::warn!(thread = %thread_id, error = %e, "purging a deleted thread's rows failed; trying again");
                    }
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}
