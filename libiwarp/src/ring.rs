//! Rings the module shares with this process through `mmap` of the device: completion rings
//! (the module writes, we read) and work request rings (we write, the module copies out).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicU32;

/// A mapping of one ring.
pub(crate) struct Mapping {
    base: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps `len` octets of the device at `offset` (as CREATE_CQ / CREATE_QP returned them).
    pub(crate) fn new(dev: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<Mapping> {
        let len = len as usize;
        // SAFETY: a fresh shared mapping of the device; the result is checked before use.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, dev.as_raw_fd(), offset as libc::off_t) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { base: base.cast(), len })
    }

    /// The 32-bit word at `off`, shared with the module.
    pub(crate) fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: aligned (checked; the mapping is page aligned) and inside the mapping, which
        // lives as long as `self`; the module accesses these words atomically too.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    /// Reads the `T` at `off` (a plain-data ABI struct the module wrote).
    pub(crate) fn read<T: Copy>(&self, off: usize) -> T {
        assert!(off + std::mem::size_of::<T>() <= self.len && off.is_multiple_of(std::mem::align_of::<T>()));
        // SAFETY: in bounds and aligned (checked); T is one of the ABI's plain-data structs,
        // valid for any bit pattern; volatile because the module writes this memory.
        unsafe { self.base.add(off).cast::<T>().read_volatile() }
    }

    /// Writes `v` at `off` (a plain-data ABI struct the module will copy out).
    pub(crate) fn write<T: Copy>(&self, off: usize, v: T) {
        assert!(off + std::mem::size_of::<T>() <= self.len && off.is_multiple_of(std::mem::align_of::<T>()));
        // SAFETY: in bounds and aligned (checked); volatile because the module reads it.
        unsafe { self.base.add(off).cast::<T>().write_volatile(v) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by mmap() with this base and length and is unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
