// SPDX-License-Identifier: GPL-2.0

//! Posting on the send side of a QP: work requests are checked, their payload turned into page
//! fragments (`payload.rs`: registered pages by reference, small payloads copied) and queued
//! for TCP (`outbound.rs`). Sends and Writes complete once TCP took them whole, or once
//! acknowledged when sent by reference (`unacked.rs`); Reads when the receive side has placed
//! the response. The peer's Read Requests, queued by the receive side, are answered here too,
//! by the hook's transmit work; a local failure sends a Terminate and ends the QP.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use super::outbound::Outbound;
use super::payload::{OutPayload, Sources};
use super::unacked::Unacked;
use super::wr::{PeerRequest, PendingAtomic, PendingRead, Sgl};
use super::{Ended, Phase, QueuePair};
use crate::error::{enotconn, eopnotsupp};
use crate::mr::{Domain, Fault};
use crate::proto::atomic;
use crate::proto::rdmap::ReadRequest;
use crate::proto::terminate::{Cause, Terminate};
use crate::proto::tx::Message;
use crate::verbs::{access, CompletionOp, Inline, SendOp, SendWr, Sge, MAX_MESSAGE};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;

/// Octets of copied Read Responses queued for TCP at most (a response longer than this is
/// copied alone).
const COPIED_RESPONSES: u64 = 4 << 20;

/// Whether the peer's Read Request may be served from the regions as they are; otherwise the
/// Terminate that refuses it. Checked as it arrives (so nothing after a bad one in the stream
/// is placed) and again when it is served (its region may have gone meanwhile). A zero-length
/// Read reads nothing, so its STag is not looked at (as siw does; peers use them as fences).
pub(super) fn check_read_request(rr: &ReadRequest, mrs: &Domain<'_>) -> Result<(), Terminate> {
    let refuse = |c: Cause| Terminate::new(c).with_read_request(rr.emit());
    if u64::from(rr.size) > MAX_MESSAGE {
        return Err(refuse(Cause::RdmapCatastrophic));
    }
    // Our response goes to the peer's sink: offsets past the end of its address space are no
    // place (RFC 5040's TO wrap).
    if rr.sink_to.checked_add(u64::from(rr.size)).is_none() {
        return Err(refuse(Cause::RdmapToWrap));
    }
    if rr.size == 0 {
        return Ok(());
    }
    mrs.check(rr.src_stag, rr.src_to, u64::from(rr.size), access::REMOTE_READ).map_err(|f| refuse(remote_cause(f)))
}

/// The RDMAP Terminate cause for a peer's request our regions refuse (a Read, an atomic).
pub(super) fn remote_cause(f: Fault) -> Cause {
    match f {
        Fault::InvalidStag => Cause::RdmapInvalidStag,
        Fault::Bounds => Cause::RdmapBaseBounds,
        Fault::Access => Cause::RdmapAccessRights,
        Fault::OtherPd => Cause::RdmapStagNotAssociated,
    }
}

/// Identifiers of Atomic Requests (any value will do: responses come in order, and each must
/// echo the oldest outstanding one's).
static ATOMIC_IDS: AtomicU32 = AtomicU32::new(0);

impl QueuePair {
    /// Posts one send work request.
    pub(crate) fn post_send(&self, req: &SendWr) -> Result {
        self.check_shape(req)?;
        let SendWr { inline, signaled, solicited, .. } = *req;
        let extension = matches!(req.op, SendOp::Write { imm: Some(_), .. } | SendOp::Immediate { .. } | SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. });
        if extension && !self.rx.lock().queues.extensions {
            // The peer did not agree to RFC 7306: it must never see these messages.
            return Err(eopnotsupp());
        }
        match req.op {
            SendOp::Read { rkey, remote_addr, invalidate } => return self.post_read(req, rkey, remote_addr, invalidate),
            SendOp::FetchAdd { rkey, remote_addr, add } => {
                return self.post_atomic(req, |id| atomic::Request::fetch_add(id, rkey, remote_addr, add), CompletionOp::FetchAdd)
            }
            SendOp::CompareSwap { rkey, remote_addr, compare, swap } => {
                let r = |id| atomic::Request::compare_swap(id, rkey, remote_addr, compare, swap);
                return self.post_atomic(req, r, CompletionOp::CompareSwap);
            }
            SendOp::LocalInvalidate { stag } => {
                return self.post_local(req, CompletionOp::LocalInvalidate, |mrs| mrs.invalidate_local(stag).map_err(|_| EINVAL))
            }
            SendOp::FastRegister { stag, addr, length, rights } => {
                return self.post_local(req, CompletionOp::FastRegister, |mrs| mrs.fast_register(stag, addr, length, rights))
            }
            _ => {}
        }
        let (msg, imm) = match req.op {
            SendOp::Send { invalidate } => (Message::Send { solicited, invalidate }, None),
            SendOp::Write { rkey, remote_addr, imm: None } if !solicited => (Message::Write { stag: rkey, to: remote_addr }, None),
            SendOp::Write { rkey, remote_addr, imm: Some(data) } => (Message::Write { stag: rkey, to: remote_addr }, Some(data)),
            // Immediate Data alone carries no payload of the caller's.
            SendOp::Immediate { imm } if req.num_sge == 0 && inline == Inline::No => (Message::Immediate { solicited, data: imm }, None),
            _ => return Err(EINVAL),
        };
        // A Write with Immediate completes when TCP took its Immediate Data, so its payload
        // is copied: one sent from the application's pages may complete only on acknowledgement.
        let with_imm = imm.is_some();
        let payload = if inline == Inline::User {
            // Copied from the caller's memory now: no region involved.
            let sge = &req.sge[..req.num_sge as usize];
            if sge.iter().map(|s| u64::from(s.length)).sum::<u64>() > u64::from(self.max_inline) {
                return Err(EINVAL);
            }
            OutPayload::from_user(sge)?
        } else if let Inline::Kernel(bytes) = &inline {
            OutPayload::from_bytes(bytes.as_slice())?
        } else {
            // The pieces are checked and their pages held, then the payload is built from them
            // (that allocates).
            let mrs = self.regions();
            let sgl = Sgl::new(&req.sge, req.num_sge, &mrs, 0)?;
            let sources = Sources::resolve(sgl.entries(), &mrs, 0)?;
            OutPayload::gather(&sources, &mrs, with_imm || self.copy_send.load(Ordering::Relaxed))?
        };
        // The peer's offsets must not wrap past the end of its address space: refused here, not
        // found when the message is framed (which would end the stream).
        if let Message::Write { to, .. } = msg {
            to.checked_add(payload.len()).ok_or(EINVAL)?;
        }
        let op = if matches!(msg, Message::Write { .. }) { CompletionOp::RdmaWrite } else { CompletionOp::Send };
        let wr = Unacked { wr_id: req.wr_id, end_seq: 0, opcode: op, len: payload.len() as u32, signaled };
        // Room to wait for the acknowledgement, counting the requests queued before it.
        let ready = |side: &super::outbound::TxSide| self.rx.lock().ready_to_send(side.queued_wrs());
        if let Some(data) = imm {
            let imm = Outbound::bare(Message::Immediate { solicited, data }, Some(wr));
            return self.enqueue([Outbound { msg: Some(msg), payload, wr: None }, imm], ready);
        }
        self.enqueue([Outbound { msg: Some(msg), payload, wr: Some(wr) }], ready)
    }

    /// Whether `req` is a request this QP takes, whatever the regions it names (EINVAL if
    /// not): no more entries than the QP has, and no flag its kind cannot have. Takes no lock:
    /// a poster that hands requests over later (the RDMA core's door) checks this at the post.
    pub(crate) fn check_shape(&self, req: &SendWr) -> Result {
        let SendWr { solicited, .. } = *req;
        let inline = req.inline != Inline::No;
        let bad = req.num_sge > self.max_sge
            || match req.op {
                SendOp::Read { .. } | SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. } => solicited || inline,
                SendOp::LocalInvalidate { .. } | SendOp::FastRegister { .. } => solicited || inline || req.num_sge != 0,
                _ => false,
            };
        if bad {
            Err(EINVAL)
        } else {
            Ok(())
        }
    }

    /// Where the answer to a Read or an atomic lands: the request's one local entry, which
    /// must allow LOCAL_WRITE.
    fn answer_sink(&self, req: &SendWr) -> Result<Sge> {
        Sgl::new(&req.sge, req.num_sge, &self.regions(), access::LOCAL_WRITE)?.single().ok_or(EINVAL)
    }

    /// An atomic operation (RFC 7306) on the peer's 64-bit value at an 8-aligned address; the
    /// value before lands in the one local entry of 8 octets (LOCAL_WRITE). Recorded as
    /// outstanding when queued, like a Read, and counted against the same depth.
    /// `request` makes the request from its identifier.
    fn post_atomic(&self, req: &SendWr, request: impl FnOnce(u32) -> atomic::Request, opcode: CompletionOp) -> Result {
        let sink = self.answer_sink(req)?;
        let id = ATOMIC_IDS.fetch_add(1, Ordering::Relaxed);
        let r = request(id);
        let signaled = req.signaled;
        if sink.length != atomic::OPERAND_LEN || !r.aligned() {
            return Err(EINVAL);
        }
        let ob = Outbound::bare(Message::AtomicRequest(r), None);
        self.enqueue([ob], |_| self.rx.lock().may_ask()?.atomics.push(PendingAtomic { wr_id: req.wr_id, signaled, opcode, id, sink }))
    }

    /// An RDMA Read: the sink is one local entry with LOCAL_WRITE. The request is recorded as
    /// outstanding when queued, and the queue keeps the order, so responses match the list.
    /// With `invalidate` (a valid STag of ours, not 0), the Read invalidates it once its data
    /// is in place.
    fn post_read(&self, req: &SendWr, rkey: u32, remote_addr: u64, invalidate: u32) -> Result {
        let sink = self.answer_sink(req)?;
        remote_addr.checked_add(u64::from(sink.length)).ok_or(EINVAL)?;
        if invalidate != 0 {
            self.regions().check_valid(invalidate).map_err(|_| EINVAL)?;
        }
        let rr = ReadRequest { sink_stag: sink.lkey, sink_to: sink.addr, size: sink.length, src_stag: rkey, src_to: remote_addr };
        let ob = Outbound::bare(Message::ReadRequest(rr), None);
        let signaled = req.signaled;
        self.enqueue([ob], |_| self.rx.lock().may_ask()?.reads.push(PendingRead { wr_id: req.wr_id, signaled, sink, invalidate }))
    }

    /// A Local Invalidate or a Fast Register: done on our regions now (EINVAL if the region
    /// refuses), completed behind the Sends and Writes posted before it (a queue entry without a
    /// message; Reads and atomics complete when answered, fenced by nothing). It is done
    /// only once the queue has taken it, so a refused post changes nothing.
    /// `apply` does it on the QP's domain.
    fn post_local(&self, req: &SendWr, op: CompletionOp, apply: impl FnOnce(&Domain<'_>) -> Result) -> Result {
        let wr = Unacked { wr_id: req.wr_id, end_seq: 0, opcode: op, len: 0, signaled: req.signaled };
        let ob = Outbound { msg: None, payload: OutPayload::empty(), wr: Some(wr) };
        self.enqueue([ob], |side| {
            self.rx.lock().ready_to_send(side.queued_wrs())?;
            apply(&self.regions())
        })
    }

    /// Answers the peer's Read Requests in order, from our registered memory, without waking
    /// anyone, and sends the responses of its atomic operations in their turn. The first Read
    /// that may not be served ends the QP with a Terminate.
    ///
    /// With CRCs, a response is never sent from the registered pages: our application may
    /// write them while the peer Reads (verbs allow it; the peer gets some version of the
    /// data), and were TCP to send and retransmit from them after the CRC was computed, the CRC
    /// would not match what leaves and the peer would end the connection. FPDUs copied whole
    /// (`outbound.rs`) are safe by construction; otherwise the response is copied first. A
    /// Send's or a Write's pages are the application's to leave alone until the work request
    /// completes (on TCP's acknowledgement, `unacked.rs`); a Read's source has no such
    /// promise. Copies
    /// wait while [`COPIED_RESPONSES`] octets of them are queued for TCP, so their memory is
    /// bounded whatever the IRD; the transmit work goes on once TCP takes them.
    pub(super) fn serve_reads(&self) {
        let copy = self.copy_send.load(Ordering::Relaxed) || self.tx.lock().as_ref().is_some_and(|side| side.config().crc && !side.copies_framed());
        loop {
            // Before the receive side: the send side comes first in the lock order. Counted
            // whether or not CRCs make us copy: responses from fast-registered pages are copies
            // too.
            let queued = self.tx.lock().as_ref().map_or(0, |side| side.copied_responses());
            let rr = {
                let mut rx = self.rx.lock();
                if rx.phase != Phase::Connected {
                    return;
                }
                match rx.queues.requests.get(0) {
                    None => return,
                    Some(PeerRequest::Read(rr)) if queued > 0 && queued.saturating_add(u64::from(rr.size)) > COPIED_RESPONSES => return,
                    Some(_) => {}
                }
                match rx.queues.requests.pop() {
                    Some(PeerRequest::Read(rr)) => rr,
                    Some(PeerRequest::Atomic(resp)) => {
                        drop(rx);
                        let ob = Outbound::bare(Message::AtomicResponse(resp), None);
                        if let Err(e) = self.enqueue([ob], |_| self.still_connected()) {
                            return self.refused(e, Terminate::new(Cause::RdmapStreamCatastrophic));
                        }
                        continue;
                    }
                    None => return,
                }
            };
            let source = Sge { addr: rr.src_to, length: rr.size, lkey: rr.src_stag };
            let catastrophic = || Terminate::new(Cause::RdmapCatastrophic).with_read_request(rr.emit());
            let mrs = self.regions();
            let sources = check_read_request(&rr, &mrs).and_then(|()| Sources::resolve(&[source], &mrs, access::REMOTE_READ).map_err(|_| catastrophic()));
            // A peer may invalidate the region it reads (a Send with Invalidate) before TCP has
            // its acknowledgement, and the consumer then frees fast-registered pages: a Read
            // Response from them is copied, never sent (or retransmitted) from them by reference.
            let payload = sources.and_then(|s| OutPayload::gather(&s, &mrs, copy || s.names_listed()).map_err(|_| catastrophic()));
            match payload {
                Ok(payload) => {
                    let msg = Message::ReadResponse { stag: rr.sink_stag, to: rr.sink_to };
                    if let Err(e) = self.enqueue([Outbound { msg: Some(msg), payload, wr: None }], |_| self.still_connected()) {
                        return self.refused(e, Terminate::new(Cause::RdmapStreamCatastrophic).with_read_request(rr.emit()));
                    }
                }
                Err(t) => return self.fail(t),
            }
        }
    }

    /// Whether a response may still be queued: not once the QP ended (its queue was flushed,
    /// and nothing would send or drop what came after, holding its pages). Under the send
    /// side's lock, which comes before the receive side's.
    fn still_connected(&self) -> Result {
        if self.rx.lock().phase == Phase::Connected {
            Ok(())
        } else {
            Err(enotconn())
        }
    }

    /// A response the send queue refused: ENOSPC when the responses waiting for TCP are as many
    /// as the IRD, so the peer has more requests outstanding than it may (it asked on without
    /// reading the answers): the stream ends with `t`. Otherwise the QP has ended meanwhile.
    fn refused(&self, e: Error, t: Terminate) {
        if e == ENOSPC {
            self.fail(t);
        }
    }

    /// A local failure: tell the peer (if the socket takes the Terminate now; it may be gone
    /// already), end the QP.
    pub(super) fn fail(&self, t: Terminate) {
        // Why is recorded first: the peer may close as soon as it reads the Terminate, and that
        // must not pass for the reason.
        let why = Ended::of(&t, true);
        if !self.stop(&mut self.rx.lock(), why) {
            return;
        }
        self.after_ended(why);
        if let Ok(sock) = self.socket() {
            let mut tx = self.tx.lock();
            if let Some(side) = &mut *tx {
                let _ = side.terminate(sock, t);
            }
            // Under the transmit lock, which the transmit work takes to send: nothing queued
            // may follow the Terminate.
            sock.shutdown_send();
        }
        self.flush_queued();
    }
}
