//! Peer-to-peer mode (RFC 6581): a responder sends nothing until the initiator's
//! ready-to-receive (RTR) message arrived. The initiator here is a user-level peer built on the
//! protocol core, so it can hold its RTR back, which the module never does.
//!
//!   p2p-hold-serve PORT      (the module, responder) posts a Send at once: it must not complete
//!                            before the RTR, then must arrive; then takes the peer's Send
//!   p2p-late-rtr HOST PORT   (user level, initiator) hears nothing for 3 s, sends a Write RTR,
//!                            then gets the responder's Send and answers with its own

use super::wire::{frame, mpa_asking, receive_until, receiver, Collect, LOCAL};
use super::{dial, ensure, listen, open, options, Check};
use crate::verbs::done;
use iwarp_proto::markers::Markers;
use iwarp_proto::mpa::frame::RtrTypes;
use iwarp_proto::rx::Event;
use iwarp_proto::tx::{self, Message, Transmitter};
use libiwarp::{Access, QpInit, Role, SendOp, SendWr, WcOpcode};
use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

const HELD: &[u8] = b"sent once the RTR came";
const BYE: &[u8] = b"bye";
/// How long the initiator holds its RTR back; the responder looks for a completion for a
/// third of it.
const HOLD: Duration = Duration::from_secs(3);

/// `p2p-hold-serve PORT`.
pub(crate) fn hold_serve(port: &str) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(8).map_err(|e| e.to_string())?;
    let mut qp =
        dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 2, max_send_wr: 2, max_sge: 1, max_inline: 0 }).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 64];
    buf[..HELD.len()].copy_from_slice(HELD);
    let mr = pd.register(&mut buf, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    qp.post_recv(1, &[mr.sge(32..64)]).map_err(|e| e.to_string())?;
    let got = qp.adopt(listen(port)?, &options(Role::Responder, "markers=0,crc=1,rev=2,rtr=w")?).map_err(|e| format!("adopt: {e}"))?;
    ensure(got.rtr.write, format!("B: peer-to-peer mode with a Write RTR ({:?})", got.rtr))?;
    qp.post_send(&SendWr { wr_id: 2, op: SendOp::Send { solicited: false }, sge: &[mr.sge(0..HELD.len())], signaled: true })
        .map_err(|e| format!("post Send: {e}"))?;
    let early = cq.wait_one(HOLD / 3).map_err(|e| e.to_string())?;
    ensure(early.is_none(), format!("B: our Send is held while the RTR has not come ({early:?})"))?;
    let wc = done(&cq, WcOpcode::Send)?;
    ensure(wc.wr_id == 2, "B: our Send went once the RTR came")?;
    let wc = done(&cq, WcOpcode::Recv)?;
    ensure(&mr.as_slice()[32..32 + wc.byte_len as usize] == BYE, "B: the initiator's Send after its RTR arrived intact")
}

/// `p2p-late-rtr HOST PORT`.
pub(crate) fn late_rtr(host: &str, port: &str) -> Check {
    let mut s = dial(host, port)?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let local = iwarp_proto::mpa::negotiate::Local { markers: false, p2p: true, rtr: RtrTypes { write: true, ..RtrTypes::default() }, ..LOCAL };
    let (conn, _) = mpa_asking(&mut s, local)?;
    ensure(conn.rtr == Some(iwarp_proto::mpa::negotiate::Rtr::Write), format!("A: the responder picked the Write RTR ({:?})", conn.rtr))?;
    s.set_read_timeout(Some(HOLD)).map_err(|e| e.to_string())?;
    let mut one = [0u8; 1];
    match s.read(&mut one) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => println!("ok: A: nothing from the responder for {HOLD:?} before our RTR"),
        other => return Err(format!("A: the responder sent before our RTR ({other:?})")),
    }
    let mut t = Transmitter::new(tx::Config { markers: if conn.tx_markers { Markers::RFC } else { Markers::NONE }, crc: conn.crc, mulpdu: 1400 });
    let mut wire = Vec::new();
    frame(&mut t, &mut wire, Message::Write { stag: 0, to: 0 }, &[])?;
    s.write_all(&wire).map_err(|e| format!("send the RTR: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let (mut rx, mut sink, mut pending) = (receiver(&conn), Collect(Vec::new()), Vec::new());
    receive_until(&mut s, &mut rx, &mut sink, &mut pending, 1)?;
    ensure(
        matches!(sink.0[..], [Event::Send { len, .. }] if len as usize == HELD.len()),
        format!("A: the responder's Send came after our RTR ({:?})", sink.0),
    )?;
    let mut wire = Vec::new();
    frame(&mut t, &mut wire, Message::Send { solicited: false, invalidate: None }, BYE)?;
    s.write_all(&wire).map_err(|e| format!("send: {e}"))?;
    // Wait for the responder to close, so our Send is not cut off by our leaving.
    let mut rest = [0u8; 256];
    while matches!(s.read(&mut rest), Ok(n) if n > 0) {}
    Ok(())
}
