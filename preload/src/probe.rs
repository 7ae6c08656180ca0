//! Finding out, without touching the TCP stream, whether the peer upgrades too: before it
//! connects, a client asks the server's UDP port of the same number ("will you upgrade my
//! connection from port S?"). A listener of this library answers there and remembers the
//! question; when `accept` returns that connection, both sides upgrade. Any other outcome (no
//! answer, ICMP port unreachable, a foreign answer) leaves the connection plain TCP, not one
//! octet of its stream touched.
//!
//! The questions answered live in memory shared with every process forked after the first
//! listener: a prefork server's master answers, and whichever worker accepts the connection
//! finds the question.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const QUERY: &[u8; 16] = b"IWARP-SOCKETS/2?";
const ANSWER: &[u8; 16] = b"IWARP-SOCKETS/2!";
/// Tries, and how long each waits for the answer.
const TRIES: u32 = 3;
const WAIT: Duration = Duration::from_millis(50);
/// How long a listener remembers a question whose connection has not been accepted, in
/// seconds: the client's MPA exchange gives up after 10 s.
const REMEMBER: u64 = 10;
/// Questions remembered at most; a question finding no room is not answered.
const MOST: usize = 1024;

/// Questions answered and not yet matched by an accepted connection, each slot `client
/// address << 32 | its port << 16 | the second it was answered (mod 2^16)`, 0 when free. Set
/// and cleared by compare-and-swap only: the processes sharing it share no lock.
struct Asked([AtomicU64; MOST]);

/// The table, mapped shared (so `fork` shares rather than copies it) by the first listener.
static ASKED: OnceLock<Option<&'static Asked>> = OnceLock::new();

impl Asked {
    /// The table, mapped at the first call (None if mapping fails: nothing is answered then).
    fn shared() -> Option<&'static Asked> {
        *ASKED.get_or_init(|| {
            // SAFETY: a fresh anonymous mapping; no memory of ours is touched.
            let p = unsafe {
                libc::mmap(std::ptr::null_mut(), size_of::<Asked>(), libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0)
            };
            // SAFETY: a mapping of the table's size, zeroed (all slots free), aligned to a page,
            // never unmapped; atomics are its only accesses, in this and the processes forked
            // from it.
            (p != libc::MAP_FAILED).then(|| unsafe { &*p.cast::<Asked>() })
        })
    }

    /// The table if some listener of this process (or of a parent before `fork`) made it.
    fn existing() -> Option<&'static Asked> {
        ASKED.get().copied().flatten()
    }

    /// Remembers the question of `who`'s connection (a new question replaces an old one of the
    /// same connection); false if there is no room.
    fn remember(&self, who: u64, now: u64) -> bool {
        let entry = who | (now & 0xffff);
        for slot in &self.0 {
            let v = slot.load(Ordering::Acquire);
            if v != 0 && (v & !0xffff == who || expired(v, now)) {
                let _ = slot.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
        self.0.iter().any(|slot| slot.compare_exchange(0, entry, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    }

    /// Whether `who`'s connection was asked about (and forgets the question).
    fn take(&self, who: u64, now: u64) -> bool {
        self.0.iter().any(|slot| {
            let v = slot.load(Ordering::Acquire);
            v != 0 && v & !0xffff == who && !expired(v, now) && slot.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        })
    }
}

/// The key of a connection from `ip` port `port` in [`Asked`].
fn key(ip: Ipv4Addr, port: u16) -> u64 {
    u64::from(u32::from(ip)) << 32 | u64::from(port) << 16
}

/// Whether entry `v` is older than [`REMEMBER`] at second `now`.
fn expired(v: u64, now: u64) -> bool {
    (now as u16).wrapping_sub(v as u16) >= REMEMBER as u16
}

/// Seconds of the monotonic clock, which every process reads alike.
fn now() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64
}

fn message(head: &[u8; 16], port: u16) -> [u8; 18] {
    let mut m = [0u8; 18];
    m[..16].copy_from_slice(head);
    m[16..].copy_from_slice(&port.to_be_bytes());
    m
}

/// Client side: whether `server` will upgrade a connection from our port `from`.
pub(crate) fn ask(server: SocketAddrV4, from: u16) -> bool {
    let Ok(sock) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) else { return false };
    if sock.connect(server).is_err() || sock.set_read_timeout(Some(WAIT)).is_err() {
        return false;
    }
    let mut buf = [0u8; 32];
    for _ in 0..TRIES {
        if sock.send(&message(QUERY, from)).is_err() {
            return false;
        }
        match sock.recv(&mut buf) {
            Ok(18) if buf[..18] == message(ANSWER, from) => return true,
            Ok(_) => return false,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => continue,
            // ECONNREFUSED: nobody of ours on that port.
            Err(_) => return false,
        }
    }
    false
}

/// Server side: answers questions on UDP `at` (the listener's address and port) from a thread,
/// while `open` (the listener is open). False if the port is taken (that listener then never
/// upgrades).
pub(crate) fn answer(at: SocketAddrV4, open: Arc<AtomicBool>) -> bool {
    let Some(asked) = Asked::shared() else { return false };
    let Ok(sock) = UdpSocket::bind(at) else { return false };
    // Wakes now and then to see whether the listener was closed.
    if sock.set_read_timeout(Some(Duration::from_millis(500))).is_err() {
        return false;
    }
    // Listed while the thread holds the socket (a thread that fails to start drops it at once).
    let listed = Listed::new(sock.as_raw_fd());
    std::thread::Builder::new()
        .name("iwarp-probe".into())
        .spawn(move || {
            let mut buf = [0u8; 32];
            while open.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
                if !open.load(Ordering::Relaxed) {
                    break;
                }
                let std::net::SocketAddr::V4(from) = from else { continue };
                if n != 18 || buf[..16] != QUERY[..] {
                    continue;
                }
                let port = u16::from_be_bytes([buf[16], buf[17]]);
                if asked.remember(key(*from.ip(), port), now()) {
                    let _ = sock.send_to(&message(ANSWER, port), from);
                }
            }
            // Off the list before the socket closes (its number may be reused at once).
            drop(listed);
        })
        .is_ok()
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

/// The descriptors of the answering sockets.
pub(crate) fn descriptors() -> Vec<RawFd> {
    ANSWERING.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
        assert!(answer(at, Arc::new(AtomicBool::new(true))));
        assert!(!answer(at, Arc::new(AtomicBool::new(true))), "the port is taken now");
        assert!(ask(at, 40001));
        assert!(was_asked(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40001)));
        assert!(!was_asked(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40001)), "forgotten once matched");
        assert!(!was_asked(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40002)), "never asked");
    }

    #[test]
    fn questions_expire_and_a_full_table_answers_no_more() {
        let t = Asked(std::array::from_fn(|_| AtomicU64::new(0)));
        let who = |i: usize| key(Ipv4Addr::new(10, 0, (i >> 8) as u8, i as u8), 5000);
        assert!(t.remember(who(0), 65_530));
        assert!(t.take(who(0), 65_539), "9 s later, across the clock's wrap of 2^16 s");
        assert!(t.remember(who(0), 100));
        assert!(!t.take(who(0), 110), "expired after 10 s");
        for i in 0..MOST {
            assert!(t.remember(who(i), 200));
        }
        assert!(!t.remember(who(MOST), 200), "no room: not answered");
        assert!(t.remember(who(MOST), 210), "room again once the others expired");
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
