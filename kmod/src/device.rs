// SPDX-License-Identifier: GPL-2.0

//! `/dev/iwarp`: one [`Context`] per open file; every ioctl argument is copied in, validated,
//! and answered here. Closing the file tears down everything the context holds.

use crate::abi::{self, conn, opcode, send_flags, CreateQp, DeregMr, DestroyQp, PostSend, QueryStats, RegMr, MAX_MESSAGE, MAX_PRIVATE_DATA, MAX_QP};
use crate::handles::Handles;
use crate::mpa::frame::{RtrTypes, MAX_IRD_ORD};
use crate::mpa::negotiate::Local;
use crate::mr::MrTable;
use crate::qp::{self, QueuePair};
use crate::socket::TcpSocket;
use crate::tx::Message;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::uaccess::{UserPtr, UserSlice};

/// Open contexts.
static CONTEXTS: AtomicU64 = AtomicU64::new(0);

/// Registers the misc device.
pub(crate) fn register() -> impl PinInit<MiscDeviceRegistration<Context>, Error> {
    MiscDeviceRegistration::register(MiscDeviceOptions { name: c"iwarp" })
}

/// The state of one open file of `/dev/iwarp` (a device context).
#[pin_data(PinnedDrop)]
pub(crate) struct Context {
    #[pin]
    mrs: Mutex<MrTable>,
    #[pin]
    qps: Mutex<Handles<QueuePair>>,
}

#[vtable]
impl MiscDevice for Context {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &kernel::fs::File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let ctx = KBox::try_pin_init(try_pin_init!(Context { mrs <- new_mutex!(MrTable::new()), qps <- new_mutex!(Handles::new(MAX_QP)) }), GFP_KERNEL)?;
        CONTEXTS.fetch_add(1, Ordering::Relaxed);
        Ok(ctx)
    }

    fn ioctl(me: Pin<&Context>, _file: &kernel::fs::File, cmd: u32, arg: usize) -> Result<isize> {
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        match cmd {
            abi::IOCTL_QUERY_DEVICE => user.writer().write(&abi::device_attributes())?,
            abi::IOCTL_QUERY_STATS => user.writer().write(&QueryStats {
                pinned_pages: crate::pinned::pinned_pages(),
                memory_regions: crate::mr::regions(),
                contexts: CONTEXTS.load(Ordering::Relaxed),
                queue_pairs: qp::queue_pairs(),
                reserved: [0; 4],
            })?,
            abi::IOCTL_REG_MR => {
                let (mut r, mut w) = user.reader_writer();
                let mut req: RegMr = r.read()?;
                if req.reserved != 0 || req.lkey != 0 || req.stag != 0 {
                    return Err(EINVAL);
                }
                let stag = me.mrs.lock().register(req.addr, req.length, req.access)?;
                req.lkey = stag;
                req.stag = stag;
                if let Err(e) = w.write(&req) {
                    // The caller cannot learn the STag: do not leave the region behind.
                    let _ = me.mrs.lock().deregister(stag);
                    return Err(e);
                }
            }
            abi::IOCTL_DEREG_MR => {
                let req: DeregMr = user.reader().read()?;
                if req.reserved != 0 {
                    return Err(EINVAL);
                }
                me.mrs.lock().deregister(req.stag)?;
            }
            abi::IOCTL_CREATE_QP => {
                let (mut r, mut w) = user.reader_writer();
                let req: CreateQp = r.read()?;
                let out = me.create_qp(req)?;
                if let Err(e) = w.write(&out) {
                    let _ = me.qps.lock().remove(out.qp);
                    return Err(e);
                }
            }
            abi::IOCTL_DESTROY_QP => {
                let req: DestroyQp = user.reader().read()?;
                if req.reserved != 0 {
                    return Err(EINVAL);
                }
                drop(me.qps.lock().remove(req.qp)?);
            }
            abi::IOCTL_POST_SEND => {
                let req: PostSend = user.reader().read()?;
                me.post_send(&req)?;
            }
            _ => return Err(ENOTTY),
        }
        Ok(0)
    }
}

impl Context {
    /// Copies the payload out of the local region (one consistent snapshot), then frames and
    /// sends it. The QP table stays locked while TCP takes the data: sends on one context are
    /// serialized for now.
    fn post_send(&self, req: &PostSend) -> Result {
        let msg = match req.opcode {
            opcode::SEND => Message::Send { solicited: req.flags & send_flags::SOLICITED != 0, invalidate: None },
            opcode::WRITE => Message::Write { stag: req.remote_stag, to: req.remote_to },
            _ => return Err(EINVAL),
        };
        if req.flags & !send_flags::SOLICITED != 0 || req.reserved != 0 || req.length > MAX_MESSAGE {
            return Err(EINVAL);
        }
        if req.opcode == opcode::WRITE && req.flags != 0 {
            return Err(EINVAL);
        }
        let mut payload = KVVec::from_elem(0u8, req.length as usize, GFP_KERNEL)?;
        self.mrs.lock().copy_out(req.lkey, req.offset, &mut payload)?;
        self.qps.lock().get_mut(req.qp)?.send(msg, &payload)
    }

    /// Validates a CREATE_QP request, adopts the socket, runs the MPA exchange (without holding
    /// any lock: it blocks on the network) and stores the QP.
    fn create_qp(&self, mut req: CreateQp) -> Result<CreateQp> {
        let valid = req.role <= abi::role::RESPONDER
            && req.flags & !conn::ASKABLE == 0
            && (1..=2).contains(&req.mpa_rev)
            && req.private_len <= MAX_PRIVATE_DATA
            && (1..=60_000).contains(&req.timeout_ms)
            && req.ird <= MAX_IRD_ORD as u32
            && req.ord <= MAX_IRD_ORD as u32
            && req.reserved == 0;
        if !valid {
            return Err(EINVAL);
        }
        let mut private = KVec::from_elem(0u8, req.private_len as usize, GFP_KERNEL)?;
        UserSlice::new(UserPtr::from_addr(req.private_data as usize), private.len()).reader().read_slice(&mut private)?;
        let local = Local {
            markers: req.flags & conn::RX_MARKERS != 0,
            crc: req.flags & conn::CRC != 0,
            rev: req.mpa_rev as u8,
            ird: req.ird as u16,
            ord: req.ord as u16,
            p2p: false,
            rtr: RtrTypes::default(),
        };
        let sock = TcpSocket::adopt(req.fd)?;
        let est = qp::establish(sock, req.role == abi::role::INITIATOR, &local, &private, req.timeout_ms)?;
        let n = est.peer_private.len().min(req.peer_private_cap as usize);
        UserSlice::new(UserPtr::from_addr(req.peer_private as usize), n).writer().write_slice(&est.peer_private[..n])?;
        let c = est.conn;
        req.qp = self.qps.lock().insert(est.qp)?;
        req.peer_private_len = est.peer_private.len() as u32;
        req.negotiated =
            (if c.rx_markers { conn::RX_MARKERS } else { 0 }) | (if c.tx_markers { conn::TX_MARKERS } else { 0 }) | (if c.crc { conn::CRC } else { 0 });
        req.rev = c.rev as u32;
        req.neg_ird = c.ird as u32;
        req.neg_ord = c.ord as u32;
        Ok(req)
    }
}

#[pinned_drop]
impl PinnedDrop for Context {
    fn drop(self: Pin<&mut Self>) {
        CONTEXTS.fetch_sub(1, Ordering::Relaxed);
    }
}
