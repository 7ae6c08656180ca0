// SPDX-License-Identifier: GPL-2.0
/*
 * iwarp_cm_check.ko: connections through rdma_cm, as kernel services make theirs (NVMe over
 * Fabrics, NFS over RDMA), between two machines: found by IP address, not by device. With
 * role=server it listens on addr:port and answers two requests: the first rejected with private
 * data, the second accepted with its own; it returns each Send it receives with every octet
 * inverted, and ends when the client disconnects. With role=client it makes those two requests
 * to addr:port and checks the reject's and the accept's private data, a Send answered, and the
 * disconnect. Either end checks that rdma_cm chose the device named (device=NAME), so the same
 * module checks ours against ours and against siw. Each check is a KTAP line in the kernel log;
 * loading fails (EIO) if any check failed.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/completion.h>
#include <linux/inet.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <net/net_namespace.h>
#include <rdma/ib_cm.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "ktap.h"

static char *role = "client";
module_param(role, charp, 0444);
MODULE_PARM_DESC(role, "server (listens on addr:port) or client (connects to it)");
static char *device = "iw0";
module_param(device, charp, 0444);
MODULE_PARM_DESC(device, "The RDMA core device rdma_cm must choose for the address");
static char *addr = "";
module_param(addr, charp, 0444);
MODULE_PARM_DESC(addr, "The server's IPv4 address");
static int port = 7600;
module_param(port, int, 0444);
MODULE_PARM_DESC(port, "The server's port");


#define WAIT (30 * HZ)
#define MSG 64

static const char *const knock = "knock", *const go_away = "go away", *const hello = "hello", *const welcome = "welcome";

/* One end of a connection: its resources, and the last rdma_cm event with its private data. */
struct end {
	struct rdma_cm_id *id;
	struct ib_pd *pd;
	struct ib_cq *cq;
	char *buf; /* MSG octets sent from, MSG received into */
	u64 dma;
	struct ib_cqe send_cqe, recv_cqe;
	enum rdma_cm_event_type event;
	int status;
	char private[32];
	u8 private_len;
	struct completion cm, sent, received;
	enum ib_wc_status send_status, recv_status;
	u32 recv_len;
};

/* Keeps @ev in @e; whoever waits for it is woken by complete(&e->cm). */
static void note(struct end *e, const struct rdma_cm_event *ev)
{
	e->event = ev->event;
	e->status = ev->status;
	e->private_len = min_t(u8, ev->param.conn.private_data_len, sizeof(e->private));
	if (ev->param.conn.private_data)
		memcpy(e->private, ev->param.conn.private_data, e->private_len);
	else
		e->private_len = 0;
}

/* Whether the next rdma_cm event of @e is @want (within WAIT). */
static bool got(struct end *e, enum rdma_cm_event_type want)
{
	if (!wait_for_completion_timeout(&e->cm, WAIT)) {
		pr_info("# no rdma_cm event within %d s (waiting for %s)\n", WAIT / HZ, rdma_event_msg(want));
		return false;
	}
	if (e->event != want)
		pr_info("# rdma_cm event %s (%d), not %s\n", rdma_event_msg(e->event), e->status, rdma_event_msg(want));
	return e->event == want;
}

static bool private_is(const struct end *e, const char *s)
{
	return e->private_len >= strlen(s) && !memcmp(e->private, s, strlen(s));
}

static void send_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct end *e = container_of(wc->wr_cqe, struct end, send_cqe);

	e->send_status = wc->status;
	complete(&e->sent);
}

static void recv_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct end *e = container_of(wc->wr_cqe, struct end, recv_cqe);

	e->recv_status = wc->status;
	e->recv_len = wc->byte_len;
	complete(&e->received);
}

/* A PD, a CQ, a QP on @id and a buffer on @id's device; a receive posted into the buffer's end. */
static int make_qp(struct end *e, struct rdma_cm_id *id)
{
	struct ib_qp_init_attr attr = {
		.qp_type = IB_QPT_RC,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ib_sge sge;
	struct ib_recv_wr wr = { .wr_cqe = &e->recv_cqe, .sg_list = &sge, .num_sge = 1 };
	int rv;

	e->pd = ib_alloc_pd(id->device, 0);
	if (IS_ERR(e->pd))
		return PTR_ERR(e->pd);
	e->cq = ib_alloc_cq(id->device, NULL, 8, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(e->cq))
		return PTR_ERR(e->cq);
	e->buf = kzalloc(2 * MSG, GFP_KERNEL);
	if (!e->buf)
		return -ENOMEM;
	e->dma = ib_dma_map_single(id->device, e->buf, 2 * MSG, DMA_BIDIRECTIONAL);
	attr.send_cq = e->cq;
	attr.recv_cq = e->cq;
	rv = rdma_create_qp(id, e->pd, &attr);
	if (rv)
		return rv;
	e->send_cqe.done = send_done;
	e->recv_cqe.done = recv_done;
	sge = (struct ib_sge){ .addr = e->dma + MSG, .length = MSG, .lkey = e->pd->local_dma_lkey };
	return ib_post_recv(id->qp, &wr, NULL);
}

static int post_send(struct end *e)
{
	struct ib_sge sge = { .addr = e->dma, .length = MSG, .lkey = e->pd->local_dma_lkey };
	struct ib_send_wr wr = { .wr_cqe = &e->send_cqe, .opcode = IB_WR_SEND, .sg_list = &sge, .num_sge = 1,
				 .send_flags = IB_SEND_SIGNALED };

	return ib_post_send(e->id->qp, &wr, NULL);
}

/* Takes down what make_qp made, and the id (@e->id, when @destroy_id). */
static void unmake(struct end *e, bool destroy_id)
{
	if (e->id && e->id->qp)
		rdma_destroy_qp(e->id);
	if (e->buf) {
		ib_dma_unmap_single(e->id->device, e->dma, 2 * MSG, DMA_BIDIRECTIONAL);
		kfree(e->buf);
	}
	if (e->cq && !IS_ERR(e->cq))
		ib_free_cq(e->cq);
	if (e->pd && !IS_ERR(e->pd))
		ib_dealloc_pd(e->pd);
	if (destroy_id && e->id && !IS_ERR(e->id))
		rdma_destroy_id(e->id);
	e->buf = NULL;
	e->cq = NULL;
	e->pd = NULL;
}

static void init_end(struct end *e)
{
	memset(e, 0, sizeof(*e));
	init_completion(&e->cm);
	init_completion(&e->sent);
	init_completion(&e->received);
}

static bool is_device(const struct rdma_cm_id *id)
{
	return id->device && !strcmp(dev_name(&id->device->dev), device);
}

/* --- server -------------------------------------------------------------------------------- */

/* The listener and the one connection it accepts. */
static struct server {
	struct end listener, conn;
	int requests;
	bool first_knocked, second_greeted, rejected, accept_failed;
	int make_rv;
} srv;

static int server_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1 };

	int destroy = 0;

	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		if (id == srv.conn.id) {
			note(&srv.conn, ev);
			complete(&srv.conn.cm);
		}
		return 0;
	}
	/* Called with the handler's lock held: rdma_reject and rdma_accept may be called here. */
	note(&srv.listener, ev);
	if (++srv.requests == 1) {
		srv.first_knocked = private_is(&srv.listener, knock);
		srv.rejected = !rdma_reject(id, go_away, strlen(go_away), IB_CM_REJ_CONSUMER_DEFINED);
		/* Non-zero: rdma_cm destroys this id. */
		destroy = 1;
	} else if (srv.conn.id) {
		destroy = 1;
	} else {
		srv.second_greeted = private_is(&srv.listener, hello);
		srv.conn.id = id;
		srv.make_rv = make_qp(&srv.conn, id);
		param.private_data = welcome;
		param.private_data_len = strlen(welcome);
		srv.accept_failed = srv.make_rv || rdma_accept(id, &param);
		if (srv.accept_failed) {
			unmake(&srv.conn, false);
			srv.conn.id = NULL;
			destroy = 1;
		}
	}
	complete(&srv.listener.cm);
	return destroy;
}

static void run_server(const struct sockaddr_in *at)
{
	struct end *c = &srv.conn;
	int rv, i;

	init_end(&srv.listener);
	init_end(&srv.conn);
	srv.listener.id = rdma_create_id(&init_net, server_handler, &srv, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(srv.listener.id)) {
		CHECK(false, "rdma_create_id (%ld)", PTR_ERR(srv.listener.id));
		return;
	}
	rv = rdma_bind_addr(srv.listener.id, (struct sockaddr *)at);
	if (!rv)
		rv = rdma_listen(srv.listener.id, 4);
	CHECK(!rv && is_device(srv.listener.id), "rdma_cm listens on %pISpc, on %s (%d)", at,
	      srv.listener.id->device ? dev_name(&srv.listener.id->device->dev) : "no device", rv);
	if (rv)
		goto out;
	pr_info("# listening\n");
	CHECK(wait_for_completion_timeout(&srv.listener.cm, 2 * WAIT) && srv.first_knocked && srv.rejected,
	      "the first request carries the client's private data, and is rejected with ours");
	CHECK(wait_for_completion_timeout(&srv.listener.cm, WAIT) && srv.second_greeted && !srv.accept_failed,
	      "the second carries its private data too, and is accepted with a QP (%d)", srv.make_rv);
	if (!c->id)
		goto out;
	CHECK(got(c, RDMA_CM_EVENT_ESTABLISHED) && is_device(c->id), "ESTABLISHED, on %s", dev_name(&c->id->device->dev));
	/* The client's Send comes back with every octet inverted. */
	if (wait_for_completion_timeout(&c->received, WAIT) && c->recv_status == IB_WC_SUCCESS && c->recv_len == MSG) {
		for (i = 0; i < MSG; i++)
			c->buf[i] = ~c->buf[MSG + i];
		rv = post_send(c);
		CHECK(!rv && wait_for_completion_timeout(&c->sent, WAIT) && c->send_status == IB_WC_SUCCESS,
		      "the client's Send received whole, and answered (%d)", rv);
	} else {
		CHECK(false, "the client's Send received whole (status %d, %u octets)", c->recv_status, c->recv_len);
	}
	CHECK(got(c, RDMA_CM_EVENT_DISCONNECTED), "DISCONNECTED when the client disconnects");
out:
	/* The listener first: destroying it waits for its handler, which may be accepting. */
	rdma_destroy_id(srv.listener.id);
	if (c->id)
		unmake(c, true);
}

/* --- client -------------------------------------------------------------------------------- */

static int client_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct end *e = id->context;

	note(e, ev);
	complete(&e->cm);
	return 0;
}

/* An id resolved to @to's address and route, its QP made; NULL when that failed (checked). */
static bool client_ready(struct end *e, const struct sockaddr_in *to)
{
	int rv;

	init_end(e);
	e->id = rdma_create_id(&init_net, client_handler, e, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(e->id)) {
		CHECK(false, "rdma_create_id (%ld)", PTR_ERR(e->id));
		e->id = NULL;
		return false;
	}
	rv = rdma_resolve_addr(e->id, NULL, (struct sockaddr *)to, 5000);
	if (!rv && got(e, RDMA_CM_EVENT_ADDR_RESOLVED))
		rv = rdma_resolve_route(e->id, 5000);
	else
		rv = rv ?: -EHOSTUNREACH;
	if (!rv && got(e, RDMA_CM_EVENT_ROUTE_RESOLVED))
		rv = make_qp(e, e->id);
	else
		rv = rv ?: -ENETUNREACH;
	CHECK(!rv && is_device(e->id), "%pISpc resolved to %s, a QP made (%d)", to,
	      e->id->device ? dev_name(&e->id->device->dev) : "no device", rv);
	return !rv && is_device(e->id);
}

static int client_connect(struct end *e, const char *private)
{
	struct rdma_conn_param param = { .private_data = private, .private_data_len = strlen(private),
					 .responder_resources = 1, .initiator_depth = 1 };

	return rdma_connect(e->id, &param);
}

static void run_client(const struct sockaddr_in *to)
{
	struct end e;
	int rv, i, good;

	/* Refused, with the server's private data. */
	if (client_ready(&e, to)) {
		rv = client_connect(&e, knock);
		/* iw_cm passes the provider's status on: ours says ECONNREFUSED, siw ECONNRESET. */
		CHECK(!rv && got(&e, RDMA_CM_EVENT_REJECTED) && (e.status == -ECONNREFUSED || e.status == -ECONNRESET) &&
			      private_is(&e, go_away),
		      "the first request REJECTED (%d), with the server's private data (%u octets)", e.status, e.private_len);
	}
	unmake(&e, true);

	/* Accepted; a Send answered; a disconnect. */
	if (!client_ready(&e, to))
		goto out;
	rv = client_connect(&e, hello);
	CHECK(!rv && got(&e, RDMA_CM_EVENT_ESTABLISHED) && private_is(&e, welcome),
	      "the second ESTABLISHED (%d), with the accept's private data (%u octets)", e.status, e.private_len);
	if (e.event != RDMA_CM_EVENT_ESTABLISHED)
		goto out;
	for (i = 0; i < MSG; i++)
		e.buf[i] = i * 7 + 1;
	rv = post_send(&e);
	CHECK(!rv && wait_for_completion_timeout(&e.sent, WAIT) && e.send_status == IB_WC_SUCCESS, "a Send of %d octets (%d)", MSG, rv);
	good = wait_for_completion_timeout(&e.received, WAIT) && e.recv_status == IB_WC_SUCCESS && e.recv_len == MSG;
	for (i = 0; good && i < MSG; i++)
		good = e.buf[MSG + i] == (char)~e.buf[i];
	CHECK(good, "the server's answer: every octet inverted (status %d, %u octets)", e.recv_status, e.recv_len);
	rv = rdma_disconnect(e.id);
	CHECK(!rv && got(&e, RDMA_CM_EVENT_DISCONNECTED), "rdma_disconnect: DISCONNECTED (%d)", rv);
out:
	unmake(&e, true);
}

static int __init cm_check_init(void)
{
	struct sockaddr_in at = { .sin_family = AF_INET, .sin_port = htons(port) };
	bool server = !strcmp(role, "server");

	pr_info("KTAP version 1\n");
	if (!in4_pton(addr, -1, (u8 *)&at.sin_addr, -1, NULL))
		CHECK(false, "addr=%s is an IPv4 address", addr);
	else if (server)
		run_server(&at);
	else if (!strcmp(role, "client"))
		run_client(&at);
	else
		CHECK(false, "role=%s is server or client", role);
	return ktap_end();
}

static void __exit cm_check_exit(void)
{
}

module_init(cm_check_init);
module_exit(cm_check_exit);
MODULE_DESCRIPTION("Checks connections through rdma_cm between two machines");
MODULE_LICENSE("GPL");
