//! The six measurements, client and server side. Every run starts on a fresh connection: the
//! server posts its receives, then both adopt the stream; the client's private data says what
//! to run, each side's carries its buffer (address and STag).

use crate::{connect_options, Conn, Options};
use libiwarp::{Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpInit, QueuePair, Remote, Role, SendOp, SendWr, WaitMode, WcOpcode};
use std::error::Error;
use std::net::TcpStream;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn Error>>;

/// A measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Test {
    SendLat,
    WriteLat,
    ReadLat,
    SendBw,
    WriteBw,
    ReadBw,
    Quit,
}

const ALL: [(Test, &str); 6] = [
    (Test::SendLat, "send_lat"),
    (Test::WriteLat, "write_lat"),
    (Test::ReadLat, "read_lat"),
    (Test::SendBw, "send_bw"),
    (Test::WriteBw, "write_bw"),
    (Test::ReadBw, "read_bw"),
];

impl Test {
    pub(crate) fn parse(s: &str) -> Result<Test, String> {
        ALL.iter().find(|(_, n)| *n == s).map(|(t, _)| *t).ok_or(format!("unknown test {s}"))
    }

    pub(crate) fn name(self) -> &'static str {
        ALL.iter().find(|(t, _)| *t == self).map_or("quit", |(_, n)| n)
    }

    pub(crate) fn is_latency(self) -> bool {
        matches!(self, Test::SendLat | Test::WriteLat | Test::ReadLat)
    }

    fn id(self) -> u32 {
        ALL.iter().position(|(t, _)| *t == self).map_or(99, |i| i as u32)
    }

    fn from_id(id: u32) -> Test {
        ALL.get(id as usize).map_or(Test::Quit, |(t, _)| *t)
    }
}

/// One (test, size) result.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    pub(crate) test: Test,
    pub(crate) size: usize,
    pub(crate) iters: usize,
    /// Payload octets per second (bandwidth tests).
    pub(crate) bytes_per_sec: f64,
    /// Microseconds: mean, median, 99th percentile (latency tests).
    pub(crate) lat_us: [f64; 3],
    /// QPs the test ran over at once.
    pub(crate) qps: usize,
}

/// Largest message size.
const MAX_SIZE: usize = 4 << 20;
/// Receives the server keeps posted (the deepest send_bw batch).
const SERVER_RECVS: usize = 1024;
/// How long one completion may take.
const WAIT: Duration = Duration::from_secs(60);
/// How long a whole run may take (the client's "done" comes after it).
const RUN_WAIT: Duration = Duration::from_secs(600);

/// What the client asks for.
struct Request {
    test: Test,
    size: usize,
    iters: usize,
    depth: usize,
}

impl Request {
    fn encode(&self, buf: Remote) -> Vec<u8> {
        [self.test.id(), self.size as u32, self.iters as u32, self.depth as u32].iter().flat_map(|v| v.to_le_bytes()).chain(buf.to_bytes()).collect()
    }

    fn decode(b: &[u8]) -> Res<(Request, Remote)> {
        let u = |i: usize| -> Res<u32> { Ok(u32::from_le_bytes(b.get(i * 4..i * 4 + 4).ok_or("short request")?.try_into()?)) };
        let r = Request { test: Test::from_id(u(0)?), size: u(1)? as usize, iters: u(2)? as usize, depth: u(3)? as usize };
        if r.size > MAX_SIZE || r.depth == 0 || r.depth > SERVER_RECVS {
            return Err(format!("bad request: size {} depth {}", r.size, r.depth).into());
        }
        Ok((r, Remote::from_bytes(&b[16..]).ok_or("no buffer in the request")?))
    }
}

/// One side's connection: QP, CQs, buffer.
struct Side<'d> {
    qp: QueuePair<'d>,
    scq: &'d CompletionQueue<'d>,
    rcq: &'d CompletionQueue<'d>,
    mr: MemoryRegion<'d>,
    peer: Remote,
    /// Busy poll (`--poll 1`) rather than sleep.
    poll: bool,
}

impl Side<'_> {
    fn wait(&self, cq: &CompletionQueue<'_>, op: WcOpcode) -> Res<u32> {
        self.completion(cq, op, WAIT)
    }

    /// The next completion on `cq`, a successful `op`, within `limit`: its length.
    fn completion(&self, cq: &CompletionQueue<'_>, op: WcOpcode, limit: Duration) -> Res<u32> {
        let mode = if self.poll { WaitMode::Poll } else { WaitMode::SpinThenBlock(Duration::from_micros(15)) };
        Ok(iwarp_testkit::completion_in(cq, op, limit, mode)?.byte_len)
    }

    fn post(&self, op: SendOp, n: usize, signaled: bool) -> Res<()> {
        let sge = [self.mr.sge(0..n)];
        Ok(self.qp.post_send(&SendWr { wr_id: 0, op, sge: if n == 0 && !matches!(op, SendOp::Read(_)) { &[] } else { &sge }, signaled })?)
    }

    fn send(&self, n: usize) -> Res<()> {
        self.post(SendOp::Send { solicited: false }, n, false)
    }

    fn recv(&self) -> Res<u32> {
        self.recv_within(WAIT)
    }

    /// [`Side::recv`], waiting up to `limit`.
    fn recv_within(&self, limit: Duration) -> Res<u32> {
        let n = self.completion(self.rcq, WcOpcode::Recv, limit)?;
        self.qp.post_recv(0, &[self.mr.sge(0..self.mr.as_slice().len())])?;
        Ok(n)
    }

    /// Octet `i` of our buffer, as the peer's RDMA Write left it.
    fn byte(&self, i: usize) -> u8 {
        let p: *const u8 = &self.mr.as_slice()[i];
        // SAFETY: a valid pointer into the registered buffer; a volatile read, because the
        // module writes this memory behind the compiler's back.
        unsafe { p.read_volatile() }
    }

    /// Spins until octet `i` of our buffer is `v`.
    fn spin_for(&self, i: usize, v: u8) -> Res<()> {
        let start = Instant::now();
        let mut k = 0u32;
        while self.byte(i) != v {
            k = k.wrapping_add(1);
            if k.is_multiple_of(4096) && start.elapsed() > WAIT {
                return Err("the peer's RDMA Write never arrived".into());
            }
            // Placement may run in a kernel worker (a stream arriving in bulk): on a single CPU
            // a pure spin would keep it off the CPU until our time slice ends, unless asked to
            // busy poll. Yielding costs nothing when no one else waits.
            if self.poll {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

/// Sets up a connection; `posted` receives go in before the stream is adopted.
fn open<'d>(
    dev: &'d Device,
    pd: &'d ProtectionDomain<'d>,
    cqs: (&'d CompletionQueue<'d>, &'d CompletionQueue<'d>),
    buf: &'d mut [u8],
    posted: usize,
) -> Res<(QueuePair<'d>, MemoryRegion<'d>)> {
    let mr = pd.register(buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ)?;
    let qp = dev.create_qp(&QpInit { pd, send_cq: cqs.0, recv_cq: cqs.1, max_recv_wr: SERVER_RECVS as u32, max_send_wr: 1024, max_sge: 4, max_inline: 0 })?;
    let whole = mr.sge(0..mr.as_slice().len());
    for _ in 0..posted {
        qp.post_recv(0, &[whole])?;
    }
    Ok((qp, mr))
}

/// The client's side of a connection: set up, `req` told to the server, its buffer learned;
/// also the ORD negotiated.
fn dial_side<'d>(
    dev: &'d Device,
    pd: &'d ProtectionDomain<'d>,
    cqs: (&'d CompletionQueue<'d>, &'d CompletionQueue<'d>),
    buf: &'d mut [u8],
    stream: TcpStream,
    req: &Request,
    o: &Options,
) -> Res<(Side<'d>, u16)> {
    let (mut qp, mr) = open(dev, pd, cqs, buf, 16)?;
    let neg = qp.adopt(stream, &connect_options(Role::Initiator, &o.conn, req.encode(mr.remote(0))))?;
    let peer = Remote::from_bytes(&neg.peer_private).ok_or("the server sent no buffer")?;
    let ord = neg.ord;
    Ok((Side { qp, scq: cqs.0, rcq: cqs.1, mr, peer, poll: o.conn.poll }, ord))
}

/// Bandwidth iterations unless told: about 32 MiB.
fn bw_iters(size: usize) -> usize {
    ((32 << 20) / size.max(1)).clamp(64, 20_000)
}

/// A QP that does nothing (for the idle ones): connected over `stream` as `role`.
fn idle<'d>(dev: &'d Device, pd: &'d ProtectionDomain<'d>, cq: &'d CompletionQueue<'d>, stream: TcpStream, role: Role, o: &Conn) -> Res<QueuePair<'d>> {
    let mut qp = dev.create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, max_recv_wr: 1, max_send_wr: 1, max_sge: 1, max_inline: 0 })?;
    qp.adopt(stream, &connect_options(role, o, Vec::new()))?;
    Ok(qp)
}

/// Server side of one connection; false when told to quit.
pub(crate) fn serve_one(stream: TcpStream, o: &Conn) -> Res<bool> {
    let dev = Device::open()?;
    let pd = dev.alloc_pd()?;
    let (scq, rcq) = (dev.create_cq(4096)?, dev.create_cq(4096)?);
    let mut buf = vec![0u8; MAX_SIZE];
    let (mut qp, mr) = open(&dev, &pd, (&scq, &rcq), &mut buf, SERVER_RECVS)?;
    let pd = qp.adopt(stream, &connect_options(Role::Responder, o, mr.remote(0).to_bytes().to_vec()))?.peer_private.clone();
    let (req, peer) = Request::decode(&pd)?;
    let s = Side { qp, scq: &scq, rcq: &rcq, mr, peer, poll: o.poll };
    let n = req.size;
    match req.test {
        Test::Quit => return Ok(false),
        Test::SendLat => {
            for _ in 0..req.iters {
                s.recv()?;
                s.send(n)?;
            }
        }
        Test::WriteLat => {
            // The client's first n octets are its source; ours land in the next n.
            let back = Remote { addr: s.peer.addr + n as u64, rkey: s.peer.rkey };
            for i in 0..req.iters {
                let seq = (i % 255 + 1) as u8;
                s.spin_for(n - 1, seq)?;
                s.post(SendOp::Write(back), n, false)?;
            }
        }
        Test::SendBw => {
            for _ in 0..req.iters.div_ceil(req.depth) {
                for _ in 0..req.depth {
                    s.recv()?;
                }
                s.send(0)?;
            }
        }
        Test::ReadLat | Test::WriteBw | Test::ReadBw => {}
    }
    // The client's "done", answered once everything before it has been placed: after a whole
    // bandwidth run, which over a faulty network may take minutes.
    s.recv_within(RUN_WAIT)?;
    // Where what arrived went (the benchmark's fault runs report it beside TCP's counters).
    let p = s.qp.placement()?;
    eprintln!("iwarp-bench server: {:?} {n} B: {p}", req.test);
    s.send(0)?;
    // Wait for the client to close, so our own close cannot cut its answer short.
    let start = Instant::now();
    while s.qp.state()? == libiwarp::QpState::Connected && start.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(true)
}

/// Ends the server.
pub(crate) fn quit(stream: TcpStream, o: &Conn) -> Res<()> {
    let dev = Device::open()?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(4)?;
    let mut buf = vec![0u8; 16];
    let (mut qp, mr) = open(&dev, &pd, (&cq, &cq), &mut buf, 0)?;
    let req = Request { test: Test::Quit, size: 0, iters: 0, depth: 1 };
    qp.adopt(stream, &connect_options(Role::Initiator, o, req.encode(mr.remote(0))))?;
    Ok(())
}

/// Client side of one (test, size).
pub(crate) fn run_one(stream: TcpStream, test: Test, size: usize, o: &Options) -> Res<Outcome> {
    if size > MAX_SIZE || (size == 0 && test == Test::WriteLat) {
        return Err(format!("size {size} out of range (write_lat needs 1..={MAX_SIZE})").into());
    }
    let iters = o.iters.unwrap_or(if test.is_latency() { 1000 } else { bw_iters(size) });
    let dev = Device::open()?;
    let pd = dev.alloc_pd()?;
    let (scq, rcq) = (dev.create_cq(4096)?, dev.create_cq(4096)?);
    // Twice the size: write_lat's answers land in the second half.
    let mut buf = vec![0u8; 2 * size.max(16)];
    let req = Request { test, size, iters, depth: o.depth() };
    let (mut s, ord) = dial_side(&dev, &pd, (&scq, &rcq), &mut buf, stream, &req, o)?;
    let window = o.depth().min(ord.max(1) as usize);
    let mut lat = Vec::with_capacity(if test.is_latency() { iters } else { 0 });
    let start = Instant::now();
    match test {
        Test::SendLat => {
            for _ in 0..iters {
                let t = Instant::now();
                s.send(size)?;
                s.recv()?;
                lat.push(t.elapsed() / 2);
            }
        }
        Test::WriteLat => {
            for i in 0..iters {
                let seq = (i % 255 + 1) as u8;
                s.mr.as_mut_slice()[size - 1] = seq;
                let t = Instant::now();
                s.post(SendOp::Write(s.peer), size, false)?;
                s.spin_for(2 * size - 1, seq)?;
                lat.push(t.elapsed() / 2);
            }
        }
        Test::ReadLat => {
            for _ in 0..iters {
                let t = Instant::now();
                s.post(SendOp::Read(s.peer), size, true)?;
                s.wait(s.scq, WcOpcode::RdmaRead)?;
                lat.push(t.elapsed());
            }
        }
        Test::WriteBw => {
            // At most `depth` outstanding: posting never waits, so the send queue is the limit.
            let (mut posted, mut done) = (0, 0);
            while done < iters {
                while posted < iters && posted - done < o.depth() {
                    s.post(SendOp::Write(s.peer), size, true)?;
                    posted += 1;
                }
                s.wait(s.scq, WcOpcode::RdmaWrite)?;
                done += 1;
            }
        }
        Test::ReadBw => {
            let (mut posted, mut done) = (0, 0);
            while done < iters {
                while posted < iters && posted - done < window {
                    s.post(SendOp::Read(s.peer), size, true)?;
                    posted += 1;
                }
                s.wait(s.scq, WcOpcode::RdmaRead)?;
                done += 1;
            }
        }
        Test::SendBw => {
            for _ in 0..iters.div_ceil(o.depth()) {
                for _ in 0..o.depth() {
                    s.send(size)?;
                }
                s.recv()?;
            }
        }
        Test::Quit => {}
    }
    // "done": the server answers once all before it is placed.
    s.send(0)?;
    s.recv()?;
    let elapsed = start.elapsed();
    let total = if test == Test::SendBw { iters.div_ceil(o.depth()) * o.depth() } else { iters };
    Ok(Outcome { test, size, iters: total, bytes_per_sec: (size * total) as f64 / elapsed.as_secs_f64(), lat_us: percentiles(&mut lat), qps: 1 })
}

/// write_bw over one QP per stream, all sharing one send and one receive CQ (one poller for
/// all, as the CLAN user-level network interface's shared completion queues): `depth` Writes
/// in flight in all, posted round robin; the aggregate bandwidth until every server confirmed
/// the last.
pub(crate) fn write_bw_many(streams: Vec<TcpStream>, size: usize, o: &Options) -> Res<Outcome> {
    let n = streams.len();
    let iters = o.iters.unwrap_or(bw_iters(size));
    let dev = Device::open()?;
    let pd = dev.alloc_pd()?;
    let (scq, rcq) = (dev.create_cq(4096)?, dev.create_cq(4096)?);
    let mut bufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; size.max(16)]).collect();
    let mut sides = Vec::with_capacity(n);
    let req = Request { test: Test::WriteBw, size, iters, depth: o.depth() };
    for (stream, buf) in streams.into_iter().zip(bufs.iter_mut()) {
        sides.push(dial_side(&dev, &pd, (&scq, &rcq), buf, stream, &req, o)?.0);
    }
    let start = Instant::now();
    let (mut posted, mut done) = (0, 0);
    while done < iters {
        while posted < iters && posted - done < o.depth() {
            let s = &sides[posted % n];
            s.post(SendOp::Write(s.peer), size, true)?;
            posted += 1;
        }
        // A completion of any of them.
        sides[0].wait(&scq, WcOpcode::RdmaWrite)?;
        done += 1;
    }
    // "done" on each; every server answers once all before it is placed.
    for s in &sides {
        s.send(0)?;
    }
    for _ in 0..n {
        sides[0].completion(&rcq, WcOpcode::Recv, WAIT)?;
    }
    let elapsed = start.elapsed();
    Ok(Outcome { test: Test::WriteBw, size, iters, bytes_per_sec: (size * iters) as f64 / elapsed.as_secs_f64(), lat_us: [0.0; 3], qps: n })
}

/// A QP connected to the server's idle port, which does nothing until it is dropped.
pub(crate) fn idle_qp<'d>(dev: &'d Device, pd: &'d ProtectionDomain<'d>, cq: &'d CompletionQueue<'d>, stream: TcpStream, o: &Conn) -> Res<QueuePair<'d>> {
    idle(dev, pd, cq, stream, Role::Initiator, o)
}

/// The server's idle QPs: each connection on `l` becomes a QP that does nothing (all in one
/// device context with one CQ), until its client closes it.
pub(crate) fn serve_idle(l: std::net::TcpListener, o: &Conn) -> Res<()> {
    let dev = Device::open()?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(16)?;
    let mut qps: Vec<QueuePair<'_>> = Vec::new();
    loop {
        let (s, _) = l.accept()?;
        // Now and then, those whose clients left go (a context holds at most 1,024 QPs).
        if qps.len() % 256 == 255 {
            qps.retain(|q| q.state().is_ok_and(|st| st == libiwarp::QpState::Connected));
        }
        qps.push(idle(&dev, &pd, &cq, s, Role::Responder, o)?);
    }
}

/// Mean, median and 99th percentile in microseconds.
fn percentiles(d: &mut [Duration]) -> [f64; 3] {
    if d.is_empty() {
        return [0.0; 3];
    }
    d.sort();
    let us = |x: Duration| x.as_secs_f64() * 1e6;
    let mean = d.iter().map(|&x| us(x)).sum::<f64>() / d.len() as f64;
    [mean, us(d[d.len() / 2]), us(d[(d.len() * 99 / 100).min(d.len() - 1)])]
}
