//! One direction of a TCP connection put back together as its sender wrote it: every captured
//! data segment placed by sequence number (reordered, duplicated and retransmitted segments
//! alike), each retransmitted octet compared with the first copy.

use crate::capture::{Flow, Segment};

/// A captured data segment: where its payload lies in the stream.
pub struct Piece {
    /// Index into the capture's segments.
    pub segment: usize,
    pub start: u64,
    pub len: u64,
}

/// How the sender ended this direction, as far as the capture shows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    /// Neither FIN nor RST captured: still open when the capture stopped.
    Open,
    /// A FIN after this many octets.
    Fin(u64),
    Reset,
}

pub struct Stream {
    pub flow: Flow,
    /// The octets from the first on, up to the first one never captured.
    pub data: Vec<u8>,
    /// Every data segment, in capture order.
    pub pieces: Vec<Piece>,
    pub end: End,
    /// Octets captured beyond a hole in the stream: the capture lost what lies between.
    pub beyond_hole: u64,
    /// Octets that a later copy carried differently.
    pub conflicts: u64,
}

/// The stream `flow` sent, or None when its SYN is not in the capture (a connection made
/// before the capture started cannot be read from its first octet).
pub fn stream(segments: &[Segment], flow: Flow) -> Option<Stream> {
    let syn = segments.iter().find(|s| s.flow == flow && s.syn)?;
    let first = syn.seq.wrapping_add(1);
    let offset = |seq: u32| seq.wrapping_sub(first) as u64;
    let mut s = Stream { flow, data: Vec::new(), pieces: Vec::new(), end: End::Open, beyond_hole: 0, conflicts: 0 };
    for (i, seg) in segments.iter().enumerate().filter(|(_, seg)| seg.flow == flow && !seg.syn) {
        let len = seg.payload.len() as u64;
        if len > 0 {
            s.pieces.push(Piece { segment: i, start: offset(seg.seq), len });
        }
        if seg.rst {
            s.end = End::Reset;
        } else if seg.fin && s.end == End::Open {
            s.end = End::Fin(offset(seg.seq) + len);
        }
    }
    let mut order: Vec<&Piece> = s.pieces.iter().collect();
    order.sort_by_key(|p| p.start);
    let mut hole = false;
    for p in order {
        let payload = segments[p.segment].payload();
        let have = s.data.len() as u64;
        if hole || p.start > have {
            hole = true;
            s.beyond_hole += p.len;
            continue;
        }
        let overlap = (have - p.start).min(p.len) as usize;
        let old = &s.data[p.start as usize..p.start as usize + overlap];
        s.conflicts += old.iter().zip(&payload[..overlap]).filter(|(a, b)| a != b).count() as u64;
        s.data.extend_from_slice(&payload[overlap..]);
    }
    Some(s)
}
