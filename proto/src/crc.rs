//! CRC32c (Castagnoli) as used by MPA, behind a trait so each environment plugs in its fastest
//! implementation: the `crc32c` crate on the host, the kernel's `crc32c()` in the module.

/// A CRC32c implementation. `append` continues a finished CRC value over more bytes, so
/// `append(append(0, a), b) == append(0, a ++ b)` (the convention of the `crc32c` crate).
pub trait Crc32c {
    /// Extends `crc` (a finished CRC32c, 0 for none yet) over `data`.
    fn append(crc: u32, data: &[u8]) -> u32;
}

/// The `crc32c` crate (hardware-accelerated where the CPU allows); also the core's own unit
/// tests use it (the crate is a dev-dependency).
#[cfg(any(test, feature = "host-crc"))]
pub struct HostCrc;

#[cfg(any(test, feature = "host-crc"))]
impl Crc32c for HostCrc {
    fn append(crc: u32, data: &[u8]) -> u32 {
        crc32c::crc32c_append(crc, data)
    }
}
