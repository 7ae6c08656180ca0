//! Wireshark's verdict, a decoder not ours: the segments that hold whole FPDUs (the only ones
//! its MPA dissector can read, since it takes each segment to start with an FPDU or a marker)
//! are written to a capture of their own, in each sender's order after the MPA frames, and
//! tshark must find in each the FPDUs we found, with the same lengths, a good CRC each where
//! CRCs were agreed, and no error.
//!
//! With markers, Wireshark's verdict is shown, not required: Wireshark 4.0's MPA dissector
//! places markers by the sequence numbers of the whole segment, so it finds no FPDU in most
//! segments holding several (1,838 of 1,973 segments holding whole FPDUs in one test), and
//! even in segments holding one it misreads a few FPDUs (a bad CRC, or none found) that our
//! decoder and the receiving stack found whole with good CRCs. Our decoder checks every marker.
//! Wireshark also looks for markers in both directions once either side asked for them (RFC
//! 5044 has them only toward the side that asked), so the whole connection counts as "with
//! markers" then.
//!
//! WIRE_CHECK_KEEP=1 in the environment keeps the subset (PCAP.whole-fpdus) for a closer look.

use std::fs;
use std::process::Command;

use crate::capture::Capture;
use crate::connection::Direction;
use crate::report::Report;

/// What one frame of the subset must show.
struct Expect {
    frame: usize,
    /// The same frame's number in the test's capture.
    captured: usize,
    ulpdu_lens: Vec<u16>,
    crc: bool,
    /// Markers in either direction of the connection: Wireshark's verdict is then shown, not
    /// required.
    markers: bool,
}

pub fn check(pcap: &str, cap: &Capture, conns: &[&[Direction; 2]], rep: &mut Report) -> Result<(), String> {
    let mut handshake = Vec::new();
    let mut data = Vec::new();
    for (c, dirs) in conns.iter().enumerate() {
        // Either direction's markers make the whole connection "with markers" (module doc).
        let markers = dirs.iter().any(|d| d.framing.markers);
        for (k, d) in dirs.iter().enumerate() {
            handshake.extend(d.stream.pieces.iter().filter(|p| p.start < d.start).map(|p| p.segment));
            let mut seen = std::collections::HashSet::new();
            for (p, whole) in d.segments() {
                let (Some(fpdus), true) = (whole, seen.insert(p.start)) else { continue };
                let lens = fpdus.iter().map(|f| f.ulpdu_len).collect();
                data.push(((c, k, p.start), p.segment, lens, d.framing.crc, markers));
            }
        }
    }
    handshake.sort();
    data.sort_by_key(|d| d.0);
    let out = format!("{pcap}.whole-fpdus");
    let mut bytes = cap.header.clone();
    let mut expect = Vec::new();
    for &s in &handshake {
        bytes.extend_from_slice(&cap.segments[s].record);
    }
    for (i, (_, s, lens, crc, markers)) in data.into_iter().enumerate() {
        bytes.extend_from_slice(&cap.segments[s].record);
        let frame = handshake.len() + i + 1;
        expect.push(Expect { frame, captured: cap.segments[s].frame, ulpdu_lens: lens, crc, markers });
    }
    fs::write(&out, bytes).map_err(|e| format!("{out}: {e}"))?;
    // The verbose tree: only its text tells a good CRC from a bad one (both show as the
    // same iwarp_mpa.crc_check value). MPA is found only heuristically: heuristics go first,
    // or a dissector registered on the test's port (dpp on 7871, tibia on 7171, ...) takes
    // the MPA frames and tshark never sees the connection.
    let run = Command::new("tshark")
        .args(["-r", &out, "-V", "-o", "tcp.desegment_tcp_streams:FALSE", "-o", "tcp.analyze_sequence_numbers:FALSE"])
        .args(["-o", "tcp.try_heuristic_first:TRUE"])
        .args(["--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct"])
        .output();
    if std::env::var_os("WIRE_CHECK_KEEP").is_none() {
        let _ = fs::remove_file(&out);
    }
    let run = run.map_err(|e| format!("tshark: {e} (scripts/setup.sh installs it)"))?;
    if !run.status.success() {
        return Err(format!("tshark failed: {}", String::from_utf8_lossy(&run.stderr)));
    }
    let stdout = String::from_utf8_lossy(&run.stdout);
    let frames = verdicts(&stdout);
    // Per kind of direction (without markers, with): segments asked about, agreed, FPDUs.
    let mut tally = [(0, 0, 0); 2];
    for e in &expect {
        let t = &mut tally[e.markers as usize];
        t.0 += 1;
        let Some(v) = frames.get(e.frame - 1) else {
            rep.fail(format!("tshark: frame {} of the capture not read", e.captured));
            continue;
        };
        let crcs_right = if e.crc { v.good_crcs == v.ulpdu_lens.len() } else { v.good_crcs == 0 };
        if v.ulpdu_lens == e.ulpdu_lens && crcs_right && v.bad_crcs == 0 && v.errors.is_empty() {
            t.1 += 1;
            t.2 += v.ulpdu_lens.len();
        } else if !e.markers {
            rep.fail(format!(
                "tshark: in frame {} of the capture it found ULPDUs {:?} with {} good CRCs, {} bad{}; we found {:?}",
                e.captured,
                v.ulpdu_lens,
                v.good_crcs,
                v.bad_crcs,
                if v.errors.is_empty() { String::new() } else { format!(", errors {:?}", v.errors) },
                e.ulpdu_lens
            ));
        }
    }
    let [plain, marked] = tally;
    println!(
        "tshark (Wireshark's iwarp_mpa, iwarp_ddp_rdmap): agrees on {} of {} segments holding whole FPDUs ({} FPDUs); \
         with markers (shown, not required) on {} of {} ({} FPDUs)",
        plain.1, plain.0, plain.2, marked.1, marked.0, marked.2
    );
    Ok(())
}

/// What tshark's verbose tree says of one frame.
#[derive(Default)]
struct Verdict {
    ulpdu_lens: Vec<u16>,
    good_crcs: usize,
    bad_crcs: usize,
    /// Expert infos of severity Error, malformed packets included.
    errors: Vec<String>,
}

/// The verdict on each frame of tshark's `-V` output, in frame order.
fn verdicts(tree: &str) -> Vec<Verdict> {
    let mut frames: Vec<Verdict> = Vec::new();
    for line in tree.lines() {
        if line.starts_with("Frame ") {
            frames.push(Verdict::default());
            continue;
        }
        let (Some(v), line) = (frames.last_mut(), line.trim()) else { continue };
        if let Some(len) = line.strip_prefix("ULPDU length: ").and_then(|l| l.strip_suffix(" bytes")) {
            v.ulpdu_lens.extend(len.parse::<u16>().ok());
        } else if line.starts_with("CRC check: ") {
            if line.ends_with("(Good CRC32)") {
                v.good_crcs += 1
            } else {
                v.bad_crcs += 1
            }
        } else if line.starts_with("[Expert Info (Error/") {
            v.errors.push(line.to_string());
        }
    }
    frames
}
