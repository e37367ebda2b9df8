//! The in-process event bus: committed events of a thread, fanned out to its
//! live SSE subscribers. The durable copy is the store's event log; the bus
//! only carries what has already committed, and a subscriber that lags falls
//! back to the log, so nothing here can lose an event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::store::StoredEvent;

pub struct EventBus {
    capacity: usize,
    senders: Mutex<HashMap<String, broadcast::Sender<Arc<StoredEvent>>>>,
}

impl EventBus {
    pub fn new(capacity: usize) -> Self {
        EventBus {
            capacity,
            senders: Mutex::new(HashMap::new()),
        }
    }

    /// Fan a committed event out to the thread's subscribers.
    pub fn publish(&self, event: &StoredEvent) {
        let mut senders = self.senders.lock().expect("bus lock poisoned");
        if let Some(tx) = senders.get(&event.thread_id)
            && tx.send(Arc::new(event.clone())).is_err()
        {
            // Nobody listens any more: forget the channel.
            senders.remove(&event.thread_id);
        }
    }

    pub fn subscribe(&self, thread_id: &str) -> broadcast::Receiver<Arc<StoredEvent>> {
        let mut senders = self.senders.lock().expect("bus lock poisoned");
        senders
            .entry(thread_id.to_string())
            .or_insert_with(|| broadcast::channel(self.capacity).0)
            .subscribe()
    }
}
