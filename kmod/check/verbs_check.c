// SPDX-License-Identifier: GPL-2.0
/*
 * iwarp_verbs_check.ko: uses an iwarp.ko device of the kernel's RDMA core as a kernel service
 * would (src/ib/), through the RDMA core's own calls: protection domain with its DMA region,
 * CQ polled in softirq, QP, receives posted, bad work requests and attributes refused with
 * errnos, the error state and ib_drain_qp, flushed completions. The devices count as no kernel
 * verbs provider until the connection manager works, so no service binds to them: this module
 * is a client that asks to be offered those too, and checks the one named (device=NAME). Each
 * check is a KTAP line in the kernel log; loading fails (EIO) if any check failed.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/completion.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <rdma/ib_verbs.h>

static char *device = "iw0";
module_param(device, charp, 0444);
MODULE_PARM_DESC(device, "The RDMA core device to check (an iwarp.ko link)");

static int checks, failures;

#define CHECK(cond, fmt, ...)                                                            \
	do {                                                                             \
		bool ok_ = (cond);                                                       \
		checks++;                                                                \
		failures += !ok_;                                                        \
		pr_info("%sok %d - " fmt "\n", ok_ ? "" : "not ", checks, ##__VA_ARGS__); \
	} while (0)

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

static struct ib_qp *create_qp(struct ib_pd *pd, struct ib_cq *cq, enum ib_qp_type type, u32 wr, u32 sge, u32 inline_data)
{
	struct ib_qp_init_attr attr = {
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

static void check(struct ib_device *dev)
{
	struct receives r = { .cqe.done = recv_done };
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

	CHECK(refused(create_qp(pd, cq, IB_QPT_UD, 8, 1, 0), -EOPNOTSUPP), "an unreliable datagram QP is refused with EOPNOTSUPP");
	CHECK(refused(create_qp(pd, cq, IB_QPT_RC, 8, 5, 0), -EINVAL), "a QP with more entries per request than the device has is refused with EINVAL");
	CHECK(refused(create_qp(pd, cq, IB_QPT_RC, 8, 1, 64), -EINVAL), "a QP with inline data is refused with EINVAL (not supported yet)");
	CHECK(refused(create_qp(pd, cq, IB_QPT_RC, 0, 1, 0), -EINVAL), "a QP that can send nothing is refused with EINVAL");

	qp = create_qp(pd, cq, IB_QPT_RC, 8, 2, 0);
	CHECK(!IS_ERR(qp), "a reliable connection QP");
	if (IS_ERR(qp))
		goto cq;
	r.qp = qp;
	second = create_qp(pd, cq, IB_QPT_RC, 8, 2, 0);
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
	reinit_completion(&r.each);
	CHECK(!post_recv(qp, &r, addr, pd->local_dma_lkey, 1), "a receive posted in ERR is taken");
	CHECK(wait_for_completion_timeout(&r.each, 5 * HZ) && r.flushed == 5, "and completes at once, flushed (%d flushed)", r.flushed);
	ib_dma_unmap_single(dev, addr, 4096, DMA_FROM_DEVICE);
	kfree(buf);
qp:
	ib_destroy_qp(qp);
cq:
	ib_free_cq(cq);
pd:
	ib_dealloc_pd(pd);
}

/* The RDMA core offers each device to a client; ours checks the one named. */
static bool found;

static int verbs_check_add(struct ib_device *dev)
{
	if (strcmp(dev_name(&dev->dev), device))
		return -EOPNOTSUPP;
	found = true;
	check(dev);
	return 0;
}

static void verbs_check_remove(struct ib_device *dev, void *client_data)
{
}

static struct ib_client verbs_check_client = {
	.name = "iwarp_verbs_check",
	.add = verbs_check_add,
	.remove = verbs_check_remove,
	/* Offered devices that are no kernel verbs provider too: ours, for now. */
	.no_kverbs_req = 1,
};

static int __init verbs_check_init(void)
{
	int rv;

	pr_info("KTAP version 1\n");
	rv = ib_register_client(&verbs_check_client);
	CHECK(!rv && found, "device %s found", device);
	if (!rv)
		ib_unregister_client(&verbs_check_client);
	pr_info("1..%d\n", checks);
	pr_info("# %d of %d checks failed\n", failures, checks);
	return failures ? -EIO : 0;
}

static void __exit verbs_check_exit(void)
{
}

module_init(verbs_check_init);
module_exit(verbs_check_exit);
MODULE_DESCRIPTION("Checks an iwarp.ko device through the RDMA core's kernel verbs");
MODULE_LICENSE("GPL");
