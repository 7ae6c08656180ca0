//! User-level peers built on the protocol core over a plain socket: one breaks the protocol on
//! purpose (the module must answer a malformed frame with a Terminate on the wire, end the QP
//! and flush its work, checked on the module's side by `fault-serve`); one stops reading (the
//! module's sender must not wait for it).

use super::{dial, ensure, listen, open, options, Check};
use iwarp_proto::crc::HostCrc;
use iwarp_proto::markers::{self, Markers};
use iwarp_proto::mpa::frame::RtrTypes;
use iwarp_proto::mpa::handshake::{Handshake, Outcome, Step};
use iwarp_proto::mpa::negotiate::{Connection, Local};
use iwarp_proto::rdmap::{Opcode, ReadRequest};
use iwarp_proto::rx::{self, Event, Receiver, Sink, Target};
use iwarp_proto::stream::Pieces;
use iwarp_proto::terminate::Cause;
use iwarp_proto::tx::{self, Fpdu, Message, Transmitter};
use libiwarp::{Access, QpEvent, QpInit, Remote, Role, SendOp, SendWr, WcStatus};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// What the module's side of each case expects to send.
pub(crate) fn cause(case: &str) -> Option<Cause> {
    match case {
        "crc-error" => Some(Cause::MpaCrc),
        "foreign-invalidate" => Some(Cause::RdmapCannotInvalidate),
        "bad-read-request" => Some(Cause::RdmapInvalidStag),
        "urgent" => Some(Cause::MpaStreamLost),
        _ => None,
    }
}

/// Takes whatever the module sends; records deliveries.
pub(crate) struct Collect(pub(crate) Vec<Event>);

impl Sink for Collect {
    fn check(&mut self, _: Opcode, t: Target, len: u32) -> Result<(), Cause> {
        match t {
            Target::Untagged { mo, .. } if mo as u64 + len as u64 <= 1 << 16 => Ok(()),
            _ => Err(Cause::DdpNoBuffer),
        }
    }
    fn place(&mut self, _: Target, _: &[u8]) -> Result<(), Cause> {
        Ok(())
    }
    fn deliver(&mut self, e: Event) {
        self.0.push(e);
    }
}

/// What the user-level peers ask for in MPA: markers, CRC, revision 2.
pub(crate) const LOCAL: Local =
    Local { markers: true, crc: true, rev: 2, ird: 4, ord: 4, p2p: false, rtr: RtrTypes { send: false, write: false, read: false }, extensions: false };

/// Drives `h` over a plain socket until it is to decide or done.
pub(crate) fn drive(s: &mut TcpStream, h: &mut Handshake) -> Check {
    loop {
        match h.step() {
            Step::Send => {
                s.write_all(h.transmit()).map_err(|e| format!("MPA: {e}"))?;
                h.sent(h.transmit().len());
            }
            Step::Receive(n) => {
                let mut buf = vec![0u8; n];
                s.read_exact(&mut buf).map_err(|e| format!("MPA: {e}"))?;
                h.receive(&buf);
            }
            Step::Decide | Step::Done => return Ok(()),
        }
    }
}

fn connected(h: &Handshake) -> Result<Connection, String> {
    match h.outcome() {
        Some(Outcome::Connected(c)) => Ok(c),
        other => Err(format!("MPA did not connect: {other:?}")),
    }
}

/// MPA as initiator on a plain socket; the private data stands in for a region advertisement.
/// Returns the connection and the peer's private data.
fn mpa(s: &mut TcpStream) -> Result<(Connection, Vec<u8>), String> {
    mpa_asking(s, LOCAL)
}

/// [`mpa`], asking for `local`.
pub(crate) fn mpa_asking(s: &mut TcpStream, local: Local) -> Result<(Connection, Vec<u8>), String> {
    let mut h = Handshake::initiator(local, &[0u8; 24]).map_err(|e| format!("MPA request: {e:?}"))?;
    drive(s, &mut h)?;
    Ok((connected(&h)?, h.peer_private().to_vec()))
}

/// Appends `msg` with `payload`, framed by `t`, to `wire`.
pub(crate) fn frame(t: &mut Transmitter, wire: &mut Vec<u8>, msg: Message, payload: &[u8]) -> Check {
    let mut out = t.start(msg, payload.len() as u64).map_err(|e| format!("{e:?}"))?;
    let mut f = Box::<Fpdu>::default();
    while !out.done() {
        t.next_fpdu::<HostCrc, _>(&mut out, payload, &mut f);
        let at = wire.len();
        wire.resize(at + f.wire_len as usize, 0);
        f.write_to(payload, &mut wire[at..]);
    }
    Ok(())
}

/// The initiator's first FPDU, sent before it waits for the module's go-ahead: a responder sends
/// nothing until it has one (RFC 5044 section 7.1.2). A zero-length Write to `dst`, where the
/// module's side lets us write, takes none of its receives and places nothing (its STag is
/// checked all the same, so it must be real).
pub(crate) fn hello(s: &mut TcpStream, t: &mut Transmitter, dst: Remote) -> Check {
    let mut wire = Vec::new();
    frame(t, &mut wire, Message::Write { stag: dst.rkey, to: dst.addr }, &[])?;
    s.write_all(&wire).map_err(|e| format!("send the first FPDU: {e}"))
}

/// The broken bytes of `case`, framed by `t`; `dst` is where the module's side lets us write.
fn broken(case: &str, t: &mut Transmitter, dst: Remote) -> Result<Vec<u8>, String> {
    let mut wire = Vec::new();
    let mut frame = |msg: Message, payload: &[u8]| frame(t, &mut wire, msg, payload);
    match case {
        "crc-error" => {
            frame(Message::Send { solicited: false, invalidate: None }, &[0x5a; 64])?;
            // A payload octet changed after the CRC was computed (octet 40 is payload with or
            // without the leading marker).
            wire[40] ^= 0x01;
        }
        "foreign-invalidate" => {
            // A Send with Invalidate of an STag the module's side never made, then, in the same
            // segment, a Write into its advertised region and another Send: after the first
            // fails, neither may be placed or completed (RFC 5040 section 7.2).
            frame(Message::Send { solicited: false, invalidate: Some(0x7fff_ff00) }, &[0x5a; 64])?;
            frame(Message::Write { stag: dst.rkey, to: dst.addr }, &[0xa5; 64])?;
            frame(Message::Send { solicited: false, invalidate: None }, &[0x5a; 64])?;
        }
        "bad-read-request" => {
            // A Read Request naming an STag the module's side never made, then a Write into its
            // region and a Send in the same segment: the Read Request is refused as it arrives,
            // so neither is placed or completed.
            let rr = ReadRequest { sink_stag: 0x77, sink_to: 0, size: 64, src_stag: 0x7fff_ff00, src_to: 0 };
            frame(Message::ReadRequest(rr), &[])?;
            frame(Message::Write { stag: dst.rkey, to: dst.addr }, &[0xa5; 64])?;
            frame(Message::Send { solicited: false, invalidate: None }, &[0x5a; 64])?;
        }
        // A valid Write, its last octet sent as TCP urgent data (see `bad_frame`), which MPA
        // never uses: TCP would stop delivering the stream to the module there.
        "urgent" => frame(Message::Write { stag: dst.rkey, to: dst.addr }, &[0xa5; 64])?,
        _ => return Err(format!("unknown case {case}")),
    }
    Ok(wire)
}

/// MPA as responder on a plain socket, asking for `local` and answering with `private`.
pub(crate) fn respond(s: &mut TcpStream, local: Local, private: &[u8]) -> Result<Connection, String> {
    let mut h = Handshake::responder();
    drive(s, &mut h)?;
    h.accept(local, private).map_err(|e| format!("MPA: no request to answer ({e:?}, {:?})", h.outcome()))?;
    drive(s, &mut h)?;
    connected(&h)
}

/// Guest A: connects, completes MPA, sends its [`hello`], waits for the module's go-ahead, then
/// sends what `case`
/// breaks (a Send whose CRC does not match; a Send with Invalidate of a foreign STag followed by
/// a Write and a Send) in one write; the module's Terminate must arrive, with the expected
/// cause, and then the connection must end.
pub(crate) fn bad_frame(host: &str, port: &str, case: &str) -> Check {
    let want = cause(case).ok_or(format!("unknown case {case}"))?;
    let mut s = dial(host, port)?;
    let (conn, peer_private) = mpa(&mut s)?;
    let dst = Remote::from_bytes(&peer_private).ok_or("no region advertised by the module's side")?;
    let tx_marks = if conn.tx_markers { Markers::RFC } else { Markers::NONE };
    let mut t = Transmitter::new(tx::Config { markers: tx_marks, crc: conn.crc, mulpdu: markers::mulpdu(1448, tx_marks) });
    hello(&mut s, &mut t, dst)?;
    let wire = broken(case, &mut t, dst)?;
    s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let mut rx = receiver(&conn);
    let mut sink = Collect(Vec::new());
    let mut pending = Vec::new();
    // The module's side sends a go-ahead once its receives are posted; the broken frame goes
    // after it, then everything until the connection ends is read.
    let mut sent = false;
    let mut chunk = [0u8; 4096];
    loop {
        if !sent && !sink.0.is_empty() {
            if case == "urgent" {
                send_urgent(&s, &wire)?;
            } else {
                s.write_all(&wire).map_err(|e| e.to_string())?;
            }
            println!("ok: sent {} octets breaking the protocol: {case}", wire.len());
            sent = true;
        }
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&chunk[..n]);
        let used = rx.receive::<HostCrc, _>(&Pieces::new(rx.next(), &[&pending]), &mut sink).map_err(|e| format!("the module's frames: {e:?}"))?;
        pending.drain(..used as usize);
    }
    ensure(sent, "the module's go-ahead arrived and the broken frame was sent")?;
    let term = sink.0.iter().find_map(|e| if let Event::Terminate(t) = e { Some(*t) } else { None });
    ensure(term.and_then(|t| t.cause()) == Some(want), format!("the module sent a Terminate ({want:?}) and closed: {:?}", sink.0))
}

/// Sends `wire` in one call with MSG_OOB: TCP marks its last octet urgent.
fn send_urgent(s: &TcpStream, wire: &[u8]) -> Check {
    use std::os::fd::AsRawFd;
    // SAFETY: send(2) from a live buffer of its length on our socket.
    let n = unsafe { libc::send(s.as_raw_fd(), wire.as_ptr().cast(), wire.len(), libc::MSG_OOB) };
    ensure(n == wire.len() as isize, format!("sent {n} of {} octets with MSG_OOB", wire.len()))
}

/// The module's receiver: markers and CRC as `conn` settled.
pub(crate) fn receiver(conn: &Connection) -> Receiver {
    Receiver::new(rx::Config {
        markers: if conn.rx_markers { Markers::RFC } else { Markers::NONE },
        crc: conn.crc,
        expect_rtr: None,
        expect_rtr_read_response: false,
        extensions: false,
    })
}

/// Reads and parses what the module sends until `sink` holds `n` deliveries (or it closes).
pub(crate) fn receive_until(s: &mut TcpStream, rx: &mut Receiver, sink: &mut Collect, pending: &mut Vec<u8>, n: usize) -> Check {
    let mut chunk = [0u8; 4096];
    while sink.0.len() < n {
        let got = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if got == 0 {
            return Err(format!("the module closed after {:?}", sink.0));
        }
        pending.extend_from_slice(&chunk[..got]);
        let used = rx.receive::<HostCrc, _>(&Pieces::new(rx.next(), &[pending]), sink).map_err(|e| format!("the module's frames: {e:?}"))?;
        pending.drain(..used as usize);
    }
    Ok(())
}

/// The streams `drip` sends: what, the Writes' sizes (one FPDU each, one after another in the
/// module's region), octets per write(2), and the pause between writes (so each leaves as a
/// segment of its own; the socket has no Nagle delay).
const DRIPS: [(&str, &[usize], usize, Duration); 3] = [
    ("one FPDU of 60,000 octets in 100-octet segments", &[60_000], 100, Duration::from_micros(300)),
    ("11 FPDUs of 1,400 octets in 100-octet segments", &[1400; 11], 100, Duration::from_micros(300)),
    ("3 FPDUs of 1,400 octets one octet at a time", &[1400; 3], 1, Duration::from_micros(100)),
];

/// Guest A: a user-level peer that sends valid Writes (and a Send saying what they carried) in
/// tiny TCP segments ([`DRIPS`]), with markers and CRC; segment boundaries must not matter to
/// the module (`drip-serve` checks every octet). FPDUs may be as long as MPA allows (RFC 5044's
/// MULPDU is what a sender should use, not a limit on what a receiver takes). No Terminate may
/// come back.
pub(crate) fn drip(host: &str, port: &str) -> Check {
    let mut s = dial(host, port)?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(120))).map_err(|e| e.to_string())?;
    let (conn, peer_private) = mpa(&mut s)?;
    let dst = Remote::from_bytes(&peer_private).ok_or("no region advertised by the module's side")?;
    let tx_marks = if conn.tx_markers { Markers::RFC } else { Markers::NONE };
    // FPDUs as long as the Writes ask (up to 65,000 octets), cut by nothing but the Write.
    let mut t = Transmitter::new(tx::Config { markers: tx_marks, crc: conn.crc, mulpdu: 65_000 });
    let (mut rx, mut sink, mut pending) = (receiver(&conn), Collect(Vec::new()), Vec::new());
    hello(&mut s, &mut t, dst)?;
    receive_until(&mut s, &mut rx, &mut sink, &mut pending, 1)?; // the go-ahead
    let control = |t: &mut Transmitter, wire: &mut Vec<u8>, a: u64, b: u64| {
        frame(t, wire, Message::Send { solicited: false, invalidate: None }, &[a.to_le_bytes(), b.to_le_bytes()].concat())
    };
    for (i, (what, writes, seg, pause)) in DRIPS.iter().enumerate() {
        let total: usize = writes.iter().sum();
        let data = crate::verbs::random(total, b'0' + i as u8);
        let mut wire = Vec::new();
        let mut at = 0;
        for &n in writes.iter() {
            frame(&mut t, &mut wire, Message::Write { stag: dst.rkey, to: dst.addr + at as u64 }, &data[at..at + n])?;
            at += n;
        }
        control(&mut t, &mut wire, total as u64, crate::verbs::checksum(&data))?;
        for piece in wire.chunks(*seg) {
            s.write_all(piece).map_err(|e| format!("{what}: {e}"))?;
            std::thread::sleep(*pause);
        }
        println!("ok: sent {what}: {} octets on the wire, {} writes", wire.len(), wire.len().div_ceil(*seg));
    }
    let mut wire = Vec::new();
    control(&mut t, &mut wire, crate::verbs::DONE, 0)?;
    s.write_all(&wire).map_err(|e| e.to_string())?;
    receive_until(&mut s, &mut rx, &mut sink, &mut pending, 2)?; // the module's side checked all
    let term = sink.0.iter().find(|e| matches!(e, Event::Terminate(_)));
    ensure(term.is_none(), format!("no Terminate from the module; it checked every dripped stream ({:?})", sink.0))
}

/// How long the stalled peer reads nothing.
const STALL: Duration = Duration::from_secs(8);

/// Guest B: accepts, answers the MPA request, then reads nothing for [`STALL`] and closes, so
/// the module's side cannot send more than the two socket buffers hold.
pub(crate) fn stalled_peer(port: &str) -> Check {
    let mut s = listen(port)?;
    s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    respond(&mut s, LOCAL, b"stalled")?;
    println!("ok: B: MPA answered; reading nothing for {STALL:?}");
    std::thread::sleep(STALL);
    Ok(())
}

/// Guest A: posts 16 signaled RDMA Writes of 4 MiB to the stalled peer. Posting must not wait
/// for the network: all 16 return long before the peer reads or closes. When the peer closes,
/// the QP ends and every Write completes in order: those TCP got acknowledged successfully, the
/// rest flushed.
pub(crate) fn post_to_stalled(host: &str, port: &str) -> Check {
    const WRITES: u64 = 16;
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
    let init = QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: WRITES as u32, max_sge: 4, max_inline: 0 };
    let mut qp = dev.create_qp(&init).map_err(|e| e.to_string())?;
    let mut buf = vec![7u8; 4 << 20];
    let mr = pd.register(&mut buf, Access::NONE).map_err(|e| e.to_string())?;
    qp.adopt(dial(host, port)?, &options(Role::Initiator, "")?).map_err(|e| format!("adopt: {e}"))?;
    let start = Instant::now();
    let to = SendOp::Write(Remote { addr: 0, rkey: 0x100 });
    for wr_id in 0..WRITES {
        qp.post_send(&SendWr { wr_id, op: to, sge: &[mr.sge(0..4 << 20)], signaled: true }).map_err(|e| format!("post Write {wr_id}: {e}"))?;
    }
    let took = start.elapsed();
    ensure(took < STALL / 2, format!("A: {WRITES} Writes of 4 MiB posted in {took:?}, while the peer reads nothing"))?;
    let mut wcs = Vec::new();
    while wcs.len() < WRITES as usize {
        match cq.wait_one(Duration::from_secs(120)).map_err(|e| e.to_string())? {
            Some(wc) => wcs.push(wc),
            None => return Err(format!("A: {} of {WRITES} completions after the peer closed", wcs.len())),
        }
    }
    let ok = wcs.iter().take_while(|w| w.status == WcStatus::Success).count();
    let in_order = wcs.iter().enumerate().all(|(i, w)| w.wr_id == i as u64);
    let rest_flushed = wcs[ok..].iter().all(|w| w.status == WcStatus::Flushed);
    ensure(
        in_order && rest_flushed && ok < WRITES as usize,
        format!("A: when the peer closed, {ok} Writes had completed and the other {} were flushed, in order", WRITES as usize - ok),
    )?;
    crate::verbs::expect_event(&events, qp.handle(), QpEvent::ConnectionLost, "A")
}
