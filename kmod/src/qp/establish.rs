// SPDX-License-Identifier: GPL-2.0

//! The MPA exchange that turns a TCP connection into an iWARP stream, in the caller's context:
//! a thin driver of the protocol core's sans-IO [`Handshake`] over a blocking kernel socket.

use crate::error::eproto;
use crate::proto::mpa::handshake::{Handshake, Outcome, Step, MAX_FRAME};
use crate::proto::mpa::negotiate::{Connection, Local};
use crate::proto::tx::Fpdu;
use crate::shim::KernelCrc;
use crate::socket::TcpSocket;
use kernel::prelude::*;

/// What the exchange produced.
pub(crate) struct Established {
    pub(crate) sock: TcpSocket,
    pub(crate) conn: Connection,
    /// The peer's private data (after any enhanced data).
    pub(crate) peer_private: KVec<u8>,
    /// We sent the request (in peer-to-peer mode, we send the RTR).
    pub(crate) initiator: bool,
}

/// Our part in the exchange.
pub(crate) enum Side {
    /// We send the request.
    Initiator,
    /// We read the request, then answer it.
    Responder,
    /// We answer a request read before (an accepted pending request).
    Accepting(KBox<Handshake>),
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

/// Runs the MPA exchange on `sock` as `side`, asking for `local` with `private` data.
pub(crate) fn establish(sock: TcpSocket, side: Side, local: &Local, private: &[u8], timeout_ms: u32) -> Result<Established, Failed> {
    let initiator = matches!(side, Side::Initiator);
    let mut h = match side {
        Side::Initiator => boxed(Handshake::initiator(*local, private).map_err(|_| EINVAL)?)?,
        Side::Responder => {
            let mut h = boxed(Handshake::responder())?;
            drive(&sock, &mut h, timeout_ms)?;
            h
        }
        Side::Accepting(h) => h,
    };
    if h.step() == Step::Decide {
        h.accept(*local, private).map_err(|_| EINVAL)?;
    }
    drive(&sock, &mut h, timeout_ms)?;
    match h.outcome() {
        Some(Outcome::Connected(conn)) => Ok(Established { sock, conn, peer_private: copy(h.peer_private())?, initiator }),
        Some(Outcome::Rejected) => Err(Failed::Rejected(copy(h.peer_private())?)),
        _ => {
            send_term(&sock, &h);
            Err(eproto().into())
        }
    }
}

/// An initiator that cannot use the reply sends the TERM RFC 6581 asks for before the caller
/// closes the socket; best effort, the connection fails either way.
fn send_term(sock: &TcpSocket, h: &Handshake) {
    let Ok(mut fpdu) = KBox::new(Fpdu::default(), GFP_KERNEL_ACCOUNT) else { return };
    if !h.frame_term::<KernelCrc>(&mut fpdu) {
        return;
    }
    let Ok(mut wire) = KVec::from_elem(0u8, fpdu.wire_len as usize, GFP_KERNEL_ACCOUNT) else { return };
    fpdu.write_to(&[][..] as &[u8], &mut wire);
    let _ = sock.send_all(&wire);
}

/// Sends what `h` hands out and receives exactly what it lacks, each piece waited for at most
/// `timeout_ms`, until it is to decide or done.
pub(crate) fn drive(sock: &TcpSocket, h: &mut Handshake, timeout_ms: u32) -> Result {
    let mut buf = KVec::from_elem(0u8, MAX_FRAME, GFP_KERNEL_ACCOUNT)?;
    loop {
        match h.step() {
            Step::Send => {
                sock.send_all(h.transmit())?;
                h.sent(h.transmit().len());
            }
            Step::Receive(n) => {
                let piece = buf.get_mut(..n).ok_or(EINVAL)?;
                sock.recv_exact(piece, timeout_ms)?;
                h.receive(piece);
            }
            Step::Decide | Step::Done => return Ok(()),
        }
    }
}

/// The machine on the heap (it holds two whole frames).
pub(crate) fn boxed(h: Handshake) -> Result<KBox<Handshake>> {
    Ok(KBox::new(h, GFP_KERNEL_ACCOUNT)?)
}

fn copy(b: &[u8]) -> Result<KVec<u8>> {
    let mut v = KVec::with_capacity(b.len(), GFP_KERNEL_ACCOUNT)?;
    v.extend_from_slice(b, GFP_KERNEL_ACCOUNT)?;
    Ok(v)
}
