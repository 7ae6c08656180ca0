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
use crate::real::real;
use libc::{c_int, c_void};
use std::collections::VecDeque;
use std::io;
use std::mem::ManuallyDrop;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Octets of one buffer, send or receive: the largest message.
const SLOT: usize = 64 << 10;
/// Receive buffers posted, and so the credits each side starts with.
const RECV_SLOTS: u32 = 32;
/// Send buffers.
const SEND_SLOTS: usize = 32;
/// The size of the page holding [`Control`].
const PAGE: usize = 4096;
/// The message header: kind, three reserved octets, credits given back (little-endian u32).
const HDR: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Data = 0,
    Credit = 1,
    End = 2,
}

/// Whether iwarp.ko is here to upgrade to.
pub(crate) fn module_present() -> bool {
    Device::open().is_ok()
}

/// Memory mapped `MAP_SHARED`: a process forked from this one maps the same pages, the ones the
/// module places into, where pinned private pages would be copied for it at `fork` and go stale.
struct Shared {
    base: *mut u8,
    len: usize,
}

impl Shared {
    fn new(len: usize) -> io::Result<Shared> {
        // SAFETY: a fresh anonymous mapping, placed wherever the kernel likes.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0)
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Shared { base: base.cast(), len })
    }

    /// The whole mapping, for as long as it lives (the `Conn` that owns it drops it last).
    ///
    /// # Safety
    /// No other reference to the memory may be used while this one is.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes(&self) -> &'static mut [u8] {
        // SAFETY: mapped and `len` long until dropped; the caller keeps to the rest.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: mapped by `new` with this base and length, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// What every process sharing the connection through `fork` sees alike (the start of a
/// [`Shared`] page).
#[repr(C)]
struct Control {
    /// Who may use the connection, as one word so that both halves change together: the
    /// process that owns it (low half; 0 after a fork, until one of them uses it), and the
    /// count of forks that left it to a new pair of processes (high half, the epoch).
    owner: AtomicU64,
    /// The processes holding a copy they have not closed.
    holders: AtomicU32,
}

/// [`Control::owner`]'s halves: (epoch, owner).
fn owner_parts(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

fn owner_word(epoch: u32, owner: u32) -> u64 {
    (u64::from(epoch) << 32) | u64::from(owner)
}

/// What the verbs objects borrow, owned here and freed after them ([`Conn`]'s `Drop`). Each
/// connection has a device context of its own, shared with nothing but its copies in forked
/// processes: when the last process holding the context ends, however it ends, the kernel
/// closes the context and the connection with it.
struct Owned {
    dev: *mut Device,
    pd: *mut ProtectionDomain<'static>,
    send_cq: *mut CompletionQueue<'static>,
    recv_cq: *mut CompletionQueue<'static>,
    send_buf: Shared,
    /// Read through `recv_mr`; held so that it is unmapped only after the region goes.
    #[allow(dead_code)]
    recv_buf: Shared,
    control: Shared,
}

/// The stream's state.
pub(crate) struct Stream {
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
    /// The fork epoch this process's copy of the stream is from ([`Conn::claim`]).
    epoch: u32,
    /// A write would block (as `settle` last saw it).
    write_blocked: bool,
}

/// Writes a message's octets into the send buffer it is given, from the offset it is given into
/// the octets to send; returns how many it wrote (0: the source has ended).
pub(crate) type Fill<'a> = &'a mut dyn FnMut(usize, &mut [u8]) -> io::Result<usize>;

/// A connection held across a fork ([`Conn::fork_begin`]): its lock, released when this drops.
pub(crate) struct ForkHold<'a> {
    conn: &'a Conn,
    st: std::sync::MutexGuard<'a, Stream>,
    /// The owner word and our epoch before the fork began a new epoch, if it did.
    before: Option<(u64, u32)>,
}

impl ForkHold<'_> {
    /// The fork failed: there is no child holding a copy, and who may use the connection is as
    /// before (nobody but this process can have claimed it in the epoch begun for the fork).
    pub(crate) fn failed(&mut self) {
        let ctl = self.conn.control();
        ctl.holders.fetch_sub(1, Ordering::AcqRel);
        if let Some((word, epoch)) = self.before {
            let (e, _) = owner_parts(word);
            let _ = ctl.owner.compare_exchange(owner_word(e.wrapping_add(1), 0), word, Ordering::AcqRel, Ordering::Acquire);
            self.st.epoch = epoch;
        }
    }
}

/// What [`Conn::readiness`] found.
pub(crate) struct Readiness {
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// Credits are there but every send buffer is in flight: their completions wake nobody, so
    /// a poller looks again soon.
    pub(crate) short_of_buffers: bool,
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
    /// Counts of what edge-triggered epoll reports anew ([`Events`]).
    pub(crate) events: Events,
}

/// Counts of the events that make an edge for `EPOLLET`: a write that could not go whole (the
/// program then waits for writability again), and a message or error that arrived.
#[derive(Default)]
pub(crate) struct Events {
    pub(crate) write_blocked: AtomicU32,
    pub(crate) arrived: AtomicU32,
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
        let dev = Box::into_raw(Box::new(Device::open()?));
        let mut guard = OwnedGuard { dev, pd: None, cqs: Vec::new(), bufs: None };
        // SAFETY: lives until `free`, after everything made through it.
        let d: &'static Device = unsafe { &*dev };
        let pd = Box::into_raw(Box::new(d.alloc_pd()?));
        guard.pd = Some(pd);
        let send_cq = Box::into_raw(Box::new(d.create_cq(SEND_SLOTS as u32 + 4)?));
        guard.cqs.push(send_cq);
        let recv_cq = Box::into_raw(Box::new(d.create_cq(RECV_SLOTS + 4)?));
        guard.cqs.push(recv_cq);
        guard.bufs = Some((Shared::new(SLOT * SEND_SLOTS)?, Shared::new(SLOT * RECV_SLOTS as usize)?, Shared::new(PAGE)?));
        // SAFETY: as `dev`; nothing else refers to these yet.
        let (pd, scq, rcq) = unsafe { (&*pd, &*send_cq, &*recv_cq) };
        let (sbuf, rbuf, control) = guard.bufs.as_ref().expect("just made");
        // SAFETY: the regions' references serve only for their addresses and lengths (reads and
        // writes go through `as_slice` and `send_slot`, never two at once).
        let send_mr = pd.register(unsafe { sbuf.bytes() }, Access::LOCAL_WRITE)?;
        // SAFETY: as above.
        let recv_mr = pd.register(unsafe { rbuf.bytes() }, Access::LOCAL_WRITE)?;
        // SAFETY: a fresh page, zeroed, aligned for `Control`, which only atomics touch.
        let ctl = unsafe { &*(control.base as *const Control) };
        ctl.owner.store(owner_word(0, std::process::id()), Ordering::Relaxed);
        ctl.holders.store(1, Ordering::Relaxed);
        let mut qp =
            d.create_qp(&QpInit { pd, send_cq: scq, recv_cq: rcq, max_recv_wr: RECV_SLOTS, max_send_wr: SEND_SLOTS as u32 + 4, max_sge: 1, max_inline: 0 })?;
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
                epoch: 0,
                write_blocked: false,
            }),
            nonblocking: std::sync::atomic::AtomicBool::new(nonblocking),
            shadow,
            events: Events::default(),
        };
        {
            let mut st = conn.lock();
            if role == Role::Initiator {
                // A responder sends nothing before the initiator's first message (RFC 5044
                // 7.1.2): a credit message lets a server that speaks first do so.
                conn.control_message(&mut st, Kind::Credit)?;
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

    fn control(&self) -> &Control {
        // SAFETY: the control page lives as long as `self`, and only atomics touch it.
        unsafe { &*(self.owned.control.base as *const Control) }
    }

    /// Whether this process may use the connection: it owns it, or it is the first to use it of
    /// the processes the latest fork left it to, and so owns it from now on. A copy from before
    /// that fork (`st.epoch` behind) never may: its state is out of date.
    fn claim(&self, st: &Stream) -> bool {
        let (ctl, me) = (self.control(), std::process::id());
        let mut word = ctl.owner.load(Ordering::Acquire);
        loop {
            match owner_parts(word) {
                (_, owner) if owner == me => return true,
                (epoch, 0) if epoch == st.epoch => match ctl.owner.compare_exchange(word, owner_word(epoch, me), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return true,
                    Err(now) => word = now,
                },
                _ => return false,
            }
        }
    }

    /// The stream's lock, for the process that owns the connection; EIO in the others.
    fn lock_here(&self) -> io::Result<std::sync::MutexGuard<'_, Stream>> {
        let st = self.lock();
        if self.claim(&st) {
            Ok(st)
        } else {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
    }

    /// Readies the connection for a fork: the stream's lock, for the caller to hold across it
    /// so that both processes copy a settled stream, and the child counted as a holder. If this
    /// process may use the connection, a new epoch begins in which it and the child may, and
    /// whichever does first owns it.
    pub(crate) fn fork_begin(&self) -> ForkHold<'_> {
        let mut st = self.lock();
        let (ctl, me) = (self.control(), std::process::id());
        ctl.holders.fetch_add(1, Ordering::AcqRel);
        let mut word = ctl.owner.load(Ordering::Acquire);
        let before = loop {
            let (epoch, owner) = owner_parts(word);
            if owner != me && !(owner == 0 && epoch == st.epoch) {
                break None;
            }
            match ctl.owner.compare_exchange(word, owner_word(epoch.wrapping_add(1), 0), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break Some((word, st.epoch)),
                Err(now) => word = now,
            }
        };
        if before.is_some() {
            st.epoch = st.epoch.wrapping_add(1);
        }
        ForkHold { conn: self, st, before }
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
        self.events.arrived.fetch_add(1, Ordering::Relaxed);
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
    /// Sends a message of `kind` with no payload (credits, end of stream).
    fn control_message(&self, st: &mut Stream, kind: Kind) -> io::Result<()> {
        self.message_with(st, kind, 0, &mut |_| Ok(0)).map(drop)
    }

    /// Sends one message of `kind` whose payload, at most `len` octets, `fill` writes into the
    /// send buffer, returning how many; a data message `fill` leaves empty is not sent.
    /// Returns the payload's length.
    fn message_with(&self, st: &mut Stream, kind: Kind, len: usize, fill: &mut dyn FnMut(&mut [u8]) -> io::Result<usize>) -> io::Result<usize> {
        let slot = st.free_send.pop().ok_or_else(|| io::Error::from_raw_os_error(libc::EAGAIN))?;
        // SAFETY: a slot is written only while it is free (not posted), under the stream's lock;
        // the region's own reference serves only for its address and length.
        let buf = unsafe { &mut self.owned.send_buf.bytes()[slot * SLOT..(slot + 1) * SLOT] };
        buf[0] = kind as u8;
        buf[1..4].fill(0);
        buf[4..8].copy_from_slice(&st.returnable.to_le_bytes());
        let n = match fill(&mut buf[HDR..HDR + len]) {
            Ok(0) if kind == Kind::Data => {
                st.free_send.push(slot);
                return Ok(0);
            }
            Ok(n) => n.min(len),
            Err(e) => {
                st.free_send.push(slot);
                return Err(e);
            }
        };
        let wr = SendWr {
            wr_id: slot as u64,
            op: SendOp::Send { solicited: kind != Kind::Credit },
            sge: &[self.send_mr.sge(slot * SLOT..slot * SLOT + HDR + n)],
            signaled: true,
        };
        match self.qp.post_send(&wr) {
            Ok(()) => {
                st.credits -= 1;
                st.returnable = 0;
                Ok(n)
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
            let _ = self.control_message(st, Kind::Credit);
        }
    }

    /// Makes the eventfd say whether there is something to read: signalled while there is, else
    /// cleared and armed for the next solicited completion.
    fn settle(&self, st: &mut Stream) {
        // A poller waiting for writability sleeps on the eventfd: if another thread took the
        // credit that unblocks it, the eventfd must still wake it (its readability check then
        // finds no data, and its writability check the credit).
        let unblocked = st.write_blocked && Self::writable(st);
        st.write_blocked = !Self::writable(st);
        loop {
            self.drain_event();
            if !st.ready.is_empty() || st.eof || st.broken || unblocked {
                signal(self.event_fd());
                return;
            }
            // While a write would block, any completion wakes: the credit that unblocks it comes
            // in a message that is not solicited, and a poller may wait for it (`readiness`).
            if self.recv_cq().arm(Self::writable(st)).is_err() {
                st.broken = true;
                continue;
            }
            // A completion may have landed before the arm.
            let before = (st.ready.len(), st.eof, st.broken, st.credits);
            self.progress(st);
            if (st.ready.len(), st.eof, st.broken, st.credits) == before {
                return;
            }
        }
    }

    /// Whether a write would go out now, or fail at once (EPIPE, on a broken or ended stream).
    fn writable(st: &Stream) -> bool {
        st.broken || st.ended || (st.credits >= 2 && !st.free_send.is_empty())
    }

    /// What `poll` should say of the descriptor now. Readability is exact: a wake-up that
    /// brought no data (a credit) is taken, and the descriptor cleared again. While a write
    /// would block, the descriptor is left armed for every completion ([`Conn::settle`]), so
    /// that a credit coming back wakes a poller, which asks again and finds it writable.
    pub(crate) fn readiness(&self) -> Readiness {
        let Ok(mut st) = self.lock_here() else {
            // Another process's connection: reads and writes fail at once, with EIO.
            return Readiness { readable: true, writable: true, short_of_buffers: false };
        };
        self.progress(&mut st);
        // As a blocked writer would (`write`).
        let starved = st.credits < 2;
        self.give_back(&mut st, starved);
        self.settle(&mut st);
        Readiness {
            readable: !st.ready.is_empty() || st.eof || st.broken,
            writable: Self::writable(&st),
            short_of_buffers: st.credits >= 2 && st.free_send.is_empty(),
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
        let mut until = Deadline::new(self, libc::SO_RCVTIMEO);
        loop {
            self.progress(&mut st);
            got += self.take(&mut st, &mut out[got..], peek);
            let done = got == out.len() || (got > 0 && (!wait_all || peek)) || st.eof || st.broken;
            self.give_back(&mut st, false);
            if done || dont_wait || self.nonblocking() || until.passed() {
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
            sleep_on(self.event_fd(), until.wait_ms(100));
            // A fork while we slept may have left the connection to another process.
            st = match self.lock_here() {
                Ok(st) => st,
                Err(e) => return if got > 0 { Ok(got) } else { Err(e) },
            };
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
        self.write_from(data.len(), dont_wait, &mut |at, out| {
            out.copy_from_slice(&data[at..at + out.len()]);
            Ok(out.len())
        })
    }

    /// Writes `len` octets that `fill` gives (from its offset into them, as many as fit in its
    /// buffer; fewer, or 0, where its source ends), straight into the send buffers: each message
    /// carries as much as it holds, however the octets are split in the caller's vectors or
    /// file. All of it, unless non-blocking (then what fits now; EAGAIN if nothing).
    pub(crate) fn write_from(&self, len: usize, dont_wait: bool, fill: Fill<'_>) -> io::Result<usize> {
        let mut st = self.lock_here()?;
        let mut sent = 0;
        let mut until = Deadline::new(self, libc::SO_SNDTIMEO);
        loop {
            self.progress(&mut st);
            if st.ended || st.broken {
                self.settle(&mut st);
                return if sent > 0 { Ok(sent) } else { Err(io::Error::from_raw_os_error(libc::EPIPE)) };
            }
            let mut source_ended = false;
            while sent < len && st.credits >= 2 && !st.free_send.is_empty() {
                let n = (len - sent).min(SLOT - HDR);
                match self.message_with(&mut st, Kind::Data, n, &mut |out| fill(sent, out)) {
                    Ok(0) => {
                        source_ended = true;
                        break;
                    }
                    Ok(k) => sent += k,
                    Err(e) => {
                        self.settle(&mut st);
                        return if sent > 0 { Ok(sent) } else { Err(e) };
                    }
                }
            }
            // Out of credits, we hand ours back now: the peer may be waiting for them to send
            // the credits we wait for.
            let starved = st.credits < 2;
            self.give_back(&mut st, starved);
            if sent == len || source_ended || dont_wait || self.nonblocking() || until.passed() {
                if sent < len && !source_ended {
                    self.events.write_blocked.fetch_add(1, Ordering::Relaxed);
                }
                self.settle(&mut st);
                return if sent > 0 || len == 0 || source_ended { Ok(sent) } else { Err(io::Error::from_raw_os_error(libc::EAGAIN)) };
            }
            self.settle(&mut st);
            drop(st);
            // Send completions wake us; credits come on the receive CQ, polled again soon.
            let send_event = self.send_cq().event_fd().as_raw_fd();
            drain(send_event);
            let _ = self.send_cq().arm(false);
            sleep_on(send_event, until.wait_ms(2));
            st = match self.lock_here() {
                Ok(st) => st,
                Err(e) => return if sent > 0 { Ok(sent) } else { Err(e) },
            };
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
                return self.control_message(&mut st, Kind::End);
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

/// When a blocking call gives up: the TCP socket's `SO_RCVTIMEO` or `SO_SNDTIMEO`, read when the
/// call first has to wait (none: never). Then it returns what it has done, or EAGAIN.
struct Deadline<'a> {
    conn: &'a Conn,
    opt: c_int,
    at: Option<Option<Instant>>,
}

impl<'a> Deadline<'a> {
    fn new(conn: &'a Conn, opt: c_int) -> Deadline<'a> {
        Deadline { conn, opt, at: None }
    }

    fn passed(&mut self) -> bool {
        let conn = self.conn;
        let opt = self.opt;
        let at = *self.at.get_or_insert_with(|| {
            let mut tv = libc::timeval { tv_sec: 0, tv_usec: 0 };
            let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
            // SAFETY: a timeval and its length, both live, for the C library's getsockopt.
            let rc = unsafe {
                real!(getsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut libc::socklen_t) -> c_int)(
                    conn.shadow.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&raw mut tv).cast(),
                    &mut len,
                )
            };
            let wait = Duration::new(tv.tv_sec.max(0) as u64, tv.tv_usec.max(0) as u32 * 1000);
            (rc == 0 && !wait.is_zero()).then(|| Instant::now() + wait)
        });
        at.is_some_and(|at| Instant::now() >= at)
    }

    /// How long to sleep before looking again: `most` milliseconds, or less if the deadline
    /// comes first.
    fn wait_ms(&mut self, most: i32) -> i32 {
        match self.at {
            Some(Some(at)) => at.saturating_duration_since(Instant::now()).as_millis().min(most as u128) as i32,
            _ => most,
        }
    }
}

// The eventfd calls below go to the C library itself, not through this library's own `read`,
// `write` and `poll`, which would take the table of connections under the stream's lock (and
// `fork` takes them in the other order).

/// Resets the (non-blocking) eventfd `fd`.
fn drain(fd: RawFd) {
    let mut n = 0u64;
    // SAFETY: reads 8 bytes into a live u64 (EAGAIN when the count is zero).
    unsafe { real!(read: unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize)(fd, (&raw mut n).cast(), 8) };
}

/// Signals the eventfd `fd`.
fn signal(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64.
    unsafe { real!(write: unsafe extern "C" fn(c_int, *const c_void, usize) -> isize)(fd, (&raw const one).cast(), 8) };
}

/// Sleeps until the eventfd `fd` is signalled or `ms` milliseconds pass (what woke us is found
/// by polling the CQs again).
fn sleep_on(fd: RawFd, ms: i32) {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { real!(poll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int)(&mut pfd, 1, ms) };
}

/// Frees what the upgrade has made if it fails before a `Conn` takes it (what was made after
/// this, the regions and the QP, is dropped before it).
struct OwnedGuard {
    dev: *mut Device,
    pd: Option<*mut ProtectionDomain<'static>>,
    cqs: Vec<*mut CompletionQueue<'static>>,
    bufs: Option<(Shared, Shared, Shared)>,
}

impl OwnedGuard {
    fn take(mut self) -> Owned {
        let (send_buf, recv_buf, control) = self.bufs.take().expect("made before a Conn");
        let [send_cq, recv_cq] = self.cqs[..] else { unreachable!("both CQs are made before a Conn") };
        let owned = Owned { dev: self.dev, pd: self.pd.take().expect("made before a Conn"), send_cq, recv_cq, send_buf, recv_buf, control };
        self.cqs.clear();
        self.dev = std::ptr::null_mut();
        owned
    }
}

impl Drop for OwnedGuard {
    fn drop(&mut self) {
        // SAFETY: each was made by Box::into_raw, is not taken, and nothing borrows it any more.
        unsafe {
            for cq in self.cqs.drain(..) {
                drop(Box::from_raw(cq));
            }
            if let Some(pd) = self.pd.take() {
                drop(Box::from_raw(pd));
            }
            if !self.dev.is_null() {
                drop(Box::from_raw(self.dev));
            }
        }
    }
}

impl Drop for Conn {
    /// The last descriptor of the connection in this process is gone. The process that owns the
    /// connection (or the last one holding it, if none has used it since a fork) ends the
    /// stream and disconnects; any other leaves it to its owner ([`Device::detach`]). Then its
    /// objects, rings and mappings go.
    fn drop(&mut self) {
        let ctl = self.control();
        let last = ctl.holders.fetch_sub(1, Ordering::AcqRel) == 1;
        let me = std::process::id();
        let mine = owner_parts(ctl.owner.load(Ordering::Acquire)).1 == me || (last && self.claim(&self.lock()));
        if mine {
            self.close();
        } else {
            // SAFETY: see `Owned`.
            let dev = unsafe { &*self.owned.dev };
            if let Err(e) = dev.detach() {
                // Destroying would reach the owner's objects: leave them, rings and all.
                eprintln!("iwarp-preload: leaving a connection to the process that owns it failed ({e}); its objects are left mapped");
                return;
            }
        }
        // SAFETY: dropped once, here, before what they borrow, which goes after them in turn;
        // each was made by Box::into_raw.
        unsafe {
            ManuallyDrop::drop(&mut self.qp);
            ManuallyDrop::drop(&mut self.send_mr);
            ManuallyDrop::drop(&mut self.recv_mr);
            drop(Box::from_raw(self.owned.send_cq));
            drop(Box::from_raw(self.owned.recv_cq));
            drop(Box::from_raw(self.owned.pd));
            drop(Box::from_raw(self.owned.dev));
        }
    }
}
