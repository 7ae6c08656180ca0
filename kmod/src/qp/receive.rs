// SPDX-License-Identifier: GPL-2.0

//! The receive side of a QP. When data arrives, the socket's data-ready callback (softirq, or
//! the socket's owner processing its backlog; `on_data_ready`) runs the queued TCP stream
//! through the protocol core straight from the socket buffers (no intermediate copy): payload
//! lands in registered memory as each FPDU is checked, and completions go to the CQ rings in
//! stream order, without a context switch. What must sleep is left to the hook's receive work
//! (`on_receive`): sending a Terminate and ending the QP, the peer's Terminate, a broken
//! connection, a copy of segments too small to hold an FPDU, and, under the socket lock, what
//! TCP holds out of order (rung by the doorbell), which goes to the core too: it places the
//! FPDUs it can find there early and records them, so the in-order pass later checks and
//! delivers them without placing them again (docs/ooo-placement.md). Peer Read Requests are answered in the transmit work. Lock order:
//! the socket, the receive side, the regions, the CQs, the events; all but the socket's are
//! spinlocks taken with bottom halves off.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use super::unacked::Unacked;
use super::wr::{PeerRequest, PendingAtomic, PendingRead, PostedRecv, Sgl};
use super::{Ended, Phase, QueuePair};
use crate::error::{enotconn, eproto, FirstError};
use crate::fifo::Fifo;
use crate::mr::{Domain, Fault};
use crate::proto::atomic;
use crate::proto::mpa::negotiate::Rtr;
use crate::proto::rdmap::Opcode;
use crate::proto::rx::{self, EarlyStats, Event, Receiver, RxError, Sink, Target};
use crate::proto::stream::Pieces;
use crate::proto::terminate::{Cause, Terminate};
use crate::shim::KernelCrc;
use crate::socket::{Gather, InCallback, OnReceive, Wake};
use crate::verbs::{access, Completion, CompletionOp, RecvWr, Status};
use kernel::prelude::*;

/// Octets of out-of-order FPDUs one walk of TCP's out-of-order queue checks and places at most
/// (those placed by earlier walks are passed over for free): a walk follows every segment that
/// arrives out of order, and normally finds one segment's worth of new FPDUs (a GRO batch at
/// most, 64 KiB).
const OOO_WALK_CHECKED: u64 = 256 << 10;

/// What the receive side keeps.
pub(crate) struct RxSide {
    pub(super) phase: Phase,
    /// Set when connected.
    engine: Option<Receiver>,
    /// Stream octets consumed since the first FPDU (the engine's in-order point).
    consumed: u64,
    /// Whether what TCP holds out of order is placed early.
    ooo: bool,
    /// The pieces of one offer of the stream (set when connected).
    gather: Option<KBox<Gather>>,
    pub(super) queues: Queues,
}

/// What a connected receive side needs allocated beforehand: it is set up, and runs, under a
/// spinlock.
pub(crate) struct RxMemory {
    requests: Fifo<PeerRequest>,
    gather: KBox<Gather>,
}

impl RxMemory {
    /// For a connection whose IRD is `ird`.
    pub(crate) fn new(ird: usize) -> Result<RxMemory> {
        Ok(RxMemory { requests: Fifo::new(ird)?, gather: Gather::new()? })
    }
}

/// The state placement and delivery work on.
pub(crate) struct Queues {
    /// MSN of the Send that fills the oldest posted receive.
    next_recv_msn: u32,
    pub(super) rq: Fifo<PostedRecv>,
    pub(super) reads: Fifo<PendingRead>,
    /// Octets of the oldest Read's response placed in order so far: each segment must continue
    /// where the last ended, and the last must end the Read (as siw checks), so that a peer
    /// cannot complete a Read whose buffer it never filled.
    read_placed: u64,
    /// Our Atomic Requests outstanding, in order (they count against the Read queue's depth).
    pub(super) atomics: Fifo<PendingAtomic>,
    /// Both sides agreed to the RFC 7306 extensions.
    pub(super) extensions: bool,
    /// Sends and Writes whose completions wait for TCP's acknowledgement, in order.
    pub(super) unacked: Fifo<Unacked>,
    /// Peer Read Requests the transmit work answers, and the responses of the peer's Atomic
    /// Requests it sends, in order.
    pub(super) requests: Fifo<PeerRequest>,
    /// The peer's Reads we answer at once (the IRD settled by MPA).
    ird: usize,
    /// A responder received its first FPDU: the transmit work sends what waited for it.
    resume_tx: bool,
    /// Our Reads outstanding at once: the Read queue, capped by the settled ORD.
    pub(super) max_reads: usize,
    /// A local failure that ends the stream (sent as a Terminate).
    fatal: FirstError,
    /// The peer's Terminate.
    peer_terminate: Option<Terminate>,
    /// What was placed where (QUERY_QP).
    pub(super) placement: Placement,
    /// TCP's out-of-order packet count at the last walk of its out-of-order queue.
    ooo_seen: u32,
}

/// Where payload was placed: counters QUERY_QP reports (with the engine's [`EarlyStats`]).
#[derive(Clone, Copy, Default)]
pub(crate) struct Placement {
    /// Payload octets placed at the in-order point.
    pub(crate) in_order: u64,
    /// Payload octets placed out of order, ahead of the in-order point.
    pub(crate) out_of_order: u64,
    /// Walks of TCP's out-of-order queue (each after it queued something new).
    pub(crate) ooo_walks: u64,
    /// Octets received through the bounce buffer (segments too small to gather an FPDU).
    pub(crate) received_copied: u64,
}

impl RxSide {
    pub(super) fn new(rq: Fifo<PostedRecv>, reads: Fifo<PendingRead>, atomics: Fifo<PendingAtomic>, unacked: Fifo<Unacked>) -> Result<RxSide> {
        let max_reads = reads.capacity();
        let queues = Queues {
            next_recv_msn: 1,
            rq,
            reads,
            read_placed: 0,
            atomics,
            extensions: false,
            unacked,
            requests: Fifo::new(0)?,
            ird: 0,
            resume_tx: false,
            max_reads,
            fatal: FirstError::default(),
            peer_terminate: None,
            placement: Placement::default(),
            ooo_seen: 0,
        };
        Ok(RxSide { phase: Phase::Init, engine: None, consumed: 0, ooo: false, gather: None, queues })
    }

    /// Starts receiving: the first FPDU is the next stream octet. Out-of-order octets are
    /// placed if `ooo` and FPDUs can be found in them: through markers, or at segment starts
    /// where CRCs confirm them (a sender that aligns FPDUs to segments).
    pub(super) fn connect(&mut self, cfg: rx::Config, mem: RxMemory, ord: usize, ooo: bool) {
        self.ooo = ooo && (cfg.markers.enabled() || cfg.crc);
        self.queues.ird = mem.requests.capacity();
        self.queues.requests = mem.requests;
        self.gather = Some(mem.gather);
        self.queues.max_reads = self.queues.max_reads.min(ord);
        self.queues.extensions = cfg.extensions;
        self.engine = Some(Receiver::new(cfg));
    }

    /// Whether what TCP holds out of order is placed early.
    pub(super) fn places_out_of_order(&self) -> bool {
        self.ooo
    }

    /// How the stream's FPDUs are framed, once connected.
    pub(super) fn config(&self) -> Option<rx::Config> {
        self.engine.as_ref().map(|e| e.config())
    }

    /// What early placement did so far.
    pub(super) fn early_stats(&self) -> EarlyStats {
        self.engine.as_ref().map(|e| e.early_stats()).unwrap_or_default()
    }

    /// Whether work requests may be posted for sending.
    pub(super) fn connected(&self) -> Result {
        match self.phase {
            Phase::Connected => Ok(()),
            _ => Err(enotconn()),
        }
    }

    /// The queues, if a Read or an atomic may be asked of the peer: connected, with fewer of
    /// them outstanding than the Read queue's depth (ENOMEM otherwise; both count against it;
    /// EINVAL if the connection allows none at all, which no wait would change).
    pub(super) fn may_ask(&mut self) -> Result<&mut Queues> {
        self.connected()?;
        let q = &mut self.queues;
        if q.max_reads == 0 {
            return Err(EINVAL);
        }
        if q.reads.len().saturating_add(q.atomics.len()) >= q.max_reads {
            return Err(ENOMEM);
        }
        Ok(q)
    }

    /// Whether a Send or Write may be posted behind `queued` requests not sent yet: connected,
    /// with room to wait for all their acknowledgements (ENOMEM: more requests outstanding than
    /// the send queue holds).
    pub(super) fn ready_to_send(&self, queued: usize) -> Result {
        self.connected()?;
        let q = &self.queues.unacked;
        if q.len().saturating_add(queued) >= q.capacity() {
            return Err(ENOMEM);
        }
        Ok(())
    }
}

fn tagged_cause(f: Fault) -> Cause {
    match f {
        Fault::InvalidStag => Cause::DdpInvalidStag,
        Fault::Bounds => Cause::DdpBaseBounds,
        Fault::Access => Cause::RdmapAccessRights,
        Fault::OtherPd => Cause::DdpStagNotAssociated,
    }
}

/// The protocol core's view of this QP while a pass holds its locks.
struct Placer<'a> {
    qp: &'a QueuePair,
    q: &'a mut Queues,
    mrs: Domain<'a>,
    /// Offering out-of-order octets (what is placed counts as placed early).
    early: bool,
    /// The rights the last tagged segment's check asked of its region, which its placement
    /// asks again (the region is looked up anew).
    tagged_need: u32,
}

impl Placer<'_> {
    /// Takes receives from the QP's source ([`super::RecvSource`]), if it has one, until the
    /// one message `msn` fills is posted (or none is left, or the queue is full).
    fn fill(&mut self, msn: u32) {
        let Some(source) = &self.qp.recv_source else { return };
        let i = msn.wrapping_sub(self.q.next_recv_msn) as usize;
        while self.q.rq.len() <= i && self.q.rq.len() < self.q.rq.capacity() {
            let Some(wr) = source.take(&self.mrs, self.qp.max_sge) else { break };
            // Room: checked above.
            let _ = self.q.rq.push(wr);
        }
    }

    /// The receive message `msn` fills (`fill` took it from the source, if it was there).
    fn recv(&self, msn: u32) -> Option<&PostedRecv> {
        self.q.rq.get(msn.wrapping_sub(self.q.next_recv_msn) as usize)
    }

    /// The oldest posted receive, which the Send or Immediate Data just delivered fills.
    fn take_recv(&mut self) -> Option<PostedRecv> {
        self.fill(self.q.next_recv_msn);
        let wr = self.q.rq.pop()?;
        self.q.next_recv_msn = self.q.next_recv_msn.wrapping_add(1);
        Some(wr)
    }

    /// Completes the Sends and Writes posted before a Read or atomic the peer just answered:
    /// it answered after receiving them, so TCP has their acknowledgement by now, and they
    /// complete first.
    fn complete_acked_before_answer(&mut self) {
        if let Err(e) = self.qp.complete_acked(self.q) {
            self.q.fatal.set(e.into());
        }
    }

    fn complete(&mut self, send_side: bool, c: Completion) {
        let cq = if send_side { &self.qp.send_cq } else { &self.qp.recv_cq };
        if let Err(e) = cq.push(&c) {
            self.q.fatal.set(e.into());
        }
    }
}

impl Sink for Placer<'_> {
    fn check(&mut self, op: Opcode, target: Target, len: u32) -> Result<(), Cause> {
        match target {
            Target::Tagged { stag, to } if op == Opcode::Write => {
                self.tagged_need = access::REMOTE_WRITE;
                self.mrs.check(stag, to, u64::from(len), access::REMOTE_WRITE).map_err(tagged_cause)
            }
            Target::Tagged { stag, to } => {
                self.tagged_need = access::LOCAL_WRITE;
                // A Read Response goes only where our oldest outstanding Read asked for it. Out
                // of order, its FPDU may belong to a later Read into the same buffer, which the
                // in-order pass would then overwrite with the older Read's data: only a lone
                // outstanding Read is placed early.
                if self.early && self.q.reads.len() > 1 {
                    return Err(Cause::RdmapOpcode);
                }
                let read = self.q.reads.get(0).ok_or(Cause::RdmapOpcode)?;
                let s = read.sink;
                if stag != s.lkey {
                    return Err(Cause::DdpInvalidStag);
                }
                let inside = to.checked_sub(s.addr).and_then(|at| at.checked_add(u64::from(len))).is_some_and(|end| end <= u64::from(s.length));
                // In order (a segment placed early is checked again in its turn), each segment
                // continues the response.
                if !inside || !self.early && to.checked_sub(s.addr) != Some(self.q.read_placed) {
                    return Err(Cause::DdpBaseBounds);
                }
                self.mrs.check(stag, to, u64::from(len), access::LOCAL_WRITE).map_err(|_| Cause::RdmapCatastrophic)?;
                if !self.early {
                    // At most the Read's length (checked above).
                    self.q.read_placed = self.q.read_placed.saturating_add(u64::from(len));
                }
                Ok(())
            }
            Target::Untagged { msn, mo } => {
                self.fill(msn);
                let wr = self.recv(msn).ok_or(Cause::DdpNoBuffer)?;
                if wr.bad {
                    // Our consumer's receive, unusable: our failure, not the peer's.
                    return Err(Cause::RdmapCatastrophic);
                }
                wr.sgl.check_place(&self.mrs, mo, len).map_err(|f| match f {
                    Fault::Bounds => Cause::DdpTooLong,
                    _ => Cause::RdmapCatastrophic,
                })
            }
        }
    }

    fn place(&mut self, target: Target, bytes: &[u8]) -> Result<(), Cause> {
        // check() allowed this range, but our side may have invalidated, registered anew or
        // deregistered the region since (each access looks it up again, asking the same
        // rights): then the octets are refused as check() would have refused them.
        match target {
            Target::Tagged { stag, to } => self.mrs.write(stag, to, bytes, self.tagged_need).map_err(|f| match self.tagged_need {
                access::REMOTE_WRITE => tagged_cause(f),
                // Where our own Read's response goes: our fault, not the peer's.
                _ => Cause::RdmapCatastrophic,
            }),
            // check() took the receive from the source already.
            Target::Untagged { msn, mo } => match self.recv(msn) {
                Some(wr) => wr.sgl.scatter(&self.mrs, mo, bytes).map_err(|_| Cause::RdmapCatastrophic),
                None => Err(Cause::DdpNoBuffer),
            },
        }?;
        let p = &mut self.q.placement;
        let counter = if self.early { &mut p.out_of_order } else { &mut p.in_order };
        *counter = counter.wrapping_add(bytes.len() as u64);
        Ok(())
    }

    fn deliver(&mut self, event: Event) {
        match event {
            Event::Send { len, solicited, invalidate, .. } => {
                let Some(wr) = self.take_recv() else { return };
                let mut c = self.qp.completion(wr.wr_id, Status::Success, CompletionOp::Recv, len);
                c.solicited = solicited;
                if let Some(stag) = invalidate {
                    if self.mrs.invalidate(stag).is_ok() {
                        c.invalidated = Some(stag);
                    } else {
                        // The receive completes in error, and nothing after this Send is
                        // placed or delivered (failed() below stops the core).
                        c.status = Status::Fatal;
                        self.q.fatal.set(Terminate::new(Cause::RdmapCannotInvalidate));
                    }
                }
                self.complete(false, c);
            }
            Event::ReadResponse { .. } => {
                self.complete_acked_before_answer();
                if let Some(r) = self.q.reads.pop() {
                    self.qp.send_cq.room_freed();
                    let whole = core::mem::take(&mut self.q.read_placed) == u64::from(r.sink.length);
                    if !whole {
                        // The last segment came before the response filled the buffer.
                        self.q.fatal.set(Terminate::new(Cause::DdpBaseBounds));
                        self.complete(true, self.qp.completion(r.wr_id, Status::Fatal, CompletionOp::RdmaRead, 0));
                        return;
                    }
                    // A Read with Invalidate whose STag went meanwhile (a peer's Send with
                    // Invalidate) completes in error, and reports it even unsignaled.
                    let invalidated = r.invalidate == 0 || self.mrs.invalidate(r.invalidate).is_ok();
                    if r.signaled || !invalidated {
                        let mut c = self.qp.completion(r.wr_id, Status::Success, CompletionOp::RdmaRead, r.sink.length);
                        if !invalidated {
                            (c.status, c.byte_len) = (Status::LocalProtection, 0);
                        }
                        self.complete(true, c);
                    }
                }
            }
            Event::ReadRequest(rr) => {
                if let Err(t) = super::send::check_read_request(&rr, &self.mrs) {
                    self.q.fatal.set(t);
                } else if self.q.requests.push(PeerRequest::Read(rr)).is_err() {
                    // More than the IRD we offered outstanding.
                    self.q.fatal.set(Terminate::new(Cause::RdmapStreamCatastrophic).with_read_request(rr.emit()));
                }
            }
            Event::Immediate { data, solicited, .. } => {
                let Some(wr) = self.take_recv() else { return };
                let mut c = self.qp.completion(wr.wr_id, Status::Success, CompletionOp::Recv, 0);
                (c.solicited, c.imm) = (solicited, Some(data));
                self.complete(false, c);
            }
            Event::AtomicRequest(r) => {
                // Carried out now, in stream order (everything before it is placed); the
                // response waits its turn behind the Reads asked before it. One past the IRD
                // we offered is refused before it changes anything.
                if self.q.requests.len() >= self.q.requests.capacity() {
                    self.q.fatal.set(Terminate::new(Cause::RdmapStreamCatastrophic));
                    return;
                }
                match self.mrs.atomic(r.stag, r.to, access::REMOTE_ATOMIC, |v| r.apply(v)) {
                    Ok(original) => {
                        if self.q.requests.push(PeerRequest::Atomic(atomic::Response { id: r.id, original })).is_err() {
                            self.q.fatal.set(Terminate::new(Cause::RdmapStreamCatastrophic));
                        }
                    }
                    Err(f) => self.q.fatal.set(Terminate::new(super::send::remote_cause(f))),
                }
            }
            Event::AtomicResponse(resp) => {
                self.complete_acked_before_answer();
                let answered = self.q.atomics.pop();
                if answered.is_some() {
                    self.qp.send_cq.room_freed();
                }
                match answered {
                    Some(a) if a.id == resp.id => {
                        let s = a.sink;
                        if self.mrs.write(s.lkey, s.addr, &resp.original.to_ne_bytes(), access::LOCAL_WRITE).is_err() {
                            // Our own region went away meanwhile.
                            self.q.fatal.set(Terminate::new(Cause::RdmapCatastrophic));
                        } else if a.signaled {
                            self.complete(true, self.qp.completion(a.wr_id, Status::Success, a.opcode, 8));
                        }
                    }
                    // An answer to nothing we asked.
                    _ => self.q.fatal.set(Terminate::new(Cause::RdmapOpcode)),
                }
            }
            Event::Terminate(t) => self.q.peer_terminate = Some(t),
            Event::ReadyToReceive(rtr) => {
                // A Send RTR took the Send queue's first MSN but fills no receive.
                if rtr == Rtr::Send {
                    self.q.next_recv_msn = self.q.next_recv_msn.wrapping_add(1);
                }
            }
            // Writes complete nothing at the data sink.
            Event::Write { .. } => {}
        }
    }

    /// A delivery failed the stream (an invalidation refused, a Read Request its region does not
    /// allow or beyond the IRD, a CQ overrun): the core places and delivers nothing after it.
    fn failed(&self) -> bool {
        !self.q.fatal.is_clear()
    }
}

impl OnReceive for QueuePair {
    /// The hook's transmit work: what the socket could not take before (outbound.rs), then
    /// Read Responses (send.rs; copied ones wait for the first to leave), completions TCP
    /// acknowledged (unacked.rs).
    fn on_transmit(&self) {
        self.resume();
        self.serve_reads();
        let mut rx = self.rx.lock();
        if rx.phase == Phase::Connected {
            if let Err(e) = self.complete_acked(&mut rx.queues) {
                drop(rx);
                self.fail(e.into());
            }
        }
    }

    /// Completes what TCP acknowledged right in the callback (a sleeping consumer wakes without
    /// a work item's context switch first); an overrun CQ is the receive work's to fail.
    fn on_acked(&self) -> Wake {
        let mut rx = self.rx.lock();
        if rx.phase != Phase::Connected {
            return Wake::default();
        }
        let overrun = self.complete_acked(&mut rx.queues).map_err(|e| rx.queues.fatal.set(e.into())).is_err();
        Wake { receive: overrun, transmit: false }
    }

    fn on_data_ready(&self, in_callback: &InCallback) -> Wake {
        let Some(sock) = self.sock.as_ref() else { return Wake::default() };
        // A stream arriving in bulk is received by the work item, which batches.
        if sock.unread() > crate::rx_callback_max() {
            return Wake { receive: true, transmit: false };
        }
        let mut guard = self.rx.lock();
        let rx = &mut *guard;
        if rx.phase != Phase::Connected {
            return Wake::default();
        }
        let RxSide { engine: Some(engine), consumed, queues, ooo, gather: Some(gather), .. } = rx else { return Wake::default() };
        let mut wants_copy = false;
        if queues.fatal.is_clear() && queues.peer_terminate.is_none() {
            match sock.read_in_callback(in_callback, gather, |parts, last_chance| self.offer_in_order(engine, consumed, queues, parts, last_chance)) {
                Ok(read) => wants_copy = read.wants_copy,
                // Looked at again by the work.
                Err(_) => wants_copy = true,
            }
        }
        if let Err(e) = self.complete_acked(queues) {
            queues.fatal.set(e.into());
        }
        let ooo_moved = *ooo && sock.ooo_packets() != queues.ooo_seen;
        Wake {
            receive: wants_copy || ooo_moved || !queues.fatal.is_clear() || queues.peer_terminate.is_some() || !sock.established(),
            transmit: queues.requests.len() > 0 || core::mem::take(&mut queues.resume_tx),
        }
    }

    fn on_receive(&self) {
        let Some(sock) = self.sock.as_ref() else { return };
        // The socket first: the lock order, and taking it may sleep.
        let locked = sock.lock();
        let mut guard = self.rx.lock();
        let rx = &mut *guard;
        if rx.phase != Phase::Connected {
            return;
        }
        let RxSide { engine: Some(engine), consumed, queues, ooo: place_ooo, gather: Some(gather), .. } = rx else { return };
        if queues.fatal.is_clear() && queues.peer_terminate.is_none() {
            match locked.read(gather, |parts, last_chance| self.offer_in_order(engine, consumed, queues, parts, last_chance)) {
                Ok(read) => queues.placement.received_copied = queues.placement.received_copied.wrapping_add(read.copied as u64),
                // Urgent data: TCP delivers nothing past it to us, the stream is lost for MPA.
                Err(e) if e == eproto() => queues.fatal.set(Terminate::new(Cause::MpaStreamLost)),
                // Any other (the socket closed under us) shows as !established() below.
                Err(_) => {}
            }
        }
        let ooo = sock.ooo_packets();
        if *place_ooo && queues.fatal.is_clear() && ooo != queues.ooo_seen {
            queues.ooo_seen = ooo;
            queues.placement.ooo_walks = queues.placement.ooo_walks.wrapping_add(1);
            engine.limit_ahead(OOO_WALK_CHECKED);
            // Octets at `ahead` from the first unread one are at stream offset consumed + ahead.
            let _ = locked.out_of_order(gather, |ahead, parts| {
                let data = Pieces::new(consumed.wrapping_add(u64::from(ahead)), parts);
                let mut sink = Placer { qp: self, q: queues, mrs: self.regions(), early: true, tagged_need: 0 };
                // Out-of-order octets are only placed or left: errors wait for the in-order pass.
                let _ = engine.receive::<KernelCrc, _>(&data, &mut sink);
            });
        }
        if let Err(e) = self.complete_acked(queues) {
            queues.fatal.set(e.into());
        }
        let fatal = queues.fatal.take();
        let peer = queues.peer_terminate.take();
        let transmit = queues.requests.len() > 0 || core::mem::take(&mut queues.resume_tx);
        let (walk_ooo, ooo_seen) = (*place_ooo && fatal.is_none(), queues.ooo_seen);
        // Whether the stream ended, decided under the socket lock, after the read: TCP cannot
        // take a FIN or reset meanwhile (they wait in its backlog), so an end seen here came
        // after every octet just read. Looked at once the lock is gone, a FIN the backlog
        // brought would end the QP with the octets before it still queued, unread.
        let lost = !sock.established();
        drop(guard);
        let hold = crate::receive_hold();
        if !hold.is_zero() {
            kernel::time::delay::fsleep(hold);
        }
        drop(locked);
        // Releasing the lock had TCP process what arrived meanwhile (its backlog), unseen by the
        // doorbell: look again if that queued anything out of order.
        if walk_ooo && sock.ooo_packets() != ooo_seen {
            sock.kick_receive();
        }
        if transmit {
            // Read Requests are answered, and what waited for the RTR sent, by the transmit
            // work: a full send buffer must not stop receiving.
            sock.kick_transmit();
        }
        if let Some(t) = fatal {
            self.fail(t);
            return;
        }
        if let Some(t) = peer {
            self.end_and_flush(Ended::of(&t, false));
        } else if lost {
            self.end_and_flush(Ended::lost());
        }
    }
}

impl QueuePair {
    /// Offers the stream octets `parts` (from the engine's in-order point on) to the core, which
    /// places and delivers what is whole; returns how many it consumed, or -1 to stop (the
    /// stream failed: recorded in `queues.fatal`, nothing after it is placed). On its
    /// `last_chance` (more is queued than the longest FPDU, and still none is whole: the gather
    /// could not offer it all) the stream fails too.
    fn offer_in_order(&self, engine: &mut Receiver, consumed: &mut u64, queues: &mut Queues, parts: &[&[u8]], last_chance: bool) -> isize {
        let data = Pieces::new(*consumed, parts);
        let mut sink = Placer { qp: self, q: queues, mrs: self.regions(), early: false, tagged_need: 0 };
        match engine.receive::<KernelCrc, _>(&data, &mut sink) {
            Ok(0) if last_chance => {
                sink.q.fatal.set(Terminate::new(Cause::RdmapCatastrophic));
                -1
            }
            Ok(n) => {
                if *consumed == 0 && n > 0 && sink.q.fatal.is_clear() && sink.q.peer_terminate.is_none() && self.peer_spoke() {
                    // The first FPDU, valid and carried out: a responder's held sends go now
                    // (not after a Terminate, the peer's or ours: they are flushed then).
                    sink.q.resume_tx = true;
                }
                // The stream offset: 2^64 octets are never reached.
                *consumed = consumed.wrapping_add(n);
                n as isize
            }
            Err(RxError::Terminate(t)) => {
                sink.q.fatal.set(t);
                -1
            }
            Err(RxError::Closed) => -1,
        }
    }
}

impl QueuePair {
    /// POST_RECV: a buffer for the peer's next Send, also before the QP is connected (ENOMEM
    /// when the receive queue is full).
    pub(crate) fn post_recv(&self, req: &RecvWr) -> Result {
        if req.num_sge > self.max_sge {
            return Err(EINVAL);
        }
        let sgl = Sgl::new(&req.sge, req.num_sge, &self.regions(), access::LOCAL_WRITE)?;
        let mut rx = self.rx.lock();
        if matches!(rx.phase, Phase::Ended(_)) {
            return Err(enotconn());
        }
        rx.queues.rq.push(PostedRecv { wr_id: req.wr_id, sgl, bad: false })
    }
}
