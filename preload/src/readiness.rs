//! `poll`, `select` and `epoll` over sets that mix upgraded and ordinary descriptors. An
//! upgraded descriptor is its receive CQ's eventfd, which the kernel reports readable exactly
//! when the library has data or an end for it ([`Conn`]), but always writable. So writability is
//! taken out of what the kernel is asked and decided here, from credits and free send buffers
//! ([`Conn::readiness`]); a poller waiting for it is woken by the credit's completion, and a
//! wake-up that brought no data is not reported as readable.
//!
//! With none of the calls' descriptors upgraded, each goes straight to the C library.

use crate::conn::{Conn, Readiness};
use crate::real::real;
use libc::{c_int, epoll_event, fd_set, nfds_t, pollfd, sigset_t, timeval, EPOLLIN, EPOLLOUT, POLLIN, POLLOUT};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a poller waits between looks while its only obstacle is send buffers in flight.
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

/// For a descriptor polled for writing (`want_out`) and reading (`want_in`) that is in state `r`:
/// whether to watch it for readability too, which a credit's completion signals, and whether to
/// look again soon instead. A descriptor signalled for unread data (that the poller does not
/// ask to read) cannot signal a credit as well; nor can send buffers coming back.
fn wake_for_credit(r: &Readiness, want_out: bool, want_in: bool) -> (bool, bool) {
    if !want_out || r.writable {
        return (false, false);
    }
    if r.readable {
        return (false, !want_in);
    }
    (!r.short_of_buffers, r.short_of_buffers)
}

/// # Safety
/// As poll(2).
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    let real = real!(poll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int);
    let conns: Vec<Option<Arc<Conn>>> = if fds.is_null() {
        Vec::new()
    } else {
        // SAFETY: the caller's `n` descriptors.
        unsafe { std::slice::from_raw_parts(fds, n as usize) }.iter().map(|p| crate::conn(p.fd)).collect()
    };
    if conns.iter().all(Option::is_none) {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(fds, n, timeout) };
    }
    // SAFETY: as above, not null here.
    let fds = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    poll_mixed(fds, &conns, timeout, |set, ms| {
        // SAFETY: a live array of `set.len()` descriptors.
        unsafe { real(set.as_mut_ptr(), set.len() as nfds_t, ms) }
    })
}

/// `poll` over `fds`, of which those with a connection in `conns` are upgraded; `wait` is the
/// C library's poll (or another call's, made into one).
fn poll_mixed(fds: &mut [pollfd], conns: &[Option<Arc<Conn>>], timeout: c_int, mut wait: impl FnMut(&mut [pollfd], c_int) -> c_int) -> c_int {
    let end = deadline(timeout);
    let mut asked: Vec<pollfd> = fds.to_vec();
    loop {
        let mut writable = vec![false; fds.len()];
        let (mut now, mut short) = (false, false);
        for (i, c) in conns.iter().enumerate() {
            if let Some(c) = c {
                let want_out = fds[i].events & POLLOUT != 0;
                let r = c.readiness(want_out);
                writable[i] = want_out && r.writable;
                now |= writable[i];
                let (wake, look) = wake_for_credit(&r, want_out, fds[i].events & POLLIN != 0);
                short |= look;
                asked[i].events = fds[i].events & !POLLOUT | if wake { POLLIN } else { 0 };
            }
            asked[i].revents = 0;
        }
        let rc = wait(&mut asked, wait_ms(end, now, short));
        if rc < 0 {
            return rc;
        }
        let mut ready = 0;
        for (i, c) in conns.iter().enumerate() {
            let mut got = asked[i].revents;
            if let Some(c) = c {
                if got & POLLIN != 0 && (fds[i].events & POLLIN == 0 || !c.readiness(false).readable) {
                    got &= !POLLIN;
                }
                if writable[i] {
                    got |= POLLOUT;
                }
            }
            fds[i].revents = got;
            ready += c_int::from(got != 0);
        }
        if ready > 0 || expired(end) {
            return ready;
        }
    }
}

/// # Safety
/// As select(2).
#[no_mangle]
pub unsafe extern "C" fn select(n: c_int, rd: *mut fd_set, wr: *mut fd_set, ex: *mut fd_set, tv: *mut timeval) -> c_int {
    let real = real!(select: unsafe extern "C" fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *mut timeval) -> c_int);
    let set = |s: *mut fd_set, fd: c_int| !s.is_null() && {
        // SAFETY: the caller's set, holding at least `n` descriptors.
        unsafe { libc::FD_ISSET(fd, s) }
    };
    let upgraded = (0..n.clamp(0, libc::FD_SETSIZE as c_int)).any(|fd| (set(rd, fd) || set(wr, fd)) && crate::conn(fd).is_some());
    if !upgraded {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(n, rd, wr, ex, tv) };
    }
    // As poll: each descriptor in any set, asked for what its sets ask.
    let mut fds = Vec::new();
    for fd in 0..n.min(libc::FD_SETSIZE as c_int) {
        let events = if set(rd, fd) { POLLIN } else { 0 } | if set(wr, fd) { POLLOUT } else { 0 } | if set(ex, fd) { libc::POLLPRI } else { 0 };
        if events != 0 {
            fds.push(pollfd { fd, events, revents: 0 });
        }
    }
    let timeout = if tv.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeout.
        let t = unsafe { &*tv };
        (t.tv_sec * 1000 + (t.tv_usec + 999) / 1000).clamp(0, i32::MAX as i64) as c_int
    };
    let started = Instant::now();
    let conns: Vec<_> = fds.iter().map(|p| crate::conn(p.fd)).collect();
    let poll_real = real!(poll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int);
    let rc = poll_mixed(&mut fds, &conns, timeout, |set, ms| {
        // SAFETY: the C library's poll, on a live array of `set.len()` descriptors.
        unsafe { poll_real(set.as_mut_ptr(), set.len() as nfds_t, ms) }
    });
    if rc < 0 {
        return rc;
    }
    for s in [rd, wr, ex] {
        if !s.is_null() {
            // SAFETY: the caller's set.
            unsafe { libc::FD_ZERO(s) };
        }
    }
    let mut count = 0;
    let mut mark = |s: *mut fd_set, fd: c_int| {
        if !s.is_null() {
            // SAFETY: the caller's set; `fd` is below FD_SETSIZE.
            unsafe { libc::FD_SET(fd, s) };
            count += 1;
        }
    };
    for p in &fds {
        let err = p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        if p.events & POLLIN != 0 && (p.revents & POLLIN != 0 || err) {
            mark(rd, p.fd);
        }
        if p.events & POLLOUT != 0 && (p.revents & POLLOUT != 0 || err) {
            mark(wr, p.fd);
        }
        if p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0 {
            mark(ex, p.fd);
        }
    }
    if !tv.is_null() {
        // Linux's select leaves the time not slept in the timeout.
        let left = Duration::from_millis(timeout as u64).saturating_sub(started.elapsed());
        // SAFETY: the caller's timeout.
        unsafe { *tv = timeval { tv_sec: left.as_secs() as libc::time_t, tv_usec: left.subsec_micros() as libc::suseconds_t } };
    }
    count
}

/// An upgraded descriptor in an epoll set.
#[derive(Clone, Copy)]
struct Watch {
    /// The events the program asked for.
    asked: u32,
    data: u64,
    /// The events the kernel watches: those asked but writability, and readability while a
    /// credit is awaited ([`wake_for_credit`]).
    kernel: u32,
}

/// Upgraded descriptors in epoll sets, by (epoll descriptor, descriptor).
static WATCHED: Mutex<BTreeMap<(c_int, c_int), Watch>> = Mutex::new(BTreeMap::new());

fn watched() -> std::sync::MutexGuard<'static, BTreeMap<(c_int, c_int), Watch>> {
    WATCHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// `fd` is being closed: as an epoll set, or as a descriptor in one.
pub(crate) fn forget(fd: c_int) {
    watched().retain(|&(ep, f), _| ep != fd && f != fd);
}

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
    let mut kernel = epoll_event { events: asked.events & !(EPOLLOUT as u32), u64: asked.u64 };
    // SAFETY: as above, with the event the kernel is to watch.
    let rc = unsafe { real(ep, op, fd, &mut kernel) };
    if rc == 0 {
        watched().insert((ep, fd), Watch { asked: asked.events, data: asked.u64, kernel: kernel.events });
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

/// # Safety
/// As epoll_pwait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(ep: c_int, events: *mut epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int {
    let real = real!(epoll_pwait: unsafe extern "C" fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int);
    let ours: Vec<(c_int, Arc<Conn>, Watch)> = {
        let w = watched();
        w.range((ep, c_int::MIN)..=(ep, c_int::MAX)).filter_map(|(&(_, fd), &watch)| crate::conn(fd).map(|c| (fd, c, watch))).collect()
    };
    if ours.is_empty() || events.is_null() || max <= 0 {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(ep, events, max, timeout, mask) };
    }
    let ctl = real!(epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut epoll_event) -> c_int);
    // SAFETY: the caller's array of `max` events.
    let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
    let room = out.len();
    let end = deadline(timeout);
    let (epout, epin) = (EPOLLOUT as u32, EPOLLIN as u32);
    loop {
        let (mut now, mut short) = (false, false);
        let mut writable = Vec::with_capacity(ours.len());
        for (fd, c, w) in &ours {
            let want_out = w.asked & epout != 0;
            let r = c.readiness(want_out);
            writable.push(want_out && r.writable);
            now |= want_out && r.writable;
            let (wake, look) = wake_for_credit(&r, want_out, w.asked & epin != 0);
            short |= look;
            let kernel = w.asked & !epout | if wake { epin } else { 0 };
            let mut table = watched();
            if let Some(cur) = table.get_mut(&(ep, *fd)).filter(|cur| cur.kernel != kernel) {
                let mut ev = epoll_event { events: kernel, u64: w.data };
                // SAFETY: the C library's epoll_ctl with a live event.
                if unsafe { ctl(ep, libc::EPOLL_CTL_MOD, *fd, &mut ev) } == 0 {
                    cur.kernel = kernel;
                }
            }
        }
        // SAFETY: as above.
        let rc = unsafe { real(ep, out.as_mut_ptr(), max, wait_ms(end, now, short), mask) };
        if rc < 0 {
            return rc;
        }
        let mut n = rc as usize;
        // Readability only if asked for and real: a wake-up may have brought a credit only.
        let mut i = 0;
        while i < n {
            if let Some((_, c, w)) = ours.iter().find(|(_, _, w)| w.data == out[i].u64) {
                if out[i].events & epin != 0 && (w.asked & epin == 0 || !c.readiness(false).readable) {
                    out[i].events &= !epin;
                }
            }
            if out[i].events == 0 {
                out[i] = out[n - 1];
                n -= 1;
            } else {
                i += 1;
            }
        }
        for ((_, _, w), _) in ours.iter().zip(&writable).filter(|(_, &ok)| ok) {
            match out[..n].iter_mut().find(|e| e.u64 == w.data) {
                Some(e) => e.events |= epout,
                None if n < room => {
                    out[n] = epoll_event { events: epout, u64: w.data };
                    n += 1;
                }
                None => {}
            }
        }
        if n > 0 || expired(end) {
            return n as c_int;
        }
    }
}
