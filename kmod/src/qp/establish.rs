// SPDX-License-Identifier: GPL-2.0

//! The MPA exchange that turns a TCP connection into an iWARP stream, run in the caller's
//! context with the protocol core's `mpa` module; and the reject that refuses one.

use crate::error::eproto;
use crate::mpa::frame::{Frame, FrameError, Kind, RtrTypes, HEADER_LEN};
use crate::mpa::negotiate::{Connection, Local, Refused};
use crate::socket::TcpSocket;
use kernel::prelude::*;

/// What the exchange produced.
pub(crate) struct Established {
    pub(crate) sock: TcpSocket,
    pub(crate) conn: Connection,
    /// The peer's private data (after any enhanced data).
    pub(crate) peer_private: KVec<u8>,
}

/// Our part in the exchange.
pub(crate) enum Side {
    /// We send the request.
    Initiator,
    /// We read the request, then answer it.
    Responder,
    /// We answer a request read before (an accepted pending request), given as its frame.
    Accepting(KVec<u8>),
}

/// Why the exchange failed.
pub(crate) enum Failed {
    /// The responder rejected our request, with this private data.
    Rejected(KVec<u8>),
    /// Anything else.
    Error(Error),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Failed {
        Failed::Error(e)
    }
}

/// Runs the MPA exchange on `sock` as `side`.
pub(crate) fn establish(sock: TcpSocket, side: Side, local: &Local, private: &[u8], timeout_ms: u32) -> Result<Established, Failed> {
    let request = match side {
        Side::Initiator => {
            send_frame(&sock, &local.request(private))?;
            let buf = read_frame(&sock, Kind::Reply, timeout_ms)?;
            let (rep, _) = Frame::parse(&buf, Kind::Reply).map_err(|_| eproto())?;
            let conn = local.complete(&rep).map_err(|r| match r {
                Refused::Rejected { private } => copy(private).map_or_else(Failed::Error, Failed::Rejected),
                Refused::Protocol(_) => Failed::Error(eproto()),
            })?;
            return Ok(Established { sock, conn, peer_private: copy(rep.private)? });
        }
        Side::Responder => read_frame(&sock, Kind::Request, timeout_ms)?,
        Side::Accepting(frame) => frame,
    };
    let (req, _) = Frame::parse(&request, Kind::Request).map_err(|_| eproto())?;
    match local.respond(&req, private) {
        Ok((reply, conn)) => {
            send_frame(&sock, &reply)?;
            Ok(Established { sock, conn, peer_private: copy(req.private)? })
        }
        Err((reject, _cause)) => {
            send_frame(&sock, &reject)?;
            Err(eproto().into())
        }
    }
}

/// Answers a pending request with a reject frame carrying `private` (the connection then closes
/// when `sock` goes).
pub(crate) fn reject(sock: &TcpSocket, request: &[u8], private: &[u8]) -> Result {
    let (req, _) = Frame::parse(request, Kind::Request).map_err(|_| eproto())?;
    let us = Local { markers: false, crc: req.crc, rev: req.rev, ird: 0, ord: 0, p2p: false, rtr: RtrTypes::default() };
    send_frame(sock, &us.reject(&req, private))
}

fn copy(b: &[u8]) -> Result<KVec<u8>> {
    let mut v = KVec::with_capacity(b.len(), GFP_KERNEL)?;
    v.extend_from_slice(b, GFP_KERNEL)?;
    Ok(v)
}

fn send_frame(sock: &TcpSocket, f: &Frame<'_>) -> Result {
    let mut buf = KVec::from_elem(0u8, f.wire_len(), GFP_KERNEL)?;
    let n = f.emit(&mut buf).ok_or(EINVAL)?;
    sock.send_all(&buf[..n])
}

/// Reads one whole frame of `kind`: the fixed header, then as much private data as it announces.
pub(crate) fn read_frame(sock: &TcpSocket, kind: Kind, timeout_ms: u32) -> Result<KVec<u8>> {
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
