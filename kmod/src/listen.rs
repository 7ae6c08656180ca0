// SPDX-License-Identifier: GPL-2.0

//! The passive side of connection setup, driven by the sockets' callbacks. A [`Listener`]'s work
//! ([`Waker`]) runs when a connection arrives or a connection whose MPA request is on the way
//! sends more: it accepts, and reads what each initiator sent so far, never waiting, so an
//! initiator that sends its request slowly (or never) holds up nobody else. At most
//! [`MAX_INCOMING`] requests are in progress or waiting at once (a new connection takes the
//! place of the oldest one on its way, after [`SLOT_KEPT`]), each has [`REQUEST_DEADLINE`] to
//! arrive whole, and a malformed one ends only its own connection. A whole request is a
//! [`Pending`] connection, queued for GET_REQUEST (which waits for one without polling) or
//! handed to the listener's owner as it arrives ([`OnRequest`]: the connection manager's
//! CONNECT_REQUEST), and held until the application has seen the initiator's private data and
//! accepts (the MPA reply, `qp::Side::Accepting`) or rejects it.

use crate::error::eproto;
use crate::proto::mpa::frame::Frame;
use crate::proto::mpa::handshake::{Handshake, Step};
use crate::qp::{advance, boxed, send_out, wait_until};
use crate::socket::{Endpoint, OnWake, TcpSocket, Waker, Watched};
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
use kernel::time::{Delta, Instant, Monotonic};

/// Requests in progress or waiting on one listener at most; further connections wait in TCP's
/// backlog, or take the place of the oldest request still on its way once it has had
/// [`SLOT_KEPT`].
const MAX_INCOMING: usize = 64;
/// How long a request on its way keeps its place when the slots are full and more connections
/// wait: initiators that connect and say nothing (as many as the slots) cannot shut out the
/// others for a whole [`REQUEST_DEADLINE`]. A request normally arrives with the connection.
const SLOT_KEPT: Delta = Delta::from_millis(1_000);
/// How long an initiator has, from the accept, to send its whole MPA request.
const REQUEST_DEADLINE: Delta = Delta::from_millis(10_000);
/// How often the work looks at requests in progress for their deadline, in milliseconds.
const DEADLINE_CHECK_MS: u32 = 1000;

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
        send_out(&self.sock, &mut self.handshake)
    }
}

/// An accepted connection whose MPA request is not whole yet.
struct Incoming {
    sock: Watched,
    handshake: KBox<Handshake>,
    peer: Endpoint,
    since: Instant<Monotonic>,
}

impl Incoming {
    /// Takes in what the initiator sent so far: true once the request is whole; an error if the
    /// connection closed or the request is malformed.
    fn advance(&mut self) -> Result<bool> {
        let whole = advance(self.sock.socket(), &mut self.handshake)?;
        if whole && self.handshake.step() != Step::Decide {
            return Err(eproto());
        }
        Ok(whole)
    }
}

/// A whole request and the initiator's end.
pub(crate) type Arrived = (Pending, Endpoint);

/// Takes each whole request as it arrives, instead of a queue for GET_REQUEST. Called from the
/// listener's work with its locks held: it may not wait for the listener.
pub(crate) trait OnRequest: Send + Sync {
    fn request(&self, arrived: Arrived);
}

/// What the listener's work and GET_REQUEST share.
struct Requests {
    /// Requests on the way, oldest first.
    incoming: KVec<Incoming>,
    /// Whole ones, oldest first.
    whole: KVec<Arrived>,
    /// The listener is shut down.
    closed: bool,
}

/// A listening socket and the requests on it.
#[pin_data]
pub(crate) struct Listener {
    sock: TcpSocket,
    /// Taken out (and dropped) by `shutdown`, which breaks the cycle the waker's reference to
    /// the listener makes. Its work holds it while it runs. Taken before `requests`.
    #[pin]
    waker: Mutex<Option<Waker<Listener>>>,
    #[pin]
    requests: Mutex<Requests>,
    /// Signalled when a request is whole or the listener shuts down.
    #[pin]
    arrived: CondVar,
    /// Whole requests go here if set, else to `requests.whole`.
    announce: Option<Arc<dyn OnRequest>>,
}

impl Listener {
    /// Listens on `sock`, handing whole requests to `announce` if given, else queueing them for
    /// [`Listener::next`]; [`Listener::shutdown`] must end it.
    pub(crate) fn new(sock: TcpSocket, announce: Option<Arc<dyn OnRequest>>) -> Result<Arc<Listener>> {
        let requests = Requests { incoming: KVec::new(), whole: KVec::new(), closed: false };
        let listener = Arc::pin_init(
            pin_init!(Listener {
                sock,
                waker <- new_mutex!(None),
                requests <- new_mutex!(requests),
                arrived <- new_condvar!("Listener::arrived"),
                announce,
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        // Its first run, at once, waits for the lock: it finds the waker in place, and what
        // arrived before it was installed.
        let mut slot = listener.waker.lock();
        // SAFETY: the listener owns its socket, and its waker goes first (`shutdown`).
        *slot = Some(unsafe { Waker::install(&listener.sock, listener.clone())? });
        drop(slot);
        Ok(listener)
    }

    /// Stops listening: a GET_REQUEST waiting here returns EINVAL, and requests not accepted
    /// yet are closed.
    pub(crate) fn shutdown(&self) {
        let (incoming, whole) = {
            let mut r = self.requests.lock();
            r.closed = true;
            (core::mem::take(&mut r.incoming), core::mem::take(&mut r.whole))
        };
        self.arrived.notify_all();
        // The watched connections first: they use the waker until they go.
        drop(incoming);
        drop(whole);
        let waker = self.waker.lock().take();
        drop(waker);
        self.sock.shutdown();
    }

    /// The next connection whose request is whole, waiting at most `timeout_ms` (ETIMEDOUT);
    /// with the initiator's IPv4 address and port.
    pub(crate) fn next(&self, timeout_ms: u32) -> Result<Arrived> {
        let deadline = Instant::<Monotonic>::now() + Delta::from_millis(i64::from(timeout_ms));
        let mut r = self.requests.lock();
        loop {
            if r.closed {
                return Err(EINVAL);
            }
            if !r.whole.is_empty() {
                let got = r.whole.remove(0)?;
                drop(r);
                // There is room for another.
                if let Some(w) = self.waker.lock().as_ref() {
                    w.kick();
                }
                return Ok(got);
            }
            if let Err(e) = wait_until(&self.arrived, &mut r, deadline) {
                // A request that came meanwhile is taken.
                if r.closed || r.whole.is_empty() {
                    return Err(e);
                }
            }
        }
    }
}

impl OnWake for Listener {
    /// Accepts what TCP has queued while there is room, and advances every request on the way.
    fn on_wake(&self) {
        let waker = self.waker.lock();
        let Some(w) = waker.as_ref() else { return };
        let mut r = self.requests.lock();
        if r.closed {
            return;
        }
        // Until a pass neither accepts nor ends a request: a slot freed is filled at once.
        let mut failed = false;
        loop {
            let before = (r.incoming.len(), r.whole.len());
            loop {
                let full = r.incoming.len() + r.whole.len() >= MAX_INCOMING;
                // In order of arrival: the first is the oldest.
                if full && r.incoming.first().is_none_or(|i| i.since.elapsed() < SLOT_KEPT) {
                    break;
                }
                let (sock, peer) = match self.sock.accept() {
                    Ok(c) => c,
                    // None queued.
                    Err(e) if e == EAGAIN => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                };
                if full {
                    // Its connection closes.
                    drop(r.incoming.remove(0));
                }
                // SAFETY: accepted from the waker's listener; `shutdown` drops every request
                // before the waker, and a `Pending` holds the socket only after `release`.
                let sock = unsafe { w.watch(sock) };
                let Ok(handshake) = boxed(Handshake::responder()) else {
                    failed = true;
                    break;
                };
                if r.incoming.push(Incoming { sock, handshake, peer, since: Instant::now() }, GFP_KERNEL_ACCOUNT).is_err() {
                    failed = true;
                    break;
                }
            }
            let ended = self.advance(&mut r);
            if (r.incoming.len(), r.whole.len()) == before && !ended {
                break;
            }
        }
        // Requests on the way have deadlines; a failed accept (no memory) is tried again.
        if !r.incoming.is_empty() || failed {
            w.later(DEADLINE_CHECK_MS);
        }
    }
}

impl Listener {
    /// Advances every request on the way: whole ones are queued for GET_REQUEST; those too
    /// slow, malformed or closed are dropped (their connections close). Whether any ended.
    fn advance(&self, r: &mut Requests) -> bool {
        let mut ended = false;
        let mut i = 0;
        while i < r.incoming.len() {
            let ready = r.incoming[i].advance();
            if matches!(ready, Ok(false)) && r.incoming[i].since.elapsed() < REQUEST_DEADLINE {
                i += 1;
                continue;
            }
            let Ok(done) = r.incoming.remove(i) else { break };
            ended = true;
            if matches!(ready, Ok(true)) {
                let Incoming { sock, handshake, peer, .. } = done;
                let arrived = (Pending { sock: sock.release(), handshake }, peer);
                match &self.announce {
                    Some(to) => to.request(arrived),
                    None => {
                        if r.whole.push(arrived, GFP_KERNEL_ACCOUNT).is_ok() {
                            self.arrived.notify_all();
                        }
                    }
                }
            }
        }
        ended
    }
}
