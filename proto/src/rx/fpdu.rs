//! Reading one FPDU out of stream bytes: its length, headers, markers, CRC and payload runs,
//! with the markers that fall inside it stepped over.

use crate::crc::Crc32c;
use crate::markers::{self, pad_len, Markers, Run};
use crate::stream::Pieces;
use crate::terminate::Cause;

/// An FPDU whose length field has been read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Located {
    /// Stream offset of its first octet.
    pub(crate) start: u64,
    /// ULPDU length (DDP header and payload).
    pub(crate) ulpdu_len: u16,
    /// Length field, ULPDU, pad and CRC.
    pub(crate) body_len: u32,
    /// Body plus markers.
    pub(crate) wire_len: u32,
    /// Stream offset of its length field (after a marker at `start`).
    pub(crate) len_at: u64,
}

impl Located {
    /// Stream offset one past its last octet.
    pub(crate) fn end(&self) -> u64 {
        self.start + u64::from(self.wire_len)
    }
}

/// Reads the length field of the FPDU at `start`; `None` if those octets are not in `data`.
/// FPDUs and markers are 4-aligned, so the field is whole: at `start`, or just after a marker
/// that sits there.
#[inline]
pub(crate) fn locate(data: &Pieces<'_>, markers: Markers, start: u64) -> Option<Located> {
    let at = markers.len_at(start);
    if at < data.start() || at + 2 > data.end() {
        return None;
    }
    let ulpdu_len = u16::from_be_bytes(data.read(at));
    let body_len = 2 + u32::from(ulpdu_len) + pad_len(u32::from(ulpdu_len)) + 4;
    Some(Located { start, ulpdu_len, body_len, wire_len: markers.wire_len(start, body_len), len_at: at })
}

/// Copies body octets `[from, from + out.len())` of the FPDU at `start` (whose body is at least
/// `body_len` long) into `out`; `None` if some of them are not in `data`.
pub(crate) fn read_body(data: &Pieces<'_>, markers: Markers, start: u64, body_len: u32, from: u32, out: &mut [u8]) -> Option<()> {
    let to = from + out.len() as u32;
    for run in markers.runs(start, body_len) {
        let Run::Body { pos, body_off, len } = run else { continue };
        let (lo, hi) = (body_off.max(from), (body_off + len).min(to));
        if lo >= hi {
            continue;
        }
        let wire = pos + u64::from(lo - body_off);
        if wire < data.start() || wire + u64::from(hi - lo) > data.end() {
            return None;
        }
        data.copy_to(wire, &mut out[(lo - from) as usize..(hi - from) as usize]);
        if hi == to {
            break;
        }
    }
    Some(())
}

/// The first `len` octets after the FPDU's length field (its DDP header), in place when no
/// marker falls among them and they lie in one piece.
#[inline]
pub(crate) fn header_in_place<'a>(data: &Pieces<'a>, markers: Markers, f: &Located, len: usize) -> Option<&'a [u8]> {
    // Markers are 4-aligned and the length field is 2 octets at a 4-aligned offset: the header
    // starts right after it, and the first marker that can cut it is at `len_at + 4`.
    let from = f.len_at + 2;
    let unbroken = markers.next_at_or_after(f.len_at + 4).is_none_or(|m| m >= from + len as u64);
    unbroken.then(|| data.slice(from, len)).flatten()
}

/// Checks that every marker inside the FPDU points back to its ULPDU Length field.
#[inline]
pub(crate) fn check_markers(data: &Pieces<'_>, markers: Markers, f: &Located) -> Result<(), Cause> {
    let Some(mut pos) = markers.next_at_or_after(f.start) else { return Ok(()) };
    while pos < f.end() {
        if markers::fpduptr(data.read(pos)) != markers::pointer(pos, f.len_at) {
            return Err(Cause::MpaMarker);
        }
        pos += u64::from(markers.interval());
    }
    Ok(())
}

/// Checks the FPDU's CRC (everything before the CRC field, markers included).
#[inline]
pub(crate) fn check_crc<C: Crc32c>(data: &Pieces<'_>, f: &Located) -> Result<(), Cause> {
    let crc_pos = f.end() - 4;
    let mut crc = 0u32;
    data.for_each(f.start, crc_pos - f.start, |s| crc = C::append(crc, s));
    if crc_field(data, f) == crc {
        Ok(())
    } else {
        Err(Cause::MpaCrc)
    }
}

/// The FPDU's CRC field (zero when CRCs are off).
#[inline]
pub(crate) fn crc_field(data: &Pieces<'_>, f: &Located) -> u32 {
    u32::from_le_bytes(data.read(f.end() - 4))
}

/// Calls `f(payload_offset, bytes)` for the payload octets of the FPDU, which start at body
/// offset `payload_from` (after the length field and DDP header), in order.
#[inline]
pub(crate) fn for_each_payload<'a>(data: &Pieces<'a>, markers: Markers, fp: &Located, payload_from: u32, mut f: impl FnMut(u32, &'a [u8])) {
    let to = 2 + u32::from(fp.ulpdu_len);
    for run in markers.runs(fp.start, fp.body_len) {
        let Run::Body { pos, body_off, len } = run else { continue };
        let (lo, hi) = (body_off.max(payload_from), (body_off + len).min(to));
        if lo >= hi {
            continue;
        }
        let mut at = lo - payload_from;
        data.for_each(pos + u64::from(lo - body_off), u64::from(hi - lo), |s| {
            f(at, s);
            at += s.len() as u32;
        });
    }
}
