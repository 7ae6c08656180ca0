// SPDX-License-Identifier: GPL-2.0

//! `/dev/iwarp`'s completion queues: a ring the application maps and polls without system
//! calls (layout in the ABI's `cq_ring`, entries as `translate.rs` writes them), written only
//! by the module. Blocking waits go through an eventfd the application passed in and armed
//! (ARM_CQ).

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use super::translate;
use crate::abi::{cq_ring, CQE_SIZE};
use crate::cq::{CompletionQueue, Overrun};
use crate::eventfd::EventFd;
use crate::ring::SharedRing;
use crate::sync::{new_spinlock_bh, SpinLockBh};
use crate::verbs::{Completion, Status, MAX_CQE};
use kernel::mm::virt::VmaNew;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::transmute::AsBytes;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Armed {
    No,
    Any,
    Solicited,
}

struct State {
    /// The module's own producer index; the ring's copy is only published from it.
    producer: u32,
    armed: Armed,
}

/// A completion queue the application maps.
#[pin_data]
pub(crate) struct RingCq {
    ring: SharedRing,
    depth: u32,
    notify: Option<EventFd>,
    /// Taken by the receive side in softirq context too.
    #[pin]
    state: SpinLockBh<State>,
}

/// Where the ring's entry `n` starts (and, for `n` the depth, where the ring ends).
fn entry_at(n: u32) -> Option<usize> {
    (n as usize).checked_mul(CQE_SIZE)?.checked_add(cq_ring::ENTRIES)
}

impl RingCq {
    /// A CQ of at least `depth` entries (rounded up to a power of two), signalling `eventfd`
    /// (if not negative) when armed.
    pub(crate) fn new(depth: u32, eventfd: i32) -> Result<Arc<RingCq>> {
        if depth == 0 || depth > MAX_CQE {
            return Err(EINVAL);
        }
        let depth = depth.next_power_of_two();
        let ring = SharedRing::new(entry_at(depth).ok_or(EINVAL)?)?;
        ring.store(cq_ring::DEPTH, depth);
        let notify = if eventfd < 0 { None } else { Some(EventFd::get(eventfd)?) };
        Arc::pin_init(
            pin_init!(RingCq { ring, depth, notify, state <- new_spinlock_bh!(State { producer: 0, armed: Armed::No }, "Cq::state") }),
            GFP_KERNEL_ACCOUNT,
        )
    }

    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// Length of the mapping.
    pub(crate) fn ring_len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        self.ring.mmap(vma)
    }

    /// Signal the eventfd once, for the next entry (only solicited ones and errors if
    /// `solicited_only`). EINVAL without an eventfd.
    pub(crate) fn arm(&self, solicited_only: bool) -> Result {
        if self.notify.is_none() {
            return Err(EINVAL);
        }
        self.state.lock().armed = if solicited_only { Armed::Solicited } else { Armed::Any };
        Ok(())
    }
}

impl CompletionQueue for RingCq {
    /// Writes `c` and publishes it; wakes an armed waiter.
    fn push(&self, c: &Completion) -> Result<(), Overrun> {
        let mut st = self.state.lock();
        // The application's consumer index is a hint: whatever it says, only the slot at our
        // own producer index is written, and a ring that looks full is reported, not overwritten.
        let consumer = self.ring.load(cq_ring::CONSUMER);
        if st.producer.wrapping_sub(consumer) >= self.depth {
            return Err(Overrun);
        }
        let at = st.producer.checked_rem(self.depth).and_then(entry_at).ok_or(Overrun)?;
        self.ring.write(at, translate::cqe(c).as_bytes());
        st.producer = st.producer.wrapping_add(1);
        self.ring.store(cq_ring::PRODUCER, st.producer);
        let wake = match st.armed {
            Armed::No => false,
            Armed::Any => true,
            Armed::Solicited => c.status != Status::Success || c.solicited,
        };
        if wake {
            st.armed = Armed::No;
            if let Some(n) = &self.notify {
                n.signal();
            }
        }
        Ok(())
    }
}
