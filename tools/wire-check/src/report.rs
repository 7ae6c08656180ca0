//! What wire-check prints: a line per connection, the totals, and each failure.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::connection::{Connection, Direction};
use crate::reassembly::End;

const OPCODES: [&str; 12] = [
    "Write",
    "Read Request",
    "Read Response",
    "Send",
    "Send with Invalidate",
    "Send with SE",
    "Send with SE and Invalidate",
    "Terminate",
    "Immediate Data",
    "Immediate Data with SE",
    "Atomic Request",
    "Atomic Response",
];

#[derive(Default)]
pub struct Report {
    failures: Vec<String>,
    /// Per sender: data segments, and those holding whole FPDUs only.
    segments: BTreeMap<IpAddr, (u64, u64)>,
    full: u64,
    /// MPA revision and peer-to-peer mode of each connection in full operation.
    modes: Vec<(u8, bool)>,
    other: u64,
    fpdus: u64,
    markers: u64,
    crcs: u64,
}

impl Report {
    pub fn fail(&mut self, why: String) {
        println!("FAIL: {why}");
        self.failures.push(why);
    }

    pub fn failed(&self) -> bool {
        !self.failures.is_empty()
    }

    /// Prints `c` and counts it; `cut`: the capture may end mid-stream at its packet bound.
    pub fn connection(&mut self, c: &Connection, cut: bool) {
        match c {
            Connection::Other => self.other += 1,
            Connection::Unfinished(why) => println!("a connection whose MPA exchange did not finish: {why}"),
            Connection::Rejected { rev } => println!("a connection rejected in its MPA exchange (revision {rev}), no FPDU after it"),
            Connection::Full { rev, p2p, dirs } => {
                self.full += 1;
                self.modes.push((*rev, *p2p));
                let crc = if dirs[0].framing.crc { "CRCs" } else { "no CRCs" };
                let p2p = if *p2p { ", peer-to-peer" } else { "" };
                println!("{} → {}: MPA revision {rev}{p2p}, {crc}", dirs[0].stream.flow.src, dirs[0].stream.flow.dst);
                for d in dirs.iter() {
                    self.direction(d, cut);
                }
            }
        }
    }

    fn direction(&mut self, d: &Direction, cut: bool) {
        let w = &d.walk;
        let name = format!("{} → {}", d.stream.flow.src, d.stream.flow.dst);
        let (mut segs, mut whole) = (0, 0);
        for (_, n) in d.segments() {
            segs += 1;
            whole += n.is_some() as u64;
        }
        let e = self.segments.entry(d.stream.flow.src.addr).or_default();
        e.0 += segs;
        e.1 += whole;
        self.fpdus += w.fpdus.len() as u64;
        self.markers += w.markers;
        self.crcs += w.crcs;
        let messages: Vec<String> = d.queues.messages.iter().zip(OPCODES).filter(|(n, _)| **n > 0).map(|(n, op)| format!("{n} {op}")).collect();
        let end = match d.stream.end {
            End::Open => "open at the capture's end",
            End::Fin(_) => "closed",
            End::Reset => "reset",
        };
        let markers = if d.framing.markers { format!(", {} markers", w.markers) } else { String::new() };
        let mut tail = if w.partial > 0 { format!(", {} octets of an FPDU at the end", w.partial) } else { String::new() };
        if w.nonzero_pads > 0 {
            tail += &format!(", {} with non-zero pad octets (ignored, as RFC 5044 has receivers do)", w.nonzero_pads);
        }
        println!(
            "  {name}: {} FPDUs{markers}, {} CRCs checked; messages: {}; {whole} of {segs} data segments hold whole FPDUs; {end}{tail}",
            w.fpdus.len(),
            w.crcs,
            if messages.is_empty() { "none".into() } else { messages.join(", ") },
        );
        if d.stream.beyond_hole > 0 && !cut {
            self.fail(format!("{name}: the capture lost octets at {} ({} captured beyond)", d.stream.data.len(), d.stream.beyond_hole));
        }
    }

    pub fn summary(&self, path: &str, frames: usize, segments: usize) {
        let (segs, whole) = self.segments.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        println!(
            "{path}: {frames} frames, {segments} TCP segments on the ports; {} iWARP connections in full operation ({} other TCP); \
             {} FPDUs, {} markers, {} CRCs checked; {whole} of {segs} data segments ({:.1} %) hold whole FPDUs",
            self.full,
            self.other,
            self.fpdus,
            self.markers,
            self.crcs,
            share(segs, whole)
        );
    }

    /// Holds the capture to at least `min` iWARP connections in full operation: a test that
    /// moves data must show some, or the check would pass on an empty capture.
    pub fn connections(&mut self, min: u64) {
        if self.full < min {
            self.fail(format!("{} iWARP connections in full operation, at least {min} expected", self.full));
        }
    }

    /// Holds every connection in full operation to MPA revision `rev` and, if `p2p` is given,
    /// to peer-to-peer mode on or off.
    pub fn modes(&mut self, rev: Option<u8>, p2p: Option<bool>) {
        for &(r, p) in &self.modes.clone() {
            if rev.is_some_and(|want| want != r) || p2p.is_some_and(|want| want != p) {
                let mode = |r: u8, p: bool| format!("revision {r}{}", if p { ", peer-to-peer" } else { "" });
                let want = mode(rev.unwrap_or(r), p2p.unwrap_or(p));
                self.fail(format!("a connection in MPA {}, {want} expected", mode(r, p)));
            }
        }
    }

    /// Holds the share of segments holding whole FPDUs to `all` %, and that of one sender to
    /// its own.
    pub fn thresholds(&mut self, all: Option<f64>, one: Option<(IpAddr, f64)>) {
        let (segs, whole) = self.segments.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        if let Some(min) = all {
            if segs == 0 || share(segs, whole) < min {
                self.fail(format!("{:.1} % of {segs} data segments hold whole FPDUs, at least {min} % required", share(segs, whole)));
            }
        }
        if let Some((ip, min)) = one {
            let (segs, whole) = self.segments.get(&ip).copied().unwrap_or_default();
            println!("  from {ip}: {whole} of {segs} data segments hold whole FPDUs ({:.1} %, at least {min} % required)", share(segs, whole));
            if segs == 0 || share(segs, whole) < min {
                self.fail(format!("{ip}'s data segments fall short of {min} % whole FPDUs"));
            }
        }
    }
}

fn share(all: u64, some: u64) -> f64 {
    if all == 0 {
        0.0
    } else {
        100.0 * some as f64 / all as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_other_than_expected_fails() {
        let mut r = Report { modes: vec![(2, true), (1, false)], ..Report::default() };
        r.modes(None, None);
        assert!(!r.failed());
        r.modes(Some(2), None);
        assert_eq!(r.failures, ["a connection in MPA revision 1, revision 2 expected"]);
        let mut r = Report { modes: vec![(2, true)], ..Report::default() };
        r.modes(Some(2), Some(true));
        assert!(!r.failed());
        r.modes(None, Some(false));
        assert_eq!(r.failures, ["a connection in MPA revision 2, peer-to-peer, revision 2 expected"]);
    }
}
