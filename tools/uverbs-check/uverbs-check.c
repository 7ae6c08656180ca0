// SPDX-License-Identifier: GPL-2.0
/*
 * uverbs-check: iwarp.ko's devices as Debian's libibverbs sees them, with no library of ours
 * (rdma-core's siw provider drives them, as it drives siw). Checks print as KTAP lines.
 *
 *   uverbs-check regions DEV      the device's attributes; domains and regions: registered,
 *                                 refused with the right errno, deregistered
 *   uverbs-check hold DEV MIB     registers MIB MiB and waits to be killed (prints "holding")
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>

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

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "regions"))
		return regions(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "hold"))
		return hold(argv[2], argv[3]);
	fprintf(stderr, "usage: uverbs-check regions DEV | hold DEV MIB\n");
	return 2;
}
