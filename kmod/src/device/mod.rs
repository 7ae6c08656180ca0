// SPDX-License-Identifier: GPL-2.0

//! `/dev/iwarp`: one [`Context`] per open file; every ioctl argument is copied in, validated,
//! and answered here (connection management in `connection.rs`). Rings (completion, send,
//! receive) are mapped with `mmap` at the offsets CREATE_CQ and CREATE_QP returned.
//! Closing the file tears down everything the context holds.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

mod connection;
mod registry;
mod ring_cq;
pub(crate) mod translate;

use crate::abi::{
    self, ring_kind, Accept, AdoptQp, ConnectQp, CqOp, CreateCq, CreateQp, DeregMr, DestroyQp, Doorbell, GetRequest, HandleOp, ListQps, Listen, PdOp, QueryQp,
    QueryStats, RegMr, SetEventFd, MAX_CQ, MAX_INLINE, MAX_LISTEN, MAX_LIST_QPS, MAX_QP, MAX_QP_WR, MAX_SGE,
};
use crate::abi::{PostRecv, PostSend, POST_RECV_SIZE, POST_SEND_SIZE};
use crate::charged;
use crate::eventfd::EventFd;
use crate::events::AsyncEvents;
use crate::handles::Handles;
use crate::listen::{Listener, Pending};
use crate::mr::MrTable;
use crate::qp::{self, Limits, QueuePair};
use crate::ring;
use crate::socket::Hook;
use crate::sync::{new_spinlock_bh, SpinLockBh};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration};
use kernel::mm::virt::VmaNew;
use kernel::new_mutex;
use kernel::page::PAGE_SHIFT;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::transmute::{AsBytes, FromBytes};
use kernel::uaccess::{UserPtr, UserSlice};
use ring_cq::RingCq;

/// Open contexts.
static CONTEXTS: AtomicU64 = AtomicU64::new(0);

/// Registers the misc device (call once, at module load). An open file pins the module: the
/// kernel crate's registration leaves that out, so the device is pointed at file operations
/// that name this module as their owner (`shim/dev_shim.c`) before anyone can open it.
pub(crate) fn register() -> impl PinInit<MiscDeviceRegistration<Context>, Error> {
    registry::init();
    MiscDeviceRegistration::register(MiscDeviceOptions { name: c"iwarp" }).pin_chain(|misc| {
        crate::shim::pin_module_while_open(misc.as_raw());
        Ok(())
    })
}

/// A QP of a context; once connected, its socket hook runs the receive side. Dropping it
/// ends the QP (flushing its work requests), then unhooks the socket.
struct Entry {
    hook: Option<Hook<QueuePair>>,
    qp: Arc<QueuePair>,
    /// The handles of the QP's send and receive CQs: a CQ is in use while a QP in the table
    /// names it (not while some reference to a destroyed QP lingers, as a listing's does).
    cqs: [u32; 2],
    _listed: registry::Registration,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.qp.close();
    }
}

/// The state of one open file of `/dev/iwarp` (a device context).
#[pin_data(PinnedDrop)]
pub(crate) struct Context {
    /// Shared with the QPs, whose receive side places into these regions in softirq context:
    /// held only for lookups and quick changes, never while sleeping.
    mrs: Arc<SpinLockBh<MrTable>>,
    /// Serializes what changes protection domains and regions (and creates QPs in them), so a
    /// check made under it still holds when the change is made; pinning happens under it.
    /// Taken before the QP table.
    #[pin]
    lifecycle: Mutex<()>,
    /// Shared with the QPs, which report how they ended.
    events: Arc<SpinLockBh<AsyncEvents>>,
    #[pin]
    cqs: Mutex<Handles<Arc<RingCq>>>,
    /// The QPs. mmap takes this under mmap_lock, and a QP's receive work holds its receive
    /// side while it takes the socket lock (whose holders may fault on user memory): never
    /// lock a QP's receive side inside this table.
    #[pin]
    qps: Mutex<Handles<Entry>>,
    /// Listening sockets; shared with GET_REQUESTs waiting on them.
    #[pin]
    listeners: Mutex<Handles<Arc<Listener>>>,
    /// Connections waiting for ACCEPT or REJECT.
    #[pin]
    requests: Mutex<Handles<Pending>>,
}

#[vtable]
impl MiscDevice for Context {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &kernel::fs::File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        charged::room()?;
        let mrs = Arc::pin_init(new_spinlock_bh!(MrTable::new(), "Context::mrs"), GFP_KERNEL_ACCOUNT)?;
        let events = Arc::pin_init(new_spinlock_bh!(AsyncEvents::new()?, "Context::events"), GFP_KERNEL_ACCOUNT)?;
        let ctx = KBox::try_pin_init(
            try_pin_init!(Context {
                mrs,
                lifecycle <- new_mutex!(()),
                events,
                cqs <- new_mutex!(Handles::new(MAX_CQ)),
                qps <- new_mutex!(Handles::new(MAX_QP)),
                listeners <- new_mutex!(Handles::new(MAX_LISTEN)),
                requests <- new_mutex!(Handles::new(MAX_LISTEN)),
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        CONTEXTS.fetch_add(1, Ordering::Relaxed);
        Ok(ctx)
    }

    fn mmap(me: Pin<&Context>, _file: &kernel::fs::File, vma: &VmaNew) -> Result {
        let pgoff = ring::mmap_pgoff(vma) as u64;
        let handle = (pgoff & ((1 << ring_kind::SHIFT) - 1)) as u32;
        match pgoff >> ring_kind::SHIFT {
            ring_kind::CQ => me.cqs.lock().get(handle)?.clone().mmap(vma),
            ring_kind::SQ => me.qp(handle)?.send_ring()?.mmap(vma),
            ring_kind::RQ => me.qp(handle)?.recv_ring()?.mmap(vma),
            _ => Err(EINVAL),
        }
    }

    fn ioctl(me: Pin<&Context>, _file: &kernel::fs::File, cmd: u32, arg: usize) -> Result<isize> {
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        let me = me.get_ref();
        if makes_objects(cmd) {
            charged::room()?;
        }
        match cmd {
            abi::IOCTL_QUERY_DEVICE => user.writer().write(&abi::device_attributes())?,
            abi::IOCTL_QUERY_STATS => user.writer().write(&stats())?,
            // Undone as the caller's own DEALLOC_PD and DESTROY_CQ would be: another thread may
            // have used the handle meanwhile.
            abi::IOCTL_ALLOC_PD => me.in_out(user, Self::alloc_pd, |c, req: &PdOp| {
                let _ = c.dealloc_pd(req);
            })?,
            abi::IOCTL_DEALLOC_PD => me.dealloc_pd(&user.reader().read()?)?,
            abi::IOCTL_REG_MR => me.in_out(user, Self::reg_mr, |c, req: &RegMr| {
                let gone = c.mrs.lock().deregister(req.stag);
                drop(gone);
            })?,
            abi::IOCTL_DEREG_MR => me.dereg_mr(&user.reader().read()?)?,
            abi::IOCTL_CREATE_CQ => me.in_out(user, Self::create_cq, |c, req: &CreateCq| {
                let _ = c.destroy_cq(&CqOp { cq: req.cq, solicited_only: 0 });
            })?,
            abi::IOCTL_DESTROY_CQ => me.destroy_cq(&user.reader().read()?)?,
            abi::IOCTL_ARM_CQ => me.arm_cq(&user.reader().read()?)?,
            abi::IOCTL_CREATE_QP => me.in_out(user, Self::create_qp, |c, req: &CreateQp| {
                // Dropped once the table is released: ending a QP takes other locks.
                let gone = c.qps.lock().remove(req.qp);
                drop(gone);
            })?,
            abi::IOCTL_DESTROY_QP => me.destroy_qp(&user.reader().read()?)?,
            abi::IOCTL_QUERY_QP => me.in_out(
                user,
                |c, req: &mut QueryQp| {
                    *req = translate::query_qp(req.qp, &c.qp(req.qp)?.query());
                    Ok(())
                },
                |_, _| {},
            )?,
            abi::IOCTL_DOORBELL => me.in_out(
                user,
                |c, db: &mut Doorbell| {
                    let qp = c.qp(db.qp)?;
                    doorbell(&qp, db)
                },
                |_, _| {},
            )?,
            abi::IOCTL_ADOPT_QP => me.connect_ioctl(user.reader_writer(), |c, req: &mut AdoptQp| c.adopt(req))?,
            abi::IOCTL_CONNECT_QP => me.connect_ioctl(user.reader_writer(), |c, req: &mut ConnectQp| c.connect(req))?,
            abi::IOCTL_ACCEPT => me.connect_ioctl(user.reader_writer(), |c, req: &mut Accept| c.accept(req))?,
            abi::IOCTL_LISTEN => me.in_out(user, Self::listen, |c, req: &Listen| {
                let _ = c.close_listener(&HandleOp { handle: req.listener, reserved: 0 });
            })?,
            abi::IOCTL_CLOSE_LISTENER => me.close_listener(&user.reader().read()?)?,
            // The caller cannot name a request it did not learn: its connection is closed.
            abi::IOCTL_GET_REQUEST => me.in_out(user, Self::get_request, |c, req: &GetRequest| drop(c.requests.lock().remove(req.request)))?,
            abi::IOCTL_REJECT => me.reject(&user.reader().read()?)?,
            abi::IOCTL_DISCONNECT => me.disconnect(&user.reader().read()?)?,
            abi::IOCTL_SET_EVENT_FD => me.set_event_fd(&user.reader().read()?)?,
            abi::IOCTL_LIST_QPS => list_qps(user)?,
            abi::IOCTL_GET_ASYNC_EVENT => {
                let taken = me.events.lock().pop().ok_or(EAGAIN)?;
                if let Err(e) = user.writer().write(&translate::async_event(&taken.0, taken.1)) {
                    me.events.lock().put_back(taken);
                    return Err(e);
                }
            }
            _ => return Err(ENOTTY),
        }
        Ok(0)
    }
}

/// DOORBELL: runs the ring entries the application wrote up to its tails (`qp/work_ring.rs`),
/// each translated to the engine's work request; says how many of each ring were taken and
/// the errno of the one that failed.
fn doorbell(qp: &QueuePair, db: &mut Doorbell) -> Result {
    if db.sq_done != 0 || db.rq_done != 0 || db.sq_error != 0 || db.rq_error != 0 || db.reserved != 0 {
        return Err(EINVAL);
    }
    let (rq, sq) =
        qp.take_posted(db.rq_tail, db.sq_tail, |e: &PostRecv| qp.post_recv(&translate::recv_wr(e)), |e: &PostSend| qp.post_send(&translate::send_wr(e)?))?;
    (db.rq_done, db.rq_error, db.sq_done, db.sq_error) = (rq.done, rq.error, sq.done, sq.error);
    Ok(())
}

/// Whether the ioctl makes objects in kernel memory (checked for room in the caller's memory
/// cgroup first: `charged.rs`).
fn makes_objects(cmd: u32) -> bool {
    matches!(
        cmd,
        abi::IOCTL_ALLOC_PD
            | abi::IOCTL_REG_MR
            | abi::IOCTL_CREATE_CQ
            | abi::IOCTL_CREATE_QP
            | abi::IOCTL_ADOPT_QP
            | abi::IOCTL_CONNECT_QP
            | abi::IOCTL_ACCEPT
            | abi::IOCTL_LISTEN
            | abi::IOCTL_GET_REQUEST
            | abi::IOCTL_SET_EVENT_FD
    )
}

/// QUERY_STATS: module-wide counts.
fn stats() -> QueryStats {
    QueryStats {
        pinned_pages: crate::pinned::pinned_pages(),
        memory_regions: crate::mr::regions(),
        contexts: CONTEXTS.load(Ordering::Relaxed),
        queue_pairs: qp::queue_pairs(),
        reserved: [0; 4],
    }
}

/// LIST_QPS: every QP of every context, written to the caller's array.
fn list_qps(user: UserSlice) -> Result {
    let (mut r, mut w) = user.reader_writer();
    let mut req: ListQps = r.read()?;
    if req.capacity > MAX_LIST_QPS || req.count != 0 {
        return Err(EINVAL);
    }
    let (infos, count) = registry::snapshot(req.capacity as usize)?;
    // At most MAX_LIST_QPS entries.
    let len = infos.len().saturating_mul(core::mem::size_of::<abi::QpInfo>());
    let mut out = UserSlice::new(UserPtr::from_addr(req.entries as usize), len).writer();
    for info in infos.iter() {
        out.write(info)?;
    }
    req.count = count as u32;
    w.write(&req)
}

impl Context {
    /// An ioctl that reads its argument, runs `run` on it and writes it back. If the write
    /// fails, the caller cannot learn what `run` made (a handle, an STag), so `undo` takes it
    /// back.
    fn in_out<T: FromBytes + AsBytes>(&self, user: UserSlice, run: impl FnOnce(&Self, &mut T) -> Result, undo: impl FnOnce(&Self, &T)) -> Result {
        let (mut r, mut w) = user.reader_writer();
        let mut req: T = r.read()?;
        run(self, &mut req)?;
        w.write(&req).inspect_err(|_| undo(self, &req))
    }

    /// The QP `handle` names (the table is not held while the caller uses it).
    fn qp(&self, handle: u32) -> Result<Arc<QueuePair>> {
        Ok(self.qps.lock().get(handle)?.qp.clone())
    }

    fn alloc_pd(&self, req: &mut PdOp) -> Result {
        if req.pd != 0 || req.reserved != 0 {
            return Err(EINVAL);
        }
        let _lifecycle = self.lifecycle.lock();
        MrTable::reserve(&self.mrs)?;
        req.pd = self.mrs.lock().alloc_pd()?;
        Ok(())
    }

    fn dealloc_pd(&self, req: &PdOp) -> Result {
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        // No QP or region joins the domain meanwhile.
        let _lifecycle = self.lifecycle.lock();
        if self.qps.lock().values().any(|e| e.qp.pd() == req.pd) {
            return Err(EBUSY);
        }
        self.mrs.lock().dealloc_pd(req.pd)
    }

    fn reg_mr(&self, req: &mut RegMr) -> Result {
        if req.lkey != 0 || req.stag != 0 {
            return Err(EINVAL);
        }
        let rights = translate::access(req.access)?;
        let stag = MrTable::register_user(&self.mrs, &self.lifecycle, req.pd, req.addr, req.addr, req.length, rights)?;
        req.lkey = stag;
        req.stag = stag;
        Ok(())
    }

    fn dereg_mr(&self, req: &DeregMr) -> Result {
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        let gone = self.mrs.lock().deregister(req.stag)?;
        drop(gone);
        Ok(())
    }

    fn create_cq(&self, req: &mut CreateCq) -> Result {
        if req.cq != 0 || req.reserved != 0 || req.mmap_offset != 0 || req.mmap_len != 0 {
            return Err(EINVAL);
        }
        let cq = RingCq::new(req.depth, req.eventfd)?;
        req.depth = cq.depth();
        req.mmap_len = cq.ring_len() as u64;
        req.cq = self.cqs.lock().insert(cq)?;
        req.mmap_offset = u64::from(req.cq) << PAGE_SHIFT;
        Ok(())
    }

    fn destroy_cq(&self, req: &CqOp) -> Result {
        if req.solicited_only != 0 {
            return Err(EINVAL);
        }
        // No QP joins the CQ meanwhile (CREATE_QP finds its CQs under this lock).
        let _lifecycle = self.lifecycle.lock();
        if self.qps.lock().values().any(|e| e.cqs.contains(&req.cq)) {
            return Err(EBUSY);
        }
        let gone = self.cqs.lock().remove(req.cq)?;
        drop(gone);
        Ok(())
    }

    fn arm_cq(&self, req: &CqOp) -> Result {
        if req.solicited_only > 1 {
            return Err(EINVAL);
        }
        self.cqs.lock().get(req.cq)?.arm(req.solicited_only == 1)
    }

    fn destroy_qp(&self, req: &DestroyQp) -> Result {
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        // Dropped once the table is released: ending a QP takes other locks.
        let gone = self.qps.lock().remove(req.qp)?;
        drop(gone);
        Ok(())
    }

    fn set_event_fd(&self, req: &SetEventFd) -> Result {
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        let notify = if req.eventfd < 0 { None } else { Some(EventFd::get(req.eventfd)?) };
        let old = self.events.lock().set_notify(notify);
        drop(old);
        Ok(())
    }

    /// A QP not connected yet, reporting to two of this context's CQs.
    fn create_qp(&self, req: &mut CreateQp) -> Result {
        let outs_zero = req.qp == 0 && req.sq_offset == 0 && req.rq_offset == 0 && req.sq_len == 0 && req.rq_len == 0;
        let valid = (1..=MAX_QP_WR).contains(&req.max_recv_wr)
            && (1..=MAX_QP_WR).contains(&req.max_send_wr)
            && (1..=MAX_SGE as u32).contains(&req.max_sge)
            && req.max_inline <= MAX_INLINE
            && outs_zero;
        if !valid {
            return Err(EINVAL);
        }
        let limits = Limits {
            max_recv_wr: req.max_recv_wr,
            max_send_wr: req.max_send_wr,
            max_sge: req.max_sge,
            max_inline: req.max_inline,
            ring_entries: Some((POST_SEND_SIZE, POST_RECV_SIZE)),
            recv_source: None,
        };
        // DEALLOC_PD cannot free the domain, nor DESTROY_CQ the CQs, until the QP is in the
        // table. Lock order: the
        // lifecycle lock, then QPs (mmap takes the QPs under mmap_lock; REG_MR pins, taking
        // mmap_lock, before it takes the lifecycle lock).
        let _lifecycle = self.lifecycle.lock();
        let (send_cq, recv_cq) = {
            let cqs = self.cqs.lock();
            (cqs.get(req.send_cq)?.clone(), cqs.get(req.recv_cq)?.clone())
        };
        if !self.mrs.lock().has_pd(req.pd) {
            return Err(EINVAL);
        }
        let mut qps = self.qps.lock();
        let handle = qps.next_handle()?;
        let qp = QueuePair::new(handle, req.pd, self.mrs.clone(), send_cq, recv_cq, limits)?;
        qp.tell_ended(self.events.clone())?;
        req.sq_len = qp.send_ring()?.len() as u64;
        req.rq_len = qp.recv_ring()?.len() as u64;
        let _listed = registry::Registration::new(&qp)?;
        req.qp = qps.insert(Entry { hook: None, qp, cqs: [req.send_cq, req.recv_cq], _listed })?;
        req.sq_offset = (ring_kind::SQ << ring_kind::SHIFT | u64::from(req.qp)) << PAGE_SHIFT;
        req.rq_offset = (ring_kind::RQ << ring_kind::SHIFT | u64::from(req.qp)) << PAGE_SHIFT;
        Ok(())
    }
}

#[pinned_drop]
impl PinnedDrop for Context {
    fn drop(self: Pin<&mut Self>) {
        // A listener's waker keeps it alive until it is shut down.
        for listener in self.listeners.lock().values() {
            listener.shutdown();
        }
        CONTEXTS.fetch_sub(1, Ordering::Relaxed);
    }
}
