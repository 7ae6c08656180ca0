//! A peer of the sockets library (`preload/`) that lies in its Immediate Data: it asks the
//! library's listener, connects and upgrades as the library would, writes a first message
//! honestly, then breaks the protocol (CASE), then writes one more message that would be
//! honest on its own. The server in the other guest (`scripts/sockets-liar.py`, through the
//! library) must read the first message's octets, then the end of its stream (ECONNRESET, or
//! EOF where the lie came after the end), and never an octet of what followed the lie.
//!
//! CASE: `past-the-ring` (a Write said to place more than the ring holds), `unknown-kind` (a
//! message of a kind nobody's), `after-the-end` (data after the end of the stream), `credits`
//! (receives handed back that the server never gave), `data-with-credits` (a Write that fits,
//! whose message hands back such receives).

use super::{ensure, open, Check};
use crate::verbs::{done, region};
use libiwarp::sockets_wire::{Hello, Imm, Kind, Probe};
use libiwarp::{Access, ConnectOptions, QpInit, Remote, Role, SendOp, SendWr, WcOpcode, WcStatus};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// The honest first message; the server checks it is all it read.
const FIRST: &[u8] = b"the only octets this stream may deliver: the liar's honest first Write";
/// Octets of each later Write.
const LATER: usize = 16;

/// A TCP socket bound to a port of its own (the question names it), not connected yet.
fn bound() -> Result<(OwnedFd, u16), String> {
    // SAFETY: a new socket, owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is ours and open.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (sa, len) = sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
    let mut got = sa;
    let mut got_len = len;
    // SAFETY: `sa` and `got` are sockaddr_in of the length said.
    let ok =
        unsafe { libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), len) == 0 && libc::getsockname(fd.as_raw_fd(), (&raw mut got).cast(), &mut got_len) == 0 };
    if !ok {
        return Err(format!("bind: {}", std::io::Error::last_os_error()));
    }
    Ok((fd, u16::from_be(got.sin_port)))
}

fn sockaddr(a: SocketAddrV4) -> (libc::sockaddr_in, libc::socklen_t) {
    // SAFETY: sockaddr_in is plain data; zero is a valid value of it.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = a.port().to_be();
    sa.sin_addr.s_addr = u32::from(*a.ip()).to_be();
    (sa, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
}

/// Asks `server` whether it upgrades our port `from` (waiting up to 20 s for it to listen),
/// then connects from that port.
fn asked_and_connected(server: SocketAddrV4) -> Result<TcpStream, String> {
    let (fd, from) = bound()?;
    let udp = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| format!("UDP: {e}"))?;
    udp.set_read_timeout(Some(Duration::from_millis(300))).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 32];
    let mut told = None;
    for _ in 0..60 {
        udp.send_to(&Probe::Query.emit(from), server).map_err(|e| format!("ask: {e}"))?;
        if let Ok((n, _)) = udp.recv_from(&mut buf) {
            told = Probe::parse(&buf[..n]);
            break;
        }
    }
    ensure(told == Some((Probe::Answer, from)), format!("asked from port {from}; the listener's answer: {told:?}"))?;
    let (sa, len) = sockaddr(server);
    // SAFETY: `sa` is a sockaddr_in of the length said; `fd` is our socket.
    let rc = unsafe { libc::connect(fd.as_raw_fd(), (&raw const sa).cast(), len) };
    if rc != 0 {
        return Err(format!("connect: {}", std::io::Error::last_os_error()));
    }
    Ok(TcpStream::from(fd))
}

/// The liar (guest A), toward the server at `host`:`port`.
pub(crate) fn lie(host: &str, port: &str, case: &str) -> Check {
    let ip: Ipv4Addr = host.parse().map_err(|_| format!("not an IPv4 address: {host}"))?;
    let port: u16 = port.parse().map_err(|_| format!("not a port: {port}"))?;
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
    let ring = region(&pd, Access::LOCAL_WRITE | Access::REMOTE_WRITE, 4096)?;
    let rcv = region(&pd, Access::LOCAL_WRITE, 4 * 64)?;
    let mut src = region(&pd, Access::NONE, 4096)?;
    let s = src.as_mut_slice();
    s[..FIRST.len()].copy_from_slice(FIRST);
    // What the lie and the message after it carry: never to be read.
    s[FIRST.len()..].fill(b'!');
    let mut qp = dev
        .create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 16, max_sge: 1, max_inline: Hello::LEN as u32 })
        .map_err(|e| format!("create QP: {e}"))?;
    for i in 0..4 {
        qp.post_recv(i, &[rcv.sge(i as usize * 64..(i as usize + 1) * 64)]).map_err(|e| format!("post receive: {e}"))?;
    }
    let mut o = ConnectOptions::new(Role::Initiator);
    o.extensions = true;
    let stream = asked_and_connected(SocketAddrV4::new(ip, port))?;
    qp.adopt(stream, &o).map_err(|e| format!("adopt: {e}"))?;
    qp.post_send_inline(0, SendOp::Send { solicited: false }, &Hello::emit(ring.remote(0), 4096), true).map_err(|e| format!("Hello: {e}"))?;
    done(&cq, WcOpcode::Send)?;
    let wc = done(&cq, WcOpcode::Recv)?;
    let slot = wc.wr_id as usize * 64;
    let (theirs, len) = Hello::parse(&rcv.as_slice()[slot..slot + wc.byte_len as usize]).ok_or("the server's first message is no Hello")?;
    println!("ok: upgraded; the server's ring has {len} octets");
    // Each message: a Write of `n` octets from `from` at the stream's offset `at` (none if
    // `n` is 0), then Immediate Data `imm`.
    let mut at = 0u64;
    let mut send = |n: usize, from: usize, imm: u64| -> Check {
        let remote = Remote { addr: theirs.addr + at % len as u64, rkey: theirs.rkey };
        let sge = [src.sge(from..from + n)];
        let (op, sge, what): (_, &[_], _) = match n {
            0 => (SendOp::Immediate { imm, solicited: true }, &[], WcOpcode::Send),
            _ => (SendOp::WriteImm { remote, imm, solicited: true }, &sge, WcOpcode::RdmaWrite),
        };
        qp.post_send(&SendWr { wr_id: at, op, sge, signaled: true }).map_err(|e| format!("post {imm:#x}: {e}"))?;
        done(&cq, what)?;
        at += n as u64;
        Ok(())
    };
    let data = |len: usize| Imm { kind: Kind::Data, recvs: 0, freed: 0, len: len as u32 }.encode();
    send(FIRST.len(), 0, data(FIRST.len()))?;
    match case {
        "past-the-ring" => send(LATER, FIRST.len(), data(len + 1))?,
        "unknown-kind" => send(LATER, FIRST.len(), 3 << 60 | LATER as u64)?,
        "after-the-end" => send(0, 0, Imm { kind: Kind::End, recvs: 0, freed: 0, len: 0 }.encode())?,
        "credits" => send(0, 0, Imm { kind: Kind::Credit, recvs: Imm::MAX_RECVS, freed: 0, len: 0 }.encode())?,
        "data-with-credits" => send(LATER, FIRST.len(), Imm { kind: Kind::Data, recvs: Imm::MAX_RECVS, freed: 0, len: LATER as u32 }.encode())?,
        _ => return Err(format!("no case {case}")),
    }
    // Honest on its own: what a server that went on reading after the lie would hand on.
    send(LATER, FIRST.len(), data(LATER))?;
    println!("ok: {case}: the lie, and a message after it, sent");
    // Leaves once the server ended the connection (our receives flushed), or after 20 s.
    while let Ok(Some(wc)) = cq.wait_one(Duration::from_secs(20)) {
        if wc.status == WcStatus::Flushed {
            break;
        }
    }
    Ok(())
}
