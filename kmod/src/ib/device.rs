// SPDX-License-Identifier: GPL-2.0

//! One device's side of the engine: the protection domains and regions of the device's kernel
//! consumers (one table: they are all the kernel), its QPs by number (the connection manager
//! finds a QP by it, under a lock of its own that disables interrupts: no sleeping there), the
//! connection requests handed to the connection manager and not answered yet. The RDMA core's
//! device holds it from creation until its `dealloc_driver`.

use super::cm::QpConnection;
use crate::ffi;
use crate::handles::Handles;
use crate::kernel_memory::{PageList, MAX_PAGE_LIST};
use crate::listen::Pending;
use crate::mr::MrTable;
use crate::sync::{new_spinlock_bh, new_spinlock_irq, SpinLockBh, SpinLockIrq};
use crate::verbs::{access, MAX_QP};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::time::{Delta, Instant, Monotonic};

/// How long a request handed to the connection manager is kept unanswered.
const REQUEST_KEPT: Delta = Delta::from_millis(60_000);

/// A request handed to the connection manager, and since when.
struct Kept {
    key: usize,
    pending: Pending,
    since: Instant<Monotonic>,
}

#[pin_data]
pub(crate) struct IbDevice {
    /// Shared with the QPs, whose receive side looks regions up in softirq context.
    pub(super) mrs: Arc<SpinLockBh<MrTable>>,
    /// Serializes what changes domains and regions (the contract of [`MrTable::reserve`]).
    #[pin]
    lifecycle: Mutex<()>,
    /// The RDMA core's QPs by number: the engine QP's handle, below 2^24. Interrupts off:
    /// `iw_get_qp` looks QPs up under iw_cm's irqsave lock, which iw_cm also takes in the
    /// events we report from softirq.
    #[pin]
    qps: SpinLockIrq<Handles<Arc<QpConnection>>>,
    /// Connection requests given to the connection manager (CONNECT_REQUEST), by the key
    /// given as their `provider_data`, until accepted or rejected (or the device goes).
    #[pin]
    requests: Mutex<KVec<Kept>>,
    /// The next request's key (never 0).
    next_request: AtomicUsize,
    /// The MPA options its iw_cm connections ask for (`IWARP_MPA_*` bits): the module's
    /// parameters when the link was made, then its own (its sysfs files).
    mpa: AtomicU32,
}

/// The RDMA core's access flags that are region rights (the same bits as [`access`]).
const IB_ACCESS_RIGHTS: i32 = access::ALL as i32;

/// The region rights the RDMA core's access flags `ib_access` name, ignoring those a device may
/// ignore; EINVAL for flags that are neither.
pub(super) fn rights(ib_access: i32) -> Result<u32> {
    let ib_access = ib_access & !(crate::ffi::IWARP_IB_ACCESS_OPTIONAL as i32);
    if ib_access & !IB_ACCESS_RIGHTS != 0 {
        return Err(EINVAL);
    }
    Ok(ib_access as u32)
}

/// What a link's iw_cm connections ask of MPA.
#[derive(Clone, Copy)]
pub(crate) struct MpaOptions {
    /// Markers in what we receive.
    pub(crate) markers: bool,
    pub(crate) crc: bool,
    /// Revision 1 rather than 2.
    pub(crate) rev1: bool,
    /// Peer-to-peer mode (revision 2 only).
    pub(crate) p2p: bool,
}

/// Every `IWARP_MPA_*` option.
const MPA_ALL: u32 = ffi::IWARP_MPA_MARKERS | ffi::IWARP_MPA_CRC | ffi::IWARP_MPA_REV1 | ffi::IWARP_MPA_P2P;

impl MpaOptions {
    fn bits(self) -> u32 {
        let bit = |on: bool, b: u32| if on { b } else { 0 };
        bit(self.markers, ffi::IWARP_MPA_MARKERS) | bit(self.crc, ffi::IWARP_MPA_CRC) | bit(self.rev1, ffi::IWARP_MPA_REV1) | bit(self.p2p, ffi::IWARP_MPA_P2P)
    }

    fn of(bits: u32) -> MpaOptions {
        let on = |b: u32| bits & b != 0;
        MpaOptions { markers: on(ffi::IWARP_MPA_MARKERS), crc: on(ffi::IWARP_MPA_CRC), rev1: on(ffi::IWARP_MPA_REV1), p2p: on(ffi::IWARP_MPA_P2P) }
    }
}

impl IbDevice {
    /// What its iw_cm connections ask of MPA.
    pub(super) fn mpa(&self) -> MpaOptions {
        MpaOptions::of(self.mpa_options())
    }

    /// Its MPA options as `IWARP_MPA_*` bits.
    pub(super) fn mpa_options(&self) -> u32 {
        self.mpa.load(Ordering::Relaxed)
    }

    /// Sets or clears an `IWARP_MPA_*` option (others are ignored) for the connections made
    /// from now on.
    pub(super) fn set_mpa_option(&self, option: u32, on: bool) {
        let option = option & MPA_ALL;
        if on {
            self.mpa.fetch_or(option, Ordering::Relaxed);
        } else {
            self.mpa.fetch_and(!option, Ordering::Relaxed);
        }
    }

    pub(crate) fn new() -> Result<Arc<IbDevice>> {
        let mrs = Arc::pin_init(new_spinlock_bh!(MrTable::new(), "IbDevice::mrs"), GFP_KERNEL)?;
        Arc::pin_init(
            try_pin_init!(IbDevice {
                mrs,
                lifecycle <- new_mutex!(()),
                qps <- new_spinlock_irq!(Handles::new(MAX_QP), "IbDevice::qps"),
                requests <- new_mutex!(KVec::new()),
                next_request: AtomicUsize::new(1),
                mpa: AtomicU32::new(crate::iw_mpa().bits()),
            }),
            GFP_KERNEL,
        )
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
        let rights = rights(ib_access)?;
        let _lifecycle = self.lifecycle.lock();
        MrTable::reserve(&self.mrs)?;
        self.mrs.lock().register_kernel(pd, rights)
    }

    /// A user process's region (`reg_user_mr`, from uverbs): its buffer `[start, start +
    /// len)` pinned, named from `iova` on, with the rights `ib_access` names.
    pub(super) fn user_mr(&self, pd: u32, start: u64, len: u64, iova: u64, ib_access: i32) -> Result<u32> {
        let rights = rights(ib_access)?;
        MrTable::register_user(&self.mrs, &self.lifecycle, pd, start, iova, len, rights)
    }

    /// A region for fast registrations of up to `max_pages` kernel pages (`alloc_mr`);
    /// EINVAL for more than [`MAX_PAGE_LIST`].
    pub(super) fn alloc_mr(&self, pd: u32, max_pages: u32) -> Result<u32> {
        if max_pages == 0 || max_pages > MAX_PAGE_LIST {
            return Err(EINVAL);
        }
        let _lifecycle = self.lifecycle.lock();
        MrTable::reserve(&self.mrs)?;
        self.mrs.lock().register_listed(pd)
    }

    /// `map_mr_sg` of the region in `stag`'s slot: `pages` hold `len` octets from `iova` on,
    /// for its next Fast Register. May run in atomic context.
    pub(super) fn map_mr(&self, stag: u32, iova: u64, len: u64, page_size: u64, pages: &[u64]) -> Result {
        let list = Arc::new(PageList::new(iova, len, page_size, pages)?, GFP_ATOMIC)?;
        let replaced = self.mrs.lock().map_pages(stag, list)?;
        drop(replaced);
        Ok(())
    }

    /// `dereg_mr` of the region in `stag`'s slot: the consumer may have stepped its key for
    /// a Fast Register that never ran (flushed, or refused).
    pub(super) fn dereg_mr(&self, stag: u32) -> Result {
        let _lifecycle = self.lifecycle.lock();
        let gone = {
            let mut mrs = self.mrs.lock();
            let stag = mrs.current_stag(stag)?;
            mrs.deregister(stag)?
        };
        // Waits for accesses to it outside the table's lock.
        drop(gone);
        Ok(())
    }

    /// Lists the connection `make` makes with a QP number: the table's next handle.
    pub(super) fn list_qp(&self, make: impl FnOnce(u32) -> Result<Arc<QpConnection>>) -> Result<Arc<QpConnection>> {
        // One QP at a time, so the number taken is still free when it is listed (a QP destroyed
        // meanwhile frees its own slot only), and the room made stays.
        let _lifecycle = self.lifecycle.lock();
        let wanted = self.qps.lock().room_wanted();
        if let Some(n) = wanted {
            let room = Handles::room(n)?;
            self.qps.lock().grow(room);
        }
        let number = self.qps.lock().next_handle()?;
        let conn = make(number)?;
        self.qps.lock().insert_as(number, conn.clone())?;
        Ok(conn)
    }

    /// The QP numbered `number`.
    pub(super) fn qp(&self, number: u32) -> Option<Arc<QpConnection>> {
        self.qps.lock().get(number).ok().cloned()
    }

    /// The RDMA core's QP numbered `number`, taking no reference (`iw_get_qp`, with interrupts
    /// off: a reference taken here could be the last, whose drop sleeps).
    pub(super) fn ibqp(&self, number: u32) -> Option<usize> {
        self.qps.lock().get(number).ok().map(|c| c.ibqp)
    }

    /// The QP numbered `number` is destroyed.
    pub(super) fn forget_qp(&self, number: u32) {
        // Dropped outside the lock.
        let gone = self.qps.lock().remove(number);
        drop(gone);
    }

    /// Keeps `pending` until [`IbDevice::take_request`] with the key returned. Requests kept
    /// longer than [`REQUEST_KEPT`] are dropped first (their connections close): iw_cm may
    /// drop a request's event and never answer it.
    pub(super) fn keep_request(&self, pending: Pending) -> Result<usize> {
        let key = self.next_request.fetch_add(1, Ordering::Relaxed);
        let stale = {
            let mut requests = self.requests.lock();
            let mut stale = KVec::new();
            while let Some(i) = requests.iter().position(|r| r.since.elapsed() > REQUEST_KEPT) {
                if let Ok(r) = requests.remove(i) {
                    let _ = stale.push(r, GFP_KERNEL);
                }
            }
            requests.push(Kept { key, pending, since: Instant::now() }, GFP_KERNEL)?;
            stale
        };
        drop(stale);
        Ok(key)
    }

    /// The request kept as `key`, if still kept.
    pub(super) fn take_request(&self, key: usize) -> Option<Pending> {
        let mut requests = self.requests.lock();
        let i = requests.iter().position(|r| r.key == key)?;
        requests.remove(i).ok().map(|r| r.pending)
    }
}
