//! `/dev/iwarp` without the library: raw ioctls for the local attackers (src/attack.rs,
//! src/ioctl_fuzz/), which must reach the module with arguments the library never makes.

use libiwarp::abi;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

/// `/dev/iwarp`, opened without the library, for raw system calls.
pub(crate) struct Raw {
    pub(crate) file: File,
}

impl Raw {
    pub(crate) fn open() -> Result<Raw, String> {
        let file = OpenOptions::new().read(true).write(true).open(libiwarp::DEVICE_PATH).map_err(|e| format!("open: {e}"))?;
        Ok(Raw { file })
    }

    /// ioctl on a buffer of exactly the size `cmd` encodes: 0 or the errno.
    ///
    /// # Safety
    ///
    /// Every pointer field in `buf` (the module may write, read or pin through them) is NULL,
    /// points at no accessible memory, or into memory this process does not otherwise rely on
    /// (a scratch area, or a buffer of its own made for this call).
    pub(crate) unsafe fn ioctl(&self, cmd: u32, buf: &mut [u8]) -> i32 {
        if abi::ioc_size(cmd) != buf.len() {
            return libc::EINVAL;
        }
        // SAFETY: `buf` is exclusively borrowed and as long as the size `cmd` encodes, which is
        // all the kernel reads or writes through the argument; its pointer fields are the
        // caller's contract.
        unsafe { self.ioctl_at(cmd, buf.as_mut_ptr() as u64) }
    }

    /// ioctl with `arg` as the argument's address: 0 or the errno.
    ///
    /// # Safety
    ///
    /// The kernel may write up to the size `cmd` encodes at `arg`: it must be memory this
    /// process does not otherwise rely on (a buffer of that size, a scratch area, or no
    /// accessible memory at all); and if the argument there is readable, its pointer fields
    /// are as [`Raw::ioctl`] requires.
    pub(crate) unsafe fn ioctl_at(&self, cmd: u32, arg: u64) -> i32 {
        // SAFETY: the caller's contract covers what the kernel may write.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), cmd as libc::c_ulong, arg) };
        if rc < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        } else {
            0
        }
    }

    /// A typed call: the argument goes in and comes back.
    ///
    /// # Safety
    ///
    /// As for [`Raw::ioctl`]: `arg`'s pointer fields name nothing this process relies on.
    pub(crate) unsafe fn call_with_pointers<T: Copy>(&self, cmd: u32, arg: &mut T) -> i32 {
        // SAFETY: T is one of the ABI's plain-data structs; viewing it as bytes is sound, and
        // any bytes the kernel writes back are a valid T.
        let bytes = unsafe { std::slice::from_raw_parts_mut((arg as *mut T).cast::<u8>(), std::mem::size_of::<T>()) };
        // SAFETY: the caller's contract.
        unsafe { self.ioctl(cmd, bytes) }
    }

    /// A typed call with an argument that holds no addresses.
    pub(crate) fn call<T: NoPointers>(&self, cmd: u32, arg: &mut T) -> i32 {
        // SAFETY: `T` has no pointer fields (the trait's contract).
        unsafe { self.call_with_pointers(cmd, arg) }
    }

    /// QUERY_STATS: the module-wide counts.
    pub(crate) fn stats(&self) -> Result<abi::QueryStats, String> {
        let mut stats = abi::QueryStats::default();
        match self.call(abi::IOCTL_QUERY_STATS, &mut stats) {
            0 => Ok(stats),
            e => Err(format!("QUERY_STATS: errno {e}")),
        }
    }
}

/// ABI argument structs with no field the module reads, writes or pins through as an address.
///
/// # Safety
///
/// Implementors hold handles, numbers, offsets and lengths only.
pub(crate) unsafe trait NoPointers: Copy {}
// SAFETY: each of these holds handles, counts, offsets, lengths and flags only (abi.rs).
unsafe impl NoPointers for abi::PdOp {}
// SAFETY: as above.
unsafe impl NoPointers for abi::CreateCq {}
// SAFETY: as above.
unsafe impl NoPointers for abi::CreateQp {}
// SAFETY: as above.
unsafe impl NoPointers for abi::Doorbell {}
// SAFETY: as above.
unsafe impl NoPointers for abi::QueryQp {}
// SAFETY: as above.
unsafe impl NoPointers for abi::DestroyQp {}
// SAFETY: as above.
unsafe impl NoPointers for abi::DeregMr {}
// SAFETY: as above.
unsafe impl NoPointers for abi::QueryStats {}

/// The errno's name.
pub(crate) fn errno_name(e: i32) -> String {
    match e {
        0 => "ok".into(),
        // SAFETY: strerror returns a pointer to a static string for any value.
        _ => format!("{} ({e})", unsafe { std::ffi::CStr::from_ptr(libc::strerror(e)) }.to_string_lossy()),
    }
}
