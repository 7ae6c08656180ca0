//! Connection management in the module, between the guests: B listens (LISTEN), sees each
//! request's private data (GET_REQUEST), rejects the first (REJECT, with private data A must
//! receive) and accepts the second on a QP (ACCEPT); A connects from the kernel (CONNECT_QP),
//! sends (inline data), then disconnects (DISCONNECT), which B sees as the end of its QP.

use super::{dial, ensure, expect_errno, open, options, Check};
use crate::verbs::{done, expect_event, flushed, wait_ended};
use libiwarp::{Access, QpEvent, QpInit, QpState, Role, SendOp, WcOpcode};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

const FIRST: &[u8] = b"first, to be turned away";
const NOT_YOU: &[u8] = b"not you";
const SECOND: &[u8] = b"second, to be let in";
const WELCOME: &[u8] = b"welcome";
const HELLO: &[u8] = b"hello over an accepted connection";
const WAIT: Duration = Duration::from_secs(60);

/// Guest B, listening at `bind` (every IPv4 address if `None`; `::` takes both families).
pub(crate) fn serve(port: &str, bind: Option<&str>) -> Check {
    let port: u16 = port.parse().map_err(|_| format!("bad port {port}"))?;
    let ip: IpAddr = bind.unwrap_or("0.0.0.0").parse().map_err(|e| format!("{bind:?}: {e}"))?;
    let at = SocketAddr::new(ip, port);
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let listener = dev.listen(at, 8).map_err(|e| format!("LISTEN: {e}"))?;
    println!("listening at {at}");
    expect_errno("listening on a port in use", dev.listen(at, 8).map(|l| l.port()), libc::EADDRINUSE)?;
    expect_errno("a backlog of 0", dev.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), 0).map(|l| l.port()), libc::EINVAL)?;
    let other = dev.listen(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), 1).map_err(|e| format!("LISTEN on any port: {e}"))?;
    ensure(other.port() != 0, format!("a port was picked ({})", other.port()))?;
    expect_errno("waiting for a request that never comes", other.get_request(Duration::from_millis(300)).map(|r| r.peer), libc::ETIMEDOUT)?;

    let first = listener.get_request(WAIT).map_err(|e| format!("GET_REQUEST: {e}"))?;
    ensure(
        first.private_data == FIRST && first.mpa_rev == 2 && first.crc && first.markers,
        format!(
            "B: the first request's private data and options ({:?}, rev {}, CRC {}, markers {})",
            first.private_data, first.mpa_rev, first.crc, first.markers
        ),
    )?;
    first.reject(NOT_YOU).map_err(|e| format!("REJECT: {e}"))?;
    println!("ok: B: rejected the first request");

    let second = listener.get_request(WAIT).map_err(|e| format!("GET_REQUEST: {e}"))?;
    ensure(
        second.private_data == SECOND && second.peer.port() != 0 && same_family(second.peer.ip(), ip),
        format!("B: the second request's private data and peer ({:?}, from {})", second.private_data, second.peer),
    )?;
    println!("ok: B: the second request came from {}", second.peer);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let mut qp =
        dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 4, max_inline: 0 }).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 4096];
    let mr = pd.register(&mut buf, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    qp.post_recv(1, &[mr.sge(0..2048)]).map_err(|e| e.to_string())?;
    qp.post_recv(2, &[mr.sge(2048..4096)]).map_err(|e| e.to_string())?;
    let mut o = options(Role::Responder, "")?;
    o.private_data = WELCOME.to_vec();
    let n = second.accept(&mut qp, &o).map_err(|e| format!("ACCEPT: {e}"))?;
    ensure(n.peer_private == SECOND && n.crc && n.tx_markers, format!("B: accepted ({n:?})"))?;
    let wc = done(&cq, WcOpcode::Recv)?;
    ensure(wc.wr_id == 1 && &mr.as_slice()[..HELLO.len()] == HELLO, "B: A's Send arrived over the accepted connection")?;
    let state = wait_ended(&qp)?;
    ensure(state == QpState::Error { terminate: None, sent: false }, format!("B: A's disconnect ended our QP ({state:?})"))?;
    expect_event(&events, qp.handle(), QpEvent::ConnectionLost, "B")?;
    flushed(&cq, 1, "B")
}

/// Whether `peer` is of `listener`'s family, an IPv4-mapped IPv6 address counting as IPv4: a
/// listener at `::` that names an IPv6 peer was reached over IPv6.
fn same_family(peer: IpAddr, listener: IpAddr) -> bool {
    let v6 = matches!(peer, IpAddr::V6(a) if a.to_ipv4_mapped().is_none());
    v6 == listener.is_ipv6()
}

/// Guest A.
pub(crate) fn drive(host: &str, port: &str) -> Check {
    let ip: IpAddr = host.parse().map_err(|e| format!("{host}: {e}"))?;
    let to = SocketAddr::new(ip, port.parse().map_err(|_| format!("bad port {port}"))?);
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let init = QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 4, max_inline: 64 };
    let mut qp = dev.create_qp(&init).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 4096];
    let mr = pd.register(&mut buf, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    qp.post_recv(9, &[mr.sge(2048..4096)]).map_err(|e| e.to_string())?;
    expect_errno("disconnecting a QP never connected", qp.disconnect(), libc::ENOTCONN)?;

    let mut o = options(Role::Initiator, "")?;
    o.private_data = FIRST.to_vec();
    // TCP refuses until B listens; B's reject also says ECONNREFUSED, but carries private data.
    let start = Instant::now();
    loop {
        match qp.connect(to, &o).map(drop) {
            Ok(_) => return Err("A: the first connect was accepted".into()),
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) && qp.reject_private_data().is_none() && start.elapsed() < WAIT => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => {
                let theirs = qp.reject_private_data();
                ensure(
                    e.raw_os_error() == Some(libc::ECONNREFUSED) && theirs == Some(NOT_YOU),
                    format!("A: rejected with B's private data ({e}, {theirs:?})"),
                )?;
                break;
            }
        }
    }
    o.private_data = SECOND.to_vec();
    let n = qp.connect(to, &o).map_err(|e| format!("A: connect after the reject: {e}"))?;
    ensure(n.peer_private == WELCOME, format!("A: accepted with B's private data ({:?})", n.peer_private))?;
    // Inline: from plain memory, no region.
    qp.post_send_inline(3, SendOp::Send { solicited: false }, HELLO, true).map_err(|e| format!("post inline Send: {e}"))?;
    done(&cq, WcOpcode::Send)?;
    qp.disconnect().map_err(|e| format!("DISCONNECT: {e}"))?;
    let state = qp.state().map_err(|e| e.to_string())?;
    ensure(state == QpState::Error { terminate: None, sent: false }, format!("A: disconnected ({state:?})"))?;
    let ev = events.next().map_err(|e| e.to_string())?;
    ensure(ev.is_none(), format!("A: no asynchronous event for a QP we disconnected ({ev:?})"))?;
    flushed(&cq, 1, "A")?;
    expect_errno("disconnecting twice", qp.disconnect(), libc::ENOTCONN)
}

const PROMPT: &[u8] = b"prompt, behind slow ones";
/// Initiators that connect first and never finish their MPA requests: more than the module's
/// listener keeps on their way at once (64), which shut out the others for a whole request
/// deadline (10 s) when they held every place.
const SLOW: usize = 68;

/// Guest B: listens in the module; the first request to come whole is A's prompt one, though
/// [`SLOW`] initiators connected before it; then, with only those left, GET_REQUEST times out
/// (while the module closes them at their deadline).
pub(crate) fn slow_serve(port: &str) -> Check {
    let port: u16 = port.parse().map_err(|_| format!("bad port {port}"))?;
    let dev = open()?;
    let listener = dev.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port), 16).map_err(|e| format!("LISTEN: {e}"))?;
    println!("listening on {port}");
    let req = listener.get_request(WAIT).map_err(|e| format!("GET_REQUEST: {e}"))?;
    ensure(req.private_data == PROMPT, format!("B: the prompt request came first ({:?}, from {})", req.private_data, req.peer))?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let mut qp =
        dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 4, max_inline: 0 }).map_err(|e| e.to_string())?;
    req.accept(&mut qp, &options(Role::Responder, "")?).map_err(|e| format!("ACCEPT: {e}"))?;
    // The listener's work closes the slow ones at their deadline: 14 s of waiting see it pass.
    for _ in 0..7 {
        expect_errno("GET_REQUEST with only slow initiators left", listener.get_request(Duration::from_secs(2)).map(|r| r.peer), libc::ETIMEDOUT)?;
    }
    let state = wait_ended(&qp)?;
    ensure(state == QpState::Error { terminate: None, sent: false }, format!("B: A's disconnect ended our QP ({state:?})"))
}

/// Guest A: opens [`SLOW`] connections to B's listener (one sends half an MPA request, the
/// others nothing), then connects a QP, which B must accept within 5 s; the module closes each
/// slow connection once its request deadline (10 s) passed, or sooner to make room.
pub(crate) fn slow_drive(host: &str, port: &str) -> Check {
    let ip: IpAddr = host.parse().map_err(|e| format!("{host}: {e}"))?;
    let to = SocketAddr::new(ip, port.parse().map_err(|_| format!("bad port {port}"))?);
    let mut slow = Vec::new();
    for i in 0..SLOW {
        let mut s = dial(host, port)?;
        if i == 0 {
            s.write_all(&b"MPA ID Req Frame"[..10]).map_err(|e| e.to_string())?;
        }
        slow.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let init = QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 4, max_inline: 0 };
    let mut qp = dev.create_qp(&init).map_err(|e| e.to_string())?;
    let mut o = options(Role::Initiator, "")?;
    o.private_data = PROMPT.to_vec();
    let start = Instant::now();
    qp.connect(to, &o).map_err(|e| format!("A: connect behind {SLOW} slow initiators: {e}"))?;
    let took = start.elapsed();
    ensure(took < Duration::from_secs(5), format!("A: accepted {took:?} after connecting, behind {SLOW} initiators that never finish"))?;
    for (i, s) in slow.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let mut b = [0u8; 64];
        let closed = match s.read(&mut b) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        };
        ensure(closed, format!("A: the module closed slow connection {i} (request deadline), {:?} after the prompt one", start.elapsed()))?;
    }
    qp.disconnect().map_err(|e| format!("DISCONNECT: {e}"))
}

/// Guest A, alone: `n` connect/disconnect cycles over loopback. Each cycle a TCP connection is
/// adopted by a QP on each end (two contexts: responder in a thread, initiator here), runs the
/// MPA exchange, carries one Send, and both QPs are destroyed. The VM test then requires that
/// nothing is left (QPs, regions, pinned pages) and dmesg is clean.
pub(crate) fn cycles(n: u64) -> Check {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let responder = std::thread::spawn(move || -> Check {
        let dev = open()?;
        let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
        let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 64];
        let mr = pd.register(&mut buf, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
        let init = QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 2, max_send_wr: 2, max_sge: 1, max_inline: 0 };
        let o = options(Role::Responder, "")?;
        for i in 0..n {
            let stream = listener.accept().map_err(|e| format!("cycle {i}: accept: {e}"))?.0;
            let mut qp = dev.create_qp(&init).map_err(|e| e.to_string())?;
            qp.post_recv(i, &[mr.sge(0..64)]).map_err(|e| e.to_string())?;
            qp.adopt(stream, &o).map_err(|e| format!("cycle {i}: adopt as responder: {e}"))?;
            let wc = done(&cq, WcOpcode::Recv)?;
            if wc.wr_id != i || &mr.as_slice()[..wc.byte_len as usize] != CYCLE {
                return Err(format!("cycle {i}: the Send arrived as {wc:?}"));
            }
        }
        Ok(())
    });
    let run = || -> Check {
        let dev = open()?;
        let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
        let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
        let init = QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 2, max_send_wr: 2, max_sge: 1, max_inline: 16 };
        let o = options(Role::Initiator, "")?;
        for i in 0..n {
            let stream = std::net::TcpStream::connect(addr).map_err(|e| format!("cycle {i}: connect: {e}"))?;
            let mut qp = dev.create_qp(&init).map_err(|e| e.to_string())?;
            qp.adopt(stream, &o).map_err(|e| format!("cycle {i}: adopt as initiator: {e}"))?;
            qp.post_send_inline(i, SendOp::Send { solicited: false }, CYCLE, true).map_err(|e| format!("cycle {i}: post Send: {e}"))?;
            done(&cq, WcOpcode::Send)?;
        }
        Ok(())
    };
    let start = Instant::now();
    let ours = run();
    let theirs = responder.join().map_err(|_| "the responder thread panicked".to_string())?;
    ours.and(theirs)?;
    println!("ok: {n} connect/disconnect cycles over loopback in {:?}", start.elapsed());
    Ok(())
}

const CYCLE: &[u8] = b"one cycle";
