//! Send and receive: the client sends a line, the server answers it in capitals.
//!
//!   send_recv server PORT          (guest B)
//!   send_recv client HOST PORT     (guest A)

mod common;

use libiwarp::{Access, ConnectOptions, Device, QpInit, Role, SendOp, SendWr, WcOpcode};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let (stream, role) = common::endpoint()?;
    let dev = Device::open()?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(16)?;
    let (mut rbuf, mut sbuf) = (vec![0u8; 4096], vec![0u8; 4096]);
    let rmr = pd.register(&mut rbuf, Access::LOCAL_WRITE)?;
    let mut smr = pd.register(&mut sbuf, Access::NONE)?;
    let mut qp = dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 4, max_inline: 0 })?;
    // Receives go in before connecting: the peer may send the moment MPA completes.
    qp.post_recv(1, &[rmr.sge(0..4096)])?;
    qp.adopt(stream, &ConnectOptions::new(role))?;

    let send = |qp: &libiwarp::QueuePair<'_>, smr: &libiwarp::MemoryRegion<'_>, n: usize| {
        qp.post_send(&SendWr { wr_id: 2, op: SendOp::Send { solicited: true }, sge: &[smr.sge(0..n)], signaled: true })
    };
    if role == Role::Initiator {
        let msg = b"hello over iWARP, markers and CRC on";
        smr.as_mut_slice()[..msg.len()].copy_from_slice(msg);
        send(&qp, &smr, msg.len())?;
        let [_, wc] = common::wait_each(&cq, [WcOpcode::Send, WcOpcode::Recv])?;
        println!("client got {} bytes: {}", wc.byte_len, String::from_utf8_lossy(&rmr.as_slice()[..wc.byte_len as usize]));
    } else {
        let wc = common::wait(&cq, WcOpcode::Recv)?;
        let got = rmr.as_slice()[..wc.byte_len as usize].to_ascii_uppercase();
        println!("server got {} bytes (solicited: {}): {}", wc.byte_len, wc.solicited, String::from_utf8_lossy(&rmr.as_slice()[..got.len()]));
        smr.as_mut_slice()[..got.len()].copy_from_slice(&got);
        send(&qp, &smr, got.len())?;
        common::wait(&cq, WcOpcode::Send)?;
        // Stay until the client has read the answer and closed.
        while qp.state()? == libiwarp::QpState::Connected {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Ok(())
}
