// SPDX-License-Identifier: GPL-2.0

//! The hook on a QP's socket: the C side (`shim/hook_shim.c`) replaces the socket's callbacks
//! and queues work items; everything decided here. Data arriving runs
//! [`OnReceive::on_data_ready`] in the callback itself (softirq, as siw receives), which may ask
//! for the works; a state change, or a segment above `rcv_nxt` (the [`Doorbell`]) runs
//! [`OnReceive::on_receive`] in a work item; a kick, or send buffer freed when [`TxWatch`] asks
//! for it, runs [`OnReceive::on_transmit`].

use super::gather::InCallback;
use super::{seq_after, TcpSocket};
use crate::error::made;
use crate::ffi;
use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::sync::Arc;

/// When freed send buffer must run the transmit work: after a refused send once the socket can
/// take more, and once the peer acknowledged up to a goal. The socket's write_space callback
/// asks [`TxWatch::space`] (softirq context, socket spinlock held: atomics only). Its writers
/// store before they read TCP's state again, so a callback in between is never missed.
#[derive(Default)]
pub(crate) struct TxWatch {
    /// The socket refused part of a send.
    pub(super) blocked: AtomicBool,
    /// Whether `goal` is armed.
    watching: AtomicBool,
    /// The sequence number `snd_una` must reach.
    goal: AtomicU32,
}

impl TxWatch {
    /// Runs the transmit work once `snd_una` reaches `goal`.
    pub(super) fn arm(&self, goal: u32) {
        self.goal.store(goal, Ordering::SeqCst);
        self.watching.store(true, Ordering::SeqCst);
    }

    /// What the write_space callback does, given TCP's `snd_una` and whether the socket can
    /// take more: a mask of the shim's `IWARP_SPACE_*`.
    fn space(&self, snd_una: u32, writeable: bool) -> u32 {
        let mut what = 0;
        if writeable && self.blocked.swap(false, Ordering::SeqCst) {
            what |= ffi::IWARP_SPACE_TRANSMIT;
        }
        if self.watching.load(Ordering::SeqCst) {
            if seq_after(self.goal.load(Ordering::SeqCst), snd_una) {
                what |= ffi::IWARP_SPACE_WATCH;
            } else {
                self.watching.store(false, Ordering::SeqCst);
                what |= ffi::IWARP_SPACE_ACKED;
            }
        }
        what
    }
}

/// What [`OnReceive::on_data_ready`] asks for once it returns.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wake {
    /// Run [`OnReceive::on_receive`]: what needs process context (a Terminate to send, the
    /// connection to end, TCP's out-of-order queue to walk, a copy of tiny segments to make).
    pub(crate) receive: bool,
    /// Run [`OnReceive::on_transmit`]: Read Requests to answer.
    pub(crate) transmit: bool,
}

impl Wake {
    /// As the shim's `IWARP_WAKE_*` mask.
    fn mask(self) -> u32 {
        (if self.receive { ffi::IWARP_WAKE_RX } else { 0 }) | if self.transmit { ffi::IWARP_WAKE_TX } else { 0 }
    }
}

/// Work a hook runs.
pub(crate) trait OnReceive: Send + Sync {
    /// Called in the socket's data-ready callback (softirq, or the socket's owner processing
    /// its backlog), with the socket locked by TCP (`in_callback` proves it): must not sleep.
    fn on_data_ready(&self, in_callback: &InCallback) -> Wake;
    /// Called in the socket's write_space callback (softirq, or the socket's owner processing
    /// its backlog) once the acknowledgement [`TcpSocket::watch_acks`] waits for came, when
    /// receiving in the callback: must not sleep.
    fn on_acked(&self) -> Wake;
    /// Called in process context (a workqueue) after data arrived or the connection changed
    /// state; never twice at once.
    fn on_receive(&self);
    /// Called in process context after [`TcpSocket::kick_transmit`], when the socket can take
    /// more after [`TcpSocket::send_frags`] could not send all, or on the acknowledgement
    /// [`TcpSocket::watch_acks`] waits for when not receiving in the callback (else
    /// `on_acked`); never twice at once, but possibly alongside `on_receive`.
    fn on_transmit(&self);
}

/// While this lives, data arriving on the socket (or a state change) runs `T::on_receive` on
/// a workqueue. Dropping it restores the socket's callbacks and waits for a running call.
///
/// # Invariants
///
/// `raw` is the shim's hook, installed on a socket that outlives it, whose `owner` pointer is
/// `_owner`'s and whose `watch` pointer is that socket's [`TxWatch`]; it is removed (callbacks
/// restored, works cancelled) exactly once, on drop.
pub(crate) struct Hook<T: OnReceive> {
    raw: NonNull<ffi::iwarp_hook>,
    /// Kept alive for the hook's runs.
    _owner: Arc<T>,
}

// SAFETY: the hook is owned by this value and removed once; the shim's functions may be called
// from any thread.
unsafe impl<T: OnReceive> Send for Hook<T> {}
// SAFETY: `&Hook` offers no methods; the shim's callbacks run on their own.
unsafe impl<T: OnReceive> Sync for Hook<T> {}

impl<T: OnReceive> Hook<T> {
    /// Hooks `sock` for `owner` (EBUSY if the socket has a user already), with the
    /// out-of-order [`Doorbell`] if `doorbell`, receiving in the data-ready callback if
    /// `in_callback` (else in the work). `owner` must keep `sock` alive, which it does by owning
    /// it; the hook keeps `owner` alive.
    pub(crate) fn install(sock: &TcpSocket, owner: Arc<T>, doorbell: bool, in_callback: bool) -> Result<Hook<T>> {
        // The shim's callbacks. # Safety (each): `owner` (`watch`) is the pointer this hook
        // gave the shim, called only while the hook is installed.
        #[allow(clippy::missing_safety_doc)]
        unsafe extern "C" fn run<T: OnReceive>(owner: *mut c_void) {
            // SAFETY: `owner` is the `Arc<T>` data pointer stored below; the `Hook` holds that
            // Arc until iwarp_shim_hook_remove() has waited out every run.
            let owner = unsafe { &*owner.cast::<T>() };
            owner.on_receive();
        }
        #[allow(clippy::missing_safety_doc)]
        unsafe extern "C" fn run_tx<T: OnReceive>(owner: *mut c_void) {
            // SAFETY: as for `run`.
            let owner = unsafe { &*owner.cast::<T>() };
            owner.on_transmit();
        }
        #[allow(clippy::missing_safety_doc)]
        unsafe extern "C" fn ready<T: OnReceive>(owner: *mut c_void) -> u32 {
            // SAFETY: as for `run`; callbacks end before iwarp_shim_hook_remove() returns.
            let owner = unsafe { &*owner.cast::<T>() };
            // SAFETY: the shim calls this from the socket's data_ready only, for this call.
            owner.on_data_ready(&unsafe { InCallback::new() }).mask()
        }
        #[allow(clippy::missing_safety_doc)]
        unsafe extern "C" fn space(watch: *const c_void, snd_una: u32, writeable: bool) -> u32 {
            // SAFETY: `watch` is the socket's `TxWatch`, which does not move and outlives the
            // hook (the socket does); callbacks end before iwarp_shim_hook_remove() returns.
            let watch = unsafe { &*watch.cast::<TxWatch>() };
            watch.space(snd_una, writeable)
        }
        #[allow(clippy::missing_safety_doc)]
        unsafe extern "C" fn acked<T: OnReceive>(owner: *mut c_void) -> u32 {
            // SAFETY: as for `ready`.
            let owner = unsafe { &*owner.cast::<T>() };
            owner.on_acked().mask()
        }
        let ptr = Arc::as_ptr(&owner).cast_mut().cast();
        let watch: *const TxWatch = &*sock.watch;
        type Callback = unsafe extern "C" fn(*mut c_void) -> u32;
        let (ready, acked) = if in_callback { (Some(ready::<T> as Callback), Some(acked::<T> as Callback)) } else { (None, None) };
        // SAFETY: the socket is live (and outlives the hook, see above), and so is its watch;
        // `ptr` stays valid while the hook is installed.
        let raw = made(unsafe {
            ffi::iwarp_shim_hook_install(sock.sock.as_ptr(), ptr, Some(run::<T>), Some(run_tx::<T>), ready, watch.cast(), Some(space), acked, doorbell)
        })?;
        Ok(Hook { raw, _owner: owner })
    }
}

impl<T: OnReceive> Drop for Hook<T> {
    fn drop(&mut self) {
        // SAFETY: installed by iwarp_shim_hook_install() and removed once; after this returns
        // no run or callback is in progress or queued, so `owner` and the watch may go.
        unsafe { ffi::iwarp_shim_hook_remove(self.raw.as_ptr()) };
    }
}

/// While this lives, a netfilter hook (IPv4 and IPv6) in every network namespace rings a hooked
/// connection's receive work when one of its segments arrives above `rcv_nxt`: TCP itself calls
/// nothing when it queues a segment out of order. The hook only looks (never keeps, changes or
/// drops a packet); the work reads TCP's out-of-order queue under the socket lock, so only what
/// TCP accepted is placed (docs/ooo-placement.md).
///
/// # Invariants
///
/// The shim's pernet operations are registered while this value lives, and unregistered once.
pub(crate) struct Doorbell(());

impl Doorbell {
    /// Registers the doorbell.
    pub(crate) fn register() -> Result<Doorbell> {
        // SAFETY: process context (module load); fills the shim's copy of TCP's callbacks,
        // which hooks put back on sockets that inherited theirs, before any hook exists.
        to_result(unsafe { ffi::iwarp_shim_hook_init() })?;
        // SAFETY: registers static operations once; `Drop` unregisters them.
        to_result(unsafe { ffi::iwarp_shim_doorbell_register() })?;
        Ok(Doorbell(()))
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        // SAFETY: registered by `register` (type invariant), unregistered once.
        unsafe { ffi::iwarp_shim_doorbell_unregister() };
    }
}
