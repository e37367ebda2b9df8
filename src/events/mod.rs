//! The in-process event bus: committed events of a thread, fanned out to its
//! live SSE subscribers. The durable copy is the store's event log; the bus
//! only carries what has already committed, and a subscriber that lags falls
//! back to the log, so nothing here can lose an event.
//!
//! What the bus holds is bounded: a thread's channel lives only while it has
//! subscribers, and keeps at most `capacity` events for the slowest of them.
//! An event larger than [`LIVE_EVENT_BYTES`] (a large tool result) travels
//! as its position alone: subscribers read it from the log, so a subscriber
//! that stops reading cannot pin large results in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::store::StoredEvent;

/// What the text of an approval's events (`tool_call.approval_required`,
/// `tool_call.approval_decided`) holds.
const APPROVAL_EVENT: &str = "\"name\":\"tool_call.approval_";

/// Events at most this large travel whole; larger ones as their position.
pub const LIVE_EVENT_BYTES: usize = 16 * 1024;

/// What a subscriber receives for one committed event.
#[derive(Debug, Clone)]
pub enum Live {
    /// The event itself.
    Event(Arc<StoredEvent>),
    /// An event too large to carry: its seq, to be read from the log.
    InLog(i64),
    /// The thread was deleted (at this time): its streams end.
    Deleted(i64),
}

impl Live {
    /// The event's position in its thread's log.
    pub fn seq(&self) -> i64 {
        match self {
            Live::Event(e) => e.seq,
            Live::InLog(seq) => *seq,
            Live::Deleted(_) => i64::MAX,
        }
    }
}

type Senders = Mutex<HashMap<String, broadcast::Sender<Live>>>;

pub struct EventBus {
    capacity: usize,
    senders: Arc<Senders>,
    /// Bumped when an approval of this process opens, is decided or goes
    /// with its thread: approval screens look again at once.
    approvals: tokio::sync::watch::Sender<u64>,
}

impl EventBus {
    pub fn new(capacity: usize) -> Self {
        EventBus {
            capacity,
            senders: Arc::new(Mutex::new(HashMap::new())),
            approvals: tokio::sync::watch::channel(0).0,
        }
    }

    /// A receiver that changes whenever an approval of this process
    /// opens, is decided, or goes with its thread.
    pub fn approval_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.approvals.subscribe()
    }

    fn approvals_changed(&self) {
        self.approvals.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Fan a committed event out to the thread's subscribers.
    pub fn publish(&self, event: &StoredEvent) {
        if event.event_type == "CUSTOM" && event.data.contains(APPROVAL_EVENT) {
            self.approvals_changed();
        }
        let senders = self.senders.lock().expect("bus lock poisoned");
        if let Some(tx) = senders.get(&event.thread_id) {
            let live = if event.data.len() > LIVE_EVENT_BYTES {
                Live::InLog(event.seq)
            } else {
                Live::Event(Arc::new(event.clone()))
            };
            // No receiver left: the last subscription is being dropped and
            // removes the channel itself.
            let _ = tx.send(live);
        }
    }

    /// Tell the thread's subscribers, if it has any, that its log holds
    /// events up to `seq` that came on no bus of this process (another
    /// process committed them): each reads what it lacks from the log.
    pub fn nudge(&self, thread_id: &str, seq: i64) {
        let senders = self.senders.lock().expect("bus lock poisoned");
        if let Some(tx) = senders.get(thread_id) {
            let _ = tx.send(Live::InLog(seq));
        }
    }

    /// Tell the thread's subscribers, if it has any, that it was deleted
    /// at `at_ms`.
    pub fn deleted(&self, thread_id: &str, at_ms: i64) {
        self.approvals_changed();
        let senders = self.senders.lock().expect("bus lock poisoned");
        if let Some(tx) = senders.get(thread_id) {
            let _ = tx.send(Live::Deleted(at_ms));
        }
    }

    /// [`nudge`](Self::nudge) every thread with subscribers: any of them
    /// may have events in the log.
    pub fn nudge_all(&self) {
        let senders = self.senders.lock().expect("bus lock poisoned");
        for tx in senders.values() {
            let _ = tx.send(Live::InLog(i64::MAX));
        }
    }

    /// Subscribe to a thread's committed events, from now on.
    pub fn subscribe(&self, thread_id: &str) -> Subscription {
        let mut senders = self.senders.lock().expect("bus lock poisoned");
        let receiver = senders
            .entry(thread_id.to_string())
            .or_insert_with(|| broadcast::channel(self.capacity).0)
            .subscribe();
        Subscription {
            receiver,
            thread_id: thread_id.to_string(),
            senders: Arc::clone(&self.senders),
        }
    }

    /// How many threads have a channel (that is, live subscribers).
    pub fn threads(&self) -> usize {
        self.senders.lock().expect("bus lock poisoned").len()
    }
}

/// One subscriber's view of a thread's events. The last one dropped
/// removes the thread's channel, so a thread watched once costs nothing
/// after.
pub struct Subscription {
    receiver: broadcast::Receiver<Live>,
    thread_id: String,
    senders: Arc<Senders>,
}

impl Subscription {
    pub async fn recv(&mut self) -> Result<Live, broadcast::error::RecvError> {
        self.receiver.recv().await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut senders = self.senders.lock().expect("bus lock poisoned");
        // This receiver is still counted until the fields drop.
        if senders
            .get(&self.thread_id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            senders.remove(&self.thread_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(thread: &str, seq: i64, data: &str) -> StoredEvent {
        StoredEvent {
            thread_id: thread.into(),
            seq,
            event_type: "CUSTOM".into(),
            data: data.into(),
            created_at_ms: 0,
            from_message: None,
        }
    }

    #[tokio::test]
    async fn a_channel_lives_while_it_has_subscribers() {
        let bus = EventBus::new(8);
        let mut a = bus.subscribe("t");
        let b = bus.subscribe("t");
        let _other = bus.subscribe("u");
        assert_eq!(bus.threads(), 2);
        drop(b);
        assert_eq!(bus.threads(), 2, "a still listens");
        bus.publish(&event("t", 1, "{}"));
        assert_eq!(a.recv().await.unwrap().seq(), 1);
        drop(a);
        assert_eq!(bus.threads(), 1, "t is forgotten with its last subscriber");
        bus.publish(&event("t", 2, "{}"));
        assert_eq!(bus.threads(), 1, "publishing to nobody creates nothing");
    }

    #[tokio::test]
    async fn large_events_travel_as_their_position() {
        let bus = EventBus::new(8);
        let mut sub = bus.subscribe("t");
        bus.publish(&event("t", 1, "{}"));
        bus.publish(&event("t", 2, &"x".repeat(LIVE_EVENT_BYTES + 1)));
        assert!(matches!(sub.recv().await.unwrap(), Live::Event(e) if e.seq == 1));
        assert!(matches!(sub.recv().await.unwrap(), Live::InLog(2)));
    }
}
