// SPDX-License-Identifier: GPL-2.0

//! The passive side of connection setup. A [`Listener`] collects the MPA requests of the
//! connections it accepted side by side, so an initiator that sends its request slowly (or
//! never) holds up nobody else: at most [`MAX_INCOMING`] requests are in progress at once, each
//! has [`REQUEST_DEADLINE`] to arrive whole, and a malformed one ends only its own connection.
//! A whole request is a [`Pending`] connection, held until the application has seen the
//! initiator's private data and accepts (the MPA reply, `qp::Side::Accepting`) or rejects it.

use crate::error::eproto;
use crate::proto::mpa::frame::Frame;
use crate::proto::mpa::handshake::{Handshake, Step};
use crate::qp::{boxed, drive};
use crate::socket::TcpSocket;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::time::{delay::fsleep, Delta, Instant, Monotonic};

/// Requests in progress on one listener at most; further connections wait in TCP's backlog.
const MAX_INCOMING: usize = 16;
/// How long an initiator has, from the accept, to send its whole MPA request.
const REQUEST_DEADLINE: Delta = Delta::from_millis(10_000);
/// How often a waiting GET_REQUEST looks again at requests in progress.
const POLL: Delta = Delta::from_millis(10);

/// A connection waiting for ACCEPT or REJECT.
pub(crate) struct Pending {
    pub(crate) sock: TcpSocket,
    /// The MPA exchange, waiting for our decision (the initiator's request is in).
    pub(crate) handshake: KBox<Handshake>,
}

impl Pending {
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

/// An accepted connection whose MPA request is not whole yet.
struct Incoming {
    pending: Pending,
    addr: u32,
    port: u16,
    since: Instant<Monotonic>,
}

impl Incoming {
    /// Takes in what the initiator sent so far: true once the request is whole; an error if the
    /// connection closed or the request is malformed.
    fn advance(&mut self) -> Result<bool> {
        let mut buf = [0u8; 128];
        loop {
            match self.pending.handshake.step() {
                Step::Decide => return Ok(true),
                Step::Receive(n) => {
                    let piece = &mut buf[..n.min(128)];
                    match self.pending.sock.recv_nowait(piece) {
                        Ok(got) => self.pending.handshake.receive(&piece[..got]),
                        Err(e) if e == EAGAIN => return Ok(false),
                        Err(e) => return Err(e),
                    };
                }
                Step::Send | Step::Done => return Err(eproto()),
            }
        }
    }
}

/// A listening socket and the requests in progress on it.
#[pin_data]
pub(crate) struct Listener {
    sock: TcpSocket,
    #[pin]
    incoming: Mutex<KVec<Incoming>>,
}

impl Listener {
    pub(crate) fn new(sock: TcpSocket) -> Result<Arc<Listener>> {
        Arc::pin_init(pin_init!(Listener { sock, incoming <- new_mutex!(KVec::new()) }), GFP_KERNEL_ACCOUNT)
    }

    /// Stops listening: a GET_REQUEST waiting here returns EINVAL.
    pub(crate) fn shutdown(&self) {
        self.sock.shutdown();
    }

    /// The next connection whose request is whole, waiting at most `timeout_ms` (ETIMEDOUT);
    /// with the initiator's IPv4 address and port.
    pub(crate) fn next(&self, timeout_ms: u32) -> Result<(Pending, u32, u16)> {
        let start = Instant::<Monotonic>::now();
        loop {
            if let Some(whole) = self.poll()? {
                return Ok(whole);
            }
            if start.elapsed().as_millis() >= i64::from(timeout_ms) {
                return Err(ETIMEDOUT);
            }
            fsleep(POLL);
        }
    }

    /// Accepts what TCP has queued while there is room, and advances every request in
    /// progress: the first whole one, if any. Those too slow, malformed or closed are dropped
    /// (their connections close).
    fn poll(&self) -> Result<Option<(Pending, u32, u16)>> {
        let mut incoming = self.incoming.lock();
        while incoming.len() < MAX_INCOMING {
            let (sock, addr, port) = match self.sock.accept(0) {
                Ok(c) => c,
                Err(e) if e == ETIMEDOUT => break,
                Err(e) => return Err(e),
            };
            let pending = Pending { sock, handshake: boxed(Handshake::responder())? };
            incoming.push(Incoming { pending, addr, port, since: Instant::now() }, GFP_KERNEL_ACCOUNT)?;
        }
        let mut i = 0;
        while i < incoming.len() {
            let ready = incoming[i].advance();
            if matches!(ready, Ok(false)) && incoming[i].since.elapsed() < REQUEST_DEADLINE {
                i += 1;
                continue;
            }
            let Ok(done) = incoming.remove(i) else { break };
            if matches!(ready, Ok(true)) {
                return Ok(Some((done.pending, done.addr, done.port)));
            }
        }
        Ok(None)
    }
}
