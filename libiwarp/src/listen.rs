//! The passive side of connection setup in the module: a [`Listener`] (a kernel TCP socket)
//! hands out [`ConnectRequest`]s, each a connection whose MPA request has arrived, so the
//! application sees the initiator's private data before it accepts on a queue pair or rejects.

use crate::abi::{conn, GetRequest, HandleOp, Listen, Reject, IOCTL_CLOSE_LISTENER, IOCTL_GET_REQUEST, IOCTL_LISTEN, IOCTL_REJECT};
use crate::device::Device;
use crate::endpoint::{endpoint, socket_addr};
use crate::qp::{ConnectOptions, Negotiated, QueuePair};
use crate::sys;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

/// A listening socket in the module; dropping it stops listening.
pub struct Listener<'a> {
    dev: &'a Device,
    handle: u32,
    port: u16,
}

impl<'a> Listener<'a> {
    pub(crate) fn new(dev: &'a Device, at: SocketAddr, backlog: u32) -> io::Result<Self> {
        let mut req = Listen { at: endpoint(at), backlog, ..Listen::default() };
        sys::ioctl(dev.file().as_fd(), IOCTL_LISTEN, &mut req)?;
        Ok(Listener { dev, handle: req.listener, port: req.at.port })
    }

    /// The port listened on (the one picked, if 0 was asked for).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits up to `timeout` for a connection, then again for its MPA request. ETIMEDOUT if
    /// none came; EPROTO if the request was malformed (that connection is closed).
    pub fn get_request(&self, timeout: Duration) -> io::Result<ConnectRequest<'a>> {
        let mut private = vec![0u8; 512];
        let mut req = GetRequest {
            listener: self.handle,
            timeout_ms: timeout.as_millis().clamp(1, 60_000) as u32,
            peer_private: private.as_mut_ptr() as u64,
            peer_private_cap: private.len() as u32,
            ..GetRequest::default()
        };
        sys::ioctl(self.dev.file().as_fd(), IOCTL_GET_REQUEST, &mut req)?;
        private.truncate(req.peer_private_len as usize);
        Ok(ConnectRequest {
            dev: self.dev,
            handle: Some(req.request),
            private_data: private,
            mpa_rev: req.rev as u8,
            markers: req.flags & conn::RX_MARKERS != 0,
            crc: req.flags & conn::CRC != 0,
            ird: req.ird as u16,
            ord: req.ord as u16,
            // The module names IPv4 and IPv6 peers only.
            peer: socket_addr(&req.peer).unwrap_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))),
        })
    }
}

impl Drop for Listener<'_> {
    fn drop(&mut self) {
        let _ = sys::ioctl(self.dev.file().as_fd(), IOCTL_CLOSE_LISTENER, &mut HandleOp { handle: self.handle, reserved: 0 });
    }
}

/// A connection whose MPA request arrived, waiting to be accepted or rejected (dropping it
/// rejects it without private data).
pub struct ConnectRequest<'a> {
    dev: &'a Device,
    handle: Option<u32>,
    /// The initiator's private data.
    pub private_data: Vec<u8>,
    /// The MPA revision of its request.
    pub mpa_rev: u8,
    /// It wants markers in what it receives.
    pub markers: bool,
    /// It wants CRCs.
    pub crc: bool,
    /// Its IRD and ORD (revision 2), else 0.
    pub ird: u16,
    /// See `ird`.
    pub ord: u16,
    /// Its address (an IPv4 one that reached an IPv6 listener as an IPv4-mapped IPv6 address).
    pub peer: SocketAddr,
}

impl ConnectRequest<'_> {
    /// Accepts the connection on `qp` (made, receives posted, not connected) with `opts`, whose
    /// role must be [`crate::Role::Responder`].
    pub fn accept<'q>(mut self, qp: &'q mut QueuePair<'_>, opts: &ConnectOptions) -> io::Result<&'q Negotiated> {
        let handle = self.handle.take().expect("a pending request has a handle");
        qp.accept(handle, opts)
    }

    /// Refuses the connection: the initiator's connect fails with ECONNREFUSED and receives
    /// `private_data` (at most 508 octets).
    pub fn reject(mut self, private_data: &[u8]) -> io::Result<()> {
        let handle = self.handle.take().expect("a pending request has a handle");
        self.send_reject(handle, private_data)
    }

    fn send_reject(&self, handle: u32, private: &[u8]) -> io::Result<()> {
        let mut req = Reject { request: handle, private_len: private.len() as u32, private_data: private.as_ptr() as u64 };
        sys::ioctl(self.dev.file().as_fd(), IOCTL_REJECT, &mut req)
    }
}

impl Drop for ConnectRequest<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = self.send_reject(h, &[]);
        }
    }
}
