//! Transmit builder: turns a message into FPDUs, each a scatter list of small control pieces
//! (length field, DDP/RDMAP header, markers, pad, CRC) and references to payload ranges, so the
//! payload itself is never copied (the module hands those ranges to TCP as pinned pages).

use crate::atomic;
use crate::crc::Crc32c;
use crate::ddp::{self, Buffer, Header};
use crate::markers::{self, pad_len, Markers, MARKER_LEN};
use crate::rdmap::{self, queue, Opcode, ReadRequest, MAX_INLINE};
use crate::terminate::{self, Terminate};

/// Control octets one FPDU can need: length field, largest header with inline payload, pad,
/// CRC, and the markers of a 64 KiB FPDU at the smallest sane interval we allow for big FPDUs.
pub const CTL_CAP: usize = 2 + ddp::UNTAGGED_LEN + MAX_INLINE + 3 + 4 + MAX_MARKERS * MARKER_LEN as usize;
/// Pieces one FPDU can need (each marker splits a payload run in two).
pub const PIECE_CAP: usize = 2 * MAX_MARKERS + 4;
/// Most markers one FPDU may contain; the builder keeps FPDUs below this.
pub const MAX_MARKERS: usize = 132;

/// How FPDUs are framed on this stream (the peer's M flag, the negotiated C flag, MULPDU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Markers the peer asked for.
    pub markers: Markers,
    /// CRCs negotiated.
    pub crc: bool,
    /// Largest ULPDU (DDP header + payload) per FPDU.
    pub mulpdu: u32,
}

impl Config {
    /// The most octets one FPDU can take on the wire: the largest ULPDU with its length field,
    /// pad and CRC, and the markers it holds wherever it starts.
    pub fn max_wire_len(&self) -> u32 {
        let body = 2 + self.mulpdu + 3 + 4;
        let starts = u64::from(self.markers.interval().max(4));
        (0..starts).step_by(4).map(|start| self.markers.wire_len(start, body)).max().unwrap_or(body)
    }
}

/// A message to send. Payload lengths are given to [`Transmitter::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// Send, optionally with Solicited Event and/or Invalidate of the peer's STag.
    Send {
        /// With Solicited Event.
        solicited: bool,
        /// With Invalidate of this peer STag.
        invalidate: Option<u32>,
    },
    /// RDMA Write to the peer's STag at tagged offset `to`.
    Write {
        /// The peer's STag.
        stag: u32,
        /// Tagged offset.
        to: u64,
    },
    /// RDMA Read Request (no payload of its own).
    ReadRequest(ReadRequest),
    /// RDMA Read Response into the requester's sink buffer.
    ReadResponse {
        /// The requester's sink STag.
        stag: u32,
        /// Tagged offset.
        to: u64,
    },
    /// Terminate (no payload of its own).
    Terminate(Terminate),
    /// Immediate Data (RFC 7306): 8 octets for the peer's next receive, with or without
    /// Solicited Event; after a Write, the two make a Write with Immediate Data.
    Immediate {
        /// With Solicited Event.
        solicited: bool,
        /// The 8 octets, big-endian.
        data: u64,
    },
    /// Atomic Request (RFC 7306; no payload of its own).
    AtomicRequest(atomic::Request),
    /// Atomic Response (RFC 7306; no payload of its own).
    AtomicResponse(atomic::Response),
}

impl Message {
    fn opcode(&self) -> Opcode {
        match self {
            Message::Send { solicited: false, invalidate: None } => Opcode::Send,
            Message::Send { solicited: true, invalidate: None } => Opcode::SendSolicited,
            Message::Send { solicited: false, invalidate: Some(_) } => Opcode::SendInvalidate,
            Message::Send { solicited: true, invalidate: Some(_) } => Opcode::SendSolicitedInvalidate,
            Message::Write { .. } => Opcode::Write,
            Message::ReadRequest(_) => Opcode::ReadRequest,
            Message::ReadResponse { .. } => Opcode::ReadResponse,
            Message::Terminate(_) => Opcode::Terminate,
            Message::Immediate { solicited: false, .. } => Opcode::ImmediateData,
            Message::Immediate { solicited: true, .. } => Opcode::ImmediateDataSolicited,
            Message::AtomicRequest(_) => Opcode::AtomicRequest,
            Message::AtomicResponse(_) => Opcode::AtomicResponse,
        }
    }
}

/// The payload of a message, read only to compute CRCs.
pub trait Payload {
    /// Calls `f` with the slices covering payload range `[off, off + len)`, in order.
    fn for_each(&self, off: u64, len: u32, f: &mut dyn FnMut(&[u8]));
}

impl Payload for [u8] {
    fn for_each(&self, off: u64, len: u32, f: &mut dyn FnMut(&[u8])) {
        f(&self[off as usize..off as usize + len as usize]);
    }
}

impl Payload for [&[u8]] {
    fn for_each(&self, off: u64, len: u32, f: &mut dyn FnMut(&[u8])) {
        let (mut skip, mut left) = (off, u64::from(len));
        for s in self {
            if left == 0 {
                break;
            }
            if skip >= s.len() as u64 {
                skip -= s.len() as u64;
                continue;
            }
            let take = (s.len() as u64 - skip).min(left);
            f(&s[skip as usize..(skip + take) as usize]);
            skip = 0;
            left -= take;
        }
    }
}

/// One piece of an FPDU on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Octets `[off, off + len)` of [`Fpdu::ctl`].
    Ctl {
        /// Offset in the control octets.
        off: u16,
        /// Length.
        len: u16,
    },
    /// Payload octets `[off, off + len)` of the message.
    Payload {
        /// Offset in the message payload.
        off: u64,
        /// Length.
        len: u32,
    },
}

/// One FPDU as a scatter list.
pub struct Fpdu {
    ctl: [u8; CTL_CAP],
    ctl_len: usize,
    pieces: [Piece; PIECE_CAP],
    n: usize,
    /// Stream offset of the first octet.
    pub stream_pos: u64,
    /// Octets on the wire.
    pub wire_len: u32,
    /// Whether it ends with a CRC (else with four zero octets).
    crc: bool,
}

impl Default for Fpdu {
    fn default() -> Self {
        Fpdu { ctl: [0; CTL_CAP], ctl_len: 0, pieces: [Piece::Ctl { off: 0, len: 0 }; PIECE_CAP], n: 0, stream_pos: 0, wire_len: 0, crc: false }
    }
}

impl Fpdu {
    /// The pieces, in wire order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces[..self.n]
    }

    /// The control octets a [`Piece::Ctl`] refers to.
    pub fn ctl(&self, off: u16, len: u16) -> &[u8] {
        &self.ctl[off as usize..off as usize + len as usize]
    }

    #[inline]
    fn push_ctl(&mut self, bytes: &[u8]) {
        let off = self.ctl_len;
        self.ctl[off..off + bytes.len()].copy_from_slice(bytes);
        self.ctl_len += bytes.len();
        match self.n.checked_sub(1).map(|i| &mut self.pieces[i]) {
            Some(Piece::Ctl { off: o, len }) if *o as usize + *len as usize == off => *len += bytes.len() as u16,
            _ => self.push(Piece::Ctl { off: off as u16, len: bytes.len() as u16 }),
        }
    }

    #[inline]
    fn push(&mut self, p: Piece) {
        self.pieces[self.n] = p;
        self.n += 1;
    }

    /// Fills in the CRC field of a framed FPDU from its pieces (markers included), each piece
    /// a separate run for the CRC.
    pub fn seal<C: Crc32c, P: Payload + ?Sized>(&mut self, payload: &P) {
        if !self.crc {
            return;
        }
        let crc_at = self.ctl_len - 4;
        let mut crc = 0u32;
        for p in &self.pieces[..self.n] {
            match *p {
                Piece::Ctl { off, len } => {
                    let end = (off as usize + len as usize).min(crc_at);
                    crc = C::append(crc, &self.ctl[off as usize..end]);
                }
                Piece::Payload { off, len } => payload.for_each(off, len, &mut |s| crc = C::append(crc, s)),
            }
        }
        self.ctl[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Copies a framed FPDU into `out` (at least [`Fpdu::wire_len`] octets) and fills in its CRC
    /// there, computed in one run over the copy, markers and all: a long run is what a CRC32c
    /// implementation does fastest. Returns the octets written.
    pub fn write_sealed<C: Crc32c, P: Payload + ?Sized>(&self, payload: &P, out: &mut [u8]) -> usize {
        let n = self.write_to(payload, out);
        if self.crc {
            let crc = C::append(0, &out[..n - 4]);
            out[n - 4..n].copy_from_slice(&crc.to_le_bytes());
        }
        n
    }

    /// Copies the whole FPDU into `out` as it is (sealed or not).
    pub fn write_to<P: Payload + ?Sized>(&self, payload: &P, out: &mut [u8]) -> usize {
        let mut at = 0;
        for p in self.pieces() {
            match *p {
                Piece::Ctl { off, len } => {
                    out[at..at + len as usize].copy_from_slice(self.ctl(off, len));
                    at += len as usize;
                }
                Piece::Payload { off, len } => payload.for_each(off, len, &mut |s| {
                    out[at..at + s.len()].copy_from_slice(s);
                    at += s.len();
                }),
            }
        }
        at
    }
}

/// A message being sent: where it is in its payload.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing {
    msg: Message,
    len: u64,
    sent: u64,
    msn: u32,
    done: bool,
}

impl Outgoing {
    /// Whether every FPDU of the message was built.
    pub fn done(&self) -> bool {
        self.done
    }

    /// The message's MSN (untagged messages).
    pub fn msn(&self) -> u32 {
        self.msn
    }
}

/// The smallest MULPDU that frames every message: the longest untagged header and inline part,
/// an Atomic Request's or a Terminate's that echoes a Read Request. A connection whose segments
/// hold less cannot carry RDMAP.
pub const MIN_MULPDU: u32 = {
    let inline = if atomic::REQUEST_LEN > terminate::MAX_LEN { atomic::REQUEST_LEN } else { terminate::MAX_LEN };
    (ddp::UNTAGGED_LEN + inline) as u32
};

/// Why a message cannot be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxError {
    /// Payload given to a message that carries none, or a tagged offset that would wrap.
    BadLength,
    /// MULPDU too small for the header.
    MulpduTooSmall,
}

/// The sending half of a stream: its position and the next MSN of each untagged queue. A copy
/// taken before framing lets a sender take an FPDU back that it could not send.
#[derive(Clone)]
pub struct Transmitter {
    cfg: Config,
    pos: u64,
    next_msn: [u32; queue::COUNT],
}

impl Transmitter {
    /// A transmitter whose first FPDU starts at stream offset 0 (the first octet after the MPA
    /// request or reply).
    pub fn new(cfg: Config) -> Transmitter {
        Transmitter { cfg, pos: 0, next_msn: [1; queue::COUNT] }
    }

    /// How FPDUs are framed.
    pub fn config(&self) -> Config {
        self.cfg
    }

    /// Stream offset of the next FPDU.
    pub fn stream_pos(&self) -> u64 {
        self.pos
    }

    /// Largest payload per FPDU for tagged messages (the best case).
    pub fn max_tagged_payload(&self) -> u32 {
        self.cfg.mulpdu.saturating_sub(ddp::TAGGED_LEN as u32)
    }

    /// Begins a message with `len` payload octets; assigns its MSN.
    pub fn start(&mut self, msg: Message, len: u64) -> Result<Outgoing, TxError> {
        let op = msg.opcode();
        let hdr = if op.tagged() { ddp::TAGGED_LEN } else { ddp::UNTAGGED_LEN } as u32;
        let inline = inline_len(&msg) as u32;
        if self.cfg.mulpdu < hdr + inline.max(1) || self.cfg.mulpdu > 65535 {
            return Err(TxError::MulpduTooSmall);
        }
        let wraps = match msg {
            Message::Write { to, .. } | Message::ReadResponse { to, .. } => to.checked_add(len).is_none(),
            Message::ReadRequest(_) | Message::Terminate(_) | Message::Immediate { .. } | Message::AtomicRequest(_) | Message::AtomicResponse(_) => len != 0,
            Message::Send { .. } => len > u64::from(u32::MAX),
        };
        if wraps {
            return Err(TxError::BadLength);
        }
        let msn = match op.queue() {
            Some(q) => {
                let m = self.next_msn[q as usize];
                self.next_msn[q as usize] = m.wrapping_add(1);
                m
            }
            None => 0,
        };
        Ok(Outgoing { msg, len, sent: 0, msn, done: false })
    }

    /// Builds the next FPDU of `out` into `fpdu`, CRC included; afterwards `out.done()` says
    /// whether that was the last. `payload` is read only for the CRC, piece by piece: a sender
    /// that copies the FPDU anyway should [`Transmitter::frame`] it and
    /// [`Fpdu::write_sealed`] instead, which computes the CRC in one run over the copy.
    pub fn next_fpdu<C: Crc32c, P: Payload + ?Sized>(&mut self, out: &mut Outgoing, payload: &P, fpdu: &mut Fpdu) {
        self.frame(out, fpdu);
        fpdu.seal::<C, P>(payload);
    }

    /// Builds the next FPDU of `out` into `fpdu` with its CRC field still zero (see
    /// [`Fpdu::seal`] and [`Fpdu::write_sealed`]); afterwards `out.done()` says whether that
    /// was the last.
    pub fn frame(&mut self, out: &mut Outgoing, fpdu: &mut Fpdu) {
        debug_assert!(!out.done);
        let op = out.msg.opcode();
        // Length field, DDP/RDMAP header and any inline payload, in wire order.
        let mut pre = [0u8; 2 + ddp::UNTAGGED_LEN + MAX_INLINE];
        let hdr_len = if op.tagged() { ddp::TAGGED_LEN } else { ddp::UNTAGGED_LEN };
        let inline = inline_len(&out.msg);
        // `pre` holds the largest header and inline payload: neither emit can fail.
        let _ = emit_inline(&out.msg, &mut pre[2 + hdr_len..]);
        // Keep the FPDU within the marker budget of one scatter list.
        // A marker every `interval` wire octets means one per `interval - 4` body octets.
        let max_ulpdu =
            self.cfg.mulpdu.min(if self.cfg.markers.enabled() { (MAX_MARKERS as u32 - 2) * (self.cfg.markers.interval() - MARKER_LEN) - 8 } else { u32::MAX });
        let room = u64::from(max_ulpdu) - hdr_len as u64 - inline as u64;
        let chunk = (out.len - out.sent).min(room) as u32;
        let last = out.sent + u64::from(chunk) == out.len;
        let buf = match out.msg {
            Message::Write { stag, to } | Message::ReadResponse { stag, to } => Buffer::Tagged { stag, to: to + out.sent },
            Message::Send { invalidate, .. } => Buffer::Untagged { ulp: invalidate.unwrap_or(0), qn: queue::SEND, msn: out.msn, mo: out.sent as u32 },
            _ => Buffer::Untagged { ulp: 0, qn: op.queue().unwrap_or(0), msn: out.msn, mo: 0 },
        };
        let ulpdu_len = (hdr_len + inline) as u32 + chunk;
        pre[..2].copy_from_slice(&(ulpdu_len as u16).to_be_bytes());
        let _ = Header { last, version: ddp::VERSION, ulp_ctrl: op.ctrl_byte(), buf }.emit(&mut pre[2..]);
        let pre_len = (2 + hdr_len + inline) as u32;
        let pad = pad_len(ulpdu_len);
        let body_len = 2 + ulpdu_len + pad + 4;

        fpdu.ctl_len = 0;
        fpdu.n = 0;
        fpdu.stream_pos = self.pos;
        fpdu.crc = self.cfg.crc;
        let markers = self.cfg.markers;
        let mut w = Framer {
            fpdu,
            len_at: markers.len_at(self.pos),
            pos: self.pos,
            next_marker: markers.next_at_or_after(self.pos).unwrap_or(u64::MAX),
            interval: u64::from(markers.interval()),
        };
        w.ctl(&pre[..pre_len as usize]);
        w.payload(out.sent, chunk);
        // Pad, then the CRC field, filled in when the FPDU is sealed.
        w.ctl(&[0u8; 7][..pad as usize + 4]);
        debug_assert_eq!(w.pos - self.pos, u64::from(markers.wire_len(self.pos, body_len)));
        fpdu.wire_len = (w.pos - self.pos) as u32;
        self.pos += u64::from(fpdu.wire_len);
        out.sent += u64::from(chunk);
        out.done = last;
    }
}

/// Lays an FPDU's octets out on the wire, putting a marker before the octet at each marker
/// position (none after the last octet: that one belongs to the next FPDU).
struct Framer<'a> {
    fpdu: &'a mut Fpdu,
    /// Stream offset of the FPDU's ULPDU Length field, which its markers point to.
    len_at: u64,
    /// Stream offset of the next octet.
    pos: u64,
    /// Stream offset of the next marker (`u64::MAX` without markers).
    next_marker: u64,
    interval: u64,
}

impl Framer<'_> {
    /// Octets that may follow before the next marker, after putting one that is due now.
    #[inline]
    fn room(&mut self) -> u64 {
        if self.pos == self.next_marker {
            self.fpdu.push_ctl(&markers::encode(self.pos, self.len_at));
            self.pos += u64::from(MARKER_LEN);
            self.next_marker += self.interval;
        }
        self.next_marker - self.pos
    }

    /// Control octets (copied into the FPDU).
    fn ctl(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = self.room().min(bytes.len() as u64) as usize;
            self.fpdu.push_ctl(&bytes[..take]);
            self.pos += take as u64;
            bytes = &bytes[take..];
        }
    }

    /// Payload octets `[off, off + len)` (referenced).
    fn payload(&mut self, mut off: u64, mut len: u32) {
        while len > 0 {
            let take = self.room().min(u64::from(len)) as u32;
            self.fpdu.push(Piece::Payload { off, len: take });
            self.pos += u64::from(take);
            off += u64::from(take);
            len -= take;
        }
    }
}

/// Octets of payload a message carries itself (a Read Request or Atomic header, a Terminate,
/// Immediate Data); 0 for messages whose payload is the caller's.
fn inline_len(msg: &Message) -> usize {
    match msg {
        Message::Terminate(t) => t.wire_len(),
        m => m.opcode().fixed_len().unwrap_or(0),
    }
}

/// Writes that payload into `out` and returns its length.
fn emit_inline(msg: &Message, out: &mut [u8]) -> Result<usize, rdmap::Error> {
    let mut put = |bytes: &[u8]| {
        out.get_mut(..bytes.len()).ok_or(rdmap::Error::Truncated)?.copy_from_slice(bytes);
        Ok(bytes.len())
    };
    match msg {
        Message::ReadRequest(rr) => put(&rr.emit()),
        Message::Immediate { data, .. } => put(&data.to_be_bytes()),
        Message::AtomicRequest(r) => put(&r.emit()),
        Message::AtomicResponse(r) => put(&r.emit()),
        Message::Terminate(t) => t.emit(out),
        _ => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::crc::HostCrc as Crc;
    use crate::markers::mulpdu;
    use std::{boxed::Box, vec::Vec};

    /// The wire octets of a Write of `payload` after `skip` octets of stream, sealed one way or
    /// the other.
    fn wire(cfg: Config, skip: u64, payload: &[u8], one_run: bool) -> Vec<u8> {
        let mut t = Transmitter::new(cfg);
        t.pos = skip;
        let mut out = t.start(Message::Write { stag: 7, to: 0 }, payload.len() as u64).unwrap();
        let mut fpdu = Box::<Fpdu>::default();
        let mut wire = Vec::new();
        while !out.done() {
            let at = wire.len();
            if one_run {
                t.frame(&mut out, &mut fpdu);
                wire.resize(at + fpdu.wire_len as usize, 0xee);
                assert_eq!(fpdu.write_sealed::<Crc, _>(payload, &mut wire[at..]), fpdu.wire_len as usize);
            } else {
                t.next_fpdu::<Crc, _>(&mut out, payload, &mut fpdu);
                wire.resize(at + fpdu.wire_len as usize, 0xee);
                assert_eq!(fpdu.write_to(payload, &mut wire[at..]), fpdu.wire_len as usize);
            }
        }
        wire
    }

    #[test]
    fn no_fpdu_is_longer_than_max_wire_len() {
        let payload = [7u8; 70_000];
        for markers in [Markers::NONE, Markers::RFC, Markers::every(64).unwrap()] {
            let cfg = Config { markers, crc: true, mulpdu: mulpdu(1460, markers) };
            let mut t = Transmitter::new(cfg);
            let mut fpdu = Box::<Fpdu>::default();
            let mut longest = 0;
            for _ in 0..3 {
                let mut out = t.start(Message::Write { stag: 7, to: 0 }, payload.len() as u64).unwrap();
                while !out.done() {
                    t.frame(&mut out, &mut fpdu);
                    longest = longest.max(fpdu.wire_len);
                }
            }
            assert!(longest <= cfg.max_wire_len() && cfg.max_wire_len() <= longest + 8, "{markers:?}: longest {longest}, bound {}", cfg.max_wire_len());
        }
    }

    /// RFC 5044 section 4.3, checked by walking the wire, not by our decoder: every marker holds
    /// the distance back to its FPDU's ULPDU Length field, one right before that field holds 0.
    #[test]
    fn markers_point_at_the_length_field_of_their_fpdu() {
        let payload = [5u8; 9000];
        let cfg = Config { markers: Markers::RFC, crc: true, mulpdu: mulpdu(1460, Markers::RFC) };
        let mut t = Transmitter::new(cfg);
        let mut fpdu = Box::<Fpdu>::default();
        let (mut wire, mut starts) = (Vec::new(), Vec::new());
        // Writes of every length that is a multiple of 4 up to 9000: FPDUs start at every offset
        // modulo 512, at marker positions too.
        for len in (4..9000).step_by(44) {
            let mut out = t.start(Message::Write { stag: 7, to: 0 }, len as u64).unwrap();
            while !out.done() {
                t.next_fpdu::<Crc, _>(&mut out, &payload[..], &mut fpdu);
                starts.push(wire.len());
                let at = wire.len();
                wire.resize(at + fpdu.wire_len as usize, 0);
                fpdu.write_to(&payload[..], &mut wire[at..]);
            }
        }
        starts.push(wire.len());
        let (mut leading, mut after_leading) = (0, 0);
        for f in starts.windows(2) {
            let (start, end) = (f[0], f[1]);
            let len_field = if start % 512 == 0 { start + 4 } else { start };
            for m in (start.next_multiple_of(512)..end).step_by(512) {
                let ptr = u16::from_be_bytes([wire[m + 2], wire[m + 3]]) as usize;
                assert_eq!(wire[m..m + 2], [0, 0]);
                if m == start {
                    assert_eq!(ptr, 0, "leading marker at {m}");
                    leading += 1;
                } else {
                    assert_eq!(ptr, m - len_field, "marker at {m} of the FPDU at {start}");
                    after_leading += (len_field != start) as u32;
                }
            }
        }
        assert!(leading > 0 && after_leading > 0, "{leading} leading markers, {after_leading} markers after one");
    }

    #[test]
    fn crc_over_the_copy_equals_crc_over_the_pieces() {
        let payload: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for markers in [Markers::NONE, Markers::RFC, Markers::every(64).unwrap()] {
            for crc in [false, true] {
                let cfg = Config { markers, crc, mulpdu: mulpdu(1460, markers) };
                for skip in [0, 4, 504, 508, 1000] {
                    for len in [0, 1, 3, 507, 508, 1500, 4096, 20_000] {
                        let p = &payload[..len];
                        assert_eq!(wire(cfg, skip, p, true), wire(cfg, skip, p, false), "{markers:?} crc {crc} skip {skip} len {len}");
                    }
                }
            }
        }
    }
}
