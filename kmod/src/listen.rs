// SPDX-License-Identifier: GPL-2.0

//! The passive side of connection setup: a request is a connection accepted on a listening
//! kernel socket together with the MPA request read from it, held until the application has
//! seen the initiator's private data and accepts (the MPA reply, `qp::Side::Accepting`) or
//! rejects it.

use crate::error::eproto;
use crate::mpa::frame::{Frame, Kind};
use crate::qp::{self, read_frame};
use crate::socket::TcpSocket;
use kernel::prelude::*;

/// A connection waiting for ACCEPT or REJECT.
pub(crate) struct Pending {
    pub(crate) sock: TcpSocket,
    /// The initiator's MPA request frame, whole.
    pub(crate) frame: KVec<u8>,
}

impl Pending {
    /// The next connection on `listener` and its request, each waited for at most
    /// `timeout_ms`; with the initiator's IPv4 address and port.
    pub(crate) fn next(listener: &TcpSocket, timeout_ms: u32) -> Result<(Pending, u32, u16)> {
        let (sock, addr, port) = listener.accept(timeout_ms)?;
        // A malformed request ends only this connection (EPROTO, closed as `sock` goes).
        let frame = read_frame(&sock, Kind::Request, timeout_ms)?;
        Ok((Pending { sock, frame }, addr, port))
    }

    /// The request.
    pub(crate) fn request(&self) -> Result<Frame<'_>> {
        Frame::parse(&self.frame, Kind::Request).map(|(f, _)| f).map_err(|_| eproto())
    }

    /// Refuses the connection with `private` data; it closes as `self` goes.
    pub(crate) fn reject(self, private: &[u8]) -> Result {
        qp::reject(&self.sock, &self.frame, private)
    }
}
