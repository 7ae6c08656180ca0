// SPDX-License-Identifier: GPL-2.0

//! Where a QP's completions go. The engine hands each front door's completion queue its own
//! [`Completion`]; the door writes it in its consumer's layout (`/dev/iwarp`'s mapped ring:
//! `device/ring_cq.rs`) and wakes the consumer if it asked.

use crate::verbs::Completion;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::sync::Arc;

/// The CQ is full: the entry was not written (a CQ overrun, fatal to the QP that hit it).
#[derive(Debug)]
pub(crate) struct Overrun;

/// A front door's completion queue.
pub(crate) trait CompletionQueue: Send + Sync {
    /// Stores `c` for the consumer and wakes it if it asked; `Overrun` if there is no room.
    /// Called with bottom halves off (the receive side runs in the socket's callback).
    fn push(&self, c: &Completion) -> Result<(), Overrun>;
    /// How many QPs report here (a CQ in use is not destroyed).
    fn users(&self) -> &AtomicU32;
    /// The QP sending here may take a request it refused for want of room (ENOMEM: the ORD's
    /// Reads outstanding, the send queue full): a poster that holds such requests to retry them
    /// (the RDMA core's door) retries now. Called from any context, maybe with the QP's locks.
    fn room_freed(&self) {}
}

/// A QP's reference to its CQ, counted in the CQ's users while it lives.
pub(crate) struct Attached(Arc<dyn CompletionQueue>);

impl Attached {
    /// Counts one more QP reporting to `cq`.
    pub(crate) fn new(cq: Arc<dyn CompletionQueue>) -> Attached {
        cq.users().fetch_add(1, Ordering::Relaxed);
        Attached(cq)
    }
}

impl core::ops::Deref for Attached {
    type Target = dyn CompletionQueue;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.users().fetch_sub(1, Ordering::Relaxed);
    }
}
