//! A bounded write queue for a backend's writer: writers wait while it is full (the gateway
//! thread tolerates seconds; nothing is dropped), with counters for metrics and one WARN per
//! burst of waiting, not one per write.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The write queue's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Most items it holds; a writer waits for room beyond that.
    pub capacity: usize,
    /// Items in it now.
    pub depth: usize,
    /// The most items it held at once.
    pub high_water: usize,
    /// How many writes had to wait for room.
    pub waits: u64,
    /// How long writers waited in all.
    pub waited: Duration,
}

/// A counter on a cache line of its own: the writers bump one, the writer the other, and they
/// must not take turns owning one line per message.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Line(AtomicUsize);

#[derive(Debug)]
struct Counters {
    name: &'static str,
    capacity: usize,
    /// Items queued so far (by the writers).
    sent: Line,
    /// Items taken so far (by the one receiver).
    taken: Line,
    high_water: AtomicUsize,
    waits: AtomicU64,
    waited_ns: AtomicU64,
    /// Set while a burst of waiting goes on (so it is warned about once).
    full: AtomicBool,
}

/// The writers' end; clones share the queue.
#[derive(Debug)]
pub struct BoundedSender<T> {
    sender: SyncSender<T>,
    counters: Arc<Counters>,
}

impl<T> Clone for BoundedSender<T> {
    fn clone(&self) -> Self {
        BoundedSender {
            sender: self.sender.clone(),
            counters: Arc::clone(&self.counters),
        }
    }
}

/// Why [`BoundedSender::send_while`] gave an item back.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused<T> {
    /// The writer is gone.
    Gone(T),
    /// The queue stayed full and the caller stopped waiting.
    GaveUp(T),
}

/// The writer's end.
#[derive(Debug)]
pub struct BoundedReceiver<T> {
    receiver: Receiver<T>,
    counters: Arc<Counters>,
}

/// A queue holding at most `capacity` items (at least 1); `name` names it in logs.
pub fn bounded<T>(name: &'static str, capacity: usize) -> (BoundedSender<T>, BoundedReceiver<T>) {
    let capacity = capacity.max(1);
    let (sender, receiver) = mpsc::sync_channel(capacity);
    let counters = Arc::new(Counters {
        name,
        capacity,
        sent: Line::default(),
        taken: Line::default(),
        high_water: AtomicUsize::new(0),
        waits: AtomicU64::new(0),
        waited_ns: AtomicU64::new(0),
        full: AtomicBool::new(false),
    });
    (
        BoundedSender {
            sender,
            counters: Arc::clone(&counters),
        },
        BoundedReceiver { receiver, counters },
    )
}

impl<T> BoundedSender<T> {
    /// Queues an item, waiting while the queue is full; gives it back when the writer is gone.
    pub fn send(&self, item: T) -> Result<(), T> {
        let counters = &*self.counters;
        match self.sender.try_send(item) {
            Ok(()) => {
                if counters.full.load(Ordering::Relaxed)
                    && counters.full.swap(false, Ordering::Relaxed)
                {
                    tracing::info!(
                        queue = counters.name,
                        "the store's writes no longer wait for room"
                    );
                }
            }
            Err(TrySendError::Disconnected(item)) => return Err(item),
            Err(TrySendError::Full(item)) => {
                if !counters.full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        queue = counters.name,
                        capacity = counters.capacity,
                        "the store's write queue is full: writers wait for the disk (nothing is dropped)"
                    );
                }
                let started = Instant::now();
                let sent = self.sender.send(item);
                counters.waits.fetch_add(1, Ordering::Relaxed);
                let waited = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                counters.waited_ns.fetch_add(waited, Ordering::Relaxed);
                if let Err(mpsc::SendError(item)) = sent {
                    return Err(item);
                }
            }
        }
        let sent = counters.sent.0.fetch_add(1, Ordering::Relaxed) + 1;
        let depth = sent.saturating_sub(counters.taken.0.load(Ordering::Relaxed));
        if depth > counters.high_water.load(Ordering::Relaxed) {
            counters.high_water.fetch_max(depth, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Queues an item, waiting while the queue is full for as long as `keep_waiting` answers
    /// true (asked about every millisecond): for a writer that knows when waiting is pointless
    /// (its database is unreachable). Gives the item back when the writer is gone or waiting
    /// stopped.
    pub fn send_while(
        &self,
        item: T,
        mut keep_waiting: impl FnMut() -> bool,
    ) -> Result<(), Refused<T>> {
        let counters = &*self.counters;
        let mut item = item;
        let mut started: Option<Instant> = None;
        loop {
            match self.sender.try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(back)) => return Err(Refused::Gone(back)),
                Err(TrySendError::Full(back)) => {
                    if !keep_waiting() {
                        return Err(Refused::GaveUp(back));
                    }
                    if started.is_none() {
                        started = Some(Instant::now());
                        counters.waits.fetch_add(1, Ordering::Relaxed);
                        if !counters.full.swap(true, Ordering::Relaxed) {
                            tracing::warn!(
                                queue = counters.name,
                                capacity = counters.capacity,
                                "the store's write queue is full: writers wait for the database (nothing is dropped)"
                            );
                        }
                    }
                    item = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        match started {
            Some(started) => {
                let waited = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                counters.waited_ns.fetch_add(waited, Ordering::Relaxed);
            }
            None => {
                if counters.full.load(Ordering::Relaxed)
                    && counters.full.swap(false, Ordering::Relaxed)
                {
                    tracing::info!(
                        queue = counters.name,
                        "the store's writes no longer wait for room"
                    );
                }
            }
        }
        let sent = counters.sent.0.fetch_add(1, Ordering::Relaxed) + 1;
        let depth = sent.saturating_sub(counters.taken.0.load(Ordering::Relaxed));
        if depth > counters.high_water.load(Ordering::Relaxed) {
            counters.high_water.fetch_max(depth, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The queue's figures.
    pub fn stats(&self) -> QueueStats {
        self.counters.stats()
    }
}

impl Counters {
    fn stats(&self) -> QueueStats {
        QueueStats {
            capacity: self.capacity,
            depth: self
                .sent
                .0
                .load(Ordering::Relaxed)
                .saturating_sub(self.taken.0.load(Ordering::Relaxed)),
            high_water: self.high_water.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            waited: Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed)),
        }
    }

    fn taken(&self) {
        // One receiver: a plain add, on its own line.
        self.taken.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl<T> BoundedReceiver<T> {
    /// The next item, waiting at most `timeout`; `Err(Timeout)` when none came,
    /// `Err(Disconnected)` when every sender is gone.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let item = self.receiver.recv_timeout(timeout)?;
        self.counters.taken();
        Ok(item)
    }

    /// The next item if one is waiting.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let item = self.receiver.try_recv()?;
        self.counters.taken();
        Ok(item)
    }

    /// The queue's figures.
    pub fn stats(&self) -> QueueStats {
        self.counters.stats()
    }

    /// Hands `first`, then each item already waiting, to `take` until it answers `false` (its
    /// batch is full, a close came) or nothing waits: a writer's next batch, taken without
    /// waiting.
    pub fn take_ready(&self, first: T, mut take: impl FnMut(T) -> bool) {
        let mut next = Some(first);
        while let Some(item) = next.take() {
            if !take(item) {
                return;
            }
            next = self.try_recv().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_makes_writers_wait_and_drops_nothing() {
        let (sender, receiver) = bounded::<u32>("test", 4);
        let writer = std::thread::spawn(move || {
            for n in 0..100 {
                sender.send(n).unwrap();
            }
            sender.stats()
        });
        let mut got = Vec::new();
        while got.len() < 100 {
            std::thread::sleep(Duration::from_micros(200));
            if let Ok(n) = receiver.recv_timeout(Duration::from_secs(5)) {
                got.push(n);
            }
        }
        let stats = writer.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert!(stats.waits > 0, "{stats:?}");
        assert!(stats.high_water <= 4 + 1, "{stats:?}");
        assert_eq!(receiver.stats().depth, 0);
    }

    #[test]
    fn a_writer_that_stops_waiting_gets_its_item_back() {
        let (sender, receiver) = bounded::<u32>("test", 1);
        sender.send_while(1, || true).unwrap();
        let mut asked = 0;
        assert_eq!(
            sender.send_while(2, || {
                asked += 1;
                asked < 3
            }),
            Err(Refused::GaveUp(2))
        );
        assert_eq!(asked, 3);
        assert_eq!(sender.stats().waits, 1);
        assert_eq!(receiver.try_recv(), Ok(1));
        sender.send_while(3, || false).unwrap();
        drop(receiver);
        assert_eq!(sender.send_while(4, || true), Err(Refused::Gone(4)));
    }

    #[test]
    fn a_gone_writer_gives_the_item_back() {
        let (sender, receiver) = bounded::<u32>("test", 1);
        drop(receiver);
        assert_eq!(sender.send(7), Err(7));
    }
}
