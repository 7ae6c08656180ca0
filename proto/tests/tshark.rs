//! Conformance: an exchange emitted by this crate (MPA request and reply, then every RDMAP
//! operation in both directions, markers and CRC on) is written to a pcap as TCP over IPv4 and
//! dissected by tshark's `iwarp_mpa` and `iwarp_ddp_rdmap` dissectors: no malformed packet, no
//! error, every CRC good, every marker decoded with the FPDU pointer we emitted.
//! Without tshark the test fails: it never passes unchecked. `cargo xtask test` looks for tshark
//! first and, where it is missing, leaves this test out and counts it as skipped.

mod common;

use common::{Crc, Msg};
use iwarp_proto::markers::{Markers, Run};
use iwarp_proto::mpa::frame::RtrTypes;
use iwarp_proto::mpa::negotiate::Local;
use iwarp_proto::rdmap::ReadRequest;
use iwarp_proto::terminate::{Cause, Terminate};
use iwarp_proto::tx::{self, Fpdu, Message, Transmitter};
use std::process::Command;

/// A pcap of one TCP connection between 10.0.0.1:40000 (initiator) and 10.0.0.2:5000.
struct Pcap {
    out: Vec<u8>,
    seq: [u32; 2],
    t: u32,
}

impl Pcap {
    fn new() -> Pcap {
        let mut out = Vec::new();
        for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
            if v == 0x0004_0002 {
                out.extend_from_slice(&2u16.to_le_bytes());
                out.extend_from_slice(&4u16.to_le_bytes());
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        let mut p = Pcap { out, seq: [1000, 5000], t: 0 };
        p.segment(0, 0x02, &[]);
        p.segment(1, 0x12, &[]);
        p.seq = [1001, 5001];
        p.segment(0, 0x10, &[]);
        p
    }

    /// One TCP segment from side `from` (0 = initiator) with `flags` and `payload`.
    fn segment(&mut self, from: usize, flags: u8, payload: &[u8]) {
        let ip = |s: usize| if s == 0 { [10, 0, 0, 1] } else { [10, 0, 0, 2] };
        let port = |s: usize| if s == 0 { 40000u16 } else { 5000 };
        let (src, dst) = (ip(from), ip(1 - from));
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&port(from).to_be_bytes());
        tcp.extend_from_slice(&port(1 - from).to_be_bytes());
        tcp.extend_from_slice(&self.seq[from].to_be_bytes());
        let ack = if flags == 0x02 { 0 } else { self.seq[1 - from] };
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(payload);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src);
        pseudo.extend_from_slice(&dst);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(&tcp);
        let c = checksum(&pseudo);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        let mut ipv4 = vec![0x45, 0];
        ipv4.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        ipv4.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        ipv4.extend_from_slice(&src);
        ipv4.extend_from_slice(&dst);
        let c = checksum(&ipv4);
        ipv4[10..12].copy_from_slice(&c.to_be_bytes());
        let mut frame = vec![2, 0, 0, 0, 0, 2 - from as u8, 2, 0, 0, 0, 0, 1 + from as u8, 0x08, 0x00];
        frame.extend_from_slice(&ipv4);
        frame.extend_from_slice(&tcp);
        self.t += 1;
        for v in [0, self.t, frame.len() as u32, frame.len() as u32] {
            self.out.extend_from_slice(&v.to_le_bytes());
        }
        self.out.extend_from_slice(&frame);
        let syn_fin = u32::from(flags & 0x03 != 0);
        self.seq[from] = self.seq[from].wrapping_add(payload.len() as u32 + syn_fin);
    }
}

fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b.chunks(2).map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Every operation, with payloads that make FPDUs long enough to carry several markers.
fn operations(side: u32) -> Vec<Msg> {
    let p = |n: usize| (0..n).map(|i| (i as u32 * 7 + side) as u8).collect::<Vec<u8>>();
    let rr = ReadRequest { sink_stag: 0x10 + side, sink_to: 0x2000, size: 3000, src_stag: 0x20 + side, src_to: 0x4000 };
    vec![
        Msg { msg: Message::Send { solicited: false, invalidate: None }, payload: p(100) },
        Msg { msg: Message::Send { solicited: true, invalidate: None }, payload: p(1) },
        Msg { msg: Message::Send { solicited: false, invalidate: Some(0x77) }, payload: p(2) },
        Msg { msg: Message::Send { solicited: true, invalidate: Some(0x78) }, payload: p(3) },
        Msg { msg: Message::Write { stag: 0x30 + side, to: 0x1000 }, payload: p(3000) },
        Msg { msg: Message::ReadRequest(rr), payload: Vec::new() },
        Msg { msg: Message::ReadResponse { stag: 0x40 + side, to: 0x8000 }, payload: p(3000) },
        Msg { msg: Message::Send { solicited: false, invalidate: None }, payload: p(0) },
    ]
}

#[test]
fn tshark_dissects_our_exchange_cleanly() {
    let tshark = which("tshark").expect("tshark is not installed (cargo xtask setup installs it): the conformance check cannot run");
    let local = Local { markers: true, crc: true, rev: 1, ird: 8, ord: 8, p2p: false, rtr: RtrTypes::default(), extensions: false };
    let mut pcap = Pcap::new();
    let mut buf = [0u8; 600];
    let req = local.request(b"iwarp-rs conformance");
    let n = req.emit(&mut buf).unwrap();
    pcap.segment(0, 0x18, &buf[..n]);
    let (rep, conn) = local.respond(&req, b"ok");
    let n = rep.emit(&mut buf).unwrap();
    pcap.segment(1, 0x18, &buf[..n]);
    assert!(conn.tx_markers && conn.rx_markers && conn.crc);

    // Both directions interleaved, one FPDU per TCP segment, MULPDU from a 1460-octet MSS.
    let cfg = tx::Config { markers: Markers::RFC, crc: true, mulpdu: iwarp_proto::markers::mulpdu(1460, Markers::RFC) };
    let mut txs = [Transmitter::new(cfg), Transmitter::new(cfg)];
    let ops = [operations(0), operations(1)];
    let mut fpdu = Box::<Fpdu>::default();
    let (mut fpdus, mut markers) = (0usize, Vec::new());
    for i in 0..ops[0].len() + 1 {
        for side in 0..2 {
            let m = match ops[side].get(i) {
                Some(m) => m.clone(),
                None if side == 1 => Msg { msg: Message::Terminate(Terminate::new(Cause::RdmapCatastrophic)), payload: Vec::new() },
                None => continue,
            };
            let mut out = txs[side].start(m.msg, m.payload.len() as u64).unwrap();
            while !out.done() {
                txs[side].next_fpdu::<Crc, _>(&mut out, m.payload.as_slice(), &mut fpdu);
                let mut wire = vec![0u8; fpdu.wire_len as usize];
                fpdu.write_to(m.payload.as_slice(), &mut wire);
                for run in Markers::RFC.runs(fpdu.stream_pos, fpdu.wire_len) {
                    if let Run::Marker { pos } = run {
                        if pos < fpdu.stream_pos + fpdu.wire_len as u64 {
                            markers.push((pos - fpdu.stream_pos) as u16);
                        }
                    }
                }
                pcap.segment(side, 0x18, &wire);
                fpdus += 1;
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("iwarp-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("exchange.pcap");
    std::fs::write(&file, &pcap.out).unwrap();

    // MPA is found heuristically: let heuristics run before port-based dissectors, and keep the
    // payload-guessing heuristics above RDMAP (RPC-over-RDMA, SMB Direct) from parsing our test
    // payloads as theirs.
    const OPTS: [&str; 7] = ["-n", "-o", "tcp.try_heuristic_first:TRUE", "--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct"];
    let fields = |filter: &str, field: &str| -> Vec<String> {
        let out = Command::new(&tshark)
            .args(OPTS)
            .arg("-r")
            .arg(&file)
            .args(["-Y", filter, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", "-e", field])
            .output()
            .expect("run tshark");
        assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
    };
    let verbose = Command::new(&tshark).args(OPTS).args(["-V", "-r"]).arg(&file).output().expect("run tshark");
    let text = String::from_utf8_lossy(&verbose.stdout);
    std::fs::write(dir.join("exchange.txt"), text.as_bytes()).unwrap();

    assert!(fields("_ws.malformed", "frame.number").is_empty(), "malformed packets; see {}", dir.display());
    assert!(fields("_ws.expert.severity >= 8388608", "frame.number").is_empty(), "expert errors; see {}", dir.display());
    assert_eq!(fields("iwarp_mpa.req", "frame.number").len(), 1, "request frame not recognised");
    assert_eq!(fields("iwarp_mpa.rep", "frame.number").len(), 1, "reply frame not recognised");
    assert_eq!(text.matches("(Good CRC32)").count(), fpdus, "every FPDU's CRC must check; see {}", dir.display());
    assert_eq!(text.matches("Bad CRC32").count(), 0);
    let seen: Vec<u16> = fields("iwarp_mpa.markers", "iwarp_mpa.marker_fpduptr")
        .iter()
        .flat_map(|l| l.split(',').map(|v| v.parse::<u16>().unwrap()).collect::<Vec<_>>())
        .collect();
    assert_eq!(seen, markers, "markers decoded with the pointers we emitted");
    assert!(!markers.is_empty());
    for op in ["Write", "Read Request", "Read Response", "Send", "Send with Invalidate", "Send with SE", "Send with SE and Invalidate", "Terminate"] {
        assert!(text.contains(&format!("OpCode: {op} ")), "no {op} dissected; see {}", dir.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| std::path::Path::new(d).join(name)).find(|p| p.is_file())
}
