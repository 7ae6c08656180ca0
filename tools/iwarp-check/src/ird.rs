//! A user-level Reader against the module's IRD. `ird-read` keeps it full: as many RDMA Read
//! Requests outstanding as the module offered, a new one sent as soon as a response is whole,
//! after a pause in which it reads nothing (the module's responses back up in its queue and
//! both socket buffers); RFC 5040 allows only one outcome for a Reader within the IRD: every
//! response, whole and in order (`ird-serve` is the module's side). `ird-overflow` sends one
//! Read Request more than the IRD at once: the module must end the stream with a Terminate that
//! names that last Request, and whatever responses come before it must be whole and in order
//! (`ird-overflow-serve`).

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
pub(crate) struct Slots {
    mem: Vec<u8>,
    pub(crate) events: Vec<Event>,
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
    fn place(&mut self, t: Target, bytes: &[u8]) -> Result<(), Cause> {
        if let Target::Tagged { to, .. } = t {
            self.mem[to as usize..to as usize + bytes.len()].copy_from_slice(bytes);
        }
        Ok(())
    }
    fn deliver(&mut self, e: Event) {
        self.events.push(e);
    }
}

/// A connected Reader: the connection, its framing and what arrived.
pub(crate) struct Reader {
    pub(crate) s: TcpStream,
    pub(crate) t: Transmitter,
    rx: Receiver,
    pub(crate) sink: Slots,
    /// The module's IRD (what MPA settled as our ORD).
    depth: usize,
    src: Remote,
    pending: Vec<u8>,
    chunk: Vec<u8>,
}

impl Reader {
    /// Connects, settles MPA asking for as deep an ORD as it carries (we get the module's IRD),
    /// sends its first FPDU ([`crate::wire::hello`]) and waits for the module's go-ahead.
    pub(crate) fn connect(host: &str, port: &str) -> Result<Reader, String> {
        let mut s = dial(host, port)?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(120))).map_err(|e| e.to_string())?;
        let (conn, peer_private) = mpa_asking(&mut s, Local { ord: 0x3fff, ..LOCAL })?;
        let depth = conn.ord as usize;
        let src = Remote::from_bytes(peer_private.get(Remote::LEN..).unwrap_or(&[])).ok_or("no source region advertised by the module's side")?;
        let tx_marks = if conn.tx_markers { Markers::RFC } else { Markers::NONE };
        let mut t = Transmitter::new(tx::Config { markers: tx_marks, crc: conn.crc, mulpdu: iwarp_proto::markers::mulpdu(1448, tx_marks) });
        let dst = Remote::from_bytes(&peer_private).ok_or("no target region advertised by the module's side")?;
        crate::wire::hello(&mut s, &mut t, dst)?;
        let mut r = Reader {
            s,
            t,
            rx: receiver(&conn),
            sink: Slots { mem: vec![0; (depth + 1) * SIZE], events: Vec::new() },
            depth,
            src,
            pending: Vec::new(),
            chunk: vec![0u8; 64 << 10],
        };
        while r.sink.events.is_empty() {
            if !r.read_more()? {
                return Err("the module closed before its go-ahead".into());
            }
        }
        Ok(r)
    }

    /// Reads and parses what the module sent next; false once it closed.
    pub(crate) fn read_more(&mut self) -> Result<bool, String> {
        let n = self.s.read(&mut self.chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Ok(false);
        }
        self.pending.extend_from_slice(&self.chunk[..n]);
        let used =
            self.rx.receive::<HostCrc, _>(&Pieces::new(self.rx.next(), &[&self.pending]), &mut self.sink).map_err(|e| format!("the module's frames: {e:?}"))?;
        self.pending.drain(..used as usize);
        Ok(true)
    }

    /// Read Request `i` (into slot `i % slots`) and the source offset it reads.
    fn read_request(&self, i: usize, slots: usize) -> (ReadRequest, usize) {
        let off = (i * 4099 * 16) % (SOURCE - SIZE);
        let rr = ReadRequest {
            sink_stag: SINK,
            sink_to: ((i % slots) * SIZE) as u64,
            size: SIZE as u32,
            src_stag: self.src.rkey,
            src_to: self.src.addr + off as u64,
        };
        (rr, off)
    }

    /// [`Reader::read_request`] framed.
    fn request(&mut self, i: usize, slots: usize) -> Result<(Vec<u8>, usize), String> {
        let (rr, off) = self.read_request(i, slots);
        let mut wire = Vec::new();
        frame(&mut self.t, &mut wire, Message::ReadRequest(rr), &[])?;
        Ok((wire, off))
    }

    /// Checks the response in slot `i % slots` against the source at `off`.
    fn answered(&self, i: usize, slots: usize, off: usize, want: &[u8]) -> Check {
        let slot = &self.sink.mem[(i % slots) * SIZE..][..SIZE];
        if checksum(slot) != checksum(&want[off..off + SIZE]) {
            return Err(format!("Read {i} (source offset {off}) answered with other data: responses missing or out of order"));
        }
        Ok(())
    }
}

/// Guest A: `ird-read` (see the module doc).
pub(crate) fn read_at_ird(host: &str, port: &str) -> Check {
    let mut r = Reader::connect(host, port)?;
    let depth = r.depth;
    let want = random(SOURCE, b'R');
    let (mut sent, mut done) = (0usize, 0usize);
    let mut outstanding = VecDeque::new();
    let mut first = Vec::new();
    while sent < depth {
        let (wire, off) = r.request(sent, depth)?;
        first.extend_from_slice(&wire);
        outstanding.push_back((sent, off));
        sent += 1;
    }
    r.s.write_all(&first).map_err(|e| e.to_string())?;
    // Read nothing for a while: the responses back up at the module.
    std::thread::sleep(Duration::from_secs(3));
    let mut seen = 1;
    while done < READS {
        ensure(r.read_more()?, format!("the module closed after {:?}", r.sink.events))?;
        while seen < r.sink.events.len() {
            let e = r.sink.events[seen];
            seen += 1;
            match e {
                Event::ReadResponse { stag: SINK } => {
                    let (i, off) = outstanding.pop_front().ok_or("a Read Response with no Read outstanding")?;
                    r.answered(i, depth, off, &want)?;
                    done += 1;
                    if sent < READS {
                        let (wire, off) = r.request(sent, depth)?;
                        r.s.write_all(&wire).map_err(|e| e.to_string())?;
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
    frame(&mut r.t, &mut wire, Message::Send { solicited: false, invalidate: None }, &[DONE.to_le_bytes(), 0u64.to_le_bytes()].concat())?;
    r.s.write_all(&wire).map_err(|e| e.to_string())?;
    while r.sink.events.len() < seen + 1 {
        ensure(r.read_more()?, format!("the module closed after {:?}", r.sink.events))?;
    }
    ensure(matches!(r.sink.events[seen], Event::Send { .. }), format!("the module's side checked its QP and said DONE ({:?})", r.sink.events[seen]))
}

/// Guest A: `ird-overflow` (see the module doc).
pub(crate) fn overflow(host: &str, port: &str) -> Check {
    let mut r = Reader::connect(host, port)?;
    let (depth, slots) = (r.depth, r.depth + 1);
    let want = random(SOURCE, b'R');
    let mut all = Vec::new();
    let mut offs = Vec::new();
    for i in 0..slots {
        let (wire, off) = r.request(i, slots)?;
        all.extend_from_slice(&wire);
        offs.push(off);
    }
    r.s.write_all(&all).map_err(|e| e.to_string())?;
    println!("ok: sent {slots} Read Requests at once; the module's IRD is {depth}");
    while r.read_more()? {}
    let events = &r.sink.events[1..];
    let answered = events.iter().take_while(|e| matches!(e, Event::ReadResponse { stag: SINK })).count();
    for (i, off) in offs.iter().enumerate().take(answered) {
        r.answered(i, slots, *off, &want)?;
    }
    // The module takes its IRD's worth of Read Requests and refuses the next, Read `depth`
    // (counting from 0), which its Terminate names. How many responses leave before the
    // Terminate is a race, not a count to require: the module's receive side takes all the
    // Requests at once, refuses the extra one and ends the stream, while its transmit side may
    // not have started on the others (none is owed once the stream is terminated). Any number
    // up to the IRD passes, each whole and in order.
    let term = events.get(answered).and_then(|e| if let Event::Terminate(t) = e { Some(*t) } else { None });
    let cause = term.and_then(|t| t.cause());
    let named = term.and_then(|t| t.rdma_hdr).and_then(|h| ReadRequest::parse(&h).ok());
    let extra = r.read_request(depth, slots).0;
    ensure(
        answered <= depth && cause == Some(Cause::RdmapStreamCatastrophic) && named == Some(extra) && events.len() == answered + 1,
        format!("{answered} Reads answered whole and in order, then the Terminate ({cause:?}) naming Read {depth} ({named:?}), and the end of the stream"),
    )
}
