//! Sockets over iWARP (`LD_PRELOAD=libiwarp_preload.so IWARP_SOCKETS=PORTS program`): TCP
//! connections on the ports named are upgraded to iwarp.ko QPs when the peer runs this library
//! too (found out beforehand, [`probe`]), and stay plain TCP otherwise. The calls here stand in
//! for the C library's: on a descriptor that is not upgraded each goes straight to the C
//! library's own; on an upgraded one, to its [`conn::Conn`]. Design: `docs/sockets.md`.

mod conn;
mod epoll_sets;
mod exit;
mod flags;
mod flusher;
mod probe;
mod readiness;
mod real;
mod rules;
mod shared;
mod signals;
mod stdio;

use conn::Conn;
use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t, timespec};
use libiwarp::Role;
use real::real;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Upgraded descriptors (a `dup` shares its original's connection).
static CONNS: RwLock<BTreeMap<RawFd, Arc<Conn>>> = RwLock::new(BTreeMap::new());
/// Whether anything was ever upgraded: until then no call takes the lock.
static ANY: AtomicBool = AtomicBool::new(false);
/// The process whose tables these are: this one, or its parent if this is a `vfork` child
/// sharing the parent's memory (or the child of a fork not seen here). Only the process whose
/// tables they are changes them: a `vfork` child closing its copies of the descriptors before
/// `exec` must not close its parent's connections.
static TABLES_OF: AtomicU32 = AtomicU32::new(0);

fn tables_are_ours() -> bool {
    let of = TABLES_OF.load(Ordering::Relaxed);
    of == 0 || of == std::process::id()
}

/// The tables are this process's from now on, once they name something of its own (an upgraded
/// connection, an answering listener): a `vfork` child may not release them.
fn claim_tables() {
    let _ = TABLES_OF.compare_exchange(0, std::process::id(), Ordering::Relaxed, Ordering::Relaxed);
}
/// Listening descriptors whose port answers the upgrade question, each with its answerer.
/// Duplicates of a listener (dup, dup2, dup3, F_DUPFD) share it, and it stops when the last of
/// them is closed: a connection accepted on any of them is upgraded, as its initiator was told.
static LISTENERS: Mutex<BTreeMap<RawFd, Arc<probe::Answerer>>> = Mutex::new(BTreeMap::new());

pub(crate) fn conn(fd: RawFd) -> Option<Arc<Conn>> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    CONNS.read().unwrap_or_else(|e| e.into_inner()).get(&fd).cloned()
}

fn forget(fd: RawFd) -> Option<Arc<Conn>> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    CONNS.write().unwrap_or_else(|e| e.into_inner()).remove(&fd)
}

/// Whether this process holds upgraded connections of its own.
fn holds_connections() -> bool {
    ANY.load(Ordering::Relaxed) && tables_are_ours()
}

/// Each connection once, however many descriptors name it (`dup`).
fn distinct<C: Borrow<Arc<Conn>>>(all: impl IntoIterator<Item = C>) -> Vec<C> {
    let mut once: Vec<C> = Vec::new();
    for c in all {
        if !once.iter().any(|k| Arc::ptr_eq(k.borrow(), c.borrow())) {
            once.push(c);
        }
    }
    once
}

/// How long the program's exit waits for its connections to close, at most: as long as one
/// close may take (a peer reading nothing holds it to its bounds).
const EXIT_WAIT: Duration = Duration::from_secs(16);

/// Closes every connection this process holds, each in a thread of its own, as its last close
/// would, waiting for them at most [`EXIT_WAIT`] (then the kernel ends what is left, abruptly):
/// at the program's exit ([`exit`]). Nothing here waits for a lock another thread may hold for
/// ever (a signal handler may have called `exit` in the middle of a call of the library's).
fn release_all() {
    let Ok(mut table) = CONNS.try_write() else { return };
    let conns = distinct(std::mem::take(&mut *table).into_values());
    drop(table);
    let (done, finished) = std::sync::mpsc::channel();
    let mut started = 0;
    for c in conns {
        let done = done.clone();
        // Each thread starts with signals held: none runs a handler of the program's.
        let spawned = signals::held(|| {
            std::thread::Builder::new().name("iwarp-exit".into()).spawn(move || {
                close_last(c);
                let _ = done.send(());
            })
        });
        match spawned {
            Ok(_) => started += 1,
            // No thread: the kernel ends it (waiting for it here would add its close to the
            // others').
            Err(_) => continue,
        }
    }
    let until = Instant::now() + EXIT_WAIT;
    for _ in 0..started {
        if finished.recv_timeout(until.saturating_duration_since(Instant::now())).is_err() {
            return;
        }
    }
}

/// Drops `c` once it is the last reference to its connection in this process, so that its
/// close runs in this thread: another (the flusher, looking at it a moment) would be ended by
/// the exit in the middle of it. Gives up after a second (a thread blocked in a call on it).
fn close_last(mut c: Arc<Conn>) {
    for _ in 0..1000 {
        match Arc::try_unwrap(c) {
            Ok(conn) => return drop(conn),
            Err(shared) => c = shared,
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Forgets `fd`'s connection; the last reference to it in this process closes it, or leaves it
/// to the other processes holding it (`Conn`'s `Drop`), whichever thread holds that reference.
fn release(fd: RawFd) {
    if !tables_are_ours() {
        return;
    }
    if ANY.load(Ordering::Relaxed) {
        readiness::forget(fd);
    }
    drop(forget(fd));
    let mut listeners = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(answerer) = listeners.remove(&fd) {
        if !listeners.values().any(|other| Arc::ptr_eq(other, &answerer)) {
            answerer.stop();
        }
    }
}

/// Whether to say on stderr what happens to connections (`IWARP_SOCKETS_LOG`).
pub(crate) fn logging() -> bool {
    std::env::var_os("IWARP_SOCKETS_LOG").is_some()
}

/// Says a line on stderr, named as ours, in one write: the lines of processes sharing stderr
/// (a forking server's) never interleave, as `eprintln!`'s pieces did.
pub(crate) fn say_line(args: std::fmt::Arguments<'_>) {
    let line = format!("iwarp-preload: {args}\n");
    // SAFETY: the C library's write with a buffer valid for its length.
    unsafe { real!(write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t)(2, line.as_ptr().cast(), line.len()) };
}

/// `say!(format, args…)`: [`say_line`] with `format!`'s arguments.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// A result as the C library reports it: the count, or -1 with errno.
fn report(r: io::Result<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            -1
        }
    }
}

/// A write's result as the C library reports it. A broken stream also raises SIGPIPE in the
/// calling thread, as TCP's send does, unless `flags` hold MSG_NOSIGNAL.
fn report_sent(r: io::Result<usize>, flags: c_int) -> ssize_t {
    if flags & libc::MSG_NOSIGNAL == 0 && r.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::EPIPE)) {
        // SAFETY: signals the calling thread, as the kernel does.
        unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGPIPE) };
    }
    report(r)
}

pub(crate) fn fcntl_real(fd: RawFd, cmd: c_int, arg: libc::c_ulong) -> c_int {
    let f = real!(fcntl: unsafe extern "C" fn(c_int, c_int, libc::c_ulong) -> c_int);
    // SAFETY: the C library's fcntl with an integer argument (the commands used here take one).
    unsafe { f(fd, cmd, arg) }
}

/// `addr` as an IPv4 address, if it is one: an IPv6 socket's IPv4-mapped address (or the
/// unspecified one, a dual-stack listener's) counts as its IPv4 address.
fn inet(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddrV4> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return None;
    }
    // SAFETY: the caller's address, at least a sockaddr_in long (checked above).
    let sin = unsafe { &*(addr as *const libc::sockaddr_in) };
    if sin.sin_family as c_int == libc::AF_INET {
        return Some(SocketAddrV4::new(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)), u16::from_be(sin.sin_port)));
    }
    if sin.sin_family as c_int != libc::AF_INET6 || (len as usize) < std::mem::size_of::<libc::sockaddr_in6>() {
        return None;
    }
    // SAFETY: at least a sockaddr_in6 long (checked above).
    let sin6 = unsafe { &*(addr as *const libc::sockaddr_in6) };
    let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
    let v4 = if ip.is_unspecified() { Some(Ipv4Addr::UNSPECIFIED) } else { ip.to_ipv4_mapped() };
    v4.map(|v4| SocketAddrV4::new(v4, u16::from_be(sin6.sin6_port)))
}

fn sockaddr_of(fd: RawFd, peer: bool) -> Option<SocketAddrV4> {
    // SAFETY: zeroed storage is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    let p = (&raw mut ss).cast::<sockaddr>();
    // SAFETY: storage and its length, both live.
    let rc = unsafe {
        if peer {
            getpeername_real(fd, p, &mut len)
        } else {
            getsockname_real(fd, p, &mut len)
        }
    };
    if rc == 0 {
        inet(p, len)
    } else {
        None
    }
}

unsafe fn getpeername_real(fd: RawFd, a: *mut sockaddr, l: *mut socklen_t) -> c_int {
    // SAFETY: as the caller's.
    unsafe { real!(getpeername: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int)(fd, a, l) }
}

unsafe fn getsockname_real(fd: RawFd, a: *mut sockaddr, l: *mut socklen_t) -> c_int {
    // SAFETY: as the caller's.
    unsafe { real!(getsockname: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int)(fd, a, l) }
}

fn is_tcp(fd: RawFd) -> bool {
    socket_option(fd, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
}

/// The integer socket option `name` (at SOL_SOCKET) of `fd`.
fn socket_option(fd: RawFd, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: an int and its length, both live.
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, name, (&raw mut v).cast(), &mut len) };
    (rc == 0).then_some(v)
}

/// Upgrades the connected socket `fd` as `role` and records it; on failure the descriptor is
/// unusable (the MPA exchange may have begun) and errno says why.
fn upgrade(fd: RawFd, role: Role, nonblocking: bool) -> bool {
    // Both duplicates are close-on-exec: a program exec'd later must not keep the socket.
    let dup = fcntl_real(fd, libc::F_DUPFD_CLOEXEC, 0);
    if dup < 0 {
        return false;
    }
    // SAFETY: `dup` is a fresh descriptor of a connected TCP socket, owned by nobody else.
    let stream = unsafe { TcpStream::from_raw_fd(dup) };
    let shadow = fcntl_real(fd, libc::F_DUPFD_CLOEXEC, 0);
    if shadow < 0 {
        return false;
    }
    // SAFETY: a fresh descriptor, owned by nobody else.
    let shadow = unsafe { OwnedFd::from_raw_fd(shadow) };
    // The module's exchange blocks; the descriptor's own flag matters no more afterwards.
    let _ = stream.set_nonblocking(false);
    match Conn::upgrade(stream, shadow, role, fd, nonblocking) {
        Ok(c) => {
            if logging() {
                say!("descriptor {fd} upgraded ({})", if role == Role::Initiator { "connected" } else { "accepted" });
            }
            let c = c.into_shared();
            let old = CONNS.write().unwrap_or_else(|e| e.into_inner()).insert(fd, c);
            ANY.store(true, Ordering::Relaxed);
            claim_tables();
            drop(old);
            true
        }
        Err(e) => {
            say!("upgrading descriptor {fd} failed: {e}");
            set_errno(libc::ECONNRESET);
            false
        }
    }
}

/// How long an upgrading connect holds signals back for TCP's connection at most.
const CONNECT_HELD: Duration = Duration::from_secs(1);

/// `fd`'s socket option `name` that is a time (SO_SNDTIMEO, SO_RCVTIMEO), as the C library's
/// getsockopt reads it (zero: none), or None if it cannot be read.
pub(crate) fn time_option(fd: RawFd, name: c_int) -> Option<Duration> {
    let mut tv = libc::timeval { tv_sec: 0, tv_usec: 0 };
    let mut len = std::mem::size_of::<libc::timeval>() as socklen_t;
    // SAFETY: a timeval and its length, both live.
    let rc = unsafe {
        real!(getsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int)(
            fd,
            libc::SOL_SOCKET,
            name,
            (&raw mut tv).cast(),
            &mut len,
        )
    };
    (rc == 0).then(|| Duration::new(tv.tv_sec.max(0) as u64, tv.tv_usec.max(0) as u32 * 1000))
}

/// Sets `fd`'s socket option `name` that is a time to `d`; whether it took.
fn set_time_option(fd: RawFd, name: c_int, d: Duration) -> bool {
    let tv = libc::timeval { tv_sec: d.as_secs() as libc::time_t, tv_usec: d.subsec_micros() as libc::suseconds_t };
    // SAFETY: a timeval and its length, both live.
    unsafe {
        real!(setsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int)(
            fd,
            libc::SOL_SOCKET,
            name,
            (&raw const tv).cast(),
            std::mem::size_of::<libc::timeval>() as socklen_t,
        ) == 0
    }
}

/// Runs `f` (a connect) with `fd`'s SO_SNDTIMEO, which bounds a blocking connect, set to `limit`,
/// then puts the program's back; errno stays `f`'s.
fn with_send_timeout(fd: RawFd, limit: Duration, f: impl FnOnce() -> c_int) -> c_int {
    let old = time_option(fd, libc::SO_SNDTIMEO).filter(|_| set_time_option(fd, libc::SO_SNDTIMEO, limit));
    let rc = f();
    if let Some(old) = old {
        let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        set_time_option(fd, libc::SO_SNDTIMEO, old);
        set_errno(e);
    }
    rc
}

/// The rest of a blocking connect that stays plain TCP (its upgrade's wait ran out): waits for
/// TCP as the program's connect would, within its SO_SNDTIMEO (EINPROGRESS after it), and ends
/// with EINTR on a signal (the connection goes on, as an interrupted connect's does).
fn connected_plain(fd: RawFd) -> c_int {
    let limit = match time_option(fd, libc::SO_SNDTIMEO) {
        Some(d) if !d.is_zero() => c_int::try_from(d.as_millis()).unwrap_or(c_int::MAX),
        _ => -1,
    };
    let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    // SAFETY: one live pollfd; the C library's poll (the program's socket is plain here).
    let n = unsafe { real!(poll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int)(&mut p, 1, limit) };
    match n {
        n if n < 0 => -1,
        0 => {
            set_errno(libc::EINPROGRESS);
            -1
        }
        _ => match socket_option(fd, libc::SO_ERROR) {
            Some(0) => 0,
            e => {
                set_errno(e.unwrap_or(libc::EIO));
                -1
            }
        },
    }
}

/// # Safety
/// As connect(2).
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let real = real!(connect: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int);
    let Some(to) = inet(addr, len).filter(|to| rules::chosen(rules::Side::Connect, *to) && is_tcp(fd)) else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(fd, addr, len) };
    };
    if !conn::room_to_pin() {
        say!("RLIMIT_MEMLOCK leaves no room for another connection's buffers: {to} stays plain TCP");
        // SAFETY: as above.
        return unsafe { real(fd, addr, len) };
    }
    // Our port must be known before we ask: bind to one now if the program did not.
    let from = match sockaddr_of(fd, false) {
        Some(a) if a.port() != 0 => a.port(),
        _ => {
            // SAFETY: a zeroed sockaddr_in is valid; its family and any port set below.
            let mut any: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            any.sin_family = libc::AF_INET as libc::sa_family_t;
            // SAFETY: binds to an address of the right length.
            let rc = unsafe { libc::bind(fd, (&raw const any).cast(), std::mem::size_of::<libc::sockaddr_in>() as socklen_t) };
            match sockaddr_of(fd, false) {
                Some(a) if rc == 0 => a.port(),
                // SAFETY: as above.
                _ => return unsafe { real(fd, addr, len) },
            }
        }
    };
    // The question (at most 150 ms) with signals held back: a signal would use up its tries.
    if !conn::module_present() || !signals::held(|| probe::ask(to, from)) {
        // SAFETY: as above.
        return unsafe { real(fd, addr, len) };
    }
    let flags = fcntl_real(fd, libc::F_GETFL, 0);
    let nonblocking = flags >= 0 && flags & libc::O_NONBLOCK != 0;
    if nonblocking {
        fcntl_real(fd, libc::F_SETFL, (flags & !libc::O_NONBLOCK) as libc::c_ulong);
    }
    // The connection, once the server said yes, with signals held back too (a signal would end
    // connect with EINTR while TCP goes on connecting, and a caller that waits for that, as
    // Python does, never calls connect again to be upgraded), but for [`CONNECT_HELD`] at most:
    // a server that answered may still not take the connection at once (a full backlog, a
    // lost SYN). Then it goes on as plain TCP: the server upgrades only a client that sends an
    // MPA request.
    // SAFETY: as above.
    let rc = signals::held(|| with_send_timeout(fd, CONNECT_HELD, || unsafe { real(fd, addr, len) }));
    if rc != 0 {
        let e = io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        if nonblocking {
            fcntl_real(fd, libc::F_SETFL, flags as libc::c_ulong);
        } else if e == libc::EINPROGRESS {
            return connected_plain(fd);
        }
        set_errno(e);
        return rc;
    }
    let watchers = epoll_sets::Watchers::take(fd);
    let upgraded = upgrade(fd, Role::Initiator, nonblocking);
    watchers.restore(fd);
    if upgraded {
        0
    } else {
        -1
    }
}

/// # Safety
/// As listen(2).
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    let real = real!(listen: unsafe extern "C" fn(c_int, c_int) -> c_int);
    // A bound socket answers questions before TCP accepts its first connection: a client that
    // connects just as the listener starts must not find it silent and stay plain TCP. An
    // unbound one gets its port from listen itself, so it can only answer after.
    let bound = sockaddr_of(fd, false).is_some_and(|a| a.port() != 0);
    let early = if bound { answer_for(fd) } else { None };
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(fd, backlog) };
    let answering = if rc != 0 {
        // Nothing listens: the answerer stops, and frees the UDP port for the next try.
        if let Some(answerer) = early {
            answerer.stop();
        }
        None
    } else if bound {
        early
    } else {
        answer_for(fd)
    };
    if let Some(answerer) = answering {
        claim_tables();
        LISTENERS.lock().unwrap_or_else(|e| e.into_inner()).insert(fd, answerer);
    }
    rc
}

/// Starts answering questions for the listener `fd` if its connections are to be upgraded:
/// its answerer, or None (its connections stay plain TCP; a listener
/// already answering, such as one `listen` is called on again, keeps its answerer).
fn answer_for(fd: RawFd) -> Option<Arc<probe::Answerer>> {
    if LISTENERS.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&fd) {
        return None;
    }
    let at = sockaddr_of(fd, false).filter(|a| rules::chosen(rules::Side::Listen, *a) && is_tcp(fd))?;
    if !conn::module_present() {
        say!("no iwarp device: connections to {at} stay plain TCP");
        return None;
    }
    if socket_option(fd, libc::SO_REUSEPORT).is_some_and(|v| v != 0) {
        // Listeners of a group share the port: the one that answers a question may not be the
        // one TCP hands the connection to, and their questions are not shared.
        say!("SO_REUSEPORT: connections to {at} stay plain TCP");
        return None;
    }
    let answerer = probe::answer(at);
    if answerer.is_none() {
        say!("UDP port {} is taken: connections to {at} stay plain TCP", at.port());
    }
    answerer
}

/// # Safety
/// As accept4(2).
#[no_mangle]
pub unsafe extern "C" fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    let real = real!(accept4: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int);
    // SAFETY: the caller's arguments, passed on.
    let new = unsafe { real(fd, addr, len, flags) };
    if new < 0 || !LISTENERS.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&fd) {
        return new;
    }
    match sockaddr_of(new, true) {
        Some(peer) if probe::was_asked(peer) => {
            if !probe::client_upgrades(new) {
                say!("{peer} asked but does not upgrade: plain TCP");
                new
            } else if upgrade(new, Role::Responder, flags & libc::SOCK_NONBLOCK != 0) {
                new
            } else {
                // SAFETY: our descriptor, not handed out.
                unsafe { libc::close(new) };
                set_errno(libc::ECONNABORTED);
                -1
            }
        }
        _ => new,
    }
}

/// # Safety
/// As accept(2).
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: as accept4 with no flags.
    unsafe { accept4(fd, addr, len, 0) }
}

/// # Safety
/// As recv(2).
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(c) = conn(fd) else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real!(recv: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t)(fd, buf, n, flags) };
    };
    // SAFETY: the caller's buffer of `n` octets.
    let out = unsafe { slice_mut(buf, n) };
    report(flags::recv(flags).and_then(|f| c.read(out, f.peek, f.wait_all, f.dont_wait)))
}

/// # Safety
/// As read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match conn(fd) {
        // SAFETY: the caller's buffer of `n` octets.
        Some(c) => report(c.read(unsafe { slice_mut(buf, n) }, false, false, false)),
        // SAFETY: the caller's arguments, passed on.
        None => unsafe { real!(read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, n) },
    }
}

/// # Safety
/// As recvfrom(2) (an upgraded socket reports no source address, as TCP does not).
#[no_mangle]
pub unsafe extern "C" fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t {
    if conn(fd).is_none() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe {
            real!(recvfrom: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t)(fd, buf, n, flags, addr, len)
        };
    }
    if !len.is_null() {
        // SAFETY: the caller's length field.
        unsafe { *len = 0 };
    }
    // SAFETY: as recv.
    unsafe { recv(fd, buf, n, flags) }
}

// The fortified calls (`_FORTIFY_SOURCE`, as Debian builds its programs) that programs make
// instead of read, recv and recvfrom when the buffer's size is known: they would reach the
// eventfd itself past this library. Each checks the size as the C library's does, then reads.

/// The C library's check failed: a read longer than its buffer. It aborts, as the C library's
/// own check does.
pub(crate) fn chk_fail() -> ! {
    // SAFETY: __chk_fail takes no arguments and does not return.
    unsafe { real!(__chk_fail: unsafe extern "C" fn() -> !)() }
}

/// # Safety
/// As __read_chk (read(2) into a buffer of `size` octets).
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, size: size_t) -> ssize_t {
    if n > size {
        chk_fail();
    }
    // SAFETY: as read.
    unsafe { read(fd, buf, n) }
}

/// # Safety
/// As __recv_chk (recv(2) into a buffer of `size` octets).
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, size: size_t, flags: c_int) -> ssize_t {
    if n > size {
        chk_fail();
    }
    // SAFETY: as recv.
    unsafe { recv(fd, buf, n, flags) }
}

/// # Safety
/// As __recvfrom_chk (recvfrom(2) into a buffer of `size` octets).
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    size: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if n > size {
        chk_fail();
    }
    // SAFETY: as recvfrom.
    unsafe { recvfrom(fd, buf, n, flags, addr, len) }
}

/// # Safety
/// As send(2).
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    match conn(fd) {
        // SAFETY: the caller's buffer of `n` octets.
        Some(c) => report_sent(flags::send(flags).and_then(|dont_wait| c.write(unsafe { slice(buf, n) }, dont_wait)), flags),
        // SAFETY: the caller's arguments, passed on.
        None => unsafe { real!(send: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t)(fd, buf, n, flags) },
    }
}

/// # Safety
/// As sendto(2) (the address is ignored on a connected socket, as TCP does).
#[no_mangle]
pub unsafe extern "C" fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t {
    if conn(fd).is_none() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe {
            real!(sendto: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t)(fd, buf, n, flags, addr, len)
        };
    }
    // SAFETY: as send.
    unsafe { send(fd, buf, n, flags) }
}

/// # Safety
/// As write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match conn(fd) {
        // SAFETY: the caller's buffer of `n` octets.
        Some(c) => report_sent(c.write(unsafe { slice(buf, n) }, false), 0),
        // SAFETY: the caller's arguments, passed on.
        None => unsafe { real!(write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t)(fd, buf, n) },
    }
}

/// Reads into the vectors: one read of their total length, scattered, so that peeking and
/// waiting for all see the vectors as one buffer.
///
/// # Safety
/// Each vector describes `iov_len` writable octets at `iov_base`.
unsafe fn readv_conn(c: &Conn, iov: &[iovec], flags: c_int) -> io::Result<usize> {
    let flags::Recv { peek, wait_all: all, dont_wait } = flags::recv(flags)?;
    let mut filled = iov.iter().filter(|v| v.iov_len > 0);
    if let (Some(only), None) = (filled.next(), filled.next()) {
        // SAFETY: as this function's caller promises.
        return c.read(unsafe { iov_slice(only) }, peek, all, dont_wait);
    }
    let mut tmp = vec![0u8; iov.iter().map(|v| v.iov_len).sum()];
    let n = c.read(&mut tmp, peek, all, dont_wait)?;
    let mut at = 0;
    for v in iov.iter().filter(|v| v.iov_len > 0) {
        if at == n {
            break;
        }
        // SAFETY: as this function's caller promises.
        let out = unsafe { iov_slice(v) };
        let k = out.len().min(n - at);
        out[..k].copy_from_slice(&tmp[at..at + k]);
        at += k;
    }
    Ok(n)
}

/// One of the caller's vectors as a slice.
///
/// # Safety
/// `v` describes `iov_len` writable octets at `iov_base`, not otherwise borrowed.
unsafe fn iov_slice<'a>(v: &iovec) -> &'a mut [u8] {
    // SAFETY: as the caller promises.
    unsafe { slice_mut(v.iov_base, v.iov_len) }
}

/// Writes the vectors as one stream of octets: small vectors share a message (non-blocking: as
/// far as they fit).
fn writev_conn(c: &Conn, iov: &[iovec], flags: c_int) -> io::Result<usize> {
    let total = iov.iter().map(|v| v.iov_len).sum();
    c.write_from(total, flags::send(flags)?, &mut |mut at, out| {
        let mut filled = 0;
        for v in iov {
            if filled == out.len() {
                break;
            }
            if at >= v.iov_len {
                at -= v.iov_len;
                continue;
            }
            // SAFETY: the caller's vector, `iov_len` readable octets.
            let src = unsafe { slice(v.iov_base, v.iov_len) };
            let k = (src.len() - at).min(out.len() - filled);
            out[filled..filled + k].copy_from_slice(&src[at..at + k]);
            filled += k;
            at = 0;
        }
        Ok(filled)
    })
}

/// # Safety
/// As sendfile(2): `offset` is null or points to the offset to read `in_fd` from (and is
/// advanced); without it, `in_fd`'s own offset is used and advanced.
#[no_mangle]
pub unsafe extern "C" fn sendfile(out_fd: c_int, in_fd: c_int, offset: *mut libc::off_t, count: size_t) -> ssize_t {
    let Some(c) = conn(out_fd) else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real!(sendfile: unsafe extern "C" fn(c_int, c_int, *mut libc::off_t, size_t) -> ssize_t)(out_fd, in_fd, offset, count) };
    };
    // The file is read straight into the send ring: one copy, as write's.
    // SAFETY: the caller's offset, if any.
    let start = if offset.is_null() { None } else { Some(unsafe { *offset }) };
    let r = c.write_from(count, false, &mut |at, out| {
        // SAFETY: reads into a live buffer of `out.len()` octets.
        let n = unsafe {
            match start {
                Some(off) => libc::pread(in_fd, out.as_mut_ptr().cast(), out.len(), off + at as libc::off_t),
                // The C library's own: the stream's lock is held here.
                None => real!(read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t)(in_fd, out.as_mut_ptr().cast(), out.len()),
            }
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    });
    if let (Ok(n), Some(off)) = (&r, start) {
        // SAFETY: as above.
        unsafe { *offset = off + *n as libc::off_t };
    }
    report_sent(r, 0)
}

/// # Safety
/// As sendfile64 (what programs built with 64-bit file offsets call).
#[no_mangle]
pub unsafe extern "C" fn sendfile64(out_fd: c_int, in_fd: c_int, offset: *mut libc::off_t, count: size_t) -> ssize_t {
    // SAFETY: the same call (off_t is 64 bits on the targets built for).
    unsafe { sendfile(out_fd, in_fd, offset, count) }
}

/// # Safety
/// As readv(2).
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    match conn(fd) {
        // SAFETY: the caller's vectors.
        Some(c) => report(unsafe { vecs(iov, n) }.and_then(|v| unsafe { readv_conn(&c, v, 0) })),
        // SAFETY: the caller's arguments, passed on.
        None => unsafe { real!(readv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t)(fd, iov, n) },
    }
}

/// # Safety
/// As writev(2).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    match conn(fd) {
        // SAFETY: the caller's vectors.
        Some(c) => report_sent(unsafe { vecs(iov, n) }.and_then(|v| writev_conn(&c, v, 0)), 0),
        // SAFETY: the caller's arguments, passed on.
        None => unsafe { real!(writev: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t)(fd, iov, n) },
    }
}

/// # Safety
/// As recvmsg(2) (no control messages on an upgraded socket).
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    let Some(c) = conn(fd) else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real!(recvmsg: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t)(fd, msg, flags) };
    };
    // SAFETY: the caller's message header.
    let m = unsafe { &mut *msg };
    m.msg_namelen = 0;
    m.msg_controllen = 0;
    m.msg_flags = 0;
    // SAFETY: its vectors.
    report(unsafe { vecs(m.msg_iov, m.msg_iovlen) }.and_then(|v| unsafe { readv_conn(&c, v, flags) }))
}

/// # Safety
/// As sendmsg(2) (control messages are not carried).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    let Some(c) = conn(fd) else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real!(sendmsg: unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t)(fd, msg, flags) };
    };
    // SAFETY: the caller's message header and its vectors.
    let m = unsafe { &*msg };
    // SAFETY: as above.
    report_sent(unsafe { vecs(m.msg_iov, m.msg_iovlen) }.and_then(|v| writev_conn(&c, v, flags)), flags)
}

/// Each message as sendmsg sends it, in order, until one fails: the count sent, or -1 if the
/// first failed (as the kernel reports it).
///
/// # Safety
/// As sendmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(fd: c_int, msgs: *mut libc::mmsghdr, n: libc::c_uint, flags: c_int) -> c_int {
    if conn(fd).is_none() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real!(sendmmsg: unsafe extern "C" fn(c_int, *mut libc::mmsghdr, libc::c_uint, c_int) -> c_int)(fd, msgs, n, flags) };
    }
    let mut done = 0;
    for i in 0..n as usize {
        // SAFETY: the caller's `n` messages.
        let m = unsafe { &mut *msgs.add(i) };
        // SAFETY: as above, one of them.
        let sent = unsafe { sendmsg(fd, &m.msg_hdr, flags) };
        if sent < 0 {
            return if done > 0 { done } else { -1 };
        }
        m.msg_len = sent as libc::c_uint;
        done += 1;
    }
    done
}

/// Each message as recvmsg receives it, in order, until one fails (MSG_WAITFORONE: waiting
/// for the first only; `timeout`, looked at after each message, as the kernel does).
///
/// # Safety
/// As recvmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(fd: c_int, msgs: *mut libc::mmsghdr, n: libc::c_uint, flags: c_int, timeout: *mut timespec) -> c_int {
    if conn(fd).is_none() {
        let real = real!(recvmmsg: unsafe extern "C" fn(c_int, *mut libc::mmsghdr, libc::c_uint, c_int, *mut timespec) -> c_int);
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(fd, msgs, n, flags, timeout) };
    }
    // SAFETY: the caller's timeout, if any.
    let until = unsafe { timeout.as_ref() }
        .map(|t| std::time::Instant::now() + std::time::Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32));
    let mut done = 0;
    for i in 0..n as usize {
        let mut f = flags & !libc::MSG_WAITFORONE;
        if i > 0 && flags & libc::MSG_WAITFORONE != 0 {
            f |= libc::MSG_DONTWAIT;
        }
        // SAFETY: the caller's `n` messages.
        let m = unsafe { &mut *msgs.add(i) };
        // SAFETY: as above, one of them.
        let got = unsafe { recvmsg(fd, &mut m.msg_hdr, f) };
        if got < 0 {
            return if done > 0 { done } else { -1 };
        }
        m.msg_len = got as libc::c_uint;
        done += 1;
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            break;
        }
    }
    done
}

/// # Safety
/// As close(2).
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if tables_are_ours() && is_library_descriptor(fd) {
        // A number the program never had (a loop closing every descriptor but a few, in a
        // forked child): as over TCP, there is nothing open there for it to close.
        set_errno(libc::EBADF);
        return -1;
    }
    release(fd);
    // SAFETY: the caller's descriptor, passed on.
    unsafe { real!(close: unsafe extern "C" fn(c_int) -> c_int)(fd) }
}

/// Closes `first..=last` as the program asked, but as `close` would: the connections and
/// listeners of descriptors in the range are released first, and the library's own descriptors
/// in it (connections', the flusher's, the answering sockets') stay open, the range closed
/// around them. (The kernel's call would leave the tables naming closed descriptors, and
/// close the library's under connections still in use.) `CLOSE_RANGE_CLOEXEC` only marks
/// descriptors, and goes to the kernel as it is.
///
/// # Safety
/// As close_range(2).
#[no_mangle]
pub unsafe extern "C" fn close_range(first: libc::c_uint, last: libc::c_uint, flags: c_int) -> c_int {
    let real = real!(close_range: unsafe extern "C" fn(libc::c_uint, libc::c_uint, c_int) -> c_int);
    if first > last || flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 || !tables_are_ours() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(first, last, flags) };
    }
    let in_range = |fd: &RawFd| (first..=last).contains(&(*fd as libc::c_uint));
    let mut named: Vec<RawFd> = CONNS.read().unwrap_or_else(|e| e.into_inner()).keys().copied().filter(in_range).collect();
    named.extend(LISTENERS.lock().unwrap_or_else(|e| e.into_inner()).keys().copied().filter(in_range));
    for fd in named {
        release(fd);
    }
    let mut keep = library_descriptors();
    keep.retain(in_range);
    keep.sort_unstable();
    keep.dedup();
    let mut from = first;
    for k in keep.into_iter().map(|k| k as libc::c_uint) {
        if k > from {
            // SAFETY: a part of the caller's range.
            let rc = unsafe { real(from, k - 1, flags) };
            if rc != 0 {
                return rc;
            }
        }
        from = k + 1;
    }
    if from <= last {
        // SAFETY: the rest of the caller's range.
        return unsafe { real(from, last, flags) };
    }
    0
}

/// The library's own descriptors (connections', the flusher's, the answering sockets').
fn library_descriptors() -> Vec<RawFd> {
    let mut fds: Vec<RawFd> = CONNS.read().unwrap_or_else(|e| e.into_inner()).values().flat_map(|c| c.descriptors()).collect();
    fds.extend(flusher::descriptor());
    fds.extend(probe::descriptors());
    fds
}

/// Whether `fd` is one of the library's own descriptors, looked up without waiting for a lock:
/// the library closes its own descriptors with some of these held (a connection whose last
/// reference goes in the flusher's look), and those are no longer listed then.
fn is_library_descriptor(fd: RawFd) -> bool {
    let conns = ANY.load(Ordering::Relaxed)
        && (CONNS.try_read().is_ok_and(|t| t.values().any(|c| c.descriptors().contains(&fd))) || flusher::try_descriptor() == Some(fd));
    conns || probe::answers_on(fd)
}

/// As `close_range(low, ~0, 0)`: the C library's own closes the library's descriptors too.
///
/// # Safety
/// As closefrom(3).
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    // SAFETY: a range from the caller's descriptor on; closefrom reports nothing.
    unsafe { close_range(low.max(0) as libc::c_uint, libc::c_uint::MAX, 0) };
}

/// Forks, and counts the child a holder of every connection (both sides of the fork add it,
/// so that neither can close a connection as its last holder while the other has it): each
/// process may use each connection, as a TCP socket, and the last one to close it ends it.
///
/// # Safety
/// As fork(2).
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let real = real!(fork: unsafe extern "C" fn() -> libc::pid_t);
    // Every lock a child's first calls may take is held across the fork, in their order, so
    // that no other thread holds one in the child's copy. (The streams' locks are in memory the
    // processes share: another thread's is released in both.) The listeners' first: closing a
    // listener stops its answerer with it held, and the answerer's thread takes the list of
    // answering sockets.
    let listeners = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
    let mut answering = probe::hold();
    if !ANY.load(Ordering::Relaxed) {
        // SAFETY: the C library's fork.
        let pid = unsafe { real() };
        if pid == 0 {
            TABLES_OF.store(std::process::id(), Ordering::Relaxed);
            probe::forked(&mut answering);
        }
        drop(answering);
        drop(listeners);
        return pid;
    }
    let watching = readiness::hold();
    let table = CONNS.read().unwrap_or_else(|e| e.into_inner());
    let conns = distinct(table.values());
    let mut flushing = flusher::hold();
    // SAFETY: as above; the locks held are released on both sides of it below.
    let pid = unsafe { real() };
    if pid > 0 {
        conns.iter().for_each(|c| c.forked_to(pid as u32));
    }
    if pid == 0 {
        TABLES_OF.store(std::process::id(), Ordering::Relaxed);
        conns.iter().for_each(|c| c.forked());
        flusher::forked(&mut flushing);
        probe::forked(&mut answering);
    }
    drop(flushing);
    drop(table);
    drop(watching);
    drop(answering);
    drop(listeners);
    pid
}

/// # Safety
/// As shutdown(2).
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    let Some(c) = conn(fd) else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real!(shutdown: unsafe extern "C" fn(c_int, c_int) -> c_int)(fd, how) };
    };
    if !(libc::SHUT_RD..=libc::SHUT_RDWR).contains(&how) {
        set_errno(libc::EINVAL);
        return -1;
    }
    if how != libc::SHUT_WR {
        if let Err(e) = c.shut_read() {
            return report(Err(e)) as c_int;
        }
    }
    if how != libc::SHUT_RD {
        return report(c.end().map(|_| 0)) as c_int;
    }
    0
}

/// # Safety
/// As dup(2).
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's descriptor, passed on.
    let new = unsafe { real!(dup: unsafe extern "C" fn(c_int) -> c_int)(fd) };
    share(fd, new);
    new
}

/// # Safety
/// As dup2(2).
#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    if fd != to && is_open(fd) {
        release(to);
    }
    // SAFETY: the caller's descriptors, passed on.
    let new = unsafe { real!(dup2: unsafe extern "C" fn(c_int, c_int) -> c_int)(fd, to) };
    share(fd, new);
    new
}

/// # Safety
/// As dup3(2).
#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    // The C library's call refuses these (EINVAL) without closing `to`.
    if fd != to && flags & !libc::O_CLOEXEC == 0 && is_open(fd) {
        release(to);
    }
    // SAFETY: the caller's descriptors, passed on.
    let new = unsafe { real!(dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int)(fd, to, flags) };
    share(fd, new);
    new
}

/// Whether `fd` is an open descriptor: `dup2` and `dup3` of one that is not fail (EBADF) and
/// leave their target open, and so its connection.
fn is_open(fd: RawFd) -> bool {
    fcntl_real(fd, libc::F_GETFD, 0) >= 0
}

/// `new` (a duplicate of `fd`) shares `fd`'s connection or listener, if it has one.
fn share(fd: RawFd, new: RawFd) {
    if new >= 0 && new != fd && tables_are_ours() {
        if let Some(c) = conn(fd) {
            let old = CONNS.write().unwrap_or_else(|e| e.into_inner()).insert(new, c);
            // Dropped after the lock: closing a connection calls close(2), which takes it.
            drop(old);
        }
        let mut listeners = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(answerer) = listeners.get(&fd).cloned() {
            listeners.insert(new, answerer);
        }
    }
}

/// # Safety
/// As getsockopt(2).
#[no_mangle]
pub unsafe extern "C" fn getsockopt(fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int {
    let c = conn(fd);
    if let Some(c) = c.as_ref().filter(|_| level == libc::SOL_SOCKET && name == libc::SO_ERROR) {
        // The stream's error, not the TCP socket's (which the module holds).
        // SAFETY: the caller's int-sized option buffer and its length.
        return unsafe { int_option(val, len, c.take_error()) };
    }
    let fd = c.map_or(fd, |c| c.shadow.as_raw_fd());
    // SAFETY: the caller's arguments, passed on (for an upgraded socket, to the TCP socket).
    unsafe { real!(getsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int)(fd, level, name, val, len) }
}

/// Answers an int-sized socket option.
///
/// # Safety
/// `val` and `len` are getsockopt(2)'s.
unsafe fn int_option(val: *mut c_void, len: *mut socklen_t, v: c_int) -> c_int {
    const INT: usize = std::mem::size_of::<c_int>();
    // SAFETY: as the caller promises.
    let room = if len.is_null() { 0 } else { (unsafe { *len }) as usize };
    if val.is_null() || room < INT {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: `room` writable octets at `val`, at least an int.
    unsafe {
        std::ptr::write_unaligned(val.cast::<c_int>(), v);
        *len = INT as socklen_t;
    }
    0
}

/// # Safety
/// As setsockopt(2).
#[no_mangle]
pub unsafe extern "C" fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int {
    let fd = conn(fd).map_or(fd, |c| c.shadow.as_raw_fd());
    // SAFETY: the caller's arguments, passed on (for an upgraded socket, to the TCP socket).
    unsafe { real!(setsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int)(fd, level, name, val, len) }
}

/// # Safety
/// As getpeername(2).
#[no_mangle]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let fd = conn(fd).map_or(fd, |c| c.shadow.as_raw_fd());
    // SAFETY: the caller's arguments, passed on.
    unsafe { getpeername_real(fd, addr, len) }
}

/// # Safety
/// As getsockname(2).
#[no_mangle]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let fd = conn(fd).map_or(fd, |c| c.shadow.as_raw_fd());
    // SAFETY: the caller's arguments, passed on.
    unsafe { getsockname_real(fd, addr, len) }
}

/// # Safety
/// As fcntl(2) with an integer or pointer argument (every command takes at most one).
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    if let Some(c) = conn(fd) {
        // The application's O_NONBLOCK is the connection's; the descriptor keeps its own.
        match cmd {
            libc::F_GETFL => return (fcntl_real(fd, cmd, 0) & !libc::O_NONBLOCK) | if c.nonblocking() { libc::O_NONBLOCK } else { 0 },
            libc::F_SETFL => {
                c.set_nonblocking(arg as c_int & libc::O_NONBLOCK != 0);
                return 0;
            }
            _ => {}
        }
    }
    let new = fcntl_real(fd, cmd, arg);
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        share(fd, new);
    }
    new
}

/// # Safety
/// As fcntl64 (what programs built with 64-bit file offsets call).
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    // SAFETY: the same call.
    unsafe { fcntl(fd, cmd, arg) }
}

/// # Safety
/// As ioctl(2) with one argument.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: *mut c_void) -> c_int {
    // The request is tested first: the library's own ioctls (the module's doorbells, under a
    // stream's lock) must not take the table's.
    let ours = [libc::FIONBIO, libc::FIONREAD, libc::TIOCOUTQ, libc::SIOCOUTQNSD];
    if let Some(c) = ours.contains(&req).then(|| conn(fd)).flatten() {
        if arg.is_null() {
            set_errno(libc::EFAULT);
            return -1;
        }
        match req {
            libc::FIONBIO => {
                // SAFETY: FIONBIO takes a pointer to an int.
                c.set_nonblocking(unsafe { *(arg as *const c_int) } != 0);
                return 0;
            }
            libc::FIONREAD => {
                return match c.unread() {
                    // SAFETY: FIONREAD (SIOCINQ) takes a pointer to an int.
                    Ok(n) => unsafe {
                        *(arg as *mut c_int) = n.min(c_int::MAX as usize) as c_int;
                        0
                    },
                    Err(e) => report(Err(e)) as c_int,
                };
            }
            // What the peer has not acknowledged is the module's to know, not the library's.
            _ => {
                set_errno(libc::EOPNOTSUPP);
                return -1;
            }
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { real!(ioctl: unsafe extern "C" fn(c_int, libc::c_ulong, *mut c_void) -> c_int)(fd, req, arg) }
}

/// # Safety
/// `buf` points to `n` writable octets (or `n` is 0).
unsafe fn slice_mut<'a>(buf: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: as the caller promises.
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) }
}

/// # Safety
/// `buf` points to `n` readable octets (or `n` is 0).
unsafe fn slice<'a>(buf: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    // SAFETY: as the caller promises.
    unsafe { std::slice::from_raw_parts(buf.cast(), n) }
}

/// The caller's vectors; EINVAL for a negative count, more than IOV_MAX, or lengths whose sum
/// overflows, as the kernel answers.
///
/// # Safety
/// `iov` points to `n` vectors (or `n` is 0).
unsafe fn vecs<'a>(iov: *const iovec, n: impl TryInto<usize>) -> io::Result<&'a [iovec]> {
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    let n: usize = n.try_into().map_err(|_| einval())?;
    if n > libc::UIO_MAXIOV as usize {
        return Err(einval());
    }
    if n == 0 || iov.is_null() {
        return Ok(&[]);
    }
    // SAFETY: as the caller promises.
    let v = unsafe { std::slice::from_raw_parts(iov, n) };
    v.iter().try_fold(0isize, |sum, v| isize::try_from(v.iov_len).ok().and_then(|l| sum.checked_add(l))).ok_or_else(einval)?;
    Ok(v)
}
