//! Where a stream's events wait for its client: a channel bounded by the
//! bytes it holds as well as by its count. A client that reads slowly
//! holds a few MiB of its stream in the service, not 64 events of up to a
//! MiB each; and what is left to send when its token expires (sent before
//! its end) is as small.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::Event as SseEvent;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

/// The most event text waiting for one client (an event larger than this
/// waits alone).
pub(super) const OUTBOX_BYTES: usize = 4 * 1024 * 1024;

/// Events waiting for one client, at most.
const OUTBOX_EVENTS: usize = 64;

/// One event for a client, with the size of its text.
pub(super) struct Outgoing {
    event: SseEvent,
    bytes: usize,
}

impl Outgoing {
    /// An event with `data` as its text, and `id` as its SSE id.
    pub(super) fn new(id: Option<String>, data: &str) -> Self {
        let mut event = SseEvent::default();
        if let Some(id) = id {
            event = event.id(id);
        }
        Outgoing {
            event: event.data(data),
            bytes: data.len(),
        }
    }
}

struct Queued {
    event: SseEvent,
    /// Its share of the byte budget, given back once the response takes it.
    _bytes: OwnedSemaphorePermit,
}

/// The sending side of a stream.
pub(super) struct Outbox {
    tx: mpsc::Sender<Queued>,
    budget: Arc<Semaphore>,
}

/// The client went away.
#[derive(Debug)]
pub(super) struct Gone;

impl Outbox {
    /// An outbox, and the events it hands to the response.
    pub(super) fn new() -> (
        Outbox,
        impl tokio_stream::Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
    ) {
        let (tx, rx) = mpsc::channel(OUTBOX_EVENTS);
        let budget = Arc::new(Semaphore::new(OUTBOX_BYTES));
        let events = ReceiverStream::new(rx).map(|queued: Queued| Ok(queued.event));
        (Outbox { tx, budget }, events)
    }

    /// Queues `out`, once the client has room for it.
    pub(super) async fn send(&self, out: Outgoing) -> Result<(), Gone> {
        let share = out.bytes.clamp(1, OUTBOX_BYTES) as u32;
        let bytes = tokio::select! {
            permit = self.budget.clone().acquire_many_owned(share) => permit.map_err(|_| Gone)?,
            _ = self.tx.closed() => return Err(Gone),
        };
        self.tx
            .send(Queued {
                event: out.event,
                _bytes: bytes,
            })
            .await
            .map_err(|_| Gone)
    }

    /// Resolves once the client has gone.
    pub(super) async fn closed(&self) {
        self.tx.closed().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A client that reads nothing holds at most the byte budget of its
    /// stream (and at least one event, however large): the next event
    /// waits until the client takes one.
    #[tokio::test]
    async fn a_client_that_reads_nothing_holds_its_budget_at_most() {
        let (outbox, events) = Outbox::new();
        let mut events = Box::pin(events);
        let mb = "x".repeat(1024 * 1024);
        for _ in 0..4 {
            tokio::time::timeout(
                Duration::from_secs(1),
                outbox.send(Outgoing::new(None, &mb)),
            )
            .await
            .expect("room for four MiB")
            .unwrap();
        }
        let fifth = tokio::time::timeout(
            Duration::from_millis(200),
            outbox.send(Outgoing::new(None, &mb)),
        )
        .await;
        assert!(fifth.is_err(), "a fifth MiB waits for the client");
        // Taken by the client: room again.
        assert!(events.next().await.is_some());
        tokio::time::timeout(
            Duration::from_secs(1),
            outbox.send(Outgoing::new(None, &mb)),
        )
        .await
        .expect("room once one was taken")
        .unwrap();
        // One event larger than the budget still goes, alone.
        while tokio::time::timeout(Duration::from_millis(50), events.next())
            .await
            .is_ok_and(|e| e.is_some())
        {}
        let huge = "y".repeat(OUTBOX_BYTES + 10);
        tokio::time::timeout(
            Duration::from_secs(1),
            outbox.send(Outgoing::new(None, &huge)),
        )
        .await
        .expect("a large event alone")
        .unwrap();
        // A client gone: sending fails rather than waiting.
        drop(events);
        assert!(outbox.send(Outgoing::new(None, "z")).await.is_err());
    }
}
