// SPDX-License-Identifier: GPL-2.0

//! The send side of a QP: work requests are checked, their buffers gathered into one snapshot,
//! framed by the protocol core (markers, kernel crc32c) and queued to TCP in the caller's
//! context. Sends and Writes complete once queued; Reads when the receive side has placed the
//! response.

use super::wr::{PendingRead, Sgl};
use super::{enotconn, Ended, QueuePair};
use crate::abi::{access, opcode, send_flags, wc_opcode, wc_status, PostSend};
use crate::rdmap::ReadRequest;
use crate::shim::KernelCrc;
use crate::socket::Kvec;
use crate::terminate::{Cause, Terminate};
use crate::tx::{self, Fpdu, Message, Piece, Transmitter};
use kernel::prelude::*;

/// What the send side keeps.
pub(crate) struct TxSide {
    pub(super) tx: Transmitter,
    pub(super) fpdu: KBox<Fpdu>,
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
        let payload = {
            let mrs = self.mrs.lock();
            let sgl = Sgl::new(&req.sge, req.num_sge, &mrs, 0)?;
            let mut payload = KVVec::from_elem(0u8, sgl.len() as usize, GFP_KERNEL)?;
            sgl.gather(&mrs, &mut payload).map_err(|_| EINVAL)?;
            payload
        };
        self.rx.lock().connected()?;
        if let Err(e) = self.send_message(msg, &payload) {
            // Part of the message may be on the wire: the stream cannot go on.
            self.fail(Terminate::new(Cause::MpaStreamLost));
            return Err(e);
        }
        if signaled {
            let op = if req.opcode == opcode::WRITE { wc_opcode::RDMA_WRITE } else { wc_opcode::SEND };
            let cqe = self.cqe(req.wr_id, wc_status::SUCCESS, op, payload.len() as u32);
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

    /// A local failure on the send side: tell the peer, end the QP.
    fn fail(&self, t: Terminate) {
        let _ = self.send_message(Message::Terminate(t), &[]);
        self.end(&mut self.rx.lock(), Ended::of(&t, true));
    }
}

fn send_locked(sock: &crate::socket::TcpSocket, side: &mut TxSide, msg: Message, payload: &[u8]) -> Result {
    let mut out = side.tx.start(msg, payload.len() as u64).map_err(|_| EINVAL)?;
    let mut iov = KVec::with_capacity(tx::PIECE_CAP, GFP_KERNEL)?;
    while !out.done() {
        side.tx.next_fpdu::<KernelCrc, _>(&mut out, payload, &mut side.fpdu);
        iov.clear();
        for p in side.fpdu.pieces() {
            let piece = match *p {
                Piece::Ctl { off, len } => side.fpdu.ctl(off, len),
                Piece::Payload { off, len } => &payload[off as usize..off as usize + len as usize],
            };
            iov.push(Kvec::new(piece), GFP_KERNEL)?;
        }
        sock.send_pieces(&mut iov)?;
    }
    Ok(())
}
