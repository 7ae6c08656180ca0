// SPDX-License-Identifier: GPL-2.0

//! The iWARP connection manager's calls (`iw_cm`, which rdma_cm drives): a listener that hands
//! each whole MPA request to iw_cm as CONNECT_REQUEST, `iw_connect` and `iw_accept` that start
//! an MPA exchange and return at once (the exchange's work, then a job on the connection
//! workqueue, connects the QP and reports CONNECT_REPLY or ESTABLISHED), `iw_reject`, and a
//! CLOSE when a connected QP ends, however. Each event iw_cm is promised comes exactly once
//! (docs/device-model.md says which), and the `cm_id` is referenced from the call that
//! promises events until the last one.

use super::device::IbDevice;
use super::events;
use crate::error::{econnaborted, econnrefused};
use crate::ffi;
use crate::listen::{Arrived, Listener, OnRequest};
use crate::proto::markers::Markers;
use crate::proto::mpa::frame::{RtrTypes, MAX_PRIVATE};
use crate::proto::mpa::negotiate::Local;
use crate::qp::{Established, Exchange, Failed, OnEnded, OnSettled, QueuePair, Side, StreamOptions};
use crate::socket::{Endpoint, Hook, TcpSocket};
use crate::sync::{new_spinlock_bh, SpinLockBh};
use crate::verbs::{QpEvent, QpState, MAX_IRD_ORD};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::workqueue::{self, impl_has_work, new_work, Work, WorkItem};

/// How long an MPA exchange the connection manager started may take.
const EXCHANGE_MS: u32 = 10_000;

/// A QP of the RDMA core's and what connects it: the QP's socket hook once connected, and
/// its report to the connection manager.
#[pin_data]
pub(crate) struct QpConnection {
    pub(super) ibqp: usize,
    pub(super) qp: Arc<QueuePair>,
    #[pin]
    hook: Mutex<Hooked>,
    report: Arc<Report>,
    /// The MPA exchange in progress for `iw_connect` or `iw_accept`, until its job runs.
    #[pin]
    exchange: Mutex<Option<Arc<Exchange>>>,
}

/// A QP's socket hook.
enum Hooked {
    /// Not connected yet.
    NotYet,
    Connected(Hook<QueuePair>),
    /// The QP is destroyed: a connection finishing now is refused, not hooked.
    Destroyed,
}

impl QpConnection {
    pub(super) fn new(ibqp: *mut ffi::ib_qp, qp: Arc<QueuePair>) -> Result<Arc<QpConnection>> {
        let report = Arc::pin_init(pin_init!(Report { ibqp: ibqp as usize, state <- new_spinlock_bh!(Reporting::default(), "Report::state") }), GFP_KERNEL)?;
        qp.tell_ended(report.clone())?;
        Arc::pin_init(pin_init!(QpConnection { ibqp: ibqp as usize, qp, hook <- new_mutex!(Hooked::NotYet), report, exchange <- new_mutex!(None) }), GFP_KERNEL)
    }

    /// Takes the established stream and hooks its socket: the QP is connected.
    fn attach(&self, est: Established) -> Result {
        let opts = StreamOptions { copy_send: false, ooo: true, aligned: false, markers: Markers::RFC };
        self.qp.connect(est, &opts)?;
        let doorbell = self.qp.places_out_of_order();
        let hook = Hook::install(self.qp.socket()?, self.qp.clone(), doorbell, crate::rx_callback_max() > 0)?;
        let mut hooked = self.hook.lock();
        if let Hooked::Destroyed = *hooked {
            // Destroyed while connecting: its socket must not stay hooked after the destroy.
            drop(hooked);
            drop(hook);
            return Err(econnaborted());
        }
        *hooked = Hooked::Connected(hook);
        Ok(())
    }

    /// The QP is being destroyed (ended already): an exchange still in progress fails now with
    /// ECONNABORTED, so that iw_cm hears of it (and lets the QP go) without waiting for the
    /// exchange's deadline.
    pub(super) fn abort_exchange(&self) {
        let ex = self.exchange.lock().take();
        if let Some(ex) = ex {
            ex.abort(econnaborted());
        }
    }

    /// The QP is being destroyed (ended already): its socket is unhooked.
    pub(super) fn unhook(&self) {
        let was = core::mem::replace(&mut *self.hook.lock(), Hooked::Destroyed);
        if let Hooked::Connected(hook) = was {
            drop(hook);
        }
    }
}

/// Where a connection's report to the connection manager is.
#[derive(Default)]
struct Reporting {
    /// The `cm_id` reported to (referenced), 0 if none.
    id: usize,
    /// CONNECT_REPLY(0) or ESTABLISHED went: the connection is up for iw_cm.
    up: bool,
    /// The QP ended (before it was up, the CLOSE waits for that).
    ended: bool,
}

/// A QP's report to the connection manager, and of its errors to its event handler; told
/// when the QP ends.
#[pin_data]
struct Report {
    /// The RDMA core's QP: it outlives the engine QP's end (its destroy ends it first).
    ibqp: usize,
    #[pin]
    state: SpinLockBh<Reporting>,
}

impl Report {
    /// Reports to `id` from now on (taking a reference); EBUSY if reporting already.
    fn bind(&self, id: *mut ffi::iw_cm_id) -> Result {
        let mut st = self.state.lock();
        if st.id != 0 {
            return Err(EBUSY);
        }
        // SAFETY: iw_cm passed `id` to the call running now, which holds it.
        unsafe { ffi::iwarp_shim_iw_ref(id, true) };
        // `ended` stays: a QP that ended before its exchange settles reports CLOSE at once.
        *st = Reporting { id: id as usize, up: false, ended: st.ended };
        Ok(())
    }

    /// The connection is up: `ev` (CONNECT_REPLY with status 0, or ESTABLISHED) goes, and a
    /// CLOSE at once if the QP ended meanwhile.
    fn up(&self, ev: &ffi::iwarp_iw_event) {
        let id = self.state.lock().id;
        if id == 0 {
            return;
        }
        // iw_cm reserved room for this event and CLOSE when it made the `cm_id` (four entries
        // for a connect, three for a request's).
        // SAFETY: `id` is referenced until `last` lets it go.
        unsafe { deliver(id, ev) };
        let close = {
            let mut st = self.state.lock();
            st.up = true;
            st.ended
        };
        if close {
            self.close();
        }
    }

    /// Sends `ev`, the last event (CLOSE, or a CONNECT_REPLY with an error), and lets the
    /// `cm_id` go.
    fn last(&self, ev: &ffi::iwarp_iw_event) {
        let id = core::mem::take(&mut *self.state.lock()).id;
        if id == 0 {
            return;
        }
        // SAFETY: `id` was referenced until here.
        unsafe {
            deliver(id, ev);
            ffi::iwarp_shim_iw_ref(id as *mut ffi::iw_cm_id, false);
        }
    }

    /// Lets the `cm_id` go without an event (the call that bound it fails).
    fn fail_silently(&self) {
        let id = core::mem::take(&mut *self.state.lock()).id;
        if id != 0 {
            // SAFETY: `id` was referenced until here.
            unsafe { ffi::iwarp_shim_iw_ref(id as *mut ffi::iw_cm_id, false) };
        }
    }

    /// Sends CLOSE, the last event.
    fn close(&self) {
        self.last(&event(ffi::IWARP_IW_CLOSE, 0, Endpoint::default(), Endpoint::default()));
    }
}

/// Sends `ev` to the `cm_id` `id`. iw_cm copies a CONNECT_REPLY's private data with an atomic
/// allocation and drops the event if that fails; the reply then goes again without it: it must
/// arrive (iw_cm waits for it for ever, and a CLOSE after a lost one reaches its `BUG()`).
///
/// # Safety
/// `id` is a referenced `cm_id`.
unsafe fn deliver(id: usize, ev: &ffi::iwarp_iw_event) {
    // SAFETY: `id` is referenced (the caller's promise); `ev` is live during the call.
    let refused = unsafe { ffi::iwarp_shim_iw_event(id as *mut ffi::iw_cm_id, ev) } != 0;
    if refused && ev.private_len != 0 {
        let bare = ffi::iwarp_iw_event { private_data: core::ptr::null(), private_len: 0, ..*ev };
        // SAFETY: as above.
        unsafe { ffi::iwarp_shim_iw_event(id as *mut ffi::iw_cm_id, &bare) };
    }
}

impl OnEnded for Report {
    fn ended(&self, _event: Option<QpEvent>) {
        let up = {
            let mut st = self.state.lock();
            st.ended = true;
            st.up
        };
        if up {
            self.close();
        }
    }

    /// The consumer's event handler runs outside the QP's locks: it may post to the QP.
    fn after_ended(&self, event: Option<QpEvent>) {
        if let Some(ev) = event {
            // SAFETY: an event comes from a Terminate or a lost connection, seen by the runs the
            // socket hook drives or by a hand-over (the work, or a user doorbell's system call);
            // destroy (`KernelQp::end`) waits them out (it settles the work and unhooks the
            // socket; uverbs destroys no QP while a command on it runs) before the RDMA core
            // frees the QP.
            unsafe { events::qp_ended(self.ibqp, ev.kind) };
        }
    }
}

/// An event with nothing but its kind, status and ends.
fn event(kind: u32, status: i32, local: Endpoint, remote: Endpoint) -> ffi::iwarp_iw_event {
    ffi::iwarp_iw_event {
        event: kind,
        status,
        local: local.into(),
        remote: remote.into(),
        private_data: core::ptr::null(),
        private_len: 0,
        provider_data: core::ptr::null_mut(),
        ird: 0,
        ord: 0,
    }
}

/// What we ask of MPA for `p` on `dev`: markers, CRC, revision and peer-to-peer mode as the
/// link's options say (markers and CRC, revision 2, no peer-to-peer by default), its IRD and
/// ORD (EINVAL above what the engine takes). In peer-to-peer mode any RTR message will do: a
/// zero-length Send takes no receive of the consumer's.
fn local(dev: &IbDevice, p: &ffi::iwarp_iw_param) -> Result<Local> {
    if p.ird > MAX_IRD_ORD || p.ord > MAX_IRD_ORD {
        return Err(EINVAL);
    }
    let o = dev.mpa();
    let rev = if o.rev1 { 1 } else { 2 };
    let p2p = o.p2p && rev == 2;
    let rtr = RtrTypes { send: p2p, write: p2p, read: p2p };
    Ok(Local { markers: o.markers, crc: o.crc, rev, ird: p.ird as u16, ord: p.ord as u16, p2p, rtr, extensions: false })
}

/// The caller's private data; EINVAL if longer than MPA carries.
fn private_data(p: &ffi::iwarp_iw_param) -> Result<&[u8]> {
    let len = p.private_len as usize;
    if len > MAX_PRIVATE {
        return Err(EINVAL);
    }
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: iw_cm passes the consumer's private data, `private_len` octets valid for the call.
    Ok(unsafe { core::slice::from_raw_parts(p.private_data, len) })
}

/// What a settled exchange is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum For {
    Connect,
    Accept,
}

/// The rest of an `iw_connect` or `iw_accept` once its exchange settles, in process context
/// on the connection workqueue (the exchange's own work may not end the exchange).
#[pin_data]
struct Job {
    conn: Arc<QpConnection>,
    what: For,
    /// The ends, as the `cm_id` has them (for a failed CONNECT_REPLY).
    local: Endpoint,
    remote: Endpoint,
    #[pin]
    exchange: Mutex<Option<Arc<Exchange>>>,
    /// The job's own reference until it is queued (its exchange settles, which it does by its
    /// deadline at the latest).
    #[pin]
    me: Mutex<Option<Arc<Job>>>,
    #[pin]
    work: Work<Job>,
}

impl_has_work! {
    impl HasWork<Self> for Job { self.work }
}

impl Job {
    /// Starts the exchange on `sock` as `side` for `conn`'s QP.
    fn start(conn: Arc<QpConnection>, what: For, p: &ffi::iwarp_iw_param, sock: TcpSocket, side: Side, local: &Local, private: &[u8]) -> Result {
        let job = Arc::pin_init(
            pin_init!(Job {
                conn,
                what,
                local: Endpoint::from(&p.local),
                remote: Endpoint::from(&p.remote),
                exchange <- new_mutex!(None),
                me <- new_mutex!(None),
                work <- new_work!("Job::work"),
            }),
            GFP_KERNEL,
        )?;
        *job.me.lock() = Some(job.clone());
        // Held while starting: the job runs only once its exchange is in place.
        let mut slot = job.exchange.lock();
        match Exchange::start(sock, side, local, private, EXCHANGE_MS, job.clone()) {
            Ok(ex) => {
                *job.conn.exchange.lock() = Some(ex.clone());
                *slot = Some(ex);
                Ok(())
            }
            Err(e) => {
                drop(slot);
                job.me.lock().take();
                Err(e)
            }
        }
    }
}

impl OnSettled for Job {
    fn settled(&self) {
        let me = self.me.lock().take();
        if let Some(me) = me {
            // SAFETY: the shim's workqueue lives until the module unloads, after every device.
            let wq = unsafe { workqueue::Queue::from_raw(ffi::iwarp_shim_cm_wq()) };
            let _ = wq.enqueue(me);
        }
    }
}

impl WorkItem for Job {
    type Pointer = Arc<Job>;

    fn run(job: Arc<Job>) {
        let Some(ex) = job.exchange.lock().take() else { return };
        let conn = &job.conn;
        conn.exchange.lock().take();
        let reply = match job.what {
            For::Connect => ffi::IWARP_IW_CONNECT_REPLY,
            For::Accept => ffi::IWARP_IW_ESTABLISHED,
        };
        let failed = match ex.finish(EINVAL) {
            Ok(est) => {
                let (local, remote) = est.sock.endpoints();
                let mut ev = event(reply, 0, local, remote);
                // As rdma_cm reads them: its initiator depth from `ird`, its responder
                // resources from `ord` (ours swapped, as cxgb4 reports them).
                (ev.ird, ev.ord) = (u32::from(est.conn.ord).min(255), u32::from(est.conn.ird).min(255));
                // A CONNECT_REPLY carries the peer's private data (iw_cm copies it).
                let private = if job.what == For::Connect { copy(&est.peer_private).ok() } else { None };
                if let Some(p) = &private {
                    (ev.private_data, ev.private_len) = (p.as_ptr(), p.len().min(255) as u32);
                }
                match conn.attach(est) {
                    Ok(()) => {
                        conn.report.up(&ev);
                        return;
                    }
                    Err(e) => Failed::Error(e),
                }
            }
            Err(failed) => failed,
        };
        match job.what {
            For::Connect => {
                // The QP may be adopted again (or, if it got as far as connecting, it ends:
                // before it is up that reports nothing).
                if conn.qp.state() == QpState::Rts {
                    conn.qp.close();
                } else {
                    conn.qp.abandon();
                }
                let (status, private) = match &failed {
                    Failed::Rejected(theirs) => (econnrefused().to_errno(), &theirs[..]),
                    Failed::Error(e) => (e.to_errno(), &[][..]),
                };
                let mut ev = event(reply, status, job.local, job.remote);
                (ev.private_data, ev.private_len) = (private.as_ptr(), private.len().min(255) as u32);
                conn.report.last(&ev);
            }
            For::Accept => {
                // ESTABLISHED was promised: it goes, and CLOSE after it.
                conn.qp.close();
                conn.report.up(&event(reply, 0, job.local, job.remote));
                conn.report.close();
            }
        }
    }
}

fn copy(b: &[u8]) -> Result<KVec<u8>> {
    let mut v = KVec::with_capacity(b.len(), GFP_KERNEL)?;
    v.extend_from_slice(b, GFP_KERNEL)?;
    Ok(v)
}

/// `iw_connect`: starts the MPA exchange toward the `cm_id`'s remote address for QP `p.qpn`
/// and returns; CONNECT_REPLY follows. The connection leaves from the `cm_id`'s local address
/// and port, as siw's does: rdma_cm bound them (the device's address, a port it reports to
/// both ends; rdma_cm's port space is not TCP's, so if a socket holds that port, another).
pub(super) fn connect(dev: &IbDevice, id: *mut ffi::iw_cm_id, p: &ffi::iwarp_iw_param) -> Result {
    let conn = dev.qp(p.qpn).ok_or(EINVAL)?;
    let (local, private) = (local(dev, p)?, private_data(p)?);
    conn.qp.claim()?;
    let started = TcpSocket::connect(&Endpoint::from(&p.remote), Some(&Endpoint::from(&p.local))).and_then(|sock| {
        conn.report.bind(id)?;
        Job::start(conn.clone(), For::Connect, p, sock, Side::Initiator, &local, private).inspect_err(|_| conn.report.fail_silently())
    });
    if started.is_err() {
        conn.qp.abandon();
    }
    started
}

/// `iw_accept`: answers the request kept as `key` for QP `p.qpn` and returns; ESTABLISHED
/// follows. On an error the request is dropped (its connection closes): iw_cm forgets it.
pub(super) fn accept(dev: &IbDevice, id: *mut ffi::iw_cm_id, key: usize, p: &ffi::iwarp_iw_param) -> Result {
    let pending = dev.take_request(key).ok_or(EINVAL)?;
    let conn = dev.qp(p.qpn).ok_or(EINVAL)?;
    let (local, private) = (local(dev, p)?, private_data(p)?);
    conn.qp.claim()?;
    let started = conn.report.bind(id).and_then(|()| {
        Job::start(conn.clone(), For::Accept, p, pending.sock, Side::Accepting(pending.handshake), &local, private).inspect_err(|_| conn.report.fail_silently())
    });
    if started.is_err() {
        conn.qp.abandon();
    }
    started
}

/// `iw_reject`: answers the request kept as `key` with an MPA reject carrying `private`.
pub(super) fn reject(dev: &IbDevice, key: usize, private: &[u8]) -> Result {
    dev.take_request(key).ok_or(EINVAL)?.reject(private)
}

/// A listener of the connection manager's: its requests go to iw_cm as they arrive.
pub(crate) struct CmListener {
    listener: Arc<Listener>,
    id: usize,
}

/// Hands requests to the listening `cm_id`.
struct Announce {
    dev: Arc<IbDevice>,
    id: usize,
}

impl OnRequest for Announce {
    /// A request that cannot be kept or announced is dropped: its connection closes.
    fn request(&self, (pending, _): Arrived) {
        let (local, remote) = pending.sock.endpoints();
        let mut ev = event(ffi::IWARP_IW_CONNECT_REQUEST, 0, local, remote);
        let Ok(asked) = pending.request() else { return };
        if let Some(e) = asked.enhanced {
            // iw_cm carries them in a u8.
            (ev.ird, ev.ord) = (u32::from(e.ird).min(255), u32::from(e.ord).min(255));
        }
        let Ok(private) = copy(asked.private) else { return };
        (ev.private_data, ev.private_len) = (private.as_ptr(), private.len().min(255) as u32);
        let Ok(key) = self.dev.keep_request(pending) else { return };
        ev.provider_data = key as *mut core::ffi::c_void;
        // SAFETY: the listener references `id` until it is shut down, after its last run.
        if unsafe { ffi::iwarp_shim_iw_event(self.id as *mut ffi::iw_cm_id, &ev) } != 0 {
            // Not queued (iw_cm has no room): the connection closes.
            drop(self.dev.take_request(key));
        }
    }
}

/// `iw_create_listen`: listens on the `cm_id`'s local address, as the trampoline scoped it (a
/// wildcard to the device's netdev; IPv6 taking IPv4 connections too unless `afonly`).
pub(super) fn listen(dev: Arc<IbDevice>, id: *mut ffi::iw_cm_id, p: &ffi::iwarp_iw_param, backlog: u32) -> Result<KBox<CmListener>> {
    let (sock, _) = TcpSocket::listen(&Endpoint::from(&p.local), backlog.clamp(1, 1024), p.afonly, p.ifindex)?;
    let announce = Arc::new(Announce { dev, id: id as usize }, GFP_KERNEL)?;
    // SAFETY: iw_cm passed `id` to this call, which holds it; the listener keeps the reference.
    unsafe { ffi::iwarp_shim_iw_ref(id, true) };
    let listener = match Listener::new(sock, Some(announce)) {
        Ok(l) => l,
        Err(e) => {
            // SAFETY: taken above.
            unsafe { ffi::iwarp_shim_iw_ref(id, false) };
            return Err(e);
        }
    };
    Ok(KBox::new(CmListener { listener, id: id as usize }, GFP_KERNEL)?)
}

impl Drop for CmListener {
    /// `iw_destroy_listen`: no request is announced after this; the `cm_id` goes.
    fn drop(&mut self) {
        self.listener.shutdown();
        // SAFETY: referenced in `listen`; the listener's work has ended.
        unsafe { ffi::iwarp_shim_iw_ref(self.id as *mut ffi::iw_cm_id, false) };
    }
}
