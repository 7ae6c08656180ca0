//! Finding out, without touching the TCP stream, whether the peer upgrades too: before it
//! connects, a client asks the server's UDP port of the same number ("will you upgrade my
//! connection from port S?"). A listener of this library answers there and remembers the
//! question; when `accept` returns that connection, and its first octets are an MPA request,
//! both sides upgrade. Any other outcome (no answer, ICMP port unreachable, a foreign answer,
//! an answer the client missed) leaves the connection plain TCP, not one octet of its stream
//! touched.
//!
//! The questions answered live in memory shared with every process forked after the first
//! listener: a prefork server's master answers, and whichever worker accepts the connection
//! finds the question.

use crate::real::real;
use crate::signals;
use iwarp_proto::mpa::frame::REQUEST_KEY;
use libiwarp::sockets_wire::Probe;
use std::ffi::c_int;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Tries, and how long each waits for the answer.
const TRIES: u32 = 3;
const WAIT: Duration = Duration::from_millis(50);
/// How long a listener remembers a question whose connection has not been accepted, in whole
/// seconds: the client's MPA exchange gives up after 10 s, and a second may have begun just
/// before the question.
const REMEMBER: u64 = 11;
/// Questions remembered at most; a question finding no room is not answered.
const MOST: usize = 1024;
/// A slot's key while its question is being written.
const WRITING: u64 = u64::MAX;

/// Questions answered and not yet matched by an accepted connection. A slot's key is `the
/// second it was claimed (mod 2^16) << 48 | client address << 16 | its port` (0 when free), its
/// second when the question was last answered. Keys are set and cleared by compare-and-swap
/// only (the processes sharing the table share no lock): a slot is claimed by its key going
/// from 0 to [`WRITING`], its second written, then its key published. The claim's second in
/// the key makes a slot freed and claimed again for the same connection a different key, so a
/// compare-and-swap decided on the old entry's second fails.
struct Asked {
    keys: [AtomicU64; MOST],
    seconds: [AtomicU64; MOST],
}

/// The table, mapped shared (so `fork` shares rather than copies it) by the first listener;
/// null until then.
static ASKED: AtomicPtr<Asked> = AtomicPtr::new(std::ptr::null_mut());

impl Asked {
    /// The table, mapped at the first call (None if mapping fails: nothing is answered then).
    /// Lock-free, so a `fork` while another thread maps it leaves the child nothing to wait on.
    fn shared() -> Option<&'static Asked> {
        if let Some(t) = Asked::existing() {
            return Some(t);
        }
        let size = size_of::<Asked>();
        // SAFETY: a fresh anonymous mapping; no memory of ours is touched.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0) };
        if p == libc::MAP_FAILED {
            return None;
        }
        if let Err(other) = ASKED.compare_exchange(std::ptr::null_mut(), p.cast(), Ordering::AcqRel, Ordering::Acquire) {
            // Another thread mapped it first.
            // SAFETY: our own mapping of `size` octets, never handed out.
            unsafe { libc::munmap(p, size) };
            // SAFETY: as in `existing`.
            return Some(unsafe { &*other });
        }
        Asked::existing()
    }

    /// The table if some listener of this process (or of a parent before `fork`) made it.
    fn existing() -> Option<&'static Asked> {
        let p = ASKED.load(Ordering::Acquire);
        // SAFETY: a mapping of the table's size, zeroed (all slots free), aligned to a page,
        // never unmapped once published; atomics are its only accesses, in this process and
        // those forked from it.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Calls `f(slot, connection, fresh)` on each published slot; a true return frees the
    /// slot (unless it changed meanwhile).
    fn sweep(&self, now: u64, mut f: impl FnMut(usize, u64, bool) -> bool) {
        for (i, (key, second)) in self.keys.iter().zip(&self.seconds).enumerate() {
            let k = key.load(Ordering::Acquire);
            if k == 0 || k == WRITING {
                continue;
            }
            let fresh = now.saturating_sub(second.load(Ordering::Relaxed)) < REMEMBER;
            if f(i, k & WHO, fresh) {
                let _ = key.compare_exchange(k, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    /// Remembers the question of `who`'s connection, answered at second `now`; false if there
    /// is no room. The new copy is in before older copies of the same question go, so a
    /// retried question never leaves a moment without one.
    fn remember(&self, who: u64, now: u64) -> bool {
        self.sweep(now, |_, _, fresh| !fresh);
        let mine = self.keys.iter().zip(&self.seconds).position(|(key, second)| {
            let claimed = key.compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok();
            if claimed {
                second.store(now, Ordering::Relaxed);
                key.store((now & 0xffff) << 48 | who, Ordering::Release);
            }
            claimed
        });
        let Some(mine) = mine else { return false };
        self.sweep(now, |i, k, _| i != mine && k == who);
        true
    }

    /// Whether `who`'s connection was asked about within [`REMEMBER`] of second `now` (and
    /// forgets it, every copy).
    fn take(&self, who: u64, now: u64) -> bool {
        let mut asked = false;
        self.sweep(now, |_, k, fresh| {
            let mine = k == who;
            asked |= mine && fresh;
            mine
        });
        asked
    }
}

/// The bits of a slot's key that name the connection.
const WHO: u64 = (1 << 48) - 1;

/// The connection from `ip` port `port` in [`Asked`]'s keys: never 0 (no connection comes
/// from 0.0.0.0), and 48 bits (so never [`WRITING`]).
fn key(ip: Ipv4Addr, port: u16) -> u64 {
    u64::from(u32::from(ip)) << 16 | u64::from(port)
}

/// Seconds of the monotonic clock, which every process reads alike.
fn now() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64
}

/// Client side: whether `server` will upgrade a connection from our port `from`.
pub(crate) fn ask(server: SocketAddrV4, from: u16) -> bool {
    let Ok(sock) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) else { return false };
    if sock.connect(server).is_err() || sock.set_read_timeout(Some(WAIT)).is_err() {
        return false;
    }
    let mut buf = [0u8; 32];
    for _ in 0..TRIES {
        if sock.send(&Probe::Query.emit(from)).is_err() {
            return false;
        }
        match sock.recv(&mut buf) {
            Ok(n) if Probe::parse(&buf[..n]) == Some((Probe::Answer, from)) => return true,
            Ok(_) => return false,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => continue,
            // ECONNREFUSED: nobody of ours on that port.
            Err(_) => return false,
        }
    }
    false
}

/// A listener's answering thread. [`Answerer::stop`] ends it at once, so that the port is free
/// for a `listen` that follows (a server that closes a listener and listens again on its port).
pub(crate) struct Answerer {
    open: AtomicBool,
    /// Set by the first [`Answerer::stop`]: the socket is shut down only once.
    stopping: AtomicBool,
    /// Set by the thread once its socket is closed.
    closed: AtomicBool,
    /// The answering socket, open while `open` is.
    fd: RawFd,
    /// The process whose thread answers: a forked child's copy of the tables stops nothing.
    pid: u32,
    /// Where it answers.
    at: SocketAddrV4,
}

impl Answerer {
    /// Whether `fd` is still the answering socket: a UDP socket bound where it was.
    fn still_answering(&self) -> bool {
        crate::socket_option(self.fd, libc::SO_TYPE) == Some(libc::SOCK_DGRAM) && crate::sockaddr_of(self.fd, false) == Some(self.at)
    }

    /// Stops answering and waits (at most a second) until the UDP port is free again.
    pub(crate) fn stop(&self) {
        if std::process::id() != self.pid || self.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        // Before `open` is cleared, so the thread (which only leaves once it is) cannot have
        // closed the socket and its number been reused; unless the program closed that number
        // itself, so it is looked at first. Linux wakes a receive on an unconnected UDP socket
        // that is shut down (returning ENOTCONN, which says nothing here).
        if self.still_answering() {
            // SAFETY: shutdown(2) on the answering socket, still open (see above).
            unsafe { real!(shutdown: unsafe extern "C" fn(c_int, c_int) -> c_int)(self.fd, libc::SHUT_RD) };
        }
        self.open.store(false, Ordering::Release);
        for _ in 0..1000 {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Server side: answers questions on UDP `at` (the listener's address and port) from a thread,
/// until stopped. None if the port is taken (that listener then never upgrades).
pub(crate) fn answer(at: SocketAddrV4) -> Option<Arc<Answerer>> {
    let asked = Asked::shared()?;
    let sock = UdpSocket::bind(at).ok()?;
    let pid = std::process::id();
    let answerer =
        Arc::new(Answerer { open: AtomicBool::new(true), stopping: AtomicBool::new(false), closed: AtomicBool::new(false), fd: sock.as_raw_fd(), pid, at });
    let ours = answerer.clone();
    // Listed while the thread holds the socket (a thread that fails to start drops it at once).
    let listed = Listed::new(sock.as_raw_fd());
    signals::held(|| {
        std::thread::Builder::new().name("iwarp-probe".into()).spawn(move || {
            let mut buf = [0u8; 32];
            while ours.open.load(Ordering::Acquire) {
                // A stopped answerer's socket is shut down: this returns at once (nothing
                // received, from no address), and the loop ends.
                let Some((n, from)) = receive_from(&sock, &mut buf) else { continue };
                let Some((Probe::Query, port)) = Probe::parse(&buf[..n]) else { continue };
                if !ours.open.load(Ordering::Acquire) {
                    continue;
                }
                // No (the client stays plain TCP, at once) if this process could not pin the
                // connection's buffers (a worker of a prefork server may be another process).
                if !crate::conn::room_to_pin() {
                    let _ = sock.send_to(&Probe::Refusal.emit(port), from);
                } else if asked.remember(key(*from.ip(), port), now()) {
                    let _ = sock.send_to(&Probe::Answer.emit(port), from);
                }
            }
            // Off the list before the socket closes (its number may be reused at once).
            drop(listed);
            // The C library's close: ours would take the listeners' lock, which the `close`
            // that stops this thread holds while it waits for this.
            // SAFETY: the socket this thread owns, closed once.
            unsafe { real!(close: unsafe extern "C" fn(c_int) -> c_int)(sock.into_raw_fd()) };
            ours.closed.store(true, Ordering::Release);
        })
    })
    .ok()?;
    Some(answerer)
}

/// A datagram into `buf`: its length and sender, None if there is none (interrupted, or the
/// socket shut down). The standard library's `recv_from` asserts that every receive names an
/// address, which one on a shut-down socket does not.
fn receive_from(sock: &UdpSocket, buf: &mut [u8]) -> Option<(usize, SocketAddrV4)> {
    // SAFETY: sockaddr_in is plain data.
    let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `buf` and `from` are live and as long as said.
    let n = unsafe { libc::recvfrom(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0, (&raw mut from).cast(), &mut len) };
    let from = crate::inet((&raw const from).cast(), len)?;
    (n > 0).then_some((n as usize, from))
}

/// The UDP sockets answering questions in this process (kept open by `close_range`).
static ANSWERING: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

/// An answering socket on [`ANSWERING`], taken off when this is dropped.
struct Listed(RawFd);

impl Listed {
    fn new(fd: RawFd) -> Listed {
        ANSWERING.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
        Listed(fd)
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        ANSWERING.lock().unwrap_or_else(|e| e.into_inner()).retain(|&f| f != self.0);
    }
}

/// The list of answering sockets, held across `fork` so that the child's copy is whole.
pub(crate) fn hold() -> MutexGuard<'static, Vec<RawFd>> {
    ANSWERING.lock().unwrap_or_else(|e| e.into_inner())
}

/// In a forked child: closes its copies of the answering sockets. No thread of the child reads
/// them (the parent's go on answering), so they would only keep the ports bound after the
/// parent's listeners stop.
pub(crate) fn forked(answering: &mut Vec<RawFd>) {
    for fd in answering.drain(..) {
        // SAFETY: the child's copy of a socket the library opened; nothing else names it. The
        // C library's close: ours would take the listeners' lock, which `fork` holds.
        unsafe { real!(close: unsafe extern "C" fn(c_int) -> c_int)(fd) };
    }
}

/// Whether `fd` is an answering socket, if their list's lock is free now (false otherwise).
pub(crate) fn answers_on(fd: RawFd) -> bool {
    ANSWERING.try_lock().is_ok_and(|list| list.contains(&fd))
}

/// The descriptors of the answering sockets.
pub(crate) fn descriptors() -> Vec<RawFd> {
    ANSWERING.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// How long a server waits for the first octets of a client that asked: one that upgrades
/// sends its MPA request as soon as it has connected and made its queues, and gives up after
/// 10 s itself.
const FIRST_OCTETS: Duration = Duration::from_secs(10);

/// Server side, for a connection whose client asked: whether its first octets are an MPA
/// request, looked at without reading them. A client that missed our answer (lost, or later
/// than it waited) stays plain TCP: its first octets are its data, or it sends nothing (the
/// server speaks first), and the connection stays plain TCP, not one octet taken.
pub(crate) fn client_upgrades(fd: RawFd) -> bool {
    let deadline = std::time::Instant::now() + FIRST_OCTETS;
    let mut first = [0u8; 16];
    loop {
        let recv = real!(recv: unsafe extern "C" fn(c_int, *mut libc::c_void, libc::size_t, c_int) -> libc::ssize_t);
        // SAFETY: recv(2) into a live buffer of its length; MSG_PEEK leaves the octets queued.
        let n = unsafe { recv(fd, first.as_mut_ptr().cast(), first.len(), libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        match n {
            16 => return first == *REQUEST_KEY,
            // The stream ended before a request.
            0 => return false,
            n if n > 0 && first[..n as usize] != REQUEST_KEY[..n as usize] => return false,
            n if n < 0 && !matches!(errno, Some(libc::EAGAIN | libc::EINTR)) => return false,
            _ => {}
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            // The start of a request: the module's exchange waits for the rest, or fails.
            return n > 0;
        }
        if n > 0 {
            // Part of a request: the rest follows at once.
            std::thread::sleep(Duration::from_millis(1));
        } else {
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            let poll = real!(poll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
            // SAFETY: one live pollfd.
            unsafe { poll(&mut pfd, 1, left.as_millis().min(100) as c_int) };
        }
    }
}

/// Server side: whether the connection from `peer` was asked about (and forgets the question).
pub(crate) fn was_asked(peer: SocketAddrV4) -> bool {
    Asked::existing().is_some_and(|asked| asked.take(key(*peer.ip(), peer.port()), now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UDP port free on the loopback now.
    fn free_port() -> u16 {
        UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn a_listener_answers_and_remembers_the_question_once() {
        let at = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
        let answerer = answer(at).unwrap();
        assert!(answer(at).is_none(), "the port is taken now");
        assert!(ask(at, 40001));
        assert!(was_asked(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40001)));
        assert!(!was_asked(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40001)), "forgotten once matched");
        assert!(!was_asked(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40002)), "never asked");
        answerer.stop();
    }

    #[test]
    fn a_stopped_answerer_frees_its_port_at_once() {
        let at = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port());
        let answerer = answer(at).unwrap();
        answerer.stop();
        let again = answer(at).expect("the port is free for the next listener");
        assert!(ask(at, 40005), "and the next listener answers");
        again.stop();
    }

    /// A table of free slots, private to the test.
    fn empty() -> Asked {
        Asked { keys: std::array::from_fn(|_| AtomicU64::new(0)), seconds: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    #[test]
    fn questions_expire_and_a_full_table_answers_no_more() {
        let t = empty();
        let who = |i: usize| key(Ipv4Addr::new(10, 0, (i >> 8) as u8, i as u8), 5000);
        assert!(t.remember(who(0), 100));
        assert!(t.take(who(0), 110), "10 s later");
        assert!(!t.take(who(0), 110), "forgotten once matched");
        assert!(t.remember(who(0), 200));
        assert!(t.remember(who(0), 201), "asked again: one question, not two");
        assert!(t.take(who(0), 201) && !t.take(who(0), 201));
        assert!(t.remember(who(0), 300));
        assert!(!t.take(who(0), 311), "expired after 11 s");
        for i in 0..MOST {
            assert!(t.remember(who(i), 400));
        }
        assert!(!t.remember(who(MOST), 400), "no room: not answered");
        assert!(t.remember(who(MOST), 411), "room again once the others expired");
        assert!(!t.take(who(0), 411 + (1 << 16)), "no wrap brings an old question back");
    }

    #[test]
    fn a_retried_question_is_never_missing() {
        let t = empty();
        let who = key(Ipv4Addr::new(10, 0, 0, 1), 5000);
        let present = |t: &Asked| t.keys.iter().any(|k| k.load(Ordering::Acquire) & WHO == who);
        assert!(t.remember(who, 100));
        std::thread::scope(|s| {
            s.spawn(|| {
                for n in 0..20_000 {
                    assert!(t.remember(who, 100 + n / 5_000));
                }
            });
            for _ in 0..20_000 {
                assert!(present(&t), "a retry left a moment without the question");
            }
        });
        assert!(t.take(who, 104) && !present(&t), "taken, every copy");
    }

    #[test]
    fn nobody_on_the_port_means_plain_tcp() {
        assert!(!ask(SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port()), 40003));
    }

    #[test]
    fn a_foreign_answer_means_plain_tcp() {
        let other = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = match other.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let (_, from) = other.recv_from(&mut buf).unwrap();
            other.send_to(b"HTTP/1.0 400 Bad Request\r\n", from).unwrap();
        });
        assert!(!ask(at, 40004));
        t.join().unwrap();
    }
}
