//! Sends what small writes left waiting ([`Conn`]'s coalescing) when the program makes no call
//! of ours that would: a thread of the library's, as TCP has the kernel's softirq. It watches
//! the send CQs of the connections with octets waiting, and sends them once the message before
//! them completes. It starts when first needed, in each process (a fork's child starts its own).

use crate::conn::Conn;
use crate::real::real;
use libc::{c_int, c_void, nfds_t, pollfd};
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard, Weak};

/// How long the thread sleeps at most while octets wait: a completion it cannot see (a
/// credit, which comes on the receive CQ, or one another thread's wait took) is found this
/// late at worst.
const LOOK_MS: c_int = 10;

pub(crate) struct Flusher {
    /// The process whose thread this is (0: none yet).
    pid: u32,
    /// Wakes the thread: an eventfd.
    kick: RawFd,
    /// The connections with octets waiting.
    conns: Vec<Weak<Conn>>,
}

static FLUSHER: Mutex<Flusher> = Mutex::new(Flusher { pid: 0, kick: -1, conns: Vec::new() });

fn flusher() -> MutexGuard<'static, Flusher> {
    FLUSHER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The flusher's lock, held across `fork` (writers take it holding a stream's lock, which
/// `fork` does not take).
pub(crate) fn hold() -> MutexGuard<'static, Flusher> {
    flusher()
}

/// In a fork's child, under [`hold`]: the parent's thread and what it watched are the
/// parent's; this process starts its own when needed. Its copy of the parent's eventfd is
/// closed now, before the program can reuse the number.
pub(crate) fn forked(f: &mut Flusher) {
    if f.kick >= 0 {
        // SAFETY: this process's copy of the parent's eventfd, used by nothing here.
        unsafe { real!(close: unsafe extern "C" fn(c_int) -> c_int)(f.kick) };
    }
    *f = Flusher { pid: 0, kick: -1, conns: Vec::new() };
}

/// The thread's eventfd, if it runs in this process.
pub(crate) fn descriptor() -> Option<RawFd> {
    flusher().kick_here()
}

/// [`descriptor`], if its lock is free now (None otherwise).
pub(crate) fn try_descriptor() -> Option<RawFd> {
    FLUSHER.try_lock().ok()?.kick_here()
}

impl Flusher {
    /// The thread's eventfd, if it runs in this process.
    fn kick_here(&self) -> Option<RawFd> {
        (self.pid == std::process::id() && self.kick >= 0).then_some(self.kick)
    }
}

/// `conn` has octets waiting: the thread watches it until they are sent.
pub(crate) fn watch(conn: Weak<Conn>) {
    let mut f = flusher();
    let me = std::process::id();
    if f.pid != me {
        // SAFETY: a new eventfd, non-blocking and closed on exec, owned by the thread.
        let kick = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if kick < 0 || crate::signals::held(|| std::thread::Builder::new().name("iwarp-flusher".into()).spawn(move || run(kick))).is_err() {
            return;
        }
        *f = Flusher { pid: me, kick, conns: Vec::new() };
    }
    if !f.conns.iter().any(|w| w.ptr_eq(&conn)) {
        f.conns.push(conn);
    }
    // Always: the thread may have found nothing waiting a moment ago, and be about to sleep.
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64 to the thread's eventfd.
    unsafe { real!(write: unsafe extern "C" fn(c_int, *const c_void, usize) -> isize)(f.kick, (&raw const one).cast(), 8) };
}

fn run(kick: RawFd) {
    let poll = real!(poll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int);
    loop {
        let conns = flusher().conns.clone();
        let mut fds = vec![pollfd { fd: kick, events: libc::POLLIN, revents: 0 }];
        for w in &conns {
            // Held only for the look: the program's close of its last descriptor ends the
            // connection itself, not this thread later.
            let Some(c) = w.upgrade() else { continue };
            if c.flush_waiting() {
                fds.push(pollfd { fd: c.send_event(), events: libc::POLLIN, revents: 0 });
            }
        }
        // Under the flusher's lock: a write that makes octets wait again marks the connection
        // watched before it takes this lock to add it. The connections looked at are let go
        // after it: the last reference to one closes it, which takes locks `fork` takes before
        // this one.
        let mut looked = Vec::new();
        flusher().conns.retain(|w| {
            w.upgrade().is_some_and(|c| {
                let watched = c.watched();
                looked.push(c);
                watched
            })
        });
        drop(looked);
        let wait = if fds.len() > 1 { LOOK_MS } else { -1 };
        // SAFETY: a live array of `fds.len()` descriptors.
        unsafe { poll(fds.as_mut_ptr(), fds.len() as nfds_t, wait) };
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a live u64 (EAGAIN when not kicked).
        unsafe { real!(read: unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize)(kick, (&raw mut n).cast(), 8) };
    }
}
