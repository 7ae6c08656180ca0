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
fn memory_region_layouts() {
    assert_eq!(size_of::<RegMr>(), REG_MR_SIZE);
    assert_eq!(offset_of!(RegMr, addr), 0);
    assert_eq!(offset_of!(RegMr, length), 8);
    assert_eq!(offset_of!(RegMr, access), 16);
    assert_eq!(offset_of!(RegMr, lkey), 20);
    assert_eq!(offset_of!(RegMr, stag), 24);
    assert_eq!(size_of::<DeregMr>(), DEREG_MR_SIZE);
    assert_eq!(size_of::<QueryStats>(), QUERY_STATS_SIZE);
    assert_eq!(offset_of!(QueryStats, contexts), 16);
}

#[test]
fn queue_pair_layouts() {
    assert_eq!(size_of::<CreateQp>(), CREATE_QP_SIZE);
    assert_eq!(offset_of!(CreateQp, private_data), 32);
    assert_eq!(offset_of!(CreateQp, peer_private), 40);
    assert_eq!(offset_of!(CreateQp, timeout_ms), 48);
    assert_eq!(offset_of!(CreateQp, qp), 52);
    assert_eq!(offset_of!(CreateQp, neg_ord), 72);
    assert_eq!(size_of::<DestroyQp>(), DESTROY_QP_SIZE);
    assert_eq!(offset_of!(QueryStats, queue_pairs), 24);
    assert_eq!(size_of::<PostSend>(), POST_SEND_SIZE);
    assert_eq!(offset_of!(PostSend, offset), 16);
    assert_eq!(offset_of!(PostSend, remote_to), 32);
    assert_eq!(offset_of!(PostSend, remote_stag), 40);
}

#[test]
fn ioctl_numbers_use_linux_encoding() {
    // As the C macros _IOR/_IOWR/_IOW(0xa7, nr, size) compute them.
    assert_eq!(IOCTL_QUERY_DEVICE, 0x8058_a700);
    assert_eq!(IOCTL_REG_MR, 0xc020_a701);
    assert_eq!(IOCTL_DEREG_MR, 0x4008_a702);
    assert_eq!(IOCTL_QUERY_STATS, 0x8040_a703);
    assert_eq!(IOCTL_CREATE_QP, 0xc050_a704);
    assert_eq!(IOCTL_DESTROY_QP, 0x4008_a705);
    assert_eq!(IOCTL_POST_SEND, 0x4030_a706);
}
