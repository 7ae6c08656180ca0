//! A user-level Reader that keeps the module's IRD full: as many RDMA Read Requests
//! outstanding as the module offered, a new one sent as soon as a response is whole, after a
//! pause in which it reads nothing (the module's responses back up in its queue and both
//! socket buffers). RFC 5040 allows only one outcome for a Reader within the IRD: every
//! response, whole and in order. `ird-serve` is the module's side.

use super::{dial, ensure, Check};
use crate::verbs::{checksum, random, DONE};
use crate::wire::{frame, mpa_asking, receiver, LOCAL};
use iwarp_proto::crc::HostCrc;
use iwarp_proto::markers::Markers;
use iwarp_proto::mpa::negotiate::Local;
use iwarp_proto::rdmap::{Opcode, ReadRequest};
use iwarp_proto::rx::{Event, Receiver, Sink, Target};
use iwarp_proto::stream::Pieces;
use iwarp_proto::terminate::Cause;
use iwarp_proto::tx::{self, Message, Transmitter};
use libiwarp::Remote;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Octets per Read.
const SIZE: usize = 64 << 10;
/// Reads in all.
const READS: usize = 256;
/// The source the module's side fills (what every response must carry a piece of).
pub(crate) const SOURCE: usize = 1 << 20;
/// Our sink STag (the module only echoes it back).
const SINK: u32 = 0x5151_5100;

/// Where responses land: one slot of [`SIZE`] per outstanding Read.
struct Slots {
    mem: Vec<u8>,
    events: Vec<Event>,
}

impl Sink for Slots {
    fn check(&mut self, _: Opcode, t: Target, len: u32) -> Result<(), Cause> {
        match t {
            Target::Tagged { stag: SINK, to } if to + len as u64 <= self.mem.len() as u64 => Ok(()),
            Target::Tagged { .. } => Err(Cause::DdpBaseBounds),
            Target::Untagged { mo, .. } if mo as u64 + len as u64 <= 64 => Ok(()),
            Target::Untagged { .. } => Err(Cause::DdpNoBuffer),
        }
    }
    fn place(&mut self, t: Target, bytes: &[u8]) {
        if let Target::Tagged { to, .. } = t {
            self.mem[to as usize..to as usize + bytes.len()].copy_from_slice(bytes);
        }
    }
    fn deliver(&mut self, e: Event) {
        self.events.push(e);
    }
}

/// Guest A: see the module doc.
pub(crate) fn read_at_ird(host: &str, port: &str) -> Check {
    let mut s = dial(host, port)?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(120))).map_err(|e| e.to_string())?;
    // Ask for as deep an ORD as MPA carries: we get the module's IRD.
    let (conn, peer_private) = mpa_asking(&mut s, Local { ord: 0x3fff, ..LOCAL })?;
    let depth = conn.ord as usize;
    let src = Remote::from_bytes(peer_private.get(Remote::LEN..).unwrap_or(&[])).ok_or("no source region advertised by the module's side")?;
    let want = random(SOURCE, b'R');
    let tx_marks = if conn.tx_markers { Markers::RFC } else { Markers::NONE };
    let mut t = Transmitter::new(tx::Config { markers: tx_marks, crc: conn.crc, mulpdu: iwarp_proto::markers::mulpdu(1448, tx_marks) });
    let mut rx = receiver(&conn);
    let mut sink = Slots { mem: vec![0; depth * SIZE], events: Vec::new() };
    let (mut pending, mut chunk) = (Vec::new(), vec![0u8; 64 << 10]);
    let mut read_more = |s: &mut TcpStream, rx: &mut Receiver, sink: &mut Slots| -> Check {
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        ensure(n > 0, format!("the module closed after {:?}", sink.events))?;
        pending.extend_from_slice(&chunk[..n]);
        let used = rx.receive::<HostCrc, _>(&Pieces::new(rx.next(), &[&pending]), sink).map_err(|e| format!("the module's frames: {e:?}"))?;
        pending.drain(..used as usize);
        Ok(())
    };
    // The go-ahead.
    while sink.events.is_empty() {
        read_more(&mut s, &mut rx, &mut sink)?;
    }
    let (mut sent, mut done) = (0usize, 0usize);
    let mut outstanding = VecDeque::new();
    let request = |t: &mut Transmitter, i: usize| -> Result<(Vec<u8>, usize), String> {
        let off = (i * 4099 * 16) % (SOURCE - SIZE);
        let rr = ReadRequest { sink_stag: SINK, sink_to: ((i % depth) * SIZE) as u64, size: SIZE as u32, src_stag: src.rkey, src_to: src.addr + off as u64 };
        let mut wire = Vec::new();
        frame(t, &mut wire, Message::ReadRequest(rr), &[])?;
        Ok((wire, off))
    };
    let mut first = Vec::new();
    while sent < depth {
        let (wire, off) = request(&mut t, sent)?;
        first.extend_from_slice(&wire);
        outstanding.push_back((sent, off));
        sent += 1;
    }
    s.write_all(&first).map_err(|e| e.to_string())?;
    // Read nothing for a while: the responses back up at the module.
    std::thread::sleep(Duration::from_secs(3));
    let mut seen = 1;
    while done < READS {
        read_more(&mut s, &mut rx, &mut sink)?;
        for e in sink.events[seen..].to_vec() {
            seen += 1;
            match e {
                Event::ReadResponse { stag: SINK } => {
                    let (i, off) = outstanding.pop_front().ok_or("a Read Response with no Read outstanding")?;
                    let slot = &sink.mem[(i % depth) * SIZE..][..SIZE];
                    if checksum(slot) != checksum(&want[off..off + SIZE]) {
                        return Err(format!("Read {i} (source offset {off}) answered with other data: responses missing or out of order"));
                    }
                    done += 1;
                    if sent < READS {
                        let (wire, off) = request(&mut t, sent)?;
                        s.write_all(&wire).map_err(|e| e.to_string())?;
                        outstanding.push_back((sent, off));
                        sent += 1;
                    }
                }
                other => return Err(format!("after {done} Reads, the module sent {other:?}")),
            }
        }
    }
    println!("ok: {READS} Reads of {SIZE} octets, {depth} outstanding at once (the module's IRD), each answered whole and in order");
    let mut wire = Vec::new();
    frame(&mut t, &mut wire, Message::Send { solicited: false, invalidate: None }, &[DONE.to_le_bytes(), 0u64.to_le_bytes()].concat())?;
    s.write_all(&wire).map_err(|e| e.to_string())?;
    while sink.events.len() < seen + 1 {
        read_more(&mut s, &mut rx, &mut sink)?;
    }
    ensure(matches!(sink.events[seen], Event::Send { .. }), format!("the module's side checked its QP and said DONE ({:?})", sink.events[seen]))
}
