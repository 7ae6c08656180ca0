//! A responder sends nothing until the initiator's first FPDU arrived (RFC 5044 section
//! 7.1.2); in peer-to-peer mode (RFC 6581) that FPDU is the ready-to-receive (RTR) message. The
//! initiator here is a user-level peer built on the protocol core, so it can hold its first FPDU
//! back, which the module never does.
//!
//!   hold-serve PORT FIRST    (the module, responder) posts a Send at once: it must not complete
//!                            before the initiator's first FPDU, then must arrive; and takes the
//!                            peer's Send. FIRST: `rtr` (peer-to-peer, a Write RTR) or `send`
//!                            (no peer-to-peer mode: the peer's Send is its first FPDU)
//!   late-first HOST PORT FIRST   (user level, initiator) hears nothing for 3 s, sends its RTR
//!                            (then gets the responder's Send and answers with its own) or its
//!                            Send (then gets the responder's)
//!   rtr-mismatch-serve PORT  (user level, responder) allows only a Write RTR, offers it when
//!                            the initiator offers none of it, and must then get TERM (2,0,7)
//!                            and a close (RFC 6581 section 9.2)
//!   rtr-mismatch HOST PORT   (the module, initiator) offers only a Send RTR: EPROTO
//!   rtr-mismatch-accept PORT (the module, responder) allows only a Write RTR, offers it, and
//!                            posts a Send: the initiator's TERM (2,0,7) ends the QP, and the
//!                            Send held for the RTR is flushed, never sent
//!   rtr-mismatch-ask HOST PORT   (user level, initiator) offers only a Send RTR, answers the
//!                            reply with TERM (2,0,7) and must get nothing back but the close
//!   p2p-read-burst-serve PORT / p2p-read-burst HOST PORT   (the module both sides) a Read RTR,
//!                            then the initiator's whole ORD of Reads at once: all answered

use super::wire::{drive, frame, hello, mpa_asking, receive_until, receiver, respond, Collect, LOCAL};
use super::{dial, ensure, expect_errno, listen, open, options, small, Check};
use crate::verbs::done;
use iwarp_proto::crc::HostCrc;
use iwarp_proto::markers::Markers;
use iwarp_proto::mpa::frame::RtrTypes;
use iwarp_proto::mpa::handshake::{Handshake, Outcome};
use iwarp_proto::rx::Event;
use iwarp_proto::terminate::{Cause, Terminate};
use iwarp_proto::tx::{self, Fpdu, Message, Transmitter};
use libiwarp::{Access, QpInit, QpState, Remote, Role, SendOp, SendWr, WcOpcode, WcStatus};
use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

const HELD: &[u8] = b"sent once the RTR came";
const BYE: &[u8] = b"bye";
/// How long the initiator holds its RTR back; the responder looks for a completion for a
/// third of it.
const HOLD: Duration = Duration::from_secs(3);

/// What the initiator sends first.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum First {
    /// Peer-to-peer mode: a zero-length Write as its RTR, then its Send after the responder's.
    Rtr,
    /// No peer-to-peer mode: its Send, before the responder's.
    Send,
}

impl First {
    pub(crate) fn parse(s: &str) -> Result<First, String> {
        match s {
            "rtr" => Ok(First::Rtr),
            "send" => Ok(First::Send),
            _ => Err(format!("FIRST is rtr or send, not {s:?}")),
        }
    }
}

/// `hold-serve PORT FIRST`.
pub(crate) fn hold_serve(port: &str, first: First) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(8).map_err(|e| e.to_string())?;
    let mut qp = dev.create_qp(&small(&pd, &cq)).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 64];
    buf[..HELD.len()].copy_from_slice(HELD);
    let mr = pd.register(&mut buf, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    qp.post_recv(1, &[mr.sge(32..64)]).map_err(|e| e.to_string())?;
    let opts = if first == First::Rtr { "markers=0,crc=1,rev=2,rtr=w" } else { "markers=0,crc=1,rev=2" };
    let got = qp.adopt(listen(port)?, &options(Role::Responder, opts)?).map_err(|e| format!("adopt: {e}"))?;
    let p2p = got.rtr != libiwarp::RtrTypes::NONE;
    ensure(p2p == (first == First::Rtr) && (!p2p || got.rtr.write), format!("B: peer-to-peer mode {p2p} ({:?})", got.rtr))?;
    qp.post_send(&SendWr { wr_id: 2, op: SendOp::Send { solicited: false }, sge: &[mr.sge(0..HELD.len())], signaled: true })
        .map_err(|e| format!("post Send: {e}"))?;
    let early = cq.wait_one(HOLD / 3).map_err(|e| e.to_string())?;
    ensure(early.is_none(), format!("B: our Send is held while the initiator has sent nothing ({early:?})"))?;
    let heard = |cq| -> Check {
        let wc = done(cq, WcOpcode::Recv)?;
        ensure(&mr.as_slice()[32..32 + wc.byte_len as usize] == BYE, "B: the initiator's Send arrived intact")
    };
    if first == First::Send {
        heard(&cq)?;
    }
    let wc = done(&cq, WcOpcode::Send)?;
    ensure(wc.wr_id == 2, "B: our Send went once the initiator's first FPDU came")?;
    if first == First::Rtr {
        heard(&cq)?;
    }
    Ok(())
}

/// `late-first HOST PORT FIRST`.
pub(crate) fn late_first(host: &str, port: &str, first: First) -> Check {
    let mut s = dial(host, port)?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let p2p = first == First::Rtr;
    let rtr = RtrTypes { write: p2p, ..RtrTypes::default() };
    let local = iwarp_proto::mpa::negotiate::Local { markers: false, p2p, rtr, ..LOCAL };
    let (conn, _) = mpa_asking(&mut s, local)?;
    let want = p2p.then_some(iwarp_proto::mpa::negotiate::Rtr::Write);
    ensure(conn.rtr == want, format!("A: the responder settled the RTR {:?} ({want:?} asked)", conn.rtr))?;
    s.set_read_timeout(Some(HOLD)).map_err(|e| e.to_string())?;
    let mut one = [0u8; 1];
    match s.read(&mut one) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            println!("ok: A: nothing from the responder for {HOLD:?} before our first FPDU")
        }
        other => return Err(format!("A: the responder sent before our first FPDU ({other:?})")),
    }
    let mut t = Transmitter::new(tx::Config { markers: if conn.tx_markers { Markers::RFC } else { Markers::NONE }, crc: conn.crc, mulpdu: 1400 });
    let send = |t: &mut Transmitter, s: &mut std::net::TcpStream| -> Check {
        let mut wire = Vec::new();
        frame(t, &mut wire, Message::Send { solicited: false, invalidate: None }, BYE)?;
        s.write_all(&wire).map_err(|e| format!("send: {e}"))
    };
    if p2p {
        // The Write RTR: a zero-length Write to STag 0.
        hello(&mut s, &mut t, Remote::default())?;
    } else {
        send(&mut t, &mut s)?;
    }
    s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let (mut rx, mut sink, mut pending) = (receiver(&conn), Collect(Vec::new()), Vec::new());
    receive_until(&mut s, &mut rx, &mut sink, &mut pending, 1)?;
    ensure(
        matches!(sink.0[..], [Event::Send { len, .. }] if len as usize == HELD.len()),
        format!("A: the responder's Send came after our first FPDU ({:?})", sink.0),
    )?;
    if p2p {
        send(&mut t, &mut s)?;
    }
    // Wait for the responder to close, so our Send is not cut off by our leaving.
    let mut rest = [0u8; 256];
    while matches!(s.read(&mut rest), Ok(n) if n > 0) {}
    Ok(())
}

/// `rtr-mismatch-serve PORT`.
pub(crate) fn rtr_mismatch_serve(port: &str) -> Check {
    let mut s = listen(port)?;
    s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    // Markers in what we receive, so the TERM must carry them right.
    let local = iwarp_proto::mpa::negotiate::Local { p2p: true, rtr: RtrTypes { write: true, ..RtrTypes::default() }, ..LOCAL };
    let conn = respond(&mut s, local, b"")?;
    ensure(conn.rtr == Some(iwarp_proto::mpa::negotiate::Rtr::Write), format!("B: we offered our Write RTR ({:?})", conn.rtr))?;
    let (mut rx, mut sink, mut pending) = (receiver(&conn), Collect(Vec::new()), Vec::new());
    receive_until(&mut s, &mut rx, &mut sink, &mut pending, 1)?;
    let want = Event::Terminate(Terminate::new(Cause::MpaNoMatchingRtr));
    ensure(sink.0 == [want], format!("B: the initiator answered with TERM (2,0,7), markers and CRC right ({:?})", sink.0))?;
    let mut rest = [0u8; 64];
    let end = s.read(&mut rest);
    ensure(matches!(end, Ok(0)), format!("B: then it closed ({end:?})"))
}

/// `rtr-mismatch HOST PORT`.
pub(crate) fn rtr_mismatch(host: &str, port: &str) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(8).map_err(|e| e.to_string())?;
    let mut qp = dev.create_qp(&small(&pd, &cq)).map_err(|e| e.to_string())?;
    let got = qp.adopt(dial(host, port)?, &options(Role::Initiator, "markers=0,crc=1,rev=2,rtr=s")?).map(drop);
    expect_errno("A: adopting with a Send RTR the responder does not allow", got, libc::EPROTO)
}

/// `rtr-mismatch-accept PORT`.
pub(crate) fn rtr_mismatch_accept(port: &str) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(8).map_err(|e| e.to_string())?;
    let mut qp = dev.create_qp(&small(&pd, &cq)).map_err(|e| e.to_string())?;
    let mut buf = HELD.to_vec();
    let mr = pd.register(&mut buf, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    let got = qp.adopt(listen(port)?, &options(Role::Responder, "markers=0,crc=1,rev=2,rtr=w")?).map_err(|e| format!("adopt: {e}"))?;
    ensure(got.rtr == libiwarp::RtrTypes { write: true, ..libiwarp::RtrTypes::NONE }, format!("B: we offered our Write RTR ({:?})", got.rtr))?;
    // The initiator's TERM races this post: if it came first, the QP has ended and refuses the
    // Send (ENOTCONN); otherwise the Send is held for the RTR, then flushed. Either way it is
    // never sent (the capture shows nothing from B).
    let posted = qp.post_send(&SendWr { wr_id: 2, op: SendOp::Send { solicited: false }, sge: &[mr.sge(0..HELD.len())], signaled: true });
    match &posted {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => println!("ok: B: the TERM had already ended the QP: the Send was refused ({e})"),
        Err(e) => return Err(format!("post Send: {e}")),
        Ok(()) => {}
    }
    let st = crate::verbs::wait_ended(&qp)?;
    let want = QpState::Error { terminate: Some(Cause::MpaNoMatchingRtr.code()), sent: false };
    ensure(st == want, format!("B: the initiator's TERM (2,0,7) ended the QP ({st:?})"))?;
    if posted.is_err() {
        return Ok(());
    }
    let wc = cq.wait_one(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    ensure(matches!(wc, Some(c) if c.wr_id == 2 && c.status == WcStatus::Flushed), format!("B: the Send held for the RTR was flushed, never sent ({wc:?})"))
}

/// `rtr-mismatch-ask HOST PORT`.
pub(crate) fn rtr_mismatch_ask(host: &str, port: &str) -> Check {
    let mut s = dial(host, port)?;
    s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let local = iwarp_proto::mpa::negotiate::Local { p2p: true, rtr: RtrTypes { send: true, ..RtrTypes::default() }, ..LOCAL };
    let mut h = Handshake::initiator(local, &[]).map_err(|e| format!("MPA request: {e:?}"))?;
    drive(&mut s, &mut h)?;
    ensure(h.outcome() == Some(Outcome::Failed(Cause::MpaNoMatchingRtr)), format!("A: the reply offered an RTR we did not ({:?})", h.outcome()))?;
    let mut f = Box::<Fpdu>::default();
    ensure(h.frame_term::<HostCrc>(&mut f), "A: a TERM (2,0,7) is due")?;
    let mut term = vec![0u8; f.wire_len as usize];
    f.write_to(&[][..] as &[u8], &mut term);
    s.write_all(&term).map_err(|e| format!("send the TERM: {e}"))?;
    let mut rest = Vec::new();
    let end = s.read_to_end(&mut rest);
    ensure(matches!(end, Ok(0)), format!("A: the responder sent nothing after its reply, then closed ({end:?}, {} octets)", rest.len()))
}

/// Reads the burst asks for: the negotiated ORD (ConnectOptions' default 16 each way).
const BURST: usize = 16;

/// `p2p-read-burst-serve PORT`: the module's responder with a Read RTR offers a region; a full
/// ORD of Reads right behind the RTR must all be answered (the RTR is a Read beyond them).
pub(crate) fn read_burst_serve(port: &str) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(8).map_err(|e| e.to_string())?;
    let mut qp = dev.create_qp(&small(&pd, &cq)).map_err(|e| e.to_string())?;
    let mut src: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let mut bye = vec![0u8; 16];
    let mr = pd.register(&mut src, Access::LOCAL_WRITE | Access::REMOTE_READ).map_err(|e| e.to_string())?;
    let rcv = pd.register(&mut bye, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    qp.post_recv(1, &[rcv.sge(0..16)]).map_err(|e| e.to_string())?;
    let mut o = options(Role::Responder, "markers=0,crc=1,rev=2,rtr=r")?;
    o.private_data = mr.remote(0).to_bytes().to_vec();
    let got = qp.adopt(listen(port)?, &o).map_err(|e| format!("adopt: {e}"))?;
    ensure(got.rtr.read, format!("B: peer-to-peer mode with a Read RTR ({:?}, IRD {})", got.rtr, got.ird))?;
    let wc = done(&cq, WcOpcode::Recv)?;
    ensure(&rcv.as_slice()[..wc.byte_len as usize] == BYE, "B: the initiator's Send after its Reads arrived")?;
    // The initiator may already have left (its QP then ends ours), but we Terminated nothing.
    let state = qp.state().map_err(|e| e.to_string())?;
    ensure(!matches!(state, libiwarp::QpState::Error { sent: true, .. }), format!("B: no Terminate of ours ({state:?})"))
}

/// `p2p-read-burst HOST PORT`: the module's initiator with a Read RTR posts its full ORD of
/// Reads the moment it is connected; every one completes with the responder's data.
pub(crate) fn read_burst(host: &str, port: &str) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
    let mut qp = dev
        .create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 2, max_send_wr: 32, max_sge: 1, max_inline: 0 })
        .map_err(|e| e.to_string())?;
    let mut sink = vec![0u8; BURST * 256 + 16];
    let mut mr = pd.register(&mut sink, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    let got = qp.adopt(dial(host, port)?, &options(Role::Initiator, "markers=0,crc=1,rev=2,rtr=r")?).map_err(|e| format!("adopt: {e}"))?;
    ensure(got.rtr.read && got.ord as usize == BURST, format!("A: a Read RTR, ORD {} ({:?})", got.ord, got.rtr))?;
    let far = libiwarp::Remote::from_bytes(&got.peer_private).ok_or("A: no region advertised")?;
    for i in 0..BURST {
        let at = libiwarp::Remote { addr: far.addr + (i * 256) as u64, rkey: far.rkey };
        qp.post_send(&SendWr { wr_id: i as u64, op: SendOp::Read(at), sge: &[mr.sge(i * 256..(i + 1) * 256)], signaled: true })
            .map_err(|e| format!("post Read {i}: {e}"))?;
    }
    for i in 0..BURST {
        let wc = done(&cq, WcOpcode::RdmaRead)?;
        if wc.wr_id != i as u64 {
            return Err(format!("A: Read {i} completed out of order ({wc:?})"));
        }
    }
    let want: Vec<u8> = (0..(BURST * 256) as u32).map(|i| (i * 7) as u8).collect();
    ensure(mr.as_slice()[..BURST * 256] == want[..], format!("A: {BURST} Reads right behind the Read RTR, all answered intact"))?;
    let at = BURST * 256;
    mr.as_mut_slice()[at..at + BYE.len()].copy_from_slice(BYE);
    qp.post_send(&SendWr { wr_id: 99, op: SendOp::Send { solicited: false }, sge: &[mr.sge(at..at + BYE.len())], signaled: true })
        .map_err(|e| format!("post Send: {e}"))?;
    done(&cq, WcOpcode::Send).map(drop)
}
