//! An open `/dev/iwarp`: the device context of the verbs.

use crate::abi::{QueryDevice, IOCTL_QUERY_DEVICE};
use crate::sys;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;

/// Where the module's misc device appears.
pub const DEVICE_PATH: &str = "/dev/iwarp";

/// A device context (one open file of `/dev/iwarp`).
pub struct Device {
    file: File,
}

impl Device {
    /// Opens [`DEVICE_PATH`].
    pub fn open() -> io::Result<Device> {
        let file = OpenOptions::new().read(true).write(true).open(DEVICE_PATH)?;
        Ok(Device { file })
    }

    /// The device's ABI version, capabilities and limits.
    pub fn query(&self) -> io::Result<QueryDevice> {
        sys::ioctl_read(self.file.as_fd(), IOCTL_QUERY_DEVICE)
    }

    /// Issues a read-style ioctl with an arbitrary command (tests of the module's argument
    /// checking use it).
    pub fn raw_query(&self, cmd: u32) -> io::Result<QueryDevice> {
        sys::ioctl_read(self.file.as_fd(), cmd)
    }
}
