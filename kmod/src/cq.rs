// SPDX-License-Identifier: GPL-2.0

//! Where a QP's completions go. The engine hands each front door's completion queue its own
//! [`Completion`]; the door writes it in its consumer's layout (`/dev/iwarp`'s mapped ring:
//! `device/ring_cq.rs`) and wakes the consumer if it asked.

use crate::verbs::Completion;

/// The CQ is full: the entry was not written (a CQ overrun, fatal to the QP that hit it).
#[derive(Debug)]
pub(crate) struct Overrun;

/// A front door's completion queue.
pub(crate) trait CompletionQueue: Send + Sync {
    /// Stores `c` for the consumer and wakes it if it asked; `Overrun` if there is no room.
    /// Called with bottom halves off (the receive side runs in the socket's callback).
    fn push(&self, c: &Completion) -> Result<(), Overrun>;
    /// The QP sending here may take a request it refused for want of room (ENOMEM: the ORD's
    /// Reads outstanding, the send queue full): a poster that holds such requests to retry them
    /// (the RDMA core's door) retries now. Called from any context, maybe with the QP's locks.
    fn room_freed(&self) {}
}
