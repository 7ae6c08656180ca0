// SPDX-License-Identifier: GPL-2.0

//! A spinlock taken with bottom halves off ([`SpinLockBh`]): the receive side runs in the
//! socket's data-ready callback (softirq, like siw), and shares the QP's receive state, the
//! regions, the CQs and the asynchronous events with process context. A plain spinlock held in
//! process context could be interrupted on its CPU by that softirq wanting it; with bottom halves
//! off it cannot, which is what lockdep checks. The kernel crate has only the plain one. And a
//! spinlock taken with interrupts off ([`SpinLockIrq`]), for what the RDMA core's callers reach
//! with interrupts off (iw_cm looks QPs up under its own irqsave lock). And bottom halves off
//! without a lock ([`BottomHalvesOff`]).

use crate::ffi;
use core::marker::PhantomData;
use kernel::bindings;
use kernel::sync::lock::{Backend, Lock};

/// A spinlock whose holders keep bottom halves off: usable from softirq and process context.
/// Holders must not sleep.
pub(crate) type SpinLockBh<T> = Lock<T, SpinLockBhBackend>;

/// `spinlock_t` with `spin_lock_bh` / `spin_unlock_bh`.
pub(crate) struct SpinLockBhBackend;

// SAFETY: the kernel's spinlock_t ensures mutual exclusion; lock and unlock are the _bh pair,
// always used together, so bottom halves are back on exactly when the lock is released.
unsafe impl Backend for SpinLockBhBackend {
    type State = bindings::spinlock_t;
    type GuardState = ();

    unsafe fn init(ptr: *mut Self::State, name: *const kernel::ffi::c_char, key: *mut bindings::lock_class_key) {
        // SAFETY: the caller guarantees `ptr` is valid for writes and `name` and `key` live
        // indefinitely.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: the caller guarantees `ptr` was initialised by `init`.
        unsafe { ffi::iwarp_shim_spin_lock_bh(ptr) }
    }

    unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
        // SAFETY: as for `lock`.
        (unsafe { ffi::iwarp_shim_spin_trylock_bh(ptr) } != 0).then_some(())
    }

    unsafe fn unlock(ptr: *mut Self::State, _guard_state: &Self::GuardState) {
        // SAFETY: the caller owns the lock, taken by `lock` or `try_lock`.
        unsafe { ffi::iwarp_shim_spin_unlock_bh(ptr) }
    }

    unsafe fn assert_is_held(ptr: *mut Self::State) {
        // SAFETY: the caller guarantees `ptr` was initialised by `init`.
        unsafe { ffi::iwarp_shim_spin_assert_held(ptr) }
    }
}

/// A [`SpinLockBh`] initialiser with `$name` and a lock class of its own.
macro_rules! new_spinlock_bh {
    ($inner:expr, $name:literal) => {
        kernel::sync::lock::Lock::new($inner, kernel::c_str!($name), kernel::static_lock_class!())
    };
}
pub(crate) use new_spinlock_bh;

/// A spinlock whose holders keep interrupts off: usable in any context, also by callers that
/// have interrupts off already. Holders must not sleep.
pub(crate) type SpinLockIrq<T> = Lock<T, SpinLockIrqBackend>;

/// `spinlock_t` with `spin_lock_irqsave` / `spin_unlock_irqrestore`.
pub(crate) struct SpinLockIrqBackend;

// SAFETY: the kernel's spinlock_t ensures mutual exclusion; the interrupt state saved by lock or
// try_lock is the guard's, restored by unlock with the lock's release.
unsafe impl Backend for SpinLockIrqBackend {
    type State = bindings::spinlock_t;
    type GuardState = kernel::ffi::c_ulong;

    unsafe fn init(ptr: *mut Self::State, name: *const kernel::ffi::c_char, key: *mut bindings::lock_class_key) {
        // SAFETY: the caller guarantees `ptr` is valid for writes and `name` and `key` live
        // indefinitely.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: the caller guarantees `ptr` was initialised by `init`.
        unsafe { ffi::iwarp_shim_spin_lock_irqsave(ptr) }
    }

    unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
        let mut flags = 0;
        // SAFETY: as for `lock`; `flags` is a live local.
        (unsafe { ffi::iwarp_shim_spin_trylock_irqsave(ptr, &mut flags) } != 0).then_some(flags)
    }

    unsafe fn unlock(ptr: *mut Self::State, guard_state: &Self::GuardState) {
        // SAFETY: the caller owns the lock, taken by `lock` or `try_lock`, which saved
        // `guard_state`.
        unsafe { ffi::iwarp_shim_spin_unlock_irqrestore(ptr, *guard_state) }
    }

    unsafe fn assert_is_held(ptr: *mut Self::State) {
        // SAFETY: the caller guarantees `ptr` was initialised by `init`.
        unsafe { ffi::iwarp_shim_spin_assert_held(ptr) }
    }
}

/// A [`SpinLockIrq`] initialiser with `$name` and a lock class of its own.
macro_rules! new_spinlock_irq {
    ($inner:expr, $name:literal) => {
        kernel::sync::lock::Lock::new($inner, kernel::c_str!($name), kernel::static_lock_class!())
    };
}
pub(crate) use new_spinlock_irq;

/// Bottom halves off on this CPU while it lives: an access to a region's pages, which an
/// invalidation in the receive side's softirq spins on, must not be interrupted by it on its
/// own CPU. Not for callers with interrupts off (enabling them again would warn).
pub(crate) struct BottomHalvesOff(PhantomData<*mut ()>);

impl BottomHalvesOff {
    pub(crate) fn new() -> BottomHalvesOff {
        // SAFETY: paired with the enable in `drop`, on the same CPU (no sleeping while held:
        // the guard is not `Send`, and its holders do not sleep).
        unsafe { ffi::iwarp_shim_local_bh_disable() };
        BottomHalvesOff(PhantomData)
    }
}

impl Drop for BottomHalvesOff {
    fn drop(&mut self) {
        // SAFETY: `new` disabled them.
        unsafe { ffi::iwarp_shim_local_bh_enable() };
    }
}
