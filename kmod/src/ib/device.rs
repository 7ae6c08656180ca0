// SPDX-License-Identifier: GPL-2.0

//! One device's side of the engine: the protection domains and regions of the device's kernel
//! consumers (one table: they are all the kernel), its QPs by number (the connection manager
//! finds a QP by it), and where their asynchronous events go. The RDMA core's device holds it from creation until
//! its `dealloc_driver`.

use crate::events::AsyncEvents;
use crate::ffi;
use crate::handles::Handles;
use crate::mr::MrTable;
use crate::qp::QueuePair;
use crate::sync::{new_spinlock_bh, SpinLockBh};
use crate::verbs::{access, MAX_QP};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

#[pin_data]
pub(crate) struct IbDevice {
    /// Shared with the QPs, whose receive side looks regions up in softirq context.
    pub(super) mrs: Arc<SpinLockBh<MrTable>>,
    /// Serializes what changes domains and regions (the contract of [`MrTable::reserve`]).
    #[pin]
    lifecycle: Mutex<()>,
    /// How QPs ended. The RDMA core's QP event handlers are not called yet: events are kept
    /// here (the oldest ones when it is full), for the connection manager to come.
    pub(super) events: Arc<SpinLockBh<AsyncEvents>>,
    /// The RDMA core's QPs (`ib_qp`) by number: the engine QP's handle, below 2^24.
    #[pin]
    qps: Mutex<Handles<usize>>,
}

/// The RDMA core's access flags that are region rights (the same bits as [`access`]).
const IB_ACCESS_RIGHTS: i32 = access::ALL as i32;

impl IbDevice {
    pub(crate) fn new() -> Result<Arc<IbDevice>> {
        let mrs = Arc::pin_init(new_spinlock_bh!(MrTable::new(), "IbDevice::mrs"), GFP_KERNEL)?;
        let events = Arc::pin_init(new_spinlock_bh!(AsyncEvents::new()?, "IbDevice::events"), GFP_KERNEL)?;
        Arc::pin_init(try_pin_init!(IbDevice { mrs, lifecycle <- new_mutex!(()), events, qps <- new_mutex!(Handles::new(MAX_QP)) }), GFP_KERNEL)
    }

    pub(super) fn alloc_pd(&self) -> Result<u32> {
        let _lifecycle = self.lifecycle.lock();
        MrTable::reserve(&self.mrs)?;
        self.mrs.lock().alloc_pd()
    }

    pub(super) fn dealloc_pd(&self, pd: u32) -> Result {
        let _lifecycle = self.lifecycle.lock();
        self.mrs.lock().dealloc_pd(pd)
    }

    /// The DMA region of `pd` (`get_dma_mr`): all kernel memory, with the rights `ib_access`
    /// (the RDMA core's flags) names; EINVAL for flags that are not rights.
    pub(super) fn dma_mr(&self, pd: u32, ib_access: i32) -> Result<u32> {
        if ib_access & !IB_ACCESS_RIGHTS != 0 {
            return Err(EINVAL);
        }
        let _lifecycle = self.lifecycle.lock();
        MrTable::reserve(&self.mrs)?;
        self.mrs.lock().register_kernel(pd, ib_access as u32)
    }

    pub(super) fn dereg_mr(&self, stag: u32) -> Result {
        let _lifecycle = self.lifecycle.lock();
        let gone = self.mrs.lock().deregister(stag)?;
        // Waits for placements into it outside the table's lock.
        drop(gone);
        Ok(())
    }

    /// Lists the RDMA core's `ibqp` under the number of the QP `make` makes with it.
    pub(super) fn list_qp(&self, ibqp: *mut ffi::ib_qp, make: impl FnOnce(u32) -> Result<Arc<QueuePair>>) -> Result<Arc<QueuePair>> {
        let mut qps = self.qps.lock();
        let qp = make(qps.next_handle()?)?;
        qps.insert(ibqp as usize)?;
        Ok(qp)
    }

    /// The QP numbered `number` is destroyed.
    pub(super) fn forget_qp(&self, number: u32) {
        let _ = self.qps.lock().remove(number);
    }
}
