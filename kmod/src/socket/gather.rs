// SPDX-License-Identifier: GPL-2.0

//! Receiving without a copy, under the socket lock ([`Locked`]). In order: tcp_read_sock()
//! offers the queued stream from the first unread octet on, skb by skb. At the first skb the
//! actor gathers the addresses of every queued octet (linear parts and page fragments of this and
//! the following skbs) into at most [`GATHER_MAX`] pieces and offers them to the caller, which
//! says how many octets it consumed; the actor then consumes that many, across as many skbs as it
//! takes. What is left stays queued for the next read, with more data. When a peer's segments are
//! so small that the pieces run out before one FPDU is whole (a long FPDU in 100-octet segments,
//! or one octet at a time), the queued octets are copied once into a [`BOUNCE`] buffer, which
//! holds the longest FPDU MPA allows, and offered from there: segment boundaries never decide
//! whether a valid stream is received. Out of order: the runs of
//! contiguous octets in TCP's out-of-order queue, offered the same way but only to look at (TCP
//! delivers them in order later; docs/ooo-placement.md).

use super::{seq_after, TcpSocket};
use crate::error::eproto;
use crate::ffi;
use core::ffi::{c_int, c_void};
use kernel::bindings::{sk_buff, socket};
use kernel::error::to_result;
use kernel::prelude::*;

/// Most pieces one offer holds.
const GATHER_MAX: usize = 64;

/// The bounce buffer: the longest FPDU (a 65,535-octet ULPDU with its length field, pad and
/// CRC: 65,544 octets) with markers as close as they may be set (every 8 octets: as many marker
/// octets again), and room to spare.
const BOUNCE: usize = 132 * 1024;

/// Calls `visit` on each piece of `skb`'s octets from `off` on, in order (linear part, page
/// fragments, frag list); false as soon as `visit` is (it wants no more), or the skb's pages
/// cannot be read (device memory).
///
/// # Safety
///
/// `skb` is a queued skb of a socket whose lock the caller holds.
unsafe fn each_piece(skb: *mut sk_buff, mut off: u32, visit: &mut impl FnMut(*const u8, u32) -> bool) -> bool {
    // The octets of a piece of `len` octets at `base` from `*off` on (none if `*off` is past it).
    let mut from = |base: *const u8, len: u32, off: &mut u32| {
        if *off >= len {
            *off -= len;
            return true;
        }
        let skip = core::mem::take(off);
        len == skip || visit(base.wrapping_add(skip as usize), len - skip)
    };
    let mut len = 0;
    // SAFETY: `skb` is live under the socket lock (the caller's contract).
    let head = unsafe { ffi::iwarp_shim_skb_head(skb, &mut len) };
    if !from(head, len, &mut off) {
        return false;
    }
    // SAFETY: as above.
    let nr = unsafe { ffi::iwarp_shim_skb_nr_frags(skb) };
    if nr < 0 {
        return false;
    }
    for i in 0..nr {
        // SAFETY: as above, and `i` is below the fragment count.
        let frag = unsafe { ffi::iwarp_shim_skb_frag(skb, i, &mut len) };
        if !from(frag, len, &mut off) {
            return false;
        }
    }
    // SAFETY: as above.
    let mut inner = unsafe { ffi::iwarp_shim_skb_frag_list(skb) };
    while !inner.is_null() {
        // SAFETY: skbs of a queued skb's frag list live as long as it does.
        let len = unsafe { ffi::iwarp_shim_skb_len(inner) };
        if off < len {
            // SAFETY: as above.
            if !unsafe { each_piece(inner, off, visit) } {
                return false;
            }
            off = 0;
        } else {
            off -= len;
        }
        // SAFETY: as above.
        inner = unsafe { ffi::iwarp_shim_skb_next(inner) };
    }
    true
}

/// Calls `visit` on each piece of the in-order stream queued on `sock`, from octet `offset` of
/// `skb` on; false if `visit` wanted no more before the queue ended.
///
/// # Safety
///
/// `skb` is queued on `sock`'s receive queue, and the caller holds `sock`'s lock.
unsafe fn each_queued(sock: *mut socket, skb: *mut sk_buff, offset: u32, visit: &mut impl FnMut(*const u8, u32) -> bool) -> bool {
    let (mut next, mut off) = (skb, offset);
    // The sequence number just past the octets visited so far.
    // SAFETY: every skb is queued on `sock`, whose lock is held (here and below).
    let mut end = unsafe { ffi::iwarp_shim_skb_seq(skb) }.wrapping_add(offset);
    loop {
        // SAFETY: see above.
        if !unsafe { each_piece(next, off, visit) } {
            return false;
        }
        // SAFETY: see above.
        let (seq, len) = unsafe { (ffi::iwarp_shim_skb_seq(next), ffi::iwarp_shim_skb_len(next)) };
        if seq_after(seq.wrapping_add(len), end) {
            end = seq.wrapping_add(len);
        }
        // SAFETY: see above.
        next = unsafe { ffi::iwarp_shim_rx_next(sock, next) };
        if next.is_null() {
            return true;
        }
        // Queued skbs may overlap: TCP queues a segment that starts below rcv_nxt (a
        // retransmission or duplicate that also carries new octets) whole, as
        // tcp_read_sock() knows. Go on from the first octet not visited yet.
        // SAFETY: see above.
        let seq = unsafe { ffi::iwarp_shim_skb_seq(next) };
        if seq_after(seq, end) {
            return true;
        }
        off = end.wrapping_sub(seq);
    }
}

/// Octets `[base, base + len)` of a queued skb.
#[derive(Clone, Copy)]
struct Piece {
    base: *const u8,
    len: usize,
}

/// The pieces of one offer. A QP's receive side keeps one, allocated when it connects: it is
/// used in the socket's callback, where nothing may be allocated but atomically.
pub(crate) struct Gather {
    parts: [Piece; GATHER_MAX],
    n: usize,
}

impl Gather {
    /// Adds a piece; false when the offer is full.
    fn add(&mut self, base: *const u8, len: u32) -> bool {
        if len == 0 {
            return true;
        }
        if self.n == GATHER_MAX {
            return false;
        }
        self.parts[self.n] = Piece { base, len: len as usize };
        self.n += 1;
        true
    }

    /// Adds the octets of `skb` from `off` on; false when the offer is full or the skb's pages
    /// cannot be read (device memory).
    ///
    /// # Safety
    ///
    /// `skb` is a queued skb of a socket whose lock the caller holds.
    unsafe fn add_skb(&mut self, skb: *mut sk_buff, off: u32) -> bool {
        // SAFETY: the caller's contract.
        unsafe { each_piece(skb, off, &mut |base, len| self.add(base, len)) }
    }
}

// SAFETY: the pieces point into skbs only while the read that gathered them runs (under the
// socket lock, on one thread); every read and walk starts by emptying the gather, so a stale
// pointer is never used, wherever the gather has moved.
unsafe impl Send for Gather {}

impl Gather {
    pub(crate) fn new() -> Result<KBox<Gather>> {
        Ok(KBox::new(Gather { parts: [Piece { base: core::ptr::null(), len: 0 }; GATHER_MAX], n: 0 }, GFP_KERNEL_ACCOUNT)?)
    }

    /// Offers the gathered pieces to `f`.
    ///
    /// # Safety
    ///
    /// Every piece lies in a queued skb that stays queued (and its octets unchanged) while `f`
    /// runs: the socket lock is held.
    unsafe fn offer<R>(&self, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        const NONE: &[u8] = &[];
        let mut slices = [NONE; GATHER_MAX];
        for (s, p) in slices.iter_mut().zip(&self.parts[..self.n]) {
            // SAFETY: see the function's contract.
            *s = unsafe { core::slice::from_raw_parts(p.base, p.len) };
        }
        f(&slices[..self.n])
    }
}

/// One read of the queued stream in progress.
struct Reader<'g, F> {
    sock: *mut socket,
    f: F,
    gather: &'g mut Gather,
    /// Allocated when first needed (if sleeping is allowed): a copy of the queued octets, when
    /// the pieces were too many.
    bounce: Option<KVVec<u8>>,
    may_sleep: bool,
    /// The pieces were too many, and sleeping (to allocate the bounce buffer) not allowed.
    wants_copy: bool,
    /// Octets the caller consumed that are not yet consumed from the queue.
    skip: usize,
    /// The caller wants no more offers in this read.
    stop: bool,
    /// Octets the caller consumed from copies.
    copied: usize,
}

impl<F: FnMut(&[&[u8]], bool) -> isize> Reader<'_, F> {
    /// tcp_read_sock()'s actor: `skb`'s octets from `offset` on (`len` of them) are next.
    ///
    /// # Safety
    ///
    /// Called by tcp_read_sock() on `self.sock`, under its lock, with a queued skb.
    unsafe fn offer(&mut self, skb: *mut sk_buff, offset: u32, len: usize) -> c_int {
        if self.skip == 0 {
            if self.stop {
                return 0;
            }
            self.gather.n = 0;
            let gather = &mut *self.gather;
            // SAFETY: `skb` is queued on `self.sock`, whose lock is held (the function's contract).
            let capped = !unsafe { each_queued(self.sock, skb, offset, &mut |base, len| gather.add(base, len)) };
            let f = &mut self.f;
            // SAFETY: the pieces lie in skbs queued on `self.sock`, whose lock is held; they stay
            // until this actor consumes them. A copy follows if nothing of them can be consumed,
            // so this is not the caller's last chance.
            let mut rc = unsafe { self.gather.offer(|parts| f(parts, false)) };
            let mut more = capped;
            if rc == 0 && capped && !self.may_sleep {
                self.wants_copy = true;
                self.stop = true;
                return 0;
            }
            if rc == 0 && capped {
                // SAFETY: as above.
                match unsafe { self.offer_copy(skb, offset) } {
                    Ok((n, m)) => (rc, more, self.copied) = (n, m, self.copied + n.max(0) as usize),
                    // SAFETY: as above. Without a bounce buffer, the pieces are all there is.
                    Err(_) => rc = unsafe { self.gather.offer(|parts| (self.f)(parts, true)) },
                }
            }
            if rc <= 0 {
                self.stop = true;
                return 0;
            }
            self.skip = rc as usize;
            // Everything queued was offered: once it is consumed, wait for more.
            self.stop = !more;
        }
        let used = self.skip.min(len);
        self.skip -= used;
        used as c_int
    }

    /// Copies as much of the queued stream as [`BOUNCE`] holds, from octet `offset` of `skb` on,
    /// and offers it as one piece: what the caller consumed, and whether more is queued.
    ///
    /// # Safety
    ///
    /// As for [`Reader::offer`].
    unsafe fn offer_copy(&mut self, skb: *mut sk_buff, offset: u32) -> Result<(isize, bool)> {
        let buf = match &mut self.bounce {
            Some(b) => b,
            none => none.insert(KVVec::from_elem(0u8, BOUNCE, GFP_KERNEL_ACCOUNT)?),
        };
        let mut filled = 0;
        let mut copy = |base: *const u8, len: u32| {
            let n = (len as usize).min(BOUNCE - filled);
            // SAFETY: the piece lies in a queued skb of the locked socket (the function's
            // contract) and `buf` has room for `n` more octets at `filled`.
            unsafe { core::ptr::copy_nonoverlapping(base, buf.as_mut_ptr().add(filled), n) };
            filled += n;
            n == len as usize
        };
        // SAFETY: the function's contract.
        let more = !unsafe { each_queued(self.sock, skb, offset, &mut copy) };
        // The caller's last chance: nothing longer can be offered.
        Ok(((self.f)(&[&buf[..filled]], more), more))
    }
}

/// The socket's lock, held (process context): the receive and out-of-order queues stay as they
/// are while this lives, except for what [`Locked::read`] consumes.
///
/// # Invariants
///
/// `sock`'s socket lock is held by this value and released on drop.
pub(crate) struct Locked<'a> {
    sock: &'a TcpSocket,
}

impl TcpSocket {
    /// Takes the socket lock (may sleep). TCP queues what arrives meanwhile in its backlog and
    /// processes it when the lock is released.
    pub(crate) fn lock(&self) -> Locked<'_> {
        // SAFETY: the socket reference is live; the guard releases the lock exactly once.
        unsafe { ffi::iwarp_shim_sock_lock(self.sock.as_ptr()) };
        Locked { sock: self }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: the lock is held by this guard (type invariant).
        unsafe { ffi::iwarp_shim_sock_release(self.sock.sock.as_ptr()) };
    }
}

/// What a read of the queued stream did.
pub(crate) struct Read {
    /// Octets the caller consumed from a copy (the bounce buffer).
    pub(crate) copied: usize,
    /// The caller was offered less than it needs and a copy could not be made here (no sleeping
    /// allowed): a read that may sleep must follow.
    pub(crate) wants_copy: bool,
}

/// Offers the stream queued on `sock` to `f` (see [`Locked::read`]). EPROTO if the peer sent
/// urgent data (MPA never does; TCP would not deliver the stream past it to us).
///
/// # Safety
///
/// `sock` is live and its lock is held: owned (lock_sock) by this thread, or its spinlock held
/// by TCP around the data-ready callback this runs in; `may_sleep` only in the former case.
unsafe fn read_queued<F: FnMut(&[&[u8]], bool) -> isize>(sock: *mut socket, gather: &mut Gather, may_sleep: bool, f: F) -> Result<Read> {
    /// TCP's read actor.
    ///
    /// # Safety
    ///
    /// `ctx` is the `Reader` below and `skb` a live skb of the socket being read.
    unsafe extern "C" fn actor<F: FnMut(&[&[u8]], bool) -> isize>(ctx: *mut c_void, skb: *mut sk_buff, offset: u32, len: usize) -> c_int {
        // SAFETY: `ctx` is the `Reader` passed to iwarp_shim_sock_read() below, alive for the
        // whole read and used by nobody else meanwhile.
        let reader = unsafe { &mut *ctx.cast::<Reader<'_, F>>() };
        // SAFETY: tcp_read_sock() calls its actor under the socket lock with queued skbs.
        unsafe { reader.offer(skb, offset, len) }
    }
    let mut reader = Reader { sock, f, gather, bounce: None, may_sleep, wants_copy: false, skip: 0, stop: false, copied: 0 };
    // SAFETY: the socket is live and locked (the function's contract); `reader` outlives the
    // call, and the shim calls the actor only during it.
    let rc = unsafe { ffi::iwarp_shim_sock_read(sock, (&raw mut reader).cast(), Some(actor::<F>)) };
    to_result(rc)?;
    if reader.skip != 0 {
        // TCP stopped before the octets the caller consumed (urgent data arrived meanwhile):
        // the stream and the caller are out of step.
        return Err(eproto());
    }
    Ok(Read { copied: reader.copied, wants_copy: reader.wants_copy })
}

/// Proof that the code holding it runs in the socket's data-ready callback, where TCP holds the
/// socket locked (softirq with its spinlock, or its owner processing the backlog).
pub(crate) struct InCallback(());

impl InCallback {
    /// # Safety
    ///
    /// Only the hook's data-ready trampoline makes one, for the socket it was called for, and
    /// it lives no longer than that call.
    pub(super) unsafe fn new() -> InCallback {
        InCallback(())
    }
}

impl TcpSocket {
    /// [`Locked::read`] from the data-ready callback: no sleeping, so no bounce buffer (the
    /// result says when one was needed).
    pub(crate) fn read_in_callback<F: FnMut(&[&[u8]], bool) -> isize>(&self, _in: &InCallback, gather: &mut Gather, f: F) -> Result<Read> {
        // SAFETY: the socket is live; `InCallback` proves TCP holds its lock around this call.
        unsafe { read_queued(self.sock.as_ptr(), gather, false, f) }
    }
}

impl Locked<'_> {
    /// Offers the queued stream to `f` as the pieces of the stream from the first unread octet
    /// on, without copying (or, if those pieces are too many to consume anything from, copied
    /// once into one), and whether this was `f`'s last chance: more is queued, and nothing
    /// longer can be offered. `f` returns how many octets it consumed (0 or less: stop).
    pub(crate) fn read<F: FnMut(&[&[u8]], bool) -> isize>(&self, gather: &mut Gather, f: F) -> Result<Read> {
        // SAFETY: the socket is live and this thread holds its lock (type invariant).
        unsafe { read_queued(self.sock.sock.as_ptr(), gather, true, f) }
    }

    /// Offers each run of contiguous octets in TCP's out-of-order queue to `f`, lowest first,
    /// with its distance in octets from the first unread octet; a run is cut at [`GATHER_MAX`]
    /// pieces, and the walk ends there. Nothing is consumed: TCP delivers these octets in order
    /// once the holes before them are filled.
    pub(crate) fn out_of_order(&self, gather: &mut Gather, mut f: impl FnMut(u32, &[&[u8]])) -> Result {
        let sock = self.sock.sock.as_ptr();
        // SAFETY: the socket is live and locked, so its out-of-order queue and its skbs stay as
        // they are while we walk them (here and below).
        let copied = unsafe { ffi::iwarp_shim_sock_copied_seq(sock) };
        // SAFETY: see above.
        let mut skb = unsafe { ffi::iwarp_shim_ooo_first(sock) };
        while !skb.is_null() {
            // SAFETY: see above.
            let start = unsafe { ffi::iwarp_shim_skb_seq(skb) };
            let (mut end, mut capped) = (start, false);
            gather.n = 0;
            while !skb.is_null() {
                // SAFETY: see above.
                let (seq, len) = unsafe { (ffi::iwarp_shim_skb_seq(skb), ffi::iwarp_shim_skb_len(skb)) };
                if seq_after(seq, end) {
                    break;
                }
                // Queued skbs may overlap in part: go on from the first octet not gathered yet.
                let skip = end.wrapping_sub(seq);
                if skip < len {
                    // SAFETY: see above.
                    if !unsafe { gather.add_skb(skb, skip) } {
                        capped = true;
                        break;
                    }
                    end = seq.wrapping_add(len);
                }
                // SAFETY: see above.
                skb = unsafe { ffi::iwarp_shim_ooo_next(skb) };
            }
            // SAFETY: the pieces lie in skbs of the locked socket's out-of-order queue.
            unsafe { gather.offer(|parts| f(start.wrapping_sub(copied), parts)) };
            if capped {
                break;
            }
        }
        Ok(())
    }
}
