// SPDX-License-Identifier: GPL-2.0
/*
 * iwarp_verbs_check.ko: uses an iwarp.ko device of the kernel's RDMA core as a kernel service
 * would (src/ib/), through the RDMA core's own calls: protection domain with its DMA region,
 * CQ polled in softirq, QP, receives posted, bad work requests and attributes refused with
 * errnos, the error state and ib_drain_qp, flushed completions; then (addr=IP, the device's
 * netdev's address) connections through iw_cm to that address: a reject, an accept, a Send,
 * an RDMA Write and an RDMA Read between kernel buffers, fast registration of kernel pages,
 * a disconnect; with addr6=IPv6 the reject, the accept, a Send and the disconnect again,
 * through a wildcard IPv6 listener. Like any kernel service it is offered kernel verbs providers
 * only, and checks the one named (device=NAME). Each check is a KTAP line in the kernel log;
 * loading fails (EIO) if any check failed.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt
/* Inline octets a QP of iwarp.ko takes (MAX_KERNEL_INLINE, siw's SIW_MAX_INLINE). */
#define MAX_INLINE 80

#include <linux/completion.h>
#include <linux/delay.h>
#include <linux/inet.h>
#include <linux/irq_work.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/wait.h>
#include <rdma/ib_verbs.h>
#include <rdma/iw_cm.h>

#include "ktap.h"

static char *device = "iw0";
module_param(device, charp, 0444);
MODULE_PARM_DESC(device, "The RDMA core device to check (an iwarp.ko link)");
static char *addr = "";
module_param(addr, charp, 0444);
MODULE_PARM_DESC(addr, "The device's netdev's IPv4 address: connections are made to it (none: not checked)");
static char *addr6 = "";
module_param(addr6, charp, 0444);
MODULE_PARM_DESC(addr6, "Its IPv6 address: connections are made to it too, through a wildcard IPv6 listener on port+1");
static int port = 7500;
module_param(port, int, 0444);
MODULE_PARM_DESC(port, "The port its listener takes");

static struct ib_qp_attr attr_scratch;
static struct ib_qp_init_attr init_scratch;

/* Receives posted, and how they completed. */
struct receives {
	struct ib_cqe cqe;
	struct ib_qp *qp, *second;
	int flushed;
	int other;
	struct completion each;
};

static void recv_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct receives *r = container_of(wc->wr_cqe, struct receives, cqe);

	if (wc->status == IB_WC_WR_FLUSH_ERR && wc->qp == r->qp)
		r->flushed++;
	else
		r->other++;
	complete(&r->each);
}

/* Asynchronous events of a QP or CQ, as its event handler counts them, by type (others last). */
struct events {
	atomic_t of[IB_EVENT_DEVICE_SPEED_CHANGE + 2];
};

static void count_event(struct ib_event *ev, void *context)
{
	struct events *e = context;

	atomic_inc(&e->of[min_t(u32, ev->event, ARRAY_SIZE(e->of) - 1)]);
}

/* How many events @e counted, of every kind. */
static int events_total(struct events *e)
{
	int i, n = 0;

	for (i = 0; i < ARRAY_SIZE(e->of); i++)
		n += atomic_read(&e->of[i]);
	return n;
}

/* A QP whose asynchronous events @events counts (if not NULL). */
static struct ib_qp *create_qp(struct ib_pd *pd, struct ib_cq *cq, enum ib_qp_type type, u32 wr, u32 sge, u32 inline_data,
			       struct events *events)
{
	struct ib_qp_init_attr attr = {
		.event_handler = events ? count_event : NULL,
		.qp_context = events,
		.qp_type = type,
		.send_cq = cq,
		.recv_cq = cq,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = { .max_send_wr = wr, .max_recv_wr = wr, .max_send_sge = sge, .max_recv_sge = sge,
			 .max_inline_data = inline_data },
	};

	return ib_create_qp(pd, &attr);
}

/* Whether @qp is the error @err (a QP made after all is destroyed). */
static bool refused(struct ib_qp *qp, int err)
{
	if (IS_ERR(qp))
		return PTR_ERR(qp) == err;
	ib_destroy_qp(qp);
	return false;
}

static int post_recv(struct ib_qp *qp, struct receives *r, u64 addr, u32 lkey, int num_sge)
{
	struct ib_sge sge[5];
	struct ib_recv_wr wr = { .wr_cqe = &r->cqe, .sg_list = sge, .num_sge = num_sge };
	const struct ib_recv_wr *bad = NULL;
	int i, rv;

	for (i = 0; i < ARRAY_SIZE(sge); i++)
		sge[i] = (struct ib_sge){ .addr = addr + i * 256, .length = 256, .lkey = lkey };
	rv = ib_post_recv(qp, &wr, &bad);
	if (rv && bad != &wr)
		return -EFAULT;
	return rv;
}

static int post_send(struct ib_qp *qp, enum ib_wr_opcode opcode, u64 addr, u32 lkey)
{
	struct ib_sge sge = { .addr = addr, .length = 64, .lkey = lkey };
	struct ib_send_wr wr = { .opcode = opcode, .sg_list = &sge, .num_sge = 1, .send_flags = IB_SEND_SIGNALED };
	const struct ib_send_wr *bad = NULL;
	int rv = ib_post_send(qp, &wr, &bad);

	if (rv && bad != &wr)
		return -EFAULT;
	return rv;
}

/* @cq, which holds a completion of @qp's, polled and armed with interrupts off. */
static void check_poll_with_interrupts_off(struct ib_cq *cq, struct ib_qp *qp)
{
	struct ib_wc wc[4] = {};
	unsigned long flags;
	int n, armed;

	local_irq_save(flags);
	n = ib_poll_cq(cq, ARRAY_SIZE(wc), wc);
	armed = ib_req_notify_cq(cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS);
	local_irq_restore(flags);
	CHECK(n == 1 && wc[0].qp == qp && wc[0].status == IB_WC_WR_FLUSH_ERR && armed == 0,
	      "polled and armed with interrupts off, it gives the one completion it kept (%d, status %d, armed %d)", n, wc[0].status, armed);
}

/*
 * A CQ of one entry that four flushed receives overflow: its event handler hears CQ_ERR, once.
 * Flushed receives that find no room are lost, as on an RNIC; the QP is in error anyway.
 */
static noinline void check_cq_overflow(struct ib_device *dev, struct ib_pd *pd, u64 addr)
{
	struct ib_cq_init_attr cq_attr = { .cqe = 1 };
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };
	struct receives r = { .cqe.done = recv_done };
	struct events ev = {};
	struct ib_qp *qp;
	struct ib_cq *cq;
	int i, rv, posted = 0;

	cq = ib_create_cq(dev, NULL, count_event, &ev, &cq_attr);
	CHECK(!IS_ERR(cq) && cq->cqe < 4, "a CQ of one entry, with an event handler (%d)", IS_ERR(cq) ? 0 : cq->cqe);
	if (IS_ERR(cq))
		return;
	qp = create_qp(pd, cq, IB_QPT_RC, 4, 1, 0, NULL);
	if (!IS_ERR(qp)) {
		for (i = 0; i < 4; i++)
			posted += !post_recv(qp, &r, addr, pd->local_dma_lkey, 1);
		rv = ib_modify_qp(qp, &attr, IB_QP_STATE);
		/* The handler runs soon after, from the CQ's notification work. */
		for (i = 0; i < 100 && !atomic_read(&ev.of[IB_EVENT_CQ_ERR]); i++)
			msleep(10);
		CHECK(posted == 4 && !rv && atomic_read(&ev.of[IB_EVENT_CQ_ERR]) == 1 && events_total(&ev) == 1,
		      "four receives flushed into it overflow it: its event handler hears CQ_ERR, once (%d posted, %d events)", posted,
		      events_total(&ev));
		check_poll_with_interrupts_off(cq, qp);
		ib_destroy_qp(qp);
	} else {
		CHECK(false, "a QP on the CQ of one entry");
	}
	ib_destroy_cq(cq);
}

static void check(struct ib_device *dev)
{
	struct receives r = { .cqe.done = recv_done };
	struct events ev = {};
	struct ib_qp_init_attr init;
	struct ib_qp_attr attr;
	struct ib_qp *qp, *second;
	struct ib_cq *cq, *big;
	struct ib_pd *pd;
	u64 addr;
	void *buf;
	int i, rv;

	init_completion(&r.each);
	pd = ib_alloc_pd(dev, 0);
	CHECK(!IS_ERR(pd), "a protection domain, with its DMA region");
	if (IS_ERR(pd))
		return;
	big = ib_alloc_cq(dev, NULL, 1 << 20, 0, IB_POLL_SOFTIRQ);
	CHECK(IS_ERR(big) && PTR_ERR(big) == -EINVAL, "a CQ larger than the device allows is refused with EINVAL");
	if (!IS_ERR(big))
		ib_free_cq(big);
	cq = ib_alloc_cq(dev, NULL, 64, 0, IB_POLL_SOFTIRQ);
	CHECK(!IS_ERR(cq), "a CQ polled in softirq");
	if (IS_ERR(cq))
		goto pd;

	CHECK(refused(create_qp(pd, cq, IB_QPT_UD, 8, 1, 0, NULL), -EOPNOTSUPP), "an unreliable datagram QP is refused with EOPNOTSUPP");
	CHECK(refused(create_qp(pd, cq, IB_QPT_RC, 8, 5, 0, NULL), -EINVAL), "a QP with more entries per request than the device has is refused with EINVAL");
	CHECK(refused(create_qp(pd, cq, IB_QPT_RC, 8, 1, MAX_INLINE + 1, NULL), -EINVAL),
	      "a QP with more inline data than the device has (%d octets) is refused with EINVAL", MAX_INLINE + 1);
	qp = create_qp(pd, cq, IB_QPT_RC, 0, 1, 0, NULL);
	CHECK(!IS_ERR(qp), "a QP asking to send nothing is made, with room for a request (%d)", PTR_ERR_OR_ZERO(qp));
	if (!IS_ERR(qp))
		ib_destroy_qp(qp);

	qp = create_qp(pd, cq, IB_QPT_RC, 8, 2, 0, &ev);
	CHECK(!IS_ERR(qp), "a reliable connection QP");
	if (IS_ERR(qp))
		goto cq;
	r.qp = qp;
	second = create_qp(pd, cq, IB_QPT_RC, 8, 2, 0, NULL);
	CHECK(!IS_ERR(second) && qp->qp_num && second->qp_num && second->qp_num != qp->qp_num,
	      "QPs are numbered, each its own number (%u, %u)", qp->qp_num, IS_ERR(second) ? 0 : second->qp_num);
	if (!IS_ERR(second))
		ib_destroy_qp(second);
	memset(&attr, 0, sizeof(attr));
	CHECK(!ib_query_qp(qp, &attr, IB_QP_STATE | IB_QP_CAP, &init) && attr.qp_state == IB_QPS_RESET &&
		      attr.cap.max_send_wr == 8 && attr.cap.max_recv_wr == 8 && attr.cap.max_recv_sge == 2,
	      "the new QP is in RESET with the sizes asked for (state %d, %u/%u requests, %u entries)",
	      attr.qp_state, attr.cap.max_send_wr, attr.cap.max_recv_wr, attr.cap.max_recv_sge);
	attr.qp_state = IB_QPS_INIT;
	CHECK(!ib_modify_qp(qp, &attr, IB_QP_STATE), "RESET to INIT");
	attr.qp_state = IB_QPS_RTS;
	CHECK(ib_modify_qp(qp, &attr, IB_QP_STATE) == -EINVAL, "INIT to RTS without a connection is refused with EINVAL");

	buf = kzalloc(4096, GFP_KERNEL);
	CHECK(buf, "a receive buffer");
	if (!buf)
		goto qp;
	addr = ib_dma_map_single(dev, buf, 4096, DMA_FROM_DEVICE);
	for (i = 0; i < 4; i++)
		CHECK(!post_recv(qp, &r, addr + i * 1024, pd->local_dma_lkey, 2), "receive %d posted into the DMA region", i);
	CHECK(post_recv(qp, &r, addr, 0xdeadbeef, 1) == -EINVAL, "a receive with an unknown lkey is refused with EINVAL, bad_wr set");
	CHECK(post_recv(qp, &r, addr, pd->local_dma_lkey, 3) == -EINVAL, "a receive with more entries than the QP has is refused with EINVAL");
	rv = post_send(qp, IB_WR_SEND, addr, pd->local_dma_lkey);
	CHECK(rv == -ENOTCONN, "a Send before the QP is connected is refused with ENOTCONN (%d)", rv);
	CHECK(post_send(qp, IB_WR_ATOMIC_WRITE, addr, pd->local_dma_lkey) == -EINVAL, "an opcode iWARP has no verb for is refused with EINVAL");

	ib_drain_qp(qp);
	CHECK(r.flushed == 4 && r.other == 0, "ib_drain_qp returned after the 4 receives completed flushed, naming their QP (%d flushed, %d other)",
	      r.flushed, r.other);
	memset(&attr, 0, sizeof(attr));
	CHECK(!ib_query_qp(qp, &attr, IB_QP_STATE, &init) && attr.qp_state == IB_QPS_ERR, "the QP is in ERR (state %d)", attr.qp_state);
	CHECK(events_total(&ev) == 0, "an error state its consumer asked for reports no event (%d)", events_total(&ev));
	reinit_completion(&r.each);
	CHECK(!post_recv(qp, &r, addr, pd->local_dma_lkey, 1), "a receive posted in ERR is taken");
	CHECK(wait_for_completion_timeout(&r.each, 5 * HZ) && r.flushed == 5, "and completes at once, flushed (%d flushed)", r.flushed);
	check_cq_overflow(dev, pd, addr);
	ib_dma_unmap_single(dev, addr, 4096, DMA_FROM_DEVICE);
	kfree(buf);
qp:
	ib_destroy_qp(qp);
cq:
	ib_free_cq(cq);
pd:
	ib_dealloc_pd(pd);
}

/* --- connections through iw_cm, on one device: a listener and a client toward its own address --- */

/* One end's events as iw_cm hands them over. */
struct end {
	wait_queue_head_t wq;
	int count[IW_CM_EVENT_CLOSE + 1];
	int status[IW_CM_EVENT_CLOSE + 1];
	char private[32];
	int private_len;
	u8 ird, ord;
	struct iw_cm_id *child;
};

static int cm_handler(struct iw_cm_id *id, struct iw_cm_event *ev)
{
	struct end *e = id->context;

	if (ev->event == IW_CM_EVENT_CONNECT_REQUEST)
		e->child = id;
	if (ev->event == IW_CM_EVENT_CONNECT_REQUEST || ev->event == IW_CM_EVENT_CONNECT_REPLY) {
		e->private_len = min_t(int, ev->private_data_len, sizeof(e->private));
		memcpy(e->private, ev->private_data, e->private_len);
		e->ird = ev->ird;
		e->ord = ev->ord;
	}
	e->status[ev->event] = ev->status;
	e->count[ev->event]++;
	wake_up(&e->wq);
	return 0;
}

/* Waits up to 10 s for @e's @n-th event of @kind. */
static bool got(struct end *e, int kind, int n)
{
	return wait_event_timeout(e->wq, READ_ONCE(e->count[kind]) >= n, 10 * HZ) > 0;
}

/* A work request's completion. */
struct done {
	struct ib_cqe cqe;
	struct completion c;
	enum ib_wc_status status;
	u32 byte_len;
};

static void wr_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct done *d = container_of(wc->wr_cqe, struct done, cqe);

	d->status = wc->status;
	d->byte_len = wc->byte_len;
	complete(&d->c);
}

static void arm(struct done *d)
{
	d->cqe.done = wr_done;
	d->status = -1;
	init_completion(&d->c);
}

static bool finished(struct done *d)
{
	return wait_for_completion_timeout(&d->c, 10 * HZ) && d->status == IB_WC_SUCCESS;
}

/* A request of @op with @flags, for @len octets at @from. */
static int post_flags(struct ib_qp *qp, struct done *d, enum ib_wr_opcode op, u64 from, u32 len, u32 lkey, u64 remote, u32 rkey,
		      int flags)
{
	struct ib_sge sge = { .addr = from, .length = len, .lkey = lkey };
	struct ib_rdma_wr wr = {
		.wr = { .wr_cqe = &d->cqe, .opcode = op, .sg_list = &sge, .num_sge = 1, .send_flags = flags },
		.remote_addr = remote,
		.rkey = rkey,
	};

	arm(d);
	return ib_post_send(qp, &wr.wr, NULL);
}

static int post(struct ib_qp *qp, struct done *d, enum ib_wr_opcode op, u64 from, u32 len, u32 lkey, u64 remote, u32 rkey)
{
	return post_flags(qp, d, op, from, len, lkey, remote, rkey, IB_SEND_SIGNALED);
}

/* A signaled request of @op carrying the @len octets at @from inline (kernel memory, no lkey). */
static int post_inline(struct ib_qp *qp, struct done *d, enum ib_wr_opcode op, const void *from, u32 len, u64 remote, u32 rkey)
{
	return post_flags(qp, d, op, (uintptr_t)from, len, 0, remote, rkey, IB_SEND_SIGNALED | IB_SEND_INLINE);
}

static int post_receive(struct ib_qp *qp, struct done *d, u64 to, u32 len, u32 lkey)
{
	struct ib_sge sge = { .addr = to, .length = len, .lkey = lkey };
	struct ib_recv_wr wr = { .wr_cqe = &d->cqe, .sg_list = &sge, .num_sge = 1 };

	arm(d);
	return ib_post_recv(qp, &wr, NULL);
}

/* IB_WR_REG_MR of @mr with its key and @access. */
static int post_reg(struct ib_qp *qp, struct done *d, struct ib_mr *mr, int access)
{
	struct ib_reg_wr wr = {
		.wr = { .wr_cqe = &d->cqe, .opcode = IB_WR_REG_MR, .send_flags = IB_SEND_SIGNALED },
		.mr = mr,
		.key = mr->rkey,
		.access = access,
	};

	arm(d);
	return ib_post_send(qp, &wr.wr, NULL);
}

static int post_local_inv(struct ib_qp *qp, struct done *d, u32 rkey)
{
	struct ib_send_wr wr = { .wr_cqe = &d->cqe, .opcode = IB_WR_LOCAL_INV, .send_flags = IB_SEND_SIGNALED, .ex.invalidate_rkey = rkey };

	arm(d);
	return ib_post_send(qp, &wr, NULL);
}

/*
 * Fast registration on the connected pair (server QP @sqp, client QP @cqp; the client's buffer
 * @cbuf at DMA address @ca): the server lists two pages that are not adjacent (from the middle
 * of the first) under key 0, where consumers' keys wrap to; the client writes across the page
 * boundary and reads back through the rkey; a map while registered changes nothing until the
 * next registration, which a Read through the next key then reaches; invalidated, the region
 * refuses its lkey at the request's turn, which ends the server's QP.
 */
static void check_fast_registration(struct ib_device *dev, struct ib_pd *pd, struct ib_qp *sqp, struct ib_qp *cqp, char *cbuf, u64 ca)
{
	struct page *pages[2] = { alloc_page(GFP_KERNEL | __GFP_ZERO), alloc_page(GFP_KERNEL | __GFP_ZERO) };
	struct scatterlist sg[2];
	struct done reg, wrote, read, sent, recvd, inv;
	struct ib_mr *mr = NULL;
	const int rw = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;
	int i, n = 0;

	CHECK(pages[0] && pages[1], "two pages for a fast registration");
	if (!pages[0] || !pages[1])
		goto out;
	sg_init_table(sg, 2);
	sg_set_page(&sg[0], pages[0], PAGE_SIZE / 2, PAGE_SIZE / 2);
	sg_set_page(&sg[1], pages[1], PAGE_SIZE, 0);
	mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, 2);
	CHECK(!IS_ERR(mr), "ib_alloc_mr of a region for two pages");
	if (IS_ERR(mr))
		goto out;
	CHECK(IS_ERR(ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, 100000)), "ib_alloc_mr of more pages than max_fast_reg_page_list_len is refused");
	if (ib_dma_map_sg(dev, sg, 2, DMA_BIDIRECTIONAL) == 2)
		n = ib_map_mr_sg(mr, sg, 2, NULL, PAGE_SIZE);
	CHECK(n == 2 && mr->length == PAGE_SIZE * 3 / 2, "ib_map_mr_sg maps both entries (%d, %llu octets)", n, mr->length);
	ib_update_fast_reg_key(mr, 0);
	CHECK(!post_reg(sqp, &reg, mr, rw) && finished(&reg), "IB_WR_REG_MR with key 0 completes (%d)", reg.status);
	for (i = 0; i < PAGE_SIZE; i++)
		cbuf[i] = i * 7 + 1;
	CHECK(!post_receive(sqp, &recvd, (u64)page_address(pages[1]) + 64, 16, pd->local_dma_lkey) &&
		      !post(cqp, &wrote, IB_WR_RDMA_WRITE, ca, PAGE_SIZE, pd->local_dma_lkey, mr->iova + PAGE_SIZE / 4, mr->rkey) &&
		      !post(cqp, &sent, IB_WR_SEND, ca, 8, pd->local_dma_lkey, 0, 0) && finished(&wrote) && finished(&sent) && finished(&recvd) &&
		      !memcmp(page_address(pages[0]) + PAGE_SIZE * 3 / 4, cbuf, PAGE_SIZE / 4) &&
		      !memcmp(page_address(pages[1]), cbuf + PAGE_SIZE / 4, 64),
	      "an RDMA Write through the rkey lands across the page boundary, in both pages");
	memset(cbuf, 0, PAGE_SIZE);
	CHECK(!post(cqp, &read, IB_WR_RDMA_READ, ca, PAGE_SIZE / 2, pd->local_dma_lkey, mr->iova + PAGE_SIZE / 4, mr->rkey) &&
		      finished(&read) && !memcmp(cbuf, page_address(pages[0]) + PAGE_SIZE * 3 / 4, PAGE_SIZE / 4) &&
		      !memcmp(cbuf + PAGE_SIZE / 4, page_address(pages[1]), PAGE_SIZE / 4),
	      "an RDMA Read through the rkey brings both pages' octets");
	n = ib_map_mr_sg(mr, &sg[1], 1, NULL, PAGE_SIZE);
	memset(cbuf, 0, PAGE_SIZE);
	CHECK(n == 1 && !post(cqp, &read, IB_WR_RDMA_READ, ca, 16, pd->local_dma_lkey, (u64)page_address(pages[0]) + PAGE_SIZE * 3 / 4, mr->rkey) &&
		      finished(&read) && !memcmp(cbuf, page_address(pages[0]) + PAGE_SIZE * 3 / 4, 16),
	      "a map while the region is registered leaves the registration as it was");
	CHECK(!post_local_inv(sqp, &inv, mr->rkey) && finished(&inv), "IB_WR_LOCAL_INV completes");
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	memset(page_address(pages[1]) + PAGE_SIZE / 2, 0x5a, 16);
	memset(cbuf, 0, PAGE_SIZE);
	CHECK(!post_reg(sqp, &reg, mr, rw) && finished(&reg) &&
		      !post(cqp, &read, IB_WR_RDMA_READ, ca, 16, pd->local_dma_lkey, mr->iova + PAGE_SIZE / 2, mr->rkey) && finished(&read) &&
		      !memcmp(cbuf, page_address(pages[1]) + PAGE_SIZE / 2, 16),
	      "registered again with the next key, the second map in force: a Read through it brings page 2's octets");
	CHECK(!post_receive(cqp, &recvd, ca, 64, pd->local_dma_lkey) && !post(sqp, &sent, IB_WR_SEND, mr->iova, 8, mr->lkey, 0, 0) &&
		      finished(&sent) && finished(&recvd),
	      "a Send from the registered region goes");
	CHECK(!post_local_inv(sqp, &inv, mr->rkey) && finished(&inv), "invalidated again");
	/* Regions are checked at the request's turn, as an RNIC does: an error completion ends the QP. */
	CHECK(!post(sqp, &sent, IB_WR_SEND, mr->iova, 8, mr->lkey, 0, 0) && wait_for_completion_timeout(&sent.c, 10 * HZ) &&
		      sent.status == IB_WC_LOC_PROT_ERR,
	      "a Send from the invalidated region completes with a local protection error (%d)", sent.status);
	memset(&attr_scratch, 0, sizeof(attr_scratch));
	CHECK(!ib_query_qp(sqp, &attr_scratch, IB_QP_STATE, &init_scratch) && attr_scratch.qp_state == IB_QPS_ERR,
	      "and the QP is in ERR (state %d)", attr_scratch.qp_state);
	ib_dma_unmap_sg(dev, sg, 2, DMA_BIDIRECTIONAL);
out:
	if (mr && !IS_ERR(mr))
		CHECK(!ib_dereg_mr(mr), "ib_dereg_mr");
	for (i = 0; i < 2; i++)
		if (pages[i])
			__free_page(pages[i]);
}

/* More Reads than the client's ORD of 1 at once: its QP holds the others until each is answered. */
static noinline void check_reads_beyond_ord(struct ib_pd *pd, struct ib_qp *cqp, char *sbuf, u64 sa, char *cbuf, u64 ca)
{
	struct done reads[4];
	int i, n, good = 0, outstanding = 0;

	for (i = 0; i < 4; i++)
		memset(sbuf + 2048 + i * 256, 'a' + i, 256);
	for (n = 0; n < 4; n++)
		if (post(cqp, &reads[n], IB_WR_RDMA_READ, ca + 2048 + n * 256, 256, pd->local_dma_lkey, sa + 2048 + n * 256,
			 pd->unsafe_global_rkey))
			break;
	for (i = 0; i < n; i++) {
		if (!wait_for_completion_timeout(&reads[i].c, 10 * HZ))
			outstanding++;
		else
			good += reads[i].status == IB_WC_SUCCESS && !memcmp(cbuf + 2048 + i * 256, sbuf + 2048 + i * 256, 256);
	}
	CHECK(good == 4, "four RDMA Reads posted at once, beyond the ORD of 1, all complete with their octets (%d)", good);
	/* Any still outstanding completes (flushed) before its entry on this stack goes. */
	if (outstanding)
		ib_drain_sq(cqp);
}

/*
 * Inline data from @cqp to @sqp's @sbuf (at @sa): copied when posted, so the buffer may change
 * at once. The Send is fenced behind a Read (into @ca), so that its turn comes a round trip
 * after the buffer changed: a copy made at its turn instead would carry the change.
 */
static noinline void check_inline(struct ib_pd *pd, struct ib_qp *sqp, struct ib_qp *cqp, char *sbuf, u64 sa, u64 ca)
{
	char note[32] = "inline, copied when posted";
	struct done recvd, wrote, read, sent;
	int rv;

	rv = post_receive(sqp, &recvd, sa + 1536, 64, pd->local_dma_lkey);
	rv = rv ?: post_inline(cqp, &wrote, IB_WR_RDMA_WRITE, "an inline Write", 16, sa + 2048, pd->unsafe_global_rkey);
	rv = rv ?: post(cqp, &read, IB_WR_RDMA_READ, ca + 2304, 64, pd->local_dma_lkey, sa + 2304, pd->unsafe_global_rkey);
	rv = rv ?: post_flags(cqp, &sent, IB_WR_SEND, (uintptr_t)note, 27, 0, 0, 0, IB_SEND_SIGNALED | IB_SEND_INLINE | IB_SEND_FENCE);
	memset(note, 'x', sizeof(note));
	CHECK(!rv && finished(&recvd) && finished(&wrote) && finished(&read) && finished(&sent) && recvd.byte_len == 27 &&
		      !strcmp(sbuf + 1536, "inline, copied when posted") && !strcmp(sbuf + 2048, "an inline Write"),
	      "an inline Write and Send arrive as their octets were when posted (%d, %u octets)", rv, recvd.byte_len);
	CHECK(post_inline(cqp, &sent, IB_WR_SEND, sbuf, MAX_INLINE + 1, 0, 0) == -EINVAL, "more inline data than the QP takes is refused with EINVAL");
}

/*
 * Sends of a page and a half from each kind of kernel memory a consumer may name: whole pages
 * (sent by reference), a slab object and vmalloc memory (copied: TCP may not send those by
 * reference). Each arrives whole. Under virtual DMA a DMA address is the kernel address.
 */
static noinline void check_large_sends(struct ib_pd *pd, struct ib_qp *sqp, struct ib_qp *cqp)
{
	enum { LEN = PAGE_SIZE * 3 / 2 };
	static const char *const kind[] = { "pages", "a slab object", "vmalloc memory" };
	/* Compound: the second page then counts references too, and goes by reference as well. */
	struct page *pages = alloc_pages(GFP_KERNEL | __GFP_COMP, 1);
	u8 *from[] = { pages ? page_address(pages) : NULL, kmalloc(LEN, GFP_KERNEL), vmalloc(LEN) };
	u8 *to = (u8 *)__get_free_pages(GFP_KERNEL, 1);
	struct done sent, recvd;
	int i, j, rv;

	for (i = 0; i < ARRAY_SIZE(from); i++) {
		if (!from[i] || !to) {
			CHECK(false, "memory for a Send from %s", kind[i]);
			continue;
		}
		for (j = 0; j < LEN; j++)
			from[i][j] = j * 7 + i;
		memset(to, 0, LEN);
		rv = post_receive(sqp, &recvd, (uintptr_t)to, 2 * PAGE_SIZE, pd->local_dma_lkey);
		rv = rv ?: post(cqp, &sent, IB_WR_SEND, (uintptr_t)from[i], LEN, pd->local_dma_lkey, 0, 0);
		CHECK(!rv && finished(&recvd) && finished(&sent) && recvd.byte_len == LEN && !memcmp(to, from[i], LEN),
		      "a Send of %d octets from %s arrives whole (%d, %u octets)", LEN, kind[i], rv, recvd.byte_len);
	}
	if (pages)
		__free_pages(pages, 1);
	kfree(from[1]);
	vfree(from[2]);
	free_pages((unsigned long)to, 1);
}

/*
 * A fenced Send of the octets a Read before it brings (from @sqp's @sbuf into @cqp's @cbuf): it
 * waits for the Read's answer, so it carries them, not what was there before.
 */
static noinline void check_fence(struct ib_pd *pd, struct ib_qp *sqp, struct ib_qp *cqp, char *sbuf, u64 sa, char *cbuf, u64 ca)
{
	struct done read, sent, recvd;
	int rv;

	strscpy(sbuf + 3072, "read, then sent back", 64);
	memset(cbuf + 3072, 0, 64);
	rv = post_receive(sqp, &recvd, sa + 3584, 64, pd->local_dma_lkey);
	rv = rv ?: post(cqp, &read, IB_WR_RDMA_READ, ca + 3072, 21, pd->local_dma_lkey, sa + 3072, pd->unsafe_global_rkey);
	rv = rv ?: post_flags(cqp, &sent, IB_WR_SEND, ca + 3072, 21, pd->local_dma_lkey, 0, 0, IB_SEND_SIGNALED | IB_SEND_FENCE);
	CHECK(!rv && finished(&read) && finished(&sent) && finished(&recvd) && !strcmp(sbuf + 3584, "read, then sent back"),
	      "a fenced Send of what a Read before it brings carries the Read's octets (%d)", rv);
}

/* A receive posted from a hard interrupt (an irq_work), as a block driver's completion may. */
struct irq_post {
	struct irq_work work;
	struct ib_qp *qp;
	struct done *d;
	u64 to;
	u32 lkey;
	int rv;
	bool hardirq;
	struct completion ran;
};

static void post_in_irq(struct irq_work *work)
{
	struct irq_post *p = container_of(work, struct irq_post, work);

	p->hardirq = in_hardirq();
	p->rv = post_receive(p->qp, p->d, p->to, 32, p->lkey);
	complete(&p->ran);
}

/*
 * Receives posted where the engine's locks may not be taken: from a hard interrupt, then with
 * interrupts off, then a third as usual, into @sqp's @sbuf (at @sa); three Sends from @cqp's
 * @cbuf (at @ca) fill them in order (the third, posted directly, does not overtake the two).
 */
static noinline void check_posts_with_interrupts_off(struct ib_pd *pd, struct ib_qp *sqp, struct ib_qp *cqp, char *sbuf, u64 sa,
						     char *cbuf, u64 ca)
{
	static const char *const text[] = { "from a hard interrupt", "interrupts off", "as usual" };
	struct irq_post p = { .qp = sqp, .to = sa + 3712, .lkey = pd->local_dma_lkey, .rv = -EIO };
	struct done recvd[3], sent[3];
	unsigned long flags;
	int i, rv, good = 0;

	memset(sbuf + 3712, 0, 3 * 64);
	init_completion(&p.ran);
	p.d = &recvd[0];
	init_irq_work(&p.work, post_in_irq);
	irq_work_queue(&p.work);
	irq_work_sync(&p.work);
	rv = wait_for_completion_timeout(&p.ran, 5 * HZ) ? p.rv : -ETIMEDOUT;
	local_irq_save(flags);
	rv = rv ?: post_receive(sqp, &recvd[1], sa + 3776, 32, pd->local_dma_lkey);
	local_irq_restore(flags);
	rv = rv ?: post_receive(sqp, &recvd[2], sa + 3840, 32, pd->local_dma_lkey);
	for (i = 0; i < 3 && !rv; i++) {
		strscpy(cbuf + 3712 + i * 64, text[i], 32);
		rv = post(cqp, &sent[i], IB_WR_SEND, ca + 3712 + i * 64, strlen(text[i]) + 1, pd->local_dma_lkey, 0, 0);
	}
	for (i = 0; i < 3 && !rv; i++)
		good += finished(&sent[i]) && finished(&recvd[i]) && !strcmp(sbuf + 3712 + i * 64, text[i]);
	CHECK(!rv && p.hardirq && good == 3,
	      "receives posted from a hard interrupt, with interrupts off and as usual are filled in that order (%d, %d in order)", rv, good);
	/* What is still posted completes (flushed) before its entry on this stack goes. */
	if (rv || good != 3) {
		ib_drain_qp(sqp);
		ib_drain_qp(cqp);
	}
}

static struct iw_cm_id *client(struct ib_device *dev, struct end *e, const struct sockaddr_storage *to, struct ib_qp *qp,
			       const char *private)
{
	struct iw_cm_conn_param param = { .private_data = private, .private_data_len = strlen(private), .ird = 1, .ord = 1, .qpn = qp->qp_num };
	struct iw_cm_id *id = iw_create_cm_id(dev, cm_handler, e);

	if (IS_ERR(id))
		return id;
	id->local_addr = (struct sockaddr_storage){ .ss_family = to->ss_family };
	id->remote_addr = *to;
	if (iw_cm_connect(id, &param)) {
		iw_destroy_cm_id(id);
		return ERR_PTR(-EIO);
	}
	return id;
}

/*
 * A client QP destroyed while its MPA exchange waits for the listener on @to, whose @srv leaves
 * the request (its third) unanswered: the exchange fails at once with ECONNABORTED, so iw_cm
 * lets the QP go without waiting for the exchange's deadline (10 s).
 */
static void check_destroy_while_connecting(struct ib_device *dev, struct ib_pd *pd, struct ib_cq *cq, struct end *srv,
					   const struct sockaddr_storage *to)
{
	struct iw_cm_id *cid, *accepted = srv->child;
	struct end cli = {};
	struct ib_qp *qp;
	unsigned long start;

	init_waitqueue_head(&cli.wq);
	qp = create_qp(pd, cq, IB_QPT_RC, 8, 1, 0, NULL);
	CHECK(!IS_ERR(qp), "a QP to connect and destroy");
	if (IS_ERR(qp))
		return;
	cid = client(dev, &cli, to, qp, "wait");
	CHECK(!IS_ERR(cid) && got(srv, IW_CM_EVENT_CONNECT_REQUEST, 3), "a third CONNECT_REQUEST, left unanswered");
	start = jiffies;
	ib_destroy_qp(qp);
	CHECK(time_before(jiffies, start + 3 * HZ) && got(&cli, IW_CM_EVENT_CONNECT_REPLY, 1) &&
		      cli.status[IW_CM_EVENT_CONNECT_REPLY] == -ECONNABORTED,
	      "destroying the client's QP ends its exchange at once (%u ms): CONNECT_REPLY is ECONNABORTED (%d)",
	      jiffies_to_msecs(jiffies - start), cli.status[IW_CM_EVENT_CONNECT_REPLY]);
	if (!IS_ERR(cid))
		iw_destroy_cm_id(cid);
	/* The request's cm_id; the caller destroys the one it accepted before. */
	if (srv->child && srv->child != accepted)
		iw_destroy_cm_id(srv->child);
	srv->child = accepted;
}

/*
 * A fourth connection to the listener on @to (whose @srv accepts it), ended by the server's
 * Terminate: the client writes through a key the server does not have. Each QP's event handler
 * hears why, once: the server's QP_ACCESS_ERR (the peer reached for memory it may not), the
 * client's QP_FATAL (the peer's Terminate); both ends get CLOSE.
 */
static noinline void check_terminate(struct ib_device *dev, struct ib_pd *pd, struct ib_cq *cq, struct end *srv,
				     const struct sockaddr_storage *to, u64 ca)
{
	struct iw_cm_id *cid = NULL, *accepted = srv->child;
	struct ib_qp *sqp = NULL, *cqp = NULL;
	struct events sev = {}, cev = {};
	struct end cli = {};
	struct done wrote;
	int rv = -EIO;

	init_waitqueue_head(&cli.wq);
	sqp = create_qp(pd, cq, IB_QPT_RC, 8, 1, 0, &sev);
	cqp = create_qp(pd, cq, IB_QPT_RC, 8, 1, 0, &cev);
	if (IS_ERR(sqp) || IS_ERR(cqp)) {
		CHECK(false, "two QPs to end by a Terminate");
		goto out;
	}
	cid = client(dev, &cli, to, cqp, "bad key");
	if (!IS_ERR(cid) && got(srv, IW_CM_EVENT_CONNECT_REQUEST, 4) && srv->child != accepted) {
		struct iw_cm_conn_param param = { .ird = 1, .ord = 1, .qpn = sqp->qp_num };

		rv = iw_cm_accept(srv->child, &param);
	}
	CHECK(!rv && got(&cli, IW_CM_EVENT_CONNECT_REPLY, 1) && cli.status[IW_CM_EVENT_CONNECT_REPLY] == 0, "a fourth connection (%d, %d)",
	      rv, cli.status[IW_CM_EVENT_CONNECT_REPLY]);
	if (rv)
		goto out;
	rv = post(cqp, &wrote, IB_WR_RDMA_WRITE, ca, 16, pd->local_dma_lkey, 0x1000, 0x5a5a5a00);
	CHECK(!rv && got(&cli, IW_CM_EVENT_CLOSE, 1) && got(srv, IW_CM_EVENT_CLOSE, 2),
	      "an RDMA Write through a key the server does not have closes both ends (%d)", rv);
	if (!rv)
		wait_for_completion_timeout(&wrote.c, 10 * HZ);
	/*
	 * A QP's event comes from the run that reads the Terminate, which may end after iw_cm's CLOSE
	 * (the socket's close is seen by its own callback): waited for, up to 10 s.
	 */
	for (int i = 0; i < 1000 && !(atomic_read(&sev.of[IB_EVENT_QP_ACCESS_ERR]) && atomic_read(&cev.of[IB_EVENT_QP_FATAL])); i++)
		msleep(10);
	CHECK(atomic_read(&sev.of[IB_EVENT_QP_ACCESS_ERR]) == 1 && events_total(&sev) == 1 && atomic_read(&cev.of[IB_EVENT_QP_FATAL]) == 1 && events_total(&cev) == 1,
	      "the server's event handler hears QP_ACCESS_ERR, the client's QP_FATAL, once each (%d/%d, %d/%d)", atomic_read(&sev.of[IB_EVENT_QP_ACCESS_ERR]),
	      events_total(&sev), atomic_read(&cev.of[IB_EVENT_QP_FATAL]), events_total(&cev));
out:
	if (cid && !IS_ERR(cid))
		iw_destroy_cm_id(cid);
	if (srv->child && srv->child != accepted)
		iw_destroy_cm_id(srv->child);
	srv->child = accepted;
	if (!IS_ERR_OR_NULL(sqp))
		ib_destroy_qp(sqp);
	if (!IS_ERR_OR_NULL(cqp))
		ib_destroy_qp(cqp);
}

/*
 * Connections through iw_cm: a listener on @at, a request refused to @knock, then one accepted
 * to @to (the same port), then one whose QP is destroyed mid-exchange. @full: the data path and
 * fast registration too (IPv4), else a Send's worth (IPv6, where @knock may be IPv4: a wildcard
 * not afonly takes both, as siw's does).
 */
static void check_connections(struct ib_device *dev, const struct sockaddr_storage *at, const struct sockaddr_storage *knock,
			      const struct sockaddr_storage *to, bool full)
{
	struct end srv = {}, cli = {}, cli2 = {};
	/* Off the stack, which the debug kernel's frame limit keeps small; one run at a time. */
	static struct events sev, cev, cev2;
	struct iw_cm_id *listen = NULL, *cid = NULL, *cid2 = NULL;
	struct ib_qp *sqp = NULL, *cqp = NULL, *cqp2 = NULL;
	struct done sent, recvd, wrote, read;
	struct ib_cq *cq = NULL;
	struct ib_pd *pd;
	char *sbuf = NULL, *cbuf = NULL;
	u64 sa, ca;
	int rv;

	init_waitqueue_head(&srv.wq);
	init_waitqueue_head(&cli.wq);
	init_waitqueue_head(&cli2.wq);
	memset(&sev, 0, sizeof(sev));
	memset(&cev, 0, sizeof(cev));
	memset(&cev2, 0, sizeof(cev2));
	pd = ib_alloc_pd(dev, IB_PD_UNSAFE_GLOBAL_RKEY);
	CHECK(!IS_ERR(pd), "a protection domain whose DMA region the peer may read and write");
	if (IS_ERR(pd))
		return;
	cq = ib_alloc_cq(dev, NULL, 64, 0, IB_POLL_SOFTIRQ);
	sqp = create_qp(pd, cq, IB_QPT_RC, 8, 1, 0, &sev);
	cqp = create_qp(pd, cq, IB_QPT_RC, 8, 1, 16, &cev);
	cqp2 = create_qp(pd, cq, IB_QPT_RC, 8, 1, 0, &cev2);
	sbuf = kzalloc(4096, GFP_KERNEL);
	cbuf = kzalloc(4096, GFP_KERNEL);
	CHECK(!IS_ERR(cq) && !IS_ERR(sqp) && !IS_ERR(cqp) && !IS_ERR(cqp2) && sbuf && cbuf, "a CQ, three QPs and two buffers");
	if (IS_ERR(cq) || IS_ERR(sqp) || IS_ERR(cqp) || IS_ERR(cqp2) || !sbuf || !cbuf)
		goto out;
	sa = ib_dma_map_single(dev, sbuf, 4096, DMA_BIDIRECTIONAL);
	ca = ib_dma_map_single(dev, cbuf, 4096, DMA_BIDIRECTIONAL);

	listen = iw_create_cm_id(dev, cm_handler, &srv);
	if (!IS_ERR(listen)) {
		listen->local_addr = *at;
		rv = iw_cm_listen(listen, 4);
	} else {
		rv = PTR_ERR(listen);
	}
	CHECK(!rv, "iw_cm listens on %pISpc (%d)", at, rv);
	if (rv)
		goto out;

	/* A request refused, with private data both ways. */
	cid2 = client(dev, &cli2, knock, cqp2, "knock");
	CHECK(!IS_ERR(cid2) && got(&srv, IW_CM_EVENT_CONNECT_REQUEST, 1) && srv.private_len == 5 && !memcmp(srv.private, "knock", 5),
	      "CONNECT_REQUEST to %pISpc with the client's private data", knock);
	if (IS_ERR(cid2) || !srv.child)
		goto out;
	CHECK(!iw_cm_reject(srv.child, "go away", 7), "rejected");
	iw_destroy_cm_id(srv.child);
	srv.child = NULL;
	CHECK(got(&cli2, IW_CM_EVENT_CONNECT_REPLY, 1) && cli2.status[IW_CM_EVENT_CONNECT_REPLY] == -ECONNREFUSED &&
		      cli2.private_len == 7 && !memcmp(cli2.private, "go away", 7),
	      "the client's CONNECT_REPLY is ECONNREFUSED with the reject's private data (%d)", cli2.status[IW_CM_EVENT_CONNECT_REPLY]);

	/* A connection made. */
	cid = client(dev, &cli, to, cqp, "hello");
	CHECK(!IS_ERR(cid) && got(&srv, IW_CM_EVENT_CONNECT_REQUEST, 2) && srv.private_len == 5 && !memcmp(srv.private, "hello", 5) &&
		      srv.ird == 1 && srv.ord == 1,
	      "a second CONNECT_REQUEST, with the initiator's IRD and ORD (%u, %u)", srv.ird, srv.ord);
	if (IS_ERR(cid) || !srv.child)
		goto out;
	{
		struct iw_cm_conn_param param = { .private_data = "welcome", .private_data_len = 7, .ird = 1, .ord = 1, .qpn = sqp->qp_num };

		rv = iw_cm_accept(srv.child, &param);
	}
	CHECK(!rv && got(&srv, IW_CM_EVENT_ESTABLISHED, 1) && srv.status[IW_CM_EVENT_ESTABLISHED] == 0, "accepted: ESTABLISHED (%d)", rv);
	CHECK(got(&cli, IW_CM_EVENT_CONNECT_REPLY, 1) && cli.status[IW_CM_EVENT_CONNECT_REPLY] == 0 && cli.private_len == 7 &&
		      !memcmp(cli.private, "welcome", 7),
	      "the client's CONNECT_REPLY succeeds with the accept's private data (%d)", cli.status[IW_CM_EVENT_CONNECT_REPLY]);
	memset(&attr_scratch, 0, sizeof(attr_scratch));
	CHECK(!ib_query_qp(cqp, &attr_scratch, IB_QP_STATE | IB_QP_CAP, &init_scratch) && attr_scratch.qp_state == IB_QPS_RTS &&
		      attr_scratch.cap.max_inline_data == MAX_INLINE,
	      "the client's QP is in RTS, with %d octets of inline data (asked for 16; %u)", MAX_INLINE, attr_scratch.cap.max_inline_data);

	/* Data from kernel memory to kernel memory, through the DMA regions. */
	strscpy(cbuf, "a Send from kernel memory", 64);
	CHECK(!post_receive(sqp, &recvd, sa, 64, pd->local_dma_lkey) && !post(cqp, &sent, IB_WR_SEND, ca, 26, pd->local_dma_lkey, 0, 0) &&
		      finished(&recvd) && finished(&sent) && recvd.byte_len == 26 && !strcmp(sbuf, "a Send from kernel memory"),
	      "a Send arrives whole (%u octets)", recvd.byte_len);
	if (!full)
		goto close;
	strscpy(cbuf + 64, "an RDMA Write", 64);
	strscpy(cbuf + 128, "then a Send", 64);
	CHECK(!post_receive(sqp, &recvd, sa + 256, 64, pd->local_dma_lkey) &&
		      !post(cqp, &wrote, IB_WR_RDMA_WRITE, ca + 64, 14, pd->local_dma_lkey, sa + 512, pd->unsafe_global_rkey) &&
		      !post(cqp, &sent, IB_WR_SEND, ca + 128, 12, pd->local_dma_lkey, 0, 0) && finished(&recvd) && finished(&wrote) &&
		      finished(&sent) && !strcmp(sbuf + 512, "an RDMA Write"),
	      "an RDMA Write lands before the Send after it");
	strscpy(sbuf + 1024, "read back by the client", 64);
	CHECK(!post(cqp, &read, IB_WR_RDMA_READ, ca + 1024, 24, pd->local_dma_lkey, sa + 1024, pd->unsafe_global_rkey) &&
		      finished(&read) && !strcmp(cbuf + 1024, "read back by the client"),
	      "an RDMA Read brings the server's octets");
	check_reads_beyond_ord(pd, cqp, sbuf, sa, cbuf, ca);
	check_inline(pd, sqp, cqp, sbuf, sa, ca);
	check_large_sends(pd, sqp, cqp);
	check_fence(pd, sqp, cqp, sbuf, sa, cbuf, ca);
	check_posts_with_interrupts_off(pd, sqp, cqp, sbuf, sa, cbuf, ca);

	check_fast_registration(dev, pd, sqp, cqp, cbuf, ca);

close:
	/* Closing: both ends get CLOSE, exactly once. The full run's protection error has ended it already. */
	if (full)
		CHECK(got(&cli, IW_CM_EVENT_CLOSE, 1) && got(&srv, IW_CM_EVENT_CLOSE, 1),
		      "the server QP's protection error closes both ends, with no disconnect asked");
	else
		CHECK(!iw_cm_disconnect(cid, 0) && got(&cli, IW_CM_EVENT_CLOSE, 1) && got(&srv, IW_CM_EVENT_CLOSE, 1),
		      "a disconnect closes both ends");
	msleep(200);
	CHECK(events_total(&sev) + events_total(&cev) + events_total(&cev2) == 0,
	      "ends by a completion error or a disconnect, and a reject, report no QP event (%d, %d, %d)", events_total(&sev),
	      events_total(&cev), events_total(&cev2));
	CHECK(cli.count[IW_CM_EVENT_CLOSE] == 1 && srv.count[IW_CM_EVENT_CLOSE] == 1 && cli.count[IW_CM_EVENT_CONNECT_REPLY] == 1 &&
		      srv.count[IW_CM_EVENT_ESTABLISHED] == 1,
	      "each event came once");
	check_destroy_while_connecting(dev, pd, cq, &srv, to);
	if (full)
		check_terminate(dev, pd, cq, &srv, to, ca);
	ib_dma_unmap_single(dev, sa, 4096, DMA_BIDIRECTIONAL);
	ib_dma_unmap_single(dev, ca, 4096, DMA_BIDIRECTIONAL);
out:
	if (cid && !IS_ERR(cid))
		iw_destroy_cm_id(cid);
	if (cid2 && !IS_ERR(cid2))
		iw_destroy_cm_id(cid2);
	if (srv.child)
		iw_destroy_cm_id(srv.child);
	if (listen && !IS_ERR(listen))
		iw_destroy_cm_id(listen);
	if (sqp && !IS_ERR(sqp))
		ib_destroy_qp(sqp);
	if (cqp && !IS_ERR(cqp))
		ib_destroy_qp(cqp);
	if (cqp2 && !IS_ERR(cqp2))
		ib_destroy_qp(cqp2);
	if (cq && !IS_ERR(cq))
		ib_free_cq(cq);
	kfree(sbuf);
	kfree(cbuf);
	ib_dealloc_pd(pd);
}

/* The RDMA core offers each device to a client; ours checks the one named. */
static bool found;

static int verbs_check_add(struct ib_device *dev)
{
	struct sockaddr_storage at = {};
	struct sockaddr_in *sin = (struct sockaddr_in *)&at;
	bool v4 = false;

	if (strcmp(dev_name(&dev->dev), device))
		return -EOPNOTSUPP;
	found = true;
	check(dev);
	if (*addr) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		v4 = in4_pton(addr, -1, (u8 *)&sin->sin_addr, -1, NULL);
		if (v4)
			check_connections(dev, &at, &at, &at, true);
		else
			CHECK(false, "addr=%s is an IPv4 address", addr);
	}
	if (*addr6) {
		struct sockaddr_storage any = {}, to = {};
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&to;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port + 1);
		any = to;
		sin->sin_port = htons(port + 1);
		if (in6_pton(addr6, -1, (u8 *)&sin6->sin6_addr, -1, NULL))
			check_connections(dev, &any, v4 ? &at : &to, &to, false);
		else
			CHECK(false, "addr6=%s is an IPv6 address", addr6);
	}
	return 0;
}

static void verbs_check_remove(struct ib_device *dev, void *client_data)
{
}

static struct ib_client verbs_check_client = {
	.name = "iwarp_verbs_check",
	.add = verbs_check_add,
	.remove = verbs_check_remove,
	/* Offered kernel verbs providers only, as any kernel service is: ours must be one. */
};

static int __init verbs_check_init(void)
{
	int rv;

	pr_info("KTAP version 1\n");
	rv = ib_register_client(&verbs_check_client);
	CHECK(!rv && found, "device %s found", device);
	if (!rv)
		ib_unregister_client(&verbs_check_client);
	return ktap_end();
}

static void __exit verbs_check_exit(void)
{
}

module_init(verbs_check_init);
module_exit(verbs_check_exit);
MODULE_DESCRIPTION("Checks an iwarp.ko device through the RDMA core's kernel verbs");
MODULE_LICENSE("GPL");
