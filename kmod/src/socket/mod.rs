// SPDX-License-Identifier: GPL-2.0

//! A kernel TCP socket (`shim/net_shim.c`) behind a safe owner that shuts the connection down
//! and drops its reference when it goes; the [`Hook`] that runs a QP's work when the socket
//! calls back, and the out-of-order [`Doorbell`] (`hook`); the [`Waker`] that runs a listener's
//! work when it or a connection it watches calls back (`waker`); receiving straight from the
//! socket's buffers, in order and out of order, under its lock (`gather`).

mod gather;
mod hook;
mod waker;

pub(crate) use gather::{Gather, InCallback};
pub(crate) use hook::{Doorbell, Hook, OnReceive, Wake};
pub(crate) use waker::{OnWake, Waker, Watched};

use crate::error::made;
use crate::ffi;
use crate::frags::PageFrag;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use hook::TxWatch;
use kernel::bindings;
use kernel::error::to_result;
use kernel::prelude::*;

/// One end of a TCP connection.
#[derive(Clone, Copy, Default)]
pub(crate) struct Endpoint {
    /// `AF_INET` or `AF_INET6`; 0 where there is none.
    pub(crate) family: u16,
    pub(crate) port: u16,
    /// In network order: IPv4 in the first 4 octets, IPv6 in all 16.
    pub(crate) addr: [u8; 16],
    /// IPv6: the interface a link-local address is on; else 0.
    pub(crate) scope_id: u32,
}

impl From<Endpoint> for ffi::iwarp_endpoint {
    fn from(e: Endpoint) -> Self {
        ffi::iwarp_endpoint { family: e.family, port: e.port, addr: e.addr, scope_id: e.scope_id }
    }
}

impl From<&ffi::iwarp_endpoint> for Endpoint {
    fn from(e: &ffi::iwarp_endpoint) -> Self {
        Endpoint { family: e.family, port: e.port, addr: e.addr, scope_id: e.scope_id }
    }
}

/// Whether TCP sequence number `a` comes after `b` (modulo 2^32, as the kernel's `after()`).
pub(crate) fn seq_after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}

/// A reference to a kernel TCP socket: connected, or listening.
///
/// # Invariants
///
/// `sock` points to a `struct socket` with a file, on which this value holds one reference
/// (taken by the shim's adopt, connect, listen or accept); it stays valid until drop, which
/// shuts the connection down and drops that reference. `watch` does not move while the socket
/// lives (a [`Hook`] hands its address to the C side).
pub(crate) struct TcpSocket {
    sock: NonNull<bindings::socket>,
    watch: KBox<TxWatch>,
}

// SAFETY: the reference is owned by this value and dropped once; the socket layer serializes
// concurrent senders and receivers itself (the socket lock).
unsafe impl Send for TcpSocket {}
// SAFETY: see above: every operation is safe to call from several threads at once.
unsafe impl Sync for TcpSocket {}

impl TcpSocket {
    /// Owns the reference `sock` (dropped here too if allocating fails).
    fn new(sock: NonNull<bindings::socket>) -> Result<TcpSocket> {
        match KBox::new(TxWatch::default(), GFP_KERNEL_ACCOUNT) {
            Ok(watch) => Ok(TcpSocket { sock, watch }),
            Err(e) => {
                // SAFETY: the caller handed over its one reference, dropped exactly once here.
                unsafe { ffi::iwarp_shim_sock_put(sock.as_ptr()) };
                Err(e.into())
            }
        }
    }

    /// Takes a reference on the established TCP socket behind the caller's descriptor `fd`.
    pub(crate) fn adopt(fd: i32) -> Result<TcpSocket> {
        // SAFETY: the shim validates `fd` through sockfd_lookup().
        TcpSocket::new(made(unsafe { ffi::iwarp_shim_sock_adopt(fd) })?)
    }

    /// A new TCP socket of the caller's connecting to `to` (IPv4 or IPv6; EAFNOSUPPORT
    /// otherwise), from `from` if given and of `to`'s family (port 0, or a port another socket
    /// holds: any): [`TcpSocket::connected`] says when it is.
    pub(crate) fn connect(to: &Endpoint, from: Option<&Endpoint>) -> Result<TcpSocket> {
        let to = ffi::iwarp_endpoint::from(*to);
        let from = from.map(|f| ffi::iwarp_endpoint::from(*f));
        let from_ptr = from.as_ref().map_or(core::ptr::null(), core::ptr::from_ref);
        // SAFETY: `to` and `from` are live locals (or `from_ptr` is NULL), read during the call.
        TcpSocket::new(made(unsafe { ffi::iwarp_shim_sock_connect(&to, from_ptr) })?)
    }

    /// Whether the connection is made (true, whatever happened after), still being made
    /// (false), or failed (why, reported once).
    pub(crate) fn connected(&self) -> Result<bool> {
        // SAFETY: the socket reference is live.
        match unsafe { ffi::iwarp_shim_sock_connected(self.sock.as_ptr()) } {
            0 => Ok(true),
            rc if rc == -(bindings::EINPROGRESS as i32) => Ok(false),
            rc => Err(Error::from_errno(rc)),
        }
    }

    /// A new TCP socket of the caller's listening on `at` (port 0: any) and the port it bound.
    /// With `v6only` an IPv6 listener takes IPv6 connections only; with an `ifindex` (not 0),
    /// only connections arriving on that netdev.
    pub(crate) fn listen(at: &Endpoint, backlog: u32, v6only: bool, ifindex: i32) -> Result<(TcpSocket, u16)> {
        let (at, mut port) = (ffi::iwarp_endpoint::from(*at), 0);
        // SAFETY: `at` and `port` are live locals, used during the call.
        let raw = unsafe { ffi::iwarp_shim_sock_listen(&at, &mut port, backlog as i32, v6only, ifindex) };
        Ok((TcpSocket::new(made(raw)?)?, port))
    }

    /// The next connection queued on this listening socket (EAGAIN: none yet), and its peer.
    pub(crate) fn accept(&self) -> Result<(TcpSocket, Endpoint)> {
        // Made first, so that a connection accepted is always returned: it has its listener's
        // callbacks until the caller decides.
        let watch = KBox::new(TxWatch::default(), GFP_KERNEL_ACCOUNT)?;
        let mut peer = ffi::iwarp_endpoint::from(Endpoint::default());
        // SAFETY: the socket reference is live; `peer` is a live local.
        let raw = unsafe { ffi::iwarp_shim_sock_accept(self.sock.as_ptr(), &mut peer) };
        Ok((TcpSocket { sock: made(raw)?, watch }, Endpoint::from(&peer)))
    }

    /// Queues as much of `frags`, in order, as the send buffer takes now, by reference (TCP
    /// takes its own page references and copies nothing); when it cannot take all, the hook's
    /// transmit work runs once it can take more. The fragments are records of `records[i]`
    /// octets; with `eor` each record ends its skb, so the next one starts a new skb (and a new
    /// segment). With `more`, the caller sends more at once: TCP holds the last partial segment
    /// to send it with that. Returns the octets taken, and sets `end_seq` to the sequence number
    /// just past what TCP has. Every fragment must be valid during the call.
    pub(crate) fn send_frags(&self, frags: &mut [PageFrag], records: &[u32], eor: bool, more: bool, end_seq: &mut u32) -> Result<usize> {
        let len: usize = records.iter().map(|&r| r as usize).sum();
        if len != frags.iter().map(|f| f.len() as usize).sum::<usize>() {
            return Err(EINVAL);
        }
        // Set first: a write_space between a refusal and our return must not be missed.
        self.watch.blocked.store(true, Ordering::SeqCst);
        // SAFETY: the socket reference is live; each fragment names a page that is allocated
        // during the call (see above), which TCP references before it returns; `records` is
        // valid for reads of its length and sums to the fragments' octets (checked above);
        // `end_seq` is a live exclusive reference.
        let rc = unsafe {
            ffi::iwarp_shim_sock_send_pages(self.sock.as_ptr(), PageFrag::as_bio_vecs(frags), frags.len(), records.as_ptr(), records.len(), eor, more, end_seq)
        };
        if rc < 0 {
            return Err(Error::from_errno(rc as i32));
        }
        if rc as usize == len {
            self.watch.blocked.store(false, Ordering::SeqCst);
        }
        Ok(rc as usize)
    }

    /// Sends what is written at once, without waiting to fill a segment (TCP_NODELAY): an
    /// FPDU is a record of its own, and Nagle would hold the last one of a burst.
    pub(crate) fn set_nodelay(&self) {
        // SAFETY: the socket reference is live.
        unsafe { ffi::iwarp_shim_sock_nodelay(self.sock.as_ptr()) }
    }

    /// The oldest sequence number the peer has not acknowledged.
    pub(crate) fn snd_una(&self) -> u32 {
        // SAFETY: the socket reference is live; the shim reads one field.
        unsafe { ffi::iwarp_shim_sock_snd_una(self.sock.as_ptr()) }
    }

    /// Has the hook's transmit work run once the peer has acknowledged everything before
    /// sequence number `goal`. Read [`TcpSocket::snd_una`] after calling this, so no
    /// acknowledgement falls in between.
    pub(crate) fn watch_acks(&self, goal: u32) {
        self.watch.arm(goal);
        // SAFETY: the socket reference is live; the shim sets a flag and orders it after the
        // stores above.
        unsafe { ffi::iwarp_shim_sock_want_write_space(self.sock.as_ptr()) }
    }

    /// The connection's current MSS.
    pub(crate) fn mss(&self) -> u32 {
        // SAFETY: the socket reference is live; the shim only reads one field.
        unsafe { ffi::iwarp_shim_sock_mss(self.sock.as_ptr()) }
    }

    /// Sends as much of `buf` as the send buffer takes now, without waiting: how much (EAGAIN
    /// if it takes nothing; the socket's write_space callback follows once it can).
    pub(crate) fn send_nowait(&self, buf: &[u8]) -> Result<usize> {
        // SAFETY: the socket reference is live; `buf` is valid for reads of its length.
        let rc = unsafe { ffi::iwarp_shim_sock_send_nowait(self.sock.as_ptr(), buf.as_ptr().cast(), buf.len()) };
        to_result(rc)?;
        Ok(rc as usize)
    }

    /// Receives what is queued now, up to all of `buf`, without waiting: how much (EAGAIN if
    /// nothing is there, ECONNRESET once the peer closed).
    pub(crate) fn recv_nowait(&self, buf: &mut [u8]) -> Result<usize> {
        // SAFETY: the socket reference is live; `buf` is valid for writes of its length.
        let rc = unsafe { ffi::iwarp_shim_sock_recv_nowait(self.sock.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        to_result(rc)?;
        Ok(rc as usize)
    }

    /// Whether the connection is still established (no FIN, reset or close seen).
    pub(crate) fn established(&self) -> bool {
        // SAFETY: the socket reference is live; the shim reads one field.
        unsafe { ffi::iwarp_shim_sock_established(self.sock.as_ptr()) }
    }

    /// Our end and the peer's end of the connection (family 0 where there is none).
    pub(crate) fn endpoints(&self) -> (Endpoint, Endpoint) {
        let mut ends = [ffi::iwarp_endpoint::from(Endpoint::default()); 2];
        let [local, remote] = &mut ends;
        // SAFETY: the socket reference is live; both pointers are valid for writes of one
        // endpoint each.
        unsafe { ffi::iwarp_shim_sock_endpoints(self.sock.as_ptr(), local, remote) };
        (Endpoint::from(&ends[0]), Endpoint::from(&ends[1]))
    }

    /// Segments of this connection the out-of-order doorbell rang for (0 if not hooked).
    pub(crate) fn doorbells(&self) -> u64 {
        // SAFETY: the socket reference is live; the shim looks the hook up under its lock.
        unsafe { ffi::iwarp_shim_sock_doorbells(self.sock.as_ptr()) }
    }

    /// Has the hook on this socket (if any) run its transmit work soon.
    pub(crate) fn kick_transmit(&self) {
        // SAFETY: the socket reference is live; the shim looks the hook up under its lock.
        unsafe { ffi::iwarp_shim_sock_kick(self.sock.as_ptr(), true) }
    }

    /// Has the hook on this socket (if any) run its receive work soon.
    pub(crate) fn kick_receive(&self) {
        // SAFETY: as for `kick_transmit`.
        unsafe { ffi::iwarp_shim_sock_kick(self.sock.as_ptr(), false) }
    }

    /// How many packets TCP has queued out of order so far on this connection (exact under the
    /// socket lock): when it has not changed, the out-of-order queue holds nothing new.
    pub(crate) fn ooo_packets(&self) -> u32 {
        // SAFETY: the socket reference is live; the shim reads one field.
        unsafe { ffi::iwarp_shim_sock_ooo_packets(self.sock.as_ptr()) }
    }

    /// In-order octets TCP holds that nobody has read yet.
    pub(crate) fn unread(&self) -> u32 {
        // SAFETY: the socket reference is live; the shim reads two fields.
        unsafe { ffi::iwarp_shim_sock_unread(self.sock.as_ptr()) }
    }

    /// Shuts the socket down both ways (a listener: it stops listening).
    pub(crate) fn shutdown(&self) {
        // SAFETY: the socket reference is live.
        unsafe { ffi::iwarp_shim_sock_shutdown(self.sock.as_ptr(), false) }
    }

    /// Ends our sending (the peer sees a FIN after what is queued) but keeps receiving: what the
    /// peer still sends is left unread instead of drawing a reset, which would throw away what
    /// TCP has not delivered yet (the last data, a Terminate) before the FIN.
    pub(crate) fn shutdown_send(&self) {
        // SAFETY: the socket reference is live.
        unsafe { ffi::iwarp_shim_sock_shutdown(self.sock.as_ptr(), true) }
    }
}

impl Drop for TcpSocket {
    fn drop(&mut self) {
        // SAFETY: the reference came from iwarp_shim_sock_adopt() and is dropped exactly once.
        unsafe { ffi::iwarp_shim_sock_put(self.sock.as_ptr()) };
    }
}
