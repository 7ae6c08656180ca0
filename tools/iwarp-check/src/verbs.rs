//! Data-path checks between two module instances: every verb with random data, checksums and
//! byte-for-byte comparison in both directions, deep queues, many QPs at once, and the faults
//! that must end a connection with a Terminate and flushed work requests.

use super::{dial, ensure, expect_errno, listen, open, options, Check};
use iwarp_proto::terminate::Cause;
use libiwarp::{
    Access, AsyncEvents, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpEvent, QpInit, QpState, QueuePair, RecvWr, Remote, Role, SendOp, SendWr,
    Sge, WaitMode, WcOpcode, WcStatus, WorkCompletion,
};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

/// Deterministic random bytes for (size, side): both peers can regenerate what the other sent.
pub(crate) fn random(n: usize, side: u8) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (n as u64) << 8 ^ side as u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// FNV-1a, the checksum sent along with each transfer.
pub(crate) fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

const WAIT: Duration = Duration::from_secs(120);
const SPIN: WaitMode = WaitMode::SpinThenBlock(Duration::from_micros(15));

/// Waits for the next completion on `cq`, which must be a successful `op`.
pub(crate) fn done(cq: &CompletionQueue<'_>, op: WcOpcode) -> Result<WorkCompletion, String> {
    iwarp_testkit::completion(cq, op, WAIT)
}

/// One side's registered buffers.
struct Buffers<'d> {
    /// Source of Writes, Sends and the peer's Reads.
    src: MemoryRegion<'d>,
    /// Target of the peer's Writes.
    dst: MemoryRegion<'d>,
    /// Receive buffers.
    rcv: MemoryRegion<'d>,
    /// RDMA Read sink.
    sink: MemoryRegion<'d>,
    /// Control messages (so they never touch data a peer may be reading).
    ctl: MemoryRegion<'d>,
}

/// A region of `len` zeroed bytes in `pd` (leaked: it lives as long as the process).
pub(crate) fn region<'d>(pd: &'d ProtectionDomain<'d>, access: Access, len: usize) -> Result<MemoryRegion<'d>, String> {
    let buf: &'static mut [u8] = Vec::leak(vec![0u8; len]);
    pd.register(buf, access).map_err(|e| format!("register {len} bytes: {e}"))
}

/// Registers four buffers of `max` bytes and a small one for control messages in `pd`.
fn buffers<'d>(pd: &'d ProtectionDomain<'d>, max: usize) -> Result<Buffers<'d>, String> {
    let reg = |access: Access, len: usize| region(pd, access, len);
    Ok(Buffers {
        src: reg(Access::REMOTE_READ, max.max(64))?,
        dst: reg(Access::LOCAL_WRITE | Access::REMOTE_WRITE, max.max(64))?,
        rcv: reg(Access::LOCAL_WRITE, max.max(64))?,
        sink: reg(Access::LOCAL_WRITE, max.max(64))?,
        ctl: reg(Access::NONE, 16)?,
    })
}

/// The private data each side sends: where the peer may write and read.
fn advertise(b: &Buffers<'_>) -> Vec<u8> {
    [b.dst.remote(0).to_bytes(), b.src.remote(0).to_bytes()].concat()
}

/// The peer's (dst, src) from its private data.
fn peer_regions(pd: &[u8]) -> Result<(Remote, Remote), String> {
    match (pd.len() == 2 * Remote::LEN, Remote::from_bytes(pd), Remote::from_bytes(&pd[Remote::LEN.min(pd.len())..])) {
        (true, Some(d), Some(s)) => Ok((d, s)),
        _ => Err(format!("peer private data of {} bytes, expected {}", pd.len(), 2 * Remote::LEN)),
    }
}

/// A connected QP with its CQs and both sides' buffers.
struct Session<'d> {
    qp: QueuePair<'d>,
    scq: &'d CompletionQueue<'d>,
    rcq: &'d CompletionQueue<'d>,
    b: Buffers<'d>,
    peer_dst: Remote,
    peer_src: Remote,
}

impl Session<'_> {
    /// Posts a receive covering the whole receive buffer in three entries (multi-SGE).
    fn post_recv(&self) -> Check {
        let n = self.b.rcv.as_slice().len();
        let (a, c) = (n / 3, 2 * n / 3);
        let sge = [self.b.rcv.sge(0..a), self.b.rcv.sge(a..c), self.b.rcv.sge(c..n)];
        self.qp.post_recv(7, &sge).map_err(|e| format!("post_recv: {e}"))
    }

    fn send(&self, sge: &[Sge], signaled: bool) -> Check {
        self.qp.post_send(&SendWr { wr_id: 1, op: SendOp::Send { solicited: false }, sge, signaled }).map_err(|e| format!("post Send: {e}"))?;
        if signaled {
            done(self.scq, WcOpcode::Send)?;
        }
        Ok(())
    }

    /// Sends a control message (two numbers) from the start of `src`.
    fn tell(&mut self, a: u64, b: u64) -> Check {
        self.b.ctl.as_mut_slice().copy_from_slice(&[a.to_le_bytes(), b.to_le_bytes()].concat());
        let sge = [self.b.ctl.sge(0..16)];
        self.send(&sge, true)
    }

    /// Waits for the next receive and reposts a buffer (before anything is sent back, so the
    /// peer's answer finds it).
    fn hear(&self) -> Result<(WorkCompletion, u64, u64), String> {
        let wc = done(self.rcq, WcOpcode::Recv)?;
        let r = self.b.rcv.as_slice();
        let (a, b) = (u64::from_le_bytes(r[..8].try_into().unwrap()), u64::from_le_bytes(r[8..16].try_into().unwrap()));
        if a != DONE {
            self.post_recv()?;
        }
        Ok((wc, a, b))
    }

    /// The initiator's first message: a responder sends nothing before it received one (RFC
    /// 5044 section 7.1.2), and these tests have the responder speak first. A zero-length Read
    /// of the peer's source takes none of its receives and changes no region.
    fn hello(&self) -> Check {
        let sge = [self.b.sink.sge(0..0)];
        self.qp.post_send(&SendWr { wr_id: 0, op: SendOp::Read(self.peer_src), sge: &sge, signaled: true }).map_err(|e| format!("post hello Read: {e}"))?;
        let wc = done(self.scq, WcOpcode::RdmaRead)?;
        match wc.byte_len {
            0 => Ok(()),
            n => Err(format!("A: the zero-length hello Read completed with {n} octets")),
        }
    }

    /// RDMA Reads `n` bytes of the peer's source into the sink and compares with `want`.
    fn read_and_check(&self, n: usize, want: &[u8], what: &str) -> Check {
        let sge = [self.b.sink.sge(0..n)];
        self.qp.post_send(&SendWr { wr_id: 3, op: SendOp::Read(self.peer_src), sge: &sge, signaled: true }).map_err(|e| format!("post Read: {e}"))?;
        let wc = done(self.scq, WcOpcode::RdmaRead)?;
        ensure(wc.byte_len as usize == n && &self.b.sink.as_slice()[..n] == want, format!("{what}: RDMA Read of {n} bytes intact"))
    }
}

/// How a session's QP gets its TCP connection.
enum Via {
    /// A stream this program connected or accepted, adopted by the module.
    Stream(TcpStream),
    /// A connection the module makes itself (CONNECT_QP).
    Kernel(SocketAddrV4),
}

/// Makes a QP on `cqs` with buffers of `max` bytes, posts `posted` receives, then connects it
/// `via` a stream or the module (each side tells the other its regions in the MPA private data).
#[allow(clippy::too_many_arguments)]
fn connect<'d>(
    pd: &'d ProtectionDomain<'d>,
    cqs: (&'d CompletionQueue<'d>, &'d CompletionQueue<'d>),
    via: Via,
    role: Role,
    opts: &str,
    b: Buffers<'d>,
    max_recv_wr: u32,
    posted: usize,
) -> Result<Session<'d>, String> {
    let mut o = options(role, opts)?;
    o.private_data = advertise(&b);
    let init = QpInit { pd, send_cq: cqs.0, recv_cq: cqs.1, max_recv_wr, max_send_wr: 16, max_sge: 4, max_inline: 0 };
    let qp = pd.device().create_qp(&init).map_err(|e| format!("create QP: {e}"))?;
    let mut s = Session { qp, scq: cqs.0, rcq: cqs.1, b, peer_dst: Remote::default(), peer_src: Remote::default() };
    for _ in 0..posted {
        s.post_recv()?;
    }
    let n = match via {
        Via::Stream(stream) => s.qp.adopt(stream, &o).map_err(|e| format!("adopt: {e}"))?.clone(),
        Via::Kernel(to) => {
            // The server may not listen yet: a refused attempt leaves the QP as it was, so retry.
            let start = std::time::Instant::now();
            let done = loop {
                match s.qp.connect(to, &o).map(drop) {
                    Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) && start.elapsed() < Duration::from_secs(60) => {
                        std::thread::sleep(Duration::from_millis(200))
                    }
                    r => break r,
                }
            };
            done.map_err(|e| format!("connect in the kernel to {to}: {e}"))?;
            s.qp.negotiated().ok_or("no negotiation")?.clone()
        }
    };
    println!("ok: connected (MPA rev {}, CRC {}, markers in {} out {})", n.mpa_rev, n.crc, n.rx_markers, n.tx_markers);
    // Markers sit as far apart as asked (0: RFC 5044's 512), in each direction that has them.
    let p = s.qp.placement().map_err(|e| e.to_string())?;
    let asked = if o.marker_interval == 0 { 512 } else { o.marker_interval };
    let want = |on: bool| if on { asked } else { 0 };
    let got = (p.rx_marker_interval, p.tx_marker_interval);
    ensure(got == (want(n.rx_markers), want(n.tx_markers)), format!("marker intervals in/out {got:?} (asked {asked})"))?;
    (s.peer_dst, s.peer_src) = peer_regions(&n.peer_private)?;
    if role == Role::Initiator {
        s.hello()?;
    }
    Ok(s)
}

pub(crate) const DONE: u64 = u64::MAX;
const DEEP: u64 = u64::MAX - 1;
const CROSS: u64 = u64::MAX - 2;
/// RDMA Reads each side keeps in flight in the cross-read phase.
const CROSS_READS: usize = 8;

/// Guest B: accept, then answer rounds until the initiator says it is done.
pub(crate) fn serve(port: &str, max: usize, opts: &str) -> Check {
    let dev = open()?;
    serve_on(&dev, listen(port)?, max, opts)
}

/// MPA options of the many-QP test: one virtual CPU under TCG sets up 64 QPs at once while the
/// first ones already move data, so a QP may wait longer than the default 10 s for its peer.
const MANY_OPTS: &str = "timeout=60000";

/// Guest B: `many` connections at once, one thread and QP each.
pub(crate) fn many_serve(port: &str, many: usize) -> Check {
    let dev = open()?;
    let l = std::net::TcpListener::bind(format!("0.0.0.0:{port}")).map_err(|e| format!("listen {port}: {e}"))?;
    println!("listening on {port}");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::thread::scope(|sc| {
        let runs: Vec<_> = (0..many).map(|_| sc.spawn(|| serve_on(&dev, l.accept().map_err(|e| e.to_string())?.0, 1 << 16, MANY_OPTS))).collect();
        runs.into_iter().try_for_each(|r| r.join().map_err(|_| "thread panicked".to_string())?)
    })?;
    ensure(true, format!("B: {many} QPs served at once"))
}

/// Guest A: `many` connections at once, each running the rounds.
pub(crate) fn many_drive(host: &str, port: &str, many: usize) -> Check {
    let dev = open()?;
    std::thread::scope(|sc| {
        let runs: Vec<_> = (0..many).map(|_| sc.spawn(|| drive_on(&dev, Via::Stream(dial(host, port)?), &[4096, 1 << 16], 0, MANY_OPTS, false))).collect();
        runs.into_iter().try_for_each(|r| r.join().map_err(|_| "thread panicked".to_string())?)
    })?;
    let qps = dev.stats().map_err(|e| e.to_string())?.queue_pairs;
    ensure(qps == 0, format!("A: {many} QPs ran at once, all gone after"))
}

/// The value of option `key` (such as `ooo` in `ooo=1`) among the comma-separated `opts`, and
/// the others.
fn split_flag<'a>(opts: &'a str, key: &str) -> (Option<&'a str>, String) {
    let value = opts.split(',').find_map(|o| o.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v));
    let rest: Vec<&str> = opts.split(',').filter(|o| o.split('=').next() != Some(key)).collect();
    (value, rest.join(","))
}

/// What placement must show, from the `ooo` option: the network reorders or loses packets, so
/// some of what arrived must have been placed out of order, straight from TCP's out-of-order
/// queue (`ooo=1`), some of it found at segment starts because the sender aligns FPDUs
/// (`ooo=aligned`), or some of it found through markers (`ooo=marker`), and the doorbell rang
/// (`ooo=doorbell`: markers found, and the netfilter hook saw segments arrive out of order).
#[derive(Clone, Copy, PartialEq)]
enum Ooo {
    Unchecked,
    Any,
    Aligned,
    Marker,
    Doorbell,
}

impl Ooo {
    fn parse(v: Option<&str>) -> Result<Ooo, String> {
        match v {
            None => Ok(Ooo::Unchecked),
            Some("1") => Ok(Ooo::Any),
            Some("aligned") => Ok(Ooo::Aligned),
            Some("marker") => Ok(Ooo::Marker),
            Some("doorbell") => Ok(Ooo::Doorbell),
            Some(v) => Err(format!("bad ooo={v}")),
        }
    }
}

/// LIST_QPS (and, with `cli`, the `iwarp stat` tool beside this program) must show `qp`, idle
/// now, as ours, connected to `peer`, with the counters its own QUERY_QP gives.
fn listed(dev: &Device, qp: &QueuePair<'_>, peer: SocketAddr, cli: bool) -> Check {
    let all = dev.list_qps().map_err(|e| format!("LIST_QPS: {e}"))?;
    let me = std::process::id();
    let mine: Vec<_> = all.iter().filter(|l| l.pid == me && l.handle == qp.handle()).collect();
    let [l] = mine[..] else { return Err(format!("LIST_QPS: {} entries for our QP {} among {all:?}", mine.len(), qp.handle())) };
    let (placement, sent) = (qp.placement().map_err(|e| e.to_string())?, qp.sent_octets().map_err(|e| e.to_string())?);
    let local_ok = l.local.is_some_and(|a| a.port() != 0 && a.ip() != peer.ip());
    ensure(
        l.state == QpState::Connected && l.remote == Some(peer) && local_ok && l.placement == placement && l.sent == sent,
        format!("LIST_QPS: our QP {} of {} listed: {l:?}", qp.handle(), all.len()),
    )?;
    if !cli {
        return Ok(());
    }
    let tool = std::env::current_exe().map_err(|e| e.to_string())?.with_file_name("iwarp");
    let out = std::process::Command::new(&tool).arg("stat").output().map_err(|e| format!("{}: {e}", tool.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let head = format!("pid {me} qp {} state rts {} > {peer} ", qp.handle(), l.local.map_or("-".into(), |a| a.to_string()));
    let counted = format!(" placed_in_order {} placed_out_of_order {} ", placement.in_order, placement.out_of_order);
    let line = text.lines().find(|t| t.starts_with(&head));
    ensure(
        out.status.success() && line.is_some_and(|t| t.contains(&counted)),
        format!("iwarp stat shows our QP: want a line starting {head:?} with {counted:?}; got {:?}", text.trim_end()),
    )
}

/// Shows where `who`'s QP placed what it received, and checks it as `ooo` says.
fn placement(qp: &QueuePair<'_>, who: &str, ooo: Ooo) -> Check {
    let p = qp.placement().map_err(|e| e.to_string())?;
    let shown = format!("{who}: {p}");
    let placed = p.out_of_order > 0 && p.fpdus_out_of_order > 0;
    match ooo {
        Ooo::Unchecked => {
            println!("# {shown}");
            Ok(())
        }
        Ooo::Any => ensure(placed, shown),
        Ooo::Aligned => ensure(placed && p.fpdus_by_alignment > 0, shown),
        Ooo::Marker => ensure(placed && p.fpdus_by_marker > 0, shown),
        Ooo::Doorbell => ensure(placed && p.fpdus_by_marker > 0 && p.doorbells > 0, shown),
    }
}

fn serve_on(dev: &Device, stream: TcpStream, max: usize, opts: &str) -> Check {
    let (ooo, opts) = split_flag(opts, "ooo");
    let ooo = Ooo::parse(ooo)?;
    let opts = opts.as_str();
    let (scq, rcq) = (dev.create_cq(64).map_err(|e| e.to_string())?, dev.create_cq(4096).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let mut s = connect(&pd, (&scq, &rcq), Via::Stream(stream), Role::Responder, opts, buffers(&pd, max)?, 2048, POSTED)?;
    s.tell(0, 0)?;
    loop {
        let (_, size, sum) = s.hear()?;
        if size == DONE {
            ensure(s.qp.state().map_err(|e| e.to_string())? == QpState::Connected, "B: QP still connected at the end")?;
            placement(&s.qp, "B", ooo)?;
            s.tell(DONE, 0)?;
            // The initiator closes once it has the answer.
            return wait_ended(&s.qp).map(drop);
        }
        if size == DEEP {
            deep_receive(&mut s, sum as usize)?;
            continue;
        }
        if size == CROSS {
            let n = sum as usize;
            s.b.src.as_mut_slice()[..n].copy_from_slice(&random(n, b'Y'));
            s.tell(0, 0)?;
            cross_reads(&s, n, &random(n, b'X'), "B")?;
            s.tell(0, 0)?;
            continue;
        }
        let n = size as usize;
        let want = random(n, b'A');
        ensure(
            checksum(&s.b.dst.as_slice()[..n]) == sum && s.b.dst.as_slice()[..n] == want[..],
            format!("B: RDMA Write of {n} bytes from A placed intact (checksum {sum:#x})"),
        )?;
        s.read_and_check(n, &random(n, b'S'), "B")?;
        let mine = random(n, b'B');
        s.b.src.as_mut_slice()[..n].copy_from_slice(&mine);
        let (x, y) = (n / 2, 3 * n / 4);
        let sge = [s.b.src.sge(0..x), s.b.src.sge(x..y), s.b.src.sge(y..n)];
        s.send(&sge, true)?;
    }
}

/// Guest A: connect, then a round per size: Write + Send to B, B Reads it back and Sends its
/// own data, A Reads that back.
/// With `kernel-connect=1` among the options, the module makes the TCP connection.
pub(crate) fn drive(host: &str, port: &str, sizes: &str, deep: usize, opts: &str) -> Check {
    let sizes: Vec<usize> = sizes.split(',').map(|s| s.parse().map_err(|_| format!("bad size {s}"))).collect::<Result<_, _>>()?;
    let dev = open()?;
    let (kernel, opts) = split_flag(opts, "kernel-connect");
    let kernel = kernel == Some("1");
    let via = if kernel { Via::Kernel(format!("{host}:{port}").parse().map_err(|e| format!("{host}:{port}: {e}"))?) } else { Via::Stream(dial(host, port)?) };
    drive_on(&dev, via, &sizes, deep, &opts, true)
}

/// The module sends payloads from this size on from the registered pages (qp/payload.rs).
const ZERO_COPY_MIN: usize = 4096;

/// `cli`: also check what the `iwarp` tool shows of the QP.
fn drive_on(dev: &Device, via: Via, sizes: &[usize], deep: usize, opts: &str, cli: bool) -> Check {
    let peer = match &via {
        Via::Stream(s) => s.peer_addr().map_err(|e| e.to_string())?,
        Via::Kernel(a) => SocketAddr::V4(*a),
    };
    let (ooo, opts) = split_flag(opts, "ooo");
    let ooo = Ooo::parse(ooo)?;
    let opts = opts.as_str();
    let max = sizes.iter().copied().max().unwrap_or(16).max(16 * (deep + 4)).max(16);
    let (scq, rcq) = (dev.create_cq(64).map_err(|e| e.to_string())?, dev.create_cq(64).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let mut s = connect(&pd, (&scq, &rcq), via, Role::Initiator, opts, buffers(&pd, max)?, 16, POSTED)?;
    s.hear()?; // B is ready
    let before = s.qp.sent_octets().map_err(|e| e.to_string())?;
    for &n in sizes {
        let mine = random(n, b'A');
        s.b.src.as_mut_slice()[..n].copy_from_slice(&mine);
        let sge = [s.b.src.sge(0..n)];
        s.qp.post_send(&SendWr { wr_id: 2, op: SendOp::Write(s.peer_dst), sge: &sge, signaled: true }).map_err(|e| format!("post Write: {e}"))?;
        done(s.scq, WcOpcode::RdmaWrite)?;
        // Once the Write completes its buffer is ours again (from a page on it was sent from
        // the buffer itself, so the module waits for TCP's acknowledgement): new contents must
        // not reach B's copy, and B's Read below must see them.
        s.b.src.as_mut_slice()[..n].copy_from_slice(&random(n, b'S'));
        // The control message goes after the Write on the same stream, so it is placed after it.
        s.tell(n as u64, checksum(&mine))?;
        let (wc, _, _) = s.hear()?;
        let want = random(n, b'B');
        // hear() reposted over the buffer, but nothing can arrive before we answer.
        ensure(wc.byte_len as usize == n && s.b.rcv.as_slice()[..n] == want[..], format!("A: Send of {n} bytes from B in three SGEs placed intact"))?;
        s.read_and_check(n, &want, "A")?;
    }
    // Each size was sent twice (our Write, our answer to B's Read): payloads of a page or more
    // left from the registered pages (unless the QP copies everything), smaller ones and the
    // 16-octet control messages were copied. With CRCs or markers every FPDU is copied whole,
    // so nothing leaves from the registered pages (and our application may rewrite a Read's
    // source while the response is in flight without breaking its CRC).
    let after = s.qp.sent_octets().map_err(|e| e.to_string())?;
    let framed_copies = s.qp.negotiated().is_some_and(|n| n.crc || n.tx_markers);
    let min = if options(Role::Initiator, opts)?.copy_send || framed_copies { usize::MAX } else { ZERO_COPY_MIN };
    let sum = |keep: &dyn Fn(usize) -> bool| sizes.iter().copied().filter(|&n| keep(n)).sum::<usize>() as u64;
    let big = 2 * sum(&|n| n >= min);
    let small = 2 * sum(&|n| n < min);
    let control = 16 * sizes.len() as u64;
    let (zc, copied) = (after.0 - before.0, after.1 - before.1);
    ensure(zc == big, format!("A: {zc} octets sent zero copy, want {big}"))?;
    ensure(copied == small + control, format!("A: {copied} octets copied, want {small} + {control} of control messages"))?;
    if let Some(&n) = sizes.iter().max().filter(|&&n| n >= 1 << 20) {
        // Both sides Read each other's largest buffer at once, many times over: far more than
        // the sockets buffer, so each module must answer Reads while its own responses wait.
        s.b.src.as_mut_slice()[..n].copy_from_slice(&random(n, b'X'));
        s.tell(CROSS, n as u64)?;
        s.hear()?;
        cross_reads(&s, n, &random(n, b'Y'), "A")?;
        s.hear()?;
    }
    if deep > 0 {
        deep_send(&mut s, deep)?;
    }
    ensure(s.qp.state().map_err(|e| e.to_string())? == QpState::Connected, "A: QP still connected at the end")?;
    placement(&s.qp, "A", ooo)?;
    listed(dev, &s.qp, peer, cli)?;
    s.tell(DONE, 0)?;
    s.hear().map(drop)
}

/// Posts [`CROSS_READS`] Reads of the peer's first `n` source octets at once and checks each.
fn cross_reads(s: &Session<'_>, n: usize, want: &[u8], who: &str) -> Check {
    let sge = [s.b.sink.sge(0..n)];
    for i in 0..CROSS_READS {
        s.qp.post_send(&SendWr { wr_id: i as u64, op: SendOp::Read(s.peer_src), sge: &sge, signaled: true }).map_err(|e| format!("post Read {i}: {e}"))?;
    }
    for _ in 0..CROSS_READS {
        done(s.scq, WcOpcode::RdmaRead)?;
    }
    ensure(&s.b.sink.as_slice()[..n] == want, format!("{who}: {CROSS_READS} RDMA Reads of {n} bytes in flight while the peer Reads ours, all intact"))
}

/// Receives every session keeps posted (over the whole receive buffer).
const POSTED: usize = 4;

/// Deep queue, receiving side: `n` receives posted at once at distinct offsets; the sender
/// first uses up the session's standing receives with fillers, then sends `n` messages.
fn deep_receive(s: &mut Session<'_>, n: usize) -> Check {
    // All with one doorbell: the ring is as deep as the receive queue.
    let sges: Vec<[Sge; 1]> = (0..n).map(|i| [s.b.dst.sge(i * 16..i * 16 + 16)]).collect();
    let wrs: Vec<RecvWr<'_>> = sges.iter().enumerate().map(|(i, sge)| RecvWr { wr_id: i as u64, sge }).collect();
    s.qp.post_recvs(&wrs).map_err(|e| format!("post {n} receives: {e}"))?;
    s.tell(0, 0)?;
    let none = WorkCompletion::EMPTY;
    let mut wc = vec![none; 256];
    let mut got = 0;
    while got < POSTED + n {
        let k = s.rcq.wait(&mut wc, SPIN, WAIT).map_err(|e| e.to_string())?;
        if k == 0 {
            return Err(format!("deep: only {got} of {} completions within {WAIT:?}", POSTED + n));
        }
        for c in &wc[..k] {
            if c.status != WcStatus::Success || c.byte_len != 16 {
                return Err(format!("deep: bad completion {c:?}"));
            }
            if got >= POSTED {
                let i = got - POSTED;
                let m = &s.b.dst.as_slice()[i * 16..i * 16 + 16];
                let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
                if c.wr_id != i as u64 || seq != i as u64 || u64::from_le_bytes(m[8..].try_into().unwrap()) != checksum(&seq.to_le_bytes()) {
                    return Err(format!("deep: message {i} wrong (wr_id {}, seq {seq})", c.wr_id));
                }
            }
            got += 1;
        }
    }
    for _ in 0..POSTED {
        s.post_recv()?;
    }
    s.tell(0, 0)?;
    println!("ok: deep queue: {n} receives posted at once, {n} messages completed in order and intact");
    Ok(())
}

/// Deep queue, sending side: fillers for the standing receives, then `n` Sends back to back,
/// one signaled in 32.
fn deep_send(s: &mut Session<'_>, n: usize) -> Check {
    s.tell(DEEP, n as u64)?;
    s.hear()?; // the receives are posted
    for i in 0..POSTED + n {
        let at = i * 16;
        let seq = i.saturating_sub(POSTED) as u64;
        s.b.src.as_mut_slice()[at..at + 16].copy_from_slice(&[seq.to_le_bytes(), checksum(&seq.to_le_bytes()).to_le_bytes()].concat());
        let sge = [s.b.src.sge(at..at + 16)];
        s.send(&sge, i % 32 == 31)?;
    }
    s.hear()?; // all arrived and the standing receives are back
    Ok(())
}

/// Guest B side of the fault cases: a QP with two receives posted, then wait for the end.
/// Reports the state and checks the flushed receives.
pub(crate) fn fault_serve(port: &str, case: &str) -> Check {
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let posted = if case == "no-recv" { 0 } else { 2 };
    let (pd, other) = (dev.alloc_pd().map_err(|e| e.to_string())?, dev.alloc_pd().map_err(|e| e.to_string())?);
    let mut b = buffers(&pd, 4096)?;
    if case == "other-pd" {
        // What we advertise as our Write target is in a PD our QP is not in.
        b.dst = region(&other, Access::LOCAL_WRITE | Access::REMOTE_WRITE, 4096)?;
    }
    let s = connect(&pd, (&scq, &rcq), Via::Stream(listen(port)?), Role::Responder, "", b, 16, posted)?;
    // The initiator starts after our go-ahead (it posted a receive for it).
    s.send(&[s.b.src.sge(0..16)], true)?;
    let (expect, _) = fault_cause(case)?;
    let mut flush = posted;
    if case == "invalidated-stag" {
        let wc = done(&rcq, WcOpcode::Recv)?;
        let stag = s.b.dst.stag();
        ensure(wc.invalidated == Some(stag), format!("B: the Send with Invalidate completed, invalidating our STag {stag:#x} ({wc:?})"))?;
        flush -= 1;
    }
    let state = wait_ended(&s.qp)?;
    ensure(state == QpState::Error { terminate: Some(expect.code()), sent: true }, format!("B: QP ended with our Terminate {:?} ({state:?})", expect))?;
    if case == "foreign-invalidate" {
        // The Send whose Invalidate we refused completes in error; the Write and the Send that
        // followed it in the same segment were neither placed nor completed.
        let mut wc = [WorkCompletion::EMPTY; 1];
        let k = rcq.poll(&mut wc);
        ensure(
            k == 1 && wc[0].status == WcStatus::Fatal && wc[0].invalidated.is_none(),
            format!("B: the Send with a foreign Invalidate failed ({:?})", &wc[..k]),
        )?;
        flush -= 1;
    }
    if matches!(case, "foreign-invalidate" | "bad-read-request") {
        ensure(s.b.dst.as_slice().iter().all(|&b| b == 0), "B: the Write after it changed nothing")?;
    }
    expect_event(&events, s.qp.handle(), QpEvent::Terminated { terminate: expect.code(), sent: true }, "B")?;
    flushed(&rcq, flush, "B")
}

/// Guest B, the module's side of `drip`: advertises a 64 KiB region, sends a go-ahead, then for
/// each control message (n, checksum) checks that the first n octets of the region hold what
/// the peer's Writes carried, until DONE; the QP must still be connected, and it says DONE back.
pub(crate) fn drip_serve(port: &str) -> Check {
    let dev = open()?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut s = connect(&pd, (&scq, &rcq), Via::Stream(listen(port)?), Role::Responder, "", buffers(&pd, 1 << 16)?, 16, 2)?;
    s.send(&[s.b.src.sge(0..16)], true)?;
    let mut cases = 0;
    loop {
        let (wc, n, sum) = s.hear()?;
        if n == DONE {
            break;
        }
        let got = s.b.dst.as_slice().get(..n as usize).map(checksum);
        ensure(wc.byte_len == 16 && got == Some(sum), format!("B: {n} octets written in tiny segments, then a Send: all placed intact"))?;
        cases += 1;
    }
    ensure(s.qp.state().map_err(|e| e.to_string())? == QpState::Connected, format!("B: QP still connected after {cases} dripped streams"))?;
    placement(&s.qp, "B", Ooo::Unchecked)?;
    // The 60,000-octet FPDU lay in more socket buffers than one gather holds.
    let copied = s.qp.placement().map_err(|e| e.to_string())?.received_copied;
    ensure(copied > 0, format!("B: {copied} octets went through the bounce buffer"))?;
    s.tell(DONE, 0)
}

/// Guest B, the module's side of the IRD Readers: a source of known content, a go-ahead, then
/// `then` on the session.
fn ird_source(port: &str, then: impl FnOnce(&mut Session<'_>) -> Check) -> Check {
    let dev = open()?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut b = buffers(&pd, crate::ird::SOURCE)?;
    b.src.as_mut_slice().copy_from_slice(&random(crate::ird::SOURCE, b'R'));
    let mut s = connect(&pd, (&scq, &rcq), Via::Stream(listen(port)?), Role::Responder, "", b, 16, 2)?;
    s.send(&[s.b.ctl.sge(0..16)], true)?;
    then(&mut s)
}

/// `ird-serve`: after the peer's DONE the QP must still be connected.
pub(crate) fn ird_serve(port: &str) -> Check {
    ird_source(port, |s| {
        let (_, done, _) = s.hear()?;
        ensure(done == DONE, "B: the Reader said DONE")?;
        ensure(s.qp.state().map_err(|e| e.to_string())? == QpState::Connected, "B: QP still connected after a Reader kept our IRD full")?;
        s.tell(DONE, 0)
    })
}

/// `ird-overflow-serve`: the QP must end with our Terminate for Read Requests beyond the IRD.
pub(crate) fn ird_overflow_serve(port: &str) -> Check {
    ird_source(port, |s| {
        let st = wait_ended(&s.qp)?;
        let want = QpState::Error { terminate: Some(Cause::RdmapStreamCatastrophic.code()), sent: true };
        ensure(st == want, format!("B: Read Requests beyond our IRD ended the QP with our Terminate ({st:?})"))
    })
}

/// `short-response-serve`: our Read of [`SHORT_READ`] octets, answered short by the peer
/// (`crate::short_response`), must complete in error and end the QP with our Terminate, the
/// sink past what the response carried (`half`: half of it) as it was.
pub(crate) fn short_response_serve(port: &str, case: &str) -> Check {
    let dev = open()?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut b = buffers(&pd, SHORT_READ)?;
    b.sink.as_mut_slice().fill(0x5a);
    let s = connect(&pd, (&scq, &rcq), Via::Stream(listen(port)?), Role::Responder, "", b, 16, 2)?;
    s.send(&[s.b.ctl.sge(0..16)], true)?;
    let sge = [s.b.sink.sge(0..SHORT_READ)];
    s.qp.post_send(&SendWr { wr_id: 9, op: SendOp::Read(s.peer_src), sge: &sge, signaled: true }).map_err(|e| format!("post Read: {e}"))?;
    let mut wc = [WorkCompletion::EMPTY];
    let n = scq.wait(&mut wc, SPIN, WAIT).map_err(|e| format!("wait for the Read: {e}"))?;
    ensure(n == 1 && wc[0].wr_id == 9 && wc[0].status != WcStatus::Success, format!("B: the Read answered {case} completed in error ({:?})", &wc[..n]))?;
    let st = wait_ended(&s.qp)?;
    let want = QpState::Error { terminate: Some(Cause::DdpBaseBounds.code()), sent: true };
    ensure(st == want, format!("B: the {case} Read Response ended the QP with our Terminate ({st:?})"))?;
    let carried = if case == "half" { SHORT_READ / 2 } else { 0 };
    ensure(s.b.sink.as_slice()[carried..].iter().all(|&x| x == 0x5a), format!("B: nothing placed past the {carried} octets the response carried"))
}

/// Octets of the Read `short-response-serve` makes.
const SHORT_READ: usize = 64 << 10;

/// Size of the region `read-race` Reads while its owner writes it.
const RACED: usize = 1 << 20;
/// Reads of [`RACED`] octets `read-race` makes, [`CROSS_READS`] at a time.
const RACED_READS: usize = 64;

/// Guest B: advertises a 1 MiB region and rewrites all of it, over and over, from a thread of
/// its own while the peer Reads it (verbs allow it: the peer gets some mix of versions). CRCs
/// are on (the default): the module must send every response with a CRC that matches what
/// leaves, so the QP stays connected until the peer says DONE.
pub(crate) fn read_race_serve(port: &str) -> Check {
    let dev = open()?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut s = connect(&pd, (&scq, &rcq), Via::Stream(listen(port)?), Role::Responder, "", buffers(&pd, RACED)?, 16, 2)?;
    let src = s.b.src.as_mut_slice();
    let (at, len) = (src.as_mut_ptr() as usize, src.len());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (passes, verdict) = std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let mut pass = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: the region is ours, `len` octets at `at`, and nothing else in this
                // program touches it while this thread runs (the module only reads it).
                unsafe { std::ptr::write_bytes(at as *mut u8, pass as u8, len) };
                std::hint::black_box(at);
                pass += 1;
            }
            pass
        });
        let verdict = (|| {
            s.send(&[s.b.ctl.sge(0..16)], true)?;
            let (_, done, _) = s.hear()?;
            ensure(done == DONE, "B: the peer said DONE")?;
            ensure(s.qp.state().map_err(|e| e.to_string())? == QpState::Connected, "B: QP still connected")?;
            s.tell(DONE, 0)
        })();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (writer.join().unwrap_or(0), verdict)
    });
    verdict?;
    println!("ok: B: rewrote the region {passes} times while the peer Read it");
    Ok(())
}

/// Guest A: Reads the peer's region [`RACED_READS`] times while the peer rewrites it; every
/// Read must complete whole and the QP stay connected (with CRCs on, a response sent from pages
/// that changed after its CRC was computed would end the connection).
pub(crate) fn read_race(host: &str, port: &str) -> Check {
    let dev = open()?;
    let (scq, rcq) = (dev.create_cq(64).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut s = connect(&pd, (&scq, &rcq), Via::Stream(dial(host, port)?), Role::Initiator, "", buffers(&pd, RACED)?, 16, 2)?;
    s.hear()?; // B is ready and writing
    let sge = [s.b.sink.sge(0..RACED)];
    for round in 0..RACED_READS / CROSS_READS {
        for i in 0..CROSS_READS {
            s.qp.post_send(&SendWr { wr_id: i as u64, op: SendOp::Read(s.peer_src), sge: &sge, signaled: true }).map_err(|e| format!("post Read: {e}"))?;
        }
        for _ in 0..CROSS_READS {
            let wc = done(s.scq, WcOpcode::RdmaRead).map_err(|e| format!("A: round {round}: {e}"))?;
            ensure(wc.byte_len as usize == RACED, format!("A: Read of {RACED} octets while B writes them: {wc:?}"))
                .map_err(|e| format!("round {round}: {e}"))?;
        }
    }
    ensure(
        s.qp.state().map_err(|e| e.to_string())? == QpState::Connected,
        format!("A: {RACED_READS} Reads of a region its owner was writing, QP still connected"),
    )?;
    s.tell(DONE, 0)?;
    s.hear().map(drop) // B checked its side
}

/// The asynchronous event that must report how QP `qp` ended.
pub(crate) fn expect_event(events: &AsyncEvents<'_>, qp: u32, what: QpEvent, who: &str) -> Check {
    let ev = events.wait(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    ensure(ev.map(|e| (e.qp, e.what)) == Some((qp, what)), format!("{who}: asynchronous event {ev:?}"))
}

/// The cause B must report, and the operation A performs to provoke it.
fn fault_cause(case: &str) -> Result<(Cause, &'static str), String> {
    Ok(match case {
        "bad-stag" => (Cause::DdpInvalidStag, "RDMA Write to an STag B never made"),
        "write-bounds" => (Cause::DdpBaseBounds, "RDMA Write past the end of B's region"),
        "read-rights" => (Cause::RdmapAccessRights, "RDMA Read of B's region that lacks REMOTE_READ"),
        "no-recv" => (Cause::DdpNoBuffer, "Send while B has no receive posted"),
        "invalidated-stag" => (Cause::DdpInvalidStag, "Send with Invalidate of B's STag, then an RDMA Write to it"),
        "other-pd" => (Cause::DdpStagNotAssociated, "RDMA Write to a region of B's in another protection domain"),
        _ => match super::wire::cause(case) {
            Some(c) => (c, "a malformed FPDU from a user-level peer"),
            None => return Err(format!("unknown fault case {case}")),
        },
    })
}

/// Guest A side: provoke the fault; our QP must end by the peer's Terminate, with our posted
/// receive flushed.
pub(crate) fn fault_drive(host: &str, port: &str, case: &str) -> Check {
    let (cause, what) = fault_cause(case)?;
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let s = connect(&pd, (&scq, &rcq), Via::Stream(dial(host, port)?), Role::Initiator, "", buffers(&pd, 4096)?, 16, 2)?;
    s.hear()?; // B's go-ahead (reposts one: two posted again)
    let sge = [s.b.src.sge(0..64)];
    if case == "invalidated-stag" {
        let inv = SendOp::SendInvalidate { solicited: false, stag: s.peer_dst.rkey };
        s.qp.post_send(&SendWr { wr_id: 8, op: inv, sge: &[], signaled: true }).map_err(|e| format!("post Send with Invalidate: {e}"))?;
        done(s.scq, WcOpcode::Send)?;
    }
    let op = match case {
        "invalidated-stag" | "other-pd" => SendOp::Write(s.peer_dst),
        "bad-stag" => SendOp::Write(Remote { addr: s.peer_dst.addr, rkey: s.peer_dst.rkey ^ 0x5a00 }),
        "write-bounds" => SendOp::Write(Remote { addr: s.peer_dst.addr + 4096 - 32, rkey: s.peer_dst.rkey }),
        "read-rights" => SendOp::Read(s.peer_dst),
        _ => SendOp::Send { solicited: false },
    };
    let sink = [s.b.sink.sge(0..64)];
    let wr = SendWr { wr_id: 9, op, sge: if matches!(op, SendOp::Read(_)) { &sink } else { &sge }, signaled: true };
    s.qp.post_send(&wr).map_err(|e| format!("post ({what}): {e}"))?;
    println!("ok: posted: {what}");
    let state = wait_ended(&s.qp)?;
    ensure(state == QpState::Error { terminate: Some(cause.code()), sent: false }, format!("A: QP ended by the peer's Terminate {cause:?} ({state:?})"))?;
    expect_event(&events, s.qp.handle(), QpEvent::Terminated { terminate: cause.code(), sent: false }, "A")?;
    // A Read never answered is flushed on the send CQ; a Send or Write completed when queued.
    let mut wc = [WorkCompletion::EMPTY; 4];
    let n = s.scq.poll(&mut wc);
    if matches!(op, SendOp::Read(_)) {
        ensure(n == 1 && wc[0].status == WcStatus::Flushed && wc[0].wr_id == 9, format!("A: the unanswered Read was flushed ({:?})", &wc[..n]))?;
    }
    flushed(&rcq, 2, "A")?;
    expect_errno("A: posting on the ended QP", s.qp.post_send(&wr), libc::ENOTCONN)
}

pub(crate) fn wait_ended(qp: &QueuePair<'_>) -> Result<QpState, String> {
    for _ in 0..600 {
        let st = qp.state().map_err(|e| e.to_string())?;
        if st != QpState::Connected {
            return Ok(st);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("QP still connected after 60 s".into())
}

/// `n` receives came back flushed.
pub(crate) fn flushed(cq: &CompletionQueue<'_>, n: usize, who: &str) -> Check {
    let mut wc = [WorkCompletion::EMPTY; 8];
    let k = cq.poll(&mut wc);
    ensure(
        k == n && wc[..k].iter().all(|c| c.status == WcStatus::Flushed && c.opcode == WcOpcode::Recv),
        format!("{who}: {n} posted receives flushed with errors ({:?})", &wc[..k]),
    )
}

/// Both ends in this guest (loopback): the argument checks of the data-path ioctls and a CQ
/// overrun.
pub(crate) fn local_errors() -> Check {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let peer = std::thread::spawn(move || -> Check {
        let dev = open()?;
        let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
        let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
        let init = QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 64, max_send_wr: 4, max_sge: 4, max_inline: 0 };
        let stream = listener.accept().map_err(|e| e.to_string())?.0;
        let qp = dev.adopt(stream, &options(Role::Responder, "")?, &init).map_err(|e| format!("peer adopt: {e}"))?;
        let mut buf = vec![0u8; 4096];
        let mr = pd.register(&mut buf, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
        for i in 0..64 {
            qp.post_recv(i, &[mr.sge(0..4096)]).map_err(|e| e.to_string())?;
        }
        // Stay until the other side closes.
        let _ = wait_ended(&qp);
        Ok(())
    });
    let dev = open()?;
    expect_errno("CQ of depth 0", dev.create_cq(0).map(|c| c.depth()), libc::EINVAL)?;
    expect_errno("CQ deeper than max_cqe", dev.create_cq(libiwarp::abi::MAX_CQE + 1).map(|c| c.depth()), libc::EINVAL)?;
    let tiny = dev.create_cq(1).map_err(|e| e.to_string())?;
    let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let (pd, other) = (dev.alloc_pd().map_err(|e| e.to_string())?, dev.alloc_pd().map_err(|e| e.to_string())?);
    let init = QpInit { pd: &pd, send_cq: &tiny, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 2, max_inline: 32 };
    let std::net::SocketAddr::V4(to) = addr else { return Err("the listener is not IPv4".into()) };
    let initiator = options(Role::Initiator, "")?;
    // The module makes this connection itself (CONNECT_QP): first the refusals.
    let mut qp = dev.create_qp(&init).map_err(|e| e.to_string())?;
    let closed: SocketAddrV4 = "127.0.0.1:1".parse().map_err(|e| format!("{e}"))?;
    expect_errno("connecting in the kernel to a closed port", qp.connect(closed, &initiator).map(drop), libc::ECONNREFUSED)?;
    expect_errno("connecting in the kernel as responder", qp.connect(to, &options(Role::Responder, "")?).map(drop), libc::EINVAL)?;
    expect_errno("connecting in the kernel to port 0", qp.connect(SocketAddrV4::new(*to.ip(), 0), &initiator).map(drop), libc::EINVAL)?;
    let n = qp.connect(to, &initiator).map_err(|e| format!("connecting in the kernel after the refusals: {e}"))?;
    println!("ok: connected in the kernel to {to} (MPA rev {}, CRC {})", n.mpa_rev, n.crc);
    expect_errno("connecting a connected QP again", qp.connect(to, &initiator).map(drop), libc::EINVAL)?;
    // LIST_QPS: a bad array or count is refused, and nothing is written past the room given.
    let list = |entries: u64, capacity: u32, count: u32| {
        let mut req = libiwarp::abi::ListQps { entries, capacity, count };
        dev.list_qps_raw(&mut req).map(|()| req.count)
    };
    expect_errno("LIST_QPS with room above MAX_LIST_QPS", list(0, libiwarp::abi::MAX_LIST_QPS + 1, 0), libc::EINVAL)?;
    expect_errno("LIST_QPS with a count set", list(0, 0, 1), libc::EINVAL)?;
    expect_errno("LIST_QPS into an unmapped array", list(8, 1, 0), libc::EFAULT)?;
    let mut room = [libiwarp::abi::QpInfo::default(), libiwarp::abi::QpInfo { pid: 0xfeed, ..Default::default() }];
    let count = list(room.as_mut_ptr() as u64, 1, 0).map_err(|e| format!("LIST_QPS: {e}"))?;
    ensure(count >= 2 && room[0].pid == std::process::id() && room[1].pid == 0xfeed, format!("LIST_QPS with room for 1 of {count}: one entry written"))?;
    let mut ro = vec![1u8; 4096];
    let mut rw = vec![0u8; 4096];
    let mut elsewhere = vec![0u8; 4096];
    let ro = pd.register(&mut ro, Access::NONE).map_err(|e| e.to_string())?;
    let rw = pd.register(&mut rw, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    let elsewhere = other.register(&mut elsewhere, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    let send = |sge: &[Sge], op: SendOp| qp.post_send(&SendWr { wr_id: 1, op, sge, signaled: false });
    let plain = SendOp::Send { solicited: false };
    let bad_lkey = Sge { lkey: ro.lkey() ^ 0x40, ..ro.sge(0..16) };
    expect_errno("Send from an unknown lkey", send(&[bad_lkey], plain), libc::EINVAL)?;
    expect_errno("Send past the end of the region", send(&[Sge { length: 4097, ..ro.sge(0..0) }], plain), libc::EINVAL)?;
    expect_errno("Send from before the region", send(&[Sge { addr: ro.addr() - 1, ..ro.sge(0..16) }], plain), libc::EINVAL)?;
    expect_errno("Read into a region without LOCAL_WRITE", send(&[ro.sge(0..16)], SendOp::Read(Remote { addr: 0, rkey: 1 })), libc::EACCES)?;
    expect_errno("Read into two SGEs", send(&[rw.sge(0..8), rw.sge(8..16)], SendOp::Read(Remote { addr: 0, rkey: 1 })), libc::EINVAL)?;
    expect_errno("receive into a region without LOCAL_WRITE", qp.post_recv(1, &[ro.sge(0..16)]), libc::EACCES)?;
    expect_errno("Send from a region of another PD", send(&[elsewhere.sge(0..16)], plain), libc::EINVAL)?;
    expect_errno("three SGEs on a QP of two", send(&[ro.sge(0..8), ro.sge(8..16), ro.sge(16..24)], plain), libc::EINVAL)?;
    expect_errno("a receive of three SGEs on a QP of two", qp.post_recv(1, &[rw.sge(0..8), rw.sge(8..16), rw.sge(16..24)]), libc::EINVAL)?;
    expect_errno("inline data beyond max_inline", qp.post_send_inline(1, plain, &[0u8; 33], false), libc::EINVAL)?;
    let unmapped = [Sge { addr: 0x1000, length: 8, lkey: 0 }; 4];
    let inline_flags = libiwarp::abi::send_flags::INLINE;
    let from_unmapped = libiwarp::abi::PostSend { num_sge: 1, sge: unmapped, flags: inline_flags, ..Default::default() };
    expect_errno("inline data from unmapped memory", qp.post_send_raw(from_unmapped), libc::EFAULT)?;
    let inline_read = libiwarp::abi::PostSend { opcode: libiwarp::abi::opcode::READ, ..from_unmapped };
    expect_errno("an inline RDMA Read", qp.post_send_raw(inline_read), libc::EINVAL)?;
    qp.post_send_inline(1, plain, &[0x5a; 32], false).map_err(|e| format!("inline Send of 32 bytes: {e}"))?;
    println!("ok: an inline Send of 32 bytes from plain memory posted");
    expect_errno("receive into a region of another PD", qp.post_recv(1, &[elsewhere.sge(0..16)]), libc::EINVAL)?;
    let raw = |f: &dyn Fn(&mut libiwarp::abi::PostSend)| {
        let mut req = libiwarp::abi::PostSend { num_sge: 1, sge: [ro.sge(0..16); 4], ..Default::default() };
        f(&mut req);
        qp.post_send_raw(req)
    };
    expect_errno("unknown opcode", raw(&|r| r.opcode = libiwarp::abi::opcode::FAST_REGISTER + 1), libc::EINVAL)?;
    expect_errno("a Local Invalidate with an SGE", raw(&|r| (r.opcode, r.invalidate) = (libiwarp::abi::opcode::LOCAL_INVALIDATE, ro.stag())), libc::EINVAL)?;
    expect_errno("five SGEs", raw(&|r| r.num_sge = 5), libc::EINVAL)?;
    expect_errno("unknown flag", raw(&|r| r.flags = 1 << 7), libc::EINVAL)?;
    expect_errno(
        "solicited RDMA Write",
        raw(&|r| {
            r.opcode = libiwarp::abi::opcode::WRITE;
            r.flags = libiwarp::abi::send_flags::SOLICITED;
        }),
        libc::EINVAL,
    )?;
    expect_errno("doorbell with a send tail past the ring", qp.doorbell_raw(1000, 0), libc::EINVAL)?;
    expect_errno("doorbell with a receive tail behind the module's head", qp.doorbell_raw(0, u32::MAX), libc::EINVAL)?;
    for i in 0..4 {
        qp.post_recv(i, &[rw.sge(0..4096)]).map_err(|e| e.to_string())?;
    }
    expect_errno("a fifth receive on a queue of four", qp.post_recv(5, &[rw.sge(0..16)]), libc::ENOMEM)?;
    expect_errno("destroying a CQ in use", dev.destroy_cq_raw(cq.handle()), libc::EBUSY)?;
    expect_errno("arming an unknown CQ", dev.arm_cq_raw(0xdead_0001, 0), libc::EINVAL)?;
    expect_errno("arming with a bad flag", dev.arm_cq_raw(cq.handle(), 7), libc::EINVAL)?;
    use libiwarp::abi::ring_kind;
    expect_errno("mapping an unknown CQ", dev.map_raw(0x7_0001, 4096), libc::EINVAL)?;
    expect_errno("mapping a CQ with the wrong length", dev.map_raw(cq.handle() as u64, 3 * 4096 * 4096), libc::EINVAL)?;
    expect_errno("mapping the send ring of an unknown QP", dev.map_raw(ring_kind::SQ << ring_kind::SHIFT | 0x7_0001, 4096), libc::EINVAL)?;
    expect_errno("mapping an unknown kind of ring", dev.map_raw(7 << ring_kind::SHIFT | qp.handle() as u64, 4096), libc::EINVAL)?;
    // The send CQ holds one entry: the second signaled Send overruns it, which ends the QP.
    let signaled = |i| qp.post_send(&SendWr { wr_id: i, op: plain, sge: &[ro.sge(0..16)], signaled: true });
    signaled(1).map_err(|e| format!("first signaled Send: {e}"))?;
    signaled(2).map_err(|e| format!("second signaled Send: {e}"))?;
    let st = qp.state().map_err(|e| e.to_string())?;
    ensure(matches!(st, QpState::Error { sent: true, .. }), format!("CQ overrun ends the QP ({st:?})"))?;
    let mut wc = [WorkCompletion::EMPTY; 8];
    ensure(tiny.poll(&mut wc) == 1 && wc[0].wr_id == 1 && wc[0].status == WcStatus::Success, "the entry before the overrun is intact")?;
    ensure(cq.poll(&mut wc) == 4 && wc[..4].iter().all(|c| c.status == WcStatus::Flushed), "the posted receives were flushed")?;
    drop(qp);
    peer.join().map_err(|_| "peer thread panicked".to_string())?
}
