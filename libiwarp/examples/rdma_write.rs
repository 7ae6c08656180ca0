//! RDMA Write: the server lends a buffer (its address and STag travel in the MPA private
//! data), the client writes into it directly and then sends an empty message to say so.
//!
//!   rdma_write server PORT         (guest B)
//!   rdma_write client HOST PORT    (guest A)

mod common;

use libiwarp::{Access, ConnectOptions, Device, QpInit, Remote, Role, SendOp, SendWr, WcOpcode};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let (stream, role) = common::endpoint()?;
    let dev = Device::open()?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(16)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut mr = pd.register(&mut buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let mut qp = dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 4, max_inline: 0 })?;
    qp.post_recv(1, &[])?;
    let mut opts = ConnectOptions::new(role);
    opts.private_data = mr.remote(0).to_bytes().to_vec();
    let peer = qp.adopt(stream, &opts)?.peer_private.clone();

    if role == Role::Initiator {
        let target = Remote::from_bytes(&peer).ok_or("the server sent no buffer")?;
        let text = b"written straight into the server's memory";
        mr.as_mut_slice()[..text.len()].copy_from_slice(text);
        qp.post_send(&SendWr { wr_id: 2, op: SendOp::Write(target), sge: &[mr.sge(0..text.len())], signaled: true })?;
        common::wait(&cq, WcOpcode::RdmaWrite)?;
        // Same stream, so the notification is placed after the data.
        qp.post_send(&SendWr { wr_id: 3, op: SendOp::Send { solicited: false }, sge: &[], signaled: true })?;
        // The notification's completion, and the server's goodbye.
        common::wait_each(&cq, [WcOpcode::Send, WcOpcode::Recv])?;
        println!("client wrote {} bytes to {:#x} (STag {:#x})", text.len(), target.addr, target.rkey);
    } else {
        common::wait(&cq, WcOpcode::Recv)?;
        let end = mr.as_slice().iter().position(|&b| b == 0).unwrap_or(0);
        println!("server's buffer now says: {}", String::from_utf8_lossy(&mr.as_slice()[..end]));
        qp.post_send(&SendWr { wr_id: 4, op: SendOp::Send { solicited: false }, sge: &[], signaled: true })?;
        common::wait(&cq, WcOpcode::Send)?;
    }
    Ok(())
}
