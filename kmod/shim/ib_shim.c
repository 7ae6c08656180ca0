// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel RDMA core's side of iwarp.ko (src/ib/): the device container, the ops table whose
 * entries answer from what Rust gave at load, the rdma link type ("rdma link add NAME type
 * iwarp netdev DEV") and the netdev notifier. Which netdevs get a device, which events
 * unregister one, and the list of devices are Rust's (src/ib/link.rs); this file reaches what
 * Rust's bindings do not (ib_verbs.h, its static inlines and macros) and decides nothing.
 */
#include <linux/etherdevice.h>
#include <linux/if_arp.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/sched/mm.h>
#include <linux/workqueue.h>
#include <net/addrconf.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_verbs.h>
#include <rdma/iw_cm.h>
#include <rdma/rdma_netlink.h>
#include <rdma/restrack.h>
#include <rdma/siw-abi.h>
#include <rdma/uverbs_ioctl.h>

#include "shim.h"

/* An iwarp.ko device of the RDMA core. */
struct iwarp_ibdev {
	struct ib_device base;
	/* Port 1's GID: the netdev's MAC when the device was made (as siw). */
	u8 raw_gid[ETH_ALEN];
	/* Rust's device (src/ib/verbs.rs), freed by verbs->dev_free. */
	void *rust;
	/* It holds siw's driver id (siw_guard_shim.c) until freed. */
	bool claimed;
};

/* A user process's uverbs context: nothing of its own yet (uverbs keeps its objects). */
struct iwarp_ucontext {
	struct ib_ucontext base;
};

struct iwarp_ibpd {
	struct ib_pd base;
	u32 handle;
};

/* A region: the DMA region, or one for fast registrations with room for @max pages. */
struct iwarp_ibmr {
	struct ib_mr base;
	u32 npages;
	u32 max;
	u64 pages[];
};

struct iwarp_ibcq {
	struct ib_cq base;
	void *rust;
	/* A user process's: its ring's mapping. */
	struct rdma_user_mmap_entry *ring;
	/*
	 * Calls the consumer's handlers in softirq context, after the engine's locks are released
	 * (a handler may post to the QP whose completion woke it): the completion handler, and
	 * the event handler once the CQ overflowed (bits of @pending).
	 */
	struct work_struct notify;
	unsigned long pending;
};

/* Bits of iwarp_ibcq.pending. */
enum { IWARP_CQ_NOTIFY, IWARP_CQ_OVERFLOWED };

struct iwarp_ibqp {
	struct ib_qp base;
	void *rust;
	/* Ours and iw_cm's (iw_add_ref): destroy_qp waits until iw_cm's are gone. */
	refcount_t refs;
	struct completion unused;
	/* Hands posted send requests (and held receives) over to the engine, which may sleep. */
	struct delayed_work hand_over;
	/* A user process's: its rings' mappings. */
	struct rdma_user_mmap_entry *sq, *rq;
};

/* What a user process maps at the offset uverbs gave for it: a ring Rust made. */
struct iwarp_mmap_entry {
	struct rdma_user_mmap_entry base;
	struct iwarp_mapped_ring ring;
};

static struct iwarp_ibdev *to_iwarp(struct ib_device *dev)
{
	return container_of(dev, struct iwarp_ibdev, base);
}

static void *dev_rust(struct ib_device *dev)
{
	return to_iwarp(dev)->rust;
}

static u32 pd_handle(struct ib_pd *pd)
{
	return container_of(pd, struct iwarp_ibpd, base)->handle;
}

static void *cq_rust(struct ib_cq *cq)
{
	return container_of(cq, struct iwarp_ibcq, base)->rust;
}

static void *qp_rust(struct ib_qp *qp)
{
	return container_of(qp, struct iwarp_ibqp, base)->rust;
}

/* What Rust gave at registration; read-only afterwards. */
static struct iwarp_ib_limits iwarp_limits;
static const struct iwarp_ib_callbacks *iwarp_cb;
static const struct iwarp_ib_verbs *iwarp_verbs;

/* shim.h mirrors these for Rust. */
static_assert(IWARP_IB_WR_RDMA_WRITE == IB_WR_RDMA_WRITE && IWARP_IB_WR_SEND == IB_WR_SEND &&
	      IWARP_IB_WR_RDMA_READ == IB_WR_RDMA_READ && IWARP_IB_WR_LOCAL_INV == IB_WR_LOCAL_INV &&
	      IWARP_IB_WR_SEND_WITH_INV == IB_WR_SEND_WITH_INV &&
	      IWARP_IB_WR_RDMA_READ_WITH_INV == IB_WR_RDMA_READ_WITH_INV &&
	      IWARP_IB_WR_REG_MR == IB_WR_REG_MR);
static_assert(IWARP_IB_SEND_FENCE == IB_SEND_FENCE && IWARP_IB_SEND_SIGNALED == IB_SEND_SIGNALED &&
	      IWARP_IB_SEND_SOLICITED == IB_SEND_SOLICITED && IWARP_IB_SEND_INLINE == IB_SEND_INLINE);
static_assert(IWARP_IB_WC_SUCCESS == IB_WC_SUCCESS && IWARP_IB_WC_LOC_PROT_ERR == IB_WC_LOC_PROT_ERR &&
	      IWARP_IB_WC_WR_FLUSH_ERR == IB_WC_WR_FLUSH_ERR && IWARP_IB_WC_FATAL_ERR == IB_WC_FATAL_ERR);
static_assert(IWARP_IB_WC_SEND == IB_WC_SEND && IWARP_IB_WC_RDMA_WRITE == IB_WC_RDMA_WRITE &&
	      IWARP_IB_WC_RDMA_READ == IB_WC_RDMA_READ && IWARP_IB_WC_COMP_SWAP == IB_WC_COMP_SWAP &&
	      IWARP_IB_WC_FETCH_ADD == IB_WC_FETCH_ADD && IWARP_IB_WC_LOCAL_INV == IB_WC_LOCAL_INV &&
	      IWARP_IB_WC_REG_MR == IB_WC_REG_MR && IWARP_IB_WC_RECV == IB_WC_RECV);
static_assert(IWARP_IB_WC_WITH_INVALIDATE == IB_WC_WITH_INVALIDATE);
static_assert(IWARP_IB_QPS_RESET == IB_QPS_RESET && IWARP_IB_QPS_INIT == IB_QPS_INIT &&
	      IWARP_IB_QPS_RTR == IB_QPS_RTR && IWARP_IB_QPS_RTS == IB_QPS_RTS &&
	      IWARP_IB_QPS_SQD == IB_QPS_SQD && IWARP_IB_QPS_ERR == IB_QPS_ERR);
static_assert(IWARP_IB_QP_STATE == IB_QP_STATE);
static_assert(IWARP_IB_ACCESS_OPTIONAL == IB_ACCESS_OPTIONAL);
static_assert(IWARP_IB_CQ_SOLICITED == IB_CQ_SOLICITED && IWARP_IB_CQ_SOLICITED_MASK == IB_CQ_SOLICITED_MASK &&
	      IWARP_IB_CQ_REPORT_MISSED_EVENTS == IB_CQ_REPORT_MISSED_EVENTS);
static_assert(IWARP_IB_EVENT_QP_FATAL == IB_EVENT_QP_FATAL && IWARP_IB_EVENT_QP_ACCESS_ERR == IB_EVENT_QP_ACCESS_ERR);
static_assert(IWARP_SIW_SQE_SIZE == sizeof(struct siw_sqe) && IWARP_SIW_RQE_SIZE == sizeof(struct siw_rqe) &&
	      IWARP_SIW_CQE_SIZE == sizeof(struct siw_cqe) && IWARP_SIW_CQ_CTRL_SIZE == sizeof(struct siw_cq_ctrl));
static_assert(offsetof(struct siw_sqe, flags) == 8 && offsetof(struct siw_sqe, num_sge) == 10 &&
	      offsetof(struct siw_sqe, opcode) == 11 && offsetof(struct siw_sqe, rkey) == 12 &&
	      offsetof(struct siw_sqe, raddr) == 16 && offsetof(struct siw_sqe, sge) == 24 &&
	      offsetof(struct siw_rqe, flags) == 8 && offsetof(struct siw_rqe, num_sge) == 10 &&
	      offsetof(struct siw_rqe, sge) == 16 && sizeof(struct siw_sge) == 16 &&
	      offsetof(struct siw_cqe, flags) == 8 && offsetof(struct siw_cqe, opcode) == 9 &&
	      offsetof(struct siw_cqe, status) == 10 && offsetof(struct siw_cqe, bytes) == 12 &&
	      offsetof(struct siw_cqe, inval_stag) == 16 && offsetof(struct siw_cqe, qp_id) == 24);
static_assert(IWARP_SIW_WQE_VALID == SIW_WQE_VALID && IWARP_SIW_WQE_INLINE == SIW_WQE_INLINE &&
	      IWARP_SIW_WQE_SIGNALLED == SIW_WQE_SIGNALLED && IWARP_SIW_WQE_SOLICITED == SIW_WQE_SOLICITED &&
	      IWARP_SIW_WQE_READ_FENCE == SIW_WQE_READ_FENCE);
static_assert(IWARP_SIW_OP_WRITE == SIW_OP_WRITE && IWARP_SIW_OP_READ == SIW_OP_READ &&
	      IWARP_SIW_OP_SEND == SIW_OP_SEND && IWARP_SIW_OP_SEND_REMOTE_INV == SIW_OP_SEND_REMOTE_INV &&
	      IWARP_SIW_OP_FETCH_AND_ADD == SIW_OP_FETCH_AND_ADD && IWARP_SIW_OP_COMP_AND_SWAP == SIW_OP_COMP_AND_SWAP &&
	      IWARP_SIW_OP_RECEIVE == SIW_OP_RECEIVE && IWARP_SIW_OP_INVAL_STAG == SIW_OP_INVAL_STAG &&
	      IWARP_SIW_OP_REG_MR == SIW_OP_REG_MR);
static_assert(IWARP_SIW_WC_SUCCESS == SIW_WC_SUCCESS && IWARP_SIW_WC_LOC_PROT_ERR == SIW_WC_LOC_PROT_ERR &&
	      IWARP_SIW_WC_WR_FLUSH_ERR == SIW_WC_WR_FLUSH_ERR && IWARP_SIW_WC_GENERAL_ERR == SIW_WC_GENERAL_ERR);
static_assert(IWARP_SIW_NOTIFY_NOT == SIW_NOTIFY_NOT && IWARP_SIW_NOTIFY_SOLICITED == SIW_NOTIFY_SOLICITED &&
	      IWARP_SIW_NOTIFY_NEXT_COMPLETION == SIW_NOTIFY_NEXT_COMPLETION);
static_assert(sizeof(struct iwarp_ib_sge) == sizeof(struct ib_sge) &&
	      offsetof(struct iwarp_ib_sge, addr) == offsetof(struct ib_sge, addr) &&
	      offsetof(struct iwarp_ib_sge, length) == offsetof(struct ib_sge, length) &&
	      offsetof(struct iwarp_ib_sge, lkey) == offsetof(struct ib_sge, lkey));

static int iwarp_query_device(struct ib_device *dev, struct ib_device_attr *attr, struct ib_udata *udata)
{
	int rv = ib_is_udata_in_empty(udata);

	if (rv)
		return rv;
	memset(attr, 0, sizeof(*attr));
	/* rdma link delete may unregister it. */
	attr->kernel_cap_flags = IBK_ALLOW_USER_UNREG;
	attr->max_mr_size = iwarp_limits.max_mr_size;
	attr->max_qp = iwarp_limits.max_qp;
	attr->max_qp_wr = iwarp_limits.max_qp_wr;
	attr->max_send_sge = iwarp_limits.max_sge;
	attr->max_recv_sge = iwarp_limits.max_sge;
	attr->max_sge_rd = 1;
	attr->max_cq = iwarp_limits.max_cq;
	attr->max_cqe = iwarp_limits.max_cqe;
	attr->max_mr = iwarp_limits.max_mr;
	attr->max_pd = iwarp_limits.max_pd;
	attr->device_cap_flags = IB_DEVICE_MEM_MGT_EXTENSIONS;
	attr->max_fast_reg_page_list_len = iwarp_limits.max_page_list;
	attr->max_qp_rd_atom = iwarp_limits.max_ird_ord;
	attr->max_qp_init_rd_atom = iwarp_limits.max_ird_ord;
	attr->page_size_cap = PAGE_SIZE;
	attr->vendor_part_id = 0;
	addrconf_addr_eui48((u8 *)&attr->sys_image_guid, to_iwarp(dev)->raw_gid);
	return ib_respond_empty_udata(udata);
}

static int iwarp_query_port(struct ib_device *dev, u32 port, struct ib_port_attr *attr)
{
	struct net_device *ndev;
	int rv;

	memset(attr, 0, sizeof(*attr));
	rv = ib_get_eth_speed(dev, port, &attr->active_speed, &attr->active_width);
	if (rv)
		return rv;
	ndev = ib_device_get_netdev(dev, port);
	if (!ndev)
		return -ENODEV;
	attr->gid_tbl_len = 1;
	attr->max_msg_sz = iwarp_limits.max_message;
	attr->max_mtu = ib_mtu_int_to_enum(ndev->max_mtu);
	attr->active_mtu = ib_mtu_int_to_enum(READ_ONCE(ndev->mtu));
	attr->state = ib_get_curr_port_state(ndev);
	attr->phys_state = attr->state == IB_PORT_ACTIVE ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	attr->port_cap_flags = IB_PORT_CM_SUP | IB_PORT_DEVICE_MGMT_SUP;
	dev_put(ndev);
	return 0;
}

static int iwarp_get_port_immutable(struct ib_device *dev, u32 port, struct ib_port_immutable *immutable)
{
	struct ib_port_attr attr;
	int rv = iwarp_query_port(dev, port, &attr);

	if (rv)
		return rv;
	immutable->gid_tbl_len = attr.gid_tbl_len;
	immutable->core_cap_flags = RDMA_CORE_PORT_IWARP;
	return 0;
}

static int iwarp_query_gid(struct ib_device *dev, u32 port, int idx, union ib_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	memcpy(gid->raw, to_iwarp(dev)->raw_gid, ETH_ALEN);
	return 0;
}

/*
 * --- the verbs: kernel consumers, and user processes through uverbs with rdma-core's siw
 * provider, in siw's ABI (include/uapi/rdma/siw-abi.h): a user CQ or QP has rings the process
 * maps (Rust's, src/ib/siw_rings.rs), each at the offset its create answers ---
 */

/* Makes @ring mappable in @ctx: the offset to answer, or SIW_INVAL_UOBJ_KEY (and @ring put). */
static struct rdma_user_mmap_entry *map_ring(struct ib_ucontext *ctx, const struct iwarp_mapped_ring *ring, u64 *key)
{
	struct iwarp_mmap_entry *entry = kzalloc(sizeof(*entry), GFP_KERNEL);

	*key = SIW_INVAL_UOBJ_KEY;
	if (!entry) {
		iwarp_verbs->ring_put(ring->rust);
		return NULL;
	}
	entry->ring = *ring;
	if (rdma_user_mmap_entry_insert(ctx, &entry->base, ring->bytes)) {
		iwarp_verbs->ring_put(ring->rust);
		kfree(entry);
		return NULL;
	}
	*key = rdma_user_mmap_get_offset(&entry->base);
	return &entry->base;
}

/* Once nothing maps it and its object is gone. */
static void iwarp_mmap_free(struct rdma_user_mmap_entry *base)
{
	struct iwarp_mmap_entry *entry = container_of(base, struct iwarp_mmap_entry, base);

	iwarp_verbs->ring_put(entry->ring.rust);
	kfree(entry);
}

static int iwarp_mmap(struct ib_ucontext *ctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *base = rdma_user_mmap_entry_get(ctx, vma);
	struct iwarp_mmap_entry *entry;
	int rv;

	if (!base)
		return -EINVAL;
	entry = container_of(base, struct iwarp_mmap_entry, base);
	rv = iwarp_shim_ring_mmap(vma, entry->ring.addr, entry->ring.bytes);
	rdma_user_mmap_entry_put(base);
	return rv;
}

static int iwarp_alloc_ucontext(struct ib_ucontext *ctx, struct ib_udata *udata)
{
	struct siw_uresp_alloc_ctx uresp = { .dev_id = ctx->device->index };

	if (udata->outlen < sizeof(uresp))
		return -EINVAL;
	return ib_respond_udata(udata, uresp);
}

static void iwarp_dealloc_ucontext(struct ib_ucontext *ctx)
{
}

/* The provider sends and expects no data of its own here (udata is NULL for kernel consumers). */
static int iwarp_alloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	return iwarp_verbs->alloc_pd(dev_rust(pd->device), &container_of(pd, struct iwarp_ibpd, base)->handle);
}

static int iwarp_dealloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	return iwarp_verbs->dealloc_pd(dev_rust(pd->device), pd_handle(pd));
}

/* The container of the region Rust registered as @stag, with room for @max pages (else it goes). */
static struct ib_mr *new_mr(struct ib_pd *pd, u32 stag, u32 max)
{
	struct iwarp_ibmr *mr = kzalloc(struct_size(mr, pages, max), GFP_KERNEL);

	if (!mr) {
		iwarp_verbs->dereg_mr(dev_rust(pd->device), stag);
		return ERR_PTR(-ENOMEM);
	}
	mr->max = max;
	mr->base.lkey = stag;
	mr->base.rkey = stag;
	return &mr->base;
}

static struct ib_mr *iwarp_get_dma_mr(struct ib_pd *pd, int access)
{
	u32 stag;
	int rv = iwarp_verbs->dma_mr(dev_rust(pd->device), pd_handle(pd), access, &stag);

	return rv ? ERR_PTR(rv) : new_mr(pd, stag, 0);
}

static struct ib_mr *iwarp_alloc_mr(struct ib_pd *pd, enum ib_mr_type type, u32 max_num_sg)
{
	u32 stag;
	int rv;

	if (type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	rv = iwarp_verbs->alloc_mr(dev_rust(pd->device), pd_handle(pd), max_num_sg, &stag);
	/* max_num_sg is bounded by now (the device's max_fast_reg_page_list_len). */
	return rv ? ERR_PTR(rv) : new_mr(pd, stag, max_num_sg);
}

/*
 * A user buffer, pinned and charged to the process's RLIMIT_MEMLOCK (uverbs deregisters it when
 * the process ends, however). siw's request may name the STag's key; ours is the engine's, so
 * only 0 (what libsiw sends) is taken. The answer is the STag, in lkey, rkey and siw's reply.
 */
static struct ib_mr *iwarp_reg_user_mr(struct ib_pd *pd, u64 start, u64 length, u64 virt, int access,
				       struct ib_dmah *dmah, struct ib_udata *udata)
{
	u32 stag;
	int rv;

	if (dmah)
		return ERR_PTR(-EOPNOTSUPP);
	if (udata) {
		struct siw_ureq_reg_mr ureq;

		rv = ib_copy_validate_udata_in(udata, ureq, pad);
		if (rv)
			return ERR_PTR(rv);
		if (ureq.stag_key || udata->outlen < sizeof(struct siw_uresp_reg_mr))
			return ERR_PTR(-EINVAL);
	}
	rv = iwarp_verbs->user_mr(dev_rust(pd->device), pd_handle(pd), start, length, virt, access, &stag);
	if (rv)
		return ERR_PTR(rv);
	if (udata) {
		struct siw_uresp_reg_mr uresp = { .stag = stag };

		rv = ib_respond_udata(udata, uresp);
		if (rv) {
			iwarp_verbs->dereg_mr(dev_rust(pd->device), stag);
			return ERR_PTR(rv);
		}
	}
	return new_mr(pd, stag, 0);
}

static int iwarp_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct iwarp_ibmr *mr = container_of(ibmr, struct iwarp_ibmr, base);

	if (mr->npages == mr->max)
		return -ENOMEM;
	mr->pages[mr->npages++] = addr;
	return 0;
}

static int iwarp_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents, unsigned int *sg_offset)
{
	struct iwarp_ibmr *mr = container_of(ibmr, struct iwarp_ibmr, base);
	int n, rv;

	mr->npages = 0;
	n = ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, iwarp_set_page);
	if (n <= 0)
		return n;
	rv = iwarp_verbs->map_mr(dev_rust(ibmr->device), ibmr->lkey, ibmr->iova, ibmr->length, ibmr->page_size,
				 mr->pages, mr->npages);
	return rv ? rv : n;
}

static int iwarp_dereg_mr(struct ib_mr *mr, struct ib_udata *udata)
{
	int rv = iwarp_verbs->dereg_mr(dev_rust(mr->device), mr->lkey);

	if (!rv)
		kfree(container_of(mr, struct iwarp_ibmr, base));
	return rv;
}

static void iwarp_cq_notify(struct work_struct *work)
{
	struct iwarp_ibcq *icq = container_of(work, struct iwarp_ibcq, notify);
	struct ib_cq *cq = &icq->base;

	if (test_and_clear_bit(IWARP_CQ_OVERFLOWED, &icq->pending) && cq->event_handler) {
		struct ib_event event = { .device = cq->device, .event = IB_EVENT_CQ_ERR, .element.cq = cq };

		cq->event_handler(&event, cq->cq_context);
	}
	if (test_and_clear_bit(IWARP_CQ_NOTIFY, &icq->pending) && cq->comp_handler)
		cq->comp_handler(cq, cq->cq_context);
}

static atomic_t iwarp_cq_ids;

static int iwarp_create_cq(struct ib_cq *cq, const struct ib_cq_init_attr *attr, struct uverbs_attr_bundle *attrs)
{
	struct iwarp_ibcq *icq = container_of(cq, struct iwarp_ibcq, base);
	struct ib_udata *udata = attrs ? &attrs->driver_udata : NULL;
	struct iwarp_mapped_ring ring;
	u32 entries = attr->cqe;
	int rv;

	if (attr->flags)
		return -EOPNOTSUPP;
	if (attr->comp_vector >= cq->device->num_comp_vectors)
		return -EINVAL;
	if (udata && udata->outlen < sizeof(struct siw_uresp_create_cq))
		return -EINVAL;
	INIT_WORK(&icq->notify, iwarp_cq_notify);
	rv = iwarp_verbs->create_cq(dev_rust(cq->device), cq, &entries, udata ? &ring : NULL, &icq->rust);
	if (rv)
		return rv;
	cq->cqe = entries;
	if (udata) {
		struct iwarp_ucontext *uctx = rdma_udata_to_drv_context(udata, struct iwarp_ucontext, base);
		/* libsiw names the CQ by this in its messages only. */
		struct siw_uresp_create_cq uresp = { .cq_id = atomic_inc_return(&iwarp_cq_ids), .num_cqe = entries };

		icq->ring = map_ring(&uctx->base, &ring, &uresp.cq_key);
		rv = icq->ring ? ib_respond_udata(udata, uresp) : -ENOMEM;
		if (rv) {
			if (icq->ring)
				rdma_user_mmap_entry_remove(icq->ring);
			iwarp_verbs->destroy_cq(icq->rust);
			return rv;
		}
	}
	return 0;
}

static int iwarp_destroy_cq(struct ib_cq *cq, struct ib_udata *udata)
{
	struct iwarp_ibcq *icq = container_of(cq, struct iwarp_ibcq, base);

	/* Rust queues no notification after this; one queued before is waited out. */
	iwarp_verbs->destroy_cq(icq->rust);
	cancel_work_sync(&icq->notify);
	if (icq->ring)
		rdma_user_mmap_entry_remove(icq->ring);
	return 0;
}

void iwarp_shim_ib_cq_notify(struct ib_cq *cq)
{
	struct iwarp_ibcq *icq = container_of(cq, struct iwarp_ibcq, base);

	set_bit(IWARP_CQ_NOTIFY, &icq->pending);
	queue_work(system_bh_wq, &icq->notify);
}

void iwarp_shim_ib_cq_notify_user(struct ib_cq *cq)
{
	if (cq->comp_handler)
		cq->comp_handler(cq, cq->cq_context);
}

void iwarp_shim_ib_cq_overflowed(struct ib_cq *cq)
{
	struct iwarp_ibcq *icq = container_of(cq, struct iwarp_ibcq, base);

	set_bit(IWARP_CQ_OVERFLOWED, &icq->pending);
	queue_work(system_bh_wq, &icq->notify);
}

void iwarp_shim_ib_qp_event(struct ib_qp *qp, u32 type)
{
	struct ib_event event = { .device = qp->device, .event = type, .element.qp = qp };

	if (qp->event_handler)
		qp->event_handler(&event, qp->qp_context);
}

static int iwarp_poll_cq(struct ib_cq *cq, int num, struct ib_wc *wc)
{
	struct iwarp_ib_wc got[16];
	int done = 0;

	while (done < num) {
		int i, n = iwarp_verbs->poll_cq(cq_rust(cq), got, min_t(int, num - done, ARRAY_SIZE(got)));

		if (n <= 0)
			return done ? done : n;
		for (i = 0; i < n; i++, done++) {
			memset(&wc[done], 0, sizeof(wc[done]));
			wc[done].wr_id = got[i].wr_id;
			wc[done].qp = got[i].qp;
			wc[done].status = got[i].status;
			wc[done].opcode = got[i].opcode;
			wc[done].byte_len = got[i].byte_len;
			wc[done].wc_flags = got[i].flags;
			wc[done].ex.invalidate_rkey = got[i].invalidate_rkey;
		}
		if (n < ARRAY_SIZE(got))
			break;
	}
	return done;
}

static int iwarp_req_notify_cq(struct ib_cq *cq, enum ib_cq_notify_flags flags)
{
	return iwarp_verbs->req_notify_cq(cq_rust(cq), flags);
}

/*
 * Posting: block drivers' sends go through this work, so it may neither wait for memory that
 * writeback must free (a workqueue with a rescuer, allocations without I/O) nor for another
 * workqueue's progress.
 */
static struct workqueue_struct *iwarp_post_wq;

static void iwarp_qp_hand_over(struct work_struct *work)
{
	struct iwarp_ibqp *qp = container_of(to_delayed_work(work), struct iwarp_ibqp, hand_over);
	unsigned int noio = memalloc_noio_save();

	iwarp_verbs->hand_over(qp->rust);
	memalloc_noio_restore(noio);
}

void iwarp_shim_ib_qp_kick(struct ib_qp *qp, unsigned int later_ms)
{
	struct delayed_work *dw = &container_of(qp, struct iwarp_ibqp, base)->hand_over;

	if (later_ms)
		queue_delayed_work(iwarp_post_wq, dw, max(msecs_to_jiffies(later_ms), 1UL));
	else
		mod_delayed_work(iwarp_post_wq, dw, 0);
}

bool iwarp_shim_bh_locks_allowed(void)
{
	return !in_hardirq() && !irqs_disabled();
}

void iwarp_shim_ib_qp_settle(struct ib_qp *qp)
{
	cancel_delayed_work_sync(&container_of(qp, struct iwarp_ibqp, base)->hand_over);
}

static int iwarp_destroy_qp(struct ib_qp *qp, struct ib_udata *udata);

static int iwarp_create_qp(struct ib_qp *qp, struct ib_qp_init_attr *init, struct ib_udata *udata)
{
	struct iwarp_ib_qp_attr a = {
		.pd = pd_handle(qp->pd),
		.send_cq = init->send_cq ? cq_rust(init->send_cq) : NULL,
		.recv_cq = init->recv_cq ? cq_rust(init->recv_cq) : NULL,
		.rc = init->qp_type == IB_QPT_RC,
		.srq = init->srq != NULL,
		.sq_sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR,
		.max_send_wr = init->cap.max_send_wr,
		.max_recv_wr = init->cap.max_recv_wr,
		.max_send_sge = init->cap.max_send_sge,
		.max_recv_sge = init->cap.max_recv_sge,
		.max_inline = init->cap.max_inline_data,
		.user = udata != NULL,
	};
	struct iwarp_ibqp *iqp = container_of(qp, struct iwarp_ibqp, base);
	int rv;

	if (init->create_flags || init->xrcd || init->rwq_ind_tbl)
		return -EOPNOTSUPP;
	if (udata && udata->outlen < sizeof(struct siw_uresp_create_qp))
		return -EINVAL;
	INIT_DELAYED_WORK(&container_of(qp, struct iwarp_ibqp, base)->hand_over, iwarp_qp_hand_over);
	refcount_set(&container_of(qp, struct iwarp_ibqp, base)->refs, 1);
	init_completion(&container_of(qp, struct iwarp_ibqp, base)->unused);
	rv = iwarp_verbs->create_qp(dev_rust(qp->device), qp, &a, &container_of(qp, struct iwarp_ibqp, base)->rust);
	if (rv)
		return rv;
	init->cap.max_send_wr = a.max_send_wr;
	init->cap.max_recv_wr = a.max_recv_wr;
	init->cap.max_send_sge = a.max_send_sge;
	init->cap.max_recv_sge = a.max_recv_sge;
	init->cap.max_inline_data = a.max_inline;
	qp->qp_num = a.qpn;
	if (udata) {
		struct iwarp_ucontext *uctx = rdma_udata_to_drv_context(udata, struct iwarp_ucontext, base);
		struct siw_uresp_create_qp uresp = {
			.qp_id = a.qpn, .num_sqe = a.max_send_wr, .num_rqe = a.max_recv_wr,
		};

		iqp->sq = map_ring(&uctx->base, &a.sq, &uresp.sq_key);
		iqp->rq = map_ring(&uctx->base, &a.rq, &uresp.rq_key);
		rv = iqp->sq && iqp->rq ? ib_respond_udata(udata, uresp) : -ENOMEM;
		if (rv) {
			iwarp_destroy_qp(qp, udata);
			return rv;
		}
	}
	return 0;
}

/* The counters `rdma resource show qp -dd` prints beside the RDMA core's own fields. */
static int iwarp_fill_res_qp_entry(struct sk_buff *msg, struct ib_qp *qp)
{
	struct iwarp_ib_qp_counters c = {};
	struct nlattr *table = nla_nest_start(msg, RDMA_NLDEV_ATTR_DRIVER);

	if (!table)
		return -EMSGSIZE;
	iwarp_verbs->qp_counters(qp_rust(qp), &c);
	if (rdma_nl_put_driver_u64(msg, "sent_zero_copy", c.sent_zero_copy) || rdma_nl_put_driver_u64(msg, "sent_copied", c.sent_copied) ||
	    rdma_nl_put_driver_u64(msg, "placed_in_order", c.placed_in_order) ||
	    rdma_nl_put_driver_u64(msg, "placed_out_of_order", c.placed_out_of_order)) {
		nla_nest_cancel(msg, table);
		return -EMSGSIZE;
	}
	nla_nest_end(msg, table);
	return 0;
}

/* libsiw sends and expects no data of its own here. */
static int iwarp_modify_qp(struct ib_qp *qp, struct ib_qp_attr *attr, int mask, struct ib_udata *udata)
{
	return iwarp_verbs->modify_qp(qp_rust(qp), mask, attr->qp_state);
}

static int iwarp_query_qp(struct ib_qp *qp, struct ib_qp_attr *attr, int mask, struct ib_qp_init_attr *init)
{
	struct iwarp_ib_qp_attr a = {};
	int rv = iwarp_verbs->query_qp(qp_rust(qp), &a);

	if (rv)
		return rv;
	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	attr->qp_state = a.state;
	attr->cur_qp_state = a.state;
	attr->cap.max_send_wr = a.max_send_wr;
	attr->cap.max_recv_wr = a.max_recv_wr;
	attr->cap.max_send_sge = a.max_send_sge;
	attr->cap.max_recv_sge = a.max_recv_sge;
	attr->cap.max_inline_data = a.max_inline;
	attr->path_mtu = IB_MTU_4096;
	init->qp_type = IB_QPT_RC;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->cap = attr->cap;
	init->sq_sig_type = a.sq_sig_all ? IB_SIGNAL_ALL_WR : IB_SIGNAL_REQ_WR;
	return 0;
}

static void iwarp_iw_add_ref(struct ib_qp *qp)
{
	refcount_inc(&container_of(qp, struct iwarp_ibqp, base)->refs);
}

static void iwarp_iw_rem_ref(struct ib_qp *qp)
{
	struct iwarp_ibqp *iqp = container_of(qp, struct iwarp_ibqp, base);

	if (refcount_dec_and_test(&iqp->refs))
		complete(&iqp->unused);
}

static int iwarp_destroy_qp(struct ib_qp *qp, struct ib_udata *udata)
{
	struct iwarp_ibqp *iqp = container_of(qp, struct iwarp_ibqp, base);

	/* Ending the QP (in Rust) reports CLOSE, after which iw_cm lets its reference go. */
	iwarp_verbs->end_qp(qp_rust(qp));
	iwarp_iw_rem_ref(qp);
	wait_for_completion(&container_of(qp, struct iwarp_ibqp, base)->unused);
	/* iw_cm may call modify_qp until then: only now does the QP go. */
	iwarp_verbs->destroy_qp(qp_rust(qp));
	if (iqp->sq)
		rdma_user_mmap_entry_remove(iqp->sq);
	if (iqp->rq)
		rdma_user_mmap_entry_remove(iqp->rq);
	return 0;
}

/* --- iw_cm: the calls are Rust's; this converts addresses and events --- */

static struct workqueue_struct *iwarp_cm_wq;

struct workqueue_struct *iwarp_shim_cm_wq(void)
{
	return iwarp_cm_wq;
}

static void to_param(struct iwarp_iw_param *p, struct iw_cm_id *id, const struct iw_cm_conn_param *conn)
{
	memset(p, 0, sizeof(*p));
	if (conn) {
		p->qpn = conn->qpn;
		p->ird = conn->ird;
		p->ord = conn->ord;
		p->private_data = conn->private_data;
		p->private_len = conn->private_data_len;
	}
	/* Without port mapping (IW_F_NO_PORT_MAP) the mapped addresses are the real ones. */
	iwarp_endpoint_from(&p->local, &id->m_local_addr);
	iwarp_endpoint_from(&p->remote, &id->m_remote_addr);
}

int iwarp_shim_iw_event(struct iw_cm_id *id, const struct iwarp_iw_event *ev)
{
	struct iw_cm_event event = {
		.event = ev->event,
		.status = ev->status,
		.private_data = (void *)ev->private_data,
		.private_data_len = ev->private_len,
		.provider_data = ev->provider_data,
		.ird = ev->ird,
		.ord = ev->ord,
	};

	iwarp_sockaddr_from(&event.local_addr, &ev->local);
	iwarp_sockaddr_from(&event.remote_addr, &ev->remote);
	return id->event_handler(id, &event);
}

void iwarp_shim_iw_ref(struct iw_cm_id *id, bool get)
{
	if (get)
		id->add_ref(id);
	else
		id->rem_ref(id);
}

static struct ib_qp *iwarp_iw_get_qp(struct ib_device *dev, int qpn)
{
	return iwarp_verbs->iw_get_qp(dev_rust(dev), qpn);
}

static int iwarp_iw_connect(struct iw_cm_id *id, struct iw_cm_conn_param *conn)
{
	struct iwarp_iw_param p;

	to_param(&p, id, conn);
	return iwarp_verbs->iw_connect(dev_rust(id->device), id, &p);
}

static int iwarp_iw_accept(struct iw_cm_id *id, struct iw_cm_conn_param *conn)
{
	struct iwarp_iw_param p;

	to_param(&p, id, conn);
	return iwarp_verbs->iw_accept(dev_rust(id->device), id, id->provider_data, &p);
}

static int iwarp_iw_reject(struct iw_cm_id *id, const void *pdata, u8 len)
{
	return iwarp_verbs->iw_reject(dev_rust(id->device), id->provider_data, pdata, len);
}

/*
 * As siw does: a wildcard listener takes only connections arriving on the device's netdev, and
 * an IPv6 one takes IPv4 connections too unless rdma_cm asked for IPv6 only.
 */
static int iwarp_iw_create_listen(struct iw_cm_id *id, int backlog)
{
	const struct sockaddr_storage *at = &id->m_local_addr;
	struct iwarp_iw_param p;
	struct net_device *ndev;
	bool any = at->ss_family == AF_INET ? ipv4_is_zeronet(((const struct sockaddr_in *)at)->sin_addr.s_addr) :
					      ipv6_addr_any(&((const struct sockaddr_in6 *)at)->sin6_addr);

	to_param(&p, id, NULL);
	p.afonly = id->afonly;
	if (any) {
		ndev = ib_device_get_netdev(id->device, 1);
		if (!ndev)
			return -ENODEV;
		p.ifindex = ndev->ifindex;
		dev_put(ndev);
	}
	return iwarp_verbs->iw_listen(dev_rust(id->device), id, &p, backlog, &id->provider_data);
}

static int iwarp_iw_destroy_listen(struct iw_cm_id *id)
{
	iwarp_verbs->iw_unlisten(id->provider_data);
	id->provider_data = NULL;
	return 0;
}

static int iwarp_post_send(struct ib_qp *qp, const struct ib_send_wr *wr, const struct ib_send_wr **bad)
{
	/* uverbs passes no requests for libsiw's doorbell. */
	if (!wr)
		return iwarp_verbs->doorbell(qp_rust(qp));
	for (; wr; wr = wr->next) {
		struct iwarp_ib_send_wr w = {
			.wr_id = wr->wr_id,
			.sge = (const struct iwarp_ib_sge *)wr->sg_list,
			.num_sge = wr->num_sge,
			.opcode = wr->opcode,
			.flags = wr->send_flags,
		};
		int rv;

		switch (wr->opcode) {
		case IB_WR_SEND_WITH_INV:
		case IB_WR_LOCAL_INV:
			w.invalidate_rkey = wr->ex.invalidate_rkey;
			break;
		case IB_WR_REG_MR:
			w.rkey = reg_wr(wr)->key;
			w.invalidate_rkey = reg_wr(wr)->mr->lkey;
			w.remote_addr = reg_wr(wr)->mr->iova;
			w.length = reg_wr(wr)->mr->length;
			w.access = reg_wr(wr)->access;
			break;
		case IB_WR_RDMA_WRITE:
		case IB_WR_RDMA_READ:
		case IB_WR_RDMA_READ_WITH_INV:
			/* Read with Invalidate names the local STag to invalidate in ex. */
			w.invalidate_rkey = wr->ex.invalidate_rkey;
			w.remote_addr = rdma_wr(wr)->remote_addr;
			w.rkey = rdma_wr(wr)->rkey;
			break;
		default:
			break;
		}
		rv = iwarp_verbs->post_send(qp_rust(qp), &w);
		if (rv) {
			*bad = wr;
			return rv;
		}
	}
	return 0;
}

static int iwarp_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr, const struct ib_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		struct iwarp_ib_recv_wr w = {
			.wr_id = wr->wr_id,
			.sge = (const struct iwarp_ib_sge *)wr->sg_list,
			.num_sge = wr->num_sge,
		};
		int rv = iwarp_verbs->post_recv(qp_rust(qp), &w);

		if (rv) {
			*bad = wr;
			return rv;
		}
	}
	return 0;
}

static void iwarp_dealloc_driver(struct ib_device *dev)
{
	iwarp_verbs->dev_free(dev_rust(dev));
	iwarp_cb->gone(dev);
	if (to_iwarp(dev)->claimed)
		iwarp_siw_guard_release();
}

/*
 * A link's MPA options, for the connections iw_cm makes on it from then on (the module's
 * iw_markers, iw_crc, iw_mpa_rev and iw_p2p give each new link its own). Files of the
 * device's, as in-tree drivers keep theirs: the RDMA core's netlink has no place for a
 * driver's options.
 */
static ssize_t mpa_show(struct device *device, u32 option, char *buf)
{
	return sysfs_emit(buf, "%d\n", !!(iwarp_verbs->dev_mpa(dev_rust(rdma_device_to_ibdev(device))) & option));
}

static ssize_t mpa_store(struct device *device, u32 option, const char *buf, size_t count)
{
	bool on;
	int rv = kstrtobool(buf, &on);

	if (rv)
		return rv;
	iwarp_verbs->dev_set_mpa(dev_rust(rdma_device_to_ibdev(device)), option, on);
	return count;
}

static ssize_t mpa_markers_show(struct device *device, struct device_attribute *attr, char *buf)
{
	return mpa_show(device, IWARP_MPA_MARKERS, buf);
}

static ssize_t mpa_markers_store(struct device *device, struct device_attribute *attr, const char *buf, size_t count)
{
	return mpa_store(device, IWARP_MPA_MARKERS, buf, count);
}

static ssize_t mpa_crc_show(struct device *device, struct device_attribute *attr, char *buf)
{
	return mpa_show(device, IWARP_MPA_CRC, buf);
}

static ssize_t mpa_crc_store(struct device *device, struct device_attribute *attr, const char *buf, size_t count)
{
	return mpa_store(device, IWARP_MPA_CRC, buf, count);
}

static ssize_t mpa_p2p_show(struct device *device, struct device_attribute *attr, char *buf)
{
	return mpa_show(device, IWARP_MPA_P2P, buf);
}

static ssize_t mpa_p2p_store(struct device *device, struct device_attribute *attr, const char *buf, size_t count)
{
	return mpa_store(device, IWARP_MPA_P2P, buf, count);
}

/* The revision, 1 or 2 (any other: EINVAL). */
static ssize_t mpa_rev_show(struct device *device, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", iwarp_verbs->dev_mpa(dev_rust(rdma_device_to_ibdev(device))) & IWARP_MPA_REV1 ? 1 : 2);
}

static ssize_t mpa_rev_store(struct device *device, struct device_attribute *attr, const char *buf, size_t count)
{
	u8 rev;
	int rv = kstrtou8(buf, 10, &rev);

	if (rv)
		return rv;
	if (rev != 1 && rev != 2)
		return -EINVAL;
	iwarp_verbs->dev_set_mpa(dev_rust(rdma_device_to_ibdev(device)), IWARP_MPA_REV1, rev == 1);
	return count;
}

static DEVICE_ATTR_RW(mpa_markers);
static DEVICE_ATTR_RW(mpa_crc);
static DEVICE_ATTR_RW(mpa_rev);
static DEVICE_ATTR_RW(mpa_p2p);

static struct attribute *iwarp_dev_attrs[] = {
	&dev_attr_mpa_markers.attr,
	&dev_attr_mpa_crc.attr,
	&dev_attr_mpa_rev.attr,
	&dev_attr_mpa_p2p.attr,
	NULL,
};

static const struct attribute_group iwarp_dev_group = {
	.attrs = iwarp_dev_attrs,
};

static const struct ib_device_ops iwarp_ib_ops = {
	.owner = THIS_MODULE,
	/* rdma-core's siw provider drives our devices from user space (and siw must stay away). */
	.driver_id = RDMA_DRIVER_SIW,
	.uverbs_abi_ver = SIW_ABI_VERSION,
	.device_group = &iwarp_dev_group,
	.alloc_mr = iwarp_alloc_mr,
	.alloc_pd = iwarp_alloc_pd,
	.alloc_ucontext = iwarp_alloc_ucontext,
	.create_cq = iwarp_create_cq,
	.create_qp = iwarp_create_qp,
	.dealloc_driver = iwarp_dealloc_driver,
	.dealloc_pd = iwarp_dealloc_pd,
	.dealloc_ucontext = iwarp_dealloc_ucontext,
	.dereg_mr = iwarp_dereg_mr,
	.destroy_cq = iwarp_destroy_cq,
	.destroy_qp = iwarp_destroy_qp,
	.get_dma_mr = iwarp_get_dma_mr,
	.get_port_immutable = iwarp_get_port_immutable,
	.iw_accept = iwarp_iw_accept,
	.iw_add_ref = iwarp_iw_add_ref,
	.iw_connect = iwarp_iw_connect,
	.iw_create_listen = iwarp_iw_create_listen,
	.iw_destroy_listen = iwarp_iw_destroy_listen,
	.iw_get_qp = iwarp_iw_get_qp,
	.iw_reject = iwarp_iw_reject,
	.iw_rem_ref = iwarp_iw_rem_ref,
	.map_mr_sg = iwarp_map_mr_sg,
	.mmap = iwarp_mmap,
	.mmap_free = iwarp_mmap_free,
	.modify_qp = iwarp_modify_qp,
	.poll_cq = iwarp_poll_cq,
	.post_recv = iwarp_post_recv,
	.post_send = iwarp_post_send,
	.query_device = iwarp_query_device,
	.query_gid = iwarp_query_gid,
	.query_port = iwarp_query_port,
	.query_qp = iwarp_query_qp,
	.fill_res_qp_entry = iwarp_fill_res_qp_entry,
	.reg_user_mr = iwarp_reg_user_mr,
	.req_notify_cq = iwarp_req_notify_cq,
	INIT_RDMA_OBJ_SIZE(ib_cq, iwarp_ibcq, base),
	INIT_RDMA_OBJ_SIZE(ib_pd, iwarp_ibpd, base),
	INIT_RDMA_OBJ_SIZE(ib_qp, iwarp_ibqp, base),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, iwarp_ucontext, base),
};

bool iwarp_shim_netdev_is_ethernet(const struct net_device *ndev)
{
	return ndev->type == ARPHRD_ETHER;
}

struct ib_device *iwarp_shim_ib_device_create(struct net_device *ndev, void *rust)
{
	struct iwarp_ibdev *idev = ib_alloc_device(iwarp_ibdev, base);
	struct ib_device *dev;
	int rv;

	if (!idev) {
		iwarp_verbs->dev_free(rust);
		return ERR_PTR(-ENOMEM);
	}
	/* From here on dealloc_driver frees it, also when this fails. */
	idev->rust = rust;
	dev = &idev->base;
	memcpy(idev->raw_gid, ndev->dev_addr, min_t(unsigned int, ndev->addr_len, ETH_ALEN));
	addrconf_addr_eui48((u8 *)&dev->node_guid, idev->raw_gid);
	dev->node_type = RDMA_NODE_RNIC;
	strscpy(dev->node_desc, "iwarp.ko", sizeof(dev->node_desc));
	dev->phys_port_cnt = 1;
	dev->num_comp_vectors = 1;
	/* libsiw's doorbell; uverbs offers the other commands by the ops the device has. */
	dev->uverbs_cmd_mask |= BIT_ULL(IB_USER_VERBS_CMD_POST_SEND);
	ib_set_device_ops(dev, &iwarp_ib_ops);
	rv = ib_device_set_netdev(dev, ndev, 1);
	if (rv) {
		ib_dealloc_device(dev);
		return ERR_PTR(rv);
	}
	memcpy(dev->iw_ifname, ndev->name, sizeof(dev->iw_ifname));
	/* Our connections use the ports their callers give (no iwpmd). */
	dev->iw_driver_flags = IW_F_NO_PORT_MAP;
	return dev;
}

/* EBUSY while siw is loaded (siw_guard_shim.c). */
int iwarp_shim_ib_device_register(struct ib_device *dev, const char *name)
{
	int rv = iwarp_siw_guard_claim();

	if (rv)
		return rv;
	to_iwarp(dev)->claimed = true;
	ib_mark_name_assigned_by_user(dev);
	return ib_register_device(dev, name, NULL);
}

/* Undoes iwarp_shim_ib_device_create() when registering failed. */
void iwarp_shim_ib_device_free(struct ib_device *dev)
{
	ib_dealloc_device(dev);
}

/* Keeps @dev's memory until iwarp_shim_ib_device_drop() or _unregister_and_drop(). */
void iwarp_shim_ib_device_hold(struct ib_device *dev)
{
	get_device(&dev->dev);
}

void iwarp_shim_ib_device_drop(struct ib_device *dev)
{
	put_device(&dev->dev);
}

/*
 * Unregisters @dev (held) and waits for it: when this returns, it is gone, whether this call
 * or a queued one unregistered it (as ib_unregister_driver() does for a driver id).
 */
void iwarp_shim_ib_device_unregister_and_drop(struct ib_device *dev)
{
	ib_unregister_device(dev);
	put_device(&dev->dev);
}

bool iwarp_shim_ib_device_unregister_queued(struct ib_device *dev)
{
	if (!ib_device_try_get(dev))
		return false;
	ib_unregister_device_queued(dev);
	ib_device_put(dev);
	return true;
}

void iwarp_shim_ib_port_event(struct ib_device *dev, bool active)
{
	struct ib_event event = {
		.device = dev,
		.event = active ? IB_EVENT_PORT_ACTIVE : IB_EVENT_PORT_ERR,
		.element.port_num = 1,
	};

	if (!ib_device_try_get(dev))
		return;
	ib_dispatch_event(&event);
	ib_device_put(dev);
}

static int iwarp_newlink(const char *name, struct net_device *ndev)
{
	return iwarp_cb->newlink(name, ndev);
}

static struct rdma_link_ops iwarp_link_ops = {
	.type = "iwarp",
	.newlink = iwarp_newlink,
};

static int iwarp_netdev_event(struct notifier_block *nb, unsigned long event, void *arg)
{
	struct net_device *ndev = netdev_notifier_info_to_dev(arg);
	enum iwarp_netdev_event what;

	switch (event) {
	case NETDEV_UP:
		what = IWARP_NETDEV_UP;
		break;
	case NETDEV_DOWN:
		what = IWARP_NETDEV_DOWN;
		break;
	case NETDEV_UNREGISTER:
		what = IWARP_NETDEV_UNREGISTER;
		break;
	default:
		return NOTIFY_OK;
	}
	iwarp_cb->netdev_event(ndev, what);
	return NOTIFY_OK;
}

static struct notifier_block iwarp_netdev_nb = {
	.notifier_call = iwarp_netdev_event,
};

int iwarp_shim_ib_register(const struct iwarp_ib_callbacks *cb, const struct iwarp_ib_verbs *verbs,
			   const struct iwarp_ib_limits *limits)
{
	int rv;

	iwarp_limits = *limits;
	iwarp_cb = cb;
	iwarp_verbs = verbs;
	/*
	 * WQ_MEM_RECLAIM: iw_cm's destroy waits for the event a connection job delivers, and
	 * nvme-rdma tears down and reconnects under writeback pressure, when no new kworker may
	 * be had (siw's CM workqueue has a rescuer too).
	 */
	iwarp_cm_wq = alloc_workqueue("iwarp_cm", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	/*
	 * Not WQ_HIGHPRI: a woken high-priority kworker preempts the poster at once, so a busy
	 * submitter (fio 32 deep over nvme-rdma) was switched out and back for nearly every post,
	 * about 2.5 context switches per I/O on the host against siw's 0.6. At normal priority it
	 * posts on, and one run of the work hands several requests over (docs/performance.md).
	 */
	iwarp_post_wq = alloc_workqueue("iwarp_post", WQ_PERCPU | WQ_MEM_RECLAIM, 0);
	if (!iwarp_cm_wq || !iwarp_post_wq) {
		rv = -ENOMEM;
		goto out;
	}
	rv = iwarp_siw_guard_start();
	if (rv)
		goto out;
	rv = register_netdevice_notifier(&iwarp_netdev_nb);
	if (rv) {
		iwarp_siw_guard_stop();
		goto out;
	}
	rdma_link_register(&iwarp_link_ops);
	return 0;
out:
	if (iwarp_cm_wq)
		destroy_workqueue(iwarp_cm_wq);
	if (iwarp_post_wq)
		destroy_workqueue(iwarp_post_wq);
	return rv;
}

void iwarp_shim_ib_unregister(void)
{
	/* Waits for a newlink in progress; none starts after. */
	rdma_link_unregister(&iwarp_link_ops);
	unregister_netdevice_notifier(&iwarp_netdev_nb);
}

/* After the last device went: connection work still queued runs out. */
void iwarp_shim_ib_done(void)
{
	iwarp_siw_guard_stop();
	destroy_workqueue(iwarp_cm_wq);
	destroy_workqueue(iwarp_post_wq);
}

MODULE_ALIAS_RDMA_LINK("iwarp");
