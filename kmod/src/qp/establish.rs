// SPDX-License-Identifier: GPL-2.0

//! The MPA exchange that turns an adopted TCP connection into an iWARP stream, run in the
//! caller's context with the protocol core's `mpa` module.

use crate::mpa::frame::{Frame, FrameError, Kind, HEADER_LEN};
use crate::mpa::negotiate::{Connection, Local, Refused};
use crate::socket::TcpSocket;
use kernel::prelude::*;

/// Errnos the kernel crate does not name.
pub(crate) fn eproto() -> Error {
    Error::from_errno(-(kernel::bindings::EPROTO as i32))
}

fn econnrefused() -> Error {
    Error::from_errno(-(kernel::bindings::ECONNREFUSED as i32))
}

/// What the exchange produced.
pub(crate) struct Established {
    pub(crate) sock: TcpSocket,
    pub(crate) conn: Connection,
    /// The peer's private data (after any enhanced data).
    pub(crate) peer_private: KVec<u8>,
}

/// Runs the MPA exchange on `sock` as initiator (sends the request) or responder.
pub(crate) fn establish(sock: TcpSocket, initiator: bool, local: &Local, private: &[u8], timeout_ms: u32) -> Result<Established> {
    let (conn, peer) = if initiator {
        send_frame(&sock, &local.request(private))?;
        let buf = read_frame(&sock, Kind::Reply, timeout_ms)?;
        let (rep, _) = Frame::parse(&buf, Kind::Reply).map_err(|_| eproto())?;
        let conn = local.complete(&rep).map_err(|r| match r {
            Refused::Rejected { .. } => econnrefused(),
            Refused::Protocol(_) => eproto(),
        })?;
        (conn, copy(rep.private)?)
    } else {
        let buf = read_frame(&sock, Kind::Request, timeout_ms)?;
        let (req, _) = Frame::parse(&buf, Kind::Request).map_err(|_| eproto())?;
        match local.respond(&req, private) {
            Ok((reply, conn)) => {
                send_frame(&sock, &reply)?;
                (conn, copy(req.private)?)
            }
            Err((reject, _cause)) => {
                send_frame(&sock, &reject)?;
                return Err(eproto());
            }
        }
    };
    Ok(Established { sock, conn, peer_private: peer })
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
fn read_frame(sock: &TcpSocket, kind: Kind, timeout_ms: u32) -> Result<KVec<u8>> {
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
