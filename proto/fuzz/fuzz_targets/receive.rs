//! Fuzzes the receive engine: arbitrary bytes, cut into arbitrary pieces delivered at arbitrary
//! stream offsets (in order, ahead, overlapping), with markers and CRC on or off. The engine must
//! never panic, and every placement must be one the sink allowed: inside the advertised target.
#![no_main]

use iwarp_proto::crc::HostCrc;
use iwarp_proto::markers::Markers;
use iwarp_proto::rdmap::Opcode;
use iwarp_proto::rx::{self, Event, Receiver, Sink, Target};
use iwarp_proto::stream::Pieces;
use iwarp_proto::terminate::Cause;
use libfuzzer_sys::fuzz_target;

/// Advertises one 4 KiB region (STag 1, TO 4096..8192) and 1 KiB receive buffers for MSN 1..=4,
/// and checks that every placement stays inside what `check` allowed.
struct Bounded {
    allowed: Option<(Target, u32)>,
    placed: u64,
}

fn range(t: Target) -> (u64, u64) {
    match t {
        Target::Tagged { stag, to } => (stag as u64, to),
        Target::Untagged { msn, mo } => (1 << 40 | msn as u64, mo as u64),
    }
}

impl Sink for Bounded {
    fn check(&mut self, _op: Opcode, t: Target, len: u32) -> Result<(), Cause> {
        let ok = match t {
            Target::Tagged { stag: 1, to } => to >= 4096 && to + len as u64 <= 8192,
            Target::Tagged { .. } => return Err(Cause::DdpInvalidStag),
            Target::Untagged { msn, mo } => (1..=4).contains(&msn) && mo as u64 + len as u64 <= 1024,
        };
        if !ok {
            return Err(Cause::DdpBaseBounds);
        }
        self.allowed = Some((t, len));
        Ok(())
    }

    fn place(&mut self, t: Target, bytes: &[u8]) -> Result<(), Cause> {
        let (a, len) = self.allowed.expect("placement without a check");
        let ((ak, ao), (tk, to)) = (range(a), range(t));
        assert_eq!(ak, tk, "placed into another buffer than checked");
        assert!(to >= ao && to + bytes.len() as u64 <= ao + len as u64, "placed outside the checked range");
        self.placed += bytes.len() as u64;
        Ok(())
    }

    fn deliver(&mut self, _e: Event) {}
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let markers = match data[0] % 4 {
        0 => Markers::NONE,
        1 => Markers::RFC,
        2 => Markers::every(16).unwrap(),
        _ => Markers::every(64).unwrap(),
    };
    let crc = data[1] & 1 == 1;
    let cfg = rx::Config { markers, crc, expect_rtr: None, expect_rtr_read_response: false, extensions: true };
    let mut rx = Receiver::new(cfg);
    let mut sink = Bounded { allowed: None, placed: 0 };
    let stream = &data[4..];
    // Cut the stream into pieces by a step from data[2], and deliver every other piece ahead of
    // time when data[3] says so.
    let step = 1 + data[2] as usize * 7;
    let ahead = data[3] & 1 == 1;
    let mut at = 0;
    while at < stream.len() {
        let end = (at + step).min(stream.len());
        if ahead && end < stream.len() {
            let next_end = (end + step).min(stream.len());
            let _ = rx.receive::<HostCrc, _>(&Pieces::new(end as u64, &[&stream[end..next_end]]), &mut sink);
        }
        let from = rx.next() as usize;
        if from <= end {
            let (a, b) = stream[from..end].split_at((end - from) / 2);
            if rx.receive::<HostCrc, _>(&Pieces::new(from as u64, &[a, b]), &mut sink).is_err() {
                return;
            }
        }
        at = end;
    }
});
