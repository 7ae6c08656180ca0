// SPDX-License-Identifier: GPL-2.0

//! A connected kernel TCP socket adopted from a user descriptor (`shim/net_shim.c`), behind a
//! safe owner that shuts the connection down and drops its reference when it goes; and the
//! [`Hook`] that runs a QP's receive work when data arrives.

use crate::error::made;
use crate::frags::PageFrag;
use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::sync::Arc;

mod ffi {
    use crate::frags::PageFrag;
    use core::ffi::c_void;
    #[repr(C)]
    pub(super) struct Socket {
        _opaque: [u8; 0],
    }
    extern "C" {
        pub(super) fn iwarp_shim_sock_adopt(fd: i32, err: *mut i32) -> *mut Socket;
        pub(super) fn iwarp_shim_sock_put(sock: *mut Socket);
        pub(super) fn iwarp_shim_sock_listen(addr: u32, port: *mut u16, backlog: i32, err: *mut i32) -> *mut Socket;
        pub(super) fn iwarp_shim_sock_accept(listener: *mut Socket, timeout_ms: u32, addr: *mut u32, port: *mut u16, err: *mut i32) -> *mut Socket;
        pub(super) fn iwarp_shim_sock_connect(addr: u32, port: u16, timeout_ms: u32, err: *mut i32) -> *mut Socket;
        pub(super) fn iwarp_shim_sock_send_all(sock: *mut Socket, buf: *const u8, len: usize) -> i32;
        pub(super) fn iwarp_shim_sock_send_pages(sock: *mut Socket, bv: *mut PageFrag, n: usize, len: usize, end_seq: *mut u32) -> isize;
        pub(super) fn iwarp_shim_sock_snd_una(sock: *mut Socket) -> u32;
        pub(super) fn iwarp_shim_sock_watch_acks(sock: *mut Socket, goal: u32);
        pub(super) fn iwarp_shim_sock_mss(sock: *mut Socket) -> u32;
        pub(super) fn iwarp_shim_sock_recv_exact(sock: *mut Socket, buf: *mut u8, len: usize, timeout_ms: u32) -> i32;
        pub(super) fn iwarp_shim_sock_established(sock: *mut Socket) -> bool;
        pub(super) fn iwarp_shim_sock_shutdown(sock: *mut Socket);
        pub(super) fn iwarp_shim_sock_read(
            sock: *mut Socket,
            ctx: *mut c_void,
            f: unsafe extern "C" fn(*mut c_void, *const super::Kvec, usize, bool) -> isize,
            parts: *mut super::Kvec,
            cap: usize,
        ) -> i32;
        pub(super) fn iwarp_shim_hook_install(
            sock: *mut Socket,
            owner: *mut c_void,
            run: unsafe extern "C" fn(*mut c_void),
            run_tx: unsafe extern "C" fn(*mut c_void),
            err: *mut i32,
        ) -> *mut HookRaw;
        pub(super) fn iwarp_shim_sock_kick_tx(sock: *mut Socket);
        pub(super) fn iwarp_shim_hook_remove(h: *mut HookRaw);
    }
    #[repr(C)]
    pub(super) struct HookRaw {
        _opaque: [u8; 0],
    }
}

/// One piece of the received stream (`struct kvec`; the shim asserts the same layout).
#[repr(C)]
#[derive(Clone, Copy)]
struct Kvec {
    base: *const u8,
    len: usize,
}

const _: () = assert!(core::mem::size_of::<Kvec>() == 16 && core::mem::offset_of!(Kvec, len) == 8);

impl Kvec {
    const EMPTY: Kvec = Kvec { base: core::ptr::null(), len: 0 };
}

/// A reference to a kernel TCP socket: connected, or listening.
///
/// # Invariants
///
/// `sock` points to a `struct socket` with a file, on which this value holds one reference
/// (taken by the shim's adopt, connect, listen or accept); it stays valid until drop, which
/// shuts the connection down and drops that reference.
pub(crate) struct TcpSocket {
    sock: NonNull<ffi::Socket>,
}

// SAFETY: the reference is owned by this value and dropped once; the socket layer serializes
// concurrent senders and receivers itself (the socket lock).
unsafe impl Send for TcpSocket {}
// SAFETY: see above: every operation is safe to call from several threads at once.
unsafe impl Sync for TcpSocket {}

impl TcpSocket {
    /// Takes a reference on the established TCP socket behind the caller's descriptor `fd`.
    pub(crate) fn adopt(fd: i32) -> Result<TcpSocket> {
        let mut err = 0;
        // SAFETY: `err` is a live local; the shim validates `fd` through sockfd_lookup().
        let raw = unsafe { ffi::iwarp_shim_sock_adopt(fd, &mut err) };
        made(raw, err).map(|sock| TcpSocket { sock })
    }

    /// A new kernel TCP socket connected to `addr:port` (IPv4, host order) within `timeout_ms`.
    pub(crate) fn connect(addr: u32, port: u16, timeout_ms: u32) -> Result<TcpSocket> {
        let mut err = 0;
        // SAFETY: `err` is a live local; the shim only uses its scalar arguments.
        let raw = unsafe { ffi::iwarp_shim_sock_connect(addr, port, timeout_ms, &mut err) };
        made(raw, err).map(|sock| TcpSocket { sock })
    }

    /// A new kernel TCP socket listening on `addr:port` (IPv4, host order; port 0: any) and the
    /// port it bound.
    pub(crate) fn listen(addr: u32, port: u16, backlog: u32) -> Result<(TcpSocket, u16)> {
        let (mut err, mut port) = (0, port);
        // SAFETY: `err` and `port` are live locals; the shim only uses its scalar arguments.
        let raw = unsafe { ffi::iwarp_shim_sock_listen(addr, &mut port, backlog as i32, &mut err) };
        made(raw, err).map(|sock| (TcpSocket { sock }, port))
    }

    /// The next connection on this listening socket within `timeout_ms`, and its peer's IPv4
    /// address and port.
    pub(crate) fn accept(&self, timeout_ms: u32) -> Result<(TcpSocket, u32, u16)> {
        let (mut err, mut addr, mut port) = (0, 0u32, 0u16);
        // SAFETY: the socket reference is live; the other pointers are live locals.
        let raw = unsafe { ffi::iwarp_shim_sock_accept(self.sock.as_ptr(), timeout_ms, &mut addr, &mut port, &mut err) };
        made(raw, err).map(|sock| (TcpSocket { sock }, addr, port))
    }

    /// Sends all of `buf`, blocking.
    pub(crate) fn send_all(&self, buf: &[u8]) -> Result {
        // SAFETY: the socket reference is live; `buf` is valid for reads of its length.
        to_result(unsafe { ffi::iwarp_shim_sock_send_all(self.sock.as_ptr(), buf.as_ptr(), buf.len()) })
    }

    /// Queues as much of `frags`, in order, as the send buffer takes now, by reference (TCP
    /// takes its own page references and copies nothing); when it cannot take all, the hook's
    /// transmit work runs once it can take more. Returns the octets taken, and sets `end_seq` to
    /// the sequence number just past what TCP has. Every fragment must be valid during the call.
    pub(crate) fn send_frags(&self, frags: &mut [PageFrag], end_seq: &mut u32) -> Result<usize> {
        let len = frags.iter().map(|f| f.len() as usize).sum();
        // SAFETY: the socket reference is live; each fragment names a page that is allocated
        // during the call (see above), which TCP references before it returns; `end_seq` is a
        // live exclusive reference.
        let rc = unsafe { ffi::iwarp_shim_sock_send_pages(self.sock.as_ptr(), frags.as_mut_ptr(), frags.len(), len, end_seq) };
        if rc < 0 {
            return Err(Error::from_errno(rc as i32));
        }
        Ok(rc as usize)
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
        // SAFETY: the socket reference is live; the shim looks the hook up under its lock.
        unsafe { ffi::iwarp_shim_sock_watch_acks(self.sock.as_ptr(), goal) }
    }

    /// The connection's current MSS.
    pub(crate) fn mss(&self) -> u32 {
        // SAFETY: the socket reference is live; the shim only reads one field.
        unsafe { ffi::iwarp_shim_sock_mss(self.sock.as_ptr()) }
    }

    /// Fills all of `buf`, waiting at most `timeout_ms` for each piece.
    pub(crate) fn recv_exact(&self, buf: &mut [u8], timeout_ms: u32) -> Result {
        // SAFETY: the socket reference is live; `buf` is valid for writes of its length.
        to_result(unsafe { ffi::iwarp_shim_sock_recv_exact(self.sock.as_ptr(), buf.as_mut_ptr(), buf.len(), timeout_ms) })
    }

    /// Whether the connection is still established (no FIN, reset or close seen).
    pub(crate) fn established(&self) -> bool {
        // SAFETY: the socket reference is live; the shim reads one field.
        unsafe { ffi::iwarp_shim_sock_established(self.sock.as_ptr()) }
    }

    /// Has the hook on this socket (if any) run its transmit work soon.
    pub(crate) fn kick_transmit(&self) {
        // SAFETY: the socket reference is live; the shim looks the hook up under its lock.
        unsafe { ffi::iwarp_shim_sock_kick_tx(self.sock.as_ptr()) }
    }

    /// Shuts the connection down both ways (the peer sees a FIN).
    pub(crate) fn shutdown(&self) {
        // SAFETY: the socket reference is live.
        unsafe { ffi::iwarp_shim_sock_shutdown(self.sock.as_ptr()) }
    }

    /// Offers the queued stream to `f` (under the socket lock) as the pieces of the stream from
    /// the first unread octet on, without copying, and whether more is queued than fits in one
    /// offer. `f` returns how many octets it consumed (0 or less: stop). Returns the total
    /// consumed.
    pub(crate) fn read<F: FnMut(&[&[u8]], bool) -> isize>(&self, mut f: F) -> Result<usize> {
        unsafe extern "C" fn trampoline<F: FnMut(&[&[u8]], bool) -> isize>(ctx: *mut c_void, parts: *const Kvec, n: usize, capped: bool) -> isize {
            const NONE: &[u8] = &[];
            let mut slices = [NONE; GATHER_MAX];
            let n = n.min(GATHER_MAX);
            for (i, s) in slices.iter_mut().enumerate().take(n) {
                // SAFETY: the shim passes `n` kvecs that point at skb data it holds under the
                // socket lock for the duration of this call.
                let k = unsafe { &*parts.add(i) };
                // SAFETY: as above: `base` is valid for reads of `len` bytes during the call.
                *s = unsafe { core::slice::from_raw_parts(k.base, k.len) };
            }
            // SAFETY: `ctx` is the `&mut F` passed to iwarp_shim_sock_read() below, alive for
            // the whole read and used by nobody else meanwhile.
            let f = unsafe { &mut *ctx.cast::<F>() };
            f(&slices[..n], capped)
        }
        // Where the shim gathers (on the heap: a work item's stack is small).
        let mut parts = KBox::new([Kvec::EMPTY; GATHER_MAX], GFP_KERNEL)?;
        // SAFETY: the socket reference is live; `f` outlives the call and the shim calls the
        // trampoline only during it, with valid kvecs; `parts` holds GATHER_MAX kvecs the shim
        // may write during the call.
        let rc = unsafe { ffi::iwarp_shim_sock_read(self.sock.as_ptr(), (&raw mut f).cast(), trampoline::<F>, parts.as_mut_ptr(), GATHER_MAX) };
        to_result(rc)?;
        Ok(rc as usize)
    }
}

/// Most pieces one offer of [`TcpSocket::read`] holds.
const GATHER_MAX: usize = 64;

/// Work a hook runs.
pub(crate) trait OnReceive: Send + Sync {
    /// Called in process context (a workqueue) after data arrived or the connection changed
    /// state; never twice at once.
    fn on_receive(&self);
    /// Called in process context after [`TcpSocket::kick_transmit`], when the socket can take
    /// more after [`TcpSocket::send_frags`] could not send all, or on the acknowledgement
    /// [`TcpSocket::watch_acks`] waits for; never twice at once, but
    /// possibly alongside `on_receive`.
    fn on_transmit(&self);
}

/// While this lives, data arriving on the socket (or a state change) runs `T::on_receive` on
/// a workqueue. Dropping it restores the socket's callbacks and waits for a running call.
///
/// # Invariants
///
/// `raw` is the shim's hook, installed on a socket that outlives it, whose `owner` pointer is
/// `_owner`'s; it is removed (callbacks restored, works cancelled) exactly once, on drop.
pub(crate) struct Hook<T: OnReceive> {
    raw: NonNull<ffi::HookRaw>,
    /// Kept alive for the hook's runs.
    _owner: Arc<T>,
}

// SAFETY: the hook is owned by this value and removed once; the shim's functions may be called
// from any thread.
unsafe impl<T: OnReceive> Send for Hook<T> {}
// SAFETY: `kick` is safe to call concurrently (queue_work).
unsafe impl<T: OnReceive> Sync for Hook<T> {}

impl<T: OnReceive> Hook<T> {
    /// Hooks `sock` for `owner` (EBUSY if the socket has a user already). `owner` must keep
    /// `sock` alive, which it does by owning it; the hook keeps `owner` alive.
    pub(crate) fn install(sock: &TcpSocket, owner: Arc<T>) -> Result<Hook<T>> {
        unsafe extern "C" fn run<T: OnReceive>(owner: *mut c_void) {
            // SAFETY: `owner` is the `Arc<T>` data pointer stored below; the `Hook` holds that
            // Arc until iwarp_shim_hook_remove() has waited out every run.
            let owner = unsafe { &*owner.cast::<T>() };
            owner.on_receive();
        }
        unsafe extern "C" fn run_tx<T: OnReceive>(owner: *mut c_void) {
            // SAFETY: as for `run`.
            let owner = unsafe { &*owner.cast::<T>() };
            owner.on_transmit();
        }
        let mut err = 0;
        let ptr = Arc::as_ptr(&owner).cast_mut().cast();
        // SAFETY: the socket is live (and outlives the hook, see above); `ptr` stays valid
        // while the hook is installed; `err` is a live local.
        let raw = unsafe { ffi::iwarp_shim_hook_install(sock.sock.as_ptr(), ptr, run::<T>, run_tx::<T>, &mut err) };
        let raw = made(raw, err)?;
        Ok(Hook { raw, _owner: owner })
    }
}

impl<T: OnReceive> Drop for Hook<T> {
    fn drop(&mut self) {
        // SAFETY: installed by iwarp_shim_hook_install() and removed once; after this returns
        // no run is in progress or queued, so `owner` may go.
        unsafe { ffi::iwarp_shim_hook_remove(self.raw.as_ptr()) };
    }
}

impl Drop for TcpSocket {
    fn drop(&mut self) {
        // SAFETY: the reference came from iwarp_shim_sock_adopt() and is dropped exactly once.
        unsafe { ffi::iwarp_shim_sock_put(self.sock.as_ptr()) };
    }
}
