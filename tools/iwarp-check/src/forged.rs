//! A segment forged by an attacker on the path (`scripts/inject-segment.py`): in window, with a
//! valid TCP checksum and the sender's next sequence number, so TCP takes its 64 octets of 0x5a
//! in place of the start of the sender's next FPDU. TCP cannot tell; MPA's CRC (not a MAC, so
//! no defence against an attacker who computes it, but one against anyone who does not) can.
//!
//!   forged-serve PORT OPTS       (B) accept, advertise a region of zeros, wait until the QP
//!                                ends; then what was placed: with CRCs (OPTS crc=1) the QP must
//!                                have ended with a Terminate of ours and no forged octet be in
//!                                the region; without, the forgery must have shown (the QP
//!                                ended, or forged octets were placed), and which is printed
//!   forged-drive HOST PORT OPTS  (A) connect, then RDMA Write 1 KiB of 0xa5 to the next place
//!                                in B's region every 50 ms, until the QP ends (or for 30 s)

use super::{dial, ensure, listen, open, options, Check};
use libiwarp::{Access, QpInit, QpState, Remote, Role, SendOp, SendWr, WcStatus};
use std::time::{Duration, Instant};

/// The region B advertises, and the Writes A makes into it.
const REGION: usize = 1 << 20;
const WRITE: usize = 1 << 10;
/// The attacker's octet and A's.
const FORGED: u8 = 0x5a;
const OURS: u8 = 0xa5;
/// How long either side waits for the forgery to end the connection.
const LIMIT: Duration = Duration::from_secs(30);

/// `forged-serve PORT OPTS`.
pub(crate) fn serve(port: &str, opts: &str) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let mut qp =
        dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 1, max_inline: 0 }).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; REGION];
    let dst = pd.register(&mut buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
    let mut o = options(Role::Responder, opts)?;
    o.private_data = dst.remote(0).to_bytes().to_vec();
    let n = qp.adopt(listen(port)?, &o).map_err(|e| format!("B: adopt: {e}"))?;
    let crc = n.crc;
    println!("ok: B: connected (CRC {})", u8::from(crc));
    let start = Instant::now();
    let state = loop {
        match qp.state().map_err(|e| e.to_string())? {
            QpState::Connected if start.elapsed() < LIMIT => std::thread::sleep(Duration::from_millis(50)),
            state => break state,
        }
    };
    drop(qp);
    drop(dst);
    let forged = buf.iter().filter(|&&b| b == FORGED).count();
    let ours = buf.iter().filter(|&&b| b == OURS).count();
    println!("B: the QP is {state:?}; the region holds {ours} octets of A's Writes and {forged} forged ones");
    if crc {
        ensure(
            matches!(state, QpState::Error { terminate: Some(_), sent: true }) && forged == 0 && ours > 0,
            "B: with CRCs, the forged segment ended the QP with a Terminate of ours, and none of its octets was placed",
        )
    } else {
        ensure(
            state != QpState::Connected || forged > 0,
            format!(
                "B: without CRCs the forgery showed: {}",
                if forged > 0 { "its octets were placed as if A had sent them" } else { "it broke the framing, and the QP ended" }
            ),
        )
    }
}

/// `forged-drive HOST PORT OPTS`.
pub(crate) fn drive(host: &str, port: &str, opts: &str) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let mut qp =
        dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 1, max_inline: 0 }).map_err(|e| e.to_string())?;
    let mut src = vec![OURS; WRITE];
    let src = pd.register(&mut src, Access::NONE).map_err(|e| e.to_string())?;
    let n = qp.adopt(dial(host, port)?, &options(Role::Initiator, opts)?).map_err(|e| format!("A: adopt: {e}"))?;
    let to = Remote::from_bytes(&n.peer_private).ok_or("A: no region advertised")?;
    println!("ok: A: connected; a Write of {WRITE} octets every 50 ms");
    let start = Instant::now();
    let mut done = 0;
    while start.elapsed() < LIMIT && (done + 1) * WRITE <= REGION {
        let at = Remote { addr: to.addr + (done * WRITE) as u64, rkey: to.rkey };
        if qp.post_send(&SendWr { wr_id: done as u64, op: SendOp::Write(at), sge: &[src.sge(0..WRITE)], signaled: true }).is_err() {
            break;
        }
        match cq.wait_one(Duration::from_secs(5)).map_err(|e| e.to_string())? {
            Some(wc) if wc.status == WcStatus::Success => done += 1,
            _ => break,
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("A: {done} Writes completed; the QP is {:?}", qp.state().map_err(|e| e.to_string())?);
    Ok(())
}
