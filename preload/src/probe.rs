//! Finding out, without touching the TCP stream, whether the peer upgrades too: before it
//! connects, a client asks the server's UDP port of the same number ("will you upgrade my
//! connection from port S?"). A listener of this library answers there and remembers the
//! question; when `accept` returns that connection, both sides upgrade. Any other outcome (no
//! answer, ICMP port unreachable, a foreign answer) leaves the connection plain TCP, not one
//! octet of its stream touched.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const QUERY: &[u8; 16] = b"IWARP-SOCKETS/2?";
const ANSWER: &[u8; 16] = b"IWARP-SOCKETS/2!";
/// Tries, and how long each waits for the answer.
const TRIES: u32 = 3;
const WAIT: Duration = Duration::from_millis(50);
/// How long a listener remembers a question whose connection has not been accepted: the
/// client's MPA exchange gives up after 10 s.
const REMEMBER: Duration = Duration::from_secs(10);
/// Questions remembered at most (the oldest go first).
const MOST: usize = 1024;

/// Questions answered and not yet matched by an accepted connection: (client, its port, when).
static ASKED: Mutex<Vec<(Ipv4Addr, u16, Instant)>> = Mutex::new(Vec::new());

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
                {
                    let mut asked = ASKED.lock().unwrap_or_else(|e| e.into_inner());
                    asked.retain(|&(ip, p, t)| t.elapsed() < REMEMBER && !(ip == *from.ip() && p == port));
                    if asked.len() >= MOST {
                        asked.remove(0);
                    }
                    asked.push((*from.ip(), port, Instant::now()));
                }
                let _ = sock.send_to(&message(ANSWER, port), from);
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
    let mut asked = ASKED.lock().unwrap_or_else(|e| e.into_inner());
    asked.retain(|&(_, _, t)| t.elapsed() < REMEMBER);
    match asked.iter().position(|&(ip, p, _)| ip == *peer.ip() && p == peer.port()) {
        Some(i) => {
            asked.swap_remove(i);
            true
        }
        None => false,
    }
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
