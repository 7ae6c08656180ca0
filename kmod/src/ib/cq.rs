// SPDX-License-Identifier: GPL-2.0

//! The RDMA core's completion queues: completions wait in kernel memory until the consumer
//! polls them (`poll_cq`, as `ib_wc` entries naming their `ib_qp`), and the consumer's
//! completion handler is called for the next one once it armed the CQ (`req_notify_cq`), in
//! softirq context soon after (the shim's work): never inside the engine's locks, since a
//! handler may post to the QP that completed. Polling and arming take a lock with interrupts
//! off: consumers may poll where interrupts are off. A CQ that overflows (completions lost, the
//! QP that completed is ended) tells its event handler once, from the same work.
//!
//! A user process's CQ (created through uverbs) is a ring it maps instead, in siw's ABI
//! (`siw_rings.rs`): it polls and arms it there, without system calls. Its handler is uverbs',
//! which only wakes the process: it is called at once, as siw does, sparing a sleeping
//! process the work item's delay.

use super::events;
use super::qp::Posted;
use super::siw_rings::{MappedCq, Mapping};
use crate::cq::{CompletionQueue, Overrun};
use crate::ffi;
use crate::fifo::Fifo;
use crate::sync::{new_spinlock_irq, SpinLockIrq};
use crate::verbs::{Completion, CompletionOp, Status, MAX_CQE};
use kernel::prelude::*;
use kernel::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Armed {
    No,
    Any,
    Solicited,
}

/// A completion and the RDMA core's QP it belongs to.
#[derive(Clone, Copy, Default)]
struct Entry {
    c: Completion,
    ibqp: usize,
}

/// Where completions go.
enum Store {
    /// A kernel consumer's: they wait here until polled, and the arming is here.
    Kernel { entries: Fifo<Entry>, armed: Armed },
    /// A user process's: written into its ring, where it polls and arms.
    Mapped(MappedCq),
}

struct State {
    store: Store,
    /// A completion found no room: the consumer's event handler was told.
    overflowed: bool,
    /// The RDMA core destroyed the CQ: nothing is kept or notified any more.
    destroyed: bool,
}

#[pin_data]
pub(crate) struct IbCq {
    /// The RDMA core's CQ, whose handler is called; it outlives this (destroyed after).
    ibcq: usize,
    /// Taken by the receive side in softirq context too, and by consumers polling with
    /// interrupts off.
    #[pin]
    state: SpinLockIrq<State>,
}

impl IbCq {
    /// A CQ of `entries` (1 to [`MAX_CQE`]) for the RDMA core's `ibcq`.
    pub(super) fn new(ibcq: *mut ffi::ib_cq, entries: u32) -> Result<Arc<IbCq>> {
        check_entries(entries)?;
        Self::with(ibcq, Store::Kernel { entries: Fifo::new(entries as usize)?, armed: Armed::No })
    }

    /// A user process's CQ of `entries` for the RDMA core's `ibcq`, and its ring to map.
    pub(super) fn new_mapped(ibcq: *mut ffi::ib_cq, entries: u32) -> Result<(Arc<IbCq>, Mapping)> {
        check_entries(entries)?;
        let ring = MappedCq::new(entries)?;
        let mapping = ring.mapping();
        Ok((Self::with(ibcq, Store::Mapped(ring))?, mapping))
    }

    fn with(ibcq: *mut ffi::ib_cq, store: Store) -> Result<Arc<IbCq>> {
        Arc::pin_init(
            pin_init!(IbCq { ibcq: ibcq as usize, state <- new_spinlock_irq!(State { store, overflowed: false, destroyed: false }, "IbCq::state") }),
            GFP_KERNEL,
        )
    }

    /// Keeps `c` of the RDMA core's QP `ibqp`; has the consumer's handler called if it armed
    /// the CQ for it. Overrun if there is no room (the event handler is told the first time).
    fn push_for(&self, ibqp: usize, c: &Completion) -> Result<(), Overrun> {
        let notify = {
            let mut st = self.state.lock();
            if st.destroyed {
                return Ok(());
            }
            let pushed = match &mut st.store {
                Store::Kernel { entries, armed } => entries.push(Entry { c: *c, ibqp }).map_err(|_| Overrun).map(|()| {
                    let notify = match armed {
                        Armed::No => false,
                        Armed::Any => true,
                        Armed::Solicited => c.solicited || c.status != Status::Success,
                    };
                    if notify {
                        *armed = Armed::No;
                    }
                    notify
                }),
                Store::Mapped(ring) => ring.push(c, c.qp).map(|notify| {
                    if notify {
                        // SAFETY: not destroyed (checked under this lock, which `destroy` takes
                        // before the RDMA core frees it); a user CQ's handler is uverbs'.
                        unsafe { ffi::iwarp_shim_ib_cq_notify_user(self.ibcq as *mut ffi::ib_cq) };
                    }
                    false
                }),
            };
            match pushed {
                Ok(notify) => notify,
                Err(Overrun) => {
                    if !core::mem::replace(&mut st.overflowed, true) {
                        // SAFETY: a QP of this CQ completes, so the RDMA core has not destroyed it.
                        unsafe { events::cq_overflowed(self.ibcq) };
                    }
                    return Err(Overrun);
                }
            }
        };
        if notify {
            // SAFETY: the RDMA core's CQ lives until `destroy` has returned and the shim has
            // waited out the notification this queues (a push after `destroy` queues none).
            unsafe { ffi::iwarp_shim_ib_cq_notify(self.ibcq as *mut ffi::ib_cq) };
        }
        Ok(())
    }

    /// The RDMA core destroys the CQ: later pushes (none are expected: its QPs are gone) are
    /// dropped and notify nobody.
    pub(super) fn destroy(&self) {
        let mut st = self.state.lock();
        st.destroyed = true;
        if let Store::Kernel { armed, .. } = &mut st.store {
            *armed = Armed::No;
        }
    }

    /// Drops the completions of the RDMA core's QP `ibqp`, which is being destroyed (they would
    /// name it after it is freed).
    /// (A user CQ's entries name QPs by number, and stay for the process to poll.)
    fn purge(&self, ibqp: usize) {
        let mut st = self.state.lock();
        let Store::Kernel { entries, .. } = &mut st.store else { return };
        for _ in 0..entries.len() {
            let Some(e) = entries.pop() else { break };
            if e.ibqp != ibqp {
                // Room: one was just taken.
                let _ = entries.push(e);
            }
        }
    }

    /// Moves the oldest completions into `out`; returns how many (none from a user CQ: its
    /// process polls its ring).
    pub(super) fn poll(&self, out: &mut [ffi::iwarp_ib_wc]) -> usize {
        let mut st = self.state.lock();
        let Store::Kernel { entries, .. } = &mut st.store else { return 0 };
        let mut n = 0;
        for slot in out.iter_mut() {
            let Some(e) = entries.pop() else { break };
            *slot = wc(&e);
            n += 1;
        }
        n
    }

    /// Arms the CQ: the handler is called for the next completion (only a solicited or failed
    /// one if `flags` say solicited). Returns 1 if completions wait and `flags` asked to hear
    /// of that (they may have arrived before the arming). A user CQ is armed in its ring.
    pub(super) fn arm(&self, flags: u32) -> i32 {
        let mut st = self.state.lock();
        let Store::Kernel { entries, armed } = &mut st.store else { return 0 };
        *armed = if flags & ffi::IWARP_IB_CQ_SOLICITED_MASK == ffi::IWARP_IB_CQ_SOLICITED { Armed::Solicited } else { Armed::Any };
        i32::from(flags & ffi::IWARP_IB_CQ_REPORT_MISSED_EVENTS != 0 && entries.len() > 0)
    }
}

/// EINVAL unless a CQ may have `entries` (1 to [`MAX_CQE`]).
fn check_entries(entries: u32) -> Result {
    if entries == 0 || entries > MAX_CQE {
        return Err(EINVAL);
    }
    Ok(())
}

/// `c` as the RDMA core's completion.
fn wc(e: &Entry) -> ffi::iwarp_ib_wc {
    let c = &e.c;
    let status = match c.status {
        Status::Success => ffi::IWARP_IB_WC_SUCCESS,
        Status::LocalProtection => ffi::IWARP_IB_WC_LOC_PROT_ERR,
        Status::Flushed => ffi::IWARP_IB_WC_WR_FLUSH_ERR,
        Status::Fatal => ffi::IWARP_IB_WC_FATAL_ERR,
    };
    let opcode = match c.op {
        CompletionOp::Send => ffi::IWARP_IB_WC_SEND,
        CompletionOp::RdmaWrite => ffi::IWARP_IB_WC_RDMA_WRITE,
        CompletionOp::RdmaRead => ffi::IWARP_IB_WC_RDMA_READ,
        CompletionOp::Recv => ffi::IWARP_IB_WC_RECV,
        CompletionOp::FetchAdd => ffi::IWARP_IB_WC_FETCH_ADD,
        CompletionOp::CompareSwap => ffi::IWARP_IB_WC_COMP_SWAP,
        CompletionOp::LocalInvalidate => ffi::IWARP_IB_WC_LOCAL_INV,
        CompletionOp::FastRegister => ffi::IWARP_IB_WC_REG_MR,
    };
    ffi::iwarp_ib_wc {
        wr_id: c.wr_id,
        qp: e.ibqp as *mut ffi::ib_qp,
        status,
        opcode,
        byte_len: c.byte_len,
        flags: if c.invalidated.is_some() { ffi::IWARP_IB_WC_WITH_INVALIDATE } else { 0 },
        invalidate_rkey: c.invalidated.unwrap_or(0),
    }
}

/// One QP's view of its CQ: what it completes is stamped with its `ib_qp`.
pub(super) struct QpCq {
    cq: Arc<IbCq>,
    ibqp: usize,
    /// The send side's: the requests waiting to be handed to the engine.
    posted: Option<Arc<SpinLockIrq<Posted>>>,
}

impl QpCq {
    pub(super) fn new(cq: Arc<IbCq>, ibqp: *mut ffi::ib_qp, posted: Option<Arc<SpinLockIrq<Posted>>>) -> Result<Arc<QpCq>> {
        Ok(Arc::new(QpCq { cq, ibqp: ibqp as usize, posted }, GFP_KERNEL)?)
    }

    /// Drops what the QP completed that was not polled: the QP is being destroyed.
    pub(super) fn purge(&self) {
        self.cq.purge(self.ibqp);
    }
}

impl CompletionQueue for QpCq {
    fn push(&self, c: &Completion) -> Result<(), Overrun> {
        self.cq.push_for(self.ibqp, c)
    }

    fn room_freed(&self) {
        if let Some(posted) = &self.posted {
            super::qp::room_freed(posted, self.ibqp);
        }
    }
}
