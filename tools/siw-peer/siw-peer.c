// SPDX-License-Identifier: GPL-2.0
/*
 * siw-peer: the far end of the interop tests, written against libibverbs and librdmacm as any
 * RDMA application is, so that it runs over the kernel's siw (or any iWARP device). The near
 * end is `iwarp-check interop-*` over iwarp.ko (tools/iwarp-check/src/interop.rs); the two
 * follow one script, so every operation is checked on the side that receives it.
 *
 *   siw-peer serve PORT SIZE READS END      accept one connection on PORT (rdma_cm)
 *   siw-peer connect HOST PORT SIZE READS END
 *   siw-peer serve-reject PORT              reject one connection request, with private data
 *   siw-peer connect-rejected HOST PORT     be rejected, with private data
 *
 * Each side registers a region of 4 SIZE + 256 octets: EXPOSED (the peer Writes and Reads it),
 * RECV (the first receive: the peer's Send of SIZE octets), SRC (what it sends and Writes), SINK
 * (where its Reads land), CTL (the notice it sends, then one 16-octet slot per later receive, so
 * notices that arrive back to back do not overwrite each other), and a small INV region for the
 * peer to invalidate. Both regions go to the
 * peer in the MPA private data: address (8 octets) and STag (4), little endian, for each.
 *
 * The script (A: iwarp.ko, B: this program), each step checked where it lands:
 *   0 the MPA initiator notices 0, then the        both: the notice (RFC 5044 7.1.2: the
 *     responder notices 0                          responder sends nothing before the
 *                                                  initiator's first FPDU; siw, as initiator,
 *                                                  refuses a reply with data right behind it)
 *   1 A Sends SIZE octets from two SGEs            B: length and content
 *   2 B Sends SIZE octets with Solicited Event     A: length, content, solicited
 *   3 A Writes B's EXPOSED, then notices 3         B: content
 *   4 B Writes A's EXPOSED, then notices 4         A: content
 *   5 B fills its EXPOSED, notices 5; A Reads it   A: content
 *   6 A fills its EXPOSED, notices 6; B Reads it   B: content (READS=0: skipped, B's ORD is 0)
 *   7 A Sends with Invalidate of B's INV           B: the receive completes (siw does not name
 *                                                  the STag to user space)
 *   8 B Sends with Invalidate of A's INV           A: likewise
 * then END, with receives still posted on both sides (B 3, A 2), which must come back flushed:
 *   a-disconnects  A disconnects                  B: disconnected
 *   b-disconnects  B disconnects                  A: its QP ends, a connection-lost event
 *   a-terminates   A Writes past the end of B's   B: siw refuses it with a Terminate (an access
 *                  region (REGION_LEN octets)        error event), nothing placed; A: its QP
 *                                                    ended by that Terminate, and its event
 *   b-terminates   B Writes past the end of A's   A: refuses it with a Terminate, nothing
 *                  region                            placed; B: disconnected (siw reports the
 *                                                    Terminate it got in the kernel log)
 * Prints "ok: B: ..." per step; exits 1 with "siw-peer FAILED: ..." at the first failure.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* How long any one event or completion may take (TCG guests are slow). */
#define WAIT_MS 60000
#define CTL_LEN 256
#define SLOT 16
#define RECVS 8
#define DEPTH 4
/* Receives the script leaves posted: B's, the peer's. */
#define LEFT_B 3
/* Private data of the reject cells. */
#define ASK_B "A asks B to connect"
#define B_REFUSES "B refuses A"
#define ASK_A "B asks A to connect"
#define A_REFUSES "A refuses B"

struct remote {
	uint64_t addr;
	uint32_t rkey;
};

struct peer {
	struct rdma_event_channel *ec;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_mr *mr, *inv;
	uint8_t *buf, *invbuf;
	size_t n;
	struct remote far, far_inv;
};

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("siw-peer FAILED: ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	exit(1);
}

static void ok(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("ok: B: ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	fflush(stdout);
	va_end(ap);
}

/* Offsets of the areas in the main region. */
static size_t exposed(const struct peer *p) { (void)p; return 0; }
static size_t recv_at(const struct peer *p) { return p->n; }
static size_t src(const struct peer *p) { return 2 * p->n; }
static size_t sink(const struct peer *p) { return 3 * p->n; }
static size_t ctl(const struct peer *p) { return 4 * p->n; }
/* The region's length (the same on both sides). */
static size_t region_len(const struct peer *p) { return 4 * p->n + CTL_LEN; }
/* Where receive @k lands: the second (the peer's Send of SIZE octets) in RECV, the others in
 * slots after the notice. */
static size_t slot(const struct peer *p, uint64_t k) { return k == 1 ? recv_at(p) : ctl(p) + SLOT * (k + 1); }

/* The octet at @i of step @step's payload (the same function as interop.rs). */
static uint8_t pattern(uint32_t step, size_t i)
{
	uint32_t x = (uint32_t)i * 2654435761u + step * 40503u + 1;

	return (uint8_t)(x >> 24);
}

static void fill(uint8_t *at, uint32_t step, size_t n)
{
	for (size_t i = 0; i < n; i++)
		at[i] = pattern(step, i);
}

static void verify(const uint8_t *at, uint32_t step, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (at[i] != pattern(step, i))
			die("%s: octet %zu of %zu is %#x, not %#x", what, i, n, at[i], pattern(step, i));
}

static struct rdma_cm_event *expect_event(struct rdma_event_channel *ec, enum rdma_cm_event_type want)
{
	struct pollfd pfd = { .fd = ec->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, WAIT_MS) != 1)
		die("no %s within %d ms", rdma_event_str(want), WAIT_MS);
	if (rdma_get_cm_event(ec, &ev))
		die("rdma_get_cm_event: %s", strerror(errno));
	if (ev->event != want)
		die("wanted %s, got %s (status %d)", rdma_event_str(want), rdma_event_str(ev->event), ev->status);
	return ev;
}

/* The next completion of @cq, whatever its status. */
static struct ibv_wc next_wc(struct ibv_cq *cq, const char *what)
{
	struct timespec start, now;
	struct ibv_wc wc;
	int n;

	clock_gettime(CLOCK_MONOTONIC, &start);
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > WAIT_MS)
			die("%s: no completion within %d ms", what, WAIT_MS);
	}
	if (n < 0)
		die("%s: ibv_poll_cq: %d", what, n);
	return wc;
}

/* The next completion of @cq, which must be a success of @op. */
static struct ibv_wc wait_wc(struct ibv_cq *cq, enum ibv_wc_opcode op, const char *what)
{
	struct ibv_wc wc = next_wc(cq, what);

	if (wc.status != IBV_WC_SUCCESS)
		die("%s: completion status %s", what, ibv_wc_status_str(wc.status));
	if (wc.opcode != op)
		die("%s: completion opcode %d, not %d", what, wc.opcode, op);
	return wc;
}

static void get_remote(struct remote *r, const uint8_t *b)
{
	r->addr = 0;
	r->rkey = 0;
	for (int i = 7; i >= 0; i--)
		r->addr = r->addr << 8 | b[i];
	for (int i = 3; i >= 0; i--)
		r->rkey = r->rkey << 8 | b[8 + i];
}

static void put_remote(uint8_t *b, uint64_t addr, uint32_t rkey)
{
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(addr >> (8 * i));
	for (int i = 0; i < 4; i++)
		b[8 + i] = (uint8_t)(rkey >> (8 * i));
}

/* The peer's two regions, from its private data. */
static void take_private(struct peer *p, const void *data, uint8_t len)
{
	if (len < 24)
		die("the peer's private data has %u octets, not 24", len);
	get_remote(&p->far, data);
	get_remote(&p->far_inv, (const uint8_t *)data + 12);
}

/* PD, CQs, QP, regions and the receives, on @id's device, before the connection is up. */
static void resources(struct peer *p, struct rdma_cm_id *id, uint8_t private[24])
{
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_qp_init_attr attr = { 0 };
	size_t len = region_len(p);

	p->id = id;
	p->pd = ibv_alloc_pd(id->verbs);
	p->scq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	p->rcq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	if (!p->pd || !p->scq || !p->rcq)
		die("PD or CQs: %s", strerror(errno));
	attr.send_cq = p->scq;
	attr.recv_cq = p->rcq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = 16;
	attr.cap.max_recv_wr = 16;
	attr.cap.max_send_sge = 2;
	attr.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, p->pd, &attr))
		die("rdma_create_qp: %s", strerror(errno));
	p->buf = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	p->invbuf = aligned_alloc(4096, 4096);
	if (!p->buf || !p->invbuf)
		die("out of memory");
	memset(p->buf, 0, len);
	p->mr = ibv_reg_mr(p->pd, p->buf, len, access);
	p->inv = ibv_reg_mr(p->pd, p->invbuf, CTL_LEN, access);
	if (!p->mr || !p->inv)
		die("ibv_reg_mr: %s", strerror(errno));
	for (int i = 0; i < RECVS; i++) {
		struct ibv_sge sge = { (uintptr_t)p->buf + slot(p, i), i == 1 ? (uint32_t)p->n : SLOT, p->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(id->qp, &wr, &bad))
			die("ibv_post_recv: %s", strerror(errno));
	}
	put_remote(private, (uintptr_t)p->buf, p->mr->rkey);
	put_remote(private + 12, (uintptr_t)p->invbuf, p->inv->rkey);
}

static struct rdma_conn_param conn_param(const uint8_t private[24])
{
	struct rdma_conn_param c = { 0 };

	c.private_data = private;
	c.private_data_len = 24;
	c.responder_resources = DEPTH;
	c.initiator_depth = DEPTH;
	return c;
}

/* Listens on @port and returns the first connection request. */
static struct rdma_cm_event *request(struct peer *p, const char *port)
{
	struct sockaddr_in at = { .sin_family = AF_INET, .sin_port = htons(atoi(port)) };
	struct rdma_cm_id *listener;

	if (rdma_create_id(p->ec, &listener, NULL, RDMA_PS_TCP) || rdma_bind_addr(listener, (struct sockaddr *)&at) ||
	    rdma_listen(listener, 1))
		die("listen on %s: %s", port, strerror(errno));
	printf("listening on %s\n", port);
	fflush(stdout);
	return expect_event(p->ec, RDMA_CM_EVENT_CONNECT_REQUEST);
}

/* Whether @ev carries private data @want (a C string, without its NUL). */
static int private_is(const struct rdma_cm_event *ev, const char *want)
{
	return ev->param.conn.private_data_len >= strlen(want) &&
	       !memcmp(ev->param.conn.private_data, want, strlen(want));
}

static void serve(struct peer *p, const char *port)
{
	struct rdma_cm_event *ev = request(p, port);
	struct rdma_conn_param c;
	uint8_t private[24];

	take_private(p, ev->param.conn.private_data, ev->param.conn.private_data_len);
	resources(p, ev->id, private);
	rdma_ack_cm_event(ev);
	c = conn_param(private);
	if (rdma_accept(p->id, &c))
		die("rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(p->ec, RDMA_CM_EVENT_ESTABLISHED));
}

/* An id with its route to @host:@port resolved. */
static struct rdma_cm_id *route(struct peer *p, const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	struct rdma_cm_id *id;

	if (getaddrinfo(host, port, &hints, &ai))
		die("bad address %s:%s", host, port);
	if (rdma_create_id(p->ec, &id, NULL, RDMA_PS_TCP) || rdma_resolve_addr(id, NULL, ai->ai_addr, WAIT_MS))
		die("resolve %s: %s", host, strerror(errno));
	freeaddrinfo(ai);
	rdma_ack_cm_event(expect_event(p->ec, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, WAIT_MS))
		die("rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(p->ec, RDMA_CM_EVENT_ROUTE_RESOLVED));
	return id;
}

static void dial(struct peer *p, const char *host, const char *port)
{
	struct rdma_cm_id *id = route(p, host, port);
	struct rdma_cm_event *ev;
	struct rdma_conn_param c;
	uint8_t private[24];

	resources(p, id, private);
	c = conn_param(private);
	if (rdma_connect(id, &c))
		die("rdma_connect: %s", strerror(errno));
	ev = expect_event(p->ec, RDMA_CM_EVENT_ESTABLISHED);
	take_private(p, ev->param.conn.private_data, ev->param.conn.private_data_len);
	rdma_ack_cm_event(ev);
}

/* serve-reject: the peer's request arrives with its private data and is rejected with ours. */
static void serve_reject(struct peer *p, const char *port)
{
	struct rdma_cm_event *ev = request(p, port);

	if (!private_is(ev, ASK_B))
		die("the request's private data is not \"%s\" (%u octets)", ASK_B, ev->param.conn.private_data_len);
	if (rdma_reject(ev->id, B_REFUSES, strlen(B_REFUSES)))
		die("rdma_reject: %s", strerror(errno));
	rdma_ack_cm_event(ev);
	ok("rejected the peer's request (\"%s\") with \"%s\"", ASK_B, B_REFUSES);
}

/* connect-rejected: our request, with private data, is rejected with the peer's. */
static void connect_rejected(struct peer *p, const char *host, const char *port)
{
	struct rdma_cm_id *id = route(p, host, port);
	struct ibv_qp_init_attr attr = { .qp_type = IBV_QPT_RC, .cap = { 1, 1, 1, 1, 0 } };
	struct rdma_conn_param c = { .private_data = ASK_A, .private_data_len = strlen(ASK_A) };
	struct rdma_cm_event *ev;

	attr.send_cq = attr.recv_cq = ibv_create_cq(id->verbs, 4, NULL, NULL, 0);
	if (!attr.send_cq || rdma_create_qp(id, NULL, &attr))
		die("CQ or QP: %s", strerror(errno));
	if (rdma_connect(id, &c))
		die("rdma_connect: %s", strerror(errno));
	ev = expect_event(p->ec, RDMA_CM_EVENT_REJECTED);
	if (!private_is(ev, A_REFUSES))
		die("the reject's private data is not \"%s\" (%u octets)", A_REFUSES, ev->param.conn.private_data_len);
	ok("rejected with the peer's private data \"%s\" (status %d)", A_REFUSES, ev->status);
	rdma_ack_cm_event(ev);
}

/* Posts one signaled send work request of @len octets at @off (two SGEs if @two). */
static void post(struct peer *p, enum ibv_wr_opcode op, unsigned int flags, size_t off, size_t len, int two,
		 const struct remote *to, uint32_t invalidate)
{
	uintptr_t at = (uintptr_t)p->buf + off;
	struct ibv_sge sge[2] = {
		{ at, (uint32_t)(two ? len / 2 : len), p->mr->lkey },
		{ at + len / 2, (uint32_t)(len - len / 2), p->mr->lkey },
	};
	struct ibv_send_wr wr = { .sg_list = sge, .num_sge = two ? 2 : 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED | flags },
			   *bad;

	if (to) {
		wr.wr.rdma.remote_addr = to->addr;
		wr.wr.rdma.rkey = to->rkey;
	}
	wr.invalidate_rkey = invalidate;
	/* libsiw takes a Send with Invalidate's STag from the RDMA fields, not invalidate_rkey. */
	if (op == IBV_WR_SEND_WITH_INV)
		wr.wr.rdma.rkey = invalidate;
	if (ibv_post_send(p->id->qp, &wr, &bad))
		die("ibv_post_send (opcode %d): %s", op, strerror(errno));
}

static void put_u32(uint8_t *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

/* Sends the notice of @step and waits for its completion. */
static void notice(struct peer *p, uint32_t step)
{
	put_u32(p->buf + ctl(p), step);
	post(p, IBV_WR_SEND, 0, ctl(p), 4, 0, NULL, 0);
	wait_wc(p->scq, IBV_WC_SEND, "notice");
}

/* The next receive, which must be the notice of @step. */
static struct ibv_wc await_notice(struct peer *p, uint32_t step)
{
	struct ibv_wc wc = wait_wc(p->rcq, IBV_WC_RECV, "receive of a notice");
	const uint8_t *b = p->buf + slot(p, wc.wr_id);
	uint32_t got = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;

	if (wc.byte_len != 4 || got != step)
		die("expected the notice of step %u, got %u octets saying %u", step, wc.byte_len, got);
	return wc;
}

/* The next asynchronous event of the device, which must be @want. */
static void expect_async(struct peer *p, enum ibv_event_type want)
{
	struct pollfd pfd = { .fd = p->id->verbs->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	if (poll(&pfd, 1, WAIT_MS) != 1)
		die("no asynchronous event %s within %d ms", ibv_event_type_str(want), WAIT_MS);
	if (ibv_get_async_event(p->id->verbs, &ev))
		die("ibv_get_async_event: %s", strerror(errno));
	if (ev.event_type != want)
		die("asynchronous event %s, not %s", ibv_event_type_str(ev.event_type), ibv_event_type_str(want));
	ibv_ack_async_event(&ev);
}

/* The @n receives still posted come back flushed, and nothing else. */
static void expect_flushed(struct peer *p, int n)
{
	struct ibv_wc wc;

	for (int i = 0; i < n; i++) {
		wc = next_wc(p->rcq, "a posted receive after the end");
		if (wc.status != IBV_WC_WR_FLUSH_ERR)
			die("a posted receive completed with %s, not flushed", ibv_wc_status_str(wc.status));
	}
	if (ibv_poll_cq(p->rcq, 1, &wc))
		die("more than %d receives completed", n);
}

/* Nothing landed past the first @keep octets of the region's notice area. */
static void tail_untouched(struct peer *p, size_t keep)
{
	for (size_t i = ctl(p) + keep; i < region_len(p); i++)
		if (p->buf[i])
			die("octet %zu of the region was written by a refused Write", i);
}

/* The end of the script (see the top of the file); @end names it. */
static void finish(struct peer *p, const char *end)
{
	struct remote past = { p->far.addr + region_len(p) - 32, p->far.rkey };
	struct rdma_cm_event *ev;

	if (!strcmp(end, "a-terminates")) {
		expect_async(p, IBV_EVENT_QP_ACCESS_ERR);
		tail_untouched(p, SLOT * (RECVS + 1));
		ok("siw refused the peer's Write past our region (an access error event), nothing placed");
	} else if (!strcmp(end, "b-terminates")) {
		struct ibv_wc wc;

		post(p, IBV_WR_RDMA_WRITE, 0, src(p), 64, 0, &past, 0);
		/*
		 * siw completes a Write once it is sent; the Terminate may come first and flush it,
		 * or the connection may close under siw's transmit, which then completes it with a
		 * local QP operation error (siw_qp_tx.c, siw_qp_sq_process's error path).
		 */
		wc = next_wc(p->scq, "our Write past the peer's region");
		if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR &&
		    wc.status != IBV_WC_LOC_QP_OP_ERR)
			die("our Write past the peer's region completed with %s", ibv_wc_status_str(wc.status));
		ok("wrote 64 octets past the end of the peer's region (%s)", ibv_wc_status_str(wc.status));
	} else if (!strcmp(end, "b-disconnects")) {
		if (rdma_disconnect(p->id))
			die("rdma_disconnect: %s", strerror(errno));
		ok("disconnected");
	} else if (strcmp(end, "a-disconnects")) {
		die("unknown end %s", end);
	}
	ev = expect_event(p->ec, RDMA_CM_EVENT_DISCONNECTED);
	rdma_ack_cm_event(ev);
	ok("the connection ended (%s)", end);
	expect_flushed(p, LEFT_B);
	ok("the %d receives still posted came back flushed", LEFT_B);
}

int main(int argc, char **argv)
{
	struct peer p = { 0 };
	const char *end;
	struct ibv_wc wc;
	int reads;

	p.ec = rdma_create_event_channel();
	if (!p.ec)
		die("rdma_create_event_channel: %s", strerror(errno));
	if (argc == 3 && !strcmp(argv[1], "serve-reject")) {
		serve_reject(&p, argv[2]);
		return 0;
	} else if (argc == 4 && !strcmp(argv[1], "connect-rejected")) {
		connect_rejected(&p, argv[2], argv[3]);
		return 0;
	} else if (argc == 6 && !strcmp(argv[1], "serve")) {
		p.n = strtoul(argv[3], NULL, 0);
		reads = atoi(argv[4]);
		end = argv[5];
	} else if (argc == 7 && !strcmp(argv[1], "connect")) {
		p.n = strtoul(argv[4], NULL, 0);
		reads = atoi(argv[5]);
		end = argv[6];
	} else {
		fprintf(stderr, "usage: siw-peer serve PORT SIZE READS END | siw-peer connect HOST PORT SIZE READS END\n"
				"       siw-peer serve-reject PORT | siw-peer connect-rejected HOST PORT\n");
		return 2;
	}
	if (p.n < 4)
		die("SIZE must be at least 4");
	if (argc == 6)
		serve(&p, argv[2]);
	else
		dial(&p, argv[2], argv[3]);
	ok("connected over %s; the peer's region has STag %#x", ibv_get_device_name(p.id->verbs->device), p.far.rkey);
	if (argc == 7) {
		notice(&p, 0);
		await_notice(&p, 0);
	} else {
		await_notice(&p, 0);
		notice(&p, 0);
	}
	ok("0: the initiator's notice first, then the responder's");

	wc = wait_wc(p.rcq, IBV_WC_RECV, "step 1 receive");
	if (wc.byte_len != p.n)
		die("step 1: received %u octets, not %zu", wc.byte_len, p.n);
	verify(p.buf + recv_at(&p), 1, p.n, "step 1 (Send from two SGEs)");
	ok("1: a Send of %zu octets from two SGEs arrived intact", p.n);

	fill(p.buf + src(&p), 2, p.n);
	post(&p, IBV_WR_SEND, IBV_SEND_SOLICITED, src(&p), p.n, 1, NULL, 0);
	wait_wc(p.scq, IBV_WC_SEND, "step 2 Send");
	ok("2: sent %zu octets with Solicited Event", p.n);

	await_notice(&p, 3);
	verify(p.buf + exposed(&p), 3, p.n, "step 3 (the peer's Write)");
	ok("3: the peer's Write of %zu octets landed intact", p.n);

	fill(p.buf + src(&p), 4, p.n);
	post(&p, IBV_WR_RDMA_WRITE, 0, src(&p), p.n, 1, &p.far, 0);
	wait_wc(p.scq, IBV_WC_RDMA_WRITE, "step 4 Write");
	notice(&p, 4);
	ok("4: wrote %zu octets into the peer's region", p.n);

	fill(p.buf + exposed(&p), 5, p.n);
	notice(&p, 5);
	await_notice(&p, 6);
	ok("5: the peer Read our region (it checks what it got)");

	if (reads) {
		memset(p.buf + sink(&p), 0, p.n);
		post(&p, IBV_WR_RDMA_READ, 0, sink(&p), p.n, 0, &p.far, 0);
		wait_wc(p.scq, IBV_WC_RDMA_READ, "step 6 Read");
		verify(p.buf + sink(&p), 6, p.n, "step 6 (our Read of the peer's region)");
		ok("6: read %zu octets from the peer's region, intact", p.n);
	} else {
		ok("6: skipped: siw's ORD is 0 without MPA revision 2's IRD/ORD exchange");
	}
	notice(&p, 6);

	/*
	 * siw names the invalidated STag only in kernel consumers' completions (siw_rqe_complete),
	 * never to user space; it completes the receive only if the invalidation succeeded (it
	 * sends a Terminate otherwise).
	 */
	await_notice(&p, 7);
	ok("7: a Send with Invalidate of our STag %#x completed (siw does the invalidation)", p.inv->rkey);

	put_u32(p.buf + ctl(&p), 8);
	post(&p, IBV_WR_SEND_WITH_INV, 0, ctl(&p), 4, 0, NULL, p.far_inv.rkey);
	wait_wc(p.scq, IBV_WC_SEND, "step 8 Send with Invalidate");
	ok("8: sent a Send with Invalidate of the peer's STag %#x", p.far_inv.rkey);

	finish(&p, end);
	return 0;
}
