// SPDX-License-Identifier: GPL-2.0

//! Connection management ioctls: a QP gets its TCP connection from the caller (ADOPT_QP), from
//! the module connecting (CONNECT_QP) or from a request that arrived on a listener (LISTEN,
//! GET_REQUEST, then ACCEPT or REJECT), and waits, holding no lock, for the MPA exchange, which
//! the socket's callbacks drive (`qp::establish`); DISCONNECT ends a connected QP.

use super::translate::{endpoint, socket_endpoint};
use super::{Context, Entry};
use crate::abi::{self, conn, Accept, AdoptQp, ConnectQp, GetRequest, HandleOp, Listen, Reject, MAX_IRD_ORD, MAX_PRIVATE_DATA};
use crate::error::econnrefused;
use crate::listen::{Listener, Pending};
use crate::proto::markers::Markers;
use crate::proto::mpa::frame::{RtrTypes, EXTENSIONS_TOKEN};
use crate::proto::mpa::negotiate::{Local, Rtr};
use crate::qp::{self, Failed, Side, StreamOptions};
use crate::socket::{Endpoint, Hook, TcpSocket};
use kernel::prelude::*;
use kernel::uaccess::{UserPtr, UserSlice, UserSliceReader, UserSliceWriter};

/// Where a QP's TCP connection comes from.
enum SocketFrom {
    /// The caller's connected socket (ADOPT_QP).
    Fd,
    /// A connection the module makes (CONNECT_QP).
    Connect(Endpoint),
    /// A request that arrived on a listener (ACCEPT).
    Request(Pending),
}

/// The `len` octets of private data at user address `from`.
fn private_data(from: u64, len: u32) -> Result<KVec<u8>> {
    let mut private = KVec::from_elem(0u8, len as usize, GFP_KERNEL_ACCOUNT)?;
    UserSlice::new(UserPtr::from_addr(from as usize), private.len()).reader().read_slice(&mut private)?;
    Ok(private)
}

/// Copies up to `cap` octets of `data` to user address `to`.
fn give(data: &[u8], to: u64, cap: u32) -> Result {
    let n = data.len().min(cap as usize);
    UserSlice::new(UserPtr::from_addr(to as usize), n).writer().write_slice(&data[..n])
}

impl Context {
    /// ADOPT_QP, CONNECT_QP, ACCEPT: runs `f` on the argument and writes it back, also after the
    /// peer rejected us (it then carries the length of the reject's private data).
    pub(super) fn connect_ioctl<T: kernel::transmute::FromBytes + kernel::transmute::AsBytes>(
        &self,
        (mut r, mut w): (UserSliceReader, UserSliceWriter),
        f: impl FnOnce(&Self, &mut T) -> Result,
    ) -> Result {
        let mut req: T = r.read()?;
        let done = f(self, &mut req);
        if done.is_ok() || done == Err(econnrefused()) {
            w.write(&req)?;
        }
        done
    }

    pub(super) fn adopt(&self, req: &mut AdoptQp) -> Result {
        self.adopt_qp(req, SocketFrom::Fd)
    }

    pub(super) fn connect(&self, req: &mut ConnectQp) -> Result {
        let peer = socket_endpoint(&req.peer)?;
        if req.adopt.role != abi::role::INITIATOR || peer.port == 0 || req.adopt.fd != 0 || req.reserved != 0 {
            return Err(EINVAL);
        }
        self.adopt_qp(&mut req.adopt, SocketFrom::Connect(peer))
    }

    /// ACCEPT: the pending request is used up whatever happens.
    pub(super) fn accept(&self, req: &mut Accept) -> Result {
        let pending = self.requests.lock().remove(req.request)?;
        if req.adopt.role != abi::role::RESPONDER || req.adopt.fd != 0 || req.reserved != 0 {
            return Err(EINVAL);
        }
        self.adopt_qp(&mut req.adopt, SocketFrom::Request(pending))
    }

    /// Validates the request, takes the socket `from` where it says, runs the MPA exchange,
    /// then hooks the socket so data is received.
    fn adopt_qp(&self, req: &mut AdoptQp, from: SocketFrom) -> Result {
        // The RFC 7306 offer takes the first octets of the private data.
        let token = if req.flags & conn::EXTENSIONS != 0 { EXTENSIONS_TOKEN.len() as u32 } else { 0 };
        let valid = req.role <= abi::role::RESPONDER
            && req.flags & !conn::ASKABLE == 0
            && (1..=2).contains(&req.mpa_rev)
            && req.private_len.checked_add(token).is_some_and(|n| n <= MAX_PRIVATE_DATA)
            && (1..=60_000).contains(&req.timeout_ms)
            && req.ird <= MAX_IRD_ORD
            && req.ord <= MAX_IRD_ORD;
        let markers = match req.marker_interval {
            0 => Some(Markers::RFC),
            n => Markers::every(n),
        };
        let Some(markers) = markers.filter(|_| valid) else { return Err(EINVAL) };
        let qp = self.qp(req.qp)?;
        qp.claim()?;
        let est = match self.exchange(req, from) {
            Ok(est) => est,
            Err(e) => {
                qp.abandon();
                return Err(e);
            }
        };
        let c = est.conn;
        req.peer_private_len = est.peer_private.len() as u32;
        let rtr = match c.rtr {
            Some(Rtr::Send) => conn::RTR_SEND,
            Some(Rtr::Write) => conn::RTR_WRITE,
            Some(Rtr::Read) => conn::RTR_READ,
            None => 0,
        };
        req.negotiated = (if c.rx_markers { conn::RX_MARKERS } else { 0 })
            | (if c.tx_markers { conn::TX_MARKERS } else { 0 })
            | (if c.crc { conn::CRC } else { 0 })
            | (if c.extensions { conn::EXTENSIONS } else { 0 })
            | rtr;
        req.rev = u32::from(c.rev);
        req.neg_ird = u32::from(c.ird);
        req.neg_ord = u32::from(c.ord);
        let opts = StreamOptions {
            copy_send: req.flags & conn::COPY_SEND != 0,
            ooo: req.flags & conn::IN_ORDER == 0,
            aligned: req.flags & conn::ALIGNED != 0,
            markers,
        };
        let hooked = qp.connect(est, &opts).and_then(|()| {
            // Asked before the table is locked: a QP's receive side is never locked inside it
            // (the receive work holds it while it takes the socket lock).
            let doorbell = qp.places_out_of_order();
            let mut qps = self.qps.lock();
            // Destroyed meanwhile: EINVAL, and closing below ends the connection.
            let entry: &mut Entry = qps.get_mut(req.qp)?;
            entry.hook = Some(Hook::install(qp.socket()?, qp.clone(), doorbell, crate::rx_callback_max() > 0)?);
            Ok(())
        });
        if let Err(e) = hooked {
            qp.close();
            return Err(e);
        }
        Ok(())
    }

    /// Gets the connected socket and runs the MPA exchange.
    fn exchange(&self, req: &mut AdoptQp, from: SocketFrom) -> Result<qp::Established> {
        let private = private_data(req.private_data, req.private_len)?;
        let local = Local {
            markers: req.flags & conn::RX_MARKERS != 0,
            crc: req.flags & conn::CRC != 0,
            rev: req.mpa_rev as u8,
            ird: req.ird as u16,
            ord: req.ord as u16,
            p2p: req.flags & conn::RTR != 0,
            rtr: RtrTypes { send: req.flags & conn::RTR_SEND != 0, write: req.flags & conn::RTR_WRITE != 0, read: req.flags & conn::RTR_READ != 0 },
            extensions: req.flags & conn::EXTENSIONS != 0,
        };
        let initiator = req.role == abi::role::INITIATOR;
        let (sock, side) = match from {
            SocketFrom::Fd => (TcpSocket::adopt(req.fd)?, if initiator { Side::Initiator } else { Side::Responder }),
            SocketFrom::Connect(to) => (TcpSocket::connect(&to, None)?, Side::Initiator),
            SocketFrom::Request(p) => (p.sock, Side::Accepting(p.handshake)),
        };
        match qp::establish(sock, side, &local, &private, req.timeout_ms) {
            Ok(est) => {
                give(&est.peer_private, req.peer_private, req.peer_private_cap)?;
                Ok(est)
            }
            Err(Failed::Rejected(theirs)) => {
                give(&theirs, req.peer_private, req.peer_private_cap)?;
                req.peer_private_len = theirs.len() as u32;
                req.negotiated = conn::REJECTED;
                Err(econnrefused())
            }
            Err(Failed::Error(e)) => Err(e),
        }
    }

    /// LISTEN.
    pub(super) fn listen(&self, req: &mut Listen) -> Result {
        let at = socket_endpoint(&req.at)?;
        if req.listener != 0 || req.reserved != 0 || !(1..=1024).contains(&req.backlog) {
            return Err(EINVAL);
        }
        let mut listeners = self.listeners.lock();
        // Checked first, so a socket is not made for nothing.
        listeners.next_handle()?;
        let (sock, bound) = TcpSocket::listen(&at, req.backlog, false, 0)?;
        req.at.port = bound;
        let listener = Listener::new(sock, None)?;
        match listeners.insert(listener.clone()) {
            Ok(handle) => req.listener = handle,
            Err(e) => {
                // It stays alive until shut down.
                listener.shutdown();
                return Err(e);
            }
        }
        Ok(())
    }

    /// CLOSE_LISTENER: a GET_REQUEST waiting on the listener returns at once.
    pub(super) fn close_listener(&self, req: &HandleOp) -> Result {
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        let listener = self.listeners.lock().remove(req.handle)?;
        listener.shutdown();
        Ok(())
    }

    /// GET_REQUEST: the next connection on a listener and its MPA request, held as a pending
    /// request until ACCEPT or REJECT (or until the file closes).
    pub(super) fn get_request(&self, req: &mut GetRequest) -> Result {
        let outs_zero = req.peer_private_len == 0
            && req.request == 0
            && req.rev == 0
            && req.flags == 0
            && req.ird == 0
            && req.ord == 0
            && req.peer == abi::Endpoint::default();
        if !outs_zero || !(1..=60_000).contains(&req.timeout_ms) {
            return Err(EINVAL);
        }
        let listener = self.listeners.lock().get(req.listener)?.clone();
        let (pending, peer) = listener.next(req.timeout_ms)?;
        {
            let asked = pending.request()?;
            req.rev = u32::from(asked.rev);
            req.flags = (if asked.markers { conn::RX_MARKERS } else { 0 })
                | (if asked.crc { conn::CRC } else { 0 })
                | (if asked.extensions { conn::EXTENSIONS } else { 0 });
            if let Some(e) = asked.enhanced {
                (req.ird, req.ord) = (u32::from(e.ird), u32::from(e.ord));
            }
            give(asked.private, req.peer_private, req.peer_private_cap)?;
            req.peer_private_len = asked.private.len() as u32;
        }
        req.peer = endpoint(&peer);
        req.request = self.requests.lock().insert(pending)?;
        Ok(())
    }

    /// REJECT: answers a pending request with a reject frame, then closes its connection.
    pub(super) fn reject(&self, req: &Reject) -> Result {
        if req.private_len > MAX_PRIVATE_DATA {
            return Err(EINVAL);
        }
        let pending = self.requests.lock().remove(req.request)?;
        pending.reject(&private_data(req.private_data, req.private_len)?)
    }

    /// DISCONNECT.
    pub(super) fn disconnect(&self, req: &HandleOp) -> Result {
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        self.qp(req.handle)?.disconnect()
    }
}
