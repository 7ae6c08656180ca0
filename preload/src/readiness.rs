//! `poll`, `select` and `epoll` (and `ppoll`, `pselect`, `epoll_pwait2`) over sets that mix
//! upgraded and ordinary descriptors. An upgraded descriptor is an epoll instance watching its
//! receive CQ's eventfd, which the kernel reports readable exactly when the library has data or
//! an end for it ([`Conn`]), and never writable. So writability is taken out of what the
//! kernel is asked and decided here, from credits and ring room ([`Conn::readiness`]); a poller waiting for it is woken by
//! the credit's completion, and a wake-up that brought no data is not reported as readable.
//!
//! With none of the calls' descriptors upgraded, each goes straight to the C library.

use crate::conn::{Conn, Readiness};
use crate::real::real;
use libc::{c_int, epoll_event, fd_set, nfds_t, pollfd, sigset_t, timespec, timeval, EPOLLIN, EPOLLOUT, POLLIN, POLLOUT};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a poller waits between looks while its only obstacle is its own requests in flight
/// (send ring or queue full).
const BUFFER_WAIT_MS: c_int = 2;

/// When a wait ends: `None` never.
fn deadline(timeout_ms: c_int) -> Option<Instant> {
    (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64))
}

/// The time left to `deadline` in milliseconds (-1: no limit), 0 if `now`, at most
/// [`BUFFER_WAIT_MS`] if `short`.
fn wait_ms(deadline: Option<Instant>, now: bool, short: bool) -> c_int {
    if now {
        return 0;
    }
    let left = deadline.map_or(-1, |d| d.saturating_duration_since(Instant::now()).as_millis().min(i32::MAX as u128) as c_int);
    if short && !(0..=BUFFER_WAIT_MS).contains(&left) {
        BUFFER_WAIT_MS
    } else {
        left
    }
}

fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// What an upgraded descriptor is found to be before a wait: ready now for what is asked
/// (`now_in`, `now_out`); else whether the wait must watch it for readability, which a credit's
/// completion signals (`wake`), or look again soon (`short`): a descriptor signalled for unread
/// data the poller does not ask for cannot signal a credit as well, nor can our own send
/// requests completing.
struct Look {
    now_in: bool,
    now_out: bool,
    wake: bool,
    short: bool,
}

fn look(c: &Conn, want_in: bool, want_out: bool) -> Look {
    let r: Readiness = c.readiness();
    let mut l = Look { now_in: want_in && r.readable, now_out: want_out && r.writable, wake: false, short: false };
    if want_out && !r.writable {
        if r.readable {
            l.short = !want_in;
        } else {
            l.wake = !r.short_of_buffers;
            l.short = r.short_of_buffers;
        }
    }
    l
}

/// Milliseconds of a `timespec` timeout, rounded up (-1: none, for null); None if it is not a
/// valid one (EINVAL).
fn timespec_ms(t: *const timespec) -> Option<c_int> {
    if t.is_null() {
        return Some(-1);
    }
    // SAFETY: the caller's timeout, not null.
    let t = unsafe { &*t };
    if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
        return None;
    }
    Some(t.tv_sec.saturating_mul(1000).saturating_add((t.tv_nsec + 999_999) / 1_000_000).min(i32::MAX as libc::time_t) as c_int)
}

/// A wait of `ms` milliseconds (-1: none) as a `timespec` for the calls that take one.
fn ms_timespec(ms: c_int) -> Option<timespec> {
    (ms >= 0).then(|| timespec { tv_sec: (ms / 1000) as libc::time_t, tv_nsec: (ms % 1000) as libc::c_long * 1_000_000 })
}

/// The C library's ppoll, waiting `ms` milliseconds with the signal mask `mask` (null: none).
fn ppoll_ms(set: &mut [pollfd], ms: c_int, mask: *const sigset_t) -> c_int {
    let real = real!(ppoll: unsafe extern "C" fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int);
    let t = ms_timespec(ms);
    // SAFETY: a live array of `set.len()` descriptors, a live timeout or null, the caller's mask.
    unsafe { real(set.as_mut_ptr(), set.len() as nfds_t, t.as_ref().map_or(std::ptr::null(), |t| t), mask) }
}

/// `poll` or `ppoll` on the caller's `n` descriptors at `fds`, waiting `timeout` milliseconds
/// (None: an invalid timeout) with the signal mask `mask`; `passthrough` is the C library's own
/// call, for sets with no upgraded descriptor.
///
/// # Safety
/// `fds` is null or the caller's array of `n` descriptors.
unsafe fn poll_any(fds: *mut pollfd, n: nfds_t, timeout: Option<c_int>, mask: *const sigset_t, passthrough: impl FnOnce() -> c_int) -> c_int {
    let conns: Vec<Option<Arc<Conn>>> = if fds.is_null() {
        Vec::new()
    } else {
        // SAFETY: the caller's `n` descriptors.
        unsafe { std::slice::from_raw_parts(fds, n as usize) }.iter().map(|p| crate::conn(p.fd)).collect()
    };
    if conns.iter().all(Option::is_none) {
        return passthrough();
    }
    let Some(timeout) = timeout else {
        crate::set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: as above, not null here.
    let fds = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    poll_mixed(fds, &conns, timeout, |set, ms| ppoll_ms(set, ms, mask))
}

/// # Safety
/// As poll(2).
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    let real = real!(poll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int);
    // SAFETY: the caller's arguments, passed on.
    unsafe { poll_any(fds, n, Some(timeout), std::ptr::null(), || real(fds, n, timeout)) }
}

/// # Safety
/// As ppoll(2) (a timeout below a millisecond is waited as one).
#[no_mangle]
pub unsafe extern "C" fn ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int {
    let real = real!(ppoll: unsafe extern "C" fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int);
    // SAFETY: the caller's arguments, passed on.
    unsafe { poll_any(fds, n, timespec_ms(timeout), mask, || real(fds, n, timeout, mask)) }
}

/// The fortified calls' check: `n` descriptors fit the caller's array of `size` octets.
fn check_fds(n: nfds_t, size: usize) {
    if (size / std::mem::size_of::<pollfd>()) < n as usize {
        crate::chk_fail();
    }
}

/// # Safety
/// As __ppoll_chk (ppoll(2) on an array of `size` octets, what fortified programs call).
#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t, size: usize) -> c_int {
    check_fds(n, size);
    // SAFETY: as ppoll.
    unsafe { ppoll(fds, n, timeout, mask) }
}

/// # Safety
/// As __poll_chk (poll(2) on an array of `size` octets, what fortified programs call).
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, size: usize) -> c_int {
    check_fds(n, size);
    // SAFETY: as poll.
    unsafe { poll(fds, n, timeout) }
}

/// `poll` over `fds`, of which those with a connection in `conns` are upgraded; `wait` is the
/// C library's poll.
fn poll_mixed(fds: &mut [pollfd], conns: &[Option<Arc<Conn>>], timeout: c_int, mut wait: impl FnMut(&mut [pollfd], c_int) -> c_int) -> c_int {
    let end = deadline(timeout);
    let mut asked: Vec<pollfd> = fds.to_vec();
    loop {
        let mut ours = Vec::with_capacity(fds.len());
        let (mut now, mut short) = (false, false);
        for (i, c) in conns.iter().enumerate() {
            let l = c.as_ref().map(|c| look(c, fds[i].events & POLLIN != 0, fds[i].events & POLLOUT != 0));
            if let Some(l) = &l {
                now |= l.now_in || l.now_out;
                short |= l.short;
                asked[i].events = fds[i].events & !POLLOUT | if l.wake { POLLIN } else { 0 };
            }
            asked[i].revents = 0;
            ours.push(l);
        }
        let rc = wait(&mut asked, wait_ms(end, now, short));
        if rc < 0 {
            return rc;
        }
        let mut ready = 0;
        for (i, (c, l)) in conns.iter().zip(&ours).enumerate() {
            let mut got = asked[i].revents;
            if let (Some(c), Some(l)) = (c, l) {
                // Readability only if asked for and real: a wake-up may have brought credits only.
                if got & POLLIN != 0 && !l.now_in && (fds[i].events & POLLIN == 0 || !c.readiness().readable) {
                    got &= !POLLIN;
                }
                got |= if l.now_in { POLLIN } else { 0 } | if l.now_out { POLLOUT } else { 0 };
            }
            fds[i].revents = got;
            ready += c_int::from(got != 0);
        }
        if ready > 0 || expired(end) {
            return ready;
        }
    }
}

/// A caller's `fd_set` of `n` descriptors. Only the words holding those are touched: a program
/// may size its sets for `n` (`howmany(n, NFDBITS)` words), not for FD_SETSIZE.
struct Set(*mut fd_set);

const WORD: usize = 8 * std::mem::size_of::<libc::c_ulong>();

impl Set {
    fn word(&self, fd: c_int) -> *mut libc::c_ulong {
        // SAFETY (for callers): the set holds at least `n` descriptors' words, and fd < n.
        self.0.cast::<libc::c_ulong>().wrapping_add(fd as usize / WORD)
    }

    fn has(&self, fd: c_int) -> bool {
        // SAFETY: see `word`.
        !self.0.is_null() && unsafe { *self.word(fd) } & (1 << (fd as usize % WORD)) != 0
    }

    fn clear(&self, n: c_int) {
        if !self.0.is_null() {
            for w in (0..n).step_by(WORD) {
                // SAFETY: see `word`.
                unsafe { *self.word(w) = 0 };
            }
        }
    }

    /// Adds `fd`; whether the set is there to add to.
    fn add(&self, fd: c_int) -> bool {
        if !self.0.is_null() {
            // SAFETY: see `word`.
            unsafe { *self.word(fd) |= 1 << (fd as usize % WORD) };
        }
        !self.0.is_null()
    }
}

/// Whether any descriptor below `n` in the read or write set is upgraded.
fn any_upgraded(n: c_int, r: &Set, w: &Set) -> bool {
    (0..n.max(0)).any(|fd| (r.has(fd) || w.has(fd)) && crate::conn(fd).is_some())
}

/// # Safety
/// As select(2).
#[no_mangle]
pub unsafe extern "C" fn select(n: c_int, rd: *mut fd_set, wr: *mut fd_set, ex: *mut fd_set, tv: *mut timeval) -> c_int {
    let real = real!(select: unsafe extern "C" fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *mut timeval) -> c_int);
    let (r, w, e) = (Set(rd), Set(wr), Set(ex));
    if !any_upgraded(n, &r, &w) {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(n, rd, wr, ex, tv) };
    }
    let timeout = if tv.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeout.
        let t = unsafe { &*tv };
        if t.tv_sec < 0 || t.tv_usec < 0 {
            crate::set_errno(libc::EINVAL);
            return -1;
        }
        (t.tv_sec.saturating_mul(1000).saturating_add((t.tv_usec + 999) / 1000)).min(i32::MAX as libc::time_t) as c_int
    };
    let started = Instant::now();
    let count = select_mixed(n, &r, &w, &e, timeout, std::ptr::null());
    if count >= 0 && !tv.is_null() {
        // Linux's select leaves the time not slept in the timeout.
        let left = Duration::from_millis(timeout as u64).saturating_sub(started.elapsed());
        // SAFETY: the caller's timeout.
        unsafe { *tv = timeval { tv_sec: left.as_secs() as libc::time_t, tv_usec: left.subsec_micros() as libc::suseconds_t } };
    }
    count
}

/// # Safety
/// As pselect(2) (a timeout below a millisecond is waited as one).
#[no_mangle]
pub unsafe extern "C" fn pselect(n: c_int, rd: *mut fd_set, wr: *mut fd_set, ex: *mut fd_set, timeout: *const timespec, mask: *const sigset_t) -> c_int {
    let real = real!(pselect: unsafe extern "C" fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *const timespec, *const sigset_t) -> c_int);
    let (r, w, e) = (Set(rd), Set(wr), Set(ex));
    if !any_upgraded(n, &r, &w) {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(n, rd, wr, ex, timeout, mask) };
    }
    let Some(timeout) = timespec_ms(timeout) else {
        crate::set_errno(libc::EINVAL);
        return -1;
    };
    select_mixed(n, &r, &w, &e, timeout, mask)
}

/// `select` over the sets `r`, `w` and `e` of `n` descriptors, some upgraded, waiting `timeout`
/// milliseconds (-1: no limit) with the signal mask `mask`.
fn select_mixed(n: c_int, r: &Set, w: &Set, e: &Set, timeout: c_int, mask: *const sigset_t) -> c_int {
    // As poll: each descriptor in any set, asked for what its sets ask.
    let mut fds = Vec::new();
    for fd in 0..n {
        let events = if r.has(fd) { POLLIN } else { 0 } | if w.has(fd) { POLLOUT } else { 0 } | if e.has(fd) { libc::POLLPRI } else { 0 };
        if events != 0 {
            fds.push(pollfd { fd, events, revents: 0 });
        }
    }
    let conns: Vec<_> = fds.iter().map(|p| crate::conn(p.fd)).collect();
    let rc = poll_mixed(&mut fds, &conns, timeout, |set, ms| ppoll_ms(set, ms, mask));
    if rc < 0 {
        return rc;
    }
    if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        crate::set_errno(libc::EBADF);
        return -1;
    }
    for s in [r, w, e] {
        s.clear(n);
    }
    let mut count = 0;
    for p in &fds {
        let err = p.revents & (libc::POLLERR | libc::POLLHUP) != 0;
        count += c_int::from(p.events & POLLIN != 0 && (p.revents & POLLIN != 0 || err) && r.add(p.fd));
        count += c_int::from(p.events & POLLOUT != 0 && (p.revents & POLLOUT != 0 || err) && w.add(p.fd));
        count += c_int::from(p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0 && e.add(p.fd));
    }
    count
}

/// An upgraded descriptor in an epoll set. The kernel watches its eventfd without
/// `EPOLLONESHOT` (kept here instead, as a credit's wake-up must not use the one shot up).
#[derive(Clone, Copy)]
struct Watch {
    /// The events the program asked for, flags (EPOLLET, EPOLLONESHOT) included.
    asked: u32,
    data: u64,
    /// The events the kernel watches ([`kernel_events`]).
    kernel: u32,
    /// Edge-triggered: the connection's counts ([`crate::conn::Events`]) when writability and
    /// readability were last reported; either is reported again only once its count moved.
    out_mark: Option<u32>,
    in_mark: Option<u32>,
    /// One-shot: an event was reported, and the program has not re-armed it (EPOLL_CTL_MOD).
    fired: bool,
}

/// What the kernel is to watch for a descriptor asked `asked`: readability as asked (or also
/// when a credit is awaited: `wake`), never writability, nothing once a one-shot has fired.
fn kernel_events(asked: u32, wake: bool, fired: bool) -> u32 {
    if fired {
        return 0;
    }
    asked & !(EPOUT | EPONESHOT) | if wake { EPIN } else { 0 }
}

/// Upgraded descriptors in epoll sets, by (epoll descriptor, descriptor).
static WATCHED: Mutex<BTreeMap<(c_int, c_int), Watch>> = Mutex::new(BTreeMap::new());

fn watched() -> std::sync::MutexGuard<'static, BTreeMap<(c_int, c_int), Watch>> {
    WATCHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The table of watched descriptors, locked (held across `fork`).
pub(crate) fn hold() -> impl Drop {
    watched()
}

/// `fd` is being closed: as an epoll set, or as a descriptor in one.
pub(crate) fn forget(fd: c_int) {
    watched().retain(|&(ep, f), _| ep != fd && f != fd);
}

const EPIN: u32 = EPOLLIN as u32;
const EPOUT: u32 = EPOLLOUT as u32;
const EPET: u32 = libc::EPOLLET as u32;
const EPONESHOT: u32 = libc::EPOLLONESHOT as u32;

/// # Safety
/// As epoll_ctl(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    let real = real!(epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut epoll_event) -> c_int);
    if crate::conn(fd).is_none() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(ep, op, fd, ev) };
    }
    if op == libc::EPOLL_CTL_DEL || ev.is_null() {
        watched().remove(&(ep, fd));
        // SAFETY: as above.
        return unsafe { real(ep, op, fd, ev) };
    }
    // SAFETY: the caller's event.
    let asked = unsafe { *ev };
    let mut kernel = epoll_event { events: kernel_events(asked.events, false, false), u64: asked.u64 };
    // SAFETY: as above, with the event the kernel is to watch.
    let rc = unsafe { real(ep, op, fd, &mut kernel) };
    if rc == 0 {
        let w = Watch { asked: asked.events, data: asked.u64, kernel: kernel.events, out_mark: None, in_mark: None, fired: false };
        watched().insert((ep, fd), w);
    }
    rc
}

/// # Safety
/// As epoll_wait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(ep: c_int, events: *mut epoll_event, max: c_int, timeout: c_int) -> c_int {
    // SAFETY: as epoll_pwait with no signal mask.
    unsafe { epoll_pwait(ep, events, max, timeout, std::ptr::null()) }
}

/// One of an epoll set's upgraded descriptors during a wait.
struct Entry {
    fd: c_int,
    conn: Arc<Conn>,
    watch: Watch,
    /// Found ready before the wait: readable, writable.
    now_in: bool,
    now_out: bool,
}

/// # Safety
/// As epoll_pwait(2). Events are matched to upgraded descriptors by their data: an ordinary
/// descriptor in the same set must not carry the same data as an upgraded one.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(ep: c_int, events: *mut epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int {
    let real = real!(epoll_pwait: unsafe extern "C" fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int);
    // SAFETY: the caller's arguments, passed on.
    unsafe { epoll_any(ep, events, max, Some(timeout), mask, || real(ep, events, max, timeout, mask)) }
}

/// # Safety
/// As epoll_pwait2(2), and as [`epoll_pwait`] (a timeout below a millisecond is waited as one).
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait2(ep: c_int, events: *mut epoll_event, max: c_int, timeout: *const timespec, mask: *const sigset_t) -> c_int {
    let real = real!(epoll_pwait2: unsafe extern "C" fn(c_int, *mut epoll_event, c_int, *const timespec, *const sigset_t) -> c_int);
    // SAFETY: the caller's arguments, passed on.
    unsafe { epoll_any(ep, events, max, timespec_ms(timeout), mask, || real(ep, events, max, timeout, mask)) }
}

/// An epoll wait on `ep` for at most `max` events at `events`, of `timeout` milliseconds (None:
/// an invalid timeout) with the signal mask `mask`; `passthrough` is the C library's own call,
/// for sets with no upgraded descriptor.
///
/// # Safety
/// `events` is null or the caller's array of `max` events.
unsafe fn epoll_any(
    ep: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: Option<c_int>,
    mask: *const sigset_t,
    passthrough: impl FnOnce() -> c_int,
) -> c_int {
    let real = real!(epoll_pwait: unsafe extern "C" fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int);
    let fds: Vec<(c_int, Arc<Conn>)> = {
        let w = watched();
        w.range((ep, c_int::MIN)..=(ep, c_int::MAX)).filter_map(|(&(_, fd), _)| crate::conn(fd).map(|c| (fd, c))).collect()
    };
    if fds.is_empty() || events.is_null() || max <= 0 {
        return passthrough();
    }
    let Some(timeout) = timeout else {
        crate::set_errno(libc::EINVAL);
        return -1;
    };
    let ctl = real!(epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut epoll_event) -> c_int);
    // SAFETY: the caller's array of `max` events.
    let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
    let room = out.len();
    let end = deadline(timeout);
    loop {
        let (mut now, mut short) = (false, false);
        let mut entries: Vec<Entry> = Vec::with_capacity(fds.len());
        for (fd, conn) in &fds {
            let mut table = watched();
            let Some(w) = table.get_mut(&(ep, *fd)) else { continue };
            let l = if w.fired { None } else { Some(look(conn, w.asked & EPIN != 0, w.asked & EPOUT != 0)) };
            let kernel = kernel_events(w.asked, l.as_ref().is_some_and(|l| l.wake), w.fired);
            if w.kernel != kernel {
                let mut e = epoll_event { events: kernel, u64: w.data };
                // SAFETY: the C library's epoll_ctl with a live event.
                if unsafe { ctl(ep, libc::EPOLL_CTL_MOD, *fd, &mut e) } == 0 {
                    w.kernel = kernel;
                }
            }
            let Some(l) = l else { continue };
            let e = Entry { fd: *fd, conn: conn.clone(), watch: *w, now_in: l.now_in && fresh(w, conn, EPIN), now_out: l.now_out && fresh(w, conn, EPOUT) };
            now |= e.now_in || e.now_out;
            short |= l.short;
            entries.push(e);
        }
        // SAFETY: as above.
        let rc = unsafe { real(ep, out.as_mut_ptr(), max, wait_ms(end, now, short), mask) };
        if rc < 0 {
            return rc;
        }
        // The kernel's events for ours say only "look again": what is reported is decided here.
        let mut n = rc as usize;
        let mut i = 0;
        while i < n {
            if let Some(e) = entries.iter_mut().find(|e| e.watch.data == out[i].u64) {
                let got = out[i].events;
                if got & EPIN != 0 && e.watch.asked & EPIN != 0 && !e.now_in && e.conn.readiness().readable && fresh(&e.watch, &e.conn, EPIN) {
                    e.now_in = true;
                }
                // Errors and hang-ups pass; readability and writability are reported below.
                out[i].events = got & !(EPIN | EPOUT);
            } else if fds.iter().any(|(fd, _)| watched().get(&(ep, *fd)).is_some_and(|w| w.data == out[i].u64)) {
                // One of ours that fired: nothing until the program re-arms it.
                out[i].events = 0;
            }
            if out[i].events == 0 {
                out[i] = out[n - 1];
                n -= 1;
            } else {
                i += 1;
            }
        }
        for e in entries.iter().filter(|e| e.now_in || e.now_out) {
            let ev = if e.now_in { EPIN } else { 0 } | if e.now_out { EPOUT } else { 0 };
            match out[..n].iter_mut().find(|o| o.u64 == e.watch.data) {
                Some(o) => o.events |= ev,
                None if n < room => {
                    out[n] = epoll_event { events: ev, u64: e.watch.data };
                    n += 1;
                }
                None => continue,
            }
        }
        // What was reported: edge-triggered marks, one-shot firing.
        let mut table = watched();
        for o in &out[..n] {
            let Some(e) = entries.iter().find(|e| e.watch.data == o.u64) else { continue };
            if let Some(w) = table.get_mut(&(ep, e.fd)) {
                let ev = o.events;
                if ev & EPIN != 0 {
                    w.in_mark = Some(e.conn.events().arrived.load(Ordering::Relaxed));
                }
                if ev & EPOUT != 0 {
                    w.out_mark = Some(e.conn.events().write_blocked.load(Ordering::Relaxed));
                }
                w.fired |= w.asked & EPONESHOT != 0;
            }
        }
        drop(table);
        if n > 0 || expired(end) {
            return n as c_int;
        }
    }
}

/// Whether `what` (EPOLLIN or EPOLLOUT) is news for watch `w`: always when level-triggered;
/// edge-triggered, only once its count moved since it was last reported.
fn fresh(w: &Watch, conn: &Conn, what: u32) -> bool {
    if w.asked & EPET == 0 {
        return true;
    }
    let (mark, count) = if what == EPIN { (w.in_mark, &conn.events().arrived) } else { (w.out_mark, &conn.events().write_blocked) };
    mark != Some(count.load(Ordering::Relaxed))
}
