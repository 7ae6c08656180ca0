// SPDX-License-Identifier: GPL-2.0

//! The send side of a QP: work requests are checked, their payload turned into page fragments
//! (`payload.rs`: registered pages by reference, small payloads copied), framed by the protocol
//! core (markers, kernel crc32c) and queued to TCP in the caller's context. Sends and Writes
//! complete when queued, or once acknowledged when sent by reference (`unacked.rs`); Reads
//! when the receive side has placed the response. The peer's Read Requests, queued by the
//! receive side, are answered here too, by the hook's transmit work.

use super::payload::{self, OutPayload};
use super::unacked::Unacked;
use super::wr::{PendingRead, Sgl};
use super::{enotconn, Ended, Phase, QueuePair};
use crate::abi::{access, opcode, send_flags, wc_opcode, PostSend, Sge, MAX_MESSAGE};
use crate::frags::{Arena, PageFrag};
use crate::mr::Fault;
use crate::rdmap::ReadRequest;
use crate::shim::KernelCrc;
use crate::socket::TcpSocket;
use crate::terminate::{Cause, Terminate};
use crate::tx::{Fpdu, Message, Piece, Transmitter};
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// What the send side keeps.
pub(crate) struct TxSide {
    tx: Transmitter,
    fpdu: KBox<Fpdu>,
    batch: Batch,
    /// Payload octets sent (zero copy, copied).
    sent: (u64, u64),
}

impl TxSide {
    pub(super) fn new(tx: Transmitter) -> Result<TxSide> {
        let batch = Batch { ctl: Arena::new(), frags: KVec::with_capacity(BATCH_FRAGS, GFP_KERNEL)? };
        Ok(TxSide { tx, fpdu: KBox::new(Fpdu::default(), GFP_KERNEL)?, batch, sent: (0, 0) })
    }

    /// Payload octets sent: (zero copy, copied).
    pub(super) fn sent(&self) -> (u64, u64) {
        self.sent
    }
}

/// Fragments handed to one sendmsg, about (the kernel takes up to UIO_MAXIOV = 1024).
const BATCH_FRAGS: usize = 256;

/// The fragments of several FPDUs, sent with one sendmsg: per-FPDU control octets (headers,
/// markers, pad, CRC) are copied into fresh pages, because the core reuses its FPDU buffer;
/// payload is referenced as the message's fragments.
struct Batch {
    ctl: Arena,
    frags: KVec<PageFrag>,
}

impl Batch {
    /// Adds the framed FPDU's pieces.
    fn add(&mut self, fpdu: &Fpdu, payload: &OutPayload) -> Result {
        for p in fpdu.pieces() {
            match *p {
                Piece::Ctl { off, len } => {
                    let frag = self.ctl.push(fpdu.ctl(off, len))?;
                    payload::push(&mut self.frags, frag)?;
                }
                Piece::Payload { off, len } => payload.frags(off, len as u64, |f| payload::push(&mut self.frags, f))?,
            }
        }
        Ok(())
    }

    /// Queues everything added, in order, and empties the batch. Returns the sequence number
    /// just past it.
    fn flush(&mut self, sock: &TcpSocket) -> Result<u32> {
        let sent = sock.send_frags(&mut self.frags);
        self.frags.clear();
        self.ctl.clear();
        sent
    }
}

impl QueuePair {
    /// Frames `msg` with `payload` and queues every FPDU to TCP (blocking while the socket
    /// buffer is full). Returns the sequence number just past the message.
    pub(super) fn send_message(&self, msg: Message, payload: &OutPayload) -> Result<u32> {
        let mut guard = self.tx.lock();
        let Some(side) = &mut *guard else { return Err(enotconn()) };
        let end_seq = send_locked(self.socket()?, side, msg, payload)?;
        let counter = if payload.zero_copy() { &mut side.sent.0 } else { &mut side.sent.1 };
        *counter += payload.len();
        Ok(end_seq)
    }

    /// POST_SEND: one work request.
    pub(crate) fn post_send(&self, req: &PostSend) -> Result {
        if req.flags & !send_flags::ALL != 0 {
            return Err(EINVAL);
        }
        let signaled = req.flags & send_flags::SIGNALED != 0;
        let solicited = req.flags & send_flags::SOLICITED != 0;
        if req.opcode == opcode::READ {
            if solicited {
                return Err(EINVAL);
            }
            return self.post_read(req, signaled);
        }
        let msg = match req.opcode {
            opcode::SEND => Message::Send { solicited, invalidate: None },
            opcode::SEND_WITH_INVALIDATE => Message::Send { solicited, invalidate: Some(req.invalidate) },
            opcode::WRITE if !solicited => Message::Write { stag: req.rkey, to: req.remote_addr },
            _ => return Err(EINVAL),
        };
        let payload = {
            let mut table = self.mrs.lock();
            let mrs = table.domain(self.pd);
            let sgl = Sgl::new(&req.sge, req.num_sge, &mrs, 0)?;
            OutPayload::gather(sgl.entries(), &mrs, 0, self.copy_send.load(Ordering::Relaxed))?
        };
        self.rx.lock().ready_to_send()?;
        let sent = self.send_message(msg, &payload);
        let end_seq = match sent {
            Ok(end_seq) => end_seq,
            Err(e) => {
                // Part of the message may be on the wire: the stream cannot go on.
                self.fail(Terminate::new(Cause::MpaStreamLost));
                return Err(e);
            }
        };
        let op = if req.opcode == opcode::WRITE { wc_opcode::RDMA_WRITE } else { wc_opcode::SEND };
        self.sent(Unacked { wr_id: req.wr_id, end_seq, opcode: op, len: payload.len() as u32, signaled }, payload.zero_copy());
        Ok(())
    }

    /// An RDMA Read: the sink is one local entry with LOCAL_WRITE. The request is queued to TCP
    /// in the order it was recorded, so responses match the outstanding list.
    fn post_read(&self, req: &PostSend, signaled: bool) -> Result {
        let sink = Sgl::new(&req.sge, req.num_sge, &self.mrs.lock().domain(self.pd), access::LOCAL_WRITE)?.single().ok_or(EINVAL)?;
        let mut tx = self.tx.lock();
        let Some(side) = &mut *tx else { return Err(enotconn()) };
        {
            let mut rx = self.rx.lock();
            rx.connected()?;
            if rx.queues.reads.len() >= rx.queues.max_reads {
                return Err(ENOMEM);
            }
            rx.queues.reads.push(PendingRead { wr_id: req.wr_id, signaled, sink })?;
        }
        let rr = ReadRequest { sink_stag: sink.lkey, sink_to: sink.addr, size: sink.length, src_stag: req.rkey, src_to: req.remote_addr };
        let sent = send_locked(self.socket()?, side, Message::ReadRequest(rr), &OutPayload::empty());
        drop(tx);
        if sent.is_err() {
            self.fail(Terminate::new(Cause::MpaStreamLost));
        }
        sent.map(drop)
    }

    /// Answers the peer's Read Requests in order, from our registered memory, without waking
    /// anyone. The first one that may not be served ends the QP with a Terminate.
    pub(super) fn serve_reads(&self) {
        loop {
            let rr = {
                let mut rx = self.rx.lock();
                if rx.phase != Phase::Connected {
                    return;
                }
                match rx.queues.requests.pop() {
                    Some(rr) => rr,
                    None => return,
                }
            };
            let refuse = |c: Cause| Terminate::new(c).with_read_request(rr.emit());
            let source = Sge { addr: rr.src_to, length: rr.size, lkey: rr.src_stag };
            let payload = if rr.size as u64 > MAX_MESSAGE {
                Err(refuse(Cause::RdmapCatastrophic))
            } else {
                let mut table = self.mrs.lock();
                let mrs = table.domain(self.pd);
                match mrs.check(rr.src_stag, rr.src_to, rr.size as u64, access::REMOTE_READ) {
                    Err(f) => Err(refuse(match f {
                        Fault::InvalidStag => Cause::RdmapInvalidStag,
                        Fault::Bounds => Cause::RdmapBaseBounds,
                        Fault::Access => Cause::RdmapAccessRights,
                        Fault::OtherPd => Cause::RdmapStagNotAssociated,
                    })),
                    Ok(()) => OutPayload::gather(&[source], &mrs, access::REMOTE_READ, self.copy_send.load(Ordering::Relaxed))
                        .map_err(|_| refuse(Cause::RdmapCatastrophic)),
                }
            };
            match payload {
                Ok(p) => {
                    if self.send_message(Message::ReadResponse { stag: rr.sink_stag, to: rr.sink_to }, &p).is_err() {
                        // The connection is gone; receiving notices and ends the QP.
                        return;
                    }
                }
                Err(t) => return self.fail(t),
            }
        }
    }

    /// A local failure: tell the peer (sending may fail if it is gone already), end the QP.
    pub(super) fn fail(&self, t: Terminate) {
        let _ = self.send_message(Message::Terminate(t), &OutPayload::empty());
        self.end(&mut self.rx.lock(), Ended::of(&t, true));
    }
}

/// Frames `msg` FPDU by FPDU and queues them to TCP a batch at a time. Returns the sequence
/// number just past the message.
fn send_locked(sock: &TcpSocket, side: &mut TxSide, msg: Message, payload: &OutPayload) -> Result<u32> {
    let mut out = side.tx.start(msg, payload.len()).map_err(|_| EINVAL)?;
    while !out.done() {
        side.tx.next_fpdu::<KernelCrc, _>(&mut out, payload, &mut side.fpdu);
        side.batch.add(&side.fpdu, payload)?;
        if !out.done() && side.batch.frags.len() >= BATCH_FRAGS {
            side.batch.flush(sock)?;
        }
    }
    side.batch.flush(sock)
}
