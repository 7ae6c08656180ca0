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
/// within `timeout_ms`.
pub(crate) fn establish(sock: TcpSocket, side: Side, local: &Local, private: &[u8], timeout_ms: u32) -> Result<Established, Failed> {
    let deadline = Instant::<Monotonic>::now() + Delta::from_millis(i64::from(timeout_ms));
    let initiator = matches!(side, Side::Initiator);
    let (sock, mut h) = match side {
        Side::Initiator => (sock, boxed(Handshake::initiator(*local, private).map_err(|_| EINVAL)?)?),
        Side::Responder => run(sock, boxed(Handshake::responder())?, deadline)?,
        Side::Accepting(h) => (sock, h),
    };
    if h.step() == Step::Decide {
        h.accept(*local, private).map_err(|_| EINVAL)?;
    }
    let (sock, h) = run(sock, h, deadline)?;
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

/// The exchange in progress: what its work and its waiter share.
#[pin_data]
struct Exchange {
    /// Taken out (and dropped) by the waiter once it stops waiting, which breaks the cycle the
    /// waker's reference makes. The work holds it while it runs. Taken before `progress`.
    #[pin]
    waker: Mutex<Option<Waker<Exchange>>>,
    #[pin]
    progress: Mutex<Progress>,
    /// Signalled when the exchange settles.
    #[pin]
    settled: CondVar,
}

struct Progress {
    /// Both `Some` until the waiter takes them back.
    sock: Option<TcpSocket>,
    h: Option<KBox<Handshake>>,
    /// The handshake is to decide or done (Ok), or the connection failed.
    settled: Option<Result>,
}

impl OnWake for Exchange {
    fn on_wake(&self) {
        let waker = self.waker.lock();
        if waker.is_none() {
            return;
        }
        let mut p = self.progress.lock();
        let Progress { sock: Some(sock), h: Some(h), settled: settled @ None } = &mut *p else { return };
        let r = match sock.connected() {
            Ok(false) => return,
            Ok(true) => advance(sock, h),
            Err(e) => Err(e),
        };
        *settled = match r {
            Ok(false) => return,
            Ok(true) => Some(Ok(())),
            Err(e) => Some(Err(e)),
        };
        self.settled.notify_all();
    }
}

/// Runs `h` on `sock` until it is to decide or done, by `deadline` (ETIMEDOUT), or a signal
/// (EINTR). The connection closes on failure.
fn run(sock: TcpSocket, h: KBox<Handshake>, deadline: Instant<Monotonic>) -> Result<(TcpSocket, KBox<Handshake>)> {
    let progress = Progress { sock: Some(sock), h: Some(h), settled: None };
    let ex = Arc::pin_init(
        pin_init!(Exchange {
            waker <- new_mutex!(None),
            progress <- new_mutex!(progress),
            settled <- new_condvar!("Exchange::settled"),
        }),
        GFP_KERNEL_ACCOUNT,
    )?;
    let outcome = {
        let mut slot = ex.waker.lock();
        let mut p = ex.progress.lock();
        let sock = p.sock.as_ref().ok_or(EINVAL)?;
        // SAFETY: the socket stays in `progress` until the waker is gone (below). Its first
        // run, at once, waits for both locks.
        *slot = Some(unsafe { Waker::install(sock, ex.clone())? });
        drop(slot);
        loop {
            if let Some(r) = p.settled.take() {
                break r;
            }
            if let Err(e) = wait_until(&ex.settled, &mut p, deadline) {
                // Settled meanwhile: that wins (an answer sent is not undone).
                break p.settled.take().unwrap_or(Err(e));
            }
        }
    };
    // Waits out a running work; the work's reference to the exchange goes with the waker.
    let waker = ex.waker.lock().take();
    drop(waker);
    outcome?;
    let mut p = ex.progress.lock();
    Ok((p.sock.take().ok_or(EINVAL)?, p.h.take().ok_or(EINVAL)?))
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

/// Sends what `h` hands out now, waiting for room (a reject frame, from the caller of REJECT,
/// then the exchange is done).
pub(crate) fn send_out(sock: &TcpSocket, h: &mut Handshake) -> Result {
    while h.step() == Step::Send {
        sock.send_all(h.transmit())?;
        h.sent(h.transmit().len());
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
