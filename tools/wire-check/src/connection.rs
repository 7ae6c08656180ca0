//! One TCP connection read as iWARP: which side sent the MPA Request, what the exchange agreed
//! (RFC 5044 7.1.1: markers toward a side that asked for them, CRCs both ways if either side
//! did), and each direction's FPDUs walked under that agreement.

use crate::capture::{Flow, Segment};
use crate::ddp::Queues;
use crate::mpa::{self, Fpdu, Framing, Parsed, Walk};
use crate::reassembly::{self, End, Stream};
use std::net::IpAddr;

/// One direction after the exchange.
pub struct Direction {
    pub stream: Stream,
    pub framing: Framing,
    /// Where full operation begins: the first octet after the MPA frame.
    pub start: u64,
    pub walk: Walk,
    pub queues: Queues,
}

pub enum Connection {
    /// Not iWARP (no MPA Request opens either direction), or no data at all.
    Other,
    /// The exchange did not finish (a frame cut short, no Reply): nothing to walk.
    Unfinished(String),
    Rejected {
        rev: u8,
    },
    /// Full operation: the initiator's direction first (boxed: the directions are large).
    Full {
        rev: u8,
        /// Both sides agreed to peer-to-peer mode.
        p2p: bool,
        dirs: Box<[Direction; 2]>,
    },
}

/// Reads the connection whose TCP opener sent `flow`; Err names what breaks the RFCs. Non-zero
/// pad octets from `pad_ignored_from` are counted, not failed.
pub fn decode(segments: &[Segment], flow: Flow, pad_ignored_from: Option<IpAddr>) -> Result<Connection, String> {
    let (Some(a), Some(b)) = (reassembly::stream(segments, flow), reassembly::stream(segments, flow.reverse())) else {
        return Ok(Connection::Other);
    };
    let starts = |s: &Stream| !s.data.is_empty() && s.data[..s.data.len().min(16)] == mpa::REQUEST_KEY[..s.data.len().min(16)];
    let (init, resp) = if starts(&a) {
        (a, b)
    } else if starts(&b) {
        (b, a)
    } else {
        return Ok(Connection::Other);
    };
    let request = match mpa::frame(&init.data, true).map_err(|e| format!("MPA Request: {e}"))? {
        Parsed::Whole(f) => f,
        _ => return Ok(Connection::Unfinished("the MPA Request was cut short".into())),
    };
    let reply = match mpa::frame(&resp.data, false).map_err(|e| format!("MPA Reply: {e}"))? {
        Parsed::Whole(f) => f,
        Parsed::Short => return Ok(Connection::Unfinished("the MPA Reply was cut short".into())),
        Parsed::NotMpa if resp.data.is_empty() => return Ok(Connection::Unfinished("no MPA Reply".into())),
        Parsed::NotMpa => return Err("the responder answered with something other than an MPA Reply".into()),
    };
    if reply.rev > request.rev {
        return Err(format!("a revision {} Reply to a revision {} Request", reply.rev, request.rev));
    }
    for s in [&init, &resp] {
        if s.conflicts > 0 {
            return Err(format!("{} → {}: {} octets retransmitted with other values", s.flow.src, s.flow.dst, s.conflicts));
        }
    }
    if reply.reject {
        if init.data.len() > request.len || resp.data.len() > reply.len {
            return Err("FPDUs after a rejected MPA exchange".into());
        }
        return Ok(Connection::Rejected { rev: reply.rev });
    }
    let crc = request.crc || reply.crc;
    let direction = |stream: Stream, start: usize, markers: bool| {
        let framing = Framing { markers, crc, zero_pad: pad_ignored_from != Some(stream.flow.src.addr) };
        let mut queues = Queues::default();
        let walk = mpa::walk(&stream.data, start as u64, framing, &mut queues);
        Direction { stream, framing, start: start as u64, walk, queues }
    };
    let dirs = [direction(init, request.len, reply.markers), direction(resp, reply.len, request.markers)];
    for d in &dirs {
        let name = format!("{} → {}", d.stream.flow.src, d.stream.flow.dst);
        if let Some(e) = &d.walk.error {
            return Err(format!("{name}: {e}"));
        }
        if matches!(d.stream.end, End::Fin(_)) && d.walk.partial > 0 && d.stream.beyond_hole == 0 {
            return Err(format!("{name}: closed with {} octets of an unfinished FPDU", d.walk.partial));
        }
    }
    Ok(Connection::Full { rev: reply.rev, p2p: request.p2p && reply.p2p, dirs: Box::new(dirs) })
}

impl Direction {
    /// The data segments after the exchange, up to the end of the last whole FPDU, each with
    /// the FPDUs it holds whole (None: it starts or ends inside one).
    pub fn segments(&self) -> impl Iterator<Item = (&reassembly::Piece, Option<&[Fpdu]>)> {
        let fpdus = &self.walk.fpdus;
        let end = fpdus.last().map_or(self.start, |f| f.end);
        self.stream.pieces.iter().filter(move |p| p.start >= self.start && p.start + p.len <= end).map(move |p| {
            let i = fpdus.partition_point(|f| f.begin < p.start);
            let j = fpdus.partition_point(|f| f.end < p.start + p.len);
            let whole = i < fpdus.len() && fpdus[i].begin == p.start && j < fpdus.len() && fpdus[j].end == p.start + p.len;
            (p, whole.then(|| &fpdus[i..=j]))
        })
    }
}
