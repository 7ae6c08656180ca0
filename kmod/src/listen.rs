// SPDX-License-Identifier: GPL-2.0

//! The passive side of connection setup: a request is a connection accepted on a listening
//! kernel socket together with the MPA request read from it, held until the application has
//! seen the initiator's private data and accepts (the MPA reply, `qp::Side::Accepting`) or
//! rejects it.

use crate::error::eproto;
use crate::mpa::frame::Frame;
use crate::mpa::handshake::{Handshake, Step};
use crate::qp::{boxed, drive};
use crate::socket::TcpSocket;
use kernel::prelude::*;

/// A connection waiting for ACCEPT or REJECT.
pub(crate) struct Pending {
    pub(crate) sock: TcpSocket,
    /// The MPA exchange, waiting for our decision (the initiator's request is in).
    pub(crate) handshake: KBox<Handshake>,
}

impl Pending {
    /// The next connection on `listener` and its request, each waited for at most
    /// `timeout_ms`; with the initiator's IPv4 address and port.
    pub(crate) fn next(listener: &TcpSocket, timeout_ms: u32) -> Result<(Pending, u32, u16)> {
        let (sock, addr, port) = listener.accept(timeout_ms)?;
        let mut handshake = boxed(Handshake::responder())?;
        drive(&sock, &mut handshake, timeout_ms)?;
        // A malformed request ends only this connection (EPROTO, closed as `sock` goes).
        if handshake.step() != Step::Decide {
            return Err(eproto());
        }
        Ok((Pending { sock, handshake }, addr, port))
    }

    /// The request.
    pub(crate) fn request(&self) -> Result<Frame<'_>> {
        self.handshake.request().ok_or_else(eproto)
    }

    /// Refuses the connection with `private` data; it closes as `self` goes.
    pub(crate) fn reject(mut self, private: &[u8]) -> Result {
        self.handshake.reject(private).map_err(|_| EINVAL)?;
        drive(&self.sock, &mut self.handshake, 0)
    }
}
