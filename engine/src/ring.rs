//! Typed bounded lock-free rings between reactors and backend workers.
//!
//! A `Ring<T>` is a fixed-capacity MPMC queue (`crossbeam_queue::ArrayQueue`). A full
//! ring is backpressure: `push` hands the message back and the producer parks the work
//! (never drops it, never blocks). A `Doorbell` lets a consumer sleep when its ring is
//! empty and lets producers wake it only when it actually sleeps, so the busy path
//! costs one relaxed load per push.

use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A bounded message ring. Share it with `Arc`.
pub struct Ring<T> {
    q: ArrayQueue<T>,
}

impl<T> Ring<T> {
    pub fn new(capacity: usize) -> Arc<Ring<T>> {
        assert!(capacity > 0, "ring capacity must be positive");
        Arc::new(Ring {
            q: ArrayQueue::new(capacity),
        })
    }

    /// Enqueues `msg`, or returns it when the ring is full (backpressure).
    #[inline]
    pub fn push(&self, msg: T) -> Result<(), T> {
        self.q.push(msg)
    }

    #[inline]
    pub fn pop(&self) -> Option<T> {
        self.q.pop()
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.q.capacity()
    }
}

/// How a sleeping consumer is woken.
pub trait Wake: Send + Sync {
    fn wake(&self);
}

impl Wake for std::thread::Thread {
    fn wake(&self) {
        self.unpark();
    }
}

impl Wake for mio::Waker {
    fn wake(&self) {
        // A failed wake only delays the consumer until its next timed poll.
        let _ = mio::Waker::wake(self);
    }
}

/// Sleep/wake handshake for one consumer.
///
/// Consumer: `prepare_sleep()`, re-check its rings, then sleep (with a timeout) and
/// `woke()`. Producer: after a successful push, `ring()`.
pub struct Doorbell {
    sleeping: AtomicBool,
    waker: Box<dyn Wake>,
}

impl Doorbell {
    pub fn new(waker: Box<dyn Wake>) -> Arc<Doorbell> {
        Arc::new(Doorbell {
            sleeping: AtomicBool::new(false),
            waker,
        })
    }

    /// Announces the consumer is about to sleep. It must re-check its rings after this.
    pub fn prepare_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// The consumer is awake again.
    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// Wakes the consumer if it announced sleep; returns whether it did.
    #[inline]
    pub fn ring(&self) -> bool {
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            self.waker.wake();
            return true;
        }
        false
    }

    /// Whether the consumer announced sleep and has not been woken yet.
    pub fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn full_ring_hands_message_back() {
        let r = Ring::new(2);
        r.push(1).unwrap();
        r.push(2).unwrap();
        assert_eq!(r.push(3), Err(3));
        assert_eq!(r.pop(), Some(1));
        r.push(3).unwrap();
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn doorbell_wakes_a_parked_thread() {
        let ring: Arc<Ring<u32>> = Ring::new(4);
        let (tx, rx) = std::sync::mpsc::channel();
        let r2 = ring.clone();
        let h = std::thread::spawn(move || {
            let bell = Doorbell::new(Box::new(std::thread::current()));
            tx.send(bell.clone()).unwrap();
            loop {
                if let Some(v) = r2.pop() {
                    return v;
                }
                bell.prepare_sleep();
                if let Some(v) = r2.pop() {
                    return v;
                }
                std::thread::park_timeout(Duration::from_secs(5));
                bell.woke();
            }
        });
        let bell = rx.recv().unwrap();
        ring.push(42).unwrap();
        bell.ring();
        assert_eq!(h.join().unwrap(), 42);
    }
}
