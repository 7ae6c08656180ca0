//! An upgraded connection: a QP over the adopted TCP socket, and on it a byte stream made of
//! Sends into receive buffers posted ahead, with credit-based flow control (SOVIA's discipline):
//! a sender spends one credit per message and may send only while the peer has a receive posted
//! for it; the receiver gives credits back in the header of its own messages, or in a message of
//! credits alone once half its buffers are free again.
//!
//! Readiness for `poll`, `select` and `epoll`: the application's descriptor becomes the receive
//! CQ's eventfd. It is armed for solicited completions only, and only data and end-of-stream
//! messages are solicited, so it reads as readable when there is something to read (or an error),
//! and the library signals it itself while received data waits unread.

use libiwarp::{
    Access, CompletionQueue, ConnectOptions, Device, MemoryRegion, ProtectionDomain, QpInit, QueuePair, Role, SendOp, SendWr, WcOpcode, WcStatus,
    WorkCompletion,
};
use std::collections::VecDeque;
use std::io;
use std::mem::ManuallyDrop;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Octets of one buffer, send or receive: the largest message.
const SLOT: usize = 64 << 10;
/// Receive buffers posted, and so the credits each side starts with.
const RECV_SLOTS: u32 = 32;
/// Send buffers.
const SEND_SLOTS: usize = 32;
/// The message header: kind, three reserved octets, credits given back (little-endian u32).
const HDR: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Data = 0,
    Credit = 1,
    End = 2,
}

/// The process's device and protection domain, opened at the first upgrade and kept.
pub(crate) fn device() -> io::Result<(&'static Device, &'static ProtectionDomain<'static>)> {
    static DEV: OnceLock<Option<(&'static Device, &'static ProtectionDomain<'static>)>> = OnceLock::new();
    let made = DEV.get_or_init(|| {
        let dev: &'static Device = Box::leak(Box::new(Device::open().ok()?));
        let pd: &'static ProtectionDomain<'static> = Box::leak(Box::new(dev.alloc_pd().ok()?));
        Some((dev, pd))
    });
    made.ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))
}

/// What the verbs objects borrow, owned here and freed after them ([`Conn`]'s `Drop`).
#[derive(Clone, Copy)]
struct Owned {
    send_cq: *mut CompletionQueue<'static>,
    recv_cq: *mut CompletionQueue<'static>,
    send_buf: *mut [u8],
    recv_buf: *mut [u8],
}

/// The stream's state.
struct Stream {
    /// Receives the peer has posted for us and we have not used.
    credits: u32,
    /// Our receives posted again since we last told the peer.
    returnable: u32,
    free_send: Vec<usize>,
    /// Received data not read yet: (buffer, first unread octet, end).
    ready: VecDeque<(usize, usize, usize)>,
    /// The peer ended its stream (shutdown or close).
    eof: bool,
    /// The connection broke (an error completion: the peer went away or broke the protocol).
    broken: bool,
    /// We ended ours.
    ended: bool,
}

/// One upgraded connection.
pub(crate) struct Conn {
    qp: ManuallyDrop<QueuePair<'static>>,
    send_mr: ManuallyDrop<MemoryRegion<'static>>,
    recv_mr: ManuallyDrop<MemoryRegion<'static>>,
    owned: Owned,
    stream: Mutex<Stream>,
    /// The application's O_NONBLOCK (kept here: its descriptor is now the eventfd, whose own
    /// flag the library's waits need set).
    nonblocking: std::sync::atomic::AtomicBool,
    /// A descriptor of the TCP socket itself, for the calls that ask about it (getsockopt,
    /// getpeername, ...).
    pub(crate) shadow: OwnedFd,
    /// The process that made it: a child that inherits it through `fork` gets errors (the
    /// buffers it sees are copies the module does not write), and its close leaves the
    /// parent's connection alone.
    pid: u32,
}

// SAFETY: the verbs objects are used only under `stream`'s lock (every method takes it first),
// and the buffers they point into live as long as the `Conn`.
unsafe impl Send for Conn {}
// SAFETY: as above; shared references reach the QP and CQs only through the lock.
unsafe impl Sync for Conn {}

impl Conn {
    /// Upgrades the connected TCP socket `stream` (a duplicate of `app_fd`, handed to the
    /// module) to a QP, as `role`, then makes `app_fd` the receive CQ's eventfd.
    pub(crate) fn upgrade(stream: TcpStream, shadow: OwnedFd, role: Role, app_fd: RawFd, nonblocking: bool) -> io::Result<Conn> {
        let (dev, pd) = device()?;
        let send_cq = Box::into_raw(Box::new(dev.create_cq(SEND_SLOTS as u32 + 4)?));
        let recv_cq = match dev.create_cq(RECV_SLOTS + 4) {
            Ok(cq) => Box::into_raw(Box::new(cq)),
            Err(e) => {
                // SAFETY: made just above by Box::into_raw, not shared.
                drop(unsafe { Box::from_raw(send_cq) });
                return Err(e);
            }
        };
        let send_buf = Box::into_raw(vec![0u8; SLOT * SEND_SLOTS].into_boxed_slice());
        let recv_buf = Box::into_raw(vec![0u8; SLOT * RECV_SLOTS as usize].into_boxed_slice());
        let owned = Owned { send_cq, recv_cq, send_buf, recv_buf };
        // From here on `owned` frees them (Drop below) whatever fails.
        let guard = OwnedGuard(Some(owned));
        let o = guard.0.as_ref().expect("just made");
        // SAFETY: the boxes live until `Conn` drops, after the QP and regions that borrow them.
        let (scq, rcq, sbuf, rbuf) = unsafe { (&*o.send_cq, &*o.recv_cq, &mut *o.send_buf, &mut *o.recv_buf) };
        let send_mr = pd.register(sbuf, Access::LOCAL_WRITE)?;
        let recv_mr = pd.register(rbuf, Access::LOCAL_WRITE)?;
        let mut qp =
            dev.create_qp(&QpInit { pd, send_cq: scq, recv_cq: rcq, max_recv_wr: RECV_SLOTS, max_send_wr: SEND_SLOTS as u32 + 4, max_sge: 1, max_inline: 0 })?;
        for slot in 0..RECV_SLOTS as usize {
            qp.post_recv(slot as u64, &[recv_mr.sge(slot * SLOT..(slot + 1) * SLOT)])?;
        }
        let mut opts = ConnectOptions::new(role);
        if std::env::var("IWARP_SOCKETS_MPA").as_deref() == Ok("plain") {
            opts.markers = false;
            opts.crc = false;
        }
        qp.adopt(stream, &opts)?;
        let conn = Conn {
            qp: ManuallyDrop::new(qp),
            send_mr: ManuallyDrop::new(send_mr),
            recv_mr: ManuallyDrop::new(recv_mr),
            owned: guard.take(),
            stream: Mutex::new(Stream {
                credits: RECV_SLOTS,
                returnable: 0,
                free_send: (0..SEND_SLOTS).rev().collect(),
                ready: VecDeque::new(),
                eof: false,
                broken: false,
                ended: false,
            }),
            nonblocking: std::sync::atomic::AtomicBool::new(nonblocking),
            shadow,
            pid: std::process::id(),
        };
        {
            let mut st = conn.lock();
            if role == Role::Initiator {
                // A responder sends nothing before the initiator's first message (RFC 5044
                // 7.1.2): a credit message lets a server that speaks first do so.
                conn.message(&mut st, Kind::Credit, &[])?;
            }
        }
        // The application's descriptor becomes the eventfd; its close-on-exec flag is kept.
        let cloexec = crate::fcntl_real(app_fd, libc::F_GETFD, 0);
        // SAFETY: plain descriptor calls on descriptors this process owns.
        if unsafe { libc::dup2(conn.event_fd(), app_fd) } < 0 {
            return Err(io::Error::last_os_error());
        }
        if cloexec >= 0 {
            crate::fcntl_real(app_fd, libc::F_SETFD, cloexec as libc::c_ulong);
        }
        conn.settle(&mut conn.lock());
        Ok(conn)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stream> {
        self.stream.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send_cq(&self) -> &CompletionQueue<'static> {
        // SAFETY: see `Owned`.
        unsafe { &*self.owned.send_cq }
    }

    fn recv_cq(&self) -> &CompletionQueue<'static> {
        // SAFETY: see `Owned`.
        unsafe { &*self.owned.recv_cq }
    }

    fn event_fd(&self) -> RawFd {
        self.recv_cq().event_fd().as_raw_fd()
    }

    /// Whether this process made the connection (see `pid`).
    pub(crate) fn owned_here(&self) -> bool {
        self.pid == std::process::id()
    }

    /// The stream's lock, for the process that owns the connection; EIO in a forked child.
    fn lock_here(&self) -> io::Result<std::sync::MutexGuard<'_, Stream>> {
        if self.owned_here() {
            Ok(self.lock())
        } else {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
    }

    pub(crate) fn nonblocking(&self) -> bool {
        self.nonblocking.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes every completion there is.
    fn progress(&self, st: &mut Stream) {
        let mut wcs = [WorkCompletion::EMPTY; 16];
        loop {
            let n = self.send_cq().poll(&mut wcs);
            for wc in &wcs[..n] {
                if wc.status == WcStatus::Success {
                    st.free_send.push(wc.wr_id as usize);
                } else {
                    st.broken = true;
                }
            }
            let m = self.recv_cq().poll(&mut wcs);
            for wc in &wcs[..m] {
                self.received(st, wc);
            }
            if n == 0 && m == 0 {
                break;
            }
        }
    }

    fn received(&self, st: &mut Stream, wc: &WorkCompletion) {
        let slot = wc.wr_id as usize;
        if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv || (wc.byte_len as usize) < HDR {
            st.broken = true;
            return;
        }
        let buf = &self.recv_mr.as_slice()[slot * SLOT..];
        st.credits += u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        match buf[0] {
            k if k == Kind::Data as u8 && wc.byte_len as usize > HDR => st.ready.push_back((slot, slot * SLOT + HDR, slot * SLOT + wc.byte_len as usize)),
            k if k == Kind::End as u8 => {
                st.eof = true;
                self.repost(st, slot);
            }
            _ => self.repost(st, slot),
        }
    }

    fn repost(&self, st: &mut Stream, slot: usize) {
        if self.qp.post_recv(slot as u64, &[self.recv_mr.sge(slot * SLOT..(slot + 1) * SLOT)]).is_ok() {
            st.returnable += 1;
        } else {
            st.broken = true;
        }
    }

    /// Sends one message of `kind` with `payload` (at most a buffer), handing back our credits.
    /// The caller has checked for a free buffer and a credit.
    fn message(&self, st: &mut Stream, kind: Kind, payload: &[u8]) -> io::Result<()> {
        let slot = st.free_send.pop().ok_or_else(|| io::Error::from_raw_os_error(libc::EAGAIN))?;
        // SAFETY: the send buffer is ours; a slot is written only while it is free (not posted),
        // and the region's own reference to the buffer serves only for its address and length
        // (nothing reads or writes through it).
        let buf = unsafe { &mut (&mut *self.owned.send_buf)[slot * SLOT..(slot + 1) * SLOT] };
        buf[0] = kind as u8;
        buf[1..4].fill(0);
        buf[4..8].copy_from_slice(&st.returnable.to_le_bytes());
        buf[HDR..HDR + payload.len()].copy_from_slice(payload);
        let wr = SendWr {
            wr_id: slot as u64,
            op: SendOp::Send { solicited: kind != Kind::Credit },
            sge: &[self.send_mr.sge(slot * SLOT..slot * SLOT + HDR + payload.len())],
            signaled: true,
        };
        match self.qp.post_send(&wr) {
            Ok(()) => {
                st.credits -= 1;
                st.returnable = 0;
                Ok(())
            }
            Err(e) => {
                st.free_send.push(slot);
                st.broken = true;
                Err(e)
            }
        }
    }

    /// Gives credits back in a message of their own once half our buffers are free again, or
    /// when `starved` (we wait for credits ourselves, and the peer may be waiting for ours).
    fn give_back(&self, st: &mut Stream, starved: bool) {
        if (st.returnable >= RECV_SLOTS / 2 || (starved && st.returnable > 0)) && st.credits >= 1 && !st.free_send.is_empty() && !st.broken {
            let _ = self.message(st, Kind::Credit, &[]);
        }
    }

    /// Makes the eventfd say whether there is something to read: signalled while there is, else
    /// cleared and armed for the next solicited completion.
    fn settle(&self, st: &mut Stream) {
        loop {
            self.drain_event();
            if !st.ready.is_empty() || st.eof || st.broken {
                let one = 1u64;
                // SAFETY: writes 8 bytes from a live u64 to our eventfd.
                unsafe { libc::write(self.event_fd(), (&raw const one).cast(), 8) };
                return;
            }
            if self.recv_cq().arm(true).is_err() {
                st.broken = true;
                continue;
            }
            // A completion may have landed before the arm.
            let before = (st.ready.len(), st.eof, st.broken);
            self.progress(st);
            if (st.ready.len(), st.eof, st.broken) == before {
                return;
            }
        }
    }

    fn drain_event(&self) {
        drain(self.event_fd());
    }

    /// Reads into `out` (`peek`: leaves the data; `wait_all`: until `out` is full, the stream
    /// ends or it breaks). Ok(0) at the end of the stream.
    pub(crate) fn read(&self, out: &mut [u8], peek: bool, wait_all: bool, dont_wait: bool) -> io::Result<usize> {
        let mut st = self.lock_here()?;
        let mut got = 0;
        loop {
            self.progress(&mut st);
            got += self.take(&mut st, &mut out[got..], peek);
            let done = got == out.len() || (got > 0 && (!wait_all || peek)) || st.eof || st.broken;
            self.give_back(&mut st, false);
            if done || dont_wait || self.nonblocking() {
                let broken = st.broken && st.ready.is_empty() && !st.eof;
                self.settle(&mut st);
                return match got {
                    0 if broken => Err(io::Error::from_raw_os_error(libc::ECONNRESET)),
                    0 if !st.eof && !out.is_empty() => Err(io::Error::from_raw_os_error(libc::EAGAIN)),
                    n => Ok(n),
                };
            }
            self.settle(&mut st);
            drop(st);
            sleep_on(self.event_fd(), 100);
            st = self.lock();
        }
    }

    /// Copies received data into `out`; reposts the buffers emptied (unless peeking).
    fn take(&self, st: &mut Stream, out: &mut [u8], peek: bool) -> usize {
        let mut got = 0;
        let mut i = 0;
        while got < out.len() && i < st.ready.len() {
            let (slot, from, end) = st.ready[i];
            let n = (end - from).min(out.len() - got);
            out[got..got + n].copy_from_slice(&self.recv_mr.as_slice()[from..from + n]);
            got += n;
            if peek {
                i += 1;
            } else if from + n == end {
                st.ready.pop_front();
                self.repost(st, slot);
            } else {
                st.ready[0].1 += n;
            }
        }
        got
    }

    /// Writes `data`: all of it, unless non-blocking (then what fits now; EAGAIN if nothing).
    pub(crate) fn write(&self, data: &[u8], dont_wait: bool) -> io::Result<usize> {
        let mut st = self.lock_here()?;
        let mut sent = 0;
        loop {
            self.progress(&mut st);
            if st.ended || st.broken {
                self.settle(&mut st);
                return if sent > 0 { Ok(sent) } else { Err(io::Error::from_raw_os_error(libc::EPIPE)) };
            }
            while sent < data.len() && st.credits >= 2 && !st.free_send.is_empty() {
                let n = (data.len() - sent).min(SLOT - HDR);
                if let Err(e) = self.message(&mut st, Kind::Data, &data[sent..sent + n]) {
                    self.settle(&mut st);
                    return if sent > 0 { Ok(sent) } else { Err(e) };
                }
                sent += n;
            }
            if sent == data.len() || dont_wait || self.nonblocking() {
                self.settle(&mut st);
                return if sent > 0 || data.is_empty() { Ok(sent) } else { Err(io::Error::from_raw_os_error(libc::EAGAIN)) };
            }
            let starved = st.credits < 2;
            self.give_back(&mut st, starved);
            self.settle(&mut st);
            drop(st);
            // Send completions wake us; credits come on the receive CQ, polled again soon.
            let send_event = self.send_cq().event_fd().as_raw_fd();
            drain(send_event);
            let _ = self.send_cq().arm(false);
            sleep_on(send_event, 2);
            st = self.lock();
        }
    }

    /// Ends our stream (shutdown's SHUT_WR, or close): the peer reads EOF after the data.
    pub(crate) fn end(&self) -> io::Result<()> {
        let mut st = self.lock_here()?;
        if st.ended {
            return Ok(());
        }
        st.ended = true;
        // Waits (bounded) for a credit and a buffer: the end must follow the data, not replace it.
        for _ in 0..5000 {
            self.progress(&mut st);
            if st.broken {
                return Err(io::Error::from_raw_os_error(libc::EPIPE));
            }
            if st.credits >= 1 && !st.free_send.is_empty() {
                return self.message(&mut st, Kind::End, &[]);
            }
            drop(st);
            std::thread::sleep(Duration::from_millis(1));
            st = self.lock();
        }
        Err(io::Error::from_raw_os_error(libc::ETIMEDOUT))
    }

    /// Closes (when the last descriptor of the connection goes, in `Drop`): ends the stream,
    /// waits (bounded) until every message sent has completed, then disconnects.
    fn close(&self) {
        let _ = self.end();
        for _ in 0..5000 {
            let mut st = self.lock();
            self.progress(&mut st);
            if st.free_send.len() == SEND_SLOTS || st.broken {
                break;
            }
            drop(st);
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = self.qp.disconnect();
    }
}

/// Resets the (non-blocking) eventfd `fd`.
fn drain(fd: RawFd) {
    let mut n = 0u64;
    // SAFETY: reads 8 bytes into a live u64 (EAGAIN when the count is zero).
    unsafe { libc::read(fd, (&raw mut n).cast(), 8) };
}

/// Sleeps until the eventfd `fd` is signalled or `ms` milliseconds pass (what woke us is found
/// by polling the CQs again).
fn sleep_on(fd: RawFd, ms: i32) {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, ms) };
}

/// Frees `Owned` if the upgrade fails before a `Conn` takes it.
struct OwnedGuard(Option<Owned>);

impl OwnedGuard {
    fn take(mut self) -> Owned {
        self.0.take().expect("taken once")
    }
}

impl Drop for OwnedGuard {
    fn drop(&mut self) {
        if let Some(o) = self.0.take() {
            free(o);
        }
    }
}

fn free(o: Owned) {
    // SAFETY: each was made by Box::into_raw and nothing borrows them any more.
    unsafe {
        drop(Box::from_raw(o.send_cq));
        drop(Box::from_raw(o.recv_cq));
        drop(Box::from_raw(o.send_buf));
        drop(Box::from_raw(o.recv_buf));
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // A forked child's copy is never dropped (see `release`); this is the owner's.
        self.close();
        // SAFETY: dropped once, here, before what they borrow.
        unsafe {
            ManuallyDrop::drop(&mut self.qp);
            ManuallyDrop::drop(&mut self.send_mr);
            ManuallyDrop::drop(&mut self.recv_mr);
        }
        free(self.owned);
    }
}
