//! An upgraded connection: a QP over the adopted TCP socket, and on it a byte stream written by
//! RDMA Write into a ring the reader registered and advertised, each Write followed by Immediate
//! Data saying how many octets it placed (RFC 7306; rsockets' design). Flow control is in two
//! kinds of credit (SOVIA's discipline): octets of the peer's ring, which it gives back as it
//! reads, and receives the peer has posted, which each Immediate Data uses one of and which it
//! posts again at once. Both come back in every message of the peer's, or in a message of
//! credits alone once half of either is used (delayed credit updates).
//!
//! Small writes are copied into a send ring whose offsets mirror the peer's ring; large ones go
//! by RDMA Write straight from the application's buffer, registered for the call (zero copy).
//! Small writes made while a data message is in flight are coalesced: they wait in the send
//! ring, and go as one message when it completes (TCP took it), sent by whichever call of the
//! library's sees that first, or by its [`crate::flusher`] thread.
//!
//! A connection works from every process that holds it, as a TCP socket does: its rings, its
//! stream's state and the lock that guards them are in memory the processes share (a fork
//! copies only the mappings), and the QP's ring tails travel with the state.
//!
//! Readiness for `poll`, `select` and `epoll`: the application's descriptor becomes an epoll
//! instance watching the receive CQ's eventfd (so it polls as the eventfd does, and a read or
//! write past this library fails instead of moving the counter). The eventfd is armed for
//! solicited completions only, and only data and end-of-stream messages are solicited, so it
//! reads as readable when there is something to read (or an error), and the library signals it
//! itself while received data waits unread.

use crate::real::real;
use crate::say;
use crate::shared::{Holders, Shared, SharedGuard, SharedMutex};
use crate::signals;
use libc::{c_int, c_void};
use libiwarp::{
    sockets_wire::{Hello, Imm, Kind},
    Access, CompletionQueue, ConnectOptions, Device, MemoryRegion, ProtectionDomain, QpInit, QueuePair, RecvWr, Remote, Role, SendOp, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion,
};
use std::io;
use std::mem::ManuallyDrop;
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Octets of the receive ring (the window the peer may write ahead of our reads), and of the
/// send ring, whose offsets mirror the peer's.
const RING: usize = 2 << 20;
/// The most one message carries, so that a long write is pipelined.
const MOST: usize = 256 << 10;
/// Receives posted, and so the message credits each side starts with.
const RECVS: u32 = 256;
/// Octets of each receive's buffer: enough for [`Hello`], the only Send.
const RECV_BUF: usize = 64;
/// Send queue entries.
const SQ: u32 = 64;
/// The size of the page holding [`Control`].
const PAGE: usize = 4096;
/// Writes of at least this many octets go by zero copy (`IWARP_SOCKETS_ZCOPY`: another size in
/// octets, or `off`).
const ZERO_COPY_FROM: usize = 64 << 10;
// What [`Imm`] carries must fit its fields: ring octets in 24 bits, receives in 12.
const _: () = assert!(RING < 1 << 24 && MOST <= RING && RECVS < 1 << 12);

/// The size from which writes go by zero copy, if they do.
fn zero_copy_from() -> Option<usize> {
    static FROM: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *FROM.get_or_init(|| match std::env::var("IWARP_SOCKETS_ZCOPY") {
        Ok(v) if v == "off" => None,
        Ok(v) => Some(v.parse().unwrap_or(ZERO_COPY_FROM)),
        Err(_) => Some(ZERO_COPY_FROM),
    })
}

/// Whether iwarp.ko is here to upgrade to.
pub(crate) fn module_present() -> bool {
    Device::open().is_ok()
}

/// `CAP_IPC_LOCK`'s bit in a capability set (`linux/capability.h`).
const CAP_IPC_LOCK: u32 = 14;

/// Octets an upgraded connection pins: its send and receive rings and its receive buffers.
const PINNED: u64 = (2 * RING + RECV_BUF * RECVS as usize) as u64;

/// Whether this process may pin one more connection's buffers: the module charges them to
/// RLIMIT_MEMLOCK, unless the process has CAP_IPC_LOCK. Asked before the upgrade question is
/// asked or answered yes, so that a process at its limit stays plain TCP rather than failing
/// the upgrade after both sides agreed to it.
pub(crate) fn room_to_pin() -> bool {
    // SAFETY: rlimit is plain data, filled by getrlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return true;
    }
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return true };
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let ipc_lock = field("CapEff:").and_then(|c| u64::from_str_radix(c, 16).ok()).is_some_and(|caps| caps & 1 << CAP_IPC_LOCK != 0);
    let pinned = field("VmPin:").and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap_or(0) * 1024;
    ipc_lock || pinned + PINNED <= lim.rlim_cur
}

/// What every process holding the connection shares (a [`Shared`] page of its own).
#[repr(C)]
struct Control {
    stream: SharedMutex<Stream>,
    holders: Holders,
    /// The application's O_NONBLOCK, which is the open file's and so shared across a fork as
    /// TCP's is (kept here: its descriptor now stands for the stream, and the eventfd behind
    /// it keeps the flag the library's waits need).
    nonblocking: AtomicBool,
    /// Counts of what edge-triggered epoll reports anew, in whichever process it happened.
    events: Events,
    /// Octets wait in the send ring ([`Stream::pending`] as the last holder of the lock left
    /// it): the flusher looks under the lock only then, so that a process rarely exits with
    /// its flusher holding the lock (which breaks the connection for the others).
    waiting: AtomicBool,
}

const _: () = assert!(std::mem::size_of::<Control>() <= PAGE);

/// What the verbs objects borrow, owned here and freed after them ([`Conn`]'s `Drop`). Each
/// connection has a device context of its own, shared with nothing but its copies in forked
/// processes: when the last process holding the context ends, however it ends, the kernel
/// closes the context and the connection with it.
struct Owned {
    dev: *mut Device,
    pd: *mut ProtectionDomain<'static>,
    send_cq: *mut CompletionQueue<'static>,
    recv_cq: *mut CompletionQueue<'static>,
    send_ring: Shared,
    /// Read through `ring_mr`; held so that it is unmapped only after the region goes.
    #[allow(dead_code)]
    recv_ring: Shared,
    /// The receives' buffers, read through `recvs_mr`; held likewise.
    #[allow(dead_code)]
    recv_bufs: Shared,
    control: Shared,
}

/// The stream's state, in the [`Control`] page.
pub(crate) struct Stream {
    /// The peer's ring and its length, from its [`Hello`].
    peer: Option<(Remote, usize)>,
    /// Receives the peer has posted for us and we have not used.
    credits: u32,
    /// Our receives posted again since we last told the peer.
    returnable: u32,
    /// Octets written into the peer's ring, in all (a position: modulo a ring's length, the
    /// offset in it, the peer's and our send ring's alike).
    tx_head: u64,
    /// Of them, the octets the peer has read, so its ring holds the rest.
    peer_freed: u64,
    /// Of them, the octets whose requests have completed, so our send ring holds the rest.
    send_done: u64,
    /// Send queue entries not in use.
    sq_free: u32,
    /// Octets the peer has written into our ring, in all, and of them the octets read.
    rx_head: u64,
    rx_tail: u64,
    /// Octets read since we last told the peer.
    unreported: u32,
    /// Octets written into our send ring at `tx_head` and not sent yet: small writes coalesced
    /// while a data message is in flight ([`Conn::flush`]).
    pending: usize,
    /// Calls that wrote, and the data messages they made (logged at close: what coalescing
    /// saved).
    writes: u64,
    messages: u64,
    /// The peer ended its stream (shutdown or close).
    eof: bool,
    /// The connection broke (an error completion: the peer went away or broke the protocol).
    broken: bool,
    /// The peer broke the protocol: nothing it sent after is taken. What follows a lie is no
    /// longer its stream in order (a Write after one lands where the lie said nothing).
    refused: bool,
    /// We ended ours.
    ended: bool,
    /// Our end is still to be sent: it waits for the data before it and a credit of the
    /// peer's, and goes with the first look that finds them ([`Conn::progress`]).
    end_waits: bool,
    /// The application shut reading down (`shutdown(SHUT_RD)`): reads return what is buffered,
    /// then 0 at once, as TCP's do.
    read_shut: bool,
    /// SO_ERROR has reported the break (it reports it once, as TCP's does).
    error_reported: bool,
    /// Where the QP's next send and receive entries go, as the last holder of the lock left
    /// them ([`Locked`]).
    tails: (u32, u32),
    /// A write would block (as `settle` last saw it).
    write_blocked: bool,
}

impl Stream {
    /// The connection broke, for `why` (logged the first time before the peer's end of stream,
    /// with IWARP_SOCKETS_LOG: an application only sees ECONNRESET or EPIPE).
    fn break_because(&mut self, why: std::fmt::Arguments<'_>) {
        if !self.broken && !self.eof && crate::logging() {
            say!("connection broken: {why}");
        }
        self.broken = true;
    }

    /// A stream just set up: our Hello (a Send) sent, the peer's not seen yet.
    fn new() -> Stream {
        Stream {
            peer: None,
            credits: RECVS - 1,
            returnable: 0,
            tx_head: 0,
            peer_freed: 0,
            send_done: 0,
            sq_free: SQ - 1,
            rx_head: 0,
            rx_tail: 0,
            unreported: 0,
            pending: 0,
            writes: 0,
            messages: 0,
            eof: false,
            broken: false,
            refused: false,
            ended: false,
            end_waits: false,
            read_shut: false,
            error_reported: false,
            tails: (0, 0),
            write_blocked: false,
        }
    }

    /// Takes the peer's Immediate Data in: whether it tells the truth. It may not say that its
    /// Write placed nothing, or more than we have not read, or wrapped at our ring's end, or
    /// came after its end; nor hand back more receives than we posted, or free more of its
    /// ring than we wrote.
    fn take_imm(&mut self, imm: Imm) -> bool {
        // The credits first, taken only with the rest: a message whose credits lie must not
        // place its data or end the stream before it is found out.
        let credits = self.credits + imm.recvs;
        let peer_freed = self.peer_freed + u64::from(imm.freed);
        if credits > RECVS || peer_freed > self.tx_head {
            return false;
        }
        let well_formed = match imm.kind {
            Kind::Data => self.placed(imm.len as usize),
            Kind::End => {
                self.eof = true;
                true
            }
            Kind::Credit => true,
        };
        if well_formed {
            (self.credits, self.peer_freed) = (credits, peer_freed);
        }
        well_formed
    }

    /// The peer's Write of `len` octets is in our ring, at the head: whether that fits what it
    /// may write (no wrap within a message, nothing over what we have not read).
    fn placed(&mut self, len: usize) -> bool {
        let at = (self.rx_head % RING as u64) as usize;
        let fits = len > 0 && at + len <= RING && self.rx_head + len as u64 - self.rx_tail <= RING as u64 && !self.eof;
        if fits {
            self.rx_head += len as u64;
        }
        fits
    }
}

/// Writes a message's octets into the send buffer it is given, from the offset it is given into
/// the octets to send; returns how many it wrote (0: the source has ended).
pub(crate) type Fill<'a> = &'a mut dyn FnMut(usize, &mut [u8]) -> io::Result<usize>;

/// Sends one message of a write ([`Conn::writing`]) of at most what is left, given the octets
/// sent so far; says how many it sent and whether the source ended.
type Message<'a> = &'a mut dyn FnMut(&Conn, &mut Stream, usize) -> io::Result<(usize, bool)>;

/// The stream, locked by this thread of one of the processes holding the connection. The QP's
/// ring tails (in each process's copy of it) resume where the last holder of the lock left them,
/// and are left in the stream again at unlock.
struct Locked<'a> {
    conn: &'a Conn,
    guard: SharedGuard<'a, Stream>,
}

impl Deref for Locked<'_> {
    type Target = Stream;
    fn deref(&self) -> &Stream {
        &self.guard
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Stream {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.guard.tails = self.conn.qp.tails();
        self.conn.control().waiting.store(self.guard.pending > 0 || self.guard.end_waits, Ordering::Release);
    }
}

/// What [`Conn::readiness`] found.
pub(crate) struct Readiness {
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// The peer has room but our send ring or queue is full: the completions that free them
    /// wake nobody, so a poller looks again soon.
    pub(crate) short_of_buffers: bool,
}

/// One upgraded connection.
pub(crate) struct Conn {
    qp: ManuallyDrop<QueuePair<'static>>,
    send_mr: ManuallyDrop<MemoryRegion<'static>>,
    ring_mr: ManuallyDrop<MemoryRegion<'static>>,
    recvs_mr: ManuallyDrop<MemoryRegion<'static>>,
    owned: Owned,
    /// The module sends payload by reference (no markers, no CRCs): a write from the
    /// application's own buffer is zero copy. With either, it copies to frame, from our send
    /// ring as readily as from that buffer, which would only add the registration.
    by_reference: bool,
    /// A descriptor of the TCP socket itself, for the calls that ask about it (getsockopt,
    /// getpeername, ...).
    pub(crate) shadow: OwnedFd,
    /// This connection, for the flusher to find it ([`Conn::into_shared`]).
    me: std::sync::Weak<Conn>,
    /// The flusher watches it: set by the write that makes octets wait, cleared by the flusher
    /// when none do.
    watched: std::sync::atomic::AtomicBool,
}

/// Counts of the events that make an edge for `EPOLLET`: a write that could not go whole (the
/// program then waits for writability again), and a message or error that arrived.
#[repr(C)]
pub(crate) struct Events {
    pub(crate) write_blocked: AtomicU32,
    pub(crate) arrived: AtomicU32,
}

// SAFETY: the verbs objects are used only under the stream's lock (every method takes it
// first), and the buffers they point into live as long as the `Conn`.
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
        let send_cq = Box::into_raw(Box::new(d.create_cq(2 * SQ + 4)?));
        guard.cqs.push(send_cq);
        let recv_cq = Box::into_raw(Box::new(d.create_cq(RECVS + 4)?));
        guard.cqs.push(recv_cq);
        guard.bufs = Some((Shared::new(RING)?, Shared::new(RING)?, Shared::new(RECV_BUF * RECVS as usize)?, Shared::new(PAGE)?));
        // SAFETY: as `dev`; nothing else refers to these yet.
        let (pd, scq, rcq) = unsafe { (&*pd, &*send_cq, &*recv_cq) };
        let (sbuf, rbuf, recv_bufs, control) = guard.bufs.as_ref().expect("just made");
        // SAFETY: the regions' references serve only for their addresses and lengths (reads and
        // writes go through `as_slice` and `send_ring`, never two at once).
        let send_mr = pd.register(unsafe { sbuf.bytes() }, Access::NONE)?;
        // SAFETY: as above.
        let ring_mr = pd.register(unsafe { rbuf.bytes() }, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        // SAFETY: as above.
        let recvs_mr = pd.register(unsafe { recv_bufs.bytes() }, Access::LOCAL_WRITE)?;
        // The module queues a Write with Immediate Data as two messages, each counted against
        // the send queue's depth: room for twice the requests we post.
        let max_send_wr = 2 * SQ + 2;
        let mut qp = d.create_qp(&QpInit { pd, send_cq: scq, recv_cq: rcq, max_recv_wr: RECVS, max_send_wr, max_sge: 1, max_inline: Hello::LEN as u32 })?;
        for slot in 0..RECVS as usize {
            qp.post_recv(slot as u64, &[recvs_mr.sge(slot * RECV_BUF..(slot + 1) * RECV_BUF)])?;
        }
        let mut opts = ConnectOptions::new(role);
        // Immediate Data (RFC 7306) tells the reader what each Write placed.
        opts.extensions = true;
        if std::env::var("IWARP_SOCKETS_MPA").as_deref() == Ok("plain") {
            opts.markers = false;
            opts.crc = false;
        }
        let negotiated = signals::held(|| qp.adopt(stream, &opts))?;
        if !negotiated.extensions {
            return Err(io::Error::from_raw_os_error(libc::EPROTO));
        }
        let by_reference = !negotiated.crc && !negotiated.tx_markers;
        // Each side's first message says where to write. A responder's waits in the module for
        // the initiator's (RFC 5044 7.1.2), so a server may speak first.
        qp.post_send_inline(0, SendOp::Send { solicited: false }, &Hello::emit(ring_mr.remote(0), RING), true)?;
        let ctl = control.base() as *mut Control;
        // SAFETY: a fresh page, zeroed (which is what the atomics start from), aligned for
        // `Control`, mapped as long as the `Conn`.
        unsafe { SharedMutex::init(&raw mut (*ctl).stream, Stream { tails: qp.tails(), ..Stream::new() })? };
        // SAFETY: as above, initialized now.
        let ctl = unsafe { &*ctl };
        ctl.holders.add(std::process::id(), control);
        ctl.nonblocking.store(nonblocking, Ordering::Relaxed);
        let conn = Conn {
            qp: ManuallyDrop::new(qp),
            send_mr: ManuallyDrop::new(send_mr),
            ring_mr: ManuallyDrop::new(ring_mr),
            recvs_mr: ManuallyDrop::new(recvs_mr),
            owned: guard.take(),
            by_reference,
            shadow,
            me: std::sync::Weak::new(),
            watched: std::sync::atomic::AtomicBool::new(false),
        };
        // The application's descriptor becomes an epoll instance watching the eventfd: it polls
        // as the eventfd does, while a read or write this library does not see (the C library's
        // stdio calling its own `read`, a raw system call) fails with EINVAL instead of taking
        // the eventfd's counter for stream octets. Its close-on-exec flag is kept.
        let cloexec = crate::fcntl_real(app_fd, libc::F_GETFD, 0);
        let watch = watching(conn.event_fd())?;
        // SAFETY: plain descriptor calls on descriptors this process owns.
        if unsafe { libc::dup2(watch.as_raw_fd(), app_fd) } < 0 {
            return Err(io::Error::last_os_error());
        }
        drop(watch);
        if cloexec >= 0 {
            crate::fcntl_real(app_fd, libc::F_SETFD, cloexec as libc::c_ulong);
        }
        conn.settle(&mut conn.lock());
        Ok(conn)
    }

    /// The connection, shared, knowing itself (for the flusher).
    pub(crate) fn into_shared(mut self) -> std::sync::Arc<Conn> {
        std::sync::Arc::new_cyclic(|me| {
            self.me = me.clone();
            self
        })
    }

    fn lock(&self) -> Locked<'_> {
        let (mut guard, died) = self.control().stream.lock();
        if died {
            guard.break_because(format_args!("a process holding the connection died while it used it"));
        }
        self.qp.resume_at(guard.tails);
        Locked { conn: self, guard }
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

    /// The library's own descriptors of this connection: the TCP socket's, the device's and
    /// the CQs' eventfds.
    pub(crate) fn descriptors(&self) -> [RawFd; 4] {
        // SAFETY: see `Owned`.
        let dev = unsafe { &*self.owned.dev };
        [self.shadow.as_raw_fd(), dev.as_fd().as_raw_fd(), self.event_fd(), self.send_cq().event_fd().as_raw_fd()]
    }

    fn control(&self) -> &Control {
        // SAFETY: the control page lives as long as `self`, initialized by `upgrade`; its
        // stream is reached only through its lock, the rest are atomics.
        unsafe { &*(self.owned.control.base() as *const Control) }
    }

    /// A fork made `pid` (this process, in the child) a holder of the connection.
    pub(crate) fn forked_to(&self, pid: u32) {
        self.control().holders.add(pid, &self.owned.control);
    }

    /// Counts of the events that make an edge for `EPOLLET`.
    pub(crate) fn events(&self) -> &Events {
        &self.control().events
    }

    pub(crate) fn nonblocking(&self) -> bool {
        self.control().nonblocking.load(Ordering::Relaxed)
    }

    pub(crate) fn set_nonblocking(&self, on: bool) {
        self.control().nonblocking.store(on, Ordering::Relaxed)
    }

    /// Takes every completion there is.
    fn progress(&self, st: &mut Stream) {
        let mut wcs = [WorkCompletion::EMPTY; 16];
        loop {
            let n = self.send_cq().poll(&mut wcs);
            for wc in &wcs[..n] {
                st.sq_free += 1;
                if wc.status == WcStatus::Success {
                    // Completions come in order: each request's id is the position past it.
                    st.send_done = st.send_done.max(wc.wr_id);
                } else {
                    st.break_because(format_args!("a send completed with {:?}", wc.status));
                }
            }
            let m = self.recv_cq().poll(&mut wcs);
            let (mut reposts, mut k) = ([0usize; 16], 0);
            for wc in &wcs[..m] {
                if self.received(st, wc) {
                    reposts[k] = wc.wr_id as usize;
                    k += 1;
                }
            }
            self.repost(st, &reposts[..k]);
            if n == 0 && m == 0 {
                break;
            }
        }
        // The message that held back the waiting octets is done: they go now.
        if st.pending > 0 && !Self::in_flight(st) {
            let _ = self.flush(st);
        }
        if st.end_waits && st.pending == 0 && st.credits >= 1 && st.sq_free >= 1 && !st.broken {
            st.end_waits = false;
            if let Err(e) = self.control_message(st, Kind::End) {
                st.break_because(format_args!("sending the end failed: {e}"));
            }
        }
        // Else this process's flusher sends them when it is: the process that wrote them may
        // have gone.
        if st.pending > 0 || st.end_waits && !st.broken {
            self.watch();
        }
    }

    /// Has this process's flusher watch the connection (octets wait).
    fn watch(&self) {
        if !self.watched.swap(true, Ordering::AcqRel) {
            crate::flusher::watch(self.me.clone());
        }
    }

    /// A receive completed: the peer's Hello, or Immediate Data saying what its Write before it
    /// placed, or handing credits back, or ending the stream. Anything else, or a Write that
    /// would overrun what we have not read, breaks the connection; else its receive is to be
    /// posted again (true).
    fn received(&self, st: &mut Stream, wc: &WorkCompletion) -> bool {
        self.events().arrived.fetch_add(1, Ordering::Relaxed);
        if st.refused {
            return false;
        }
        let slot = wc.wr_id as usize;
        if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
            st.break_because(format_args!(
                "a receive completed with {:?} ({:?}), {} octets unread, end of stream {}",
                wc.status,
                wc.opcode,
                st.rx_head - st.rx_tail,
                if st.eof { "seen" } else { "not seen" }
            ));
            return false;
        }
        let well_formed = match wc.imm {
            None => {
                let at = slot * RECV_BUF;
                match Hello::parse(self.recvs_mr.as_slice().get(at..at + wc.byte_len as usize).unwrap_or(&[])) {
                    Some(peer) if st.peer.is_none() => {
                        st.peer = Some(peer);
                        true
                    }
                    _ => false,
                }
            }
            Some(v) => Imm::decode(v).is_some_and(|imm| st.take_imm(imm)),
        };
        if !well_formed {
            st.break_because(format_args!("the peer's message {:?} breaks the protocol", wc.imm));
            st.refused = true;
            return false;
        }
        true
    }

    /// Posts the receives `slots` (at most 16) again, with one system call.
    fn repost(&self, st: &mut Stream, slots: &[usize]) {
        // A broken stream takes nothing more (its QP's tails may be out of date if a process
        // died holding the lock).
        if slots.is_empty() || st.broken {
            return;
        }
        let sges: [[Sge; 1]; 16] = std::array::from_fn(|i| [self.recvs_mr.sge(slots.get(i).map_or(0..0, |&s| s * RECV_BUF..(s + 1) * RECV_BUF))]);
        let wrs: [RecvWr<'_>; 16] = std::array::from_fn(|i| RecvWr { wr_id: slots.get(i).map_or(0, |&s| s as u64), sge: &sges[i] });
        if self.qp.post_recvs(&wrs[..slots.len()]).is_ok() {
            st.returnable += slots.len() as u32;
        } else {
            st.break_because(format_args!("receives could not be posted again"));
        }
    }

    /// Octets we may add to the next message now (0 before the peer's Hello): as many as both
    /// rings have free before the end of either, at most [`MOST`] in the message. Octets
    /// waiting to be sent ([`Stream::pending`]) count as written, and start the message.
    fn room(st: &Stream) -> usize {
        let Some((_, peer_len)) = st.peer else { return 0 };
        let (peer_len, ring) = (peer_len as u64, RING as u64);
        let at = st.tx_head + st.pending as u64;
        let peer_free = peer_len - (at - st.peer_freed);
        let send_free = ring - (at - st.send_done);
        let to_ends = (peer_len - at % peer_len).min(ring - at % ring);
        // Waiting octets that end at a ring's end can have nothing added.
        let to_ends = if st.pending > 0 && (at.is_multiple_of(peer_len) || at.is_multiple_of(ring)) { 0 } else { to_ends };
        peer_free.min(send_free).min(to_ends).min((MOST - st.pending) as u64) as usize
    }

    /// Whether a data message we sent has not completed yet (TCP has not taken it).
    fn in_flight(st: &Stream) -> bool {
        st.send_done < st.tx_head
    }

    /// Whether a data message of `entries` send requests may go now: ring room, send queue
    /// entries, and a receive of the peer's to spare (the last is kept for credits alone).
    fn can_send(st: &Stream, entries: u32) -> bool {
        st.credits >= 2 && st.sq_free >= entries && Self::room(st) > 0
    }

    /// Posts Immediate Data of `kind` saying `len` (the octets of the Write just before it, if
    /// any), handing back our credits; `write`: that Write and this go as one request, from
    /// bytes `write` of our send ring. The caller has checked for a receive of the peer's and a
    /// send queue entry.
    fn post_imm(&self, st: &mut Stream, kind: Kind, len: usize, write: Option<Sge>) -> io::Result<()> {
        let imm = Imm { kind, recvs: st.returnable, freed: st.unreported, len: len as u32 }.encode();
        let solicited = kind != Kind::Credit;
        let op = match (write, Self::peer_at_head(st)) {
            (Some(_), Some(remote)) => SendOp::WriteImm { remote, imm, solicited },
            (Some(_), None) => return Err(io::Error::from_raw_os_error(libc::EAGAIN)),
            (None, _) => SendOp::Immediate { imm, solicited },
        };
        let sge = write.as_slice();
        let wr = SendWr { wr_id: st.tx_head + len as u64, op, sge, signaled: true };
        match self.qp.post_send(&wr) {
            Ok(()) => {
                st.messages += u64::from(kind == Kind::Data);
                st.tx_head += len as u64;
                st.credits -= 1;
                st.sq_free -= 1;
                st.returnable = 0;
                st.unreported = 0;
                Ok(())
            }
            Err(e) => {
                st.break_because(format_args!("posting Immediate Data failed: {e}"));
                Err(e)
            }
        }
    }

    /// Where the next octets go in the peer's ring (none before its Hello).
    fn peer_at_head(st: &Stream) -> Option<Remote> {
        st.peer.map(|(ring, len)| Remote { addr: ring.addr + st.tx_head % len as u64, rkey: ring.rkey })
    }

    /// Sends a message of `kind` with no data (credits, end of stream).
    fn control_message(&self, st: &mut Stream, kind: Kind) -> io::Result<()> {
        self.post_imm(st, kind, 0, None)
    }

    /// Writes at most `len` octets into the send ring with `fill`, which returns how many (0:
    /// none), and sends them in a data message, unless a data message is in flight: then they
    /// wait to join the next one ([`Stream::pending`]). Returns that count.
    fn copied_message(&self, st: &mut Stream, len: usize, fill: &mut dyn FnMut(&mut [u8]) -> io::Result<usize>) -> io::Result<usize> {
        let at = ((st.tx_head + st.pending as u64) % RING as u64) as usize;
        let len = len.min(Self::room(st));
        // SAFETY: these octets of the send ring are free (no request in flight reads them:
        // `room` counts from the oldest incomplete one), written under the stream's lock; the
        // region's own reference serves only for its address and length.
        let buf = unsafe { &mut self.owned.send_ring.bytes()[at..at + len] };
        let n = fill(buf)?.min(len);
        st.pending += n;
        if st.pending > 0 && (!Self::in_flight(st) || Self::room(st) == 0) {
            self.flush(st)?;
        } else if st.pending > 0 {
            self.watch();
        }
        Ok(n)
    }

    /// Sends the octets waiting in the send ring as one message, if a receive of the peer's
    /// and a send queue entry are free (else they wait for the next look).
    fn flush(&self, st: &mut Stream) -> io::Result<()> {
        if st.pending == 0 || st.credits < 2 || st.sq_free < 1 || st.broken {
            return Ok(());
        }
        let (at, n) = ((st.tx_head % RING as u64) as usize, st.pending);
        self.post_imm(st, Kind::Data, n, Some(self.send_mr.sge(at..at + n)))?;
        st.pending = 0;
        Ok(())
    }

    /// The flusher's look at a connection with octets waiting: sends them if the message before
    /// them completed, and arms the send CQ for the completion it waits for. Whether some still
    /// wait; if none do (or the connection is broken), it is no longer watched
    /// ([`Conn::watched`]), under the lock the next write takes to make octets wait again.
    pub(crate) fn flush_waiting(&self) -> bool {
        let still = self.control().waiting.load(Ordering::Acquire) && {
            let mut st = self.lock();
            self.arm_send();
            self.progress(&mut st);
            (st.pending > 0 || st.end_waits) && !st.broken
        };
        if !still {
            self.watched.store(false, Ordering::Release);
        }
        still
    }

    /// Whether the flusher watches this connection (or is about to).
    pub(crate) fn watched(&self) -> bool {
        self.watched.load(Ordering::Acquire)
    }

    /// In a fork's child: the parent's flusher watched the connection, not this process's; and
    /// this process holds it now.
    pub(crate) fn forked(&self) {
        self.watched.store(false, Ordering::Release);
        self.forked_to(std::process::id());
    }

    /// The send CQ's eventfd, signalled by a completion once armed.
    pub(crate) fn send_event(&self) -> RawFd {
        self.send_cq().event_fd().as_raw_fd()
    }

    /// Gives credits back in a message of their own once half our ring or half our receives are
    /// free again, or when `starved` (we wait for credits ourselves, and the peer may be waiting
    /// for ours).
    fn give_back(&self, st: &mut Stream, starved: bool) {
        // Handing back one receive costs the peer one: when both sides wait to write, that
        // would go back and forth for ever, giving neither anything.
        let owed = st.returnable > 1 || st.unreported > 0;
        let due = st.returnable >= RECVS / 2 || st.unreported as usize >= RING / 2 || (starved && owed);
        // Once the peer has ended its stream it writes no more: credits would only reach a
        // connection it may have closed, and draw a reset.
        if due && st.credits >= 1 && st.sq_free >= 1 && !st.broken && !st.eof {
            let _ = self.control_message(st, Kind::Credit);
        }
    }

    /// Whether we wait for the peer's credits (not our own completions) to write.
    fn starved(st: &Stream) -> bool {
        st.credits < 2 || st.peer.is_some_and(|(_, len)| st.tx_head - st.peer_freed >= len as u64)
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
            if Self::readable(st) || unblocked {
                signal(self.event_fd());
                return;
            }
            // While a write would block, any completion wakes: the credit that unblocks it comes
            // in a message that is not solicited, and a poller may wait for it (`readiness`).
            if self.recv_cq().arm(Self::writable(st)).is_err() {
                st.break_because(format_args!("the receive CQ could not be armed"));
                continue;
            }
            // A completion may have landed before the arm.
            let seen = |st: &Stream| (st.rx_head, st.eof, st.broken, st.credits, st.peer_freed, st.peer.is_some());
            let before = seen(st);
            self.progress(st);
            if seen(st) == before {
                return;
            }
        }
    }

    /// Whether a read would return now (data, the end, or an error).
    fn readable(st: &Stream) -> bool {
        st.rx_head > st.rx_tail || st.eof || st.broken || st.read_shut
    }

    /// Whether a write would go out now, or fail at once (EPIPE, on a broken or ended stream).
    fn writable(st: &Stream) -> bool {
        st.broken || st.ended || Self::can_send(st, 1)
    }

    /// What `poll` should say of the descriptor now. Readability is exact: a wake-up that
    /// brought no data (a credit) is taken, and the descriptor cleared again. While a write
    /// would block, the descriptor is left armed for every completion ([`Conn::settle`]), so
    /// that a credit coming back wakes a poller, which asks again and finds it writable.
    pub(crate) fn readiness(&self) -> Readiness {
        let mut st = self.lock();
        self.progress(&mut st);
        // As a blocked writer would (`write`).
        let starved = Self::starved(&st);
        self.give_back(&mut st, starved);
        self.settle(&mut st);
        let writable = Self::writable(&st);
        Readiness { readable: Self::readable(&st), writable, short_of_buffers: !writable && st.peer.is_some() && !Self::starved(&st) }
    }

    fn drain_event(&self) {
        drain(self.event_fd());
    }

    /// Reads into `out` (`peek`: leaves the data; `wait_all`: until `out` is full, the stream
    /// ends or it breaks). Ok(0) at the end of the stream.
    pub(crate) fn read(&self, out: &mut [u8], peek: bool, wait_all: bool, dont_wait: bool) -> io::Result<usize> {
        let mut st = self.lock();
        let mut got = 0;
        let mut until = Deadline::new(self, libc::SO_RCVTIMEO);
        loop {
            self.progress(&mut st);
            got += self.take(&mut st, &mut out[got..], peek);
            let done = got == out.len() || (got > 0 && (!wait_all || peek)) || st.eof || st.broken || st.read_shut;
            self.give_back(&mut st, false);
            if done || dont_wait || self.nonblocking() || until.passed() {
                let broken = st.broken && st.rx_head == st.rx_tail && !st.eof;
                self.settle(&mut st);
                return match got {
                    0 if broken => Err(io::Error::from_raw_os_error(libc::ECONNRESET)),
                    0 if !st.eof && !st.read_shut && !out.is_empty() => Err(io::Error::from_raw_os_error(libc::EAGAIN)),
                    n => Ok(n),
                };
            }
            self.settle(&mut st);
            drop(st);
            if sleep_on(self.event_fd(), until.wait_ms(100)) && !until.restarts() {
                return if got > 0 { Ok(got) } else { Err(io::Error::from_raw_os_error(libc::EINTR)) };
            }
            st = self.lock();
        }
    }

    /// `shutdown(SHUT_RD)`: from now on reads never wait (a reader waiting now returns).
    pub(crate) fn shut_read(&self) -> io::Result<()> {
        let mut st = self.lock();
        st.read_shut = true;
        self.settle(&mut st);
        Ok(())
    }

    /// Octets a read would return now (FIONREAD).
    pub(crate) fn unread(&self) -> io::Result<usize> {
        let mut st = self.lock();
        self.progress(&mut st);
        let n = (st.rx_head - st.rx_tail) as usize;
        self.settle(&mut st);
        Ok(n)
    }

    /// SO_ERROR: ECONNRESET the first time after the connection broke, else 0.
    pub(crate) fn take_error(&self) -> c_int {
        let mut st = self.lock();
        self.progress(&mut st);
        let first = st.broken && !st.error_reported;
        st.error_reported |= st.broken;
        self.settle(&mut st);
        if first {
            libc::ECONNRESET
        } else {
            0
        }
    }

    /// Copies received data from the ring into `out`, and frees it there (unless peeking).
    fn take(&self, st: &mut Stream, out: &mut [u8], peek: bool) -> usize {
        let ring = self.ring_mr.as_slice();
        let mut got = 0;
        let mut tail = st.rx_tail;
        while got < out.len() && tail < st.rx_head {
            let at = (tail % RING as u64) as usize;
            let n = ((st.rx_head - tail) as usize).min(RING - at).min(out.len() - got);
            out[got..got + n].copy_from_slice(&ring[at..at + n]);
            got += n;
            tail += n as u64;
        }
        if !peek {
            st.unreported += (tail - st.rx_tail) as u32;
            st.rx_tail = tail;
        }
        got
    }

    /// Writes `data`: all of it, unless non-blocking (then what fits now; EAGAIN if nothing).
    /// A blocking write of [`zero_copy_from`] octets or more goes from `data` itself, where the
    /// module sends by reference.
    pub(crate) fn write(&self, data: &[u8], dont_wait: bool) -> io::Result<usize> {
        if self.by_reference && zero_copy_from().is_some_and(|from| data.len() >= from) && !dont_wait && !self.nonblocking() {
            if let Some(r) = self.write_zero_copy(data) {
                return r;
            }
        }
        self.write_from(data.len(), dont_wait, &mut |at, out| {
            out.copy_from_slice(&data[at..at + out.len()]);
            Ok(out.len())
        })
    }

    /// Writes `len` octets that `fill` gives (from its offset into them, as many as fit in its
    /// buffer; fewer, or 0, where its source ends), straight into the send ring: each message
    /// carries as much as it holds, however the octets are split in the caller's vectors or
    /// file. All of it, unless non-blocking (then what fits now; EAGAIN if nothing).
    pub(crate) fn write_from(&self, len: usize, dont_wait: bool, fill: Fill<'_>) -> io::Result<usize> {
        self.writing(len, dont_wait, 1, &mut |conn, st, sent| {
            let n = conn.copied_message(st, len - sent, &mut |out| fill(sent, out))?;
            Ok((n, n == 0))
        })
    }

    /// Writes `data` by RDMA Write from `data` itself, registered for the call, then waits until
    /// every request reading it has completed (TCP took the octets, or, without markers and
    /// CRC, the peer acknowledged them), so that the caller may reuse it. None if `data`
    /// cannot be registered (it is then copied).
    fn write_zero_copy(&self, data: &[u8]) -> Option<io::Result<usize>> {
        // SAFETY: see `Owned`.
        let pd = unsafe { &*self.owned.pd };
        let source = pd.register_source(data).ok()?;
        let mut last = None;
        let result = self.writing(data.len(), false, 2, &mut |conn, st, sent| {
            if st.pending > 0 {
                // What earlier writes left waiting goes first.
                conn.flush(st)?;
                return Ok((0, false));
            }
            let remote = Self::peer_at_head(st).expect("room needs the peer's Hello");
            let n = (data.len() - sent).min(Self::room(st));
            let wr = SendWr { wr_id: st.tx_head, op: SendOp::Write(remote), sge: &[source.sge(sent..sent + n)], signaled: true };
            if let Err(e) = conn.qp.post_send(&wr) {
                st.break_because(format_args!("posting a Write failed: {e}"));
                return Err(e);
            }
            st.sq_free -= 1;
            last = Some(st.tx_head + n as u64);
            conn.post_imm(st, Kind::Data, n, None)?;
            Ok((n, false))
        });
        // The requests reading `data` must be done before the caller may touch it: TCP may
        // send its pages again until the peer acknowledged them. As long as TCP takes (a
        // broken connection completes them at once, with errors), whichever process sharing
        // the connection takes their completions.
        while let Some(end) = last {
            let mut st = self.lock();
            self.progress(&mut st);
            if st.send_done >= end || st.broken && st.sq_free == SQ {
                break;
            }
            drop(st);
            // Not even a signal ends this wait: the module reads `data` until they complete.
            let _ = self.sleep_on_send(100);
        }
        drop(source);
        Some(result)
    }

    /// The loop of a write of `len` octets: `message` sends one message of at most what is left
    /// (given the octets sent so far) and says how many it sent and whether the source ended,
    /// whenever [`Conn::can_send`] with `entries` send requests; otherwise the write waits, or
    /// returns what it did (non-blocking, or a timeout).
    fn writing(&self, len: usize, dont_wait: bool, entries: u32, message: Message<'_>) -> io::Result<usize> {
        let mut st = self.lock();
        st.writes += 1;
        let mut sent = 0;
        let mut until = Deadline::new(self, libc::SO_SNDTIMEO);
        loop {
            self.progress(&mut st);
            if st.ended || st.broken {
                self.settle(&mut st);
                return if sent > 0 { Ok(sent) } else { Err(io::Error::from_raw_os_error(libc::EPIPE)) };
            }
            let mut source_ended = false;
            while sent < len && Self::can_send(&st, entries) {
                match message(self, &mut st, sent) {
                    Ok((k, ended)) => {
                        sent += k;
                        if ended {
                            source_ended = true;
                            break;
                        }
                    }
                    Err(e) => {
                        self.settle(&mut st);
                        return if sent > 0 { Ok(sent) } else { Err(e) };
                    }
                }
            }
            // Out of credits, we hand ours back now: the peer may be waiting for them to send
            // the credits we wait for.
            let starved = Self::starved(&st);
            self.give_back(&mut st, starved);
            if sent == len || source_ended || dont_wait || self.nonblocking() || until.passed() {
                if sent < len && !source_ended {
                    self.events().write_blocked.fetch_add(1, Ordering::Relaxed);
                }
                self.settle(&mut st);
                return if sent > 0 || len == 0 || source_ended { Ok(sent) } else { Err(io::Error::from_raw_os_error(libc::EAGAIN)) };
            }
            self.settle(&mut st);
            drop(st);
            if self.sleep_on_send(until.wait_ms(2)) && !until.restarts() {
                return if sent > 0 { Ok(sent) } else { Err(io::Error::from_raw_os_error(libc::EINTR)) };
            }
            st = self.lock();
        }
    }

    /// Sleeps until a send completion or `ms` milliseconds (credits come on the receive CQ,
    /// polled again when this returns); true if a signal handler interrupted the sleep.
    fn sleep_on_send(&self, ms: i32) -> bool {
        self.arm_send();
        sleep_on(self.send_event(), ms)
    }

    /// Clears the send CQ's eventfd and arms it for the next completion.
    fn arm_send(&self) {
        drain(self.send_event());
        let _ = self.send_cq().arm(false);
    }

    /// Ends our stream (shutdown's SHUT_WR, or close): the peer reads EOF after the data. As
    /// TCP's FIN, the end follows the data without waiting: it goes once the data before it
    /// has gone and the peer has a receive for it ([`Stream::end_waits`]).
    pub(crate) fn end(&self) -> io::Result<()> {
        let mut st = self.lock();
        if st.ended {
            return Ok(());
        }
        st.ended = true;
        st.end_waits = true;
        self.progress(&mut st);
        if st.broken {
            return Err(io::Error::from_raw_os_error(libc::EPIPE));
        }
        Ok(())
    }

    /// Sends the octets (and the end) waiting in the send ring (bounded, 5 s), before this
    /// process lets its copy go: its flusher, which may be the one watching them, goes with it.
    fn send_waiting(&self) {
        for _ in 0..5000 {
            let mut st = self.lock();
            self.progress(&mut st);
            if st.pending == 0 && !st.end_waits || st.broken {
                return;
            }
            drop(st);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Closes (when the last descriptor of the connection goes, in `Drop`): ends the stream,
    /// waits (bounded) until every message sent has completed, then disconnects.
    fn close(&self) {
        let _ = self.end();
        for _ in 0..5000 {
            let mut st = self.lock();
            self.progress(&mut st);
            if !st.end_waits && st.sq_free == SQ || st.broken {
                break;
            }
            drop(st);
            std::thread::sleep(Duration::from_millis(1));
        }
        if crate::logging() {
            let st = self.lock();
            say!("connection closed: {} writes sent in {} data messages", st.writes, st.messages);
        }
        let _ = self.qp.disconnect();
        // Completed means TCP took it, not that it arrived. Once the connection is closed for
        // good, anything the peer still sends (credits written before it read our end) draws a
        // reset from TCP, which throws away what it has not delivered: wait (bounded) until
        // the peer has acknowledged all of it, our FIN too.
        let waited = Instant::now();
        while !self.delivered() {
            if waited.elapsed() > Duration::from_secs(5) {
                if crate::logging() {
                    say!("close: the peer has not acknowledged everything after 5 s; closing anyway");
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether TCP holds nothing of ours the peer has not acknowledged, or the connection is
    /// gone.
    fn delivered(&self) -> bool {
        let fd = self.shadow.as_raw_fd();
        let mut queued: c_int = 0;
        // SAFETY: SIOCOUTQ writes one int, to a live one.
        let rc = unsafe { real!(ioctl: unsafe extern "C" fn(c_int, libc::c_ulong, *mut c_void) -> c_int)(fd, SIOCOUTQ, (&raw mut queued).cast()) };
        if rc != 0 || queued == 0 {
            return true;
        }
        // SAFETY: tcp_info is plain integers, for which all zeros is a value.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: a tcp_info and its length, both live.
        let rc = unsafe {
            real!(getsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut libc::socklen_t) -> c_int)(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&raw mut info).cast(),
                &mut len,
            )
        };
        rc != 0 || info.tcpi_state == TCP_CLOSE
    }
}

/// `SIOCOUTQ`: octets TCP has not had acknowledged (the C library names it only for terminals).
const SIOCOUTQ: libc::c_ulong = libc::TIOCOUTQ as libc::c_ulong;
/// `TCP_INFO`'s state of a connection that is gone (`include/net/tcp_states.h`).
const TCP_CLOSE: u8 = 7;

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
            let wait = crate::time_option(conn.shadow.as_raw_fd(), opt).filter(|w| !w.is_zero())?;
            Some(Instant::now() + wait)
        });
        at.is_some_and(|at| Instant::now() >= at)
    }

    /// Whether a call interrupted by a signal handler goes on, as the kernel restarts a socket
    /// call: never with a timeout set ([`signals::restart_calls`]).
    fn restarts(&mut self) -> bool {
        !matches!(self.at, Some(Some(_))) && signals::restart_calls()
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

/// A new epoll instance, readable while the eventfd `fd` is.
fn watching(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: makes a descriptor that nothing else owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor, owned here.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
    let ctl = real!(epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int);
    // SAFETY: both descriptors are live; one valid event.
    if unsafe { ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ep)
}

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
fn sleep_on(fd: RawFd, ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { real!(poll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int)(&mut pfd, 1, ms) };
    rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// Frees what the upgrade has made if it fails before a `Conn` takes it (what was made after
/// this, the regions and the QP, is dropped before it).
struct OwnedGuard {
    dev: *mut Device,
    pd: Option<*mut ProtectionDomain<'static>>,
    cqs: Vec<*mut CompletionQueue<'static>>,
    bufs: Option<(Shared, Shared, Shared, Shared)>,
}

impl OwnedGuard {
    fn take(mut self) -> Owned {
        let (send_ring, recv_ring, recv_bufs, control) = self.bufs.take().expect("made before a Conn");
        let [send_cq, recv_cq] = self.cqs[..] else { unreachable!("both CQs are made before a Conn") };
        let owned = Owned { dev: self.dev, pd: self.pd.take().expect("made before a Conn"), send_cq, recv_cq, send_ring, recv_ring, recv_bufs, control };
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
    /// The last descriptor of the connection in this process is gone. The last process holding
    /// the connection ends the stream and disconnects, as TCP's last close does; any other
    /// leaves it to the rest ([`Device::detach`]). Then its objects, rings and mappings go.
    fn drop(&mut self) {
        self.send_waiting();
        // Under the lock: of two processes closing at once, one is last.
        let last = {
            let _st = self.lock();
            self.control().holders.leave(std::process::id(), &self.owned.control)
        };
        if last {
            self.close();
        } else {
            // SAFETY: see `Owned`.
            let dev = unsafe { &*self.owned.dev };
            if let Err(e) = dev.detach() {
                // Destroying would reach the others' objects: leave them, rings and all.
                say!("leaving a connection to the other processes holding it failed ({e}); its objects are left mapped");
                return;
            }
        }
        // SAFETY: dropped once, here, before what they borrow, which goes after them in turn;
        // each was made by Box::into_raw.
        unsafe {
            ManuallyDrop::drop(&mut self.qp);
            ManuallyDrop::drop(&mut self.send_mr);
            ManuallyDrop::drop(&mut self.ring_mr);
            ManuallyDrop::drop(&mut self.recvs_mr);
            drop(Box::from_raw(self.owned.send_cq));
            drop(Box::from_raw(self.owned.recv_cq));
            drop(Box::from_raw(self.owned.pd));
            drop(Box::from_raw(self.owned.dev));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_data_that_lies_breaks_the_stream() {
        let data = |len| Imm { kind: Kind::Data, recvs: 0, freed: 0, len };
        let mut st = Stream::new();
        assert!(st.take_imm(data(100)), "a Write that fits");
        assert_eq!(st.rx_head, 100);
        // Placed nothing, or more than the ring holds beyond what we have not read.
        assert!(!Stream::new().take_imm(data(0)));
        assert!(!Stream::new().take_imm(data(RING as u32 + 1)));
        let mut full = Stream::new();
        full.rx_head = RING as u64 - 5;
        assert!(!full.take_imm(data(10)), "past what we have not read");
        // Wrapping at the ring's end within one message.
        let mut end = Stream::new();
        (end.rx_head, end.rx_tail) = (RING as u64 - 10, RING as u64 - 10);
        assert!(!end.take_imm(data(20)));
        assert!(end.take_imm(data(10)), "up to the end is fine");
        // After its end of stream.
        let mut ended = Stream::new();
        assert!(ended.take_imm(Imm { kind: Kind::End, recvs: 0, freed: 0, len: 0 }));
        assert!(!ended.take_imm(data(1)));
        // Credits beyond what we posted, or our ring freed beyond what we wrote.
        assert!(!Stream::new().take_imm(Imm { kind: Kind::Credit, recvs: 2, freed: 0, len: 0 }));
        let mut wrote = Stream::new();
        wrote.tx_head = 50;
        assert!(wrote.take_imm(Imm { kind: Kind::Credit, recvs: 0, freed: 50, len: 0 }));
        assert!(!wrote.take_imm(Imm { kind: Kind::Credit, recvs: 0, freed: 1, len: 0 }));
        // Data or an end whose credits lie places nothing and ends nothing.
        let mut lied = Stream::new();
        assert!(!lied.take_imm(Imm { kind: Kind::Data, recvs: 2, freed: 0, len: 100 }));
        assert_eq!((lied.rx_head, lied.credits), (0, RECVS - 1));
        assert!(!lied.take_imm(Imm { kind: Kind::End, recvs: 0, freed: 1, len: 0 }));
        assert!(!lied.eof);
    }
}
