// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: a TCP connection after the MPA exchange (`establish`), with a send side that
//! checks work requests in the caller's context (`send`, `payload`) and queues them for TCP
//! without waiting (`outbound`; completions on acknowledgement in `unacked`), and a receive side
//! that the socket's data-ready callback runs when data arrives (a work item for what must
//! sleep), placing straight from the socket's buffers into registered memory and completing
//! into the CQs (`receive`). Lock order: tx, socket, rx, CQ, events; the region table is a
//! leaf, held only to look a region up (rx and after are spinlocks taken with bottom halves
//! off, since the receive side runs in the socket's data-ready callback).

mod establish;
mod outbound;
mod payload;
mod receive;
mod send;
mod unacked;
mod work_ring;
mod wr;

pub(crate) use establish::{advance, boxed, establish, send_out, wait_until, Established, Exchange, Failed, OnSettled, Side};

use crate::cq::CompletionQueue;
use crate::error::enotconn;
use crate::fifo::Fifo;
use crate::mr::{Domain, MrTable};
use crate::proto::markers::{self, Markers};
use crate::proto::mpa::negotiate::{Connection, Rtr};
use crate::proto::terminate::Terminate;
use crate::proto::tx::{self, Transmitter};
use crate::socket::TcpSocket;
use crate::sync::{new_spinlock_bh, SpinLockBh};
use crate::verbs::{Completion, CompletionOp, QpEvent, QpEventKind, QpReport, QpState, Status};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex, SetOnce};
use outbound::TxSide;
use receive::RxSide;
use unacked::Unacked;
use work_ring::{Heads, WorkRing};
pub(crate) use wr::PostedRecv;
use wr::{PendingAtomic, PendingRead};

/// Queue pairs of all contexts.
static QUEUE_PAIRS: AtomicU64 = AtomicU64::new(0);

/// Told once when a QP ends, however (its owner, the peer, a Terminate), with the asynchronous
/// event to report unless its owner ended it: `/dev/iwarp` keeps the event for the context,
/// the RDMA core's connection manager reports the close, and its consumer's event handler
/// hears the event.
pub(crate) trait OnEnded: Send + Sync {
    /// Called with the QP's receive side locked, in softirq context too: it may not sleep or
    /// call into the QP.
    fn ended(&self, event: Option<QpEvent>);

    /// Called right after, the QP's locks released (in softirq context too: it may not sleep).
    fn after_ended(&self, _event: Option<QpEvent>) {}
}

/// Receives a front door keeps where its consumer posts them without a system call (siw's
/// mapped receive ring): the receive side takes them, oldest first, when a message needs one,
/// and flushes what is left when the QP ends. Called with the QP's receive side locked (in
/// softirq context too).
pub(crate) trait RecvSource: Send + Sync {
    /// The oldest receive not taken yet, its entries checked against `mrs` (at most `max_sge`
    /// of them, each in a region with local write access), or marked `bad`; None if none waits.
    fn take(&self, mrs: &Domain<'_>, max_sge: u32) -> Option<PostedRecv>;
    /// Takes every receive left, calling `flush` with each one's `wr_id`.
    fn take_rest(&self, flush: &mut dyn FnMut(u64));
}

/// What the caller asked of the stream beyond what MPA negotiates.
pub(crate) struct StreamOptions {
    /// Copy every payload before sending it (no zero copy).
    pub(crate) copy_send: bool,
    /// Place what TCP holds out of order, where FPDUs can be found in it.
    pub(crate) ooo: bool,
    /// Start each FPDU at a TCP segment.
    pub(crate) aligned: bool,
    /// Where markers sit in each direction that negotiated them.
    pub(crate) markers: Markers,
}

/// The module-wide QP count.
pub(crate) fn queue_pairs() -> u64 {
    QUEUE_PAIRS.load(Ordering::Relaxed)
}

/// Counts a live QP.
struct Counted;

impl Counted {
    fn new() -> Counted {
        QUEUE_PAIRS.fetch_add(1, Ordering::Relaxed);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        QUEUE_PAIRS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sizes of a QP's queues, fixed at creation.
pub(crate) struct Limits {
    /// Receive work requests posted at once.
    pub(crate) max_recv_wr: u32,
    /// Our RDMA Reads outstanding (further capped by the ORD the connection settles).
    pub(crate) max_send_wr: u32,
    /// Scatter/gather entries per work request.
    pub(crate) max_sge: u32,
    /// Inline data per send work request.
    pub(crate) max_inline: u32,
    /// Octets of an entry of the send ring and of the receive ring (the front door's types),
    /// for a QP whose owner posts through mapped rings; `None` for one posted to directly.
    pub(crate) ring_entries: Option<(usize, usize)>,
    /// Where receives come from besides `post_recv` ([`RecvSource`]).
    pub(crate) recv_source: Option<Arc<dyn RecvSource>>,
}

/// Why a QP left the connected state (what QUERY_QP and asynchronous events report).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The Terminate's layer/type/code, 0 if none (peer closed, destroyed).
    pub(crate) terminate: u32,
    /// We sent it.
    pub(crate) sent: bool,
    by: By,
}

/// What ended a QP.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    /// A Terminate, ours or the peer's.
    Terminate,
    /// The connection closed or broke without one.
    ConnectionLost,
    /// Its owner (DISCONNECT, DESTROY_QP, file release): no event.
    Owner,
}

impl Ended {
    fn of(t: &Terminate, sent: bool) -> Ended {
        let (layer, etype, code) = t.code;
        Ended { terminate: u32::from(layer) << 16 | u32::from(etype) << 8 | u32::from(code), sent, by: By::Terminate }
    }

    fn lost() -> Ended {
        Ended { terminate: 0, sent: false, by: By::ConnectionLost }
    }

    fn by_owner() -> Ended {
        Ended { terminate: 0, sent: false, by: By::Owner }
    }

    /// The asynchronous event to report for QP `qp`, if any.
    fn event(&self, qp: u32) -> Option<QpEvent> {
        let kind = match self.by {
            By::Terminate => QpEventKind::Terminated { terminate: self.terminate, sent: self.sent },
            By::ConnectionLost => QpEventKind::ConnectionLost,
            By::Owner => return None,
        };
        Some(QpEvent { qp, kind })
    }
}

/// Where a QP is in its life.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Made; receives may be posted.
    Init,
    /// ADOPT_QP is running the MPA exchange.
    Connecting,
    /// Work requests flow.
    Connected,
    /// Over; everything posted was flushed.
    Ended(Ended),
}

/// A queue pair.
#[pin_data]
pub(crate) struct QueuePair {
    /// The context's handle, stamped into completions.
    handle: u32,
    /// The protection domain: the only regions this QP reaches.
    pd: u32,
    max_sge: u32,
    max_inline: u32,
    /// Set once, when connected.
    sock: SetOnce<TcpSocket>,
    /// Told when the QP ends (set once, by its front door).
    on_ended: SetOnce<Arc<dyn OnEnded>>,
    /// Copy every payload before sending (set when connected).
    copy_send: AtomicBool,
    /// A responder sends no FPDU before it received and validated one (RFC 5044 section 7.1.2);
    /// in peer-to-peer mode that first FPDU is the initiator's RTR (RFC 6581).
    awaiting_peer: AtomicBool,
    mrs: Arc<SpinLockBh<MrTable>>,
    send_cq: Arc<dyn CompletionQueue>,
    recv_cq: Arc<dyn CompletionQueue>,
    /// Send requests queued at once.
    max_send_wr: u32,
    /// Where receives come from besides `post_recv`, if the front door has such a place.
    recv_source: Option<Arc<dyn RecvSource>>,
    /// The mapped work rings (send, receive), if the owner posts through them.
    rings: Option<(WorkRing, WorkRing)>,
    _counted: Counted,
    /// The module's own ring heads; held while a doorbell is processed (outermost lock).
    #[pin]
    heads: Mutex<Heads>,
    /// Set when connected.
    #[pin]
    tx: Mutex<Option<TxSide>>,
    /// Taken in the socket's data-ready callback (softirq) too: never held while sleeping.
    #[pin]
    rx: SpinLockBh<RxSide>,
}

impl QueuePair {
    /// A QP not connected yet, known to its context as `handle`.
    pub(crate) fn new(
        handle: u32,
        pd: u32,
        mrs: Arc<SpinLockBh<MrTable>>,
        send_cq: Arc<dyn CompletionQueue>,
        recv_cq: Arc<dyn CompletionQueue>,
        limits: Limits,
    ) -> Result<Arc<QueuePair>> {
        let rq = Fifo::<PostedRecv>::new(limits.max_recv_wr as usize)?;
        let reads = Fifo::<PendingRead>::new(limits.max_send_wr as usize)?;
        let atomics = Fifo::<PendingAtomic>::new(limits.max_send_wr as usize)?;
        // Signaled requests outstanding, each behind at most one run of unsignaled ones.
        let unacked = Fifo::<Unacked>::new(2 * limits.max_send_wr as usize + 1)?;
        let rings = match limits.ring_entries {
            Some((send, recv)) => Some((WorkRing::new(limits.max_send_wr, send)?, WorkRing::new(limits.max_recv_wr, recv)?)),
            None => None,
        };
        Arc::pin_init(
            try_pin_init!(QueuePair {
                handle,
                pd,
                max_sge: limits.max_sge,
                max_inline: limits.max_inline,
                sock: SetOnce::new(),
                on_ended: SetOnce::new(),
                copy_send: AtomicBool::new(false),
                awaiting_peer: AtomicBool::new(false),
                mrs,
                send_cq,
                recv_cq,
                max_send_wr: limits.max_send_wr,
                recv_source: limits.recv_source,
                rings,
                _counted: Counted::new(),
                heads <- new_mutex!(Heads::new()),
                tx <- new_mutex!(None),
                rx <- new_spinlock_bh!(RxSide::new(rq, reads, atomics, unacked)?, "QueuePair::rx"),
            }),
            GFP_KERNEL_ACCOUNT,
        )
    }

    /// Claims the QP for an ADOPT_QP (EINVAL unless it is new). [`QueuePair::connect`] or
    /// [`QueuePair::abandon`] must follow.
    pub(crate) fn claim(&self) -> Result {
        let mut rx = self.rx.lock();
        if rx.phase != Phase::Init {
            return Err(EINVAL);
        }
        rx.phase = Phase::Connecting;
        Ok(())
    }

    /// The exchange failed: the QP may be adopted again.
    pub(crate) fn abandon(&self) {
        let mut rx = self.rx.lock();
        if rx.phase == Phase::Connecting {
            rx.phase = Phase::Init;
        }
    }

    /// Takes the established stream: framing for what we send, the receive engine for what
    /// arrives, as `opts` asks (EINVAL unless claimed and not ended since). The caller then
    /// hooks the socket.
    pub(crate) fn connect(&self, est: Established, opts: &StreamOptions) -> Result {
        let c: Connection = est.conn;
        // Peer-to-peer mode (RFC 6581): the initiator's RTR goes out before anything posted;
        // the responder takes it first and sends nothing until then.
        let (send_rtr, expect_rtr) = if est.initiator { (c.rtr, None) } else { (None, c.rtr) };
        // A Read RTR is a zero-length Read Request on top of the peer's ORD: room for one
        // more answer, so a full ORD of Reads may follow it at once.
        let ird = c.ird as usize + usize::from(expect_rtr == Some(Rtr::Read));
        let (rx_marks, tx_marks) = (if c.rx_markers { opts.markers } else { Markers::NONE }, if c.tx_markers { opts.markers } else { Markers::NONE });
        // FPDUs sized to the connection's MSS, with room for the markers the peer asked for.
        let mulpdu = markers::mulpdu(est.sock.mss(), tx_marks).min(u32::from(u16::MAX));
        // A peer can announce a tiny MSS; with it not every message could be framed.
        if mulpdu < tx::MIN_MULPDU {
            return Err(EMSGSIZE);
        }
        let framing = Transmitter::new(tx::Config { markers: tx_marks, crc: c.crc, mulpdu });
        let mut tx = TxSide::new(framing, self.max_send_wr as usize, ird, opts.aligned)?;
        if let Some(rtr) = send_rtr {
            tx.queue_rtr(rtr)?;
        }
        let rx_cfg = crate::proto::rx::Config {
            markers: rx_marks,
            crc: c.crc,
            expect_rtr,
            expect_rtr_read_response: send_rtr == Some(Rtr::Read),
            extensions: c.extensions,
        };
        // Allocated here: the receive side is set up under a spinlock.
        let rx_mem = receive::RxMemory::new(ird)?;
        est.sock.set_nodelay();
        if !self.sock.populate(est.sock) {
            return Err(EINVAL);
        }
        self.copy_send.store(opts.copy_send, Ordering::Relaxed);
        self.awaiting_peer.store(!est.initiator, Ordering::Release);
        // The send side first (lock order); posting stays refused until the phase changes.
        *self.tx.lock() = Some(tx);
        let mut rx = self.rx.lock();
        // Ended meanwhile (destroyed while its exchange ran): it stays ended.
        if rx.phase != Phase::Connecting {
            return Err(EINVAL);
        }
        rx.connect(rx_cfg, rx_mem, c.ord as usize, opts.ooo);
        rx.phase = Phase::Connected;
        drop(rx);
        if send_rtr.is_some() {
            self.resume();
        }
        Ok(())
    }

    /// Tells `to` when the QP ends (once; EINVAL if something is told already).
    pub(crate) fn tell_ended(&self, to: Arc<dyn OnEnded>) -> Result {
        if self.on_ended.populate(to) {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }

    /// The peer's first FPDU was received and valid: what a responder held may go. Returns
    /// whether anything was held (the transmit work then sends it).
    pub(super) fn peer_spoke(&self) -> bool {
        self.awaiting_peer.swap(false, Ordering::AcqRel)
    }

    /// The protection domain.
    pub(crate) fn pd(&self) -> u32 {
        self.pd
    }

    /// The regions this QP reaches: those of its protection domain.
    fn regions(&self) -> Domain<'_> {
        Domain::new(&self.mrs, self.pd)
    }

    /// Whether this QP places what TCP holds out of order (it then wants the doorbell).
    pub(crate) fn places_out_of_order(&self) -> bool {
        self.rx.lock().places_out_of_order()
    }

    /// The connected socket.
    pub(crate) fn socket(&self) -> Result<&TcpSocket> {
        self.sock.as_ref().ok_or_else(enotconn)
    }

    /// The QP's handle in its context.
    pub(crate) fn handle(&self) -> u32 {
        self.handle
    }

    /// Whether Reads or atomics of ours wait for their answers (a fenced request waits for them).
    pub(crate) fn asks_outstanding(&self) -> bool {
        let rx = self.rx.lock();
        rx.queues.reads.len() > 0 || rx.queues.atomics.len() > 0
    }

    /// Where the QP is (in error once ended: what is posted then can only be flushed).
    pub(crate) fn state(&self) -> QpState {
        match self.rx.lock().phase {
            Phase::Init | Phase::Connecting => QpState::Init,
            Phase::Connected => QpState::Rts,
            Phase::Ended(_) => QpState::Error,
        }
    }

    /// The state, the Terminate that ended the QP, the octets sent and where received payload
    /// was placed.
    pub(crate) fn query(&self) -> QpReport {
        // Before the receive side: the socket's callbacks take the receive side inside the
        // socket's callback lock, which this takes.
        let doorbells = self.sock.as_ref().map_or(0, |s| s.doorbells());
        let ((sent_zero_copy, sent_copied), tx_marker_interval) =
            self.tx.lock().as_ref().map_or(((0, 0), 0), |side| (side.sent(), side.config().markers.interval()));
        let state = self.state();
        let rx = self.rx.lock();
        let (p, e) = (rx.queues.placement, rx.early_stats());
        let (terminate, terminate_sent) = match rx.phase {
            Phase::Ended(e) => (e.terminate, e.sent),
            _ => (0, false),
        };
        QpReport {
            state,
            terminate,
            terminate_sent,
            sent_zero_copy,
            sent_copied,
            placed_in_order: p.in_order,
            placed_out_of_order: p.out_of_order,
            fpdus_out_of_order: e.by_marker + e.by_alignment + e.after_placed,
            ooo_walks: p.ooo_walks,
            doorbells,
            fpdus_by_marker: e.by_marker,
            fpdus_held_back: e.held_back,
            fpdus_bad: e.bad,
            fpdus_by_alignment: e.by_alignment,
            rx_marker_interval: rx.config().map_or(0, |c| c.markers.interval()),
            tx_marker_interval,
            received_copied: p.received_copied,
        }
    }

    /// A completion of this QP.
    fn completion(&self, wr_id: u64, status: Status, op: CompletionOp, byte_len: u32) -> Completion {
        Completion { wr_id, status, op, byte_len, qp: self.handle, solicited: false, invalidated: None, imm: None }
    }

    /// Leaves the connected state for good: flushes every posted receive, outstanding Read and
    /// unacknowledged Send or Write with error completions; false if the QP had ended already.
    /// The caller shuts the connection down after releasing the receive side (that sleeps).
    fn stop(&self, rx: &mut RxSide, why: Ended) -> bool {
        if matches!(rx.phase, Phase::Ended(_)) {
            return false;
        }
        rx.phase = Phase::Ended(why);
        if let Some(to) = self.on_ended.as_ref() {
            to.ended(why.event(self.handle));
        }
        // A full CQ loses these flush entries; the QP is in error either way.
        while let Some(wr) = rx.queues.rq.pop() {
            // One its source could not take (`RecvSource`) says so.
            let status = if wr.bad { Status::LocalProtection } else { Status::Flushed };
            let _ = self.recv_cq.push(&self.completion(wr.wr_id, status, CompletionOp::Recv, 0));
        }
        if let Some(source) = &self.recv_source {
            source.take_rest(&mut |wr_id| {
                let _ = self.recv_cq.push(&self.completion(wr_id, Status::Flushed, CompletionOp::Recv, 0));
            });
        }
        self.flush_unacked(&mut rx.queues);
        while let Some(r) = rx.queues.reads.pop() {
            let _ = self.send_cq.push(&self.completion(r.wr_id, Status::Flushed, CompletionOp::RdmaRead, 0));
        }
        while let Some(a) = rx.queues.atomics.pop() {
            let _ = self.send_cq.push(&self.completion(a.wr_id, Status::Flushed, a.opcode, 0));
        }
        true
    }

    /// What [`OnEnded::after_ended`] is told once `stop` ended the QP and its lock is released.
    fn after_ended(&self, why: Ended) {
        if let Some(to) = self.on_ended.as_ref() {
            to.after_ended(why.event(self.handle));
        }
    }

    /// DISCONNECT: ends a connected QP (ENOTCONN otherwise); the peer sees the connection
    /// close.
    pub(crate) fn disconnect(&self) -> Result {
        self.rx.lock().connected()?;
        self.end_and_flush(Ended::by_owner());
        Ok(())
    }

    /// Ends the QP and our sending (the peer sees a FIN after what TCP holds), then flushes what
    /// was still queued for TCP (after what `stop` flushed, which was posted before it). What
    /// the peer still sends is left unread: shutting reading down too would have TCP answer it
    /// with a reset, and a reset throws away what TCP has not yet delivered of ours.
    fn end_and_flush(&self, why: Ended) {
        let stopped = self.stop(&mut self.rx.lock(), why);
        if stopped {
            self.after_ended(why);
            if let Some(s) = self.sock.as_ref() {
                s.shutdown_send();
            }
        }
        self.flush_queued();
    }

    /// Ends the QP because its owner destroys it.
    pub(crate) fn close(&self) {
        self.end_and_flush(Ended::by_owner());
    }
}
