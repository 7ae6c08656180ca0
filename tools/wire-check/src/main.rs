//! wire-check: reads a capture of a VM test's traffic and checks every iWARP connection in it
//! against the RFCs with a decoder of its own, sharing no code with the protocol core (so that
//! a misreading of an RFC there is not repeated here): the MPA exchange, every FPDU walked by
//! its length field from the first on, markers where negotiated, CRCs, and each segment's DDP
//! and RDMAP headers with the untagged queues' sequencing. Optionally Wireshark's dissectors
//! (tshark) must read the same FPDUs, with good CRCs and no errors, in every segment that
//! starts and ends with an FPDU.
//!
//! Usage: wire-check PCAP LOW-PORT[-HIGH-PORT] [OPTION...]
//!   --aligned PCT          at least PCT % of the data segments hold whole FPDUs only
//!   --aligned-from IP PCT  ... and of those IP sent, PCT %
//!   --tshark               Wireshark's verdict on the segments that hold whole FPDUs
//!   --cut                  the capture may have stopped at its packet bound mid-stream
//!   --connections N        at least N iWARP connections reached full operation
//!   --pad-ignored-from IP  IP's non-zero pad octets are counted, not failed (siw sends them;
//!                          RFC 5044 has the sender zero them and the receiver ignore them)
//! Exits 1 on any violation or a threshold missed, 2 on bad usage or an unreadable file.

mod capture;
mod connection;
mod ddp;
mod mpa;
mod reassembly;
mod report;
mod tshark;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::process::ExitCode;

use connection::Connection;

struct Options {
    pcap: String,
    ports: std::ops::RangeInclusive<u16>,
    aligned: Option<f64>,
    aligned_from: Option<(IpAddr, f64)>,
    tshark: bool,
    cut: bool,
    connections: u64,
    /// Every connection's MPA revision must be this.
    rev: Option<u8>,
    /// Every connection must (or must not) be in peer-to-peer mode.
    p2p: Option<bool>,
    /// A sender whose non-zero pad octets are counted, not failed.
    pad_ignored_from: Option<IpAddr>,
}

fn options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [pcap, ports, rest @ ..] = &args[..] else { return Err("a capture and a port range expected".into()) };
    let port = |p: &str| p.parse::<u16>().map_err(|_| format!("bad port {p}"));
    let ports = match ports.split_once('-') {
        Some((lo, hi)) => port(lo)?..=port(hi)?,
        None => port(ports)?..=port(ports)?,
    };
    let pct = |p: Option<&String>| p.and_then(|p| p.parse::<f64>().ok()).ok_or("a percentage expected");
    let mut o = Options {
        pcap: pcap.clone(),
        ports,
        aligned: None,
        aligned_from: None,
        tshark: false,
        cut: false,
        connections: 0,
        rev: None,
        p2p: None,
        pad_ignored_from: None,
    };
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--aligned" => o.aligned = Some(pct(it.next())?),
            "--aligned-from" => {
                let ip = it.next().and_then(|ip| ip.parse().ok()).ok_or("an address expected")?;
                o.aligned_from = Some((ip, pct(it.next())?));
            }
            "--tshark" => o.tshark = true,
            "--cut" => o.cut = true,
            "--connections" => o.connections = it.next().and_then(|n| n.parse().ok()).ok_or("a number of connections expected")?,
            "--mpa-rev" => o.rev = Some(it.next().and_then(|n| n.parse().ok()).ok_or("a revision expected")?),
            "--p2p" => o.p2p = Some(it.next().and_then(|n| n.parse::<u8>().ok()).map(|n| n != 0).ok_or("0 or 1 expected")?),
            "--pad-ignored-from" => o.pad_ignored_from = Some(it.next().and_then(|ip| ip.parse().ok()).ok_or("an address expected")?),
            _ => return Err(format!("unknown option {a}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("wire-check: {e}\n{}", USAGE);
            return ExitCode::from(2);
        }
    };
    let cap = match capture::read(&o.pcap, &o.ports) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("wire-check: {e}");
            return ExitCode::from(2);
        }
    };
    let mut rep = report::Report::default();
    let openers: BTreeSet<_> = cap.segments.iter().filter(|s| s.syn && !s.ack).map(|s| s.flow).collect();
    let mut conns = Vec::new();
    for flow in openers {
        match connection::decode(&cap.segments, flow, o.pad_ignored_from) {
            Ok(c) => conns.push(c),
            Err(e) => rep.fail(format!("{} → {}: {e}", flow.src, flow.dst)),
        }
    }
    for c in &conns {
        rep.connection(c, o.cut);
    }
    rep.summary(&o.pcap, cap.frames, cap.segments.len());
    rep.connections(o.connections);
    rep.modes(o.rev, o.p2p);
    rep.thresholds(o.aligned, o.aligned_from);
    if o.tshark {
        let full: Vec<_> = conns.iter().filter_map(|c| if let Connection::Full { dirs, .. } = c { Some(&**dirs) } else { None }).collect();
        if let Err(e) = tshark::check(&o.pcap, &cap, &full, &mut rep) {
            rep.fail(e);
        }
    }
    if rep.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

const USAGE: &str =
    "usage: wire-check PCAP LOW-PORT[-HIGH-PORT] [--aligned PCT] [--aligned-from IP PCT] [--tshark] [--cut] [--connections N] [--mpa-rev N] [--p2p 0|1] [--pad-ignored-from IP]";
