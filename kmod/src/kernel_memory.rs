// SPDX-License-Identifier: GPL-2.0

//! Kernel memory a kernel consumer of the RDMA core names by address through its DMA region
//! (`get_dma_mr`: under virtual DMA a DMA address is a kernel virtual one, as
//! `ib_virt_dma_to_ptr` says). Nothing here can check such an address: the consumer promises
//! it, as it promises a real RNIC the memory it may DMA to.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

/// Copies `src` to kernel address `at`.
///
/// # Safety
///
/// `[at, at + src.len())` is kernel memory the consumer gave for this access, mapped and not
/// Rust-owned.
pub(crate) unsafe fn copy_to(at: u64, src: &[u8]) -> Result {
    // SAFETY: the function's contract; `src` is a Rust slice, so the two do not overlap.
    unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), at as usize as *mut u8, src.len()) };
    Ok(())
}

/// Copies `dst.len()` octets from kernel address `at` into `dst`.
///
/// # Safety
///
/// As [`copy_to`], for reading.
pub(crate) unsafe fn copy_from(at: u64, dst: &mut [u8]) -> Result {
    // SAFETY: the function's contract; `dst` is a Rust slice, so the two do not overlap.
    unsafe { core::ptr::copy_nonoverlapping(at as usize as *const u8, dst.as_mut_ptr(), dst.len()) };
    Ok(())
}

/// Replaces the 64-bit value at kernel address `at` with `op` of it, atomically, and returns
/// the value before; EINVAL if `at` is not 8-aligned.
///
/// # Safety
///
/// As [`copy_to`], for 8 octets.
pub(crate) unsafe fn update_u64(at: u64, op: impl Fn(u64) -> u64) -> Result<u64> {
    if at % 8 != 0 {
        return Err(EINVAL);
    }
    // SAFETY: the function's contract; `at` is 8-aligned, and only atomics of ours or the
    // consumer's own accesses reach it.
    let value = unsafe { AtomicU64::from_ptr(at as usize as *mut u64) };
    Ok(match value.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(op(v))) {
        Ok(old) | Err(old) => old,
    })
}
