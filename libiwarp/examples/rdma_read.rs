//! RDMA Read: the server offers a buffer for reading; the client fetches it without the
//! server's program doing anything (the module answers the Read), then says goodbye.
//!
//!   rdma_read server PORT          (guest B)
//!   rdma_read client HOST PORT     (guest A)

mod common;

use libiwarp::{Access, ConnectOptions, Device, QpInit, Remote, Role, SendOp, SendWr, WcOpcode};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let (stream, role) = common::endpoint()?;
    let dev = Device::open()?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(16)?;
    let text = b"read from the server's memory by the client";
    let mut buf = vec![0u8; 4096];
    buf[..text.len()].copy_from_slice(text);
    let access = if role == Role::Responder { Access::REMOTE_READ } else { Access::LOCAL_WRITE };
    let mr = pd.register(&mut buf, access)?;
    let mut qp = dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 4, max_inline: 0 })?;
    qp.post_recv(1, &[])?;
    let mut opts = ConnectOptions::new(role);
    opts.private_data = mr.remote(0).to_bytes().to_vec();
    let peer = qp.adopt(stream, &opts)?.peer_private.clone();

    if role == Role::Initiator {
        let source = Remote::from_bytes(&peer).ok_or("the server offered no buffer")?;
        qp.post_send(&SendWr { wr_id: 2, op: SendOp::Read(source), sge: &[mr.sge(0..text.len())], signaled: true })?;
        let wc = common::wait(&cq, WcOpcode::RdmaRead)?;
        println!("client read {} bytes: {}", wc.byte_len, String::from_utf8_lossy(&mr.as_slice()[..wc.byte_len as usize]));
        qp.post_send(&SendWr { wr_id: 3, op: SendOp::Send { solicited: false }, sge: &[], signaled: true })?;
        common::wait(&cq, WcOpcode::Send)?;
    } else {
        common::wait(&cq, WcOpcode::Recv)?;
        println!("server: the client has read its buffer and said goodbye");
    }
    Ok(())
}
