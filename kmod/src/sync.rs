// SPDX-License-Identifier: GPL-2.0

//! A spinlock taken with bottom halves off ([`SpinLockBh`]): the receive side runs in the
//! socket's data-ready callback (softirq, like siw), and shares the QP's receive state, the
//! regions, the CQs and the asynchronous events with process context. A plain spinlock held in
//! process context could be interrupted on its CPU by that softirq wanting it; with bottom halves
//! off it cannot, which is what lockdep checks. The kernel crate has only the plain one.

use crate::ffi;
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
