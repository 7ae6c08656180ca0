//! Classic pcap files of Ethernet frames: the TCP segments on a range of ports, with the raw
//! records kept so that a subset can be written back for Wireshark.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::{Range, RangeInclusive};

/// One end of a TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

/// One direction of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow {
    pub src: Endpoint,
    pub dst: Endpoint,
}

impl Flow {
    pub fn reverse(self) -> Flow {
        Flow { src: self.dst, dst: self.src }
    }
}

/// A captured TCP segment.
pub struct Segment {
    /// 1-based frame number in the capture (what Wireshark shows).
    pub frame: usize,
    pub flow: Flow,
    pub seq: u32,
    pub syn: bool,
    pub ack: bool,
    pub fin: bool,
    pub rst: bool,
    /// The pcap record (its 16-octet header and the frame).
    pub record: Vec<u8>,
    /// Where the TCP payload lies in `record`.
    pub payload: Range<usize>,
}

impl Segment {
    pub fn payload(&self) -> &[u8] {
        &self.record[self.payload.clone()]
    }
}

pub struct Capture {
    /// The file's 24-octet global header.
    pub header: Vec<u8>,
    pub frames: usize,
    pub segments: Vec<Segment>,
}

const ETHERNET: u32 = 1;

/// Reads `path`, keeping the TCP segments to or from a port in `ports`.
pub fn read(path: &str, ports: &RangeInclusive<u16>) -> Result<Capture, String> {
    let bytes = fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() < 24 {
        return Err(format!("{path}: not a pcap file"));
    }
    let magic = u32::from_le_bytes(bytes[..4].try_into().unwrap());
    let little = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        m if m.swap_bytes() == 0xa1b2_c3d4 || m.swap_bytes() == 0xa1b2_3c4d => false,
        _ => return Err(format!("{path}: not a pcap file")),
    };
    let word = |b: &[u8]| {
        let w: [u8; 4] = b[..4].try_into().unwrap();
        if little {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    if word(&bytes[20..24]) != ETHERNET {
        return Err(format!("{path}: not an Ethernet capture"));
    }
    let mut capture = Capture { header: bytes[..24].to_vec(), frames: 0, segments: Vec::new() };
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let (incl, orig) = (word(&bytes[at + 8..]) as usize, word(&bytes[at + 12..]) as usize);
        let end = at + 16 + incl;
        if end > bytes.len() {
            break; // the capture was stopped while writing its last record
        }
        if incl != orig {
            return Err(format!("{path}: frame {} was cut short (capture with the full snap length)", capture.frames + 1));
        }
        capture.frames += 1;
        let record = &bytes[at..end];
        if let Some((flow, seq, flags, payload)) = tcp(&record[16..]) {
            if ports.contains(&flow.src.port) || ports.contains(&flow.dst.port) {
                capture.segments.push(Segment {
                    frame: capture.frames,
                    flow,
                    seq,
                    syn: flags & 0x02 != 0,
                    ack: flags & 0x10 != 0,
                    fin: flags & 0x01 != 0,
                    rst: flags & 0x04 != 0,
                    record: record.to_vec(),
                    payload: payload.start + 16..payload.end + 16,
                });
            }
        }
        at = end;
    }
    Ok(capture)
}

/// Flow, sequence number, TCP flags and payload range of an Ethernet frame holding an IPv4 or
/// IPv6 TCP segment.
fn tcp(frame: &[u8]) -> Option<(Flow, u32, u8, Range<usize>)> {
    let mut at = 12;
    let mut ethertype = u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
    if ethertype == 0x8100 {
        at += 4;
        ethertype = u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
    }
    let ip = at + 2;
    let (src, dst, tcp, end) = match ethertype {
        0x0800 => {
            let h = frame.get(ip..ip + 20)?;
            if h[9] != 6 {
                return None;
            }
            let total = u16::from_be_bytes([h[2], h[3]]) as usize;
            let src = IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15]));
            let dst = IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19]));
            (src, dst, ip + (h[0] & 15) as usize * 4, ip + total)
        }
        0x86dd => {
            let h = frame.get(ip..ip + 40)?;
            if h[6] != 6 {
                return None; // extension headers: none in these tests
            }
            let len = u16::from_be_bytes([h[4], h[5]]) as usize;
            let addr = |b: &[u8]| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap()));
            (addr(&h[8..24]), addr(&h[24..40]), ip + 40, ip + 40 + len)
        }
        _ => return None,
    };
    let h = frame.get(tcp..tcp + 20)?;
    let data = tcp + (h[12] >> 4) as usize * 4;
    if end > frame.len() || data > end {
        return None;
    }
    let flow =
        Flow { src: Endpoint { addr: src, port: u16::from_be_bytes([h[0], h[1]]) }, dst: Endpoint { addr: dst, port: u16::from_be_bytes([h[2], h[3]]) } };
    Some((flow, u32::from_be_bytes([h[4], h[5], h[6], h[7]]), h[13], data..end))
}
