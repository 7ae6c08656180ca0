//! The ABI's sizes and offsets, pinned: a change here is an ABI change (bump ABI_VERSION).

use core::mem::{offset_of, size_of};
use libiwarp::abi::*;

#[test]
fn query_device_layout() {
    assert_eq!(size_of::<QueryDevice>(), QUERY_DEVICE_SIZE);
    assert_eq!(offset_of!(QueryDevice, abi_version), 0);
    assert_eq!(offset_of!(QueryDevice, marker_interval), 4);
    assert_eq!(offset_of!(QueryDevice, caps), 8);
    assert_eq!(offset_of!(QueryDevice, max_qp), 16);
    assert_eq!(offset_of!(QueryDevice, max_ord), 44);
    assert_eq!(offset_of!(QueryDevice, max_mr_size), 48);
    assert_eq!(offset_of!(QueryDevice, reserved), 56);
}

#[test]
fn ioctl_numbers_use_linux_encoding() {
    // _IOR(0xa7, 0, 88 bytes) as the C macros compute it.
    assert_eq!(IOCTL_QUERY_DEVICE, 0x8058_a700);
}
