//! rping's protocol over libiwarp, so that Linux's own `rping` (librdmacm's example, on siw in
//! the other guest) is the peer: an unmodified tool, not one of ours.
//!
//!   rping-serve PORT SIZE COUNT OPTS           serve `rping -c -C COUNT -S SIZE -V`
//!   rping-connect HOST PORT SIZE COUNT OPTS    be the client of `rping -s -S SIZE`
//!
//! Per ping, the client Sends the address, STag and size of its start buffer (16 octets: 64-bit
//! address, 32-bit STag, 32-bit size, big endian); the server RDMA Reads it and Sends a
//! go-ahead (16 octets, not read); the client Sends the same for its RDMA buffer; the server
//! RDMA Writes what it Read there and Sends a second go-ahead; the client compares the two
//! buffers. Each side keeps a receive posted ahead of the peer's next Send. The client
//! disconnects after COUNT pings. Our server also checks every Read against rping's text
//! ("rdma-ping-N: " then letters rotating by ping), and our client fills its buffer the same way.

use super::{dial, ensure, listen, open, options, Check};
use libiwarp::{Access, CompletionQueue, MemoryRegion, QpInit, QpState, QueuePair, Remote, Role, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};
use std::ops::Range;
use std::time::Duration;

/// How long any one completion may take (TCG guests are slow).
const WAIT: Duration = Duration::from_secs(60);
/// Fails with `what` unless `cond`, silently: each ping checks this often, and a passing check
/// need not print.
fn quiet(cond: bool, what: impl FnOnce() -> String) -> Check {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

/// The message both sides Send.
const INFO: usize = 16;
/// Receives kept posted (rping keeps one; more does no harm).
const RECVS: u64 = 2;

/// rping's start buffer for ping `ping`: its text, then letters from 'A' + ping (mod 58) up to
/// 'z' and round again, NUL-terminated at the last octet.
fn pattern(ping: u64, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size);
    let mut c = 65 + (ping % 58) as u8;
    while b.len() < size {
        b.push(c);
        c = if c == 122 { 65 } else { c + 1 };
    }
    b[size - 1] = 0;
    b
}

/// Our one region: receive slots, the Send area, the start buffer and the RDMA buffer.
struct Areas {
    size: usize,
}

impl Areas {
    fn slot(&self, k: u64) -> Range<usize> {
        INFO * k as usize..INFO * (k as usize + 1)
    }
    fn send(&self) -> Range<usize> {
        INFO * RECVS as usize..INFO * (RECVS as usize + 1)
    }
    fn start(&self) -> Range<usize> {
        let at = self.send().end;
        at..at + self.size
    }
    fn rdma(&self) -> Range<usize> {
        let at = self.start().end;
        at..at + self.size
    }
}

struct Peer<'q, 'd> {
    qp: &'q QueuePair<'d>,
    scq: &'q CompletionQueue<'d>,
    rcq: &'q CompletionQueue<'d>,
    a: Areas,
}

impl Peer<'_, '_> {
    /// Posts one signaled request of `range` and waits for its completion.
    fn post(&self, mr: &MemoryRegion<'_>, op: SendOp, range: Range<usize>, done: WcOpcode, what: &str) -> Check {
        self.qp.post_send(&SendWr { wr_id: 0, op, sge: &[mr.sge(range)], signaled: true }).map_err(|e| format!("{what}: post: {e}"))?;
        let wc = self.scq.wait_one(WAIT).map_err(|e| e.to_string())?.ok_or(format!("{what}: no completion within {WAIT:?}"))?;
        quiet(wc.status == WcStatus::Success && wc.opcode == done, || format!("{what} ({wc:?})"))
    }

    /// Sends 16 octets: where `range` is and how long (zeros for a go-ahead, as rping's).
    fn send_info(&self, mr: &mut MemoryRegion<'_>, range: Option<Range<usize>>, what: &str) -> Check {
        let mut info = [0u8; INFO];
        if let Some(r) = range {
            let at = mr.remote(r.start);
            info[..8].copy_from_slice(&at.addr.to_be_bytes());
            info[8..12].copy_from_slice(&at.rkey.to_be_bytes());
            info[12..].copy_from_slice(&(r.len() as u32).to_be_bytes());
        }
        mr.as_mut_slice()[self.a.send()].copy_from_slice(&info);
        self.post(mr, SendOp::Send { solicited: false }, self.a.send(), WcOpcode::Send, what)
    }

    /// The next receive (reposted at once), or `None` once the connection ended (flushed).
    fn receive(&self, mr: &MemoryRegion<'_>) -> Result<Option<[u8; INFO]>, String> {
        let wc: WorkCompletion = self.rcq.wait_one(WAIT).map_err(|e| e.to_string())?.ok_or(format!("no receive within {WAIT:?}"))?;
        if wc.status == WcStatus::Flushed {
            return Ok(None);
        }
        quiet(wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv && wc.byte_len as usize == INFO, || format!("a 16-octet receive ({wc:?})"))?;
        let slot = self.a.slot(wc.wr_id);
        let info = mr.as_slice()[slot.clone()].try_into().unwrap_or([0; INFO]);
        self.qp.post_recv(wc.wr_id, &[mr.sge(slot)]).map_err(|e| format!("repost a receive: {e}"))?;
        Ok(Some(info))
    }

    /// The next receive, which the protocol needs.
    fn expect(&self, mr: &MemoryRegion<'_>, what: &str) -> Result<[u8; INFO], String> {
        self.receive(mr)?.ok_or(format!("the connection ended while waiting for {what}"))
    }
}

/// The peer's buffer named by an info message.
fn remote(info: &[u8; INFO]) -> (Remote, usize) {
    let addr = u64::from_be_bytes(info[..8].try_into().unwrap_or_default());
    let rkey = u32::from_be_bytes(info[8..12].try_into().unwrap_or_default());
    (Remote { addr, rkey }, u32::from_be_bytes(info[12..].try_into().unwrap_or_default()) as usize)
}

/// `rping-serve PORT SIZE COUNT OPTS`.
pub(crate) fn serve(port: &str, size: usize, count: u64, opts: &str) -> Check {
    run(Role::Responder, size, count, opts, || listen(port))
}

/// `rping-connect HOST PORT SIZE COUNT OPTS`.
pub(crate) fn connect(host: &str, port: &str, size: usize, count: u64, opts: &str) -> Check {
    run(Role::Initiator, size, count, opts, || dial(host, port))
}

fn run(role: Role, size: usize, count: u64, opts: &str, stream: impl FnOnce() -> Result<std::net::TcpStream, String>) -> Check {
    ensure((23..=65535).contains(&size), format!("SIZE {size} within rping's 23 to 65535"))?;
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let mut qp = dev
        .create_qp(&QpInit { pd: &pd, send_cq: &scq, recv_cq: &rcq, max_recv_wr: RECVS as u32, max_send_wr: 16, max_sge: 1, max_inline: 0 })
        .map_err(|e| e.to_string())?;
    let a = Areas { size };
    let mut buf = vec![0u8; a.rdma().end];
    let mut mr = pd.register(&mut buf, Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
    for k in 0..RECVS {
        qp.post_recv(k, &[mr.sge(a.slot(k))]).map_err(|e| e.to_string())?;
    }
    // rping asks for one Read each way (responder_resources and initiator_depth 1).
    let mut o = options(role, opts)?;
    (o.ird, o.ord) = (1, 1);
    let got = qp.adopt(stream()?, &o).map_err(|e| format!("adopt: {e}"))?;
    println!("ok: connected to rping: MPA revision {}, CRC {}, IRD/ORD {}/{}", got.mpa_rev, got.crc as u8, got.ird, got.ord);
    let p = Peer { qp: &qp, scq: &scq, rcq: &rcq, a };
    if role == Role::Responder {
        p.serve(&mut mr, count)
    } else {
        p.client(&mut mr, count)
    }
}

impl Peer<'_, '_> {
    /// rping's server: Reads each ping, checks it, Writes it back, until the client leaves.
    fn serve(&self, mr: &mut MemoryRegion<'_>, count: u64) -> Check {
        let size = self.a.size;
        let mut ping = 0;
        while let Some(info) = self.receive(mr)? {
            let (start, len) = remote(&info);
            quiet(len == size, || format!("ping {ping}: the client's buffer is {len} octets, not {size}"))?;
            self.post(mr, SendOp::Read(start), self.a.rdma(), WcOpcode::RdmaRead, "Read of the client's start buffer")?;
            let want = pattern(ping, size);
            let got = &mr.as_slice()[self.a.rdma()];
            quiet(got == &want[..], || format!("ping {ping}: what we Read is not rping's text ({:?}...)", String::from_utf8_lossy(&got[..got.len().min(80)])))?;
            self.send_info(mr, None, "go-ahead")?;
            let (sink, len) = remote(&self.expect(mr, "the client's RDMA buffer")?);
            quiet(len == size, || format!("ping {ping}: the client's RDMA buffer is {len} octets, not {size}"))?;
            self.post(mr, SendOp::Write(sink), self.a.rdma(), WcOpcode::RdmaWrite, "Write to the client's RDMA buffer")?;
            self.send_info(mr, None, "second go-ahead")?;
            ping += 1;
        }
        let state = self.qp.state().map_err(|e| e.to_string())?;
        ensure(
            ping == count && state == QpState::Error { terminate: None, sent: false },
            format!("served {ping} of {count} pings of {size} octets, each Read checked, then rping disconnected ({state:?})"),
        )
    }

    /// rping's client: COUNT pings, each echo compared with what we sent; then disconnects.
    fn client(&self, mr: &mut MemoryRegion<'_>, count: u64) -> Check {
        let size = self.a.size;
        for ping in 0..count {
            mr.as_mut_slice()[self.a.start()].copy_from_slice(&pattern(ping, size));
            mr.as_mut_slice()[self.a.rdma()].fill(0);
            self.send_info(mr, Some(self.a.start()), "our start buffer")?;
            self.expect(mr, "the server's go-ahead")?;
            self.send_info(mr, Some(self.a.rdma()), "our RDMA buffer")?;
            self.expect(mr, "the server's second go-ahead")?;
            let s = mr.as_slice();
            quiet(s[self.a.rdma()] == s[self.a.start()], || format!("ping {ping}: the echo differs from what we sent"))?;
        }
        println!("ok: {count} pings of {size} octets echoed intact");
        self.qp.disconnect().map_err(|e| format!("disconnect: {e}"))?;
        let mut wc = [WorkCompletion::EMPTY; RECVS as usize];
        let k = self.rcq.poll(&mut wc);
        ensure(k == RECVS as usize && wc.iter().all(|c| c.status == WcStatus::Flushed), format!("our posted receives flushed ({:?})", &wc[..k]))
    }
}

#[cfg(test)]
mod tests {
    use super::pattern;

    #[test]
    fn pattern_is_rpings_text() {
        assert_eq!(pattern(0, 64), b"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\0".to_vec());
        // The letters start one later each ping, from 'z' round to 'A'.
        assert_eq!(&pattern(57, 24)[14..17], b"zAB");
        assert_eq!(&pattern(58, 24)[14..17], b"ABC");
        // A text longer than the buffer is cut, and the last octet is NUL.
        assert_eq!(pattern(1_000_000_000, 23), b"rdma-ping-1000000000: \0".to_vec());
    }
}
