// SPDX-License-Identifier: GPL-2.0

//! `/dev/iwarp`: one [`Context`] per open file; every ioctl argument is copied in, validated,
//! and answered here. Rings (completion, send, receive) are mapped with `mmap` at the offsets
//! CREATE_CQ and CREATE_QP returned.
//! Closing the file tears down everything the context holds.

use crate::abi::{
    self, conn, ring_kind, AdoptQp, ConnectQp, CqOp, CreateCq, CreateQp, DeregMr, DestroyQp, Doorbell, QueryQp, QueryStats, RegMr, MAX_CQ, MAX_PRIVATE_DATA,
    MAX_QP, MAX_QP_WR,
};
use crate::cq::Cq;
use crate::handles::Handles;
use crate::mpa::frame::{RtrTypes, MAX_IRD_ORD};
use crate::mpa::negotiate::Local;
use crate::mr::MrTable;
use crate::qp::{self, Limits, QueuePair};
use crate::ring;
use crate::socket::{Hook, TcpSocket};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration};
use kernel::mm::virt::VmaNew;
use kernel::new_mutex;
use kernel::page::PAGE_SHIFT;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::uaccess::{UserPtr, UserSlice};

/// Open contexts.
static CONTEXTS: AtomicU64 = AtomicU64::new(0);

/// Registers the misc device.
pub(crate) fn register() -> impl PinInit<MiscDeviceRegistration<Context>, Error> {
    MiscDeviceRegistration::register(MiscDeviceOptions { name: c"iwarp" })
}

/// A QP of a context; once connected, its socket hook runs the receive side. Dropping it
/// ends the QP (flushing its work requests), then unhooks the socket.
struct Entry {
    hook: Option<Hook<QueuePair>>,
    qp: Arc<QueuePair>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.qp.close();
    }
}

/// The state of one open file of `/dev/iwarp` (a device context).
#[pin_data(PinnedDrop)]
pub(crate) struct Context {
    /// Shared with the QPs, whose receive work places into these regions.
    mrs: Arc<Mutex<MrTable>>,
    #[pin]
    cqs: Mutex<Handles<Arc<Cq>>>,
    #[pin]
    qps: Mutex<Handles<Entry>>,
}

#[vtable]
impl MiscDevice for Context {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &kernel::fs::File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let mrs = Arc::pin_init(new_mutex!(MrTable::new()), GFP_KERNEL)?;
        let ctx =
            KBox::try_pin_init(try_pin_init!(Context { mrs, cqs <- new_mutex!(Handles::new(MAX_CQ)), qps <- new_mutex!(Handles::new(MAX_QP)) }), GFP_KERNEL)?;
        CONTEXTS.fetch_add(1, Ordering::Relaxed);
        Ok(ctx)
    }

    fn mmap(me: Pin<&Context>, _file: &kernel::fs::File, vma: &VmaNew) -> Result {
        let pgoff = ring::mmap_pgoff(vma) as u64;
        let handle = (pgoff & ((1 << ring_kind::SHIFT) - 1)) as u32;
        match pgoff >> ring_kind::SHIFT {
            ring_kind::CQ => me.cqs.lock().get(handle)?.clone().mmap(vma),
            ring_kind::SQ => me.qp(handle)?.send_ring().mmap(vma),
            ring_kind::RQ => me.qp(handle)?.recv_ring().mmap(vma),
            _ => Err(EINVAL),
        }
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
            abi::IOCTL_CREATE_CQ => {
                let (mut r, mut w) = user.reader_writer();
                let mut req: CreateCq = r.read()?;
                if req.cq != 0 || req.reserved != 0 || req.mmap_offset != 0 || req.mmap_len != 0 {
                    return Err(EINVAL);
                }
                let cq = Cq::new(req.depth, req.eventfd)?;
                req.depth = cq.depth();
                req.mmap_len = cq.ring_len() as u64;
                req.cq = me.cqs.lock().insert(cq)?;
                req.mmap_offset = (req.cq as u64) << PAGE_SHIFT;
                if let Err(e) = w.write(&req) {
                    let _ = me.cqs.lock().remove(req.cq);
                    return Err(e);
                }
            }
            abi::IOCTL_DESTROY_CQ => {
                let req: CqOp = user.reader().read()?;
                if req.solicited_only != 0 {
                    return Err(EINVAL);
                }
                let mut cqs = me.cqs.lock();
                if cqs.get(req.cq)?.in_use() {
                    return Err(EBUSY);
                }
                drop(cqs.remove(req.cq)?);
            }
            abi::IOCTL_ARM_CQ => {
                let req: CqOp = user.reader().read()?;
                if req.solicited_only > 1 {
                    return Err(EINVAL);
                }
                me.cqs.lock().get(req.cq)?.arm(req.solicited_only == 1)?;
            }
            abi::IOCTL_CREATE_QP => {
                let (mut r, mut w) = user.reader_writer();
                let req: CreateQp = r.read()?;
                let out = me.create_qp(req)?;
                if let Err(e) = w.write(&out) {
                    let gone = me.qps.lock().remove(out.qp);
                    drop(gone);
                    return Err(e);
                }
            }
            abi::IOCTL_ADOPT_QP => {
                let (mut r, mut w) = user.reader_writer();
                let req: AdoptQp = r.read()?;
                w.write(&me.adopt_qp(req, SocketFrom::Fd)?)?;
            }
            abi::IOCTL_CONNECT_QP => {
                let (mut r, mut w) = user.reader_writer();
                let mut req: ConnectQp = r.read()?;
                let port = u16::try_from(req.port).map_err(|_| EINVAL)?;
                if req.adopt.role != abi::role::INITIATOR || port == 0 || req.adopt.fd != 0 {
                    return Err(EINVAL);
                }
                req.adopt = me.adopt_qp(req.adopt, SocketFrom::Connect { addr: req.addr, port })?;
                w.write(&req)?;
            }
            abi::IOCTL_DESTROY_QP => {
                let req: DestroyQp = user.reader().read()?;
                if req.reserved != 0 {
                    return Err(EINVAL);
                }
                let gone = me.qps.lock().remove(req.qp)?;
                drop(gone);
            }
            abi::IOCTL_QUERY_QP => {
                let (mut r, mut w) = user.reader_writer();
                let mut req: QueryQp = r.read()?;
                let (state, terminate, sent) = me.qp(req.qp)?.query();
                req.state = state;
                req.terminate = terminate;
                req.terminate_sent = sent as u32;
                w.write(&req)?;
            }
            abi::IOCTL_DOORBELL => {
                let (mut r, mut w) = user.reader_writer();
                let mut db: Doorbell = r.read()?;
                me.qp(db.qp)?.doorbell(&mut db)?;
                w.write(&db)?;
            }
            _ => return Err(ENOTTY),
        }
        Ok(0)
    }
}

impl Context {
    /// The QP `handle` names (the table is not held while the caller uses it).
    fn qp(&self, handle: u32) -> Result<Arc<QueuePair>> {
        Ok(self.qps.lock().get(handle)?.qp.clone())
    }

    /// A QP not connected yet, reporting to two of this context's CQs.
    fn create_qp(&self, mut req: CreateQp) -> Result<CreateQp> {
        let outs_zero = req.qp == 0 && req.reserved == 0 && req.sq_offset == 0 && req.rq_offset == 0 && req.sq_len == 0 && req.rq_len == 0;
        let valid = (1..=MAX_QP_WR).contains(&req.max_recv_wr) && (1..=MAX_QP_WR).contains(&req.max_send_wr) && outs_zero;
        if !valid {
            return Err(EINVAL);
        }
        let (send_cq, recv_cq) = {
            let cqs = self.cqs.lock();
            (cqs.get(req.send_cq)?.clone(), cqs.get(req.recv_cq)?.clone())
        };
        let limits = Limits { max_recv_wr: req.max_recv_wr, max_send_wr: req.max_send_wr };
        let mut qps = self.qps.lock();
        let handle = qps.next_handle()?;
        let qp = QueuePair::new(handle, self.mrs.clone(), &send_cq, &recv_cq, limits)?;
        req.sq_len = qp.send_ring().len() as u64;
        req.rq_len = qp.recv_ring().len() as u64;
        req.qp = qps.insert(Entry { hook: None, qp })?;
        req.sq_offset = (ring_kind::SQ << ring_kind::SHIFT | req.qp as u64) << PAGE_SHIFT;
        req.rq_offset = (ring_kind::RQ << ring_kind::SHIFT | req.qp as u64) << PAGE_SHIFT;
        Ok(req)
    }

    /// Validates an ADOPT_QP or CONNECT_QP request, takes the socket `from` where it says, runs
    /// the MPA exchange (without holding any lock: it blocks on the network), then hooks the
    /// socket so data is received.
    fn adopt_qp(&self, mut req: AdoptQp, from: SocketFrom) -> Result<AdoptQp> {
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
        let qp = self.qp(req.qp)?;
        qp.claim()?;
        let est = match self.exchange(&mut req, from) {
            Ok(est) => est,
            Err(e) => {
                qp.abandon();
                return Err(e);
            }
        };
        let c = est.conn;
        req.peer_private_len = est.peer_private.len() as u32;
        req.negotiated =
            (if c.rx_markers { conn::RX_MARKERS } else { 0 }) | (if c.tx_markers { conn::TX_MARKERS } else { 0 }) | (if c.crc { conn::CRC } else { 0 });
        req.rev = c.rev as u32;
        req.neg_ird = c.ird as u32;
        req.neg_ord = c.ord as u32;
        let hooked = qp.connect(est).and_then(|()| {
            let mut qps = self.qps.lock();
            // Destroyed meanwhile: EINVAL, and closing below ends the connection.
            let entry = qps.get_mut(req.qp)?;
            entry.hook = Some(Hook::install(qp.socket()?, qp.clone())?);
            Ok(())
        });
        if let Err(e) = hooked {
            qp.close();
            return Err(e);
        }
        Ok(req)
    }

    /// Gets the connected socket and runs the MPA exchange.
    fn exchange(&self, req: &mut AdoptQp, from: SocketFrom) -> Result<qp::Established> {
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
        let sock = match from {
            SocketFrom::Fd => TcpSocket::adopt(req.fd)?,
            SocketFrom::Connect { addr, port } => TcpSocket::connect(addr, port, req.timeout_ms)?,
        };
        let est = qp::establish(sock, req.role == abi::role::INITIATOR, &local, &private, req.timeout_ms)?;
        let n = est.peer_private.len().min(req.peer_private_cap as usize);
        UserSlice::new(UserPtr::from_addr(req.peer_private as usize), n).writer().write_slice(&est.peer_private[..n])?;
        Ok(est)
    }
}

/// Where a QP's TCP connection comes from.
#[derive(Clone, Copy)]
enum SocketFrom {
    /// The caller's connected socket (ADOPT_QP).
    Fd,
    /// A connection the module makes (CONNECT_QP).
    Connect { addr: u32, port: u16 },
}

#[pinned_drop]
impl PinnedDrop for Context {
    fn drop(self: Pin<&mut Self>) {
        CONTEXTS.fetch_sub(1, Ordering::Relaxed);
    }
}
