// SPDX-License-Identifier: GPL-2.0

//! The ABI structs as the kernel crate's byte-copy traits, so `UserSliceReader::read` and
//! `UserSliceWriter::write` can move them across the user boundary.

use crate::abi::{
    self, Accept, AdoptQp, AsyncEvent, ConnectQp, CqOp, Cqe, CreateCq, CreateQp, DeregMr, DestroyQp, Doorbell, GetRequest, HandleOp, ListQps, Listen, PdOp,
    PostRecv, PostSend, QpInfo, QueryDevice, QueryQp, QueryStats, RegMr, Reject, SetEventFd,
};
use kernel::transmute::{AsBytes, FromBytes};

const _: () = assert!(core::mem::size_of::<QueryDevice>() == abi::QUERY_DEVICE_SIZE);
const _: () = assert!(core::mem::size_of::<RegMr>() == abi::REG_MR_SIZE);
const _: () = assert!(core::mem::size_of::<DeregMr>() == abi::DEREG_MR_SIZE);
const _: () = assert!(core::mem::size_of::<QueryStats>() == abi::QUERY_STATS_SIZE);
const _: () = assert!(core::mem::size_of::<CreateQp>() == abi::CREATE_QP_SIZE);
const _: () = assert!(core::mem::size_of::<AdoptQp>() == abi::ADOPT_QP_SIZE);
const _: () = assert!(core::mem::size_of::<DestroyQp>() == abi::DESTROY_QP_SIZE);
const _: () = assert!(core::mem::size_of::<PostSend>() == abi::POST_SEND_SIZE);
const _: () = assert!(core::mem::size_of::<PostRecv>() == abi::POST_RECV_SIZE);
const _: () = assert!(core::mem::size_of::<CreateCq>() == abi::CREATE_CQ_SIZE);
const _: () = assert!(core::mem::size_of::<CqOp>() == abi::CQ_OP_SIZE);
const _: () = assert!(core::mem::size_of::<Cqe>() == abi::CQE_SIZE);
const _: () = assert!(core::mem::size_of::<QueryQp>() == abi::QUERY_QP_SIZE);
const _: () = assert!(core::mem::size_of::<Doorbell>() == abi::DOORBELL_SIZE);
const _: () = assert!(core::mem::size_of::<ConnectQp>() == abi::CONNECT_QP_SIZE);
const _: () = assert!(core::mem::size_of::<PdOp>() == abi::PD_OP_SIZE);
const _: () = assert!(core::mem::size_of::<Listen>() == abi::LISTEN_SIZE);
const _: () = assert!(core::mem::size_of::<HandleOp>() == abi::HANDLE_OP_SIZE);
const _: () = assert!(core::mem::size_of::<GetRequest>() == abi::GET_REQUEST_SIZE);
const _: () = assert!(core::mem::size_of::<Accept>() == abi::ACCEPT_SIZE);
const _: () = assert!(core::mem::size_of::<Reject>() == abi::REJECT_SIZE);
const _: () = assert!(core::mem::size_of::<SetEventFd>() == abi::SET_EVENT_FD_SIZE);
const _: () = assert!(core::mem::size_of::<AsyncEvent>() == abi::ASYNC_EVENT_SIZE);
const _: () = assert!(core::mem::size_of::<ListQps>() == abi::LIST_QPS_SIZE);
const _: () = assert!(core::mem::size_of::<QpInfo>() == abi::QP_INFO_SIZE);

// SAFETY: each struct of the impls below is `repr(C)`, made only of integers (and arrays of
// them or of such structs), without padding (sizes pinned above and by libiwarp's layout test to
// the sum of the fields), so every byte is initialized (AsBytes) and every bit pattern is a
// valid value (FromBytes).
unsafe impl AsBytes for QueryDevice {}
// SAFETY: see above.
unsafe impl AsBytes for RegMr {}
// SAFETY: see above.
unsafe impl FromBytes for RegMr {}
// SAFETY: see above.
unsafe impl FromBytes for DeregMr {}
// SAFETY: see above.
unsafe impl AsBytes for PdOp {}
// SAFETY: see above.
unsafe impl AsBytes for Listen {}
// SAFETY: see above.
unsafe impl FromBytes for Listen {}
// SAFETY: see above.
unsafe impl FromBytes for HandleOp {}
// SAFETY: see above.
unsafe impl AsBytes for GetRequest {}
// SAFETY: see above.
unsafe impl FromBytes for GetRequest {}
// SAFETY: see above.
unsafe impl AsBytes for Accept {}
// SAFETY: see above.
unsafe impl FromBytes for Accept {}
// SAFETY: see above.
unsafe impl FromBytes for Reject {}
// SAFETY: see above.
unsafe impl FromBytes for SetEventFd {}
// SAFETY: see above.
unsafe impl AsBytes for AsyncEvent {}
// SAFETY: see above.
unsafe impl FromBytes for PdOp {}
// SAFETY: see above.
unsafe impl AsBytes for QueryStats {}
// SAFETY: see above.
unsafe impl AsBytes for CreateQp {}
// SAFETY: see above.
unsafe impl FromBytes for CreateQp {}
// SAFETY: see above.
unsafe impl AsBytes for AdoptQp {}
// SAFETY: see above.
unsafe impl FromBytes for AdoptQp {}
// SAFETY: see above.
unsafe impl FromBytes for DestroyQp {}
// SAFETY: see above.
unsafe impl FromBytes for PostSend {}
// SAFETY: see above.
unsafe impl FromBytes for PostRecv {}
// SAFETY: see above.
unsafe impl AsBytes for CreateCq {}
// SAFETY: see above.
unsafe impl FromBytes for CreateCq {}
// SAFETY: see above.
unsafe impl FromBytes for CqOp {}
// SAFETY: see above.
unsafe impl AsBytes for Cqe {}
// SAFETY: see above.
unsafe impl AsBytes for QueryQp {}
// SAFETY: see above.
unsafe impl FromBytes for QueryQp {}
// SAFETY: see above.
unsafe impl AsBytes for Doorbell {}
// SAFETY: see above.
unsafe impl FromBytes for Doorbell {}
// SAFETY: see above.
unsafe impl AsBytes for ConnectQp {}
// SAFETY: see above.
unsafe impl FromBytes for ConnectQp {}
// SAFETY: see above.
unsafe impl FromBytes for ListQps {}
// SAFETY: see above.
unsafe impl AsBytes for ListQps {}
// SAFETY: see above (Endpoint too is integers only, 20 octets without padding).
unsafe impl AsBytes for QpInfo {}
