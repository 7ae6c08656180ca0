// SPDX-License-Identifier: GPL-2.0

//! The send side of a QP: work requests are checked, their buffers gathered into one snapshot,
//! framed by the protocol core (markers, kernel crc32c) and queued to TCP in the caller's
//! context. Sends and Writes complete once queued; Reads when the receive side has placed the
//! response. The peer's Read Requests, queued by the receive side, are answered here too, by the
//! hook's transmit work.

use super::wr::{PendingRead, Sgl};
use super::{enotconn, Ended, Phase, QueuePair};
use crate::abi::{access, opcode, send_flags, wc_opcode, wc_status, PostSend, MAX_MESSAGE};
use crate::mr::Fault;
use crate::rdmap::ReadRequest;
use crate::shim::KernelCrc;
use crate::socket::{Kvec, TcpSocket};
use crate::terminate::{Cause, Terminate};
use crate::tx::{self, Fpdu, Message, Piece, Transmitter};
use kernel::prelude::*;

/// What the send side keeps.
pub(crate) struct TxSide {
    tx: Transmitter,
    fpdu: KBox<Fpdu>,
    batch: Batch,
    /// The snapshot of the current work request's buffers, reused from message to message.
    scratch: KVVec<u8>,
}

impl TxSide {
    pub(super) fn new(tx: Transmitter) -> Result<TxSide> {
        let batch = Batch { ctl: KVec::with_capacity(BATCH_PIECES * 8, GFP_KERNEL)?, spans: KVec::with_capacity(BATCH_PIECES, GFP_KERNEL)? };
        Ok(TxSide { tx, fpdu: KBox::new(Fpdu::default(), GFP_KERNEL)?, batch, scratch: KVVec::new() })
    }
}

/// Most pieces handed to one sendmsg (the kernel takes up to UIO_MAXIOV = 1024).
const BATCH_PIECES: usize = 256;

/// Where a piece of a batch lives.
#[derive(Clone, Copy)]
enum Span {
    /// In the batch's control arena.
    Ctl { at: usize, len: usize },
    /// In the message payload.
    Payload { off: usize, len: usize },
}

/// The pieces of several FPDUs, sent with one sendmsg: per-FPDU control octets (headers,
/// markers, pad, CRC) are copied into an arena, because the core reuses its FPDU buffer; payload
/// is referenced, not copied.
struct Batch {
    ctl: KVec<u8>,
    spans: KVec<Span>,
}

impl Batch {
    /// Adds the framed FPDU's pieces.
    fn add(&mut self, fpdu: &Fpdu) -> Result {
        for p in fpdu.pieces() {
            let span = match *p {
                Piece::Ctl { off, len } => {
                    let at = self.ctl.len();
                    self.ctl.extend_from_slice(fpdu.ctl(off, len), GFP_KERNEL)?;
                    Span::Ctl { at, len: len as usize }
                }
                Piece::Payload { off, len } => Span::Payload { off: off as usize, len: len as usize },
            };
            self.spans.push(span, GFP_KERNEL)?;
        }
        Ok(())
    }

    /// Sends everything added, in order, and empties the batch.
    fn flush(&mut self, sock: &TcpSocket, payload: &[u8]) -> Result {
        let mut iov = KVec::with_capacity(self.spans.len(), GFP_KERNEL)?;
        for s in self.spans.iter() {
            let piece = match *s {
                Span::Ctl { at, len } => &self.ctl[at..at + len],
                Span::Payload { off, len } => &payload[off..off + len],
            };
            iov.push(Kvec::new(piece), GFP_KERNEL)?;
        }
        let sent = sock.send_pieces(&mut iov);
        self.ctl.clear();
        self.spans.clear();
        sent
    }
}

impl QueuePair {
    /// Frames `msg` with `payload` and queues every FPDU to TCP (blocking while the socket
    /// buffer is full).
    pub(super) fn send_message(&self, msg: Message, payload: &[u8]) -> Result {
        let mut guard = self.tx.lock();
        let Some(side) = &mut *guard else { return Err(enotconn()) };
        send_locked(self.socket()?, side, msg, payload)
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
        let sgl = Sgl::new(&req.sge, req.num_sge, &self.mrs.lock(), 0)?;
        let len = sgl.len();
        self.rx.lock().connected()?;
        let sent = {
            let mut guard = self.tx.lock();
            let Some(side) = &mut *guard else { return Err(enotconn()) };
            let mut payload = core::mem::take(&mut side.scratch);
            payload.clear();
            payload.resize(len as usize, 0, GFP_KERNEL)?;
            // Regions may have changed since the check: a failure here is still an argument error.
            sgl.gather(&self.mrs.lock(), &mut payload).map_err(|_| EINVAL)?;
            let sent = send_locked(self.socket()?, side, msg, &payload);
            side.scratch = payload;
            sent
        };
        if let Err(e) = sent {
            // Part of the message may be on the wire: the stream cannot go on.
            self.fail(Terminate::new(Cause::MpaStreamLost));
            return Err(e);
        }
        if signaled {
            let op = if req.opcode == opcode::WRITE { wc_opcode::RDMA_WRITE } else { wc_opcode::SEND };
            let cqe = self.cqe(req.wr_id, wc_status::SUCCESS, op, len);
            if self.send_cq.push(&cqe).is_err() {
                self.fail(Terminate::new(Cause::RdmapCatastrophic));
            }
        }
        Ok(())
    }

    /// An RDMA Read: the sink is one local entry with LOCAL_WRITE. The request is queued to TCP
    /// in the order it was recorded, so responses match the outstanding list.
    fn post_read(&self, req: &PostSend, signaled: bool) -> Result {
        let sink = Sgl::new(&req.sge, req.num_sge, &self.mrs.lock(), access::LOCAL_WRITE)?.single().ok_or(EINVAL)?;
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
        let sent = send_locked(self.socket()?, side, Message::ReadRequest(rr), &[]);
        drop(tx);
        if sent.is_err() {
            self.fail(Terminate::new(Cause::MpaStreamLost));
        }
        sent
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
            let payload = if rr.size as u64 > MAX_MESSAGE {
                Err(refuse(Cause::RdmapCatastrophic))
            } else {
                KVVec::from_elem(0u8, rr.size as usize, GFP_KERNEL).map_err(|_| refuse(Cause::RdmapCatastrophic))
            };
            let payload = payload.and_then(|mut p| {
                let read = self.mrs.lock().read(rr.src_stag, rr.src_to, &mut p, access::REMOTE_READ);
                read.map(|()| p).map_err(|f| {
                    refuse(match f {
                        Fault::InvalidStag => Cause::RdmapInvalidStag,
                        Fault::Bounds => Cause::RdmapBaseBounds,
                        Fault::Access => Cause::RdmapAccessRights,
                    })
                })
            });
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
        let _ = self.send_message(Message::Terminate(t), &[]);
        self.end(&mut self.rx.lock(), Ended::of(&t, true));
    }
}

/// Frames `msg` FPDU by FPDU and queues them to TCP a batch at a time.
fn send_locked(sock: &TcpSocket, side: &mut TxSide, msg: Message, payload: &[u8]) -> Result {
    let mut out = side.tx.start(msg, payload.len() as u64).map_err(|_| EINVAL)?;
    while !out.done() {
        side.tx.next_fpdu::<KernelCrc, _>(&mut out, payload, &mut side.fpdu);
        side.batch.add(&side.fpdu)?;
        if out.done() || side.batch.spans.len() + tx::PIECE_CAP > BATCH_PIECES {
            side.batch.flush(sock, payload)?;
        }
    }
    Ok(())
}
