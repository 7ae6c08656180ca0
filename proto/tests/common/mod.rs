//! Shared by the integration tests: a host CRC, a recording sink, a random scenario generator
//! and an emitter that turns messages into a wire stream.
#![allow(dead_code)]

use iwarp_proto::atomic;
use iwarp_proto::crc::Crc32c;
use iwarp_proto::markers::Markers;
use iwarp_proto::rdmap::{Opcode, ReadRequest};
use iwarp_proto::rx::{Event, Sink, Target};
use iwarp_proto::terminate::{Cause, Terminate};
use iwarp_proto::tx::{self, Fpdu, Message, Transmitter};
use std::collections::HashMap;

pub struct Crc;
impl Crc32c for Crc {
    fn append(crc: u32, data: &[u8]) -> u32 {
        crc32c::crc32c_append(crc, data)
    }
}

/// Small deterministic PRNG (xorshift64*), seeded by proptest.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One message of a scenario, with its payload.
#[derive(Clone, Debug)]
pub struct Msg {
    pub msg: Message,
    pub payload: Vec<u8>,
}

/// A random message sequence; tagged messages each get their own STag and offset range.
pub fn scenario(rng: &mut Rng, big: bool) -> Vec<Msg> {
    let n = 1 + rng.below(8) as usize;
    let mut out = Vec::new();
    for i in 0..n {
        let len = match rng.below(10) {
            0 => 0,
            1..=5 => rng.below(600),
            6..=8 => rng.below(8192),
            _ if big => rng.below(1 << 20) + 1,
            _ => rng.below(65536),
        } as usize;
        let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let stag = 0x100 + i as u32;
        let to = rng.below(1 << 40);
        let msg = match rng.below(9) {
            0 => Message::Send { solicited: false, invalidate: None },
            1 => Message::Send { solicited: true, invalidate: None },
            2 => Message::Send { solicited: rng.chance(50), invalidate: Some(rng.next() as u32) },
            3 | 4 => Message::Write { stag, to },
            5 => Message::ReadResponse { stag, to },
            // RFC 7306: Immediate Data, or an atomic exchange's two halves.
            7 => {
                out.push(Msg { msg: Message::Immediate { solicited: rng.chance(50), data: rng.next() }, payload: Vec::new() });
                continue;
            }
            8 => {
                let target = rng.below(1 << 40) & !7;
                let req = if rng.chance(50) {
                    atomic::Request::fetch_add(i as u32, stag, target, rng.next())
                } else {
                    atomic::Request {
                        data_mask: rng.next(),
                        compare_mask: rng.next(),
                        ..atomic::Request::compare_swap(i as u32, stag, target, rng.next(), rng.next())
                    }
                };
                out.push(Msg { msg: Message::AtomicRequest(req), payload: Vec::new() });
                out.push(Msg { msg: Message::AtomicResponse(atomic::Response { id: i as u32, original: rng.next() }), payload: Vec::new() });
                continue;
            }
            _ => {
                let rr = ReadRequest { sink_stag: 7, sink_to: 8, size: len as u32, src_stag: 9, src_to: 10 };
                out.push(Msg { msg: Message::ReadRequest(rr), payload: Vec::new() });
                continue;
            }
        };
        out.push(Msg { msg, payload });
    }
    if rng.chance(10) {
        out.push(Msg { msg: Message::Terminate(Terminate::new(Cause::RdmapCatastrophic)), payload: Vec::new() });
    }
    out
}

/// The events a receiver must deliver for `msgs`, in order.
pub fn expected_events(msgs: &[Msg]) -> Vec<Event> {
    let mut msn = 0;
    msgs.iter()
        .map(|m| match m.msg {
            Message::Send { solicited, invalidate } => {
                msn += 1;
                Event::Send { msn, len: m.payload.len() as u32, solicited, invalidate }
            }
            Message::Immediate { solicited, data } => {
                msn += 1;
                Event::Immediate { msn, data, solicited }
            }
            Message::AtomicRequest(r) => Event::AtomicRequest(r),
            Message::AtomicResponse(r) => Event::AtomicResponse(r),
            Message::Write { stag, .. } => Event::Write { stag },
            Message::ReadResponse { stag, .. } => Event::ReadResponse { stag },
            Message::ReadRequest(rr) => Event::ReadRequest(rr),
            Message::Terminate(t) => Event::Terminate(t),
        })
        .collect()
}

/// Emits `msgs` as one wire stream; returns it and each FPDU's (start, len).
pub fn emit(msgs: &[Msg], cfg: tx::Config) -> (Vec<u8>, Vec<(u64, u32)>) {
    let mut t = Transmitter::new(cfg);
    let mut wire = Vec::new();
    let mut fpdus = Vec::new();
    let mut f = Box::<Fpdu>::default();
    for m in msgs {
        let mut out = t.start(m.msg, m.payload.len() as u64).expect("valid message");
        loop {
            t.next_fpdu::<Crc, _>(&mut out, m.payload.as_slice(), &mut f);
            let at = wire.len();
            wire.resize(at + f.wire_len as usize, 0);
            assert_eq!(f.write_to(m.payload.as_slice(), &mut wire[at..]), f.wire_len as usize);
            assert_eq!(f.stream_pos, at as u64);
            fpdus.push((at as u64, f.wire_len));
            if out.done() {
                break;
            }
        }
    }
    assert_eq!(t.stream_pos(), wire.len() as u64);
    (wire, fpdus)
}

/// A sink with a buffer per STag and per Send MSN, counting how often each byte is placed.
#[derive(Default)]
pub struct Memory {
    /// stag -> (base tagged offset, bytes, placement count per byte)
    pub tagged: HashMap<u32, (u64, Vec<u8>, Vec<u8>)>,
    /// msn -> (bytes, placement count per byte)
    pub recv: HashMap<u32, (Vec<u8>, Vec<u8>)>,
    pub events: Vec<Event>,
    /// Fail the stream once this many deliveries were taken (as an upper layer does when it
    /// cannot carry one out).
    pub fail_after: Option<usize>,
    /// Refuse every placement with this cause (a target changed after its check).
    pub refuse_place: Option<Cause>,
}

impl Memory {
    /// Registers the buffers `msgs` need, zeroed.
    pub fn for_scenario(msgs: &[Msg]) -> Memory {
        let mut mem = Memory::default();
        let mut msn = 0;
        for m in msgs {
            match m.msg {
                Message::Write { stag, to } | Message::ReadResponse { stag, to } => {
                    let n = m.payload.len();
                    mem.tagged.insert(stag, (to, vec![0; n], vec![0; n]));
                }
                Message::Send { .. } | Message::Immediate { .. } => {
                    msn += 1;
                    // Posted receive buffers may be larger than the message.
                    let n = m.payload.len() + 16;
                    mem.recv.insert(msn, (vec![0; n], vec![0; n]));
                }
                _ => {}
            }
        }
        mem
    }

    /// Asserts every payload byte of `msgs` landed exactly once where it belongs.
    pub fn assert_placed(&self, msgs: &[Msg]) {
        let mut msn = 0;
        for m in msgs {
            let n = m.payload.len();
            match m.msg {
                Message::Write { stag, .. } | Message::ReadResponse { stag, .. } => {
                    let (_, bytes, count) = &self.tagged[&stag];
                    assert!(bytes == &m.payload, "tagged payload of stag {stag:#x} differs");
                    assert!(count.iter().all(|&c| c == 1), "tagged byte placed other than once");
                }
                Message::Immediate { .. } => {
                    msn += 1;
                    assert!(self.recv[&msn].1.iter().all(|&c| c == 0), "Immediate Data placed into its receive buffer");
                }
                Message::Send { .. } => {
                    msn += 1;
                    let (bytes, count) = &self.recv[&msn];
                    assert!(bytes[..n] == m.payload[..], "send payload of msn {msn} differs");
                    assert!(count[..n].iter().all(|&c| c == 1), "send byte placed other than once");
                    assert!(count[n..].iter().all(|&c| c == 0), "send placed past message end");
                }
                _ => {}
            }
        }
    }
}

impl Sink for Memory {
    fn check(&mut self, op: Opcode, target: Target, len: u32) -> Result<(), Cause> {
        match target {
            Target::Tagged { stag, to } => {
                assert!(op.tagged());
                let (base, bytes, _) = self.tagged.get(&stag).ok_or(Cause::DdpInvalidStag)?;
                let ok = to >= *base && to + len as u64 <= base + bytes.len() as u64;
                ok.then_some(()).ok_or(Cause::DdpBaseBounds)
            }
            Target::Untagged { msn, mo } => {
                let (bytes, _) = self.recv.get(&msn).ok_or(Cause::DdpNoBuffer)?;
                (mo as u64 + len as u64 <= bytes.len() as u64).then_some(()).ok_or(Cause::DdpTooLong)
            }
        }
    }

    fn place(&mut self, target: Target, data: &[u8]) -> Result<(), Cause> {
        if let Some(cause) = self.refuse_place {
            return Err(cause);
        }
        let (bytes, count, at) = match target {
            Target::Tagged { stag, to } => {
                let (base, b, c) = self.tagged.get_mut(&stag).expect("placed without check");
                (b, c, (to - *base) as usize)
            }
            Target::Untagged { msn, mo } => {
                let (b, c) = self.recv.get_mut(&msn).expect("placed without check");
                (b, c, mo as usize)
            }
        };
        bytes[at..at + data.len()].copy_from_slice(data);
        count[at..at + data.len()].iter_mut().for_each(|c| *c += 1);
        Ok(())
    }

    fn deliver(&mut self, event: Event) {
        self.events.push(event);
    }
    fn failed(&self) -> bool {
        self.fail_after.is_some_and(|n| self.events.len() >= n)
    }
}

/// Marker settings the tests sweep.
pub fn markers_choice(rng: &mut Rng) -> Markers {
    match rng.below(5) {
        0 | 1 => Markers::NONE,
        2 => Markers::RFC,
        3 => Markers::every(64).unwrap(),
        _ => Markers::every(4 * (2 + rng.below(400)) as u32).unwrap(),
    }
}
