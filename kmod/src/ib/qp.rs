// SPDX-License-Identifier: GPL-2.0

//! The RDMA core's queue pairs: an engine QP without mapped rings. Work requests are
//! translated from the RDMA core's (flattened by the shim) into the engine's. Receives are
//! posted directly (with interrupts off, held until the receive side takes them when a message
//! needs one). Send requests are handed to
//! the engine by a work item, in order: kernel consumers post where sleeping is not allowed (a
//! block driver's `queue_rq` under RCU, a completion handler), and the engine's send path
//! sleeps, as siw's posts go to its transmit threads. Once the QP is in the error state, what
//! is posted completes as flushed, which is what `ib_drain_qp` waits for.
//!
//! A user process's QP (created through uverbs) has rings in siw's ABI instead (`siw_rings.rs`):
//! its send requests are taken from its send ring and handed over in the doorbell's system call
//! (`post_send` with no requests), as siw sends in it, or by the work item as room frees; its
//! receives are taken from its receive ring by the receive side, when a message needs one.

use super::cm::QpConnection;
use super::cq::{IbCq, QpCq};
use super::device::IbDevice;
use super::siw_rings::{Mapping, RecvRing, SendRing, TakenSend};
use crate::error::{enotconn, eopnotsupp};
use crate::ffi;
use crate::fifo::Fifo;
use crate::kernel_memory;
use crate::mr::Domain;
use crate::qp::{Limits, PostedRecv, QueuePair, RecvSource};
use crate::sync::{new_spinlock_irq, SpinLockIrq};
use crate::verbs::{Completion, CompletionOp, Inline, InlineBytes, QpState, RecvWr, SendOp, SendWr, Sge, Status, MAX_KERNEL_INLINE, MAX_QP_WR, MAX_SGE};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;

pub(crate) struct KernelQp {
    /// Its device, which lists it by number.
    dev: Arc<IbDevice>,
    /// The QP and what connects it.
    conn: Arc<QpConnection>,
    qp: Arc<QueuePair>,
    send_cq: Arc<QpCq>,
    recv_cq: Arc<QpCq>,
    /// Every send request completes, whatever it asks (`IB_SIGNAL_ALL_WR`).
    sq_sig_all: bool,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_sge: u32,
    /// Octets of inline data a request may carry.
    max_inline: u32,
    /// The state the consumer moved the QP to before it connected (RESET, INIT, RTR).
    unconnected: AtomicU32,
    /// Send requests posted and not handed to the engine yet, and receives posted with
    /// interrupts off (a lock that turns them off: consumers post from any context).
    posted: Arc<SpinLockIrq<Posted>>,
    /// A user process's QP: it posts through rings only.
    user: bool,
}

/// A kernel consumer's receives held in [`Posted`] (posted where the engine's locks may not be
/// taken, or behind one posted so): the receive side takes them, oldest first, when a message
/// needs one, as it takes a user QP's from its ring. Taken under the receive side's lock, with
/// interrupts off (`Posted`'s lock is never held while the receive side's is taken).
struct HeldRecvs(Arc<SpinLockIrq<Posted>>);

impl RecvSource for HeldRecvs {
    fn take(&self, mrs: &Domain<'_>, max_sge: u32) -> Option<PostedRecv> {
        let wr = self.0.lock().recvs.pop()?;
        Some(PostedRecv::checked(wr.wr_id, &wr.sge, wr.num_sge, max_sge, mrs))
    }

    fn take_rest(&self, flush: &mut dyn FnMut(u64)) {
        HeldRecvs::drain(&self.0, flush);
    }
}

impl HeldRecvs {
    /// Takes every receive held in `posted`, oldest first, and hands its id to `f` outside
    /// the lock.
    fn drain(posted: &SpinLockIrq<Posted>, mut f: impl FnMut(u64)) {
        while let Some(wr) = {
            let taken = posted.lock().recvs.pop();
            taken
        } {
            f(wr.wr_id);
        }
    }
}

/// Send requests waiting to be handed over, oldest first, and receives posted where the
/// engine's locks may not be taken (interrupts off).
pub(super) struct Posted {
    wrs: Fifo<Option<Queued>>,
    /// Receives posted with interrupts off, or behind such a one not taken yet (they keep
    /// their order): the receive side takes them ([`HeldRecvs`]).
    recvs: Fifo<RecvWr>,
    /// The QP is being destroyed: nothing is posted or handed over any more.
    closed: bool,
    /// The oldest waits for room in the engine: the work item runs again once some frees.
    stalled: bool,
    /// A user process's send ring, whose requests are taken into `wrs` as it has room.
    ring: Option<SendRing>,
    /// Counts the times the engine freed room: room freed while the work item was trying the
    /// oldest (before it could say it waits) has it try again at once.
    freed: u32,
    /// Someone hands over (the work item, or a user process's doorbell): one at a time, in order.
    handing: bool,
    /// Asked to hand over meanwhile: whoever is handing over goes round once more.
    again: bool,
}

/// A send request waiting for its turn.
#[derive(Clone, Copy)]
struct Queued {
    wr: SendWr,
    /// `IB_SEND_FENCE`: its turn waits until every Read and atomic posted before it has
    /// completed (their answers are in place).
    fence: bool,
    /// Taken from a user's ring but not runnable: at its turn it completes in error, as this
    /// op, and the QP ends.
    refused: Option<CompletionOp>,
}

/// Send ring entries copied per hold of the lock: a user who fills a ring of thousands must
/// not keep interrupts off for the copy of them all.
const TAKEN_AT_ONCE: usize = 32;

/// Requests one hand-over passes to the engine before it leaves the rest to its work item.
const HAND_OVER_BUDGET: usize = 256;

impl Posted {
    /// Takes what the user's send ring holds into `wrs`, as far as there is room, at most
    /// [`TAKEN_AT_ONCE`] entries: the caller holds `posted`, with interrupts off, and takes
    /// again each time it hands one over.
    fn take_from_ring(&mut self, sig_all: bool, max_sge: u32, max_inline: u32) {
        let Some(ring) = &mut self.ring else { return };
        for _ in 0..TAKEN_AT_ONCE {
            if self.wrs.len() >= self.wrs.capacity() {
                return;
            }
            let queued = match ring.take(sig_all, max_sge, max_inline) {
                None => return,
                Some(TakenSend::Run { wr, fence }) => Queued { wr, fence, refused: None },
                Some(TakenSend::Refused { wr_id, op }) => {
                    let wr = SendWr {
                        wr_id,
                        op: SendOp::Send { invalidate: None },
                        sge: [Sge::default(); MAX_SGE],
                        num_sge: 0,
                        signaled: true,
                        solicited: false,
                        inline: Inline::No,
                    };
                    Queued { wr, fence: false, refused: Some(op) }
                }
            };
            // Room: checked above.
            let _ = self.wrs.push(Some(queued));
        }
    }
}

/// A user process's rings, for the RDMA core to map.
pub(super) struct Mappings {
    pub(super) send: Mapping,
    pub(super) recv: Mapping,
}

/// The engine freed room on `ibqp`'s send side: its work item runs again at once if its oldest
/// request waits for that, unless the QP is being destroyed.
pub(super) fn room_freed(posted: &SpinLockIrq<Posted>, ibqp: usize) {
    let mut p = posted.lock();
    p.freed = p.freed.wrapping_add(1);
    if p.stalled && !p.closed {
        p.stalled = false;
        // SAFETY: under `posted`, before `closed`: the QP's destroy has not settled its work
        // yet, and will settle this too.
        unsafe { ffi::iwarp_shim_ib_qp_kick(ibqp as *mut ffi::ib_qp, 0) };
    }
}

impl KernelQp {
    /// A QP as `attr` asks, for the RDMA core's `ibqp`; `attr` gets the sizes given. Only
    /// reliable connections without a shared receive queue; inline data up to
    /// [`MAX_KERNEL_INLINE`] octets a request (given if any is asked for).
    ///
    /// A user process's QP (`attr.user`) gets rings of its queues' sizes (a receive ring of at
    /// least one entry, libsiw maps it whatever its size), to be mapped: `Mappings`.
    pub(super) fn new(
        dev: Arc<IbDevice>,
        ibqp: *mut ffi::ib_qp,
        attr: &mut ffi::iwarp_ib_qp_attr,
        send_cq: Arc<IbCq>,
        recv_cq: Arc<IbCq>,
    ) -> Result<(KernelQp, Option<Mappings>)> {
        if !attr.rc || attr.srq {
            return Err(eopnotsupp());
        }
        if attr.user {
            attr.max_recv_wr = attr.max_recv_wr.max(1);
        }
        let sge = attr.max_send_sge.max(attr.max_recv_sge);
        // A QP may take no receives; one asking to send nothing (qperf's passive side) gets
        // room for one request, as the engine sends at least one at a time.
        attr.max_send_wr = attr.max_send_wr.max(1);
        if attr.max_send_wr > MAX_QP_WR || attr.max_recv_wr > MAX_QP_WR || sge as usize > MAX_SGE || attr.max_inline as usize > MAX_KERNEL_INLINE {
            return Err(EINVAL);
        }
        if !dev.mrs.lock().has_pd(attr.pd) {
            return Err(EINVAL);
        }
        let (ring, recv_ring) = if attr.user { (Some(SendRing::new(attr.max_send_wr)?), Some(RecvRing::new(attr.max_recv_wr)?)) } else { (None, None) };
        let mappings = match (&ring, &recv_ring) {
            (Some(send), Some(recv)) => Some(Mappings { send: send.mapping(), recv: recv.mapping() }),
            _ => None,
        };
        let posted = Posted {
            wrs: Fifo::new(attr.max_send_wr as usize)?,
            recvs: Fifo::new(attr.max_recv_wr as usize)?,
            closed: false,
            stalled: false,
            ring,
            freed: 0,
            handing: false,
            again: false,
        };
        let posted = Arc::pin_init(new_spinlock_irq!(posted, "KernelQp::posted"), GFP_KERNEL)?;
        let (send_cq, recv_cq) = (QpCq::new(send_cq, ibqp, Some(posted.clone()))?, QpCq::new(recv_cq, ibqp, None)?);
        let recv_source: Arc<dyn RecvSource> = match recv_ring {
            Some(ring) => ring,
            None => Arc::new(HeldRecvs(posted.clone()), GFP_KERNEL)?,
        };
        let recv_source = Some(recv_source);
        let limits = Limits { max_recv_wr: attr.max_recv_wr, max_send_wr: attr.max_send_wr, max_sge: sge, max_inline: 0, ring_entries: None, recv_source };
        let (send, recv) = (send_cq.clone(), recv_cq.clone());
        let conn = dev.list_qp(|number| {
            let qp = QueuePair::new(number, attr.pd, dev.mrs.clone(), send, recv, limits)?;
            QpConnection::new(ibqp, qp)
        })?;
        let qp = conn.qp.clone();
        let max_inline = if attr.max_inline > 0 { MAX_KERNEL_INLINE as u32 } else { 0 };
        (attr.max_send_sge, attr.max_recv_sge, attr.max_inline, attr.qpn) = (sge, sge, max_inline, qp.handle());
        let qp = KernelQp {
            dev,
            conn,
            qp,
            send_cq,
            recv_cq,
            sq_sig_all: attr.sq_sig_all,
            max_send_wr: attr.max_send_wr,
            max_recv_wr: attr.max_recv_wr,
            max_sge: sge,
            max_inline,
            unconnected: AtomicU32::new(ffi::IWARP_IB_QPS_RESET),
            posted,
            user: attr.user,
        };
        Ok((qp, mappings))
    }

    /// `modify_qp`: only the state matters to an iWARP QP. Before it connects it moves among
    /// RESET, INIT and RTR; only the connection manager makes it RTS (here: EINVAL unless it
    /// is). SQD closes a connected QP's sending after what is queued; ERR ends it, flushing
    /// everything posted.
    pub(super) fn modify(&self, mask: u32, state: u32) -> Result {
        if mask & ffi::IWARP_IB_QP_STATE == 0 {
            return Ok(());
        }
        let now = self.qp.state();
        match state {
            ffi::IWARP_IB_QPS_RESET | ffi::IWARP_IB_QPS_INIT | ffi::IWARP_IB_QPS_RTR if now == QpState::Init => {
                self.unconnected.store(state, Ordering::Relaxed);
                Ok(())
            }
            ffi::IWARP_IB_QPS_RTS if now == QpState::Rts => Ok(()),
            // A connection already over (the peer's close or a Terminate got there first, and
            // iw_cm has not heard yet) leaves a disconnect nothing to do: rdma_disconnect then
            // succeeds, as on siw.
            ffi::IWARP_IB_QPS_SQD if now == QpState::Error => Ok(()),
            ffi::IWARP_IB_QPS_SQD if now == QpState::Rts => match self.qp.disconnect() {
                Err(_) if self.qp.state() == QpState::Error => Ok(()),
                done => done,
            },
            ffi::IWARP_IB_QPS_ERR => {
                self.qp.close();
                Ok(())
            }
            _ => Err(EINVAL),
        }
    }

    /// `query_qp`: the state and the sizes.
    pub(super) fn query(&self, attr: &mut ffi::iwarp_ib_qp_attr) {
        attr.state = match self.qp.state() {
            QpState::Init => self.unconnected.load(Ordering::Relaxed),
            QpState::Rts => ffi::IWARP_IB_QPS_RTS,
            QpState::Error => ffi::IWARP_IB_QPS_ERR,
        };
        attr.rc = true;
        attr.sq_sig_all = self.sq_sig_all;
        attr.max_send_wr = self.max_send_wr;
        attr.max_recv_wr = self.max_recv_wr;
        (attr.max_send_sge, attr.max_recv_sge) = (self.max_sge, self.max_sge);
        attr.max_inline = self.max_inline;
    }

    /// What `rdma resource show qp -dd` prints: octets sent by reference and copied, and
    /// placed in order and out of order.
    pub(super) fn counters(&self, c: &mut ffi::iwarp_ib_qp_counters) {
        let r = self.qp.query();
        (c.sent_zero_copy, c.sent_copied) = (r.sent_zero_copy, r.sent_copied);
        (c.placed_in_order, c.placed_out_of_order) = (r.placed_in_order, r.placed_out_of_order);
    }

    /// `post_send` of one request: checked for what it asks (EINVAL), then queued for
    /// [`KernelQp::hand_over`] (ENOMEM when `max_send_wr` wait already). The regions it names
    /// are checked at its turn, as an RNIC does: a refusal completes it with a local protection
    /// error and ends the QP.
    pub(super) fn post_send(&self, w: &ffi::iwarp_ib_send_wr) -> Result {
        // A user QP's requests are in its ring (and their addresses are not the kernel's).
        if self.user {
            return Err(EINVAL);
        }
        let wr = self.send_wr(w)?;
        self.qp.check_shape(&wr)?;
        // The QP's state is behind a lock that leaves bottom halves off: not looked at from a
        // hard interrupt (a request to an unconnected QP then fails at its turn).
        if crate::shim::bh_locks_allowed() && self.qp.state() == QpState::Init {
            return Err(enotconn());
        }
        let mut posted = self.posted.lock();
        if posted.closed {
            return Err(enotconn());
        }
        let fence = w.flags & ffi::IWARP_IB_SEND_FENCE != 0;
        posted.wrs.push(Some(Queued { wr, fence, refused: None })).map_err(|_| ENOMEM)?;
        // Under `posted`: once `closed` is set, nothing queues the work of a QP being destroyed.
        // SAFETY: the RDMA core's QP lives until its destroy, which settles the work first.
        unsafe { ffi::iwarp_shim_ib_qp_kick(self.conn.ibqp as *mut ffi::ib_qp, 0) };
        Ok(())
    }

    /// The doorbell of a user QP (`post_send` with no requests): what its send ring holds is
    /// taken and handed to the engine in the process's own system call, as siw sends, not a
    /// work item's wake-up later (a kernel consumer's QP has no ring: nothing to take). uverbs
    /// runs no destroy of the QP meanwhile.
    pub(super) fn doorbell(&self) -> Result {
        if !self.user {
            return Ok(());
        }
        if self.posted.lock().closed {
            return Err(enotconn());
        }
        self.hand_over();
        Ok(())
    }

    /// Hands over what is posted ([`KernelQp::hand_over_now`]), unless someone else is: then
    /// that one goes round again, so requests keep their order and none waits unseen.
    pub(super) fn hand_over(&self) {
        {
            let mut p = self.posted.lock();
            if p.handing {
                p.again = true;
                return;
            }
            p.handing = true;
        }
        loop {
            let spent = self.hand_over_now();
            let mut p = self.posted.lock();
            if spent {
                // The budget is spent: the work item goes on from here, whatever another
                // caller asked meanwhile (which would keep this one going round for ever).
                (p.handing, p.again) = (false, false);
                if !p.closed {
                    // SAFETY: as in `post_send`; `end` settles this work before the QP goes.
                    unsafe { ffi::iwarp_shim_ib_qp_kick(self.conn.ibqp as *mut ffi::ib_qp, 0) };
                }
                return;
            }
            if !core::mem::take(&mut p.again) {
                p.handing = false;
                return;
            }
        }
    }

    /// Hands the posted send requests to the engine, in order. One the engine
    /// has no room for yet (the ORD's Reads outstanding, the send queue full), or a fenced one
    /// while Reads or atomics before it are outstanding, stays at the head, as an RNIC holds it,
    /// and is tried again when the engine frees room ([`room_freed`]: an answer came), or a
    /// tick later at the latest (an ended QP's flush into a full CQ, a tenth of a second
    /// later). One the engine refuses (a region
    /// that does not allow it) completes in error, and the QP ends, as an RNIC's does.
    ///
    /// At most [`HAND_OVER_BUDGET`] requests per call; then it returns true, and the work item
    /// is to go on from there. A user's send ring is memory its owner may refill as fast as this
    /// drains it (and an ended QP flushes each request at once), so one call must not run for
    /// ever.
    fn hand_over_now(&self) -> bool {
        self.flush_held_recvs();
        for _ in 0..HAND_OVER_BUDGET {
            let (wr, freed) = {
                let mut posted = self.posted.lock();
                if posted.closed {
                    return false;
                }
                posted.take_from_ring(self.sq_sig_all, self.max_sge, self.max_inline);
                (posted.wrs.get(0).copied().flatten(), posted.freed)
            };
            let Some(Queued { mut wr, fence, refused }) = wr else { return false };
            if let Some(op) = refused {
                self.posted.lock().wrs.pop();
                self.refused_at_turn(&self.send_cq, wr.wr_id, op, EINVAL);
                continue;
            }
            // The local region a Read or a Local Invalidate invalidates is found by its slot, as
            // in siw, once the Fast Register ahead of it is done: the RDMA core's rdma_rw names it
            // by the key it had before that Fast Register (it steps the key after building the
            // request), and a region whose Fast Register failed or was flushed keeps its old key
            // while the consumer has stepped it.
            let local = match &mut wr.op {
                SendOp::Read { invalidate, .. } if *invalidate != 0 => Some(invalidate),
                SendOp::LocalInvalidate { stag } => Some(stag),
                _ => None,
            };
            if let Some(stag) = local {
                *stag = self.dev.mrs.lock().current_stag(*stag).unwrap_or(*stag);
            }
            let op = flushed_op(&wr.op);
            let posted =
                if fence && self.qp.asks_outstanding() { Err(ENOMEM) } else { self.post_or_flush(&self.send_cq, wr.wr_id, op, || self.qp.post_send(&wr)) };
            if posted == Err(ENOMEM) {
                // An ended QP stalls only on a full CQ, which a user's consumer frees without
                // telling us: it looks again ten times a second, not every tick. (The state is
                // the receive side's, whose lock is never taken under `posted`.)
                let later_ms = if self.qp.state() == QpState::Error { 100 } else { 1 };
                let mut p = self.posted.lock();
                if p.freed != freed {
                    continue;
                }
                p.stalled = true;
                if !p.closed {
                    // SAFETY: as in `post_send`; `end` settles this work before the QP goes.
                    unsafe { ffi::iwarp_shim_ib_qp_kick(self.conn.ibqp as *mut ffi::ib_qp, later_ms) };
                }
                return false;
            }
            self.posted.lock().wrs.pop();
            if let Err(e) = posted {
                self.refused_at_turn(&self.send_cq, wr.wr_id, op, e);
            }
        }
        true
    }

    /// The engine refused a request at its turn (`e`): it completes in error and the QP ends,
    /// as an RNIC's does. What was handed over before it is flushed first: the queue completes
    /// in order.
    fn refused_at_turn(&self, cq: &QpCq, wr_id: u64, op: CompletionOp, e: Error) {
        self.qp.close();
        let status = if e == EINVAL || e == EACCES { Status::LocalProtection } else { Status::Fatal };
        let failed = Completion { wr_id, status, op, qp: self.qp.handle(), ..Completion::default() };
        let _ = crate::cq::CompletionQueue::push(cq, &failed);
    }

    /// `post_recv` of one request. With interrupts off (a block driver's completion interrupt
    /// reposting), or behind a receive posted so, it is held, and the receive side takes it
    /// when a message needs it ([`HeldRecvs`]): its regions are checked then, and one refused
    /// ends the QP, completing with a local protection error. A message arriving at once finds
    /// it, as it would a receive posted directly.
    pub(super) fn post_recv(&self, w: &ffi::iwarp_ib_recv_wr) -> Result {
        // A user QP's receives are in its ring.
        if self.user {
            return Err(EINVAL);
        }
        let mut wr = RecvWr { wr_id: w.wr_id, num_sge: w.num_sge, ..RecvWr::default() };
        copy_sges(&mut wr.sge, w.sge, w.num_sge)?;
        let direct = crate::shim::bh_locks_allowed();
        {
            let mut p = self.posted.lock();
            if !direct || p.recvs.len() > 0 {
                // The engine checks this for the receives it is given directly.
                if wr.num_sge > self.max_sge {
                    return Err(EINVAL);
                }
                if p.closed {
                    return Err(enotconn());
                }
                p.recvs.push(wr).map_err(|_| ENOMEM)?;
                // The work flushes it if the QP ended before the receive side could take it.
                // Under `posted`, as in `post_send`.
                // SAFETY: the RDMA core's QP lives until its destroy, which settles the work first.
                unsafe { ffi::iwarp_shim_ib_qp_kick(self.conn.ibqp as *mut ffi::ib_qp, 0) };
                return Ok(());
            }
        }
        self.post_or_flush(&self.recv_cq, wr.wr_id, CompletionOp::Recv, || self.qp.post_recv(&wr))
    }

    /// Flushes the receives still held once the QP has ended (the receive side flushed what
    /// it held when it ended, and takes no more).
    fn flush_held_recvs(&self) {
        // Counted first: `posted` is let go before the state's lock is taken.
        let held = self.posted.lock().recvs.len();
        if held == 0 || self.qp.state() != QpState::Error {
            return;
        }
        HeldRecvs::drain(&self.posted, |wr_id| {
            let flushed = Completion { wr_id, status: Status::Flushed, op: CompletionOp::Recv, qp: self.qp.handle(), ..Completion::default() };
            let _ = crate::cq::CompletionQueue::push(&*self.recv_cq, &flushed);
        });
    }

    /// Posts with `post`, unless the QP has ended (before, or meanwhile: ENOTCONN): then the
    /// request completes at once, flushed, into `cq`.
    fn post_or_flush(&self, cq: &QpCq, wr_id: u64, op: CompletionOp, post: impl FnOnce() -> Result) -> Result {
        if self.qp.state() != QpState::Error {
            match post() {
                Err(e) if e == enotconn() && self.qp.state() == QpState::Error => {}
                done => return done,
            }
        }
        let flushed = Completion { wr_id, status: Status::Flushed, op, qp: self.qp.handle(), ..Completion::default() };
        // A full CQ cannot take it: the request is refused, so nobody waits for it.
        crate::cq::CompletionQueue::push(cq, &flushed).map_err(|_| ENOMEM)
    }

    /// The engine's request for `w`: EINVAL for an opcode not supported, too many entries, or
    /// more inline data than the QP takes. Inline data is copied now.
    fn send_wr(&self, w: &ffi::iwarp_ib_send_wr) -> Result<SendWr> {
        let (rkey, remote_addr) = (w.rkey, w.remote_addr);
        let op = match w.opcode {
            ffi::IWARP_IB_WR_SEND => SendOp::Send { invalidate: None },
            ffi::IWARP_IB_WR_SEND_WITH_INV => SendOp::Send { invalidate: Some(w.invalidate_rkey) },
            ffi::IWARP_IB_WR_RDMA_WRITE => SendOp::Write { rkey, remote_addr, imm: None },
            ffi::IWARP_IB_WR_RDMA_READ => SendOp::Read { rkey, remote_addr, invalidate: 0 },
            ffi::IWARP_IB_WR_RDMA_READ_WITH_INV => SendOp::Read { rkey, remote_addr, invalidate: w.invalidate_rkey },
            ffi::IWARP_IB_WR_LOCAL_INV => SendOp::LocalInvalidate { stag: w.invalidate_rkey },
            // The key must name the region's own slot (the shim passes its lkey as well).
            ffi::IWARP_IB_WR_REG_MR if rkey >> 8 == w.invalidate_rkey >> 8 => {
                SendOp::FastRegister { stag: rkey, addr: remote_addr, length: w.length, rights: super::device::rights(w.access)? }
            }
            _ => return Err(EINVAL),
        };
        let mut sge = [Sge::default(); MAX_SGE];
        copy_sges(&mut sge, w.sge, w.num_sge)?;
        let (inline, num_sge) = if w.flags & ffi::IWARP_IB_SEND_INLINE != 0 {
            let pieces = &sge[..w.num_sge as usize];
            let bytes = InlineBytes::gather(pieces.iter().map(|s| s.length as usize), self.max_inline as usize, |i, dst| {
                // SAFETY: the consumer names kernel memory of its own (a virtual DMA address,
                // its lkey unused for inline data), readable for the call.
                unsafe { kernel_memory::copy_from(pieces[i].addr, dst) }
            })?;
            (Inline::Kernel(bytes), 0)
        } else {
            (Inline::No, w.num_sge)
        };
        Ok(SendWr {
            wr_id: w.wr_id,
            op,
            sge: if num_sge > 0 { sge } else { [Sge::default(); MAX_SGE] },
            num_sge,
            signaled: self.sq_sig_all || w.flags & ffi::IWARP_IB_SEND_SIGNALED != 0,
            solicited: w.flags & ffi::IWARP_IB_SEND_SOLICITED != 0,
            inline,
        })
    }
}

impl KernelQp {
    /// The RDMA core destroys the QP: it ends (flushing what was posted, reporting CLOSE to
    /// iw_cm), its socket is unhooked, its unpolled completions go (they would name a freed
    /// `ib_qp`), and iw_cm no longer finds it. iw_cm may still modify it until its references
    /// are gone; then it is dropped.
    pub(super) fn end(&self) {
        self.posted.lock().closed = true;
        // SAFETY: the RDMA core's QP is live (its destroy is what calls this).
        unsafe { ffi::iwarp_shim_ib_qp_settle(self.conn.ibqp as *mut ffi::ib_qp) };
        self.qp.close();
        self.conn.abort_exchange();
        self.conn.unhook();
        self.send_cq.purge();
        self.recv_cq.purge();
        self.dev.forget_qp(self.qp.handle());
    }
}

/// What a flushed send request reports having been.
fn flushed_op(op: &SendOp) -> CompletionOp {
    match op {
        SendOp::Send { .. } | SendOp::Immediate { .. } => CompletionOp::Send,
        SendOp::Write { .. } => CompletionOp::RdmaWrite,
        SendOp::Read { .. } => CompletionOp::RdmaRead,
        SendOp::FetchAdd { .. } => CompletionOp::FetchAdd,
        SendOp::CompareSwap { .. } => CompletionOp::CompareSwap,
        SendOp::LocalInvalidate { .. } => CompletionOp::LocalInvalidate,
        SendOp::FastRegister { .. } => CompletionOp::FastRegister,
    }
}

/// Copies the consumer's `n` entries at `from` into `to`; EINVAL for more than it holds.
fn copy_sges(to: &mut [Sge; MAX_SGE], from: *const ffi::iwarp_ib_sge, n: u32) -> Result {
    let n = n as usize;
    if n > MAX_SGE || (n > 0 && from.is_null()) {
        return Err(EINVAL);
    }
    for (i, slot) in to.iter_mut().enumerate().take(n) {
        // SAFETY: the RDMA core's consumer passes `n` entries at `from` (its `sg_list`, laid
        // out as `iwarp_ib_sge`: the shim asserts it), valid for the call; `i` is below `n`.
        let s = unsafe { from.add(i).read() };
        *slot = Sge { addr: s.addr, length: s.length, lkey: s.lkey };
    }
    Ok(())
}
