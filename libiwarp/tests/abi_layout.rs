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
    assert_eq!(offset_of!(QueryDevice, max_inline), 56);
    assert_eq!(offset_of!(QueryDevice, max_pd), 60);
    assert_eq!(offset_of!(QueryDevice, reserved), 64);
}

#[test]
fn memory_region_layouts() {
    assert_eq!(size_of::<RegMr>(), REG_MR_SIZE);
    assert_eq!(offset_of!(RegMr, addr), 0);
    assert_eq!(offset_of!(RegMr, length), 8);
    assert_eq!(offset_of!(RegMr, access), 16);
    assert_eq!(offset_of!(RegMr, lkey), 20);
    assert_eq!(offset_of!(RegMr, stag), 24);
    assert_eq!(offset_of!(RegMr, pd), 28);
    assert_eq!(size_of::<PdOp>(), PD_OP_SIZE);
}

#[test]
fn connection_management_layouts() {
    assert_eq!(size_of::<Listen>(), LISTEN_SIZE);
    assert_eq!(offset_of!(Listen, backlog), 20);
    assert_eq!(offset_of!(Listen, listener), 24);
    assert_eq!(size_of::<HandleOp>(), HANDLE_OP_SIZE);
    assert_eq!(size_of::<GetRequest>(), GET_REQUEST_SIZE);
    assert_eq!(offset_of!(GetRequest, peer_private), 8);
    assert_eq!(offset_of!(GetRequest, request), 24);
    assert_eq!(offset_of!(GetRequest, peer), 44);
    assert_eq!(size_of::<Accept>(), ACCEPT_SIZE);
    assert_eq!(offset_of!(Accept, request), 80);
    assert_eq!(size_of::<Reject>(), REJECT_SIZE);
    assert_eq!(offset_of!(Reject, private_data), 8);
    assert_eq!(size_of::<SetEventFd>(), SET_EVENT_FD_SIZE);
    assert_eq!(size_of::<AsyncEvent>(), ASYNC_EVENT_SIZE);
    assert_eq!(offset_of!(AsyncEvent, flags), 12);
    assert_eq!(size_of::<DeregMr>(), DEREG_MR_SIZE);
    assert_eq!(size_of::<QueryStats>(), QUERY_STATS_SIZE);
    assert_eq!(offset_of!(QueryStats, contexts), 16);
}

#[test]
fn queue_pair_layouts() {
    assert_eq!(size_of::<CreateQp>(), CREATE_QP_SIZE);
    assert_eq!(offset_of!(CreateQp, max_send_wr), 12);
    assert_eq!(offset_of!(CreateQp, qp), 16);
    assert_eq!(offset_of!(CreateQp, pd), 20);
    assert_eq!(offset_of!(CreateQp, sq_offset), 24);
    assert_eq!(offset_of!(CreateQp, rq_len), 48);
    assert_eq!(offset_of!(CreateQp, max_sge), 56);
    assert_eq!(offset_of!(CreateQp, max_inline), 60);
    assert_eq!(size_of::<Doorbell>(), DOORBELL_SIZE);
    assert_eq!(offset_of!(Doorbell, sq_done), 12);
    assert_eq!(offset_of!(Doorbell, rq_error), 24);
    assert_eq!(size_of::<AdoptQp>(), ADOPT_QP_SIZE);
    assert_eq!(offset_of!(AdoptQp, private_data), 32);
    assert_eq!(offset_of!(AdoptQp, peer_private), 40);
    assert_eq!(offset_of!(AdoptQp, timeout_ms), 48);
    assert_eq!(offset_of!(AdoptQp, qp), 52);
    assert_eq!(offset_of!(AdoptQp, neg_ord), 72);
    assert_eq!(offset_of!(AdoptQp, marker_interval), 76);
    assert_eq!(size_of::<ConnectQp>(), CONNECT_QP_SIZE);
    assert_eq!(offset_of!(ConnectQp, peer), 80);
    assert_eq!(offset_of!(ConnectQp, reserved), 100);
    assert_eq!(size_of::<DestroyQp>(), DESTROY_QP_SIZE);
    assert_eq!(offset_of!(QueryStats, queue_pairs), 24);
    assert_eq!(size_of::<QueryQp>(), QUERY_QP_SIZE);
    assert_eq!(offset_of!(QueryQp, terminate_sent), 12);
    assert_eq!(offset_of!(QueryQp, sent_zero_copy), 16);
    assert_eq!(offset_of!(QueryQp, sent_copied), 24);
    assert_eq!(offset_of!(QueryQp, placed_in_order), 32);
    assert_eq!(offset_of!(QueryQp, placed_out_of_order), 40);
    assert_eq!(offset_of!(QueryQp, fpdus_out_of_order), 48);
    assert_eq!(offset_of!(QueryQp, ooo_walks), 56);
    assert_eq!(offset_of!(QueryQp, doorbells), 64);
    assert_eq!(offset_of!(QueryQp, fpdus_bad), 88);
    assert_eq!(offset_of!(QueryQp, fpdus_by_alignment), 96);
    assert_eq!(offset_of!(QueryQp, rx_marker_interval), 104);
    assert_eq!(offset_of!(QueryQp, tx_marker_interval), 108);
    assert_eq!(offset_of!(QueryQp, received_copied), 112);
    assert_eq!(size_of::<Endpoint>(), ENDPOINT_SIZE);
    assert_eq!(offset_of!(Endpoint, addr), 4);
    assert_eq!(size_of::<QpInfo>(), QP_INFO_SIZE);
    assert_eq!(offset_of!(QpInfo, local), 8);
    assert_eq!(offset_of!(QpInfo, remote), 28);
    assert_eq!(offset_of!(QpInfo, query), 48);
    assert_eq!(size_of::<ListQps>(), LIST_QPS_SIZE);
    assert_eq!(offset_of!(ListQps, count), 12);
}

#[test]
fn work_request_layouts() {
    assert_eq!(size_of::<Sge>(), 16);
    assert_eq!(offset_of!(Sge, lkey), 12);
    assert_eq!(size_of::<PostSend>(), POST_SEND_SIZE);
    assert_eq!(offset_of!(PostSend, wr_id), 16);
    assert_eq!(offset_of!(PostSend, remote_addr), 24);
    assert_eq!(offset_of!(PostSend, rkey), 32);
    assert_eq!(offset_of!(PostSend, invalidate), 36);
    assert_eq!(offset_of!(PostSend, sge), 40);
    assert_eq!(offset_of!(PostSend, imm_data), 104);
    assert_eq!(offset_of!(PostSend, swap), 120);
    assert_eq!(size_of::<PostRecv>(), POST_RECV_SIZE);
    assert_eq!(offset_of!(PostRecv, wr_id), 8);
    assert_eq!(offset_of!(PostRecv, sge), 16);
}

#[test]
fn completion_queue_layouts() {
    assert_eq!(size_of::<CreateCq>(), CREATE_CQ_SIZE);
    assert_eq!(offset_of!(CreateCq, mmap_offset), 16);
    assert_eq!(offset_of!(CreateCq, mmap_len), 24);
    assert_eq!(size_of::<CqOp>(), CQ_OP_SIZE);
    assert_eq!(size_of::<Cqe>(), CQE_SIZE);
    assert_eq!(offset_of!(Cqe, status), 8);
    assert_eq!(offset_of!(Cqe, qp), 20);
    assert_eq!(offset_of!(Cqe, invalidated), 28);
    assert_eq!(offset_of!(Cqe, imm_data), 32);
    // Entries start on their own cache lines, after the producer's and the consumer's.
    assert_eq!(cq_ring::CONSUMER % 64, 0);
    assert_eq!(cq_ring::ENTRIES, 128);
    // Every entry's 64-bit fields stay aligned.
    assert_eq!(cq_ring::ENTRIES % 8 + CQE_SIZE % 8, 0);
}

#[test]
fn ioctl_numbers_use_linux_encoding() {
    // As the C macros _IOR/_IOWR/_IOW(0xa7, nr, size) compute them.
    assert_eq!(IOCTL_QUERY_DEVICE, 0x8058_a700);
    assert_eq!(IOCTL_REG_MR, 0xc020_a701);
    assert_eq!(IOCTL_DEREG_MR, 0x4008_a702);
    assert_eq!(IOCTL_QUERY_STATS, 0x8040_a703);
    assert_eq!(IOCTL_CREATE_QP, 0xc040_a704);
    assert_eq!(IOCTL_ADOPT_QP, 0xc050_a70c);
    assert_eq!(IOCTL_DESTROY_QP, 0x4008_a705);
    assert_eq!(IOCTL_DOORBELL, 0xc020_a706);
    assert_eq!(IOCTL_CONNECT_QP, 0xc068_a70d);
    assert_eq!(IOCTL_CREATE_CQ, 0xc020_a708);
    assert_eq!(IOCTL_DESTROY_CQ, 0x4008_a709);
    assert_eq!(IOCTL_ARM_CQ, 0x4008_a70a);
    assert_eq!(IOCTL_QUERY_QP, 0xc078_a70b);
    assert_eq!(IOCTL_ALLOC_PD, 0xc008_a70e);
    assert_eq!(IOCTL_LISTEN, 0xc020_a710);
    assert_eq!(IOCTL_CLOSE_LISTENER, 0x4008_a711);
    assert_eq!(IOCTL_GET_REQUEST, 0xc040_a712);
    assert_eq!(IOCTL_ACCEPT, 0xc058_a713);
    assert_eq!(IOCTL_REJECT, 0x4010_a714);
    assert_eq!(IOCTL_DISCONNECT, 0x4008_a715);
    assert_eq!(IOCTL_SET_EVENT_FD, 0x4008_a716);
    assert_eq!(IOCTL_GET_ASYNC_EVENT, 0x8010_a717);
    assert_eq!(IOCTL_DEALLOC_PD, 0x4008_a70f);
    assert_eq!(IOCTL_LIST_QPS, 0xc010_a718);
}
