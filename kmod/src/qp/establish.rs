// SPDX-License-Identifier: GPL-2.0

//! The MPA exchange that turns a TCP connection into an iWARP stream, driven by the socket's
//! callbacks: a [`Waker`]'s work runs the protocol core's sans-IO [`Handshake`] when the
//! connection is made or data arrives, sends what it hands out and takes in what arrived, never
//! waiting for the peer. The caller only waits for the outcome (with a deadline, or until a
//! signal interrupts it).

use crate::error::eproto;
use crate::proto::mpa::handshake::{Handshake, Outcome, Step};
use crate::proto::mpa::negotiate::{Connection, Local};
use crate::proto::tx::Fpdu;
use crate::shim::KernelCrc;
use crate::socket::{OnWake, TcpSocket, Waker};
use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, CondVarTimeoutResult, Mutex, MutexGuard};
use kernel::time::{msecs_to_jiffies, Delta, Instant, Monotonic};

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
    /// We send the request (on a connection that may still be being made).
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

/// Runs the MPA exchange on `sock` as `side`, asking for `local` with `private` data, all of it
/// within `timeout_ms`; waits for it (a signal ends the wait with EINTR).
pub(crate) fn establish(sock: TcpSocket, side: Side, local: &Local, private: &[u8], timeout_ms: u32) -> Result<Established, Failed> {
    let waiter = Arc::pin_init(pin_init!(Waiter { settled <- new_mutex!(false), cv <- new_condvar!("Waiter::cv") }), GFP_KERNEL_ACCOUNT)?;
    let ex = Exchange::start(sock, side, local, private, timeout_ms, waiter.clone())?;
    let mut done = waiter.settled.lock();
    let mut why = ETIMEDOUT;
    while !*done {
        // Bounded by the exchange's deadline too, should its timer not settle it.
        if let Err(e) = wait_until(&waiter.cv, &mut done, ex.deadline) {
            why = e;
            break;
        }
    }
    drop(done);
    // Settled meanwhile: that wins (an answer sent is not undone).
    ex.finish(why)
}

/// Told when an exchange settles: the exchange's owner may then [`Exchange::finish`] it
/// without waiting. Called from the exchange's work with its locks held: it may only take note
/// or queue work of its own.
pub(crate) trait OnSettled: Send + Sync {
    fn settled(&self);
}

/// The caller of [`establish`], waiting.
#[pin_data]
struct Waiter {
    #[pin]
    settled: Mutex<bool>,
    #[pin]
    cv: CondVar,
}

impl OnSettled for Waiter {
    fn settled(&self) {
        *self.settled.lock() = true;
        self.cv.notify_all();
    }
}

/// An initiator that cannot use the reply sends the TERM RFC 6581 asks for before the caller
/// closes the socket; best effort (what the send buffer takes now), the connection fails
/// either way.
fn send_term(sock: &TcpSocket, h: &Handshake) {
    let Ok(mut fpdu) = KBox::new(Fpdu::default(), GFP_KERNEL_ACCOUNT) else { return };
    if !h.frame_term::<KernelCrc>(&mut fpdu) {
        return;
    }
    let Ok(mut wire) = KVec::from_elem(0u8, fpdu.wire_len as usize, GFP_KERNEL_ACCOUNT) else { return };
    fpdu.write_to(&[][..] as &[u8], &mut wire);
    let _ = sock.send_nowait(&wire);
}

/// An MPA exchange in progress, driven by its socket's callbacks and by a timer for its
/// deadline; it tells its owner when it settles, and [`Exchange::finish`] ends it. The exchange
/// and its waker hold each other until then: `finish` must follow [`Exchange::start`].
#[pin_data]
pub(crate) struct Exchange {
    /// Taken out (and dropped) by `finish`, which breaks the cycle the waker's reference makes.
    /// The work holds it while it runs. Taken before `progress`.
    #[pin]
    waker: Mutex<Option<Waker<Exchange>>>,
    #[pin]
    progress: Mutex<Progress>,
    on_settled: Arc<dyn OnSettled>,
    /// It settles with ETIMEDOUT if not settled by then.
    deadline: Instant<Monotonic>,
}

struct Progress {
    /// Both `Some` until `finish` takes them back.
    sock: Option<TcpSocket>,
    h: Option<KBox<Handshake>>,
    /// We sent the request.
    initiator: bool,
    /// What a responder answers with, once the request is in.
    local: Local,
    private: KVec<u8>,
    /// Done (Ok) or failed; `None` while in progress.
    settled: Option<Result>,
}

impl Exchange {
    /// Starts the MPA exchange on `sock` as `side`, asking for `local` with `private` data
    /// (a responder, once the request is in), all of it within `timeout_ms`; `on_settled` is
    /// told when it is done or failed.
    pub(crate) fn start(sock: TcpSocket, side: Side, local: &Local, private: &[u8], timeout_ms: u32, on_settled: Arc<dyn OnSettled>) -> Result<Arc<Exchange>> {
        let initiator = matches!(side, Side::Initiator);
        let h = match side {
            Side::Initiator => boxed(Handshake::initiator(*local, private).map_err(|_| EINVAL)?)?,
            Side::Responder => boxed(Handshake::responder())?,
            Side::Accepting(h) => h,
        };
        let progress = Progress { sock: Some(sock), h: Some(h), initiator, local: *local, private: copy(private)?, settled: None };
        let deadline = Instant::<Monotonic>::now() + Delta::from_millis(i64::from(timeout_ms));
        let ex = Arc::pin_init(pin_init!(Exchange { waker <- new_mutex!(None), progress <- new_mutex!(progress), on_settled, deadline }), GFP_KERNEL_ACCOUNT)?;
        {
            let mut slot = ex.waker.lock();
            let p = ex.progress.lock();
            let sock = p.sock.as_ref().ok_or(EINVAL)?;
            // SAFETY: the socket stays in `progress` until the waker is gone (`finish`). Its
            // first run, at once, waits for both locks.
            *slot = Some(unsafe { Waker::install(sock, ex.clone())? });
        }
        Ok(ex)
    }

    /// Ends the exchange: its waker goes (a running work finishes first) and what it produced
    /// is returned. If it had not settled, it fails with `why` (its owner gave up); if it had,
    /// that wins.
    pub(crate) fn finish(&self, why: Error) -> Result<Established, Failed> {
        let waker = self.waker.lock().take();
        drop(waker);
        let mut p = self.progress.lock();
        let settled = p.settled.take().unwrap_or(Err(why));
        let (sock, h, initiator) = (p.sock.take().ok_or(EINVAL)?, p.h.take().ok_or(EINVAL)?, p.initiator);
        drop(p);
        settled?;
        match h.outcome() {
            Some(Outcome::Connected(conn)) => Ok(Established { sock, conn, peer_private: copy(h.peer_private())?, initiator }),
            Some(Outcome::Rejected) => Err(Failed::Rejected(copy(h.peer_private())?)),
            _ => {
                send_term(&sock, &h);
                Err(eproto().into())
            }
        }
    }
}

impl Exchange {
    /// Settles the exchange now with `why` unless it has settled: its owner, going away, is
    /// told at once instead of at the deadline. [`Exchange::finish`] still ends it.
    pub(crate) fn abort(&self, why: Error) {
        let mut p = self.progress.lock();
        // Settled, or finished already (`finish` took the socket and the outcome).
        if p.settled.is_some() || p.sock.is_none() {
            return;
        }
        p.settled = Some(Err(why));
        drop(p);
        self.on_settled.settled();
    }
}

impl Progress {
    /// Goes as far as the connection allows: false while waiting for the peer, true once done.
    /// A responder answers as soon as the request is in.
    fn advance(&mut self) -> Result<bool> {
        let (Some(sock), Some(h)) = (&self.sock, &mut self.h) else { return Err(EINVAL) };
        if !sock.connected()? {
            return Ok(false);
        }
        loop {
            if !advance(sock, h)? {
                return Ok(false);
            }
            if h.step() != Step::Decide {
                return Ok(true);
            }
            h.accept(self.local, &self.private).map_err(|_| EINVAL)?;
        }
    }
}

impl OnWake for Exchange {
    fn on_wake(&self) {
        let waker = self.waker.lock();
        let Some(w) = waker.as_ref() else { return };
        let mut p = self.progress.lock();
        if p.settled.is_some() {
            return;
        }
        p.settled = match p.advance() {
            Ok(true) => Some(Ok(())),
            Ok(false) => {
                let left = (self.deadline - Instant::now()).as_millis();
                if left > 0 {
                    // Called again when the peer acts, or at the deadline.
                    w.later(u32::try_from(left).unwrap_or(u32::MAX));
                    return;
                }
                Some(Err(ETIMEDOUT))
            }
            Err(e) => Some(Err(e)),
        };
        self.on_settled.settled();
    }
}

/// Waits on `cv` (releasing `guard` meanwhile) until signalled: ETIMEDOUT if `deadline` has
/// passed, EINTR on a signal (as the blocking calls before did: a restarted connect or accept
/// would start over, or find its request used up).
pub(crate) fn wait_until<T>(cv: &CondVar, guard: &mut MutexGuard<'_, T>, deadline: Instant<Monotonic>) -> Result {
    let left = (deadline - Instant::now()).as_millis();
    if left <= 0 {
        return Err(ETIMEDOUT);
    }
    match cv.wait_interruptible_timeout(guard, msecs_to_jiffies(u32::try_from(left).unwrap_or(u32::MAX))) {
        CondVarTimeoutResult::Signal { .. } => Err(EINTR),
        _ => Ok(()),
    }
}

/// Sends what `h` hands out and takes in what has arrived, until it waits for room or for more
/// (false) or is to decide or done (true). Never waits: an adopted connection's send buffer may
/// be full of what the application sent before, and a peer that reads nothing must not hold
/// the work (and the waiter behind it, which takes the work's lock).
pub(crate) fn advance(sock: &TcpSocket, h: &mut Handshake) -> Result<bool> {
    // The machine takes a frame in pieces: a small buffer on the stack does, with no allocation
    // on each wake.
    let mut buf = [0u8; 128];
    loop {
        match h.step() {
            Step::Send => match sock.send_nowait(h.transmit()) {
                Ok(n) if n > 0 => h.sent(n),
                Ok(_) => return Ok(false),
                Err(e) if e == EAGAIN => return Ok(false),
                Err(e) => return Err(e),
            },
            Step::Receive(n) => {
                let piece = &mut buf[..n.min(128)];
                match sock.recv_nowait(piece) {
                    Ok(got) => h.receive(&piece[..got]),
                    Err(e) if e == EAGAIN => return Ok(false),
                    Err(e) => return Err(e),
                };
            }
            Step::Decide | Step::Done => return Ok(true),
        }
    }
}

/// Sends what `h` hands out now (a reject frame, then the exchange is done) without waiting:
/// `iw_reject` runs in iw_cm's workqueue, where nothing may wait for the network. A reject is a
/// few hundred octets into a send buffer nothing has used yet; EAGAIN if even that does not
/// fit, and the connection closes without it.
pub(crate) fn send_out(sock: &TcpSocket, h: &mut Handshake) -> Result {
    while h.step() == Step::Send {
        match sock.send_nowait(h.transmit())? {
            0 => return Err(EAGAIN),
            n => h.sent(n),
        }
    }
    Ok(())
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
