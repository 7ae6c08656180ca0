//! MPA (RFC 5044, RFC 6581): the Request and Reply frames, and the FPDUs after them walked
//! one by one by their length fields, with markers by stream position and CRCs checked.

use crate::ddp::Queues;

pub const REQUEST_KEY: &[u8; 16] = b"MPA ID Req Frame";
pub const REPLY_KEY: &[u8; 16] = b"MPA ID Rep Frame";
const HEADER_LEN: usize = 20;
const MAX_PRIVATE: usize = 512;
const MARKER_INTERVAL: u64 = 512;
const MARKER_LEN: u64 = 4;

/// A Request or Reply frame.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    /// M: the sender wants markers in what it receives.
    pub markers: bool,
    /// C: the sender wants CRCs.
    pub crc: bool,
    pub reject: bool,
    pub rev: u8,
    /// RFC 6581's P bit: the sender asks for (a Request) or agrees to (a Reply) peer-to-peer
    /// mode, an RTR message first.
    pub p2p: bool,
    /// Octets of the frame, private data included.
    pub len: usize,
}

pub enum Parsed {
    Whole(Frame),
    /// The stream ends inside the frame.
    Short,
    /// The stream does not start with this frame's key: not MPA.
    NotMpa,
}

/// Parses the frame starting `b` (a Request if `request`, else a Reply), strictly as a sender
/// must write it.
pub fn frame(b: &[u8], request: bool) -> Result<Parsed, String> {
    let (key, other) = if request { (REQUEST_KEY, REPLY_KEY) } else { (REPLY_KEY, REQUEST_KEY) };
    let n = b.len().min(16);
    if b[..n] != key[..n] {
        return if b[..n] == other[..n] { Err("the Request and Reply keys swapped".into()) } else { Ok(Parsed::NotMpa) };
    }
    if b.len() < HEADER_LEN {
        return Ok(Parsed::Short);
    }
    let (flags, rev, private) = (b[16], b[17], u16::from_be_bytes([b[18], b[19]]) as usize);
    let enhanced = flags & 0x10 != 0;
    // The P bit leads the IRD field, the first octet of the private data.
    let p2p = enhanced && b.get(HEADER_LEN).is_some_and(|ird| ird & 0x80 != 0);
    let f = Frame { markers: flags & 0x80 != 0, crc: flags & 0x40 != 0, reject: flags & 0x20 != 0, rev, p2p, len: HEADER_LEN + private };
    if rev != 1 && rev != 2 {
        return Err(format!("revision {rev}"));
    }
    if flags & 0x0f != 0 {
        return Err(format!("reserved flag bits set ({flags:#04x})"));
    }
    if f.reject && request {
        return Err("R set in a Request".into());
    }
    if enhanced && (rev < 2 || private < 4) {
        return Err(format!("H (RFC 6581) with revision {rev} and {private} octets of private data"));
    }
    if private > MAX_PRIVATE {
        return Err(format!("{private} octets of private data (at most {MAX_PRIVATE})"));
    }
    Ok(if b.len() < f.len { Parsed::Short } else { Parsed::Whole(f) })
}

/// What one direction uses after the exchange.
#[derive(Clone, Copy, Debug)]
pub struct Framing {
    pub markers: bool,
    pub crc: bool,
    /// Non-zero pad octets fail the walk (else they are counted).
    pub zero_pad: bool,
}

/// An FPDU's place on the wire.
pub struct Fpdu {
    /// Its first octet: the marker that leads it, if one does, else its ULPDU Length field.
    pub begin: u64,
    pub end: u64,
    pub ulpdu_len: u16,
}

/// The FPDUs found from the end of the MPA frame on.
pub struct Walk {
    pub fpdus: Vec<Fpdu>,
    pub markers: u64,
    pub crcs: u64,
    /// FPDUs with non-zero pad octets (counted when the framing does not fail them).
    pub nonzero_pads: u64,
    /// Octets after the last whole FPDU (the stream or the capture ended inside one).
    pub partial: u64,
    /// The first violation, after which the walk stopped.
    pub error: Option<String>,
}

/// Reads logical octets (markers taken out) from a stream whose full operation starts at
/// `start`, noting each marker passed and where the last read began.
struct Cursor<'a> {
    data: &'a [u8],
    pos: u64,
    start: u64,
    markers: bool,
    passed: Vec<(u64, [u8; 4])>,
}

impl Cursor<'_> {
    /// Appends `n` logical octets to `out`; returns where the first of them lies on the wire, or
    /// None if the stream ends first.
    fn take(&mut self, mut n: usize, out: &mut Vec<u8>) -> Option<u64> {
        let mut first = None;
        loop {
            if self.markers && (self.pos - self.start).is_multiple_of(MARKER_INTERVAL) && (n > 0 || first.is_none()) {
                let m = self.data.get(self.pos as usize..(self.pos + MARKER_LEN) as usize)?;
                self.passed.push((self.pos, m.try_into().unwrap()));
                self.pos += MARKER_LEN;
            }
            first.get_or_insert(self.pos);
            if n == 0 {
                return first;
            }
            let next_marker = if self.markers { self.start + ((self.pos - self.start) / MARKER_INTERVAL + 1) * MARKER_INTERVAL } else { u64::MAX };
            let run = (n as u64).min(next_marker - self.pos) as usize;
            out.extend_from_slice(self.data.get(self.pos as usize..self.pos as usize + run)?);
            self.pos += run as u64;
            n -= run;
        }
    }
}

/// Walks the FPDUs of `data` from `start` (the first octet after the MPA frame), checking each
/// against RFC 5044 (length, zero pad, markers, CRC) and its DDP and RDMAP headers (`queues`).
pub fn walk(data: &[u8], start: u64, framing: Framing, queues: &mut Queues) -> Walk {
    let mut w = Walk { fpdus: Vec::new(), markers: 0, crcs: 0, nonzero_pads: 0, partial: 0, error: None };
    let mut c = Cursor { data, pos: start, start, markers: framing.markers, passed: Vec::new() };
    let mut body = Vec::new();
    while c.pos < data.len() as u64 {
        let begin = c.pos;
        c.passed.clear();
        body.clear();
        let Some(len_at) = c.take(2, &mut body) else { break };
        let ulpdu = u16::from_be_bytes([body[0], body[1]]) as usize;
        let pad = (4 - (2 + ulpdu) % 4) % 4;
        if c.take(ulpdu + pad, &mut body).is_none() {
            break;
        }
        let mut crc = Vec::with_capacity(4);
        let Some(crc_at) = c.take(4, &mut crc) else { break };
        let n = w.fpdus.len();
        let at = format!("FPDU {} at stream octet {begin}", n + 1);
        for &(pos, m) in &c.passed {
            let ptr = u16::from_be_bytes([m[2], m[3]]);
            let want = if pos + MARKER_LEN == len_at { 0 } else { (pos - len_at) as u16 };
            if m[0] != 0 || m[1] != 0 || ptr != want {
                w.error = Some(format!("{at}: the marker at {pos} is {m:02x?}, FPDUPTR {want} expected"));
                return w;
            }
        }
        if body[2 + ulpdu..].iter().any(|&b| b != 0) {
            if framing.zero_pad {
                w.error = Some(format!("{at}: pad {:02x?}, zeros expected", &body[2 + ulpdu..]));
                return w;
            }
            w.nonzero_pads += 1;
        }
        w.markers += c.passed.len() as u64;
        if framing.crc {
            let got = u32::from_le_bytes(crc[..].try_into().unwrap());
            let want = crc32c::crc32c(&data[begin as usize..crc_at as usize]);
            if got != want {
                w.error = Some(format!("{at}: CRC {got:#010x}, {want:#010x} computed"));
                return w;
            }
            w.crcs += 1;
        }
        if let Err(e) = queues.check(&body[2..2 + ulpdu]) {
            w.error = Some(format!("{at}: {e}"));
            return w;
        }
        w.fpdus.push(Fpdu { begin, end: c.pos, ulpdu_len: ulpdu as u16 });
    }
    w.partial = data.len() as u64 - w.fpdus.last().map_or(start, |f| f.end);
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An untagged Send of `payload` octets as message `msn` (a whole message in one segment).
    fn send(msn: u32, payload: usize) -> Vec<u8> {
        let mut u = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0];
        u.extend_from_slice(&msn.to_be_bytes());
        u.extend_from_slice(&[0; 4]);
        u.extend((0..payload).map(|i| i as u8));
        u
    }

    /// A stream of `skip` octets (the MPA frame) and then FPDUs of `ulpdus`, written the way
    /// RFC 5044 4.3 and 4.4 describe, one octet at a time.
    fn emit(skip: usize, markers: bool, crc: bool, ulpdus: &[Vec<u8>]) -> Vec<u8> {
        let mut w = vec![0xee; skip];
        let marker = |w: &mut Vec<u8>, len_at: Option<usize>| {
            if markers && (w.len() - skip).is_multiple_of(512) {
                let ptr = len_at.map_or(0, |at| w.len() - at) as u16;
                w.extend_from_slice(&[0, 0]);
                w.extend_from_slice(&ptr.to_be_bytes());
            }
        };
        for u in ulpdus {
            let begin = w.len();
            let mut logical = (u.len() as u16).to_be_bytes().to_vec();
            logical.extend_from_slice(u);
            logical.resize(logical.len() + (4 - logical.len() % 4) % 4, 0);
            let mut len_at = None;
            for b in logical {
                marker(&mut w, len_at);
                len_at.get_or_insert(w.len());
                w.push(b);
            }
            marker(&mut w, len_at);
            let sum = if crc { crc32c::crc32c(&w[begin..]) } else { 0 };
            w.extend_from_slice(&sum.to_le_bytes());
        }
        w
    }

    /// A frame of revision 2 with RFC 6581's IRD and ORD, `ird_flags` in the IRD's first octet.
    fn enhanced(key: &[u8; 16], ird_flags: u8) -> Vec<u8> {
        let mut b = key.to_vec();
        b.extend_from_slice(&[0x50, 2, 0, 4, ird_flags, 8, 0x80, 4]);
        b
    }

    #[test]
    fn the_p_bit_is_peer_to_peer_mode() {
        for (ird_flags, p2p) in [(0x80, true), (0x40, false), (0, false)] {
            let Ok(Parsed::Whole(f)) = frame(&enhanced(REQUEST_KEY, ird_flags), true) else { panic!("not a whole Request") };
            assert_eq!((f.rev, f.crc, f.p2p, f.len), (2, true, p2p, 24));
        }
    }

    fn sends() -> Vec<Vec<u8>> {
        // Sizes that put markers everywhere: leading, inside, right before the CRC.
        (1..=60).map(|i| send(i, (i as usize * 37) % 700)).collect()
    }

    #[test]
    fn well_formed_streams_walk_to_their_end() {
        for (markers, crc) in [(false, false), (false, true), (true, false), (true, true)] {
            let data = emit(23, markers, crc, &sends());
            let w = walk(&data, 23, Framing { markers, crc, zero_pad: true }, &mut Queues::default());
            assert_eq!(w.error, None);
            assert_eq!((w.fpdus.len(), w.partial, w.fpdus.last().unwrap().end), (60, 0, data.len() as u64));
            assert_eq!(w.markers, if markers { (data.len() as u64 - 23).div_ceil(512) } else { 0 });
            assert_eq!(w.crcs, if crc { 60 } else { 0 });
            assert!(!markers || w.fpdus.iter().any(|f| (f.begin - 23) % 512 == 0), "no FPDU led by a marker");
        }
    }

    #[test]
    fn every_flipped_octet_is_caught() {
        let data = emit(20, true, true, &sends()[..8]);
        for at in 20..data.len() {
            let mut bad = data.clone();
            bad[at] ^= 0x10;
            let w = walk(&bad, 20, Framing { markers: true, crc: true, zero_pad: true }, &mut Queues::default());
            assert!(w.error.is_some() || w.partial > 0, "octet {at} flipped unnoticed");
        }
    }

    #[test]
    fn a_marker_pointing_at_itself_is_refused() {
        // The old off-by-4 reading: a marker inside an FPDU that a marker leads, pointing at
        // that leading marker rather than at the ULPDU Length field.
        let data = emit(0, true, false, &[send(1, 600)]);
        let mut bad = data.clone();
        let ptr = u16::from_be_bytes([bad[514], bad[515]]) + 4;
        bad[514..516].copy_from_slice(&ptr.to_be_bytes());
        let w = walk(&bad, 0, Framing { markers: true, crc: false, zero_pad: true }, &mut Queues::default());
        assert!(w.error.unwrap().contains("the marker at 512"));
        assert!(walk(&data, 0, Framing { markers: true, crc: false, zero_pad: true }, &mut Queues::default()).error.is_none());
    }

    #[test]
    fn a_non_zero_pad_fails_unless_ignored() {
        // One octet of payload: an 18-octet header, so a ULPDU of 19 and three pad octets.
        let mut data = emit(0, false, false, &[send(1, 1)]);
        assert_eq!(data.len(), 2 + 19 + 3 + 4);
        data[21] = 0x40;
        let w = walk(&data, 0, Framing { markers: false, crc: false, zero_pad: true }, &mut Queues::default());
        assert!(w.error.unwrap().contains("pad [40, 00, 00], zeros expected"));
        let w = walk(&data, 0, Framing { markers: false, crc: false, zero_pad: false }, &mut Queues::default());
        assert_eq!((w.error, w.fpdus.len(), w.nonzero_pads), (None, 1, 1));
    }

    #[test]
    fn a_stream_cut_inside_an_fpdu_ends_the_walk_there() {
        let data = emit(20, true, true, &sends()[..5]);
        let w = walk(&data[..data.len() - 3], 20, Framing { markers: true, crc: true, zero_pad: true }, &mut Queues::default());
        assert_eq!((w.error, w.fpdus.len()), (None, 4));
        assert!(w.partial > 0);
    }
}
