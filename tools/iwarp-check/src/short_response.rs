//! A user-level peer that answers the module's RDMA Read short: `short-response HOST PORT CASE`
//! connects as [`crate::ird`]'s Reader does, waits for the Read Request of the module's side
//! (`short-response-serve`), and answers it with a Read Response that ends (its last segment
//! flagged so) before the Read's length: none of it (`empty`) or half (`half`). A Read is
//! complete only when its whole length arrived, each segment continuing the last (RFC 5040
//! section 4.4; siw checks as much): the module must end the stream with a Terminate for DDP
//! base or bounds, and its side checks that the Read completed in error, with nothing placed
//! past what the response carried.

use super::{ensure, Check};
use crate::ird::Reader;
use crate::wire::frame;
use iwarp_proto::rx::Event;
use iwarp_proto::terminate::Cause;
use iwarp_proto::tx::Message;
use std::io::Write;

/// Guest A: `short-response` (see the module doc).
pub(crate) fn answer(host: &str, port: &str, case: &str) -> Check {
    let mut r = Reader::connect(host, port)?;
    let rr = loop {
        if let Some(rr) = r.sink.events.iter().find_map(|e| if let Event::ReadRequest(rr) = e { Some(*rr) } else { None }) {
            break rr;
        }
        ensure(r.read_more()?, format!("the module closed before its Read Request ({:?})", r.sink.events))?;
    };
    let payload = match case {
        "empty" => Vec::new(),
        "half" => vec![0xee; rr.size as usize / 2],
        _ => return Err(format!("unknown case {case}")),
    };
    let mut wire = Vec::new();
    frame(&mut r.t, &mut wire, Message::ReadResponse { stag: rr.sink_stag, to: rr.sink_to }, &payload)?;
    r.s.write_all(&wire).map_err(|e| format!("send the Read Response: {e}"))?;
    println!("ok: answered a Read of {} octets with {} ({case})", rr.size, payload.len());
    while r.read_more()? {}
    let cause = r.sink.events.iter().find_map(|e| if let Event::Terminate(t) = e { t.cause() } else { None });
    ensure(cause == Some(Cause::DdpBaseBounds), format!("the module answered the {case} Read Response with a Terminate for DDP base or bounds ({cause:?})"))
}
