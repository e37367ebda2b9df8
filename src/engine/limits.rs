//! How many calls may run at once, and how many whole-thread reads and
//! pages: a global limit and one per owner for each. A call holds its
//! permits until it is finished (not until its HTTP response is sent), so
//! a slow or cancelled call frees its slot exactly when it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A global pool of slots and one pool per owner.
struct Slots {
    global: Arc<Semaphore>,
    global_max: usize,
    per_owner_max: usize,
    per_owner: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Slots {
    fn new(global_max: usize, per_owner_max: usize) -> Self {
        let global_max = global_max.max(1);
        Slots {
            global: Arc::new(Semaphore::new(global_max)),
            global_max,
            per_owner_max: per_owner_max.max(1),
            per_owner: Mutex::new(HashMap::new()),
        }
    }

    /// The owner's pool. Pools nobody holds or waits for are forgotten (a
    /// permit, and whoever is about to take one, keeps its pool alive), so
    /// the map stays small and an owner never gets a second pool.
    fn of_owner(&self, owner: &str) -> Arc<Semaphore> {
        let mut map = self.per_owner.lock().expect("limits lock");
        map.retain(|_, s| Arc::strong_count(s) > 1);
        map.entry(owner.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_owner_max)))
            .clone()
    }
}

pub struct Limits {
    slots: Slots,
}

/// A call's slot, shared between the task that holds it and the pipeline,
/// which lets it go early where the call runs nothing: a call posted again
/// while it runs (here or in another process) only waits for its outcome,
/// and must not keep its owner's other calls out meanwhile, nor once its
/// client has gone.
#[derive(Debug, Clone, Default)]
pub struct SharedSlot(std::sync::Arc<std::sync::Mutex<Option<Permit>>>);

impl SharedSlot {
    pub fn new(permit: Option<Permit>) -> Self {
        SharedSlot(std::sync::Arc::new(std::sync::Mutex::new(permit)))
    }

    /// Frees the slot (if it is still held).
    pub fn release(&self) {
        drop(self.take());
    }

    /// The slot, if it is still held, for its holder to keep on with.
    pub fn take(&self) -> Option<Permit> {
        self.0.lock().expect("slot lock").take()
    }
}

/// Held while calls run; dropping it frees the slots.
#[derive(Debug)]
pub struct Permit {
    _global: OwnedSemaphorePermit,
    _owner: OwnedSemaphorePermit,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitExceeded {
    #[error("the service is running its maximum of {0} concurrent tool calls")]
    Global(usize),
    #[error("this owner is running its maximum of {0} concurrent tool calls")]
    Owner(usize),
    #[error("a batch may run at most {0} calls at once under the current limits")]
    TooWide(usize),
}

impl Limits {
    pub fn new(global_max: usize, per_owner_max: usize) -> Self {
        Limits {
            slots: Slots::new(global_max, per_owner_max),
        }
    }

    /// The most slots one request may take at once: the smaller limit.
    pub fn widest(&self) -> usize {
        self.slots.global_max.min(self.slots.per_owner_max)
    }

    /// Take `n` slots for `owner` now, or say which limit is in the way.
    pub fn try_acquire(&self, owner: &str, n: usize) -> Result<Permit, LimitExceeded> {
        let slots = &self.slots;
        let widest = self.widest();
        if n > widest {
            return Err(LimitExceeded::TooWide(widest));
        }
        let n32 = n as u32;
        let owner_permit = slots
            .of_owner(owner)
            .try_acquire_many_owned(n32)
            .map_err(|_| LimitExceeded::Owner(slots.per_owner_max))?;
        let global_permit = slots
            .global
            .clone()
            .try_acquire_many_owned(n32)
            .map_err(|_| LimitExceeded::Global(slots.global_max))?;
        Ok(Permit {
            _global: global_permit,
            _owner: owner_permit,
        })
    }
}

/// What a pool of read slots guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// Reads that hold a whole thread in memory (`/context`, a stream's
    /// `MESSAGES_SNAPSHOT`): a thread has no size limit, so how many of
    /// them run at once is, or a burst of them on a large thread could take
    /// all the memory there is.
    WholeThreads,
    /// Pages of a thread's history or event log, read from the database
    /// (a page holds up to 4 MiB of stored text): one owner paging through
    /// many large threads at once would otherwise take every read
    /// connection of the database.
    Pages,
}

impl std::fmt::Display for ReadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadKind::WholeThreads => "whole threads at once (contexts and snapshots)",
            ReadKind::Pages => "pages at once (history and event-log replays)",
        })
    }
}

/// Slots for reads of one [`ReadKind`]: a read waits up to `wait` for them.
pub struct Reads {
    kind: ReadKind,
    slots: Slots,
    wait: Duration,
}

/// Why a read was not started.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadsBusy {
    #[error("the service is reading its maximum of {1} {0}; retry shortly")]
    Global(ReadKind, usize),
    #[error("this owner is reading its maximum of {1} {0}; retry shortly")]
    Owner(ReadKind, usize),
}

impl Reads {
    pub fn new(kind: ReadKind, global_max: usize, per_owner_max: usize, wait: Duration) -> Self {
        Reads {
            kind,
            slots: Slots::new(global_max, per_owner_max),
            wait,
        }
    }

    /// Slots for one read by `owner`, held until the permit is dropped;
    /// waits up to the configured time for them.
    pub async fn enter(&self, owner: &str) -> Result<Permit, ReadsBusy> {
        self.enter_by(owner, Some(tokio::time::Instant::now() + self.wait))
            .await
    }

    /// Slots for one read by `owner`, however long they take to come free:
    /// for a reader that can wait (a stream's replay), as the one who
    /// gives up is its client.
    pub async fn wait_for(&self, owner: &str) -> Permit {
        self.enter_by(owner, None)
            .await
            .expect("a read without a deadline always gets its slots")
    }

    async fn enter_by(
        &self,
        owner: &str,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Permit, ReadsBusy> {
        async fn take(
            slots: Arc<Semaphore>,
            deadline: Option<tokio::time::Instant>,
        ) -> Option<OwnedSemaphorePermit> {
            let permit = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, slots.acquire_owned())
                    .await
                    .ok()?,
                None => slots.acquire_owned().await,
            };
            Some(permit.expect("the semaphore is never closed"))
        }
        let slots = &self.slots;
        let owner_permit = take(slots.of_owner(owner), deadline)
            .await
            .ok_or(ReadsBusy::Owner(self.kind, slots.per_owner_max))?;
        let global_permit = take(slots.global.clone(), deadline)
            .await
            .ok_or(ReadsBusy::Global(self.kind, slots.global_max))?;
        Ok(Permit {
            _global: global_permit,
            _owner: owner_permit,
        })
    }
}

/// Event streams one owner holds open at once: each takes a connection
/// and a copy of every event of its thread, so one owner opening thousands
/// would multiply every result by thousands.
pub struct Streams {
    slots: Slots,
}

/// Held while an event stream is open.
#[derive(Debug)]
pub struct StreamPermit {
    _owner: OwnedSemaphorePermit,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "this owner has its maximum of {0} event streams open (server.max_streams_per_owner); close one, or retry shortly"
)]
pub struct StreamsBusy(pub usize);

impl Streams {
    pub fn new(per_owner_max: usize) -> Self {
        Streams {
            slots: Slots::new(usize::MAX >> 4, per_owner_max),
        }
    }

    /// A stream's slot for `owner` now, or the limit in the way.
    pub fn try_open(&self, owner: &str) -> Result<StreamPermit, StreamsBusy> {
        let owner_permit = self
            .slots
            .of_owner(owner)
            .try_acquire_owned()
            .map_err(|_| StreamsBusy(self.slots.per_owner_max))?;
        Ok(StreamPermit {
            _owner: owner_permit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_limited_per_owner_and_freed_when_closed() {
        let streams = Streams::new(2);
        let a1 = streams.try_open("a").unwrap();
        let _a2 = streams.try_open("a").unwrap();
        assert_eq!(streams.try_open("a").unwrap_err(), StreamsBusy(2));
        let _b1 = streams.try_open("b").unwrap();
        drop(a1);
        assert!(streams.try_open("a").is_ok());
    }

    #[test]
    fn owner_and_global_limits_and_release() {
        let limits = Limits::new(3, 2);
        let a1 = limits.try_acquire("a", 1).unwrap();
        let _a2 = limits.try_acquire("a", 1).unwrap();
        assert_eq!(
            limits.try_acquire("a", 1).unwrap_err(),
            LimitExceeded::Owner(2)
        );
        let _b1 = limits.try_acquire("b", 1).unwrap();
        assert_eq!(
            limits.try_acquire("b", 1).unwrap_err(),
            LimitExceeded::Global(3)
        );
        drop(a1);
        assert!(
            limits.try_acquire("b", 1).is_ok(),
            "a finished call frees its slot"
        );
        assert_eq!(
            limits.try_acquire("c", 5).unwrap_err(),
            LimitExceeded::TooWide(2)
        );
    }

    #[tokio::test]
    async fn reads_wait_for_a_slot_then_give_up() {
        // No wait: a read whose slot is taken is refused at once.
        let reads = Reads::new(ReadKind::WholeThreads, 3, 2, Duration::ZERO);
        let a1 = reads.enter("a").await.unwrap();
        let a2 = reads.enter("a").await.unwrap();
        let busy = reads.enter("a").await.unwrap_err();
        assert_eq!(busy, ReadsBusy::Owner(ReadKind::WholeThreads, 2));
        assert_eq!(
            busy.to_string(),
            "this owner is reading its maximum of 2 whole threads at once (contexts and snapshots); retry shortly"
        );
        let b1 = reads.enter("b").await.unwrap();
        assert_eq!(
            reads.enter("b").await.unwrap_err(),
            ReadsBusy::Global(ReadKind::WholeThreads, 3)
        );
        drop(a1);
        assert!(
            reads.enter("b").await.is_ok(),
            "an ended read frees its slot"
        );
        // Owners whose reads have ended are forgotten.
        drop((a2, b1));
        let _c = reads.enter("c").await.unwrap();
        let owners: Vec<String> = reads
            .slots
            .per_owner
            .lock()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(owners, ["c"]);

        // With a wait, a read starts as soon as a slot comes free.
        let reads = Arc::new(Reads::new(ReadKind::Pages, 1, 1, Duration::from_secs(60)));
        let first = reads.enter("a").await.unwrap();
        let waiting = tokio::spawn({
            let reads = reads.clone();
            async move { reads.enter("b").await.map(drop) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the second read waits");
        drop(first);
        assert_eq!(waiting.await.unwrap(), Ok(()));
    }
}
