//! MPA marker geometry (RFC 5044 section 7): where markers sit in the stream and how they
//! interleave with an FPDU's bytes.
//!
//! Stream offsets count from the first octet of the first FPDU (offset 0), where the first
//! marker sits; further markers follow every `interval` octets. A marker is 4 octets: 16 reserved
//! bits, then FPDUPTR, the distance back from the marker to the ULPDU Length field of the FPDU it
//! lies in (RFC 5044 section 4.3). A marker right before a Length field leads that FPDU and holds
//! 0; the FPDU's later markers count from the Length field after it, not from the leading marker.
//! Markers are part of the FPDU they fall in and are covered by its CRC. FPDU bodies, markers and
//! the interval are all multiples of 4, so a marker never splits a header field.

/// Length of one marker on the wire.
pub const MARKER_LEN: u32 = 4;
/// The RFC 5044 marker interval.
pub const RFC_INTERVAL: u32 = 512;

/// Where markers sit, or that there are none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Markers {
    interval: u32,
}

/// A stretch of an FPDU on the wire: either a marker or a run of FPDU body octets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// A marker at stream offset `pos`.
    Marker {
        /// Stream offset of the marker.
        pos: u64,
    },
    /// Body octets `[body_off, body_off + len)` of the FPDU at stream offset `pos`.
    Body {
        /// Stream offset of the run.
        pos: u64,
        /// Offset of the run within the body.
        body_off: u32,
        /// Octets in the run.
        len: u32,
    },
}

impl Markers {
    /// No markers.
    pub const NONE: Markers = Markers { interval: 0 };
    /// Markers every 512 octets, as RFC 5044 specifies.
    pub const RFC: Markers = Markers { interval: RFC_INTERVAL };

    /// Markers every `interval` octets; `None` unless it is a multiple of 4 in `8..=65532`.
    pub fn every(interval: u32) -> Option<Markers> {
        (interval % 4 == 0 && (8..=65532).contains(&interval)).then_some(Markers { interval })
    }

    /// Whether markers are in use.
    pub fn enabled(self) -> bool {
        self.interval != 0
    }

    /// The interval, 0 when disabled.
    pub fn interval(self) -> u32 {
        self.interval
    }

    /// The first marker position at or after `pos`.
    #[inline]
    pub fn next_at_or_after(self, pos: u64) -> Option<u64> {
        if !self.enabled() {
            return None;
        }
        let n = u64::from(self.interval);
        // The RFC interval is a power of two: no division on the per-FPDU path.
        Some(if n.is_power_of_two() { (pos + n - 1) & !(n - 1) } else { pos.div_ceil(n) * n })
    }

    /// Whether a marker sits at `pos`.
    #[inline]
    pub fn at(self, pos: u64) -> bool {
        self.next_at_or_after(pos) == Some(pos)
    }

    /// Iterates the runs of an FPDU whose first wire octet is at `start` and whose body (length
    /// field, ULPDU, pad and CRC) is `body_len` octets. A marker right after the last body octet
    /// belongs to the next FPDU and is not yielded.
    #[inline]
    pub fn runs(self, start: u64, body_len: u32) -> Runs {
        let next_marker = self.next_at_or_after(start).unwrap_or(u64::MAX);
        Runs { interval: u64::from(self.interval), next_marker, pos: start, body_off: 0, body_len }
    }

    /// Octets on the wire of an FPDU starting at `start` with `body_len` body octets.
    #[inline]
    pub fn wire_len(self, start: u64, body_len: u32) -> u32 {
        let Some(first) = self.next_at_or_after(start) else { return body_len };
        // Body octets before the first marker, then (interval - 4) between markers.
        let before = (first - start) as u32;
        if body_len <= before {
            return body_len;
        }
        let markers = 1 + (body_len - before - 1) / (self.interval - MARKER_LEN);
        body_len + MARKER_LEN * markers
    }
}

/// Iterator returned by [`Markers::runs`].
pub struct Runs {
    interval: u64,
    next_marker: u64,
    pos: u64,
    body_off: u32,
    body_len: u32,
}

impl Iterator for Runs {
    type Item = Run;

    #[inline]
    fn next(&mut self) -> Option<Run> {
        if self.body_off == self.body_len {
            return None;
        }
        if self.pos == self.next_marker {
            let pos = self.pos;
            self.pos += u64::from(MARKER_LEN);
            self.next_marker += self.interval;
            return Some(Run::Marker { pos });
        }
        let len = (self.next_marker - self.pos).min(u64::from(self.body_len - self.body_off)) as u32;
        let run = Run::Body { pos: self.pos, body_off: self.body_off, len };
        self.pos += u64::from(len);
        self.body_off += len;
        Some(run)
    }
}

/// The largest ULPDU that fits a TCP segment of `emss` octets with these markers
/// (RFC 5044 section 11.2: MULPDU = EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)).
pub fn mulpdu(emss: u32, markers: Markers) -> u32 {
    let marker_room = if markers.enabled() { MARKER_LEN * emss.div_ceil(markers.interval) } else { 0 };
    emss.saturating_sub(6 + marker_room + emss % 4)
}

/// Pad octets after a ULPDU of `ulpdu_len` so that length field + ULPDU + pad is a multiple of 4.
pub fn pad_len(ulpdu_len: u32) -> u32 {
    (4 - (2 + ulpdu_len) % 4) % 4
}

/// The marker at `pos` of an FPDU whose ULPDU Length field is at `len_at`: 0 for a marker right
/// before that field (which leads its FPDU), else the distance back to it. Beyond 64 KiB into
/// an FPDU, only the distance modulo 2^16 fits.
pub fn encode(pos: u64, len_at: u64) -> [u8; 4] {
    let b = pointer(pos, len_at).to_be_bytes();
    [0, 0, b[0], b[1]]
}

/// The FPDUPTR [`encode`] writes into the marker at `pos`.
#[inline]
pub fn pointer(pos: u64, len_at: u64) -> u16 {
    pos.saturating_sub(len_at) as u16
}

/// A marker's FPDUPTR as a receiver reads it (RFC 5044 section 4.2, 4.3): the reserved bits
/// ignored, the low two bits taken as zero.
pub fn fpduptr(marker: [u8; 4]) -> u16 {
    u16::from_be_bytes([marker[2], marker[3]]) & !3
}

impl Markers {
    /// The stream offset of the ULPDU Length field of the FPDU whose first octet is at `start`:
    /// after a marker that sits there.
    #[inline]
    pub fn len_at(self, start: u64) -> u64 {
        if self.at(start) {
            start + u64::from(MARKER_LEN)
        } else {
            start
        }
    }

    /// The first octet of the FPDU a marker at `pos` lies in (its leading marker, if it has
    /// one), or `None` if the marker points before the stream start.
    pub fn decode(self, pos: u64, marker: [u8; 4]) -> Option<u64> {
        let ptr = u64::from(fpduptr(marker));
        if ptr == 0 {
            return Some(pos);
        }
        let len_at = pos.checked_sub(ptr)?;
        Some(if len_at >= u64::from(MARKER_LEN) && self.at(len_at - u64::from(MARKER_LEN)) { len_at - u64::from(MARKER_LEN) } else { len_at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fpdu_starts_with_a_marker() {
        let runs: [Run; 2] = {
            let mut it = Markers::RFC.runs(0, 8);
            [it.next().unwrap(), it.next().unwrap()]
        };
        assert_eq!(runs[0], Run::Marker { pos: 0 });
        assert_eq!(runs[1], Run::Body { pos: 4, body_off: 0, len: 8 });
        assert_eq!(Markers::RFC.wire_len(0, 8), 12);
    }

    #[test]
    fn marker_after_last_body_octet_belongs_to_next_fpdu() {
        // Body ends exactly at 512: the marker at 512 is not part of this FPDU.
        assert_eq!(Markers::RFC.wire_len(4, 508), 508);
        assert_eq!(Markers::RFC.wire_len(4, 512), 516);
    }

    #[test]
    fn long_fpdu_counts_every_marker() {
        // 2000 body octets from 8: markers at 512, 1024 and 1536; the wire ends at 2020.
        assert_eq!(Markers::RFC.wire_len(8, 2000), 2012);
        assert_eq!(Markers::NONE.wire_len(8, 2000), 2000);
    }

    #[test]
    fn runs_cover_body_exactly_once() {
        for start in (0..2048).step_by(4) {
            let mut next_body = 0;
            let mut pos = start;
            for r in Markers::every(64).unwrap().runs(start, 300) {
                match r {
                    Run::Marker { pos: m } => {
                        assert_eq!(m % 64, 0);
                        assert_eq!(m, pos);
                        pos += 4;
                    }
                    Run::Body { pos: p, body_off, len } => {
                        assert_eq!((p, body_off), (pos, next_body));
                        next_body += len;
                        pos += len as u64;
                    }
                }
            }
            assert_eq!(next_body, 300);
        }
    }

    #[test]
    fn wire_len_formula_matches_walking_the_runs() {
        for interval in [8, 12, 64, 512, 1024] {
            let m = Markers::every(interval).unwrap();
            for start in (0..3 * interval as u64).step_by(4) {
                for body in (4..4000).step_by(4) {
                    let walked = body + MARKER_LEN * m.runs(start, body).filter(|r| matches!(r, Run::Marker { .. })).count() as u32;
                    assert_eq!(m.wire_len(start, body), walked, "interval {interval} start {start} body {body}");
                }
            }
        }
    }

    #[test]
    fn mulpdu_matches_rfc_formula() {
        assert_eq!(mulpdu(1460, Markers::RFC), 1460 - (6 + 4 * 3));
        assert_eq!(mulpdu(1460, Markers::NONE), 1454);
        assert_eq!(mulpdu(1461, Markers::NONE), 1454);
        // An FPDU of that size always fits one segment, wherever it starts.
        for start in (0..1024).step_by(4) {
            let ulpdu = mulpdu(1460, Markers::RFC);
            let body = 2 + ulpdu + pad_len(ulpdu) + 4;
            assert!(Markers::RFC.wire_len(start, body) <= 1460);
        }
    }

    #[test]
    fn marker_encoding_round_trips_and_ignores_reserved_bits() {
        let m = Markers::RFC;
        assert_eq!(encode(1024, 1000), [0, 0, 0, 24]);
        assert_eq!(m.decode(1024, encode(1024, 1000)), Some(1000));
        // A marker leading its FPDU holds 0 and starts it.
        assert_eq!(encode(512, 516), [0, 0, 0, 0]);
        assert_eq!(m.decode(512, [0, 0, 0, 0]), Some(512));
        // Reserved bits are ignored, FPDUPTR's low two bits taken as zero (RFC 5044 4.2, 4.3).
        assert_eq!(m.decode(1024, [0xff, 0xff, 0, 27]), Some(1000));
        assert_eq!(fpduptr([1, 2, 0x12, 0x37]), 0x1234);
        // Pointing before the stream start.
        assert_eq!(m.decode(16, [0, 0, 0, 20]), None);
    }

    #[test]
    fn markers_after_a_leading_marker_point_at_the_length_field() {
        // RFC 5044 section 4.3: FPDUPTR counts from the ULPDU Length field. An FPDU that starts
        // at a marker position (1024) has its Length field at 1028; its marker at 1536 holds
        // 508, not 512, and is read back to the FPDU's start at its leading marker.
        let m = Markers::RFC;
        assert_eq!(m.len_at(1024), 1028);
        assert_eq!(m.len_at(1000), 1000);
        assert_eq!(encode(1536, m.len_at(1024)), [0, 0, 0x01, 0xfc]);
        assert_eq!(m.decode(1536, [0, 0, 0x01, 0xfc]), Some(1024));
        // The first FPDU of a stream starts at the first marker.
        assert_eq!(m.decode(512, encode(512, m.len_at(0))), Some(0));
        // Where no marker sits before the Length field, the field is the FPDU's start.
        assert_eq!(m.decode(1536, encode(1536, m.len_at(1020))), Some(1020));
    }

    #[test]
    fn interval_must_be_sane() {
        assert!(Markers::every(0).is_none());
        assert!(Markers::every(510).is_none());
        assert!(Markers::every(4).is_none());
        assert_eq!(Markers::every(512), Some(Markers::RFC));
    }
}
