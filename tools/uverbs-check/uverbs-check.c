// SPDX-License-Identifier: GPL-2.0
/*
 * uverbs-check: iwarp.ko's devices as Debian's libibverbs sees them, with no library of ours
 * (rdma-core's siw provider drives them, as it drives siw). Checks print as KTAP lines.
 *
 *   uverbs-check regions DEV      the device's attributes; domains and regions: registered,
 *                                 refused with the right errno, deregistered
 *   uverbs-check hold DEV MIB     registers MIB MiB and waits to be killed (prints "holding")
 *   uverbs-check sink PORT        accepts one connection (rdma_cm) with 32 receives posted, and
 *                                 ends once they complete or its QP ends
 *   uverbs-check overrun HOST PORT
 *                                 connects to a sink with a CQ of 4 entries, sends 16 signaled
 *                                 messages and never polls until the CQ has overflowed: the CQ
 *                                 reports CQ_ERR, the QP is in error, the CQ holds 4
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <poll.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static int checks, failed;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %d - ", ok ? "ok" : "not ok", ++checks);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	failed += !ok;
}

/* The device named @name, opened (exits if there is none). */
static struct ibv_context *open_named(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!ctx) {
		fprintf(stderr, "uverbs-check: cannot open %s: %s\n", name, strerror(errno));
		exit(1);
	}
	return ctx;
}

/* errno of a registration that must fail (0 if it did not). */
static int reg_errno(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(pd, addr, len, access);
	if (mr) {
		ibv_dereg_mr(mr);
		return 0;
	}
	return errno;
}

static int regions(const char *name)
{
	struct ibv_context *ctx = open_named(name);
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	size_t len = 1 << 20, page = sysconf(_SC_PAGESIZE);
	struct ibv_device_attr dev;
	struct ibv_port_attr port;
	struct ibv_mr *mr, *moved;
	struct ibv_pd *pd;
	char *buf, *hole;
	int rv;

	printf("KTAP version 1\n1..12\n");
	check(ctx->device->transport_type == IBV_TRANSPORT_IWARP && ctx->device->node_type == IBV_NODE_RNIC,
	      "%s is an iWARP RNIC (transport %d, node type %d)", name, ctx->device->transport_type,
	      ctx->device->node_type);
	rv = ibv_query_device(ctx, &dev);
	check(!rv && dev.max_qp > 0 && dev.max_cqe > 0 && dev.max_mr_size > 0 && dev.max_sge > 0,
	      "its attributes (%d): max_qp %d, max_cqe %d, max_mr %d, max_sge %d", rv, dev.max_qp, dev.max_cqe,
	      dev.max_mr, dev.max_sge);
	rv = ibv_query_port(ctx, 1, &port);
	check(!rv && port.state == IBV_PORT_ACTIVE && port.link_layer != IBV_LINK_LAYER_INFINIBAND,
	      "port 1 active (%d): state %d, active MTU %d", rv, port.state, port.active_mtu);

	pd = ibv_alloc_pd(ctx);
	check(pd != NULL, "a protection domain (%s)", pd ? "made" : strerror(errno));
	if (!pd)
		return 1;
	buf = aligned_alloc(page, len);
	memset(buf, 0x5a, len);
	mr = ibv_reg_mr(pd, buf, len, rw);
	check(mr && mr->lkey && mr->lkey == mr->rkey && mr->addr == buf && mr->length == len,
	      "1 MiB registered for remote reads and writes (lkey %#x, rkey %#x)", mr ? mr->lkey : 0,
	      mr ? mr->rkey : 0);
	moved = ibv_reg_mr_iova(pd, buf + page, page, 0x10000000, IBV_ACCESS_LOCAL_WRITE);
	check(moved && moved->lkey && moved->lkey != (mr ? mr->lkey : 0),
	      "a page registered at another address (iova 0x10000000; lkey %#x)", moved ? moved->lkey : 0);

	rv = reg_errno(pd, buf, len, IBV_ACCESS_REMOTE_WRITE);
	check(rv == EINVAL, "remote writes without local writes refused: %s", strerror(rv));
	/* An address range with no mapping: pinning it fails. */
	hole = mmap(NULL, 4 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, 4 * page);
	rv = reg_errno(pd, hole, 4 * page, IBV_ACCESS_LOCAL_WRITE);
	check(rv == EFAULT, "a range with no memory refused: %s", strerror(rv));
	rv = reg_errno(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE);
	check(rv == EINVAL, "an empty range refused: %s", strerror(rv));

	rv = ibv_dealloc_pd(pd);
	check(rv == EBUSY, "the domain stays while its regions do: %s", strerror(rv));
	rv = (moved ? ibv_dereg_mr(moved) : 0) | (mr ? ibv_dereg_mr(mr) : 0);
	check(!rv, "both regions deregistered (%d)", rv);
	rv = ibv_dealloc_pd(pd);
	check(!rv, "then the domain freed (%d)", rv);
	free(buf);
	ibv_close_device(ctx);
	printf("# %d of %d checks failed\n", failed, checks);
	return failed != 0;
}

static int hold(const char *name, const char *mib)
{
	struct ibv_context *ctx = open_named(name);
	size_t len = strtoul(mib, NULL, 10) << 20;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = malloc(len);
	struct ibv_mr *mr = pd && buf ? ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE) : NULL;

	if (!mr) {
		fprintf(stderr, "uverbs-check: cannot register %s MiB: %s\n", mib, strerror(errno));
		return 1;
	}
	printf("holding %s MiB (lkey %#x)\n", mib, mr->lkey);
	fflush(stdout);
	for (;;)
		pause();
}

#define MSG 64

/* A connected endpoint with a CQ of @cqe, @sends send and @recvs receive entries, and a region. */
struct ep {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[32 * MSG];
};

static int ep_qp(struct ep *e, int cqe, int sends, int recvs)
{
	struct ibv_qp_init_attr attr = { .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
					 .cap = { .max_send_wr = sends, .max_recv_wr = recvs,
						  .max_send_sge = 1, .max_recv_sge = 1 } };

	e->pd = ibv_alloc_pd(e->id->verbs);
	e->cq = e->pd ? ibv_create_cq(e->id->verbs, cqe, NULL, NULL, 0) : NULL;
	attr.send_cq = attr.recv_cq = e->cq;
	if (!e->cq || rdma_create_qp(e->id, e->pd, &attr))
		return -1;
	e->mr = ibv_reg_mr(e->pd, e->buf, sizeof(e->buf), IBV_ACCESS_LOCAL_WRITE);
	return e->mr ? 0 : -1;
}

static void ep_close(struct ep *e)
{
	rdma_destroy_qp(e->id);
	ibv_dereg_mr(e->mr);
	ibv_destroy_cq(e->cq);
	ibv_dealloc_pd(e->pd);
	rdma_destroy_ep(e->id);
}

static struct rdma_addrinfo *resolve(const char *host, const char *port, int passive)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP, .ai_flags = passive ? RAI_PASSIVE : 0 }, *res;

	if (rdma_getaddrinfo(host, port, &hints, &res)) {
		fprintf(stderr, "uverbs-check: cannot resolve %s:%s: %s\n", host ? host : "*", port, strerror(errno));
		exit(1);
	}
	return res;
}

static int sink(const char *port)
{
	struct rdma_addrinfo *res = resolve(NULL, port, 1);
	struct rdma_cm_id *listener;
	struct ep e = {};
	struct ibv_wc wc;
	int got = 0, flushed = 0;

	if (rdma_create_ep(&listener, res, NULL, NULL) || rdma_listen(listener, 1)) {
		perror("uverbs-check: listen");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	if (rdma_get_request(listener, &e.id) || ep_qp(&e, 64, 1, 32)) {
		perror("uverbs-check: request");
		return 1;
	}
	for (int i = 0; i < 32; i++) {
		struct ibv_sge sge = { (uintptr_t)e.buf + i * MSG, MSG, e.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(e.id->qp, &wr, &bad))
			return 1;
	}
	if (rdma_accept(e.id, NULL)) {
		perror("uverbs-check: accept");
		return 1;
	}
	/* Until every receive completed, one way or the other (30 s at most). */
	for (int waited = 0; got + flushed < 32 && waited < 30000;) {
		int n = ibv_poll_cq(e.cq, 1, &wc);

		if (n == 0) {
			usleep(1000);
			waited++;
			continue;
		}
		if (wc.status == IBV_WC_SUCCESS)
			got++;
		else
			flushed++;
	}
	printf("sink: %d messages received, %d receives ended otherwise\n", got, flushed);
	rdma_disconnect(e.id);
	ep_close(&e);
	rdma_destroy_ep(listener);
	rdma_freeaddrinfo(res);
	return got + flushed == 32 ? 0 : 1;
}

/* The next asynchronous event of @ctx within @ms, or -1. */
static int next_event(struct ibv_context *ctx, int ms)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;
	int type;

	if (poll(&p, 1, ms) != 1 || ibv_get_async_event(ctx, &ev))
		return -1;
	type = ev.event_type;
	ibv_ack_async_event(&ev);
	return type;
}

static int overrun(const char *host, const char *port)
{
	struct rdma_addrinfo *res = resolve(host, port, 0);
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr attr;
	struct ibv_wc wc[8];
	struct ep e = {};
	int ev, cq_err = 0, fatal = 0, n;

	printf("KTAP version 1\n1..4\n");
	if (rdma_create_ep(&e.id, res, NULL, NULL) || ep_qp(&e, 4, 16, 1) || rdma_connect(e.id, NULL)) {
		perror("uverbs-check: connect");
		return 1;
	}
	check(e.cq->cqe == 4, "connected, with a CQ of exactly the 4 entries asked for (%d)", e.cq->cqe);
	for (int i = 0; i < 16; i++) {
		struct ibv_sge sge = { (uintptr_t)e.buf, 8, e.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		if (ibv_post_send(e.id->qp, &wr, &bad))
			break;
	}
	while ((ev = next_event(e.id->verbs, cq_err ? 2000 : 30000)) >= 0) {
		cq_err += ev == IBV_EVENT_CQ_ERR;
		fatal += ev == IBV_EVENT_QP_FATAL;
	}
	check(cq_err == 1, "16 sends into a CQ of 4 that is never polled: CQ_ERR, once (%d; QP_FATAL %d)", cq_err, fatal);
	n = ibv_query_qp(e.id->qp, &attr, IBV_QP_STATE, &init);
	check(!n && attr.qp_state == IBV_QPS_ERR, "the QP is in error (%d, state %d)", n, attr.qp_state);
	n = ibv_poll_cq(e.cq, 8, wc);
	check(n == 4 && wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 0,
	      "the CQ holds what it had room for, oldest first (%d, first status %d)", n, n > 0 ? (int)wc[0].status : -1);
	ep_close(&e);
	rdma_freeaddrinfo(res);
	printf("# %d of %d checks failed\n", failed, checks);
	return failed != 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "sink"))
		return sink(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "overrun"))
		return overrun(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "regions"))
		return regions(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "hold"))
		return hold(argv[2], argv[3]);
	fprintf(stderr, "usage: uverbs-check regions DEV | hold DEV MIB | sink PORT | overrun HOST PORT\n");
	return 2;
}
