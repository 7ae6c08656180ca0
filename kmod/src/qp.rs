// SPDX-License-Identifier: GPL-2.0

//! Queue pairs. Today a QP is an adopted TCP connection that completed the MPA exchange (run
//! here, in the caller's context, by the protocol core's `mpa` module) and can send: messages are
//! framed by the core's transmitter (markers, kernel crc32c) and queued to TCP synchronously.
//! Receiving, work queues and completions come with the rest of the data path.

use crate::markers::{self, Markers};
use crate::mpa::frame::{Frame, FrameError, Kind, HEADER_LEN};
use crate::mpa::negotiate::{Connection, Local, Refused};
use crate::shim::KernelCrc;
use crate::socket::{Kvec, TcpSocket};
use crate::tx::{self, Fpdu, Message, Piece, Transmitter};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

/// Errnos the kernel crate does not name.
fn eproto() -> Error {
    Error::from_errno(-(kernel::bindings::EPROTO as i32))
}

fn econnrefused() -> Error {
    Error::from_errno(-(kernel::bindings::ECONNREFUSED as i32))
}

/// Queue pairs of all contexts.
static QUEUE_PAIRS: AtomicU64 = AtomicU64::new(0);

/// The module-wide QP count.
pub(crate) fn queue_pairs() -> u64 {
    QUEUE_PAIRS.load(Ordering::Relaxed)
}

/// A connection in full MPA operation.
pub(crate) struct QueuePair {
    sock: TcpSocket,
    tx: Transmitter,
    fpdu: KBox<Fpdu>,
}

impl QueuePair {
    /// Frames `msg` with `payload` and queues every FPDU to TCP.
    pub(crate) fn send(&mut self, msg: Message, payload: &[u8]) -> Result {
        let mut out = self.tx.start(msg, payload.len() as u64).map_err(|_| EINVAL)?;
        let mut iov = KVec::with_capacity(tx::PIECE_CAP, GFP_KERNEL)?;
        while !out.done() {
            self.tx.next_fpdu::<KernelCrc, _>(&mut out, payload, &mut self.fpdu);
            iov.clear();
            for p in self.fpdu.pieces() {
                let piece = match *p {
                    Piece::Ctl { off, len } => self.fpdu.ctl(off, len),
                    Piece::Payload { off, len } => &payload[off as usize..off as usize + len as usize],
                };
                iov.push(Kvec::new(piece), GFP_KERNEL)?;
            }
            self.sock.send_pieces(&mut iov)?;
        }
        Ok(())
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        QUEUE_PAIRS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the exchange produced.
pub(crate) struct Established {
    pub(crate) qp: QueuePair,
    pub(crate) conn: Connection,
    /// The peer's private data (after any enhanced data).
    pub(crate) peer_private: KVec<u8>,
}

/// Runs the MPA exchange on `sock` as initiator (sends the request) or responder.
pub(crate) fn establish(mut sock: TcpSocket, initiator: bool, local: &Local, private: &[u8], timeout_ms: u32) -> Result<Established> {
    let (conn, peer) = if initiator {
        send_frame(&mut sock, &local.request(private))?;
        let buf = read_frame(&mut sock, Kind::Reply, timeout_ms)?;
        let (rep, _) = Frame::parse(&buf, Kind::Reply).map_err(|_| eproto())?;
        let conn = local.complete(&rep).map_err(|r| match r {
            Refused::Rejected { .. } => econnrefused(),
            Refused::Protocol(_) => eproto(),
        })?;
        (conn, copy(rep.private)?)
    } else {
        let buf = read_frame(&mut sock, Kind::Request, timeout_ms)?;
        let (req, _) = Frame::parse(&buf, Kind::Request).map_err(|_| eproto())?;
        match local.respond(&req, private) {
            Ok((reply, conn)) => {
                send_frame(&mut sock, &reply)?;
                (conn, copy(req.private)?)
            }
            Err((reject, _cause)) => {
                send_frame(&mut sock, &reject)?;
                return Err(eproto());
            }
        }
    };
    // FPDUs sized to the connection's MSS, with room for the markers the peer asked for.
    let marks = if conn.tx_markers { Markers::RFC } else { Markers::NONE };
    let mulpdu = markers::mulpdu(sock.mss(), marks).min(u16::MAX as u32);
    let tx = Transmitter::new(tx::Config { markers: marks, crc: conn.crc, mulpdu });
    let fpdu = KBox::new(Fpdu::default(), GFP_KERNEL)?;
    QUEUE_PAIRS.fetch_add(1, Ordering::Relaxed);
    Ok(Established { qp: QueuePair { sock, tx, fpdu }, conn, peer_private: peer })
}

fn copy(b: &[u8]) -> Result<KVec<u8>> {
    let mut v = KVec::with_capacity(b.len(), GFP_KERNEL)?;
    v.extend_from_slice(b, GFP_KERNEL)?;
    Ok(v)
}

fn send_frame(sock: &mut TcpSocket, f: &Frame<'_>) -> Result {
    let mut buf = KVec::from_elem(0u8, f.wire_len(), GFP_KERNEL)?;
    let n = f.emit(&mut buf).ok_or(EINVAL)?;
    sock.send_all(&buf[..n])
}

/// Reads one whole frame of `kind`: the fixed header, then as much private data as it announces.
fn read_frame(sock: &mut TcpSocket, kind: Kind, timeout_ms: u32) -> Result<KVec<u8>> {
    let mut buf = KVec::from_elem(0u8, HEADER_LEN, GFP_KERNEL)?;
    sock.recv_exact(&mut buf, timeout_ms)?;
    match Frame::parse(&buf, kind) {
        Ok(_) => Ok(buf),
        Err(FrameError::Incomplete(total)) => {
            buf.resize(total, 0, GFP_KERNEL)?;
            sock.recv_exact(&mut buf[HEADER_LEN..], timeout_ms)?;
            Ok(buf)
        }
        Err(_) => Err(eproto()),
    }
}
